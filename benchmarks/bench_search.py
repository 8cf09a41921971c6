"""Optuna TPE vs random search vs a grid, at the same trial budget, on the toy de-grokking problem (issue 7).

The problem is sweeps/degrok_toy.yaml (Liu's toy on addition p=10, seed 1, grokking start: decoder lr 1e-4,
weight decay 5), searched over the plane of Liu Fig. 6b (decoder lr x decoder weight decay) at a reduced budget.
Each method gets the same number of trials; the objective is `time_to_generalize` (2 x budget if a trial never
generalizes), minimised. TPE and random run with sampler seeds 0, 1, 2 (the grid has no seed: one value).

The samplers are the ones `grokray search` builds (`search/sampler.make_sampler`) and each trial is the same one-member
training as in a search (`engine.run_trial`), but trials run in this process, one after another: the comparison
is about the samplers, and Ray/MLflow overheads would only add noise on a 2-core machine.

    .venv/bin/python benchmarks/bench_search.py --steps 3000 --trials 16      # ~10 min on 2 quiet cores
    .venv/bin/python benchmarks/bench_search.py --only tpe --seeds 0          # one method, one seed
    .venv/bin/python benchmarks/bench_search.py --only tpe tpe-random         # TPE's Sobol' start against random
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import platform
import statistics
import time
from pathlib import Path

import optuna

from grokray.engine import run_trial
from grokray.objectives import objective_values
from grokray.search.config import parse_search, start_trial, trial_config
from grokray.search.sampler import distributions, make_sampler
from grokray.spec.build import load_spec

ROOT = Path(__file__).resolve().parents[1]
METHODS = ["tpe", "tpe-random", "random", "grid"]  # tpe-random: TPE with Optuna's random start-up trials
SPACE = ("search.space={optim.decoder.lr: {float: [1.0e-4, 1.0e-2], log: true}, "
         "optim.decoder.weight_decay: {float: [0.0, 10.0]}}")


def evaluate(spec, cfg, params: dict, cache: dict) -> tuple[float, str]:
    config = trial_config(spec, params)
    key = config.key()
    if key not in cache:
        r = run_trial(config)
        cache[key] = (objective_values(cfg.objective, r.phase, r.step_train, r.step_val, cfg.penalty)[0], r.phase)
    return cache[key]


def run_sampler(spec, cfg, method: str, seed: int, n: int) -> list[float]:
    """method: tpe (its Sobol' start-up, grokray's default), tpe-random (Optuna's random start-up) or random."""
    cfg.sampler, cfg.seed = method.split("-")[0], seed
    cfg.startup = "random" if method == "tpe-random" else "sobol"
    study = optuna.create_study(direction="minimize", sampler=make_sampler(cfg))
    dists = distributions(cfg)
    values, cache = [], {}
    for _ in range(n):
        trial = study.ask(dists)
        value, _ = evaluate(spec, cfg, trial.params, cache)
        study.tell(trial, value)
        values.append(value)
    return values


def run_grid(spec, cfg, n: int) -> list[float]:
    per_axis = max(1, round(n ** (1 / len(cfg.space))))
    axes = {k: d.grid(per_axis) for k, d in cfg.space.items()}
    points = [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())][:n]
    cache = {}
    return [evaluate(spec, cfg, p, cache)[0] for p in points]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000, help="train.steps = phases.budget")
    parser.add_argument("--trials", type=int, default=16, help="trials per method (the grid: per-axis^2)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="sampler seeds")
    parser.add_argument("--only", choices=METHODS, nargs="+", default=None)
    parser.add_argument("--json", default=None, help="write the raw results here")
    args = parser.parse_args()

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = load_spec(ROOT / "sweeps" / "degrok_toy.yaml",
                     ["seeds=[1]",  # the samplers are compared on one split (the results below were seed 1's)
                      f"train.steps={args.steps}", f"phases.budget={args.steps}", SPACE,
                      f"search.n_trials={args.trials}"])
    cfg = parse_search(spec)
    t0 = time.time()
    start = run_trial(start_trial(spec))
    start_value = objective_values(cfg.objective, start.phase, start.step_train, start.step_val, cfg.penalty)[0]
    print(f"start (decoder lr 1e-4, wd 5, seed 1): {start.phase}, time_to_generalize {start_value:g} "
          f"(budget {args.steps}, penalty {cfg.penalty:g})", flush=True)

    out = {"steps": args.steps, "trials": args.trials, "start": start_value, "methods": {}}
    for method in args.only or METHODS:
        runs = []
        for seed in args.seeds if method != "grid" else [None]:
            t = time.time()
            values = run_grid(spec, cfg, args.trials) if method == "grid" else run_sampler(
                spec, cfg, method, seed, args.trials)
            best = min(values)
            runs.append({"seed": seed, "best": best, "values": values, "seconds": time.time() - t,
                         "generalized": sum(v < cfg.penalty for v in values)})
            print(f"{method:10s} seed {seed}: best {best:g}, {runs[-1]['generalized']}/{len(values)} generalized, "
                  f"trace {[int(v) for v in values]} ({time.time() - t:.0f} s)", flush=True)
        out["methods"][method] = runs

    print("\n| method | trials | best time_to_generalize per seed | median | generalized (median) |")
    print("|---|---|---|---|---|")
    for method, runs in out["methods"].items():
        bests = [r["best"] for r in runs]
        print(f"| {method} | {len(runs[0]['values'])} | {', '.join(f'{b:g}' for b in bests)} | "
              f"{statistics.median(bests):g} | {statistics.median(r['generalized'] for r in runs):g} |")
    print(f"\nstart configuration: {start_value:g}; total {time.time() - t0:.0f} s on {platform.node()} "
          f"({platform.machine()}, torch threads 1)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=lambda v: None if v is None or (
            isinstance(v, float) and math.isnan(v)) else str(v)))


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    main()
