"""Strict numerics for every test: deterministic kernels, one thread (CI has 2 cores and runs Ray beside us)."""

import os

import pytest
import torch

# The modules that take longest in their tier, longest first (CI's JUnit of 2026-12-03: docs/testing.md has each
# test's cost). pytest-xdist hands modules out in collection order (the Makefile turns off its reordering by test
# count), so a long module starts first, not after the short ones: by test count the library tier handed out its
# README test (12 of the tier's 24 minutes in CI) ninth of eleven modules and its atlas smoke (10 minutes) seventh.
LONGEST_FIRST = ("test_readme.py", "test_library_specs.py", "test_prieto_mlp.py", "test_grokfast_reference.py",
                 "test_degrok_signatures.py", "test_reliability.py", "test_reliability_drivers.py",
                 "test_reliability_jobs.py", "test_reliability_never_waits.py", "test_disk_full.py", "test_search.py",
                 "test_atlas.py", "test_launch_contract.py", "test_runs_table.py", "test_run.py",
                 "test_what_users_see.py", "test_fuzz_spec.py", "test_analyze_cli.py", "test_cost.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # a stable sort: the rest keep their order


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


@pytest.fixture(scope="module")
def local_ray():
    """A private local Ray for one test module (never a bare ray.init(): it may join a stale cluster)."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


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
