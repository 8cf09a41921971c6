"""The spec's vocabulary: its top-level keys, scales and axis kinds, and the bounds every spec obeys. Pure names,
read by build.py, overrides.py, the CLI parser and the atlas, so a key spelled twice cannot drift."""

from __future__ import annotations

TRIAL_KEYS = ("task", "model", "optim", "train", "phases", "seed")
SCALES = ("smoke", "reduced", "paper")  # presets a spec may declare; "paper" is the spec itself
PRESETS = SCALES[:-1]
SPEC_KEYS = ("name", "description", *TRIAL_KEYS[:-1], "seeds", "sweep", "resources", *PRESETS, "search", "adaptive",
             "artifacts", "atlas")
# Keys that say how to run or document a spec, not what it trains: left out of its hash, so adding a preset or an
# atlas note to a spec does not orphan the sweeps already stored under it.
UNHASHED_KEYS = (*PRESETS, "atlas")
AXIS_KINDS = ("values", "linspace", "logspace", "range")
SEED_RANGE = {"ge": 0, "lt": 2**32}  # what every generator accepts, on every device
MAX_AXIS_POINTS = 100_000  # one axis; checked before numpy builds it (a typo like num: 1e9 would take 8 GB)
