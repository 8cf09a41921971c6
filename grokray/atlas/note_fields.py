"""A figure's note with its numbers as fields the page fills from its runs, and the check of the numbers a note
still writes by hand.

A note (docs/atlas/notes/<figure>.md) is a person's reading of a page, and its numbers went stale or wrong when
they were typed: a count of another run, a confirmation of another setting. A field, `{{runs seed=1
phase=grokking}}`, is computed from the page's data file whenever the page is drawn, so it cannot disagree with
it. What a note writes as a literal number is traced to where it can come from: the spec (a setting, the paper's
number in its header or differences list) or, for a measurement (a decimal, or an integer of 100 or more), a value
the page's data file or JSON holds at the printed precision. A small count the runs hold is only ever a field: a
literal 13 would match some value of almost any data file.

Fields: `AGGREGATE [COLUMN] [FILTER ...] [where FILTER ...] [| FORMAT]`
- `runs F...`: rows of the data file that pass every filter; `share F... where G...`: the fraction of the rows
  passing G (all rows if none) that also pass F
- `median|min|max|mean COLUMN F...`: over the rows that pass, NaN left out; `distinct COLUMN F...`: its values;
  `at COLUMN min|max OTHER F...`: COLUMN's value in the passing row where OTHER is least (greatest)
- `cells F...`: the phase diagram's cells that pass (columns of the cells table: `shown`, the majority phase or a
  tie `a|b`; `agreement`; `n`; `n_undecodable`), after `where G...` keeps only the runs passing G
- `trials F...`: a search's trials that pass (its runs grouped by the searched parameters; columns: the
  parameters, `voting`, the runs whose split can reach the threshold, `generalized`, those of them that comprehend
  or grok, and `score`, the step by which a majority of the voting runs reached the threshold, none where they did
  not), after `where G...` keeps only the runs passing G; `trials AGGREGATE COLUMN F...` is one of the
  aggregates above over the trials instead of the runs (`trials max optim.lr score<=1000`)
- any field but `json` followed by `in PAGE` reads that page's data instead (a methods page names its methods')
- `json PATH [/ PATH]`: a value of the page's JSON, or the ratio of two (any field `A / B` is the ratio of two
  fields): a dotted path, a list's item by its
  index or by a value it holds (`methods.Muon.confirmed.median`), a key with a dot in brackets
  (`fractions[0.822].p_rqi`), and a first part that names another page of the
  atlas (`grokfast-methods-reduced.methods...`) reads that page's JSON
A filter is `COLUMN OP VALUE` (COLUMN may be a ratio of two columns, `A/B`) with OP one of `= != <= >= < >`; a
value is a number, a word, `none` (no value) or
`any` (some value); `a,b,c` after `=` is any of them (after `!=`, none of them). FORMAT is Python's (`,.0f`,
`.1%`); by default an integer gets thousands commas and a decimal three significant digits.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from ..models.diagnostics import RQI_THRESHOLD
from ..plan.estimate import LONG_SHARE
from ..search.confirm import LEVEL
from ..search.objective import seed_vote
from ..spec import load_spec

FIELD = re.compile(r"\{\{(.+?)\}\}", re.S)
OPS = {"!=": operator.ne, "<=": operator.le, ">=": operator.ge, "=": operator.eq, "<": operator.lt, ">": operator.gt}
FILTER = re.compile(r"^(.+?)(!=|<=|>=|=|<|>)(.+)$")
COLUMN_AGGREGATES = ("median", "min", "max", "mean", "distinct", "at")
AGGREGATES = ("runs", "share", *COLUMN_AGGREGATES, "cells", "trials", "json")
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
# where a page's note starts (a figure's page, a methods page): what precedes it is generated
HEADINGS = ("## Against the paper", "## Discussion")


class FieldError(ValueError):
    """A field the page cannot fill: its text and why."""


@dataclass
class PageData:
    """What a page is drawn from: its runs (the data file), its JSON summary, its phase diagram's cells, and the
    atlas folder, where the other pages' JSON is."""
    runs: pd.DataFrame
    summary: dict
    cells: pd.DataFrame | None = None
    folder: Path | None = None
    params: list[str] | None = None  # a search's parameters (default: the data file's columns before `seed`)
    other: Callable[[str], PageData] | None = None  # another page's data by its name (`... in PAGE`)

    def page(self, stem: str) -> dict | None:
        path = self.folder / f"{stem}.json" if self.folder is not None else None
        return json.loads(path.read_text()) if path is not None and path.exists() else None


def _value(text: str):
    if text in ("none", "any"):
        return text
    try:
        return float(text)
    except ValueError:
        return text


def _mask(df: pd.DataFrame, filters: list[str], field: str) -> pd.Series:
    keep = pd.Series(True, index=df.index)
    for f in filters:
        m = FILTER.match(f)
        if not m or _column(df, m.group(1)) is None:
            raise FieldError(f"{{{{{field}}}}}: {f!r} is not COLUMN OP VALUE over the columns "
                             f"{', '.join(map(str, df.columns))} (or a ratio of two, A/B)")
        column, op, raw = m.groups()
        col = _column(df, column)
        if raw in ("none", "any"):
            hit = col.isna() if raw == "none" else col.notna()
            keep &= hit if op == "=" else ~hit
        elif op in ("=", "!=") and "," in raw:
            hit = col.isin([_value(v) for v in raw.split(",")]) | col.astype(str).isin(raw.split(","))
            keep &= hit if op == "=" else ~hit
        else:
            v = _value(raw)
            numeric = pd.to_numeric(col, errors="coerce") if isinstance(v, float) else col.astype(str)
            keep &= OPS[op](numeric, v).fillna(False).astype(bool)
    return keep


def _column(df: pd.DataFrame, name: str) -> pd.Series | None:
    """A column of the rows, or the ratio of two (`optim.decoder.lr/optim.embedding.lr`)."""
    if name in df.columns:
        return df[name]
    top, _, bottom = name.partition("/")
    if top in df.columns and bottom in df.columns:
        return pd.to_numeric(df[top], errors="coerce") / pd.to_numeric(df[bottom], errors="coerce")
    return None


def _item(items: list, part: str):
    if part.isdigit():
        return items[int(part)]
    hits = [x for x in items if isinstance(x, dict) and part in (str(v) for v in x.values())]
    if len(hits) != 1:
        raise KeyError(part)
    return hits[0]


def _json_at(data: PageData, path: str, field: str):
    if re.fullmatch(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", path):
        return float(path)
    parts = [a or b for a, b in re.findall(r"\[([^\]]+)\]|([^.\[\]]+)", path)]  # a key with dots in brackets
    other = data.page(parts[0]) if parts[0] not in data.summary else None
    node, parts = (other, parts[1:]) if other is not None else (data.summary, parts)
    for part in parts:
        try:
            node = _item(node, part) if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise FieldError(f"{{{{{field}}}}}: the page's JSON has no {path!r}") from None
    if not isinstance(node, (int, float)) or isinstance(node, bool):
        try:
            return float(node)
        except (TypeError, ValueError):
            raise FieldError(f"{{{{{field}}}}}: {path!r} is not a number ({node!r})") from None
    return node


def evaluate(field: str, data: PageData):
    """The value of one field (its text between the braces, format left out); `A / B`, two fields' ratio."""
    if " / " in field and not field.startswith("json"):
        top, bottom = field.split(" / ", 1)
        return evaluate(top.strip(), data) / evaluate(bottom.strip(), data)
    if re.fullmatch(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?", field):  # a constant, as in `mean steps_run / 30000`
        return float(field)
    words = field.split()
    if len(words) > 2 and words[-2] == "in" and not words[0] == "json":  # the same field over another page's data
        if data.other is None or data.folder is None or not (data.folder / f"{words[-1]}.json").exists():
            raise FieldError(f"{{{{{field}}}}}: no page {words[-1]!r} in the atlas to read")
        return evaluate(" ".join(words[:-2]), data.other(words[-1]))
    if not words or words[0] not in AGGREGATES:
        raise FieldError(f"{{{{{field}}}}}: a field starts with one of {', '.join(AGGREGATES)}")
    kind, rest = words[0], words[1:]
    if kind == "json":
        paths = " ".join(rest).split("/")
        values = [_json_at(data, p.strip(), field) for p in paths]
        return values[0] if len(values) == 1 else values[0] / values[1]
    filters, base = (rest[:rest.index("where")], rest[rest.index("where") + 1:]) if "where" in rest else (rest, [])
    df = data.runs[_mask(data.runs, base, field)]
    if kind == "runs":
        return int(_mask(df, filters, field).sum())
    if kind == "share":
        return float(_mask(df, filters, field).mean()) if len(df) else math.nan
    if kind == "trials":
        table = trial_table(df, data.params)
        if filters and filters[0] in COLUMN_AGGREGATES:  # an aggregate over the trials, not their count
            return _of_column(filters[0], filters[1:], table, field)
        return int(_mask(table, filters, field).sum())
    if kind == "cells":
        if data.cells is None:
            raise FieldError(f"{{{{{field}}}}}: this page draws no phase diagram, so it has no cells")
        return int(_mask(data.cells, filters, field).sum())
    return _of_column(kind, filters, df, field)


def _of_column(kind: str, words: list[str], df: pd.DataFrame, field: str):
    """`median|min|max|mean|distinct COLUMN F...` or `at COLUMN min|max OTHER F...` over the rows of `df`."""
    named = [words[0], words[2]] if kind == "at" and len(words) > 2 else words[:1]
    if not named or any(c not in df.columns for c in named) or kind == "at" and words[1] not in ("min", "max"):
        shape = " (at COLUMN min|max OTHER)" if kind == "at" else ""
        raise FieldError(f"{{{{{field}}}}}: {kind} of which column{shape}? ({', '.join(map(str, df.columns))})")
    filters = words[3:] if kind == "at" else words[1:]
    rows = df[_mask(df, filters, field)]
    if kind == "distinct":
        return int(rows[words[0]].nunique())
    if kind == "at":  # the value of one column in the row where another is least or greatest
        key = pd.to_numeric(rows[words[2]], errors="coerce").dropna()
        if not len(key):
            return math.nan
        return float(pd.to_numeric(rows.loc[key.idxmin() if words[1] == "min" else key.idxmax(), words[0]]))
    values = pd.to_numeric(rows[words[0]], errors="coerce").dropna()
    return getattr(values, kind)() if len(values) else math.nan


def trial_table(runs: pd.DataFrame, params: list[str] | None = None) -> pd.DataFrame:
    """A search's trials from its runs, one row each (see the module's `trials`), scored as the search scores
    them (search.objective.seed_vote)."""
    columns = list(runs.columns)
    if params is None:
        params = columns[columns.index("piece") + 1:columns.index("seed")] if "piece" in runs and "seed" in runs else []
    params = [p for p in params if p in runs]
    val = next((c for c in columns if c.startswith("step_val_acc_")), None)
    if not params or val is None:
        return pd.DataFrame(columns=["voting", "generalized", "score"])
    threshold = float(val.rsplit("_", 1)[1])
    train = f"step_train_acc_{val.rsplit('_', 1)[1]}"

    def step(v):
        return None if pd.isna(v) else v

    rows = []
    for _, trial in runs.groupby(params, dropna=False, sort=False):
        members = [{"seed": r["seed"], "phase": r["phase"], "step_train": step(r.get(train)), "step_val": step(r[val]),
                    "threshold": threshold, "ideal": step(r.get("ideal_val_acc"))} for _, r in trial.iterrows()]
        vote = seed_vote(["time_to_generalize"], math.inf, members)
        rows.append({**{p: trial[p].iloc[0] for p in params}, "voting": vote["seeds_voting"],
                     "generalized": vote["seeds_generalized"],
                     "score": vote["values"][0] if math.isfinite(vote["values"][0]) else math.nan})
    return pd.DataFrame(rows)


def formatted(value, spec: str | None) -> str:
    if spec:  # 6.3e-3, as a note writes it, not 6.3e-03
        return re.sub(r"e\+?(-?)0*(\d)", r"e\1\2", format(value, spec))
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:.3g}"


def fill(note: str, data: PageData) -> str:
    """The note with every field replaced by its value."""
    def one(m):
        text, _, spec = m.group(1).partition("|")
        return formatted(evaluate(text.strip(), data), spec.strip() or None)

    return FIELD.sub(one, note)


# -- the check of literal numbers --------------------------------------------------------------------------------

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

