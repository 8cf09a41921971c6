"""What an analysis cannot do with what it was given, typed by the input to blame, so the CLI maps each to its
own flag without reading the message (and analysis never names a flag)."""

from __future__ import annotations

SOURCE, X, Y, AXES, COMPARISON, POOL = "source", "x", "y", "axes", "comparison", "pool"
COMPARED = "compared"  # the launch to compare with could not be read (not: may not be compared)


class AnalysisError(ValueError):
    """`part`: which input is wrong: SOURCE (the experiment or parent read), X, Y, AXES (the pair), COMPARISON
    or POOL (launches that may not be compared or pooled)."""

    def __init__(self, part: str, message: str):
        super().__init__(message)
        self.part = part
