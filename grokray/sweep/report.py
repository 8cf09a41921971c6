"""The phase table `grokray run` prints at the end."""

from __future__ import annotations

PHASE_ORDER = ("comprehension", "grokking", "memorization", "confusion")


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
