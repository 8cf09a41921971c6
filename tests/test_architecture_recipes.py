"""docs/ARCHITECTURE.md's recipes, built from the page itself: a driver written as its "A driver" block says runs a
sweep, is stopped by Ctrl-C, and its --resume finishes it without training a finished configuration again. (A
tracker built from the Protocol is tests/test_tracker_contract.py and tests/test_memory_tracker_launch.py.)"""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grokray.spec.build import load_spec
from grokray.tracking.queries import children_query, parents_query
from grokray.tracking.records import RunStatus
from grokray.tracking.store import Store

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"
OVERRIDES = ["train.steps=12000", "phases.budget=12000", "phases.stop_when_classified=false"]


def recipe(title: str) -> str:
    """The python block that follows `**title**` in docs/ARCHITECTURE.md."""
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    after = page[page.index(f"**{title}**"):]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


def driver_script(tmp_path: Path, n: int) -> Path:
    """The recipe as the body of `drive(spec, options)`, with the imports its names need, run as a program."""
    body = textwrap.indent(recipe("A driver."), "    ")
    script = tmp_path / "my_driver.py"
    script.write_text(f'''import sys, time
from grokray.plan.expand import expand
from grokray.run.launch import Launch
from grokray.run.options import LaunchOptions
from grokray.spec.build import load_spec
from grokray.tracking.schema import EXPERIMENT_PATH_TAG


def drive(spec, options):
{body}

spec = load_spec({str(QUICKSTART)!r}, {[*OVERRIDES, f"resources.pack_size={n // 2}"]!r}, scale="smoke")
summary = drive(spec, LaunchOptions(resume=sys.argv[1] == "resume", tracking_uri=sys.argv[2], storage=sys.argv[3],
                                    max_concurrent=1, checkpoint_every=200, progress="never"))
print("STATUS", summary.status, summary.configurations, flush=True)
''')
    return script


def children(uri: str) -> list:
    store = Store(uri)
    exp = store.experiment_id("quickstart")
    if exp is None:
        return []
    parents = store.tracker.search([exp], parents_query(), 10)[0]
    return [c for p in parents for c in store.tracker.search([exp], children_query(p.run_id), 1000)[0]]


@pytest.mark.slow(reason="90-157 s; it checks docs/ARCHITECTURE.md's driver block, whose resume is the launch layer's, "
                         "and the Ctrl-C resume of test_reliability_never_waits runs in CI")
def test_a_driver_written_from_the_recipe_resumes_after_ctrl_c(tmp_path):
    n = len(load_spec(QUICKSTART, OVERRIDES, scale="smoke").points())
    script, uri, storage = driver_script(tmp_path, n), f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "results")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    first = subprocess.Popen([sys.executable, str(script), "new", uri, storage], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while True:  # Ctrl-C once the first pack is finished and the second has started logging
        assert first.poll() is None, first.stdout.read()
        assert time.time() < deadline, "the recipe's driver did not progress"
        runs = children(uri) if list(Path(storage).glob("quickstart_*")) else []
        finished = [r for r in runs if "grokray.phase" in r.tags]
        if len(finished) == n // 2 and len(runs) == n and any(r.metrics for r in runs if r not in finished):
            break
        time.sleep(0.5)
    first.send_signal(signal.SIGINT)
    out, _ = first.communicate(timeout=180)
    done_before = {r.tags["grokray.trial_key"]: r.end_ms for r in children(uri) if "grokray.phase" in r.tags}
    assert len(done_before) == n // 2, out

    again = subprocess.run([sys.executable, str(script), "resume", uri, storage], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=400)
    assert again.returncode == 0 and f"STATUS {RunStatus.FINISHED} {n}" in again.stdout, again.stdout + again.stderr
    after = children(uri)
    keys = [r.tags["grokray.trial_key"] for r in after]
    assert len(keys) == len(set(keys)) == n  # one run per configuration: the resume made none twice
    by_key = {r.tags["grokray.trial_key"]: r for r in after}
    assert all(by_key[k].end_ms == end for k, end in done_before.items())  # the finished pack was not trained again
    assert all(r.status == RunStatus.FINISHED and "grokray.phase" in r.tags for r in after)
    assert max(p.step for p in Store(uri).curve(after[0].run_id, "train/loss")) == 12000
