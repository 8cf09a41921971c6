"""What every trial of a launch is told, as one typed, frozen value that round-trips through Ray's param space.

The worker rebuilds it with `TrialContext.from_dict`, which rejects keys it does not know: a driver that sends
a field the trainable would ignore is a bug found at the first trial, not a setting silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..spec.blocks import only_known_fields
from ..tracking.pack_runs import RunTarget


@dataclass(frozen=True)
class TrialContext:
    target: RunTarget  # where the pack's runs go, and how they survive a tracking outage
    checkpoint_every: int = 1000  # steps per chunk
    min_report_s: float = 30.0  # at most one report (curves, checkpoint, Tune result) per this many seconds
    cpu: float = 1.0
    gpu: float = 0.0
    final_state: bool = False  # save each member's final parameters as an artifact
    objective: tuple[str, ...] = ()  # a search trial: the objectives each report carries (grokray/objectives.py)
    penalty: float = 0.0  # ... and the value of a trial that has not generalized yet
    fit_reports: bool = False  # the default interval: a short pack reports more often (trainable.fitted_report_s)
    member_phases: bool = False  # report each member's phase by its key (the adaptive driver steers by them;
    # a grid reports counts only, so that Tune's results stay per pack, not per configuration)
    code_paths: tuple[str, ...] = ()  # where the driver imported the user's families and tasks from (user_code)

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["target"] = self.target.to_dict()
        out["objective"] = list(self.objective)
        out["code_paths"] = list(self.code_paths)
        return out

    @classmethod
    def from_dict(cls, raw: dict) -> TrialContext:
        values = dict(only_known_fields(cls, raw, "trial-context"))
        values["target"] = RunTarget.from_dict(raw["target"])
        values["objective"] = tuple(raw.get("objective", ()))
        values["code_paths"] = tuple(raw.get("code_paths", ()))
        return cls(**values)
