"""Strict numerics for every test: deterministic kernels, one thread (CI has 2 cores and runs Ray beside us)."""

import os
import re
import threading
from pathlib import Path

import pytest
import torch

TESTING_PAGE = Path(__file__).resolve().parents[1] / "docs" / "testing.md"
TEST_ROW = re.compile(r"^\| `(tests/[^`]+::[^`]+)` \|.*\| ([\d.]+) s \|$")  # a tier's row: one test, its cost
MODULE_ROW = re.compile(r"^\| `(tests/[^`:]+\.py)` \| \d+ \| ([\d.]+) s \|")  # make test's row: one module


def measured_costs(page: Path = TESTING_PAGE) -> tuple[dict[str, float], dict[str, float]]:
    """Each test's cost (the tiers' rows) and each `make test` module's (its rows are per module) as
    docs/testing.md shows them, generated from CI's JUnit by .ci/testing_table.py: the order below comes from
    measurements, not from a list kept by hand."""
    tests: dict[str, float] = {}
    modules: dict[str, float] = {}
    for line in page.read_text().splitlines() if page.exists() else []:
        if m := TEST_ROW.match(line):
            tests[m.group(1)] = float(m.group(2))
        elif m := MODULE_ROW.match(line):
            modules[m.group(1)] = float(m.group(2))
    return tests, modules


def longest_first(items: list, by_module: bool, tests: dict[str, float], modules: dict[str, float]) -> list:
    """Items in the order that ends a tier soonest: the longest first (a long test handed out last is the tier's
    tail). pytest-xdist hands out whole modules under --dist loadfile, so there modules are ordered (by their
    collected tests' summed cost, else the module's own row), each kept whole and in its own order; under --dist
    load single tests are. A test or module the page does not time yet (a new one) goes first: it may be long,
    and a short one first costs the tier little."""
    unknown = float("inf")
    if not by_module:
        return sorted(items, key=lambda i: -tests.get(i.nodeid, unknown))  # stable: ties keep collection order
    known: dict[str, float] = {}
    for i in items:
        module = i.nodeid.split("::")[0]
        if i.nodeid in tests:
            known[module] = known.get(module, 0.0) + tests[i.nodeid]
    return sorted(items, key=lambda i: -known.get(i.nodeid.split("::")[0],
                                                  modules.get(i.nodeid.split("::")[0], unknown)))


def pytest_collection_modifyitems(config, items):
    """The Makefile turns off xdist's own reordering by test count (--no-loadscope-reorder): by count, the library
    tier handed out its README test (12 of the tier's 24 minutes in CI) ninth of eleven modules."""
    dist = config.getoption("dist", "no")
    items[:] = longest_first(items, dist != "load", *measured_costs())


@pytest.fixture(autouse=True, scope="session")
def _strict_numerics():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    yield


@pytest.fixture(autouse=True, scope="session")
def _sqlite_waits_for_locks():
    """The tests' own MLflow clients on SQLite wait for a lock as grokray's do (issue 69: CI's node-loss test read
    the store while its packs wrote and failed on "database is locked" after SQLite's default 5 s)."""
    from grokray.tracking.mlflow_tracker import wait_for_sqlite_locks

    wait_for_sqlite_locks()
    yield


@pytest.fixture(autouse=True, scope="session")
def _ray_workers_at_the_tests_priority():
    """Every Ray a test starts (ray.init, ray.cluster_utils.Cluster, `ray start`, a grokray subprocess) runs its
    workers at nice 0, as grokray's own private Ray does (run/cluster.py). At Ray's default of 15 they starve
    behind the other tests' drivers and servers on a loaded 2-core CI machine: CI's node-loss test of
    2026-12-02 saw no pack start in 300 s, its workers still importing torch at 3 % of a core."""
    from grokray.run.cluster import WORKER_NICENESS

    before = os.environ.get(WORKER_NICENESS)
    os.environ.setdefault(WORKER_NICENESS, "0")
    yield
    if before is None:
        os.environ.pop(WORKER_NICENESS, None)


@pytest.fixture(autouse=True)
def _no_launch_warm_up_outlives_its_test():
    """A launch's background warm-up (run/warm.py) ends with the launch, started or not: one left running by a
    launch whose Ray never started once logged MLflow's table migrations into the next test's stderr, and CI
    failed on a test it had nothing to do with (2026-12-07). The test that leaves one fails instead."""
    yield
    left = [t for t in threading.enumerate() if t.name.startswith("grokray-warm")]
    for thread in left:
        thread.join(0.2)  # a finished warm-up's thread is gone within microseconds; a store's migrations take seconds
    assert not [t.name for t in left if t.is_alive()], "a launch's warm-up thread outlived its test"


def _private_ray(num_cpus: int):
    import ray

    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def local_ray():
    """A private local Ray for one test module (never a bare ray.init(): it may join a stale cluster)."""
    yield from _private_ray(2)


@pytest.fixture(scope="module")
def one_slot_ray():
    """A private local Ray of one CPU: a launch's packs train in one process, one after another. For a test of
    many small launches (the atlas smoke's 26 figures, each its own Tune run) whose checks are not about two packs
    at once: each new trial process imports torch, Tune and MLflow again (about 7 CPU-s on 2 cores)."""
    yield from _private_ray(1)


def open_parent(uri: str, spec, plan, spool_dir, kind: str = "grid"):
    """A parent run opened as a launch opens it, and the RunTarget its packs get: for tests that drive a
    PackTracker by hand, without Ray. Returns (ParentRun, RunTarget)."""
    import yaml

    from grokray.tracking.pack_runs import RunTarget
    from grokray.tracking.parent import ParentRun

    parent = ParentRun(uri, spec.name, str(spool_dir))
    parent.open(kind, spec.hash(), f"{spec.name} {kind}", plan.swept, sorted(spec.log_axes),
                yaml.safe_dump(spec.raw))
    target = RunTarget(uri, parent.experiment_id, parent.run_id, spec.hash(), "test", tuple(plan.swept),
                       tuple(sorted(spec.log_axes)), spool_dir=parent.spool_dir)
    return parent, target


@pytest.fixture(params=["sqlite", "postgres"])
def server(request, tmp_path):
    """The tracking server of the outage tests, once per backend (PostgreSQL: Debian's server, if installed): an
    `mlflow server` on 127.0.0.1 that a test can stop and start again on the same port and store."""
    from grokray.tracking.local_servers import LocalPostgres, MlflowServer, missing_reason

    if request.param == "postgres":
        reason = missing_reason()
        if reason:
            pytest.skip(f"no local PostgreSQL: {reason}")
        with LocalPostgres() as pg:
            srv = MlflowServer(tmp_path, pg.uri).start()
            yield srv
            srv.stop()
        return
    srv = MlflowServer(tmp_path).start()
    yield srv
    srv.stop()


def assert_schedule_and_crossings(steps: list[int], schedule, run) -> None:
    """A stored curve's steps: every point of the record schedule once (0 lost, 0 duplicated), plus only the
    run's own crossing steps (engine.curves adds the rows measured where train or val accuracy crossed)."""
    assert steps == sorted(set(steps)), "a point stored twice"
    missing = sorted(set(schedule) - set(steps))
    assert not missing, f"{len(missing)} scheduled points lost, e.g. {missing[:5]}"
    crossings = {int(v) for k, v in run.data.metrics.items() if k.startswith(("step_train_acc_", "step_val_acc_"))}
    extra = sorted(set(steps) - set(schedule) - crossings)
    assert not extra, f"steps neither scheduled nor a crossing: {extra[:5]}"

# The CLI's supervisor (grokray/supervisor.py) runs a launch's driver in a child process; tests that call `main`
# in-process read its output and summary there. The tests of the supervisor itself take this out of their env.
os.environ.setdefault("GROKRAY_SUPERVISE", "0")
