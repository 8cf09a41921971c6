"""Keep freed CPU buffers in the process from one step to the next.

glibc hands large freed blocks back to the kernel (blocks above a dynamic mmap threshold, and the top of the heap
past a trim threshold), so a training step that allocates the same few-MB activations every time page-faults
them all in again: about 1,000 faults per step for a pack of 32 quadratic nets at p = 23, 1.1-1.4x of its wall
time on this project's 2-core VM. Raising both thresholds makes free() keep the blocks for the next step, as a
caching allocator would. The cost is memory that stays mapped after a peak: at most the largest step's working set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers
MMAP_THRESHOLD = 32 << 20  # the largest value glibc accepts for it on 64-bit
TRIM_THRESHOLD = 256 << 20
_in_force: bool | None = None


def keep_freed_memory() -> bool:
    """Set the two thresholds once per process (Linux with glibc only); returns whether they are in force."""
    global _in_force
    if _in_force is None:
        _in_force = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                _in_force = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
                    libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
                )
            except (OSError, AttributeError):  # musl and others have no mallopt: keep their defaults
                pass
    return _in_force
