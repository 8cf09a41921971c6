"""What a parent run says in MLflow's UI once its launch closes: a description (the run's note) with what ran and
what came out, and the phase diagram among its artifacts. Without it the UI's first page of a sweep says "No
description", and the answer is three clicks and a `grokray analyze` away.

The report never fails a launch: a figure that cannot be drawn (a search over one key) is said so in the note.
"""

from __future__ import annotations

import sys
import tempfile
import time

from ..phases import ordered
from ..spec.build import Spec
from ..tracking.parent import ParentRun
from ..tracking.schema import ANALYSIS_DIR, DRIVERS, NOTE_TAG

NOTE_MAX = 5800  # tags are cut at tracking.client.MAX_VALUE_LEN; a long spec is cut here, the whole one is an artifact


def _axis_text(values: list) -> str:
    shown = [f"{v:.3g}" if isinstance(v, float) else str(v) for v in values]
    return ", ".join(shown if len(shown) <= 8 else [*shown[:3], "...", *shown[-2:]]) + f" ({len(values)})"


def _duration(seconds: float) -> str:
    """As MLflow's runs table writes a duration, so the two read alike."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.1f}min" if seconds < 3600 else f"{seconds / 3600:.1f}h"


def phase_rows(counts: dict[str, int]) -> list[str]:
    total = max(1, sum(counts.values()))
    return ["| phase | runs | share |", "|---|---|---|",
            *(f"| {p} | {counts[p]} | {counts[p] / total:.0%} |" for p in ordered(counts))]


def parent_note(spec: Spec, kind: str, status: str, counts: dict[str, int], configurations: int, wall_s: float,
                figure: str, extra: list[str] | tuple = ()) -> str:
    """The parent's description (markdown): the outcome first, then what ran, then the spec."""
    trial = spec.first_trial()
    train, phases = trial.train, trial.phases
    steps = "swept" if "train.steps" in spec.axes else f"{train.steps:,}"
    lines = [f"**{spec.name}**: {kind} launch {status.lower()}, {configurations} configurations in "
             f"{_duration(wall_s)} (this run's duration).", "",
             *phase_rows(counts), "",
             f"- seeds: {', '.join(map(str, spec.seeds))} (each configuration is one seed)",
             f"- budget: {steps} steps per run; a phase is decided at accuracy {phases.threshold:g} within "
             f"{phases.budget:,} steps (gap {phases.gap:,})",
             *(f"- {axis}: {_axis_text(values)}" for axis, values in spec.axes.items()),
             *(f"- {line}" for line in extra),
             f"- {figure}", ""]
    spec_text = spec.yaml()
    room = NOTE_MAX - len("\n".join(lines)) - 60
    if len(spec_text) > room:
        spec_text = spec_text[:max(0, room)] + "\n# ... (cut: the whole spec is the artifact spec.resolved.yaml)\n"
    return "\n".join([*lines, "Spec (resolved):", "", "```yaml", spec_text.rstrip(), "```"])


def closing_runs():
    """What a launch's close hands each child to as it ends and counts it, so the diagram is drawn from that one
    pass instead of reading N runs back (analysis.load.FrameBuilder, narrow: the columns a diagram reads)."""
    from analysis.load import FrameBuilder  # pandas: loaded when a launch closes, not when it starts

    return FrameBuilder(narrow=True)


def launch_title(spec_name: str, started_ms: int | None) -> str:
    """A launch's figures are titled by its spec and start, as the reader knows it, not by its run id."""
    started = time.localtime((started_ms or time.time() * 1e3) / 1e3)
    return f"{spec_name} {time.strftime('%Y-%m-%d %H:%M', started)}"


def draw_diagram(uri: str, parent_run_id: str, runs=None, title: str | None = None) -> str:
    """The phase diagram and steps heatmap of the parent's children, logged under analysis/; a line for the note.
    runs: the children as the close counted them (a FrameBuilder); None reads them from the store."""
    from analysis.pipeline import analyze  # matplotlib: loaded when a launch closes, not when it starts

    with tempfile.TemporaryDirectory() as d:
        try:
            analyze(d, parent_run_id=parent_run_id, tracking_uri=uri, log=True, narrow=True,
                    runs=None if runs is None else runs.frame(), title=title)
        except ValueError as exc:  # one searched key, no finished configuration, ...
            return f"no phase diagram: {exc}"
    return f"phase diagram: artifacts `{ANALYSIS_DIR}/phase_diagram.png` (steps: `{ANALYSIS_DIR}/steps_heatmap.png`)"


def report_on_parent(parent: ParentRun, spec: Spec, kind: str, status: str, counts: dict[str, int],
                     configurations: int, wall_s: float, extra: list[str] | tuple = (), runs=None) -> float:
    """Draw the figures and write the note on the parent; returns the seconds it took. Never raises."""
    t0 = time.time()
    try:
        # a study's points are scattered, not a grid: its figures are its own (search.artifacts)
        figure = DRIVERS[kind].figure_line if DRIVERS[kind].study \
            else draw_diagram(parent.uri, parent.run_id, runs, title=launch_title(spec.name, parent.started_ms))
        parent.set_tag(NOTE_TAG, parent_note(spec, kind, status, counts, configurations, wall_s, figure, extra))
    except Exception as exc:  # noqa: BLE001 - the sweep is done and recorded; its description must not undo that
        print(f"grokray: could not write the parent run's description: {type(exc).__name__}: {exc}",
              file=sys.stderr)
    return time.time() - t0
