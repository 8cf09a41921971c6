"""`grokray atlas`: plan every figure (all specs validated first), run or resume or skip each piece, write the pages
and the index. A figure whose pieces fail is reported and the others go on; the atlas can simply be run again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import AtlasStopped, SpecError
from ..search.config import parse_search
from ..tracking.store import Store
from .discussion import refresh_discussion
from .page import PieceTiming, page_is_current, write_index, write_page
from .plan import Figure, plan_atlas
from .runner import ESTIMATE_METRIC, UPPER_METRIC, PieceRecord, estimate_piece, run_figure
from .search_comparison import write_methods_page


@dataclass
class FigureResult:
    figure: Figure
    records: list[PieceRecord]
    timings: list[PieceTiming]
    page: Path | None
    error: str = ""

    @property
    def estimate_s(self) -> float:
        return sum(t.estimate_s for t in self.timings)

    @property
    def measured_s(self) -> float:
        return sum(t.measured_s for t in self.timings)


def piece_timings(figure: Figure, records: list[PieceRecord], tracking_uri: str) -> list[PieceTiming]:
    """Estimate against measured per piece. A piece stored without an estimate (run by plain `grokray run`, or by
    an older atlas) gets one made now, and it is logged on its parent so the page stays the same next time."""

    store = Store(tracking_uri)
    out = []
    for piece, rec in zip(figure.pieces, records, strict=True):
        est = rec.estimate
        if est is None:
            e = estimate_piece(piece)
            est = (e.seconds, e.upper_seconds)
            if rec.parent_run_id:
                store.log_metric(rec.parent_run_id, ESTIMATE_METRIC, est[0])
                store.log_metric(rec.parent_run_id, UPPER_METRIC, est[1])
        configurations, packs = rec.configurations or len(piece.spec.points()), rec.packs
        if piece.search:  # a search's parent counts no grid: it ran n_trials trials, each a pack of its seeds
            packs = parse_search(piece.spec).n_trials
            configurations = packs * len(piece.spec.seeds)
        out.append(PieceTiming(piece.name, configurations, packs, est[0], est[1], rec.wall_s))
    return out


def build_atlas(paths: list[str | Path], scale: str, out_dir: str | Path, tracking_uri: str, storage: str, *,
                run: bool = True, progress: str = "auto", log=print,
                overrides: tuple[str, ...] = ()) -> list[FigureResult]:
    figures = plan_atlas(paths, scale, overrides)  # every spec, piece and atlas block checked before anything runs
    results = []
    for figure in figures:
        try:
            stored = run_figure(figure, tracking_uri, storage, run=False, log=lambda *_: None)
            kept = page_is_current(figure, out_dir) if all(not r.parent_run_id for r in stored) else None
            if kept is not None:  # MLflow here holds nothing of it, but the committed page is of these very pieces
                page = refresh_discussion(figure, out_dir)
                timings = [PieceTiming("(page)", kept["configurations"], 0, kept["estimate_s"], kept["estimate_s"],
                                       kept["measured_s"])]
                log(f"[atlas] {figure.stem}: {page} is of these pieces (same spec hashes) and this MLflow store holds "
                    "none of them: kept (delete the page to train the figure again)")
                results.append(FigureResult(figure, stored, timings, page))
                continue
            records = run_figure(figure, tracking_uri, storage, run=run, progress=progress, log=log)
            unfinished = [r for r in records if not r.parent_run_id or r.action == "incomplete"]
            if unfinished:  # a page of part of a figure would pass for the whole of it
                results.append(FigureResult(figure, records, [], None, "pieces not run or not complete: "
                                            + ", ".join(r.name for r in unfinished)))
                continue
            timings = piece_timings(figure, records, tracking_uri)
            page = write_page(figure, records, timings, out_dir, tracking_uri)
            result = FigureResult(figure, records, timings, page)
            log(f"[atlas] {figure.stem}: {result.measured_s / 60:.1f} min measured, {result.estimate_s / 60:.1f} min "
                f"estimated (x{result.measured_s / max(result.estimate_s, 1e-9):.2f}) -> {page}")
        except Exception as exc:  # noqa: BLE001 - one figure's failure must not cost the others
            if isinstance(exc, (SpecError, AtlasStopped)):  # a mistake, or the user's stop: not one figure's failure
                raise
            result = FigureResult(figure, [], [], None, f"{type(exc).__name__}: {exc}")
            log(f"[atlas] {figure.stem}: FAILED ({result.error}); run the atlas again to resume it")
        results.append(result)
    write_compare_pages(results, out_dir, tracking_uri, log)
    write_index(out_dir)
    return results


def results_lines(results: list[FigureResult]) -> list[str]:
    """The table `grokray atlas` prints: per figure, the estimate against the measured wall, and its page."""
    lines = [f"{'figure':<40} {'estimate':>9} {'measured':>9} {'ratio':>6}  page"]
    for r in results:
        lines.append(f"{r.figure.stem:<40} {'':>9} {'':>9} {'':>6}  {r.error}" if r.page is None else
                     f"{r.figure.stem:<40} {r.estimate_s / 60:>7.1f} m {r.measured_s / 60:>7.1f} m "
                     f"{r.measured_s / max(r.estimate_s, 1e-9):>6.2f}  {r.page}")
    return lines


def write_compare_pages(results: list[FigureResult], out_dir, tracking_uri: str, log=print) -> None:
    """The figures that name one atlas.compare page, drawn side by side once all of them have theirs."""
    groups: dict[str, list[FigureResult]] = {}
    for r in results:
        if r.figure.config.compare is not None and r.figure.pieces[0].search:
            groups.setdefault(r.figure.config.compare.page, []).append(r)
    for name, members in groups.items():
        missing = [r.figure.stem for r in members if r.page is None or not r.records]
        if missing:
            log(f"[atlas] {name}: not drawn, {', '.join(missing)} not complete")
            continue
        kept = [r.figure.stem for r in members if not any(rec.parent_run_id for rec in r.records)]
        if kept:  # a kept page's runs are not in this store: drawn from it, the side-by-side page would be empty
            log(f"[atlas] {name}: left as it is, {', '.join(kept)} kept from the committed pages "
                "(this store holds none of their runs)")
            continue
        page = write_methods_page(name, members, out_dir, tracking_uri)
        log(f"[atlas] {name}: {len(members)} methods side by side -> {page}")
