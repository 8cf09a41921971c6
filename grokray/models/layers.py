"""Stacked building blocks shared by the model families: every tensor has a leading member axis K."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


class _Square(torch.autograd.Function):
    """x², with the backward as two passes (g·x, then ·2 in place). torch.square's autograd formula,
    g · 2 · x¹, makes three fresh tensors: it was a third of a packed quadratic net's step."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (grad * x).mul_(2)


ACTIVATIONS = {
    "tanh": torch.tanh,
    "relu": F.relu,
    "gelu": F.gelu,
    "silu": F.silu,
    "square": _Square.apply,
    "erf": torch.erf,
    "identity": lambda x: x,
}


def uniform(gen: torch.Generator, shape, bound: float) -> torch.Tensor:
    """U(-bound, bound) from the member's own generator (float64, cast later, so dtype never changes draws)."""
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound


def normal(gen: torch.Generator, shape, std: float) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=torch.float64) * std


def linear_init(gen, fan_in: int, fan_out: int, bias: bool, scale: float) -> list[torch.Tensor]:
    """PyTorch's nn.Linear default (U(±1/sqrt(fan_in)) for weight and bias), times the group's init scale."""
    bound = 1.0 / math.sqrt(fan_in)
    out = [uniform(gen, (fan_in, fan_out), bound) * scale]
    if bias:
        out.append(uniform(gen, (fan_out,), bound) * scale)
    return out


def mlp_init(gen, sizes: list[int], bias: bool, scale: float, prefix: str) -> dict[str, torch.Tensor]:
    """Weights of an MLP with layer sizes `sizes` (input first), named prefix0.w, prefix0.b, ..."""
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        tensors = linear_init(gen, fan_in, fan_out, bias, scale)
        params[f"{prefix}{i}.w"] = tensors[0]
        if bias:
            params[f"{prefix}{i}.b"] = tensors[1]
    return params


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x [K, B, in] @ w [K, in, out] (+ b [K, out]) as one batched matmul."""
    if b is None:
        return torch.bmm(x, w)
    return torch.baddbmm(b.unsqueeze(1), x, w)


def mlp(x: torch.Tensor, get, prefix: str, n_layers: int, activation: str, bias: bool, start: int = 0) -> torch.Tensor:
    """Stacked MLP forward (`get(name)` returns a stacked tensor); no activation after the last layer.

    start = 1: x is already layer 0's output before its activation (computed some other way, see `table_linear`).
    """
    act = ACTIVATIONS[activation]
    if 0 < start < n_layers:
        x = act(x)
    for i in range(start, n_layers):
        x = linear(x, get(f"{prefix}{i}.w"), get(f"{prefix}{i}.b") if bias else None)
        if i < n_layers - 1:
            x = act(x)
    return x


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last axis with per-member affine weights w, b [K, d]."""
    shape = (w.shape[0],) + (1,) * (x.dim() - 2) + (w.shape[1],)
    return F.layer_norm(x, x.shape[-1:], eps=eps) * w.view(shape) + b.view(shape)


def pad_stack(tensors: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Stack member tensors of possibly different shapes, zero-padded to the largest.

    Returns the stack and a boolean mask of the real entries (None when all shapes agree). Padded hidden units
    have zero weights in and out, so with the mask on their updates a member computes exactly what it would
    alone.
    """
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) == 1:
        return torch.stack(tensors), None
    big = [max(s[d] for s in shapes) for d in range(len(next(iter(shapes))))]
    out = tensors[0].new_zeros((len(tensors), *big))
    mask = torch.zeros((len(tensors), *big), dtype=torch.bool)
    for k, t in enumerate(tensors):
        region = (k, *(slice(0, n) for n in t.shape))
        out[region] = t
        mask[region] = True
    return out, mask


def input_dim(data) -> int:
    """Width of the network input for `data`: one-hot per symbol for symbol tasks, else the feature count."""
    if data.x.is_floating_point():
        return int(data.x.shape[-1])
    return int(data.x.shape[-1]) * int(data.vocab_size)


def encode_inputs(x: torch.Tensor, vocab_size: int | None, dtype) -> torch.Tensor:
    """[K, B, n_symbols] symbol ids -> [K, B, n_symbols·vocab] one-hot(a) ⊕ one-hot(b) ⊕ ...; floats pass through."""
    if x.is_floating_point():
        return x
    return F.one_hot(x, vocab_size).flatten(-2).to(dtype)


def table_ranges(x: torch.Tensor) -> list[tuple[int, int]] | None:
    """(first value, count) per column if the rows of symbol ids x [N, S] are the whole Cartesian product of
    contiguous value ranges in row-major order, as on modular and permutation tasks; else None."""
    if x.is_floating_point() or x.dim() != 2 or len(x) == 0:
        return None
    lo, hi = x.min(0).values.tolist(), x.max(0).values.tolist()
    ranges = [(a, b - a + 1) for a, b in zip(lo, hi, strict=True)]
    if math.prod(n for _, n in ranges) != len(x):
        return None
    table = torch.cartesian_prod(*[torch.arange(a, a + n) for a, n in ranges]).reshape(len(x), -1)
    return ranges if torch.equal(table, x.cpu()) else None


def table_linear(ranges, vocab_size: int, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """one_hot(table) @ w (+ b) for the full symbol table of `table_ranges`, without the one-hot: row (a, b, ...)
    is w[a] + w[V + b] + ..., so each column's block of rows is broadcast-added. N · width work instead of
    N · S·V · width, and the backward is a sum over the other columns instead of a one-hot matmul."""
    K, out, S = w.shape[0], w.shape[-1], len(ranges)
    h = None
    for j, (first, n) in enumerate(ranges):
        shape = [K] + [1] * S + [out]
        shape[1 + j] = n
        block = w[:, j * vocab_size + first : j * vocab_size + first + n].reshape(shape)
        h = block if h is None else h + block
    if b is not None:
        h = h + b.view(K, *[1] * S, out)
    return h.reshape(K, -1, out)
