"""The contract every gradient-trained family implements, and the stacking that makes packs free.

A family writes `init_member` (one member's tensors, drawn from that member's generator at that member's
size) and `forward` (stacked). `PackedModel.__init__` pads and stacks the members; K = 1 is an ordinary
single trial.
"""

from __future__ import annotations

import torch

from .layers import pad_stack


class PackedModel(torch.nn.Module):
    groups: tuple[str, ...] = ("embedding", "decoder")
    per_member_fields: frozenset[str] = frozenset()  # config fields that may differ inside one pack
    uses_dropout: bool = False

    def __init__(self, configs: list, data, seeds: list[int], init_scales: list[dict[str, float]],
                 dtype=torch.float32, device="cpu"):
        super().__init__()
        self.cfg = configs[0]  # shared architecture; per-member fields are read from `self.configs`
        self.configs = configs
        self.data_meta = data
        gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
        members = [self.init_member(c, data, g, sc) for c, g, sc in zip(configs, gens, init_scales, strict=True)]
        self.params = torch.nn.ParameterDict()
        self.pad_masks: dict[str, torch.Tensor] = {}
        for name in members[0]:
            stacked, mask = pad_stack([m[name] for m in members])
            self.params[name.replace(".", "__")] = torch.nn.Parameter(stacked.to(dtype=dtype, device=device))
            if mask is not None:
                self.pad_masks[name] = mask.to(device)
        self.head = self.make_head(configs, data, gens, dtype, device)

    # -- what a family provides -------------------------------------------------------------------------
    @staticmethod
    def init_member(cfg, data, gen: torch.Generator, init_scales: dict[str, float]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def make_head(self, configs, data, gens, dtype, device):
        raise NotImplementedError

    def group_of(self, name: str) -> str:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, rng=None) -> torch.Tensor:
        """x: [K, B, ...] inputs -> [K, B, out_dim]. `rng` (a MemberRandom) is given only in training mode."""
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------------------------
    def p(self, name: str) -> torch.Tensor:
        return self.params[name.replace(".", "__")]

    def named_stacked(self):
        for key, param in self.params.items():
            yield key.replace("__", "."), param

    def group_params(self, group: str) -> list[tuple[str, torch.Tensor]]:
        return [(n, p) for n, p in self.named_stacked() if self.group_of(n) == group]

    def weight_norm(self) -> torch.Tensor:
        """Per-member L2 norm of all parameters, [K] (Omnigrok's diagnostic)."""
        return torch.sqrt(sum(p.detach().flatten(1).pow(2).sum(1) for _, p in self.named_stacked()))

    @property
    def size(self) -> int:
        return next(iter(self.params.values())).shape[0]
