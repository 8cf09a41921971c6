"""Every spec in sweeps/: it expands (what `--dry-run` counts) and its smoke preset runs on a real local Ray
with a real MLflow store, one child run with a phase per configuration. A new spec is picked up by existing.
"""

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from grokray.phases import PHASES
from grokray.spec import load_spec
from grokray.sweep.expand import expand

SPECS = sorted((Path(__file__).resolve().parents[1] / "sweeps").glob("*.yaml"))


def test_the_library_covers_the_papers():
    names = {p.stem for p in SPECS}
    for prefix in ("liu_fig6a", "liu_fig6b", "liu_fig6c", "liu_fig6d", "liu_fig7", "liu_fig8", "critical_fraction",
                   "power_", "quadratic_wd", "quadratic_init", "rfm_fraction", "rfm_symmetry", "langevin"):
        assert any(n.startswith(prefix) for n in names), prefix


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_full_scale_spec_expands_with_a_documented_header(path):
    text = path.read_text()
    assert text.startswith("#") and "Expected" in text, "header: source, axes, expected result, cost"
    plan = expand(load_spec(path), slots=2)
    assert plan.n_configs == len(load_spec(path).points()) and plan.model_steps > 0


@pytest.mark.library
@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_smoke_preset_runs_on_ray_with_mlflow(path, local_ray, tmp_path):
    from grokray.sweep.runner import SweepOptions, run_sweep

    spec = load_spec(path, scale="smoke")
    assert len(spec.points()) <= 16, "smoke presets must stay CI-sized"
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    summary = run_sweep(spec, SweepOptions(tracking_uri=uri, storage=str(tmp_path / "results"), min_report_s=0.0,
                                           progress=False))
    assert summary.errored_trials == 0
    children = MlflowClient(uri).search_runs(
        [summary.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{summary.parent_run_id}'", max_results=100
    )
    assert len(children) == len(spec.points())
    assert all(r.data.tags.get("grokray.phase") in PHASES for r in children)
    assert sum(summary.phase_counts.values()) == len(spec.points())
