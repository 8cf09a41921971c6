"""Plain MLP (Liu et al. appendix J, Omnigrok): grokking on images by a large initialisation.

Kaiming-uniform layers (PyTorch's default) whose initial weights and biases are multiplied by α, the `init_scale`
of their optimizer group: α ≈ 8 with 1000 training images makes the net fit first and generalize much later.
Two groups, `hidden` (every layer but the last) and `last` (the readout), so the last layer can get its own
learning rate and weight decay (Liu Fig. 8). Symbol tasks are fed as one-hot(a) ⊕ one-hot(b).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..spec.blocks import bounded
from . import MODELS
from .base import PackedModel
from .heads import make_head
from .layers import input_dim, linear_init, mlp_init


@dataclass
class MlpConfig:
    depth: int = bounded(3, ge=1, doc="number of linear layers (Omnigrok: 3, i.e. in-200-200-10)")
    width: int = bounded(200, ge=1)
    activation: Literal["relu", "tanh", "gelu", "silu"] = "relu"
    loss: Literal["mse", "cross_entropy"] = "mse"  # mse: to one-hot targets (Omnigrok); ignored on regression tasks
    bias: bool = True


@MODELS.register("mlp", MlpConfig)
class MlpModel(PackedModel):
    example = {  # the contract-test size: 50 digits, a narrow net
        "task": {"name": "images", "train_size": 50},
        "model": {"name": "mlp", "width": 16},
        "optim": {"default": {"name": "adamw", "lr": 1e-2}},
    }
    groups = ("hidden", "last")
    per_member_fields = frozenset({"width"})

    @staticmethod
    def init_member(cfg, data, gen, init_scales):
        out_dim = make_head(cfg.loss, data).out_dim
        sizes = [input_dim(data)] + [cfg.width] * (cfg.depth - 1) + [out_dim]
        params = mlp_init(gen, sizes[:-1], cfg.bias, init_scales["hidden"], prefix="fc")  # fc0 .. fc{depth-2}
        last = linear_init(gen, sizes[-2], sizes[-1], cfg.bias, init_scales["last"])
        params.update(zip((f"fc{cfg.depth - 1}.w", f"fc{cfg.depth - 1}.b"), last, strict=False))
        return params

    def make_head(self, configs, data, gens, dtype, device):
        self.vocab_size = data.vocab_size
        return make_head(self.cfg.loss, data)

    @staticmethod
    def cross_entropy(model, task) -> bool:
        return model.loss == "cross_entropy" and getattr(task, "registry_name", "") != "cubic_teacher"

    def group_of(self, name):
        return "last" if name.startswith(f"fc{self.cfg.depth - 1}.") else "hidden"

    def forward(self, x, rng=None):
        return self.input_mlp(x, "fc", self.cfg.depth, self.cfg.activation, self.cfg.bias)
