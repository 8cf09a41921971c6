"""The `search:` block of a spec, parsed and validated. Pure: no Optuna, Ray or MLflow here.

```yaml
search:
  space:                                     # any dotted trial field; nested mappings work too
    optim.decoder.lr: {float: [1.0e-4, 1.0e-2], log: true}
    optim.decoder.weight_decay: {float: [0, 10]}
    model.n_layers: {int: [1, 2]}
    optim.decoder.name: {categorical: [adamw, adam]}
  n_trials: 30                               # trials the study should hold (--resume grows it to --n-trials)
  max_concurrent: 2                          # trials running at once
  seed: 0                                    # sampler seed
  objective: time_to_generalize              # or grokking_gap, or [time_to_generalize, grokking_gap]
  penalty: null                              # score of a trial that never generalizes (default 2 x budget)
  sampler: tpe                               # tpe (constant_liar when max_concurrent > 1) or random
  startup: sobol                             # tpe's first trials: a scrambled Sobol' design, or random (Optuna's)
  asha: {grace: 500, reduction_factor: 3}    # optional: prune trials whose val/acc lags at checkpoints
  storage: null                              # journal file path or RDB URL (default: <results>/<study>.journal)
  study: null                                # study name (default: the spec's name)
  enqueue:                                   # optional: settings the study tries first, in order (a paper's
    - {optim.decoder.lr: 1.0e-3}             # published one), each inside the space; unnamed fields are sampled
  confirm: {top: 3, seeds: [100, 101, 102]}  # optional: the best 3 settings re-run at fresh seeds (confirm.py)
```
Every searched field is checked against the spec (a sample point is applied and parsed) before anything starts.
With several `seeds:` a trial trains its configuration at every seed and scores what a majority of them reached
(grokray.objectives: seed_vote).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import SpecError
from ..plan.expand import Member, Pack, Plan
from ..spec.blocks import MAX_CONCURRENT, MAX_TRIALS, check_block, coerce, unknown_key_error
from ..spec.build import TRIAL_KEYS, Spec
from ..spec.rules import check_distinct, check_name
from .confirm import ConfirmConfig, parse_confirm

OBJECTIVES = ("time_to_generalize", "grokking_gap")
SAMPLERS = ("tpe", "random")
STARTUPS = ("sobol", "random")
SEARCH_KEYS = ("space", "n_trials", "max_concurrent", "seed", "objective", "penalty", "sampler", "startup", "asha",
               "storage", "study", "enqueue", "confirm")
DIST_KINDS = ("float", "int", "categorical")


@dataclass(frozen=True)
class Dist:
    """One searched field: float/int in [low, high] (log or linear) or a categorical list."""

    kind: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    choices: tuple = ()

    def describe(self) -> str:
        if self.kind == "categorical":
            return "one of " + ", ".join(map(str, self.choices))
        return f"{self.kind} in [{self.low:g}, {self.high:g}]" + (" (log)" if self.log else "")

    def sample_points(self) -> list:
        """Values used to validate the field before anything starts: both ends, or every choice."""
        if self.kind == "categorical":
            return list(self.choices)
        return [self.low, self.high]

    def grid(self, n: int) -> list:
        """n evenly spaced values (log-spaced for log): the grid baseline of the benchmark."""
        if self.kind == "categorical":
            return list(self.choices)
        if n == 1:
            values = [math.sqrt(self.low * self.high) if self.log else (self.low + self.high) / 2]
        elif self.log:
            a, b = math.log(self.low), math.log(self.high)
            values = [math.exp(a + (b - a) * i / (n - 1)) for i in range(n)]
        else:
            values = [self.low + (self.high - self.low) * i / (n - 1) for i in range(n)]
        if self.kind == "int":
            return sorted({int(round(v)) for v in values})
        return values


@dataclass
class AshaConfig:
    grace: int  # steps before the first rung
    reduction_factor: float = 3.0


@dataclass
class SearchConfig:
    space: dict[str, Dist]
    n_trials: int = 20
    max_concurrent: int = 1
    seed: int = 0
    objective: list[str] = field(default_factory=lambda: ["time_to_generalize"])
    penalty: float = 0.0  # resolved: 2 x budget unless given
    sampler: str = "tpe"
    startup: str = "sobol"  # how tpe's first trials are drawn (search/sampler.py)
    asha: AshaConfig | None = None
    storage: str | None = None
    study: str = ""
    enqueue: list[dict] = field(default_factory=list)  # searched values the study tries first, in order
    confirm: ConfirmConfig | None = None  # the best settings re-run at fresh seeds after the search

    @property
    def log_axes(self) -> list[str]:
        """The searched fields drawn on a log scale: how runs are named and figures scaled."""
        return sorted(k for k, d in self.space.items() if d.log)

    @property
    def multi(self) -> bool:
        return len(self.objective) > 1


def _dist(path: str, raw) -> Dist:
    if not isinstance(raw, dict):
        raise SpecError(path, f"expected {{float: [lo, hi]}}, {{int: [lo, hi]}} or {{categorical: [...]}}, "
                              f"got {raw!r}")
    kinds = [k for k in raw if k in DIST_KINDS]
    if len(kinds) != 1:
        raise SpecError(path, f"expected exactly one of {', '.join(DIST_KINDS)}, got {raw!r}")
    kind = kinds[0]
    allowed = (kind, "log") if kind != "categorical" else (kind,)
    for key in raw:
        if key not in allowed:
            raise unknown_key_error(path, key, allowed)
    arg = raw[kind]
    where = f"{path}.{kind}"
    if kind == "categorical":
        if not isinstance(arg, list) or not arg:
            raise SpecError(where, f"expected a non-empty list of choices, got {arg!r}")
        for i, v in enumerate(arg):
            if not (v is None or isinstance(v, bool | int | float | str)):
                raise SpecError(f"{where}[{i}]", f"choices must be numbers, strings, booleans or null; got {v!r}")
        return Dist("categorical", choices=tuple(check_distinct(arg, where, "choice")))
    if not isinstance(arg, list) or len(arg) != 2:
        raise SpecError(where, f"expected [low, high], got {arg!r}")
    tp = float if kind == "float" else int
    low, high = coerce(tp, arg[0], f"{where}[0]"), coerce(tp, arg[1], f"{where}[1]")
    if not low < high:
        raise SpecError(where, f"got {arg!r}; low must be below high")
    log = coerce(bool, raw.get("log", False), f"{path}.log")
    if log and low <= 0:
        raise SpecError(f"{where}[0]", f"got {arg[0]!r}; a log distribution needs low > 0")
    return Dist(kind, low, high, log)


def _flatten_space(raw: dict, prefix: str = "") -> dict:
    """Dotted keys stay; nested mappings (from -s search.space.a.b=...) are walked down to distributions."""
    out = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            out.update(_flatten_space(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def _parse_space(space_raw, spec: Spec) -> dict[str, Dist]:
    if not isinstance(space_raw, dict) or not space_raw:
        raise SpecError("search.space", f"expected a mapping of dotted field -> distribution, got {space_raw!r}")
    space = {}
    for key, value in _flatten_space(space_raw).items():
        path = f"search.space.{key}"
        if key.split(".")[0] not in TRIAL_KEYS:
            raise unknown_key_error("search.space", key.split(".")[0], TRIAL_KEYS)
        space[key] = _dist(path, value)
    if len(spec.seeds) > 1 and "seed" in space:
        raise SpecError("search.space.seed", f"the spec counts seeds {spec.seeds} in every trial; search over seed "
                                             "only with one seed in seeds:")
    return space


def _parse_objective(given) -> list[str]:
    objective = given if isinstance(given, list) else [given]
    if not objective or len(set(objective)) != len(objective):
        raise SpecError("search.objective", f"got {given!r}; give one objective or a list of distinct ones")
    for i, name in enumerate(objective):
        if name not in OBJECTIVES:
            where = "search.objective" + (f"[{i}]" if isinstance(given, list) else "")
            raise SpecError(where, f"got {name!r}; allowed: {', '.join(OBJECTIVES)}")
    return objective


def _parse_asha(a) -> AshaConfig | None:
    if a is None:
        return None
    if not isinstance(a, dict):
        raise SpecError("search.asha", f"expected {{grace: steps, reduction_factor: 3}}, got {a!r}")
    for key in a:
        if key not in ("grace", "reduction_factor"):
            raise unknown_key_error("search.asha", key, ("grace", "reduction_factor"))
    if "grace" not in a:
        raise SpecError("search.asha.grace", "missing; steps a trial runs before it can be pruned")
    return AshaConfig(coerce(int, a["grace"], "search.asha.grace", {"ge": 1}),
                      coerce(float, a.get("reduction_factor", 3), "search.asha.reduction_factor", {"gt": 1}))


def parse_search(spec: Spec) -> SearchConfig:
    """spec.raw['search'] -> SearchConfig, with every searched field applied to the spec once."""
    raw = spec.raw.get("search")
    if raw is None:
        raise SpecError("search", "missing; `grokray search` needs a search: block with a space (see README)")
    check_block(raw, "search", SEARCH_KEYS)
    space = _parse_space(raw.get("space"), spec)
    n_trials = coerce(int, raw.get("n_trials", 20), "search.n_trials", {"ge": 1, "le": MAX_TRIALS})
    max_concurrent = coerce(int, raw.get("max_concurrent", 1), "search.max_concurrent",
                            {"ge": 1, "le": MAX_CONCURRENT})
    seed = coerce(int, raw.get("seed", 0), "search.seed")
    objective = _parse_objective(raw.get("objective", "time_to_generalize"))
    sampler = raw.get("sampler", "tpe")
    if sampler not in SAMPLERS:
        raise SpecError("search.sampler", f"got {sampler!r}; allowed: {', '.join(SAMPLERS)}")
    startup = raw.get("startup", "sobol")
    if startup not in STARTUPS:
        raise SpecError("search.startup", f"got {startup!r}; allowed: {', '.join(STARTUPS)}")
    if "startup" in raw and sampler != "tpe":
        raise SpecError("search.startup", f"has no effect with sampler: {sampler}; it sets how sampler: tpe starts")
    asha = _parse_asha(raw.get("asha"))
    storage = raw.get("storage")
    if storage is not None and (not isinstance(storage, str) or not storage):
        raise SpecError("search.storage", f"expected a journal file path or an RDB URL, got {storage!r}")
    # a preset's search (smoke) has a study of its own: its journal must not be the one the full search finds
    study = check_name(raw.get("study") or "-".join(filter(None, (spec.name, spec.preset))), "search.study")

    base = start_trial(spec)
    budget = base.phases.budget
    penalty = raw.get("penalty")
    penalty = 2.0 * budget if penalty is None else coerce(float, penalty, "search.penalty")
    if penalty <= budget:
        raise SpecError("search.penalty", f"got {penalty:g}; must exceed phases.budget ({budget}) so a trial that "
                                          "never generalizes ranks below every one that does")
    if asha is not None and asha.grace > base.budget_steps:
        raise SpecError("search.asha.grace", f"got {asha.grace}; must be at most {base.budget_steps} (train.steps cut "
                        "at phases.budget), the last step a trial reaches; or set search.asha: null to prune nothing")
    for key in ("phases.budget", "train.steps", "phases.threshold"):
        if key in space:
            raise SpecError(f"search.space.{key}", "cannot be searched: objectives compare crossing steps under "
                                                    "one budget and threshold")

    cfg = SearchConfig(space=space, n_trials=n_trials, max_concurrent=max_concurrent, seed=seed,
                       objective=objective, penalty=penalty, sampler=sampler, startup=startup, asha=asha,
                       storage=storage, study=study,
                       enqueue=_enqueued(spec, raw.get("enqueue"), space),
                       confirm=parse_confirm(raw.get("confirm"), spec.seeds))
    for key, dist in space.items():  # each searched field must be a real field; every end/choice must parse
        for value in dist.sample_points():
            try:
                trial_config(spec, {key: value})
            except SpecError as exc:
                raise SpecError(f"search.space.{key}", str(exc)) from None
    return cfg


def _enqueued(spec: Spec, raw, space: dict[str, Dist]) -> list[dict]:
    """search.enqueue: a list of {searched field: value}, each value inside its distribution and parsing."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SpecError("search.enqueue", f"expected a list of {{field: value}} mappings, got {raw!r}")
    out = []
    for i, entry in enumerate(raw):
        path = f"search.enqueue[{i}]"
        if not isinstance(entry, dict) or not entry:
            raise SpecError(path, f"expected a mapping of searched fields to values, got {entry!r}")
        values = {}
        for key, value in _flatten_space(entry).items():
            if key not in space:
                raise unknown_key_error(path, key, space)
            dist = space[key]
            if dist.kind == "categorical":
                if value not in dist.choices:
                    raise SpecError(f"{path}.{key}", f"got {value!r}; allowed: {dist.describe()}")
            else:
                value = coerce(float if dist.kind == "float" else int, value, f"{path}.{key}")
                if not dist.low <= value <= dist.high:
                    raise SpecError(f"{path}.{key}", f"got {value:g}; outside the space, {dist.describe()}")
            values[key] = value
        try:
            trial_config(spec, values)
        except SpecError as exc:
            raise SpecError(path, str(exc)) from None
        out.append(values)
    return out


def start_point(spec: Spec) -> dict:
    """The spec's own configuration: its first sweep point (if any) and its first seed."""
    return spec.points()[0]


def start_trial(spec: Spec):
    return spec.trial(start_point(spec))


def search_plan(spec: Spec, n_trials: int) -> Plan:
    """What the cost estimate sees of a search: `n_trials` packs of the start point at every seed (the trials'
    own values are drawn as it runs, so the start point stands for them)."""
    members = [Member(config, {**start_point(spec), "seed": config.seed}) for config in trial_configs(spec, {})]
    return Plan(spec, [Pack(f"trial-{i:04d}", members) for i in range(n_trials)])


def trial_config(spec: Spec, params: dict):
    """A search trial's configuration: the start point with the searched values applied."""
    return spec.trial({**start_point(spec), **params})


def trial_configs(spec: Spec, params: dict) -> list:
    """A search trial's configuration at every seed it is counted over (the spec's seeds, or a searched seed)."""
    seeds = [params["seed"]] if "seed" in params else spec.seeds
    return [spec.trial({**start_point(spec), **params, "seed": seed}) for seed in seeds]
