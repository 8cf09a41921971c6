"""`pack_size: auto`: K follows the member's footprint, bounded by the sweep size and the family's limit."""

from grokray.engine import PackTrainer
from grokray.engine.sizing import CPU_WORKING_SET, MAX_GPU_PACK, MAX_PACK, auto_pack_size, member_bytes
from grokray.spec.build import build_spec

TOY = {
    "task": {"name": "addition", "p": 10, "train_size": 45},
    "model": {"name": "toy", "embed_dim": 1, "hidden": [200, 200]},
}


def cfg(*over):
    return build_spec(TOY, list(over)).first_trial()


def test_wider_members_get_smaller_packs():
    narrow, wide = cfg("model.hidden=[32, 32]"), cfg()
    k_narrow, k_wide = auto_pack_size(narrow, 10_000), auto_pack_size(wide, 10_000)
    assert k_narrow > k_wide >= 1
    assert k_wide == CPU_WORKING_SET // member_bytes(PackTrainer([wide]))


def test_bounded_by_sweep_size_and_cap():
    assert auto_pack_size(cfg(), 3) == 3
    assert auto_pack_size(cfg(), 1) == 1
    assert auto_pack_size(cfg("model.hidden=[2]", "model.embed_dim=1"), 10**6) <= MAX_PACK


def test_memory_model_of_1024_toy_members():
    """The figure benchmarks/README.md quotes: 1024 of Liu's toy models (width 200) fit in about 1.1 GiB."""
    need = member_bytes(PackTrainer([cfg()]))
    assert 0.5 * 2**30 < 1024 * need < 1.5 * 2**30


def test_auto_pack_on_a_gpu_follows_the_devices_free_memory():
    """No GPU here: the sizing model's inputs stand in for what the card reports (torch.cuda.mem_get_info)."""
    from grokray.engine.sizing import GPU_FRACTION, members_that_fit

    need = member_bytes(PackTrainer([cfg()]))  # ~1 MiB for Liu's toy at width 200
    free = 2**30
    k = auto_pack_size(cfg(), 10_000, "cuda", gpu_fraction=0.5, free_bytes=free)
    assert k == members_that_fit(need, free, 0.5) == int(free * GPU_FRACTION * 0.5 // need)
    assert auto_pack_size(cfg(), 10_000, "cuda", gpu_fraction=0.5, free_bytes=2 * free) in (2 * k, 2 * k + 1)
    assert auto_pack_size(cfg(), 10_000, "cuda", gpu_fraction=0.25, free_bytes=free) in (k // 2, k // 2 + 1)
    assert auto_pack_size(cfg(), 10_000, "cuda", free_bytes=80 * 2**30) == MAX_GPU_PACK  # a whole H100: the cap
    assert auto_pack_size(cfg(), 10_000, "cuda", free_bytes=need) == 1  # never below one member
    assert k > auto_pack_size(cfg(), 10_000, "cpu")  # a GPU packs far more than the CPU's cache-sized rule


def test_a_gpu_sweep_is_dealt_into_packs_the_card_holds():
    from grokray.plan.expand import expand

    spec = build_spec({**TOY, "sweep": {"optim.decoder.lr": {"logspace": [-4, -2, 40]}}, "seeds": [0, 1, 2],
                       "resources": {"gpu": 0.5}})
    need = member_bytes(PackTrainer([spec.first_trial()]))
    small = expand(spec, slots=2, gpu_free_bytes=40 * need)  # 40 * 0.5 * 0.5 = 10 members a pack
    assert [len(p.members) for p in small.packs] == [10] * 12
    big = expand(spec, slots=1, gpu_free_bytes=4000 * need)  # the card holds all 120: one pack for one slot
    assert [len(p.members) for p in big.packs] == [120]
    shared = expand(spec, slots=2, gpu_free_bytes=4000 * need)  # gpu: 0.5, two slots a card: two packs share it
    assert [len(p.members) for p in shared.packs] == [60, 60]


def test_a_small_gpu_share_still_deals_a_few_large_packs_a_card():
    """gpu: 0.08 gives a card 12 slots; auto deals two packs a card, not twelve small ones (issue 50: twelve
    small packs kept an H200 27-57 % busy), and the dry-run says so."""
    from grokray.plan.estimate import packing_reason
    from grokray.plan.expand import GPU_PACKS_PER_CARD, expand

    spec = build_spec({**TOY, "sweep": {"optim.decoder.lr": {"logspace": [-4, -2, 40]}}, "seeds": [0, 1, 2],
                       "resources": {"gpu": 0.08}})
    need = member_bytes(PackTrainer([spec.first_trial()]))
    one_card = expand(spec, slots=12, gpu_free_bytes=10**5 * need)
    assert GPU_PACKS_PER_CARD == 2 and [len(p.members) for p in one_card.packs] == [60, 60]
    two_cards = expand(spec, slots=25, gpu_free_bytes=10**5 * need)
    assert [len(p.members) for p in two_cards.packs] == [30] * 4
    tight = expand(spec, slots=12, gpu_free_bytes=200 * need)  # 200 * 0.5 * 0.08 = 8 members fit a pack
    assert max(len(p.members) for p in tight.packs) <= 8 and sum(len(p.members) for p in tight.packs) == 120
    reason = packing_reason(one_card, 12)
    assert "dealt into at least 2 packs (2 a card" in reason and f"up to {MAX_GPU_PACK}" in reason
