"""A page that sets several search figures side by side: one row per method (atlas.compare), so that methods
searched under the same task, budget, trials, seeds and ASHA schedule can be read against each other and against
the figures their papers published.

Each row comes from its figure's search: trial 0 is the setting the spec enqueued (the paper's), the best is the
fastest trial by the seed vote that generalized. The figure draws the val-accuracy curves of every method's best.
"""

from __future__ import annotations

import csv
import json
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ..search.config import parse_search  # noqa: E402
from ..search.confirm import (  # noqa: E402
    CONFIRM_ARTIFACT_DIR,
    CONFIRM_FILE,
    LEVEL,
    ROW_COLUMNS,
    confirmed_best,
)
from ..tracking.schema import PHASE_TAG  # noqa: E402
from ..tracking.store import Store  # noqa: E402
from .discussion import note_path, note_text, stored_page  # noqa: E402
from .markdown import md_table, minutes  # noqa: E402
from .scale_note import scale_line  # noqa: E402
from .verdict import interval_text, steps_text, verdict_lines  # noqa: E402


def trials_of(store: Store, parent_run_id: str) -> list[dict]:
    """The search's trials.csv (one row per trial, its values, params and seed vote) from its parent run."""
    with tempfile.TemporaryDirectory() as d:
        try:
            path = store.download(parent_run_id, "search/trials.csv", d)
        except Exception:  # noqa: BLE001 - a search that ended before any trial completed logs no trials.csv
            return []
        with path.open() as f:
            return list(csv.DictReader(f))


def confirmation_of(store: Store, parent_run_id: str) -> dict | None:
    """The search's confirmation stage (search/confirmation.csv on its parent): the search's best setting's median
    and interval at the fresh seeds, the other confirmed settings' in `others`, or None where the spec has no stage
    or it has not run."""
    with tempfile.TemporaryDirectory() as d:
        try:
            path = store.download(parent_run_id, f"{CONFIRM_ARTIFACT_DIR}/{CONFIRM_FILE}", d)
        except Exception:  # noqa: BLE001 - no stage (search.confirm unset), or not run yet
            return None
        with path.open() as f:
            rows = list(csv.DictReader(f))
    best = confirmed_best(rows)
    if best is None:
        return None

    def values(setting: int) -> dict:
        return {k: v for k, v in next(r for r in rows if int(r["setting"]) == setting).items() if k not in ROW_COLUMNS}

    settings = {int(r["setting"]) for r in rows}
    return {**best, "settings": len(settings), "seeds": len({r["seed"] for r in rows}),
            "setting_values": values(best["setting"]),
            "others": [{**o, "setting_values": values(o["setting"])} for o in best["others"]]}


def method_row(result, store: Store) -> dict:
    """One method's figures: its published steps, trial 0 (the enqueued setting) and the best trial."""
    figure = result.figure
    cfg = parse_search(figure.pieces[0].spec)
    objective = f"value.{cfg.objective[0]}"
    trials = trials_of(store, result.records[0].parent_run_id)  # pruned by ASHA too: they count as tried
    done = [t for t in trials if t.get("state") == "COMPLETE" and t.get(objective) not in (None, "")]
    scored = sorted((t for t in done if float(t[objective]) < cfg.penalty), key=lambda t: float(t[objective]))
    # the enqueued setting is trial 0, or the trial that retried it (a resumed search re-queues a failed trial
    # under a new number, with the same configuration key)
    zero = next((t for t in trials if t["number"] == "0"), {})
    first = next((t for t in done if t["number"] == "0" or (zero.get("trial_key") and
                                                            t.get("trial_key") == zero["trial_key"])), None)
    best = scored[0] if scored else None
    if first is not None:
        first = {**first, "stopped": stopped_by_scheduler(store, first)}
    compare = figure.config.compare
    return {"label": compare.label, "baseline": compare.label.lower().startswith("adamw"),
            "published_steps": compare.published_steps, "source": compare.source,
            "enqueued": first, "best": best, "objective": objective,
            "trials": len({t.get("trial_key") or t["number"] for t in trials}),  # a retried trial counts once
            "searched": list(cfg.space), "wall_s": result.measured_s, "figure": figure.stem,
            "confirmed": confirmation_of(store, result.records[0].parent_run_id)}


TRIAL_ZERO = "trial 0: the spec's setting"  # the paper's, where one is published for the task


def stopped_by_scheduler(store: Store, trial: dict) -> bool:
    """Whether ASHA stopped the trial before any of its runs was classified: its seeds' runs hold no phase. (Its
    row's `phase` is then the phase its deciding seed had so far, not an outcome.)"""
    ids = [i for i in str(trial.get("mlflow_run_id") or "").split(",") if i]
    return bool(ids) and all(PHASE_TAG not in store.run(i).tags for i in ids)


def _steps(trial: dict | None, objective: str, penalty: float, budget: int) -> str:
    if trial is None:
        return "-"
    if trial.get("stopped"):
        return "stopped by ASHA"
    votes = (f" ({trial['seeds_generalized']}/{trial['seeds_voting']} seeds)"
             if trial.get("seeds_voting") not in (None, "") else "")
    return steps_text(float(trial[objective]), penalty, budget) + votes


def _confirmed(confirmed: dict | None, penalty: float, budget: int) -> str:
    """'540 (480 to 620; 5 seeds)': the confirmed median and its interval, or where the median seed did not
    generalize, 'not within 2,000'."""
    if confirmed is None:
        return "-"
    seeds = f"{len(confirmed['scores'])} seeds"
    if confirmed["median"] >= penalty:
        return f"not within {budget:,} ({seeds})"
    return f"{steps_text(confirmed['median'], penalty, budget)} ({interval_text(confirmed, penalty, budget)}; {seeds})"


def _setting(trial: dict | None, searched: list[str]) -> str:
    if trial is None:
        return "-"
    return ", ".join(f"{k.split('.')[-1]} {float(trial[k]):.3g}" for k in searched if trial.get(k) not in (None, ""))


def curves_figure(rows: list[dict], store: Store, path: Path, threshold: float) -> None:
    """val/acc of every seed of each method's best trial (dashed: trial 0, where none generalized), one colour per
    method."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, row in enumerate(rows):
        trial, style = (row["best"], "-") if row["best"] is not None else (row["enqueued"], "--")
        if trial is None:
            continue
        label = row["label"] + ("" if style == "-" else " (trial 0; none generalized)")
        for j, run_id in enumerate(r for r in trial.get("mlflow_run_id", "").split(",") if r):
            history = store.curve(run_id, "val/acc")
            ax.plot([max(m.step, 1) for m in history], [m.value for m in history], color=colours[i % len(colours)],
                    lw=1.2, ls=style, alpha=0.85, label=label if j == 0 else None)
    ax.axhline(threshold, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("val accuracy")
    ax.set_title("each method's best trial, every seed")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def page_facts(figure) -> dict:
    """What the page's words need from its spec (the same for every method: the page compares like with like)."""
    spec = figure.pieces[0].spec
    cfg, trial = parse_search(spec), spec.first_trial()
    return {"penalty": cfg.penalty, "budget": trial.phases.budget, "threshold": trial.phases.threshold,
            "objective": cfg.objective[0], "scale": figure.scale, "scale_line": scale_line(figure),
            "model_line": f"What ran: {_lower_first(figure.title.split(', method:')[0])}."}


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def methods_page_text(name: str, facts: dict, methods: list[dict], middle: list[str], notes: str) -> str:
    """The page from its data: `methods` as its JSON keeps them (label, published_steps, best, confirmed), `middle`
    the commands, table, sources and figure lines. Every sentence that compares is made here, from the numbers."""
    penalty, budget, threshold, scale = facts["penalty"], facts["budget"], facts["threshold"], facts["scale"]
    confirming = any(m.get("confirmed") for m in methods)
    lines = [f"# {name}: the methods side by side ({scale} scale)", ""]
    if facts.get("model_line"):
        lines += [facts["model_line"], ""]
    if facts.get("scale_line"):
        lines += [facts["scale_line"], ""]
    lines += [f"Every method searched the same task with the same budget ({budget:,} steps), trials, seeds and ASHA "
              f"schedule; a trial scores the step its seeds' majority reached val accuracy {threshold:g} "
              f"(`{facts['objective']}`). Trial 0 is the setting each method's spec gives "
              "(the paper's, where one is published for this task), enqueued."
              + (" Then each method's best settings ran again at fresh seeds (the search never saw them), chosen "
                 "on the search's own seeds: those that generalized first, by their step, then the nearest of the "
                 "rest; the "
                 + ("confirmed column is the median over those seeds of the setting the search ranked first (chosen "
                    "before they ran; the others are reported beside it, not chosen by them)"
                    if any("others" in (m.get("confirmed") or {}) for m in methods) else
                    "confirmed column is the median over those seeds of the best of them")
                 + f", with a bootstrap {LEVEL:.0%} interval, and methods whose intervals overlap are tied."
                 if confirming else ""), ""]
    if confirming:
        lines += [*verdict_lines(methods, penalty, budget, threshold), ""]
    lines += middle
    found = [m for m in methods if m.get("best") is not None]
    if found:
        fastest = min(found, key=lambda m: m["best"])
        lines += [f"Fastest in the search: **{fastest['label']}**, {fastest['best']:,.0f} steps by the majority of its "
                  "seeds" + (" (a best of many noisy trials: the confirmed column is the figure to quote)."
                             if confirming else ".")]
    else:
        lines += ["No method's trial generalized within the budget."]
    published = [m for m in methods if m.get("published_steps")]
    if published and scale == "paper" and confirming:
        against = [f"{m['label']} {m['published_steps']:,} against "
                   + (_confirmed(m["confirmed"], penalty, budget) if m.get("confirmed") else "none confirmed")
                   for m in published]
        lines += ["The published figures beside this page's confirmed medians (where the setups still differ, each "
                  "method's page says how): " + ", ".join(against) + "."]
    elif published and scale == "paper":
        lines += ["No setting was confirmed at fresh seeds here, so the published figures are not set against this "
                  "page's numbers."]
    elif published:
        lines += ["The published figures are of the paper's scale; this page's setup differs (its first lines), so "
                  "they are not set against its numbers."]
    lines += ["", "## Discussion", "", notes or "(no notes yet)"]
    return "\n".join(lines).rstrip() + "\n"


def write_methods_page(name: str, results: list, out_dir: str | Path, tracking_uri: str) -> Path:
    """<out>/<name>-<scale>.md (+ its json and curves figure) from the figures that name this page."""
    out = Path(out_dir)
    (out / "img").mkdir(parents=True, exist_ok=True)
    store = Store(tracking_uri)
    rows = [method_row(r, store) for r in results]
    scale = results[0].figure.scale
    stem = f"{name}-{scale}"
    facts = page_facts(results[0].figure)
    objective, penalty, budget = rows[0]["objective"], facts["penalty"], facts["budget"]
    confirming = any(r["confirmed"] is not None for r in rows)
    table = pd.DataFrame([{
        "method": r["label"],
        "published": f"{r['published_steps']:,}" if r["published_steps"] else "-",
        TRIAL_ZERO: _steps(r["enqueued"], objective, penalty, budget),
        "best found": _steps(r["best"], objective, penalty, budget),
        "its setting": _setting(r["best"], r["searched"]),
        **({"confirmed: median at fresh seeds (90 % interval)": _confirmed(r["confirmed"], penalty, budget)}
           if confirming else {}),
        "trials": r["trials"], "wall": minutes(r["wall_s"]), "page": f"[{r['figure']}]({r['figure']}.md)"}
        for r in rows])
    curves_figure(rows, store, out / "img" / f"{stem}-curves.png", facts["threshold"])
    methods = [{"label": r["label"], "published_steps": r["published_steps"], "figure": r["figure"],
                "enqueued": _value(r["enqueued"], objective), "best": _value(r["best"], objective),
                "enqueued_stopped": bool((r["enqueued"] or {}).get("stopped")),
                "best_trial": int(r["best"]["number"]) if r["best"] else None, "trials": r["trials"],
                "confirmed": r["confirmed"]} for r in rows]
    middle = ["```bash", *[f"grokray atlas --scale {scale} {r.figure.path.as_posix()}" for r in results], "```", "",
              md_table(table), "", "Sources of the published figures:", "",
              *[f"- {r['label']}: {r['source']}" for r in rows if r["source"]], "",
              f"![val accuracy of each method's best trial](img/{stem}-curves.png)", ""]
    counts: dict[str, int] = {}  # the index's row: every method's runs together
    for result in results:
        for phase, n in json.loads((out / f"{result.figure.stem}.json").read_text())["counts"].items():
            counts[phase] = counts.get(phase, 0) + n
    (out / f"{stem}.json").write_text(json.dumps({
        "figure": stem, "scale": scale, "configurations": sum(counts.values()), "counts": counts,
        "estimate_s": round(sum(r.estimate_s for r in results), 1),
        "measured_s": round(sum(r.measured_s for r in results), 1), "methods": methods}, indent=1) + "\n")
    page = out / f"{stem}.md"  # after the JSON, which the note's fields read
    page.write_text(methods_page_text(name, facts, methods, middle, _notes(out, stem)))
    return page


def redraw_methods_page(name: str, figures: list, out_dir: str | Path) -> Path:
    """The committed page's words again from its JSON (`grokray atlas --from-data`): its commands, table, sources
    and curves (drawn from runs the data files do not hold) kept as they are."""
    out = Path(out_dir)
    stem = f"{name}-{figures[0].scale}"
    page = out / f"{stem}.md"
    lines = page.read_text().split("\n")
    start = lines.index("```bash")
    end = next(k for k in range(start, len(lines)) if lines[k].startswith("![")) + 2
    methods = json.loads((out / f"{stem}.json").read_text())["methods"]
    page.write_text(methods_page_text(name, page_facts(figures[0]), methods, lines[start:end], _notes(out, stem)))
    return page


def _notes(out: Path, stem: str) -> str:
    """The page's note, its fields filled from the page's JSON (and its methods' pages, by name)."""
    return note_text(note_path(out, stem), stored_page(out, stem)) or ""


def _value(trial: dict | None, objective: str) -> float | None:
    return None if trial is None else float(trial[objective])
