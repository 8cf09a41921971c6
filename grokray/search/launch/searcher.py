"""The Tune side of a search: Ray Tune's public Searcher over grokray's own Optuna study."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState
from ray.tune.search import Searcher

from ...objectives import SEED_ATTRS, trial_key
from ...plan.expand import run_name
from ...spec.build import Spec
from ...spec.wire import compact_pack
from ...tracking.schema import SEARCH_STUDY_TAG, SEARCH_TRIAL_TAG
from ..config import SearchConfig, trial_configs
from ..sampler import distributions
from ..study import MEMBER_KEYS_ATTR, RUN_ID_ATTR, counted

MAX_REASKS = 50  # repeats answered in a row before the space counts as spent and the search stops


def _not_known(key: str) -> str:
    return ""


@dataclass
class HeldTell:
    """A trial that finished while its runs were not in MLflow yet (a tracking outage): Optuna freezes a trial's
    attributes at its tell, so the tell waits until the link to its runs can be written with it."""

    trial: optuna.Trial
    values: list[float] | None  # None: told pruned
    keys: list[str]  # its configurations' keys, in seed order
    ids: list[str]  # their run ids, "" while not known


class StudySearcher(Searcher):
    """Ray Tune's public Searcher over grokray's own Optuna study, driven by Optuna's public ask/tell: each
    suggestion becomes a pack of its seeds, a configuration the study already evaluated is answered from the study
    instead of trained again, and each trial's key and phase are recorded as Optuna user attributes.

    Owning the study (instead of subclassing Ray's OptunaSearch and reading its private study) keeps one Study
    object for the whole launch, and what Tune checkpoints is only the Tune trial -> Optuna trial map: the study
    itself persists in its own storage, which is what `--resume` reopens."""

    def __init__(self, spec: Spec, cfg: SearchConfig, study: optuna.Study, target: int | None = None,
                 run_of: Callable[[str], str] | None = None):
        super().__init__(metric=cfg.objective if cfg.multi else cfg.objective[0],
                         mode=["min"] * len(cfg.objective) if cfg.multi else "min")
        self.spec = spec
        self.cfg = cfg
        self.study = study
        self.space = distributions(cfg)
        self.target = target  # trials the study should hold; once reached (or the space is spent) suggest stops
        self.log_axes = cfg.log_axes
        self.asked: dict[str, optuna.Trial] = {}  # Tune trial id -> the Optuna trial it trains
        self.reported: dict[str, int] = {}  # Tune trial id -> the last step reported to Optuna
        self.done: dict[str, tuple[int, list[float]]] = {}  # trial key -> (trial number, values)
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            key = t.user_attrs.get("trial_key")
            if key and key not in self.done:
                self.done[key] = (t.number, list(t.values))
        self.running: dict[str, str] = {}  # Tune trial id -> trial key
        self.run_of = run_of or _not_known  # configuration key -> its MLflow run, once delivery made it
        self.held: dict[str, HeldTell] = {}  # Tune trial id -> a finished trial whose tell waits for its runs

    def full(self) -> bool:
        taken = counted(self.study) + len(self.running) + len(self.held)
        return self.target is not None and taken >= self.target

    def suggest(self, trial_id: str):
        self.settle()
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
                link = self.study.get_trials(deepcopy=False)[number].user_attrs.get(RUN_ID_ATTR)
                if link:  # the runs that answered it
                    ot_trial.set_user_attr(RUN_ID_ATTR, link)
                self.study.tell(ot_trial, values if self.cfg.multi else values[0])
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
        self.settle()
        ot_trial, step = self.asked.get(trial_id), result.get("step")
        if ot_trial is None or self.cfg.multi or self.metric not in result or step is None:
            return
        if int(step) > self.reported.get(trial_id, -1):  # a retried trial's chunk repeats steps it reported
            ot_trial.report(float(result[self.metric]), int(step))
            self.reported[trial_id] = int(step)

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False):
        """Tell the study: the objective(s) of a trial that reported them, else failed (an error) or pruned. A
        trial whose runs are not in MLflow yet is held until they are (settle), so its link is written with it."""
        key = self.running.pop(trial_id, None)
        self.reported.pop(trial_id, None)
        ot_trial = self.asked.pop(trial_id, None)
        if ot_trial is None:
            return
        if result:
            several = len(ot_trial.user_attrs.get(MEMBER_KEYS_ATTR, [])) > 1
            for attr in ("phase", "step_train_acc", "step_val_acc", "val/acc", "step",
                         *(SEED_ATTRS if several else ())):
                if attr in result:
                    ot_trial.set_user_attr(attr.replace("/", "_"), result[attr])
            if not result.get("pack_done"):
                ot_trial.set_user_attr("pruned_at_step", result.get("step"))
        keys = ot_trial.user_attrs.get(MEMBER_KEYS_ATTR) or [ot_trial.user_attrs["trial_key"]]
        ids = str((result or {}).get(RUN_ID_ATTR, "")).split(",")
        held = HeldTell(ot_trial, None, keys, ids if len(ids) == len(keys) else [""] * len(keys))
        names = self.cfg.objective if self.cfg.multi else [self.metric]
        values = [result.get(name) for name in names] if result else [None]
        if any(v is None or not math.isfinite(float(v)) for v in values):
            if error or not result:  # nothing to wait for: a failed trial's runs are not what the study keeps
                self._tell(held, failed=error)
                return
        else:
            held.values = [float(v) for v in values]
            if key:
                self.done.setdefault(key, (ot_trial.number, held.values))
        self.held[trial_id] = held
        self.settle()

    def settle(self) -> int:
        """Tell every held trial whose runs are all known now, with its link; returns how many are still held."""
        for tid, held in list(self.held.items()):
            held.ids = [run or self.run_of(key) for run, key in zip(held.ids, held.keys, strict=True)]
            if all(held.ids):
                self._tell(self.held.pop(tid))
        return len(self.held)

    def release(self) -> int:
        """After the launch's close, which delivered what it could: every trial still held is told, without its link
        where its runs are still not made (the server is away; `grokray replay` writes the study's link when it
        makes them). Returns how many went without."""
        left = self.settle()
        for tid in list(self.held):
            self._tell(self.held.pop(tid))
        return left

    def _tell(self, held: HeldTell, failed: bool = False) -> None:
        if all(held.ids):
            held.trial.set_user_attr(RUN_ID_ATTR, ",".join(held.ids))
        if held.values is None:
            self.study.tell(held.trial, state=TrialState.FAIL if failed else TrialState.PRUNED)
        else:
            self.study.tell(held.trial, held.values if self.cfg.multi else held.values[0])

    def __getstate__(self):  # Tune pickles its search algorithm; the live lookup (the driver's delivery) stays
        return {**self.__dict__, "run_of": _not_known}

    def save(self, checkpoint_path: str) -> None:
        """What Tune checkpoints: the Optuna trial number of each Tune trial in flight (the study is in storage)."""
        Path(checkpoint_path).write_text(json.dumps({"study": self.cfg.study, "running": {
            tid: t.number for tid, t in self.asked.items()}}))

    def restore(self, checkpoint_path: str) -> None:
        raise NotImplementedError("a search resumes from its Optuna study (grokray search --resume), which "
                                  "recovers the trials a dead driver left running; not from Tune's searcher state")
