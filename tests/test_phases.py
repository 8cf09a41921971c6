"""The phase table of Liu et al. (appendix A), row by row, plus the edge cases grokray names explicitly."""

import pytest

from grokray.phases import PHASES, classify, gap, is_decided
from grokray.spec.blocks import PhaseConfig

CFG = PhaseConfig(threshold=0.9, budget=10_000, gap=1000)


@pytest.mark.parametrize(
    ("step_train", "step_val", "diverged", "phase"),
    [
        (100, 300, False, "comprehension"),  # both within budget, gap 200 < 1000
        (100, 5000, False, "grokking"),  # gap 4900 >= 1000
        (100, None, False, "memorization"),
        (None, None, False, "confusion"),
        (None, 400, False, "val_without_train"),  # val reached, train never: not comprehension
        (100, 300, True, "diverged"),  # divergence wins over any crossing
        (100, 1100, False, "grokking"),  # gap exactly equal to the gap threshold is not "< gap"
        (100, 1099, False, "comprehension"),  # one step under the threshold
        (500, 200, False, "comprehension"),  # val before train: negative gap
        (100, 10_001, False, "memorization"),  # val crossing after the budget does not count
        (10_001, 10_002, False, "confusion"),  # neither within budget
        (10_000, 10_000, False, "comprehension"),  # crossings exactly at the budget count
    ],
)
def test_phase_table(step_train, step_val, diverged, phase):
    assert classify(step_train, step_val, diverged, CFG) == phase


def test_every_label_reachable_and_listed():
    seen = {
        classify(st, sv, d, CFG)
        for st in (None, 1, 5000)
        for sv in (None, 2, 9000)
        for d in (False, True)
    }
    assert seen == set(PHASES)


def test_thresholds_are_fields():
    tight = PhaseConfig(threshold=0.9, budget=10_000, gap=50)
    assert classify(100, 300, False, tight) == "grokking"
    short = PhaseConfig(threshold=0.9, budget=200, gap=1000)
    assert classify(100, 300, False, short) == "memorization"


def test_decided_only_when_nothing_can_change():
    assert is_decided(10, 20, False, 30, CFG)
    assert is_decided(None, None, True, 5, CFG)
    assert not is_decided(10, None, False, 5000, CFG)  # could still grok
    assert not is_decided(None, 10, False, 5000, CFG)  # train could still cross
    assert is_decided(10, None, False, 10_000, CFG)  # budget spent
    assert gap(10, 25) == 15 and gap(None, 3) is None


def test_an_undecodable_split_counts_apart_but_a_divergence_stays_the_models():
    from grokray.phases import UNDECODABLE, counted_phase, ordered

    assert counted_phase("memorization", 0.8, 0.9) == UNDECODABLE
    assert counted_phase("confusion", 0.8, 0.9) == UNDECODABLE
    assert counted_phase("diverged", 0.8, 0.9) == "diverged"
    assert counted_phase("memorization", 0.9, 0.9) == "memorization"  # the split can just reach it: it counts
    assert counted_phase("memorization", None, 0.9) == "memorization"  # a task without the ideal accuracy
    assert ordered({"undecodable": 1, "diverged": 2, "grokking": 3, "zeta": 1}) == \
        ["grokking", "diverged", "undecodable", "zeta"]


def test_train_says_when_its_split_is_undecodable():
    """Issue 52: `grokray train` of the quickstart's seed 0 printed `phase: memorization` with no word that no model
    can reach 0.9 on that split; it now says so, and says nothing of the kind on a decodable split."""
    from grokray.engine.result import MemberResult
    from grokray.terminal import phase_line

    result = MemberResult("memorization", 40, None, None, 10000, {}, {}, ideal_val_acc=0.8)
    line = phase_line(result, 0.9)
    assert line.startswith("phase: memorization") and "undecodable split" in line and "0.80" in line
    decodable = MemberResult("memorization", 40, None, None, 10000, {}, {}, ideal_val_acc=1.0)
    assert "undecodable" not in phase_line(decodable, 0.9)
