"""The layers of docs/ARCHITECTURE.md, checked on the source (AST, no imports): which layer may import which,
where Ray is started and Tuners are built, where parent runs are created, and that files stay small."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "grokray").rglob("*.py"), *(ROOT / "analysis").rglob("*.py")])
MAX_LINES = 400

# Lower imports nothing higher. A module may import its own package and anything of a lower rank.
RANKS = {
    "grokray.errors": 0, "grokray.contracts": 0, "grokray.spec_keys": 0, "grokray.config": 1,
    "grokray.registry": 1, "grokray.overrides": 2,
    "grokray.phases": 2, "grokray.tasks": 3, "grokray.optim": 3, "grokray.models": 4, "grokray.spec": 5,
    "grokray.engine": 6,
    "grokray.tracking": 3,  # the ground floor of the driver side: only errors, config and the phase rules below it
    "grokray.plan": 7, "grokray.search": 8, "analysis": 8, "grokray.run": 9, "grokray.atlas": 10,
    "grokray.terminal": 10, "grokray.ui": 10, "grokray.supervisor": 10, "grokray.cli": 11, "grokray": 11,
    "grokray.__main__": 12,
}
CORE = ("grokray.errors", "grokray.contracts", "grokray.spec_keys", "grokray.config", "grokray.registry",
        "grokray.overrides", "grokray.phases",
        "grokray.tasks", "grokray.optim", "grokray.models", "grokray.spec", "grokray.engine")
PURE = (*CORE, "grokray.plan", "grokray.tracking.schema")  # no Ray, MLflow or Optuna
# Function-level imports of grokray or analysis modules, each with its reason.
LAZY_ALLOWED = {
    "grokray.cli": "each command imports only what it runs: `grokray train` never loads Ray or MLflow, and "
                   "`--help` answers at once",
    "grokray.run.replay": "Ray and Optuna load only for a search's spool, which links its trials after the replay",
    "grokray.run.report": "the closing figures load matplotlib when a launch ends, not before its first trial",
    "grokray.tracking.history": "MLflow (through tracking.client) loads only when a store is there to measure: a "
                                "dry-run of a new spec pays none of its seconds of imports",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    return max((k for k in RANKS if module == k or module.startswith(k + ".")), key=len)


def imports(path: Path):
    """(imported module, names, is it inside a function) for every import of grokray or analysis in `path`."""
    module = module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            target, names = None, []
            for alias in node.names:
                yield alias.name, [], id(node) not in top
            continue
        else:
            continue
        yield target, names, id(node) not in top


def internal(target: str) -> bool:
    return target == "grokray" or target.startswith(("grokray.", "analysis"))


def dotted(node) -> str:
    """`ray.init` for the function of the call `ray.init(...)`; '' for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def called(path: Path) -> set[str]:
    return {dotted(n.func) for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)}


def calls(path: Path, attr: str) -> list[str]:
    """The calls in `path` whose function's last name is `attr` (`x.create_run(...)`, `create_run(...)`)."""
    return [c for c in called(path) if c.split(".")[-1] == attr]


def test_no_upward_imports():
    bad = []
    for path in SOURCES:
        me = module_name(path)
        for target, _, _ in imports(path):
            if not internal(target):
                continue
            mine, theirs = layer(me), layer(target)
            if mine != theirs and RANKS[theirs] >= RANKS[mine]:
                bad.append(f"{me} -> {target}")
    assert not bad, bad


def test_tracking_imports_nothing_above_config():
    """Besides errors and config, only the phase rules (pure: how a run counts), so counts agree everywhere."""
    allowed = ("grokray.tracking", "grokray.errors", "grokray.config", "grokray.phases")
    bad = [f"{module_name(p)} -> {t}" for p in SOURCES if module_name(p).startswith("grokray.tracking")
           for t, _, _ in imports(p) if internal(t) and not t.startswith(allowed)]
    assert not bad, bad


@pytest.mark.parametrize("package", ["grokray.plan", "grokray.tracking.schema", *CORE])
def test_pure_layers_import_no_ray_mlflow_or_optuna(package):
    bad = [f"{module_name(p)} -> {t}" for p in SOURCES if layer(module_name(p)) == layer(package)
           and (module_name(p) == package or module_name(p).startswith(package + "."))
           for t, _, _ in imports(p) if t.split(".")[0] in ("ray", "mlflow", "optuna")]
    assert not bad, bad


def test_importing_the_pure_layers_loads_no_ray_mlflow_or_optuna():
    modules = ", ".join(m for m in sorted({module_name(p) for p in SOURCES}) if m.startswith(PURE))
    code = (f"import sys, importlib; [importlib.import_module(m) for m in '{modules}'.split(', ')]; "
            "bad = [m for m in ('ray', 'mlflow', 'optuna') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_ray_is_started_and_tuners_built_only_in_the_launch_layer():
    ray_init = sorted(module_name(p) for p in SOURCES if "ray.init" in called(p))
    tuners = sorted(module_name(p) for p in SOURCES
                    if called(p) & {"Tuner", "tune.Tuner", "Tuner.restore", "tune.Tuner.restore"})
    assert ray_init == ["grokray.run.cluster"], ray_init
    assert tuners == ["grokray.run.launch"], tuners


def refers_to(path: Path, attr: str) -> bool:
    """Whether `path` calls or passes `x.attr` (a client method handed to a retry counts as a call)."""
    return any(isinstance(n, ast.Attribute) and n.attr == attr for n in ast.walk(ast.parse(path.read_text())))


def test_runs_are_created_only_in_tracking_and_parents_only_by_parent_run():
    creators = sorted(module_name(p) for p in SOURCES if refers_to(p, "create_run"))
    assert creators and all(m.startswith("grokray.tracking.") for m in creators), creators
    # the parent role is written in one place: ParentRun.open (others only read it back)
    writers = sorted(module_name(p) for p in SOURCES for node in ast.walk(ast.parse(p.read_text()))
                     if isinstance(node, ast.Dict) and any(isinstance(k, ast.Name) and k.id == "ROLE_TAG"
                                                           for k in node.keys)
                     and any(isinstance(v, ast.Name) and v.id == "PARENT" for v in node.values))
    assert writers == ["grokray.tracking.parent"], writers


def test_function_level_imports_only_where_allowed():
    bad = [f"{module_name(p)} -> {t}" for p in SOURCES for t, _, lazy in imports(p)
           if lazy and internal(t) and module_name(p) not in LAZY_ALLOWED]
    assert not bad, bad


def test_no_cross_module_import_of_private_names():
    bad = [f"{module_name(p)}: {t}.{n}" for p in SOURCES for t, names, _ in imports(p) if internal(t)
           for n in names if n.startswith("_") and not n.startswith("__")]
    assert not bad, bad


def test_no_file_over_the_size_limit():
    big = {str(p.relative_to(ROOT)): n for p in SOURCES if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, big
