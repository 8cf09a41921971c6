"""CI's closing report: each step's wall time, then the slowest tests of the run with their tier.

Reads the step log `.ci/run` appends to ("name seconds exit-code" a line) and the JUnit XML each test tier writes
(`make TIER JUNIT=DIR` writes DIR/TIER.xml). Standard library only: it must also run when the install failed.

    python .ci/timings.py STEPS_FILE JUNIT_DIR [N]
"""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def steps(path: Path) -> list[tuple[str, float, str]]:
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        name, seconds, code = line.split()
        out.append((name, float(seconds), code))
    return out


def tests(folder: Path) -> list[tuple[float, str, str, str]]:
    """(seconds, tier, test id, outcome) of every test case the tiers' XML files hold."""
    out = []
    for xml in sorted(folder.glob("*.xml")):
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
            test_id = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            out.append((float(case.get("time", 0)), xml.stem, test_id, outcome))
    return out


def main(argv: list[str]) -> int:
    step_file, junit = Path(argv[1]), Path(argv[2])
    slowest = int(argv[3]) if len(argv) > 3 else 30
    ran = steps(step_file)
    print("\nci: wall time per step")
    for name, seconds, code in ran:
        print(f"  {name:<12} {minutes(seconds):>8}  {'' if code == '0' else f'exit {code}'}")
    print(f"  {'total':<12} {minutes(sum(s for _, s, _ in ran)):>8}")
    cases = tests(junit)
    by_tier: dict[str, list[float]] = {}
    for seconds, tier, _, _ in cases:
        by_tier.setdefault(tier, []).append(seconds)
    if by_tier:
        print("ci: tests per tier (count, summed test time)")
        for tier, times in sorted(by_tier.items()):
            print(f"  {tier:<12} {len(times):>5}  {minutes(sum(times)):>8}")
    print(f"ci: the {slowest} slowest tests")
    for seconds, tier, test_id, outcome in sorted(cases, reverse=True)[:slowest]:
        print(f"  {seconds:7.1f} s  {tier:<12} {test_id}{'' if outcome == 'passed' else f'  ({outcome})'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
