"""`train.precision`: the arithmetic a float32 pack's forward and backward use (fp32, tf32 or bf16).

fp32 is the reference and the CPU's default. tf32 keeps float32 tensors and lets matmuls round their inputs to
TF32 (CUDA cards since Ampere; the CPU ignores it). bf16 runs the forward's matmuls in bfloat16 under autocast;
parameters, optimizer state, losses and the accuracies stay float32 or float64. benchmarks/compare_precision.py
counts how many runs of a sweep change phase under each, against fp32.
"""

from __future__ import annotations

import contextlib

import torch

MATMUL = {"fp32": "highest", "tf32": "high", "bf16": "highest"}


def use_matmul_precision(precision: str) -> None:
    """Set the process's float32 matmul precision for this pack (a worker trains its packs one after another)."""
    torch.set_float32_matmul_precision(MATMUL[precision])


def forward_context(precision: str, device: torch.device):
    """The context a forward runs in: bf16 autocast, or nothing."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
