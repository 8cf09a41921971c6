"""What a methods page says about its confirmed numbers, made from them by one rule, so no sentence outruns its data.

- The fastest median at the fresh seeds leads; a method whose bootstrap interval overlaps the leader's is tied
  with it ("the seeds do not separate them"), and only a method whose whole interval lies above is called slower,
  with its "x times" the leader's median.
- Any two other methods whose intervals separate are said too (the faster one's whole interval below the other's).
- Every method's seeds that did not reach the threshold are counted, and split by their phase as the phases are
  defined: train accuracy stayed below the threshold (confusion), or reached it without val accuracy following
  (memorization), where the page's data records the phases.
- A method whose search found no generalizing trial confirms its nearest settings, and is named as such.
"""

from __future__ import annotations

from ..search.confirm import LEVEL, standing

FAILURE_WORDS = {"confusion": "kept train accuracy below {t:g}",
                 "memorization": "reached train accuracy {t:g} and not val accuracy {t:g}",
                 "diverged": "diverged", "val_without_train": "reached val accuracy {t:g} and not train accuracy {t:g}"}


def steps_text(value: float, penalty: float, budget: int) -> str:
    return f"{value:,.0f}" if value < penalty else f"not within {budget:,}"


def interval_text(confirmed: dict, penalty: float, budget: int) -> str:
    return f"{steps_text(confirmed['low'], penalty, budget)} to {steps_text(confirmed['high'], penalty, budget)}"


def failed_seeds(confirmed: dict, penalty: float, threshold: float) -> tuple[int, int, str] | None:
    """(seeds that did not reach the threshold, seeds, why: ': 2 kept train accuracy below 0.95' by phase), or None
    when every seed did."""
    scores = confirmed["scores"]
    failed = [i for i, s in enumerate(scores) if s >= penalty]
    if not failed:
        return None
    phases = confirmed.get("phases")
    if not phases or len(phases) != len(scores):
        return len(failed), len(scores), " (this page's data does not record whether they fit the training set)"
    kinds: dict[str, int] = {}
    for i in failed:
        why = FAILURE_WORDS.get(phases[i], phases[i]).format(t=threshold)
        kinds[why] = kinds.get(why, 0) + 1
    return len(failed), len(scores), ": " + ", ".join(f"{n} {why}" for why, n in kinds.items())


def failure_text(confirmed: dict, penalty: float, budget: int, threshold: float) -> str | None:
    """'2 of 5 fresh seeds did not reach val accuracy 0.95 within 2,000 steps: 2 kept train accuracy below 0.95',
    or None when every seed did."""
    found = failed_seeds(confirmed, penalty, threshold)
    if found is None:
        return None
    n, of, why = found
    return f"{n} of {of} fresh seeds did not reach val accuracy {threshold:g} within {budget:,} steps{why}"


def setting_text(values: dict) -> str:
    return ", ".join(f"{k.split('.')[-1]} {float(v):.3g}" for k, v in values.items())


def others_text(method: str, confirmed: dict, penalty: float, budget: int, threshold: float) -> str | None:
    """The search's other confirmed settings at the same fresh seeds, reported beside its choice (not chosen by
    them), each with its failed seeds by phase, or None where only one setting was confirmed or the data predate
    the rule."""
    others = confirmed.get("others") or []
    if not others:
        return None

    def failed(o) -> str:
        found = failed_seeds(o, penalty, threshold)
        return f", {found[0]} of {found[1]} did not reach val accuracy {threshold:g}{found[2]}" if found else ""

    listed = "; ".join(
        f"setting {o['setting']}" + (f" ({setting_text(o['setting_values'])})" if o.get("setting_values") else "")
        + f": median {steps_text(o['median'], penalty, budget)} ({interval_text(o, penalty, budget)}{failed(o)})"
        for o in others)
    return f"{method}'s other confirmed settings, reported and not chosen on these seeds: {listed}."


def other_setting_text(method: str, confirmed: dict) -> str | None:
    """Where the confirmed figure is not of the search's best setting (the fastest at the fresh seeds of the top
    few was another), which setting it is: the table's setting column is the search's best."""
    rank, values = int(confirmed.get("setting", 1)), confirmed.get("setting_values") or {}
    if rank == 1 or not values:
        return None
    setting = setting_text(values)
    return (f"{method}'s confirmed figure is of its search's setting {rank} of {confirmed.get('settings', rank)} "
            f"confirmed ({setting}), the fastest of them at the fresh seeds; the best found in the search is "
            "another setting.")


def separated_lines(confirmed: dict, places: dict, penalty: float, budget: int) -> list[str]:
    """'Muon is faster than Grokfast-MA: ...' for every two methods besides the fastest whose intervals separate
    (the fastest's own standings are its 'Slower' lines)."""
    live = sorted((m for m, p in places.items() if p in ("tied with the fastest", "slower")),
                  key=lambda m: confirmed[m]["median"])
    lines = []
    for i, a in enumerate(live):
        for b in live[i + 1:]:
            if confirmed[a]["high"] < confirmed[b]["low"]:
                lines.append(f"{a} is faster than {b}: its interval ({interval_text(confirmed[a], penalty, budget)}) "
                             f"lies below {b}'s ({interval_text(confirmed[b], penalty, budget)}).")
    return lines


def verdict_lines(methods: list[dict], penalty: float, budget: int, threshold: float) -> list[str]:
    """The page's sentences about the confirmation stage, from each method's `label` and `confirmed` ({scores,
    median, low, high}, optionally `phases` per seed; None where the method has no confirmed setting)."""
    confirmed = {m["label"]: m["confirmed"] for m in methods if m.get("confirmed")}
    if not confirmed:
        return []
    places = standing(confirmed, penalty)
    lead = next((m for m, p in places.items() if p == "fastest"), None)
    lines = []
    if lead is not None:
        c = confirmed[lead]
        lines.append(f"At the fresh seeds, the fastest median is **{lead}**: {c['median']:,.0f} steps "
                     f"({LEVEL:.0%} interval {interval_text(c, penalty, budget)}; {len(c['scores'])} seeds).")
        tied = [m for m, p in places.items() if p == "tied with the fastest"]
        if tied:
            lines.append("Tied with it (the intervals overlap, so these seeds do not separate them): " + ", ".join(
                f"{m} (median {confirmed[m]['median']:,.0f})" for m in tied) + ".")
        for m in (m for m, p in places.items() if p == "slower"):
            c2 = confirmed[m]
            lines.append(f"Slower: {m}, median {c2['median']:,.0f} steps, {c2['median'] / c['median']:.1f} times the "
                         f"fastest's, its interval ({interval_text(c2, penalty, budget)}) above the fastest's.")
        lines += separated_lines(confirmed, places, penalty, budget)
    stuck = [m for m, p in places.items() if p == "did not generalize"]
    if stuck:
        lines.append(f"The median fresh seed did not reach val accuracy {threshold:g} within {budget:,} steps: "
                     + ", ".join(stuck) + ".")
    lines += [f"{m}: {text}." for m, c in confirmed.items() if (text := failure_text(c, penalty, budget, threshold))]
    lines += [text for m, c in confirmed.items() if (text := other_setting_text(m, c))]
    lines += [text for m, c in confirmed.items() if (text := others_text(m, c, penalty, budget, threshold))]
    nearest = [m["label"] for m in methods if m.get("confirmed") and m.get("best") is None]
    if nearest:
        lines.append("No trial generalized in the search, so the settings confirmed are the nearest (most seeds "
                     "generalized, then the highest val accuracy at the last report): " + ", ".join(nearest) + ".")
    unconfirmed = [m["label"] for m in methods if not m.get("confirmed")]
    if unconfirmed:
        lines.append("No setting was confirmed: " + ", ".join(unconfirmed) + ".")
    return lines
