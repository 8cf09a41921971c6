"""How long a sweep will take: what `grokray run --dry-run` prints and what the atlas checks against the measured wall.

Each pack's step cost a + b*K is measured on this machine (engine.cost.calibrate) for a handful of packs spread
over the plan; the other packs take the cost of the nearest calibrated one (round-robin dealing makes neighbours
alike). A pack then costs its Tune trial's start-up plus its steps, and the packs are scheduled longest first
onto the concurrent slots. Members stop once classified, which no estimate can know in advance: it assumes each
member trains STOP_SHARE of its budget (a grid spans fast-generalizing and run-to-the-end phases) and reports the
every-member-to-its-budget figure beside it as the upper bound.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

from ..engine.cost import StepCost, calibrate
from .expand import Pack, Plan, local_slots, model_steps

STOP_SHARE = 0.5  # share of its budget a member is expected to train when stop_when_classified
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

    def lines(self) -> list[str]:
        return [
            f"configurations: {self.configurations}",
            f"packs:          {self.packs}  ({self.slots} at once)",
            f"model-steps:    {self.model_steps}  (sum of min(train.steps, phases.budget))",
            f"estimate:       {fmt_minutes(self.seconds)}  (members trained {STOP_SHARE:.0%} of their budget on "
            f"average; upper bound {fmt_minutes(self.upper_seconds)} if every member runs to its budget)",
            f"step costs:     {self.basis}",
        ]


def fmt_minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _share(member) -> float:
    return STOP_SHARE if member.config.phases.stop_when_classified else 1.0


def pack_seconds(pack: Pack, cost: StepCost, expected: bool = True) -> float:
    """Start-up + steps: the per-step overhead runs until the pack's last member stops, the per-member cost for
    each member's own steps."""
    steps = [model_steps(m.config) for m in pack.members]
    shares = [_share(m) if expected else 1.0 for m in pack.members]
    longest = max(steps) * (1.0 if len(steps) > 1 else shares[0])
    member_steps = sum(s * f for s, f in zip(steps, shares, strict=True))
    return PACK_START_S + MEMBER_S * len(steps) + cost.a * longest + cost.b * member_steps


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
                  slots: int | None = None) -> Estimate:
    """The plan's expected and upper-bound wall time on `cpus` cores (default: this machine's), or with `slots`
    packs at once when given (a search's max_concurrent)."""
    res = plan.spec.resources
    device = "cuda" if res.gpu > 0 else "cpu"
    can_measure = device == "cpu" or _cuda()
    costs: dict[str, StepCost] = {}
    if calibrate_costs and can_measure:
        start = time.perf_counter()
        for i in _sampled(len(plan.packs), MAX_CALIBRATED):
            if costs and time.perf_counter() - start > CALIBRATION_S:
                break
            pack = plan.packs[i]
            costs[pack.pack_id] = calibrate([m.config for m in pack.members], device, threads=int(max(1, res.cpu)))
        order = [i for i, p in enumerate(plan.packs) if p.pack_id in costs]
        basis = (f"measured here on {len(costs)} of {len(plan.packs)} packs (a + b*K seconds per step; others take "
                 f"the nearest measured pack's)")
    else:
        rate = ASSUMED_GPU_RATE if device == "cuda" else ASSUMED_CPU_RATE
        order = []
        why = "--no-calibrate" if not calibrate_costs else "no CUDA device here to measure on"
        basis = f"assumed {rate:g} model-steps/s per {'pack' if device == 'cuda' else 'core'} ({why})"
        flat = StepCost(0.0, 1.0 / rate)
    expected, upper = [], []
    for i, pack in enumerate(plan.packs):
        if order:
            nearest = min(order, key=lambda j: abs(j - i))
            cost = costs[plan.packs[nearest].pack_id]
        else:
            cost = flat
        expected.append(pack_seconds(pack, cost))
        upper.append(pack_seconds(pack, cost, expected=False))
    slots = slots or _slots(plan, cpus)
    return Estimate(plan.n_configs, len(plan.packs), plan.model_steps, SWEEP_S + schedule(expected, slots),
                    SWEEP_S + schedule(upper, slots), slots, basis, costs)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
