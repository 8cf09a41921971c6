"""Plain-text summaries for the terminal."""

from __future__ import annotations

import math


def curve_table(result, rows: int = 12) -> str:
    """A short table of the recorded curve: about `rows` log-spaced points plus the last one."""
    steps = result.curve["step"]
    if not steps:
        return "(no curve points)"
    picks = sorted({round(i * (len(steps) - 1) / max(1, rows - 1)) for i in range(rows)})
    lines = [f"{'step':>8} {'train/acc':>9} {'val/acc':>8} {'train/loss':>10} {'val/loss':>9}"]
    fmt = lambda v: "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4g}"  # noqa: E731
    for i in picks:
        c = result.curve
        lines.append(f"{steps[i]:>8} {fmt(c['train/acc'][i]):>9} {fmt(c['val/acc'][i]):>8} "
                     f"{fmt(c['train/loss'][i]):>10} {fmt(c['val/loss'][i]):>9}")
    return "\n".join(lines)
