"""The Ray Tune function trainable of every driver: one Tune trial trains one pack (a search trial: a pack of one).

It rebuilds the pack's configurations from plain dicts, restores the last checkpoint if Tune hands one over
(a retry after a worker died, or --resume) and trains in chunks of `checkpoint_every` steps, shorter where a
chunk would outlast `min_report_s` (a big model, a busy machine: the progress line must not go quiet). After a chunk, if
`min_report_s` (default 30 s) passed since the last report (or the pack is done), it logs the new curve points
to MLflow, saves a checkpoint and reports to Tune: at most one result per pack per `min_report_s`, as Tune's
guidance asks. Tune only needs progress and a checkpoint; MLflow carries the curves.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import ray
import torch
from ray import tune

from ..engine import CheckpointDamaged, load_checkpoint, make_trainer, save_checkpoint
from ..engine.sizing import usable_threads
from ..engine.states import STATE_ARTIFACT
from ..objectives import report_metrics
from ..phases import counted_phase
from ..spec.build import device_for
from ..spec.trial import TrialConfig
from ..spec.wire import load_pack
from ..tracking.pack_runs import PackTracker
from ..user_code import add_code_paths
from .context import TrialContext

CHECKPOINT_FILE = "pack.pt"
FIRST_CHUNK = 20  # steps that time a pack before its chunks are sized
SLOW_CHUNK_S = 30.0  # the longest chunk of a pack that reports after every chunk (a search trial)
FIT_SHARE = 0.1  # with the default report interval, a pack reports again after this share of its time so far ...
FIT_FLOOR_S = 5.0  # ... but at most once per this many seconds


def _phase_counts(trainer, results, thresholds) -> dict[str, int]:
    counts: dict[str, int] = {}
    for stopped, result, threshold in zip(trainer.stopped_at, results, thresholds, strict=True):
        if stopped is not None:
            phase = counted_phase(result.phase, result.ideal_val_acc, threshold)
            counts[phase] = counts.get(phase, 0) + 1
    return counts


def next_chunk(chunk: int, chunk_s: float, every: int, min_report_s: float) -> int:
    """Steps of the next chunk: `every`, cut so one chunk lasts about `min_report_s` (a search, which reports every
    chunk: SLOW_CHUNK_S), so a slow pack (a big model, a busy machine) still reports each interval. The first
    chunk (chunk 0) is a short probe that times the pack."""
    if chunk == 0:
        return min(every, FIRST_CHUNK)
    target = min_report_s if min_report_s > 0 else SLOW_CHUNK_S
    return min(every, max(1, int(chunk * target / max(chunk_s, 1e-9))))


def _ended(trainer) -> list[float | None]:
    """When each stopped member stopped (time.time()); now for one restored from a checkpoint that did not say."""
    now = time.time()
    return [None if step is None else (wall or now) for step, wall in
            zip(trainer.stopped_at, trainer.stopped_wall, strict=True)]


def gpu_placement() -> dict:
    """Where Ray put this trial: its GPU ids, the CUDA_VISIBLE_DEVICES Ray set for it, and its GPU share."""
    import os

    assigned = ray.get_runtime_context().get_assigned_resources()
    return {"gpu_ids": [str(i) for i in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "gpu_share": float(assigned.get("GPU", 0.0))}


def fitted_report_s(cap_s: float, trained_s: float) -> float:
    """The report interval of a pack that has trained `trained_s` seconds: a tenth of that, at least FIT_FLOOR_S
    and at most `cap_s`. No forecast of the pack's life is needed (its members stop when classified): a pack
    reports every 5 s at first and every 30 s from its fifth minute, so a 3-minute demo's progress line moves
    every few seconds instead of holding a count for a minute, and a long sweep keeps the cap."""
    return min(cap_s, max(FIT_FLOOR_S, FIT_SHARE * trained_s))


@dataclass(frozen=True)
class PackReport:
    """The one builder of a pack's Tune results: what every report carries, plus its end (`closed`: the points
    left undelivered, the seconds the close took, the spool left) and its timings where it trained."""

    pack: dict
    ctx: TrialContext
    node_id: str
    restored_from: int
    placement: dict  # a CUDA pack's placement (gpu_placement); {} on the CPU
    set_aside: str = ""  # the line saying its checkpoint was damaged and set aside (the driver prints it once)

    def result(self, trainer, phases: dict[str, int], member_phases: list[str], *, members_done: int, done: bool,
               closed: tuple[int, float, str] | None = None, timing=None, from_store: bool = False) -> dict:
        out = {"step": trainer.step, "total": trainer.total, "members": trainer.K, "members_done": members_done,
               "phases": phases, "node_id": self.node_id, "restored_from": self.restored_from, "pack_done": done}
        if timing is not None:
            train_s, tracker, started = timing
            out |= {"train_s": train_s, "tracker_s": tracker.seconds, "tracker_calls": tracker.calls,
                    "trial_s": time.perf_counter() - started,
                    "spooled_points": tracker.courier.spooled_points}  # points that waited out an outage
        if from_store:
            out |= {"from_store": True, "spooled_points": 0}
        if self.placement:
            out["cuda_visible_devices"] = self.placement["cuda_visible_devices"]
        if self.set_aside:
            out["checkpoint_set_aside"] = self.set_aside
        if done and self.ctx.member_phases:
            out["member_phases"] = {m["key"]: p for m, p in zip(self.pack["members"], member_phases, strict=True)}
        if closed is not None:  # after training: one try at an outage's backlog, then handed over
            out |= dict(zip(("undelivered_points", "delivery_wait_s", "spool"), closed, strict=True))
        return out


def pack_trainer(pack: dict, ctx: TrialContext, configs: list):
    """(trainer, its device, where Ray placed it), the trainer continued from Tune's checkpoint if it hands one
    over (a retry after a worker died, or --resume)."""
    torch.set_num_threads(usable_threads(ctx.cpu))
    placement = gpu_placement()
    device = device_for(ctx.gpu)
    if device == "cuda" and not torch.cuda.is_available():
        # Ray placed this pack on a GPU its torch cannot open: fail this trial with the reason, not the sweep.
        raise RuntimeError(f"pack {pack['pack_id']} was placed on GPU {placement['gpu_ids']} "
                           f"(CUDA_VISIBLE_DEVICES={placement['cuda_visible_devices']!r}, "
                           f"{placement['gpu_share']:g} GPU requested) but torch {torch.__version__} on node "
                           f"{ray.get_runtime_context().get_node_id()[:12]} cannot open CUDA")
    trainer = make_trainer(configs, device=device)
    checkpoint, set_aside = tune.get_checkpoint(), ""
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            try:
                load_checkpoint(trainer, Path(d) / CHECKPOINT_FILE)  # torch.load(..., weights_only=True)
            except CheckpointDamaged as exc:
                set_aside = set_aside_damaged(Path(d) / CHECKPOINT_FILE, pack["pack_id"], str(exc))
                trainer, earlier = restore_earlier(configs, device, Path(d))
                set_aside += (f"; it continues from its previous checkpoint, {earlier.name} (step {trainer.step})"
                              if earlier else "; the pack trains again from step 0")
    return trainer, device, placement, set_aside


def restore_earlier(configs: list, device: str, damaged: Path):
    """(trainer, the checkpoint folder it continued from): the newest other checkpoint of this trial that loads
    and matches its digest (Tune keeps two beside each other on a local or shared path), else a fresh trainer and
    None. A load that failed half-way leaves a trainer half-restored, so each try starts from a new one."""
    for folder in sorted((p for p in damaged.parent.glob("checkpoint_*") if p.is_dir() and p != damaged),
                         reverse=True):
        trainer = make_trainer(configs, device=device)
        try:
            load_checkpoint(trainer, folder / CHECKPOINT_FILE)
            return trainer, folder
        except CheckpointDamaged:
            continue
    return make_trainer(configs, device=device), None


def set_aside_damaged(path: Path, pack_id: str, why: str) -> str:
    """Keep a damaged checkpoint under another name, beside its checkpoint folder (Tune deletes old checkpoint folders
    as new ones come); the start of the one line that says so (the caller says where the pack continues from: its
    runs keep the points already stored, and the tracker sends only later ones)."""
    kept = path.parent.parent / f"{path.parent.name}.{path.name}.damaged"
    try:
        path.replace(kept)
        where = f"set aside as {kept}"
    except OSError:
        where = f"left at {path}"
    return f"grokray: pack {pack_id}: its checkpoint is damaged ({why}); {where}"


def close_pack(tracker: PackTracker, trainer, results, thresholds, save_states: bool) -> tuple[int, float, str]:
    """The last chunk's MLflow side, before Tune hears of it (a stop in between finds every run ended there):
    final states, phase tags and ends, then one try at an outage's backlog. Returns PackReport's `closed`."""
    if save_states:
        tracker.log_states(trainer.member_states(), STATE_ARTIFACT)  # before the phase tags mark them done
    tracker.finish(results, thresholds, _ended(trainer))
    t_close = time.perf_counter()
    undelivered = tracker.close()  # delivered now, or left in the spool file for the driver
    return undelivered, time.perf_counter() - t_close, str(tracker.courier.spool.path) if undelivered else ""


def train_pack(config: dict) -> None:
    started = time.perf_counter()
    pack, ctx = load_pack(config["pack"]), TrialContext.from_dict(config["grokray"])
    add_code_paths(ctx.code_paths)  # the user's families and tasks import here as on the driver
    configs = [TrialConfig.from_dict(m["config"]) for m in pack["members"]]
    trainer, device, placement, set_aside = pack_trainer(pack, ctx, configs)
    restored_from = trainer.step

    node_id = ray.get_runtime_context().get_node_id()
    tracker = PackTracker(ctx.target, pack)
    tracker.open(node_id, restored_from, params_now=bool(ctx.objective))  # a study's ASHA may stop it at once
    report = PackReport(pack, ctx, node_id, restored_from, placement if device == "cuda" else {}, set_aside)
    if tracker.all_finished and not ctx.objective:
        # Stopped after every member's run had ended but before Tune heard the last report: MLflow holds the
        # work, so a resume trains none of it again. (A search trial trains on: its score needs the curves.)
        phases = [r.counted_as for r in tracker.runs]
        tune.report(report.result(trainer, {p: phases.count(p) for p in set(phases)}, [r.phase for r in tracker.runs],
                                  members_done=trainer.K, done=True, from_store=True, closed=(0, 0.0, "")))
        return
    thresholds = [c.phases.threshold for c in configs]
    save_states = ctx.final_state
    if save_states:
        trainer.compact = False  # finished members keep their rows, so their final parameters are still there

    every = max(1, ctx.checkpoint_every)
    chunk = next_chunk(0, 0.0, every, ctx.min_report_s)
    min_report_s = ctx.min_report_s
    last_report = -float("inf")  # the first full chunk reports (the probe before it does not)
    train_s = 0.0
    while True:
        t0 = time.perf_counter()
        done = trainer.run(until=trainer.step + chunk)
        chunk_s = time.perf_counter() - t0
        train_s += chunk_s
        # the first chunk (train_s is its time alone) may be the probe: it only times the pack, nothing to report
        probed = chunk < every and train_s == chunk_s
        if ctx.fit_reports:
            min_report_s = fitted_report_s(ctx.min_report_s, train_s)
        chunk = next_chunk(chunk, chunk_s, every, min_report_s)
        if not done and (probed or time.perf_counter() - last_report < min_report_s):
            continue  # curves and checkpoints go out with the next report: MLflow and Tune both see few calls
        results = trainer.results()
        closed = close_pack(tracker, trainer, results, thresholds, save_states) if done else None
        last_report = time.perf_counter()
        metrics = report.result(trainer, _phase_counts(trainer, results, thresholds), [r.phase for r in results],
                                members_done=sum(s is not None for s in trainer.stopped_at), done=done,
                                closed=closed, timing=(train_s, tracker, started))
        if ctx.objective:
            metrics.update(report_metrics(list(ctx.objective), ctx.penalty, configs, results))
            metrics["mlflow_run_id"] = ",".join(tracker.run_ids.get(m["key"], "") for m in pack["members"])
        with tempfile.TemporaryDirectory() as d:
            save_checkpoint(trainer, Path(d) / CHECKPOINT_FILE)
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))
        if done:
            return
        # Any other chunk: Tune holds its checkpoint before MLflow shows its steps (report returns once the driver
        # took it), so a Ctrl-C after a pack's first curve points continues the pack instead of starting it over.
        if save_states:
            tracker.log_curves(results)
        else:  # a member that stopped ends now, at its own stop time, with its phase tag
            tracker.finish(results, thresholds, _ended(trainer))
