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
from pathlib import Path

import ray
import torch
from ray import tune

from ..engine import load_checkpoint, make_trainer, save_checkpoint
from ..engine.sizing import usable_threads
from ..engine.states import STATE_ARTIFACT
from ..phases import counted_phase
from ..search.objective import report_metrics
from ..spec import device_for, parse_trial
from ..tracking.pack_runs import PackTracker
from .context import TrialContext
from .pack_files import load_pack

CHECKPOINT_FILE = "pack.pt"
FIRST_CHUNK = 20  # steps that time a pack before its chunks are sized
SLOW_CHUNK_S = 30.0  # the longest chunk of a pack that reports after every chunk (a search trial)


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


def train_pack(config: dict) -> None:
    started = time.perf_counter()
    pack, ctx = load_pack(config["pack"]), TrialContext.from_dict(config["grokray"])
    configs = [parse_trial(m["config"], written=False) for m in pack["members"]]
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

    checkpoint = tune.get_checkpoint()
    restored_from = 0
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            load_checkpoint(trainer, Path(d) / CHECKPOINT_FILE)  # torch.load(..., weights_only=True)
        restored_from = trainer.step

    node_id = ray.get_runtime_context().get_node_id()
    tracker = PackTracker(ctx.target, pack)
    tracker.open(node_id, restored_from)
    if tracker.all_finished and not ctx.objective:
        # Stopped after every member's run had ended but before Tune heard the last report: MLflow holds the
        # work, so a resume trains none of it again. (A search trial trains on: its score needs the curves.)
        phases = [r.counted_as for r in tracker.runs]
        tune.report({"step": trainer.step, "total": trainer.total, "members": trainer.K, "members_done": trainer.K,
                     "phases": {p: phases.count(p) for p in set(phases)}, "node_id": node_id,
                     "restored_from": restored_from, "pack_done": True, "from_mlflow": True,
                     **({"member_phases": {m["key"]: r.phase for m, r in zip(pack["members"], tracker.runs,
                                                                              strict=True)}} if ctx.member_phases
                        else {}),
                     "undelivered_points": 0, "delivery_wait_s": 0.0, "spool": "", "spooled_points": 0})
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
        probed, chunk = chunk < every and train_s == chunk_s, next_chunk(chunk, chunk_s, every, min_report_s)
        if not done and (probed or time.perf_counter() - last_report < min_report_s):
            continue  # curves and checkpoints go out with the next report: MLflow and Tune both see few calls
        results = trainer.results()
        if done:  # the last chunk: MLflow first, so a stop before Tune hears it finds every run ended there
            if save_states:
                tracker.log_states(trainer.member_states(), STATE_ARTIFACT)  # before the phase tags mark them done
            tracker.finish(results, thresholds, _ended(trainer))
            t_close = time.perf_counter()
            undelivered = tracker.close()  # an outage's backlog: delivered now, or left in the spool file
            close_s = time.perf_counter() - t_close
        last_report = time.perf_counter()
        metrics = {
            "step": trainer.step,
            "total": trainer.total,
            "members": trainer.K,
            "members_done": sum(s is not None for s in trainer.stopped_at),
            "phases": _phase_counts(trainer, results, thresholds),
            "node_id": node_id,
            "restored_from": restored_from,
            "train_s": train_s,
            "mlflow_s": tracker.seconds,
            "mlflow_calls": tracker.calls,
            "trial_s": time.perf_counter() - started,
            "pack_done": done,
            "spooled_points": tracker.courier.spooled_points,  # points that waited out a tracking outage
            **({"cuda_visible_devices": placement["cuda_visible_devices"]} if device == "cuda" else {}),
        }
        if done and ctx.member_phases:
            metrics["member_phases"] = {m["key"]: r.phase for m, r in zip(pack["members"], results, strict=True)}
        if done:
            metrics["undelivered_points"] = undelivered
            metrics["delivery_wait_s"] = close_s  # after training: one try at an outage's backlog, then handed over
            metrics["spool"] = str(tracker.courier.spool.path) if undelivered else ""
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
