"""`train.precision` against fp32 on the phases it produces: every configuration of a spec trained in this process
(the engine's packs, no Ray or MLflow) once per precision, and each run's phase and crossings held against fp32's.

    .venv/bin/python benchmarks/compare_precision.py sweeps/quickstart.yaml [--scale smoke] [--device cuda]
                                                      [--precisions fp32,tf32,bf16] [-s KEY=VALUE ...]

Prints one table row per precision: runs, how many changed phase against fp32 (and to what), how many kept their
phase but moved a crossing by more than 10 %, the median crossing ratio, and the wall time. On a CPU tf32 is fp32
(it only changes CUDA matmuls) and bf16 runs under autocast; on a card all three are what a user would choose from.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

import torch

from grokray.engine import make_trainer
from grokray.plan.expand import expand
from grokray.spec.build import load_spec


def train_all(spec_path: str, scale: str | None, overrides: list[str], precision: str, device: str) -> list:
    """(point, result) for every configuration of the spec at `precision`, packed as a sweep would pack them."""
    spec = load_spec(spec_path, [*overrides, f"train.precision={precision}"], scale=scale)
    plan = expand(spec, slots=1)
    out = []
    for pack in plan.packs:
        trainer = make_trainer([m.config for m in pack.members], device=device)
        trainer.run()
        out += [(run_key(m), r) for m, r in zip(pack.members, trainer.results(), strict=True)]
    return out


def run_key(member) -> tuple:
    """A run's swept point and seed: what runs are matched on across precisions."""
    return (*sorted((k, repr(v)) for k, v in member.point.items()), ("seed", member.config.seed))


def compare(reference: list, candidate: list) -> dict:
    ref = dict(reference)
    changed, moved, ratios = Counter(), 0, []
    for key, r in candidate:
        a = ref[key]
        if a.phase != r.phase:
            changed[f"{a.phase} -> {r.phase}"] += 1
            continue
        for x, y in ((a.step_train, r.step_train), (a.step_val, r.step_val)):
            if x and y:
                ratios.append(y / x)
                moved += abs(y / x - 1) > 0.10
    return {"changed": changed, "moved": moved, "ratio": statistics.median(ratios) if ratios else float("nan")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec")
    parser.add_argument("--scale", default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precisions", default="fp32,tf32,bf16")
    parser.add_argument("-s", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    print(f"# {time.strftime('%Y-%m-%d')} {args.spec} (scale {args.scale or 'as written'}) on {where}, "
          f"torch {torch.__version__}")
    print("| precision | runs | phase changed vs fp32 | crossing moved > 10 % | median crossing ratio | wall s |")
    print("|---|---|---|---|---|---|")
    reference = None
    for precision in args.precisions.split(","):
        start = time.perf_counter()
        runs = train_all(args.spec, args.scale, args.overrides, precision, args.device)
        wall = time.perf_counter() - start
        if reference is None:
            reference = runs
        c = compare(reference, runs)
        changes = sum(c["changed"].values())
        detail = f" ({', '.join(f'{k}: {n}' for k, n in c['changed'].most_common())})" if changes else ""
        print(f"| {precision} | {len(runs)} | {changes}{detail} | {c['moved']} | {c['ratio']:.3f} | {wall:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
