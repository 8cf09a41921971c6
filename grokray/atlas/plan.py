"""Spec file + scale -> the pieces to run, each a fully built Spec, and what the page quotes from the header.

Pure: builds and validates specs, starts nothing. Every piece of every requested figure is built before the
first one runs, so a typo in any spec or atlas block costs nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError
from ..spec.build import SCALES, Spec, build_spec, read_yaml
from ..tracking.schema import DRIVERS, driver_for
from .config import AtlasConfig, Piece, parse_atlas


@dataclass
class PieceRun:
    name: str
    spec: Spec
    overrides: list[str]  # the same piece as `grokray run SPEC --scale S -s ...` arguments
    kind: str  # which driver runs it: grid, adaptive (an adaptive: block) or search (a search: spec)

    @property
    def search(self) -> bool:
        """A study's piece (a search): its page shows the study, not a grid."""
        return DRIVERS[self.kind].study


@dataclass
class Figure:
    path: Path
    scale: str
    config: AtlasConfig
    pieces: list[PieceRun]
    title: str  # the header's first sentence
    expected: str  # the header's "Expected..." paragraph
    overrides: tuple[str, ...] = ()  # the command's -s, given to every piece

    @property
    def stem(self) -> str:
        return f"{self.path.stem}-{self.scale}"

    @property
    def name(self) -> str:
        return self.pieces[0].spec.name

    @property
    def piece_hashes(self) -> dict[str, str]:
        """Each piece's spec hash: what a page records, so a page of other pieces is never taken for this one."""
        return {p.name: p.spec.hash() for p in self.pieces}


def header_lines(path: Path) -> list[str]:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return lines


_KEY_LINE = r"^(Expected|Full scale|Measured|Source|Axes|Start|Searched|Cross-entropy|Offline|Scales)\b"


def title_text(lines: list[str]) -> str:
    """The header's first sentence: headers wrap at 120 columns, and a title cut at the first line ends mid-phrase
    ("... for x+y, x-y, x*y, x/y" without its "mod 97")."""
    first: list[str] = []
    for line in lines:
        if not line or (first and re.match(_KEY_LINE, line)):
            break
        first.append(line)
    text = " ".join(first)
    return re.split(r"(?<!\bal)(?<=\.)\s+(?=[A-Z(])", text, maxsplit=1)[0]


def expected_text(lines: list[str]) -> str:
    """The header's paragraph that starts with 'Expected', up to the next 'Key:'-style paragraph."""
    out: list[str] = []
    for line in lines:
        if out and re.match(_KEY_LINE, line) and not line.startswith("Expected"):
            break
        if out or line.startswith("Expected"):
            out.append(line)
    return " ".join(out)


def _value_text(v) -> str:
    return json.dumps(v) if isinstance(v, list | dict) else str(v)


def _piece_spec(raw: dict, path: Path, scale: str, piece: Piece, user: tuple[str, ...]) -> PieceRun:
    """user: the command's -s overrides, applied after the piece's own (so a pinned axis stays pinned)."""
    scale_arg = None if scale == "paper" else scale
    where = f"atlas.pieces.{scale}.{piece.name}"
    presets = ((f"{where}.set", piece.set),) if piece.set else ()
    spec = build_spec(raw, user, scale_arg, default_name=path.stem, presets=presets)
    overrides = [f"{k}={_value_text(v)}" for k, v in piece.set.items()]
    if piece.take:
        sliced = {}
        for axis, (start, stop) in piece.take.items():
            if axis not in spec.axes:
                raise SpecError(f"{where}.take.{axis}", f"not a swept axis; swept: {', '.join(spec.axes)}")
            values = spec.axes[axis]
            if stop > len(values):
                raise SpecError(f"{where}.take.{axis}", f"[{start}, {stop}] runs past the axis's {len(values)} values")
            sliced[f"sweep.{axis}"] = {"values": values[start:stop]}
        log_axes = spec.log_axes & set(piece.take)
        spec = build_spec(raw, user, scale_arg, default_name=path.stem, presets=(*presets, (f"{where}.take", sliced)))
        spec.log_axes |= log_axes  # a slice of a logspace axis is still drawn on a log scale
        overrides += [f"sweep.{a}.values={_value_text(v['values'])}" for a, v in
                      ((k[len("sweep."):], v) for k, v in sliced.items())]
    overrides += list(user)
    return PieceRun(piece.name, spec, overrides, driver_for(spec).kind)


def plan_figure(path: str | Path, scale: str, overrides: tuple[str, ...] = ()) -> Figure:
    """Build every piece of one spec at one scale (SpecError on any mistake); `overrides` are the command's -s."""
    path = Path(path)
    if scale not in SCALES:
        raise SpecError("--scale", f"got {scale!r}; allowed: {', '.join(SCALES)}")
    raw = read_yaml(path)
    config = parse_atlas(raw.get("atlas"))
    pieces = [_piece_spec(raw, path, scale, p, tuple(overrides)) for p in config.pieces_for(scale)]
    names = {p.spec.name for p in pieces}
    if len(names) != 1:
        raise SpecError("atlas.pieces", f"pieces must share the spec's name (one MLflow experiment), got {names}")
    if config.axes:
        for axis in config.axes:
            if not any(axis in p.spec.axes or axis == "seed" for p in pieces):
                raise SpecError("atlas.axes", f"{axis!r} is not swept at scale {scale}; swept: "
                                f"{', '.join(pieces[0].spec.axes)}")
    for region in config.regions:
        for axis in region.bounds:
            if config.axes and axis not in config.axes:
                raise SpecError("atlas.regions", f"{axis!r} is not one of atlas.axes {list(config.axes)}")
    lines = header_lines(path)
    return Figure(path, scale, config, pieces, title_text(lines) or path.stem, expected_text(lines), tuple(overrides))


def plan_atlas(paths: list[str | Path], scale: str, overrides: tuple[str, ...] = ()) -> list[Figure]:
    """Every figure, built and validated before anything runs."""
    return [plan_figure(p, scale, overrides) for p in paths]
