"""`pack_size: auto`: K follows the member's footprint, bounded by the sweep size and the family's limit."""

from grokray.engine import PackTrainer
from grokray.engine.sizing import CPU_WORKING_SET, MAX_PACK, auto_pack_size, member_bytes
from grokray.spec import build_spec

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
