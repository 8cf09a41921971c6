"""Issue 63: a methods page's words come from its numbers by one rule (grokray/atlas/verdict.py). Rendered here
from planted data: a clear win, a tie, a seed that never fit its training set, one that fit it and did not
generalize, and a method with nothing to confirm; every sentence asserted."""

from grokray.atlas.search_comparison import methods_page_text
from grokray.search.confirm import bootstrap_median

PENALTY, BUDGET = 4000.0, 2000


def confirmed(scores, phases=None):
    median, low, high = bootstrap_median(scores)
    return {"setting": 1, "scores": scores, "median": median, "low": low, "high": high,
            **({"phases": phases} if phases else {}), "settings": 3, "seeds": len(scores)}


GROKS = ["grokking"] * 5
METHODS = [
    {"label": "Fast", "published_steps": None, "best": 110.0, "confirmed": confirmed([100, 110, 120, 105, 115], GROKS)},
    {"label": "Close", "published_steps": None, "best": 130.0,
     "confirmed": confirmed([115, 125, 130, 140, 4000], [*GROKS[:4], "confusion"])},
    {"label": "Slow", "published_steps": 790, "best": 520.0,
     "confirmed": confirmed([500, 520, 540, 510, 4000], [*GROKS[:4], "memorization"])},
    {"label": "Never", "published_steps": 910, "best": None, "confirmed": None},
]
FACTS = {"penalty": PENALTY, "budget": BUDGET, "threshold": 0.95, "objective": "time_to_generalize",
         "scale": "reduced", "scale_line": "At this scale (reduced) the setup differs from the paper's: task.p 59 "
                                           "(paper: 97)."}


def test_the_page_says_a_win_a_tie_and_each_failure_as_its_numbers_do():
    page = methods_page_text("planted", FACTS, METHODS, ["(table)", ""], "").splitlines()
    assert page[2] == FACTS["scale_line"]  # the scale's model and task first
    assert ("At the fresh seeds, the fastest median is **Fast**: 110 steps (90% interval 100 to 120; 5 seeds)."
            in page)
    assert "Tied with it (the intervals overlap, so these seeds do not separate them): Close (median 130)." in page
    assert ("Slower: Slow, median 520 steps, 4.7 times the fastest's, its interval (500 to not within 2,000) above the "
            "fastest's.") in page
    assert ("Close: 1 of 5 fresh seeds did not reach val accuracy 0.95 within 2,000 steps: 1 never fit the training "
            "set.") in page
    assert ("Slow: 1 of 5 fresh seeds did not reach val accuracy 0.95 within 2,000 steps: 1 fit it and did not "
            "generalize.") in page
    assert "Fast:" not in " ".join(page)  # every seed of it reached the threshold: no failure sentence
    assert "No trial generalized in the search, so there is no setting to confirm: Never." in page
    assert ("Fastest in the search: **Fast**, 110 steps by the majority of its seeds (a best of many noisy trials: "
            "the confirmed column is the figure to quote).") in page
    assert ("The published figures are of the paper's scale; this page's setup differs (its first lines), so they "
            "are not set against its numbers.") in page
    assert not any("times" in line for line in page if not line.startswith("Slower:"))


def test_at_the_papers_scale_the_published_figures_meet_the_confirmed_medians():
    page = methods_page_text("planted", {**FACTS, "scale": "paper", "scale_line": None}, METHODS, [], "")
    assert ("The published figures beside this page's confirmed medians (where the setups still differ, each "
            "method's page says how): Slow 790 against 520 (500 to not within 2,000; 5 seeds), Never 910 against "
            "none confirmed.") in page.splitlines()
    assert "At this scale" not in page
    unconfirmed = [{**m, "confirmed": None} for m in METHODS]
    page = methods_page_text("planted", {**FACTS, "scale": "paper", "scale_line": None}, unconfirmed, [], "")
    assert ("No setting was confirmed at fresh seeds here, so the published figures are not set against this "
            "page's numbers.") in page.splitlines() and "Tied" not in page


def test_a_median_seed_that_failed_is_no_place_and_unrecorded_phases_are_said():
    methods = [{"label": "A", "published_steps": None, "best": 300.0, "confirmed": confirmed([300, 4000, 4000])},
               {"label": "B", "published_steps": None, "best": 200.0, "confirmed": confirmed([200, 210, 220])}]
    page = methods_page_text("planted", FACTS, methods, [], "").splitlines()
    assert "The median fresh seed did not reach val accuracy 0.95 within 2,000 steps: A." in page
    assert ("A: 2 of 3 fresh seeds did not reach val accuracy 0.95 within 2,000 steps (this page's data does not "
            "record whether they fit the training set).") in page
    assert "At the fresh seeds, the fastest median is **B**: 210 steps (90% interval 200 to 220; 3 seeds)." in page


def test_the_paper_scale_pieces_page_says_what_its_data_file_holds():
    """docs/atlas/grokfast-methods-paper.md: the MA piece's table, median and interval are its data file's."""
    import csv
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "atlas" / "grokfast-methods-paper.md").read_text()
    with (root / "docs" / "atlas" / "data" / "grokfast-methods-paper.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["seed"]) for r in rows] == [10, 11, 12, 13, 14]
    for r in rows:
        assert (f"| {r['seed']} | {r['phase']} | {int(r['step_train_acc_0.95']):,} | "
                f"{int(r['step_val_acc_0.95']):,} |") in page
    median, low, high = bootstrap_median([float(r["step_val_acc_0.95"]) for r in rows])
    assert (f"Median {median:,.0f} steps to val accuracy 0.95 (bootstrap 90% interval {low:,.0f} to {high:,.0f}; "
            f"{len(rows)} of {len(rows)} seeds reached it).") in page.replace("\n", " ")
