"""Recursive Feature Machine: kernel ridge regression whose Mahalanobis metric M is learned from the AGOP.

Radhakrishnan et al. (2024); grokking of modular arithmetic by Mallinar et al. (rfm-grokking-modular-arithmetic),
symmetry splits by Tomàs Bernal et al. (rfm-symmetry-breaking). Input one-hot(a) ⊕ one-hot(b) (2p dims), target
one-hot(answer). Iteration t, starting from M_0 = I:

    α_t     = (K_M + ridge·I)⁻¹ Y                     kernel ridge regression on the training points
    f_t(x)  = Σ_i α_t,i K_M(x, x_i)                    measured here: iteration t is "step" t of the curve
    M_{t+1} = AGOP(f_t)^power,  AGOP = mean_j J(x_j)ᵀ J(x_j),  J = ∂f_t/∂x  (centred: J minus its mean)

Kernels, with ‖v‖²_M = vᵀMv: gaussian exp(−‖x−z‖²_M / 2L²), laplace exp(−‖x−z‖_M / L), quadratic (xᵀMz)².
Iterations play the role of optimizer steps, so crossing steps, phases, budgets and resume work unchanged.
There are no parameters to stack, so an RFM pack holds exactly one member (`max_pack_size = 1`), trained by
engine.rfm.RfmTrainer (the same Trainer contract as the PackTrainer, with iterations as steps). This module holds
the family's config and mathematics; it imports nothing of the engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from ..spec.blocks import bounded
from . import MODELS

CHUNK = 2**22  # elements of one [rows, classes, dims] gradient block in the AGOP


@dataclass
class RfmConfig:
    kernel: Literal["gaussian", "laplace", "quadratic"] = "gaussian"
    bandwidth: float = bounded(2.5, gt=0.0, doc="L of the gaussian and laplace kernels")
    ridge: float = bounded(0.0, ge=0.0, doc="added to the kernel diagonal; 0 interpolates")
    agop_power: float = bounded(0.5, gt=0.0, doc="M = AGOP ** agop_power")
    centered: bool = True  # subtract the mean gradient over the training inputs before the outer product


# -- the algorithm: pure functions of tensors ----------------------------------------------------------------------
def kernel_matrix(cfg: RfmConfig, x: torch.Tensor, z: torch.Tensor, M: torch.Tensor):
    """K[j, i] = k_M(x_j, z_i), and W, c with ∂k_M(x_j, z_i)/∂x_j = c·W[j, i]·M(x_j − z_i) (quadratic: M z_i)."""
    xm = x @ M
    inner = xm @ z.T
    if cfg.kernel == "quadratic":
        return inner**2, inner, 2.0
    d2 = ((xm * x).sum(1, keepdim=True) + ((z @ M) * z).sum(1) - 2 * inner).clamp_(min=0)
    L = cfg.bandwidth
    if cfg.kernel == "gaussian":
        K = torch.exp(-d2 / (2 * L * L))
        return K, K, -1.0 / (L * L)
    dist = d2.sqrt()
    K = torch.exp(-dist / L)
    return K, torch.where(dist > 1e-10, K / dist.clamp(min=1e-10), 0.0), -1.0 / L  # gradient 0 at x = z


def solve(K: torch.Tensor, y: torch.Tensor, ridge: float) -> torch.Tensor:
    """α with (K + ridge·I) α = y; a singular K (an M of low rank merges points) falls back to the pseudo-inverse."""
    if ridge > 0:
        K = K + ridge * torch.eye(len(K), dtype=K.dtype, device=K.device)
    chol, info = torch.linalg.cholesky_ex(K)  # K is symmetric PSD: Cholesky is twice as fast as LU
    if int(info) == 0:
        alpha = torch.cholesky_solve(y, chol)
        if torch.isfinite(alpha).all():
            return alpha
    return torch.linalg.pinv(K, hermitian=True) @ y


def agop(cfg: RfmConfig, x: torch.Tensor, alpha: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """mean_j J(x_j)ᵀJ(x_j) of f(x) = Σ_i α_i k_M(x, x_i) over the training inputs x, with J the [classes, dims]
    Jacobian. J_j = G_j M with G_j = c·[(Wα)_j ⊗ x_j − Σ_i W_ji α_i ⊗ x_i]: built in row chunks, and the second
    term column by column of x, which costs n·nnz(x)·classes instead of n²·classes·dims for one-hot inputs."""
    _, W, c = kernel_matrix(cfg, x, x, M)
    n, d = x.shape
    k = alpha.shape[1]
    cols = [(j, x[:, j].nonzero().squeeze(1)) for j in range(d)]
    gram = torch.zeros((d, d), dtype=x.dtype, device=x.device)
    total = torch.zeros((k, d), dtype=x.dtype, device=x.device)
    rows = max(1, CHUNK // (k * d))
    for start in range(0, n, rows):
        w = W[start : start + rows]
        G = torch.zeros((len(w), k, d), dtype=x.dtype, device=x.device)
        for j, nz in cols:
            if len(nz):
                G[:, :, j] = -(w[:, nz] @ (alpha[nz] * x[nz, j : j + 1]))
        if cfg.kernel != "quadratic":  # the (x_j − x_i) form: + (Wα)_j ⊗ x_j
            G += (w @ alpha).unsqueeze(2) * x[start : start + rows].unsqueeze(1)
        G *= -c if cfg.kernel == "quadratic" else c
        flat = G.reshape(-1, d)
        gram += flat.T @ flat
        total += G.sum(0)
    if cfg.centered:  # Σ_j (G_j − Ḡ)ᵀ(G_j − Ḡ) = Σ_j G_jᵀG_j − n ḠᵀḠ
        gram -= total.T @ total / n
    return M @ (gram / n) @ M


def matrix_power(A: torch.Tensor, power: float) -> torch.Tensor:
    """A^power of a symmetric PSD matrix by eigendecomposition; round-off negative eigenvalues become 0."""
    vals, vecs = torch.linalg.eigh((A + A.T) / 2)
    return (vecs * vals.clamp(min=0) ** power) @ vecs.T


def circulant_distance(M: torch.Tensor, p: int, order: list[int] | None = None) -> float:
    """How far the four p×p blocks of M are from circulant: ‖B − C(B)‖_F / ‖B‖_F over all blocks, where C(B)
    averages B along its wrapped diagonals (the nearest circulant). The a–b blocks of subtraction and division are
    constant along wrapped anti-diagonals instead, so each block takes the nearer of the two forms (as
    analysis.agop_circulant_distance does; the core cannot import analysis).
    `order` reindexes symbols first (multiplication and division: powers of a primitive root, dropping 0).
    M_0 = I is trivially circulant; the curve is informative from iteration 1."""
    idx = torch.arange(p) if order is None else torch.tensor(order)
    m = len(idx)
    i, j = torch.meshgrid(torch.arange(m), torch.arange(m), indexing="ij")
    resid, norm = 0.0, 0.0
    for r in (0, 1):
        for s in (0, 1):
            B = M[r * p + idx][:, s * p + idx].cpu()
            best = math.inf
            for diag in ((j - i) % m, (i + j) % m):
                means = torch.zeros(m, dtype=B.dtype).index_add_(0, diag.reshape(-1), B.reshape(-1)) / m
                best = min(best, float((B - means[diag]).pow(2).sum()))
            resid += best
            norm += float(B.pow(2).sum())
    return math.sqrt(resid / norm) if norm > 0 else 0.0


def primitive_root_order(p: int) -> list[int]:
    """1, g, g², ... for the smallest primitive root g of prime p: multiplication by a becomes a shift."""
    for g in range(2, p):
        powers = [pow(g, e, p) for e in range(p - 1)]
        if len(set(powers)) == p - 1:
            return powers
    return [1]  # p = 2


# -- the family ------------------------------------------------------------------------------------------------
@MODELS.register("rfm", RfmConfig)
class RfmFamily:
    """What the rfm family declares (contracts.Family); engine.rfm.RfmTrainer trains it.

    No optimizer groups, and one member per pack: there are no parameters to stack. Budget and gap are in
    iterations: grokking shows within ~10-40 iterations; crossings are exact (every iteration is measured), and a
    gap of 5 iterations separates RFM's sharp delayed transition from immediate generalization.
    """

    groups: tuple[str, ...] = ()
    per_member_fields: frozenset[str] = frozenset()
    defaults = {"train": {"steps": 50, "dtype": "float64"}, "phases": {"budget": 50, "gap": 5}}
    example = {"task": {"name": "modular", "p": 7, "train_fraction": 0.6}, "model": {"name": "rfm"}}  # contract test
    trainer = "rfm"
    max_pack_size = 1

    @staticmethod
    def check_task(model, task, path):
        """Any classification task: its targets are one-hot (checked when the data is built)."""
