"""grokray from Python (a notebook): `sweep` launches a spec as `grokray run` (or `grokray search`) does and gives
back its runs as a DataFrame, as Ray Tune's `Tuner.fit()` gives back a ResultGrid; `train_pack` trains a spec's
configurations in this process, without Ray or a store, and gives back each member's curves and parameters."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .engine import MemberResult, make_trainer
from .plan.expand import expand
from .spec.build import Spec, build_spec, load_spec
from .spec.trial import TrialConfig


def load(spec: str | Path | dict | Spec, overrides: list[str] | tuple[str, ...] = (), scale: str | None = None) -> Spec:
    """The checked spec (every mistake raises grokray.errors.SpecError, naming the field, before anything runs).

    Args:
        spec: a YAML file's path, the spec as a dict (what the YAML holds), or a Spec.
        overrides: `-s` overrides, "optim.default.lr=1e-3" or "seeds=[0, 1]".
        scale: "smoke" or "reduced" applies that preset; None or "paper" the spec as written.
    """
    if isinstance(spec, Spec):
        return build_spec(spec.raw, overrides, scale, default_name=spec.name) if overrides or scale else spec
    if isinstance(spec, dict):
        return build_spec(spec, overrides, scale)
    return load_spec(spec, overrides, scale)


def sweep(spec: str | Path | dict | Spec, overrides: list[str] | tuple[str, ...] = (), *, scale: str | None = None,
          tracking_uri: str | None = None, storage: str | None = None, max_concurrent: int | None = None,
          resume: bool = False, progress: str = "never") -> pd.DataFrame:
    """Launch the spec as the CLI does (a search block without sweep axes: the search; `adaptive:` the adaptive
    grid; else the grid) on this machine's private Ray, or on RAY_ADDRESS's cluster, logging every run to the
    store, and return the launch's runs. Named `sweep`: `grokray.run` is the launch package.

    Args:
        spec, overrides, scale: as `load`.
        tracking_uri: the store (default MLFLOW_TRACKING_URI, else sqlite:///mlflow.db), as --tracking-uri.
        storage: Ray Tune's results and checkpoints (default ./grokray-results).
        max_concurrent: packs training at once.
        resume: continue the spec's last interrupted launch, training nothing that finished.
        progress: "never" (default here), "auto" or "always": the CLI's live progress line.

    Returns:
        One row per configuration (analysis.load.load_runs of the launch's parent): the swept fields, seed, phase,
        step_train, step_val, gap, final/... . `attrs["summary"]` is the launch's LaunchSummary.
    """
    from analysis.load import load_runs  # Ray, Tune and MLflow load when a launch is asked for, not at import

    from .run.options import LaunchOptions

    checked = load(spec, overrides, scale)
    options = LaunchOptions(resume=resume, max_concurrent=max_concurrent, tracking_uri=tracking_uri,
                            storage=storage, progress=progress)
    from .drivers import DRIVERS
    from .tracking.schema import driver_for

    summary = DRIVERS[driver_for(checked).kind].launch(checked, options)
    runs = load_runs(parent_run_id=summary.parent_run_id, tracking_uri=summary.tracking_uri)
    runs.attrs["summary"] = summary
    return runs


@dataclass
class PackResult:
    """What `train_pack` trained, a list entry per member, pack after pack (the members of a pack neighbours)."""

    points: list[dict]  # each member's swept values and seed ({dotted field: value})
    configs: list[TrialConfig]
    results: list[MemberResult]  # phase, crossing steps, final metrics, curve
    params: list[dict] = field(default_factory=list)  # each member's final parameters {name: tensor}

    def runs(self) -> pd.DataFrame:
        """One row per member: its swept values, phase, step_train, step_val, gap, steps_run, final/... (the
        columns `sweep` gives)."""
        rows = [{**point, "phase": r.phase, "step_train": r.step_train, "step_val": r.step_val, "gap": r.gap,
                 "steps_run": r.steps_run, **{f"final/{k}": v for k, v in r.final.items()}}
                for point, r in zip(self.points, self.results, strict=True)]
        return pd.DataFrame(rows)

    def curves(self) -> pd.DataFrame:
        """Every member's recorded curve, long: member (its index), its swept values, step, then one column per
        metric (train/acc, val/acc, train/loss, ...)."""
        frames = []
        for k, (point, r) in enumerate(zip(self.points, self.results, strict=True)):
            curve = pd.DataFrame(r.curve)
            frames.append(curve.assign(member=k, **{key: [value] * len(curve) for key, value in point.items()}))
        return pd.concat(frames, ignore_index=True)


def train_pack(spec: str | Path | dict | Spec, overrides: list[str] | tuple[str, ...] = (), *,
               scale: str | None = None, device: str = "cpu") -> PackResult:
    """Train every configuration of the spec here, one pack after another, packed as a launch packs them (what
    can share a pack does, up to its size cap), with nothing logged: for a notebook, a test, a look before a sweep.

    Args:
        spec, overrides, scale: as `load`.
        device: "cpu" or a CUDA device ("cuda", "cuda:1").

    Returns:
        A PackResult: `.runs()` a DataFrame of phases and crossing steps, `.curves()` every member's curve,
        `.params` each member's final parameters.
    """
    plan = expand(load(spec, overrides, scale), slots=1)  # one pack at a time here: the fewest, largest packs
    out = PackResult([], [], [], [])
    for pack in plan.packs:
        trainer = make_trainer([m.config for m in pack.members], device=device)
        trainer.compact = False  # members keep their rows: member_states() is then in member order
        trainer.run()
        for member, result, state in zip(pack.members, trainer.results(), trainer.member_states(), strict=True):
            out.points.append(member.point)
            out.configs.append(member.config)
            out.results.append(result)
            out.params.append(state)
    return out
