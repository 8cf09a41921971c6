"""The confirmation stage of a search, as pure functions (no Optuna, Ray or MLflow).

A search ranks settings by what 2-3 seeds did, and its best is partly luck: the maximum of many noisy scores
is biased low. The confirmation re-runs the search's best few settings at seeds the search never saw and
reports, per setting, the median steps to the threshold with a bootstrap interval, so two methods are called
different only when their intervals do not overlap.

```yaml
search:
  confirm: {top: 3, seeds: [100, 101, 102, 103, 104]}   # the best 3 settings, 5 fresh seeds each
```
A seed that does not generalize within the budget scores the search's penalty (above the budget), so it pulls
the median up exactly as a slow seed would, and a median at the penalty reads "not within the budget".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from ..spec.blocks import coerce, unknown_key_error

CONFIRM_KEYS = ("top", "seeds")
CONFIRM_ARTIFACT_DIR = "search"  # the stage's rows, on the search's parent: search/confirmation.csv
CONFIRM_FILE = "confirmation.csv"
ROW_COLUMNS = ("setting", "seed", "phase", "score", "votes")  # then the setting's searched values
LEVEL = 0.90  # the interval's coverage
RESAMPLES = 10_000


@dataclass(frozen=True)
class ConfirmConfig:
    top: int
    seeds: tuple[int, ...]


def parse_confirm(raw, search_seeds: list[int]) -> ConfirmConfig | None:
    """search.confirm: {top, seeds}; seeds must be fresh (none of the search's own) so the stage is a new
    draw, not a re-read of the seeds that chose the settings."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SpecError("search.confirm", f"expected {{top: 3, seeds: [100, 101, 102, 103, 104]}}, got {raw!r}")
    for key in raw:
        if key not in CONFIRM_KEYS:
            raise unknown_key_error("search.confirm", key, CONFIRM_KEYS)
    top = coerce(int, raw.get("top", 3), "search.confirm.top", {"ge": 1})
    seeds = raw.get("seeds")
    if not isinstance(seeds, list) or len(seeds) < 2:
        raise SpecError("search.confirm.seeds", f"expected a list of at least 2 seeds, got {seeds!r}")
    seeds = [coerce(int, s, f"search.confirm.seeds[{i}]", {"ge": 0}) for i, s in enumerate(seeds)]
    if len(set(seeds)) != len(seeds):
        raise SpecError("search.confirm.seeds", f"got {seeds}; each seed once")
    reused = sorted(set(seeds) & set(search_seeds))
    if reused:
        raise SpecError("search.confirm.seeds", f"got {seeds}; {reused} already vote in the search (seeds: "
                                                f"{search_seeds}): the confirmation needs fresh ones")
    return ConfirmConfig(top, tuple(seeds))


def top_settings(scored: list[tuple], penalty: float, top: int) -> list[dict]:
    """The `top` best distinct settings, best first, from (params, score) or (params, score, nearness) tuples
    (lower is better; ties keep the earlier trial). Those that generalized come first, by score; where fewer than
    `top` did, the rest are filled from those that did not, nearest first by `nearness` (search_nearness: more
    seeds generalized, then a higher val accuracy at the last report), so every method confirms the same number of
    settings and a search that found nothing still learns whether fresh seeds fare better."""
    def order(item):
        return (item[1] >= penalty, item[1] if item[1] < penalty else 0.0, item[2] if len(item) > 2 else ())

    out, seen = [], set()
    for item in sorted(scored, key=order):
        key = tuple(sorted(item[0].items()))
        if key in seen:
            continue
        seen.add(key)
        out.append(dict(item[0]))
        if len(out) == top:
            break
    return out


def search_nearness(seeds_generalized, val_acc) -> tuple[float, float]:
    """How near a trial that did not generalize came, as a sort key (lower is nearer): its seeds that generalized,
    then the majority's val accuracy at its last report (an ASHA-stopped trial's is from the step it stopped)."""
    return (-float(seeds_generalized or 0), -float(val_acc or 0.0))


def bootstrap_median(values: list[float], level: float = LEVEL, resamples: int = RESAMPLES,
                     seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high): the median of `values` and the percentile bootstrap interval of the median. Fixed
    seed, so a page redraws the same interval from the same numbers."""
    x = np.asarray(values, dtype=float)
    draws = np.random.default_rng(seed).choice(x, size=(resamples, len(x)), replace=True)
    medians = np.median(draws, axis=1)
    tail = (1.0 - level) / 2.0
    return float(np.median(x)), float(np.quantile(medians, tail)), float(np.quantile(medians, 1.0 - tail))


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def confirmed_settings(rows: list[dict]) -> list[dict]:
    """Each setting's figures at the fresh seeds, in the search's order (setting 1 is its best), from rows
    {setting, seed, score, votes, phase}; a seed whose split cannot reach the threshold (votes 0) is left out, as in
    the search's seed vote. Each: {setting, scores, median, low, high, phases}."""
    by_setting: dict[int, list[tuple[float, str]]] = {}
    for row in rows:
        if int(row.get("votes", 1)):
            by_setting.setdefault(int(row["setting"]), []).append((float(row["score"]), row.get("phase", "")))
    out = []
    for setting, seeds in sorted(by_setting.items()):
        scores = [score for score, _ in seeds]
        median, low, high = bootstrap_median(scores)
        out.append({"setting": setting, "scores": scores, "median": median, "low": low, "high": high,
                    "phases": [phase for _, phase in seeds]})  # whether a seed that failed fit its training set
    return out


def confirmed_best(rows: list[dict]) -> dict | None:
    """The search's own choice, its best setting ranked on the search's seeds before any fresh seed ran, with its
    figures at the fresh seeds, and `others`: the other confirmed settings' figures, reported beside it. Choosing
    the fastest of them on the fresh seeds, then quoting its interval from those same seeds, would let the
    interval ignore the choice (the maximum of noisy medians is biased low, as the search's best is)."""
    settings = confirmed_settings(rows)
    if not settings:
        return None
    return {**settings[0], "others": settings[1:]}


def standing(methods: dict[str, dict], penalty: float) -> dict[str, str]:
    """Each method's place against the fastest confirmed median: 'fastest', 'tied with the fastest' (intervals
    overlap), 'slower' (its interval lies above), or 'did not generalize' (median at the penalty)."""
    live = {m: b for m, b in methods.items() if b is not None and b["median"] < penalty}
    if not live:
        return {m: "did not generalize" for m in methods}
    lead = min(live, key=lambda m: live[m]["median"])
    out = {}
    for method, best in methods.items():
        if method not in live:
            out[method] = "did not generalize"
        elif method == lead:
            out[method] = "fastest"
        else:
            tied = overlaps((best["low"], best["high"]), (live[lead]["low"], live[lead]["high"]))
            out[method] = "tied with the fastest" if tied else "slower"
    return out
