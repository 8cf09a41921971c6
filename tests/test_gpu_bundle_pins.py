"""The GPU bundle pins Ray, MLflow and Optuna to the versions the tests ran against, also when it is built with a
bare python3 that has none of them installed (the documented command): the project's .venv says the versions.
Unpinned, the bundle's MLflow client came a version ahead of the tested MLflow (3.18.0 beside 3.17.2). The bundle
itself is tests/test_gpu_bundle.py's (slow). About 2 s."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_bundle  # noqa: E402


def test_a_pin_comes_from_the_projects_venv_when_this_interpreter_lacks_the_package(tmp_path, monkeypatch):
    site = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages"
    (site / "tested_pkg-3.17.2.dist-info").mkdir(parents=True)
    (site / "tested_pkg-3.17.2.dist-info" / "METADATA").write_text("Name: tested_pkg\nVersion: 3.17.2\n")
    monkeypatch.setattr(gpu_bundle, "ROOT", tmp_path)
    assert gpu_bundle.tested_version("tested-pkg") == "3.17.2"
    with pytest.raises(SystemExit, match="no installed absent-pkg to pin"):
        gpu_bundle.tested_version("absent-pkg")
    assert gpu_bundle.tested_version("pyyaml") == __import__("importlib.metadata").metadata.version("pyyaml")
