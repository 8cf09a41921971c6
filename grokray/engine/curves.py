"""A member's curve as MLflow shows it: its scheduled points, plus the rows measured where something happened.

The schedule (engine.schedule.record_steps) is fixed before training, so a member that stops early ends between
two scheduled points and its curve would stop short of the crossing that stopped it: a grokking run whose chart
never reaches 0.9. The trainer therefore keeps the rows measured at the train crossing, the val crossing and the
stop, and the curve takes them in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def member_curve(names: Sequence[str], scheduled: Iterable[tuple[int, Sequence[float]]], records: set[int], stop: int,
                 marks: Iterable[tuple[int | None, Sequence[float]]]) -> dict[str, list]:
    """{"step": [...], name: [...]} from the pack's recorded (step, row) pairs that are this member's (`records`)
    up to `stop`, and the (step, row) `marks` (None or a row of NaN: nothing measured there). A mark measures
    only some columns (a train crossing between evaluations has no val/acc): the others are None there."""
    points: dict[int, Sequence[float]] = {}
    for step, row in scheduled:
        if step > stop:
            break
        if step in records:
            points[step] = row
    for step, row in marks:
        if step is not None and 0 <= step <= stop and step not in points and any(not math.isnan(v) for v in row):
            points[step] = [None if math.isnan(v) else v for v in row]
    curve: dict[str, list] = {"step": sorted(points)} | {name: [] for name in names}
    for step in curve["step"]:
        for name, value in zip(names, points[step], strict=True):
            curve[name].append(value)
    return curve
