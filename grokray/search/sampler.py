"""The study's sampler: seeded TPE after a space-filling start, or plain random search. Optuna only.

TPE models the space from the trials it has seen, so its first few trials decide where it looks. Optuna draws
them uniformly at random, which in a small study can put all of them in one corner: the degrok_toy search's
first six draws all landed at decoder weight decay 6.4-9.3, all confusion, and its 6-trial study found nothing.
A scrambled Sobol' design (`search.startup: sobol`, the default) spreads the same number of trials over every
searched axis at once; `startup: random` is Optuna's own start.
"""

from __future__ import annotations

import math

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from scipy.stats import qmc

from .config import SearchConfig


def startup_trials(cfg: SearchConfig) -> int:
    """Trials drawn before TPE models the space: Optuna's 10 would be most of a small budget."""
    return min(10, max(3, cfg.n_trials // 4))


def from_unit(dist: BaseDistribution, u: float):
    """The value at quantile `u` in [0, 1) of a distribution's range (log ranges in log space)."""
    if isinstance(dist, CategoricalDistribution):
        return dist.choices[min(int(u * len(dist.choices)), len(dist.choices) - 1)]
    if isinstance(dist, IntDistribution):
        lo, hi = dist.low - 0.5, dist.high + 0.5  # each integer gets its share of the range
        if dist.log:  # log ints have low >= 1
            lo, hi = math.log(lo), math.log(hi)
        x = lo + u * (hi - lo)
        return min(dist.high, max(dist.low, round(math.exp(x) if dist.log else x)))
    assert isinstance(dist, FloatDistribution)
    if dist.log:
        return min(dist.high, math.exp(math.log(dist.low) + u * (math.log(dist.high) - math.log(dist.low))))
    return min(dist.high, dist.low + u * (dist.high - dist.low))


class SobolStart(optuna.samplers.BaseSampler):
    """Trial number i < n takes point i of a scrambled Sobol' design over `space` (seeded, so a resumed study
    continues the same design); every later trial is `then`'s (TPE)."""

    def __init__(self, space: dict[str, BaseDistribution], n: int, seed: int, then: optuna.samplers.BaseSampler):
        self.space, self.n, self.then = dict(space), n, then
        bits = max(1, math.ceil(math.log2(max(n, 2))))  # a power of two keeps the design balanced; n are used
        self.points = qmc.Sobol(len(space), scramble=True, seed=seed).random_base2(bits)[:n] if space else []

    def _designed(self, trial) -> bool:
        return trial.number < self.n and bool(self.space)

    def infer_relative_search_space(self, study, trial):
        return dict(self.space) if self._designed(trial) else self.then.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        if not self._designed(trial):
            return self.then.sample_relative(study, trial, search_space)
        point = self.points[trial.number]
        return {name: from_unit(dist, float(u)) for (name, dist), u in zip(self.space.items(), point, strict=True)
                if name in search_space}

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.then.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial):
        self.then.before_trial(study, trial)

    def after_trial(self, study, trial, state, values):
        self.then.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.then.reseed_rng()


def distributions(cfg: SearchConfig) -> dict[str, BaseDistribution]:
    """The searched fields as Optuna distributions, in the spec's order."""
    out = {}
    for key, d in cfg.space.items():
        if d.kind == "float":
            out[key] = FloatDistribution(d.low, d.high, log=d.log)
        elif d.kind == "int":
            out[key] = IntDistribution(d.low, d.high, log=d.log)
        else:
            out[key] = CategoricalDistribution(list(d.choices))
    return out


def make_sampler(cfg: SearchConfig, offset: int = 0):
    """The study's sampler. `offset` (the trials already in a resumed study) shifts the random seed, so a resumed
    random sampler does not replay the points it drew before; the start-up design is indexed by trial number."""
    seed = cfg.seed + offset
    if cfg.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    n = startup_trials(cfg)
    tpe = optuna.samplers.TPESampler(seed=seed, n_startup_trials=n, constant_liar=cfg.max_concurrent > 1,
                                     multivariate=True)
    return SobolStart(distributions(cfg), n, cfg.seed, tpe) if cfg.startup == "sobol" else tpe
