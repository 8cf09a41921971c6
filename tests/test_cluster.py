"""cluster.yaml against Ray's own schema, and a sweep spread over a real two-node Ray cluster."""

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.launch  # end-to-end launches on a local Ray: make launches (CI), docs/testing.md

ROOT = Path(__file__).resolve().parents[1]


def test_cluster_yaml_validates_against_ray_schema():
    from ray.autoscaler._private.util import validate_config

    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    validate_config(config)  # jsonschema against ray/autoscaler/ray-schema.json, plus Ray's own checks
    head = config["available_node_types"][config["head_node_type"]]
    assert head["resources"] == {"CPU": 0}
    assert any("gpu" in name for name in config["available_node_types"])
    text = " ".join(config["head_start_ray_commands"])
    assert "mlflow server --host $HEAD_IP" in text and "0.0.0.0" not in yaml.safe_dump(config)
    assert "RAY_AUTH_MODE=token" in text and "RAY_AUTH_MODE=token" in " ".join(config["worker_start_ray_commands"])
    assert "~/.ray/auth_token" in config["file_mounts"]
    assert any("pip install" in c and "grokray[cluster]" in c for c in config["setup_commands"])  # every node
    assert "RAY_JOB_STOP_WAIT_TIME_S=60" in text  # `ray job stop` gives the driver time to stop as Ctrl-C does


@pytest.fixture(scope="module")
def two_nodes():
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_trials_run_on_both_nodes(two_nodes, tmp_path):
    import ray

    from grokray.run.grid import run_sweep
    from grokray.run.options import LaunchOptions
    from grokray.spec.build import load_spec

    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(nodes) == 2
    spec = load_spec(ROOT / "sweeps" / "quickstart.yaml", ["resources.pack_size=3"], scale="smoke")
    summary = run_sweep(spec, LaunchOptions(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
                                           storage=str(tmp_path / "results"), progress="never", min_report_s=0.0,
                                           checkpoint_every=100))
    assert summary.errored_trials == 0 and summary.packs >= 2
    used = {m["node_id"] for m in summary.trial_metrics}
    assert used == nodes, (used, nodes)
    assert sum(summary.phase_counts.values()) == len(spec.points())
