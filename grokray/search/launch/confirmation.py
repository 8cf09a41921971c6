"""A search's confirmation stage, run (search.confirm; the statistics are in search/confirm.py).

The best `top` settings (those that generalized first, then the nearest of the rest) are re-run at the fresh seeds
as a search of their own: the same spec named `<name>-confirm`, its study `<study>-confirm`, every trial enqueued
(nothing is sampled, nothing pruned), so checkpoints, retries, the outage spool and resume are the search driver's.
Each fresh seed's score is then written on the first search's parent as `search/confirmation.csv`, and the parent's
confirmation tag turns from "pending" to the confirmation's parent run id: a search whose tag still says pending is
not complete, and `--resume` (or the atlas) runs the stage again from where it stopped.
"""

from __future__ import annotations

import csv
import math
import tempfile
from dataclasses import replace
from pathlib import Path

import optuna
from optuna.trial import TrialState

from ...errors import LaunchFinished
from ...objectives import OBJECTIVE_FNS
from ...phases import crossing_metrics
from ...run.cluster import resolve_storage
from ...run.options import LaunchOptions
from ...spec.build import Spec, build_spec
from ...tracking.schema import CONFIRM_PENDING, CONFIRM_TAG, PHASE_TAG
from ...tracking.store import Store
from ..config import SearchConfig, parse_search
from ..confirm import CONFIRM_ARTIFACT_DIR, CONFIRM_FILE, ROW_COLUMNS, confirmed_best, search_nearness, top_settings
from ..study import open_storage


def confirmation_spec(spec: Spec, cfg: SearchConfig, settings: list[dict]) -> Spec:
    """The spec the stage runs: the search's own, at the fresh seeds, each setting one enqueued trial."""
    return build_spec(spec.raw, presets=(("search.confirm", {
        "name": f"{spec.name}-confirm", "seeds": list(cfg.confirm.seeds), "search.n_trials": len(settings),
        "search.enqueue": settings, "search.asha": None, "search.confirm": None, "search.sampler": "random",
        "search.study": f"{cfg.study}-confirm"}),))


def _param(params: dict, key: str) -> str | None:
    """A child run's param for a searched key; `optim.default.<field>` is logged per group (optim.<group>.<field>,
    every group alike)."""
    if key in params or not key.startswith("optim.default."):
        return params.get(key)
    field = key.rsplit(".", 1)[1]
    return next((v for k, v in params.items() if k.startswith("optim.") and k.count(".") == 2
                 and k.endswith(f".{field}")), None)


def _same(stored: str | None, value) -> bool:
    """A child run's param (a string) against a setting's value."""
    if stored is None:
        return False
    try:
        return math.isclose(float(stored), float(value), rel_tol=1e-9)
    except (TypeError, ValueError):
        return str(stored) == str(value)


def seed_rows(children: list, settings: list[dict], cfg: SearchConfig, threshold: float) -> list[dict]:
    """One row per fresh seed of each setting: its rank (1 = the search's best), seed, phase, score (the
    objective; the penalty where it did not generalize) and whether it votes (0: its split cannot reach the
    threshold, as in the search's seed vote), then the setting's values."""
    score = OBJECTIVE_FNS[cfg.objective[0]]
    rows = []
    for run in children:
        if PHASE_TAG not in run.tags:
            continue  # not ended (an interrupted stage is resumed before its rows are written)
        rank = next((i for i, s in enumerate(settings, 1)
                     if all(_same(_param(run.params, k), v) for k, v in s.items())), None)
        if rank is None:
            continue
        steps = [run.metrics.get(name) for name in crossing_metrics(threshold)]
        ideal = run.metrics.get("ideal_val_acc")
        rows.append({"setting": rank, "seed": int(run.params.get("seed", -1)), "phase": run.tags[PHASE_TAG],
                     "score": score(run.tags[PHASE_TAG], steps[0], steps[1], cfg.penalty),
                     "votes": int(ideal is None or ideal >= threshold), **settings[rank - 1]})
    return sorted(rows, key=lambda r: (r["setting"], r["seed"]))


def run_confirmation(run_search, spec: Spec, cfg: SearchConfig, storage, options: LaunchOptions,
                     parent_run_id: str, uri: str) -> tuple[object | None, dict | None]:
    """Run (or resume) the stage after the search `cfg.study` ended; write its rows on the search's parent.
    run_search: the search driver (the stage is a search; passed in, as the driver is what calls this).
    Returns the stage's SearchSummary and {parent_run_id, settings, best}; (None, None) when no trial
    completed (nothing to confirm)."""
    study = optuna.load_study(study_name=cfg.study, storage=storage)
    scored = [(t.params, t.values[0], search_nearness(t.user_attrs.get("seeds_generalized"),
                                                      t.user_attrs.get("val_acc")))
              for t in study.trials if t.state == TrialState.COMPLETE and t.values]
    settings = top_settings(scored, cfg.penalty, cfg.confirm.top)
    store = Store(uri)
    if not settings:  # no trial completed
        store.set_tag(parent_run_id, CONFIRM_TAG, "none completed")
        return None, None
    stage = confirmation_spec(spec, cfg, settings)
    stage_cfg = parse_search(stage)
    stage_storage, _ = open_storage(stage_cfg, resolve_storage(options.storage))  # its own journal file
    exists = stage_cfg.study in {s.study_name for s in optuna.get_all_study_summaries(stage_storage, False)}
    try:
        summary = run_search(stage, replace(options, resume=exists, parent_tags={}))
        stage_id = summary.parent_run_id
    except LaunchFinished as done:  # the stage ended, but its rows were not written yet
        summary, stage_id = None, done.run_id
    threshold = stage.first_trial().phases.threshold
    rows = seed_rows(store.children(store.run(stage_id)), settings, cfg, threshold)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / CONFIRM_FILE
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else list(ROW_COLUMNS))
            writer.writeheader()
            writer.writerows(rows)
        store.log_artifact(parent_run_id, path, CONFIRM_ARTIFACT_DIR)
    store.set_tag(parent_run_id, CONFIRM_TAG, stage_id)
    return summary, {"parent_run_id": stage_id, "settings": settings, "best": confirmed_best(rows)}


def confirmation_pending(tags: dict) -> bool:
    return tags.get(CONFIRM_TAG) == CONFIRM_PENDING
