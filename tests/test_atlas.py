"""`grokray atlas`: the atlas block and its pieces (pure), and end to end on a real local Ray and a real MLflow
store: the page's counts and estimate-vs-measured line, skipping what is complete, resuming what is not."""

import json
import re
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from grokray.atlas.plan import expected_text, plan_figure, title_text
from grokray.errors import SpecError
from grokray.spec.build import load_spec
from grokray.tracking.client import counted_phase_of
from grokray.tracking.mlflow_tracker import record

pytestmark = pytest.mark.launch  # end-to-end launches on a local Ray: make launches (CI), docs/testing.md

ROOT = Path(__file__).resolve().parents[1]
FIG6B = ROOT / "sweeps" / "liu_fig6b_toy_regression.yaml"

# A two-piece figure small enough for the default suite: the quickstart plane at 150 steps, the low-lr column
# with two seeds and the high-lr column with one, Liu's memorization corner as the region to check.
SMALL = {
    "name": "atlas-test",
    "task": {"name": "addition", "p": 10, "train_size": 45},
    "model": {"name": "toy", "embed_dim": 1, "hidden": [32, 32], "activation": "tanh", "head": "regression"},
    "optim": {"embedding": {"name": "adam", "lr": 1e-3}, "decoder": {"name": "adamw", "lr": 1e-3}},
    "train": {"steps": 150},
    "phases": {"threshold": 0.9, "budget": 150, "gap": 50},
    "seeds": [0],
    "sweep": {"optim.decoder.lr": {"logspace": [-3, -1, 3]}, "optim.decoder.weight_decay": {"values": [0, 1]}},
    "resources": {"cpu": 1, "pack_size": 2},
    "smoke": {"train.steps": 50},
    "reduced": {"train.steps": 150},
    "atlas": {
        "axes": ["optim.decoder.lr", "optim.decoder.weight_decay"],
        "pieces": {"reduced": [{"name": "low", "take": {"optim.decoder.lr": [0, 1]}, "set": {"seeds": [1, 2]}},
                               {"name": "high", "take": {"optim.decoder.lr": [1, 3]}}]},
        "regions": [{"phase": "memorization", "optim.decoder.lr": [0.05, None],
                     "optim.decoder.weight_decay": [None, 0]}],
    },
}


def _write(tmp_path, raw, name="small.yaml"):
    path = tmp_path / name
    path.write_text("# Small atlas test figure.\n# Expected: something at every cell.\n" + yaml.safe_dump(raw))
    return path


# -- the atlas block and its pieces (pure) ------------------------------------------------------------------
def test_paper_pieces_cover_the_whole_grid_with_the_specs_own_values():
    fig = plan_figure(FIG6B, "paper")
    full = load_spec(FIG6B)
    lrs = full.axes["optim.decoder.lr"]
    got = {}
    for piece in fig.pieces:
        assert "optim.decoder.lr" in piece.spec.log_axes  # a slice of a logspace is still drawn on a log scale
        assert piece.spec.name == full.name
        for point in piece.spec.points():
            got.setdefault((point["optim.decoder.lr"], point["optim.decoder.weight_decay"]), []).append(point["seed"])
    assert set(got) == {(lr, wd) for lr in lrs for wd in full.axes["optim.decoder.weight_decay"]}  # 121 cells
    assert all(got[(lr, wd)] == [0, 1, 2, 3] for lr, wd in got)  # counted seeds, the same in every cell
    assert sum(len(s) for s in got.values()) == 11 * 11 * 4
    # the presets and the atlas block say how to run, not what runs: the hash ignores them
    assert load_spec(FIG6B, ["smoke.train.steps=7", "atlas.view=fraction"]).hash() == full.hash()
    assert load_spec(FIG6B, ["train.steps=7"]).hash() != full.hash()


def test_atlas_overrides_pin_an_axis_in_every_piece_and_the_commands_quote_them(tmp_path, capsys):
    fig = plan_figure(FIG6B, "paper", ("optim.decoder.weight_decay=5", "train.steps=500"))
    for piece in fig.pieces:  # after the piece's own take: the lr slice stays, the decay is pinned
        assert piece.spec.axes["optim.decoder.weight_decay"] == [5.0]
        assert {t.train.steps for t in piece.spec.trials()} == {500}
        assert piece.overrides[-2:] == ["optim.decoder.weight_decay=5", "train.steps=500"]
        assert "pins the sweep axis optim.decoder.weight_decay" in piece.spec.notes[0]
    assert sum(len(p.spec.points()) for p in fig.pieces) == 11 * 4
    from grokray.cli import main

    args = ["atlas", "--scale", "paper", str(FIG6B), "--pages-only", "-o", str(tmp_path / "pages"),
            "-s", "optim.decoder.weight_decay=5", "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]
    assert main(args) == 2  # no store: refused in one line, before any note (issue 61)
    assert capsys.readouterr().err.startswith("grokray: error: --tracking-uri: no MLflow store")
    from mlflow.tracking import MlflowClient

    MlflowClient(f"sqlite:///{tmp_path}/m.db").search_experiments()  # an empty store: no piece has run
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.count("pins the sweep axis optim.decoder.weight_decay") == 1  # one note, not one per piece
    with pytest.raises(SpecError) as bad:
        plan_figure(FIG6B, "paper", ("optim.decoder.weight_decy=5",))
    assert "weight_decay" in str(bad.value)


@pytest.mark.parametrize("atlas, field", [
    ({"view": "pie"}, "atlas.view"),
    ({"axes": ["optim.decoder.lr"]}, "atlas.axes"),
    ({"colour": "red"}, "atlas.colour"),
    ({"pieces": {"huge": [{"name": "a"}]}}, "atlas.pieces.huge"),
    ({"pieces": {"reduced": [{"name": "a", "take": {"optim.decoder.lr": [2, 1]}}]}}, "atlas.pieces.reduced[0].take"),
    ({"pieces": {"reduced": [{"name": "a", "take": {"optim.decoder.lr": [0, 9]}}]}}, "atlas.pieces.reduced.a.take"),
    ({"pieces": {"reduced": [{"name": "a", "take": {"model.width": [0, 1]}}]}}, "atlas.pieces.reduced.a.take"),
    ({"pieces": {"reduced": [{"name": "a", "set": {"optim.decoder.lr": -1}}]}}, "optim.decoder.lr"),
    ({"regions": [{"phase": "enlightenment"}]}, "atlas.regions[0].phase"),
    ({"regions": [{"phase": "grokking", "task.p": [1, 2]}]}, "atlas.regions"),
])
def test_atlas_block_mistakes_are_named_before_anything_runs(tmp_path, atlas, field):
    raw = {**SMALL, "atlas": {**SMALL["atlas"], "pieces": {}, "regions": [], **atlas}}
    with pytest.raises(SpecError) as err:
        plan_figure(_write(tmp_path, raw), "reduced")
    assert field in str(err.value), str(err.value)


def test_cli_rejects_a_bad_scale_preset_before_ray_or_mlflow(tmp_path, monkeypatch, capsys):
    from grokray.cli import main

    monkeypatch.chdir(tmp_path)
    raw = {k: v for k, v in SMALL.items() if k != "reduced"}
    code = main(["atlas", "--scale", "reduced", str(_write(tmp_path, raw)), "--tracking-uri",
                 f"sqlite:///{tmp_path}/mlflow.db"])
    assert code == 2 and "no reduced: preset" in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists()


# -- end to end ----------------------------------------------------------------------------------------------
def _parents(uri, name):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    return client.search_runs([exp.experiment_id], "tags.`grokray.role` = 'parent'")


def test_atlas_runs_pieces_writes_the_page_then_skips_and_resumes(local_ray, tmp_path):
    from grokray.atlas.build import build_atlas

    spec = _write(tmp_path, SMALL)
    uri, out = f"sqlite:///{tmp_path}/mlflow.db", tmp_path / "atlas"
    lines = []
    from grokray.atlas.dry_run import dry_run_lines

    figure = plan_figure(spec, "reduced")
    before = dry_run_lines([figure], uri)  # `grokray atlas --dry-run`: no store yet, so both pieces would run
    assert [line.split(":")[1].split(",")[0].strip() for line in before[:2]] == ["run 4 configurations"] * 2
    assert before[2].startswith("in all: estimate") and not (tmp_path / "mlflow.db").exists()
    [result] = build_atlas([spec], "reduced", out, uri, str(tmp_path / "results"), progress="never", log=lines.append)
    assert [r.action for r in result.records] == ["ran", "ran"]
    client = MlflowClient(uri)

    # the page's counts are MLflow's: one child per configuration of every piece, phases as tagged
    children = [c for r in result.records for c in client.search_runs(
        [client.get_run(r.parent_run_id).info.experiment_id], f"tags.mlflow.parentRunId = '{r.parent_run_id}'")]
    assert len(children) == 2 * 2 + 2 * 2  # low: 1 lr x 2 wd x 2 seeds; high: 2 lrs x 2 wd x 1 seed
    counts, tagged = {}, {}
    for c in children:
        phase = counted_phase_of(record(c))  # an undecodable split counts apart, as everywhere (issue 39)
        counts[phase] = counts.get(phase, 0) + 1
        tagged[c.data.tags["grokray.phase"]] = tagged.get(c.data.tags["grokray.phase"], 0) + 1
    page = (out / "small-reduced.md").read_text()
    table = dict(re.findall(r"^\| (\w+) \| (\d+) \|$", page.split("## Phase counts")[1], re.M))
    assert {p: int(n) for p, n in table.items()} == counts
    summary = json.loads((out / "small-reduced.json").read_text())
    assert summary["counts"] == counts and summary["configurations"] == 8
    assert (out / "img" / "small-reduced.png").stat().st_size > 1000
    # the runs the page was drawn from, beside it: one row per configuration, its phase as MLflow has it
    import pandas as pd

    runs = pd.read_csv(out / "data" / "small-reduced.csv")
    assert len(runs) == 8 and runs["phase"].value_counts().to_dict() == tagged
    assert {"piece", "optim.decoder.lr", "optim.decoder.weight_decay", "seed", "ideal_val_acc"} <= set(runs.columns)
    assert "[data/small-reduced.csv](data/small-reduced.csv)" in page
    assert "> Expected: something at every cell." in page

    # estimate against measured: the page shows what the parents hold, per piece and in total
    walls, ests = [], []
    for r in result.records:
        m = client.get_run(r.parent_run_id).data.metrics
        walls.append(m["atlas/wall_s"])
        ests.append(m["atlas/estimate_s"])
        assert 0 < m["atlas/estimate_s"] <= m["atlas/estimate_upper_s"]
    assert result.measured_s == pytest.approx(sum(walls)) and result.estimate_s == pytest.approx(sum(ests))

    def minutes(s):
        return f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"

    assert (f"wall time **{minutes(sum(walls))} measured** against **{minutes(sum(ests))} estimated**"
            f" by the dry-run (measured / estimate = {sum(walls) / sum(ests):.2f})") in page
    for name, w, e in zip(("low", "high"), walls, ests, strict=True):
        assert re.search(rf"^\| {name} \| \d+ \| \d+ \| {re.escape(minutes(e))} \| .* \| {re.escape(minutes(w))} \| "
                         rf"{w / e:.2f} \|", page, re.M), page
    assert "## The paper's layout, cell by cell" in page and "| memorization |" in page
    assert summary["regions"]["memorization"][1] == 1  # the one cell with lr >= 0.05 and no decay
    assert "2 cells have more than one voting seed" in page  # the low piece's two seeds
    assert "6 runs in 6 cells" not in page and "4 runs in 4 cells" in page  # seed 0 (high piece) does not vote
    assert (out / "README.md").read_text().count("small-reduced") >= 2

    # the share of members that trained their whole budget, per piece: what the estimate assumed (no history
    # yet: the prior), and what happened; the next estimate of this experiment plans with the 8 runs measured
    from grokray.plan.estimate import LONG_SHARE, BudgetUse, estimate_plan, plan_budget
    from grokray.plan.expand import expand
    from grokray.tracking.history import measured_budget_use

    used = {c.info.run_id: min(c.data.metrics["steps_run"], 150) / 150 for c in children}
    for r in result.records:
        mine = [used[c.info.run_id] for c in children if c.data.tags["mlflow.parentRunId"] == r.parent_run_id]
        measured = f"{sum(u == 1 for u in mine) / len(mine):.0%} / {sum(mine) / len(mine):.0%}"
        assert re.search(rf"^\| {r.name} \|.*\| {LONG_SHARE:.0%} / {LONG_SHARE:.0%} \| {measured} \|", page, re.M)
    plan = expand(load_spec(spec, [], "reduced"))
    planned = estimate_plan(plan, calibrate_costs=False,
                            use=BudgetUse(*measured_budget_use(uri, plan.spec.name, plan_budget(plan))))
    assert planned.use.trained == pytest.approx(sum(used.values()) / 8) and "8 stored runs" in planned.use.basis

    # again: both pieces are complete in MLflow, nothing is run, the page is the same
    n_parents = len(_parents(uri, "atlas-test"))
    [again] = build_atlas([spec], "reduced", out, uri, str(tmp_path / "results"), progress="never", log=lines.append)
    assert [r.action for r in again.records] == ["skipped", "skipped"]
    assert len(_parents(uri, "atlas-test")) == n_parents
    assert (out / "small-reduced.md").read_text() == page

    # a piece left unfinished (as a killed driver leaves it) is resumed, not rerun: same parent, a second segment
    low = result.records[0].parent_run_id
    client.set_terminated(low, "KILLED")
    from grokray.plan.estimate import fmt_minutes

    est = result.records[0].estimate
    assert dry_run_lines([figure], uri)[:2] == [  # the interrupted piece resumes with the estimate it started with
        f"small-reduced low: resume 4 configurations, estimate {fmt_minutes(est[0])} (upper {fmt_minutes(est[1])})",
        "small-reduced high: complete in MLflow: skipped"]
    [partial] = build_atlas([spec], "reduced", out, uri, str(tmp_path / "results"), run=False, log=lines.append)
    assert partial.page is None and partial.error == "pieces not run or not complete: low"
    assert (out / "small-reduced.md").read_text() == page  # --pages-only does not write half a figure
    [third] = build_atlas([spec], "reduced", out, uri, str(tmp_path / "results"), progress="never", log=lines.append)
    assert [r.action for r in third.records] == ["resumed", "skipped"]
    assert third.records[0].parent_run_id == low and len(third.records[0].segments) == 2
    assert client.get_run(low).info.status == "FINISHED"
    assert len(_parents(uri, "atlas-test")) == n_parents
    assert len(client.search_runs([client.get_run(low).info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{low}'")) == 4  # no duplicated child runs

    # a fresh checkout carries the page but not this MLflow store: the page is kept and nothing trains
    fresh = f"sqlite:///{tmp_path}/fresh.db"
    written = json.loads((out / "small-reduced.json").read_text())  # as the resumed run left it
    page = (out / "small-reduced.md").read_text()
    [kept] = build_atlas([spec], "reduced", out, fresh, str(tmp_path / "results2"), progress="never", log=lines.append)
    assert kept.page == out / "small-reduced.md" and not any(r.parent_run_id for r in kept.records)
    assert kept.measured_s == pytest.approx(written["measured_s"]) and "kept" in lines[-1]
    assert (out / "small-reduced.md").read_text() == page
    assert json.loads((out / "small-reduced.json").read_text())["pieces"] == {
        p.name: p.spec.hash() for p in plan_figure(spec, "reduced").pieces}
    assert len(MlflowClient(fresh).search_experiments()) <= 1  # at most MLflow's Default; no runs
    assert not MlflowClient(fresh).search_runs([e.experiment_id for e in MlflowClient(fresh).search_experiments()])

    # the discussion is written later, in that checkout: the kept page takes it in, the rest of the page unchanged
    assert "(no discussion yet" in page
    (out / "notes").mkdir(exist_ok=True)
    (out / "notes" / "small-reduced.md").write_text("**Matches.** the low-lr piece groks.\n")
    build_atlas([spec], "reduced", out, fresh, str(tmp_path / "results2"), progress="never", log=lines.append)
    refreshed = (out / "small-reduced.md").read_text()
    head = page[:page.index("## Against the paper")]
    assert refreshed == head + "## Against the paper\n\n**Matches.** the low-lr piece groks.\n"


def test_a_search_page_counts_trials_and_seeds(local_ray, tmp_path):
    """A search over seeds [1, 2]: two trials are four runs in two packs, and the page says which is which."""
    from grokray.atlas.build import build_atlas

    uri, out = f"sqlite:///{tmp_path}/mlflow.db", tmp_path / "atlas"
    [result] = build_atlas([ROOT / "sweeps" / "degrok_toy.yaml"], "smoke", out, uri, str(tmp_path / "results"),
                           progress="never", log=lambda *_: None,
                           overrides=("seeds=[1, 2]", "search.n_trials=2", "train.steps=200", "phases.budget=200"))
    page = (out / "degrok_toy-smoke.md").read_text()
    assert re.search(r"^\| all \| 4 \| 2 \|", page, re.M)  # configurations (runs), packs (trials)
    assert "## Phase counts (all runs: 2 trials x 2 seeds)" in page
    assert "Trials: 2; each at seeds 1, 2, scored by what a majority of its voting seeds reached." in page
    table = dict(re.findall(r"^\| ([\w ]+) \| (\d+) \|$", page.split("## Phase counts")[1].split("## Search")[0],
                            re.M))
    assert sum(int(n) for n in table.values()) == 4


def test_a_piece_run_by_grokray_run_is_skipped_with_its_own_wall_time(local_ray, tmp_path):
    """Issue 52: a piece already run by `grokray run` was skipped and its page said "0 s measured"."""
    import json

    from grokray.atlas.build import build_atlas
    from grokray.run.grid import run_sweep
    from grokray.run.options import LaunchOptions
    from grokray.spec.build import load_spec

    uri, out = f"sqlite:///{tmp_path}/mlflow.db", tmp_path / "atlas"
    summary = run_sweep(load_spec(ROOT / "sweeps" / "quickstart.yaml", scale="smoke"),
                        LaunchOptions(tracking_uri=uri, storage=str(tmp_path / "results"), progress="never"))
    [result] = build_atlas([ROOT / "sweeps" / "quickstart.yaml"], "smoke", out, uri, str(tmp_path / "results"),
                           progress="never", log=lambda *_: None)
    assert [r.action for r in result.records] == ["skipped"]
    run = MlflowClient(uri).get_run(summary.parent_run_id)
    own = (run.info.end_time - run.info.start_time) / 1e3
    assert result.measured_s == pytest.approx(own) and own > 1
    assert json.loads((out / "quickstart-smoke.json").read_text())["measured_s"] == pytest.approx(own, abs=0.1)


def test_title_is_the_headers_first_sentence_across_wrapped_lines():
    lines = ["Power et al. 2022 (grokking), Fig. 1: steps to generalize for x+y, x-y",
             "mod 97 with a transformer. More", "text here.", "Axes: op x fraction.", "Expected: steep rise."]
    assert title_text(lines) == ("Power et al. 2022 (grokking), Fig. 1: steps to generalize for x+y, x-y mod 97 "
                                 "with a transformer.")
    assert title_text(["Quadratic net: decay x fraction", "Source: Gromov et al. Why do you grok."]) == \
        "Quadratic net: decay x fraction"
    assert expected_text(lines) == "Expected: steep rise."


@pytest.mark.parametrize("spec", sorted((ROOT / "sweeps").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_page_quotes_what_its_paper_shows_not_itself(spec):
    """'What the paper shows' is the header's Expected paragraph: a claim to check, never a pointer back to the
    page it is printed on, and without the scale notes that follow it."""
    lines = [line[1:].strip() for line in spec.read_text().splitlines() if line.startswith("#")]
    text = expected_text(lines)
    assert text.startswith("Expected") and len(text) > 40
    assert f"docs/atlas/{spec.stem}" not in text and "Scales:" not in text


def test_a_killed_segment_keeps_the_wall_time_its_clock_logged(tmp_path):
    """The driver of a piece can be killed (a session ends, a node dies) before its segment's end is logged: the
    clock's heartbeats, on the parent `grokray run` makes after the clock starts, are what the page reads then."""
    import time

    from grokray.atlas.runner import ESTIMATE_METRIC, WALL_METRIC, SegmentClock, segments
    from grokray.tracking.store import Store

    piece = plan_figure(_write(tmp_path, SMALL), "reduced").pieces[0]
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment(piece.spec.name)
    with SegmentClock(uri, piece, (120.0, 240.0), every=0.1) as clock:
        time.sleep(0.3)  # the sweep is still starting Ray: no parent yet
        run = client.create_run(exp, tags={"grokray.role": "parent", "grokray.spec_hash": piece.spec.hash()})
        time.sleep(2.0)
    # killed here: no final log; the heartbeats hold one segment of about the time the clock ran
    store = Store(uri)
    [(start, wall)] = segments(store, run.info.run_id)
    assert start == pytest.approx(clock.start, abs=1e-3) and 1.0 < wall <= time.time() - clock.start
    assert len(client.get_metric_history(run.info.run_id, WALL_METRIC)) > 3  # one point per heartbeat
    assert client.get_run(run.info.run_id).data.metrics[ESTIMATE_METRIC] == 120.0

    # the resumed segment is a second entry, and the first keeps its length
    with SegmentClock(uri, piece, (120.0, 240.0), every=0.1) as second:
        second.log(store, run.info.run_id)
        time.sleep(0.3)
    second.log(store, run.info.run_id)
    assert [s for s, _ in segments(store, run.info.run_id)] == pytest.approx([clock.start, second.start], abs=1e-3)
    assert segments(store, run.info.run_id)[0][1] == wall and 0.3 <= segments(store, run.info.run_id)[1][1] < wall


def test_pages_only_on_a_fresh_store_leaves_a_methods_page_whose_members_were_kept(tmp_path):
    """Found by the README test: `atlas --scale reduced --pages-only` in a fresh clone kept each method's page (their
    runs are not in this store) but redrew the side-by-side methods page from the empty store: its table lost every
    trial and its curves were blank. A methods page whose members were kept is left as it is."""
    from grokray.atlas.build import FigureResult, write_compare_pages
    from grokray.atlas.runner import PieceRecord

    root = Path(__file__).resolve().parents[1]
    members = [plan_figure(root / "sweeps" / f"grokfast_{m}.yaml", "reduced") for m in ("ma", "ema")]
    results = [FigureResult(f, [PieceRecord(p.name, "", "missing") for p in f.pieces], [],
                            tmp_path / f"{f.stem}.md") for f in members]
    lines = []
    write_compare_pages(results, tmp_path, f"sqlite:///{tmp_path}/fresh.db", lines.append)
    assert lines == ["[atlas] grokfast-methods: left as it is, grokfast_ma-reduced, grokfast_ema-reduced kept from "
                     "the committed pages (this store holds none of their runs)"]
    assert not list(tmp_path.glob("grokfast-methods*")) and not (tmp_path / "img").exists()


def test_a_figure_at_threshold_095_keeps_its_crossing_steps_in_its_data_file(tmp_path):
    """Issue 62: the data file's columns were written out at 0.9, so a spec with `phases.threshold: 0.95` (the
    Grokfast specs) lost its crossing steps there, and the page redrawn from it lost its steps. The columns follow
    the figure's threshold (phases.summary_metric), and the runs read back carry their steps."""
    from analysis.load import runs_to_frame
    from grokray.atlas.data import read_run_table, write_run_table
    from grokray.tracking.records import RunRecord
    from grokray.tracking.schema import PHASE_TAG, SWEPT_TAG

    spec = _write(tmp_path, {**SMALL, "phases": {"threshold": 0.95, "budget": 150, "gap": 50}})
    figure = plan_figure(spec, "reduced")
    piece = figure.pieces[0]
    runs = [RunRecord(f"r{i}", "", "", "FINISHED", None, None,
                      {"phases.threshold": "0.95", **{k: str(v) for k, v in piece.spec.point(i).items()}},
                      {PHASE_TAG: "grokking", SWEPT_TAG: json.dumps(sorted(piece.spec.axes))},
                      {"step_train_acc_0.95": 12.0 + i, "step_val_acc_0.95": 120.0 + i, "grokking_gap": 108.0})
            for i in range(2)]
    df = runs_to_frame(runs)
    assert list(df["step_val"]) == [120.0, 121.0]  # the run's own threshold's crossing, read by analysis
    df["piece"] = piece.name
    write_run_table(df, tmp_path / "data.csv", 0.95)
    header = (tmp_path / "data.csv").read_text().splitlines()[0].split(",")
    assert "step_train_acc_0.95" in header and "step_val_acc_0.95" in header and "step_val_acc_0.9" not in header
    back = read_run_table(tmp_path / "data.csv", figure)
    assert sorted(back["step_val"]) == [120.0, 121.0] and sorted(back["step_train"]) == [12.0, 13.0]
