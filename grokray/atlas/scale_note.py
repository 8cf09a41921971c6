"""The line a page at a smaller scale opens with: how its model, task and budget differ from the spec as written (the
paper's setup), so a reader never takes a reduced figure for the paper's. Made from the two configurations."""

from __future__ import annotations

from ..numbers import short_number
from ..tracking.schema import flatten
from .plan import Figure, plan_figure

COMPARED = ("task.", "model.", "train.steps", "train.batch_size", "phases.budget")


def scale_differences(figure: Figure) -> list[tuple[str, object, object]]:
    """(key, this scale's value, the paper scale's) for the task, model and budget fields that differ, in the
    configuration's order."""
    if figure.scale == "paper":
        return []
    paper = plan_figure(figure.path, "paper", figure.overrides)
    mine = flatten(figure.pieces[0].spec.first_trial().to_dict())
    theirs = flatten(paper.pieces[0].spec.first_trial().to_dict())
    return [(k, v, theirs.get(k)) for k, v in mine.items() if k.startswith(COMPARED) and theirs.get(k) != v]


def scale_line(figure: Figure) -> str | None:
    """'At this scale (reduced) the setup differs from the paper's: task.p 59 (paper: 97), ...', or None."""
    found = scale_differences(figure)
    if not found:
        return None
    return (f"At this scale ({figure.scale}) the setup differs from the paper's: "
            + ", ".join(f"{k} {_value(v)} (paper: {_value(p)})" for k, v, p in found) + ".")


def _value(v) -> str:
    """Budgets with their thousands (2,000), other numbers as everywhere (short_number)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    return f"{int(v):,}" if float(v).is_integer() and abs(v) >= 1000 else short_number(v)
