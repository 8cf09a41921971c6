"""A one-layer transformer on `a b` token pairs, as a researcher writes one: a plain torch.nn.Module, nothing of
grokray in it. grokray packs it (model: {name: module, factory: "examples.tiny_transformer:TinyTransformer"})."""

import torch
from torch import nn


class TinyTransformer(nn.Module):
    def __init__(self, vocab_size, out_features, seq_len=2, d_model=32, n_heads=4, d_mlp=128):
        super().__init__()  # vocab_size, out_features and seq_len come from the task
        self.embed = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embed.weight, std=d_model**-0.5)  # N(0, 1/d), as grokray's transformer starts
        self.pos = nn.Parameter(torch.randn(seq_len, d_model) * d_model**-0.5)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_mlp), nn.ReLU(), nn.Linear(d_mlp, d_model))
        self.unembed = nn.Linear(d_model, out_features, bias=False)
        self.heads = n_heads
        self.register_buffer("future", torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1))

    def forward(self, x):  # x: [batch, seq_len] token ids -> [batch, out_features] logits
        h = self.embed(x) + self.pos
        q, k, v = self.qkv(self.ln1(h)).unflatten(-1, (3, self.heads, -1)).unbind(-3)  # [batch, seq, heads, d]
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5
        attn = scores.masked_fill(self.future, float("-inf")).softmax(-1)
        h = h + self.out(torch.einsum("bhqk,bkhd->bqhd", attn, v).flatten(-2))
        h = h + self.mlp(self.ln2(h))
        return self.unembed(h[:, -1])
