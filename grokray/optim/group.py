"""One optimizer over one parameter group of a pack, with per-member hyperparameters."""

from __future__ import annotations

import torch

from ..capture import Captured
from ..contracts import family_groups
from ..spec.blocks import OptimConfig
from . import primitives as P
from .kinds import KINDS
from .transforms import asked_transforms


class MemberRandom:
    """One generator per member, so a member draws the same numbers alone or inside any pack."""

    def __init__(self, seeds: list[int], device, salt: int):
        self.generators = [torch.Generator(device=device).manual_seed(int(s) * 1_000_003 + salt) for s in seeds]

    def normal(self, shape, dtype, device) -> torch.Tensor:
        return torch.stack([torch.randn(shape, generator=g, dtype=dtype, device=device) for g in self.generators])

    def rand(self, shape, dtype, device) -> torch.Tensor:
        return torch.stack([torch.rand(shape, generator=g, dtype=dtype, device=device) for g in self.generators])

    def select(self, keep: list[int]):
        self.generators = [self.generators[k] for k in keep]

    def state_dict(self):
        return [g.get_state() for g in self.generators]

    def load_state_dict(self, states):
        for g, s in zip(self.generators, states, strict=True):
            g.set_state(s)


# Per-member fused calls cost ~10 us each on a CPU; from this row length on, their fewer passes pay for it.
ROWS_MIN_P = 32768


class GroupOptimizer:
    """AdamW, Adam, SGD(+momentum), normalized GD, Langevin or Muon on one flat [K, P] parameter group.

    Freezing is folded into the per-member learning rate (lr = 0 for a stopped member), so no step ever
    touches a finished member and no masked copy of the parameters is made. Padded entries of narrower
    members have zero gradient and zero weight, so every update leaves them at zero, except the Langevin
    noise, which is multiplied by the padding mask.
    """

    def __init__(self, param: torch.Tensor, grad: torch.Tensor, configs: list[OptimConfig], seeds: list[int],
                 salt: int, pad_mask: torch.Tensor | None = None, compile: bool = False,
                 segments: list[tuple[int, int, tuple]] | None = None,
                 muon_segments: list[tuple[int, int, tuple]] | None = None):
        names = {c.name for c in configs}
        if len(names) != 1:
            raise ValueError(f"a pack shares one optimizer kind per group, got {sorted(names)}")
        self.kind = KINDS[names.pop()]
        self.param, self.grad = param, grad

        def column(values):
            return torch.tensor(values, dtype=param.dtype, device=param.device).view(-1, 1)

        # the per-member fields as [K, 1] columns: betas become two (beta1, beta2), init_scale acts at init
        hyper = [f for f in OptimConfig.per_member_fields() if f not in ("betas", "init_scale")]
        self.h = {name: column([getattr(c, name) for c in configs]) for name in hyper}
        self.h["beta1"] = column([c.betas[0] for c in configs])
        self.h["beta2"] = column([c.betas[1] for c in configs])
        self.has_warmup = any(c.warmup_steps > 0 for c in configs)
        self.warmup_from_zero = configs[0].warmup_from_zero  # not per member: the pack's signature holds it
        # `segments`: each parameter tensor's slice of the flat group (the whole group as one when not given)
        self.segments = segments or [(0, param.shape[1], (param.shape[1],))]
        # A matrix step (Muon) takes the group's matrices (each member's tensor of 2 dimensions); of them,
        # `muon_segments` when given (optim.<group>.muon_on: hidden leaves embeddings and the head to AdamW).
        self.matrix_segments = [(a, b, shape) for a, b, shape in
                                (self.segments if muon_segments is None else muon_segments)
                                if self.kind.matrices and len(shape) == 2 and min(shape) > 1]
        # the de-grokking transforms some member asks for (optim/transforms/), each rewriting the gradient in turn
        self.transforms = [(t, t.build(grad, configs, self.segments)) for t in asked_transforms(configs)]
        self.history = sum(t.tensors_per_parameter(configs[0]) for t, _ in self.transforms)
        self.scratch = torch.empty_like(param)
        self.state = {name: torch.zeros_like(param) for name in self.kind.state}
        self.noise = MemberRandom(seeds, param.device, salt) if self.kind.noise else None
        self.pad = None if pad_mask is None else pad_mask.to(param.dtype)
        self._matrix_scales()
        self._update = self.kind.update
        if compile:  # train.capture: compiled: one fused kernel instead of ~10 memory-bound passes
            self._update = Captured(self._update, f"the {self.kind.name} update")
        self.fused = None if compile or self.kind.fused_adam is None else self._pick_fused(param.device)
        self.step_count = torch.zeros((), dtype=torch.float32, device=param.device)  # the fused kernels' step
        self._read_rows()

    def _matrix_scales(self):
        """(start, end, shape, scale) of each matrix step: Muon's 0.2 sqrt(max(rows, cols)) per member and
        matrix, from the member's own (unpadded) shape."""
        self.matrices = []
        for a, b, shape in self.matrix_segments:
            if self.pad is None:
                self.matrices.append((a, b, shape, 0.2 * max(shape) ** 0.5))
                continue
            mask = self.pad[:, a:b].reshape(-1, *shape) > 0
            rows, cols = mask.any(2).sum(1), mask.any(1).sum(1)
            self.matrices.append((a, b, shape, (0.2 * torch.maximum(rows, cols).to(self.param.dtype).sqrt())
                                  .view(-1, 1)))

    def _pick_fused(self, device) -> str | None:
        """Which of torch's fused Adam kernels to use; None keeps the update above (~11 elementwise passes).

        "direction": one fused kernel for the whole pack computes every member's bias-corrected direction with
        lr = 1, then the per-member lr and decay are applied as [K, 1] columns: 4 calls instead of ~11,
        whatever K. It needs betas and eps shared by the pack, since the kernel takes them as scalars.
        "rows" (CPU, rows of >= ROWS_MIN_P entries): one fused kernel per member row with that member's own
        hyperparameters, 7 memory passes instead of ~12; it wins once the pack's state leaves the cache, and
        loses to its ~10 us per call below that (benchmarks/README.md).
        """
        if device.type == "cpu" and self.param.shape[1] >= ROWS_MIN_P:
            return "rows"
        shared = all(bool((self.h[k] == self.h[k][0]).all()) for k in ("beta1", "beta2", "eps"))
        return "direction" if shared else None

    def _read_rows(self):
        """Host copies of the per-member hyperparameters, for the per-row kernels."""
        self.rows = list(zip(*(self.h[k].view(-1).tolist() for k in ("lr", "weight_decay", "beta1", "beta2", "eps",
                                                                     "warmup_steps")), strict=True))

    @torch.no_grad()
    def step(self, step: int, active: torch.Tensor):
        """Apply update number `step` (0-based); `active` [K, 1] bool says which members may move."""
        for _, transform in self.transforms:
            transform.apply_(self.param, self.grad, self.h)
        if self.fused == "rows":
            return self._step_rows(step, active)
        h = self.h
        lr = h["lr"] * active
        if self.has_warmup:
            lr = lr * P.warmup_factor(step, h["warmup_steps"], self.warmup_from_zero)
        noise = None
        if self.kind.noise:
            noise = self.noise.normal(self.param.shape[1:], self.param.dtype, self.param.device)
            noise = noise if self.pad is None else noise.mul_(self.pad)
        if self.fused == "direction":
            return self._step_direction(step, lr)
        # The 1-based step as a tensor, so a compiled update is not specialised on (recompiled for) each step.
        n = torch.tensor(float(step + 1), dtype=self.param.dtype, device=self.param.device)
        self._update(self.param, self.grad, self.scratch, lr, h, self.state, n, noise, self.matrices)

    def _step_rows(self, step: int, active: torch.Tensor):
        kernel = P.fused_adam_kernel(decoupled=self.kind.fused_adam == "decoupled")  # else coupled L2
        self.step_count.fill_(step + 1)
        m, v = self.state["exp_avg"], self.state["exp_avg_sq"]
        for k, on in enumerate(active.view(-1).tolist()):
            if not on:
                continue
            lr, wd, b1, b2, eps, warmup = self.rows[k]
            lr *= P.warmup_factor(step, warmup, self.warmup_from_zero)
            kernel([self.param[k]], [self.grad[k]], [m[k]], [v[k]], [], [self.step_count], lr=lr, beta1=b1,
                   beta2=b2, weight_decay=wd, eps=eps, amsgrad=False, maximize=False)

    def _step_direction(self, step: int, lr: torch.Tensor):
        h, s = self.h, self.scratch
        if self.kind.fused_adam == "coupled":  # L2 goes into the gradient the moments see
            self.grad.addcmul_(self.param, h["weight_decay"])
        self.step_count.fill_(step + 1)
        s.zero_()  # the kernel's "parameter": it ends as minus the direction, m_hat / (sqrt(v_hat) + eps)
        P.fused_adam_kernel(decoupled=False)([s], [self.grad], [self.state["exp_avg"]], [self.state["exp_avg_sq"]], [],
                           [self.step_count], lr=1.0, beta1=float(h["beta1"][0]), beta2=float(h["beta2"][0]),
                           weight_decay=0.0, eps=float(h["eps"][0]), amsgrad=False, maximize=False)
        if self.kind.fused_adam == "decoupled":
            P.decoupled_decay_(self.param, lr, h["weight_decay"])
        self.param.addcmul_(s, lr)

    def tensors_per_parameter(self) -> int:
        """Parameter-sized tensors this optimizer keeps per member across steps: its state, its transforms'."""
        return len(self.kind.state) + self.history

    def select_members(self, idx: torch.Tensor, param, grad, pad_mask):
        """Follow a pack that dropped members: keep rows `idx` of every per-member tensor."""
        self.param, self.grad = param, grad
        self.h = {k: v.index_select(0, idx) for k, v in self.h.items()}
        self.state = {k: v.index_select(0, idx) for k, v in self.state.items()}
        self.scratch = torch.empty_like(param)
        self.pad = None if pad_mask is None else pad_mask.to(param.dtype)
        self._matrix_scales()
        if self.noise is not None:
            self.noise.select(idx.tolist())
        for _, transform in self.transforms:
            transform.select(idx)
        self._read_rows()

    def state_dict(self) -> dict:
        out = {k: v.clone() for k, v in self.state.items()}
        if self.noise is not None:
            out["noise"] = self.noise.state_dict()
        for t, transform in self.transforms:
            if held := transform.state_dict():  # a stateless transform (⊥Grad) keeps nothing
                out[t.key()] = held
        return out

    def load_state_dict(self, state: dict):
        for key, value in self.state.items():
            value.copy_(state[key])
        if self.noise is not None:
            self.noise.load_state_dict(state["noise"])
        for t, transform in self.transforms:
            if t.key() in state or transform.state_dict():  # a stateless transform wrote nothing
                transform.load_state_dict(state[t.key()])


def pack_optimizers(model, family, configs, compile: bool) -> dict[str, GroupOptimizer]:
    """One optimizer per parameter group the model has, each member with its own settings and noise stream.
    Muon takes the group's hidden matrices (`muon_on: hidden`, common practice: the model's input embeddings and
    output head go to AdamW) or all of them (`muon_on: all`)."""
    out, io = {}, model.io_names()
    for gi, g in enumerate(family_groups(family, configs[0].model)):
        if g in model.flat:
            named = [(name, (a, b, shape)) for name, (group, a, b, shape) in model.layout.items() if group == g]
            hidden = configs[0].optim[g].muon_on == "hidden"
            out[g] = GroupOptimizer(
                model.flat[g], model.flat_grad[g], [c.optim[g] for c in configs], [c.seed for c in configs],
                salt=gi + 1, pad_mask=model.pad_masks.get(g), compile=compile, segments=[s for _, s in named],
                muon_segments=[s for name, s in named if not (hidden and name in io)],
            )
    return out
