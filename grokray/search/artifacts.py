"""The search's parent run: best params and values, parameter importances, optimization history, Pareto front.

Data first (`history_info`, `pareto_info`, `importances`: plain lists and dicts, testable), drawing second
(matplotlib, Agg). Everything lands on the MLflow parent run under `search/`.
"""

from __future__ import annotations

import csv
import json
import math
import tempfile
import warnings
from pathlib import Path

from optuna.trial import TrialState

from ..objectives import SEED_ATTRS
from ..tracking.schema import (
    SEARCH_BEST_PHASE_TAG,
    SEARCH_BEST_TRIAL_TAG,
    SEARCH_BEST_VALUE_TAG,
    SEARCH_DIR,
    SEARCH_PARETO_TAG,
    SLICES_PNG,
)
from .study import RUN_ID_ATTR, generalized_best, trial_run_ids

ARTIFACT_DIR = SEARCH_DIR
TRIAL_COLUMNS = ("phase", *SEED_ATTRS, "trial_key", "duplicate_of", RUN_ID_ATTR)


def _completed(study) -> list:
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.values is not None and all(math.isfinite(v) for v in t.values)]


def importances(study, cfg) -> dict[str, dict[str, float]]:
    """Optuna's parameter importances per objective ({} when fewer than 2 trials completed or nothing varied)."""
    import optuna

    done = _completed(study)
    if len(done) < 2:
        return {}
    out = {}
    for i, name in enumerate(cfg.objective):
        if len({t.values[i] for t in done}) < 2:
            continue  # every trial scored the same: nothing to attribute
        try:
            target = (lambda t, i=i: t.values[i]) if cfg.multi else None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = optuna.importance.get_param_importances(study, target=target)
        except (RuntimeError, ValueError, ZeroDivisionError):
            continue
        out[name] = {k: float(v) for k, v in values.items()}
    return out


def history_info(study, index: int = 0) -> list[dict]:
    """(number, value, best so far) of each completed trial, in trial order, for one objective."""
    rows, best = [], math.inf
    for t in sorted(_completed(study), key=lambda t: t.number):
        value = t.values[index]
        best = min(best, value)
        rows.append({"number": t.number, "value": value, "best": best, "phase": t.user_attrs.get("phase", "")})
    return rows


def pareto_info(study, cfg) -> list[dict]:
    """The non-dominated completed trials (minimising every objective), sorted by the first objective."""
    done = _completed(study)
    front = []
    for t in done:
        dominated = any(all(a <= b for a, b in zip(o.values, t.values, strict=True)) and o.values != t.values
                        for o in done)
        if not dominated:
            front.append({"number": t.number, **dict(zip(cfg.objective, t.values, strict=True)), **t.params})
    return sorted(front, key=lambda r: (r[cfg.objective[0]], r["number"]))


def plot_history(rows: list[dict], name: str, penalty: float, path: Path, title: str = "") -> dict[str, list]:
    """The optimization history as a PNG, titled by the study (`title`); returns what it drew: the legend's
    labels, the x ticks and the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6, 4))
    ok = [r for r in rows if r["value"] < penalty]
    bad = [r for r in rows if r["value"] >= penalty]
    if ok:  # a legend entry only for what is drawn
        ax.scatter([r["number"] for r in ok], [r["value"] for r in ok], s=18, label="trial (generalized)")
        best = [(r["number"], r["best"]) for r in rows if r["best"] < penalty]
        ax.step(*zip(*best, strict=True), where="post", color="C3", label="best so far")
    if bad:
        ax.scatter([r["number"] for r in bad], [r["value"] for r in bad], s=18, marker="x", color="grey",
                   label=f"did not generalize (scored the penalty, {penalty:g})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # trials are numbered, not measured
    ax.set_xlabel("trial")
    ax.set_ylabel(name)
    ax.set_title(f"{title}: optimization history of {name}" if title else f"optimization history: {name}")
    legend = ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    drawn = {"legend": [t.get_text() for t in legend.get_texts()], "xticks": [float(t) for t in ax.get_xticks()],
             "title": ax.get_title()}
    plt.close(fig)
    return drawn


def plot_slices(study, cfg, title: str, path: Path, index: int = 0):
    """The objective against each searched parameter, one panel each (log axes where the space is log), titled by
    the spec: what a search's parent shows instead of a grid's phase diagram. Returns the figure's axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter

    done = _completed(study)
    name, keys = cfg.objective[index], list(cfg.space)
    cols = min(3, len(keys))
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.0 * rows), squeeze=False, sharey=True)
    for ax, key in zip(axes.flat, keys, strict=False):
        pts = [(t.params[key], t.values[index]) for t in done if key in t.params]
        ok = [(x, y) for x, y in pts if y < cfg.penalty]
        bad = [(x, y) for x, y in pts if y >= cfg.penalty]
        if ok:
            ax.scatter(*zip(*ok, strict=True), s=16, label="generalized")
        if bad:
            ax.scatter(*zip(*bad, strict=True), s=16, marker="x", color="grey", label="did not (penalty)")
        if cfg.space[key].log:
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(numticks=4))
            ax.xaxis.set_minor_formatter(NullFormatter())  # inside a decade matplotlib labels every minor tick
        elif cfg.space[key].kind != "categorical":
            ax.xaxis.set_major_locator(MaxNLocator(4))
        ax.set_xlabel(key, fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(name)
    fig.suptitle(f"{title}: {name} against each searched parameter ({len(done)} trials)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig


def _plot_pareto(study, front: list[dict], cfg, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a, b = cfg.objective[:2]
    done = _completed(study)
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter([t.values[0] for t in done], [t.values[1] for t in done], s=14, color="lightgrey", label="trials")
    ax.plot([r[a] for r in front], [r[b] for r in front], "o-", color="C3", label="Pareto front")
    ax.set_xlabel(a)
    ax.set_ylabel(b)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _write_csv(rows: list[dict], path: Path) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def parent_summary(study, cfg) -> tuple[dict[str, float], dict[str, str], dict[str, str]]:
    """(metrics, params, tags) of the search's parent: trials counted, the best values and params (the Pareto
    front's trial numbers for several objectives), or that none generalized."""
    done = _completed(study)
    metrics = {"search/trials": float(len(study.trials)), "search/completed": float(len(done))}
    params, tags = {}, {}
    front = generalized_best(study, cfg)  # a penalty is not a result: no best until a trial generalized
    if front and not cfg.multi:
        best = front[0]
        metrics[f"best/{cfg.objective[0]}"] = float(best.value)
        params = {f"best.{k}": v for k, v in best.params.items()}
        tags = {SEARCH_BEST_TRIAL_TAG: best.number, SEARCH_BEST_VALUE_TAG: best.value,
                SEARCH_BEST_PHASE_TAG: best.user_attrs.get("phase", "")}
    elif front:
        metrics |= {f"best/{name}": float(min(t.values[i] for t in front)) for i, name in enumerate(cfg.objective)}
        tags = {SEARCH_PARETO_TAG: [t.number for t in front]}
    elif done:
        tags = {SEARCH_BEST_PHASE_TAG: f"none of {len(done)} trials generalized"}
    return metrics, params, tags


def write_results(study, cfg, d: Path) -> list[Path]:
    """The search's files into d: best.json, param_importances.{json,csv}, trials.csv, the objective against each
    parameter, each objective's history and (several objectives) the Pareto front."""
    done, front = _completed(study), generalized_best(study, cfg)
    files = []
    best_rows = [{"number": t.number, "values": list(t.values), "params": t.params,
                  "phase": t.user_attrs.get("phase"), **{k: t.user_attrs[k] for k in SEED_ATTRS
                                                         if k in t.user_attrs},
                  "mlflow_run_id": trial_run_ids(study.user_attrs, t)} for t in front]
    (d / "best.json").write_text(json.dumps(best_rows, indent=1, default=str))
    files.append(d / "best.json")
    imp = importances(study, cfg)
    (d / "param_importances.json").write_text(json.dumps(
        imp or {"note": f"needs >= 2 completed trials with different values; {len(done)} completed"}, indent=1))
    files.append(d / "param_importances.json")
    rows = [{"objective": obj, "param": p, "importance": v, "note": ""}
            for obj, vals in imp.items() for p, v in vals.items()]
    rows = rows or [{"objective": ", ".join(cfg.objective), "param": "", "importance": "",
                     "note": f"needs >= 2 completed trials with different values; {len(done)} completed"}]
    _write_csv(rows, d / "param_importances.csv")
    files.append(d / "param_importances.csv")
    trials = [{"number": t.number, "state": t.state.name, **{f"value.{n}": v for n, v in zip(
        cfg.objective, t.values or [], strict=False)}, **t.params,
        **{k: v for k, v in t.user_attrs.items() if k in TRIAL_COLUMNS},
        **({RUN_ID_ATTR: trial_run_ids(study.user_attrs, t)} if RUN_ID_ATTR in t.user_attrs else {})}
        for t in study.trials]
    if trials:
        _write_csv(trials, d / "trials.csv")
        files.append(d / "trials.csv")
    if done:
        plot_slices(study, cfg, cfg.study, d / SLICES_PNG)
        files.append(d / SLICES_PNG)
    for i, name in enumerate(cfg.objective):
        rows = history_info(study, i)
        if rows:
            path = d / f"optimization_history_{name}.png"
            plot_history(rows, name, cfg.penalty, path, title=cfg.study)
            files.append(path)
    if cfg.multi and done:
        pareto = pareto_info(study, cfg)
        _write_csv(pareto, d / "pareto_front.csv")
        _plot_pareto(study, pareto, cfg, d / "pareto_front.png")
        files += [d / "pareto_front.csv", d / "pareto_front.png"]
    return files


def log_parent_results(store, run_id: str, study, cfg) -> list[str]:
    """parent_summary and write_results on the parent run (a tracking.store.Store). Returns the artifact paths."""
    metrics, params, tags = parent_summary(study, cfg)
    # Params are immutable in MLflow: a resumed study with a new best keeps it in tags and best_params.json.
    existing = store.run(run_id).params
    # at the study's size: each close of a stopped and resumed search is its own point (all were at step 0)
    store.log_batch(run_id, metrics, {k: v for k, v in params.items() if k not in existing}, tags,
                    step=len(study.trials))
    with tempfile.TemporaryDirectory() as d:
        files = write_results(study, cfg, Path(d))
        for f in files:
            store.log_artifact(run_id, f, ARTIFACT_DIR)
    return [f"{ARTIFACT_DIR}/{f.name}" for f in files]
