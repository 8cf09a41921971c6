"""MLflow adapter, the ground floor of the driver side: imports nothing of grokray above `config`.

schema (every name written; pure), client (retry, paging, probe), delivery (spool and courier), parent (one
launch's parent run), drivers (whether a launch's driver died; pure), pack_runs (a pack's child runs, in the
worker), history (what stored runs say about cost), local_servers (a throwaway PostgreSQL and `mlflow server`).
Importing this package loads none of them: import the module you need, so that reading `schema` never loads
MLflow.
"""
