"""An MLflow PostgreSQL store filled with finished runs by SQL: what a lab's store looks like after months of
sweeps, made in minutes instead of the hours a launch of that size takes (benchmarks/bench_scale.py --prefill
measures what such a store costs a new launch).

It writes MLflow's own tables, so it lives beside the MLflow tracker: MLflow's nesting tag and table layout are
spelled in tracking/ only, and a change of MLflow's schema breaks one module (tests/test_tracking_postgres.py reads
the runs back through the tracker).
"""

from __future__ import annotations

from .mlflow_tracker import PARENT_TAG

# Postgres SQL over a temporary table of run ids: each statement makes every run's rows at once.
FILL_SQL = """
CREATE TEMP TABLE filled AS SELECT i, md5(i::text || random()::text) AS id FROM generate_series(1, :runs) i;
INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, user_id, status, start_time, end_time,
  source_version, lifecycle_stage, artifact_uri, experiment_id)
  SELECT id, 'r' || i, 'LOCAL', '', '', 'fill', 'FINISHED', 1700000000000 + i, 1700000001000 + i, '', 'active', '',
  :experiment FROM filled;
INSERT INTO tags (key, value, run_uuid) SELECT 'tag' || k, 'value-' || k, id FROM filled, generate_series(1, :tags) k;
INSERT INTO tags (key, value, run_uuid) SELECT :parent_tag, :parent, id FROM filled;
INSERT INTO params (key, value, run_uuid)
  SELECT 'p' || k, random()::text, id FROM filled, generate_series(1, :params) k;
INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid)
  SELECT 'm' || k, random(), 1700000000000, :last_step, false, id FROM filled, generate_series(1, :metrics) k;
INSERT INTO metrics (key, value, timestamp, step, is_nan, run_uuid)
  SELECT 'm' || k, random(), 1700000000000 + i * 1000 + s, s, false, id
  FROM filled, generate_series(1, :series) k, generate_series(0, :last_step) s
"""


def fill_finished_runs(database_uri: str, experiment_id: str, parent_id: str, runs: int, *, tags: int = 13,
                       params: int = 54, metrics: int = 20, series: int = 10, points: int = 30) -> None:
    """Add `runs` FINISHED child runs of `parent_id` to `experiment_id`, each with `tags` tags beside its parent
    link, `params` params, `metrics` latest metrics and `series` of them with `points` curve points.

    Args:
        database_uri: the store's SQLAlchemy URI (postgresql+psycopg://...), not a server's address: the rows go
            into its tables directly.
        experiment_id: an existing experiment of that store (Tracker.ensure_experiment).
        parent_id: an existing run of it, which the filled runs are children of.
        runs: how many runs to add.
        tags, params, metrics, series, points: what each run holds (the defaults: a grokray child's counts).

    Example:
        >>> tracker = open_tracker(database_uri)  # doctest: +SKIP
        >>> experiment = tracker.ensure_experiment("old sweeps")  # doctest: +SKIP
        >>> parent = tracker.create_run(experiment, "old sweeps", {}, None)  # doctest: +SKIP
        >>> fill_finished_runs(database_uri, experiment, parent, 80_000)  # doctest: +SKIP
    """
    if series > metrics:
        raise ValueError(f"series ({series}) must be at most metrics ({metrics}): a curve's last point is a metric")
    from sqlalchemy import create_engine, text

    engine = create_engine(database_uri)
    try:
        values = {"runs": runs, "experiment": int(experiment_id), "tags": tags, "parent_tag": PARENT_TAG,
                  "parent": parent_id, "params": params, "metrics": metrics, "series": series,
                  "last_step": points - 1}
        with engine.begin() as con:
            for statement in FILL_SQL.split(";"):
                con.execute(text(statement), values)  # a statement takes the values it names
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as con:
            con.execute(text("VACUUM ANALYZE"))  # as autovacuum would have left a store filled over months
    finally:
        engine.dispose()
