"""Bad specs: one clear line naming the field and what is allowed, exit code 2, no traceback."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grokray.cli import main
from grokray.errors import SpecError
from grokray.spec.build import build_spec, load_spec

ROOT = Path(__file__).resolve().parents[1]

GOOD = {
    "name": "t",
    "task": {"name": "modular", "op": "add", "p": 7, "train_fraction": 0.5},
    "model": {"name": "toy", "embed_dim": 2, "hidden": [8]},
    "optim": {"default": {"name": "adamw", "lr": 1e-3}},
    "train": {"steps": 3},
}


def with_change(path: str, value):
    raw = yaml.safe_load(yaml.safe_dump(GOOD))
    node = raw
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return yaml.safe_dump(raw)


CASES = {
    "malformed_yaml": ("task: {name: modular, p: 7\nmodel: [", "malformed YAML", "spec"),
    "empty_file": ("", "empty", "spec"),
    "unknown_model": (with_change("model.name", "resnet"), "allowed: ", "model.name"),
    "unknown_key": (
        with_change("optim.default.weight_decy", 0.1),
        "did you mean 'weight_decay'",
        "optim.default.weight_decy",
    ),
    "wrong_type": (with_change("train.steps", "many"), "expected int", "train.steps"),
    "negative_lr": (with_change("optim.default.lr", -0.1), "must be >= 0", "optim.default.lr"),
    "fraction_zero": (with_change("task.train_fraction", 0), "must be > 0", "task.train_fraction"),
    "fraction_too_big": (with_change("task.train_fraction", 1.5), "<= 1", "task.train_fraction"),
    "composite_p_div": (with_change("task.op", "div").replace("p: 7", "p: 21"), "prime", "task.p"),
    "width_zero": (with_change("model.hidden", [0]), ">= 1", "model.hidden[0]"),
    "steps_zero": (with_change("train.steps", 0), ">= 1", "train.steps"),
    "unknown_top_key": (yaml.safe_dump({**GOOD, "sweeps": {}}), "did you mean 'sweep'", "sweeps"),
    "bad_axis": (
        yaml.safe_dump({**GOOD, "sweep": {"optim.default.lr": {"logspace": [-3, -1]}}}),
        "[start, stop, num]",
        "sweep.optim.default.lr.logspace",
    ),
    "axis_unknown_field": (
        yaml.safe_dump({**GOOD, "sweep": {"optim.decodr.lr": {"values": [1e-3]}}}),
        "did you mean 'decoder'",
        "sweep.optim.decodr.lr",
    ),
    "nan_string": (with_change("optim.default.lr", "nan"), "finite", "optim.default.lr"),
    "seeds_twice": (yaml.safe_dump({**GOOD, "seeds": [0], "sweep": {"seed": {"values": [1, 2]}}}), "given twice",
                    "sweep.seed"),
}


def test_a_seed_axis_is_the_seed_list():
    """`sweep.seed` used to be silently replaced by the default `seeds: [0]` (every point trained seed 0)."""
    from grokray.spec.build import build_spec

    spec = build_spec({**GOOD, "sweep": {"seed": {"range": [3, 6, 1]}, "optim.default.lr": {"values": [1e-3, 1e-2]}}})
    assert spec.seeds == [3, 4, 5] and [t.seed for t in spec.trials()] == [3, 4, 5, 3, 4, 5]


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_spec_is_one_line(case, tmp_path, capsys):
    text, expected, field = CASES[case]
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    code = main(["train", str(spec)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    assert expected in err, err
    assert err.startswith(f"grokray: error: {field}"), err


def test_override_typo_is_caught(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(GOOD))
    assert main(["train", str(spec), "-s", "optim.default.weight_decy=1"]) == 2
    assert "did you mean 'weight_decay'" in capsys.readouterr().err


def test_python_object_tag_is_rejected(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("!!python/object/apply:os.system ['echo pwned']\n")
    assert main(["train", str(spec)]) == 2
    assert "malformed YAML" in capsys.readouterr().err


def test_no_traceback_from_the_real_console_script(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(with_change("train.steps", -5))
    proc = subprocess.run([sys.executable, "-m", "grokray.cli", "train", str(spec)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "grokray: error: train.steps: got -5; must be >= 1 and <= 1000000000"
    assert Path(spec).exists()


THREE_MISTAKES = {**GOOD, "task": {**GOOD["task"], "pp": 7}, "train": {"stepz": 3},
                  "sweep": {"optim.default.lr": {"values": [1e-3, -1.0]}}}


def test_every_mistake_is_reported_one_line_each(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(THREE_MISTAKES))
    code = main(["run", str(spec), "--dry-run", "-s", "phases.budgett=5", "-s", "optim.default.weight_decay=abc",
                 "--tracking-uri", f"sqlite:///{tmp_path}/m.db"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not (tmp_path / "m.db").exists()
    fields = [line.removeprefix("grokray: error: ").split(":")[0] for line in lines[:-1]]
    assert sorted(fields) == sorted(["task.pp", "train.stepz", "phases.budgett", "optim.default.weight_decay",
                                     "sweep.optim.default.lr"]), lines
    assert lines[-1] == "grokray: 5 mistakes; nothing was run"


def test_a_typo_in_the_second_axis_is_reported_under_that_axis():
    from grokray.errors import SpecError
    from grokray.spec.build import build_spec

    raw = {**GOOD, "sweep": {"optim.default.lr": {"values": [1e-3, 1e-2]},
                             "optim.default.weight_decy": {"values": [0, 1]}}}
    with pytest.raises(SpecError) as err:
        build_spec(raw)
    assert [e.field for e in err.value.errors] == ["sweep.optim.default.weight_decy"]
    assert "did you mean 'weight_decay'" in str(err.value)


def test_the_resolved_spec_is_written_out_without_yaml_anchors():
    """Issue 39: the parent's description showed `&id001` where a preset reuses a value."""
    from pathlib import Path

    import yaml

    from grokray.spec.build import load_spec

    spec = load_spec(Path(__file__).resolve().parents[1] / "sweeps" / "quickstart.yaml", scale="smoke")
    assert "&id" in yaml.safe_dump(spec.raw, sort_keys=False)  # the case: a shared value
    text = spec.yaml()
    assert "&id" not in text and "*id" not in text and yaml.safe_load(text) == spec.raw


IDLE = {  # issue 52: a method's knob set without the method trains the same curve; each is now a named error
    "optim.decoder.filter_lambda=2": ("optim.decoder.filter_lambda", "grad_filter: ema or ma"),
    "optim.default.filter_window=100": ("optim.default.filter_window", "grad_filter: ma"),
    "optim.default.momentum=0.9": ("optim.default.momentum", "name: muon or sgd"),
    "optim.decoder.temperature=0.01": ("optim.decoder.temperature", "name: langevin"),
    "optim.default.muon_on=all": ("optim.default.muon_on", "name: muon"),
}


@pytest.mark.parametrize("override", list(IDLE))
def test_a_field_that_does_nothing_here_is_an_error_naming_what_it_needs(override):
    from grokray.spec.build import load_spec

    field, needs = IDLE[override]
    with pytest.raises(SpecError) as err:
        load_spec(ROOT / "sweeps" / "quickstart.yaml", [override])
    assert str(err.value).startswith(field) and needs in str(err.value) and "does nothing" in str(err.value)


@pytest.mark.parametrize("overrides", [["optim.default.grad_filter=ema", "optim.default.filter_alpha=0.9"],
                                       ["optim.default.grad_filter=ma", "optim.default.filter_window=50"],
                                       ["optim.decoder.name=sgd", "optim.decoder.momentum=0.9"]])
def test_the_same_fields_with_their_method_are_accepted(overrides):
    from grokray.spec.build import load_spec

    assert load_spec(ROOT / "sweeps" / "quickstart.yaml", overrides).first_trial()


def test_a_binary_file_as_the_spec_is_one_line_and_exit_2(tmp_path, capsys):
    """Issue 52: a binary file given as the spec raised a UnicodeDecodeError traceback, exit 1."""
    spec = tmp_path / "model.pt"
    spec.write_bytes(bytes(range(256)) * 4)
    assert main(["run", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["grokray: error: spec: model.pt is not a text file (not UTF-8); a spec is YAML text"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


@pytest.mark.parametrize("argv, names", [(["run", "sweeps/quickstart.yaml", "--scale", "bogus"], "--scale"),
                                         (["run"], "spec"), (["search", "x.yaml", "--progress", "loud"], "--progress")])
def test_a_bad_option_is_one_line_naming_it_and_exit_2(argv, names):
    """Issue 52: `--scale bogus` printed eight lines of usage."""
    out = subprocess.run([sys.executable, "-m", "grokray", *argv], cwd=ROOT, capture_output=True, text=True)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith("grokray: error:") and names in lines[0]


def test_a_bad_field_is_reported_even_where_a_preset_replaces_it(tmp_path):
    """Issue 52: `train.steps: "ten"` under --scale smoke was replaced by the preset before validation, and ran."""
    from grokray.spec.build import load_spec

    raw = yaml.safe_load((ROOT / "sweeps" / "quickstart.yaml").read_text())
    raw["train"]["steps"] = "ten"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    for scale in ("smoke", None):
        with pytest.raises(SpecError) as err:
            load_spec(path, scale=scale)
        assert "train.steps" in str(err.value) and "ten" in str(err.value)


@pytest.mark.parametrize("override, field, hint", [
    ("model.name=transfomer", "model.name", "did you mean 'transformer'?"),
    ("train.batches=epoch", "train.batches", "did you mean 'epochs'?"),
])
def test_a_misspelt_value_gets_a_did_you_mean_beside_the_allowed_ones(override, field, hint):
    """Issue 52: 'transfomer' was answered with the list of models alone."""
    with pytest.raises(SpecError) as err:
        load_spec(ROOT / "sweeps" / "grokfast_adamw.yaml", [override])
    assert err.value.field == field and hint in str(err.value) and "allowed: " in str(err.value)


# Issue 61: a name stays inside the folders built from it; seeds and swept values are given once each.
NAMES = [("../../etc/x", "no path separators"), ("a/b", "no path separators"), ("a\\b", "no path separators"),
         ("..", "'..'"), ("x\x01y", "control characters"), ("x" * 101, "has 101 characters; at most 100"),
         ("   ", "expected a non-empty string")]


@pytest.mark.parametrize("name, message", NAMES, ids=range(len(NAMES)))
def test_a_name_that_would_leave_its_folder_is_refused(name, message):
    raw = {"name": name, "task": {"name": "addition", "p": 5}, "model": {"name": "toy", "hidden": [8]}}
    with pytest.raises(SpecError) as info:
        build_spec(raw)
    assert str(info.value).startswith("name: ") and message in str(info.value)


def test_a_study_name_that_would_leave_the_results_folder_is_refused():
    from grokray.search.config import parse_search

    spec = build_spec({"name": "ok", "task": {"name": "addition", "p": 5}, "model": {"name": "toy", "hidden": [8]},
                       "search": {"space": {"optim.default.lr": {"float": [1e-4, 1e-2]}}, "study": "../x"}})
    with pytest.raises(SpecError, match=r"search.study: got '../x'; a name stays inside"):
        parse_search(spec)


@pytest.mark.parametrize("raw, field, value", [
    ({"seeds": [1, 2, 1]}, "seeds", "seed 1"),
    ({"sweep": {"seed": {"values": [3, 4]}}, "seeds": None}, None, None),
    ({"sweep": {"seed": {"values": [3, 3]}}}, "sweep.seed.values", "value 3"),
    ({"sweep": {"optim.default.weight_decay": {"values": [0, 0, 2]}}}, "sweep.optim.default.weight_decay.values",
     "value 0"),
    ({"sweep": {"optim.default.weight_decay": {"values": [1, 1.0]}}}, "sweep.optim.default.weight_decay.values",
     "value 1.0"),
], ids=range(5))
def test_a_repeated_seed_or_swept_value_is_refused_naming_it(raw, field, value):
    base = {"task": {"name": "addition", "p": 5}, "model": {"name": "toy", "hidden": [8]}}
    raw = {**base, **{k: v for k, v in raw.items() if v is not None}}
    if field is None:
        assert build_spec(raw).seeds == [3, 4]
        return
    with pytest.raises(SpecError) as info:
        build_spec(raw)
    assert str(info.value).startswith(f"{field}: {value} is given twice"), str(info.value)
