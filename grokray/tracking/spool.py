"""The write-ahead spool of a tracking outage, as files: one JSON line per batch a worker or the driver could not
deliver, written (and fsynced) before training goes on, and a `delivered` line once it went out. What is in a
batch, how a spool file is read back (each line checked; a line torn by a crash is skipped), and what a launch's
spool folder holds.
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
        start = self._start()
        with self.path.open("a") as f:
            f.write(start + batch.to_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.pending += 1

    def mark(self, *batch_ids: str) -> None:
        start = self._start()
        with self.path.open("a") as f:
            f.write(start + "".join(json.dumps({"delivered": i}) + "\n" for i in batch_ids))
        self.pending -= len(batch_ids)
        if self.pending <= 0 and not undelivered(self.path):
            self.path.unlink(missing_ok=True)

    def _start(self) -> str:
        """A newline where the file ends in a line a crash cut short: else the next record would join the torn
        line and be lost with it."""
        try:
            with self.path.open("rb") as f:
                if f.seek(0, os.SEEK_END) == 0:
                    return ""
                f.seek(-1, os.SEEK_END)
                return "" if f.read(1) == b"\n" else "\n"
        except FileNotFoundError:
            return ""


@dataclass
class SpoolRead:
    """One spool file as read back: its undelivered batches in order, the numbers of its whole lines that are no
    spool record (damaged, or another program's file), and how many lines were records."""

    batches: list[Batch]
    damaged: list[int]
    records: int


def read_spool(path: str | Path) -> SpoolRead:
    """Every line checked as it is read: a line that is not a batch or a `delivered` mark grokray wrote is named
    in `damaged` and skipped; what follows the last newline (a write a crash cut short) is dropped silently, since
    that batch was never acknowledged."""
    try:
        lines = Path(path).read_bytes().split(b"\n")
    except (FileNotFoundError, IsADirectoryError):
        return SpoolRead([], [], 0)
    lines.pop()  # b"" after a whole last line, or a torn one
    batches: dict[str, Batch] = {}
    done: set[str] = set()
    damaged: list[int] = []
    for number, raw in enumerate(lines, 1):
        rec = _record(raw)
        if rec is None:
            damaged.append(number)
        elif "delivered" in rec:
            done.add(rec["delivered"])
        else:
            batches[rec["batch"]] = Batch.from_record(rec)
    return SpoolRead([b for i, b in batches.items() if i not in done], damaged, len(lines) - len(damaged))


def _record(raw: bytes) -> dict | None:
    """A spool line's record, or None where the line is not one as Batch.to_json / Spool.mark write it."""
    try:
        rec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(rec, dict):
        return None
    if "delivered" in rec:
        return rec if isinstance(rec["delivered"], str) else None
    metrics, strings = rec.get("metrics"), (rec.get("batch"), rec.get("run_id"))
    if not all(isinstance(v, str) for v in strings) or not isinstance(metrics, list):
        return None
    if not all(_is_point(m) for m in metrics):
        return None
    for name in ("params", "tags", "texts", "create"):
        if rec.get(name) is not None and not isinstance(rec[name], dict):
            return None
    return rec


def _is_point(m) -> bool:
    """[key, value, timestamp ms, step]."""
    return (isinstance(m, list) and len(m) == 4 and isinstance(m[0], str)
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in m[1:]))


def undelivered(path: str | Path) -> list[Batch]:
    """The batches of one spool file without a `delivered` line, in the order they were spooled."""
    return read_spool(path).batches


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
