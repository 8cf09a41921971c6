"""How many members to put in one pack (`resources.pack_size: auto`)."""

from __future__ import annotations

import os

import torch

from ..errors import SpecError
from .trainers import make_trainer, max_pack_size

CPU_WORKING_SET = 48 * 2**20  # bytes: stay near the last-level cache so stacking does not thrash memory
GPU_FRACTION = 0.5  # of free device memory, leaving room for the other packs sharing the card
MAX_PACK = 1024
MAX_GPU_PACK = 4096  # a card's cores need thousands of the toy model's members to leave its launches behind
PROBE_BYTES = 4 * 2**30  # address space a sizing probe or a calibration may add before it counts as a mistake


def usable_threads(requested: float) -> int:
    """Torch threads for `resources.cpu`, never more than this machine's cores: a spec asking for 1e5 CPUs
    would otherwise make OpenMP create 1e5 threads and crash the process (a local dry run's calibration)."""
    return max(1, min(int(requested), os.cpu_count() or 1))


def out_of_memory(exc: BaseException) -> bool:
    """Whether a probe under AddressSpaceCap failed for want of memory: torch reports a refused allocation as a
    RuntimeError ("... alloc ..."), Python as MemoryError; any other error is a real bug and must propagate."""
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and "alloc" in str(exc).lower())


class AddressSpaceCap:
    """Cap this process's address space at what it uses now plus `extra` bytes while a probe or a calibration
    builds a spec's model: a typo such as `task.p: 1000000` or `hidden: [1e9]` then fails as a MemoryError
    instead of swapping the machine to death (or getting the test runner killed)."""

    def __init__(self, extra: int = PROBE_BYTES):
        self.extra = extra
        self.saved = None

    def __enter__(self):
        try:
            import resource

            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            with open("/proc/self/statm") as f:
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            cap = used + self.extra
            if hard == resource.RLIM_INFINITY or cap < hard:
                resource.setrlimit(resource.RLIMIT_AS, (cap if soft == resource.RLIM_INFINITY else min(cap, soft),
                                                        hard))
                self.saved = (soft, hard)
        except (ImportError, OSError, ValueError):
            pass
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, self.saved)
            self.saved = None
        return False


def member_bytes(trainer) -> int:
    """Bytes one member of `trainer` needs (contracts.Trainer.member_bytes): what the sizing rules divide by."""
    return trainer.member_bytes()


def members_that_fit(need_bytes: int, free_bytes: int, gpu_fraction: float = 1.0) -> int:
    """K for a GPU: GPU_FRACTION of the card's free memory, times this pack's share of the card, over one member."""
    return int(free_bytes * GPU_FRACTION * gpu_fraction // max(1, need_bytes))


def cpu_pack_size_reason(config) -> str:
    """Why the CPU rule gives the K it gives, in words (the dry-run prints it: a plan of one-member packs is
    otherwise a mystery)."""
    cap = max_pack_size(config)
    if cap == 1:
        return f"{config.model.registry_name} trains one configuration at a time"
    need = max(1, member_bytes(make_trainer([config], device="cpu")))
    k = int(CPU_WORKING_SET // need)
    mb = f"{need / 2**20:.1f} MB per member, {CPU_WORKING_SET // 2**20} MB working set per CPU pack"
    if k <= 1:
        return f"one member per pack: {mb} (resources.pack_size: N packs more, at a cache cost)"
    return f"up to {min(k, MAX_PACK, cap or MAX_PACK)} members per pack: {mb}"


def local_gpu_free_bytes() -> int | None:
    """This process's CUDA card's free memory, or None without one."""
    return torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else None


def local_gpu_count() -> int | None:
    """This machine's CUDA cards, or None without any."""
    return torch.cuda.device_count() or None if torch.cuda.is_available() else None


def train_device_note(device: str) -> list[str]:
    """`grokray train --device`: cuda needs a CUDA device (SpecError); the CPU beside a GPU is said."""
    if device == "cuda" and not torch.cuda.is_available():
        raise SpecError("--device", "cuda requested but no CUDA device is available; allowed here: cpu")
    if device == "cpu" and torch.cuda.is_available():
        return [f"grokray: training on the CPU; --device cuda trains on the {torch.cuda.get_device_name()}"]
    return []


def local_gpu_name() -> str | None:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def auto_pack_size(config, n_configs: int, device: str = "cpu", gpu_fraction: float = 1.0,
                   free_bytes: int | None = None) -> int:
    """Pick K from a one-member probe of the model: cache-sized on CPU, memory-sized on a GPU.

    free_bytes: the GPU's free memory, measured where the packs will run (the driver of a cluster whose GPUs are
    on other nodes asks one of them; see run.cluster). None on a GPU: this process's own card, if it has one,
    else the CPU rule."""
    cap = max_pack_size(config)
    if cap == 1 or n_configs <= 1:
        return 1
    probe = make_trainer([config], device="cpu")
    need = max(1, member_bytes(probe))
    if device.startswith("cuda") and free_bytes is None:
        free_bytes = local_gpu_free_bytes()
    most = MAX_PACK
    if device.startswith("cuda") and free_bytes is not None:
        k, most = members_that_fit(need, free_bytes, gpu_fraction), MAX_GPU_PACK
    else:
        k = int(CPU_WORKING_SET // need)
    k = max(1, min(k, most, n_configs))
    return min(k, cap) if cap else k


def _within_probe(config, build):
    """build() under the probe's memory cap; a configuration that cannot fit is a SpecError naming what to change."""
    try:
        with AddressSpaceCap(PROBE_BYTES):
            return build()
    except (MemoryError, RuntimeError) as exc:
        if not out_of_memory(exc):
            raise
        raise SpecError("model", f"one configuration ({config.task.registry_name} x {config.model.registry_name}) "
                        f"does not fit in {PROBE_BYTES // 2**30} GiB; check the task size (e.g. task.p) and the "
                        "model's widths") from None


def build_within_probe(config) -> None:
    """Build one configuration's trainer on the CPU under the probe's cap: planning's check that it fits at all
    (the one place, with fitted_pack_size, where planning allocates)."""
    _within_probe(config, lambda: make_trainer([config], device="cpu"))


def fitted_pack_size(config, n: int, device: str, gpu_fraction: float, free_bytes: int | None) -> int:
    """auto_pack_size under the probe's cap."""
    return _within_probe(config, lambda: auto_pack_size(config, n, device, gpu_fraction=gpu_fraction,
                                                        free_bytes=free_bytes))
