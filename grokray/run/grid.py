"""`grokray run`: the grid driver. Every configuration of the spec, packed, in one Tune run under one parent."""

from __future__ import annotations

import time

from ray import tune

from ..plan.expand import check_budget, check_fits, check_size, expand
from ..spec import Spec
from ..tracking.schema import CONFIGURATIONS_TAG, EXPERIMENT_PATH_TAG, PACKS_TAG
from .launch import Launch
from .options import LaunchOptions, LaunchSummary


def run_sweep(spec: Spec, options: LaunchOptions | None = None, *, max_configs: int | None = None) -> LaunchSummary:
    """Run (or with options.resume continue) the sweep of `spec`; the spec is validated in full before Ray or
    MLflow is touched. max_configs: refuse a larger expansion (the CLI asks for --yes instead)."""
    options = options or LaunchOptions()
    check_size(spec, max_configs)
    configs = spec.trials()  # every configuration parses, or a SpecError leaves nothing behind
    check_budget(configs, yes=max_configs is None)
    check_fits(spec, configs)
    with Launch(spec, options, kind="grid") as launch:
        plan = expand(spec, slots=launch.slots, gpu_free_bytes=launch.gpu_free)
        total_work = sum(len(p.members) * max(m.config.budget_steps for m in p.members) for p in plan.packs)
        if options.resume:
            parent = launch.resume_parent(lambda run: tune.Tuner.can_restore(
                run.tags.get(EXPERIMENT_PATH_TAG, "") or "/nonexistent"))
            tuner = launch.tuner("", restore=parent.tags[EXPERIMENT_PATH_TAG], total_configs=plan.n_configs,
                                 total_work=total_work)
        else:
            name = f"{spec.name}_{time.strftime('%Y%m%d-%H%M%S')}"
            launch.open_parent(f"{spec.name} sweep", plan.swept, sorted(spec.log_axes),
                               {CONFIGURATIONS_TAG: plan.n_configs, PACKS_TAG: len(plan.packs),
                                EXPERIMENT_PATH_TAG: launch.path_of(name)})
            ctx = launch.context(plan.swept, sorted(spec.log_axes))
            tuner = launch.tuner(name, ctx, packs=plan.pack_dicts(), total_configs=plan.n_configs,
                                 total_work=total_work)
        launch.fit(tuner)
        return launch.close(configurations=plan.n_configs, packs=len(plan.packs))

