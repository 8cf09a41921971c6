"""What happened to each trial of a search, said apart: a trial its scheduler (ASHA) stopped before any of its runs
was classified scores the penalty, as one that trained its whole budget without generalizing does, but the two are
different outcomes. A page that called both "not within 2,000 steps" overstated what the stopped ones showed."""

from __future__ import annotations

import pandas as pd

GENERALIZED = ("comprehension", "grokking")


def trial_outcomes(df: pd.DataFrame, params: list[str]) -> dict[str, int]:
    """Trials (runs grouped by their searched parameters) by outcome: 'stopped before classified' (no run has a
    phase), 'generalized' (a majority of its classified runs comprehend or grok), 'did not generalize' (the rest)."""
    keys = [k for k in params if k in df.columns]
    if not keys or df.empty:
        return {}
    out = {"stopped before classified": 0, "generalized": 0, "did not generalize": 0}
    groups = [runs for _, runs in df.groupby(keys, dropna=False, sort=False)]
    seeds = pd.Series([len(g) for g in groups]).mode().iloc[0]  # runs a trial (one per seed)
    trials = []
    for runs in groups:  # rows whose parameters the data file lost share one group: one trial per `seeds` rows
        unnamed = runs[keys].isna().all(axis=None)
        trials += [runs.iloc[i:i + seeds] for i in range(0, len(runs), seeds)] if unnamed else [runs]
    for runs in trials:
        phases = runs["phase"].dropna()
        if phases.empty:
            out["stopped before classified"] += 1
        elif 2 * phases.isin(GENERALIZED).sum() > len(phases):
            out["generalized"] += 1
        else:
            out["did not generalize"] += 1
    return out


def outcomes_line(df: pd.DataFrame, params: list[str], budget: int) -> str | None:
    """'Of its 16 trials, 13 were stopped by ASHA before ... (...), 0 generalized (...) and 3 did not.', or None
    where the runs do not tell trials apart."""
    counts = trial_outcomes(df, params)
    total = sum(counts.values())
    if not total:
        return None
    stopped = counts["stopped before classified"]
    parts = [f"{stopped} were stopped by ASHA before any of their runs was classified (the search scores them as "
             f"not within {budget:,} steps: the scheduler's call, not runs that trained the budget and failed)"
             ] if stopped else []
    if stopped < total:
        parts += [f"{counts['generalized']} generalized (a majority of their classified runs comprehended or "
                  "grokked)", f"{counts['did not generalize']} did not"]
    listed = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
    return f"Of its {total} trial{'s' if total != 1 else ''}, {listed}."
