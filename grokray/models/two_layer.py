"""Two-layer network f(x) = Σᵢ aᵢ σ(wᵢ·x) for Langevin training (Droplets, Rubin et al.).

σ = erf on the cubic teacher (scalar output) and σ = x² on modular addition (p outputs, MSE to one-hot, on
one-hot(a) ⊕ one-hot(b)). Weights start from the Gaussian prior that Langevin dynamics with weight decay γ and
temperature T keeps in equilibrium when T/γ equals its variance: wᵢ ~ N(0, 1/d), aᵢ ~ N(0, 1/N) (standard) or
N(0, 1/N²) (mean-field readout), each times its group's `init_scale`. Groups `hidden` (w) and `last` (a).
Train with `optim: {default: {name: langevin, lr: η, weight_decay: γ, temperature: T}}`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from ..spec.blocks import bounded
from . import MODELS
from .base import PackedModel
from .diagnostics import teacher_alignment
from .heads import make_head
from .layers import input_dim, normal


@dataclass
class TwoLayerConfig:
    width: int = bounded(200, ge=1, doc="hidden units N")
    activation: Literal["auto", "erf", "square"] = "auto"  # auto: erf on regression tasks, square on symbol tasks
    readout: Literal["standard", "mean_field"] = "standard"  # prior std of a: 1/√N or 1/N


@MODELS.register("two_layer", TwoLayerConfig)
class TwoLayerModel(PackedModel):
    example = {  # the contract-test size: a small cubic teacher, Langevin with a little noise
        "task": {"name": "cubic_teacher", "d": 5, "n_train": 40, "n_test": 40},
        "model": {"name": "two_layer", "width": 16},
        "optim": {"default": {"name": "langevin", "lr": 0.05, "weight_decay": 1e-3, "temperature": 1e-5}},
    }
    groups = ("hidden", "last")
    per_member_fields = frozenset({"width"})

    @staticmethod
    def init_member(cfg, data, gen, init_scales):
        d, n = input_dim(data), cfg.width
        out = make_head("mse", data).out_dim
        a_std = 1 / math.sqrt(n) if cfg.readout == "standard" else 1 / n
        return {
            "fc0.w": normal(gen, (d, n), 1 / math.sqrt(d)) * init_scales["hidden"],
            "fc1.w": normal(gen, (n, out), a_std) * init_scales["last"],
        }

    def make_head(self, configs, data, gens, dtype, device):
        self.vocab_size = data.vocab_size
        self.act = self.cfg.activation
        if self.act == "auto":
            self.act = "erf" if data.num_classes is None else "square"
        return make_head("mse", data)

    def group_of(self, name):
        return "hidden" if name == "fc0.w" else "last"

    def forward(self, x, rng=None):
        return self.input_mlp(x, "fc", 2, self.act, bias=False)

    def diagnostics(self):
        out = super().diagnostics()
        if "teacher" in self.data_meta.meta:
            out["teacher_overlap"] = teacher_alignment(self.p("fc0.w"), self.data_meta.meta["teacher"])
        return out

    @torch.no_grad()
    def teacher_overlap(self, x: torch.Tensor, teacher: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per member [K]: the output's He₁ and He₃ coefficients along the teacher on inputs `x` [B, d] (the
        target has 1 and ε), and the mean |cos| between first-layer weights and the teacher direction (the
        `teacher_overlap` curve)."""
        x = x.to(self.flat["last"].dtype)
        teacher = teacher.to(x.dtype)
        z = x @ teacher
        f = self(x.expand(self.size, -1, -1)).squeeze(-1)  # [K, B]
        he1 = (f * z).mean(1) / z.pow(2).mean()
        he3 = (f * (z**3 - 3 * z)).mean(1) / (z**3 - 3 * z).pow(2).mean()
        return {"he1": he1, "he3": he3, "cos": teacher_alignment(self.p("fc0.w"), teacher)}
