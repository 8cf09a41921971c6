"""What a pack needs of a user's module, checked once before anything starts, and what the dry-run says of it: the
factory's call as it will be made, a parameter named like a task size it leaves to its default, and the ops vmap runs
member by member."""

from __future__ import annotations

import inspect
import json
import re
import warnings

import torch

from ..errors import SpecError
from ..spec.blocks import to_dict
from ..user_code import import_reference
from .user_module import (
    STATEFUL_NORMS,
    Functional,
    ModuleConfig,
    build_module,
    factory_kwargs,
    factory_parameters,
    group_of_name,
    out_features,
    task_facts,
)

# A factory parameter named like one of these is probably a task size that grokray does not fill (it fills only
# task_facts' names): the dry-run says so, since the factory's default would be used silently.
SIZE_LIKE = re.compile(r"^(p|n|m|modulus|prime|vocab|n_?vocab|d_vocab|n_?tokens?|num_tokens|n_?classes|n_?out(puts?)?|"
                       r"n_?in(puts?)?|(in|out)put_(dim|size)|(in|out)_dim|dim_(in|out)|seq_?length|context|"
                       r"n_?ctx|block_size|num_(inputs|outputs|features|labels))$")


def factory_call_lines(cfg: ModuleConfig, data) -> list[str]:
    """What the dry-run says of the factory: its call as it will be made, and each parameter named like a task size
    that is left to its default."""
    factory = import_reference(cfg.factory, "model.factory")
    kwargs = factory_kwargs(cfg, data, factory)
    call = f"{cfg.factory}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
    lines = [f"model.factory:  {call}"]
    for name, param in factory_parameters(factory).items():
        if name not in kwargs and SIZE_LIKE.match(name):
            default = "" if param.default is inspect.Parameter.empty else f" (its default {param.default!r} is used)"
            lines.append(f"model.factory:  parameter {name!r} looks like a task size but is not filled{default}: "
                         f"grokray fills only {', '.join(sorted(task_facts(cfg, data)))} for this task; give it "
                         f"in model.kwargs if it is one")
    return lines


_checked: dict[str, None] = {}
FALLBACK = re.compile(r"batching rule for (aten::\w+(?:\.\w+)?)")
_fallbacks: dict[str, list[str]] = {}  # check key -> the ops vmap runs member by member in that module


def _check_key(cfg: ModuleConfig, task, dtype: str) -> str:
    return json.dumps([to_dict(cfg), to_dict(task), dtype], sort_keys=True, default=str)


def check_module(cfg: ModuleConfig, task, dtype: str = "float32") -> None:
    """What a pack needs of the module, checked once per model, task and dtype before anything starts (every
    configuration of a sweep is parsed, so the task's data is built only for one not checked yet): it builds, has
    parameters, keeps no running statistics, its groups match parameters, and two members' forward on two rows,
    in the pack's dtype (train.dtype), gives [2, 2, out]."""
    key = _check_key(cfg, task, dtype)
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
    try:  # one forward and backward, as a pack's step runs them; torch's fallback warnings are read, not shown
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = two_member_forward(module, data, dtype, backward=True)
    except Exception as exc:  # noqa: BLE001 - the user's forward under vmap: its error, in one line
        if dtype != "float32" and _runs_in_float32(module, data):
            raise SpecError("train.dtype", f"got {dtype!r}, but the module's forward fails with its parameters in "
                            f"{dtype} ({type(exc).__name__}: {str(exc)[:160]}), as a module that casts to float32 "
                            "(.float()) does; allowed: float32, or make the module follow its parameters' dtype "
                            "(x.to(self.weight.dtype))") from None
        raise SpecError("model.factory", f"the module's forward and backward on 2 rows of task "
                        f"{task.registry_name!r} (inputs {tuple(data.x.shape[1:])} {data.x.dtype}), batched over "
                        f"members by torch.func.vmap, raised {type(exc).__name__}: {str(exc)[:300]}") from None
    if tuple(y.shape) not in ((2, 2, out),) + (((2, 2),) if data.num_classes is None else ()):
        raise SpecError("model.factory", f"the module returns {tuple(y.shape[1:])} for 2 rows; expected (2, {out}) "
                        f"(loss {cfg.loss!r} on task {task.registry_name!r})")
    # the ops vmap ran member by member (torch warns each time): a pack of them gains nothing
    _fallbacks[key] = sorted({m.group(1) for w in caught if (m := FALLBACK.search(str(w.message)))})
    _checked[key] = None


def two_member_forward(module: torch.nn.Module, data, dtype: str, backward: bool = False) -> torch.Tensor:
    """Two members' forward on two rows, the parameters (and floating inputs) in `dtype`, as a pack runs it; with
    `backward`, its backward too."""
    kind = getattr(torch, dtype)
    x = data.x[:2].unsqueeze(0).expand(2, *data.x[:2].shape)
    stacked = {n: torch.stack([p.detach().to(kind)] * 2).requires_grad_(backward) for n, p in module.named_parameters()}
    buffers = {n: torch.stack([b.to(kind) if b.is_floating_point() else b] * 2) for n, b in module.named_buffers()}
    x = x.to(kind) if x.is_floating_point() else x
    with torch.set_grad_enabled(backward):
        y = Functional(module.train())(stacked, buffers, x)
        if backward and y.is_floating_point():
            y.float().sum().backward()
    return y.detach()


def _runs_in_float32(module: torch.nn.Module, data) -> bool:
    try:
        two_member_forward(module, data, "float32")
    except Exception:  # noqa: BLE001 - the module's own failure, reported as such by the caller
        return False
    return True



def check_dtype(cfg: ModuleConfig, task, dtype: str) -> None:
    """The module in the pack's dtype (train.dtype), once its float32 check passed (else that check said why)."""
    if dtype != "float32" and _check_key(cfg, task, "float32") in _checked:
        check_module(cfg, task, dtype)


def dry_run_lines(cfg: ModuleConfig, task) -> list[str]:
    check_module(cfg, task)
    slow = [f"model.factory:  `{op}` runs member by member under vmap (torch has no batching rule for it): expect "
            "no gain from packing" for op in _fallbacks.get(_check_key(cfg, task, "float32"), [])]
    return [*factory_call_lines(cfg, task.data()), *slow]
