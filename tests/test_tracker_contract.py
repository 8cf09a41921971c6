"""The Tracker contract (grokray.tracking.records.Tracker), run against every backend: MLflow on a SQLite file, the
in-memory store in this process, and the same store reached over its socket as a Ray worker reaches it. A new
backend joins BACKENDS and passes these before anything above tracking/ uses it."""

import pytest

from grokray.tracking.client import is_transient, search_all
from grokray.tracking.queries import children_query
from grokray.tracking.records import RunNotFound, RunQuery, RunStatus, Tracker
from grokray.tracking.schema import TRIAL_KEY_TAG

BACKENDS = ["mlflow-sqlite", "memory", "memory-over-socket"]


@pytest.fixture(params=BACKENDS)
def tracker(request, tmp_path):
    from grokray.tracking.trackers import open_tracker

    if request.param == "mlflow-sqlite":
        return open_tracker(f"sqlite:///{tmp_path}/mlflow.db", prepare=True)
    held = open_tracker("memory://")
    if request.param == "memory":
        return held
    from grokray.tracking.memory import RemoteTracker

    return RemoteTracker(held.uri)  # what another process gets from open_tracker(held.uri)


def test_it_is_a_tracker(tracker):
    assert isinstance(tracker, Tracker)


def test_experiments_are_found_by_name_and_made_once(tracker):
    assert tracker.experiment_id("sweep") is None
    exp = tracker.ensure_experiment("sweep")
    assert tracker.ensure_experiment("sweep") == exp == tracker.experiment_id("sweep")
    other = tracker.ensure_experiment("other")
    assert other != exp and {exp: "sweep", other: "other"}.items() <= tracker.experiments().items()


def test_a_run_keeps_its_name_tags_params_and_latest_values(tracker):
    exp = tracker.ensure_experiment("sweep")
    run_id = tracker.create_run(exp, "lr=0.01", {"grokray.role": "configuration"}, 1_700_000_000_000)
    run = tracker.get_run(run_id)
    assert (run.name, run.experiment_id, run.status, run.start_ms, run.end_ms) == (
        "lr=0.01", exp, RunStatus.RUNNING, 1_700_000_000_000, None)
    assert run.tags["grokray.role"] == "configuration" and run.params == {} and run.metrics == {}
    tracker.log(run_id, [("val/acc", 0.5, 1, 10), ("val/acc", 0.25, 2, 0), ("train/acc", 1.0, 3, 10)],
                {"optim.lr": "0.01"}, {"grokray.phase": "grokking"})
    run = tracker.get_run(run_id)
    assert run.metrics == {"val/acc": 0.5, "train/acc": 1.0}  # each key's value at its latest step
    assert run.params == {"optim.lr": "0.01"} and run.tags["grokray.phase"] == "grokking"
    assert [(p.step, p.value) for p in tracker.curve(run_id, "val/acc")] == [(0, 0.25), (10, 0.5)]
    assert tracker.latest_steps(run_id) == {"val/acc": 10, "train/acc": 10}
    tracker.delete_tag(run_id, "grokray.phase")
    assert "grokray.phase" not in tracker.get_run(run_id).tags
    tracker.rename_run(run_id, "lr=0.01 trial 7")  # a reopened run takes the name of the trial that finishes it
    assert tracker.get_run(run_id).name == "lr=0.01 trial 7"
    assert tracker.search([exp], RunQuery())[0][0].name == "lr=0.01 trial 7"


def test_a_batch_over_any_limit_is_stored_whole(tracker):
    """MLflow takes 1000 metrics and 100 params + tags a request; the tracker splits, the caller does not."""
    run_id = tracker.create_run(tracker.ensure_experiment("sweep"), "big", {}, None)
    assert tracker.log(run_id, [("val/acc", s / 2500, 0, s) for s in range(2500)],
                       {f"p{i}": str(i) for i in range(150)}, {f"t{i}": str(i) for i in range(120)}) >= 1
    run = tracker.get_run(run_id)
    assert len(tracker.curve(run_id, "val/acc")) == 2500 and len(run.params) == 150
    assert {f"t{i}" for i in range(120)} <= set(run.tags)


def test_a_param_once_logged_is_fixed_and_the_refusal_is_not_an_outage(tracker):
    run_id = tracker.create_run(tracker.ensure_experiment("sweep"), "r", {}, None)
    tracker.log(run_id, params={"seed": "0"})
    tracker.log(run_id, params={"seed": "0"})  # the same value again: a retried batch
    with pytest.raises(Exception) as refused:
        tracker.log(run_id, params={"seed": "1"})
    assert not is_transient(refused.value)  # delivery raises it instead of spooling it forever
    assert tracker.get_run(run_id).params == {"seed": "0"}


def test_status_ends_and_reopens_a_run(tracker):
    run_id = tracker.create_run(tracker.ensure_experiment("sweep"), "r", {}, None)
    tracker.set_status(run_id, RunStatus.FINISHED, 1_700_000_000_123)
    assert (tracker.get_run(run_id).status, tracker.get_run(run_id).end_ms) == ("FINISHED", 1_700_000_000_123)
    tracker.set_status(run_id, RunStatus.RUNNING)
    assert tracker.get_run(run_id).status == RunStatus.RUNNING
    tracker.set_status(run_id, RunStatus.KILLED)
    assert tracker.get_run(run_id).status == RunStatus.KILLED and tracker.get_run(run_id).end_ms


def test_a_missing_or_deleted_run_is_not_found(tracker):
    with pytest.raises(RunNotFound):
        tracker.get_run("0" * 32)
    exp = tracker.ensure_experiment("sweep")
    run_id = tracker.create_run(exp, "r", {"k": "v"}, None)
    tracker.delete_run(run_id)
    with pytest.raises(RunNotFound):
        tracker.get_run(run_id)
    assert tracker.search([exp], RunQuery({"k": "v"}))[0] == []


def test_search_matches_tags_presence_and_status_newest_first_and_pages_whole(tracker):
    exp, other = tracker.ensure_experiment("sweep"), tracker.ensure_experiment("other")
    ids = [tracker.create_run(exp, f"r{i}", {"grokray.role": "configuration", "grokray.pack_id": f"p{i % 2}"},
                              1_700_000_000_000 + i) for i in range(5)]
    parent = tracker.create_run(exp, "parent", {"grokray.role": "parent"}, 1_700_000_000_100)
    elsewhere = tracker.create_run(other, "x", {"grokray.role": "configuration"}, 1_700_000_000_200)
    tracker.log(ids[1], tags={"grokray.phase": "grokking"})
    tracker.set_status(ids[3], RunStatus.FINISHED)
    children = RunQuery({"grokray.role": "configuration"})
    assert [r.run_id for r in search_all(tracker, exp, children)] == ids[::-1]  # newest start first
    assert [r.run_id for r in search_all(tracker, exp, children.where({"grokray.pack_id": "p1"}))] == [ids[3], ids[1]]
    assert [r.run_id for r in search_all(tracker, exp, RunQuery(with_tags=("grokray.phase",)))] == [ids[1]]
    assert [r.run_id for r in search_all(tracker, exp, RunQuery(status=RunStatus.FINISHED))] == [ids[3]]
    assert {r.run_id for r in search_all(tracker, [exp, other], children)} == {*ids, elsewhere}
    assert parent not in {r.run_id for r in search_all(tracker, exp, children)}
    pages, token = [], None
    while True:
        page, token = tracker.search([exp], children, 2, token)
        pages.append([r.run_id for r in page])
        if token is None:
            break
    assert pages == [ids[4:2:-1], ids[2:0:-1], ids[:1]]
    assert all(RunQuery({"grokray.role": "configuration"}).matches(r) for r in search_all(tracker, exp, children))


def test_a_run_made_under_a_parent_is_found_by_it_and_says_so(tracker):
    """The parent link is the tracker's own (MLflow: its nesting tag, which its UI draws by); grokray speaks only
    create_run(parent_id=...), RunRecord.parent_id and RunQuery.parent_id."""
    exp = tracker.ensure_experiment("sweep")
    launches = [tracker.create_run(exp, f"launch {i}", {"grokray.role": "parent"}, None) for i in range(2)]
    kids = {p: [tracker.create_run(exp, f"c{i}", {"grokray.pack_id": f"p{i}"}, None, parent_id=p) for i in range(2)]
            for p in launches}
    first, second = launches
    assert {r.run_id for r in search_all(tracker, exp, children_query(first))} == set(kids[first])
    assert [r.run_id for r in search_all(tracker, exp, children_query(second, "p1"))] == [kids[second][1]]
    assert tracker.get_run(kids[second][0]).parent_id == second and tracker.get_run(first).parent_id is None
    assert all(r.parent_id == first for r in search_all(tracker, exp, children_query(first)))


class _BusyServer:
    """The tracker, except that a page of more than `answers` runs times out as a busy server's does (CI, 2026-12-03:
    1,000 runs through a PostgreSQL-backed server took over the 10-s request timeout six times running)."""

    def __init__(self, tracker, answers: int):
        self.tracker, self.answers, self.asked = tracker, answers, []

    def search(self, ids, query, size, token):
        self.asked.append(size)
        if size > self.answers:
            raise TimeoutError("Read timed out. (read timeout=10)")
        return self.tracker.search(ids, query, size, token)


def test_a_page_that_times_out_is_asked_again_at_half_the_size_and_every_run_is_read_once(tracker, monkeypatch):
    import grokray.tracking.client as client

    monkeypatch.setattr(client.time, "sleep", lambda s: None)  # the backoff's waits, not what is tested
    exp = tracker.ensure_experiment("sweep")
    ids = [tracker.create_run(exp, f"r{i}", {"grokray.role": "configuration"}, 1_700_000_000_000 + i)
           for i in range(7)]
    busy = _BusyServer(tracker, answers=2)
    runs = [r.run_id for page in client.search_pages(busy, exp, RunQuery({"grokray.role": "configuration"}), size=8)
            for r in page]
    assert runs == ids[::-1]  # each run once, in order, across the change of page size
    assert busy.asked == [8, 4, 2, 2, 2, 2]  # halved until it answered, then kept small
    with pytest.raises(TimeoutError):  # a server that answers no page at all is still an error, after the tries
        list(client.search_pages(_BusyServer(tracker, answers=0), exp, size=8, attempts=3))


class _LostAnswers:
    """A server that makes each run it is asked for and loses the first `lost` answers (a read timeout on a
    loaded server): the client cannot tell a lost answer from a run never made."""

    def __init__(self, tracker, lost: int):
        self.tracker, self.lost, self.creates = tracker, lost, 0

    def create_run(self, *args, **kwargs):
        self.creates += 1
        run_id = self.tracker.create_run(*args, **kwargs)
        if self.lost:
            self.lost -= 1
            raise TimeoutError("Read timed out. (read timeout=10)")
        return run_id

    def search(self, *args):
        return self.tracker.search(*args)


def test_a_run_whose_answer_was_lost_is_not_made_twice(tracker, monkeypatch):
    import grokray.tracking.client as client

    monkeypatch.setattr(client.time, "sleep", lambda s: None)
    exp = tracker.ensure_experiment("sweep")
    same = children_query("p1").where({TRIAL_KEY_TAG: "k1"})
    lossy = _LostAnswers(tracker, lost=2)
    run_id = client.create_run_once(lossy, exp, "r", {**same.tags, "grokray.role": "configuration"}, None, same)
    runs, _ = tracker.search([exp], same, 10)
    assert [r.run_id for r in runs] == [run_id] and lossy.creates == 1  # found by its key, not made again
    again = client.create_run_once(_LostAnswers(tracker, lost=0), exp, "r", same.tags, None, same, look_first=True)
    assert again == run_id  # look_first: an earlier attempt's run is found before any create
    other_key = children_query("p1").where({TRIAL_KEY_TAG: "k2"})
    other = client.create_run_once(_LostAnswers(tracker, lost=0), exp, "r2", other_key.tags, None, other_key)
    assert other != run_id and len(tracker.search([exp], RunQuery(), 10)[0]) == 2


def test_artifacts_are_listed_by_folder_and_downloaded_as_written(tracker, tmp_path):
    run_id = tracker.create_run(tracker.ensure_experiment("sweep"), "r", {}, None)
    (tmp_path / "fig.png").write_bytes(b"\x89PNG-bytes")
    tracker.log_artifact(run_id, tmp_path / "fig.png", "analysis")
    tracker.log_text(run_id, "seed: 0\n", "spec.resolved.yaml")
    tracker.log_text(run_id, "round 1", "adaptive/round-001.json")
    assert sorted(tracker.artifact_paths(run_id)) == ["adaptive", "analysis", "spec.resolved.yaml"]
    assert tracker.artifact_paths(run_id, "analysis") == ["analysis/fig.png"]
    got = tracker.download(run_id, "analysis/fig.png", tmp_path / "d1")
    assert got.read_bytes() == b"\x89PNG-bytes" and got == tmp_path / "d1" / "fig.png"
    folder = tracker.download(run_id, "adaptive", tmp_path / "d2")
    assert (folder / "round-001.json").read_text() == "round 1"
    assert tracker.download(run_id, "spec.resolved.yaml", tmp_path / "d3").read_text() == "seed: 0\n"
    with pytest.raises(Exception):  # noqa: B017 - each backend's own error for a missing artifact
        tracker.download(run_id, "no/such/file", tmp_path / "d4")
