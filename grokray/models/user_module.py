"""The user's module, built and called: its config (model.factory, kwargs, groups), the factory's call with the task's
sizes it names, and one module run over K members' stacked parameters (torch.func). The `module` family
(models/module.py) packs it; models/module_check.py checks it before anything starts."""

from __future__ import annotations

import fnmatch
import inspect
import json
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch._C._functorch import _add_batch_dim, _remove_batch_dim, _vmap_decrement_nesting, _vmap_increment_nesting
from torch._functorch.vmap import lazy_load_decompositions

from ..errors import SpecError
from ..spec.blocks import bounded, unknown_key_error
from ..user_code import import_reference

# Modules whose state changes in the forward (running statistics): the member's math would depend on its batches'
# history in a way vmap cannot batch, and a pack would have to carry it as state.
STATEFUL_NORMS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d, torch.nn.SyncBatchNorm,
                  torch.nn.InstanceNorm1d, torch.nn.InstanceNorm2d, torch.nn.InstanceNorm3d)
DROPOUT = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d, torch.nn.AlphaDropout,
           torch.nn.FeatureAlphaDropout)
# the fused attention backends (each: is it on, turn it on or off); with all off, attention takes the math path
FUSED_ATTENTION = [(torch.backends.cuda.flash_sdp_enabled, torch.backends.cuda.enable_flash_sdp),
                   (torch.backends.cuda.mem_efficient_sdp_enabled, torch.backends.cuda.enable_mem_efficient_sdp),
                   (torch.backends.cuda.cudnn_sdp_enabled, torch.backends.cuda.enable_cudnn_sdp)]
ONE_GROUP = "all"
REST_GROUP = "rest"


@dataclass
class ModuleConfig:
    factory: str = ""  # "package.module:callable" returning one torch.nn.Module (a class works too)
    kwargs: dict = field(default_factory=dict)  # the factory's keyword arguments; any may be swept (model.kwargs.width)
    # optimizer groups by parameter-name patterns (fnmatch), e.g. {embedding: ["embed.*"]}; the parameters no
    # pattern matches form the group `rest`. Without groups, one group `all`.
    groups: dict = field(default_factory=dict)
    loss: Literal["cross_entropy", "mse", "target_vectors"] = "cross_entropy"  # regression tasks: squared error
    target_dim: int = bounded(30, ge=1, doc="target_vectors: dimension of each class's fixed random target")

    def validate(self, path):
        if not self.factory:
            raise SpecError(f"{path}.factory", "missing; expected 'package.module:callable' that returns a "
                            "torch.nn.Module")
        if not callable(import_reference(self.factory, f"{path}.factory")):
            raise SpecError(f"{path}.factory", f"{self.factory!r} is not callable; expected a function or a class "
                            "that builds a torch.nn.Module")
        for name, patterns in self.groups.items():
            if not isinstance(name, str) or not name.isidentifier() or name in ("default", ONE_GROUP, REST_GROUP):
                raise SpecError(f"{path}.groups", f"got group {name!r}; a group is named like an identifier, other "
                                f"than default, {ONE_GROUP} and {REST_GROUP}")
            if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
                raise SpecError(f"{path}.groups.{name}", f"expected a list of parameter-name patterns, e.g. "
                                f"['embed.*'], got {patterns!r}")
        json.dumps(self.kwargs)  # plain values only: they travel to every worker as JSON


def module_groups(cfg: ModuleConfig) -> tuple[str, ...]:
    return (*cfg.groups, REST_GROUP) if cfg.groups else (ONE_GROUP,)


def group_of_name(cfg: ModuleConfig, name: str) -> str:
    """The first group whose patterns match parameter `name`."""
    for group, patterns in cfg.groups.items():
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return group
    return REST_GROUP if cfg.groups else ONE_GROUP


def out_features(cfg: ModuleConfig, data) -> int:
    if data.num_classes is None:
        return 1
    return cfg.target_dim if cfg.loss == "target_vectors" else data.num_classes


def task_facts(cfg: ModuleConfig, data) -> dict:
    """The task's sizes, for a factory that names them as parameters (`nn.Linear` takes in/out_features)."""
    symbols = not data.x.is_floating_point()
    facts = {"out_features": out_features(cfg, data), "num_classes": data.num_classes,
             "vocab_size": data.vocab_size if symbols else None,
             "seq_len": int(data.x.shape[1]) if symbols and data.x.dim() > 1 else None,
             "in_features": int(data.x.shape[-1]) if not symbols else None}
    return {k: v for k, v in facts.items() if v is not None}


def factory_parameters(factory) -> dict:
    try:
        return dict(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        return {}


def factory_kwargs(cfg: ModuleConfig, data, factory=None) -> dict:
    """The keyword arguments the factory is called with: the task's sizes it names as parameters (task_facts),
    then model.kwargs."""
    factory = factory or import_reference(cfg.factory, "model.factory")
    names = factory_parameters(factory)
    open_ended = not names or any(p.kind == inspect.Parameter.VAR_KEYWORD for p in names.values())
    for key in cfg.kwargs:
        if not open_ended and key not in names:
            raise unknown_key_error("model.kwargs", key, [n for n, p in names.items() if p.kind in (
                inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)])
    return {k: v for k, v in task_facts(cfg, data).items() if k in names and k not in cfg.kwargs} | cfg.kwargs


def build_module(cfg: ModuleConfig, data, gen: torch.Generator | None = None) -> torch.nn.Module:
    """One module from the factory; with `gen`, drawn from it (torch's global generator set to its state while the
    factory runs, `gen` then continuing from where the factory left it)."""
    factory = import_reference(cfg.factory, "model.factory")
    kwargs = factory_kwargs(cfg, data, factory)
    try:
        if gen is None:
            module = factory(**kwargs)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.set_state(gen.get_state())
                module = factory(**kwargs)
                gen.set_state(torch.default_generator.get_state())
    except Exception as exc:  # noqa: BLE001 - the user's factory failed: said in one line, before anything starts
        raise SpecError("model.factory", f"{cfg.factory}(**{dict(sorted(kwargs.items()))}) raised "
                        f"{type(exc).__name__}: {exc}") from None
    if not isinstance(module, torch.nn.Module):
        raise SpecError("model.factory", f"{cfg.factory}(**{dict(sorted(kwargs.items()))}) returned a "
                        f"{type(module).__name__}; expected a torch.nn.Module")
    return module


class Functional:
    """One module run over stacked [K, ...] parameters and buffers: `vmap` of a functional call for a pack, and for a
    pack of one member (`solo`) a plain call of the module on the member's own tensors, as the researcher's loop
    calls it: vmap's batching rules cost a small model a quarter of its step (LiuToy width 32: 1.3x slower than the
    hand-stacked family at K = 1, 1.0x plain). A member packed and the same member alone agree to rounding, not bit
    for bit (a gradient that should be zero, such as an attention key's bias, is rounding noise either way, which
    Adam turns into a step that does not change the function).

    Eagerly, the call puts the member's tensors into the module's own parameter and buffer slots (torch's private
    `Module._parameters` and `_buffers` tables) and takes them out again. The public API that does this,
    torch.func.functional_call, checks for tied and missing names at every call, a fifth of a small model's step;
    tests/test_user_code.py fails by name if torch renames the tables. Under torch.compile (train.capture:
    compiled) the call is functional_call, which dynamo knows.
    """

    def __init__(self, module: torch.nn.Module):
        self.module = module
        # every slot, a tied one too, by the name named_parameters()/named_buffers() gives its tensor
        canonical = {id(t): n for n, t in (*module.named_parameters(), *module.named_buffers())}
        self.slots = [(table, attr, canonical[id(t)], kind) for sub in module.modules()
                      for kind, table in (("params", sub._parameters), ("buffers", sub._buffers))
                      for attr, t in table.items() if t is not None]
        lazy_load_decompositions()  # the batching rules torch.func.vmap loads on its first call
        self.batched = torch.func.vmap(self.member_forward, randomness="different")
        self.scored_batched = torch.func.vmap(self._call_scored, in_dims=(None, 0, 0, 0, 0), randomness="different")

    def member_forward(self, params, buffers, x):
        """One member's forward: its tensors in the module's slots, the module called."""
        if torch.compiler.is_compiling():
            return torch.func.functional_call(self.module, (params, buffers), (x,))
        saved = []
        try:
            for table, attr, name, kind in self.slots:
                saved.append(table[attr])
                table[attr] = params[name] if kind == "params" else buffers[name]
            return self.module(x)
        finally:
            for (table, attr, _, _), original in zip(self.slots, saved, strict=False):
                table[attr] = original

    def _call_scored(self, head, params, buffers, x, y):
        out = self.member_forward(params, buffers, x)
        out = out.unsqueeze(-1) if out.dim() == 1 else out
        loss, correct = head.per_sample(out.unsqueeze(0), y.unsqueeze(0))  # the head reads [members, rows, ...]
        return loss.squeeze(0), correct.squeeze(0)

    def __call__(self, params: dict, buffers: dict, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            return self.batched(params, buffers, x)
        return self._on_math_attention(self.member_forward, len(x), params, buffers, x)

    def solo(self, params: dict, buffers: dict, x: torch.Tensor) -> torch.Tensor:
        """The one member of a pack of one, [1, B, ...] -> [1, B, ...]: the module called on views of its [1, ...]
        tensors (their gradients reach the pack's flat buffers), with torch's own attention kernels."""
        if torch.compiler.is_compiling():
            return self.batched(params, buffers, x)
        return self.member_forward({n: t[0] for n, t in params.items()}, {n: t[0] for n, t in buffers.items()},
                                   x[0]).unsqueeze(0)

    def scored(self, head, chunk: int, params: dict, buffers: dict, x: torch.Tensor, y: torch.Tensor):
        """Each member's per-row loss and correctness, [K, B] each, with the loss inside the vmapped function and
        `chunk` members at a time: a chunk's activations, logits and their gradients stay in a CPU's cache, where
        the whole pack's did not (a one-hot MLP on 2,822 rows at K = 32: log-softmax and its backward about 10x
        slower per member than the same module alone, and batched matmuls of 32 slower than of 8). A chunk of one
        member is the module called plainly (solo): no batched matmul at all."""
        # split, not vmap's chunk_size: its chunks are slices, whose backward fills a zero gradient of the whole
        # pack per chunk and parameter (a fifth of the step above); a split's backward is one concatenation
        sizes = [chunk] * (len(x) // chunk) + [len(x) % chunk] * (len(x) % chunk > 0)
        parts = [{n: t.split(sizes) for n, t in d.items()} for d in (params, buffers)]
        xs, ys = x.split(sizes), y.split(sizes)
        scored = [self._scored_run(head, {n: t[i] for n, t in parts[0].items()},
                                   {n: t[i] for n, t in parts[1].items()}, xs[i], ys[i], chunk == 1)
                  for i in range(len(sizes))]
        return torch.cat([s[0] for s in scored]), torch.cat([s[1] for s in scored])

    def _scored_run(self, head, params, buffers, x, y, plain: bool = False):
        if torch.compiler.is_compiling():
            return self.scored_batched(head, params, buffers, x, y)
        if plain:  # one member: the module called as its own loop calls it
            return head.per_sample(with_output_dim(self.solo(params, buffers, x)), y)
        return self._on_math_attention(lambda *a: self._call_scored(head, *a), len(x), params, buffers, x, y)

    @staticmethod
    def _on_math_attention(call, k: int, *args):
        """`call` mapped over k members (members_mapped), with attention on its math path while it runs."""
        # torch's fused attention kernels (flash, memory-efficient; F.scaled_dot_product_attention, and
        # nn.MultiheadAttention with need_weights=False) have no batching rule, so vmap ran them member by member;
        # the math backend is matmuls and a softmax, which vmap batches (issue 70: 1.00x a plain loop against 0.67x).
        # The flags directly, as sdpa_kernel([SDPBackend.MATH]) sets them on CUDA and CPU, in 1 us, not its 10
        saved = [enabled() for enabled, _ in FUSED_ATTENTION]
        for _, enable in FUSED_ATTENTION:
            enable(False)
        try:
            return members_mapped(call, k, *args)
        finally:
            for (_, enable), was in zip(FUSED_ATTENTION, saved, strict=True):
                enable(was)


def with_output_dim(out: torch.Tensor) -> torch.Tensor:
    """The members' outputs as a head reads them, [K, B, out]: a regression module's [K, B] gets its axis of one."""
    return out.unsqueeze(-1) if out.dim() == 2 else out


def members_mapped(call, k: int, *args):
    """`call` vmapped over the leading member dimension of every argument (dicts of tensors, or tensors), as
    torch.func.vmap(call, randomness="different") computes it, bit for bit (tests/test_user_code.py), without its
    per-call Python: vmap flattens, checks and rebuilds its arguments' pytrees at every call, an eighth of a small
    model's step at K = 1 (0.95 -> 0.83 ms, the width-32 toy). torch has no public API for vmap's levels; these
    are the functions vmap itself calls, and the test beside it fails by name if torch renames them."""
    level = _vmap_increment_nesting(k, "different")
    try:
        out = call(*({n: _add_batch_dim(t, 0, level) for n, t in a.items()} if isinstance(a, dict)
                     else _add_batch_dim(a, 0, level) for a in args))
        if not isinstance(out, torch.Tensor | tuple) or isinstance(out, tuple) and not all(
                isinstance(o, torch.Tensor) for o in out):
            raise TypeError(f"the module's forward returned {type(out).__name__}; expected a tensor")
        return tuple(_remove_batch_dim(o, level, k, 0) for o in out) if isinstance(out, tuple) else \
            _remove_batch_dim(out, level, k, 0)
    finally:
        _vmap_decrement_nesting()
