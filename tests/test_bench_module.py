"""benchmarks/bench_module.py (issue 70) runs on a user's factory as the README shows it: a table row per K with both
rates and their ratio; and without a factory it says what to give. About 15 s."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench_module.py"


def test_it_times_the_users_module_against_their_plain_loop_at_each_k():
    out = subprocess.run(
        [sys.executable, str(BENCH), "--factory", "userpkg.models:OneHotMLP", "--kwargs", '{"width": 8}',
         "--task", '{"name": "modular", "op": "add", "p": 7, "train_fraction": 0.5}',
         "--path", str(ROOT / "tests" / "fixtures" / "userpkg"), "--ks", "1,2", "--quick"],
        capture_output=True, text=True, timeout=300, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| userpkg.models:OneHotMLP")]
    assert len(rows) == 2, out
    for row, k in zip(rows, (1, 2), strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == "joint" and cells[2] == str(k)  # 49 points, full batch: one forward over all, every step
        pack, plain, ratio = float(cells[3].replace(",", "")), float(cells[4].replace(",", "")), cells[5]
        assert pack > 0 and plain > 0
        assert re.fullmatch(r"\d+\.\d\dx", ratio) and abs(float(ratio[:-1]) - pack / plain) < 0.01


def test_without_a_factory_it_says_what_to_give():
    proc = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--factory package.module:callable" in proc.stderr
