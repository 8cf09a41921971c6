"""Any torch.nn.Module, packed: the `module` family trains K copies of the user's own module as one pack.

`factory: "mylab.models:make_net"` builds one ordinary module; each member builds its own from its seed's generator
(torch's global generator is set to it while the factory runs, as `torch.manual_seed(seed); make_net()` would), so
a member starts where the same module built alone starts. The members' parameters are stacked into grokray's flat
per-group buffers (models/base.py), and the forward runs the one module over every member's parameters with
torch.func (`functional_call` under `vmap`): every optimizer kind, de-grokking method, checkpoint, compaction and
capture mode works on it unchanged.

What the module must be: a pure function of its parameters, buffers and inputs (no in-place buffer updates, so no
batch-norm running statistics; no `.item()` or data-dependent Python branches, which vmap cannot batch). It reads
one member's rows, [B, ...] (integer symbol ids or float features, as the task gives them), and returns [B, out]
(out: the task's classes, target_dim for target_vectors, 1 or nothing for a regression).
"""

from __future__ import annotations

import fnmatch
import inspect
import json
from dataclasses import dataclass, field
from typing import Literal

import torch

from ..config import bounded, to_dict, unknown_key_error
from ..errors import SpecError
from ..user_code import import_reference
from . import MODELS
from .base import PackedModel
from .heads import ClassificationHead, OneHotMSEHead, ScalarRegressionHead, TargetVectorHead, target_vectors

# Modules whose state changes in the forward (running statistics): the member's math would depend on its batches'
# history in a way vmap cannot batch, and a pack would have to carry it as state.
STATEFUL_NORMS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d, torch.nn.SyncBatchNorm,
                  torch.nn.InstanceNorm1d, torch.nn.InstanceNorm2d, torch.nn.InstanceNorm3d)
DROPOUT = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d, torch.nn.AlphaDropout,
           torch.nn.FeatureAlphaDropout)
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


def build_module(cfg: ModuleConfig, data, gen: torch.Generator | None = None) -> torch.nn.Module:
    """One module from the factory; with `gen`, drawn from it (torch's global generator set to its state while the
    factory runs, `gen` then continuing from where the factory left it)."""
    factory = import_reference(cfg.factory, "model.factory")
    try:
        names = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        names = {}
    open_ended = not names or any(p.kind == inspect.Parameter.VAR_KEYWORD for p in names.values())
    for key in cfg.kwargs:
        if not open_ended and key not in names:
            raise unknown_key_error("model.kwargs", key, [n for n, p in names.items() if p.kind in (
                inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)])
    kwargs = {k: v for k, v in task_facts(cfg, data).items() if k in names and k not in cfg.kwargs} | cfg.kwargs
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
    """One module run over stacked [K, ...] parameters and buffers: `vmap` of a functional call, at K = 1 too: a
    member alone then computes what it computes in any pack, bit for bit (a plain call rounds differently, and Adam
    turns a difference in a gradient that should be zero, such as an attention key's bias, into a full step).

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
        self.batched = torch.func.vmap(self._call, randomness="different")

    def _call(self, params, buffers, x):
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

    def __call__(self, params: dict, buffers: dict, x: torch.Tensor) -> torch.Tensor:
        return self.batched(params, buffers, x)


_checked: dict[str, None] = {}


def check_module(cfg: ModuleConfig, task) -> None:
    """What a pack needs of the module, checked once per model and task configuration before anything starts (every
    configuration of a sweep is parsed, so the task's data is built only for one not checked yet): it builds, has
    parameters, keeps no running statistics, its groups match parameters, and two members' forward on two rows
    gives [2, 2, out]."""
    key = json.dumps([to_dict(cfg), to_dict(task)], sort_keys=True, default=str)
    if key in _checked:
        return
    data = task.data()
    module = build_module(cfg, data)
    for name, sub in module.named_modules():
        if isinstance(sub, STATEFUL_NORMS) and getattr(sub, "track_running_stats", False):
            raise SpecError("model.factory", f"the module uses {type(sub).__name__} at {name!r}, whose running "
                            "statistics change in the forward; not supported in a pack: use LayerNorm, GroupNorm or "
                            "none")
    names = [n for n, _ in module.named_parameters()]
    if not names:
        raise SpecError("model.factory", f"{cfg.factory} built a module with no parameters")
    for group in cfg.groups:
        if not any(group_of_name(cfg, n) == group for n in names):
            raise SpecError(f"model.groups.{group}", f"matches none of the module's parameters; they are: "
                            f"{', '.join(names[:20])}")
    out = out_features(cfg, data)
    x = data.x[:2].unsqueeze(0).expand(2, *data.x[:2].shape)
    stacked = {n: torch.stack([p.detach()] * 2) for n, p in module.named_parameters()}
    buffers = {n: torch.stack([b] * 2) for n, b in module.named_buffers()}
    x = x.to(next(iter(stacked.values())).dtype) if x.is_floating_point() else x
    try:
        with torch.no_grad():
            y = Functional(module.train())(stacked, buffers, x)
    except Exception as exc:  # noqa: BLE001 - the user's forward under vmap: its error, in one line
        raise SpecError("model.factory", f"the module's forward on 2 rows of task {task.registry_name!r} (inputs "
                        f"{tuple(data.x.shape[1:])} {data.x.dtype}), batched over members by torch.func.vmap, raised "
                        f"{type(exc).__name__}: {str(exc)[:300]}") from None
    if tuple(y.shape) not in ((2, 2, out),) + (((2, 2),) if data.num_classes is None else ()):
        raise SpecError("model.factory", f"the module returns {tuple(y.shape[1:])} for 2 rows; expected (2, {out}) "
                        f"(loss {cfg.loss!r} on task {task.registry_name!r})")
    _checked[key] = None


@MODELS.register("module", ModuleConfig)
class ModuleFamily(PackedModel):
    example = {  # the contract-test size: torch's own nn.Linear on 50 digits
        "task": {"name": "images", "train_size": 50},
        "model": {"name": "module", "factory": "torch.nn:Linear"},
        "optim": {"default": {"name": "adamw", "lr": 1e-2}},
    }
    groups = (ONE_GROUP,)  # without model.groups; groups_for gives a configuration's own
    # one forward over every point each full-batch step, as the MLP families (measured faster for the toy model; a
    # user's transformer pays a backward over its held-out rows)
    joint_forward = True

    def __init__(self, configs, data, seeds, init_scales, dtype=torch.float32, device="cpu"):
        self.groups = module_groups(configs[0])
        self._modules_built: list[torch.nn.Module] = []
        self._params: tuple = (None, {})  # (the leaves they view, {name: stacked parameter}): rebuilt on compaction
        self._training: bool | None = None  # the module's mode now: Module.train walks every submodule
        super().__init__(configs, data, seeds, init_scales, dtype, device)

    @classmethod
    def groups_for(cls, cfg) -> tuple[str, ...]:
        return module_groups(cfg)

    @staticmethod
    def check_task(model, task, path):
        check_module(model, task)

    @staticmethod
    def cross_entropy(model, task) -> bool:
        return model.loss == "cross_entropy" and task.data().num_classes is not None

    def init_member(self, cfg, data, gen, init_scales):
        module = build_module(cfg, data, gen)
        self._modules_built.append(module)
        return {n: p.detach() * init_scales[group_of_name(cfg, n)] for n, p in module.named_parameters()}

    def group_of(self, name):
        return group_of_name(self.cfg, name)

    def make_head(self, configs, data, gens, dtype, device):
        built, self._modules_built = self._modules_built, []
        float_like = {"dtype": dtype, "device": device}
        self.member_buffers = {n: torch.stack([dict(m.named_buffers())[n] for m in built]).to(
            **(float_like if b.is_floating_point() else {"device": device})) for n, b in built[0].named_buffers()}
        base = built[0].to(**float_like)
        self.functional = Functional(base)  # a plain attribute: its own parameters are never the pack's
        self.uses_dropout = any(isinstance(m, DROPOUT) and m.p > 0 or isinstance(m, torch.nn.MultiheadAttention)
                                and m.dropout > 0 for m in base.modules())
        self._embedding = next((f"{n}.weight" for n, m in base.named_modules()
                                if isinstance(m, torch.nn.Embedding) and f"{n}.weight" in self.layout), None)
        if data.num_classes is None:
            return ScalarRegressionHead(float(data.meta.get("tolerance", 0.5)))
        if self.cfg.loss == "target_vectors":
            targets = torch.stack([target_vectors(g, data.num_classes, self.cfg.target_dim) for g in gens])
            return TargetVectorHead(targets.to(dtype=dtype, device=device))
        return OneHotMSEHead(data.num_classes) if self.cfg.loss == "mse" else ClassificationHead(data.num_classes)

    def select_extra(self, idx):
        self.member_buffers = {n: b.index_select(0, idx) for n, b in self.member_buffers.items()}

    def forward(self, x, rng=None):
        # train mode but for a dropout model's measuring forwards (eval mode would also route attention to torch's
        # fused inference kernels, which vmap runs member by member and autograd cannot differentiate)
        training = torch.is_grad_enabled() or not self.uses_dropout
        if training != self._training:
            self.functional.module.train(training)
            self._training = training
        if self._params[0] is not self.leaves:
            self._params = (self.leaves, {name: self.p(name) for name in self.layout})
        params = self._params[1]
        if rng is not None and self.uses_dropout:  # this step's masks: each member its own, from the pack's streams
            with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
                torch.manual_seed(int(rng.rand((), torch.float64, x.device).sum().item() * 2**52) % 2**63)
                out = self.functional(params, self.member_buffers, x)
        else:
            out = self.functional(params, self.member_buffers, x)
        return out.unsqueeze(-1) if out.dim() == 2 else out

    def embeddings(self):
        """The first nn.Embedding's table (Liu's RQI on addition, the Fourier concentration on modular tasks)."""
        return self.p(self._embedding) if self._embedding else None

    def symbol_weights(self):
        return self.embeddings()
