"""search.confirm: the search's best settings re-run at fresh seeds, with bootstrap intervals and ties. The pure
statistics on hand-made numbers; the stage end to end on real Optuna, a real local Ray and MLflow SQLite."""

import csv
from pathlib import Path

import numpy as np
import optuna
import pytest
from mlflow.tracking import MlflowClient

from grokray.errors import LaunchFinished, SpecError
from grokray.search.config import parse_search
from grokray.search.confirm import (
    bootstrap_median,
    confirmed_best,
    parse_confirm,
    search_nearness,
    standing,
    top_settings,
)
from grokray.spec.build import load_spec

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "sweeps" / "degrok_toy.yaml"
PUBLISHED = {"optim.decoder.lr": 0.005, "optim.decoder.weight_decay": 1.0}  # seed 1 generalizes at step ~850
# fresh seeds: 7 and 8 have decodable splits, 5 does not (ideal val accuracy 0.8 < 0.9), so it must not vote
STAGE = ["train.steps=1000", "phases.budget=1000", "search.n_trials=4", "search.confirm={top: 2, seeds: [5, 7, 8]}",
         "search.enqueue=[{optim.decoder.lr: 0.005, optim.decoder.weight_decay: 1.0}]"]


def test_confirm_seeds_must_be_fresh_and_the_block_well_formed():
    assert parse_confirm({"top": 2, "seeds": [10, 11, 12]}, [0, 1, 2]).seeds == (10, 11, 12)
    for raw, field, words in (({"top": 3, "seeds": [2, 10]}, "search.confirm.seeds", "[2] already vote"),
                              ({"seeds": [10]}, "search.confirm.seeds", "at least 2 seeds"),
                              ({"seeds": [10, 10]}, "search.confirm.seeds", "each seed once"),
                              ({"top": 0, "seeds": [10, 11]}, "search.confirm.top", ">= 1"),
                              ({"best": 3, "seeds": [10, 11]}, "search.confirm.best", "seeds, top")):
        with pytest.raises(SpecError) as err:
            parse_confirm(raw, [0, 1, 2])
        assert err.value.field == field and words in str(err.value), (raw, str(err.value))
    spec = load_spec(TOY, ["search.confirm={top: 2, seeds: [1, 9]}"], scale="smoke")  # smoke votes with seed 1
    with pytest.raises(SpecError, match="already vote"):
        parse_search(spec)


def test_top_settings_are_distinct_generalizing_first_then_the_nearest_of_the_rest():
    a, b, c, d, e = {"lr": 0.1}, {"lr": 0.2}, {"lr": 0.3}, {"lr": 0.5}, {"lr": 0.6}
    scored = [(a, 500.0), (b, 300.0), (b, 310.0), (c, 2000.0), ({"lr": 0.4}, 450.0)]
    assert top_settings(scored, penalty=2000.0, top=3) == [b, {"lr": 0.4}, a]  # b once; c never generalized
    # issue 73: fewer than `top` generalized, so the nearest of the rest fill: more seeds generalized first, then
    # the higher val accuracy (an ASHA-stopped trial's from its last report)
    near = [(c, 2000.0, search_nearness(0, 0.60)), (d, 2000.0, search_nearness(1, 0.40)),
            (e, 2000.0, search_nearness(None, 0.90)), (a, 500.0, search_nearness(2, 0.96))]
    assert top_settings(near, penalty=2000.0, top=3) == [a, d, e]
    assert top_settings([(c, 2000.0)], penalty=2000.0, top=3) == [c]
    assert top_settings([], penalty=2000.0, top=3) == []


def test_bootstrap_interval_brackets_the_median_and_narrows_with_more_seeds():
    median, low, high = bootstrap_median([300, 320, 340, 360, 2000])
    # the median of 5 draws is the smallest value with probability 0.058 (3 or more of 5 draws land on it), so
    # at 5 seeds the 90 % interval runs from the smallest to the largest seed: 5 seeds settle only wide gaps
    assert (median, low, high) == (340, 300, 2000)
    assert bootstrap_median([300, 320, 340, 360, 2000]) == (median, low, high)  # fixed seed: a page redraws the same
    assert bootstrap_median([400, 400, 400]) == (400, 400, 400)
    fifteen = [300 + 10 * i for i in range(14)] + [2000]
    m15, lo15, hi15 = bootstrap_median(fifteen)
    assert m15 == 370 and 300 < lo15 < m15 < hi15 < 2000  # an outlier seed moves the mean, not this interval
    rng = np.random.default_rng(1)  # coverage: the 90 % interval holds the true median about 90 % of the time
    hits = sum(lo <= 0 <= hi for lo, hi in (bootstrap_median(list(rng.normal(size=15)), seed=i)[1:]
                                            for i in range(200)))
    assert 160 <= hits <= 199


def test_ties_are_overlapping_intervals_and_a_penalty_is_never_a_place():
    rows = [{"setting": 1, "score": s, "votes": 1} for s in (300, 310, 320, 330, 340)] + \
           [{"setting": 2, "score": s, "votes": 1} for s in (250, 260, 270, 280, 290)] + \
           [{"setting": 2, "score": 10.0, "votes": 0}]  # undecodable: left out, not the fastest seed
    best = confirmed_best(rows)  # the search's own choice leads, though setting 2 was faster at these seeds
    assert best["setting"] == 1 and best["median"] == 320 and best["scores"] == [300, 310, 320, 330, 340]
    [other] = best["others"]  # reported beside it, not chosen by the seeds that measure it (issue 73)
    assert other["setting"] == 2 and other["median"] == 270 and other["scores"] == [250, 260, 270, 280, 290]
    methods = {"adamw": {"median": 270, "low": 260, "high": 280}, "ema": {"median": 285, "low": 275, "high": 300},
               "ma": {"median": 900, "low": 850, "high": 950}, "ortho": {"median": 4000, "low": 4000, "high": 4000},
               "none": None}
    assert standing(methods, penalty=4000) == {"adamw": "fastest", "ema": "tied with the fastest", "ma": "slower",
                                               "ortho": "did not generalize", "none": "did not generalize"}


def test_a_fresh_seed_is_matched_to_its_setting_through_the_groups_optim_default_names():
    """optim.default.<field> is logged per group (optim.decoder.lr, optim.embedding.lr): the published Grokfast
    specs search optim.default.* and their stage's rows were empty before this."""
    from grokray.search.launch.confirmation import seed_rows
    from grokray.tracking.records import RunRecord

    cfg = parse_search(load_spec(ROOT / "sweeps" / "grokfast_adamw.yaml", scale="smoke"))
    settings = [{"optim.default.lr": 0.002, "optim.default.weight_decay": 1.0},
                {"optim.default.lr": 0.004, "optim.default.weight_decay": 0.5}]

    def run(lr, wd, seed, phase, step):
        params = {f"optim.{g}.{k}": str(v) for g in ("embedding", "decoder") for k, v in
                  (("lr", lr), ("weight_decay", wd))}
        return RunRecord(f"r{seed}{lr}", "", "1", "FINISHED", 0, 0, {**params, "seed": str(seed)},
                         {"grokray.phase": phase}, {"step_train_acc_0.95": step - 50, "step_val_acc_0.95": step,
                                                    "ideal_val_acc": 1.0} if step else {})
    rows = seed_rows([run(0.004, 0.5, 10, "grokking", 700), run(0.002, 1.0, 10, "comprehension", 300),
                      run(0.002, 1.0, 11, "memorization", None)], settings, cfg, 0.95)
    assert [(r["setting"], r["seed"], r["score"]) for r in rows] == [(1, 10, 300.0), (1, 11, cfg.penalty),
                                                                     (2, 10, 700.0)]


def _options(tmp_path, **kw):
    from grokray.run.options import LaunchOptions

    return LaunchOptions(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db", storage=str(tmp_path / "results"),
                         progress="never", **kw)


def _rows(client, run_id, tmp_path) -> list[dict]:
    path = client.download_artifacts(run_id, "search/confirmation.csv", str(tmp_path))
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.library  # 32 s: make library (the default suite ran 16.7 min, 2026-11-29)
def test_the_stage_reruns_the_best_settings_at_fresh_seeds_and_records_them_on_the_search(local_ray, tmp_path):
    from grokray.search.launch.driver import run_search

    spec = load_spec(TOY, STAGE, scale="smoke")
    summary = run_search(spec, _options(tmp_path))
    client = MlflowClient(summary.tracking_uri)
    parent = client.get_run(summary.parent_run_id)
    stage = summary.confirmation
    assert stage is not None and parent.data.tags["grokray.search.confirmation"] == stage["parent_run_id"]
    study = optuna.load_study(study_name=summary.study_name, storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(summary.journal_path)))
    generalized = sorted((t for t in study.trials if t.values and t.values[0] < 2000), key=lambda t: t.values[0])
    assert generalized and stage["settings"][0] == generalized[0].params  # the search's best is setting 1
    assert PUBLISHED.items() <= study.trials[0].params.items()

    rows = _rows(client, summary.parent_run_id, tmp_path)
    assert len(rows) == 3 * len(stage["settings"]) and {r["seed"] for r in rows} == {"5", "7", "8"}
    assert {r["votes"] for r in rows if r["seed"] == "5"} == {"0"}  # its split cannot reach 0.9 (ideal 0.8)
    assert {r["votes"] for r in rows if r["seed"] != "5"} == {"1"}
    stage_runs = {(r.data.params["optim.decoder.lr"], r.data.params["seed"]): r for r in client.search_runs(
        [client.get_run(stage["parent_run_id"]).info.experiment_id],
        f"tags.`mlflow.parentRunId` = '{stage['parent_run_id']}'")}
    assert len(stage_runs) == len(rows)  # one run per setting and fresh seed, nothing else trained
    for row in rows:
        run = stage_runs[(row["optim.decoder.lr"], row["seed"])]
        assert row["phase"] == run.data.tags["grokray.phase"]
        expected = run.data.metrics["step_val_acc_0.9"] if row["phase"] in ("comprehension", "grokking") else 2000.0
        assert float(row["score"]) == expected
    scores = [float(r["score"]) for r in rows if r["setting"] == str(stage["best"]["setting"]) and r["votes"] == "1"]
    assert stage["best"]["median"] == float(np.median(scores))
    assert client.get_experiment_by_name("degrok-toy-confirm") is not None

    ended = parent.info.end_time
    with pytest.raises(LaunchFinished):  # a finished search with its stage done: nothing to continue, nothing changed
        run_search(spec, _options(tmp_path, resume=True))
    assert client.get_run(summary.parent_run_id).info.end_time == ended

    # A stop between the stage's end and its record: --resume writes the record, trains nothing again
    client.set_tag(summary.parent_run_id, "grokray.search.confirmation", "pending")
    again = run_search(spec, _options(tmp_path, resume=True))
    assert again.parent_run_id == summary.parent_run_id and again.confirmation["best"] == stage["best"]
    assert client.get_run(summary.parent_run_id).data.tags["grokray.search.confirmation"] == stage["parent_run_id"]
    assert client.get_run(summary.parent_run_id).info.end_time == ended
    confirm_exp = client.get_experiment_by_name("degrok-toy-confirm").experiment_id
    assert len(client.search_runs([confirm_exp], "tags.`grokray.role` = 'parent'")) == 1
    assert len(client.search_runs([confirm_exp], "tags.`grokray.role` = 'configuration'")) == len(rows)
