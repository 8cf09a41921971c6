"""Decoder-only transformer on `a b =` (or `a op b =`) sequences, as in Power et al. and Liu et al. §4.2."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from ..config import bounded
from ..errors import SpecError
from . import MODELS
from .base import PackedModel
from .heads import ClassificationHead
from .layers import ACTIVATIONS, layer_norm, linear, linear_init, normal, uniform


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax attention of the last Tq positions over all T; q [N, Tq, heads, d_head], k and v [N, T, ...].

    Written out as broadcast products in the [N, T, heads, d_head] layout the projections produce: on 3-4 token
    sequences torch's fused attention kernel, and the head transposes it needs, were a third of a packed step.
    """
    tq, t = q.shape[1], k.shape[1]
    scores = (q.unsqueeze(2) * k.unsqueeze(1)).sum(-1) * q.shape[-1] ** -0.5  # [N, Tq, T, heads]
    future = torch.ones(tq, t, dtype=torch.bool, device=q.device).triu(t - tq + 1).view(tq, t, 1)
    weights = scores.masked_fill(future, float("-inf")).softmax(2)
    return (weights.unsqueeze(-1) * v.unsqueeze(1)).sum(2)


@dataclass
class TransformerConfig:
    n_layers: int = bounded(1, ge=1)
    d_model: int = bounded(128, ge=1)
    n_heads: int = bounded(4, ge=1)
    d_mlp: int = bounded(512, ge=1)
    dropout: float = bounded(0.0, ge=0.0, lt=1.0)
    activation: Literal["relu", "gelu"] = "relu"
    positional: Literal["learned", "none"] = "learned"
    layer_norm: bool = True
    op_token: bool = False  # sequence `a op b =` instead of `a b =`
    # pre_ln: x + attn(ln1(x)), then x + mlp(ln2(x)); normed_residual: the stream itself is normalised first,
    # x = ln1(x); x = x + attn(x); x = x + mlp(ln2(x)) (the Grokfast authors' block)
    block: Literal["pre_ln", "normed_residual"] = "pre_ln"
    # scaled: embeddings N(0, 1/d), every linear U(+-1/sqrt(fan_in)) with its bias; pytorch: torch's defaults for
    # nn.Embedding (N(0, 1)) and nn.MultiheadAttention (Xavier-uniform projections, zero biases), as the Grokfast
    # code leaves them
    init: Literal["scaled", "pytorch"] = "scaled"
    head: Literal["answers", "tokens"] = "answers"  # tokens: logits over every token (p + 2), as the Grokfast code

    def validate(self, path):
        if self.d_model % self.n_heads:
            raise SpecError(f"{path}.n_heads", f"got {self.n_heads}; must divide d_model={self.d_model}")


@MODELS.register("transformer", TransformerConfig)
class TransformerModel(PackedModel):
    example = {  # the contract-test size
        "task": {"name": "modular", "p": 5, "train_fraction": 0.6},
        "model": {"name": "transformer", "d_model": 8, "n_heads": 2, "d_mlp": 16},
        "optim": {"default": {"name": "adamw", "lr": 1e-2}},
    }

    groups = ("embedding", "decoder")
    per_member_fields = frozenset({"d_mlp", "dropout"})
    joint_forward = False  # its backward over the held-out rows cost a third of a step at fraction 0.5

    @property
    def uses_dropout(self):
        return any(c.dropout > 0 for c in self.configs)

    @staticmethod
    def vocab(cfg, data) -> int:
        return data.vocab_size + (2 if cfg.op_token else 1)  # symbols, '=', and optionally 'op'

    @staticmethod
    def init_member(cfg, data, gen, init_scales):
        d, e, s = cfg.d_model, init_scales["embedding"], init_scales["decoder"]
        seq, vocab = (4 if cfg.op_token else 3), TransformerModel.vocab(cfg, data)
        torch_init = cfg.init == "pytorch"
        std = 1.0 if torch_init else 1 / math.sqrt(d)
        params = {"tok": normal(gen, (vocab, d), std) * e, "pos": normal(gen, (seq, d), std) * e}
        for i in range(cfg.n_layers):
            params[f"l{i}.ln1.w"], params[f"l{i}.ln1.b"] = torch.ones(d), torch.zeros(d)
            if torch_init:  # nn.MultiheadAttention: Xavier-uniform in-projection, zero biases
                params[f"l{i}.qkv.w"] = uniform(gen, (d, 3 * d), math.sqrt(6 / (4 * d))) * s
                params[f"l{i}.qkv.b"] = torch.zeros(3 * d)
                params[f"l{i}.out.w"], params[f"l{i}.out.b"] = linear_init(gen, d, d, False, s)[0], torch.zeros(d)
            else:
                params[f"l{i}.qkv.w"], params[f"l{i}.qkv.b"] = linear_init(gen, d, 3 * d, True, s)
                params[f"l{i}.out.w"], params[f"l{i}.out.b"] = linear_init(gen, d, d, True, s)
            params[f"l{i}.ln2.w"], params[f"l{i}.ln2.b"] = torch.ones(d), torch.zeros(d)
            params[f"l{i}.fc1.w"], params[f"l{i}.fc1.b"] = linear_init(gen, d, cfg.d_mlp, True, s)
            params[f"l{i}.fc2.w"], params[f"l{i}.fc2.b"] = linear_init(gen, cfg.d_mlp, d, True, s)
        params["lnf.w"], params["lnf.b"] = torch.ones(d), torch.zeros(d)
        out = TransformerModel.vocab(cfg, data) if cfg.head == "tokens" else data.num_classes
        params["unembed.w"] = linear_init(gen, d, out, False, s)[0]
        return params

    def make_head(self, configs, data, gens, dtype, device):
        self.eq_token = data.vocab_size
        self.op_token = data.vocab_size + 1
        self.dropout = torch.tensor([c.dropout for c in configs], dtype=dtype, device=device)
        return ClassificationHead(self.vocab(self.cfg, data) if self.cfg.head == "tokens" else data.num_classes)

    @staticmethod
    def cross_entropy(model, task) -> bool:
        return True

    @staticmethod
    def check_task(model, task, path):
        if not getattr(task, "symbolic", False):
            raise SpecError(
                "task.name",
                f"model 'transformer' embeds symbols; got task {task.registry_name!r}, allowed: "
                "modular, addition, permutation",
            )

    def group_of(self, name):
        return "embedding" if name in ("tok", "pos") else "decoder"

    def symbol_weights(self):
        return self.p("tok")

    def io_names(self):
        return {"tok", "pos", "unembed.w"}  # token and position embeddings, the unembedding

    def embeddings(self):
        return self.p("tok")  # the operand tokens come first; '=' and the op token are past p

    def select_extra(self, idx):
        self.dropout = self.dropout.index_select(0, idx)

    def tokens(self, x):
        """[K, B, 2] symbol pairs -> [K, B, 3 or 4] token ids ending in '='."""
        eq = torch.full_like(x[..., :1], self.eq_token)
        if self.cfg.op_token:
            return torch.cat([x[..., :1], torch.full_like(eq, self.op_token), x[..., 1:2], eq], -1)
        return torch.cat([x, eq], -1)

    def drop(self, h, rng):
        """Per-member dropout rate, with masks drawn from each member's own generator."""
        if rng is None or not self.uses_dropout:
            return h
        keep = 1 - self.dropout.view(-1, *([1] * (h.dim() - 1)))
        return h * (rng.rand(h.shape[1:], h.dtype, h.device) < keep) / keep

    def norm(self, h, name):
        return layer_norm(h, self.p(f"{name}.w"), self.p(f"{name}.b")) if self.cfg.layer_norm else h

    def forward(self, x, rng=None):
        cfg, p = self.cfg, self.p
        tok = self.tokens(x)
        K, B, T = tok.shape
        k = torch.arange(K, device=tok.device).view(-1, 1, 1)
        h = p("tok")[k, tok]  # [K, B, T, d]
        if cfg.positional == "learned":
            h = h + p("pos")[:, :T].unsqueeze(1)
        d, H = cfg.d_model, cfg.n_heads
        act = ACTIVATIONS[cfg.activation]
        for i in range(cfg.n_layers):
            # Only the '=' position is read out, so the last layer computes its query, attention, MLP and
            # residual for that position alone (every position still gives keys and values).
            keep = 1 if i == cfg.n_layers - 1 else T
            a = self.norm(h, f"l{i}.ln1")
            if cfg.block == "normed_residual":
                h = a  # the residual stream itself is normalised
            w, b = p(f"l{i}.qkv.w"), p(f"l{i}.qkv.b")
            queries = a if keep == T else a[:, :, T - keep :]
            q = linear(queries.reshape(K, B * keep, d), w[..., :d], b[:, :d]).view(K * B, keep, H, d // H)
            kv = linear(a.reshape(K, B * T, d), w[..., d:], b[:, d:]).view(K * B, T, 2, H, d // H)
            att = causal_attention(q, *kv.unbind(2)).reshape(K, B * keep, d)
            out = linear(att, p(f"l{i}.out.w"), p(f"l{i}.out.b")).view(K, B, keep, d)
            h = (h if keep == T else h[:, :, T - keep :]) + self.drop(out, rng)
            m = self.norm(h, f"l{i}.ln2").reshape(K, B * keep, d)
            m = linear(act(linear(m, p(f"l{i}.fc1.w"), p(f"l{i}.fc1.b"))), p(f"l{i}.fc2.w"), p(f"l{i}.fc2.b"))
            h = h + self.drop(m.view(K, B, keep, d), rng)
        last = self.norm(h[:, :, -1], "lnf")  # the '=' position predicts the answer
        return torch.bmm(last, p("unembed.w"))
