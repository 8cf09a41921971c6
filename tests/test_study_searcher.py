"""The search's Tune Searcher over real Optuna: a trial that finishes while its runs are not in MLflow yet (a
tracking outage) is told only once its runs exist, so its own `mlflow_run_id` is written with it; Optuna freezes a
finished trial's attributes, which left 6 of 8 trials of a search through an outage without their link."""

from pathlib import Path

import optuna
from optuna.trial import TrialState

from grokray.search.config import parse_search
from grokray.search.launch.searcher import StudySearcher
from grokray.spec.build import load_spec

DEGROK = Path(__file__).resolve().parents[1] / "sweeps" / "degrok_toy.yaml"
optuna.logging.set_verbosity(optuna.logging.ERROR)


def _searcher(seeds: str, made: dict[str, str], target: int = 8):
    spec = load_spec(DEGROK, [f"seeds={seeds}", "search.sampler=random"], scale="smoke")
    cfg = parse_search(spec)
    study = optuna.create_study(study_name=cfg.study, directions=["minimize"] * len(cfg.objective))
    return StudySearcher(spec, cfg, study, target=target, run_of=made.get), study


def _result(searcher, value: float, run_ids: str) -> dict:
    return {searcher.metric: value, "pack_done": True, "phase": "grokking", "step": 1000, "mlflow_run_id": run_ids}


def _keys(config: dict) -> list[str]:
    return [m["key"] for m in config["pack"]["members"]]


def test_a_trial_whose_runs_are_not_made_yet_is_told_once_they_are_with_its_link():
    made: dict[str, str] = {}
    searcher, study = _searcher("[0, 1]", made)
    outage, served = searcher.suggest("t1"), searcher.suggest("t2")
    searcher.on_trial_complete("t2", _result(searcher, 400.0, "r2a,r2b"))  # its worker made its runs
    assert study.trials[served["optuna_trial"]].user_attrs["mlflow_run_id"] == "r2a,r2b"
    searcher.on_trial_complete("t1", _result(searcher, 300.0, ","))  # the server was away: no run yet
    held = study.trials[outage["optuna_trial"]]
    assert held.state == TrialState.RUNNING and "mlflow_run_id" not in held.user_attrs
    assert searcher.full() is False and len(searcher.held) == 1  # held, and counted against the target
    first, second = _keys(outage)
    made[first] = "r1a"  # the driver's delivery made one seed's run: still held
    searcher.on_trial_result("t3", {"step": 10})
    assert study.trials[outage["optuna_trial"]].state == TrialState.RUNNING
    made[second] = "r1b"
    searcher.suggest("t3")
    told = study.trials[outage["optuna_trial"]]
    assert told.state == TrialState.COMPLETE and told.values == [300.0]
    assert told.user_attrs["mlflow_run_id"] == "r1a,r1b" and told.user_attrs["phase"] == "grokking"


def test_the_launch_end_tells_what_is_still_held_without_a_link_and_the_target_counts_held_trials():
    made: dict[str, str] = {}
    searcher, study = _searcher("[0]", made, target=2)
    a, b = searcher.suggest("t1"), searcher.suggest("t2")
    assert searcher.suggest("t3") == StudySearcher.FINISHED  # two running fill a target of two
    searcher.on_trial_complete("t1", _result(searcher, 250.0, ""))
    pruned = {searcher.metric: None, "pack_done": False, "step": 200, "mlflow_run_id": ""}
    searcher.on_trial_complete("t2", pruned)  # ASHA stopped it while the server was away
    assert searcher.suggest("t4") == StudySearcher.FINISHED  # two held still fill it
    made[_keys(b)[0]] = "rb"
    assert searcher.release() == 1  # t1's run was never made: told without its link (replay links it)
    first, second = study.trials[a["optuna_trial"]], study.trials[b["optuna_trial"]]
    assert first.state == TrialState.COMPLETE and first.values == [250.0] and "mlflow_run_id" not in first.user_attrs
    assert second.state == TrialState.PRUNED and second.user_attrs["mlflow_run_id"] == "rb"
    assert second.user_attrs["pruned_at_step"] == 200


def test_a_failed_trial_is_told_failed_at_once_with_the_runs_it_made():
    searcher, study = _searcher("[0]", {})
    asked = searcher.suggest("t1")
    searcher.on_trial_complete("t1", {"step": 40, "mlflow_run_id": "r1"}, error=True)
    failed = study.trials[asked["optuna_trial"]]
    assert failed.state == TrialState.FAIL and failed.user_attrs["mlflow_run_id"] == "r1" and not searcher.held
