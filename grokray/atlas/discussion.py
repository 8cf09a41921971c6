"""A page's discussion: its note (`<out>/notes/<figure>.md`, a person's reading) with its fields filled from the
page's runs and JSON (note_fields.py). It is drawn last, once the page's data file and JSON are written, so a field
reads what the page shows; a page kept from an earlier run gets it again from its data file."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from analysis.diagram import phase_grid
from analysis.pipeline import default_axes

from ..search.config import parse_search
from .data import read_run_table
from .note_fields import HEADINGS, PageData, extended_page, fill
from .plan import Figure, plan_figure

HEADING = HEADINGS[0]


def figure_grid(figure: Figure, df: pd.DataFrame):
    """The figure's phase diagram (its cells), on the atlas block's axes where the runs vary them."""
    axes = figure.config.axes
    # a preset may hold an axis at one value (smoke): then the figure falls back to the axes that vary
    x, y = axes if axes and all(a in df for a in axes) else default_axes(df)
    return phase_grid(df, x, y)


def page_data(figure: Figure, out: Path, df: pd.DataFrame) -> PageData:
    """What the note's fields read: the runs, the JSON written beside the page, the diagram's cells."""
    summary_path = out / f"{figure.stem}.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    cells = None
    if (not figure.pieces[0].search and figure.config.view != "fraction" and "phase" in df
            and df["phase"].notna().any()):
        cells = figure_grid(figure, df).cells
    params = list(parse_search(figure.pieces[0].spec).space) if figure.pieces[0].search else None
    return PageData(df, summary, cells, out, params, pages_of(out))


def pages_of(out: Path):
    """The other pages' data a note's fields read, each read once while this page is drawn."""
    read: dict[str, PageData] = {}

    def page(stem: str) -> PageData:
        if stem not in read:
            read[stem] = stored_page(out, stem)
        return read[stem]
    return page


def stored_page(out: Path, stem: str) -> PageData:
    """Another page's data, as its own note reads it, from its JSON and data file: a methods page's fields name
    their methods' pages (`{{trials at lr min score in grokfast_norm-reduced}}`). Two more forms:
    - a data file with no page of its own, named after the page it extends (data/<page>-seeds-4-5.csv: more seeds
      of the same figure), read as that page's figure reads its runs; its JSON is the page's;
    - `A+B`, the runs of both pooled, each cell's majority over the seeds of both (the cells drawn again)."""
    if "+" in stem:
        parts = [stored_page(out, part) for part in stem.split("+")]
        figure = _page_figure(out, stem.split("+")[0])[0]
        runs = pd.concat([p.runs for p in parts], ignore_index=True)
        runs.attrs.update(parts[0].runs.attrs)
        return page_data(figure, out, runs)
    figure, summary = _page_figure(out, stem)
    if figure is None:  # a methods page: its JSON alone
        return PageData(pd.DataFrame(), summary, None, out, None, pages_of(out))
    return page_data(figure, out, read_run_table(out / "data" / f"{stem}.csv", figure))


def _page_figure(out: Path, stem: str):
    """(the figure, its JSON) of a page, or of the page a data file extends; (None, JSON) for a methods page."""
    own = out / f"{stem}.json"
    summary = json.loads((own if own.exists() else out / f"{extended_page(out, stem)}.json").read_text())
    if "spec" not in summary:
        return None, summary
    return plan_figure(summary["spec"], summary["scale"], tuple(summary.get("set", ()))), summary


def note_path(out: Path, stem: str, notes_dir: str | Path | None = None) -> Path:
    return (Path(notes_dir) if notes_dir else out / "notes") / f"{stem}.md"


def note_text(note: Path, data: PageData) -> str | None:
    return fill(note.read_text().strip(), data) if note.exists() else None


def discussion_lines(figure: Figure, out: Path, notes_dir: str | Path | None, df: pd.DataFrame) -> list[str]:
    note = note_path(out, figure.stem, notes_dir)
    text = note_text(note, page_data(figure, out, df))
    return [HEADING, "", text if text is not None else f"(no discussion yet: write `{note.as_posix()}`)", ""]


def refresh_discussion(figure: Figure, out_dir: str | Path, notes_dir: str | Path | None = None,
                       df: pd.DataFrame | None = None) -> Path:
    """Draw the page's discussion again (and its title, from the spec): the note is written after the run, often
    in a checkout whose MLflow store no longer holds the figure, and the page must not keep saying there is none.
    `df`: the page's runs (default: its data file)."""
    out = Path(out_dir)
    page = out / f"{figure.stem}.md"
    text = page.read_text()
    if text.startswith("# "):
        text = f"# {figure.title}" + text[text.index("\n"):]
    head = text[:text.index(HEADING)] if HEADING in text else text.rstrip() + "\n\n"
    if df is None:
        csv = out / "data" / f"{figure.stem}.csv"
        df = read_run_table(csv, figure) if csv.exists() else pd.DataFrame()
    page.write_text((head + "\n".join(discussion_lines(figure, out, notes_dir, df))).rstrip() + "\n")
    summary_path = out / f"{figure.stem}.json"
    summary = json.loads(summary_path.read_text())
    if summary.get("title") != figure.title:
        summary_path.write_text(json.dumps({**summary, "title": figure.title}, indent=1) + "\n")
    return page
