"""The line a page at a smaller scale opens with: how its setup differs from the spec as written (the paper's), so a
reader never takes a reduced figure for the paper's. Made from the two scales' specs field by field: a swept field's
values against the paper scale's values (the first trial alone reported a swept axis's first value as a difference
and missed a narrower range), every other field of the task, model, optimizer and budget by its value, and the
seeds."""

from __future__ import annotations

from ..numbers import short_number
from ..tracking.schema import flatten
from .plan import Figure, plan_figure

COMPARED = ("task.", "model.", "optim.", "train.steps", "train.batch_size", "phases.budget")


def swept_values(figure: Figure) -> dict[str, list]:
    """Each swept field's values over all the figure's pieces, in the order they first appear."""
    out: dict[str, list] = {}
    for piece in figure.pieces:
        for key, values in piece.spec.axes.items():
            out.setdefault(key, [])
            out[key] += [v for v in values if v not in out[key]]
    return out


def scale_differences(figure: Figure) -> list[tuple[str, object, object]]:
    """(key, this scale's value, the paper scale's) for every compared field that differs, in the configuration's
    order; a swept field's value is its list of values, and the seeds come last as `seeds`."""
    if figure.scale == "paper" and not figure.overrides:
        return []
    # the paper scale, with the same overrides; a paper-scale page run with overrides is held against the spec
    paper = plan_figure(figure.path, "paper", () if figure.scale == "paper" else figure.overrides)
    my_axes, their_axes = swept_values(figure), swept_values(paper)
    mine = flatten(figure.pieces[0].spec.first_trial().to_dict())
    theirs = flatten(paper.pieces[0].spec.first_trial().to_dict())
    found = []
    for key, value in mine.items():
        if not key.startswith(COMPARED) or key == "seed":
            continue
        ours = my_axes.get(key, value)
        other = their_axes.get(key, theirs.get(key))
        if ours != other:
            found.append((key, ours, other))
    seeds, paper_seeds = figure.pieces[0].spec.seeds, paper.pieces[0].spec.seeds
    if sorted(seeds) != sorted(paper_seeds):
        found.append(("seeds", seeds, paper_seeds))
    return found


def seed_range(seeds: list[int]) -> str | None:
    """'0-2' for consecutive seeds, '0' for one, None otherwise: how a page writes a figure's seeds."""
    seeds = sorted(seeds)
    if not seeds or seeds != list(range(seeds[0], seeds[0] + len(seeds))):
        return None
    return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])


def scale_line(figure: Figure) -> str | None:
    """'At this scale (reduced) the setup differs from the paper's: task.p 59 (paper: 97), ...', or None."""
    found = scale_differences(figure)
    if not found:
        return None
    if figure.scale == "paper":  # its overrides (-s), against the spec as written
        return ("Run at the paper scale with overrides, so the setup differs from the spec's: "
                + ", ".join(f"{k} {_value(v, k)} (the spec: {_value(p, k)})" for k, v, p in found) + ".")
    return (f"At this scale ({figure.scale}) the setup differs from the paper's: "
            + ", ".join(f"{k} {_value(v, k)} (paper: {_value(p, k)})" for k, v, p in found) + ".")


def _value(v, key: str = "") -> str:
    """Budgets with their thousands (2,000), other numbers as everywhere (short_number); a swept field's values as
    their range and count ('0.3 to 0.7, 5 values'), or listed where they are few or not numbers; seeds as 0-2."""
    if isinstance(v, list):
        if key == "seeds" and (consecutive := seed_range(v)):
            return consecutive
        numbers = [x for x in v if isinstance(x, int | float) and not isinstance(x, bool)]
        if len(v) > 3 and len(numbers) == len(v):
            return f"{_value(min(numbers))} to {_value(max(numbers))}, {len(v)} values"
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if v is None:
        return "unset"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    return f"{int(v):,}" if float(v).is_integer() and abs(v) >= 1000 else short_number(v)
