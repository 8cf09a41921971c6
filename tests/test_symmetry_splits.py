"""Symmetry-aware splits of the modular task (rfm-symmetry-breaking): what each split_mode holds out.

Seeds: split seeds 0 and 1 (trial seeds), p = 7 and 11; every check is exact set arithmetic.
"""

import pytest
import torch

from grokray.errors import SpecError
from grokray.spec.build import build_spec


def task(**fields):
    raw = {"task": {"name": "modular", "p": 11, **fields}, "model": {"name": "toy"}}
    return build_spec(raw).first_trial().task


def pairs(t, seed=0):
    data = t.data()
    tr, va = t.split(data, seed)
    return data, {tuple(r) for r in data.x[tr].tolist()}, {tuple(r) for r in data.x[va].tolist()}


def s_r(k, p):
    """The reflection s·r^k of the dihedral symmetry group of a + b mod p: (a, b) -> (b - k, a + k)."""
    return lambda ab: ((ab[1] - k) % p, (ab[0] + k) % p)


def test_withhold_diagonal_holds_out_exactly_the_fixed_points_of_s():
    data, train, val = pairs(task(split_mode="withhold_diagonal"))
    assert val == {(a, a) for a in range(11)}
    assert train == {tuple(r) for r in data.x.tolist()} - val  # all other 110 points train
    assert len(train) == 110


@pytest.mark.parametrize("k", [0, 1, 4, 10])
def test_withhold_reflection_holds_out_fixed_points_of_s_r_k(k):
    _, train, val = pairs(task(split_mode="withhold_reflection", reflection_k=k))
    g = s_r(k, 11)
    assert len(val) == 11 and all(g(ab) == ab for ab in val)
    assert not any(g(ab) == ab for ab in train)
    # the labels a + b of the fixed points are 2a + k: every residue once (p odd)
    assert sorted((a + b) % 11 for a, b in val) == list(range(11))


def test_withhold_symmetric_keeps_the_training_set_invariant_under_s():
    for seed in (0, 1):
        _, train, val = pairs(task(split_mode="withhold_symmetric"), seed)
        assert len(val) == 12  # p = 11 rounded up to whole pairs
        assert all((b, a) in val and a != b for a, b in val)
        assert all((b, a) in train for a, b in train)
        assert {(a, a) for a in range(11)} <= train


def test_random_control_matches_the_diagonal_count_and_is_seeded():
    t = task(split_mode="random_control")
    _, train0, val0 = pairs(t, 0)
    _, _, again = pairs(t, 0)
    _, _, val1 = pairs(t, 1)
    assert len(val0) == 11 and len(train0) == 110
    assert val0 == again and val0 != val1
    _, _, fixed = pairs(task(split_mode="random_control", split_seed=5), 0)
    assert fixed == pairs(task(split_mode="random_control", split_seed=5), 1)[2]  # split_seed overrides the trial seed


def test_train_fraction_subsamples_the_remaining_points():
    _, train, val = pairs(task(split_mode="withhold_diagonal", train_fraction=0.5))
    assert len(train) == round(0.5 * 121) and val == {(a, a) for a in range(11)}
    assert not train & val


def test_division_tables_have_no_zero_divisor_points():
    t = task(op="div", split_mode="withhold_diagonal")
    _, train, val = pairs(t)
    assert val == {(a, a) for a in range(1, 11)} and len(train) == 11 * 10 - 10
    _, _, control = pairs(task(op="div", split_mode="random_control"))
    assert len(control) == 10


def test_random_split_is_unchanged_by_the_new_fields():
    data = task().data()
    tr, va = task().split(data, 3)
    assert len(tr) == round(0.5 * 121) and len(tr) + len(va) == 121
    assert torch.equal(tr, task(split_mode="random").split(data, 3)[0])


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"split_mode": "withhold_reflection", "reflection_k": 11}, "task.reflection_k"),
        ({"split_mode": "withhold_diagonal", "reflection_k": 2}, "task.reflection_k"),
        ({"split_mode": "withhold_diagonal", "withhold_count": 3}, "task.withhold_count"),
        ({"split_mode": "random_control", "withhold_count": 121}, "task.withhold_count"),
        ({"split_mode": "withhold_diagonal", "train_size": 115}, "task.train_size"),
        ({"split_mode": "withhold_everything"}, "task.split_mode"),
    ],
)
def test_bad_split_fields_name_the_field(fields, field):
    with pytest.raises(SpecError) as err:
        task(**fields)
    assert err.value.field == field
