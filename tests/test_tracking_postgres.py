"""MLflow on a real PostgreSQL on 127.0.0.1 (Debian's server binaries, started per test module): the cluster's
recipe for the head (a role whose password only ~/.pgpass holds). A sweep through a PostgreSQL-backed `mlflow server`
is make reliability's (test_reliability.py: the 10^4 load test and the outage tests). Skipped, with the reason,
where PostgreSQL or its driver is not installed; CI installs both."""

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from grokray.tracking.local_servers import LocalPostgres, MlflowServer, missing_reason

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=f"no local PostgreSQL: {missing_reason()}")


def test_the_cluster_recipe_reaches_postgres_with_the_pgpass_password_only(tmp_path, monkeypatch):
    """cluster.yaml's head commands, replayed on a local cluster that demands passwords over TCP: the role's
    generated password goes to psql on stdin and into a mode-600 pgpass file, never onto a command line, and
    `mlflow server` connects with a URI that holds no password."""
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    setup = " ".join(config["head_setup_commands"])
    start = " ".join(config["head_start_ray_commands"])
    assert "apt-get install -y postgresql" in setup and "openssl rand" in setup and "umask 077" in setup
    assert re.search(r'printf "CREATE ROLE mlflow LOGIN PASSWORD .*" "\$PW" \| sudo -u postgres psql', setup)
    uri = re.search(r"--backend-store-uri (\S+)", start).group(1)
    assert uri == "postgresql+psycopg://mlflow@127.0.0.1:5432/mlflow"  # no password in the URI or on argv
    assert "--workers 8 --gunicorn-opts '--threads 8 --timeout 120'" in start and "sqlite" not in start

    with LocalPostgres(host_auth="scram-sha-256") as pg:
        password = os.urandom(12).hex()
        pg.sql(f"CREATE ROLE mlflow LOGIN PASSWORD '{password}'")
        pg.sql("ALTER DATABASE mlflow OWNER TO mlflow")
        pgpass = tmp_path / "pgpass"
        old = os.umask(0o077)
        try:
            pgpass.write_text(f"127.0.0.1:{pg.port}:mlflow:mlflow:{password}\n")
        finally:
            os.umask(old)
        assert pgpass.stat().st_mode & 0o777 == 0o600
        backend = f"postgresql+psycopg://mlflow@127.0.0.1:{pg.port}/mlflow"
        import psycopg

        monkeypatch.setenv("PGPASSFILE", str(tmp_path / "missing"))
        with pytest.raises(psycopg.OperationalError, match="password"):  # the role needs its password over TCP
            psycopg.connect(host="127.0.0.1", port=pg.port, user="mlflow", dbname="mlflow").close()
        from grokray.tracking.uri import database_problem  # issue 61: the launch's check, one line, no password

        refused = database_problem(f"postgresql+psycopg://mlflow:wrong-{password}@127.0.0.1:{pg.port}/mlflow")
        assert refused.startswith("cannot open the database") and "password" in refused and password not in refused
        monkeypatch.setenv("PGPASSFILE", str(pgpass))
        assert database_problem(backend) is None
        with MlflowServer(tmp_path / "b", backend, workers=2) as server:
            client = MlflowClient(server.url)
            run = client.create_run(client.create_experiment("recipe"))
            client.log_param(run.info.run_id, "lr", "1e-3")
            argv = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
            assert password not in argv  # no process shows it
            stored = client.get_run(run.info.run_id).data
            assert password not in str(stored.params) + str(stored.tags)
        assert pg.sql("SELECT count(*) FROM runs")[0][0] == 1  # it went to PostgreSQL, as the mlflow role
        assert pg.sql("SELECT tableowner FROM pg_tables WHERE tablename = 'runs'")[0][0] == "mlflow"


def test_a_store_filled_by_sql_reads_back_through_the_tracker_as_finished_children():
    """tracking/mlflow_fill.py writes MLflow's tables directly (bench_scale's store of 8·10^4 old runs): the runs
    must be what MLflow itself would hold, so the tracker finds them under their parent with every tag, param,
    latest metric and curve point. About 4 s (a PostgreSQL of its own)."""
    from grokray.tracking.client import search_all
    from grokray.tracking.mlflow_fill import fill_finished_runs
    from grokray.tracking.records import RunQuery, RunStatus
    from grokray.tracking.trackers import open_tracker

    with LocalPostgres() as pg:
        tracker = open_tracker(pg.uri)
        experiment = tracker.ensure_experiment("old sweeps")
        parent = tracker.create_run(experiment, "old sweeps", {}, None)
        fill_finished_runs(pg.uri, experiment, parent, 25, tags=3, params=5, metrics=4, series=2, points=7)
        children = search_all(tracker, experiment, RunQuery(parent_id=parent))
        assert len(children) == 25 and len({c.run_id for c in children}) == 25
        first = children[0]
        assert first.status == RunStatus.FINISHED and first.parent_id == parent
        assert sorted(k for k in first.tags if not k.startswith("mlflow.")) == ["tag1", "tag2", "tag3"]
        assert sorted(first.params) == ["p1", "p2", "p3", "p4", "p5"]
        assert sorted(first.metrics) == ["m1", "m2", "m3", "m4"]
        curve = tracker.curve(first.run_id, "m2")
        assert [p.step for p in curve] == list(range(7)) and tracker.curve(first.run_id, "m3") == []
        with pytest.raises(ValueError, match="series"):
            fill_finished_runs(pg.uri, experiment, parent, 1, metrics=2, series=3)
