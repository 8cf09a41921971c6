"""How long a sweep will take: what `grokray run --dry-run` prints and what the atlas checks against the measured wall.

Each pack's step cost a + b*K is measured on this machine (engine.cost.calibrate) for a handful of packs spread
over the plan; the other packs take the cost of the nearest calibrated one (round-robin dealing makes neighbours
alike). A pack then costs its Tune trial's start-up plus its steps, and the packs are scheduled longest first
onto the concurrent slots. Members stop once classified, which no estimate can know in advance; the phases
split them in two: those that generalize stop within a few percent of the budget, the memorization and
confusion ones train to its end. The estimate assumes a share of each pack's members are of the second kind
(LONG_SHARE, or the share measured on the experiment's stored runs: tracking.history), and that the pack sheds
the others as the engine does (PackTrainer compacts once a quarter has stopped); the
every-member-to-its-budget figure is reported beside it as the upper bound.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

from ..engine.cost import StepCost, calibrate
from ..engine.sizing import AddressSpaceCap, out_of_memory
from .expand import Pack, Plan, local_slots, model_steps

LONG_SHARE = 0.5  # members expected to train to their budget, without history (measured: 0.15 to 0.85 by figure)
PACK_START_S = 5.0  # a Tune trial: worker process, imports (torch, ray.tune, mlflow), pack built, runs opened
MEMBER_S = 0.05  # per member: its MLflow child run created, curves delivered, closed
SWEEP_S = 12.0  # Ray started and stopped, parent run opened and closed, phase counts gathered
MAX_CALIBRATED = 6  # packs measured per plan (each for ~0.5 s, an RFM pack for about two iterations)
CALIBRATION_S = 8.0  # after this many seconds of measuring, the packs measured so far stand for the rest
# Without a calibration (--no-calibrate, or a GPU spec on a machine without one): a flat rate per model-step.
ASSUMED_CPU_RATE = 1700.0  # model-steps/s per core, Liu's toy at width 200 packed (the old, single figure)
ASSUMED_GPU_RATE = 50000.0  # model-steps/s per pack on one card for small models


@dataclass
class Estimate:
    configurations: int
    packs: int
    model_steps: int  # sum over members of min(train.steps, phases.budget)
    seconds: float  # expected wall
    upper_seconds: float  # every member trains its whole budget
    slots: int  # packs running at once
    basis: str  # how the step costs were obtained
    costs: dict[str, StepCost] = field(default_factory=dict)  # pack id -> calibrated cost (sampled packs)
    long_share: float = LONG_SHARE  # members assumed to train to their budget
    share_basis: str = "assumed"  # where long_share comes from

    def lines(self) -> list[str]:
        return [
            f"configurations: {self.configurations}",
            f"packs:          {self.packs}  ({self.slots} at once)",
            f"model-steps:    {self.model_steps}  (sum of min(train.steps, phases.budget))",
            f"estimate:       {fmt_minutes(self.seconds)}  (if {self.long_share:.0%} of the members train to their "
            f"budget and the rest stop early; upper bound {fmt_minutes(self.upper_seconds)} if every one trains "
            "to its budget)",
            f"to budget:      {self.long_share:.0%} of the members {self.share_basis}",
            f"step costs:     {self.basis}",
        ]


def fmt_minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def pack_seconds(pack: Pack, cost: StepCost, expected: bool = True, share: float = LONG_SHARE) -> float:
    """Start-up + steps. Expected: the pack runs to its longest budget at the size it shrinks to once the members
    that stop early have left it (`share` of them stay; a pack keeps its size while more than three quarters
    train on). Upper: every member trains to its budget."""
    steps = [model_steps(m.config) for m in pack.members]
    k, longest = len(steps), max(steps)
    start = PACK_START_S + MEMBER_S * k
    if not expected:
        return start + cost.a * longest + cost.b * sum(steps)
    stopping = [m.config.phases.stop_when_classified for m in pack.members]
    if not any(stopping):
        return start + cost.a * longest + cost.b * sum(steps)
    if k == 1:
        return start + share * longest * cost.seconds(1)
    long_members = sum(1 for s in stopping if not s) + share * sum(stopping)
    kept = k if long_members > 0.75 * k else max(1, math.ceil(long_members))
    return start + longest * cost.seconds(kept)


def schedule(durations: list[float], slots: int) -> float:
    """Wall time of independent jobs on `slots` workers, longest first onto the least loaded (Tune's grid order
    is not this, but a grid dealt round-robin is close to balanced either way)."""
    loads = [0.0] * max(1, slots)
    for d in sorted(durations, reverse=True):
        heapq.heapreplace(loads, loads[0] + d)
    return max(loads)


def _sampled(n: int, k: int) -> list[int]:
    """Up to k pack indices spread over 0..n-1, in the order to measure them: ends first, then the points
    farthest from those already taken, so a calibration cut short by time still spans the plan."""
    pool = list(range(n)) if n <= k else sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})
    order = [pool.pop(0)] if pool else []
    while pool:
        far = max(pool, key=lambda i: min(abs(i - j) for j in order))
        order.append(far)
        pool.remove(far)
    return order


def _slots(plan: Plan, cpus: int | None) -> int:
    res = plan.spec.resources
    if res.gpu > 0:
        return max(1, min(len(plan.packs), int(1 // res.gpu)))
    return max(1, min(len(plan.packs), local_slots(plan.spec, cpus)))


def estimate_plan(plan: Plan, cpus: int | None = None, calibrate_costs: bool = True,
                  slots: int | None = None, tracking_uri: str | None = None) -> Estimate:
    """The plan's expected and upper-bound wall time on `cpus` cores (default: this machine's), or with `slots`
    packs at once when given (a search's max_concurrent). With `tracking_uri`, the share of members that train
    to their budget is the one measured on the stored runs of the spec's experiment, where there are enough."""
    res = plan.spec.resources
    device = "cuda" if res.gpu > 0 else "cpu"
    can_measure = device == "cpu" or _cuda()
    costs: dict[str, StepCost] = {}
    too_big = 0
    if calibrate_costs and can_measure:
        start = time.perf_counter()
        for i in _sampled(len(plan.packs), MAX_CALIBRATED):
            if (costs or too_big) and time.perf_counter() - start > CALIBRATION_S:
                break
            pack = plan.packs[i]
            try:
                with AddressSpaceCap():
                    costs[pack.pack_id] = calibrate([m.config for m in pack.members], device,
                                                    threads=int(max(1, res.cpu)))
            except (MemoryError, RuntimeError) as exc:  # a pack bigger than this machine: not measurable here
                if not out_of_memory(exc):
                    raise
                too_big += 1
    order = [i for i, p in enumerate(plan.packs) if p.pack_id in costs]
    rate = ASSUMED_GPU_RATE if device == "cuda" else ASSUMED_CPU_RATE
    flat = StepCost(0.0, 1.0 / rate)
    assumed = f"assumed {rate:g} model-steps/s per {'pack' if device == 'cuda' else 'core'}"
    if order:
        basis = (f"measured here on {len(costs)} of {len(plan.packs)} packs (a + b*K seconds per step; others take "
                 f"the nearest measured pack's)")
    elif too_big:
        basis = f"{assumed} (a pack does not fit this machine's memory to measure it)"
    else:
        why = "--no-calibrate" if not calibrate_costs else "no CUDA device here to measure on"
        basis = f"{assumed} ({why})"
    share, share_basis = budget_share(plan, tracking_uri)
    expected, upper = [], []
    for i, pack in enumerate(plan.packs):
        if order:
            nearest = min(order, key=lambda j: abs(j - i))
            cost = costs[plan.packs[nearest].pack_id]
        else:
            cost = flat
        expected.append(pack_seconds(pack, cost, share=share))
        upper.append(pack_seconds(pack, cost, expected=False))
    slots = slots or _slots(plan, cpus)
    return Estimate(plan.n_configs, len(plan.packs), plan.model_steps, SWEEP_S + schedule(expected, slots),
                    SWEEP_S + schedule(upper, slots), slots, basis, costs, share, share_basis)


def budget_share(plan: Plan, tracking_uri: str | None) -> tuple[float, str]:
    """(share of members expected to train to their budget, where that figure comes from)."""
    if tracking_uri and plan.packs:
        from ..tracking.history import stored_budget_share

        budget = max(model_steps(m.config) for p in plan.packs for m in p.members)
        found = stored_budget_share(tracking_uri, plan.spec.name, budget)
        if found is not None:
            return found.share, f"({found.describe(plan.spec.name)})"
    return LONG_SHARE, "(assumed: no stored runs of this experiment to measure it on)"


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
