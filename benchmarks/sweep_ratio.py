"""The ratio of two bench_sweep.py results written with --json, one side each (plain Ray Tune, grokray run), so that
a device call samples each side's card utilisation on its own (benchmarks/gpu_session.sh). A side that did not
finish within the call's limit for it (the third argument, seconds) still bounds the ratio."""

import json
import sys


def side(path: str) -> dict | None:
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def main(plain_path: str, grokray_path: str, limit_s: str = "") -> int:
    plain, grok = side(plain_path), side(grokray_path)
    if grok is None:
        print("plain against grokray: grokray run did not finish; no ratio")
        return 1
    g = grok["grokray"]
    said = f"grokray run {g['wall_s']:.1f} s for {g['configurations']} configurations in {g['packs']} packs"
    where = f"({grok['device']}, {grok['steps']} steps, {grok['grid']} grid, gpu share {grok['gpu_share']})"
    if plain is None:
        bound = f": more than {float(limit_s) / g['wall_s']:.1f}x sooner" if limit_s else ""
        print(f"plain Ray Tune did not finish within {limit_s or '?'} s; {said}{bound} {where}")
        return 1
    p = plain["plain"]
    print(f"plain Ray Tune {p['wall_s']:.1f} s for {p['trials']} trials; {said}: {p['wall_s'] / g['wall_s']:.1f}x "
          f"sooner {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
