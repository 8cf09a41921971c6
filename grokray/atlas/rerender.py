"""`grokray atlas --from-data`: redraw committed pages from their data files, with no MLflow store and no run.

A page is drawn from its runs (data/<stem>.csv, read back as runs by data.py) and from what its JSON keeps that
the runs do not: what ran and when, and a search's report. Pages written before the JSON kept those take the two
sections from the page as it is. Everything drawn from runs (the counts, the diagram and its tables, seed
agreement, the paper's regions, the fraction curves) is computed again, so a change in the analysis that would
change a committed page shows up as a diff.
"""

from __future__ import annotations

import json
from pathlib import Path

from .data import read_run_table
from .discussion import refresh_discussion
from .page import RAN_HEADING, SEARCH_HEADING, render_page, write_index, write_summary
from .plan import plan_figure
from .search_comparison import redraw_methods_page


def kept_sections(text: str) -> dict[str, list[str]]:
    """The lines under each of the page's sections that only its JSON (or the page itself) records."""
    lines = text.split("\n")
    kept = {}
    for heading in (RAN_HEADING, SEARCH_HEADING):
        if heading in lines:
            start = lines.index(heading) + 2
            end = next(k for k in range(start, len(lines)) if lines[k].startswith("## "))
            kept[heading] = lines[start:end]
    return kept


def rerender_page(path: str | Path, scale: str, out_dir: str | Path, notes_dir: str | Path | None = None) -> Path:
    """Rewrite <out>/<stem>.md, its images and its JSON from data/<stem>.csv and the JSON; returns the page. The
    figure is planned with the -s its JSON recorded, and must be the one the page was drawn from."""
    out = Path(out_dir)
    stem = f"{Path(path).stem}-{scale}"
    summary_path, page_path = out / f"{stem}.json", out / f"{stem}.md"
    if not summary_path.exists() or not page_path.exists():
        raise FileNotFoundError(f"{stem}: no page in {out} to redraw (run `grokray atlas` first)")
    summary = json.loads(summary_path.read_text())
    figure = plan_figure(path, scale, tuple(summary.get("set", ())))
    if summary.get("pieces") != figure.piece_hashes:
        raise ValueError(f"{stem}: the page was drawn from other pieces than {Path(path).as_posix()} makes now (the "
                         "spec changed since); run the figure again with `grokray atlas`")
    df = read_run_table(out / "data" / f"{stem}.csv", figure)
    ran, search = summary.get("ran"), summary.get("search")
    page, drawn = render_page(figure, df, out, notes_dir, ran=ran, search=search,
                              kept=kept_sections(page_path.read_text()))
    if search is None and "best" in summary:  # the kept section's best trials
        drawn = {**drawn, "best": summary["best"]}
    write_summary(figure, df, out, drawn, ran, search, kept=summary)
    return refresh_discussion(figure, out, notes_dir, df)  # its fields read the JSON just written


def rerender_atlas(paths: list[str | Path], scale: str, out_dir: str | Path, log=print) -> list[Path]:
    """Redraw every page of these specs at this scale that out_dir holds, then the index; a spec without a page
    there is said and skipped. A methods page (atlas.compare) has its words redrawn from its JSON; its table and
    curves, drawn from runs the data files do not hold, are kept."""
    pages, compared = [], {}
    for path in paths:
        if not (Path(out_dir) / f"{Path(path).stem}-{scale}.json").exists():
            log(f"[atlas] {Path(path).stem}-{scale}: no page in {out_dir}; skipped")
            continue
        pages.append(rerender_page(path, scale, out_dir))
        log(f"[atlas] {pages[-1]}: redrawn from {Path(out_dir) / 'data' / (pages[-1].stem + '.csv')}")
        figure = plan_figure(path, scale, tuple(json.loads(pages[-1].with_suffix(".json").read_text()).get("set", ())))
        if figure.config.compare is not None and figure.pieces[0].search:
            compared.setdefault(figure.config.compare.page, []).append(figure)
    for name, figures in compared.items():
        if (Path(out_dir) / f"{name}-{scale}.json").exists():
            log(f"[atlas] {redraw_methods_page(name, figures, out_dir)}: its words redrawn from its JSON")
    write_index(out_dir)
    return pages
