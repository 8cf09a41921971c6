"""Adaptive refinement as a pure function, on synthetic phase maps; the adaptive: block's validation; the
probability-map data (Wilson intervals, nearest-point fill)."""

import copy
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from grokray.errors import SpecError
from grokray.plan.lattice import AdaptivePlan, AxisLattice, Lattice, RefineRules, parse_adaptive
from grokray.plan.refine import Cell, fill, leaf_cells, majority, next_points
from grokray.spec.build import build_spec, read_yaml

QUICKSTART = Path(__file__).resolve().parents[1] / "sweeps" / "quickstart.yaml"
N = 17


def make_plan(budget=None, seeds=(0,), rules=None, n=N, start=5):
    lat = Lattice(AxisLattice("optim.decoder.lr", 1e-4, 1e-2, True, start, n),
                  AxisLattice("optim.decoder.weight_decay", 0.0, 10.0, False, start, n))
    full = n * n * len(seeds)
    return AdaptivePlan(lat, rules or RefineRules(), full if budget is None else budget, tuple(seeds))


def run_rounds(plan, oracle, max_rounds=20):
    """Drive next_points to the end with phases from oracle(i, j, seed); check the proposal invariants."""
    observed, history = {}, []
    for _ in range(max_rounds):
        before = copy.deepcopy(observed)
        ref = next_points(plan, observed)
        assert observed == before  # pure: the input is not touched
        assert next_points(plan, observed) == ref  # and the answer depends on it alone
        if not ref.trials:
            return observed, history
        assert len(set(ref.trials)) == len(ref.trials)
        for i, j, s in ref.trials:
            assert s not in observed.get((i, j), {})  # never re-proposed
        used = sum(len(v) for v in observed.values())
        assert used + len(ref.trials) <= plan.budget
        history.append((copy.deepcopy(observed), ref))
        for i, j, s in ref.trials:
            observed.setdefault((i, j), {})[s] = oracle(i, j, s)
    raise AssertionError("refinement did not stop")


def check_only_near_boundaries(plan, history, oracle_major):
    """Every point after the start grid lies in a cell that was split because its corners' majority phases
    differ or a corner's seeds disagree; that reason is true of the observations at the time."""
    for observed, ref in history[1:]:
        allowed = set()
        for cell, why in ref.cells:
            corners = [observed[c] for c in cell.corners]
            majors = {majority(list(v.values())) for v in corners}
            if why == "boundary":
                assert len(majors) > 1
            else:
                assert why == "disagreement" and any(len(set(v.values())) > 1 for v in corners)
            pts, _ = cell.split()
            allowed.update(pts)
        allowed.update(ref.extra)
        for i, j, _ in ref.trials:
            assert (i, j) in allowed


def truth_grid(plan, oracle):
    return np.array([[oracle(i, j, 0) for j in range(plan.lattice.y.target)] for i in range(plan.lattice.x.target)],
                    dtype=object)


def test_straight_boundary_is_traced_at_full_resolution():
    plan = make_plan()

    def oracle(i, j, s):
        return "memorization" if i > 6.5 else "comprehension"  # a vertical line between lattice columns 6 and 7

    observed, history = run_rounds(plan, oracle)
    check_only_near_boundaries(plan, history, oracle)
    assert (fill(plan, observed) == truth_grid(plan, oracle)).all()
    # round 0 is the 5x5 start grid; only the column of cells [4, 8] is refined, then [6, 8]
    assert len(history[0][1].trials) == 25
    assert {c for c, _ in history[1][1].cells} == {Cell(4, 8, j, j + 4) for j in (0, 4, 8, 12)}
    assert all(c.i0 == 6 and c.i1 == 8 for c, _ in history[2][1].cells)
    sampled_columns = {i for i, _ in observed}
    assert sampled_columns == {0, 4, 6, 7, 8, 12, 16}  # nothing inside the uniform regions
    # the line crosses each cell from bottom to top, so cells are split along lr only, at the midpoints of
    # their bottom and top edges (shared between neighbours), never at centres, until lr is at full resolution
    assert [sorted(ref.trials) for _, ref in history[1:3]] == [[(6, j, 0) for j in range(0, 17, 4)],
                                                               [(7, j, 0) for j in range(0, 17, 4)]]
    assert len(observed) < 0.25 * N * N


def test_corner_region():
    plan = make_plan()

    def oracle(i, j, s):
        return "grokking" if i >= 10 and j >= 11 else "comprehension"

    observed, history = run_rounds(plan, oracle)
    check_only_near_boundaries(plan, history, oracle)
    assert (fill(plan, observed) == truth_grid(plan, oracle)).all()
    for i, j in observed:  # refined points hug the two edges of the corner region
        if i % 4 or j % 4:
            assert 8 <= i <= 12 or 8 <= j <= 12
    leaves = leaf_cells(plan.lattice, set(observed))
    assert Cell(0, 4, 0, 4) in leaves and Cell(12, 16, 12, 16) in leaves  # uniform cells stay coarse


def test_single_noisy_cell_gets_refined_and_extra_seeds():
    rules = RefineRules(disagreement=0.25, extra_seeds=[7, 8])
    plan = make_plan(seeds=(0, 1, 2), rules=rules)

    def oracle(i, j, s):
        return "memorization" if (i, j) == (8, 8) and s in (2, 8) else "comprehension"

    observed, history = run_rounds(plan, oracle)
    check_only_near_boundaries(plan, history, oracle)
    first = history[1][1]
    assert sorted(c for c, _ in first.cells) == [Cell(4, 8, 4, 8), Cell(4, 8, 8, 12), Cell(8, 12, 4, 8),
                                                Cell(8, 12, 8, 12)]
    assert {why for _, why in first.cells} == {"disagreement"} and first.extra == [(8, 8)]
    assert set(observed[(8, 8)]) == {0, 1, 2, 7, 8}
    for i, j in observed:
        assert (i % 4 == 0 and j % 4 == 0) or (4 <= i <= 12 and 4 <= j <= 12)
    assert (fill(plan, observed) == "comprehension").all()  # 3 of 5 seeds: majority comprehension
    # with the rule off, a noisy point alone changes nothing
    quiet = make_plan(seeds=(0, 1, 2), rules=RefineRules(disagreement=None))
    observed, history = run_rounds(quiet, oracle)
    assert len(history) == 1 and len(observed) == 25


@pytest.mark.parametrize("budget", [25, 40, 61, 100])
def test_budget_is_respected(budget):
    plan = make_plan(budget=budget)

    def oracle(i, j, s):
        return "confusion" if i + 0.7 * j > 11.2 else "comprehension"  # a diagonal: many boundary cells

    observed, history = run_rounds(plan, oracle)
    total = sum(len(v) for v in observed.values())
    assert total <= budget
    assert total >= budget - 5  # whole cells only, but the budget is used up to the last one that fits
    if budget < 100:
        assert history[-1][1].skipped > 0 or next_points(plan, observed).trials == []
    # coarser boundary cells are split before finer ones
    for _, ref in history[1:]:
        areas = [(c.i1 - c.i0) * (c.j1 - c.j0) for c, why in ref.cells if why == "boundary"]
        assert areas == sorted(areas, reverse=True)


def test_log_axes_are_refined_in_log_space():
    plan = make_plan()
    x, y = plan.lattice.x, plan.lattice.y
    vx, vy = x.values(), y.values()
    assert vx[0] == pytest.approx(1e-4) and vx[-1] == pytest.approx(1e-2)
    for a in range(0, N - 1, 2):  # a midpoint inserted between lattice points a and a+2
        assert vx[a + 1] == pytest.approx(math.sqrt(vx[a] * vx[a + 2]))  # geometric on the log axis
        assert vy[a + 1] == pytest.approx((vy[a] + vy[a + 2]) / 2)  # arithmetic on the linear one
    assert vx[2] == pytest.approx(10**-3.75) and vy[2] == pytest.approx(1.25)

    def oracle(i, j, s):
        return "memorization" if i > 6.5 else "comprehension"

    observed, _ = run_rounds(plan, oracle)
    lrs = sorted({plan.lattice.point(i, j)["optim.decoder.lr"] for i, j in observed})
    assert lrs == pytest.approx([10**e for e in (-4, -3.5, -3.25, -3.125, -3, -2.5, -2)])


def test_adaptive_block_from_the_spec():
    raw = read_yaml(QUICKSTART)
    spec = build_spec({**raw, "adaptive": {"start": [5, 3], "target": [17, 9], "budget": 60,
                                           "refine": {"disagreement": 0.3, "extra_seeds": [5]}}})
    plan = parse_adaptive(spec)
    assert (plan.lattice.x.key, plan.lattice.y.key) == ("optim.decoder.lr", "optim.decoder.weight_decay")
    assert plan.lattice.x.log and not plan.lattice.y.log
    assert (plan.lattice.x.lo, plan.lattice.x.hi, plan.lattice.y.lo, plan.lattice.y.hi) == pytest.approx(
        (1e-4, 1e-2, 0, 10))
    assert plan.budget == 60 and plan.rules.extra_seeds == [5] and plan.seeds == (0, 1, 2, 3)
    assert len(next_points(plan, {}).trials) == 15 * 4  # the 5 x 3 start grid, every seed
    assert parse_adaptive(build_spec(raw), {}).budget == 17 * 17 * 4  # --adaptive on a spec without the block

    def err(block, **extra):
        with pytest.raises(SpecError) as info:
            parse_adaptive(build_spec({**raw, "adaptive": block, **extra}))
        return info.value.field

    assert err({"target": [16, 17]}) == "adaptive.target[0]"
    assert err({"axes": ["optim.decoder.lr", "task.p"]}) == "adaptive.axes"
    assert err({"budget": 10}) == "adaptive.budget"
    assert err({"start": [1, 5]}) == "adaptive.start[0]"
    assert err({"refine": {"disagreement": 1.5}}) == "adaptive.refine.disagreement"
    assert err({"refine": {"extra_seeds": [1]}}) == "adaptive.refine.extra_seeds"
    assert err({"strat": [5, 5]}) == "adaptive.strat"
    assert err({"refine": {"boundry": True}}) == "adaptive.refine.boundry"
    assert err({}, sweep={**raw["sweep"], "task.train_size": {"values": [40, 45]}}) == "adaptive.axes"


# -- probability maps --------------------------------------------------------------------------------------------
def wilson_direct(k, n, z):
    p = k / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


def test_wilson_intervals_match_a_direct_computation():
    from analysis.probability import probability_map, wilson_interval

    rows = []
    layout = {(1e-4, 0.0): ["comprehension"] * 4 + ["grokking"],  # 4/5
              (1e-3, 0.0): ["memorization"] * 2 + ["confusion"] * 2,  # a tie: the earlier phase wins
              (1e-2, 0.0): ["confusion"],
              (1e-4, 10.0): ["grokking"] * 7,
              (1e-3, 10.0): ["grokking", "comprehension", "memorization"],
              (1e-2, 10.0): ["memorization"] * 9 + ["comprehension"]}
    for (lr, wd), phases in layout.items():
        rows += [{"lr": lr, "wd": wd, "seed": s, "phase": p} for s, p in enumerate(phases)]
    df = pd.DataFrame(rows)
    z = 1.959963984540054
    pm = probability_map(df, "lr", "wd", log=["lr"])
    assert pm.x_log and not pm.y_log and len(pm.cells) == 6
    for _, c in pm.cells.iterrows():
        phases = layout[(c["lr"], c["wd"])]
        n = len(phases)
        assert c["n"] == n
        for p in pm.phases:
            k = phases.count(p)
            lo, hi = wilson_direct(k, n, z)
            assert c[f"frac_{p}"] == pytest.approx(k / n)
            assert c[f"lo_{p}"] == pytest.approx(max(lo, 0), abs=1e-12)
            assert c[f"hi_{p}"] == pytest.approx(min(hi, 1), abs=1e-12)
        k = max(phases.count(p) for p in set(phases))
        lo, hi = wilson_direct(k, n, z)
        assert (c["share"], c["share_lo"], c["share_hi"]) == pytest.approx((k / n, lo, hi))
        assert c["unsettled"] == (lo <= 0.5)
    tie = pm.cells[(pm.cells["lr"] == 1e-3) & (pm.cells["wd"] == 0.0)].iloc[0]
    assert tie["phase"] == "memorization"
    assert wilson_interval(0, 0)[0] != wilson_interval(0, 0)[0]  # nan for no runs
    # 9/10 with z = 1.96: the textbook interval (0.596, 0.982)
    lo, hi = wilson_interval(9, 10)
    assert (round(float(lo), 3), round(float(hi), 3)) == (0.596, 0.982)


def test_nonuniform_points_are_filled_by_nearest_point_on_the_lattice():
    from analysis.probability import agreement, probability_map

    plan = make_plan()

    def oracle(i, j, s):
        return "grokking" if i >= 10 and j >= 11 else "comprehension"

    observed, _ = run_rounds(plan, oracle)
    rows = [{**plan.lattice.point(i, j), "seed": s, "phase": p} for (i, j), v in observed.items()
            for s, p in v.items()]
    df = pd.DataFrame(rows)
    pm = probability_map(df, "optim.decoder.lr", "optim.decoder.weight_decay", log=["optim.decoder.lr"])
    assert len(pm.x_values) == len(pm.y_values) == N  # the lattice is inferred from the sampled values
    assert pm.x_values == pytest.approx(plan.lattice.x.values())
    assert len(pm.lattice) == N * N and pm.lattice["sampled"].sum() == len(observed)
    filled = pm.lattice.set_index(["ix", "iy"])["phase"]
    expect = fill(plan, observed)
    for (i, j), p in filled.items():
        assert p == expect[i, j] == oracle(i, j, 0)
    full = pd.DataFrame([{**plan.lattice.point(i, j), "seed": 0, "phase": oracle(i, j, 0)}
                         for i in range(N) for j in range(N)])
    assert agreement(pm, probability_map(full, "optim.decoder.lr", "optim.decoder.weight_decay",
                                         log=["optim.decoder.lr"])) == 1.0


def test_probability_figure_is_written(tmp_path):
    from analysis.plots_probability import plot_probability_map
    from analysis.probability import probability_map

    plan = make_plan(seeds=(0, 1, 2))
    rng = np.random.default_rng(0)
    rows = [{**plan.lattice.point(i, j), "seed": s,
             "phase": "comprehension" if rng.random() < (0.2 if i > 8 else 0.9) else "memorization"}
            for i in range(0, N, 4) for j in range(0, N, 4) for s in range(3)]
    rows += [{**plan.lattice.point(9, 9), "seed": 0, "phase": "grokking"}]
    pm = probability_map(pd.DataFrame(rows), "optim.decoder.lr", "optim.decoder.weight_decay",
                         log=["optim.decoder.lr"])
    fig = plot_probability_map(pm, tmp_path / "prob")
    assert (tmp_path / "prob.png").stat().st_size > 1000 and (tmp_path / "prob.svg").exists()
    assert len(fig.axes) == 2


def test_cli_adaptive_dry_run(capsys):
    from grokray.cli import main

    assert main(["run", str(QUICKSTART), "--adaptive", "--dry-run", "--no-calibrate", "-s", "adaptive.budget=100"]) == 0
    out = capsys.readouterr().out
    # the quickstart's four seeds: every lattice point is four configurations
    assert "target 17x17" in out and "round 0:        100 configurations, estimate " in out
    assert "budget:         100 of 1156" in out and "all 100 in the most rounds the lattice allows (5)" in out
    import re

    round0, upper = (float(v) * (60 if unit == "min" else 1)
                     for v, unit in re.findall(r"(?:estimate|at most) ([\d.]+) (s|min|h)\b", out)[:2])
    assert "at most" in out and upper > round0  # issue 61: the bound was below round 0's own estimate (18 s < 19 s)
    from grokray.plan.dry_run import ROUND_S, most_rounds
    from grokray.plan.estimate import SWEEP_S
    from grokray.plan.lattice import parse_adaptive
    from grokray.spec.build import load_spec

    plan = parse_adaptive(load_spec(QUICKSTART, scale="smoke"), {})
    assert most_rounds(plan) == 5  # the start grid, 5 -> 9 -> 17 on each axis (measured: 4 rounds, 62 s)
    assert most_rounds(parse_adaptive(load_spec(QUICKSTART, scale="smoke"), {"refine": {"extra_seeds": [7]}})) == 6
    assert SWEEP_S + 5 * ROUND_S < 62  # the fixed part alone does not reach the measured run
    assert "step costs:     assumed 1700 model-steps/s per core (--no-calibrate)" in out
    assert main(["run", str(QUICKSTART), "--adaptive", "--dry-run", "-s", "adaptive.target=[16, 17]"]) == 2
    assert "adaptive.target[0]" in capsys.readouterr().err
