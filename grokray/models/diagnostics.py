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


# Liu et al.'s RQI tolerance, as their toy code applies it: embeddings standardized per dimension (zero mean,
# unit std over the symbols), and a parallelogram is present when the mean over dimensions of the squared gap
# (e_i + e_j) - (e_m + e_n) is below it. RQI passing 0.95 is the representation having formed.
RQI_TOLERANCE = 0.01
RQI_THRESHOLD = 0.95


def addition_parallelograms(p: int) -> torch.Tensor:
    """Every couple of distinct unordered pairs (i, j), (m, n) of 0..p-1 with i + j = m + n, as [Q, 4] long rows
    (i, j, m, n): the parallelograms of the whole addition table, RQI's denominator."""
    pairs = [(i, j) for i in range(p) for j in range(i, p)]
    quads = [(*a, *b) for k, a in enumerate(pairs) for b in pairs[k + 1:] if sum(a) == sum(b)]
    return torch.tensor(quads, dtype=torch.long).reshape(len(quads), 4)


def representation_quality(emb: torch.Tensor, quads: torch.Tensor, tol: float = RQI_TOLERANCE) -> torch.Tensor:
    """Liu et al.'s representation quality index per member: the share of `quads` [Q, 4] present in the
    embeddings `emb` [K, p, d] within `tol` (see RQI_TOLERANCE), [K]. 1 for e_i = a + i*b; about 0 at random."""
    e = emb.double()
    e = (e - e.mean(dim=1, keepdim=True)) / e.std(dim=1, keepdim=True).clamp(min=torch.finfo(e.dtype).tiny)
    gap = e[:, quads[:, 0]] + e[:, quads[:, 1]] - e[:, quads[:, 2]] - e[:, quads[:, 3]]  # [K, Q, d]
    return (gap.pow(2).mean(dim=2) < tol).double().mean(dim=1)
