"""`grokray search`: Optuna's sampler inside Ray Tune, one configuration per trial, a persistent study.

The study lives in Optuna storage (default: a JournalStorage file beside the Ray Tune results; or an RDB URL),
so it outlives any one run: `--resume` loads it, trials it already holds keep their values, and the sampler
sees them. A suggestion whose configuration the study already evaluated is answered from the study (told
with the stored values and re-asked), never trained again. Each trial is a pack of one for the sweep's
`train_pack`, so checkpoints, retries and the MLflow child-run layout are the sweep's own; a report hook adds
val/acc (for ASHA) and the objective (for OptunaSearch) to every Tune report.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState
from ray import tune
from ray.tune.search import ConcurrencyLimiter, Searcher
from ray.tune.search.optuna import OptunaSearch

from ..errors import SpecError
from ..spec import Spec
from ..sweep.expand import run_name
from ..sweep.runner import check_cluster_gpus, check_gpu_request, resolve_storage, start_ray
from ..sweep.trainable import train_pack
from .config import SearchConfig, parse_search, start_point, trial_config
from .objective import objective_values

REPORT_HOOK = "grokray.search.objective:report_metrics"
MAX_REASKS = 50  # repeats answered in a row before the space counts as spent and the search stops


@dataclass
class SearchOptions:
    resume: bool = False
    n_trials: int | None = None  # trials the study should hold when this run ends (default: search.n_trials)
    address: str | None = None
    tracking_uri: str | None = None
    storage: str | None = None  # Ray Tune results directory; the journal file defaults to lie in it
    checkpoint_every: int = 1000
    min_report_s: float = 0.0  # every chunk is reported: ASHA and Optuna see val/acc at each checkpoint
    num_cpus: int | None = None
    max_failures: int = 1
    parent_tags: dict[str, str] = field(default_factory=dict)  # extra tags on the parent run (e.g. the atlas's)


@dataclass
class SearchSummary:
    study_name: str
    storage: str  # the journal file path, or the RDB URL
    journal_path: str | None
    trials: int  # trials in the study now (all states)
    completed: int
    new_trials: int  # Tune trials run by this invocation
    directions: list[str]
    best: list[dict]  # [{number, params, values}] (one; or the Pareto front)
    parent_run_id: str
    experiment_id: str
    tracking_uri: str
    experiment_path: str
    wall_s: float
    artifacts: list[str] = field(default_factory=list)
    recovered: tuple[int, int] = (0, 0)  # interrupted trials (answered from their finished MLflow run, run again)


# -- Optuna pieces ---------------------------------------------------------------------------------------------
def distributions(cfg: SearchConfig) -> dict:
    out = {}
    for key, d in cfg.space.items():
        if d.kind == "float":
            out[key] = FloatDistribution(d.low, d.high, log=d.log)
        elif d.kind == "int":
            out[key] = IntDistribution(d.low, d.high, log=d.log)
        else:
            out[key] = CategoricalDistribution(list(d.choices))
    return out


def journal_path(spec: Spec, cfg: SearchConfig, results_dir: str | None) -> str | None:
    """The journal file (None for an RDB URL): search.storage, else <results>/<study>.optuna.journal."""
    if cfg.storage and "://" in cfg.storage:
        return None
    if cfg.storage:
        return str(Path(cfg.storage).resolve())
    base = resolve_storage(results_dir)
    if "://" in base:
        raise SpecError("search.storage", f"Ray Tune results go to {base}; give the study a local journal file "
                                          "or an RDB URL (search.storage)")
    return str(Path(base) / f"{cfg.study}.optuna.journal")


def open_storage(spec: Spec, cfg: SearchConfig, results_dir: str | None):
    """(Optuna storage, its label): a JournalStorage over a file (what optuna-dashboard opens) or an RDB URL."""
    path = journal_path(spec, cfg, results_dir)
    if path is None:
        return optuna.storages.RDBStorage(cfg.storage), cfg.storage
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(path)), path


def make_sampler(cfg: SearchConfig, offset: int = 0):
    """Seeded TPE (constant_liar while trials run concurrently) or random. `offset` (the trials already in a
    resumed study) shifts the seed, so a resumed random sampler does not replay the points it drew before."""
    seed = cfg.seed + offset
    if cfg.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    startup = min(10, max(3, cfg.n_trials // 4))  # Optuna's 10 random trials would be most of a small budget
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=cfg.max_concurrent > 1,
                                      multivariate=True)


def directions(cfg: SearchConfig) -> list[str]:
    return ["minimize"] * len(cfg.objective)


def study_fingerprint(spec: Spec, cfg: SearchConfig) -> dict:
    """What a resumed study must agree on: the start configuration, the space and the objectives."""
    space = {k: [d.kind, d.low, d.high, d.log, list(d.choices)] for k, d in cfg.space.items()}
    return {"start_key": trial_config(spec, {}).key(), "space": space, "objective": cfg.objective,
            "penalty": cfg.penalty}


class GrokraySearch(OptunaSearch):
    """OptunaSearch that turns each suggestion into a one-member pack, answers repeated configurations from the
    study instead of training them again, and records each trial's key and phase as Optuna user attributes."""

    def __init__(self, spec: Spec, cfg: SearchConfig, target: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.spec = spec
        self.cfg = cfg
        self.target = target  # trials the study should hold; once reached (or the space is spent) suggest stops
        self.log_axes = sorted(k for k, d in cfg.space.items() if d.log)
        self._done: dict[str, tuple[int, list[float]]] = {}  # trial key -> (trial number, values)
        for t in self._ot_study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            key = t.user_attrs.get("trial_key")
            if key and key not in self._done:
                self._done[key] = (t.number, list(t.values))
        self._running: dict[str, str] = {}  # Tune trial id -> trial key
        self.answered_from_study = 0

    def _full(self) -> bool:
        return self.target is not None and counted(self._ot_study) + len(self._running) >= self.target

    def suggest(self, trial_id: str):
        for attempt in range(MAX_REASKS + 1):
            if self._full() or attempt == MAX_REASKS:  # the target is reached, or the space seems spent
                return Searcher.FINISHED
            params = super().suggest(trial_id)
            config = trial_config(self.spec, params)
            key = config.key()
            ot_trial = self._ot_trials[trial_id]
            seen = self._done.get(key)
            if seen is None and key in self._running.values():
                ot_trial.set_user_attr("duplicate_of_running", key)
                self._ot_study.tell(ot_trial, state=TrialState.FAIL)
                del self._ot_trials[trial_id]
                continue
            if seen is not None:
                number, values = seen
                ot_trial.set_user_attr("trial_key", key)
                ot_trial.set_user_attr("duplicate_of", number)
                self._ot_study.tell(ot_trial, values if self.cfg.multi else values[0])
                del self._ot_trials[trial_id]
                self.answered_from_study += 1
                continue
            break
        ot_trial.set_user_attr("trial_key", key)
        self._running[trial_id] = key
        point = {**{k: v for k, v in start_point(self.spec).items() if k == "seed"}, **params}
        name = f"#{ot_trial.number} " + run_name(point, list(self.cfg.space), self.log_axes)
        pack = {"pack_id": f"search-{key}",
                "members": [{"config": config.to_dict(), "key": key, "name": name, "point": point}]}
        return {**params, "pack": pack, "optuna_trial": ot_trial.number}

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False):
        key = self._running.pop(trial_id, None)
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is not None and result:
            for attr in ("phase", "step_train_acc", "step_val_acc", "val/acc", "step"):
                if attr in result:
                    ot_trial.set_user_attr(attr.replace("/", "_"), result[attr])
            if not result.get("pack_done"):
                ot_trial.set_user_attr("pruned_at_step", result.get("step"))
        super().on_trial_complete(trial_id, result=result, error=error)
        if ot_trial is not None and key:
            frozen = self._ot_study._storage.get_trial(ot_trial._trial_id)
            if frozen.state == TrialState.COMPLETE:
                self._done.setdefault(key, (frozen.number, list(frozen.values)))


def recover_interrupted(study, finished: dict[str, dict], cfg: SearchConfig) -> tuple[int, int]:
    """Trials a dead driver left RUNNING. One whose MLflow run had already finished (the driver died between
    the worker's last log and Optuna's tell) is told the values computed from that run, so it is never trained
    again; the others are marked failed and their configurations queued to run again.
    `finished` maps trial key -> {phase, step_train, step_val} of finished MLflow runs. Returns (told, queued)."""
    told = queued = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        run = finished.get(t.user_attrs.get("trial_key", ""))
        if run is not None:
            values = objective_values(cfg.objective, run["phase"], run["step_train"], run["step_val"], cfg.penalty)
            attrs = {"phase": run["phase"], "step_train_acc": _or_minus_one(run["step_train"]),
                     "step_val_acc": _or_minus_one(run["step_val"]), "recovered_from_mlflow": True}
            for attr, value in attrs.items():
                study._storage.set_trial_user_attr(t._trial_id, attr, value)
            study.tell(t.number, values if cfg.multi else values[0])
            told += 1
        else:
            study.tell(t.number, state=TrialState.FAIL)
            study.enqueue_trial(t.params, user_attrs={"retry_of": t.number}, skip_if_exists=False)
            queued += 1
    return told, queued


def finished_runs(tracker, threshold: float) -> dict[str, dict]:
    """Trial key -> phase and crossing steps of every child run that ended with a phase tag."""
    from ..tracking.mlflow_runs import PHASE_TAG

    out = {}
    for run in tracker.children():
        tags, metrics = run.data.tags, run.data.metrics
        if run.info.status != "FINISHED" or PHASE_TAG not in tags or "grokray.trial_key" not in tags:
            continue
        steps = [metrics.get(f"{name}_{threshold:g}") for name in ("step_train_acc", "step_val_acc")]
        out[tags["grokray.trial_key"]] = {"phase": tags[PHASE_TAG], "step_train": _int(steps[0]),
                                          "step_val": _int(steps[1])}
    return out


def _int(value):
    return None if value is None else int(value)


def _or_minus_one(value):
    return -1 if value is None else value


# -- the run -------------------------------------------------------------------------------------------------
def counted(study) -> int:
    """Trials that ran or were answered from the study (complete or pruned)."""
    return sum(1 for t in study.get_trials(deepcopy=False) if t.state in (TrialState.COMPLETE, TrialState.PRUNED))


def run_search(spec: Spec, options: SearchOptions | None = None) -> SearchSummary:
    """Run (or --resume) the search of `spec`; the spec and its search block are validated before anything starts."""
    import ray

    from ..tracking import SweepTracker, resolve_tracking_uri
    from .report import log_parent_results

    options = options or SearchOptions()
    cfg = parse_search(spec)
    check_gpu_request(spec, options)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    target = options.n_trials if options.n_trials is not None else cfg.n_trials
    if target < 1:
        raise SpecError("--n-trials", f"got {target}; must be >= 1")
    t_start = time.time()
    storage, label = open_storage(spec, cfg, options.storage)
    path = journal_path(spec, cfg, options.storage)
    fingerprint = study_fingerprint(spec, cfg)
    existing = {s.study_name: s for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    if cfg.study in existing and not options.resume:
        n = existing[cfg.study].n_trials
        raise SpecError("--resume", f"study {cfg.study!r} already exists in {label} with {n} trials; pass --resume "
                                    "to continue it, or name a new one with -s search.study=NAME")
    if cfg.study not in existing and options.resume:
        raise SpecError("--resume", f"no study {cfg.study!r} in {label}; run without --resume to start it")
    if options.resume:
        study = optuna.load_study(study_name=cfg.study, storage=storage)
        stored = study.user_attrs.get("grokray.fingerprint")
        if stored is not None and stored != fingerprint:
            changed = sorted(k for k in fingerprint if stored.get(k) != fingerprint[k])
            raise SpecError("--resume", f"study {cfg.study!r} was made from a different {', '.join(changed)}; "
                                        "start a new study with -s search.study=NAME")
        if list(d.name.lower() for d in study.directions) != directions(cfg):
            raise SpecError("search.objective", f"study {cfg.study!r} has {len(study.directions)} objectives")
    else:
        study = optuna.create_study(study_name=cfg.study, storage=storage, directions=directions(cfg))
        study.set_user_attr("grokray.fingerprint", fingerprint)
        study.set_user_attr("grokray.objective", cfg.objective)
        study.set_user_attr("grokray.spec_hash", spec.hash())

    uri = resolve_tracking_uri(options.tracking_uri)
    tracker = SweepTracker(uri, spec.name)
    parent_id = study.user_attrs.get("grokray.mlflow_parent_run_id") if options.resume else None
    if parent_id and _run_exists(tracker.client, parent_id):
        tracker.reopen(parent_id)
        recovered = recover_interrupted(study, finished_runs(tracker, trial_config(spec, {}).phases.threshold), cfg)
    else:
        # no MLflow record to answer from: every interrupted trial runs again
        recovered = recover_interrupted(study, {}, cfg) if options.resume else (0, 0)
        parent_id = _start_parent(tracker, spec, cfg, label, options.parent_tags)
        study.set_user_attr("grokray.mlflow_parent_run_id", parent_id)
        study.set_user_attr("grokray.tracking_uri", uri)

    to_run = max(0, target - counted(study))
    results_dir = resolve_storage(options.storage)
    name = f"{cfg.study}-search_{time.strftime('%Y%m%d-%H%M%S')}"
    experiment_path = f"{results_dir.rstrip('/')}/{name}"
    new_trials = 0
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    started_ray = start_ray(options) if to_run else False
    try:
        if to_run:
            check_cluster_gpus(spec)
            new_trials = _fit(spec, cfg, options, study, storage, tracker, to_run, target, name, results_dir)
        _close_pruned(tracker)
        study = optuna.load_study(study_name=cfg.study, storage=storage)
        artifacts = log_parent_results(tracker.client, parent_id, study, cfg)
        tracker.finish("FINISHED")
    finally:
        if started_ray:
            ray.shutdown()
    best = _best(study, cfg)
    return SearchSummary(
        study_name=cfg.study, storage=label, journal_path=path, trials=len(study.trials),
        completed=counted(study), new_trials=new_trials if to_run else 0,
        directions=directions(cfg), best=best, parent_run_id=parent_id, experiment_id=tracker.experiment_id,
        tracking_uri=uri, experiment_path=experiment_path if to_run else "", wall_s=time.time() - t_start,
        artifacts=artifacts, recovered=recovered,
    )


def _run_exists(client, run_id: str) -> bool:
    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except Exception:  # noqa: BLE001 - deleted or another store
        return False


def _start_parent(tracker, spec: Spec, cfg: SearchConfig, label: str, extra_tags: dict | None = None) -> str:
    from ..tracking import clean, code_version
    from ..tracking.mlflow_runs import ROLE_TAG

    tags = {
        **(extra_tags or {}),
        ROLE_TAG: "parent",
        "grokray.kind": "search",
        "grokray.spec_hash": spec.hash(),
        "grokray.code_version": code_version(),
        "grokray.swept": list(cfg.space),
        "grokray.log_axes": sorted(k for k, d in cfg.space.items() if d.log),
        "grokray.search.study": cfg.study,
        "grokray.search.storage": label if "://" not in label else label.split("://")[0] + "://",
        "grokray.search.objective": cfg.objective,
        "grokray.search.sampler": cfg.sampler,
    }
    run = tracker.client.create_run(tracker.experiment_id, run_name=f"{cfg.study} search", tags=clean(tags))
    tracker.parent_run_id = run.info.run_id
    tracker.client.log_text(run.info.run_id, yaml.safe_dump(spec.raw, sort_keys=False), "spec.resolved.yaml")
    return run.info.run_id


def _fit(spec, cfg, options, study, storage, tracker, to_run, target, name, results_dir) -> int:
    from ..tracking import code_version

    offset = len(study.trials)
    metric = cfg.objective if cfg.multi else cfg.objective[0]
    mode = ["min"] * len(cfg.objective) if cfg.multi else "min"
    searcher = GrokraySearch(spec, cfg, target=target, space=distributions(cfg), metric=metric, mode=mode,
                             sampler=make_sampler(cfg, offset), study_name=cfg.study, storage=storage)
    search_alg = ConcurrencyLimiter(searcher, max_concurrent=cfg.max_concurrent)
    start = trial_config(spec, {})
    budget = start.phases.budget
    every = max(1, options.checkpoint_every)
    scheduler = None
    if cfg.asha is not None:
        every = max(1, min(every, cfg.asha.grace))
        scheduler = tune.schedulers.ASHAScheduler(time_attr="step", metric="val/acc", mode="max", max_t=budget,
                                                  grace_period=cfg.asha.grace,
                                                  reduction_factor=cfg.asha.reduction_factor)
    ctx = {
        "tracking_uri": tracker.uri,
        "experiment_id": tracker.experiment_id,
        "parent_run_id": tracker.parent_run_id,
        "spec_hash": spec.hash(),
        "code_version": code_version(),
        "swept": list(cfg.space),
        "log_axes": sorted(k for k, d in cfg.space.items() if d.log),
        "checkpoint_every": every,
        "min_report_s": options.min_report_s,
        "cpu": spec.resources.cpu,
        "gpu": spec.resources.gpu,
        "final_state": spec.artifacts.final_state,
        "report_hook": REPORT_HOOK,
        "search": {"objective": cfg.objective, "penalty": cfg.penalty},
    }
    trainable = tune.with_resources(train_pack, {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu})
    tuner = tune.Tuner(
        trainable,
        param_space={"grokray": ctx},
        tune_config=tune.TuneConfig(
            search_alg=search_alg, scheduler=scheduler, num_samples=to_run,
            trial_name_creator=lambda t: f"optuna-{t.config.get('optuna_trial', t.trial_id)}",
            trial_dirname_creator=lambda t: f"optuna-{t.config.get('optuna_trial', 'x')}_{t.trial_id}",
        ),
        run_config=tune.RunConfig(
            name=name, storage_path=results_dir, verbose=0,
            failure_config=tune.FailureConfig(max_failures=options.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
        ),
    )
    results = tuner.fit()
    return len(results)


def _close_pruned(tracker) -> None:
    """Child runs that ASHA stopped (no phase tag): tagged pruned and ended, so none stays RUNNING."""
    from ..tracking.mlflow_runs import PHASE_TAG

    for run in tracker.children():
        if run.info.status == "RUNNING" and PHASE_TAG not in run.data.tags:
            tracker.client.set_tag(run.info.run_id, "grokray.search.pruned", "true")
            tracker.client.set_terminated(run.info.run_id, "KILLED")


def _best(study, cfg: SearchConfig) -> list[dict]:
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    if not done:
        return []
    trials = study.best_trials if cfg.multi else [study.best_trial]
    return [{"number": t.number, "params": dict(t.params), "values": list(t.values),
             "phase": t.user_attrs.get("phase")} for t in trials if all(math.isfinite(v) for v in t.values)]
