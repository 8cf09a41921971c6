"""Model families and tasks from the user's own code, named in a spec without editing grokray.

Two ways in, one rule for both:
- a name "package.module:Attribute" imports the module and takes the attribute (a spec's `model.name`, `task.name`,
  or the `module` family's `factory`); the module is looked for where Python looks, then in the working directory
  the command was started from (as `python -m` would);
- an installed package declares entry points in the groups `grokray.models` and `grokray.tasks`; a spec then names
  the entry point (`model: {name: tinynet}`).

Every Ray worker must import the same code. The directories user modules were imported from (outside any installed
package) are recorded here; the launch hands them to each trial (worker/context.py), which puts them on its sys.path
before it parses its configurations. So a module beside the spec works on a laptop's private Ray and on a cluster
whose nodes share that filesystem; elsewhere, install the package on every node (its entry points then resolve).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from pathlib import Path

from .errors import SpecError

ENTRY_POINT_GROUPS = {"model": "grokray.models", "task": "grokray.tasks"}
_code_roots: list[str] = []  # directories user modules came from, in the order first imported


def is_reference(name: str) -> bool:
    """Whether `name` is a "module:attribute" reference to user code (a registered name never has a colon)."""
    return ":" in name


def _with_working_directory() -> None:
    """The working directory at the end of sys.path, once: a console script's sys.path[0] is its bin/ folder, so
    a user's `mylab/` beside the spec would not import; appended, an installed package of the same name wins."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def import_reference(ref: str, field: str):
    """The object `ref` ("package.module:Attribute", the attribute may be dotted) names, or a SpecError naming
    `field` with what failed: the import error itself, or the missing attribute and those the module has."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr or not all(part.isidentifier() for part in (*module_name.split("."),
                                                                              *attr.split("."))):
        raise SpecError(field, f"got {ref!r}; expected 'package.module:attribute', e.g. 'mylab.models:make_net'")
    _with_working_directory()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any error while importing user code is the user's to see, in one line
        raise SpecError(field, f"cannot import module {module_name!r}: {type(exc).__name__}: {exc} (looked in "
                        f"sys.path and the working directory {os.getcwd()})") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in dir(obj) if not n.startswith("_"))
            raise SpecError(field, f"module {module_name!r} has no attribute {attr!r}; it has: "
                            f"{', '.join(public[:20]) or 'nothing public'}")
        obj = getattr(obj, part)
    _remember_root(module, module_name)
    return obj


def _remember_root(module, module_name: str) -> None:
    """The directory the top-level package of `module` sits in, unless it is an installed package's."""
    file = getattr(module, "__file__", None)
    if not file:
        return
    root = Path(file).resolve().parent
    depth = module_name.count(".") + (1 if Path(file).name == "__init__.py" else 0)
    for _ in range(depth):
        root = root.parent
    if any(part in ("site-packages", "dist-packages") for part in root.parts):
        return
    if str(root) not in _code_roots:
        _code_roots.append(str(root))


def code_paths() -> tuple[str, ...]:
    """The directories every worker needs on its sys.path for the user code imported so far."""
    return tuple(_code_roots)


def add_code_paths(paths) -> None:
    """On a worker: the driver's code paths, appended to sys.path before any configuration is parsed."""
    for path in paths:
        if path not in sys.path:
            sys.path.append(path)
        if path not in _code_roots:
            _code_roots.append(path)


def entry_point_names(kind: str) -> list[str]:
    """Names installed packages declare in the entry-point group of `kind` ("model" or "task")."""
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUPS[kind])})


def load_entry_point(kind: str, name: str, field: str):
    """The object the entry point `name` of `kind`'s group names, None if no installed package declares it."""
    found = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUPS[kind]) if ep.name == name]
    if not found:
        return None
    try:
        return found[0].load()
    except Exception as exc:  # noqa: BLE001 - an installed package's import error, said in one line
        raise SpecError(field, f"entry point {name!r} ({found[0].value}, group {ENTRY_POINT_GROUPS[kind]}) does "
                        f"not load: {type(exc).__name__}: {exc}") from None
