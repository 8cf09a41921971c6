"""The contracts the rest of grokray relies on, as Protocols: what a model family declares, what a trainer does,
and what a driver declares. The engine, the sweep layer and the sizing probe call these and nothing else, so a new
family or trainer is checked against one list (tests/test_model_contract.py runs every registered family through
it). What a tracker (a store of runs) does is written beside the records it trades in, typed by them:
tracking/records.py's Tracker (tests/test_tracker_contract.py runs every tracker through it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

# The curves every trainer records, one point per evaluation: the names MLflow stores and analysis reads.
CURVE_METRICS = ("train/loss", "train/acc", "val/loss", "val/acc", "weight_norm")


@runtime_checkable
class Family(Protocol):
    """A registered model family (the class `MODELS.register` decorates)."""

    groups: ClassVar[tuple[str, ...]]  # optimizer parameter groups; () for a family without one (rfm)
    per_member_fields: ClassVar[frozenset[str]]  # model fields that may differ between members of one pack
    defaults: ClassVar[dict]  # train:/phases: values that differ from the global ones (rfm counts iterations)
    example: ClassVar[dict]  # a task and model small enough for the contract tests
    trainer: ClassVar[str]  # which engine trainer trains it: "pack" (stacked gradient training) or "rfm"
    max_pack_size: ClassVar[int | None]  # None: any; 1: members cannot be stacked

    @staticmethod
    def check_task(model: Any, task: Any, path: str) -> None:
        """Raise a SpecError naming `path` if this model cannot train on `task`."""


def measured_every_step(train, uses_dropout: bool, n_points: int, width: int) -> bool:
    """Whether a pack measures every member on all its points at every step (exact crossings): full batch, no
    dropout, and at most 4,096 points (or twice the training rows). engine.pack_setup.measuring and the module
    family's dry-run line both read this rule."""
    return train.batch_size == "full" and not uses_dropout and n_points <= max(4096, 2 * width)


def family_groups(family, model: Any) -> tuple[str, ...]:
    """The optimizer groups of `family` for the model config `model`: a family whose groups depend on its config
    (the `module` family's model.groups) declares `groups_for(model)`; the others have fixed `groups`."""
    groups_for = getattr(family, "groups_for", None)
    return tuple(groups_for(model)) if groups_for is not None else tuple(family.groups)


@runtime_checkable
class Trainer(Protocol):
    """Trains K configurations at once (K = 1 is a single trial); steps are optimizer steps, or iterations."""

    K: int  # members still in the pack
    device: Any  # the torch.device it trains on (checkpoints are loaded onto it)
    step: int
    total: int  # the largest budget of its members
    stopped_at: list[int | None]  # per member, in the order given: the step it stopped at, or None
    stopped_wall: list[float | None]  # and the time.time() it stopped then (its tracked run ends there)
    compact: bool  # drop stopped members from the tensors (False keeps their rows, e.g. to save final states)

    def run(self, until: int | None = None, on_check=None) -> bool:
        """Train until every member stopped (True) or `step == until` (False)."""

    def done(self) -> bool: ...

    def results(self) -> list: ...  # one engine.pack.MemberResult per member, in the order given

    def state_dict(self) -> dict: ...  # tensors, lists and numbers only: torch.load(weights_only=True) reads it

    def load_state_dict(self, state: dict) -> None: ...

    def member_states(self) -> list[dict | None]:
        """Each member's learned state as CPU tensors (None for a member compacted away)."""

    def member_bytes(self) -> int:
        """Memory one member needs (the sizing probe's measure)."""


@dataclass(frozen=True)
class DriverKind:
    """What a driver (a way to launch a spec: grid, adaptive, search) declares, so that the launch layer, its close,
    `grokray replay`, the dead-driver notice and the atlas ask the driver and never compare its name. Declared
    once, beside the tags a launch writes (tracking/schema.DRIVERS); its launch function and its plan are the
    driver's own module's (grokray/drivers.py maps them)."""

    kind: str  # the parent run's grokray.kind
    command: str  # the CLI command that launches and resumes it
    spec_block: str = ""  # the spec's block that asks for it ("" for the default: a spec with neither)
    one_run_of_packs: bool = False  # one Tune run holds every pack with its children: the close reads them by pack
    # its configurations are a study's trials, drawn and scored: its close's figures are the study's own
    # (figure_line), it may owe a confirmation stage, and an atlas page shows the study, not a grid
    study: bool = False
    figure_line: str = ""
