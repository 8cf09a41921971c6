"""MLflow adapter: experiment / parent run / child runs. Imported only by sweep/ and the CLI, never by the core."""

from .mlflow_runs import (
    DEFAULT_TRACKING_URI,
    PackTracker,
    SweepTracker,
    child_runs,
    clean,
    code_version,
    is_secret,
    phase_counts,
    resolve_tracking_uri,
    ui_hint,
)

__all__ = ["DEFAULT_TRACKING_URI", "PackTracker", "SweepTracker", "child_runs", "clean", "code_version",
           "is_secret", "phase_counts", "resolve_tracking_uri", "ui_hint"]
