"""The launch's runs table (issue 41): a launch's close writes every child run as one artifact on its parent, and
analyze, the atlas and the launch's own figure read it instead of paging through every run. It must be exactly
what the runs read one by one give, and never stale: a resumed launch's table goes until its close writes anew."""

import gzip
from pathlib import Path

import pandas as pd
import pytest

from analysis.load import load_runs, runs_to_frame
from grokray.spec.build import load_spec
from grokray.tracking.mlflow_tracker import filter_string
from grokray.tracking.parent import ParentRun
from grokray.tracking.queries import children_query
from grokray.tracking.records import record_line
from grokray.tracking.schema import PACK_ID_TAG, RUNS_SUMMARY_TAG
from grokray.tracking.store import Store

pytestmark = pytest.mark.launch  # end-to-end launches on a local Ray: make launches (CI), docs/testing.md

QUICKSTART = Path(__file__).resolve().parents[1] / "sweeps" / "quickstart.yaml"
READ_BACK: list[str] = []  # the parents whose children were read from the store while the launches ran
SEARCHES: list[str] = []  # the filter of every search the launches' drivers made


@pytest.fixture(scope="module")
def launch(local_ray, tmp_path_factory):
    from grokray.run.grid import run_sweep
    from grokray.run.options import LaunchOptions

    tmp = tmp_path_factory.mktemp("table")
    spec = load_spec(QUICKSTART, ["train.steps=400", "phases.budget=400", "seeds=[1,2]"], scale="smoke")
    options = dict(tracking_uri=f"sqlite:///{tmp}/mlflow.db", storage=str(tmp / "r"), progress="never")
    from mlflow.tracking import MlflowClient

    read, search = Store.iter_children, MlflowClient.search_runs
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Store, "iter_children", lambda self, parent: READ_BACK.append(parent.run_id) or read(self, parent))
        mp.setattr(MlflowClient, "search_runs", lambda self, *a, **kw: SEARCHES.append(kw.get("filter_string", ""))
                   or search(self, *a, **kw))
        first = run_sweep(spec, LaunchOptions(**options))
        second = run_sweep(spec, LaunchOptions(**options))  # a second launch of the same experiment
    return first, second


def one_by_one(store: Store, parent_id: str) -> pd.DataFrame:
    parent = store.run(parent_id)
    return runs_to_frame(store.children_of(parent_id, parent.experiment_id))


def by_run(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows by run id: a grid's table is in pack order, the store's search newest first; the rows are the same."""
    return frame.sort_values("run_id", ignore_index=True)


def test_the_runs_table_equals_the_runs_read_one_by_one(launch):
    first, second = launch
    store = Store(first.tracking_uri)
    for summary in (first, second):
        parent = store.run(summary.parent_run_id)
        assert parent.tags[RUNS_SUMMARY_TAG] == str(summary.configurations) == "16"
        table = load_runs(parent_run_id=summary.parent_run_id, tracking_uri=summary.tracking_uri)
        pd.testing.assert_frame_equal(by_run(table), by_run(one_by_one(store, summary.parent_run_id)),
                                      check_exact=True)
        assert table.attrs["swept"] == ["optim.decoder.lr", "optim.decoder.weight_decay", "seed"]
        assert set(table["phase"].dropna()) and table["status"].eq("FINISHED").all()
    both = load_runs(experiment="quickstart", tracking_uri=first.tracking_uri)
    everything = runs_to_frame([r for r in store.runs([first.experiment_id]) if r.parent_id])
    pd.testing.assert_frame_equal(by_run(both), by_run(everything), check_exact=True)
    assert len(both) == 32 and both["parent_run_id"].value_counts().to_dict() == {
        first.parent_run_id: 16, second.parent_run_id: 16}
    latest = load_runs(experiment="quickstart", tracking_uri=first.tracking_uri, latest_parent=True)
    assert set(latest["parent_run_id"]) == {second.parent_run_id} and len(latest) == 16


def test_a_resumed_launch_drops_its_table_and_readers_page_through_the_runs(launch, tmp_path):
    first, _ = launch
    store = Store(first.tracking_uri)
    parent = ParentRun(first.tracking_uri, "quickstart", str(tmp_path))
    parent.resume(first.parent_run_id)
    assert RUNS_SUMMARY_TAG not in store.run(first.parent_run_id).tags  # its table is the last launch's
    fresh = load_runs(parent_run_id=first.parent_run_id, tracking_uri=first.tracking_uri)
    pd.testing.assert_frame_equal(fresh, one_by_one(store, first.parent_run_id), check_exact=True)
    parent.close("FINISHED", 0.0, configurations=16)  # closed again: a new table, the same runs
    assert store.run(first.parent_run_id).tags[RUNS_SUMMARY_TAG] == "16"
    pd.testing.assert_frame_equal(load_runs(parent_run_id=first.parent_run_id, tracking_uri=first.tracking_uri),
                                  fresh, check_exact=True)
    # each close's phase counts at a step of its own (issue 52: a resume logged a second value at step 0)
    from mlflow.tracking import MlflowClient

    counted = next(k for k in store.run(first.parent_run_id).metrics if k.startswith("phase_count/"))
    steps = [m.step for m in MlflowClient(first.tracking_uri).get_metric_history(first.parent_run_id, counted)]
    assert sorted(steps) == [0, 1], steps


def test_the_next_launch_closes_a_parent_a_dead_driver_left_running(tmp_path):
    """Issue 52: SIGKILL of the driver left its parent and children RUNNING until someone ran --resume."""
    import os
    import socket
    import subprocess
    import sys

    from mlflow.tracking import MlflowClient

    from grokray.tracking.drivers import left_by_dead_driver
    from grokray.tracking.schema import DRIVER_TAG

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that ran and ended: the killed driver's
    runs = {}
    for who, pid in (("dead", dead.pid), ("live", os.getpid())):
        parent = ParentRun(uri, "orphans", str(tmp_path / who))
        parent.open("grid", "hash0", f"{who} sweep", [], [], "name: orphans\n")
        client.set_tag(parent.run_id, DRIVER_TAG, f"{socket.gethostname()}:{pid}")
        child = client.create_run(parent.experiment_id, tags={"mlflow.parentRunId": parent.run_id}).info.run_id
        runs[who] = (parent.run_id, child)
    other = ParentRun(uri, "orphans", str(tmp_path / "other"))
    other.open("grid", "hash1", "another spec", [], [], "name: orphans\n")  # another spec: not this launch's
    client.set_tag(other.run_id, DRIVER_TAG, f"{socket.gethostname()}:{dead.pid}")
    closed, left = ParentRun(uri, "orphans", str(tmp_path / "next")).close_orphans("hash0", "grid")
    assert [r.run_id for r in closed] == [runs["dead"][0]]
    assert [r.run_id for r in left] == [other.run_id]  # issue 61: said (one line, how to close it), not closed
    line = left_by_dead_driver(left[0])
    assert f"pid {dead.pid} on this machine" in line and "`grokray run SPEC --resume` continues it" in line
    assert [client.get_run(r).info.status for r in runs["dead"]] == ["KILLED", "KILLED"]
    assert [client.get_run(r).info.status for r in runs["live"]] == ["RUNNING", "RUNNING"]  # its driver runs on
    assert client.get_run(other.run_id).info.status == "RUNNING"


def test_a_finished_member_ends_at_its_own_stop_whoever_ends_its_run(launch, tmp_path):
    """Issue 52 (seen under Slurm): a stop between a member's phase tag and its run's end left the run RUNNING;
    the close ended it at the close's time, and the next job, delivering the spooled end, moved it back. The
    stop time travels with the phase tag, so the close ends the run exactly where the pack would have."""
    from mlflow.tracking import MlflowClient

    from grokray.tracking.schema import ENDED_TAG, PHASE_TAG

    first, _ = launch
    store = Store(first.tracking_uri)
    children = store.children(store.run(first.parent_run_id))
    assert children and all(r.end_ms == int(r.tags[ENDED_TAG]) for r in children)  # the pack's own ends
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    parent = ParentRun(uri, "ends", str(tmp_path / "spool"))
    parent.open("grid", "hash0", "ends sweep", [], [], "name: ends\n")
    tagged, untagged = (client.create_run(parent.experiment_id, tags={"mlflow.parentRunId": parent.run_id}).info.run_id
                        for _ in range(2))
    client.set_tag(tagged, PHASE_TAG, "grokking")  # its batch's tags went out, its end did not
    client.set_tag(tagged, ENDED_TAG, "1700000000123")
    parent.close("KILLED", 0.0)
    assert (client.get_run(tagged).info.status, client.get_run(tagged).info.end_time) == ("FINISHED", 1700000000123)
    assert client.get_run(untagged).info.status == "KILLED"


def test_a_table_that_disagrees_with_its_tag_is_not_trusted(launch, tmp_path):
    first, _ = launch
    store = Store(first.tracking_uri)
    parent = store.run(first.parent_run_id)
    short = store.children(parent)[:-1]  # one run lost
    path = tmp_path / "runs.jsonl.gz"
    path.write_bytes(gzip.compress("".join(map(record_line, short)).encode()))
    store.log_artifact(parent.run_id, path, "summary")  # overwrites the table; the tag still says 16
    assert len(store.children(store.run(parent.run_id))) == 16


def test_tunes_experiment_state_holds_each_pack_by_reference_not_its_members(launch):
    """Tune keeps a trial's config ~7 times, in the driver and in every state save: a pack there is its file."""
    first, _ = launch
    state = "".join(p.read_text() for p in Path(first.experiment_path).glob("experiment_state-*.json"))
    packs = sorted(Path(first.experiment_path, "grokray-packs").glob("*.json"))
    assert state and len(packs) == first.packs >= 1
    keys = [r.tags["grokray.trial_key"] for r in Store(first.tracking_uri).children(
        Store(first.tracking_uri).run(first.parent_run_id))]
    assert len(keys) == 16 and not [k for k in keys if k in state]  # no member, nor its key, in Tune's state
    assert sum(k in "".join(p.read_text() for p in packs) for k in keys) == 16  # each is in its pack's file


def test_the_closes_narrow_read_draws_the_same_diagram_as_every_column(launch, tmp_path):
    """A launch's close reads only what its phase diagram needs (narrow=True): the same cells, counts and
    figures' inputs as `grokray analyze` reading every param and metric."""
    from analysis.pipeline import analyze

    first, _ = launch
    full = analyze(tmp_path / "full", parent_run_id=first.parent_run_id, tracking_uri=first.tracking_uri, log=False)
    narrow = analyze(tmp_path / "narrow", parent_run_id=first.parent_run_id, tracking_uri=first.tracking_uri,
                     log=False, narrow=True)
    pd.testing.assert_frame_equal(narrow.grid.cells, full.grid.cells, check_exact=True)
    pd.testing.assert_series_equal(narrow.counts, full.counts)
    assert (tmp_path / "narrow" / "phase_table.txt").read_text() == (tmp_path / "full" / "phase_table.txt").read_text()
    assert (narrow.grid.x, narrow.grid.y) == (full.grid.x, full.grid.y) == ("optim.decoder.lr",
                                                                            "optim.decoder.weight_decay")
    dropped = set(full.runs.columns) - set(narrow.runs.columns)
    # trial_key stays in a narrow read: a pool of launches counts a configuration once by it
    assert len(narrow.runs) == len(full.runs) == 16 and {"run_name", "pack_id", "final/train/acc"} <= dropped


def test_the_closes_diagram_comes_from_its_one_pass_over_the_children(launch, tmp_path):
    """The close draws its diagram from the records it ends, counts and tables in one pass (FrameBuilder), not
    from reading N runs back: no child was read from the store during the launches, and the cells the close
    logged equal those `grokray analyze` draws reading the runs back."""
    from analysis.pipeline import analyze

    first, second = launch
    assert not READ_BACK, f"a close read its children back: {READ_BACK}"
    for summary in (first, second):
        store = Store(summary.tracking_uri)
        (tmp_path / summary.parent_run_id).mkdir()
        logged = store.download(summary.parent_run_id, "analysis/cells.csv", tmp_path / summary.parent_run_id)
        analyze(tmp_path / "again", parent_run_id=summary.parent_run_id, tracking_uri=summary.tracking_uri,
                log=False, narrow=True)
        assert logged.read_text() == (tmp_path / "again" / "cells.csv").read_text()
        assert len(pd.read_csv(logged)) == 8  # the smoke grid's cells, each over seeds 1 and 2


def test_grokray_analyze_reads_the_latest_launch_narrow_and_streamed(launch, tmp_path, monkeypatch, capsys):
    """`grokray analyze --experiment` reads its launch narrow, a run at a time from the latest parent's table (a
    10^5-run launch held whole was ~1 GB): the same cells and counts as reading every column, logged on that
    parent; an axis the user names that is not swept is kept."""
    from analysis.pipeline import analyze
    from grokray.cli import main

    first, second = launch
    uri = second.tracking_uri
    full = analyze(tmp_path / "full", experiment="quickstart", tracking_uri=uri, log=False)

    def held_whole(self, parent):
        raise AssertionError("the latest launch's runs were held as one list")

    monkeypatch.setattr(Store, "children", held_whole)
    out = tmp_path / "cli"
    assert main(["analyze", "--experiment", "quickstart", "--tracking-uri", uri, "-o", str(out)]) == 0
    assert f"on parent run {second.parent_run_id}" in capsys.readouterr().out
    assert (out / "cells.csv").read_text() == (tmp_path / "full" / "cells.csv").read_text()
    again = analyze(tmp_path / "again", experiment="quickstart", tracking_uri=uri, log=False, narrow=True)
    pd.testing.assert_frame_equal(again.grid.cells, full.grid.cells, check_exact=True)
    pd.testing.assert_series_equal(again.counts, full.counts)
    narrow = analyze(tmp_path / "narrow", experiment="quickstart", tracking_uri=uri, log=False, narrow=True,
                     x="task.p", y="optim.decoder.lr")
    assert "task.p" in narrow.runs and "final/train/acc" not in narrow.runs and len(narrow.runs) == 16
    assert narrow.grid.cells["n"].sum() == 16 and set(narrow.grid.cells["task.p"]) == {10}
    assert set(narrow.runs["parent_run_id"]) == {second.parent_run_id}


def test_a_grids_close_reads_its_children_pack_by_pack(launch):
    """MLflow's SQL store pages a search by OFFSET, sorting every child of the parent again for each page: the
    close of an 8·10^4-run launch took 19 minutes so. A grid's close reads each pack's children instead, each
    pack once, and the table above shows that it misses none."""
    first, second = launch
    for summary in (first, second):
        reads = [f for f in SEARCHES if filter_string(children_query(summary.parent_run_id)) in f]
        assert reads and all(f"tags.`{PACK_ID_TAG}` = 'pack-" in f for f in reads), reads
        assert len(reads) == len(set(reads)) == summary.packs >= 2
