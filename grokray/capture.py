"""How a pack's training step runs: eager (the reference), or captured by torch.compile once and reused.

A pack's step is a few hundred small kernels (forward, backward, one optimizer update per group): on a GPU the
launches, not the arithmetic, bound it. Captured, the forward with its loss and measured metrics becomes one
compiled graph (its backward another), and each group's update a third; on CUDA the forward and backward also
replay as CUDA graphs (torch.compile's "reduce-overhead"). The eager step stays the reference the tests hold the
captured one to, and the fallback where compiling fails (said once per process).

`train.capture: auto` picks per device from bench_pack's side-by-side measurements (benchmarks/README.md): on
the CPU compiling does not pay (the step is already a handful of fused or memory-bound calls, and each new pack
shape costs seconds of compilation); on CUDA it stays eager until the prepared GPU run has measured it.
"""

from __future__ import annotations

import sys
import warnings

import torch

AUTO = {"cpu": "eager", "cuda": "eager"}  # measured choices per device type (benchmarks/README.md, issue 50)
RECOMPILE_LIMIT = 64  # compiled shapes one function may keep: pack sizes in a worker, and each compaction's
_said: set[str] = set()


def allow_recompiles(limit: int = RECOMPILE_LIMIT) -> None:
    """Let one compiled function keep `limit` shapes. torch 2.13 has no public setting for it
    (torch._dynamo.config.recompile_limit, default 8): a worker that trains packs of several sizes, each
    compacting a few times, passes 8, after which dynamo would run the rest eagerly with only a log line.
    tests/test_capture.py fails by name if torch renames it."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, limit)


def capture_mode(requested: str, device: torch.device) -> str:
    """'eager' or 'compiled' for `train.capture` on `device`."""
    if requested != "auto":
        return requested
    return AUTO.get(device.type, "eager")


def say_once(message: str) -> None:
    """One line on stderr per process: a sweep's packs share a worker, and each would repeat it."""
    if message not in _said:
        _said.add(message)
        print(f"grokray: {message}", file=sys.stderr, flush=True)


class Captured:
    """`fn` compiled on first use, or `fn` itself if compiling it fails (the step then runs eagerly, said once).

    Parameters keep static shapes under torch.compile, so each pack size (a new pack, or one that compacted)
    compiles once more: packs compact only when half of them stopped (engine/pack.py), at most log2 K times.
    `cudagraphs` (CUDA, a function that mutates none of its inputs): replay it as a CUDA graph.
    """

    def __init__(self, fn, what: str, cudagraphs: bool = False):
        self.eager, self.what = fn, what
        mode = "reduce-overhead" if cudagraphs else None
        allow_recompiles()
        self.compiled = torch.compile(fn, dynamic=None, mode=mode)
        self.failed = False

    def __call__(self, *args, **kwargs):
        if self.failed:
            return self.eager(*args, **kwargs)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\._dynamo")
                return self.compiled(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any compiler failure: the eager step computes the same thing
            self.failed = True
            say_once(f"train.capture: could not compile {self.what} ({type(exc).__name__}: {str(exc)[:200]}); "
                     "it runs eagerly")
            return self.eager(*args, **kwargs)


def step_boundary(device: torch.device) -> None:
    """Tell CUDA graph trees a new training step begins, so last step's graph outputs may be overwritten."""
    if device.type == "cuda":
        torch.compiler.cudagraph_mark_step_begin()
