"""`grokray search`: the search driver. Optuna's sampler inside Ray Tune, one configuration per trial (trained
at each of the spec's seeds, as one pack), a persistent study.

The study lives in Optuna storage (search.study: a JournalStorage file beside the Ray Tune results, or an RDB URL),
so it outlives any one run: `--resume` loads it, trials it already holds keep their values, and the sampler sees
them. A suggestion whose configuration the study already evaluated is answered from the study (told with the
stored values and re-asked), never trained again. Each trial is a pack (its seeds) for the shared `train_pack`, so
checkpoints, retries, the outage spool and the MLflow child-run layout are every driver's; each report carries
val/acc (for ASHA) and the objective (for the study's intermediate values).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState
from ray import tune
from ray.tune.search import ConcurrencyLimiter, Searcher

from ..errors import LaunchFinished, SpecError
from ..plan.expand import check_budget, check_fits, run_name
from ..plan.wire import compact_pack
from ..search.artifacts import log_parent_results
from ..search.config import SearchConfig, parse_search, trial_config, trial_configs
from ..search.objective import SEED_ATTRS, trial_key
from ..search.study import (
    LAUNCH_ATTR,
    LINK_FILE,
    MEMBER_KEYS_ATTR,
    PARENT_RUN_ATTR,
    RUN_ID_ATTR,
    TRACKING_URI_ATTR,
    best_trials,
    counted,
    directions,
    distributions,
    journal_path,
    link_trial_runs,
    make_sampler,
    open_storage,
    open_study,
    recover_interrupted,
    storage_at,
)
from ..spec import Spec
from ..tracking.client import is_transient
from ..tracking.parent import ParentRun
from ..tracking.schema import (
    CONFIRM_PENDING,
    CONFIRM_TAG,
    PHASE_TAG,
    SEARCH_OBJECTIVE_TAG,
    SEARCH_PRUNED_TAG,
    SEARCH_SAMPLER_TAG,
    SEARCH_STORAGE_TAG,
    SEARCH_STUDY_TAG,
    SEARCH_TRIAL_TAG,
    TRIAL_KEY_TAG,
)
from ..tracking.store import Store
from ..tracking.uri import resolve_tracking_uri
from .cluster import check_gpu_request, resolve_storage
from .complete import stored_spec
from .confirm import confirmation_pending, run_confirmation
from .launch import Launch
from .options import LaunchOptions, LaunchSummary

MAX_REASKS = 50  # repeats answered in a row before the space counts as spent and the search stops


@dataclass
class SearchSummary(LaunchSummary):
    study_name: str = ""
    storage: str = ""  # the journal file path, or the RDB URL
    journal_path: str | None = None
    trials: int = 0  # trials in the study now (all states)
    completed: int = 0
    new_trials: int = 0  # Tune trials run by this invocation
    directions: list[str] = field(default_factory=list)
    best: list[dict] = field(default_factory=list)  # [{number, params, values, phase}] (one; or the Pareto front)
    artifacts: list[str] = field(default_factory=list)
    recovered: tuple[int, int] = (0, 0)  # interrupted trials (answered from their finished MLflow run, run again)
    seeds: int = 1  # runs per trial: the spec's seeds, each trial a pack of them
    confirmation: dict | None = None  # search.confirm's stage: {parent_run_id, settings, best}


class StudySearcher(Searcher):
    """Ray Tune's public Searcher over grokray's own Optuna study, driven by Optuna's public ask/tell: each
    suggestion becomes a pack of its seeds, a configuration the study already evaluated is answered from the study
    instead of trained again, and each trial's key and phase are recorded as Optuna user attributes.

    Owning the study (instead of subclassing Ray's OptunaSearch and reading its private study) keeps one Study
    object for the whole launch, and what Tune checkpoints is only the Tune trial -> Optuna trial map: the study
    itself persists in its own storage, which is what `--resume` reopens."""

    def __init__(self, spec: Spec, cfg: SearchConfig, study: optuna.Study, target: int | None = None):
        super().__init__(metric=cfg.objective if cfg.multi else cfg.objective[0],
                         mode=["min"] * len(cfg.objective) if cfg.multi else "min")
        self.spec = spec
        self.cfg = cfg
        self.study = study
        self.space = distributions(cfg)
        self.target = target  # trials the study should hold; once reached (or the space is spent) suggest stops
        self.log_axes = sorted(k for k, d in cfg.space.items() if d.log)
        self.asked: dict[str, optuna.Trial] = {}  # Tune trial id -> the Optuna trial it trains
        self.reported: dict[str, int] = {}  # Tune trial id -> the last step reported to Optuna
        self.done: dict[str, tuple[int, list[float]]] = {}  # trial key -> (trial number, values)
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            key = t.user_attrs.get("trial_key")
            if key and key not in self.done:
                self.done[key] = (t.number, list(t.values))
        self.running: dict[str, str] = {}  # Tune trial id -> trial key
        self.answered_from_study = 0

    def full(self) -> bool:
        return self.target is not None and counted(self.study) + len(self.running) >= self.target

    def suggest(self, trial_id: str):
        for attempt in range(MAX_REASKS + 1):
            if self.full() or attempt == MAX_REASKS:  # the target is reached, or the space seems spent
                return Searcher.FINISHED
            ot_trial = self.study.ask(self.space)
            params = dict(ot_trial.params)
            configs = trial_configs(self.spec, params)
            key = trial_key(configs)
            seen = self.done.get(key)
            if seen is None and key in self.running.values():
                ot_trial.set_user_attr("duplicate_of_running", key)
                self.study.tell(ot_trial, state=TrialState.FAIL)
                continue
            if seen is not None:
                number, values = seen
                ot_trial.set_user_attr("trial_key", key)
                ot_trial.set_user_attr("duplicate_of", number)
                self.study.tell(ot_trial, values if self.cfg.multi else values[0])
                self.answered_from_study += 1
                continue
            break
        ot_trial.set_user_attr("trial_key", key)
        if len(configs) > 1:
            ot_trial.set_user_attr(MEMBER_KEYS_ATTR, [c.key() for c in configs])
        self.asked[trial_id] = ot_trial
        self.running[trial_id] = key
        members = []
        for config in configs:
            point = {"seed": config.seed, **params}
            members.append({"config": config.to_dict(), "key": config.key(), "point": point,
                            "name": f"#{ot_trial.number} " + run_name(point, list(self.cfg.space), self.log_axes),
                            "tags": {SEARCH_TRIAL_TAG: ot_trial.number, SEARCH_STUDY_TAG: self.cfg.study}})
        pack = compact_pack({"pack_id": f"search-{key}", "members": members})
        return {**params, "pack": pack, "optuna_trial": ot_trial.number}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """A one-objective trial's value so far, as Optuna's intermediate value at its training step (what the
        dashboard's intermediate-values plot draws); Optuna takes none for several objectives."""
        ot_trial, step = self.asked.get(trial_id), result.get("step")
        if ot_trial is None or self.cfg.multi or self.metric not in result or step is None:
            return
        if int(step) > self.reported.get(trial_id, -1):  # a retried trial's chunk repeats steps it reported
            ot_trial.report(float(result[self.metric]), int(step))
            self.reported[trial_id] = int(step)

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False):
        """Tell the study: the objective(s) of a trial that reported them, else failed (an error) or pruned."""
        key = self.running.pop(trial_id, None)
        self.reported.pop(trial_id, None)
        ot_trial = self.asked.pop(trial_id, None)
        if ot_trial is None:
            return
        if result:
            several = len(ot_trial.user_attrs.get(MEMBER_KEYS_ATTR, [])) > 1
            for attr in ("phase", "step_train_acc", "step_val_acc", "val/acc", "step", RUN_ID_ATTR,
                         *(SEED_ATTRS if several else ())):
                if attr in result:
                    ot_trial.set_user_attr(attr.replace("/", "_"), result[attr])
            if not result.get("pack_done"):
                ot_trial.set_user_attr("pruned_at_step", result.get("step"))
        names = self.cfg.objective if self.cfg.multi else [self.metric]
        values = [result.get(name) for name in names] if result else [None]
        if any(v is None or not math.isfinite(float(v)) for v in values):
            self.study.tell(ot_trial, state=TrialState.FAIL if error else TrialState.PRUNED)
            return
        values = [float(v) for v in values]
        self.study.tell(ot_trial, values if self.cfg.multi else values[0])
        if key:
            self.done.setdefault(key, (ot_trial.number, values))

    def save(self, checkpoint_path: str) -> None:
        """What Tune checkpoints: the Optuna trial number of each Tune trial in flight (the study is in storage)."""
        Path(checkpoint_path).write_text(json.dumps({"study": self.cfg.study, "running": {
            tid: t.number for tid, t in self.asked.items()}}))

    def restore(self, checkpoint_path: str) -> None:
        raise NotImplementedError("a search resumes from its Optuna study (grokray search --resume), which "
                                  "recovers the trials a dead driver left running; not from Tune's searcher state")


def finished_runs(children, threshold: float) -> dict[str, dict]:
    """Configuration key -> what search.objective.seed_vote needs of every child run that ended with a phase tag."""
    out = {}
    for run in children:
        tags, metrics = run.tags, run.metrics
        if run.status != "FINISHED" or PHASE_TAG not in tags or TRIAL_KEY_TAG not in tags:
            continue
        steps = [metrics.get(f"{name}_{threshold:g}") for name in ("step_train_acc", "step_val_acc")]
        out[tags[TRIAL_KEY_TAG]] = {"seed": run.params.get("seed", ""), "phase": tags[PHASE_TAG],
                                    "step_train": None if steps[0] is None else int(steps[0]),
                                    "step_val": None if steps[1] is None else int(steps[1]),
                                    "threshold": threshold, "ideal": metrics.get("ideal_val_acc")}
    return out


def _parent_tags(cfg: SearchConfig, label: str) -> dict:
    return {**({CONFIRM_TAG: CONFIRM_PENDING} if cfg.confirm else {}), SEARCH_STUDY_TAG: cfg.study,
            SEARCH_OBJECTIVE_TAG: cfg.objective, SEARCH_SAMPLER_TAG: cfg.sampler,
            SEARCH_STORAGE_TAG: label if "://" not in label else label.split("://")[0] + "://"}


def _tuner(launch: Launch, spec: Spec, cfg: SearchConfig, study, storage, to_run: int, target: int):
    log_axes = sorted(k for k, d in cfg.space.items() if d.log)
    sampled = optuna.load_study(study_name=cfg.study, storage=storage, sampler=make_sampler(cfg, len(study.trials)),
                                pruner=optuna.pruners.NopPruner())  # ASHA, in Tune, stops trials; Optuna never
    searcher = StudySearcher(spec, cfg, sampled, target=target)
    concurrent = min(cfg.max_concurrent, launch.options.max_concurrent or cfg.max_concurrent)
    budget = trial_config(spec, {}).budget_steps
    every, scheduler = launch.options.checkpoint_every, None
    if cfg.asha is not None:
        every = max(1, min(every, cfg.asha.grace))
        scheduler = tune.schedulers.ASHAScheduler(time_attr="step", metric="val/acc", mode="max", max_t=budget,
                                                  grace_period=cfg.asha.grace,
                                                  reduction_factor=cfg.asha.reduction_factor)
    ctx = launch.context(list(cfg.space), log_axes, checkpoint_every=every, objective=tuple(cfg.objective),
                         penalty=float(cfg.penalty))
    name = f"{cfg.study}-search_{time.strftime('%Y%m%d-%H%M%S')}"
    runs = to_run * len(spec.seeds)  # the progress line counts runs: a trial is a pack of its seeds
    return launch.tuner(name, ctx, search_alg=ConcurrencyLimiter(searcher, max_concurrent=concurrent),
                        scheduler=scheduler, num_samples=to_run,
                        total_configs=runs, total_work=float(runs * budget), checkpoints_kept=1)


def _interrupted_parent(launch: Launch, study):
    """The parent run of the study's last launch, if it is still there (by id, or by launch key when the server
    was away as it opened)."""
    parent_id = study.user_attrs.get(PARENT_RUN_ATTR)
    run = launch.parent.active_run(parent_id) if parent_id else None
    if run is not None:
        return run
    key = study.user_attrs.get(LAUNCH_ATTR)
    return launch.parent.find_launch(key) if key else None


def link_runs(parent, study) -> int:
    """Link the trials whose runs were made after they ended (an outage) to them, once the parent's children can
    be read; 0 while the server is away."""
    try:
        children = parent.children()
    except Exception as exc:  # noqa: BLE001
        if not is_transient(exc):
            raise
        return 0
    return link_trial_runs(study, {r.tags.get(TRIAL_KEY_TAG): r.run_id for r in children})


def link_after_replay(spool_dir: str, uri: str) -> int:
    """`grokray replay` of a search's spool: the trials whose runs the replay made are linked to them."""
    path = Path(spool_dir, LINK_FILE)
    if not path.is_file():
        return 0
    where = json.loads(path.read_text())
    study = optuna.load_study(study_name=where["study"], storage=storage_at(where["storage"]))
    parent = ParentRun(uri, where["experiment"], "")
    run = parent.find_launch(where["launch"])
    if run is None:
        return 0
    parent.attach(run)
    linked = link_runs(parent, study)
    store = Store(uri)  # the study's report, which the close left to the replay while the store was away
    parent.end_unfinished_children(SEARCH_PRUNED_TAG)
    log_parent_results(store, run.run_id, study, parse_search(stored_spec(store, run.run_id)))
    path.unlink()
    return linked


def _finish_study(launch: Launch, study, cfg: SearchConfig) -> list[str]:
    """Children ASHA stopped are tagged pruned and ended; the study's report goes on the parent. Skipped, with
    the rest of the close reporting what is undelivered, while the tracking server is away."""
    try:
        launch.parent.end_unfinished_children(SEARCH_PRUNED_TAG)
        return log_parent_results(Store(launch.parent.uri), launch.parent.run_id, study, cfg)
    except Exception as exc:  # noqa: BLE001
        if not is_transient(exc):
            raise
        return []


def run_search(spec: Spec, options: LaunchOptions | None = None, *, n_trials: int | None = None) -> SearchSummary:
    """Run (or --resume) the search of `spec`; the spec and its search block are validated before anything starts.
    n_trials: trials the study should hold when this run ends (default: search.n_trials)."""
    options = options or LaunchOptions()
    options.validate()
    cfg = parse_search(spec)
    target = n_trials if n_trials is not None else cfg.n_trials
    if target < 1:
        raise SpecError("--n-trials", f"got {target}; must be >= 1")
    start = trial_configs(spec, {})
    check_budget(target * sum(c.budget_steps for c in start))  # the start point's, once per trial
    check_fits(spec, start)
    check_gpu_request(spec, options)  # before the study is created, as every check that can refuse the launch
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    results_dir = resolve_storage(options.storage)
    storage, label = open_storage(cfg, results_dir)
    study = open_study(spec, cfg, storage, label, options.resume)
    uri = resolve_tracking_uri(options.tracking_uri)
    finished = _finished_parent(study, uri) if options.resume and counted(study) >= target else None
    if finished is not None:  # nothing more to train: its record stays as it is; a confirmation it owes runs
        if not (cfg.confirm and confirmation_pending(finished.tags)):
            raise LaunchFinished(f"grokray: the search {cfg.study!r} finished ({counted(study)} trials, parent run "
                                 f"{finished.run_id}): --resume has nothing to continue and changed nothing; raise "
                                 "its --n-trials, or name a new study with -s search.study=NAME", finished.run_id)
        stage, confirmation = run_confirmation(run_search, spec, cfg, storage, options, finished.run_id, uri)
        base = vars(stage) if stage is not None else {
            "kind": "search", "tracking_uri": uri, "experiment_path": "",
            "configurations": 0, "packs": 0, "phase_counts": {}, "errored_trials": 0, "interrupted": False,
            "wall_s": 0.0}
        return SearchSummary(**{**base, "name": spec.name, "experiment_id": finished.experiment_id,
                                "parent_run_id": finished.run_id, "study_name": cfg.study, "storage": label,
                                "trials": len(study.trials), "completed": counted(study), "new_trials": 0,
                                "directions": directions(cfg), "best": best_trials(study, cfg),
                                "seeds": len(spec.seeds), "confirmation": confirmation})
    with Launch(spec, options, kind="search", default_report_s=0.0) as launch:
        parent = _interrupted_parent(launch, study) if options.resume else None
        if parent is not None:
            launch.parent.resume(parent.run_id)
            threshold = trial_config(spec, {}).phases.threshold
            recovered = recover_interrupted(study, finished_runs(launch.parent.children(), threshold), cfg)
        else:  # no MLflow record to answer from: every interrupted trial runs again
            recovered = recover_interrupted(study, {}, cfg) if options.resume else (0, 0)
            launch.open_parent(f"{cfg.study} search", list(cfg.space), sorted(k for k, d in cfg.space.items()
                                                                             if d.log), _parent_tags(cfg, label))
            study.set_user_attr(PARENT_RUN_ATTR, launch.parent.run_id)  # "" while the server is away
            study.set_user_attr(LAUNCH_ATTR, launch.parent.launch_key)
            study.set_user_attr(TRACKING_URI_ATTR, launch.uri)
        to_run = max(0, target - counted(study))
        new_trials = len(launch.fit(_tuner(launch, spec, cfg, study, storage, to_run, target)).results) if to_run \
            else 0
        study = optuna.load_study(study_name=cfg.study, storage=storage)
        artifacts = _finish_study(launch, study, cfg)
        summary = launch.close(configurations=counted(study), interrupted=False)
        link_runs(launch.parent, study)
        if summary.undelivered_dir:  # `grokray replay` links the trials whose runs it makes
            Path(summary.undelivered_dir, LINK_FILE).write_text(json.dumps({
                "storage": label, "study": cfg.study, "experiment": spec.name, "launch": launch.parent.launch_key}))
    out = SearchSummary(**vars(summary), study_name=cfg.study, storage=label, journal_path=journal_path(cfg,
                        results_dir), trials=len(study.trials), completed=counted(study), new_trials=new_trials,
                        directions=directions(cfg), best=best_trials(study, cfg), artifacts=artifacts,
                        recovered=recovered, seeds=len(spec.seeds))
    if cfg.confirm and out.parent_run_id and out.status == "FINISHED" and not out.undelivered_dir:
        _, out.confirmation = run_confirmation(run_search, spec, cfg, storage, options, out.parent_run_id,
                                              out.tracking_uri)
    return out


def _finished_parent(study, uri: str):
    """The study's last parent run, if it closed as finished."""
    parent_id = study.user_attrs.get(PARENT_RUN_ATTR)
    if not parent_id:
        return None
    try:
        run = Store(uri).run(parent_id)
    except Exception:  # noqa: BLE001 - gone, or in another store: the launch finds what it can, as before
        return None
    return run if run.status == "FINISHED" else None
