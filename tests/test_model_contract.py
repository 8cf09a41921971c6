"""One contract, every registered family (the Optuna/Optax habit): a new family is tested by registering it.

Each family declares `example`, a tiny task + model spec. For every family: output shapes (gradient families),
seed determinism, 20 steps reduce the training loss, and an exact save/restore mid-run.
"""

import pytest

from grokray.engine import PackTrainer, load_checkpoint, make_trainer, save_checkpoint
from grokray.models import MODELS
from grokray.spec.build import build_spec

FAMILIES = MODELS.names()


def example(name, *overrides):
    family = MODELS.get(name).build
    assert hasattr(family, "example"), f"model family {name!r} must declare a tiny `example` spec"
    raw = {**family.example, "phases": {"stop_when_classified": False}}
    raw.setdefault("train", {})
    raw["train"] = {**raw["train"], "steps": 20}
    raw["phases"]["budget"] = 20
    return build_spec(raw, list(overrides)).first_trial()


def trained(name, *overrides):
    trainer = make_trainer([example(name, *overrides)])
    trainer.run()
    return trainer


def test_every_family_is_covered():
    assert {"toy", "transformer"} <= set(FAMILIES)


@pytest.mark.parametrize("name", FAMILIES)
def test_family_and_its_trainer_keep_the_contracts(name, tmp_path):
    """contracts.Family on the registered class, contracts.Trainer on what the engine builds for it: the only
    attributes the engine, the sweep layer and the sizing probe read."""
    from grokray.contracts import Family, Trainer
    from grokray.engine.trainers import TRAINERS

    family = MODELS.get(name).build
    assert isinstance(family, Family), name
    assert family.trainer in TRAINERS and family.example
    trainer = make_trainer([example(name)])
    assert isinstance(trainer, Trainer) and isinstance(trainer, TRAINERS[family.trainer])
    assert trainer.K == 1 and trainer.step == 0 and trainer.stopped_at == [None] and trainer.member_bytes() > 0
    trainer.run()
    [state] = trainer.member_states()
    assert state and all(t.device.type == "cpu" for t in state.values())


@pytest.mark.parametrize("name", FAMILIES)
def test_output_shapes(name):
    cfg = example(name)
    if not isinstance(make_trainer([cfg]), PackTrainer):  # trainer-only families (rfm): the result's shape
        trainer = make_trainer([cfg])
        trainer.run()
        result = trainer.results()[0]
        assert set(result.curve) >= {"step", "train/acc", "val/acc", "train/loss", "val/loss"}
        return
    trainer = make_trainer([cfg, example(name, "seeds=[1]")])
    x = trainer.x[:5].unsqueeze(0).expand(2, *trainer.x[:5].shape)
    out = trainer.model(x)
    assert out.shape == (2, 5, trainer.model.head.out_dim)
    loss, correct = trainer.model.head.per_sample(out, trainer.y[:5].expand(2, 5))
    assert loss.shape == (2, 5) and correct.shape == (2, 5)


@pytest.mark.parametrize("name", FAMILIES)
def test_seed_determinism(name):
    a, b = trained(name).results()[0], trained(name).results()[0]
    assert a.curve == b.curve
    c = trained(name, "seeds=[1]").results()[0]
    assert c.curve["train/loss"] != a.curve["train/loss"] or c.curve["val/acc"] != a.curve["val/acc"]


@pytest.mark.parametrize("name", FAMILIES)
def test_twenty_steps_reduce_training_loss(name):
    curve = trained(name).results()[0].curve
    first, last = curve["train/loss"][0], curve["train/loss"][-1]
    assert last < first or (first < 1e-12 and last < 1e-12)  # kernel machines interpolate from step 0


@pytest.mark.parametrize("name", FAMILIES)
def test_save_restore_mid_run(name, tmp_path):
    cfg = example(name)
    whole = trained(name)
    part = make_trainer([cfg])
    part.run(until=10)
    save_checkpoint(part, tmp_path / "state.pt")
    resumed = make_trainer([cfg])
    load_checkpoint(resumed, tmp_path / "state.pt")
    resumed.run()
    assert resumed.results()[0].curve == whole.results()[0].curve


@pytest.mark.parametrize("name", FAMILIES)
def test_family_has_a_spec_that_grokray_train_runs(name, capsys):
    """Every family ships at least one spec in sweeps/; its smoke preset trains through the CLI and prints a phase."""
    from pathlib import Path

    import yaml

    from grokray.cli import main

    specs = sorted(Path(__file__).resolve().parents[1].glob("sweeps/*.yaml"))
    mine = [p for p in specs if yaml.safe_load(p.read_text())["model"]["name"] == name]
    assert mine, f"no spec in sweeps/ uses model {name!r}"
    assert main(["train", str(mine[0]), "--scale", "smoke"]) == 0
    assert "phase: " in capsys.readouterr().out
