"""grokray from Python (issue 70): `grokray.train_pack` trains a spec in this process and gives back phases, curves
and parameters; `grokray.sweep` launches it on a real local Ray into a store and gives back the launch's runs as a
DataFrame, with the same phases and crossing steps; a bad spec raises before anything is written."""

import re
import shutil
from pathlib import Path

import pytest

import grokray
from grokray.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"
LONGER = ["train.steps=1000", "phases.budget=1000"]  # the preset's 300 steps leave nearly every cell undecided


def test_train_pack_gives_each_members_phase_curve_and_parameters():
    """The quickstart's smoke grid (decoder lr 1e-4, 1e-2 x decay 0, 2, 5, 10; seed 1) at 1,000 steps, about 3 s:
    Liu's phases appear (more than one), each row's swept values are its configuration's, a member that
    generalizes stops at its validation crossing with its curve in step order to its final accuracy, and its
    parameters are the toy's."""
    result = grokray.train_pack(QUICKSTART, LONGER, scale="smoke")
    runs = result.runs()
    assert len(runs) == 8 and set(runs["seed"]) == {1}
    assert {"comprehension", "memorization", "confusion"} <= set(runs["phase"])
    for (_, row), config in zip(runs.iterrows(), result.configs, strict=True):
        assert row["optim.decoder.lr"] == config.optim["decoder"].lr
        assert row["optim.decoder.weight_decay"] == config.optim["decoder"].weight_decay
    grokked = runs[runs["phase"] == "comprehension"].index[0]
    row = runs.loc[grokked]
    assert row["step_train"] <= row["step_val"] == row["steps_run"] < 1000 and row["final/val/acc"] >= 0.9
    curve = result.curves().query(f"member == {grokked}")
    assert list(curve["step"]) == sorted(curve["step"]) and curve["step"].iloc[-1] == row["steps_run"]
    assert curve["val/acc"].iloc[-1] == pytest.approx(row["final/val/acc"])
    assert set(result.params[grokked]) == {"embed", "dec0.w", "dec0.b", "dec1.w", "dec1.b", "dec2.w", "dec2.b"}
    assert result.params[grokked]["embed"].shape == (10, 1)


@pytest.mark.launch
def test_the_readmes_python_block_sweeps_on_ray_and_mlflow_with_train_packs_phases(tmp_path, monkeypatch):
    """The README's "From Python" block, run as written from a folder holding sweeps/ (about 25 s): the launch on a
    real local Ray into a new SQLite MLflow store gives one row per configuration, each with the phase and
    crossing steps that train_pack gave the same configuration in this process."""
    block = re.search(r"^## From Python.*?^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)
    shutil.copytree(ROOT / "sweeps", tmp_path / "sweeps")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    namespace: dict = {}
    exec(compile(block.group(1), "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    runs, pack = namespace["runs"], namespace["pack"].runs()
    assert runs.attrs["summary"].configurations == 8 == len(runs) == len(pack)
    assert (tmp_path / "mlflow.db").exists() and runs.attrs["tracking_uri"].endswith("mlflow.db")
    key = ["optim.decoder.lr", "optim.decoder.weight_decay"]
    launched, trained = runs.set_index(key).sort_index(), pack.set_index(key).sort_index()
    assert list(launched["phase"]) == list(trained["phase"])
    assert len(set(trained["phase"])) >= 3
    for column in ("step_train", "step_val"):
        assert [None if v != v else int(v) for v in launched[column]] == \
               [None if v != v else int(v) for v in trained[column]]


def test_a_bad_spec_raises_naming_the_field_and_writes_nothing(tmp_path):
    raw = grokray.load(QUICKSTART).raw
    bad = {**raw, "optim": {**raw["optim"], "decoder": {**raw["optim"]["decoder"], "lr": -1.0}}}
    with pytest.raises(SpecError, match="lr"):
        grokray.sweep(bad, tracking_uri=f"sqlite:///{tmp_path}/mlflow.db", storage=str(tmp_path / "results"))
    with pytest.raises(SpecError, match="train_size"):
        grokray.train_pack(QUICKSTART, ["task.train_size=0"])
    assert list(tmp_path.iterdir()) == []


def test_every_exported_function_documents_each_parameter_and_takes_keywords_past_the_third(tmp_path):
    """Issue 72's public surface: what `grokray` exports is what a notebook calls; each function's docstring
    has an Args: section naming every parameter, and a parameter past the third is keyword-only. About 2 s
    (MLflow's import)."""
    import inspect

    functions = {name: getattr(grokray, name) for name in grokray.__all__ if inspect.isfunction(getattr(grokray, name))}
    assert set(functions) == {"load", "load_curves", "load_runs", "open_tracker", "sweep", "train_pack"}
    for name, fn in functions.items():
        doc = inspect.getdoc(fn) or ""
        assert "Args:" in doc, name
        args = doc.split("Args:", 1)[1]
        params = inspect.signature(fn).parameters.values()
        assert [p.name for p in params if not re.search(rf"^\s+(\w+, )*{p.name}(, \w+)*:", args, re.M)] == [], name
        positional = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert len(positional) <= 3, (name, positional)
    store = grokray.open_tracker(f"sqlite:///{tmp_path}/mlflow.db", prepare=True)
    assert store.experiment_id("none") is None and grokray.load_runs.__module__ == "analysis.load"
