"""When to evaluate and when to record a curve point."""

from __future__ import annotations

import numpy as np


def record_steps(total: int, per_decade: int, linear_points: int = 100) -> set[int]:
    """Log-spaced steps (grokking lives on a log time axis) plus an even grid, always including 0 and total."""
    steps = {0, total}
    if total >= 1:
        n = max(2, int(np.ceil(np.log10(max(total, 10)) * per_decade)) + 1)
        steps.update(int(s) for s in np.unique(np.round(np.logspace(0, np.log10(total), n))))
        steps.update(int(s) for s in np.linspace(0, total, linear_points + 1).round())
    return {s for s in steps if 0 <= s <= total}


def auto_eval_every(gap: int) -> int:
    """Evaluate often enough that a crossing step is known to better than gap / 10."""
    return max(1, gap // 20)
