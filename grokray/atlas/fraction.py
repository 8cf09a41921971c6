"""The atlas page of a `view: fraction` figure (Liu et al.'s critical training fraction): both of Liu's measures
side by side against the data fraction, over every seed.

- the representation (Liu's own quantity): P(RQI > 0.95), the share of runs whose representation quality index
  passed 0.95 within the budget, and the steps it took (Fig. 4), beside the effective theory's P(unique);
- validation accuracy: the share of runs that generalized (comprehension or grokking), which also needs the
  decoder to have seen every held-out sum, beside Liu's ideal accuracy of each split (Appendix E): a split whose
  ideal accuracy is below the threshold is undecodable, and is counted apart.

Each says where it crosses 0.5.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import plots
from analysis.diagram import FractionCurve, crossing, generalization_vs_fraction, undecodable
from analysis.effective_theory import p_unique_curve, val_ceiling
from analysis.labels import runs_subtitle

from ..models.diagnostics import RQI_THRESHOLD
from ..phases import summary_metric
from .markdown import md_table
from .plan import Figure

RQI_STEP = summary_metric("step_rqi", RQI_THRESHOLD)
MEASURES = ("val acc >= threshold", "RQI > 0.95")


def _split_ceilings(figure: Figure) -> dict[tuple[float, int], float]:
    """(fraction, seed) -> the share of held-out sums trained on (analysis.val_ceiling): the bound for runs made
    before the engine logged Liu's ideal accuracy."""
    out, data = {}, {}
    for piece in figure.pieces:
        for point in piece.spec.points():
            cfg = piece.spec.trial(point)
            key = repr(cfg.task)
            if key not in data:
                data[key] = cfg.task.data()
            tr, va = cfg.task.split(data[key], cfg.seed)
            y = data[key].y
            out[(round(float(cfg.task.train_fraction), 9), cfg.seed)] = val_ceiling(y[tr].tolist(), y[va].tolist())
    return out


def _decodable(figure: Figure, df: pd.DataFrame, threshold: float) -> tuple[pd.Series, str]:
    """Which runs' splits can reach the threshold on validation, and by which bound."""
    if "ideal_val_acc" in df and pd.to_numeric(df["ideal_val_acc"], errors="coerce").notna().all():
        return ~undecodable(df, threshold), "Liu's ideal accuracy of the split (Appendix E, logged by each run)"
    ceilings = _split_ceilings(figure)
    ceiling = [ceilings.get((round(float(f), 9), int(s)), float("nan"))
               for f, s in zip(df["task.train_fraction"], df["seed"], strict=True)]
    return pd.Series(ceiling, index=df.index) >= threshold, "the share of held-out sums trained on"


def both_measures(df: pd.DataFrame) -> FractionCurve:
    """The val-accuracy curve and, where the runs logged the rqi curve, the RQI one, as one grouped curve."""
    val = generalization_vs_fraction(df)
    tables, crit = [val.table.assign(measure=MEASURES[0])], {MEASURES[0]: val.critical_fraction}
    if RQI_STEP in df or "ideal_val_acc" in df:  # runs of an engine that measures RQI (it logs both)
        runs = df if RQI_STEP in df else df.assign(**{RQI_STEP: float("nan")})  # measured, never reached
        rqi = generalization_vs_fraction(runs, steps=RQI_STEP, reached=RQI_STEP)
        tables.append(rqi.table.assign(measure=MEASURES[1]))
        crit[MEASURES[1]] = rqi.critical_fraction
    table = pd.concat(tables, ignore_index=True)[["measure", *val.table.columns]]
    return FractionCurve(table, val.fraction, crit, val.level)


def fraction_section(figure: Figure, df: pd.DataFrame, img_dir: Path) -> tuple[list[str], dict]:
    curve = both_measures(df)
    fraction = curve.fraction
    p = int(pd.to_numeric(df["task.p"]).iloc[0])
    threshold = float(pd.to_numeric(df["phases.threshold"]).iloc[0])
    fractions = sorted(set(curve.table[fraction]))
    theory = p_unique_curve(p, fractions, n_samples=2000, seed=0, threshold=threshold)
    decodable, bound = _decodable(figure, df, threshold)
    df = df.assign(_learnable=decodable.to_numpy(), _gen=df["phase"].isin(["comprehension", "grokking"]))
    by = df.groupby(pd.to_numeric(df[fraction]).round(9))
    learn = pd.DataFrame({"decodable splits": by["_learnable"].sum().astype(int),
                          "rate among decodable": by.apply(lambda g: g.loc[g["_learnable"], "_gen"].mean()
                                                           if g["_learnable"].any() else float("nan"))})
    png = img_dir / f"{figure.stem}.png"
    fig = plots.plot_grokking_time(curve, theory=theory, title=f"{figure.path.stem} ({figure.scale})",
                                   subtitle=runs_subtitle(df))
    fig.savefig(png, dpi=110)
    t = curve.table
    val = t[t["measure"] == MEASURES[0]].drop(columns="measure")
    merged = (val.assign(_f=val[fraction].round(9)).merge(learn, left_on="_f", right_index=True)
              .merge(theory[["fraction", "p_unique", "p_unique_decodable"]], left_on=fraction,
                     right_on="fraction", how="left"))
    has_rqi = MEASURES[1] in curve.critical_fraction
    if has_rqi:
        rq = t[t["measure"] == MEASURES[1]][[fraction, "rate", "median_steps"]]
        merged = merged.merge(rq.rename(columns={"rate": "P(RQI>0.95)", "median_steps": "steps to RQI>0.95"}),
                              on=fraction, how="left")
    shown = merged[[fraction, "n", *(["P(RQI>0.95)", "steps to RQI>0.95"] if has_rqi else []), "p_unique",
                    "n_generalized", "rate", "decodable splits", "rate among decodable", "p_unique_decodable",
                    "median_steps"]]

    def where(measure: str) -> str:
        return _at(curve.critical_fraction.get(measure, float("nan")))

    theory_cross = _at(crossing(theory["fraction"].to_numpy(), theory["p_unique"].to_numpy(), 0.5))
    lines = [f"![representation and generalization against fraction](img/{png.name})", "",
             "Liu's quantity is the representation: `P(RQI>0.95)` is the share of runs whose representation quality "
             "index (Liu Eq. 3, the tolerance of Liu et al.'s code; `rqi` curve of each run) passed 0.95 within the "
             "budget, and `steps to RQI>0.95` their median step; beside it the effective theory's probability that "
             "the training set pins down a unique linear representation (`p_unique`, 2000 sampled training sets per "
             "fraction)." if has_rqi else
             "These runs predate the `rqi` curve: only the val-accuracy measure is shown.", "",
             "The val-accuracy quantity is the share of runs that generalized (`rate`: comprehension or grokking "
             f"within the budget). It also needs the decoder to have seen every held-out sum: `decodable splits` "
             f"counts the runs whose split allows val acc >= {threshold:g} by {bound}, and `p_unique_decodable` is "
             "the theory's probability of both.", "",
             md_table(shown), "",
             "Where each crosses 0.5: " + "; ".join(
                 [*([f"P(RQI>0.95) at {where(MEASURES[1])}"] if has_rqi else []),
                  f"the effective theory's P(unique) at {theory_cross}",
                  f"the val-accuracy rate at {where(MEASURES[0])}"]) + ".", ""]
    summary = {"fractions": {f"{r[fraction]:.3g}": {
        "generalized": int(r["n_generalized"]), "runs": int(r["n"]), "decodable": int(r["decodable splits"]),
        "p_unique": round(float(r["p_unique"]), 3), "p_unique_decodable": round(float(r["p_unique_decodable"]), 3),
        **({"p_rqi": round(float(r["P(RQI>0.95)"]), 3)} if has_rqi else {})}
        for _, r in merged.iterrows()},
        "crossings": {m: None if pd.isna(c) else round(float(c), 3) for m, c in curve.critical_fraction.items()}}
    return lines, summary


def _at(fraction: float) -> str:
    return "not reached" if pd.isna(fraction) else f"{fraction:.2f}"
