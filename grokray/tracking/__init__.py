"""MLflow adapter, the ground floor of the driver side: of grokray it imports only errors, config and the phase
rules (phases).

schema (every name written; pure), uri (which store a URI names, and whether it answers), client (retry, paging,
the store's preparation, StoreAway), records and store (runs as plain records), delivery and background (spool
and courier), parent (one launch's parent run), drivers (whether a launch's driver died; pure), pack_runs (a
pack's child runs, in the worker), history (what stored runs say about cost), local_servers (a throwaway
PostgreSQL and `mlflow server`). Importing this package loads none of them: import the module you need, so that
reading `schema` never loads MLflow.
"""
