"""What a figure calls things: short axis names for dotted spec keys, compact tick labels, and the subtitle that
says what the figure aggregates (seeds, budget, configurations). Pure strings, shared by every plot."""

from __future__ import annotations

import numpy as np
import pandas as pd

from grokray.models import MODELS
from grokray.numbers import short_number

NAMES = {  # the axes of the library's figures; anything else is shortened by rule (axis_label)
    "optim.decoder.lr": "decoder lr",
    "optim.embedding.lr": "embedding lr",
    "optim.default.lr": "lr",
    "optim.decoder.weight_decay": "decoder weight decay",
    "optim.embedding.weight_decay": "embedding weight decay",
    "optim.default.weight_decay": "weight decay",
    "task.train_fraction": "training fraction",
    "task.train_size": "training pairs",
    "model.init_scale": "init scale",
    "seed": "seed",
}


def axis_label(key: str) -> str:
    """'optim.decoder.weight_decay' -> 'decoder weight decay'; unknown keys lose their block name."""
    if key in NAMES:
        return NAMES[key]
    parts = key.split(".")
    if parts[0] in ("optim", "model", "task", "train", "phases") and len(parts) > 1:
        parts = parts[1:]
    if parts and parts[0] == "default":
        parts = parts[1:]
    return " ".join(p.replace("_", " ") for p in parts) or key


def tick_label(value, log: bool = False) -> str:
    """Compact, as run names write it (grokray.numbers.short_number): 1e-4, 3.16e-4, 0.5, 10, 1.5e5."""
    return short_number(value, log)


def _seeds_text(seeds: list) -> str:
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    ints = all(float(s).is_integer() for s in seeds)
    if ints and [int(s) for s in seeds] == list(range(int(seeds[0]), int(seeds[0]) + len(seeds))):
        return f"{len(seeds)} seeds ({int(seeds[0])}-{int(seeds[-1])})"
    return f"{len(seeds)} seeds"


def step_unit(runs: pd.DataFrame) -> str:
    """'iterations' when every run's model counts iterations as steps (the RFM trainer), else 'steps'."""
    models = set(runs["model"].dropna()) if "model" in runs else set()
    rfm = models and all(m in MODELS and MODELS.get(m).build.trainer == "rfm" for m in models)
    return "iterations" if rfm else "steps"


def runs_subtitle(runs: pd.DataFrame) -> str:
    """'4 seeds (0-3) · budget 100,000 steps · 484 configurations': what one cell aggregates, over what budget."""
    parts = []
    if "seed" in runs and runs["seed"].notna().any():
        seeds = sorted(pd.to_numeric(runs["seed"], errors="coerce").dropna().unique().tolist())
        parts.append(_seeds_text(seeds))
    for col in ("phases.budget", "train.steps"):
        if col in runs and runs[col].notna().any():
            budgets = sorted(pd.to_numeric(runs[col], errors="coerce").dropna().unique().tolist())
            if budgets:
                shown = f"{int(budgets[0]):,}" if len(budgets) == 1 else f"{int(budgets[0]):,}-{int(budgets[-1]):,}"
                parts.append(f"budget {shown} {step_unit(runs)}")
                break
    parts.append(f"{int(np.sum(runs['phase'].notna())) if 'phase' in runs else len(runs):,} configurations")
    return " · ".join(parts)
