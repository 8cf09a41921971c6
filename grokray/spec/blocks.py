"""Typed config objects built from plain dicts, with errors a researcher can act on.

Every dataclass here (and every task/model config) is parsed by `parse_dataclass`, which rejects unknown
keys with the closest valid name, coerces YAML's loose numbers ("1e-3" is a string to PyYAML) and checks the
bounds declared in field metadata. Nothing here knows about sweeps; `build.py` builds on it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from ..errors import Mistakes, SpecError, did_you_mean

# Upper bounds a launch could meet, so a typo (1e12 for 1e2) is refused in one line instead of launching a run
# that never ends or never schedules (issue 71). Generous: each is far past any published setting.
MAX_STEPS = 10**9  # train.steps, phases.budget and gap, warmup, --checkpoint-every: 10^9 steps is days on a GPU
MAX_BATCH = 10**8  # rows in one batch
MAX_CURVE_POINTS = 1000  # curve points per decade of steps
MAX_CONCURRENT = 100_000  # trials at once (--max-concurrent, search.max_concurrent)
MAX_TRIALS = 10**6  # a search's trials
MAX_PACK = 65_536  # members of one pack
MAX_CPUS = 1024  # CPUs one pack asks for
MAX_WAIT_S = 7 * 86400  # --report-every, --delivery-wait: a week


def optim_declarations():
    """The optimizer kinds and gradient transforms (optim/kinds, optim/transforms), loaded when an optimizer's
    configuration is first built: they import torch, and `import grokray.spec.blocks` (a tracker's, the analysis') does
    not."""
    from ..optim import kinds, transforms

    return kinds, transforms


def bounded(default, *, ge=None, gt=None, le=None, lt=None, doc: str = ""):
    """A dataclass field whose numeric bounds are checked at parse time."""
    meta = {k: v for k, v in dict(ge=ge, gt=gt, le=le, lt=lt, doc=doc).items() if v is not None}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def unknown_key_error(path: str, key, allowed) -> SpecError:
    allowed = sorted(allowed)
    hint = did_you_mean(key, allowed)
    name = str(key) if re.fullmatch(r"[A-Za-z0-9_\-]+", str(key)) else repr(key)  # a key like ':' is quoted
    where = f"{path} {name}" if path == "-s" else f"{path}.{name}" if path else name  # -s trian: the flag, a space
    return SpecError(where, f"unknown key; {hint}allowed: {', '.join(allowed)}")


def check_block(raw, path: str, allowed) -> dict:
    """A spec block that must be a mapping of known keys: returned as is, or a SpecError naming the bad key."""
    if not isinstance(raw, dict):
        raise SpecError(path, f"expected a mapping of {', '.join(allowed)}, got {raw!r}")
    for key in raw:
        if key not in allowed:
            raise unknown_key_error(path, key, allowed)
    return raw


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _number(value, path: str, tp):
    if isinstance(value, bool):
        raise SpecError(path, f"expected {tp.__name__}, got boolean {value!r}")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise SpecError(path, f"expected {tp.__name__}, got string {value!r}") from None
    if not isinstance(value, int | float):
        raise SpecError(path, f"expected {tp.__name__}, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise SpecError(path, f"expected a finite {tp.__name__}, got {value!r}")
    if tp is int:
        if float(value) != int(value):
            raise SpecError(path, f"expected an integer, got {value!r}")
        return int(value)
    return float(value)


def coerce(tp, value, path: str, meta: dict | None = None):
    """Convert a YAML value to annotation `tp`, or raise a SpecError naming `path`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        real = [o for o in options if o is not type(None)]
        if len(real) == 1:  # Optional[X]: X's own message (bounds, type) is the useful one
            return coerce(real[0], value, path, meta)
        for option in real:
            try:
                return coerce(option, value, path, meta)
            except SpecError:
                pass
        raise SpecError(path, f"expected {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise SpecError(path, f"got {value!r}; {did_you_mean(value, allowed)}allowed: "
                                  f"{', '.join(map(str, allowed))}")
        return value
    if origin is list:
        if not isinstance(value, list | tuple):
            raise SpecError(path, f"expected {_type_name(tp)}, got {value!r}")
        (item,) = typing.get_args(tp)
        return [coerce(item, v, f"{path}[{i}]", meta) for i, v in enumerate(value)]
    if origin is tuple:
        items = typing.get_args(tp)
        if not isinstance(value, list | tuple) or len(value) != len(items):
            raise SpecError(path, f"expected a list of {len(items)} numbers, got {value!r}")
        return tuple(coerce(t, v, f"{path}[{i}]", meta) for i, (t, v) in enumerate(zip(items, value, strict=True)))
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise SpecError(path, f"expected a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return parse_dataclass(tp, value, path)
    if tp is bool:
        if not isinstance(value, bool):
            raise SpecError(path, f"expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise SpecError(path, f"expected a string, got {value!r}")
        return value
    if tp in (int, float):
        number = _number(value, path, tp)
        _check_bounds(number, path, meta or {})
        return number
    if tp is Any:
        return value
    raise TypeError(f"unsupported annotation {tp!r} at {path}")


def _check_bounds(x, path: str, meta: dict):
    tests = {
        "ge": (lambda b: x >= b, ">="),
        "gt": (lambda b: x > b, ">"),
        "le": (lambda b: x <= b, "<="),
        "lt": (lambda b: x < b, "<"),
    }
    for key, (ok, _) in tests.items():
        if key in meta and not ok(meta[key]):
            rule = " and ".join(f"{tests[k][1]} {meta[k]}" for k in tests if k in meta)
            raise SpecError(path, f"got {x!r}; must be {rule}")


@functools.cache
def fields_and_hints(cls) -> tuple[dict, dict]:
    """A dataclass's init fields and resolved annotations, once per class: `typing.get_type_hints` compiles every
    string annotation again on each call, and planning parses each configuration (10^5 took minutes)."""
    return {f.name: f for f in dataclasses.fields(cls) if f.init}, typing.get_type_hints(cls)


def parse_dataclass(cls, data, path: str = ""):
    """Build `cls` from a dict: unknown keys, types and bounds are checked; `validate(path)` runs last."""
    fields, hints = fields_and_hints(cls)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(path or "spec", f"expected a mapping with keys {', '.join(fields)}, got {data!r}")
    kwargs, mistakes = {}, Mistakes()
    for key, value in data.items():
        with mistakes.check():  # every bad key of the block, not only the first
            if key not in fields:
                raise unknown_key_error(path, key, fields)
            sub = f"{path}.{key}" if path else str(key)
            kwargs[key] = coerce(hints[key], value, sub, dict(fields[key].metadata))
    mistakes.raise_any()
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if validate:
        validate(path)
    return obj


def to_dict(obj) -> dict:
    """Plain-dict form of a parsed config (tuples become lists so it round-trips through YAML/JSON)."""
    if dataclasses.is_dataclass(obj):
        out = {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
        out |= to_dict(getattr(obj, "methods", None) or {}) if isinstance(obj, OptimConfig) else {}
        name = getattr(type(obj), "registry_name", None)
        return {"name": name, **out} if name else out
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    return obj


@dataclass
class OptimConfig:
    """One parameter group's optimizer. Liu and Omnigrok tune embedding and decoder separately.

    Its fields are the optimizer's own; the de-grokking methods' fields (Grokfast's grad_filter, filter_alpha, ...,
    ⊥Grad's orthogonal) are declared by the methods themselves (optim/transforms/), parsed beside these by
    `parse_optim`, held in `methods` and read as attributes (cfg.filter_alpha)."""

    # The optimizer's fields that may differ between the members of one pack: each member gets its own value (the
    # pack's signature leaves them out; the optimizer holds them as [K, 1] columns, init_scale acts at init).
    # per_member_fields() adds the transforms' own.
    PER_MEMBER: ClassVar[tuple[str, ...]] = ("lr", "weight_decay", "betas", "eps", "momentum", "warmup_steps",
                                             "temperature", "init_scale")

    name: str = "adamw"  # a registered optimizer kind (optim/kinds/)
    lr: float = bounded(1e-3, ge=0.0)
    weight_decay: float = bounded(0.0, ge=0.0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = bounded(1e-8, gt=0.0)
    momentum: float = bounded(0.0, ge=0.0, lt=1.0, doc="sgd's heavy ball; muon's Nesterov momentum (0.95 usual)")
    warmup_steps: int = bounded(0, ge=0, le=MAX_STEPS)
    # False: lr x (step + 1) / warmup_steps, full from the warm-up's last step; True: lr x step / warmup_steps, so the
    # first update moves nothing (Adam's moments still see its gradient): torch's LambdaLR(lambda u: u / warmup) as
    # the Grokfast code writes it, and Hugging Face's linear warm-up
    warmup_from_zero: bool = False
    temperature: float = bounded(0.0, ge=0.0, doc="Langevin noise temperature T")
    init_scale: float = bounded(1.0, gt=0.0, doc="multiplies this group's initial weights")
    # muon: which of the group's matrices take Muon's step, the rest AdamW's. hidden (common practice): all but
    # the model's input embeddings and output head; all: every matrix
    muon_on: Literal["hidden", "all"] = "hidden"
    # each gradient transform's fields, by name (their defaults where the spec gives none)
    methods: dict = field(default_factory=dict, init=False)

    def __post_init__(self):
        self.methods = {name: s.default for name, s in optim_declarations()[1].declared_settings().items()}

    def __getattr__(self, name):
        methods = self.__dict__.get("methods")  # absent while unpickling: then no field is a method's
        if methods is not None and name in methods:
            return methods[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @classmethod
    def per_member_fields(cls) -> tuple[str, ...]:
        """Every field a pack's members may hold apart: the optimizer's own, then the transforms' per-member ones."""
        settings = optim_declarations()[1].declared_settings()
        return (*cls.PER_MEMBER, *(n for n, s in settings.items() if s.per_member))

    def validate(self, path):
        names = list(optim_declarations()[0].KINDS)
        if self.name not in names:
            raise SpecError(f"{path}.name", f"got {self.name!r}; {did_you_mean(self.name, names)}allowed: "
                            f"{', '.join(names)}")
        for i, b in enumerate(self.betas):
            if not 0.0 <= b < 1.0:
                raise SpecError(f"{path}.betas[{i}]", f"got {b!r}; must be >= 0 and < 1")

    def check_idle(self, given, block, group: str) -> None:
        """A SpecError for a field the spec sets (`given`: the keys it wrote for optim.<group>, from the group's
        `block` or from optim.default) that this configuration never reads (a method's knob without the method):
        it would train the same curve as without it. Each kind and each transform declares what it reads."""
        kinds, transforms = optim_declarations()
        readers = {key: (self.name in names, "name: " + " or ".join(names), f"optimizer {self.name!r}")
                   for key, names in kinds.fields_read_by_kind().items()}
        for key in transforms.declared_settings():
            by = [t for t in transforms.readers(key) if t.switch.name != key]
            if by:
                switch = by[0].switch.name
                readers[key] = (any(t.asked(self) for t in by), f"{switch}: " + " or ".join(str(t.on) for t in by),
                                f"{switch} {getattr(self, switch)!r}")
        readers["warmup_from_zero"] = (self.warmup_steps > 0, "warmup_steps > 0", f"optimizer {self.name!r}")
        for key, (read, needs, context) in readers.items():
            if key in given and not read:
                raise SpecError(f"optim.{group if key in block else 'default'}.{key}", f"set with {context}, where "
                                f"it does nothing; it needs {needs}")


def parse_optim(data, path: str) -> OptimConfig:
    """An OptimConfig from a block: the optimizer's fields by parse_dataclass, each transform's by its declared
    Setting (type, bounds, a str switch's allowed values), every bad key of the block reported at once."""
    if data is None:
        data = {}
    own, _ = fields_and_hints(OptimConfig)
    settings = optim_declarations()[1].declared_settings()
    if not isinstance(data, dict):
        raise SpecError(path, f"expected a mapping with keys {', '.join([*own, *settings])}, got {data!r}")
    mistakes = Mistakes()
    methods = {}
    for key, value in data.items():
        with mistakes.check():
            if key not in own and key not in settings:
                raise unknown_key_error(path, key, [*own, *settings])
            if key in settings:
                methods[key] = _setting_value(settings[key], value, f"{path}.{key}")
    with mistakes.check():
        cfg = parse_dataclass(OptimConfig, {k: v for k, v in data.items() if k in own}, path)
    mistakes.raise_any()
    cfg.methods.update(methods)
    return cfg


def _setting_value(setting, value, path: str):
    if setting.type is str:
        return coerce(Literal[optim_declarations()[1].switch_values(setting.name)], value, path)
    return coerce(setting.type, value, path, setting.bounds)


@dataclass
class TrainConfig:
    steps: int = bounded(100_000, ge=1, le=MAX_STEPS, doc="optimizer steps (iterations for rfm)")
    batch_size: int | Literal["full"] = "full"
    # iid: each batch drawn with replacement; epochs: each member's rows shuffled every epoch and cut into batches,
    # the last smaller (a PyTorch DataLoader with shuffle=True, as the Grokfast benchmark draws them)
    batches: Literal["iid", "epochs"] = "iid"
    eval_every: int | Literal["auto"] = "auto"
    curve_points_per_decade: int = bounded(20, ge=1, le=MAX_CURVE_POINTS)
    dtype: Literal["float32", "float64"] = "float32"
    # eager: the reference step; compiled: forward, backward and updates captured once by torch.compile (CUDA
    # graphs on a GPU) and reused; auto: the one measured faster on the device (grokray/capture.py)
    capture: Literal["auto", "eager", "compiled"] = "auto"
    # float32 packs: fp32 (the reference), tf32 matmuls (CUDA) or a bfloat16 forward (engine/precision.py)
    precision: Literal["fp32", "tf32", "bf16"] = "fp32"
    # Omnigrok's constraint: after every update the total weight norm is rescaled to its initial value, or to the
    # given number (per member). free: no constraint.
    weight_norm: float | Literal["free", "initial"] = "free"
    softmax: Literal["softmax", "stablemax"] = "softmax"  # the classification heads' cross-entropy (Prieto et al.)
    # model: the softmax cross-entropy in the pack's dtype; float64: of its logits cast to float64, as Prieto et al.
    # compute it (their softmax baseline delays Softmax Collapse so). StableMax's loss is float64 either way.
    loss_dtype: Literal["model", "float64"] = "model"
    # per_purpose: the init, the split and the batches each draw from a generator of their own, so changing the
    # model leaves a seed's split alone. script: one generator per seed draws the init, then the split, then every
    # epoch's shuffle of the previous epoch's order, in the order a PyTorch script after torch.manual_seed(seed)
    # draws them (the Grokfast benchmark's main.py): with model init: pytorch, seed 0 is the paper's seed 0
    seed_stream: Literal["per_purpose", "script"] = "per_purpose"

    def validate(self, path):
        if isinstance(self.batch_size, int) and not 1 <= self.batch_size <= MAX_BATCH:
            raise SpecError(f"{path}.batch_size", f"got {self.batch_size:,}; must be 1..{MAX_BATCH:,} rows or 'full'")
        if isinstance(self.eval_every, int) and self.eval_every < 1:
            raise SpecError(f"{path}.eval_every", f"got {self.eval_every}; must be >= 1 or 'auto'")
        if self.batches == "epochs" and self.batch_size == "full":
            raise SpecError(f"{path}.batches", "got 'epochs' with batch_size: full, where every step is one whole "
                            "epoch; allowed: iid, or epochs with an integer batch_size")
        if self.precision != "fp32" and self.dtype == "float64":
            raise SpecError(f"{path}.precision", f"got {self.precision!r} with dtype float64; allowed: fp32 (tf32 and "
                            "bf16 lower a float32 pack's arithmetic)")
        if self.seed_stream == "script" and self.batches == "iid" and self.batch_size != "full":
            raise SpecError(f"{path}.seed_stream", "got 'script' with iid batches, which a script's stream does not "
                            "draw; allowed: per_purpose, or script with batches: epochs or batch_size: full")
        if isinstance(self.weight_norm, float) and not self.weight_norm > 0:
            raise SpecError(f"{path}.weight_norm", f"got {self.weight_norm}; must be > 0, 'initial' or 'free'")


@dataclass
class PhaseConfig:
    """Liu et al. appendix A: thresholds of the phase table."""

    threshold: float = bounded(0.9, gt=0.0, le=1.0)
    budget: int = bounded(100_000, ge=1, le=MAX_STEPS)
    gap: int = bounded(1000, ge=1, le=MAX_STEPS)
    stop_when_classified: bool = True


def only_known_fields(cls, raw: dict, what: str) -> dict:
    """`raw` unchanged when every key is a field of dataclass `cls`, else a ValueError naming the strangers: a
    plain dict rebuilt on the other side of a process boundary must not carry what its reader would ignore."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ValueError(f"unknown {what} keys {unknown}; allowed: {', '.join(sorted(names))}")
    return raw

