"""One markdown page per atlas figure: what ran, how long it took against the estimate, the diagram, the counts,
where seeds disagree, and the paper's expectation beside what was measured.

The measured part is generated from MLflow; the discussion ("why it differs") is a person's reading and lives in
`<out>/notes/<figure>.md`, included verbatim when present. A JSON summary beside each page feeds the index.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.diagram import phase_counts, phase_grid, pivot
from analysis.labels import runs_subtitle
from analysis.load import load_runs
from analysis.pipeline import default_axes
from analysis.plots_diagram import plot_phase_diagram

from ..plan.estimate import LONG_SHARE
from ..plan.expand import short_names
from ..tracking.history import share_and_mean
from ..tracking.schema import SEARCH_OBJECTIVE_TAG
from ..tracking.store import Store
from .fraction import fraction_section
from .markdown import cell, md_table, minutes, utc
from .plan import Figure
from .runner import PieceRecord

INDEX = "README.md"


@dataclass
class PieceTiming:
    name: str
    configurations: int
    packs: int
    estimate_s: float
    upper_s: float
    measured_s: float

    @property
    def ratio(self) -> float:
        return self.measured_s / self.estimate_s if self.estimate_s > 0 else float("nan")


def load_figure_runs(records: list[PieceRecord], tracking_uri: str) -> pd.DataFrame:
    """The child runs of every piece as one frame (the pieces' swept and log axes merged)."""

    frames, swept, logs = [], [], set()
    for r in records:
        if not r.parent_run_id:
            continue
        df = load_runs(parent_run_id=r.parent_run_id, tracking_uri=tracking_uri)
        df["piece"] = r.name
        frames.append(df)
        swept += [a for a in df.attrs.get("swept", []) if a not in swept]
        logs |= set(df.attrs.get("log_axes", []))
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    out.attrs.update(swept=swept, log_axes=sorted(logs), params=frames[0].attrs.get("params", []))
    return out


RUN_COLUMNS = ("phase", "step_train_acc_0.9", "step_val_acc_0.9", "grokking_gap", "step_rqi_0.95", "ideal_val_acc",
               "steps_run", "final/train/acc", "final/val/acc")


def write_run_table(df: pd.DataFrame, path: Path) -> None:
    """One row per configuration (piece, swept axes, seed, phase, crossings, ideal accuracy): what the page was
    drawn from, kept beside it so a reader can check a cell without the MLflow store."""
    axes = [a for a in df.attrs.get("swept", []) if a in df and a != "seed"]
    keys = ["piece", *axes, *(["seed"] if "seed" in df else [])]
    path.parent.mkdir(parents=True, exist_ok=True)
    df[[*keys, *(c for c in RUN_COLUMNS if c in df)]].sort_values(keys).to_csv(path, index=False)


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


def _timings_table(records: list[PieceRecord], timings: list[PieceTiming], measured_use: dict) -> str:
    """The budget-use columns say why a piece missed its estimate: the estimate assumed what share of the members
    would train their whole budget and how much of it they would train on average (a prior, or what earlier
    runs measured); the next column is what happened."""
    def pair(use) -> str:
        return "-" if use is None else f"{use[0]:.0%} / {use[1]:.0%}"

    rows = []
    for rec, t in zip(records, timings, strict=True):
        when = "; ".join(f"{utc(s)} ({minutes(w)})" for s, w in rec.segments) or "-"
        rows.append({"piece": t.name, "configurations": t.configurations, "packs": t.packs,
                     "estimate": minutes(t.estimate_s), "upper bound": minutes(t.upper_s),
                     "measured": minutes(t.measured_s), "measured / estimate": f"{t.ratio:.2f}",
                     "budget use, assumed": pair(rec.use or (LONG_SHARE, LONG_SHARE)),
                     "budget use, measured": pair(measured_use.get(t.name)),
                     "ran (UTC, wall)": when})
    bases = [f"{r.name}: {r.use[2]}" for r in records if r.use and r.use[2]]
    return (md_table(pd.DataFrame(rows)) + "\n\nBudget use: the share of members that train their whole budget / "
            "the mean share of the budget trained. The estimate's figures: "
            + ("; ".join(bases) if bases else f"assumed ({LONG_SHARE:.0%} / {LONG_SHARE:.0%})") + ".")


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

    axes = figure.config.axes
    # a preset may hold an axis at one value (smoke): then the figure falls back to the axes that vary
    x, y = axes if axes and all(a in df for a in axes) else default_axes(df)
    grid = phase_grid(df, x, y)
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


def _search_section(figure: Figure, records: list[PieceRecord], df: pd.DataFrame, img_dir: Path,
                    tracking_uri: str) -> tuple[list[str], dict]:

    store = Store(tracking_uri)
    run_id = records[0].parent_run_id
    lines, summary = [], {}
    with tempfile.TemporaryDirectory() as d:
        local = store.download(run_id, "search", d)
        best = json.loads((local / "best.json").read_text()) if (local / "best.json").exists() else []
        for png in sorted(local.glob("*.png")):
            target = img_dir / f"{figure.stem}-{png.stem}.png"
            shutil.copyfile(png, target)
            lines += [f"![{png.stem}](img/{target.name})", ""]
    objective = store.run(run_id).tags.get(SEARCH_OBJECTIVE_TAG, "")
    seeds = figure.pieces[0].spec.seeds
    counted = (f"; each at seeds {', '.join(map(str, seeds))}, scored by what a majority of its voting seeds "
               "reached" if len(seeds) > 1 else "")
    lines += [f"Objective: `{objective}` (minimised). Trials: {len(df) // len(seeds)}{counted}.", ""]
    if best:
        rows = [{"trial": b["number"], "values": ", ".join(f"{v:g}" for v in b["values"]), "phase": b["phase"],
                 **({"seeds": b["seed_phases"]} if "seed_phases" in b else {}),
                 **{k.split(".")[-1] if k.count(".") < 2 else k: v for k, v in b["params"].items()}} for b in best]
        lines += ["Best trial(s):", "", md_table(pd.DataFrame(rows)), ""]
        summary["best"] = [{"number": b["number"], "values": b["values"], "phase": b["phase"]} for b in best]
    return lines, summary


def write_page(figure: Figure, records: list[PieceRecord], timings: list[PieceTiming], out_dir: str | Path,
               tracking_uri: str, notes_dir: str | Path | None = None) -> Path:
    """Write <out>/<spec>-<scale>.md (+ img/<...>.png and <...>.json); returns the page's path."""

    out = Path(out_dir)
    img_dir = out / "img"
    img_dir.mkdir(parents=True, exist_ok=True)
    df = load_figure_runs(records, tracking_uri)
    if df.empty or df["phase"].notna().sum() == 0:
        raise ValueError(f"{figure.stem}: no finished configurations in MLflow; run the atlas first")
    estimate = sum(t.estimate_s for t in timings)
    measured = sum(t.measured_s for t in timings)
    counts = phase_counts(df)
    lines = [f"# {figure.title}", "",
             f"Spec `{figure.path.as_posix()}`, scale **{figure.scale}**; MLflow experiment `{figure.name}`.", "",
             "```bash", *_commands(figure), "```", "",
             "## What the paper shows", "", f"> {figure.expected or '(the spec header states no expectation)'}", "",
             "## Runs and wall time", "",
             f"{len(df)} configurations in {len(records)} piece(s); wall time **{minutes(measured)} measured** "
             f"against **{minutes(estimate)} estimated** by the dry-run (measured / estimate = "
             f"{measured / estimate if estimate else float('nan'):.2f}). Code: "
             f"{', '.join(sorted({r.code_version for r in records if r.code_version})) or '-'}.", "",
             _timings_table(records, timings, measured_budget_use(df)), "",
             f"Every run, one row each (axes, seed, phase, crossing steps, ideal accuracy): "
             f"[data/{figure.stem}.csv](data/{figure.stem}.csv).", "",
             "## Phase counts", "", md_table(_counts_table(counts, len(df))), ""]
    if figure.pieces[0].search:
        body, summary = _search_section(figure, records, df, img_dir, tracking_uri)
        k = len(figure.pieces[0].spec.seeds)
        lines[lines.index("## Phase counts")] = ("## Phase counts (all trials)" if k == 1 else
                                                 f"## Phase counts (all runs: {len(df) // k} trials x {k} seeds)")
        lines += ["## Search", "", *body]
    elif figure.config.view == "fraction":
        body, summary = fraction_section(figure, df, img_dir)
        lines += ["## Generalization against data fraction", "", *body]
    else:
        body, summary = _diagram_section(figure, df, img_dir)
        lines += ["## Phase diagram", "", *body]
    lines += _discussion(figure, out, notes_dir)
    page = out / f"{figure.stem}.md"
    page.write_text("\n".join(lines).rstrip() + "\n")
    write_run_table(df, out / "data" / f"{figure.stem}.csv")
    (out / f"{figure.stem}.json").write_text(json.dumps({
        "figure": figure.stem, "spec": figure.path.as_posix(), "scale": figure.scale, "title": figure.title,
        "configurations": int(len(df)), "estimate_s": round(estimate, 1), "measured_s": round(measured, 1),
        "counts": {p: int(n) for p, n in counts.items() if n},
        "pieces": {pc.name: pc.spec.hash() for pc in figure.pieces}, **summary}, indent=1) + "\n")
    return page


def _discussion(figure: Figure, out: Path, notes_dir: str | Path | None) -> list[str]:
    note = (Path(notes_dir) if notes_dir else out / "notes") / f"{figure.stem}.md"
    return ["## Against the paper", "", note.read_text().strip() if note.exists() else
            f"(no discussion yet: write `{note.as_posix()}`)", ""]


def refresh_kept_page(figure: Figure, out_dir: str | Path, notes_dir: str | Path | None = None) -> Path:
    """Put the spec's title and the current note into a kept page: the discussion is written after the run, often
    in a checkout whose MLflow store no longer holds the figure, and the page must not keep saying there is none."""
    out = Path(out_dir)
    page = out / f"{figure.stem}.md"
    text = page.read_text()
    if text.startswith("# "):
        text = f"# {figure.title}" + text[text.index("\n"):]
    head = text[:text.index("## Against the paper")] if "## Against the paper" in text else text.rstrip() + "\n\n"
    page.write_text((head + "\n".join(_discussion(figure, out, notes_dir))).rstrip() + "\n")
    summary_path = out / f"{figure.stem}.json"
    summary = json.loads(summary_path.read_text())
    if summary.get("title") != figure.title:
        summary_path.write_text(json.dumps({**summary, "title": figure.title}, indent=1) + "\n")
    return page


def page_is_current(figure: Figure, out_dir: str | Path) -> dict | None:
    """The JSON summary of the figure's page in out_dir when it was written from exactly these pieces (same spec
    hashes): a checkout that carries the page need not train the figure again to have it."""
    path = Path(out_dir) / f"{figure.stem}.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text())
    return summary if summary.get("pieces") == {pc.name: pc.spec.hash() for pc in figure.pieces} else None


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
