"""A sweep's packs trained on one device, one after another, against the dry-run estimate's training part, with the
GPU's utilisation sampled meanwhile (issue 29, items 3 and 4 without Ray or MLflow).

    python3 benchmarks/bench_gpu_packs.py sweeps/quickstart.yaml [--device cuda] [-s KEY=VALUE ...]

The device machine's image has torch but neither Ray nor MLflow, and Ray's wheel alone (79 MB) is more than a
device call may carry, so this measures what `grokray run` would do on the GPU minus its fixed costs (Ray, worker
start, MLflow): every pack built and trained to its members' stops as the sweep trainable does, and the estimate's
per-pack seconds without its fixed start-up. Both sides are timed in the same run on the same device.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time

import torch

from grokray.engine import make_trainer
from grokray.engine.sizing import usable_threads
from grokray.plan.estimate import (
    MEMBER_S,
    PACK_START_S,
    estimate_plan,
    pack_seconds,
)
from grokray.plan.expand import expand
from grokray.spec import load_spec


class GpuSampler:
    """nvidia-smi's utilisation and memory once a second, in the background."""

    def __init__(self):
        self.proc = None
        if shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                                          "--format=csv,noheader,nounits", "-l", "1"],
                                         stdout=subprocess.PIPE, text=True)

    def stop(self) -> str:
        if self.proc is None:
            return "no nvidia-smi"
        self.proc.terminate()
        rows = [line.split(",") for line in self.proc.communicate()[0].splitlines() if "," in line]
        util = [float(r[0]) for r in rows]
        mem = [float(r[1]) for r in rows]
        if not util:
            return "no samples"
        return (f"GPU utilisation mean {sum(util) / len(util):.0f}% (max {max(util):.0f}%, {len(util)} samples at "
                f"1 s), memory used max {max(mem):,.0f} MiB")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("-s", "--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--max-packs", type=int, help="train only the first N packs (the estimate is cut alike)")
    args = parser.parse_args()
    gpu = args.device.startswith("cuda")
    spec = load_spec(args.spec, [*args.set, *(["resources.gpu=1"] if gpu else [])])
    torch.set_num_threads(usable_threads(spec.resources.cpu))  # what the pack's Tune trial gets
    free = torch.cuda.mem_get_info(args.device)[0] if gpu else None
    plan = expand(spec, gpu_free_bytes=free)
    packs = plan.packs[: args.max_packs] if args.max_packs else plan.packs
    est = estimate_plan(plan)
    where = torch.cuda.get_device_name(args.device) if gpu else "cpu"
    print(f"# {time.strftime('%Y-%m-%d')} {where}, torch {torch.__version__}: {args.spec} {' '.join(args.set)}")
    print(f"# {plan.n_configs} configurations in {len(plan.packs)} packs ({est.packing}); estimate basis: "
          f"{est.basis}")
    print("| pack | members | model-steps trained | estimate (training) | measured | measured / estimate | "
          "model-steps/s |")
    print("|---|---|---|---|---|---|---|")
    sampler = GpuSampler() if gpu else None
    total_est = total_wall = total_steps = 0.0
    for i, pack in enumerate(packs):
        training = pack_seconds(pack, est.pack_costs[i], use=est.use) - PACK_START_S - MEMBER_S * len(pack.members)
        start = time.perf_counter()
        trainer = make_trainer([m.config for m in pack.members], device=args.device)
        trainer.run()
        if gpu:
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
        steps = sum(r.steps_run for r in trainer.results())
        total_est, total_wall, total_steps = total_est + training, total_wall + wall, total_steps + steps
        print(f"| {i} | {len(pack.members)} | {steps:,} | {training:.1f} s | {wall:.1f} s | {wall / training:.2f} | "
              f"{steps / wall:,.0f} |", flush=True)
    print(f"| all | {sum(len(p.members) for p in packs)} | {total_steps:,.0f} | {total_est:.1f} s | {total_wall:.1f} s "
          f"| {total_wall / total_est:.2f} | {total_steps / total_wall:,.0f} |")
    print(f"# dry-run estimate of the whole sweep (fixed costs included): expected {est.seconds / 60:.1f} min, "
          f"upper {est.upper_seconds / 60:.1f} min")
    if sampler:
        print("# " + sampler.stop())


if __name__ == "__main__":
    main()
