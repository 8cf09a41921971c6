"""The tracking courier: spool while MLflow is away, retry with backoff, deliver in order, replay idempotently.
Fast (fake client and clock, or a SQLite store): part of `make test`. The live outage is in
tests/test_reliability.py and tests/test_reliability_drivers.py (`make reliability`)."""

import json

import pytest
from mlflow.tracking import MlflowClient

from grokray.cli import main
from grokray.tracking.delivery import Courier, is_transient
from grokray.tracking.spool import Batch, Spool, pending_points, undelivered


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += max(s, 0.01)


class FlakyTracker:
    """The in-memory tracker behind a switch: while `up` is False, or for the runs in `down`, every call raises a
    refused connection, as a tracking server that is away does. Runs are named ("r", "r2"); each is a real run
    of the store. `sent` records the steps each delivered call carried, in the order they came."""

    def __init__(self, runs=("r",), down=()):
        import threading

        from grokray.tracking.memory import MemoryTracker

        self.store, self.up, self.down, self.attempts = MemoryTracker(), True, set(down), 0
        exp = self.store.ensure_experiment("delivery")
        self.ids = {name: self.store.create_run(exp, name, {}, 0) for name in runs}
        self.sent: dict[tuple[str, str], list[int]] = {}
        self.threads, self._ident = set(), threading.get_ident

    def __getattr__(self, method):
        real = getattr(self.store, method)
        names = {v: k for k, v in self.ids.items()}

        def call(run, *args, **kwargs):
            self.attempts += 1
            self.threads.add(self._ident())
            if not self.up or run in self.down:
                raise ConnectionError("Connection refused")
            out = real(self.ids.get(run, run), *args, **kwargs)
            for key, _, _, step in (args[0] if method == "log" and args else kwargs.get("points")) or []:
                self.sent.setdefault((names.get(self.ids.get(run, run), run), key), []).append(step)
            return out

        return call

    def status(self, name):
        run = self.store.get_run(self.ids[name])
        return run.status, run.end_ms


def batch(run, steps, terminate=None):
    return Batch(run, [["train/acc", 0.5, 1, s] for s in steps], terminate=terminate,
                 end_time=1_700_000_000_000 + steps[-1] if terminate else None)


def test_outage_is_spooled_retried_with_backoff_and_delivered_in_order(tmp_path):
    client, clock = FlakyTracker(), Clock()
    courier = Courier(client, tmp_path / "p.jsonl", max_points=1000, clock=clock, sleep=clock.sleep)
    courier.send(batch("r", range(0, 10)))
    client.up = False
    for i in range(1, 6):  # the outage: every send returns at once, nothing is lost
        courier.send(batch("r", range(10 * i, 10 * i + 10)))
        clock.t += 0.5
    attempts_during_outage = client.attempts
    assert courier.failures < 5  # the backoff skips most attempts instead of hammering a dead server
    assert pending_points(tmp_path) == (5, 50)  # the write-ahead spool holds every undelivered batch
    client.up = True
    clock.t += 60
    courier.send(batch("r", range(60, 70), terminate="FINISHED"))
    assert client.sent[("r", "train/acc")] == list(range(70))  # in order, once each
    assert [p.step for p in client.store.curve(client.ids["r"], "train/acc")] == list(range(70))
    # the run ends when its work did, not when delivery caught up
    assert client.status("r") == ("FINISHED", 1_700_000_000_069)
    assert not (tmp_path / "p.jsonl").exists()  # all delivered: the spool file is gone
    assert courier.close() == 0 and attempts_during_outage < 12


def test_memory_bound_spills_to_disk_and_order_survives(tmp_path):
    client, clock = FlakyTracker(), Clock()
    courier = Courier(client, tmp_path / "p.jsonl", max_points=25, clock=clock, sleep=clock.sleep)
    client.up = False
    for i in range(10):
        courier.send(batch("r", range(10 * i, 10 * i + 10)))
        assert courier.queued_points <= 25  # training never holds more than the bound in memory
    assert pending_points(tmp_path) == (10, 100)
    client.up = True
    assert courier.close(wait_s=120) == 0
    assert client.sent[("r", "train/acc")] == list(range(100))


def test_never_back_leaves_everything_in_the_spool(tmp_path):
    client, clock = FlakyTracker(), Clock()
    courier = Courier(client, tmp_path / "p.jsonl", clock=clock, sleep=clock.sleep)
    client.up = False
    courier.send(batch("r", range(5), terminate="FINISHED"))
    assert courier.close(wait_s=5) == 5
    [left] = undelivered(tmp_path / "p.jsonl")
    assert left.terminate == "FINISHED" and [m[3] for m in left.metrics] == list(range(5))


def test_transient_or_not():
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

    assert is_transient(ConnectionError("x")) and is_transient(MlflowException("API request failed: Max retries"))
    assert is_transient(MlflowException("database is locked"))
    assert not is_transient(MlflowException("bad param", error_code=INVALID_PARAMETER_VALUE))


def test_a_block_ends_quietly_only_when_the_store_is_away():
    """Issue 62: the one helper that replaced `except Exception: if not is_transient(exc): raise` at 12 sites."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

    from grokray.tracking.client import StoreAway

    reached = []
    with StoreAway() as away:
        raise MlflowException("API request failed: Max retries exceeded")
    assert away.happened
    with StoreAway() as fine:
        reached.append(1)
    assert not fine.happened and reached == [1]
    for error in (MlflowException("bad param", error_code=INVALID_PARAMETER_VALUE), ValueError("x"),
                  KeyboardInterrupt()):
        with pytest.raises(type(error)), StoreAway():
            raise error


def test_replay_command_delivers_once(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("replay"))
    run_id = run.info.run_id
    spool_dir = tmp_path / "undelivered"
    spool = Spool(spool_dir / "pack-0000-1.jsonl")
    spool.append(batch(run_id, range(0, 5)))
    spool.append(batch(run_id, range(5, 10), terminate="FINISHED"))
    # the first batch reached the server although its request "failed": replay must not send it twice
    client.log_batch(run_id, metrics=[__import__("mlflow").entities.Metric("train/acc", 0.5, 1, s) for s in range(5)])
    assert main(["replay", str(spool_dir), "--tracking-uri", uri]) == 0
    assert "replayed 2 of 2 batches (10 of 10 metric points)" in capsys.readouterr().out
    steps = [m.step for m in client.get_metric_history(run_id, "train/acc")]
    assert steps == list(range(10))
    info = client.get_run(run_id).info
    assert info.status == "FINISHED" and info.end_time == 1_700_000_000_009  # its own end, kept through the spool
    assert pending_points(spool_dir) == (0, 0)
    assert main(["replay", str(spool_dir), "--tracking-uri", uri]) == 2  # nothing left: one clear line


def test_spool_lines_are_json(tmp_path):
    spool = Spool(tmp_path / "s.jsonl")
    spool.append(batch("r", [1, 2]))
    rec = json.loads((tmp_path / "s.jsonl").read_text().splitlines()[0])
    assert rec["run_id"] == "r" and rec["metrics"][0] == ["train/acc", 0.5, 1, 1]


@pytest.mark.parametrize("cut", [10, 30])
def test_a_torn_last_line_is_ignored(tmp_path, cut):
    spool = Spool(tmp_path / "s.jsonl")
    spool.append(batch("r", [1]))
    text = batch("r", [2]).to_json()
    with (tmp_path / "s.jsonl").open("a") as f:
        f.write(text[:cut])
    assert [b.metrics[0][3] for b in undelivered(tmp_path / "s.jsonl")] == [1]


def test_send_many_delivers_a_reports_batches_concurrently_and_holds_the_refused_ones(tmp_path):
    clock = Clock()
    client = FlakyTracker(runs=[f"r{i}" for i in range(8)], down={"r2", "r5"})
    courier = Courier(client, tmp_path / "s.jsonl", clock=clock, sleep=clock.sleep, workers=4)
    courier.send_many([batch(f"r{i}", [0, 1], terminate="FINISHED") for i in range(8)])
    assert sorted(r for r, _ in client.sent) == [f"r{i}" for i in range(8) if i not in (2, 5)]
    assert len(client.threads) > 1  # several requests in flight, not one after another
    assert [b.run_id for b in undelivered(tmp_path / "s.jsonl")] == ["r2", "r5"]  # held, on disk, in order
    assert [b.run_id for b in courier.queue] == ["r2", "r5"]
    # a later report queues behind the backlog (same run's order kept); once the server takes them, all arrive
    client.down.clear()
    courier.send_many([batch("r2", [2]), batch("r3", [2])])
    assert courier.close(wait_s=120) == 0
    assert client.sent[("r2", "train/acc")] == [0, 1, 2] and client.sent[("r3", "train/acc")] == [0, 1, 2]
    assert client.status("r2")[0] == client.status("r6")[0] == "FINISHED"
    assert not (tmp_path / "s.jsonl").exists()


def test_send_many_raises_a_bad_request_and_keeps_batches_of_one_run_in_order(tmp_path):
    from grokray.tracking.records import RunNotFound

    courier = Courier(FlakyTracker(runs=["ok"]), tmp_path / "s.jsonl", workers=4)
    with pytest.raises(RunNotFound):  # the store refuses it (no such run): not an outage, so not spooled
        courier.send_many([batch("ok", [0]), batch("no-such-run", [0])])
    client = FlakyTracker(runs=["r", "q"])
    courier = Courier(client, tmp_path / "t.jsonl", workers=4)
    courier.send_many([batch("r", [0]), batch("r", [1]), batch("q", [0])])  # two of one run: sent in order
    assert client.sent[("r", "train/acc")] == [0, 1]


def test_a_server_that_accepts_but_does_not_answer_costs_a_send_the_probe_not_the_request_timeout(tmp_path):
    """A restarting `mlflow server` listens before its workers serve: a request then hangs for the HTTP timeout
    (twice, with MLflow's one retry). With a backlog waiting, the courier asks the short probe instead."""
    import socket
    import threading
    import time
    from functools import partial
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from grokray.tracking.uri import server_answers

    booting = socket.socket()
    booting.bind(("127.0.0.1", 0))
    booting.listen(16)  # connections complete in the kernel's backlog; nobody accepts them
    uri = f"http://127.0.0.1:{booting.getsockname()[1]}"

    class NoHealth(BaseHTTPRequestHandler):  # a proxy without /health: any HTTP answer means "up"
        def do_GET(self):
            self.send_error(404)

        def log_message(self, *args):
            pass

    proxy = HTTPServer(("127.0.0.1", 0), NoHealth)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        t0 = time.monotonic()
        assert not server_answers(uri, timeout_s=0.5)
        assert time.monotonic() - t0 < 3
        assert server_answers(f"http://127.0.0.1:{proxy.server_address[1]}")
        assert not server_answers("http://127.0.0.1:1")  # refused

        client, clock = FlakyTracker(), Clock()
        probes = []
        courier = Courier(client, tmp_path / "p.jsonl", clock=clock, sleep=clock.sleep, attempts=1,
                          probe=lambda: probes.append(clock.t) or server_answers(uri, timeout_s=0.5))
        client.up = False
        courier.send(batch("r", [0]))  # the outage is found by a refused request; no probe yet
        client.up = True  # the "client" would answer now, but the server behind the probe still boots
        t0 = time.monotonic()
        for i in range(1, 20):
            clock.t += 1.0
            courier.send(batch("r", [i]))
        assert time.monotonic() - t0 < 10  # ~5 probes of 0.5 s over 19 simulated seconds, not 19 requests
        assert 3 <= len(probes) <= 6 and not client.sent  # backoff spaced the probes; the order held
        courier.probe = partial(server_answers, f"http://127.0.0.1:{proxy.server_address[1]}")  # server is up
        assert courier.close(wait_s=120) == 0
        assert client.sent[("r", "train/acc")] == list(range(20))
    finally:
        booting.close()
        proxy.shutdown()


def test_replay_names_a_launch_a_dead_driver_left_running(tmp_path, capsys):
    """Issue 61: a SIGKILLed driver's launch, replayed: its points are delivered, and the parent it never closed
    is named in one line with how to close it (it stayed RUNNING with no hint)."""
    import socket
    import subprocess
    import sys

    from grokray.tracking.schema import DRIVER_TAG, KIND_TAG, LAUNCH_TAG, NOTE_TAG, PARENT, ROLE_TAG, RUNS_SUMMARY_TAG

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that ran and ended: the killed driver's
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("killed")
    tags = {ROLE_TAG: PARENT, KIND_TAG: "grid", LAUNCH_TAG: "launch-key-1", NOTE_TAG: "-", RUNS_SUMMARY_TAG: "1",
            DRIVER_TAG: f"{socket.gethostname()}:{dead.pid}"}
    parent = client.create_run(exp, run_name="killed sweep", tags=tags).info.run_id
    child = client.create_run(exp, tags={"mlflow.parentRunId": parent}).info.run_id
    spool_dir = tmp_path / "undelivered" / "launch-key-1"
    Spool(spool_dir / "pack-0000-1.jsonl").append(batch(child, range(5), terminate="FINISHED"))
    assert main(["replay", str(spool_dir), "--tracking-uri", uri]) == 0
    out, err = capsys.readouterr()
    assert "replayed 1 of 1 batches (5 of 5 metric points)" in out
    said = [line for line in err.splitlines() if line.startswith("grokray:")]
    assert len(said) == 1 and f"'killed sweep' (parent run {parent[:8]})" in said[0], said
    assert f"pid {dead.pid} on this machine" in said[0] and "--resume` continues it" in said[0]
    assert client.get_run(child).info.status == "FINISHED" and client.get_run(parent).info.status == "RUNNING"


def test_a_write_the_tracker_splits_is_not_stored_twice_when_a_later_request_fails(tmp_path):
    """MLflow takes 1,000 points a request, so 2,500 points are three requests; when the second fails (a dropped
    connection) the retry sends only what the store lacks, not the first request's points again (without that, the
    retry sent all 2,500)."""
    from grokray.tracking.delivery import deliver
    from grokray.tracking.trackers import open_tracker

    tracker = open_tracker(f"sqlite:///{tmp_path}/mlflow.db", prepare=True)
    run_id = tracker.create_run(tracker.ensure_experiment("split"), "r", {}, None)
    real, calls = tracker.client.log_batch, []

    def second_fails(*args, **kwargs):
        calls.append(len(kwargs.get("metrics", [])))
        if len(calls) == 2:
            raise ConnectionError("Connection reset by peer")
        return real(*args, **kwargs)

    tracker.client.log_batch = second_fails
    deliver(tracker, Batch(run_id, [["val/acc", s / 2500, 1, s] for s in range(2500)]), dedup=False)
    steps = [p.step for p in tracker.curve(run_id, "val/acc")]
    assert steps == list(range(2500))  # each point once
    assert calls[:2] == [1000, 1000] and sum(calls[2:]) == 1500  # the retry sent the 1,500 the store lacked


class SlowTracker(FlakyTracker):
    """A server that answers, slowly: every call costs `delay` seconds of the fake clock (a store on a loaded
    machine), and `calls` counts them."""

    def __init__(self, clock, delay, runs=("r",)):
        super().__init__(runs=runs)
        self.clock, self.delay, self.calls = clock, delay, 0

    def __getattr__(self, method):
        call = super().__getattr__(method)

        def slow(*args, **kwargs):
            self.calls += 1
            self.clock.t += self.delay
            return call(*args, **kwargs)

        return slow


def test_an_outages_backlog_goes_out_a_request_per_run_and_holds_no_report_long(tmp_path):
    """CI of 2026-12-02, 3 tests at once on 2 cores: after a 30-s outage a pack's reports spent 18-21 s in
    tracking calls, delivering the backlog a batch at a time (a read and a write for each of 4 members x ~40
    reports, on the training thread). Now a run's queued batches go out merged, and a report spends at most
    DRAIN_SLICE_S (plus the request in flight) on the backlog before training goes on."""
    from grokray.tracking.delivery import DRAIN_SLICE_S

    members = [f"m{i}" for i in range(4)]
    clock = Clock()
    client = SlowTracker(clock, delay=0.25, runs=members)
    courier = Courier(client, tmp_path / "p.jsonl", clock=clock, sleep=clock.sleep, workers=4)

    def report(r):
        return [Batch(client.ids[m], [["val/acc", 0.5, 1, s] for s in range(10 * r, 10 * r + 10)], key=m)
                for m in members]

    client.up = False
    for r in range(40):  # the outage: 160 batches spooled
        courier.send_many(report(r))
        clock.t += 1.0
    assert pending_points(tmp_path) == (160, 1600)
    client.up, client.calls = True, 0
    clock.t += 60  # past the backoff
    held = []
    for r in range(40, 45):  # training goes on; each report delivers some of the backlog, then its own
        t0 = clock.t
        courier.send_many(report(r))
        held.append(clock.t - t0)
    assert max(held) <= DRAIN_SLICE_S + 2 * client.delay + 4 * client.delay, held
    assert courier.close(wait_s=120) == 0
    for m in members:  # every point once, in step order
        assert client.sent[(m, "val/acc")] == list(range(450))
    # merged: per member one read of its stored steps and one write for the backlog (2 x 4), not 2 x 160; the
    # reports after the outage queue behind it and go out merged with it
    assert client.calls <= 8 + 4 * 5, client.calls
    assert not (tmp_path / "p.jsonl").exists()


def test_a_merged_backlog_keeps_each_runs_order_and_its_end(tmp_path):
    """A member whose run was made late (its first batches carry only its trial key) merges with its later
    batches that carry the run id; another member's batches between them do not break either run's order; the
    terminating batch is the last of its run, and the run ends at its own time."""
    from grokray.tracking.spool import MERGE_MAX_POINTS, head_group, merged

    a = [Batch("", [["k", 0.1, 1, s]], key="a", create={"experiment_id": "0"}) for s in range(3)]
    a[1].run_id = a[2].run_id = "ra"
    b = [Batch("rb", [["k", 0.1, 1, s]], key="b") for s in range(2)]
    end = Batch("ra", [["k", 0.1, 1, 3]], key="a", terminate="FINISHED", end_time=7)
    after = Batch("ra", [["k", 0.1, 1, 4]], key="a")  # never happens in practice; must not jump the end
    queue = [a[0], b[0], a[1], b[1], a[2], end, after]
    assert head_group(queue) == [0, 2, 4, 5]
    one = merged([queue[i] for i in head_group(queue)])
    assert [m[3] for m in one.metrics] == [0, 1, 2, 3] and one.run_id == "ra" and one.create is None
    assert (one.terminate, one.end_time, one.key) == ("FINISHED", 7, "a")
    assert head_group(queue[1:]) == [0, 2]
    big = [Batch("r", [["k", 0.1, 1, s]] * (MERGE_MAX_POINTS // 2 + 1), key="r") for s in range(3)]
    assert head_group(big) == [0]  # a second would pass the bound
    parent = [Batch("p", tags={"x": "1"}), Batch("p", tags={"x": "2"})]
    assert head_group(parent) == [0]  # a parent's writes (no trial key) go one by one, as before


def test_replay_delivers_a_spool_of_many_batches_merged(tmp_path):
    from grokray.tracking.delivery import replay_dir

    client = SlowTracker(Clock(), delay=0.0, runs=["r", "q"])
    spool = Spool(tmp_path / "pack-1.jsonl")
    for s in range(30):
        for run in ("r", "q"):
            spool.append(Batch(client.ids[run], [["val/acc", 0.5, 1, s]], key=run,
                               terminate="FINISHED" if s == 29 else None))
    assert replay_dir(tmp_path, client) == (60, 60, 0)
    assert client.sent[("r", "val/acc")] == client.sent[("q", "val/acc")] == list(range(30))
    assert client.status("r")[0] == client.status("q")[0] == "FINISHED"
    assert client.calls <= 2 * 3, client.calls  # per run: a read, a write, the status
    assert pending_points(tmp_path) == (0, 0)


@pytest.mark.parametrize("content", [b"\x00\xff\xfe garbage \x9c" * 200, b'{"run_id": "x", "a": 1}\n{"foo": 2}\n',
                                     b"[1, 2, 3]\n"], ids=["binary", "another-schema", "json-not-a-record"])
def test_replay_of_a_folder_that_holds_no_spool_is_one_line(tmp_path, capsys, content):
    """Issue 71: binary garbage was a UnicodeDecodeError traceback, JSON of another schema a KeyError."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    MlflowClient(uri).create_experiment("there")  # the store exists: the spool folder is what is wrong
    folder = tmp_path / "undelivered"
    folder.mkdir()
    (folder / "pack-1.jsonl").write_bytes(content)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    capsys.readouterr()  # MLflow's lines of making the store
    assert main(["replay", str(folder), "--tracking-uri", uri]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "dir:" in err[0] and "holds no spool" in err[0], err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_damaged_line_of_a_spool_is_named_and_skipped_and_the_rest_replayed(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("replay")).info.run_id
    path = tmp_path / "undelivered" / "pack-0000-1.jsonl"
    spool = Spool(path)
    spool.append(batch(run_id, range(0, 5)))
    with path.open("ab") as f:
        f.write(b"\xff\xfe not a batch\n" + b'{"batch": "b", "run_id": 3, "metrics": []}\n')
    spool.append(batch(run_id, range(5, 10), terminate="FINISHED"))
    assert [len(b.metrics) for b in undelivered(path)] == [5, 5]
    assert main(["replay", str(path.parent), "--tracking-uri", uri]) == 0
    out, err = capsys.readouterr()
    assert "replayed 2 of 2 batches (10 of 10 metric points)" in out
    assert f"{path}: 2 damaged lines (line 2, 3)" in err and "skipped" in err
    assert [m.step for m in client.get_metric_history(run_id, "train/acc")] == list(range(10))


def test_a_record_written_after_a_torn_line_is_not_lost_with_it(tmp_path):
    """A crash mid-write leaves a line without its newline; the next write (a replay's `delivered` mark, a
    retried pack) starts a line of its own instead of joining the torn one."""
    path = tmp_path / "s.jsonl"
    spool = Spool(path)
    spool.append(batch("r", [1]))
    with path.open("a") as f:
        f.write(batch("r", [2]).to_json()[:25])
    spool.append(batch("r", [3]))
    read = __import__("grokray.tracking.spool", fromlist=["read_spool"]).read_spool(path)
    assert [b.metrics[0][3] for b in read.batches] == [1, 3] and read.damaged == [2]
