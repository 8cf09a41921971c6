"""Spec -> packs -> param_space, dry-run and early rejection: no Ray started anywhere in this file."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grokray.cli import main
from grokray.engine import pack_signature
from grokray.plan.expand import _deal, expand, format_value, run_name, short_names
from grokray.spec.build import load_spec
from grokray.tracking.schema import flatten

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"


def test_smoke_plan_covers_every_configuration_once():
    spec = load_spec(QUICKSTART, scale="smoke")
    plan = expand(spec, slots=2)
    keys = [m.key for p in plan.packs for m in p.members]
    assert len(keys) == len(set(keys)) == len(spec.points()) == plan.n_configs
    assert len(plan.packs) >= 2  # auto packing keeps both local slots busy
    for pack in plan.packs:
        assert len({pack_signature(m.config) for m in pack.members}) == 1
    assert plan.model_steps == sum(min(t.train.steps, t.phases.budget) for t in spec.trials())
    assert plan.swept == ["optim.decoder.lr", "optim.decoder.weight_decay"]


def test_explicit_pack_size_and_param_space_round_trip():
    from grokray.spec.trial import TrialConfig

    spec = load_spec(QUICKSTART, ["resources.pack_size=3"], scale="smoke")
    plan = expand(spec, slots=2)
    n = len(spec.points())
    assert all(len(p.members) <= 3 for p in plan.packs) and len(plan.packs) == -(-n // 3)
    grid = plan.pack_dicts()
    assert [g["pack_id"] for g in grid] == [p.pack_id for p in plan.packs]
    member = grid[0]["members"][0]
    assert TrialConfig.from_dict(member["config"]).key() == member["key"] == plan.packs[0].members[0].key
    assert member["name"] == f"lr=1e-4 wd=0 seed={spec.seeds[0]}"
    yaml.safe_dump(grid)  # plain data only: Tune stores it, workers rebuild configs from it


def test_packs_are_dealt_balanced():
    assert [len(c) for c in _deal(list(range(25)), 13)] == [13, 12]
    assert [len(c) for c in _deal(list(range(7)), 100)] == [7]
    assert [len(c) for c in _deal(list(range(10)), 1)] == [1] * 10
    assert _deal(list(range(10)), 5) == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]  # neighbours go to different packs


def test_run_names_and_values():
    assert format_value(0.001, log=True) == "1e-3"
    assert format_value(0.00031622776601683794, log=True) == "3.16e-4"
    assert format_value(5) == "5" and format_value(0.25) == "0.25" and format_value(5.0) == "5"
    assert short_names(["optim.decoder.lr", "optim.embedding.lr"]) == {
        "optim.decoder.lr": "decoder.lr", "optim.embedding.lr": "embedding.lr"}
    name = run_name({"optim.decoder.lr": 1e-3, "optim.decoder.weight_decay": 5, "seed": 0},
                    ["optim.decoder.lr", "optim.decoder.weight_decay"], {"optim.decoder.lr"})
    assert name == "lr=1e-3 wd=5 seed=0"


def test_flatten():
    assert flatten({"a": {"b": {"c": 1}}, "d": [1, 2], "e": {}}) == {"a.b.c": 1, "d": [1, 2], "e": {}}


def test_dry_run_prints_counts_without_ray(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the default store, sqlite:///mlflow.db, is looked for here
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code = main(["run", str(QUICKSTART), "--scale", "smoke", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    spec = load_spec(QUICKSTART, scale="smoke")
    assert f"configurations: {len(spec.points())}" in out and f"model-steps:    {300 * len(spec.points())}" in out
    assert "budget use:     50% of the members train their whole budget, 50% of it on average (assumed" in out
    assert list(tmp_path.iterdir()) == []  # looking for earlier runs made no store


def test_bad_spec_rejected_before_ray_and_mlflow(tmp_path, monkeypatch, capsys):
    """A value that only one sweep point has is bad: the whole sweep is parsed before anything starts."""
    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["sweep"]["optim.decoder.weight_decay"] = {"values": [0, 1, -5]}  # negative: invalid for one point
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(tmp_path)
    import ray

    def no_ray(*a, **k):
        raise AssertionError("ray.init called for a bad spec")

    monkeypatch.setattr(ray, "init", no_ray)
    code = main(["run", str(bad), "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("grokray: error: sweep.optim.decoder.weight_decay"), err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "grokray-results").exists()
    assert not list(tmp_path.glob("mlruns*"))


def test_import_grokray_plan_stays_light():
    code = ("import sys, grokray.plan, grokray.plan.expand, grokray.plan.estimate, grokray.plan.refine, "
            "grokray.tracking, grokray.tracking.schema, grokray.run; "
            "bad = [m for m in ('ray', 'mlflow', 'optuna') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.parametrize("path", sorted((ROOT / "sweeps").glob("*.yaml")))
def test_every_shipped_spec_expands(path, capsys):
    plan = expand(load_spec(path, scale="smoke" if "smoke" in yaml.safe_load(path.read_text()) else None), slots=2)
    assert plan.n_configs >= 1 and plan.packs
    # and at full scale through the CLI, as a user would check it: `grokray run SPEC --dry-run` (its calibration,
    # ~8 s a spec, is tested in test_cost.py and runs for every spec's pieces in `make library`'s atlas)
    spec = load_spec(path)
    if spec.raw.get("search") and not spec.axes:  # a search: its own dry-run, and `run` names it
        assert main(["search", str(path), "--dry-run", "--no-calibrate"]) == 0
        assert f"trials:         {spec.raw['search']['n_trials']}, " in capsys.readouterr().out
        assert main(["run", str(path), "--dry-run", "--no-calibrate", "--yes"]) == 2
        assert f"`grokray search {path}`" in capsys.readouterr().err
        return
    assert main(["run", str(path), "--dry-run", "--no-calibrate", "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"configurations: {len(spec.points())}\n" in out, out


def test_tune_stores_a_pack_as_its_base_and_each_members_diff_and_the_worker_gets_every_config_back():
    """Tune keeps a trial's config about seven times over: the wire form must carry a member in its swept
    values, not its whole configuration (issue 41: 14 KB of experiment state per configuration before)."""
    import json

    from grokray.spec.trial import TrialConfig
    from grokray.spec.wire import compact_pack, full_pack

    spec = load_spec(QUICKSTART, ["resources.pack_size=10"])
    plan = expand(spec, slots=2)
    for pack, wire in zip(plan.pack_dicts(), (compact_pack(p) for p in plan.pack_dicts()), strict=True):
        back = full_pack(json.loads(json.dumps(wire)))  # what a worker receives: plain data
        assert back == json.loads(json.dumps(pack))
        keys = [TrialConfig.from_dict(m["config"]).key() for m in back["members"]]  # as the worker parses them
        assert keys == [m["key"] for m in pack["members"]]
        per_member = (len(json.dumps(wire)) - len(json.dumps(wire["base"]))) / len(wire["members"])
        assert per_member < 300 < len(json.dumps(pack)) / len(pack["members"]) / 3
        assert {tuple(path) for m in wire["members"][1:] for path, _ in m["diff"]} <= {
            ("seed",), ("optim", "decoder", "lr"), ("optim", "decoder", "weight_decay")}
    assert full_pack(plan.pack_dicts()[0]) == plan.pack_dicts()[0]  # a search's full pack passes unchanged


def test_planning_resolves_each_config_class_once_not_once_per_configuration(monkeypatch):
    """A 10^5-configuration launch parses every configuration (twice: survey, then its pack). Resolving the
    dataclasses' string annotations each time was 3/4 of that: 4 minutes of planning at 10^5 on 2 cores."""
    import typing

    from grokray.plan.expand import Survey
    from grokray.spec import blocks as config

    config.fields_and_hints.cache_clear()
    calls = []
    real = typing.get_type_hints
    monkeypatch.setattr(typing, "get_type_hints", lambda cls, *a, **k: calls.append(cls) or real(cls, *a, **k))
    spec = load_spec(ROOT / "sweeps" / "quickstart.yaml", scale="smoke")
    survey = Survey.of(spec)
    list(survey.pack_dicts(survey.packs(slots=2)))
    assert survey.n_configs >= 8
    assert calls and len(calls) == len(set(calls)), "a config class's annotations were resolved more than once"


def test_run_names_and_axes_write_a_number_the_same_way():
    """Issue 62: a run's name said 3.16e-4 where the phase diagram's axis said 3.2e-4 for the same lr; one
    formatter (grokray.numbers.short_number) writes both."""
    import numpy as np

    from analysis.labels import tick_label

    values = [*np.logspace(-5, 0, 23), 0.25, 5.0, 7, 150000, 2.5e6, -3.16e-3, 0.0, 9.996e-4, float("nan"), "tpe"]
    for log in (False, True):
        assert [format_value(v, log) for v in values] == [tick_label(v, log) for v in values]
    assert [format_value(v, True) for v in (1e-4, 3.1623e-4, 1e-2, 9.996e-4)] == ["1e-4", "3.16e-4", "1e-2", "1e-3"]
    assert [format_value(v) for v in (0.25, 5.0, 7, 2000.0, 123.456, 150000, 0.0)] == [
        "0.25", "5", "7", "2000", "123", "1.5e5", "0"]


@pytest.mark.parametrize("stem", sorted(p.stem for p in (ROOT / "sweeps").glob("*.yaml")))
def test_a_configuration_crosses_to_the_worker_as_its_own_data(stem):
    """Issue 62: a Tune worker rebuilds each configuration from its to_dict() (TrialConfig.from_dict), not by
    parsing a spec again; the round trip gives back the very configuration (every block, its tuples, its key)."""
    from grokray.spec.trial import TrialConfig

    spec = load_spec(ROOT / "sweeps" / f"{stem}.yaml")
    for index in sorted({0, spec.point_count() - 1}):
        trial = spec.trial(spec.point(index))
        back = TrialConfig.from_dict(trial.to_dict())
        assert back == trial and back.key() == trial.key() and type(back.model) is type(trial.model)
