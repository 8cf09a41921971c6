"""`grokray run`: the grid driver. Every configuration of the spec, packed, in one Tune run under one parent."""

from __future__ import annotations

import time

from ray import tune

from ..plan.expand import Survey, check_budget, check_fits, check_size, swept_keys
from ..spec.build import Spec
from ..tracking.schema import CONFIGURATIONS_TAG, EXPERIMENT_PATH_TAG, PACKS_TAG
from .launch import Launch
from .options import LaunchOptions, LaunchSummary


def run_sweep(spec: Spec, options: LaunchOptions | None = None, *, max_configs: int | None = None) -> LaunchSummary:
    """Run (or with options.resume continue) the sweep of `spec`; the spec is validated in full before Ray or
    MLflow is touched. max_configs: refuse a larger expansion (the CLI asks for --yes instead)."""
    options = options or LaunchOptions()
    check_size(spec, max_configs)
    survey = Survey.of(spec)  # every configuration parses, or a SpecError leaves nothing behind
    check_budget(survey.budget_steps, yes=max_configs is None)
    check_fits(spec, survey.shapes.values())
    with Launch(spec, options, kind="grid", resumable=lambda run: tune.Tuner.can_restore(
            run.tags.get(EXPERIMENT_PATH_TAG, "") or "/nonexistent")) as launch:
        packs = survey.packs(launch.slots, launch.gpu_free)  # (id, indices): the driver holds no configuration
        n, total_work = survey.n_configs, survey.work(packs)
        if options.resume:
            parent = launch.resume_parent()
            tuner = launch.tuner("", restore=parent.tags[EXPERIMENT_PATH_TAG], total_configs=n, total_work=total_work)
        else:
            name = f"{spec.name}_{time.strftime('%Y%m%d-%H%M%S')}"
            swept = swept_keys(spec)
            launch.open_parent(f"{spec.name} sweep", swept, sorted(spec.log_axes), {
                CONFIGURATIONS_TAG: n, PACKS_TAG: len(packs), EXPERIMENT_PATH_TAG: launch.path_of(name)})
            ctx = launch.context(swept, sorted(spec.log_axes))
            tuner = launch.tuner(name, ctx, packs=survey.pack_dicts(packs), total_configs=n, total_work=total_work)
        launch.fit(tuner)
        return launch.close(configurations=n, packs=len(packs))
