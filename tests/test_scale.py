"""A lab-sized sweep (issue 41): what the driver holds to plan a launch, and to draw its phase diagram at the
close, grows by at most 1 MB per 1,000 configurations.

The planning test (library tier, ~1.5 minutes) traces the driver's Python allocations while it surveys the grid
and writes its packs, at 1,000 and 5,000 configurations with the same pack size, so the one pack built at a time
is the same in both. The close's test traces the diagram drawn from a runs table of 1,000 and of 5,000 runs. The
whole launch at 10^4 is `make reliability`'s PostgreSQL load test (tests/test_reliability.py), which also holds
the launch's runs table to its runs read one by one; benchmarks/bench_scale.py measures the launch at 10^3 to
3*10^4 and records the driver's peak RSS against N.
"""

import gzip
import json
import sys
import tracemalloc
from pathlib import Path

import pytest

from grokray.plan.expand import Survey
from grokray.spec.build import load_spec
from grokray.spec.wire import store_packs

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


def synthetic_launch(client, template, n: int, tmp: Path) -> str:
    """A parent whose runs table holds n runs made from a real launch's children: the bench's lr x weight decay x
    10 seeds grid, each run the template's params, tags and metrics with its own id and axis values."""
    from dataclasses import replace

    from grokray.tracking.records import record_line
    from grokray.tracking.schema import RUNS_SUMMARY_ARTIFACT, RUNS_SUMMARY_TAG

    parent, children = template
    lrs, wds = 10, n // 100
    run = client.create_run(parent.info.experiment_id, tags={k: v for k, v in parent.data.tags.items()
                                                             if k.startswith("grokray.") and k != RUNS_SUMMARY_TAG})
    path = tmp / f"t{n}" / Path(RUNS_SUMMARY_ARTIFACT).name
    path.parent.mkdir()
    swept = json.dumps(["optim.decoder.lr", "optim.decoder.weight_decay", "seed"])
    with gzip.open(path, "wt") as f:
        for i in range(n):
            c = children[i % len(children)]
            axes = {"optim.decoder.lr": str(10 ** (-4 + (i // 10) % lrs / 5)), "seed": str(i % 10),
                    "optim.decoder.weight_decay": str(i // (10 * lrs) / wds)}
            f.write(record_line(replace(c, run_id=f"{i:032x}", name=f"run {i}", params=c.params | axes,
                                        tags=c.tags | {"mlflow.parentRunId": run.info.run_id,
                                                       "grokray.swept": swept, "grokray.trial_key": f"{i:016x}"})))
    client.log_artifact(run.info.run_id, str(path), str(Path(RUNS_SUMMARY_ARTIFACT).parent))
    client.set_tag(run.info.run_id, RUNS_SUMMARY_TAG, str(n))
    return run.info.run_id


@pytest.mark.library
def test_a_launchs_close_draws_its_diagram_in_at_most_1_mb_per_1000_runs(local_ray, tmp_path):
    """The close's phase diagram (run.report.draw_diagram), the driver's peak before this issue (9.6 MB per
    1,000 runs when it read every column), traced at 1,000 and 5,000 runs of a real launch's children."""
    from mlflow.tracking import MlflowClient

    from grokray.run.grid import run_sweep
    from grokray.run.options import LaunchOptions
    from grokray.run.report import draw_diagram
    from grokray.tracking.store import Store

    (tmp_path / "s.yaml").write_text(spec_yaml(20))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    first = run_sweep(load_spec(tmp_path / "s.yaml"), LaunchOptions(tracking_uri=uri, storage=str(tmp_path / "r"),
                                                                      progress="never"))
    store, client = Store(uri), MlflowClient(uri)
    template = client.get_run(first.parent_run_id), store.children(store.run(first.parent_run_id))
    assert len(template[1]) == 20

    def traced_mb(n: int) -> float:
        parent_id = synthetic_launch(client, template, n, tmp_path)
        tracemalloc.start()
        try:
            line = draw_diagram(uri, parent_id)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert line.startswith("phase diagram:"), line
        cells = [a for a in store.artifact_paths(parent_id, "analysis") if a.endswith("cells.csv")]
        rows = store.download(parent_id, cells[0], tmp_path / f"cells-{n}").read_text().splitlines()
        assert len(rows) == 1 + 10 * (n // 100)  # a cell per lr x weight decay, its 10 seeds aggregated
        return peak / 2**20

    small, large = traced_mb(1000), traced_mb(5000)
    assert (large - small) / 4 <= 1.0, (small, large)
