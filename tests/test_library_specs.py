"""Every spec in sweeps/: it expands (what `--dry-run` counts) and its smoke preset runs on a real local Ray
with a real MLflow store, one child run with a phase per configuration. A new spec is picked up by existing.
"""

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from grokray.atlas.plan import plan_figure
from grokray.phases import PHASES
from grokray.plan.expand import expand
from grokray.spec.build import load_spec
from grokray.tracking.schema import PHASE_TAG, SEARCH_PRUNED_TAG

SPECS = sorted((Path(__file__).resolve().parents[1] / "sweeps").glob("*.yaml"))
# The atlas's smoke run: every spec but grokray's variants of the Grokfast benchmark, whose searches are the
# published specs' searches on the default transformer (trained at smoke scale by liu_fig7, power_transformer_ops
# and degrok_transformer): seven more searches would add about two minutes to CI and test no new path.
SMOKE_RUN = [p for p in SPECS if not p.stem.startswith("grokfast_variant_")]


def test_the_library_covers_the_papers():
    names = {p.stem for p in SPECS}
    for prefix in ("liu_fig6a", "liu_fig6b", "liu_fig6c", "liu_fig6d", "liu_fig7", "liu_fig8", "critical_fraction",
                   "power_", "quadratic_wd", "quadratic_init", "rfm_fraction", "rfm_symmetry", "langevin",
                   "grokfast_ma", "prieto_fig1"):
        assert any(n.startswith(prefix) for n in names), prefix


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_full_scale_spec_expands_with_a_documented_header(path):
    text = path.read_text()
    assert text.startswith("#") and "Expected" in text, "header: source, axes, expected result, cost"
    plan = expand(load_spec(path), slots=2)
    assert plan.n_configs == len(load_spec(path).points()) and plan.model_steps > 0
    assert len(load_spec(path, scale="smoke").points()) <= 16, "smoke presets must stay CI-sized"
    for scale in ("smoke", "reduced", "paper"):
        plan_figure(path, scale)  # every spec has both presets, and its atlas block and pieces are valid


@pytest.mark.library
def test_atlas_smoke_runs_every_figure_and_writes_its_page(one_slot_ray, tmp_path):
    """`grokray atlas --scale smoke` over the whole library, as CI runs it: one page per figure whose phase counts
    are the children's in MLflow, a child per configuration, and an estimate beside the measured wall. On one slot:
    26 figures at two started 52 trial processes, most of this test's cost (243 against 356 CPU-s alone), and none
    of its checks is about two packs at once (tests/test_run.py's smoke sweep is)."""
    import json

    from grokray.atlas.build import build_atlas
    from grokray.tracking.client import counted_phase_of
    from grokray.tracking.mlflow_tracker import record

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    results = build_atlas(SMOKE_RUN, "smoke", tmp_path / "atlas", uri, str(tmp_path / "results"), progress="never")
    assert [r.error for r in results] == [""] * len(SMOKE_RUN)
    client = MlflowClient(uri)
    for r in results:
        spec = r.figure.pieces[0].spec
        children = [c for rec in r.records for c in client.search_runs(
            [client.get_run(rec.parent_run_id).info.experiment_id], f"tags.mlflow.parentRunId = '{rec.parent_run_id}'",
            max_results=100)]
        expected = (int(spec.raw["search"]["n_trials"]) * len(spec.seeds) if r.figure.pieces[0].search
                    else len(spec.points()))  # a search trial is a pack of its seeds
        assert len(children) == expected, r.figure.stem
        # a search's ASHA may stop a trial before its runs are classified (when depends on which trial reports
        # first): those runs end KILLED, tagged pruned, without a phase; every other run has one
        pruned = [c for c in children if c.data.tags.get(SEARCH_PRUNED_TAG) == "true"]
        assert not pruned or r.figure.pieces[0].search, r.figure.stem
        assert all(c.info.status == "KILLED" and PHASE_TAG not in c.data.tags for c in pruned), r.figure.stem
        classified = [c for c in children if c not in pruned]
        assert classified and all(c.data.tags.get(PHASE_TAG) in PHASES for c in classified), r.figure.stem
        counts = {}
        for c in classified:  # as counted: an undecodable split apart (issue 39)
            phase = counted_phase_of(record(c))
            counts[phase] = counts.get(phase, 0) + 1
        summary = json.loads((tmp_path / "atlas" / f"{r.figure.stem}.json").read_text())
        assert summary["counts"] == counts and summary["configurations"] == len(children)
        assert r.estimate_s > 0 and r.measured_s > 0
        assert (tmp_path / "atlas" / "img" / f"{r.figure.stem}.png").exists() or r.figure.pieces[0].search
    compared = [r for r in results if r.figure.config.compare is not None]
    pages = {r.figure.config.compare.page for r in compared}
    # one page per figure, one per compare page, and the index
    assert len(list((tmp_path / "atlas").glob("*.md"))) == len(SMOKE_RUN) + len(pages) + 1
    for page in pages:  # atlas.compare: one row per method, trial 0 its enqueued (published) setting
        members = [r for r in compared if r.figure.config.compare.page == page]
        methods = json.loads((tmp_path / "atlas" / f"{page}-smoke.json").read_text())["methods"]
        assert [m["label"] for m in methods] == [r.figure.config.compare.label for r in members]
        assert all(m["trials"] == int(r.figure.pieces[0].spec.raw["search"]["n_trials"])
                   for m, r in zip(methods, members, strict=True))
        assert (tmp_path / "atlas" / "img" / f"{page}-smoke-curves.png").exists()
    # every page redraws byte-identical from its data file and JSON alone (grokray atlas --from-data), the
    # MLflow store gone: what ran and a search's report come from the JSON, the rest from the runs in the CSV
    from grokray.atlas.rerender import rerender_atlas

    written = {p.name: p.read_text() for p in (tmp_path / "atlas").glob("*-smoke.*") if p.suffix in (".md", ".json")}
    (tmp_path / "mlflow.db").rename(tmp_path / "moved-away.db")
    pages = rerender_atlas(SMOKE_RUN, "smoke", tmp_path / "atlas", log=lambda _: None)
    assert len(pages) == len(SMOKE_RUN)
    for page in pages:
        for path in (page, page.with_suffix(".json")):
            assert path.read_text() == written[path.name], path.name
