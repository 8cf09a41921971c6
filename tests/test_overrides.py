"""`-s KEY=value` does what it says: a key that is a sweep axis pins that axis (and says so), a key that matches
nothing is an error naming the nearest keys, and the overrides the README and the specs' comments suggest run."""

from pathlib import Path

import pytest

from grokray.cli import main
from grokray.errors import SpecError
from grokray.spec.build import load_spec

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"
RFM_SYMMETRY = ROOT / "sweeps" / "rfm_symmetry.yaml"


def test_a_swept_key_is_pinned_to_the_value_and_the_spec_says_so():
    spec = load_spec(QUICKSTART, ["optim.decoder.lr=3e-4"])
    assert spec.axes["optim.decoder.lr"] == [3e-4] and len(spec.points()) == 16  # 4 wds (still swept) x 4 seeds
    assert {t.optim["decoder"].lr for t in spec.trials()} == {3e-4}
    assert spec.notes == ["-s optim.decoder.lr=3e-4 pins the sweep axis optim.decoder.lr to that one value (the "
                          "spec swept logspace: [-4, -2, 5])"]
    assert load_spec(QUICKSTART, ["train.steps=50"]).notes == []  # not an axis: an ordinary override


def test_a_pinned_axis_sets_the_base_too_so_dependent_fields_validate():
    spec = load_spec(RFM_SYMMETRY, ["task.split_mode=withhold_reflection", "task.reflection_k=5"], scale="smoke")
    [config] = spec.trials()  # smoke: one seed
    assert config.task.split_mode == "withhold_reflection" and config.task.reflection_k == 5


def test_train_runs_the_pinned_value(capsys):
    assert main(["train", str(QUICKSTART), "--scale", "smoke", "-s", "optim.decoder.lr=3e-4",
                 "-s", "optim.decoder.weight_decay=5", "-s", "seeds=[2]"]) == 0
    err = capsys.readouterr().err
    assert "pins the sweep axis optim.decoder.lr" in err and "pins the sweep axis optim.decoder.weight_decay" in err


def test_run_dry_run_counts_the_pinned_grid(capsys, tmp_path):
    assert main(["run", str(QUICKSTART), "--dry-run", "--no-calibrate", "-s", "optim.decoder.weight_decay=5",
                 "--tracking-uri", f"sqlite:///{tmp_path}/x.db"]) == 0
    captured = capsys.readouterr()
    assert "configurations: 20" in captured.out and "pins the sweep axis optim.decoder.weight_decay" in captured.err


@pytest.mark.parametrize(("override", "field", "hint"), [
    ("optim.decoder.lrr=1", "optim.decoder.lrr", "did you mean 'lr'?"),
    ("task.pp=11", "task.pp", "did you mean 'p'?"),
    ("trian.steps=5", "-s trian", "did you mean 'train'?"),
])
def test_a_key_that_matches_nothing_names_the_nearest(override, field, hint):
    with pytest.raises(SpecError) as err:
        load_spec(QUICKSTART, [override])
    assert err.value.field == field and hint in str(err.value)


def test_the_overrides_the_docs_suggest_run(capsys):
    # README: `grokray train sweeps/quickstart.yaml -s optim.decoder.lr=3e-4 -s seeds=[2]`
    spec = load_spec(QUICKSTART, ["optim.decoder.lr=3e-4", "seeds=[2]"])
    assert spec.first_trial().optim["decoder"].lr == 3e-4 and spec.first_trial().seed == 2
    # sweeps/rfm_symmetry.yaml's header: `-s task.split_mode=withhold_reflection -s task.reflection_k=5`
    assert main(["train", str(RFM_SYMMETRY), "--scale", "smoke", "-s", "task.split_mode=withhold_reflection",
                 "-s", "task.reflection_k=5"]) == 0
    assert "phase:" in capsys.readouterr().out


DOC_COMMANDS = [  # (spec, overrides, configurations) of the commands docs/reproduction.md and the README print
    ("rfm_fraction.yaml", ["task.p=31", "train.steps=30", "phases.budget=30", "sweep.model.kernel.values=[gaussian]",
                           "sweep.task.train_fraction.values=[0.3,0.4,0.5,0.6,0.7]"], 60),
    ("liu_fig7_transformer.yaml", ["task.p=23", "model.d_model=32", "model.d_mlp=128", "train.steps=3000",
                                   "phases.budget=3000", "phases.gap=100",
                                   "sweep.optim.decoder.lr.logspace=[-3,-2,3]",
                                   "sweep.optim.decoder.weight_decay.values=[0,0.3,1,3]",
                                   "sweep.model.dropout.values=[0.0]"], 24),
    ("quickstart.yaml", ["artifacts.final_state=true"], 80),
]


@pytest.mark.parametrize(("name", "overrides", "n"), DOC_COMMANDS, ids=[c[0] for c in DOC_COMMANDS])
def test_the_documented_commands_expand_to_what_the_docs_say(name, overrides, n):
    spec = load_spec(ROOT / "sweeps" / name, overrides)
    assert len(spec.trials()) == n
    assert not spec.notes  # none of them pins an axis by accident


def test_adaptive_null_runs_the_plain_grid(tmp_path):
    import yaml

    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["adaptive"] = {"start": [3, 3], "target": [5, 5]}
    path = tmp_path / "adaptive.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert load_spec(path).raw.get("adaptive") and load_spec(path, ["adaptive=null"]).raw.get("adaptive") is None


def test_a_searched_key_is_pinned_for_the_search():
    from grokray.search.config import parse_search

    spec = load_spec(ROOT / "sweeps" / "degrok_toy.yaml", ["optim.decoder.lr=3e-4"], scale="smoke")
    cfg = parse_search(spec)
    assert cfg.space["optim.decoder.lr"].kind == "categorical" and cfg.space["optim.decoder.lr"].choices == (3e-4,)
    assert "pins the searched key optim.decoder.lr" in spec.notes[0]
    assert "optim.decoder.weight_decay" in cfg.space and cfg.space["optim.decoder.weight_decay"].kind == "float"
