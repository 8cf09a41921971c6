"""The GPU device bundle is complete (issue 36). `benchmarks/gpu_bundle.py` is built here for this interpreter,
installed with `pip install --no-index --no-deps` into an empty target, and grokray runs a sweep and a search from
there with nothing else importable: an interpreter without site-packages, the bundle, the source tree, and a
stand-in for the device image holding only the packages the image lists (taken from this environment: torch and
what grokray's closure finds in the image). A missing dependency fails the test naming the module.

Marker `slow` since issue 69 (`make test-slow`; it ran in CI's `make library` before): it fetches ~55 MiB of
wheels from the registry (pip's cache makes a second run quick) and trains two smoke launches, ~3 min on 2 cores."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from collections import defaultdict
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "benchmarks" / "gpu_bundle.py"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

pytestmark = pytest.mark.slow(reason="the GPU session's bundle, about 2 min and 55 MiB of wheels: run it before a "
                                     "device call (benchmarks/gpu_session.sh) or when benchmarks/gpu_bundle.py changes")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _owners() -> dict[str, set[str]]:
    """Top-level entry of site-packages -> the distributions that install something under it."""
    owners: dict[str, set[str]] = defaultdict(set)
    for dist in metadata.distributions():
        for f in dist.files or []:
            if f.parts and f.parts[0] != "..":
                owners[f.parts[0]].add(_norm(dist.metadata["Name"]))
    return owners


def _with_requirements(names: set[str]) -> set[str]:
    """`names` and what they require here, transitively (markers evaluated for this interpreter)."""
    from packaging.requirements import Requirement

    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(_norm(req.name))
    return seen


def build_image_stand_in(names: set[str], dest: Path) -> list[str]:
    """Link the files of these distributions from this environment into `dest`: a whole top-level folder when only
    they own it, file by file where other distributions share it (a namespace such as `google`), so nothing that
    the device image lacks becomes importable. Returns the distributions linked."""
    owners = _owners()
    linked = []
    for name in sorted(names):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        linked.append(name)
        site = Path(dist.locate_file(""))
        for f in dist.files or []:
            if not f.parts or f.parts[0] == "..":
                continue
            top = f.parts[0]
            shared = owners[top] - names
            src, dst = (site / top, dest / top) if not shared else (site / f, dest / f)
            if dst.exists() or dst.is_symlink() or not src.exists():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(src)
    return linked


def _missing_module(output: str) -> str | None:
    m = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", output)
    return m.group(1) if m else None


@pytest.fixture(scope="module")
def offline_site(tmp_path_factory):
    """(python, env): an interpreter that sees only the installed bundle, the image stand-in and the source tree."""
    tmp = tmp_path_factory.mktemp("offline")
    wheels = tmp / "wheels"
    built = subprocess.run([sys.executable, str(BUNDLE), "--python", PYTHON, "--dest", str(wheels)],
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    size = float(re.search(r"(\d+\.\d) MiB in", built.stdout).group(1))
    assert 0 < size <= 60
    manifest = json.loads((wheels / "bundle.json").read_text())
    assert manifest["python"] == PYTHON and "ray" in manifest["bundled"] and "optuna" in manifest["bundled"]
    with zipfile.ZipFile(next(wheels.glob("ray-*.whl"))) as ray_wheel:  # stripped, and its RECORD says so
        names = ray_wheel.namelist()
        record = ray_wheel.read(next(n for n in names if n.endswith(".dist-info/RECORD") and n.count("/") == 1))
    record = record.decode()
    assert not any(n.startswith("ray/jars/") for n in names) and "ray/jars/" not in record
    assert len(record.strip().splitlines()) == len([n for n in names if not n.endswith("/")])

    site = tmp / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                                "--no-compile", "--target", str(site), *map(str, sorted(wheels.glob("*.whl")))],
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-3000:]
    image = tmp / "image"
    image.mkdir()
    # What the closure takes from the image, with what those need in the versions installed here, but only what
    # the image lists: a dependency outside both the image and the bundle must fail the runs below.
    image_list = {_norm(line.split("#")[0].strip())
                  for line in (ROOT / "benchmarks" / "device_image.txt").read_text().splitlines()
                  if line.split("#")[0].strip()}
    wanted = {n for n, _ in manifest["from_image"]} | set(manifest["provided_by_image"])
    build_image_stand_in(_with_requirements(wanted) & image_list, image)

    bare = tmp / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    python = str(bare / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "MLFLOW", "RAY_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(site), str(image), str(ROOT)]), PYTHONNOUSERSITE="1",
               PATH=f"{bare / 'bin'}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1")
    probe = subprocess.run([python, "-c", "import sys, torch, ray, mlflow, optuna; print(sys.path)"],
                           capture_output=True, text=True, env=env, timeout=300)
    assert probe.returncode == 0, f"missing: {_missing_module(probe.stderr)}\n{probe.stderr[-2000:]}"
    assert str(Path(sys.prefix)) not in probe.stdout, "this environment's site-packages leaked into the bare one"
    return python, env, tmp


def _grokray(offline_site, *args: str, timeout: int) -> subprocess.CompletedProcess:
    python, env, tmp = offline_site
    uri = f"sqlite:///{tmp}/mlflow.db"
    proc = subprocess.run([python, "-m", "grokray", *args, "--tracking-uri", uri, "--storage", str(tmp / "results"),
                           "--progress", "never"], capture_output=True, text=True, env=env, cwd=tmp,
                          timeout=timeout)
    out = proc.stdout + proc.stderr
    missing = _missing_module(out)
    assert missing is None, f"the GPU bundle lacks the module {missing!r}:\n{out[-3000:]}"
    assert proc.returncode == 0, out[-4000:]
    return proc


def _children(tmp: Path, experiment: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp}/mlflow.db")
    exp = client.get_experiment_by_name(experiment)
    return [r for r in client.search_runs([exp.experiment_id], max_results=1000)
            if r.data.tags.get("grokray.role") != "parent"]


def test_the_bundle_runs_a_sweep_with_nothing_else_installed(offline_site):
    from grokray.phases import PHASES
    from grokray.spec.build import load_spec

    _grokray(offline_site, "run", str(ROOT / "sweeps" / "quickstart.yaml"), "--scale", "smoke", timeout=900)
    expected = len(load_spec(ROOT / "sweeps" / "quickstart.yaml", scale="smoke").points())
    children = _children(offline_site[2], "quickstart")
    assert len(children) == expected > 0
    assert all(c.info.status == "FINISHED" and c.data.tags["grokray.phase"] in PHASES for c in children)


def test_the_bundle_runs_a_search_with_nothing_else_installed(offline_site):
    from grokray.spec.build import load_spec

    proc = _grokray(offline_site, "search", str(ROOT / "sweeps" / "degrok_toy.yaml"), "--scale", "smoke",
                    timeout=900)
    spec = load_spec(ROOT / "sweeps" / "degrok_toy.yaml", scale="smoke")
    children = _children(offline_site[2], spec.name)
    assert len(children) == int(spec.raw["search"]["n_trials"]) * len(spec.seeds)
    assert all(c.data.tags.get("grokray.search.trial") for c in children)
    assert "optuna.journal" in proc.stdout + proc.stderr  # the study's journal path is printed
