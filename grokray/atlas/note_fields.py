"""A figure's note with its numbers as fields the page fills from its runs (note_numbers.py checks the numbers a
note still writes by hand).

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
  not), after `where G...` keeps only the runs passing G; `trials AGGREGATE COLUMN F...` (and `cells AGGREGATE
  COLUMN F...`) is one of the aggregates above over the trials (cells) instead of the runs (`trials max optim.lr
  score<=1000`, `cells mean agreement`)
- any field but `json` followed by `in PAGE` reads that page's data instead (a methods page names its methods');
  PAGE may be a data file that extends a page (`liu_fig6b_toy_regression-paper-seeds-4-5`: more seeds of it) or
  two pooled (`A+B`: both pages' runs, each cell's majority over all their seeds)
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

from ..objectives import seed_vote

FIELD = re.compile(r"\{\{(.+?)\}\}", re.S)
OPS = {"!=": operator.ne, "<=": operator.le, ">=": operator.ge, "=": operator.eq, "<": operator.lt, ">": operator.gt}
FILTER = re.compile(r"^(.+?)(!=|<=|>=|=|<|>)(.+)$")
COLUMN_AGGREGATES = ("median", "min", "max", "mean", "distinct", "at")
AGGREGATES = ("runs", "share", *COLUMN_AGGREGATES, "cells", "trials", "json")
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

    def exists(self, stem: str) -> bool:
        """Whether `stem` names data in the atlas folder: a page (its JSON), a data file that extends one, or each
        part of a pooled `A+B`."""
        return self.folder is not None and all(
            (self.folder / f"{s}.json").exists()
            or (self.folder / "data" / f"{s}.csv").exists() and extended_page(self.folder, s) is not None
            for s in stem.split("+"))

    def page(self, stem: str) -> dict | None:
        path = self.folder / f"{stem}.json" if self.folder is not None else None
        return json.loads(path.read_text()) if path is not None and path.exists() else None


def extended_page(folder: Path, stem: str) -> str | None:
    """The page a data file without a page of its own extends (data/<page>-seeds-4-5.csv): the longest page stem
    it starts with."""
    pages = [p.stem for p in folder.glob("*.json") if stem.startswith(p.stem + "-")]
    return max(pages, key=len) if pages else None


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
            empty = col.isna() | (col.astype(str) == "")  # a cell's `tie` is "" where there is none
            hit = empty if raw == "none" else ~empty
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
        if data.other is None or data.folder is None or not data.exists(words[-1]):
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
        if filters and filters[0] in COLUMN_AGGREGATES:  # an aggregate over the cells (`cells mean agreement`)
            return _of_column(filters[0], filters[1:], data.cells, field)
        return int(_mask(data.cells, filters, field).sum())
    return _of_column(kind, filters, df, field)


def _of_column(kind: str, words: list[str], df: pd.DataFrame, field: str):
    """`median|min|max|mean|distinct COLUMN F...` or `at COLUMN min|max OTHER F...` over the rows of `df`."""
    named = [words[0], words[2]] if kind == "at" and len(words) > 2 and words[1] in ("min", "max") else words[:1]
    if not named or any(c not in df.columns for c in named) or kind == "at" and len(named) < 2:
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
    them (objectives.seed_vote)."""
    columns = list(runs.columns)
    if params is None:
        params = columns[columns.index("piece") + 1:columns.index("seed")] if "piece" in runs and "seed" in runs else []
    params = [p for p in params if p in runs]
    crossing = next((c for c in columns if c.startswith(("step_val_acc_", "step_train_acc_"))), None)
    if not params or crossing is None:
        return pd.DataFrame(columns=["voting", "generalized", "score"])
    level = crossing.rsplit("_", 1)[1]  # a search where no run crossed val has no val column: none generalized
    threshold, train, val = float(level), f"step_train_acc_{level}", f"step_val_acc_{level}"

    def step(v):
        return None if pd.isna(v) else v

    rows = []
    for _, trial in runs.groupby(params, dropna=False, sort=False):
        members = [{"seed": r["seed"], "phase": r["phase"], "step_train": step(r.get(train)),
                    "step_val": step(r.get(val)), "threshold": threshold, "ideal": step(r.get("ideal_val_acc"))}
                   for _, r in trial.iterrows()]
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
