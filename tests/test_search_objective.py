"""Pure parts of `grokray search`: objectives and their penalty, the search: block, the parent-run report."""

import math
from pathlib import Path

import pytest

from grokray.errors import SpecError
from grokray.objectives import (
    grokking_gap,
    objective_values,
    report_metrics,
    seed_vote,
    time_to_generalize,
)
from grokray.search.config import parse_search, start_trial, trial_configs
from grokray.spec.build import load_spec

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "sweeps" / "degrok_toy.yaml"
BUDGET = 10_000
PENALTY = 2 * BUDGET


@pytest.mark.parametrize("objective", [time_to_generalize, grokking_gap])
def test_penalty_ranks_every_failure_below_every_success(objective):
    """Minimised: the worst generalizing trial (val at the last step of the budget, train at step 0) still beats
    every phase that did not generalize, including a val-without-train and a diverged trial."""
    successes = [("comprehension", 10, 15), ("grokking", 0, BUDGET), ("comprehension", 500, 400),
                 ("grokking", 1, BUDGET - 1)]
    failures = [("memorization", 100, None), ("confusion", None, None), ("val_without_train", None, 50),
                ("diverged", 10, 20), ("diverged", None, None)]
    worst_success = max(objective(*s, PENALTY) for s in successes)
    best_failure = min(objective(*f, PENALTY) for f in failures)
    assert worst_success < best_failure == PENALTY
    assert time_to_generalize("grokking", 2081, 7692, PENALTY) == 7692
    assert grokking_gap("grokking", 2081, 7692, PENALTY) == 7692 - 2081
    assert objective_values(["time_to_generalize", "grokking_gap"], "comprehension", 100, 150, PENALTY) == [150, 50]


def test_default_penalty_is_twice_the_budget_and_must_exceed_it():
    spec = load_spec(TOY)
    assert parse_search(spec).penalty == 2 * spec.trial(spec.points()[0]).phases.budget
    with pytest.raises(SpecError, match=r"search.penalty: got 10000; must exceed phases.budget \(10000\)"):
        parse_search(load_spec(TOY, ["search.penalty=10000"]))


@pytest.mark.parametrize("override, message", [
    ("search.space.optim.decoder.lrr={float: [0.001, 0.1]}", r"search.space.optim.decoder.lrr: .*did you mean 'lr'"),
    ("search.space.optim.deco.lr={float: [0.001, 0.1]}", r"search.space.optim.deco.lr: optim.deco: unknown key"),
    ("search.space.modell.dropout={float: [0, 1]}", r"search.space.modell: unknown key; did you mean 'model'"),
    ("search.space.optim.decoder.lr={float: [0.1, 0.001]}", r"search.space.optim.decoder.lr.float: .*low must"),
    ("search.space.optim.decoder.lr={float: [0, 0.1], log: true}", r"lr.float\[0\]: .*log distribution needs"),
    ("search.space.optim.decoder.weight_decay={float: [-1, 1]}", r"weight_decay: .*must be >= 0"),
    ("search.space.optim.decoder.name={categorical: [adamw, lion]}", r"decoder.name: .*got 'lion'; allowed"),
    ("search.space.optim.decoder.lr={uniform: [0, 1]}", r"search.space.optim.decoder.lr: expected exactly one of"),
    ("search.space.phases.budget={int: [10, 20]}", r"search.space.phases.budget: cannot be searched"),
    ("search.objective=speed", r"search.objective: got 'speed'; allowed: time_to_generalize, grokking_gap"),
    ("search.objective=[time_to_generalize, speed]", r"search.objective\[1\]: got 'speed'"),
    ("search.sampler=cmaes", r"search.sampler: got 'cmaes'; allowed: tpe, random"),
    ("search.n_trials=0", r"search.n_trials: got 0; must be >= 1"),
    ("search.max_concurrent=0", r"search.max_concurrent: got 0; must be >= 1"),
    ("search.asha={grace: 0}", r"search.asha.grace: got 0; must be >= 1"),
    ("search.asha={reduction_factor: 2}", r"search.asha.grace: missing"),
    ("search.asha={grace: 100000000}", r"search.asha.grace: got 100000000; must be at most \d+ \(train.steps"),
    ("search.pruner=asha", r"search.pruner: unknown key"),
    ("search.space.seed={categorical: [0, 1]}", r"search.space.seed: the spec counts seeds \[1, 2\]"),
])
def test_search_block_errors_name_the_field(override, message):
    with pytest.raises(SpecError, match=message):
        parse_search(load_spec(TOY, [override] + (["seeds=[1, 2]"] if "space.seed" in override else [])))


def test_search_block_parses_nested_overrides_and_the_start_point():
    spec = load_spec(TOY, ["search.space.optim.default.init_scale={float: [0.5, 2], log: true}",
                           "search.objective=[time_to_generalize, grokking_gap]", "search.asha={grace: 200}"])
    cfg = parse_search(spec)
    assert "optim.default.init_scale" in cfg.space and cfg.space["optim.default.init_scale"].log
    assert cfg.multi and cfg.asha.grace == 200 and cfg.asha.reduction_factor == 3
    start = start_trial(spec)
    assert (start.optim["decoder"].lr, start.optim["decoder"].weight_decay, start.seed) == (1e-4, 5.0, 0)
    assert [c.seed for c in trial_configs(spec, {})] == [0, 1, 2, 3]  # every trial counts the spec's seeds
    grid = cfg.space["optim.decoder.lr"].grid(3)
    assert [round(math.log10(v), 6) for v in grid] == [-4, -3, -2]


def _seed(seed, phase, step_train, step_val, ideal=None):
    return {"seed": seed, "phase": phase, "step_train": step_train, "step_val": step_val, "threshold": 0.9,
            "ideal": ideal, "run_id": f"run-of-seed-{seed}"}


def test_a_trial_over_several_seeds_scores_what_a_majority_reached():
    """Seeds are counted: one fast seed does not make a fast trial, and an undecodable split does not vote."""
    objective, penalty = ["time_to_generalize", "grokking_gap"], 800.0
    fast_one = [_seed(1, "grokking", 100, 300), _seed(2, "memorization", 90, None), _seed(3, "confusion", None, None)]
    vote = seed_vote(objective, penalty, fast_one)
    assert vote["values"] == [800.0, 800.0] and vote["seeds_generalized"] == 1  # 1 of 3 is not a majority
    two = [_seed(1, "grokking", 100, 300), _seed(2, "comprehension", 150, 200), _seed(3, "confusion", None, None)]
    vote = seed_vote(objective, penalty, two)
    assert vote["values"] == [300.0, 200.0]  # per objective: the 2nd best of 3 (50 and 200 are the gaps)
    assert two[vote["decider"]]["seed"] == 1 and vote["seed_phases"].startswith("seed 1: grokking, seed 2")
    undecodable = [_seed(0, "memorization", 80, None, ideal=0.8), *two[:2]]
    vote = seed_vote(objective, penalty, undecodable)
    assert vote["seeds_voting"] == 2 and vote["values"] == [300.0, 200.0]  # 2 of 2 voters: the slower one
    assert "seed 0: memorization (undecodable)" in vote["seed_phases"]
    alone = seed_vote(objective, penalty, [_seed(4, "grokking", 120, 350)])
    assert alone["values"] == [350.0, 230.0] and alone["seeds_voting"] == 1  # one seed: as it always was


def test_an_interrupted_trial_over_seeds_is_answered_only_when_every_seed_finished():
    """--resume after a dead driver: a trial whose two seed runs both finished is told their vote; one with a seed
    still unfinished is failed and queued again."""
    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState

    from grokray.search.study import MEMBER_KEYS_ATTR, recover_interrupted

    cfg = parse_search(load_spec(TOY, ["seeds=[1, 2]"], scale="smoke"))
    study = optuna.create_study()
    both, half = (study.ask({"optim.decoder.lr": FloatDistribution(1e-4, 1e-2, log=True)}) for _ in range(2))
    for t, keys in ((both, ["a1", "a2"]), (half, ["b1", "b2"])):
        t.set_user_attr(MEMBER_KEYS_ATTR, keys)
    finished = {"a1": _seed(1, "grokking", 100, 300), "a2": _seed(2, "comprehension", 150, 200),
                "b1": _seed(1, "grokking", 100, 250)}
    assert recover_interrupted(study, finished, cfg) == (1, 1)
    told, failed = study.trials[both.number], study.trials[half.number]
    assert told.values == [300.0] and told.user_attrs["seeds_generalized"] == 2  # the slower of two
    assert told.user_attrs["phase"] == "grokking" and failed.state == TrialState.FAIL
    assert told.user_attrs["mlflow_run_id"] == "run-of-seed-1,run-of-seed-2"  # linked to the runs it was told from


def test_report_hook_scores_an_unfinished_trial_with_the_penalty():
    from grokray.engine import MemberResult

    spec = load_spec(TOY, scale="smoke")
    objective = ["time_to_generalize", "grokking_gap"]
    config = start_trial(spec)
    running = MemberResult("confusion", 120, None, None, 200, {"val/acc": 0.4}, {})
    done = MemberResult("grokking", 120, 350, 230, 350, {"val/acc": 0.95}, {})
    assert report_metrics(objective, 800.0, [config], [running])["time_to_generalize"] == 800.0
    out = report_metrics(objective, 800.0, [config], [done])
    assert (out["time_to_generalize"], out["grokking_gap"], out["val/acc"]) == (350.0, 230.0, 0.95)
    assert out["trial_key"] == config.key()
    # two seeds: the trial is scored by the slower one (a majority of 2 is both), val/acc by the lower one
    configs = trial_configs(load_spec(TOY, ["seeds=[1, 2]"], scale="smoke"), {})
    later = MemberResult("grokking", 100, 500, 400, 500, {"val/acc": 0.91}, {})
    out = report_metrics(objective, 800.0, configs, [done, later])
    assert (out["time_to_generalize"], out["grokking_gap"], out["val/acc"]) == (500.0, 400.0, 0.91)
    assert out["seeds_generalized"] == 2 and out["trial_key"] not in (configs[0].key(), configs[1].key())
    assert report_metrics(objective, 800.0, configs, [done, running])["time_to_generalize"] == 800.0


def _study(multi):
    import optuna
    from optuna.distributions import FloatDistribution

    study = optuna.create_study(directions=["minimize"] * (2 if multi else 1))
    dist = {"optim.decoder.lr": FloatDistribution(1e-4, 1e-2, log=True),
            "optim.decoder.weight_decay": FloatDistribution(0, 10)}
    points = [(1e-3, 1.0, (300, 100)), (3e-3, 0.0, (200, 150)), (1e-4, 5.0, (800, 800)), (5e-3, 2.0, (250, 90))]
    for lr, wd, values in points:
        study.add_trial(optuna.trial.create_trial(
            params={"optim.decoder.lr": lr, "optim.decoder.weight_decay": wd}, distributions=dist,
            values=list(values) if multi else [values[0]], user_attrs={"phase": "comprehension"}))
    return study


def optuna_trial_like(study):
    """A fifth finished trial like the study's first."""
    import optuna

    first = study.trials[0]
    return optuna.trial.create_trial(params=first.params, distributions=first.distributions,
                                     values=[400.0] * len(first.values),
                                     user_attrs={"phase": "grokking"})


def test_pareto_front_history_and_importances_data():
    from grokray.search.artifacts import history_info, importances, pareto_info

    spec = load_spec(TOY, ["search.objective=[time_to_generalize, grokking_gap]"])
    cfg = parse_search(spec)
    study = _study(multi=True)
    front = pareto_info(study, cfg)
    assert [r["number"] for r in front] == [1, 3]  # (200, 150) and (250, 90); the others are dominated
    assert [r["best"] for r in history_info(study, 0)] == [300, 200, 200, 200]
    imp = importances(study, cfg)
    assert set(imp) == {"time_to_generalize", "grokking_gap"}
    assert set(imp["grokking_gap"]) == {"optim.decoder.lr", "optim.decoder.weight_decay"}


def test_parent_run_gets_best_params_importances_history_and_pareto(tmp_path):
    from mlflow.tracking import MlflowClient

    from grokray.search.artifacts import log_parent_results
    from grokray.tracking.store import Store

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment("t")
    for multi in (False, True):
        objective = "[time_to_generalize, grokking_gap]" if multi else "time_to_generalize"
        cfg = parse_search(load_spec(TOY, [f"search.objective={objective}"]))
        run = client.create_run(exp).info.run_id
        logged = log_parent_results(Store(f"sqlite:///{tmp_path}/mlflow.db"), run, _study(multi), cfg)
        data = client.get_run(run).data
        arts = {a.path for a in client.list_artifacts(run, "search")}
        assert set(logged) == arts
        assert {"search/param_importances.csv", "search/param_importances.json", "search/trials.csv",
                "search/optimization_history_time_to_generalize.png"} <= arts
        if multi:
            assert {"search/pareto_front.csv", "search/pareto_front.png"} <= arts
            assert data.metrics["best/grokking_gap"] == 90 and data.tags["grokray.search.pareto_trials"] == "[1, 3]"
        else:
            assert data.metrics["best/time_to_generalize"] == 200
            assert float(data.params["best.optim.decoder.lr"]) == 3e-3 and data.tags["grokray.search.best_trial"] == "1"
    again = _study(True)  # issue 61: a resumed search's second close is a point of its own, at the study's size
    again.add_trial(optuna_trial_like(again))
    log_parent_results(Store(f"sqlite:///{tmp_path}/mlflow.db"), run, again, cfg)
    history = client.get_metric_history(run, "search/completed")
    assert [(m.step, m.value) for m in history] == [(4, 4.0), (5, 5.0)]
    one = client.create_run(exp).info.run_id  # fewer than 2 completed trials: importances say so, nothing fails
    cfg = parse_search(load_spec(TOY))
    import optuna

    log_parent_results(Store(f"sqlite:///{tmp_path}/mlflow.db"), one, optuna.create_study(), cfg)
    local = client.download_artifacts(one, "search/param_importances.csv", str(tmp_path))
    text = Path(local).read_text()  # the CSV the README promises is there, and says why it is empty
    assert text.splitlines()[0] == "objective,param,importance,note" and "needs >= 2 completed trials" in text


def _phased_study(values_phases, penalty=800.0):
    import optuna

    study = optuna.create_study(direction="minimize")
    for value, phase in values_phases:
        trial = study.ask()
        trial.set_user_attr("phase", phase)
        study.tell(trial, value)
    return study


def test_a_penalty_is_never_the_best_trial(tmp_path):
    from grokray.search.artifacts import history_info, plot_history
    from grokray.search.config import SearchConfig
    from grokray.search.study import best_trials

    cfg = SearchConfig(space={}, objective=["time_to_generalize"], penalty=800.0)
    none = _phased_study([(800.0, "memorization"), (800.0, "confusion"), (800.0, "memorization")])
    assert best_trials(none, cfg) == []
    mixed = _phased_study([(800.0, "memorization"), (450.0, "grokking"), (300.0, "comprehension"),
                           (800.0, "confusion")])
    assert [(b["number"], b["values"]) for b in best_trials(mixed, cfg)] == [(2, [300.0])]

    # the history plot: whole-number trial ticks, and a legend entry only for what is drawn
    drawn = plot_history(history_info(none), "time_to_generalize", 800.0, tmp_path / "h.png")
    assert drawn["legend"] == ["did not generalize (scored the penalty, 800)"]
    assert all(t.is_integer() for t in drawn["xticks"]) and (tmp_path / "h.png").stat().st_size > 1000
    drawn = plot_history(history_info(mixed), "time_to_generalize", 800.0, tmp_path / "m.png", title="degrok-toy")
    assert drawn["legend"] == ["trial (generalized)", "best so far", "did not generalize (scored the penalty, 800)"]
    assert drawn["title"] == "degrok-toy: optimization history of time_to_generalize"  # which search it is


def test_a_searchs_figure_is_the_objective_against_each_parameter_titled_by_the_spec(tmp_path):
    """Issue 39: the search's parent showed one phase-diagram panel per sampled point with ticks over each other.
    Its figure is now one panel per searched parameter, titled by the study, with few ticks per axis."""
    import optuna

    from grokray.search.artifacts import plot_slices
    from grokray.search.config import parse_search
    from grokray.search.sampler import distributions
    from grokray.spec.build import load_spec

    spec = load_spec(Path(__file__).resolve().parents[1] / "sweeps" / "degrok_toy.yaml", scale="smoke")
    cfg = parse_search(spec)
    study = optuna.create_study(directions=["minimize"] * len(cfg.objective))
    dists = distributions(cfg)
    rng = optuna.samplers.RandomSampler(seed=0)
    for i in range(12):
        params = {k: rng.sample_independent(study, None, k, d) for k, d in dists.items()}
        values = [cfg.penalty if i % 4 == 0 else 100.0 * (i + 1)] * len(cfg.objective)
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, values=values))
    fig = plot_slices(study, cfg, cfg.study, tmp_path / "slices.png")
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_xlabel() for ax in shown] == list(cfg.space)
    assert fig.get_suptitle().startswith(f"{cfg.study}: {cfg.objective[0]} against each searched parameter")
    fig.canvas.draw()
    for ax in shown:  # readable ticks: at most 6 labelled per axis, none overlapping its neighbour
        boxes = [t.get_window_extent() for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
        assert 1 <= len(boxes) <= 6
        assert all(a.x1 <= b.x0 for a, b in zip(sorted(boxes, key=lambda b: b.x0),
                                                   sorted(boxes, key=lambda b: b.x0)[1:], strict=False))
    assert (tmp_path / "slices.png").stat().st_size > 10_000
    # issue 52: trials inside one decade of a log axis got every minor tick labelled (8x10^-4 over 9x10^-4)
    narrow = optuna.create_study(directions=["minimize"] * len(cfg.objective))
    for i in range(6):
        params = {k: (d.low * (1.05 + 0.02 * i) if d.log else rng.sample_independent(narrow, None, k, dists[k]))
                  for k, d in cfg.space.items()}  # every log parameter inside its lowest decade
        narrow.add_trial(optuna.trial.create_trial(params=params, distributions=dists,
                                                   values=[100.0 * (i + 1)] * len(cfg.objective)))
    fig = plot_slices(narrow, cfg, cfg.study, tmp_path / "narrow.png")
    fig.canvas.draw()
    logs = [ax for ax in fig.axes if ax.get_visible() and ax.get_xscale() == "log"]
    assert logs and not [t.get_text() for ax in logs for t in ax.get_xticklabels(minor=True) if t.get_text()]


def test_the_private_optuna_handle_grokray_adapts_is_there():
    """grokray.search.study.set_running_trial_attr is the one use of Optuna's private storage handle: an Optuna
    that changes it fails here, by name, not inside a resumed search."""
    import optuna

    from grokray.search.study import set_running_trial_attr

    study = optuna.create_study()
    study.ask()
    frozen = study.get_trials(deepcopy=False)[0]
    assert hasattr(study, "_storage") and hasattr(frozen, "_trial_id"), f"optuna {optuna.__version__} changed them"
    set_running_trial_attr(study, frozen, "phase", "grokking")
    assert study.trials[0].user_attrs == {"phase": "grokking"}
