"""De-grokking objectives, as pure functions of a trial's crossing steps (no Optuna, Ray or MLflow).

Both are minimised. A trial generalizes when train and val accuracy both reached the threshold within the
budget (phase comprehension or grokking). A trial that does not (memorization, confusion, val_without_train,
diverged, or one stopped early) scores `penalty`, which `config.parse_search` keeps above the budget, so it
ranks below every trial that generalizes:

- time_to_generalize = step(val >= threshold)
- grokking_gap       = step(val >= threshold) - step(train >= threshold)   (<= budget; may be negative)

Seeds are counted, not chosen: a spec with several seeds trains each trial at every one of them (one pack) and
the trial scores, per objective, the value a majority of its voting seeds reached: the (n//2 + 1)-th best of n.
That is a value one seed really had, and it is below the penalty only if more than half of the seeds generalized.
A seed whose split cannot reach the threshold (ideal val accuracy below it) does not vote, as in the phase
diagrams; with one seed everything is as before.
"""

from __future__ import annotations

import hashlib

GENERALIZED = ("comprehension", "grokking")
SEED_ATTRS = ("seeds_generalized", "seeds_voting", "seed_phases")  # how a trial's seeds voted, for the record


def generalized(phase: str, step_train: int | None, step_val: int | None) -> bool:
    return phase in GENERALIZED and step_train is not None and step_val is not None


def time_to_generalize(phase: str, step_train: int | None, step_val: int | None, penalty: float) -> float:
    return float(step_val) if generalized(phase, step_train, step_val) else float(penalty)


def grokking_gap(phase: str, step_train: int | None, step_val: int | None, penalty: float) -> float:
    return float(step_val - step_train) if generalized(phase, step_train, step_val) else float(penalty)


OBJECTIVE_FNS = {"time_to_generalize": time_to_generalize, "grokking_gap": grokking_gap}


def objective_values(names: list[str], phase: str, step_train, step_val, penalty: float) -> list[float]:
    return [OBJECTIVE_FNS[n](phase, step_train, step_val, penalty) for n in names]


def majority_index(n: int) -> int:
    """Index, in best-first order, of the value a majority of n voters reached: the (n//2 + 1)-th best."""
    return n // 2


def voters(thresholds: list[float], ideals: list) -> list[int]:
    """The members whose split can reach the threshold; all of them if none can (then every one scores the
    penalty anyway, and the trial still reports what happened)."""
    able = [i for i, (t, ideal) in enumerate(zip(thresholds, ideals, strict=True)) if ideal is None or ideal >= t]
    return able or list(range(len(ideals)))


def seed_vote(objective: list[str], penalty: float, members: list[dict]) -> dict:
    """One trial's values from its seeds. members: [{seed, phase, step_train, step_val, threshold, ideal}].
    Returns the values, the voters, the deciding member (the one at the first objective's majority value), and
    the SEED_ATTRS for the study's record."""
    vote = voters([m["threshold"] for m in members], [m.get("ideal") for m in members])
    scored = [(objective_values(objective, members[i]["phase"], members[i]["step_train"], members[i]["step_val"],
                                penalty), i) for i in vote]
    values = [sorted(v[j] for v, _ in scored)[majority_index(len(scored))] for j in range(len(objective))]
    decider = sorted(scored, key=lambda s: (s[0][0], s[1]))[majority_index(len(scored))][1]
    return {"values": values, "voters": vote, "decider": decider, "seeds_voting": len(vote),
            "seeds_generalized": sum(generalized(members[i]["phase"], members[i]["step_train"],
                                                 members[i]["step_val"]) for i in vote),
            "seed_phases": ", ".join(f"seed {m['seed']}: {m['phase']}" + ("" if i in vote else " (undecodable)")
                                     for i, m in enumerate(members))}


def report_metrics(objective: list[str], penalty: float, configs: list, results: list) -> dict:
    """What a search trial (a pack of its seeds) adds to each report: val/acc now and each objective as if the
    trial ended here, both as a majority of its voting seeds had them (a trial that has not generalized yet scores
    the penalty; ASHA prunes on val/acc). Phase and crossing steps are the deciding seed's."""
    members = [{"seed": c.seed, "phase": r.phase, "step_train": r.step_train, "step_val": r.step_val,
                "threshold": c.phases.threshold, "ideal": r.ideal_val_acc} for c, r in zip(configs, results,
                                                                                           strict=True)]
    vote = seed_vote(objective, penalty, members)
    accs = sorted((float(results[i].final.get("val/acc", 0.0)) for i in vote["voters"]), reverse=True)
    decider = results[vote["decider"]]
    out = {
        "val/acc": accs[majority_index(len(accs))],
        "phase": decider.phase,
        "step_train_acc": -1 if decider.step_train is None else int(decider.step_train),
        "step_val_acc": -1 if decider.step_val is None else int(decider.step_val),
        "trial_key": trial_key(configs),
        **{k: vote[k] for k in SEED_ATTRS},
    }
    for name, value in zip(objective, vote["values"], strict=True):
        out[name] = value
    return out


def trial_key(configs: list) -> str:
    """A search trial's identity: its configuration's key, or with several seeds one key over all of them."""
    if len(configs) == 1:
        return configs[0].key()
    return hashlib.sha256("+".join(c.key() for c in configs).encode()).hexdigest()[:16]
