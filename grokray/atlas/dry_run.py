"""`grokray atlas --dry-run`: what an atlas run would do to each piece (run, resume or skip, as the store holds it)
and each piece's dry-run estimate, with nothing trained and nothing written. The paper scale of one figure can be
hours (Liu's Fig. 6b: 186 min measured on 2 cores): a user should see that before starting it."""

from __future__ import annotations

from ..plan.estimate import fmt_minutes
from ..tracking.store import Store
from ..tracking.uri import store_exists
from .plan import Figure
from .runner import ESTIMATE_METRIC, UPPER_METRIC, estimate_piece, is_complete


def piece_plan(figure: Figure, tracking_uri: str) -> list[tuple[str, str, float, float]]:
    """(piece, action, estimate s, upper s) per piece; a missing store is read as empty, never created."""
    store = Store(tracking_uri) if store_exists(tracking_uri) else None
    out = []
    for piece in figure.pieces:
        parent = store.parent(piece.spec.name, piece.spec.hash()) if store is not None else None
        if is_complete(parent):
            out.append((piece.name, "skip", 0.0, 0.0))
            continue
        if parent is not None and ESTIMATE_METRIC in parent.metrics:  # a resumed piece keeps its first estimate
            est = (parent.metrics[ESTIMATE_METRIC], parent.metrics[UPPER_METRIC])
        else:
            e = estimate_piece(piece, tracking_uri if store is not None else None)
            est = (e.seconds, e.upper_seconds)
        out.append((piece.name, "resume" if parent is not None else "run", *est))
    return out


def dry_run_lines(figures: list[Figure], tracking_uri: str) -> list[str]:
    lines, total, upper = [], 0.0, 0.0
    for figure in figures:
        for name, action, est, up in piece_plan(figure, tracking_uri):
            size = len(next(p for p in figure.pieces if p.name == name).spec.points())
            what = "complete in MLflow: skipped" if action == "skip" else \
                f"{action} {size} configurations, estimate {fmt_minutes(est)} (upper {fmt_minutes(up)})"
            lines.append(f"{figure.stem} {name}: {what}")
            total, upper = total + est, upper + up
    lines.append(f"in all: estimate {fmt_minutes(total)} (upper {fmt_minutes(upper)}), one piece after another")
    return lines
