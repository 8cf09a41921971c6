"""Free space under --storage, where a launch keeps its checkpoints, Tune's saved state and the metrics spool.

Why: a full disk failed each pack's checkpoint and Tune's state in tracebacks (hundreds of lines), the retried
packs still ended "done" with exit 0, and no line named the disk; a longer run ended in an EOFError. A launch is
refused before it starts below START_FREE, and its driver stops it as Ctrl-C would (resumable, exit 1) when the
free space falls below RUN_FREE while it trains (run.progress.DiskWatch), saying so in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

START_FREE = 64 * 2**20  # bytes a launch needs free to start: checkpoints of a few packs, Tune's state, the spool
RUN_FREE = 32 * 2**20  # below this while it trains, the launch stops before its writes start to fail


def free_bytes(path: str | Path) -> int:
    """Free bytes on the file system that holds `path` (or its nearest existing folder: it may not exist yet)."""
    where = Path(path).resolve()
    while not where.exists() and where != where.parent:
        where = where.parent
    return shutil.disk_usage(where).free


def megabytes(n: int) -> str:
    return f"{n / 2**20:.0f} MB"


def space_problem(path: str | Path) -> str | None:
    """Why a launch cannot start writing under `path`: too little free space; or None."""
    free = free_bytes(path)
    if free >= START_FREE:
        return None
    return (f"no space left on {Path(path).resolve()}: {megabytes(free)} free; a launch needs at least "
            f"{megabytes(START_FREE)} there for its checkpoints, Tune's state and the metrics spool")
