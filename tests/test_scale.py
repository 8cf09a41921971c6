"""A lab-sized sweep (issue 41): what the driver holds to plan a launch grows by at most 1 MB per 1,000
configurations.

The planning test (library tier, ~1.5 minutes) traces the driver's Python allocations while it surveys the grid
and writes its packs, at 1,000 and 5,000 configurations with the same pack size, so the one pack built at a time
is the same in both. The whole launch at 10^4 is `make reliability`'s PostgreSQL load test
(tests/test_reliability.py), which also holds the launch's runs table to its runs read one by one;
benchmarks/bench_scale.py measures the launch at 10^3 to 3*10^4 and records the driver's peak RSS against N.
"""

import json
import sys
import tracemalloc
from pathlib import Path

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
