"""Liu et al.'s toy model: learned symbol embeddings, combined, then an MLP decoder."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch

from ..errors import SpecError
from ..spec.blocks import bounded
from . import MODELS
from .base import PackedModel
from .heads import ClassificationHead, TargetVectorHead, target_vectors
from .layers import mlp, mlp_init, uniform


@dataclass
class ToyConfig:
    embed_dim: int = bounded(1, ge=1, doc="1 for Liu's addition; a square (e.g. 9) for S_n with matmul")
    hidden: list[int] = field(default_factory=lambda: [200, 200])
    activation: Literal["tanh", "relu", "gelu", "silu"] = "tanh"
    head: Literal["regression", "classification"] = "regression"
    target_dim: int = bounded(30, ge=1, doc="regression: dimension of the fixed random target vectors")
    combine: Literal["auto", "sum", "matmul"] = "auto"  # auto: matmul for permutation tasks, else sum

    def validate(self, path):
        if not self.hidden:
            raise SpecError(f"{path}.hidden", "got []; the decoder is an MLP of at least one hidden layer, e.g. "
                            "[200, 200] (Liu et al.)")
        for i, width in enumerate(self.hidden):
            if width < 1:
                raise SpecError(f"{path}.hidden[{i}]", f"got {width}; widths must be >= 1")
        if self.combine == "matmul" and math.isqrt(self.embed_dim) ** 2 != self.embed_dim:
            raise SpecError(f"{path}.embed_dim", f"got {self.embed_dim}; matmul embeddings need a square dim")


@MODELS.register("toy", ToyConfig)
class ToyModel(PackedModel):
    example = {  # the contract-test size: Liu's addition at p=5, a narrow decoder
        "task": {"name": "addition", "p": 5, "train_fraction": 0.6},
        "model": {"name": "toy", "embed_dim": 2, "hidden": [16]},
        "optim": {"default": {"name": "adamw", "lr": 1e-2}},
    }

    groups = ("embedding", "decoder")
    per_member_fields = frozenset({"hidden"})

    @staticmethod
    def combine_mode(cfg, data) -> str:
        if cfg.combine != "auto":
            return cfg.combine
        return "matmul" if "perms" in data.meta and math.isqrt(cfg.embed_dim) ** 2 == cfg.embed_dim else "sum"

    @staticmethod
    def init_member(cfg, data, gen, init_scales):
        params = {"embed": uniform(gen, (data.vocab_size, cfg.embed_dim), 0.5) * init_scales["embedding"]}
        out_dim = cfg.target_dim if cfg.head == "regression" else data.num_classes
        sizes = [cfg.embed_dim, *cfg.hidden, out_dim]
        params.update(mlp_init(gen, sizes, bias=True, scale=init_scales["decoder"], prefix="dec"))
        return params

    def make_head(self, configs, data, gens, dtype, device):
        self.mode = self.combine_mode(self.cfg, data)
        if self.cfg.head == "classification":
            return ClassificationHead(data.num_classes)
        targets = torch.stack([target_vectors(g, data.num_classes, self.cfg.target_dim) for g in gens])
        return TargetVectorHead(targets.to(dtype=dtype, device=device))

    @staticmethod
    def cross_entropy(model, task) -> bool:
        return model.head == "classification"

    @staticmethod
    def check_task(model, task, path):
        if not getattr(task, "symbolic", False):
            raise SpecError("task.name", f"model 'toy' embeds symbols; got task {task.registry_name!r}, allowed: "
                            "modular, addition, permutation")

    def group_of(self, name):
        return "embedding" if name == "embed" else "decoder"

    def symbol_weights(self):
        return self.p("embed")

    def embeddings(self):
        return self.p("embed")

    def forward(self, x, rng=None):
        emb = self.p("embed")  # [K, V, d]
        k = torch.arange(emb.shape[0], device=emb.device).view(-1, 1)
        a, b = emb[k, x[..., 0]], emb[k, x[..., 1]]  # [K, B, d]
        if self.mode == "matmul":
            m = math.isqrt(emb.shape[-1])
            h = (a.unflatten(-1, (m, m)) @ b.unflatten(-1, (m, m))).flatten(-2)
        else:
            h = a + b
        return mlp(h, self.p, "dec", len(self.cfg.hidden) + 1, self.cfg.activation, bias=True)
