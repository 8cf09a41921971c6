"""Adaptive phase diagram vs the full grid on the quickstart problem (Liu's toy model, decoder lr x weight decay).

Both use the same target lattice (`grokray.plan.lattice`: lr = logspace(-4, -2, N), wd = linspace(0, 10, N),
N = 17 by default) and the same reduced training budget (`--steps`, for both). The trials are trained with the
core engine directly (`grokray.engine.PackTrainer`, one pack per chunk, `--workers` processes), not Ray: the
point here is which trials are run, and that is decided by the same pure function the sweep uses
(`adaptive.next_points`), round by round.

Both train in float64 by default (`--dtype`): in float32 a few boundary trials flip phase with the pack they
are trained in (the float32 and float64 17x17 references differ on 8 of 289 cells), which is noise in the
ground truth rather than a property of the refinement.

The full-grid reference is trained once and stored in benchmarks/data/ (the output says when it was reused;
`--fresh` retrains it). Reported: trials used, the fraction of lattice cells whose majority phase agrees with
the full grid (adaptive diagram = nearest-sampled-point fill, `adaptive.fill`), and wall times.

    .venv/bin/python benchmarks/bench_adaptive.py [--n 17] [--steps 2000] [--budget-frac 0.4] [--workers 2]
                                                  [--dtype float64|float32]
    .venv/bin/python benchmarks/bench_adaptive.py --replay     # adaptive rounds on the stored phases, no training
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"
DATA = ROOT / "benchmarks" / "data"
SUFFIX = {"float32": "", "float64": "_float64"}  # stored files: the float32 ones came first


def make_spec(n: int, steps: int, budget: int | None, start: int = 5, dtype: str = "float32"):
    from grokray.spec.build import build_spec, read_yaml

    raw = read_yaml(QUICKSTART)
    raw["adaptive"] = {"axes": ["optim.decoder.lr", "optim.decoder.weight_decay"], "start": [start, start],
                       "target": [n, n], "budget": budget}
    # seed 1 alone: the stored full-grid reference (benchmarks/data) was trained when the quickstart had one seed
    return build_spec(raw, [f"train.steps={steps}", f"phases.budget={steps}", f"train.dtype={dtype}", "seeds=[1]"],
                      default_name="quickstart")


def _train_chunk(args) -> list[str]:
    import torch

    from grokray.engine import PackTrainer
    from grokray.plan.lattice import parse_adaptive, trial_point

    n, steps, trials, dtype = args
    torch.set_num_threads(1)
    spec = make_spec(n, steps, None, dtype=dtype)
    plan = parse_adaptive(spec)
    trainer = PackTrainer([spec.trial(trial_point(plan, tuple(t))) for t in trials])
    trainer.run()
    return [r.phase for r in trainer.results()]


def train(n: int, steps: int, trials: list, workers: int, dtype: str) -> dict:
    """{(i, j, seed): phase} for `trials`, in `workers` packs trained in parallel processes."""
    if not trials:
        return {}
    k = max(1, min(workers, len(trials)))
    chunks = [trials[c::k] for c in range(k)]
    if k == 1:
        outs = [_train_chunk((n, steps, chunks[0], dtype))]
    else:
        with ProcessPoolExecutor(k) as pool:
            outs = list(pool.map(_train_chunk, [(n, steps, c, dtype) for c in chunks]))
    return {tuple(t): p for c, o in zip(chunks, outs, strict=True) for t, p in zip(c, o, strict=True)}


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform(terse=True)}"


def reference(n: int, steps: int, workers: int, fresh: bool, dtype: str) -> tuple[dict, dict]:
    from grokray.plan.lattice import parse_adaptive

    path = DATA / f"adaptive_reference_{n}x{n}_steps{steps}{SUFFIX[dtype]}.json"
    if path.exists() and not fresh:
        stored = json.loads(path.read_text())
        phases = {tuple(t): p for t, p in stored["phases"]}
        return phases, {**stored["meta"], "reused": str(path.relative_to(ROOT))}
    plan = parse_adaptive(make_spec(n, steps, None, dtype=dtype))
    trials = [(i, j, s) for i in range(n) for j in range(n) for s in plan.seeds]
    t0 = time.time()
    phases = train(n, steps, trials, workers, dtype)
    meta = {"wall_s": time.time() - t0, "trials": len(trials), "date": time.strftime("%Y-%m-%d"),
            "machine": machine(), "workers": workers}
    DATA.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "phases": [[list(t), p] for t, p in sorted(phases.items())]}))
    return phases, {**meta, "reused": None, "stored": str(path.relative_to(ROOT))}


def adaptive(n: int, steps: int, budget: int, workers: int, lookup: dict | None, start: int = 5,
             dtype: str = "float32") -> dict:
    """Rounds of next_points -> train (or look up, with --replay) until nothing is proposed."""
    from grokray.plan.lattice import parse_adaptive
    from grokray.plan.refine import next_points

    plan = parse_adaptive(make_spec(n, steps, budget, start, dtype))
    observed: dict = {}
    rounds = []
    t0 = time.time()
    while True:
        ref = next_points(plan, observed)
        if not ref.trials:
            break
        t1 = time.time()
        got = {t: lookup[t] for t in ref.trials} if lookup is not None else train(n, steps, ref.trials, workers, dtype)
        for (i, j, s), p in got.items():
            observed.setdefault((i, j), {})[s] = p
        rounds.append({"trials": len(ref.trials), "cells": len(ref.cells), "skipped": ref.skipped,
                       "wall_s": round(time.time() - t1, 1)})
    return {"plan": plan, "observed": observed, "rounds": rounds, "wall_s": time.time() - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=17, help="target lattice points per axis (2^k*4+1)")
    ap.add_argument("--steps", type=int, default=2000, help="train.steps = phases.budget, for both runs")
    ap.add_argument("--budget-frac", type=float, default=0.4, help="adaptive trial budget / full grid")
    ap.add_argument("--start", type=int, default=5, help="adaptive start grid points per axis")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dtype", choices=list(SUFFIX), default="float64",
                    help="train.dtype of both runs (float64: a trial's phase does not depend on its pack)")
    ap.add_argument("--replay", action="store_true", help="adaptive phases looked up in the stored reference")
    ap.add_argument("--fresh", action="store_true", help="retrain the full-grid reference")
    ap.add_argument("--reference-only", action="store_true")
    ap.add_argument("--adaptive-out", default=None, metavar="JSON",
                    help="only run the adaptive rounds (trained) and store them here (to run beside the reference)")
    ap.add_argument("--adaptive-in", default=None, metavar="JSON", help="compare a stored --adaptive-out run")
    args = ap.parse_args(argv)
    full_n = args.n * args.n  # one seed (make_spec's)
    if args.adaptive_out:
        res = adaptive(args.n, args.steps, int(args.budget_frac * full_n), args.workers, None, args.start, args.dtype)
        Path(args.adaptive_out).write_text(json.dumps({
            "observed": [[i, j, s, p] for (i, j), v in sorted(res["observed"].items()) for s, p in v.items()],
            "rounds": res["rounds"], "wall_s": res["wall_s"], "date": time.strftime("%Y-%m-%d"),
            "machine": machine(), "workers": args.workers}))
        print(f"adaptive: {sum(len(v) for v in res['observed'].values())} trials, {res['wall_s']:.0f} s, "
              f"stored in {args.adaptive_out}")
        return 0

    import numpy as np

    from grokray.plan.refine import fill, majority

    ref, meta = reference(args.n, args.steps, args.workers, args.fresh, args.dtype)
    full = len(ref)
    how = f"reused from {meta['reused']}" if meta.get("reused") else f"trained now, stored in {meta['stored']}"
    print(f"full grid {args.n}x{args.n}: {full} trials, {meta['wall_s']:.0f} s ({how}; {meta['date']}, "
          f"{meta['machine']}, {meta['workers']} workers)")
    if args.reference_only:
        return 0
    budget = int(args.budget_frac * full)
    if args.adaptive_in:
        from grokray.plan.lattice import parse_adaptive

        stored = json.loads(Path(args.adaptive_in).read_text())
        observed: dict = {}
        for i, j, s, p in stored["observed"]:
            observed.setdefault((i, j), {})[s] = p
        plan = parse_adaptive(make_spec(args.n, args.steps, budget, args.start, args.dtype))
        res = {"plan": plan, "observed": observed, "rounds": stored["rounds"], "wall_s": stored["wall_s"]}
    else:
        res = adaptive(args.n, args.steps, budget, args.workers, ref if args.replay else None, args.start, args.dtype)
    plan, obs = res["plan"], res["observed"]
    by_point: dict = {}
    for (i, j, s), p in ref.items():
        by_point.setdefault((i, j), {})[s] = p
    truth = np.empty((args.n, args.n), dtype=object)
    for (i, j), v in by_point.items():
        truth[i, j] = majority([p for _, p in sorted(v.items())])
    diagram = fill(plan, obs)
    agree = float((diagram == truth).mean())
    used = sum(len(v) for v in obs.values())
    same = sum(obs[p][s] == ref[(p[0], p[1], s)] for p in obs for s in obs[p])
    mode = "replayed from the stored reference" if args.replay else "trained"
    print(f"adaptive ({mode}): {used} trials = {used / full:.1%} of the full grid (budget {budget}), "
          f"{len(res['rounds'])} rounds, {res['wall_s']:.0f} s")
    for k, r in enumerate(res["rounds"]):
        print(f"  round {k}: {r['trials']} trials, {r['cells']} cells split, {r['skipped']} left out by the budget, "
              f"{r['wall_s']} s")
    print(f"majority phase agrees with the full grid on {agree:.1%} of {args.n * args.n} cells")
    if not args.replay:
        print(f"sampled trials whose phase equals the reference's: {same}/{used}")
    print("full grid (rows: wd high->low; columns: lr low->high):")
    for j in reversed(range(args.n)):
        print("  " + " ".join(str(truth[i, j])[:3] for i in range(args.n)) + "   |   "
              + " ".join(str(diagram[i, j])[:3] if (i, j) not in obs else str(diagram[i, j])[:3].upper()
                         for i in range(args.n)))
    print("(left: full grid; right: adaptive fill, sampled points in capitals)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
