"""The YAML spec: load safely, apply overrides, validate everything, expand the sweep into trial configs.

A *trial config* (grokray/spec/trial.py) is one fully resolved configuration (task, model, optim groups, train, phases,
seed). A *spec* is a base trial config plus sweep axes, seeds, resources and presets. Every point of the sweep is
parsed here, so a typo anywhere fails before any trial starts."""

from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import yaml

from ..errors import Mistakes, SpecError
from .blocks import MAX_CPUS, MAX_PACK, bounded, coerce, parse_dataclass, unknown_key_error
from .file import read_yaml
from .keys import (
    AXIS_KINDS,
    MAX_AXIS_POINTS,
    PRESETS,
    SCALES,
    SEED_RANGE,
    SPEC_KEYS,
    TRIAL_KEYS,
    UNHASHED_KEYS,
)
from .overrides import PlainDumper, apply_preset, check_top, parse_value, set_dotted, set_override
from .rules import check_distinct, check_name
from .trial import TrialConfig, parse_trial


@dataclass
class ResourcesConfig:
    cpu: float = bounded(1.0, gt=0.0, le=MAX_CPUS)
    gpu: float = bounded(0.0, ge=0.0)
    pack_size: int | Literal["auto"] = "auto"

    @property
    def device(self) -> str:
        """The one device rule: a pack asks for a GPU share, so it trains on CUDA."""
        return device_for(self.gpu)

    def validate(self, path):
        if isinstance(self.pack_size, int) and not 1 <= self.pack_size <= MAX_PACK:
            raise SpecError(f"{path}.pack_size", f"got {self.pack_size:,}; must be 1..{MAX_PACK:,} or 'auto'")


def device_for(gpu: float) -> str:
    return "cuda" if gpu > 0 else "cpu"


@dataclass
class ArtifactsConfig:
    """What a sweep stores beside the metrics. final_state: each configuration's final parameters (rfm: its
    feature matrix M) as the artifact final_state.pt of its child run (tensors only; read by analysis.artifacts).
    Finished members then stay in their pack's stacked tensors until the pack ends (no compaction)."""

    final_state: bool = False


def axis_values(path: str, axis) -> list:
    """One sweep axis -> its list of values. `logspace: [a, b, n]` is 10**a .. 10**b like numpy."""
    if not isinstance(axis, dict) or len(axis) != 1 or next(iter(axis)) not in AXIS_KINDS:
        raise SpecError(path, f"expected one of {{{', '.join(k + ': ...' for k in AXIS_KINDS)}}}, got {axis!r}")
    kind, arg = next(iter(axis.items()))
    where = f"{path}.{kind}"
    if kind == "values":
        if not isinstance(arg, list) or not arg:
            raise SpecError(where, f"expected a non-empty list, got {arg!r}")
        if len(arg) > MAX_AXIS_POINTS:
            raise SpecError(where, f"has {len(arg)} values; at most {MAX_AXIS_POINTS} on one axis")
        return check_distinct(list(arg), where)
    if not isinstance(arg, list) or len(arg) != 3:
        raise SpecError(where, f"expected [start, stop, {'step' if kind == 'range' else 'num'}], got {arg!r}")
    start, stop = coerce(float, arg[0], f"{where}[0]"), coerce(float, arg[1], f"{where}[1]")
    if kind == "range":
        step = coerce(float, arg[2], f"{where}[2]")
        if step == 0 or (stop - start) / step < 0:
            raise SpecError(f"{where}[2]", f"got {arg[2]!r}; step must move from start towards stop")
        if (stop - start) / step > MAX_AXIS_POINTS:
            raise SpecError(where, f"{arg!r} has {(stop - start) / step:.3g} points; at most {MAX_AXIS_POINTS}")
        values = list(np.arange(start, stop, step))
        if not values:
            raise SpecError(where, f"{arg!r} is empty")
        return [
            int(v) if float(v).is_integer() and all(float(a).is_integer() for a in arg) else float(v) for v in values
        ]
    num = coerce(int, arg[2], f"{where}[2]", {"ge": 1})
    if num < 1:
        raise SpecError(f"{where}[2]", f"got {num}; need at least 1 point")
    if num > MAX_AXIS_POINTS:
        raise SpecError(f"{where}[2]", f"got {num}; at most {MAX_AXIS_POINTS} points on one axis")
    fn = np.linspace if kind == "linspace" else np.logspace
    return [float(v) for v in fn(start, stop, num)]


@dataclass
class Spec:
    name: str
    raw: dict  # the resolved spec as a dict (after overrides and scale), for logging
    base: dict  # the trial part of raw
    axes: dict[str, list]
    seeds: list[int]
    resources: ResourcesConfig
    log_axes: set[str] = field(default_factory=set)
    artifacts: ArtifactsConfig = field(default_factory=ArtifactsConfig)
    notes: list[str] = field(default_factory=list)  # what the overrides did beyond setting a field (pinned axes)
    preset: str = ""  # the scale whose preset changed the spec (smoke, reduced); a search names its study by it

    def points(self) -> list[dict]:
        """Every swept point as {dotted key: value}, seeds last (so seeds of one point are neighbours)."""
        return [self.point(i) for i in range(self.point_count())]

    def point_count(self) -> int:
        return math.prod(len(v) for v in self.axes.values()) * len(self.seeds)

    def point(self, index: int) -> dict:
        """points()[index] without building the others (a launch holds indices): the last axis varies fastest."""
        index, s = divmod(index, len(self.seeds))
        at = np.unravel_index(index, [len(v) for v in self.axes.values()]) if self.axes else ()
        return {**{k: v[int(j)] for (k, v), j in zip(self.axes.items(), at, strict=True)}, "seed": self.seeds[s]}

    def trial(self, point: dict) -> TrialConfig:
        raw = copy.deepcopy(self.base)
        for key, value in point.items():
            set_dotted(raw, key, value)
        return parse_trial(raw)

    def trials(self) -> list[TrialConfig]:
        return [self.trial(p) for p in self.points()]

    def first_trial(self) -> TrialConfig:
        return self.trial(self.point(0))

    def yaml(self) -> str:
        """The resolved spec as YAML, without anchors: a preset that reuses a value (`&id001`, `*id001`) reads as
        written out in full, in the parent's description and its spec artifact."""
        return yaml.dump(self.raw, Dumper=PlainDumper, sort_keys=False)

    def hash(self) -> str:
        """Identity of what the spec trains (after presets and overrides): how a resume or the atlas finds it."""
        content = {k: v for k, v in self.raw.items() if k not in UNHASHED_KEYS}
        return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:12]


def build_spec(
    raw: dict, overrides: list[str] | tuple = (), scale: str | None = None, default_name: str = "grokray",
    presets: tuple[tuple[str, dict], ...] = (),
) -> Spec:
    """scale: "smoke" or "reduced" applies that preset of the spec ("paper" or None: the spec as written).
    presets: further (where, overrides) pairs applied after the scale and before the -s overrides."""
    raw = copy.deepcopy(raw)
    mistakes = Mistakes()  # independent checks: a spec with three typos reports three lines
    for key in list(raw):
        with mistakes.check():
            if key not in SPEC_KEYS:
                raw.pop(key)
                raise unknown_key_error("", key, SPEC_KEYS)
    if scale is not None and scale not in SCALES:
        raise SpecError("--scale", f"got {scale!r}; allowed: {', '.join(SCALES)}")
    if scale in PRESETS or presets:  # the spec's own fields first: a preset must not hide a mistake in them
        with mistakes.check():
            parse_trial({k: raw[k] for k in TRIAL_KEYS[:-1] if k in raw})
    if scale in PRESETS:
        if scale not in raw:
            declared = [p for p in PRESETS if p in raw]
            raise SpecError("--scale", f"the spec has no {scale}: preset; it declares: "
                            f"{', '.join(declared) or 'none'} (and paper, the spec itself)")
        with mistakes.check():
            apply_preset(raw, raw[scale] or {}, scale)
    for where, preset in presets:
        with mistakes.check():
            apply_preset(raw, preset, where)
    notes = []
    for item in overrides:
        with mistakes.check():
            if "=" not in item:
                raise SpecError("-s", f"got {item!r}; expected key=value, e.g. optim.decoder.lr=3e-4")
            key, text = item.split("=", 1)
            check_top(key.strip(), "-s")
            pinned = set_override(raw, key.strip(), parse_value(text))
            if pinned:
                notes.append(f"-s {key.strip()}={text} pins the {pinned}")
    name = raw.get("name", default_name)
    with mistakes.check():
        check_name(name, "name")
    seeds = [0]
    with mistakes.check():
        given = raw.get("seeds", [0]) if isinstance(raw.get("seeds", [0]), list) else [raw["seeds"]]
        seeds = check_distinct(coerce(list[int], given, "seeds", SEED_RANGE), "seeds", "seed")
        if not seeds:
            raise SpecError("seeds", "expected at least one seed")
    resources, artifacts = ResourcesConfig(), ArtifactsConfig()
    with mistakes.check():
        resources = parse_dataclass(ResourcesConfig, raw.get("resources") or {}, "resources")
    with mistakes.check():
        artifacts = parse_dataclass(ArtifactsConfig, raw.get("artifacts"), "artifacts")
    sweep = raw.get("sweep") or {}
    with mistakes.check():
        if not isinstance(sweep, dict):
            sweep = {}
            raise SpecError("sweep", f"expected a mapping of dotted field -> axis, got {raw.get('sweep')!r}")
    axes = {}
    for key, axis in sweep.items():
        with mistakes.check():
            axes[key] = axis_values(f"sweep.{key}", axis)
    if "seed" in axes:  # seeds are the innermost axis (packed as neighbours); one way to say them, not two
        with mistakes.check():
            if "seeds" in raw:
                raise SpecError("sweep.seed", "the seeds are given twice: keep either `seeds: [...]` or `sweep.seed`")
            seeds = check_distinct(coerce(list[int], axes.pop("seed"), "sweep.seed", SEED_RANGE), "sweep.seed", "seed")
        axes.pop("seed", None)
    log_axes = {key for key, axis in sweep.items() if isinstance(axis, dict) and "logspace" in axis}
    base = {k: raw[k] for k in TRIAL_KEYS[:-1] if k in raw}
    spec = Spec(name=name, raw=raw, base=base, axes=axes, seeds=seeds, resources=resources, log_axes=log_axes,
                artifacts=artifacts, notes=notes, preset=scale if scale in PRESETS and raw.get(scale) else "")
    with mistakes.check():
        parse_trial(base)  # the base itself must be valid
    _check_axes(spec, mistakes, {str(e) for e in mistakes.errors})
    mistakes.raise_any()
    return spec


def _check_axes(spec: Spec, mistakes: Mistakes, reported: set[str]) -> None:
    """Each axis must name a real field and every value must be valid. An axis is first tried alone on the base,
    so a typo in one axis is reported under that axis; its values then with the first value of every good axis.
    `reported`: the base's own mistakes, which every trial repeats and which are not the axis's."""

    def attempt(key: str, point: dict) -> bool:
        try:
            spec.trial(point)
        except SpecError as exc:
            own = [SpecError(f"sweep.{key}", str(e)) for e in exc.errors if str(e) not in reported]
            if own:
                mistakes.errors += own
            return not own
        return True

    good = {}
    for key, values in spec.axes.items():
        if key.split(".")[0] not in TRIAL_KEYS:
            with mistakes.check():
                raise unknown_key_error("sweep", key.split(".")[0], TRIAL_KEYS)
        elif attempt(key, {key: values[0]}):
            good[key] = values
    first = {k: v[0] for k, v in good.items()}
    for key, values in good.items():
        for value in values[1:]:
            attempt(key, {**first, key: value})


def load_spec(path: str | Path, overrides=(), scale: str | None = None) -> Spec:
    return build_spec(read_yaml(path), overrides, scale, default_name=Path(path).stem)
