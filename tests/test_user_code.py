"""Your own model and task (issue 60), without Ray: the `module` family packs any torch.nn.Module, a member equals
the same module trained alone (by grokray at K = 1 and by a plain torch loop), the generic Liu toy reproduces the
built-in toy's phases, families and tasks come from "package.module:Attribute" names and entry points, the
`dataset` task splits the user's arrays per seed, and every bad input is one line before anything starts.

The user's code lives in tests/fixtures/userpkg/ (a package outside grokray) and examples/tiny_transformer.py.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from grokray.engine import PackTrainer, make_trainer
from grokray.errors import SpecError
from grokray.spec.build import build_spec, load_spec

ROOT = Path(__file__).resolve().parents[1]
USERPKG = ROOT / "tests" / "fixtures" / "userpkg"


@pytest.fixture(autouse=True)
def _user_code_importable(monkeypatch):
    """As a user runs grokray: from the directory that holds their package (it imports from the working dir)."""
    monkeypatch.chdir(USERPKG)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(USERPKG))])
    yield


MLP = {"task": {"name": "dataset", "factory": "userpkg.data:sparse_parity", "inputs": "features", "labels": "parity",
                "train_fraction": 0.6},
       "model": {"name": "module", "factory": "userpkg.models:make_mlp", "kwargs": {"width": 16}},
       "optim": {"default": {"name": "adamw", "lr": 1e-2, "weight_decay": 0.5}},
       "train": {"steps": 40}, "phases": {"budget": 40, "stop_when_classified": False}}
TRANSFORMER = {"task": {"name": "modular", "p": 7, "train_fraction": 0.6},
               "model": {"name": "module", "factory": "examples.tiny_transformer:TinyTransformer",
                         "kwargs": {"d_model": 8, "n_heads": 2, "d_mlp": 16}},
               "optim": {"default": {"name": "adamw", "lr": 1e-2, "weight_decay": 1.0}},
               "train": {"steps": 30, "dtype": "float64"}, "phases": {"budget": 30, "stop_when_classified": False}}


def _transformer(monkeypatch):
    monkeypatch.chdir(ROOT)  # examples/ is the repository's
    return TRANSFORMER


def final_params(configs) -> list[dict]:
    trainer = PackTrainer(configs)
    trainer.compact = False
    trainer.run()
    return trainer.member_states()


# The two modules of issue 70 written the ordinary way: one_hot().float() (so float32), and nn.MultiheadAttention
# in float64, as TRANSFORMER above (float32 rounding turns an attention key bias's zero gradient into Adam's full
# step, in a plain loop, a lone run and a pack alike but not identically; the bias does not change the function)
ORDINARY = {
    "onehot": {"task": {"name": "modular", "op": "mul", "p": 11, "train_fraction": 0.3},
               "model": {"name": "module", "factory": "userpkg.models:OneHotMLP", "kwargs": {"width": 16}},
               "train": {"steps": 20, "dtype": "float32"}},
    "mha": {"task": {"name": "modular", "p": 7, "train_fraction": 0.6},
            "model": {"name": "module", "factory": "userpkg.models:MHATransformer"},
            "train": {"steps": 20, "dtype": "float64"}},
}
ORDINARY = {name: {**raw, "optim": {"default": {"name": "adamw", "lr": 1e-2, "weight_decay": 0.5}},
                   "phases": {"budget": 20, "stop_when_classified": False}} for name, raw in ORDINARY.items()}
TOLERANCE = {"float32": {"rtol": 1e-4, "atol": 1e-5}, "float64": {"rtol": 1e-7, "atol": 1e-9}}  # a key bias: 1e-11


@pytest.mark.parametrize("which", ["mlp", "transformer", "onehot", "mha", "onehot-chunked", "onehot-alone"])
def test_a_pack_of_k_members_equals_k_lone_runs(which, monkeypatch):
    """onehot-chunked: a chunk holds two members' rows, so the pack's forward and loss run a vmapped chunk at a time
    (ModuleFamily.per_sample's CPU chunks, each split off the pack); onehot-alone: a member's rows fill a core, so
    each member is called plainly (Functional.solo), as its lone run is; both still equal the lone runs."""
    from grokray.models import module
    from grokray.models.user_module import Functional

    if which == "onehot-chunked":
        monkeypatch.setattr(module, "CPU_CHUNK_ROWS", 2 * 121)  # p 11: 121 points a member, measured jointly
    called = []
    if which == "onehot-alone":
        monkeypatch.setattr(module, "MEMBER_ALONE_ROWS", 100)
        solo = Functional.solo
        monkeypatch.setattr(Functional, "solo", lambda self, *a: called.append(a[2].shape) or solo(self, *a))
    raw = {"mlp": MLP, "transformer": TRANSFORMER, **ORDINARY, "onehot-chunked": ORDINARY["onehot"],
           "onehot-alone": ORDINARY["onehot"]}[which]
    if which == "transformer":
        _transformer(monkeypatch)
    spec = build_spec({**raw, "seeds": [0, 1, 2], "sweep": {"optim.default.lr": {"values": [1e-2, 3e-3]}}})
    configs = spec.trials()
    packed = final_params(configs)
    assert len(packed) == 6
    if which == "onehot-alone":  # every member of the pack of 6, one at a time: 20 steps and the final measure
        assert len(called) == 6 * 21 and set(called) == {(1, 121, 2)}
    for config, together in zip(configs, packed, strict=True):
        [alone] = final_params([config])
        assert together.keys() == alone.keys()
        for name in alone:
            torch.testing.assert_close(together[name], alone[name], rtol=1e-5, atol=1e-6, msg=name)
    a, b = packed[0], packed[1]  # seeds differ: so do their starts and ends
    assert any(not torch.allclose(a[n], b[n]) for n in a)


def test_a_member_equals_the_module_trained_by_a_plain_torch_loop():
    """The same module, built after torch.manual_seed(seed), trained full batch by torch.optim.AdamW on the
    member's own split: grokray's member starts at the same weights and ends within float tolerance."""
    from userpkg.models import make_mlp

    config = build_spec({**MLP, "seeds": [3]}).first_trial()
    [ours] = final_params([config])
    data = config.task.data()
    train, _ = config.task.split(data, 3)
    torch.manual_seed(3)
    net = make_mlp(in_features=8, out_features=2, width=16)
    assert torch.equal(net[0].weight.detach(), build_start(config)["0.weight"])
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.5)
    x, y = data.x[train].float(), data.y[train]
    for _ in range(40):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    for name, p in net.named_parameters():
        torch.testing.assert_close(ours[name], p.detach(), rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("which", ["onehot", "mha"])
def test_an_ordinary_module_member_equals_a_plain_adamw_loop(which):
    """Issue 70's two fixtures: the module built after torch.manual_seed(seed) and trained full batch by
    torch.optim.AdamW in float64 starts where grokray's member starts and ends where it ends, to rounding."""
    from grokray.models.user_module import build_module

    config = build_spec({**ORDINARY[which], "seeds": [2]}).first_trial()
    [ours] = final_params([config])
    data = config.task.data()
    train, _ = config.task.split(data, 2)
    torch.manual_seed(2)
    dtype = config.train.dtype
    net = build_module(config.model, data).to(getattr(torch, dtype))
    start = build_start(config)
    assert all(torch.equal(start[n], p.detach()) for n, p in net.named_parameters())
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.5)
    for _ in range(20):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(data.x[train]), data.y[train]).backward()
        opt.step()
    for name, p in net.named_parameters():
        torch.testing.assert_close(ours[name], p.detach(), **TOLERANCE[dtype], msg=name)


def test_the_module_pack_backpropagates_through_training_rows_only(monkeypatch):
    """Issue 70: a full-batch pack measured every step ran one forward with a backward over every point, held-out
    rows too (a third of a transformer's step). Seen from inside the module: each step's forward with autograd
    reads the training rows alone, and the held-out rows are read without it. A toy-sized table (at most
    JOINT_MAX_POINTS) stays joint, one call being cheaper than two."""
    from userpkg import models

    from grokray.models.module import JOINT_MAX_POINTS

    raw = {"task": {"name": "modular", "p": 23, "train_fraction": 0.5},
           "model": {"name": "module", "factory": "userpkg.models:RowRecorder"},
           "optim": {"default": {"name": "adamw", "lr": 1e-2}}, "seeds": [0, 1, 2],
           "train": {"steps": 6}, "phases": {"budget": 6, "stop_when_classified": False}}
    trainer = PackTrainer(build_spec(raw).trials())
    assert trainer.split and not trainer.joint and len(trainer.y) == 529 > JOINT_MAX_POINTS
    n_train, n_val = int(trainer.n_train.max()), int(trainer.n_val.max())
    models.SEEN_ROWS.clear()
    trainer.run(until=6)
    with_grad = [rows for rows, grad in models.SEEN_ROWS if grad]
    assert with_grad == [n_train] * 6 and n_train == 264
    assert [rows for rows, grad in models.SEEN_ROWS if not grad][:6] == [n_val] * 6
    small = PackTrainer(build_spec({**raw, "task": {"name": "modular", "p": 11, "train_fraction": 0.5}}).trials())
    assert small.joint and len(small.y) == 121


def build_start(config) -> dict:
    trainer = make_trainer([config])
    return trainer.member_states()[0]


def test_the_generic_liu_toy_reproduces_the_built_in_toys_phases():
    """The quickstart grid at smoke scale (lr 1e-4 and 1e-2 x decay 0, 2, 5, 10, seed 1), at 1,000 steps (at
    the preset's 300 steps nearly every cell is still undecided): the toy written as a plain module
    (userpkg.models.LiuToy, drawn as the built-in family draws) gives every configuration the built-in's phase,
    and its crossing steps within a few steps (another order of float operations rounds differently)."""
    generic = {"name": "module", "factory": "userpkg.models:LiuToy", "loss": "target_vectors",
               "groups": {"embedding": ["embed"], "decoder": ["weights.*", "biases.*"]}}
    over = ["train.steps=1000", "phases.budget=1000"]
    spec = load_spec(ROOT / "sweeps" / "quickstart.yaml", over, scale="smoke")
    builtin, ours = spec.trials(), build_spec({**spec.raw, "model": generic}).trials()
    assert len(ours) == len(builtin) == 8
    a, b = make_trainer(builtin), make_trainer(ours)
    a.run()
    b.run()
    pairs = list(zip(a.results(), b.results(), strict=True))
    assert [x.phase for x, _ in pairs] == [y.phase for _, y in pairs]
    for x, y in pairs:
        for s, t in ((x.step_train, y.step_train), (x.step_val, y.step_val)):
            assert (s is None) == (t is None) and (s is None or abs(s - t) <= max(5, 0.02 * s))
    assert {x.phase for x, _ in pairs} >= {"comprehension", "memorization", "confusion"}  # not one phase


def test_dropout_draws_differ_per_member_and_repeat_per_pack():
    raw = {**MLP, "model": {**MLP["model"], "kwargs": {"width": 16, "dropout": 0.3}}, "seeds": [5]}
    configs = build_spec(raw).trials() * 2  # one configuration twice in a pack: the same seed
    first, again = final_params(configs), final_params(configs)
    assert all(torch.equal(first[0][n], again[0][n]) for n in first[0])  # reproducible
    assert any(not torch.equal(first[0][n], first[1][n]) for n in first[0])  # same seed, other masks


def test_groups_by_name_pattern_get_their_own_optimizer_settings(monkeypatch):
    raw = {**_transformer(monkeypatch), "model": {**TRANSFORMER["model"], "groups": {"embedding": ["embed.*", "pos"]}},
           "optim": {"default": {"name": "adamw", "lr": 1e-2}, "embedding": {"lr": 0.0}}}
    config = build_spec(raw).first_trial()
    assert set(config.optim) == {"embedding", "rest"}
    start = build_start(config)
    trainer = make_trainer([config])
    trainer.run()
    end = trainer.member_states()[0]
    assert torch.equal(start["embed.weight"], end["embed.weight"]) and torch.equal(start["pos"], end["pos"])
    assert not torch.equal(start["qkv.weight"], end["qkv.weight"])


def test_a_swept_factory_argument_puts_each_value_in_packs_of_its_own():
    from grokray.plan.estimate import pack_splitting_axes
    from grokray.plan.expand import expand

    spec = build_spec({**MLP, "seeds": [0, 1], "sweep": {"model.kwargs.width": {"values": [8, 16]},
                                                         "optim.default.lr": {"values": [1e-2, 1e-3]}}})
    plan = expand(spec, slots=1)
    assert len(plan.packs) == 2 and sorted(len(p.members) for p in plan.packs) == [4, 4]
    assert pack_splitting_axes(spec) == ["model.kwargs.width"]


def test_a_family_and_a_task_of_the_users_own_by_module_path():
    raw = {"task": {"name": "userpkg.tasks:SparseParity", "n": 200, "train_fraction": 0.7},
           "model": {"name": "userpkg.family:SoftmaxRegression", "bias": False},
           "optim": {"weights": {"name": "adamw", "lr": 0.05}},
           "train": {"steps": 200}, "phases": {"budget": 200}}
    config = build_spec(raw).first_trial()
    assert config.model.registry_name == "userpkg.family:SoftmaxRegression"
    assert config.to_dict()["task"]["name"] == "userpkg.tasks:SparseParity"
    trainer = make_trainer([config])
    trainer.run()
    [result] = trainer.results()
    assert result.final["train/acc"] < 0.9  # a linear map cannot fit a 3-bit parity: it never generalizes either
    with pytest.raises(SpecError, match="model.bias"):
        build_spec({**raw, "model": {**raw["model"], "bias": "yes"}})
    with pytest.raises(SpecError, match="model.biass: unknown key; did you mean 'bias'"):
        build_spec({**raw, "model": {**raw["model"], "biass": True}})


def test_installed_packages_register_families_and_tasks_through_entry_points(tmp_path, monkeypatch):
    dist = tmp_path / "userpkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: userpkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[grokray.models]\nsoftreg = userpkg.family:SoftmaxRegression\n"
                                           "[grokray.tasks]\nparity = userpkg.tasks:SparseParity\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(USERPKG))
    raw = {"task": {"name": "parity", "n": 100}, "model": {"name": "softreg"},
           "train": {"steps": 5}, "phases": {"budget": 5}}
    config = build_spec(raw).first_trial()
    assert (config.task.registry_name, config.model.registry_name) == ("parity", "softreg")
    make_trainer([config]).run()
    with pytest.raises(SpecError, match="unknown model 'softre'; did you mean 'softreg'"):
        build_spec({**raw, "model": {"name": "softre"}})


def test_the_dataset_task_reads_npz_and_pt_files_and_splits_each_seed(tmp_path):
    x = np.arange(40, dtype=np.int64).reshape(20, 2) % 7
    np.savez(tmp_path / "pairs.npz", x=x, y=x.sum(1) % 7)
    torch.save({"inputs": torch.randn(30, 3), "targets": torch.randn(30)}, tmp_path / "reg.pt")
    spec = build_spec({"task": {"name": "dataset", "path": str(tmp_path / "pairs.npz"), "train_fraction": 0.5},
                       "model": {"name": "toy", "hidden": [8]}, "seeds": [0, 1],
                       "sweep": {"task.train_fraction": {"values": [0.5, 0.8]}}})
    configs = spec.trials()
    data = configs[0].task.data()
    assert (data.num_classes, data.vocab_size, configs[0].task.symbolic) == (7, 7, True)
    splits = [c.task.split(data, c.seed) for c in configs]
    assert [len(tr) for tr, _ in splits] == [10, 10, 16, 16]
    assert not torch.equal(splits[0][0], splits[1][0])  # each seed its own split
    assert torch.equal(splits[0][0], configs[0].task.split(data, 0)[0])  # and the same again
    reg = build_spec({"task": {"name": "dataset", "path": str(tmp_path / "reg.pt"), "inputs": "inputs",
                               "labels": "targets", "tolerance": 0.2},
                      "model": {"name": "module", "factory": "userpkg.models:make_mlp"}}).first_trial()
    trainer = make_trainer([reg])
    assert trainer.model.head.out_dim == 1 and trainer.model.head.tolerance == 0.2
    trainer.run(until=3)


BAD = [
    ("model", {"name": "module", "factory": "nolab.models:make_net"},
     "model.factory: cannot import module 'nolab.models': ModuleNotFoundError"),
    ("model", {"name": "module", "factory": "userpkg.models:make_net"}, "model.factory: module 'userpkg.models' has no "
     "attribute 'make_net'; it has: "),
    ("model", {"name": "module", "factory": "userpkg.models:broken", "kwargs": {"width": 4}},
     "model.factory: userpkg.models:broken(**{'in_features': 8, 'out_features': 2, 'width': 4}) raised ValueError: "
     "width 4 is not supported"),
    ("model", {"name": "module", "factory": "userpkg.models:with_batchnorm"},
     "model.factory: the module uses BatchNorm1d at '1'"),
    ("model", {"name": "userpkg.models:make_mlp"}, "model.name: 'userpkg.models:make_mlp' is a torch module or a "
     "function, not a grokray family; train it with model: {name: module"),
    ("model", {"name": "module", "factory": "userpkg.models:make_mlp", "kwargs": {"widht": 4}},
     "model.kwargs.widht: unknown key; did you mean 'width'? allowed: depth, dropout, in_features, out_features, "
     "width"),
    ("task", {"name": "dataset", "path": "nolabels.npz"}, "task.labels: "),
    ("task", {"name": "dataset", "path": "missing.npz"}, "task.path: 'missing.npz' does not exist"),
]


@pytest.mark.parametrize("block, value, message", BAD, ids=[m.split(":")[0] + str(i) for i, (_, _, m) in
                                                             enumerate(BAD)])
def test_bad_user_code_is_one_line_naming_the_field_and_nothing_starts(block, value, message, tmp_path, capsys,
                                                                       monkeypatch):
    from grokray.cli import main

    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "nolabels.npz", x=np.zeros((10, 8)))
    monkeypatch.syspath_prepend(str(USERPKG))
    import yaml

    raw = {**MLP, block: value, "name": "bad"}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(raw))
    code = main(["run", str(tmp_path / "bad.yaml"), "--tracking-uri", f"sqlite:///{tmp_path}/m.db",
                 "--storage", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("grokray: error:")]
    assert len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "nolabels.npz"]  # no store, no results


def _damaged_data(path, how: str) -> None:
    good = {"x": np.zeros((10, 8)), "y": np.arange(10) % 2}
    if how == "corrupt npz":
        np.savez(path, **good)
        data = bytearray(path.read_bytes())
        data[10:60] = b"\xff" * 50  # the zip's first local header
        path.write_bytes(bytes(data))
    elif how == "cut npz":
        np.savez(path, **good)
        path.write_bytes(path.read_bytes()[:200])
    elif how == "object array":  # np.savez pickles it; grokray reads with allow_pickle=False
        np.savez(path, x=np.array([{"a": 1}] * 10, dtype=object), y=good["y"])
    else:
        path.write_bytes(b"\x80\x02 garbage, not a torch file" * 20)


@pytest.mark.parametrize("how, name", [("corrupt npz", "d.npz"), ("cut npz", "d.npz"), ("object array", "d.npz"),
                                       ("garbage pt", "d.pt")])
def test_a_dataset_file_that_does_not_load_is_one_line_naming_task_path(how, name, tmp_path, capsys, monkeypatch):
    """Issue 71: a corrupt .npz (zipfile.BadZipFile), an object array (numpy's allow_pickle refusal) or a garbage
    .pt (torch's unpickler) were tracebacks, exit 1."""
    import yaml

    from grokray.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(USERPKG))
    _damaged_data(tmp_path / name, how)
    raw = {**MLP, "task": {"name": "dataset", "path": name, "train_fraction": 0.6}, "name": "damaged"}
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(raw))
    code = main(["run", str(tmp_path / "d.yaml"), "--tracking-uri", f"sqlite:///{tmp_path}/m.db",
                 "--storage", str(tmp_path / "results")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("grokray: error: task.path: '") and f"{name}' does not load as" in lines[0]
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["d.yaml", name])  # no store, no results


def test_a_module_that_casts_to_float32_is_refused_under_float64_naming_train_dtype(tmp_path, capsys, monkeypatch):
    """Issue 70: `train.dtype: float64` with a module that calls `.float()` passed every check and died mid-training
    with "expected scalar type Double but found Float" (exit 1). Now one line naming train.dtype, exit 2, nothing
    written; the same module trains in float32, and a module that follows its parameters' dtype trains in float64."""
    import yaml

    from grokray.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(USERPKG))
    raw = {"name": "onehot", "task": {"name": "modular", "op": "mul", "p": 7, "train_fraction": 0.6},
           "model": {"name": "module", "factory": "userpkg.models:OneHotMLP", "kwargs": {"width": 8}},
           "optim": {"default": {"name": "adamw", "lr": 1e-2}},
           "train": {"steps": 5, "dtype": "float64"}, "phases": {"budget": 5}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(raw))
    code = main(["run", str(tmp_path / "spec.yaml"), "--tracking-uri", f"sqlite:///{tmp_path}/m.db",
                 "--storage", str(tmp_path / "results")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("grokray: error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("grokray: error: train.dtype: got 'float64'") and "allowed: float32" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]
    for ok in ({**raw, "train": {"steps": 5}}, {**MLP, "train": {"steps": 5, "dtype": "float64"}}):
        trainer = PackTrainer([build_spec(ok).first_trial()])
        trainer.run()
        assert trainer.results()[0].steps_run == 5


def test_the_dry_run_prints_the_factory_call_and_names_a_size_it_does_not_fill(tmp_path, capsys, monkeypatch):
    """Issue 70: grokray fills only the task sizes it names (out_features, vocab_size, ...); a factory taking `p`
    silently kept its default. The dry-run prints each call as it will be made and names such a parameter."""
    import yaml

    from grokray.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(USERPKG))
    lines = {}
    for factory in ("OneHotMLP", "EmbedMLP"):
        raw = {"name": "calls", "task": {"name": "modular", "p": 7, "train_fraction": 0.6},
               "model": {"name": "module", "factory": f"userpkg.models:{factory}", "kwargs": {"width": 8}},
               "train": {"steps": 5}, "phases": {"budget": 5}}
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(raw))
        assert main(["run", str(tmp_path / "spec.yaml"), "--dry-run", "--no-calibrate",
                     "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]) == 0
        lines[factory] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("model.factory:")]
    assert lines["OneHotMLP"][0] == "model.factory:  userpkg.models:OneHotMLP(out_features=7, vocab_size=7, width=8)"
    assert len(lines["OneHotMLP"]) == 2 and "one forward over all of them" in lines["OneHotMLP"][1]  # how it measures
    call, unfilled, _ = lines["EmbedMLP"]
    assert call == "model.factory:  userpkg.models:EmbedMLP(out_features=7, width=8)"
    assert "parameter 'p' looks like a task size but is not filled (its default 97 is used)" in unfilled
    assert "grokray fills only num_classes, out_features, seq_len, vocab_size" in unfilled


def test_attention_packs_batched_and_an_op_without_a_batching_rule_is_named_by_the_dry_run(tmp_path, capsys,
                                                                                           monkeypatch):
    """Issue 70: nn.MultiheadAttention (and F.scaled_dot_product_attention) under the pack's vmap ran member by
    member (torch has no batching rule for its fused CPU kernel, and warned at every step). A pack of an ordinary
    attention module trains without that fallback, each member as the module alone (float64); an op that does fall
    back (torch.renorm) is named by the dry-run, found when the module is checked."""
    import warnings

    import yaml

    from grokray.cli import main
    from grokray.models.user_module import build_module

    monkeypatch.syspath_prepend(str(USERPKG))
    raw = {"task": {"name": "modular", "p": 7, "train_fraction": 0.6},
           "model": {"name": "module", "factory": "userpkg.models:MHATransformer"},
           "optim": {"default": {"name": "adamw", "lr": 1e-2}},
           "train": {"steps": 3, "dtype": "float64"}, "phases": {"budget": 3}, "seeds": [0, 1]}
    configs = build_spec(raw).trials()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = PackTrainer(configs)
        trainer.compact = False
        trainer.run(until=1)
    assert not [w for w in caught if "batching rule" in str(w.message)], [str(w.message)[:120] for w in caught]
    data = configs[0].task.data()
    x = data.x[:5]
    with torch.no_grad():
        packed = trainer.model.forward(x.unsqueeze(0).expand(len(configs), *x.shape))
        for k, state in enumerate(trainer.member_states()):  # each member as the module alone computes it
            alone = build_module(configs[k].model, data).double()
            alone.load_state_dict(state)
            assert torch.allclose(packed[k], alone(x), atol=1e-10, rtol=0), k
    monkeypatch.chdir(tmp_path)
    renorm = {"name": "renorm", **raw, "model": {"name": "module", "factory": "userpkg.models:RenormMLP"},
              "train": {"steps": 3}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(renorm))
    assert main(["run", str(tmp_path / "spec.yaml"), "--dry-run", "--no-calibrate",
                 "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]) == 0
    out = capsys.readouterr().out
    assert "`aten::renorm` runs member by member under vmap" in out and "expect no gain from packing" in out
    # how its pack measures: 49 points, full batch, so one forward over all 49 (joint)
    from grokray.models.module import CPU_CHUNK_ROWS, MEMBER_ALONE_ROWS

    assert 49 < MEMBER_ALONE_ROWS
    assert ("model.factory:  49 points, full batch: one forward over all of them each step (joint: at most 256 "
            f"points, where one call costs less than two); on a CPU a chunk of {CPU_CHUNK_ROWS // 49} members' rows "
            "runs at a time") in out
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"name": "mha", **raw}))
    assert main(["run", str(tmp_path / "spec.yaml"), "--dry-run", "--no-calibrate",
                 "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]) == 0
    assert "member by member" not in capsys.readouterr().out


def test_workers_get_the_drivers_code_paths():
    """What crosses to a Tune worker: the directory the user's package was imported from, put on its sys.path
    before it parses its configurations (a worker runs in its trial's folder, not the user's)."""
    from grokray import user_code
    from grokray.tracking.pack_runs import RunTarget
    from grokray.worker.context import TrialContext

    build_spec(MLP)
    assert str(USERPKG) in user_code.code_paths()
    ctx = TrialContext(RunTarget("sqlite:///x.db", "1", "p", "h", "c", (), ()), code_paths=user_code.code_paths())
    assert TrialContext.from_dict(ctx.to_dict()).code_paths == ctx.code_paths


def test_the_module_tables_the_functional_call_swaps_are_still_torchs():
    """The adapter in grokray/models/user_module.py (Functional) writes a member's tensors into Module._parameters and
    _buffers: if torch renames them or stops reading them in the forward, this fails by name."""
    lin, norm = torch.nn.Linear(2, 1), torch.nn.BatchNorm1d(2)
    assert lin._parameters["weight"] is lin.weight and norm._buffers["running_mean"] is norm.running_mean
    saved = lin._parameters["weight"]
    lin._parameters["weight"] = torch.zeros(1, 2)
    assert torch.equal(lin(torch.ones(3, 2)), lin.bias.detach().expand(3, 1))
    lin._parameters["weight"] = saved


@pytest.mark.parametrize("factory, kwargs, rows", [
    ("LiuToy", {"vocab_size": 10, "out_features": 19, "hidden": [8, 8]}, torch.randint(0, 10, (5, 2))),
    ("MHATransformer", {"vocab_size": 7, "seq_len": 2, "out_features": 7}, torch.randint(0, 7, (5, 2))),
    ("make_mlp", {"in_features": 6, "out_features": 2, "width": 8, "dropout": 0.5}, torch.randn(5, 6))])
def test_members_mapped_computes_what_torch_func_vmap_does_bit_for_bit(factory, kwargs, rows):
    """The module family's eager pack maps its members with vmap's own level functions (user_module.members_mapped,
    without vmap's per-call Python); its output and gradients equal torch.func.vmap's exactly, dropout's draws
    too (about 0.1 s)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from grokray.models.user_module import FUSED_ATTENTION, Functional, members_mapped
    from grokray.user_code import import_reference

    torch.manual_seed(0)
    module = import_reference(f"userpkg.models:{factory}", "model.factory")(**kwargs).train()
    xs = torch.stack([rows, rows.flip(0), rows])
    fn = Functional(module)
    results = []
    for mapped in (lambda *a: torch.func.vmap(fn.member_forward, randomness="different")(*a),
                   lambda *a: members_mapped(fn.member_forward, 3, *a)):
        params = {n: (torch.stack([p.detach()] * 3) + torch.arange(3.0).view(3, *[1] * p.dim()) * 0.01
                      ).requires_grad_() for n, p in module.named_parameters()}
        torch.manual_seed(1)
        with sdpa_kernel([SDPBackend.MATH]):  # as the pack runs attention (Functional._on_math_attention)
            out = mapped(params, {}, xs)
        out.square().sum().backward()
        results.append((out.detach(), {n: p.grad for n, p in params.items()}))
    (ref, ref_grads), (ours, grads) = results
    assert ours.shape == ref.shape and torch.equal(ours, ref)
    assert all(torch.equal(grads[n], ref_grads[n]) for n in ref_grads)
    assert not torch.equal(ours[0], ours[2]), "the members differ (their parameters, or dropout's draws)"
    before = [enabled() for enabled, _ in FUSED_ATTENTION]
    assert fn(params, {}, xs).shape == ours.shape  # the pack's call: attention on the math path while it runs
    assert [enabled() for enabled, _ in FUSED_ATTENTION] == before, "the fused backends are back as they were"


@pytest.mark.slow(reason="20-30 s compiling; the module family's captured step runs in test_capture.py")
def test_a_compiled_module_pack_computes_what_the_eager_one_does():
    """train.capture: compiled on the module family (its forward compiled through functional_call under vmap): the
    same parameters as eager after 60 steps, within float tolerance, and no fallback to eager (20-30 s compiling)."""
    configs = {cap: build_spec({**MLP, "seeds": [0, 1, 2], "train": {"steps": 60, "capture": cap}}).trials()
               for cap in ("eager", "compiled")}
    eager = final_params(configs["eager"])
    trainer = PackTrainer(configs["compiled"])
    trainer.compact = False
    trainer.run()
    assert trainer.capture == "compiled" and not trainer.forward.failed
    for ours, ref in zip(trainer.member_states(), eager, strict=True):
        for name in ref:
            torch.testing.assert_close(ours[name], ref[name], rtol=1e-4, atol=1e-5, msg=name)
