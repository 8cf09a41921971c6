"""A launch and its analysis on the in-memory tracker, end to end on a real local Ray: the driver writes the parent,
the Ray workers write their packs' runs over the store's socket, and `analyze` reads them back. What shows that a
tracker backend is one class in tracking/: nothing above it changed for this one."""

from pathlib import Path

import pytest

from analysis.pipeline import analyze
from grokray.spec.build import load_spec
from grokray.tracking.queries import children_query
from grokray.tracking.records import RunStatus
from grokray.tracking.trackers import open_tracker

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.launch
def test_a_smoke_launch_and_its_analysis_on_the_memory_tracker(local_ray, tmp_path):
    from grokray.run.grid import run_sweep
    from grokray.run.options import LaunchOptions

    store = open_tracker("memory://")
    spec = load_spec(ROOT / "sweeps" / "quickstart.yaml", scale="smoke")
    summary = run_sweep(spec, LaunchOptions(tracking_uri=store.uri, storage=str(tmp_path / "results"),
                                            checkpoint_every=100, min_report_s=0.0, progress="never"))
    assert summary.errored_trials == 0 and summary.undelivered_points == 0
    parent = store.get_run(summary.parent_run_id)
    assert parent.status == RunStatus.FINISHED and summary.tracking_uri == store.uri
    children, _ = store.search([summary.experiment_id], children_query(parent.run_id), 10_000)
    assert sorted(r.tags["grokray.trial_key"] for r in children) == sorted(t.key() for t in spec.trials())
    assert all(r.status == RunStatus.FINISHED and "steps_run" in r.metrics for r in children)
    steps = [p.step for p in store.curve(children[0].run_id, "val/acc")]
    assert len(steps) > 10 and steps == sorted(set(steps)) and steps[0] == 0
    counts = {}
    for r in children:
        counts[r.tags["grokray.phase"]] = counts.get(r.tags["grokray.phase"], 0) + 1
    assert summary.phase_counts == dict(sorted(counts.items()))
    assert {k: int(v) for k, v in parent.metrics.items() if k.startswith("phase_count/")} == {
        f"phase_count/{p}": n for p, n in counts.items()}

    result = analyze(tmp_path / "analysis", experiment=spec.name, tracking_uri=store.uri, log=True)
    assert len(result.runs) == len(children) and set(result.runs["parent_run_id"]) == {parent.run_id}
    assert {p: n for p, n in result.counts.items() if n} == counts
    assert (tmp_path / "analysis" / "phase_diagram.png").stat().st_size > 1000
    assert "analysis/phase_diagram.png" in store.artifact_paths(parent.run_id, "analysis")


def test_an_in_memory_store_is_refused_where_no_process_holds_it(tmp_path, capsys):
    """`memory://` names no store (one exists only once a process opens it), and `grokray ui` cannot serve one:
    each is said in one line naming the flag, before anything starts."""
    from grokray.cli import main

    code = main(["run", str(ROOT / "sweeps" / "quickstart.yaml"), "--scale", "smoke", "--tracking-uri", "memory://",
                 "--storage", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 2 and "--tracking-uri" in err and "names no store" in err and "open_tracker" in err
    assert not (tmp_path / "results").exists()
    held = open_tracker("memory://")
    assert main(["ui", "--tracking-uri", held.uri]) == 2
    err = capsys.readouterr().err
    assert "--tracking-uri" in err and "in-memory store" in err
