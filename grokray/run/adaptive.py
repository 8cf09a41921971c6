"""The adaptive driver: rounds of packed Tune runs under one parent, each round's points chosen by plan.refine.

Before a round starts its record (points, cells, its Tune experiment path) is written on the parent as the
artifact `adaptive/round-NN.json`, through the parent's courier: with the server away it waits in the launch's
spool like every other batch. The phases that decide the next round come from the round's Tune results, so a
tracking outage costs no trial and holds no round up. `--resume` delivers the launch's spool, reads the records
and the finished children, restores the last round's Tune experiment (or trains its unfinished points when it
never started), then carries on. No finished configuration is trained twice.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from ray import tune

from ..plan.expand import check_budget, check_fits, expand
from ..plan.lattice import AdaptivePlan, Index, PointSpec, Trial, parse_adaptive, trial_keys, trial_point
from ..plan.refine import Refinement, next_points
from ..spec.build import Spec
from ..tracking.client import StoreAway
from ..tracking.schema import (
    ADAPTIVE_BUDGET_TAG,
    ADAPTIVE_FULL_GRID_TAG,
    ADAPTIVE_LATTICE_TAG,
    ADAPTIVE_ROUND_TAG,
    ADAPTIVE_ROUNDS_DIR,
    ADAPTIVE_TAG,
    PHASE_TAG,
    TRIAL_KEY_TAG,
)
from .launch import Launch, any_parent
from .options import LaunchOptions, LaunchSummary


@dataclass
class AdaptiveSummary(LaunchSummary):
    rounds: int = 0
    budget: int = 0
    full_grid: int = 0
    rounds_log: list[dict] = field(default_factory=list)

    @property
    def trials(self) -> int:
        return self.configurations


class Rounds:
    """The rounds of one adaptive launch: their records, which trial key is which lattice trial, what was seen."""

    def __init__(self, launch: Launch, spec: Spec, plan: AdaptivePlan):
        self.launch, self.spec, self.plan = launch, spec, plan
        self.log: list[dict] = []
        self.known: dict[str, Trial] = {}  # trial key -> (i, j, seed), for every trial proposed so far
        self.observed: dict[Index, dict[int, str]] = {}

    def observe(self, phases: dict[str, str]) -> None:
        for key, phase in phases.items():
            t = self.known.get(key)
            if t is not None and phase:
                self.observed.setdefault((t[0], t[1]), {})[t[2]] = phase

    def resume(self) -> list[Trial]:
        """Read the records and the finished children back; the last round's trials still to train."""
        parent = self.launch.parent
        self.log.extend(json.loads(text) for text in parent.read_texts(ADAPTIVE_ROUNDS_DIR))
        for rec in self.log:
            self.known.update(trial_keys(self.spec, self.plan, [tuple(t) for t in rec["trials"]]))
        self.observe({r.tags.get(TRIAL_KEY_TAG): r.tags.get(PHASE_TAG) for r in parent.children()})
        last = self.log[-1] if self.log else None
        return [tuple(t) for t in last["trials"] if t[2] not in self.observed.get((t[0], t[1]), {})] if last else []

    def write(self, rec: dict) -> None:
        self.launch.parent.log_text(json.dumps(rec, indent=2), f"{ADAPTIVE_ROUNDS_DIR}/round-{rec['round']:02d}.json")

    def record(self, ref: Refinement) -> int:
        """A new round's record, written before it starts."""
        rnd = len(self.log)
        name = f"{self.spec.name}_adaptive_{time.strftime('%Y%m%d-%H%M%S')}_r{rnd:02d}"
        rec = {"round": rnd, "trials": [list(t) for t in ref.trials], "name": name,
               "experiment_path": self.launch.path_of(name),
               "cells": [[list(c), why] for c, why in ref.cells], "extra": [list(p) for p in ref.extra],
               "observed_trials": sum(len(v) for v in self.observed.values())}
        self.write(rec)
        self.log.append(rec)
        self.known.update(trial_keys(self.spec, self.plan, ref.trials))
        return rnd

    def tuner(self, rnd: int, trials: list[Trial], ctx, resumed: bool) -> tune.Tuner:
        """Round `rnd`'s Tune run: a resumed round's experiment restored if it ever started; otherwise `trials`
        packed afresh (a resumed round that never started first drops the runs it made, and takes a new name)."""
        launch = self.launch
        done = sum(len(v) for v in self.observed.values())  # what earlier rounds trained
        label = f"round {rnd + 1}" + (f" ({done} configurations done in earlier rounds)" if done else "")
        if resumed:
            rec = self.log[rnd]
            if tune.Tuner.can_restore(rec["experiment_path"]):
                return launch.tuner("", restore=rec["experiment_path"], total_configs=len(trials), label=label)
            launch.parent.delete_unfinished(set(self.known))
            name = f"{rec['name']}-{int(time.time())}"
            self.log[rnd] = {**rec, "name": name, "experiment_path": launch.path_of(name)}
            self.write(self.log[rnd])
        rec = self.log[rnd]
        round_plan = expand(PointSpec(self.spec, [trial_point(self.plan, t) for t in trials]), slots=launch.slots,
                            gpu_free_bytes=launch.gpu_free)
        round_plan.swept = list(ctx.target.swept)
        for p in round_plan.packs:
            p.pack_id = f"r{rnd:02d}-{p.pack_id}"
        work = sum(len(p.members) * max(m.config.budget_steps for m in p.members) for p in round_plan.packs)
        return launch.tuner(rec["name"], ctx, packs=round_plan.pack_dicts(), total_configs=round_plan.n_configs,
                            total_work=work, label=label)


def run_adaptive(spec: Spec, options: LaunchOptions | None = None, *, max_rounds: int | None = None
                 ) -> AdaptiveSummary:
    """Run (or with options.resume continue) the adaptive sweep of `spec`.

    max_rounds: stop after this many rounds in this call (the parent is left KILLED, as after Ctrl-C; --resume
    continues). Used by tests to interrupt at a known place."""
    options = options or LaunchOptions()
    plan = parse_adaptive(spec)
    base = spec.trial(trial_point(plan, (0, 0, plan.seeds[0])))  # the base parses; every lattice point below too
    check_budget(plan.budget * base.budget_steps)
    check_fits(spec, [base])
    x, y = plan.lattice.x, plan.lattice.y
    swept = [x.key, y.key] + (["seed"] if len(plan.seeds) > 1 or plan.rules.extra_seeds else [])
    log_axes = sorted(a.key for a in (x, y) if a.log)
    with Launch(spec, options, kind="adaptive", resumable=any_parent) as launch:
        rounds = Rounds(launch, spec, plan)
        if options.resume:
            launch.resume_parent()
            todo = rounds.resume()
        else:
            launch.open_parent(f"{spec.name} adaptive", swept, log_axes, {
                ADAPTIVE_TAG: "true", ADAPTIVE_BUDGET_TAG: plan.budget, ADAPTIVE_FULL_GRID_TAG: plan.full_grid_trials,
                ADAPTIVE_LATTICE_TAG: [x.target, y.target]})
            todo = []
        ctx = launch.context(swept, log_axes, member_phases=True)
        interrupted, ran = False, 0
        while True:
            resumed = bool(todo)
            if not resumed and max_rounds is not None and ran >= max_rounds:
                interrupted = True
                break
            with StoreAway() as away:
                if resumed:
                    rnd = len(rounds.log) - 1
                else:
                    ref = next_points(plan, rounds.observed)
                    if not ref.trials:
                        break
                    rnd, todo = rounds.record(ref), ref.trials
                tuner = rounds.tuner(rnd, todo, ctx, resumed)
                launch.parent.set_tag(ADAPTIVE_ROUND_TAG, str(rnd))
            if away.happened:
                interrupted = True
                break
            result = launch.fit(tuner)
            rounds.observe(result.member_phases)
            ran, todo = ran + 1, []
            if result.errored or result.unfinished:
                interrupted = True
                break
        n = sum(len(v) for v in rounds.observed.values())
        summary = launch.close(configurations=n, interrupted=interrupted,
                               metrics={"adaptive/trials": float(n), "adaptive/rounds": float(len(rounds.log))})
        return AdaptiveSummary(**vars(summary), rounds=len(rounds.log), budget=plan.budget,
                               full_grid=plan.full_grid_trials, rounds_log=rounds.log)
