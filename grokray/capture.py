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

import torch

AUTO = {"cpu": "eager", "cuda": "eager"}  # measured choices per device type (benchmarks/README.md, issue 50)
RECOMPILE_LIMIT = 64  # guard sets one compiled function may keep (families, dtypes, modes in one worker)
_said: set[str] = set()


def configure_compiler(limit: int = RECOMPILE_LIMIT) -> None:
    """Two settings torch 2.13 offers only in its private torch._dynamo.config (tests/test_capture.py fails by
    name if torch renames them):
    - force_parameter_static_shapes off: parameters' shapes may be symbolic like every other input's, so a pack
      of another size (a new pack, or one that compacted) reuses the compiled code after at most one recompile
      with the member axis dynamic, instead of compiling again at every size;
    - recompile_limit raised from 8, after which dynamo would run the rest eagerly with only a log line."""
    config = torch._dynamo.config
    config.force_parameter_static_shapes = False
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

    dynamic=None: the first pack size compiles static, a second one recompiles once with the member axis dynamic,
    and every later size reuses that (configure_compiler); a stopped member is masked by its learning rate until
    a quarter of the pack has stopped, as in eager, so a pack compacts at most log_{4/3} K times.
    `cudagraphs` (CUDA, a function that mutates none of its inputs): replay it as a CUDA graph.
    """

    def __init__(self, fn, what: str, cudagraphs: bool = False):
        self.eager, self.what = fn, what
        mode = "reduce-overhead" if cudagraphs else None
        configure_compiler()
        self.compiled = torch.compile(fn, dynamic=None, mode=mode)
        self.failed = False

    def __call__(self, *args, **kwargs):
        if self.failed:
            return self.eager(*args, **kwargs)
        try:
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
