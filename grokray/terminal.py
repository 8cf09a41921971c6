"""What the CLI prints at the end of a command: the curve table of `grokray train`, the phase table of a sweep."""

from __future__ import annotations

import math

PHASE_ORDER = ("comprehension", "grokking", "memorization", "confusion")


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


def phase_line(result, threshold: float) -> str:
    """`grokray train`'s verdict in words: a crossing that never happened says so instead of printing None."""

    def crossed(step, what):
        if step is None:
            return f"{what} acc never >= {threshold:g}"
        return f"{what} acc >= {threshold:g} at step {step:,}"

    parts = [crossed(result.step_train, "train"), crossed(result.step_val, "val")]
    if result.gap is not None:
        parts.append(f"grokking gap {result.gap:,} steps")
    return f"phase: {result.phase}  ({'; '.join(parts)}; {result.steps_run:,} steps run)"


def phase_table(counts: dict[str, int], total: int | None = None) -> str:
    """Counts per phase (the four of Liu et al. first, then any others such as diverged), with shares."""
    total = total if total is not None else sum(counts.values())
    names = [p for p in PHASE_ORDER if p in counts] + sorted(p for p in counts if p not in PHASE_ORDER)
    lines = [f"{'phase':<15} {'runs':>5} {'share':>6}"]
    for p in names:
        lines.append(f"{p:<15} {counts[p]:>5} {counts[p] / max(total, 1):>6.0%}")
    missing = total - sum(counts.values())
    if missing > 0:
        lines.append(f"{'(unfinished)':<15} {missing:>5} {missing / max(total, 1):>6.0%}")
    return "\n".join(lines)
