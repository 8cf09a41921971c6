"""Cheap per-member diagnostics that families log as curves beside the engine's metrics.

They are computed from the stacked weights alone (no forward pass), whenever the trainer measures the weight
norm (evaluation and record steps, never the other training steps), and cost about as much as it.
"""

from __future__ import annotations

import torch


def fourier_concentration(w: torch.Tensor, p: int) -> torch.Tensor:
    """How much of each column of `w` [K, n >= p, c] is one sinusoid over Z_p (symbols along dim 1), [K].

    Per column: the share of its non-constant power in its strongest frequency (k and p - k folded together);
    per member: the power-weighted mean over columns. It is 1 when every column (an embedding dimension, or a
    hidden unit's weights on one operand) is a single Fourier mode, the circuit grokked modular nets end in
    (Nanda et al., Gromov), and about 0.3 for Gaussian weights at p = 23.
    """
    power = torch.fft.rfft(w[:, :p].double(), dim=1).abs().pow(2)[:, 1:]  # [K, p // 2, c], k = 1 .. p // 2
    power = power * 2  # each k < p/2 stands for k and p - k ...
    if p % 2 == 0:
        power[:, -1] /= 2  # ... but k = p/2 is its own partner
    total = power.sum(dim=(1, 2))
    top = power.amax(dim=1).sum(dim=1)
    return torch.where(total > 0, top / total.clamp(min=torch.finfo(total.dtype).tiny), torch.nan)


def operand_columns(w: torch.Tensor, p: int, operands: int = 2) -> torch.Tensor:
    """A first layer on one-hot(a) ⊕ one-hot(b) [K, operands·p, c] as [K, p, operands·c]: each hidden unit's
    weights on each operand become one column over the residues."""
    return torch.cat([w[:, i * p:(i + 1) * p] for i in range(operands)], dim=2)


def teacher_alignment(w: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean |cos| between the first-layer weight vectors w [K, d, N] and the teacher direction [d], [K]."""
    cos = (teacher.to(w.dtype) @ w).abs() / w.norm(dim=1).clamp(min=1e-12)
    return cos.mean(dim=1)
