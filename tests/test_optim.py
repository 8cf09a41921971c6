"""The pack optimizers against torch.optim's own Adam and AdamW, member by member.

Every path GroupOptimizer can take (the reference update, the per-row fused kernels used on a CPU, and the
pack-wide fused direction used on a GPU) must give each member exactly what torch.optim gives that member
alone, including a frozen member that must not move and a warmup. Data: torch.manual_seed(0), float64.
"""

import pytest
import torch

from grokray.optim.group import GroupOptimizer
from grokray.spec.blocks import OptimConfig

CONFIGS = [
    dict(lr=1e-2, weight_decay=0.0),
    dict(lr=3e-3, weight_decay=1.0),
    dict(lr=1e-1, weight_decay=5.0, betas=(0.8, 0.98)),
    dict(lr=2e-2, weight_decay=0.1, warmup_steps=4, eps=1e-6),
]


def reference(kind, cfg, p0, grads, frozen_after=None):
    """torch.optim on one member; the learning rate is scaled by hand for warmup."""
    p = p0.clone().requires_grad_(True)
    opt_cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
    opt = opt_cls([p], lr=cfg["lr"], weight_decay=cfg["weight_decay"], betas=cfg.get("betas", (0.9, 0.999)),
                  eps=cfg.get("eps", 1e-8), foreach=False)
    for t, g in enumerate(grads):
        if frozen_after is not None and t >= frozen_after:
            break
        warm = cfg.get("warmup_steps", 0)
        opt.param_groups[0]["lr"] = cfg["lr"] * (min((t + 1) / warm, 1.0) if warm else 1.0)
        p.grad = g.clone()
        opt.step()
    return p.detach()


@pytest.mark.parametrize("kind", ["adamw", "adam"])
@pytest.mark.parametrize("path", [None, "rows", "direction"])
def test_pack_optimizer_matches_torch_optim_per_member(kind, path):
    torch.manual_seed(0)
    K, P, steps, freeze_member, freeze_at = len(CONFIGS), 37, 12, 1, 5
    configs = [dict(c, betas=(0.9, 0.999), eps=1e-8) if path == "direction" else c for c in CONFIGS]
    p0 = torch.randn(K, P, dtype=torch.float64)
    grads = torch.randn(steps, K, P, dtype=torch.float64)
    param, grad = p0.clone(), torch.zeros_like(p0)
    opt = GroupOptimizer(param, grad, [OptimConfig(name=kind, **c) for c in configs], list(range(K)), salt=1)
    opt.fused = path
    active = torch.ones((K, 1), dtype=torch.bool)
    for t in range(steps):
        active[freeze_member] = t < freeze_at
        grad.copy_(grads[t])
        opt.step(t, active)
    for k, c in enumerate(configs):
        want = reference(kind, c, p0[k], grads[:, k], freeze_at if k == freeze_member else None)
        assert torch.allclose(param[k], want, rtol=1e-12, atol=1e-12), (kind, path, k)
    assert not torch.equal(param, p0)


def test_each_pack_takes_the_fused_path_that_suits_it():
    def path(kind, shape, **cfg):
        param = torch.zeros(shape)
        configs = [OptimConfig(name=kind, **cfg), OptimConfig(name=kind, **dict(cfg, betas=(0.8, 0.99)))]
        return GroupOptimizer(param, torch.zeros_like(param), configs[: shape[0]], [0, 1], salt=1).fused

    assert path("adamw", (1, 5)) == "direction"  # small rows: one call for the whole pack
    assert path("adamw", (2, 5)) is None  # betas differ within the pack: the kernel cannot take them
    assert path("adam", (2, 50_000)) == "rows"  # long rows on a CPU: one call per member, any betas
    assert path("sgd", (1, 50_000)) is None


def test_the_private_torch_kernels_grokray_adapts_are_there():
    """grokray.optim.primitives.fused_adam_kernel is the one use of torch's private fused Adam kernels: a torch
    that renames them fails here, by name, not inside a sweep's first step."""
    from grokray.optim.primitives import fused_adam_kernel

    for decoupled, name in ((True, "_fused_adamw_"), (False, "_fused_adam_")):
        kernel = fused_adam_kernel(decoupled)
        assert callable(kernel) and kernel is getattr(torch, name), f"torch {torch.__version__} lacks torch.{name}"
        p, g = torch.ones(3), torch.full((3,), 0.5)
        m, v, step = torch.zeros(3), torch.zeros(3), torch.ones(())
        kernel([p], [g], [m], [v], [], [step], lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8,
               amsgrad=False, maximize=False)
        assert torch.allclose(p, torch.full((3,), 0.9), atol=1e-5)  # Adam's first step moves each weight by lr


def test_every_optimizer_name_a_spec_may_give_is_a_registered_kind_and_sizing_asks_it_its_state():
    """optim/kinds: a kind declares its per-parameter state, and memory sizing counts what it declares (issue 54:
    member_bytes assumed Adam's two moments). The kinds are the one list a spec's optim.<group>.name is checked
    against (issue 72: it was also a Literal kept in sync by this test)."""
    from grokray.errors import SpecError
    from grokray.optim.kinds import KINDS
    from grokray.spec.blocks import parse_optim

    expected = {"adamw": 2, "adam": 2, "sgd": 1, "normalized_gd": 0, "langevin": 0, "muon": 3}
    assert set(expected) == set(KINDS)
    for name in KINDS:
        p = torch.zeros(2, 6, dtype=torch.float64)
        opt = GroupOptimizer(p, torch.zeros_like(p), [OptimConfig(name=name)] * 2, [0, 1], salt=1)
        state = {k: v for k, v in opt.state_dict().items() if k != "noise"}  # langevin's draws are no tensor state
        assert opt.tensors_per_parameter() == len(state) == expected[name], name
    with pytest.raises(SpecError) as err:
        parse_optim({"name": "adamx"}, "optim.decoder")
    assert err.value.field == "optim.decoder.name" and f"allowed: {', '.join(KINDS)}" in str(err.value)
