"""Two-layer quadratic network ("Why do you grok", Gromov): f(x) = W₂ᵀ (W₁ᵀ x)², bias-free.

Input one-hot(a) ⊕ one-hot(b) (2p), width N, p outputs. Regression is MSE to one-hot(answer), classification
is p-way cross-entropy. He-normal initialisation (std √(2/fan_in)) times the group's `init_scale`: a small
scale starts the net outside the kernel regime and shrinks the delay between fitting and generalizing.
One parameter group, `weights`, so normalized GD scales the whole step by 1/‖grad‖ as in the paper's
appendix A (paper: lr 10, tiny L2, full batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ..errors import SpecError
from ..spec.blocks import bounded
from . import MODELS
from .base import PackedModel
from .heads import make_head
from .layers import input_dim, normal


@dataclass
class QuadraticConfig:
    width: int = bounded(500, ge=1, doc="hidden units N")
    head: Literal["regression", "classification"] = "classification"


@MODELS.register("quadratic", QuadraticConfig)
class QuadraticModel(PackedModel):
    example = {  # the contract-test size
        "task": {"name": "modular", "p": 7, "train_fraction": 0.6},
        "model": {"name": "quadratic", "width": 16},
        "optim": {"default": {"name": "normalized_gd", "lr": 0.5, "weight_decay": 1e-4}},
    }
    groups = ("weights",)
    per_member_fields = frozenset({"width"})

    @staticmethod
    def cross_entropy(model, task) -> bool:
        return model.head == "classification"

    @staticmethod
    def check_task(cfg, task, path):
        if getattr(task, "registry_name", None) not in ("modular", "addition", "permutation"):
            raise SpecError(f"{path}.name", f"quadratic needs a symbol task (modular, ...), not {task.registry_name!r}")

    @staticmethod
    def loss(cfg) -> str:
        return "mse" if cfg.head == "regression" else "cross_entropy"

    @staticmethod
    def init_member(cfg, data, gen, init_scales):
        d, n, scale = input_dim(data), cfg.width, init_scales["weights"]
        return {
            "fc0.w": normal(gen, (d, n), math.sqrt(2 / d)) * scale,
            "fc1.w": normal(gen, (n, data.num_classes), math.sqrt(2 / n)) * scale,
        }

    def make_head(self, configs, data, gens, dtype, device):
        self.vocab_size = data.vocab_size
        return make_head(self.loss(self.cfg), data)

    def group_of(self, name):
        return "weights"

    def forward(self, x, rng=None):
        return self.input_mlp(x, "fc", 2, "square", bias=False)
