"""How long a sweep will take: what `grokray run --dry-run` prints and what the atlas checks against the measured wall.

Each pack's step cost a + b*K is measured on this machine (engine.cost.calibrate) for a handful of packs spread
over the plan; the other packs take the cost of the nearest calibrated one (round-robin dealing makes neighbours
alike). A pack then costs its Tune trial's start-up plus its steps, and the packs are scheduled longest first
onto the concurrent slots. Members stop once classified, which no calibration can know in advance: the
memorization and confusion ones train to the budget's end, the others stop when their validation accuracy
crosses (a grokking member late). The estimate takes how much of the budget members train (BudgetUse) as the
caller measured it on the experiment's stored runs (tracking.history), else assumes half of them train it all and
half stop at once; the pack sheds stopped members as the engine does (PackTrainer compacts once a quarter has
stopped). The every-member-to-its-budget figure is reported beside it as the upper bound.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

from ..engine.cost import StepCost, calibrate
from ..engine.result import pack_signature
from ..engine.sizing import MAX_GPU_PACK, AddressSpaceCap, cpu_pack_size_reason, local_gpu_name, out_of_memory
from .expand import GPU_PACKS_PER_CARD, Pack, Plan, dealing_slots, local_slots, model_steps

LONG_SHARE = 0.5  # members expected to train their whole budget, without history (measured: 0.15 to 0.85)
PACK_START_S = 5.0  # a slot's first Tune trial: a worker process, imports (torch, Tune, MLflow), the pack, its runs
PACK_REUSE_S = 0.5  # each later trial in that process (Tune reuses the actor): pack built, runs opened
MEMBER_S = 0.05  # per member: its MLflow child run created, curves delivered, closed
SWEEP_S = 12.0  # Ray started and stopped, parent run opened and closed, phase counts gathered
MAX_CALIBRATED = 6  # packs measured per plan (each for ~0.5 s, an RFM pack for about two iterations)
CALIBRATION_S = 8.0  # after this many seconds of measuring, the packs measured so far stand for the rest
# Without a calibration (--no-calibrate, or a GPU spec on a machine without one): a flat rate per model-step.
ASSUMED_CPU_RATE = 1700.0  # model-steps/s per core, Liu's toy at width 200 packed (the old, single figure)
ASSUMED_GPU_RATE = 50000.0  # model-steps/s per pack on one card for small models


@dataclass(frozen=True)
class BudgetUse:
    """How much of their budget the members that stop once classified will train."""

    share: float  # the share that trains all of it (memorization, confusion)
    trained: float  # the mean share of the budget trained, over all of them
    basis: str  # where the figures come from


PRIOR = BudgetUse(LONG_SHARE, LONG_SHARE, "assumed: no stored runs of this experiment to measure it on")


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
    use: BudgetUse = PRIOR  # how much of its budget a member was assumed to train
    packing: str = ""  # why the packs are the size they are
    pack_costs: list[StepCost] = field(default_factory=list)  # per pack, the step cost its estimate used

    @property
    def fixed_seconds(self) -> float:
        """What the sweep costs besides training: SWEEP_S, one process start per slot, and each later pack's
        start in a reused process, spread over the slots."""
        waves = -(-self.packs // max(1, self.slots))
        return SWEEP_S + (PACK_START_S + PACK_REUSE_S * (waves - 1) if waves else 0.0)

    def lines(self) -> list[str]:
        return [
            f"configurations: {self.configurations}",
            f"packs:          {self.packs}  ({self.slots} at once)" + (f"; {self.packing}" if self.packing else ""),
            f"model-steps:    {self.model_steps}  (sum of min(train.steps, phases.budget))",
            f"estimate:       {fmt_minutes(self.seconds)}  (if the members train {self.use.trained:.0%} of their "
            + (f"budget on average; upper bound {fmt_minutes(self.upper_seconds)} if every one trains all of it)"
               if fmt_minutes(self.upper_seconds) != fmt_minutes(self.seconds) else
               "budget on average; that is also the upper bound: a pack trains until its last member stops, and "
               "with so many training their whole budget, nearly every pack runs to its end)"),
            f"budget use:     {self.use.share:.0%} of the members train their whole budget, {self.use.trained:.0%} "
            f"of it on average ({self.use.basis})",
            f"step costs:     {self.basis}",
            f"fixed costs:    {fmt_minutes(self.fixed_seconds)} of the estimate: {SWEEP_S:.0f} s per sweep (Ray up and "
            f"down, the parent run, the closing report), {PACK_START_S:.0f} s for each slot's first pack (a worker "
            f"process, its imports, the pack's runs) and {PACK_REUSE_S:g} s for each later one (the process is reused)",
        ]


def plan_budget(plan: Plan) -> int:
    """The largest budget of the plan's members: the one stored history is looked up at."""
    return max((model_steps(m.config) for p in plan.packs for m in p.members), default=0)


def fmt_minutes(seconds: float) -> str:
    """A duration a reader takes in at once: seconds, minutes up to two hours, then hours, then days (a
    paper-scale estimate read "13326.5 min")."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 48 * 3600 else f"{seconds / 86400:.1f} days"


def pack_seconds(pack: Pack, cost: StepCost, expected: bool = True, use: BudgetUse = PRIOR) -> float:
    """Start-up in a reused process + steps (a slot's first pack pays the process start on top: estimate_plan).
    Upper: every member trains its budget. Expected: the members that stop once classified
    train `use.trained` of their budget; the pack pays for each member's steps, but while more than three quarters
    of it train the whole budget (`use.share`) it sheds no one and pays for every member to the end. A
    one-member pack (a search trial) ends when its member stops."""
    steps = [model_steps(m.config) for m in pack.members]
    k, longest = len(steps), max(steps)
    start = PACK_REUSE_S + MEMBER_S * k
    stopping = [m.config.phases.stop_when_classified for m in pack.members]
    if not expected or not any(stopping):
        return start + cost.a * longest + cost.b * sum(steps)
    if k == 1:
        return start + use.trained * longest * cost.seconds(1)
    if sum(1 for s in stopping if not s) + use.share * sum(stopping) > 0.75 * k:
        return start + cost.a * longest + cost.b * sum(steps)
    trained = sum(n if not s else use.trained * n for n, s in zip(steps, stopping, strict=True))
    return start + cost.a * longest + cost.b * trained


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


def _slots(plan: Plan, cpus: int | None, gpus: int | None = None) -> int:
    return max(1, min(len(plan.packs), local_slots(plan.spec, cpus, gpus)))


def estimate_plan(plan: Plan, cpus: int | None = None, calibrate_costs: bool = True,
                  slots: int | None = None, use: BudgetUse | None = None, gpus: int | None = None) -> Estimate:
    """The plan's expected and upper-bound wall time on `cpus` cores (default: this machine's) and `gpus` cards
    (default: one), or with `slots` packs at once when given (a search's max_concurrent). A GPU spec is timed on
    this machine's card when it has one. `use`: how much of their budget the members train, as measured on stored
    runs (tracking.history); None: the prior."""
    res = plan.spec.resources
    device = res.device
    gpu_name = local_gpu_name() if device == "cuda" else None
    can_measure = device == "cpu" or gpu_name is not None
    costs: dict[str, StepCost] = {}
    by_shape: dict[tuple, StepCost] = {}  # packs that train the same shapes at the same size cost the same
    too_big = 0
    if calibrate_costs and can_measure:
        start = time.perf_counter()
        for i in _sampled(len(plan.packs), MAX_CALIBRATED):
            if (costs or too_big) and time.perf_counter() - start > CALIBRATION_S:
                break
            pack = plan.packs[i]
            shape = (pack_signature(pack.members[0].config), len(pack.members))
            if shape in by_shape:
                costs[pack.pack_id] = by_shape[shape]
                continue
            try:
                with AddressSpaceCap():
                    costs[pack.pack_id] = by_shape[shape] = calibrate([m.config for m in pack.members], device,
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
        where = f"this machine's {gpu_name}" if gpu_name else "this machine's CPU"
        basis = (f"measured on {where}: {len(by_shape)} pack shape(s) for {len(costs)} of {len(plan.packs)} packs "
                 "(a + b*K seconds per step; the others take the nearest measured pack's)")
    elif too_big:
        basis = f"{assumed} (a pack does not fit this machine's memory to measure it)"
    else:
        why = "--no-calibrate" if not calibrate_costs else "no CUDA device here to measure on"
        basis = f"{assumed} ({why})"
    use = use or PRIOR
    expected, upper, pack_costs = [], [], []
    for i, pack in enumerate(plan.packs):
        if order:
            nearest = min(order, key=lambda j: abs(j - i))
            cost = costs[plan.packs[nearest].pack_id]
        else:
            cost = flat
        pack_costs.append(cost)
        expected.append(pack_seconds(pack, cost, use=use))
        upper.append(pack_seconds(pack, cost, expected=False))
    slots = slots or _slots(plan, cpus, gpus)
    fixed = SWEEP_S + (PACK_START_S - PACK_REUSE_S if plan.packs else 0.0)  # each slot starts its process once
    return Estimate(plan.n_configs, len(plan.packs), plan.model_steps, fixed + schedule(expected, slots),
                    fixed + schedule(upper, slots), slots, basis, costs, use, packing_reason(plan, slots), pack_costs)


def pack_splitting_axes(spec) -> list[str]:
    """The swept fields whose values cannot share a pack (they change what every member computes, e.g. the `module`
    family's model.kwargs.width, or a family's field it does not pad): each value trains in packs of its own."""
    first = spec.point(0)
    base = pack_signature(spec.trial(first))
    return [key for key, values in spec.axes.items() if len(values) > 1
            and pack_signature(spec.trial({**first, key: values[1]})) != base]


def packing_reason(plan: Plan, slots: int) -> str:
    """Why the plan's packs are the size they are: the spec's pack_size, free GPU memory, or the CPU rule; and the
    swept fields that put their values in separate packs."""
    if not plan.packs:
        return ""
    split = pack_splitting_axes(plan.spec)
    apart = (f"; separate packs for each value of {', '.join(split)} (members differing in it cannot be stacked; "
             "padding is exact only for the fields a family declares per member)") if split else ""
    return _size_reason(plan, slots) + apart


def _size_reason(plan: Plan, slots: int) -> str:
    res = plan.spec.resources
    if res.pack_size != "auto":
        return f"resources.pack_size: {res.pack_size}"
    if res.gpu > 0:
        dealt = dealing_slots(plan.spec, slots)
        split = (f", dealt into at least {dealt} packs ({GPU_PACKS_PER_CARD} a card, however small resources.gpu: "
                 "a few large packs keep a card busy, many small ones leave it waiting on launches)"
                 if len(plan.packs) > 1 else "")
        if plan.gpu_free_bytes is None:
            return ("auto: no CUDA device here to size from, so the CPU rule; on a GPU, as many members as the "
                    f"card's free memory holds{split}")
        return (f"auto: as many members as {min(1.0, res.gpu):g} of the GPU's free memory "
                f"({plan.gpu_free_bytes / 2**30:.1f} GiB) holds, up to {MAX_GPU_PACK}{split}")
    with AddressSpaceCap():
        return "auto: " + cpu_pack_size_reason(plan.packs[0].members[0].config) + (
            f", split to keep {slots} slots busy" if len(plan.packs) > 1 else "")


