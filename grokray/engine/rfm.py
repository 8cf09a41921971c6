"""The RFM trainer: one configuration's kernel ridge regression and AGOP iterations, behind the Trainer contract
(contracts.Trainer), with iterations as steps. The mathematics is models.rfm's.

Every iteration is measured and recorded: train/val loss (MSE over the one-hot targets) and accuracy, weight_norm
(the RKHS norm √tr(αᵀKα) of the predictor) and circulant_distance of M. train.batch_size, eval_every and
curve_points_per_decade do not apply.
"""

from __future__ import annotations

import math
import time

import torch

from ..errors import SpecError
from ..models.rfm import RfmConfig, agop, circulant_distance, kernel_matrix, matrix_power, primitive_root_order, solve
from ..phases import classify, is_decided
from ..phases import gap as phase_gap
from ..spec.blocks import to_dict
from ..tasks.algorithmic import is_prime
from ..tasks.parallelograms import split_ideal_accuracy
from .result import METRICS, MemberResult


class RfmTrainer:
    """Runs one RFM configuration (an rfm pack holds one member)."""

    compact = False  # one member: nothing to compact

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
        self.ideal_val_acc = split_ideal_accuracy(data, tr, va)  # of the split: known before the first iteration
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
        self.stopped_wall: list[float | None] = [None]
        self.curve: dict[str, list] = {"step": []}
        self.last: dict[str, float] = {}

    @property
    def stopped(self) -> int | None:
        return self.stopped_at[0]

    def done(self) -> bool:
        return self.stopped is not None

    def _measure(self):
        """Fit α at the current M, record iteration `step` and decide whether to stop."""
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
            self.stopped_at, self.stopped_wall = [t], [time.time()]

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
        st, sv, ph = self.cross_train, self.cross_val, self.cfg.phases
        phase = classify(st, sv, self.diverged, ph)
        steps_run = self.stopped if self.stopped is not None else self.step
        curve = {k: list(v) for k, v in self.curve.items()}
        return [MemberResult(phase, st, sv, phase_gap(st, sv), steps_run, dict(self.last), curve, self.ideal_val_acc)]

    def member_states(self) -> list[dict]:
        """The learned state is the feature matrix M."""
        return [{"M": self.M.detach().cpu().clone()}]

    def member_bytes(self) -> int:
        """The kernel matrix over the training points and M, in the trainer's dtype."""
        elem = 8 if self.dtype == torch.float64 else 4
        return elem * (len(self.train_idx) ** 2 + self.M.numel())

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
