"""MLflow on a real PostgreSQL on 127.0.0.1 (Debian's server binaries, started per test module): the cluster's
recipe for the head (a role whose password only ~/.pgpass holds) and a sweep through a PostgreSQL-backed
`mlflow server`. Skipped, with the reason, where PostgreSQL or its driver is not installed; CI installs both."""

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
        monkeypatch.setenv("PGPASSFILE", str(pgpass))
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


@pytest.fixture(scope="module")
def postgres_server(tmp_path_factory):
    with LocalPostgres() as pg, MlflowServer(tmp_path_factory.mktemp("pgserver"), pg.uri, workers=2) as server:
        yield pg, server


@pytest.mark.reliability  # ~70 s with its server; `make reliability` (and CI) runs it, keeping `make test` short
def test_a_sweep_through_a_postgres_backed_server(local_ray, tmp_path, postgres_server):
    from grokray.run.grid import run_sweep
    from grokray.run.options import LaunchOptions
    from grokray.spec import load_spec

    pg, server = postgres_server
    spec = load_spec(ROOT / "sweeps" / "quickstart.yaml", ["resources.pack_size=4"], scale="smoke")
    summary = run_sweep(spec, LaunchOptions(tracking_uri=server.url, storage=str(tmp_path / "results"),
                                           min_report_s=0.0, checkpoint_every=100, progress="never"))
    assert summary.errored_trials == 0 and summary.configurations == 8
    runs = pg.sql("SELECT r.run_uuid, r.status, t.value FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
                  "AND t.key = 'grokray.phase'")
    assert len(runs) == 8 and all(status == "FINISHED" for _, status, _ in runs)
    assert sorted(p for _, _, p in runs) == sorted(p for p, n in summary.phase_counts.items() for _ in range(n))
    # every curve point exactly once: no (run, key, step) stored twice
    dup = pg.sql("SELECT count(*) FROM (SELECT run_uuid, key, step FROM metrics GROUP BY run_uuid, key, step "
                 "HAVING count(*) > 1) d")[0][0]
    points = pg.sql("SELECT count(*) FROM metrics m JOIN tags t ON t.run_uuid = m.run_uuid "
                    "AND t.key = 'grokray.phase' WHERE m.key = 'val/acc'")[0][0]
    assert dup == 0 and points > 8 * 10
