"""The dry-run estimate against the measured wall, side by side on this machine: `grokray run SPEC --dry-run`'s
expected wall (its fixed costs on their own line), then the same sweep run for real as `grokray run` runs it
(a private local Ray started and stopped, MLflow in a fresh SQLite file), with where the wall went.

    .venv/bin/python benchmarks/bench_estimate.py [SPEC] [--repeats 2]     # default: sweeps/quickstart.yaml

Run it on a quiet machine: the estimate's step costs are timed here, so a busy machine skews both sides.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def estimate(spec, uri: str):
    from grokray.plan.estimate import BudgetUse, estimate_plan, plan_budget
    from grokray.plan.expand import expand
    from grokray.tracking.history import measured_budget_use

    plan = expand(spec)
    found = measured_budget_use(uri, spec.name, plan_budget(plan))
    return estimate_plan(plan, use=BudgetUse(*found) if found else None)


def measure(spec, workdir: Path) -> tuple[float, dict]:
    from grokray.run.grid import run_sweep
    from grokray.run.options import LaunchOptions

    t0 = time.perf_counter()
    summary = run_sweep(spec, LaunchOptions(tracking_uri=f"sqlite:///{workdir}/mlflow.db",
                                            storage=str(workdir / "results"), progress="never"))
    return time.perf_counter() - t0, summary.timings


def dry_run_seconds(spec_path: str, scale: str | None, workdir: Path) -> float:
    """The wall of `grokray run SPEC --dry-run` itself, as a user runs it: a fresh process on a fresh store."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "grokray", "run", spec_path, "--dry-run", "--tracking-uri",
           f"sqlite:///{workdir}/dry.db", *(["--scale", scale] if scale else [])]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=workdir, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    from grokray.spec.build import load_spec

    parser = argparse.ArgumentParser()
    parser.add_argument("spec", nargs="?", default=str(ROOT / "sweeps" / "quickstart.yaml"))
    parser.add_argument("--scale", default=None)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    spec = load_spec(args.spec, scale=args.scale)
    print(f"{platform.node()} {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')}; spec {args.spec}")
    ratios = []
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory() as d:
            dry_s = dry_run_seconds(args.spec, args.scale, Path(d))
            print(f"run {i + 1}: `grokray run --dry-run` itself: {dry_s:.1f} s")
            est = estimate(spec, f"sqlite:///{d}/mlflow.db")  # a fresh store: the estimate's prior, as a new user
            wall, timings = measure(spec, Path(d))
        ratios.append(wall / est.seconds)
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
        print(f"run {i + 1}: estimate {est.seconds:.1f} s (fixed costs {est.fixed_seconds:.1f} s, upper bound "
              f"{est.upper_seconds:.1f} s); measured {wall:.1f} s ({parts}); "
              f"measured / estimate {wall / est.seconds:.2f}")
    print(f"measured / estimate: median {statistics.median(ratios):.2f} over {len(ratios)} runs")


if __name__ == "__main__":
    main()
