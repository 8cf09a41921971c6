"""The tracking store, the ground floor of the driver side: of grokray it imports only errors, config, the phase
rules (phases) and records (the Tracker Protocol its backends implement, beside the records it trades in).

trackers (open_tracker(uri): a URI becomes a Tracker), mlflow_tracker (MLflow as a Tracker: the only module that
imports MLflow), memory (the in-memory Tracker for tests), schema (every name written; pure), uri (which store a URI
names, and whether it answers), records (runs, points, statuses and queries as plain data) and queries (the
searches grokray makes), client (retry, StoreAway, paging), store (what the layers above read), spool (an outage's
write-ahead files), delivery and background (courier and replay), parent (one launch's parent run), drivers
(whether a launch's driver died; pure), pack_runs (a pack's child runs, in the worker), history (what stored runs
say about cost), local_servers (a throwaway PostgreSQL and `mlflow server`), mlflow_fill (a PostgreSQL store
filled with old runs by SQL, for benchmarks). Importing this package loads none of
them: import the module you need, so that reading `schema` never loads MLflow.
"""
