"""The wheels a GPU device call carries so that grokray runs there as a user runs it, through Ray, MLflow and Optuna.

    python3 benchmarks/gpu_bundle.py --python 3.12            # -> .whl/ (git-ignored), for the device image
    python3 benchmarks/gpu_bundle.py --python 3.11 --dest D   # the same for this machine (the offline test)

The device image has torch, numpy, pandas, scipy, matplotlib and ~190 other packages (benchmarks/device_image.txt)
but no Ray, MLflow or Optuna, and a call carries at most 64 MiB, the working tree included. So the bundle is what
grokray's dependency closure needs beyond that image, resolved from the registry for the target Python and
manylinux, each wheel pinned to the version installed here (the versions the tests ran against):
- MLflow comes as `mlflow-skinny` (the tracking client and its SQLAlchemy store, without the server's web UI and
  its Flask/gunicorn/graphene stack) plus SQLAlchemy and alembic, which a `sqlite:///` store needs;
- Ray's wheel loses what no grokray path loads: its Java jar (32 MB), the dashboard's web client (a private local
  Ray starts without the dashboard) and the libraries Tune never imports (RLlib, Serve, LLM). Its RECORD is
  rewritten to match, so `pip install` takes it as it takes any wheel.

It writes `bundle.json` beside the wheels (each bundled wheel and each dependency left to the image, with versions),
prints the bundle's size and exits 1 above --limit-mib (default 60), so the tree and the bundle stay under a call's
64 MiB. On the device: `pip install --no-index --no-deps --target /tmp/site .whl/*.whl` and PYTHONPATH=/tmp/site
(benchmarks/gpu_session.sh does it).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # a bare interpreter: pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
IMAGE_LIST = ROOT / "benchmarks" / "device_image.txt"
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64", "any"]
# Not resolved: the image's torch (a CUDA build) is what the packs train with; resolving it would pull CUDA wheels.
PROVIDED_BY_IMAGE = {"torch"}
# The full `mlflow` wheel is the skinny client plus the server's UI and its web stack: 12 MB and ~15 dependencies
# that a trial logging to SQLite never imports. These take its place.
MLFLOW_SWAP = ["mlflow-skinny", "sqlalchemy", "alembic"]
# Ray's wheel, less what no grokray path loads (prefixes inside the wheel).
RAY_STRIP = ("ray/jars/", "ray/dashboard/client/build/", "ray/rllib/", "ray/serve/", "ray/llm/")
PINNED = ("ray", "mlflow-skinny", "mlflow", "optuna")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages(path: Path = IMAGE_LIST) -> set[str]:
    return {norm(line.split("#")[0].strip()) for line in path.read_text().splitlines() if line.split("#")[0].strip()}


def requirements() -> list[str]:
    """grokray's runtime dependencies from pyproject.toml, MLflow swapped for its skinny client, Ray, MLflow and
    Optuna pinned to the versions installed here."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = []
    for dep in deps:
        name = norm(re.match(r"[A-Za-z0-9_.-]+", dep).group(0))
        if name in PROVIDED_BY_IMAGE:
            continue
        out.extend(MLFLOW_SWAP if name == "mlflow" else [dep.split(";")[0].strip()])
    pinned = []
    for req in out:
        name = norm(re.match(r"[A-Za-z0-9_.-]+", req).group(0))
        extras = re.search(r"\[[^]]*\]", req)
        source = "mlflow" if name == "mlflow-skinny" else name
        version = tested_version(source) if name in PINNED else None
        pinned.append(f"{name}{extras.group(0) if extras else ''}=={version}" if version else req)
    return pinned


def tested_version(name: str) -> str:
    """The version of `name` the tests run against: this interpreter's, else the project's .venv's (the bundle is
    built with a bare python3, which has none of them: unpinned, MLflow's skinny client came a version ahead of the
    tested MLflow, and the CPU check warned of the mismatch). Neither: exit, naming the step that installs it."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        pass
    for site in sorted((ROOT / ".venv" / "lib").glob("python*/site-packages")):
        found = [d.version for d in metadata.distributions(path=[str(site)]) if norm(d.metadata["Name"]) == name]
        if found:
            return found[0]
    sys.exit(f"gpu_bundle: no installed {name} to pin the bundle to (neither this interpreter's nor .venv's); "
             "run `make .venv/.installed` first")


def target_flags(python: str) -> list[str]:
    tag = python.replace(".", "")
    flags = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp", "--abi", f"cp{tag}"]
    for p in PLATFORMS:
        flags += ["--platform", p]
    return flags


def pip(*args: str) -> subprocess.CompletedProcess:
    """pip of this interpreter; its own configuration (index, find-links) stands."""
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if proc.returncode:
        noise = re.compile(r"^WARNING: Location .* is ignored")
        err = "\n".join(line for line in proc.stderr.splitlines() if not noise.match(line))
        sys.exit(f"gpu_bundle: pip {args[0]} failed:\n{err[-3000:]}")
    return proc


def resolve(reqs: list[str], python: str) -> dict[str, str]:
    """The dependency closure for the target Python and manylinux, from the registry's metadata alone."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
            "--target", str(Path(tmp) / "t"), *target_flags(python), *reqs)
        installs = json.loads(report.read_text())["install"]
    nodes = {norm(i["metadata"]["name"]): i for i in installs}
    env = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    reached: dict[str, set[str]] = {}
    todo = [(norm(Requirement(r).name), set(Requirement(r).extras)) for r in reqs]
    while todo:  # walk the resolved graph from grokray's requirements, with the extras each edge asks for
        name, extras = todo.pop()
        if name not in nodes or (name in reached and extras <= reached[name]):
            continue
        reached[name] = reached.get(name, set()) | extras
        for line in nodes[name]["metadata"].get("requires_dist", []):
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in ["", *extras]):
                todo.append((norm(req.name), set(req.extras)))
    return {n: nodes[n]["metadata"]["version"] for n in reached}


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def strip_symbols(data: bytes) -> bytes:
    """An ELF binary without its symbol table (`strip --strip-unneeded`: the dynamic symbols that linking and
    Python's import need stay). Ray ships its GCS, raylet and _raylet.so unstripped; this saves ~4 MiB of the
    wheel, and only a native crash's backtrace loses its function names. Unchanged where `strip` is missing."""
    tool = shutil.which("strip")
    if tool is None or not data.startswith(b"\x7fELF"):
        return data
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "binary"
        binary.write_bytes(data)
        proc = subprocess.run([tool, "--strip-unneeded", str(binary)], capture_output=True)
        return binary.read_bytes() if proc.returncode == 0 else data


def strip_wheel(path: Path, prefixes: tuple[str, ...], min_binary: int = 2**20) -> int:
    """Rewrite the wheel without the members under `prefixes` and with its large binaries' symbol tables
    stripped, its RECORD listing exactly what stays. Returns the bytes saved."""
    before = path.stat().st_size
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        record_name = next(n for n in src.namelist()  # the wheel's own, not a vendored package's inside it
                           if n.endswith(".dist-info/RECORD") and n.count("/") == 1)
        kept = [i for i in src.infolist() if not i.filename.startswith(prefixes) and i.filename != record_name]
        lines = []
        for info in kept:
            data = src.read(info)
            if info.file_size >= min_binary:
                data = strip_symbols(data)
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
            if not info.is_dir():
                lines.append(record_line(info.filename, data))
        lines.append(f"{record_name},,")
        dst.writestr(record_name, "\n".join(lines) + "\n")
    tmp.replace(path)
    return before - path.stat().st_size


def build(python: str, dest: Path, limit_mib: float) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    image = image_packages()
    reqs = requirements()
    closure = resolve(reqs, python)
    bundled = {n: v for n, v in sorted(closure.items()) if n not in image}
    from_image = {n: v for n, v in sorted(closure.items()) if n in image}
    print(f"gpu_bundle: Python {python}: {len(closure)} packages in grokray's closure ({' '.join(reqs)}); "
          f"{len(from_image)} come with the device image, {len(bundled)} are bundled")
    pip("download", "--no-deps", "--quiet", "-d", str(dest), *target_flags(python),
        *[f"{n}=={v}" for n, v in bundled.items()])
    for wheel in dest.glob("ray-*.whl"):
        saved = strip_wheel(wheel, RAY_STRIP)
        print(f"gpu_bundle: {wheel.name}: without {', '.join(RAY_STRIP)} and its binaries' symbol tables "
              f"({saved / 2**20:.1f} MiB saved)")
    wheels = sorted(dest.glob("*.whl"))
    found = {norm(w.name.split("-")[0]) for w in wheels}
    missing = sorted(set(bundled) - found)
    if missing:
        print(f"gpu_bundle: no wheel downloaded for {', '.join(missing)}", file=sys.stderr)
        return 1
    (dest / "bundle.json").write_text(json.dumps(
        {"python": python, "requirements": reqs, "bundled": bundled, "from_image": sorted(from_image.items()),
         "provided_by_image": sorted(PROVIDED_BY_IMAGE), "ray_stripped": list(RAY_STRIP)}, indent=1) + "\n")
    size = sum(w.stat().st_size for w in wheels) / 2**20
    for w in sorted(wheels, key=lambda w: -w.stat().st_size)[:6]:
        print(f"  {w.stat().st_size / 2**20:6.1f} MiB  {w.name}")
    print(f"gpu_bundle: {len(wheels)} wheels, {size:.1f} MiB in {dest} (limit {limit_mib:g} MiB)")
    if size > limit_mib:
        print(f"gpu_bundle: the bundle is {size:.1f} MiB, over the {limit_mib:g} MiB limit", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default="3.12", help="the target interpreter (the device image: 3.12)")
    parser.add_argument("--dest", type=Path, default=ROOT / ".whl", help="folder for the wheels (default .whl/)")
    parser.add_argument("--limit-mib", type=float, default=60.0)
    args = parser.parse_args()
    return build(args.python, args.dest, args.limit_mib)


if __name__ == "__main__":
    sys.exit(main())
