"""One trial's configuration: what a spec point resolves to (task, model, optim groups, train, phases, seed), how
it is parsed from what a spec writes (every rule checked, every mistake reported at once), how a pack's other
members are built from its first and their points without parsing again (member_config), and how it crosses to a
Tune worker as its own data (to_dict / from_dict, no rule run again)."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import typing
from dataclasses import dataclass
from typing import Any

from ..contracts import family_groups
from ..errors import Mistakes, SpecError
from ..models import MODELS
from ..optim.transforms import TRANSFORMS, asked_transforms
from ..tasks import TASKS
from .blocks import (
    OptimConfig,
    PhaseConfig,
    TrainConfig,
    coerce,
    fields_and_hints,
    only_known_fields,
    parse_dataclass,
    parse_optim,
    to_dict,
    unknown_key_error,
)
from .keys import SEED_RANGE, TRIAL_KEYS


@dataclass
class TrialConfig:
    task: Any
    model: Any
    optim: dict[str, OptimConfig]
    train: TrainConfig
    phases: PhaseConfig
    seed: int = 0

    def to_dict(self) -> dict:
        """The configuration as plain data: what crosses to a Tune worker, a checkpoint and the tracker."""
        return to_dict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> TrialConfig:
        """The inverse of to_dict, for the Tune worker's side of the wire: each block built back with its types
        (lists to tuples) and nothing checked again, neither a field's bounds nor a block's validate() nor a spec
        rule, and no user code imported: the driver parsed and checked this very configuration. A key the block
        does not know is still refused (a plain dict crossed a process boundary)."""
        def block(registry, data: dict, what: str):
            return rebuilt(registry.get(data["name"]).config_cls, {k: v for k, v in data.items() if k != "name"},
                           what)

        return cls(task=block(TASKS, raw["task"], "task"), model=block(MODELS, raw["model"], "model"),
                   optim={g: rebuilt_optim(o) for g, o in raw["optim"].items()},
                   train=rebuilt(TrainConfig, raw["train"], "train"),
                   phases=rebuilt(PhaseConfig, raw["phases"], "phases"), seed=int(raw["seed"]))

    @property
    def budget_steps(self) -> int:
        """Steps (RFM: iterations) this configuration trains at most: its train.steps, cut at phases.budget."""
        return min(self.train.steps, self.phases.budget)

    def key(self) -> str:
        """Stable identity of the configuration: what a retried or resumed trial is found by."""
        return config_key(self.to_dict())


def config_key(data: dict) -> str:
    """TrialConfig.key of the configuration whose to_dict is `data`: a pack's dicts are made once, not twice."""
    blob = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def rebuilt(cls, data: dict, what: str):
    """A dataclass from its to_dict form: known keys only, tuples and nested dataclasses typed back, no check."""
    fields, hints = fields_and_hints(cls)
    only_known_fields(cls, data, what)
    return cls(**{k: _typed(hints[k], v, what) for k, v in data.items() if k in fields})


def _typed(tp, value, what: str):
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return rebuilt(tp, value, what)
    if typing.get_origin(tp) is tuple and isinstance(value, list | tuple):
        return tuple(value)
    return value


def rebuilt_optim(data: dict) -> OptimConfig:
    """rebuilt for an OptimConfig: its own fields, then its transforms' (methods)."""
    own, _ = fields_and_hints(OptimConfig)
    methods = {k: v for k, v in data.items() if k not in own}
    unknown = sorted(set(methods) - set(OptimConfig().methods))
    if unknown:
        raise ValueError(f"unknown optim keys {unknown}")
    cfg = rebuilt(OptimConfig, {k: v for k, v in data.items() if k in own}, "optim")
    cfg.methods.update(methods)
    return cfg


def _registered(registry, raw, path):
    if not isinstance(raw, dict):
        raise SpecError(path, f"expected a mapping with a 'name' ({', '.join(registry.names())}), got {raw!r}")
    if "name" not in raw:
        raise SpecError(f"{path}.name", f"missing; allowed: {', '.join(registry.names())}")
    if not isinstance(raw["name"], str):
        allowed = ", ".join(registry.names())
        raise SpecError(f"{path}.name", f"expected a string, got {raw['name']!r}; allowed: {allowed}")
    entry = registry.get(raw["name"])
    return entry, parse_dataclass(entry.config_cls, {k: v for k, v in raw.items() if k != "name"}, path)


def parse_trial(raw: dict) -> TrialConfig:
    """Resolve one trial config from what a spec writes (model family defaults fill unset train/phases fields),
    with every rule checked. A whole config sent across a process boundary is read by TrialConfig.from_dict."""
    if not isinstance(raw, dict):
        raise SpecError("spec", f"expected a mapping, got {raw!r}")
    mistakes = Mistakes()  # the blocks are checked independently: every mistake is reported at once
    for key in [k for k in raw if k not in TRIAL_KEYS]:
        with mistakes.check():
            raise unknown_key_error("", key, TRIAL_KEYS)
    for key in ("task", "model"):
        with mistakes.check():
            if key not in raw:
                raise SpecError(key, f"missing; a spec needs a {key} with a name")
    task = model = entry = None
    with mistakes.check():
        _, task = _registered(TASKS, raw.get("task"), "task") if "task" in raw else (None, None)
    with mistakes.check():
        entry, model = _registered(MODELS, raw.get("model"), "model") if "model" in raw else (None, None)
    defaults = entry.build.defaults if entry is not None else {}
    blocks = {}
    for key, cls in (("train", TrainConfig), ("phases", PhaseConfig)):
        with mistakes.check():
            if not isinstance(raw.get(key) or {}, dict):
                raise SpecError(key, f"expected a mapping of {key} settings, got {raw[key]!r}")
            blocks[key] = parse_dataclass(cls, {**defaults.get(key, {}), **(raw.get(key) or {})}, key)
    optim = {}
    with mistakes.check():
        optim = _parse_optim(raw.get("optim") or {}, model and family_groups(entry.build, model))
    with mistakes.check():
        seed = coerce(int, raw.get("seed", 0), "seed", SEED_RANGE)
    with mistakes.check():
        if model is not None and task is not None:
            entry.build.check_task(model, task, "model")
    with mistakes.check():
        if model is not None and task is not None and "train" in blocks and hasattr(entry.build, "check_train"):
            entry.build.check_train(model, task, blocks["train"])  # what a family needs of the training settings
    with mistakes.check():
        if model is not None and "train" in blocks:
            check_degrok(entry, model, task, blocks["train"], optim)
    with mistakes.check():
        if model is not None and task is not None and "train" in blocks:
            check_seed_stream(entry, task, blocks["train"])
    mistakes.raise_any()
    return TrialConfig(task=task, model=model, optim=optim, train=blocks["train"], phases=blocks["phases"], seed=seed)


def check_degrok(entry, model, task, train: TrainConfig, optim: dict[str, OptimConfig]) -> None:
    """The de-grokking fields need what they act on: a cross-entropy for stablemax, gradients for the rest."""
    name = model.registry_name
    if train.softmax == "stablemax" and not getattr(entry.build, "cross_entropy", lambda m, t: False)(model, task):
        raise SpecError("train.softmax", f"stablemax replaces the softmax of a cross-entropy loss, and model {name!r} "
                        "as configured has none; allowed with: transformer, toy or quadratic with head: "
                        "classification, mlp with loss: cross_entropy")
    if train.loss_dtype == "float64" and not getattr(entry.build, "cross_entropy", lambda m, t: False)(model, task):
        raise SpecError("train.loss_dtype", f"float64 computes a cross-entropy in float64, and model {name!r} as "
                        "configured has none; allowed: model")
    if getattr(entry.build, "trainer", "pack") != "pack":
        if train.weight_norm != "free":
            raise SpecError("train.weight_norm", f"model {name!r} has no weights to hold; allowed: free")
        for group, cfg in optim.items():
            if asked_transforms([cfg]):
                switches = " and ".join(dict.fromkeys(t.switch.name for t in TRANSFORMS.values()))
                raise SpecError(f"optim.{group}", f"model {name!r} is not trained by gradients; {switches} do not "
                                "apply")


def check_seed_stream(entry, task, train: TrainConfig) -> None:
    """train.seed_stream: script continues the init's generator into the split, so it needs a model trained by the
    pack (which draws an init) and a split drawn at random from the trial's seed."""
    if train.seed_stream == "script" and getattr(entry.build, "trainer", "pack") != "pack":
        raise SpecError("train.seed_stream", f"got 'script' with model {entry.name!r}, which draws no initial "
                        "weights to continue from; allowed: per_purpose")
    if train.seed_stream == "script" and not getattr(task, "splits_from_the_seed", False):
        raise SpecError("train.seed_stream", f"got 'script' with task {task.registry_name!r} as configured, whose "
                        "split is not one random draw from the trial's seed; allowed: per_purpose, or script with "
                        "a modular (split_mode: random), addition or permutation task and no split_seed")


def _parse_optim(optim_raw, groups: tuple[str, ...] | None) -> dict[str, OptimConfig]:
    """Every group's OptimConfig (`default` filling each); groups None (the model is unknown): the blocks are
    still checked on their own, so their mistakes are reported beside the model's."""
    if not isinstance(optim_raw, dict):
        raise SpecError("optim", f"expected a mapping of parameter groups, got {optim_raw!r}")
    mistakes = Mistakes()
    for key in optim_raw:
        with mistakes.check():
            if groups is not None and key != "default" and key not in groups:
                raise unknown_key_error("optim", key, ("default", *groups))
    shared = optim_raw.get("default") or {}
    with mistakes.check():
        parse_optim(shared, "optim.default")  # so a mistake there is reported there (once)
    if mistakes:
        shared = {}
    optim = {}
    for g in groups if groups is not None else [k for k in optim_raw if k != "default"]:
        with mistakes.check():
            block = optim_raw.get(g) or {}
            if not isinstance(block, dict):
                raise SpecError(f"optim.{g}", f"expected a mapping of optimizer settings, got {block!r}")
            merged = {**(shared if isinstance(shared, dict) else {}), **block}
            optim[g] = parse_optim(merged, f"optim.{g}")
            optim[g].check_idle(merged, block, g)
    mistakes.raise_any()
    return optim


# -- a pack's members from its first configuration ------------------------------------------------------------------
# The survey (plan/expand.py) parses and checks the configuration at every point once, the driver's one parse each.
# A pack's members share everything but their per-member fields, so each is built from the pack's first
# configuration by setting only the swept keys whose values differ from the first's, each coerced to its field's
# type. The result equals parsing the point (tests/test_plan_members.py holds the two side by side).
def member_config(first: TrialConfig, first_point: dict, point: dict, optim_blocks: dict) -> TrialConfig:
    """The configuration at `point`, from `first` (parsed at `first_point`, in the same pack). `optim_blocks`: the
    spec's optim blocks, so that a swept `optim.default.X` reaches the groups that do not set X themselves."""
    config = copy.deepcopy(first)
    for key, value in point.items():
        if key in first_point and first_point[key] == value and type(first_point[key]) is type(value):
            continue
        set_swept(config, key, value, optim_blocks)
    return config


def set_swept(config: TrialConfig, key: str, value, optim_blocks: dict) -> None:
    """Set dotted `key` of `config` as parse_trial would read it from the spec."""
    if key == "seed":
        config.seed = int(value)
        return
    parts = key.split(".")
    if parts[:2] == ["optim", "default"]:
        for group, cfg in config.optim.items():
            if parts[2] not in (optim_blocks.get(group) or {}):
                _set_leaf(cfg, parts[2:], value, f"optim.{group}.{'.'.join(parts[2:])}")
        return
    head = config.optim[parts[1]] if parts[0] == "optim" else getattr(config, parts[0])
    _set_leaf(head, parts[2:] if parts[0] == "optim" else parts[1:], value, key)


def _set_leaf(obj, path: list[str], value, key: str) -> None:
    for part in path[:-1]:
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    leaf = path[-1]
    if isinstance(obj, dict):
        obj[leaf] = copy.deepcopy(value)
    elif isinstance(obj, OptimConfig) and leaf in obj.methods:
        obj.methods[leaf] = parse_optim({leaf: value}, key.rsplit(".", 1)[0]).methods[leaf]  # its Setting's type
    else:
        fields, hints = fields_and_hints(type(obj))
        setattr(obj, leaf, coerce(hints[leaf], value, key, dict(fields[leaf].metadata)))
