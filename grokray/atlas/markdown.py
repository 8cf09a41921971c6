"""The atlas pages' small markdown pieces: tables, durations, timestamps."""

from __future__ import annotations

import time

import pandas as pd


def utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def md_table(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        # a tie is written a|b: its bar must not end the cell
        lines.append("| " + " | ".join(cell(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


def cell(v) -> str:
    if isinstance(v, float):
        if pd.isna(v):
            return "-"
        return f"{v:.3g}"
    return str(v)
