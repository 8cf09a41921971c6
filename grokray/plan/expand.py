"""Spec -> configurations -> packs -> the packs as plain dicts. Pure: no Ray, no MLflow, testable without a cluster;
what allocates (the memory check and `pack_size: auto`'s probe) is engine.sizing's, asked for by name.

A *pack* is a list of configurations with one `engine.pack_signature` that one Tune trial trains at once.
Each trial receives its pack as plain dicts (`Plan.pack_dicts`) and rebuilds the configurations with
`trial.TrialConfig.from_dict` (no spec rule runs again), so a trial is self-contained: restoring an experiment
needs no spec file.
"""

from __future__ import annotations

import functools
import math
import os
from array import array
from dataclasses import asdict, dataclass, field

from ..engine import max_pack_size, pack_signature
from ..engine.sizing import build_within_probe, fitted_pack_size, local_gpu_free_bytes
from ..errors import SpecError
from ..numbers import short_number
from ..spec.build import Spec
from ..spec.trial import TrialConfig, config_key, member_config

NAME_ALIASES = {"weight_decay": "wd", "train_fraction": "frac", "train_size": "n_train", "init_scale": "init"}


@dataclass
class Member:
    config: TrialConfig
    point: dict  # the swept values of this configuration, {dotted key: value}

    @property
    def key(self) -> str:
        return self.config.key()


@dataclass
class Pack:
    pack_id: str
    members: list[Member]

    @property
    def model_steps(self) -> int:
        return sum(model_steps(m.config) for m in self.members)


@dataclass
class Plan:
    spec: Spec
    packs: list[Pack]
    swept: list[str] = field(default_factory=list)  # dotted keys that vary, in spec order, then "seed"
    gpu_free_bytes: int | None = None  # the GPU memory `pack_size: auto` was sized from (None: CPU rule)

    @property
    def n_configs(self) -> int:
        return sum(len(p.members) for p in self.packs)

    @property
    def model_steps(self) -> int:
        return sum(p.model_steps for p in self.packs)

    def pack_dicts(self) -> list[dict]:
        """Every pack as plain dicts: what one trial receives and rebuilds its configurations from."""
        return [pack_to_dict(p, self.swept, self.spec.log_axes) for p in self.packs]


def model_steps(config: TrialConfig) -> int:
    return config.budget_steps


def swept_keys(spec: Spec) -> list[str]:
    keys = [k for k, v in spec.axes.items() if len(v) > 1]
    if len(spec.seeds) > 1 and "seed" not in keys:
        keys.append("seed")
    return keys


def format_value(value, log: bool = False) -> str:
    """A swept value in a run name: numbers.short_number's way, as the axes write it."""
    return short_number(value, log)


def short_names(keys: list[str], aliases: dict[str, str] = NAME_ALIASES) -> dict[str, str]:
    """Dotted key -> short label: last component (aliased), two components where the last ones collide."""
    def label(k, n):
        parts = k.split(".")
        tail = parts[-n:]
        tail[-1] = aliases.get(tail[-1], tail[-1])
        return ".".join(tail)

    names = {k: label(k, 1) for k in keys}
    for n in (2, 3, 99):
        counts = {}
        for v in names.values():
            counts[v] = counts.get(v, 0) + 1
        clashes = [k for k, v in names.items() if counts[v] > 1]
        if not clashes:
            break
        for k in clashes:
            names[k] = label(k, n)
    return names


def run_name(point: dict, swept: list[str], log_axes=()) -> str:
    """`lr=1e-3 wd=5 seed=0`: the swept values of one configuration (seed always shown)."""
    keys = [k for k in swept if k in point]
    if "seed" not in keys and "seed" in point:
        keys.append("seed")
    names = short_names(keys)
    return " ".join(f"{names[k]}={format_value(point[k], k in log_axes)}" for k in keys) or "base"


def pack_to_dict(pack: Pack, swept: list[str], log_axes=()) -> dict:
    members = []
    for m in pack.members:
        config = m.config.to_dict()
        members.append({"config": config, "key": config_key(config), "name": run_name(m.point, swept, log_axes),
                        "point": dict(m.point)})
    return {"pack_id": pack.pack_id, "members": members}


def _deal(items: list, size: int) -> list[list]:
    """Deal into ceil(n/size) packs of near-equal length (25 by 13 -> 13 + 12), like cards: item i goes to
    pack i % count. Neighbouring points of an axis land in different packs, so the costly corner of a grid
    (members that run to the end of the budget, or none that diverge) is shared out, and the packs on a
    machine's slots finish together instead of leaving cores idle behind the slowest one."""
    count = max(1, math.ceil(len(items) / size))
    return [items[i::count] for i in range(count)]


GPU_PACKS_PER_CARD = 2  # one pack trains while the other reports, checkpoints or starts


def dealing_slots(spec: Spec, slots: int) -> int:
    """How many packs `pack_size: auto` deals a sweep into at least: one per slot on CPUs; on GPUs at most
    GPU_PACKS_PER_CARD a card, however small `resources.gpu` is. Many small packs sharing a card keep it bound by
    kernel launches and process starts (12 packs at 0.08: 27-57 % utilisation, benchmarks/README.md); a few
    large ones give its cores the work."""
    share = spec.resources.gpu
    if share <= 0:
        return slots
    cards = max(1, round(slots * min(1.0, share)))
    return min(slots, cards * GPU_PACKS_PER_CARD)


def pack_size_for(spec: Spec, config: TrialConfig, n: int, slots: int, device: str,
                  gpu_free_bytes: int | None = None) -> int:
    """resources.pack_size, or auto: what fits the device (on a GPU, its share of the card's free memory), but
    dealt into at least `dealing_slots` packs, so every CPU slot, or each card twice, has one."""
    size = spec.resources.pack_size
    if size == "auto":
        slots = dealing_slots(spec, slots)
        frac = min(1.0, spec.resources.gpu) if spec.resources.gpu > 0 else 1.0
        size = fitted_pack_size(config, n, device, frac, gpu_free_bytes)
        size = min(size, max(1, math.ceil(n / max(1, slots))))
        # Whole waves: 3 packs on 2 slots leave a slot idle for the last third, 4 smaller packs do not.
        count = math.ceil(n / size)
        if count > slots and count % slots:
            size = math.ceil(n / (math.ceil(count / slots) * slots))
    cap = max_pack_size(config)
    return max(1, min(size, cap) if cap else size)


def local_slots(spec: Spec, cpus: int | None = None, gpus: float | None = None) -> int:
    """Concurrent trials: CPUs / resources.cpu, and with a GPU share at most GPUs / resources.gpu (gpus None: one
    card). The defaults are this machine's CPUs, for --dry-run and a private local Ray."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    n = int(cpus // spec.resources.cpu)
    if spec.resources.gpu > 0:
        cards = 1.0 if gpus is None else gpus
        n = min(n, math.floor(cards / spec.resources.gpu + 1e-9))  # 1 / 0.1 is 9.999...: ten packs, not nine
    return max(1, n)


@dataclass
class Survey:
    """One pass over every configuration of a spec, keeping per configuration only its index: each is built and
    validated (a bad one is a SpecError before anything starts), grouped by pack signature, and counted into the
    step budget; one configuration per model shape is kept for the memory check and pack sizing. A launch of
    10^5 configurations holds 10^5 integers here, not 10^5 configurations."""

    spec: Spec
    groups: dict[str, list[int]] = field(default_factory=dict)  # pack signature -> point indices, in order
    first: dict[str, TrialConfig] = field(default_factory=dict)  # pack signature -> its first configuration
    shapes: dict[str, TrialConfig] = field(default_factory=dict)  # model x task x batch -> one configuration
    budgets: array = field(default_factory=lambda: array("q"))  # each configuration's step budget, by index
    group_of: array = field(default_factory=lambda: array("q"))  # each configuration's signature, as its ordinal
    ordinal: dict[str, int] = field(default_factory=dict)  # pack signature -> its ordinal (first seen, first)

    @classmethod
    def of(cls, spec: Spec) -> Survey:
        survey = cls(spec)
        for i in range(spec.point_count()):
            config = spec.trial(spec.point(i))
            signature = pack_signature(config)
            if signature not in survey.groups:
                survey.groups[signature], survey.first[signature] = [], config
            survey.groups[signature].append(i)
            survey.group_of.append(survey.ordinal.setdefault(signature, len(survey.ordinal)))
            survey.shapes.setdefault(repr((config.model, config.task, config.train.batch_size)), config)
            survey.budgets.append(config.budget_steps)
        return survey

    @functools.cached_property
    def signatures(self) -> list[str]:
        """The pack signatures by ordinal (group_of's numbers)."""
        return list(self.ordinal)

    @property
    def budget_steps(self) -> int:
        return sum(self.budgets)

    def work(self, packs: list[tuple[str, list[int]]]) -> float:
        """Member-steps the packs train at most: a pack runs until its longest budget."""
        return float(sum(len(indices) * max(self.budgets[i] for i in indices) for _, indices in packs))

    @property
    def n_configs(self) -> int:
        return sum(len(g) for g in self.groups.values())

    def packs(self, slots: int, gpu_free_bytes: int | None = None) -> list[tuple[str, list[int]]]:
        """(pack id, point indices) of every pack: each signature's indices dealt into packs of its size."""
        out = []
        for signature, indices in self.groups.items():
            size = pack_size_for(self.spec, self.first[signature], len(indices), slots, self.spec.resources.device,
                                 gpu_free_bytes)
            out += [(f"pack-{len(out) + k:04d}", chunk) for k, chunk in enumerate(_deal(indices, size))]
        return out

    def pack(self, pack_id: str, indices: list[int]) -> Pack:
        """One pack, its members built from their signature's first configuration and their points (no parse:
        the survey parsed each already; spec/trial.member_config)."""
        points = [self.spec.point(i) for i in indices]
        signature = self.signatures[self.group_of[indices[0]]]
        first, first_point = self.first[signature], self.spec.point(self.groups[signature][0])
        blocks = self.spec.base.get("optim") or {}
        return Pack(pack_id, [Member(member_config(first, first_point, p, blocks), p) for p in points])

    def pack_dicts(self, packs: list[tuple[str, list[int]]]):
        """Each pack as the plain dict a trial receives, built one pack at a time (a generator): the launch writes
        it out and drops it before the next is built."""
        swept = swept_keys(self.spec)
        for pack_id, indices in packs:
            yield pack_to_dict(self.pack(pack_id, indices), swept, self.spec.log_axes)


def expand(spec: Spec, slots: int | None = None, gpu_free_bytes: int | None = None) -> Plan:
    """Every configuration of the spec (validated), grouped by pack signature, chunked into packs, in memory:
    what --dry-run and the estimate read. (A launch streams the same packs from its Survey instead.)
    gpu_free_bytes: free memory of the GPUs the packs will run on, for `pack_size: auto` (None: see sizing)."""
    slots = slots if slots is not None else local_slots(spec)
    if spec.resources.device == "cuda" and gpu_free_bytes is None and spec.resources.pack_size == "auto":
        gpu_free_bytes = local_gpu_free_bytes()  # --dry-run on a GPU machine: this card's free memory
    survey = Survey.of(spec)
    packs = [survey.pack(pack_id, indices) for pack_id, indices in survey.packs(slots, gpu_free_bytes)]
    return Plan(spec=spec, packs=packs, swept=swept_keys(spec), gpu_free_bytes=gpu_free_bytes)


def n_configs(spec: Spec) -> int:
    """Configurations the spec expands to, without building them."""
    return math.prod(len(v) for v in spec.axes.values()) * len(spec.seeds)


STEP_FLOOR_S = 1e-5  # no configuration trains a step faster than this, on any device: a lower bound to refuse by
MAX_FLOOR_DAYS = 7


def check_budget(steps: int, yes: bool = False) -> None:
    """Refuse (unless `yes`) a launch of `steps` training steps in all that cannot finish within MAX_FLOOR_DAYS
    even at STEP_FLOOR_S a step: a typo like `train.steps: 1e15` costs nothing."""
    days = steps * STEP_FLOOR_S / 86400
    if not yes and days > MAX_FLOOR_DAYS:
        raise SpecError("train.steps", f"{steps:.3g} training steps in all (train.steps, capped by phases.budget) "
                        f"would take at least {days:,.0f} days even at {STEP_FLOOR_S * 1e6:g} us a step, more than "
                        f"{MAX_FLOOR_DAYS}; lower train.steps or phases.budget, or rerun with --yes")


def check_fits(spec: Spec, configs, most: int = 8) -> None:
    """Each distinct model and task of the launch (the `most` widest) is built once, under the probe's memory cap
    (engine.sizing.build_within_probe), before Ray starts or any store is opened: one that cannot fit is refused
    with the field to change. A GPU launch is checked on its card, when its packs are sized."""
    if spec.resources.gpu > 0:
        return
    shapes: dict[str, TrialConfig] = {}
    for c in configs:  # the dataclasses' reprs: cheap for a sweep of 1e5 configurations
        shapes.setdefault(repr((c.model, c.task, c.train.batch_size)), c)

    def width(c: TrialConfig) -> float:
        values = list(asdict(c.model).values())
        values += [x for v in values if isinstance(v, list | tuple) for x in v]
        return sum(abs(x) for x in values if isinstance(x, int | float) and not isinstance(x, bool))

    for config in sorted(shapes.values(), key=width, reverse=True)[:most]:
        build_within_probe(config)


def check_size(spec: Spec, limit: int | None) -> int:
    """The expansion's size, or a SpecError when it exceeds `limit` (None: no limit)."""
    n = n_configs(spec)
    if limit is not None and n > limit:
        raise SpecError("sweep", f"expands to {n} configurations, more than the limit {limit}; "
                        f"rerun with --yes to run them all (or raise --max-configs)")
    return n
