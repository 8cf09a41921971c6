"""Rules a spec's values keep that no single field's type says: a name that stays inside the folders built from
it, and swept values and seeds given once each (a repeated one would train twice and count twice)."""

from __future__ import annotations

import json

from ..errors import SpecError

MAX_NAME = 100  # Tune names its experiment folder `<name>_<timestamp>`, and a file name has at most 255 bytes


def check_name(name, field: str) -> str:
    """`name` if it can name an MLflow experiment and the folders built from it; else a SpecError naming `field`."""
    if not isinstance(name, str) or not name.strip():
        raise SpecError(field, f"expected a non-empty string, got {name!r}")
    if len(name) > MAX_NAME:
        raise SpecError(field, f"has {len(name)} characters; at most {MAX_NAME} (it names folders and files)")
    bad = sorted({c for c in name if c in "/\\" or not (c.isprintable() or c == " ")})
    if bad or name in (".", ".."):  # isprintable: no control, format (bidi, zero-width) or separator characters
        what = ", ".join(repr(c) for c in bad) if bad else repr(name)
        raise SpecError(field, f"got {name!r}; a name stays inside the folders built from it and reads as it is "
                        "written: no path separators, control characters, format or line-separator characters, "
                        f"'.' or '..' ({what})")
    return name


def check_distinct(values: list, field: str, what: str = "value") -> list:
    """`values` unchanged if no two are equal (1 and 1.0 are); else a SpecError naming `field` and the repeat."""
    seen: set = set()
    for value in values:
        key = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, int | float) else float(value)
        if key in seen:
            raise SpecError(field, f"{what} {value!r} is given twice; each one trains once, and a repeat would train "
                            "the same configurations again and count them twice")
        seen.add(key)
    return values
