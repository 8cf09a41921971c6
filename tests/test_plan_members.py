"""A trial's configuration is parsed once, on the driver (issue 72: three times there and once more on the worker):
the survey parses each; a pack's members are built from their signature's first configuration and their points
(spec/trial.member_config) and equal what parsing them would give; the worker rebuilds the wire form without a check
or an import of the user's code. About 2 s."""

import pytest
from test_pack import BASE

import grokray.spec.build as spec_module
import grokray.spec.trial as trial_module
from grokray.cli import main
from grokray.models.user_module import ModuleConfig
from grokray.plan.expand import Survey
from grokray.spec.build import build_spec
from grokray.spec.trial import TrialConfig

USER = {"task": {"name": "modular", "op": "add", "p": 7, "train_fraction": 0.5},
        "model": {"name": "module", "factory": "userpkg.models:OneHotMLP", "kwargs": {"width": 8}},
        "optim": {"default": {"name": "adamw", "lr": 1e-2}}, "train": {"steps": 20}}
SWEEPS = {
    # optim.default.lr reaches decoder, not embedding, which sets its own lr; betas come back a tuple; lr as text
    "toy": (dict(BASE, optim={"default": {"name": "adamw", "lr": 1e-3}, "embedding": {"lr": 3e-3}}), [
        "sweep.optim.default.lr.values=[1e-3, '3e-3', 1]", "sweep.optim.decoder.betas.values=[[0.9, 0.98], [0.8, 0.9]]",
        "sweep.task.train_size.values=[30, 45]", "sweep.model.hidden.values=[[8, 8], [16, 8]]",
        "sweep.train.steps.values=[50, 80]", "seeds=[0, 1]"]),
    "methods": (BASE, ["optim.decoder.grad_filter=ema", "sweep.optim.decoder.filter_lambda.values=[0, 2, 5]",
                       "sweep.optim.decoder.orthogonal.values=[false, true]", "sweep.phases.gap.values=[20, 40]"]),
    "module": (USER, ["sweep.model.kwargs.width.values=[4, 8]", "sweep.optim.default.weight_decay.values=[0, 1]",
                      "seeds=[0, 1, 2]"]),
}


@pytest.fixture
def parses(monkeypatch, userpkg_path):
    """Counts parse_trial on the driver and every check or parse of a block on the worker."""
    counts = {"parse_trial": 0, "worker": 0}
    real = spec_module.parse_trial

    def counted(raw):
        counts["parse_trial"] += 1
        return real(raw)

    def worker(*args, **kwargs):
        counts["worker"] += 1
        raise AssertionError("the worker parsed or checked a block")

    monkeypatch.setattr(spec_module, "parse_trial", counted)
    counts["worker_patches"] = lambda: [monkeypatch.setattr(trial_module, name, worker) for name in (
        "parse_dataclass", "parse_optim", "coerce")] + [monkeypatch.setattr(ModuleConfig, "validate", worker)]
    return counts


@pytest.fixture
def userpkg_path(monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fixtures" / "userpkg"))


@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_each_configuration_is_parsed_once_on_the_driver_and_never_on_the_worker(name, parses):
    raw, overrides = SWEEPS[name]
    spec = build_spec(raw, overrides)
    parses["parse_trial"] = 0
    survey = Survey.of(spec)
    packs = survey.packs(slots=2)
    members = [m for pack_id, indices in packs for m in survey.pack(pack_id, indices).members]
    n = spec.point_count()
    assert parses["parse_trial"] == n == len(members) and len(packs) < n  # packs of several members
    expected = [spec.trial(m.point) for m in members]  # what parsing each point gives
    for member, want in zip(members, expected, strict=True):
        assert member.config == want and member.config.key() == want.key(), member.point
    wire = [m.config.to_dict() for m in members]
    parses["worker_patches"]()
    assert [TrialConfig.from_dict(w) for w in wire] == expected and parses["worker"] == 0


def test_a_dry_run_parses_each_configuration_once(parses, capsys, tmp_path):
    """Per configuration: twice the seeds, twice the configurations, exactly that many more parses (the spec's own
    check of each axis value and the dry-run's packing note parse a few configurations whatever the count; the
    CLI built every configuration once more before the plan did)."""
    counts = {}
    for seeds in ("[0, 1]", "[0, 1, 2, 3]"):
        path = tmp_path / "s.yaml"
        path.write_text("task: {name: addition, p: 10, train_size: 45}\nmodel: {name: toy, hidden: [8, 8]}\n"
                        "train: {steps: 30}\nsweep: {optim.decoder.lr: {values: [0.001, 0.003, 0.01]}}\n"
                        f"seeds: {seeds}\n")
        parses["parse_trial"] = 0
        assert main(["run", str(path), "--dry-run", "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]) == 0
        counts[seeds] = parses["parse_trial"]
        assert f"configurations: {3 * len(seeds.split(','))}" in capsys.readouterr().out
    assert counts["[0, 1, 2, 3]"] - counts["[0, 1]"] == 6
