"""A spec's `atlas:` block: how its figure is drawn, split and checked against the paper. Pure: no Ray, no MLflow.

```yaml
atlas:
  axes: [optim.decoder.lr, optim.decoder.weight_decay]   # diagram x, y (default: the first two swept axes)
  view: diagram                  # or fraction: generalization rate against task.train_fraction (Liu Fig. 4)
  differences:                   # how this setup differs from the paper's stated one ([]: it matches)
    - "10^4 steps where the paper trains 10^5"
  pieces:                        # per scale: separate `grokray run`s in one experiment, analysed together
    paper:
      - {name: low-lr, take: {optim.decoder.lr: [0, 4]}, set: {seeds: [0, 1, 2]}}
      - {name: high-lr, take: {optim.decoder.lr: [4, 11]}, set: {seeds: [0]}}
  regions:                       # the paper's layout: which majority phase each region of cells should have
    - {phase: memorization, optim.decoder.lr: [3.0e-3, null], optim.decoder.weight_decay: [null, 2]}
```

A piece's `set` is a preset of dotted overrides applied after the scale's; `take: {axis: [start, stop]}` keeps
that slice of the axis's values (Python slice indices), so a piece covers rows of the grid with exactly the values
the whole spec would use. A region's bounds are inclusive; null leaves a side open.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import SpecError
from ..phases import PHASES
from ..spec.blocks import check_block, coerce

VIEWS = ("diagram", "fraction")
BLOCK_KEYS = ("axes", "view", "pieces", "regions", "compare", "differences")
COMPARE_KEYS = ("page", "label", "published")
PIECE_KEYS = ("name", "take", "set")


@dataclass
class Piece:
    name: str
    take: dict[str, tuple[int, int]] = field(default_factory=dict)
    set: dict = field(default_factory=dict)


@dataclass
class Region:
    phase: str
    bounds: dict[str, tuple[float | None, float | None]]

    def contains(self, cell: dict) -> bool:
        for axis, (lo, hi) in self.bounds.items():
            v = float(cell[axis])
            if (lo is not None and v < lo * (1 - 1e-9)) or (hi is not None and v > hi * (1 + 1e-9)):
                return False
        return True


@dataclass(frozen=True)
class Compare:
    """A search figure drawn beside others on one page (atlas.search_comparison): the page's name, this figure's row
    label and the paper's figure for it (steps to the threshold, and where that number comes from)."""

    page: str
    label: str
    published_steps: int | None = None
    source: str = ""


def _compare(raw) -> Compare | None:
    if raw is None:
        return None
    check_block(raw, "atlas.compare", COMPARE_KEYS)
    for key in ("page", "label"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise SpecError(f"atlas.compare.{key}", f"expected a name, got {raw.get(key)!r}")
    published = raw.get("published") or {}
    check_block(published, "atlas.compare.published", ("steps", "source"))
    steps = published.get("steps")
    steps = None if steps is None else coerce(int, steps, "atlas.compare.published.steps", {"ge": 1})
    return Compare(raw["page"], raw["label"], steps, str(published.get("source", "")))


@dataclass
class AtlasConfig:
    axes: tuple[str, str] | None = None
    view: str = "diagram"
    pieces: dict[str, list[Piece]] = field(default_factory=dict)  # scale -> pieces (absent: one whole run)
    regions: list[Region] = field(default_factory=list)
    compare: Compare | None = None
    # How the spec's setup differs from its source's stated one (every page lists them; [] where it matches;
    # None: not yet audited, and the page says so)
    differences: list[str] | None = None

    def pieces_for(self, scale: str) -> list[Piece]:
        return self.pieces.get(scale) or [Piece("all")]


def _bound(value, where: str) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SpecError(where, f"expected a number or null, got {value!r}") from None


def _pair(value, where: str) -> list:
    if not isinstance(value, list) or len(value) != 2:
        raise SpecError(where, f"expected [low, high], got {value!r}")
    return value


def _piece(raw, where: str) -> Piece:
    check_block(raw, where, PIECE_KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError(f"{where}.name", f"expected a non-empty string, got {name!r}")
    take = {}
    for axis, span in (raw.get("take") or {}).items():
        start, stop = _pair(span, f"{where}.take.{axis}")
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in (start, stop)) or not 0 <= start < stop:
            raise SpecError(f"{where}.take.{axis}", f"expected slice indices [start, stop] with 0 <= start < stop, "
                            f"got {span!r}")
        take[axis] = (start, stop)
    preset = raw.get("set") or {}
    if not isinstance(preset, dict):
        raise SpecError(f"{where}.set", f"expected a mapping of dotted overrides, got {preset!r}")
    return Piece(name, take, preset)


def parse_atlas(raw, scales=("smoke", "reduced", "paper")) -> AtlasConfig:
    """The atlas: block of a spec (None: defaults). Axis names are checked against the spec by `atlas.plan`."""
    if raw is None:
        return AtlasConfig()
    check_block(raw, "atlas", BLOCK_KEYS)
    axes = raw.get("axes")
    if axes is not None and (not isinstance(axes, list) or len(axes) != 2 or not all(isinstance(a, str) for a in axes)
                             or axes[0] == axes[1]):
        raise SpecError("atlas.axes", f"expected two different dotted fields [x, y], got {axes!r}")
    view = raw.get("view", "diagram")
    if view not in VIEWS:
        raise SpecError("atlas.view", f"got {view!r}; allowed: {', '.join(VIEWS)}")
    pieces = {}
    for scale, items in (raw.get("pieces") or {}).items():
        if scale not in scales:
            raise SpecError(f"atlas.pieces.{scale}", f"unknown scale; allowed: {', '.join(scales)}")
        if not isinstance(items, list) or not items:
            raise SpecError(f"atlas.pieces.{scale}", f"expected a non-empty list of pieces, got {items!r}")
        pieces[scale] = [_piece(p, f"atlas.pieces.{scale}[{i}]") for i, p in enumerate(items)]
        names = [p.name for p in pieces[scale]]
        if len(set(names)) != len(names):
            raise SpecError(f"atlas.pieces.{scale}", f"piece names must differ, got {names}")
    regions = []
    for i, item in enumerate(raw.get("regions") or []):
        where = f"atlas.regions[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("phase"), str):
            raise SpecError(where, f"expected {{phase: NAME, <axis>: [low, high], ...}}, got {item!r}")

        if item["phase"] not in PHASES:
            raise SpecError(f"{where}.phase", f"got {item['phase']!r}; allowed: {', '.join(PHASES)}")
        bounds = {}
        for axis, span in item.items():
            if axis != "phase":
                lo, hi = _pair(span, f"{where}.{axis}")
                bounds[axis] = (_bound(lo, f"{where}.{axis}[0]"), _bound(hi, f"{where}.{axis}[1]"))
        regions.append(Region(item["phase"], bounds))
    differences = raw.get("differences")
    if differences is not None and (not isinstance(differences, list)
                                    or not all(isinstance(d, str) and d for d in differences)):
        raise SpecError("atlas.differences", f"expected a list of sentences ([] where the setup matches the paper), "
                        f"got {differences!r}")
    return AtlasConfig(tuple(axes) if axes else None, view, pieces, regions, _compare(raw.get("compare")),
                       differences)
