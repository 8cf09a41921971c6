"""The check of the numbers a note writes by hand (note_fields.py fills the rest from the page's data).

What a note writes as a literal number is traced to where it can come from: the spec (a setting, the paper's
number in its header or differences list) or, for a measurement (a decimal, or an integer of 100 or more), a value
the page's data file or JSON holds at the printed precision. A small count the runs hold is only ever a field: a
literal 13 would match some value of almost any data file. tests/test_atlas_numbers.py runs it on every note.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import yaml

from ..models.diagnostics import RQI_THRESHOLD
from ..plan.estimate import LONG_SHARE
from ..search.confirm import LEVEL
from ..spec.build import load_spec
from .note_fields import FIELD, HEADINGS, PageData

# a number as a note prints it: 1,686 / 0.78 / 6.3e-3 / 1e5, not part of a word, a name or a version
NUMBER = re.compile(r"(?<![\w.\-/])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?![\w/]|\.\d)")
NOT_NUMBERS = [re.compile(p) for p in (
    r"`[^`]*`",                                    # code: a spec key, a path, a command
    r"\]\([^)]*\)",                                # a link's target
    r"(?:\b(?:Figs?\.|Table|Eq\.|[Ss]ection|Appendix|issue|arXiv:?)|§)\s*[\w.]+(?:\s*(?:and|,|-)\s*[\w.]+)*",
    r"\b\d{4}-\d\d-\d\d\b",                        # a date
    r"\b\d\d:\d\d(?::\d\d)?\b",                     # a time of day
    r"\b(?:torch|Python|Ray|MLflow|Optuna) \d+(?:\.\d+)+",  # a version
    r"\b[0-9a-f]{7,40}\b",                          # a commit
    r"\btrials? \d+(?:(?:,| and) \d+)*",              # a trial's number: a name, not a count
)]
SMALL = 100  # integers below this must come from the spec or a field


def literal_numbers(text: str) -> list[str]:
    """The numbers a text writes, as printed, outside fields, code, links, figure names, dates and commits."""
    text = FIELD.sub(" ", text)
    for pattern in NOT_NUMBERS:
        text = pattern.sub(" ", text)
    return NUMBER.findall(text)


def _as_float(printed: str) -> float:
    return float(printed.replace(",", ""))


def _digits(printed: str) -> int:
    mantissa = printed.replace(",", "").split("e")[0]
    if "." not in mantissa and "e" not in printed:
        return max(len(mantissa.rstrip("0")), 1)  # 2,000 is 2 at a thousand's precision; 1,686 is four digits
    return max(len(mantissa.replace(".", "").lstrip("0")), 1)


def matches(printed: str, value: float) -> bool:
    """Whether `value` prints as `printed` at its precision (6.3e-3 for 0.00631; 1,700 for 1,686 is not)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return False
    x = _as_float(printed)
    if value == x:
        return True
    if "." not in printed and "e" not in printed:  # an integer as printed: its own rounding, or a round figure
        return round(value) == x or float(f"{value:.{_digits(printed)}g}") == x and x >= 1000
    return float(f"{value:.{_digits(printed)}g}") == x


def _numbers_of(node, out: list[float]) -> list[float]:
    if isinstance(node, dict):
        for k, v in node.items():
            _numbers_of(k, out)
            _numbers_of(v, out)
    elif isinstance(node, (list, tuple)):
        for v in node:
            _numbers_of(v, out)
    elif isinstance(node, bool) or node is None:
        pass
    elif isinstance(node, (int, float)):
        out.append(float(node))
    elif isinstance(node, str):
        try:
            out.append(float(node))
        except ValueError:
            out.extend(_as_float(n) for n in literal_numbers(node))
    return out


def spec_numbers(spec_path: str | Path) -> list[float]:
    """What a spec states: its values and its swept axes' values at every scale, its header (the paper's claims,
    less a 'Measured' line, which is a measurement typed by hand) and its atlas block's text."""
    text = Path(spec_path).read_text()
    out = _numbers_of(yaml.safe_load(text), [])
    for scale in ("smoke", "reduced", "paper"):  # a swept axis's values, as its logspace or range makes them
        out += _numbers_of(load_spec(spec_path, scale=scale).axes, [])
    for line in text.splitlines():
        if line.startswith("#") and "Measured" not in line:
            out.extend(_as_float(n) for n in literal_numbers(line))
    return out


def tool_numbers() -> list[float]:
    """grokray's own fixed numbers a note may name: the RQI threshold, the confirmation interval's coverage, the
    share of members the estimate assumes train their whole budget."""
    return [RQI_THRESHOLD, 100 * RQI_THRESHOLD, LEVEL, 100 * LEVEL, LONG_SHARE, 100 * LONG_SHARE]


def data_numbers(data: PageData, generated: str = "") -> tuple[list[float], list[float]]:
    """(what the page's JSON and generated sections hold, what its data file's rows hold). The JSON in minutes too
    where it holds seconds; the generated sections are drawn from the data (tests/test_atlas_rerender.py redraws
    them)."""
    summarised = _numbers_of(data.summary, []) + [v / 60 for v in _numbers_of(_seconds(data.summary), [])]
    summarised += [_as_float(n) for n in literal_numbers(generated)]
    rows = []
    for column in data.runs.columns:
        rows += [float(v) for v in pd.to_numeric(data.runs[column], errors="coerce").dropna().unique()]
    return summarised, rows


def _seconds(node):
    if isinstance(node, dict):
        return [v if k.endswith("_s") and isinstance(v, (int, float)) else _seconds(v) for k, v in node.items()]
    return [_seconds(v) for v in node] if isinstance(node, list) else []


def untraced(note: str, stated: list[float], measured: tuple[list[float], list[float]]) -> list[str]:
    """The literal numbers of a note that nothing traces: the spec may state any; a measurement must be a value the
    page's JSON or generated text holds, or (at three significant digits or more, where a chance match is rare) a
    value of its data file; a count below 100 is a field."""
    summarised, rows = measured
    out = []
    for printed in literal_numbers(note):
        if any(matches(printed, v) for v in stated):
            continue
        integer = "." not in printed and "e" not in printed
        if integer and _as_float(printed) < SMALL:
            out.append(printed)
        elif not any(matches(printed, v) for v in summarised) and (
                _digits(printed) < 3 and not integer or not any(matches(printed, v) for v in rows)):
            out.append(printed)
    return out


def _linked(note: str, folder: Path) -> list[str]:
    """Other pages a note names (a link, or a page's name in running text)."""
    names = set(re.findall(r"\(([\w\-]+)\.md\)", note)) | set(re.findall(r"\b([a-z][\w]*-(?:reduced|paper))\b", note))
    return sorted(n for n in names if (folder / f"{n}.json").exists())


def note_pools(folder: Path, stem: str, note: str) -> tuple[list[float], list[float]]:
    """(what is stated, what is measured) for the note of page `stem`: the specs of the page (a methods page: of its
    methods), grokray's own numbers and those of a test the note cites (`tests/...py`: what the test asserts);
    the page's JSON, data file and generated text, and the JSON and data file of each page it names or compares
    with. Paths are the repository's, from its root."""
    summary = json.loads((folder / f"{stem}.json").read_text())
    members = [m["figure"] for m in summary.get("methods", [])]
    specs = [summary["spec"]] if "spec" in summary else [
        json.loads((folder / f"{m}.json").read_text())["spec"] for m in members]
    stated = [v for s in specs if Path(s).exists() for v in spec_numbers(s)] + tool_numbers()
    for cited in re.findall(r"`(tests/[\w/]+\.py)`", note):  # a check the note cites: what it asserts
        if Path(cited).exists():
            stated += [x * k for x in _numbers_of(Path(cited).read_text(), []) for k in (1, 100)]
    spec = yaml.safe_load(Path(specs[0]).read_text()) if specs and Path(specs[0]).exists() else {}
    compare = ((spec or {}).get("atlas") or {}).get("compare") or {}
    related = {stem, *members, *_linked(note, folder)}
    if compare and "page" in compare:
        related.add(f"{compare['page']}-{summary['scale']}")
    summarised, rows = [], []
    for name in sorted(related):
        csv = folder / "data" / f"{name}.csv"
        page = folder / f"{name}.md"
        text = page.read_text() if page.exists() else ""
        generated = text.split(HEADINGS[0])[0].split(HEADINGS[1])[0]
        runs = pd.read_csv(csv) if csv.exists() else pd.DataFrame()
        s, r = data_numbers(PageData(runs, json.loads((folder / f"{name}.json").read_text())), generated)
        summarised, rows = summarised + s, rows + r
    return stated, (summarised, rows)

