"""Every number an atlas page's note prints comes from the page's data (issue 73): a field, filled from the data
file or JSON whenever the page is drawn, or a literal the spec states or (a measurement) the data holds at the
printed precision. docs/atlas/notes/untraced.json lists, note by note, the literal numbers not traced yet; a
number not on it fails, and so does one on it that the note no longer prints (the list only shrinks).
About 3 s: files only, no run."""

import json
from pathlib import Path

import pandas as pd
import pytest

from grokray.atlas.discussion import stored_page
from grokray.atlas.note_fields import (
    FieldError,
    PageData,
    evaluate,
    fill,
    formatted,
    trial_table,
)
from grokray.atlas.note_numbers import literal_numbers, matches, note_pools, untraced

ROOT = Path(__file__).resolve().parents[1]
ATLAS = ROOT / "docs" / "atlas"
NOTES = sorted((ATLAS / "notes").glob("*.md"))
UNTRACED = json.loads((ATLAS / "notes" / "untraced.json").read_text())


def _page_data(stem: str) -> PageData:
    """What the page's note is filled from, as the atlas draws it (from the repository's root: a JSON names its
    spec from there)."""
    return stored_page(ATLAS, stem)


def _data(stem: str) -> PageData:
    csv = ATLAS / "data" / f"{stem}.csv"
    return PageData(pd.read_csv(csv) if csv.exists() else pd.DataFrame(),
                    json.loads((ATLAS / f"{stem}.json").read_text()), None, ATLAS)


@pytest.mark.parametrize("note", NOTES, ids=lambda p: p.stem)
def test_every_number_a_note_prints_is_a_field_or_traced_to_the_spec_or_data(note, monkeypatch):
    monkeypatch.chdir(ROOT)  # a JSON names its spec from the repository's root
    text = note.read_text()
    stated, measured = note_pools(ATLAS, note.stem, text)
    assert untraced(text, stated, measured) == UNTRACED.get(note.stem, []), (
        "a number typed into the note that neither the spec nor the page's data holds: make it a field "
        "(grokray/atlas/note_fields.py), or correct it")
    if "{{" in text:
        page = (ATLAS / f"{note.stem}.md").read_text()
        assert fill(text.strip(), _page_data(note.stem)) in page, "the page shows its note as its data fills it"


def test_the_untraced_list_names_only_notes_that_exist():
    assert set(UNTRACED) <= {n.stem for n in NOTES}
    assert all(UNTRACED.values()), "a note with nothing left untraced leaves the list"


def test_a_number_typed_wrong_is_caught_and_a_field_follows_its_data():
    """Planted: the quickstart's data with a note that misquotes one measurement and one count."""
    runs = pd.read_csv(ATLAS / "data" / "quickstart-reduced.csv")
    data = PageData(runs, json.loads((ATLAS / "quickstart-reduced.json").read_text()), None, ATLAS)
    stated, measured = note_pools(ATLAS, "quickstart-reduced", "")
    median = runs.loc[runs.phase == "grokking", "step_val_acc_0.9"].median()
    right = f"Grokking runs cross at a median step of {median:,.0f}."
    assert untraced(right, stated, measured) == []
    wrong = f"Grokking runs cross at a median step of {median + 7:,.0f}."
    assert untraced(wrong, stated, measured) == [f"{median + 7:,.0f}"]
    assert untraced("Seed 1 groks in 13 cells.", stated, measured) == ["13"]  # a count is a field, never a literal
    note = "Seed 1 groks in {{runs seed=1 phase=grokking}} cells, at a median of {{median step_val_acc_0.9 " \
           "phase=grokking|,.0f}} steps."
    grokking = int(((runs.seed == 1) & (runs.phase == "grokking")).sum())
    assert fill(note, data) == f"Seed 1 groks in {grokking} cells, at a median of {median:,.0f} steps."
    fewer = PageData(runs.drop(runs.index[(runs.seed == 1) & (runs.phase == "grokking")][:1]), data.summary)
    assert fill(note, fewer).startswith(f"Seed 1 groks in {grokking - 1} cells")  # the data changed, so does the page


@pytest.mark.parametrize("field, why", [
    ("count phase=grokking", "starts with one of"), ("runs colour=red", "not COLUMN OP VALUE"),
    ("median", "of which column"), ("at seed least phase", "at COLUMN min.max OTHER"),
    ("at seed", "at COLUMN min.max OTHER"),
    ("trials max no_such_column", "of which column"), ("json no.such.key", "has no 'no.such.key'"),
    ("cells shown=grokking", "no phase diagram")])
def test_a_field_the_page_cannot_fill_says_why(field, why):
    with pytest.raises(FieldError, match=why):
        evaluate(field, _data("quickstart-reduced"))


def test_a_trial_and_a_row_are_read_by_their_extremes(monkeypatch):
    """`trials AGG COLUMN` aggregates the search's trials as it scored them; `at COLUMN min OTHER` reads one row;
    `... in PAGE` reads another page's data."""
    monkeypatch.chdir(ROOT)
    data = _page_data("degrok_toy-reduced")
    table = trial_table(data.runs, data.params)
    fast = table[table.score <= 1000]
    assert evaluate("trials max optim.decoder.lr score<=1000", data) == fast["optim.decoder.lr"].max()
    assert evaluate("trials median optim.decoder.weight_decay score<=1000", data) == \
        fast["optim.decoder.weight_decay"].median()
    best = table.loc[table.score.idxmin()]
    assert evaluate("trials at optim.decoder.lr min score", data) == best["optim.decoder.lr"]
    assert evaluate("trials min score", data) == best.score
    seed1 = data.runs[data.runs.seed == 1]
    first = seed1.loc[seed1["step_val_acc_0.9"].idxmin()]
    assert evaluate("at optim.decoder.weight_decay min step_val_acc_0.9 seed=1", data) == \
        first["optim.decoder.weight_decay"]
    assert evaluate("at seed max step_val_acc_0.9 seed=1", data) == 1
    ratio = data.runs["optim.decoder.lr"] / data.runs["optim.embedding.lr"]
    assert evaluate("runs optim.decoder.lr/optim.embedding.lr>10 seed=1", data) == int(((ratio > 10) & (
        data.runs.seed == 1)).sum()) > 0  # a filter on the ratio of two columns
    methods = _page_data("grokfast-variant-methods-reduced")  # a methods page: no runs of its own
    assert evaluate("trials min score in degrok_toy-reduced", methods) == best.score
    with pytest.raises(FieldError, match="no page 'no_such-reduced'"):
        evaluate("runs phase=grokking in no_such-reduced", methods)


def test_numbers_are_read_as_printed():
    assert literal_numbers("lr 6.3e-3 at 1,686 steps (Fig. 6b, §4.1, 2026-11-26, commit cb77913, `p: 97`)") == [
        "6.3e-3", "1,686"]
    assert literal_numbers("from 01:38 to 02:18:05 UTC, torch 2.11 against torch 2.13.0") == []  # times, versions
    assert matches("6.3e-3", 0.00631) and matches("1,686", 1686.0) and not matches("1,687", 1686.0)
    assert matches("1,700", 1686.0) and not matches("1,680", 1686.0)  # a round figure, at its own precision
    assert formatted(0.00631, ".1e") == "6.3e-3" and formatted(12500.0, ".2e") == "1.25e4"  # as a note writes it
    assert matches("2,000", 1995.0) and not matches("0.78", 0.785001)


def test_a_data_file_that_extends_a_page_and_two_pages_pooled_are_read_as_pages(monkeypatch):
    """Fig. 6b's seeds 4-5 are a data file of their own, named after the page they extend; its note counts their
    runs and the cells of both pooled (`A+B`), each cell's majority over every seed (issue 73: 13 numbers of that
    section were typed by hand). About 1 s."""
    monkeypatch.chdir(ROOT)
    page, more = "liu_fig6b_toy_regression-paper", "liu_fig6b_toy_regression-paper-seeds-4-5"
    data = _page_data(page)
    extra = pd.read_csv(ATLAS / "data" / f"{more}.csv")
    assert evaluate(f"runs in {more}", data) == len(extra)
    assert evaluate(f"runs seed=4 phase=memorization in {more}", data) == int(
        ((extra.seed == 4) & (extra.phase == "memorization")).sum())
    pooled = stored_page(ATLAS, f"{page}+{more}")
    assert len(pooled.runs) == len(data.runs) + len(extra)
    assert pooled.cells["n"].sum() == len(pooled.runs) and len(pooled.cells) == len(data.cells)  # same cells
    ties = int((pooled.cells["tie"] != "").sum())
    assert evaluate(f"cells tie=any in {page}+{more}", data) == ties != evaluate("cells tie=any", data)
    assert evaluate("cells tie=none", data) + evaluate("cells tie=any", data) == len(data.cells)
    assert evaluate("cells mean agreement", data) == data.cells["agreement"].mean()  # over cells, not runs
    with pytest.raises(FieldError, match="no page"):
        evaluate(f"runs in {page}-seeds-8-9", data)  # no such data file
