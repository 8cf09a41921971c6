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

import time
from dataclasses import dataclass, field

import optuna
from ray import tune
from ray.tune.search import ConcurrencyLimiter

from ...errors import LaunchFinished, SpecError
from ...plan.expand import check_budget, check_fits
from ...run.cluster import check_gpu_request, resolve_storage
from ...run.launch import Launch
from ...run.options import LaunchOptions, LaunchSummary
from ...spec.build import Spec
from ...tracking.records import RunStatus
from ...tracking.uri import resolve_tracking_uri
from ..config import SearchConfig, parse_search, trial_config, trial_configs
from ..sampler import make_sampler
from ..study import (
    attach_launch,
    best_trials,
    counted,
    directions,
    finished_runs,
    journal_path,
    launch_of,
    open_storage,
    open_study,
    parent_tags,
    recover_interrupted,
)
from .confirmation import confirmation_pending, run_confirmation
from .record import end_pruned, finished_parent, leave_link, link_runs, report_study
from .searcher import StudySearcher


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


def _tuner(launch: Launch, spec: Spec, cfg: SearchConfig, study, storage, to_run: int, target: int):
    log_axes = cfg.log_axes
    sampled = optuna.load_study(study_name=cfg.study, storage=storage, sampler=make_sampler(cfg, len(study.trials)),
                                pruner=optuna.pruners.NopPruner())  # ASHA, in Tune, stops trials; Optuna never
    searcher = StudySearcher(spec, cfg, sampled, target=target, run_of=launch.parent.run_of)
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
    return searcher, launch.tuner(name, ctx, search_alg=ConcurrencyLimiter(searcher, max_concurrent=concurrent),
                                  scheduler=scheduler, num_samples=to_run,
                                  total_configs=runs, total_work=float(runs * budget), checkpoints_kept=1)


def _interrupted_parent(launch: Launch, study):
    """The parent run of the study's last launch, if it is still there (by id, or by launch key when the server
    was away as it opened)."""
    parent_id, key = launch_of(study)
    run = launch.parent.active_run(parent_id) if parent_id else None
    if run is not None:
        return run
    return launch.parent.find_launch(key) if key else None


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
    finished = finished_parent(study, uri) if options.resume and counted(study) >= target else None
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
            launch.open_parent(f"{cfg.study} search", list(cfg.space), cfg.log_axes, parent_tags(cfg, label))
            attach_launch(study, launch.parent.run_id, launch.parent.launch_key, launch.uri)
        to_run = max(0, target - counted(study))
        new_trials, searcher = 0, None
        if to_run:
            searcher, tuner = _tuner(launch, spec, cfg, study, storage, to_run, target)
            new_trials = len(launch.fit(tuner).results)
            launch.deliver_held()  # the runs an outage held back, if the server is back: their trials told linked
            searcher.settle()
        held = len(searcher.held) if searcher else 0  # finished trials whose runs the close's delivery makes
        end_pruned(launch.parent)
        stopped = any(rnd.stopped for rnd in launch.rounds)  # ASHA's stops are the search's own: not these
        summary = launch.close(configurations=counted(study) + held, interrupted=stopped)
        if searcher is not None:
            searcher.release()  # told, each with its runs where the close made them
        study = optuna.load_study(study_name=cfg.study, storage=storage)
        artifacts = report_study(launch.parent, study, cfg)
        link_runs(launch.parent, study)
        if summary.undelivered_dir:  # `grokray replay` links the trials whose runs it makes
            leave_link(summary.undelivered_dir, label, cfg.study, spec.name, launch.parent.launch_key)
    out = SearchSummary(**vars(summary), study_name=cfg.study, storage=label, journal_path=journal_path(cfg,
                        results_dir), trials=len(study.trials), completed=counted(study), new_trials=new_trials,
                        directions=directions(cfg), best=best_trials(study, cfg), artifacts=artifacts,
                        recovered=recovered, seeds=len(spec.seeds))
    if cfg.confirm and out.parent_run_id and out.status == RunStatus.FINISHED and not out.undelivered_dir:
        _, out.confirmation = run_confirmation(run_search, spec, cfg, storage, options, out.parent_run_id,
                                              out.tracking_uri)
    return out
