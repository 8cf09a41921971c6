"""The Optuna study of a search: its storage and fingerprint, opening or resuming it, recovering the trials a
killed driver left running, and what the study records of its launch. Optuna only; no Ray, no MLflow (finished
runs are handed in as plain data; tag names come from tracking/schema). The sampler is search/sampler.py.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from ..errors import SpecError
from ..objectives import GENERALIZED, SEED_ATTRS, seed_vote
from ..phases import crossing_metrics
from ..spec.build import Spec
from ..tracking.records import RunStatus
from ..tracking.schema import (
    CONFIRM_PENDING,
    CONFIRM_TAG,
    PHASE_TAG,
    SEARCH_OBJECTIVE_TAG,
    SEARCH_SAMPLER_TAG,
    SEARCH_STORAGE_TAG,
    SEARCH_STUDY_TAG,
    TRIAL_KEY_TAG,
)
from .config import SearchConfig, trial_config

FINGERPRINT_ATTR = "grokray.fingerprint"
PARENT_RUN_ATTR = "grokray.mlflow_parent_run_id"
TRACKING_URI_ATTR = "grokray.tracking_uri"
OBJECTIVE_ATTR = "grokray.objective"
SPEC_HASH_ATTR = "grokray.spec_hash"
RUN_ID_ATTR = "mlflow_run_id"  # a trial's MLflow child runs, comma-separated (each carries the trial number back)
MEMBER_KEYS_ATTR = "member_keys"  # with several seeds: the key of each seed's configuration, in seed order
LAUNCH_ATTR = "grokray.launch"  # the launch key of the study's parent run (its id may come later: an outage)
RUN_LINKS_ATTR = "grokray.mlflow_run_ids"  # trial number -> its runs, for runs made after the trial ended
LINK_FILE = "search.json"  # in an undelivered spool: which study `grokray replay` links the runs it makes to


def trial_run_ids(study_attrs: dict, trial) -> str:
    """A trial's MLflow runs, comma-separated in seed order: its own attribute, or, where a run was made after
    the trial ended (a tracking outage; Optuna keeps a finished trial's attributes as they were), the study's
    link written when the run was made (link_trial_runs)."""
    own = trial.user_attrs.get(RUN_ID_ATTR, "")
    if own and all(own.split(",")):
        return own
    return (study_attrs.get(RUN_LINKS_ATTR) or {}).get(str(trial.number), own)


def link_trial_runs(study, runs_by_key: dict[str, str]) -> int:
    """Write the study's links for trials whose runs were made after they ended. `runs_by_key`: trial key ->
    run id of the search's child runs. Returns the trials linked."""
    links = dict(study.user_attrs.get(RUN_LINKS_ATTR) or {})
    linked = 0
    for t in study.get_trials(deepcopy=False):
        keys = t.user_attrs.get(MEMBER_KEYS_ATTR) or ([t.user_attrs["trial_key"]] if "trial_key" in t.user_attrs
                                                      else [])
        if not keys or "duplicate_of" in t.user_attrs or all(trial_run_ids(study.user_attrs, t).split(",")):
            continue
        ids = [runs_by_key.get(k, "") for k in keys]
        if all(ids):
            links[str(t.number)] = ",".join(ids)
            linked += 1
    if linked:
        study.set_user_attr(RUN_LINKS_ATTR, links)
    return linked


def journal_path(cfg: SearchConfig, results_dir: str) -> str | None:
    """The journal file (None for an RDB URL): search.storage, else <results>/<study>.optuna.journal.
    `results_dir`: the launch's resolved Ray Tune results directory."""
    if cfg.storage and "://" in cfg.storage:
        return None
    if cfg.storage:
        return str(Path(cfg.storage).resolve())
    base = results_dir
    if "://" in base:
        raise SpecError("search.storage", f"Ray Tune results go to {base}; give the study a local journal file "
                                          "or an RDB URL (search.storage)")
    return str(Path(base) / f"{cfg.study}.optuna.journal")


def open_storage(cfg: SearchConfig, results_dir: str):
    """(Optuna storage, its label): a JournalStorage over a file (what optuna-dashboard opens) or an RDB URL."""
    path = journal_path(cfg, results_dir)
    if path is None:
        return optuna.storages.RDBStorage(cfg.storage), cfg.storage
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(path)), path


def storage_at(label: str):
    """The storage open_storage labelled `label` (a journal file's path, or an RDB URL)."""
    if "://" in label:
        return optuna.storages.RDBStorage(label)
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(label))


def directions(cfg: SearchConfig) -> list[str]:
    return ["minimize"] * len(cfg.objective)


def study_fingerprint(spec: Spec, cfg: SearchConfig) -> dict:
    """What a resumed study must agree on: the start configuration, the space and the objectives."""
    space = {k: [d.kind, d.low, d.high, d.log, list(d.choices)] for k, d in cfg.space.items()}
    seeds = {"seeds": list(spec.seeds)} if len(spec.seeds) > 1 else {}  # a one-seed study's fingerprint is as before
    enqueued = {"enqueue": cfg.enqueue} if cfg.enqueue else {}  # likewise a study that enqueues nothing
    return {"start_key": trial_config(spec, {}).key(), "space": space, "objective": cfg.objective,
            "penalty": cfg.penalty, **seeds, **enqueued}


def set_running_trial_attr(study, trial, key: str, value) -> None:
    """A user attribute on a RUNNING trial found by number. Optuna 5 has no public way to do this (only the Trial
    that `ask` returned can, and the dead driver held it), so this is grokray's one use of Optuna's private
    storage handle; tests/test_search_objective.py fails by name if Optuna changes it."""
    study._storage.set_trial_user_attr(trial._trial_id, key, value)


def recover_interrupted(study, finished: dict[str, dict], cfg: SearchConfig) -> tuple[int, int]:
    """Trials a dead driver left RUNNING. One whose MLflow run had already finished (the driver died between the
    worker's last log and Optuna's tell) is told the values computed from that run, so it is never trained again;
    the others are marked failed and their configurations queued to run again. `finished` maps configuration key
    -> {seed, phase, run_id, step_train, step_val, threshold, ideal} of finished runs; a trial over several seeds is
    answered only when every seed's run finished. Returns (told, queued)."""
    told = queued = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        keys = t.user_attrs.get(MEMBER_KEYS_ATTR) or [t.user_attrs.get("trial_key", "")]
        runs = [finished.get(key) for key in keys]
        if all(run is not None for run in runs):
            vote = seed_vote(cfg.objective, cfg.penalty, runs)
            values, run = vote["values"], runs[vote["decider"]]
            attrs = {"phase": run["phase"], "step_train_acc": _or_minus_one(run["step_train"]),
                     "step_val_acc": _or_minus_one(run["step_val"]), "recovered_from_mlflow": True,
                     RUN_ID_ATTR: ",".join(r["run_id"] for r in runs),
                     **({k: vote[k] for k in SEED_ATTRS} if len(runs) > 1 else {})}
            for attr, value in attrs.items():
                set_running_trial_attr(study, t, attr, value)
            study.tell(t.number, values if cfg.multi else values[0])
            told += 1
        else:
            study.tell(t.number, state=TrialState.FAIL)
            study.enqueue_trial(t.params, user_attrs={"retry_of": t.number}, skip_if_exists=False)
            queued += 1
    return told, queued


def _or_minus_one(value):
    return -1 if value is None else value


def resume_line(spec: Spec, cfg: SearchConfig, results_dir: str) -> str:
    """What `--resume` would continue, for a dry-run: the study and its trials; or the SpecError the launch would
    raise (no such study, or one made from another space). Reads only: a missing journal is not created."""
    path = journal_path(cfg, results_dir)
    if path is not None and not Path(path).is_file():
        raise SpecError("--resume", f"no study {cfg.study!r} in {path}; run without --resume to start it")
    storage, label = open_storage(cfg, results_dir)
    study = open_study(spec, cfg, storage, label, resume=True)
    return f"resumes:        study {cfg.study!r} in {label}, {counted(study)} trials done"


def counted(study) -> int:
    """Trials that ran or were answered from the study (complete or pruned)."""
    return sum(1 for t in study.get_trials(deepcopy=False) if t.state in (TrialState.COMPLETE, TrialState.PRUNED))


def generalized_best(study, cfg: SearchConfig) -> list:
    """The best trials among those that generalized (one; or the Pareto front of several objectives). A trial that
    never generalized scores the penalty, which is no result: [] when no trial generalized."""
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.values is not None and all(math.isfinite(v) for v in t.values)
            and t.user_attrs.get("phase") in GENERALIZED and max(t.values) < cfg.penalty]
    if not done:
        return []
    if not cfg.multi:
        return [min(done, key=lambda t: (t.values[0], t.number))]
    return [t for t in done if not any(all(a <= b for a, b in zip(o.values, t.values, strict=True))
                                       and o.values != t.values for o in done)]


def best_trials(study, cfg: SearchConfig) -> list[dict]:
    return [{"number": t.number, "params": dict(t.params), "values": list(t.values),
             "phase": t.user_attrs.get("phase"), "mlflow_run_id": trial_run_ids(study.user_attrs, t),
             **{k: t.user_attrs[k] for k in SEED_ATTRS if k in t.user_attrs}}
            for t in generalized_best(study, cfg)]


def open_study(spec: Spec, cfg: SearchConfig, storage, label: str, resume: bool):
    """Create the study, or with `resume` load it and check it was made from the same space and objectives."""
    fingerprint = study_fingerprint(spec, cfg)
    existing = _studies(storage)
    if cfg.study in existing and not resume:
        raise _exists(cfg, label, existing[cfg.study], fingerprint)
    if cfg.study not in existing and resume:
        raise SpecError("--resume", f"no study {cfg.study!r} in {label}; run without --resume to start it")
    if not resume:
        study = optuna.create_study(study_name=cfg.study, storage=storage, directions=directions(cfg))
        with warnings.catch_warnings():  # experimental in Optuna 3.2-5: a notice nobody must act on
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(cfg.objective))  # the dashboard's axes say time_to_generalize, not Objective 0
        study.set_user_attr(FINGERPRINT_ATTR, fingerprint)
        study.set_user_attr(OBJECTIVE_ATTR, cfg.objective)
        study.set_user_attr(SPEC_HASH_ATTR, spec.hash())
        for values in cfg.enqueue:  # asked first, in order: a paper's published setting is trial 0 of its method
            study.enqueue_trial(values, user_attrs={"enqueued": True})
        return study
    study = optuna.load_study(study_name=cfg.study, storage=storage)
    if changed := _changed(study.user_attrs, fingerprint):
        raise SpecError("--resume", f"study {cfg.study!r} was made from a different {', '.join(changed)}; "
                                    f"start a new study with -s search.study={cfg.study}-2 (without --resume)")
    if [d.name.lower() for d in study.directions] != directions(cfg):
        raise SpecError("search.objective", f"study {cfg.study!r} has {len(study.directions)} objectives")
    return study


def _exists(cfg: SearchConfig, label: str, summary, fingerprint: dict) -> SpecError:
    """A new search's study is there already; the advice that works: --resume only for a study of this search."""
    changed = _changed(summary.user_attrs, fingerprint)
    advice = (f"it was made from a different {', '.join(changed)}, so name a new one: -s search.study={cfg.study}-2"
              if changed else "pass --resume to continue it, or name a new one with -s search.study=NAME")
    return SpecError("search.study", f"study {cfg.study!r} already exists in {label} with {summary.n_trials} "
                                     f"trials; {advice}")


def new_study_problem(spec: Spec, cfg: SearchConfig, results_dir: str) -> None:
    """What a new search (no --resume) would refuse, for a dry-run: its study already in its journal file. Reads
    only: a journal that is not there is not made (an RDB is the launch's to ask)."""
    path = journal_path(cfg, results_dir)
    if path is None or not Path(path).is_file():
        return
    storage, label = open_storage(cfg, results_dir)
    if (found := _studies(storage).get(cfg.study)) is not None:
        raise _exists(cfg, label, found, study_fingerprint(spec, cfg))


def _studies(storage) -> dict:
    """The storage's studies by name (their summaries: trial counts and user attributes)."""
    return {s.study_name: s for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}


def _changed(user_attrs: dict, fingerprint: dict) -> list[str]:
    """What a stored study was made from differently (start, space, objective, ...); empty: the same search."""
    stored = user_attrs.get(FINGERPRINT_ATTR)
    return [] if stored is None else sorted(k for k in fingerprint if stored.get(k) != fingerprint[k])


def attach_launch(study, parent_run_id: str, launch_key: str, tracking_uri: str) -> None:
    """Record on the study the launch that trains it: its parent run ("" while the server is away), the key the
    parent is found by until then, and the store."""
    study.set_user_attr(PARENT_RUN_ATTR, parent_run_id)
    study.set_user_attr(LAUNCH_ATTR, launch_key)
    study.set_user_attr(TRACKING_URI_ATTR, tracking_uri)


def launch_of(study) -> tuple[str, str]:
    """(parent run id, launch key) of the study's last launch; "" where it recorded none."""
    return study.user_attrs.get(PARENT_RUN_ATTR, "") or "", study.user_attrs.get(LAUNCH_ATTR, "") or ""


def finished_runs(children, threshold: float) -> dict[str, dict]:
    """Configuration key -> what objectives.seed_vote needs of every child run that ended with a phase tag."""
    out = {}
    for run in children:
        tags, metrics = run.tags, run.metrics
        if run.status != RunStatus.FINISHED or PHASE_TAG not in tags or TRIAL_KEY_TAG not in tags:
            continue
        steps = [metrics.get(name) for name in crossing_metrics(threshold)]
        out[tags[TRIAL_KEY_TAG]] = {"seed": run.params.get("seed", ""), "phase": tags[PHASE_TAG], "run_id": run.run_id,
                                    "step_train": None if steps[0] is None else int(steps[0]),
                                    "step_val": None if steps[1] is None else int(steps[1]),
                                    "threshold": threshold, "ideal": metrics.get("ideal_val_acc")}
    return out


def parent_tags(cfg: SearchConfig, label: str) -> dict:
    return {**({CONFIRM_TAG: CONFIRM_PENDING} if cfg.confirm else {}), SEARCH_STUDY_TAG: cfg.study,
            SEARCH_OBJECTIVE_TAG: cfg.objective, SEARCH_SAMPLER_TAG: cfg.sampler,
            SEARCH_STORAGE_TAG: label if "://" not in label else label.split("://")[0] + "://"}
