"""The write-ahead spool of a tracking outage, as files: one JSON line per batch a worker or the driver could not
deliver, written (and fsynced) before training goes on, and a `delivered` line once it went out. What is in a
batch, how a spool file is read back (a line torn by a crash is skipped), and what a launch's spool folder holds.
Sending is delivery.py's."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

SPOOL_DIRNAME = "undelivered"
LAUNCH_SPOOL_PREFIX = "launch-"  # the driver's own spool file (the parent's batches), replayed before the packs'
HANDED_OVER = ".done.jsonl"  # a finished pack's spool file: the driver delivers it, the pack's slot is free


@dataclass
class Batch:
    """What one report sends for one run. A run that could not be created yet (the server was away when its pack
    opened) has no `run_id`: its batches carry the trial `key` and what `create` needs, and delivery finds the
    run by trial key or creates it, once."""

    run_id: str
    metrics: list = field(default_factory=list)  # [key, value, timestamp_ms, step]
    params: dict = field(default_factory=dict)
    tags: dict = field(default_factory=dict)
    terminate: str | None = None  # "FINISHED" etc.: end the run after the batch
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    key: str = ""  # trial key, for a batch whose run is not created yet
    create: dict | None = None  # {experiment_id, run_name, tags, start_time} of that run
    end_time: int | None = None  # ms: when the run's own work ended (a pack member stops before its pack)
    texts: dict = field(default_factory=dict)  # artifact path -> text (the parent's spec, an adaptive round record)

    @property
    def points(self) -> int:
        return len(self.metrics)

    def to_json(self) -> str:
        return json.dumps({"batch": self.id, "run_id": self.run_id, "metrics": self.metrics, "params": self.params,
                           "tags": self.tags, "terminate": self.terminate, "key": self.key, "create": self.create,
                           "end_time": self.end_time, "texts": self.texts})

    @classmethod
    def from_record(cls, rec: dict) -> Batch:
        return cls(run_id=rec["run_id"], metrics=[list(m) for m in rec["metrics"]], params=rec.get("params") or {},
                   tags=rec.get("tags") or {}, terminate=rec.get("terminate"), id=rec["batch"],
                   key=rec.get("key") or "", create=rec.get("create"), end_time=rec.get("end_time"),
                   texts=rec.get("texts") or {})


MERGE_MAX_POINTS = 5_000  # one merged delivery: a read of the run's stored steps and up to 5 writes of 1,000


def head_group(batches: list[Batch]) -> list[int]:
    """Indices of the first batch and the later batches of its run that can go out with it as one: in their
    order, up to MERGE_MAX_POINTS points, ending at the run's terminating batch. A backlog of many small reports
    then costs a request per run, not two per report; each run's own order is kept (its points stay in step
    order, which replay's step check relies on), the order between runs is not needed. Only a pack member's
    batches merge: each carries its trial key, while its run id may be learnt between two of them."""
    head = batches[0]
    group, points = [0], head.points
    for i in range(1, len(batches) if head.key else 1):
        if batches[group[-1]].terminate:
            break
        b = batches[i]
        if b.key != head.key:
            continue
        if points + b.points > MERGE_MAX_POINTS:
            break  # nothing of this run may go ahead of b
        group.append(i)
        points += b.points
    return group


def merged(group: list[Batch]) -> Batch:
    """One batch standing for a run's consecutive batches: their points in order, their params, tags and texts
    (a later value wins, as it would sent one by one), the last one's end."""
    if len(group) == 1:
        return group[0]
    run_id = next((b.run_id for b in group if b.run_id), "")
    last = group[-1]
    return Batch(run_id, [m for b in group for m in b.metrics], {k: v for b in group for k, v in b.params.items()},
                 {k: v for b in group for k, v in b.tags.items()}, last.terminate, id=group[0].id, key=group[0].key,
                 create=None if run_id else group[0].create, end_time=last.end_time,
                 texts={k: v for b in group for k, v in b.texts.items()})


class Spool:
    """One JSON-lines file: a line per undelivered batch, and a `{"delivered": id}` line once it went out."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.pending = 0  # spooled batches not yet marked delivered

    def append(self, batch: Batch) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(batch.to_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.pending += 1

    def mark(self, *batch_ids: str) -> None:
        with self.path.open("a") as f:
            f.write("".join(json.dumps({"delivered": i}) + "\n" for i in batch_ids))
        self.pending -= len(batch_ids)
        if self.pending <= 0 and not undelivered(self.path):
            self.path.unlink(missing_ok=True)


def undelivered(path: str | Path) -> list[Batch]:
    """The batches of one spool file without a `delivered` line, in the order they were spooled."""
    batches: dict[str, Batch] = {}
    done: set[str] = set()
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a crash: that batch was never acknowledged
            continue
        if "delivered" in rec:
            done.add(rec["delivered"])
        else:
            batches[rec["batch"]] = Batch.from_record(rec)
    return [b for i, b in batches.items() if i not in done]


def spool_files(directory: str | Path) -> list[Path]:
    """The spool files of one launch, the launch's own (its parent's batches) first: a parent made late must
    exist before its children can be found or made."""
    directory = Path(directory)
    files = sorted(directory.glob("*.jsonl")) if directory.is_dir() else []
    return sorted(files, key=lambda p: not p.name.startswith(LAUNCH_SPOOL_PREFIX))


def pending_points(directory: str | Path) -> tuple[int, int]:
    """(batches, metric points) not yet delivered under a spool directory."""
    batches = [b for p in spool_files(directory) for b in undelivered(p)]
    return len(batches), sum(b.points for b in batches)
