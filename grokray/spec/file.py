"""A spec file read as a user's YAML: safely (`yaml.safe_load`), and every way it can be wrong is one SpecError
line naming the file (a directory, a missing file, a binary file, malformed YAML, an empty file, not a mapping)."""

from __future__ import annotations

from pathlib import Path

import yaml

from ..errors import SpecError
from .keys import SPEC_KEYS

MAX_VALUES = 100_000  # values a spec may hold once its YAML aliases are expanded


def _expands_past(raw, most: int) -> bool:
    """Whether `raw`, aliases expanded (PyYAML shares an aliased node instead of copying it, so a 'billion laughs'
    loads at once and explodes only when something walks or copies it), holds more than `most` values."""
    count, todo = 0, [raw]
    while todo:
        value = todo.pop()
        count += 1
        if count > most:
            return True
        if isinstance(value, dict):
            todo.extend(value.values())
        elif isinstance(value, list):
            todo.extend(value)
    return False


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if path.is_dir():
        specs = sorted(p.name for p in path.glob("*.yaml"))
        listed = f"; its specs: {', '.join(specs[:8])}{', ...' if len(specs) > 8 else ''}" if specs else ""
        raise SpecError("spec", f"{str(path)!r} is a directory; give one spec file (a .yaml){listed}")
    if not path.is_file():
        raise SpecError("spec", f"file {str(path)!r} does not exist")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise SpecError("spec", f"{path.name} is not a text file (not UTF-8); a spec is YAML text") from None
    try:
        raw = yaml.safe_load(text)
    except RecursionError:
        raise SpecError("spec", f"{path.name} nests deeper than YAML can be read here; a spec is a few levels "
                        "deep") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError("spec", f"malformed YAML in {path.name}{where}: {problem}") from None
    if raw is None:
        raise SpecError("spec", f"{path.name} is empty; a spec needs at least 'task' and 'model'")
    if _expands_past(raw, MAX_VALUES):
        raise SpecError("spec", f"{path.name} expands to more than {MAX_VALUES:,} values through YAML aliases (a "
                        "'billion laughs'); a spec is a few hundred values")
    if not isinstance(raw, dict):
        raise SpecError("spec", f"{path.name} must be a mapping of {', '.join(SPEC_KEYS)}; got {type(raw).__name__}")
    return raw
