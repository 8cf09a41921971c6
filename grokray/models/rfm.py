"""Recursive Feature Machine: kernel ridge regression whose Mahalanobis metric M is learned from the AGOP.

Radhakrishnan et al. (2024); grokking of modular arithmetic by Mallinar et al. (rfm-grokking-modular-arithmetic),
symmetry splits by Tomàs Bernal et al. (rfm-symmetry-breaking). Input one-hot(a) ⊕ one-hot(b) (2p dims), target
one-hot(answer). Iteration t, starting from M_0 = I:

    α_t     = (K_M + ridge·I)⁻¹ Y                     kernel ridge regression on the training points
    f_t(x)  = Σ_i α_t,i K_M(x, x_i)                    measured here: iteration t is "step" t of the curve
    M_{t+1} = AGOP(f_t)^power,  AGOP = mean_j J(x_j)ᵀ J(x_j),  J = ∂f_t/∂x  (centred: J minus its mean)

Kernels, with ‖v‖²_M = vᵀMv: gaussian exp(−‖x−z‖²_M / 2L²), laplace exp(−‖x−z‖_M / L), quadratic (xᵀMz)².
Iterations play the role of optimizer steps, so crossing steps, phases, budgets and resume work unchanged.
There are no parameters to stack, so an RFM pack holds exactly one member (`max_pack_size=1`): `RfmTrainer`
replaces the PackTrainer for this family and keeps its interface (run/results/state_dict, step, total, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from ..config import bounded, to_dict
from ..errors import SpecError
from ..phases import classify, is_decided
from ..phases import gap as phase_gap
from ..tasks.algorithmic import is_prime
from . import MODELS

EXTRA = ("circulant_distance",)  # diagnostic curve beside engine.METRICS
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


# -- the trainer --------------------------------------------------------------------------------------------------
class RfmTrainer:
    """Runs one RFM configuration; same interface as engine.PackTrainer, with iterations as steps.

    Registered with `max_pack_size=1`: an RFM pack holds one member. The registry entry's class attributes
    (`groups = ()`: no optimizer groups; `defaults`: budget and gap in iterations) are read by spec.parse_trial.
    Every iteration is measured and recorded: train/val loss (MSE over the one-hot targets) and accuracy,
    weight_norm (the RKHS norm √tr(αᵀKα) of the predictor) and circulant_distance of M. train.batch_size,
    eval_every and curve_points_per_decade do not apply.
    """

    groups: tuple[str, ...] = ()
    per_member_fields: frozenset[str] = frozenset()
    # Iterations, not steps: grokking shows within ~10-40 iterations; crossings are exact (every iteration is
    # measured), and a gap of 5 iterations separates RFM's sharp delayed transition from immediate generalization.
    defaults = {"train": {"steps": 50, "dtype": "float64"}, "phases": {"budget": 50, "gap": 5}}
    example = {"task": {"name": "modular", "p": 7, "train_fraction": 0.6}, "model": {"name": "rfm"}}  # contract test

    def __init__(self, configs: list, device: str = "cpu"):
        if len(configs) != 1:
            raise ValueError(f"an rfm pack holds exactly one configuration, got {len(configs)}")
        self.configs = configs
        self.K = 1
        self.cfg = cfg = configs[0]
        self.rfm: RfmConfig = cfg.model
        self.device = torch.device(device)
        self.dtype = torch.float64 if cfg.train.dtype == "float64" else torch.float32
        self.data = data = cfg.task.data()
        if data.num_classes is None:
            raise SpecError("task.name", "rfm needs a classification task (one-hot targets)")
        if data.x.is_floating_point():
            x = data.x.to(self.dtype)
        else:  # symbols -> concatenated one-hots: [N, n_symbols * vocab]
            x = torch.nn.functional.one_hot(data.x, data.vocab_size).reshape(len(data.x), -1).to(self.dtype)
        self.x = x.to(self.device)
        self.y = data.y.to(self.device)
        self.targets = torch.nn.functional.one_hot(self.y, data.num_classes).to(self.dtype)
        tr, va = cfg.task.split(data, cfg.seed)
        if len(tr) < 1:
            raise SpecError("task.train_fraction", "leaves no training samples")
        self.train_idx, self.val_idx = tr.to(self.device), va.to(self.device)
        self.total = cfg.budget_steps
        self.max_steps = [self.total]
        p, op = data.meta.get("p"), data.meta.get("op")
        cyclic = op in ("mul", "div") and is_prime(p)  # the multiplicative group is cyclic: reorder by a generator
        self._circ = (p, primitive_root_order(p) if cyclic else None) if p and x.shape[1] == 2 * p else None
        # State (all of it goes into the checkpoint).
        self.step = 0
        self.M = torch.eye(self.x.shape[1], dtype=self.dtype, device=self.device)
        self.alpha: torch.Tensor | None = None  # coefficients at M_step once step has been measured
        self.cross_train: int | None = None
        self.cross_val: int | None = None
        self.diverged = False
        self.stopped_at: list[int | None] = [None]
        self.curve: dict[str, list] = {"step": []}
        self.last: dict[str, float] = {}

    @property
    def stopped(self) -> int | None:
        return self.stopped_at[0]

    def done(self) -> bool:
        return self.stopped is not None

    def _measure(self):
        """Fit α at the current M, record iteration `step` and decide whether to stop."""
        from ..engine.pack import METRICS

        xt = self.x[self.train_idx]
        K_train, _, _ = kernel_matrix(self.rfm, xt, xt, self.M)
        self.alpha = solve(K_train, self.targets[self.train_idx], self.rfm.ridge)
        pred = kernel_matrix(self.rfm, self.x, xt, self.M)[0] @ self.alpha
        loss = (pred - self.targets).pow(2).mean(1).double()
        correct = (pred.argmax(1) == self.y).double()
        nan = math.nan
        has_val = len(self.val_idx) > 0

        def mean(v, idx):
            return float(v[idx].mean()) if len(idx) else nan

        norm = float((self.alpha * (K_train @ self.alpha)).sum().clamp(min=0).sqrt())  # RKHS norm of f
        values = [mean(loss, self.train_idx), mean(correct, self.train_idx), mean(loss, self.val_idx),
                  mean(correct, self.val_idx), norm]
        row = dict(zip(METRICS, values, strict=True))
        row["circulant_distance"] = circulant_distance(self.M, *self._circ) if self._circ else nan
        t, thr = self.step, self.cfg.phases.threshold
        self.diverged = not math.isfinite(row["train/loss"])
        if not self.diverged:
            if self.cross_train is None and row["train/acc"] >= thr:
                self.cross_train = t
            if self.cross_val is None and has_val and row["val/acc"] >= thr:
                self.cross_val = t
        self.curve["step"].append(t)
        for key, value in row.items():
            self.curve.setdefault(key, []).append(value)
        self.last = {k: v for k, v in row.items() if not math.isnan(v)}
        ph = self.cfg.phases
        decided = ph.stop_when_classified and is_decided(self.cross_train, self.cross_val, self.diverged, t, ph)
        if self.diverged or decided or t >= self.total:
            self.stopped_at = [t]

    def run(self, until: int | None = None, on_check=None) -> bool:
        """Iterate until the phase is decided or the steps run out (True), or until `self.step == until` (False):
        then iteration `until` has been measured and the next call continues with the AGOP update."""
        stop = self.total if until is None else min(until, self.total)
        while not self.done():
            if self.alpha is None:
                self._measure()
                if on_check is not None:
                    on_check(self)
                continue
            if self.step >= stop:
                break
            self.M = matrix_power(agop(self.rfm, self.x[self.train_idx], self.alpha, self.M), self.rfm.agop_power)
            self.step += 1
            self.alpha = None
        return self.done()

    def results(self) -> list:
        from ..engine.pack import MemberResult

        st, sv, ph = self.cross_train, self.cross_val, self.cfg.phases
        phase = classify(st, sv, self.diverged, ph)
        steps_run = self.stopped if self.stopped is not None else self.step
        curve = {k: list(v) for k, v in self.curve.items()}
        return [MemberResult(phase, st, sv, phase_gap(st, sv), steps_run, dict(self.last), curve)]

    # -- checkpoints: tensors, lists and numbers only (torch.load(weights_only=True)) --------------------------
    def state_dict(self) -> dict:
        return {
            "version": 1,
            "configs": [to_dict(c) for c in self.configs],
            "step": self.step,
            "M": self.M.clone(),
            "alpha": self.alpha.clone() if self.alpha is not None else torch.zeros(0),
            "measured": self.alpha is not None,
            "cross": [-1 if c is None else c for c in (self.cross_train, self.cross_val)],
            "diverged": self.diverged,
            "stopped_at": list(self.stopped_at),
            "curve": {k: list(v) for k, v in self.curve.items()},
        }

    def load_state_dict(self, state: dict):
        if state["configs"] != [to_dict(c) for c in self.configs]:
            raise ValueError("checkpoint belongs to different configurations")
        self.step = state["step"]
        self.M = state["M"].to(self.device, self.dtype)
        self.alpha = state["alpha"].to(self.device, self.dtype) if state["measured"] else None
        self.cross_train, self.cross_val = (None if c < 0 else c for c in state["cross"])
        self.diverged = bool(state["diverged"])
        self.stopped_at = list(state["stopped_at"])
        self.curve = {k: list(v) for k, v in state["curve"].items()}
        self.last = {k: v[-1] for k, v in self.curve.items() if k != "step" and v and not math.isnan(v[-1])}


MODELS.register("rfm", RfmConfig, trainer=RfmTrainer, max_pack_size=1)(RfmTrainer)
