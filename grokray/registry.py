"""Name -> (config dataclass, builder) maps, so a new task or model family is one new file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import SpecError, did_you_mean


@dataclass(frozen=True)
class Entry:
    name: str
    config_cls: type
    build: Callable[..., Any]
    extra: dict


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
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
            raise SpecError(f"{self.kind}.name", f"unknown {self.kind} {name!r}; {did_you_mean(name, self.names())}"
                                                 f"allowed: {', '.join(self.names())}")
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries
