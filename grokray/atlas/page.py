"""One markdown page per atlas figure: what ran, how long it took against the estimate, the diagram, the counts,
where seeds disagree, and the paper's expectation beside what was measured.

The measured part is generated from MLflow (or redrawn from the page's data file and JSON: rerender.py); the
discussion ("why it differs") is a person's reading and lives in
`<out>/notes/<figure>.md`, included verbatim when present. A JSON summary beside each page feeds the index.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.diagram import phase_counts, pivot
from analysis.labels import runs_subtitle
from analysis.plots_diagram import plot_phase_diagram

from ..plan.estimate import LONG_SHARE
from ..plan.expand import short_names
from ..search.config import parse_search
from ..tracking.history import share_and_mean
from ..tracking.schema import SEARCH_OBJECTIVE_TAG
from ..tracking.store import Store
from .data import load_figure_runs, write_run_table
from .discussion import HEADING, figure_grid, refresh_discussion
from .fraction import fraction_section
from .markdown import cell, md_table, minutes, utc
from .plan import Figure
from .runner import PieceRecord
from .scale_note import scale_line, seed_range
from .search_outcomes import outcomes_line

INDEX = "README.md"
RAN_HEADING = "## Runs and wall time"
DIFFERENCES_HEADING = "## Differences from the paper"
SEARCH_HEADING = "## Search"


@dataclass
class PieceTiming:
    name: str
    configurations: int
    packs: int
    estimate_s: float
    upper_s: float
    measured_s: float


def voters(grid) -> pd.Series:
    """Seeds that vote in each cell: those whose split can reach the threshold."""
    return grid.cells["n"] - grid.cells["n_undecodable"]


def disagreements(grid) -> pd.DataFrame:
    """Cells whose voting seeds do not all share the majority phase: each phase's votes, then the seeds that did
    not vote (undecodable splits), so the table shows exactly what decided the cell."""
    cells = grid.cells[(voters(grid) > 1) & (grid.cells["agreement"] < 1.0)]
    rows = []
    for _, c in cells.iterrows():
        mix = ", ".join(f"{p} {int(c[f'vote_{p}'])}" for p in grid.phases if c.get(f"vote_{p}", 0))
        if c["n_undecodable"]:
            mix += f"; undecodable {int(c['n_undecodable'])} (no vote)"
        rows.append({grid.x: c[grid.x], grid.y: c[grid.y], "majority": c["shown"], "seeds": mix})
    return pd.DataFrame(rows, columns=[grid.x, grid.y, "majority", "seeds"])


def region_check(grid, regions) -> pd.DataFrame:
    """Per expected region: its cells, how many have the expected majority phase, and what the others have. A tied
    cell matches nothing: it is listed as its tie (`a|b`), even when the expected phase is one of the tied ones."""
    rows = []
    for region in regions:
        inside = [c for _, c in grid.cells.iterrows() if region.contains({grid.x: c[grid.x], grid.y: c[grid.y],
                                                                         **c.to_dict()})]
        labels = [c["shown"] for c in inside]
        matched = labels.count(region.phase)
        others = pd.Series([label for label in labels if label != region.phase]).value_counts()
        label = short_names(list(region.bounds), aliases={})
        bounds = "; ".join(f"{label[a]} {_span(lo, hi)}" for a, (lo, hi) in region.bounds.items())
        rows.append({"expected": region.phase, "region": bounds, "cells": len(inside), "matching": matched,
                     "share": matched / len(inside) if inside else float("nan"),
                     "others": ", ".join(f"{p} {n}" for p, n in others.items()) or "-"})
    return pd.DataFrame(rows)


def _counts_table(counts: pd.Series, runs: int) -> pd.DataFrame:
    """Runs per phase; runs with no phase (a search's trials its scheduler stopped early) get their own row, so
    the table adds up to the runs the page reports."""
    table = counts[counts > 0].rename_axis("phase").reset_index()
    unclassified = runs - int(counts.sum())
    if unclassified:
        table.loc[len(table)] = ["stopped before classified", unclassified]
    return table


def _span(lo, hi) -> str:
    if lo is None:
        return f"<= {hi:g}"
    if hi is None:
        return f">= {lo:g}"
    return f"{lo:g}..{hi:g}"


def measured_budget_use(df: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per piece, (the share of its configurations that trained their whole budget, the mean share of the budget
    trained): what the estimate could only assume."""

    if "steps_run" not in df or "train.steps" not in df:
        return {}
    steps = pd.to_numeric(df["train.steps"], errors="coerce")
    budget = pd.to_numeric(df.get("phases.budget", steps), errors="coerce").fillna(steps)
    budget = budget.where(budget < steps, steps)
    used = (pd.to_numeric(df["steps_run"], errors="coerce") / budget).clip(upper=1.0)
    return {p: share_and_mean(u.dropna()) for p, u in used.groupby(df["piece"]) if u.notna().any()}


def ran_data(records: list[PieceRecord], timings: list[PieceTiming]) -> list[dict]:
    """What ran, per piece, as the page's JSON keeps it: the measurements its data file does not hold."""
    return [{"name": t.name, "configurations": t.configurations, "packs": t.packs, "estimate_s": t.estimate_s,
             "upper_s": t.upper_s, "measured_s": t.measured_s, "use": list(r.use) if r.use else None,
             "segments": [list(seg) for seg in r.segments], "code_version": r.code_version}
            for r, t in zip(records, timings, strict=True)]


def _ran_section(ran: list[dict], df: pd.DataFrame, figure: Figure) -> list[str]:
    """The budget-use columns say why a piece missed its estimate: the estimate assumed what share of the members
    would train their whole budget and how much of it they would train on average (a prior, or what earlier
    runs measured); the next column is what happened."""
    def pair(use) -> str:
        return "-" if use is None else f"{use[0]:.0%} / {use[1]:.0%}"

    measured_use = measured_budget_use(df)
    estimate, measured = sum(p["estimate_s"] for p in ran), sum(p["measured_s"] for p in ran)
    rows = []
    for p in ran:
        ratio = p["measured_s"] / p["estimate_s"] if p["estimate_s"] > 0 else float("nan")
        when = "; ".join(f"{utc(s)} ({minutes(w)})" for s, w in p["segments"]) or "-"
        rows.append({"piece": p["name"], "configurations": p["configurations"], "packs": p["packs"],
                     "estimate": minutes(p["estimate_s"]), "upper bound": minutes(p["upper_s"]),
                     "measured": minutes(p["measured_s"]), "measured / estimate": f"{ratio:.2f}",
                     "budget use, assumed": pair(p["use"] or (LONG_SHARE, LONG_SHARE)),
                     "budget use, measured": pair(measured_use.get(p["name"])),
                     "ran (UTC, wall)": when})
    bases = [f"{p['name']}: {p['use'][2]}" for p in ran if p["use"] and p["use"][2]]
    return [f"{len(df)} configurations in {len(ran)} piece(s); wall time **{minutes(measured)} measured** "
            f"against **{minutes(estimate)} estimated** by the dry-run (measured / estimate = "
            f"{measured / estimate if estimate else float('nan'):.2f}). Code: "
            f"{', '.join(sorted({p['code_version'] for p in ran if p['code_version']})) or '-'}.", "",
            md_table(pd.DataFrame(rows)) + "\n\nBudget use: the share of members that train their whole budget / "
            "the mean share of the budget trained. The estimate's figures: "
            + ("; ".join(bases) if bases else f"assumed ({LONG_SHARE:.0%} / {LONG_SHARE:.0%})") + ".", "",
            f"Every run, one row each (axes, seed, phase, crossing steps, ideal accuracy): "
            f"[data/{figure.stem}.csv](data/{figure.stem}.csv).", ""]


def _commands(figure: Figure) -> list[str]:
    spec = figure.path.as_posix()
    out = [f"grokray atlas --scale {figure.scale} {spec}"]
    if len(figure.pieces) > 1 or figure.pieces[0].overrides:
        verb = "search" if figure.pieces[0].search else "run"
        scale = "" if figure.scale == "paper" else f" --scale {figure.scale}"
        for p in figure.pieces:
            sets = " ".join(f"-s '{o}'" for o in p.overrides)
            out.append(f"# piece {p.name}: grokray {verb} {spec}{scale} {sets}".rstrip())
    return out


def _diagram_section(figure: Figure, df: pd.DataFrame, img_dir: Path) -> tuple[list[str], dict]:

    grid = figure_grid(figure, df)
    x, y = grid.x, grid.y
    png = img_dir / f"{figure.stem}.png"
    fig = plot_phase_diagram(grid, title=f"{figure.path.stem} ({figure.scale}): phase diagram",
                             subtitle=runs_subtitle(df))
    fig.savefig(png, dpi=110)
    lines = [f"![phase diagram](img/{png.name})", "", "Majority phase per cell over the seeds whose split can reach "
             f"the threshold (rows: `{y}`, columns: `{x}`; faded cells in the figure are where seeds disagree; cells "
             "split between the tied phases and hatched, `a|b` here, where the top phases tie):", ""]
    for fv in grid.facet_values:
        table = pivot(grid, "shown", fv).astype(object).fillna("-")
        if grid.facets:
            lines += [f"Panel {', '.join(f'{k}={v}' for k, v in zip(grid.facets, fv, strict=True))}:", ""]
        table.index = [cell(v) for v in table.index]
        table.columns = [cell(v) for v in table.columns]
        label = short_names([y, x], aliases={})  # "embedding.lr \\ decoder.lr" where both end in lr
        lines += [md_table(table.reset_index(names=f"{label[y]} \\ {label[x]}")), ""]
    multi = grid.cells[voters(grid) > 1]
    dis = disagreements(grid)
    tied, undecodable = int((grid.cells["tie"] != "").sum()), int(grid.cells["n_undecodable"].sum())
    summary = {"cells": int(len(grid.cells)), "cells_with_seeds": int(len(multi)), "disagreeing_cells": int(len(dis)),
               "tied_cells": tied, "undecodable_runs": undecodable}
    lines += ["## Seed agreement", "", f"Ties: {tied} cells. Undecodable splits (Liu's ideal accuracy below the "
              f"threshold: no model reaches it, so they do not vote): {undecodable} runs in "
              f"{int((grid.cells['n_undecodable'] > 0).sum())} cells.", ""]
    if len(multi):
        lines += [f"{len(multi)} cells have more than one voting seed; in {len(multi) - len(dis)} they all share "
                  f"the majority phase (mean agreement {multi['agreement'].mean():.2f}). Cells where they disagree "
                  "(a tie's majority is written `a|b`):", ""]
        lines += [md_table(dis) if len(dis) else "(none)", ""]
    else:
        lines += ["At most one voting seed per cell: every cell is a single sample.", ""]
    if figure.config.regions:
        check = region_check(grid, figure.config.regions)
        matched, total = int(check["matching"].sum()), int(check["cells"].sum())
        summary["regions"] = {r["expected"]: [int(r["matching"]), int(r["cells"])] for _, r in check.iterrows()}
        lines += ["## The paper's layout, cell by cell", "",
                  f"{matched} of {total} cells in the expected regions have the expected majority phase:", "",
                  md_table(check), ""]
    return lines, summary


def search_data(figure: Figure, records: list[PieceRecord], img_dir: Path, tracking_uri: str) -> dict:
    """The study's report from its parent run: the objective, the best trial(s), and its figures (copied to
    img/). The page's JSON keeps it, as the data file does not hold it."""
    store = Store(tracking_uri)
    run_id = records[0].parent_run_id
    images = []
    with tempfile.TemporaryDirectory() as d:
        local = store.download(run_id, "search", d)
        best = json.loads((local / "best.json").read_text()) if (local / "best.json").exists() else []
        for png in sorted(local.glob("*.png")):
            target = img_dir / f"{figure.stem}-{png.stem}.png"
            shutil.copyfile(png, target)
            images.append([png.stem, target.name])
    return {"objective": store.run(run_id).tags.get(SEARCH_OBJECTIVE_TAG, ""), "best": best, "images": images}


def _search_section(figure: Figure, search: dict, df: pd.DataFrame) -> tuple[list[str], dict]:
    lines, summary = [], {}
    for stem, name in search["images"]:
        lines += [f"![{stem}](img/{name})", ""]
    seeds = figure.pieces[0].spec.seeds
    counted = (f"; each at seeds {', '.join(map(str, seeds))}, scored by what a majority of its voting seeds "
               "reached" if len(seeds) > 1 else "")
    lines += [f"Objective: `{search['objective']}` (minimised). Trials: {len(df) // len(seeds)}{counted}.", ""]
    spec = figure.pieces[0].spec
    if said := outcomes_line(df, list(parse_search(spec).space), spec.first_trial().phases.budget):
        lines += [said, ""]
    best = search["best"]
    if best:
        rows = [{"trial": b["number"], "values": ", ".join(f"{v:g}" for v in b["values"]), "phase": b["phase"],
                 **({"seeds": b["seed_phases"]} if "seed_phases" in b else {}),
                 **{k.split(".")[-1] if k.count(".") < 2 else k: v for k, v in b["params"].items()}} for b in best]
        lines += ["Best trial(s):", "", md_table(pd.DataFrame(rows)), ""]
        summary["best"] = [{"number": b["number"], "values": b["values"], "phase": b["phase"]} for b in best]
    return lines, summary


def write_page(figure: Figure, records: list[PieceRecord], timings: list[PieceTiming], out_dir: str | Path,
               tracking_uri: str, notes_dir: str | Path | None = None) -> Path:
    """Write <out>/<spec>-<scale>.md (+ img/<...>.png, data/<...>.csv and <...>.json) from the tracking store;
    returns the page's path. The JSON keeps what the data file does not (what ran, the search's report), so the
    page re-renders from the two alone (rerender.py)."""

    out = Path(out_dir)
    img_dir = out / "img"
    img_dir.mkdir(parents=True, exist_ok=True)
    df = load_figure_runs(records, tracking_uri)
    if df.empty or df["phase"].notna().sum() == 0:
        raise ValueError(f"{figure.stem}: no finished configurations in MLflow; run the atlas first")
    ran = ran_data(records, timings)
    search = search_data(figure, records, img_dir, tracking_uri) if figure.pieces[0].search else None
    page, summary = render_page(figure, df, out, notes_dir, ran=ran, search=search)
    write_run_table(df, out / "data" / f"{figure.stem}.csv", figure.pieces[0].spec.first_trial().phases.threshold)
    write_summary(figure, df, out, summary, ran, search)
    return refresh_discussion(figure, out, notes_dir, df)  # its fields read the JSON just written


def seeds_text(seeds: list[int]) -> str:
    """'seeds 0-2' for consecutive seeds, 'seeds 0, 3, 7', or 'seed 0': the seeds a figure ran at its scale."""
    word = "seed" if len(seeds) == 1 else "seeds"
    return f"{word} {seed_range(seeds) or ', '.join(map(str, sorted(seeds)))}"


def differences_section(differences: list[str] | None, seeds: list[int]) -> list[str]:
    """What this run's setup changes from the paper's (atlas.differences), so a reader knows what the page shows.
    `{seeds}` in a sentence is the seeds of the page's own scale (a spec's presets run different seeds: a
    sentence written for one scale said 'seeds 0-2' on a page whose data held seeds 0-1)."""
    if differences is None:
        return [DIFFERENCES_HEADING, "", "Not yet audited against the paper's stated setup.", ""]
    if not differences:
        return [DIFFERENCES_HEADING, "", "None: the setup is the paper's as stated.", ""]
    return [DIFFERENCES_HEADING, "", *(f"- {d.replace('{seeds}', seeds_text(seeds))}" for d in differences), ""]


def render_page(figure: Figure, df: pd.DataFrame, out: Path, notes_dir: str | Path | None, *,
                ran: list[dict] | None, search: dict | None, kept: dict[str, list[str]] | None = None
                ) -> tuple[Path, dict]:
    """Write the page from its runs (`df`), what ran, and a search's report. A section whose data is not given
    (a page written before its JSON kept it) is taken from `kept`: {heading: its lines}."""
    img_dir = out / "img"
    img_dir.mkdir(parents=True, exist_ok=True)
    counts = phase_counts(df)
    scale = scale_line(figure)
    lines = [f"# {figure.title}", "",
             f"Spec `{figure.path.as_posix()}`, scale **{figure.scale}**; MLflow experiment `{figure.name}`.", "",
             *([scale, ""] if scale else []),
             "```bash", *_commands(figure), "```", "",
             "## What the paper shows", "", f"> {figure.expected or '(the spec header states no expectation)'}", "",
             *differences_section(figure.config.differences, figure.pieces[0].spec.seeds),
             "## Runs and wall time", "", *(_ran_section(ran, df, figure) if ran is not None
                                            else kept[RAN_HEADING]),
             "## Phase counts", "", md_table(_counts_table(counts, len(df))), ""]
    if figure.pieces[0].search:
        body, summary = _search_section(figure, search, df) if search is not None else (kept[SEARCH_HEADING], {})
        k = len(figure.pieces[0].spec.seeds)
        lines[lines.index("## Phase counts")] = ("## Phase counts (all trials)" if k == 1 else
                                                 f"## Phase counts (all runs: {len(df) // k} trials x {k} seeds)")
        lines += [SEARCH_HEADING, "", *body]
    elif figure.config.view == "fraction":
        body, summary = fraction_section(figure, df, img_dir)
        lines += ["## Generalization against data fraction", "", *body]
    else:
        body, summary = _diagram_section(figure, df, img_dir)
        lines += ["## Phase diagram", "", *body]
    lines += [HEADING, ""]  # drawn by refresh_discussion once the JSON its fields read is written
    page = out / f"{figure.stem}.md"
    page.write_text("\n".join(lines).rstrip() + "\n")
    return page, summary


def write_summary(figure: Figure, df: pd.DataFrame, out: Path, summary: dict, ran: list[dict] | None,
                  search: dict | None, kept: dict | None = None) -> None:
    """<out>/<stem>.json: what the index shows, the pieces' spec hashes, and what the page re-renders from."""
    kept = kept or {}
    estimate = sum(p["estimate_s"] for p in ran) if ran is not None else kept["estimate_s"]
    measured = sum(p["measured_s"] for p in ran) if ran is not None else kept["measured_s"]
    (out / f"{figure.stem}.json").write_text(json.dumps({
        "figure": figure.stem, "spec": figure.path.as_posix(), "scale": figure.scale, "title": figure.title,
        "configurations": int(len(df)), "estimate_s": round(estimate, 1), "measured_s": round(measured, 1),
        "counts": {p: int(n) for p, n in phase_counts(df).items() if n},
        "pieces": figure.piece_hashes, **({"set": list(figure.overrides)} if figure.overrides else {}), **summary,
        **({"ran": ran} if ran is not None else {}), **({"search": search} if search is not None else {})},
        indent=1) + "\n")


def page_is_current(figure: Figure, out_dir: str | Path) -> dict | None:
    """The JSON summary of the figure's page in out_dir when it was written from exactly these pieces (same spec
    hashes): a checkout that carries the page need not train the figure again to have it."""
    path = Path(out_dir) / f"{figure.stem}.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text())
    return summary if summary.get("pieces") == figure.piece_hashes else None


def write_index(out_dir: str | Path) -> Path:
    """<out>/README.md: one row per page found (from the JSON summaries)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for f in sorted(out.glob("*.json")):
        s = json.loads(f.read_text())
        ratio = s["measured_s"] / s["estimate_s"] if s["estimate_s"] else float("nan")
        counts = ", ".join(f"{p} {n}" for p, n in s["counts"].items())
        rows.append({"figure": f"[{s['figure']}]({s['figure']}.md)", "scale": s["scale"],
                     "configurations": s["configurations"], "measured": minutes(s["measured_s"]),
                     "estimate": minutes(s["estimate_s"]), "measured / estimate": f"{ratio:.2f}", "phases": counts})
    text = ["# Atlas", "",
            "Every seed figure of the sweep library, regenerated by `grokray atlas` (`make atlas`) on real Ray and "
            "MLflow and compared with its paper. One page per figure and scale; `paper` is the spec as written "
            "(split into resumable pieces where it says so), `reduced` its reduced: preset, `smoke` the CI preset.",
            "", md_table(pd.DataFrame(rows)) if rows else "(no pages yet)", ""]
    index = out / INDEX
    index.write_text("\n".join(text))
    return index
