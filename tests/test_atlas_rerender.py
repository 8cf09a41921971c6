"""The committed atlas pages redraw byte-identical from their data files (issue 40): `grokray atlas --from-data`
reads each page's data/<stem>.csv back as runs, through the same analysis as runs read from MLflow, with no store
and no run. A change in the analysis that would change a committed page fails here, naming the page."""

import difflib
import shutil
from pathlib import Path

import pytest

from grokray.atlas.data import read_run_table
from grokray.atlas.plan import plan_figure
from grokray.atlas.rerender import kept_sections, rerender_atlas

ROOT = Path(__file__).resolve().parents[1]
ATLAS = ROOT / "docs" / "atlas"


def test_a_data_file_reads_back_as_the_runs_the_page_counts():
    figure = plan_figure(ROOT / "sweeps" / "quickstart.yaml", "reduced")
    df = read_run_table(ATLAS / "data" / "quickstart-reduced.csv", figure)
    assert len(df) == 80 and df.attrs["swept"] == ["optim.decoder.lr", "optim.decoder.weight_decay", "seed"]
    assert df["optim.decoder.lr"].dtype == float and df["seed"].dtype == "int64"
    assert df["task.p"].eq(10).all() and df["phases.threshold"].eq(0.9).all()  # the spec's fixed fields
    assert df["phase"].value_counts().to_dict() == {"memorization": 37, "confusion": 25, "comprehension": 13,
                                                    "grokking": 5}


def test_a_page_keeps_what_its_data_file_does_not_hold():
    text = (ATLAS / "grokfast_variant_adamw-reduced.md").read_text()
    kept = kept_sections(text)
    assert kept["## Runs and wall time"][0].startswith("48 configurations in 1 piece(s)")
    assert any(line.startswith("Objective: `") for line in kept["## Search"])
    assert not any(line.startswith("## ") for lines in kept.values() for line in lines)


@pytest.mark.library
def test_every_committed_page_redraws_byte_identical_from_its_data(tmp_path, monkeypatch):
    shutil.copytree(ATLAS, tmp_path / "docs" / "atlas")
    shutil.copytree(ROOT / "sweeps", tmp_path / "sweeps")
    monkeypatch.chdir(tmp_path)  # the pages name their spec and notes by relative paths
    specs = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "sweeps").glob("*.yaml"))
    pages = [p for scale in ("reduced", "paper") for p in rerender_atlas(specs, scale, "docs/atlas", log=lambda _: 0)]
    committed = {p.name for p in ATLAS.glob("*.md")} - {"README.md"}
    methods = {name for name in committed if "-methods-" in name}  # their curves are not data
    assert {p.name for p in pages} == committed - methods and len(pages) >= 30
    changed = []
    for name in [*(p.name for p in pages), *(p.with_suffix(".json").name for p in pages), "README.md"]:
        before, after = (ATLAS / name).read_text(), (tmp_path / "docs" / "atlas" / name).read_text()
        if before != after:
            changed.append("".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), name, name)))
    assert not changed, "\n".join(changed)[:4000]
    # issue 61: the figures too (13 had gone stale: drawn before the diagram's k/n labels got their white box),
    # byte for byte where this matplotlib is the one that drew them (Agg is deterministic within a version)
    import matplotlib
    from PIL import Image

    drawn = sorted((tmp_path / "docs" / "atlas" / "img").glob("*.png"))
    ours = [p for p in drawn if Image.open(ATLAS / "img" / p.name).info.get("Software", "").startswith(
        f"Matplotlib version{matplotlib.__version__},")]
    assert len(drawn) >= 40
    stale = [p.name for p in ours if p.read_bytes() != (ATLAS / "img" / p.name).read_bytes()]
    assert not stale, f"committed figures that redraw differently from their data: {stale}"


def test_a_differences_sentence_names_the_seeds_of_its_pages_own_scale():
    """Issue 73: the Prieto page said 'the majority phase of seeds 0-2' at the reduced scale, whose data hold seeds
    0-1: a sentence of atlas.differences says `{seeds}` and each scale's page fills in its own."""
    from grokray.atlas.page import differences_section, seeds_text

    assert [seeds_text(s) for s in ([0, 1, 2], [1, 0], [0], [0, 3, 7])] == [
        "seeds 0-2", "seeds 0-1", "seed 0", "seeds 0, 3, 7"]
    lines = differences_section(["each cell is the majority phase of {seeds}", "a fixed sentence"], [0, 1])
    assert lines[2:4] == ["- each cell is the majority phase of seeds 0-1", "- a fixed sentence"]
    page = (ATLAS / "prieto_fig1_mlp-reduced.md").read_text()
    assert "majority phase of seeds 0-1," in page and "seeds 0-2" not in page


def test_the_scale_line_compares_field_by_field_swept_values_and_seeds():
    """Issue 73: the line compared the first trial only, so a swept axis's first value read as a difference
    ('train_fraction 0.3 (paper: 0.2)') and a narrower range, one kernel of three or fewer seeds went unsaid."""
    from grokray.atlas.plan import plan_figure
    from grokray.atlas.scale_note import scale_line

    def line(stem):
        return scale_line(plan_figure(ROOT / "sweeps" / f"{stem}.yaml", "reduced"))

    rfm = line("rfm_fraction")
    assert "model.kernel [gaussian] (paper: [gaussian, quadratic, laplace])" in rfm
    assert "task.train_fraction 0.3 to 0.7, 5 values (paper: 0.3 to 0.6, 4 values)" in rfm
    assert line("rfm_symmetry").endswith("seeds 0-2 (paper: 0-4).")
    ops = line("power_transformer_ops")
    assert "task.train_fraction 0.3 to 0.8, 6 values (paper: 0.2 to 0.9, 8 values)" in ops
    assert "optim.decoder.lr 3e-3 (paper: 1e-3)" in ops  # an unswept field: its value
    assert line("quickstart") is None  # the quickstart's reduced preset is its spec as written
    assert scale_line(plan_figure(ROOT / "sweeps" / "rfm_fraction.yaml", "paper")) is None
    # issue 73: the variant's paper-scale pages ran capped at 2,000 steps and opened with no word of it
    capped = plan_figure(ROOT / "sweeps" / "grokfast_variant_ma.yaml", "paper",
                         ("train.steps=2000", "phases.budget=2000"))
    assert scale_line(capped) == ("Run at the paper scale with overrides, so the setup differs from the spec's: "
                                  "train.steps 2,000 (the spec: 100,000), phases.budget 2,000 (the spec: 100,000).")


def test_a_search_page_says_which_trials_asha_stopped_apart_from_those_that_failed():
    """Issue 73: trials ASHA stopped before they were classified were called 'not within 2,000 steps' and 'do not
    generalize' beside trials that trained the budget; the variant ⊥AdamW search has 14 stopped and 2 memorized."""
    import pandas as pd

    from grokray.atlas.search_outcomes import outcomes_line, trial_outcomes

    params = ["optim.default.lr", "optim.default.weight_decay"]
    runs = pd.read_csv(ATLAS / "data" / "grokfast_variant_orthogonal-reduced.csv")
    assert trial_outcomes(runs, params) == {"stopped before classified": 14, "generalized": 0,
                                            "did not generalize": 2}
    line = ("Of its 16 trials, 14 were stopped by ASHA before any of their runs was classified (the search scores "
            "them as not within 2,000 steps: the scheduler's call, not runs that trained the budget and failed), "
            "0 generalized (a majority of their classified runs comprehended or grokked) and 2 did not.")
    assert outcomes_line(runs, params, 2000) == line
    ema = pd.read_csv(ATLAS / "data" / "grokfast_ema-reduced.csv")  # two trials' rows lost their parameters
    ema_params = ["optim.default.lr", "optim.default.weight_decay", "optim.default.filter_alpha",
                  "optim.default.filter_lambda"]
    assert sum(trial_outcomes(ema, ema_params).values()) == 16  # counted apart, as the page's 16 trials
    said = outcomes_line(ema, ema_params, 2000)
    assert said.startswith("Of its 16 trials, ") and said in (ATLAS / "grokfast_ema-reduced.md").read_text()
    planted = pd.DataFrame({"optim.default.lr": [1, 1, 2, 2, 3, 3], "optim.default.weight_decay": [0] * 6,
                            "phase": ["grokking", "comprehension", "memorization", None, None, None]})
    assert trial_outcomes(planted, params) == {"stopped before classified": 1, "generalized": 1,
                                               "did not generalize": 1}
    assert outcomes_line(planted.iloc[:2], params, 100) == (
        "Of its 1 trial, 1 generalized (a majority of their classified runs comprehended or grokked) and 0 did not.")
