"""A lab-sized sweep (issue 41): what the driver holds grows by at most 1 MB per 1,000 configurations, and at
10^4 configurations every run is in the store once, and the launch's runs table is exactly those runs.

The planning test (library tier, ~1 minute) traces the driver's Python allocations while it surveys the grid and
writes its packs, at 1,000 and 5,000 configurations with the same pack size, so the one pack built at a time is
the same in both. The whole launch at 10^4 is `slow` (`make test-slow`, ~15 minutes on 2 cores: tracking a run
costs ~0.1 core-second, so it cannot fit in CI's hour beside the rest); benchmarks/bench_scale.py measures the
same launch at 10^3 to 3*10^4 and records the driver's peak RSS against N.
"""

import json
import sys
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from grokray.plan.expand import Survey
from grokray.run.pack_files import store_packs
from grokray.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_scale import spec_yaml  # noqa: E402  - the benchmark's own sweep: the toy at width 8, 50 steps


def planned_peak_mb(n: int, tmp: Path) -> float:
    path = tmp / f"scale-{n}.yaml"
    path.write_text(spec_yaml(n))
    spec = load_spec(path, ["resources.pack_size=1000"])
    tracemalloc.start()
    try:
        survey = Survey.of(spec)
        packs = survey.packs(slots=2)
        refs = store_packs(str(tmp / f"exp-{n}"), survey.pack_dicts(packs))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(refs) == n // 1000 and sum(r["members"] for r in refs) == n == survey.n_configs
    assert survey.budget_steps == 50 * n
    return peak / 2**20


@pytest.mark.library
def test_planning_holds_at_most_1_mb_per_1000_configurations(tmp_path):
    small, large = planned_peak_mb(1000, tmp_path), planned_peak_mb(5000, tmp_path)
    slope = (large - small) / 4  # MB per 1,000 configurations
    assert slope <= 1.0, (small, large)
    files = sorted((tmp_path / "exp-5000" / "grokray-packs").glob("*.json"))
    keys = [m["key"] for f in files for m in json.loads(f.read_text())["members"]]
    assert len(keys) == len(set(keys)) == 5000  # every configuration in exactly one pack


@pytest.mark.slow
def test_a_10k_configuration_launch_loses_and_doubles_nothing_and_its_table_is_its_runs(local_ray, tmp_path):
    from analysis.load import load_runs, runs_to_frame
    from grokray.run.grid import run_sweep
    from grokray.run.options import LaunchOptions
    from grokray.tracking.schema import children_filter
    from grokray.tracking.store import Store

    path = tmp_path / "scale.yaml"
    path.write_text(spec_yaml(10_000))
    summary = run_sweep(load_spec(path), LaunchOptions(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
                                                       storage=str(tmp_path / "r"), progress="never"))
    assert summary.configurations == 10_000 and not summary.errored_trials
    store = Store(summary.tracking_uri)
    runs = store.runs([summary.experiment_id], children_filter(summary.parent_run_id))
    keys = [r.tags["grokray.trial_key"] for r in runs]
    assert len(keys) == len(set(keys)) == 10_000 and all("grokray.phase" in r.tags for r in runs)
    table = load_runs(parent_run_id=summary.parent_run_id, tracking_uri=summary.tracking_uri)
    pd.testing.assert_frame_equal(table, runs_to_frame(runs), check_exact=True)
    state = "".join(p.read_text() for p in Path(summary.experiment_path).glob("experiment_state-*.json"))
    assert len(state) < 100_000 * summary.packs < 10_000 * 1_000  # ~25 KB a pack (was 14 KB a configuration)
