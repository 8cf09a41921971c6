"""One way to write a number for a person: run names, axis ticks, panel titles and pages all say 3.16e-4 for the
same learning rate (run names said 3.16e-4 while the axes said 3.2e-4)."""

from __future__ import annotations

import math


def short_number(value, log: bool = False) -> str:
    """Three significant digits at most, trailing zeros dropped; powers of ten for a log axis and outside
    1e-2 .. 1e5: 0.001 -> 1e-3 (log) or 0.001, 0.000316 -> 3.16e-4, 5.0 -> 5, 0.25 -> 0.25, 2000.0 -> 2000,
    150000 -> 1.5e5.
    Anything that is not a finite number is written as it is."""
    if isinstance(value, bool):
        return str(value)
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(v):
        return str(value)
    if v == 0:
        return "0"
    exp = math.floor(math.log10(abs(v)))
    if log or exp < -2 or exp > 4:
        mantissa = f"{v / 10**exp:.2f}".rstrip("0").rstrip(".")
        if mantissa in ("10", "-10"):  # 9.996e-4 rounds up to the next power
            mantissa, exp = mantissa[:-1], exp + 1
        return f"{mantissa}e{exp}"
    if v.is_integer():  # 2000.0 -> 2000 (`.3g` writes 2e+03)
        return str(int(v))
    return f"{v:.3g}" if exp < 2 else f"{v:.0f}"
