"""Name -> (config dataclass, builder) maps, so a new task or model family is one new file, in grokray or outside.

A name that is not registered is looked up in the user's code (grokray.user_code): "package.module:Attribute", or
an installed package's entry point. What it names is checked by the registry's `adopt` rule and registered under
that very name, so a configuration written as a dict (to a Tune worker, a checkpoint, MLflow) names it the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import SpecError, did_you_mean
from .user_code import entry_point_names, import_reference, is_reference, load_entry_point


@dataclass(frozen=True)
class Entry:
    name: str
    config_cls: type
    build: Callable[..., Any]
    extra: dict


class Registry:
    def __init__(self, kind: str, adopt: Callable[[str, Any, str], type | None] | None = None):
        """adopt(name, obj, field): the config class of `obj` (None: obj is its own config) if obj can be registered
        as a `kind`, else a SpecError naming `field` that says what such an object must be."""
        self.kind = kind
        self.adopt = adopt
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, config_cls: type | None = None, **extra):
        """Decorator for the builder of `name`; with no `config_cls`, the decorated class is its own config."""

        def deco(build):
            cls = config_cls or build
            cls.registry_name = name
            self._entries[name] = Entry(name, cls, build, extra)
            return build

        return deco

    def get(self, name: str) -> Entry:
        if name not in self._entries:
            self._resolve(name)
        return self._entries[name]

    def _resolve(self, name: str) -> None:
        """Register `name` from the user's code, or raise the unknown-name error (with the entry points listed)."""
        field = f"{self.kind}.name"
        if is_reference(name):
            obj = import_reference(name, field)
        else:
            obj = load_entry_point(self.kind, name, field) if self.adopt else None
            if obj is None:
                names = self.names() + (entry_point_names(self.kind) if self.adopt else [])
                raise SpecError(field, f"unknown {self.kind} {name!r}; {did_you_mean(name, names)}allowed: "
                                       f"{', '.join(names)}, or 'package.module:Attribute' of your own")
        if self.adopt is None:
            raise SpecError(field, f"got {name!r}; a {self.kind} cannot come from outside grokray")
        self.register(name, self.adopt(name, obj, field))(obj)

    def names(self) -> list[str]:
        """The registered names (user references only once resolved)."""
        return sorted(n for n in self._entries if not is_reference(n))

    def __contains__(self, name: str) -> bool:
        return name in self._entries
