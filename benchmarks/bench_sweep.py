"""The same 8x8 toy grid (Liu's addition, decoder lr x weight decay) three ways, on this machine's CPUs (or, with
`--device cuda`, on its card: every trial a `--gpu-share` of it):

(a) plain Ray Tune as a user would write it: one trial per configuration, a hand-written torch training
    loop (an nn.Module and torch's AdamW), `tune.report` every 100 steps, `MLflowLoggerCallback`, and on a card a
    fractional `num_gpus` per trial;
(b) `grokray run` (packed trials, batched MLflow logging);
(c) bare: grokray's own packs trained in plain processes, no Ray and no MLflow.

All train every configuration for the full budget (grokray's early stop is switched off, so the work is
equal). Prints wall times, the ratio plain / grokray, and the share of grokray's time spent in Ray and MLflow two
ways: from inside (core-time outside the packs' training loops) and from outside (1 - bare / grokray wall).

    .venv/bin/python benchmarks/bench_sweep.py [--steps 3000] [--only grokray,plain]   # add ,bare for (c)
    python benchmarks/bench_sweep.py --device cuda --only plain --json plain.json     # one side per call, so that
    python benchmarks/bench_sweep.py --device cuda --only grokray --json grokray.json # each has its card samples
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LRS = [float(v) for v in np.logspace(-4, -2, 8)]
WDS = [0, 1, 2, 3, 5, 8, 13, 20]


def use_grid(n: int) -> None:
    """An n x n corner of the grid (--grid: a CPU check of a device call runs 3 x 3; plain Tune's trials cost seconds
    each there)."""
    global LRS, WDS
    LRS, WDS = [float(v) for v in np.logspace(-4, -2, n)], WDS[:n]
P, TRAIN_SIZE = 10, 45


# -- (a) plain Ray Tune ------------------------------------------------------------------------------------
def plain_trainable(config):
    import torch
    from ray import tune
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(config["seed"])
    device = torch.device(config.get("device", "cpu"))
    pairs = [(i, j) for i in range(P) for j in range(i, P)]  # unordered pairs, 55 samples
    a = torch.tensor([i for i, _ in pairs], device=device)
    b = torch.tensor([j for _, j in pairs], device=device)
    y = a + b  # 2p - 1 classes
    perm = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(config["seed"])).to(device)
    tr, va = perm[:TRAIN_SIZE], perm[TRAIN_SIZE:]

    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(P, 1)
            nn.init.uniform_(self.emb.weight, -0.5, 0.5)
            self.dec = nn.Sequential(nn.Linear(1, 200), nn.Tanh(), nn.Linear(200, 200), nn.Tanh(),
                                     nn.Linear(200, 2 * P - 1))

        def forward(self, a, b):
            return self.dec(self.emb(a) + self.emb(b))

    model = Toy().to(device)
    opt = torch.optim.AdamW([
        {"params": model.emb.parameters(), "lr": 1e-3, "weight_decay": 0.0},
        {"params": model.dec.parameters(), "lr": config["lr"], "weight_decay": config["wd"]},
    ])
    loss_fn = nn.CrossEntropyLoss()
    for step in range(config["steps"] + 1):
        if step % 100 == 0:
            with torch.no_grad():
                out = model(a, b)
                metrics = {
                    "train_loss": loss_fn(out[tr], y[tr]).item(),
                    "train_acc": (out[tr].argmax(1) == y[tr]).float().mean().item(),
                    "val_loss": loss_fn(out[va], y[va]).item(),
                    "val_acc": (out[va].argmax(1) == y[va]).float().mean().item(),
                    "step": step,
                }
            tune.report(metrics)
        if step == config["steps"]:
            break
        opt.zero_grad()
        loss_fn(model(a[tr], b[tr]), y[tr]).backward()
        opt.step()


def run_plain(steps: int, workdir: Path, device: str = "cpu", share: float = 0.0) -> dict:
    import ray
    from ray import tune
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    t0 = time.perf_counter()
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    uri = f"sqlite:///{workdir}/plain-mlflow.db"
    tuner = tune.Tuner(
        tune.with_resources(plain_trainable, {"cpu": 1, **({"gpu": share} if device == "cuda" else {})}),
        param_space={"lr": tune.grid_search(LRS), "wd": tune.grid_search(WDS), "seed": 0, "steps": steps,
                     "device": device},
        run_config=tune.RunConfig(name="plain", storage_path=str(workdir / "plain-results"), verbose=0,
                                  callbacks=[MLflowLoggerCallback(tracking_uri=uri, experiment_name="plain")]),
    )
    results = tuner.fit()
    wall = time.perf_counter() - t0
    ray.shutdown()
    assert not results.errors, results.errors
    return {"wall_s": wall, "trials": len(results), "model_steps": len(results) * steps}


def grid_spec(steps: int, share: float = 0.0):
    """The plain baseline's grid as a grokray spec; `share`: each pack's share of the card (0: on the CPUs)."""
    from grokray.spec.build import load_spec

    overrides = [
        f"sweep.optim.decoder.lr.logspace=[-4, -2, {len(LRS)}]",
        f"sweep.optim.decoder.weight_decay.values={json.dumps(WDS)}",
        f"train.steps={steps}", f"phases.budget={steps}", "phases.stop_when_classified=false",
        "seeds=[0]",  # the plain Tune baseline trains seed 0 of each cell
        *([f"resources.gpu={share}"] if share else []),
    ]
    return load_spec(ROOT / "sweeps" / "quickstart.yaml", overrides)


# -- (b) grokray run ---------------------------------------------------------------------------------------
def run_grokray(steps: int, workdir: Path, share: float = 0.0) -> dict:
    """grokray's wall time, split (in core-seconds: wall x concurrent packs) into Ray start-up, scheduling and
    worker start-up (and the idle tail), per-pack set-up (trainer build, checkpoints, Tune reports), MLflow
    (the workers' time in MLflow calls) and training."""
    from grokray.run.grid import run_sweep
    from grokray.run.options import LaunchOptions

    spec = grid_spec(steps, share)
    options = LaunchOptions(tracking_uri=f"sqlite:///{workdir}/grokray-mlflow.db",
                           storage=str(workdir / "grokray-results"), progress="never")
    t0 = time.perf_counter()
    summary = run_sweep(spec, options)  # validates, starts Ray (opening MLflow meanwhile), runs, stops Ray
    wall = time.perf_counter() - t0
    t = summary.timings
    assert summary.errored_trials == 0
    slots = max(1, min(summary.packs, os.cpu_count() or 1))
    m = summary.trial_metrics
    train = sum(x.get("train_s", 0.0) for x in m)
    tracker_worker = sum(x.get("tracker_s", 0.0) for x in m)
    trial = sum(x.get("trial_s", 0.0) for x in m)
    core_s = wall * slots
    ends = [x["timestamp"] for x in m if "timestamp" in x]  # Tune's wall clock at each pack's last result (1 s)
    idle = sum(max(ends) - e for e in ends) if len(ends) == len(m) else 0.0
    parts = {  # core-seconds
        "ray_start_stop": (t["ray_start"] + t["ray_stop"]) * slots,
        # validation, MLflow parent run, Tune's start, trial actors' start and imports, Tune's end, closing the
        # parent run: everything outside Ray's own start and stop and the packs' trial functions
        "scheduling_worker_start": (wall - t["ray_start"] - t["ray_stop"]) * slots - trial - idle,
        "idle_after_a_pack_ends": idle,  # packs of unequal cost (members that diverge stop early): not Ray or MLflow
        "pack_setup_checkpoints_reports": trial - train - tracker_worker,
        "tracker": tracker_worker,
        "training": train,
    }
    return {
        "wall_s": wall, "configurations": summary.configurations, "packs": summary.packs,
        "model_steps": summary.configurations * steps, "train_core_s": train,
        "tracker_worker_s": tracker_worker, "tracker_calls": sum(x.get("tracker_calls", 0) for x in m),
        "overhead_share": 1 - train / core_s, "mlflow_share": tracker_worker / core_s,
        "ray_mlflow_share": 1 - (train + idle) / core_s,
        "shares": {k: v / core_s for k, v in parts.items()},
        "phase_counts": summary.phase_counts, "timings": t,
    }


# -- (c) the same packs bare: no Ray, no MLflow --------------------------------------------------------------
def _train_bare(member_configs: list[dict], chunk: int) -> float:
    """One fresh process per pack, as a script would run it: import, build the trainer, train in the trainable's
    chunks. Returns the seconds spent training."""
    import torch

    from grokray.engine import make_trainer
    from grokray.spec.trial import TrialConfig

    torch.set_num_threads(1)
    trainer = make_trainer([TrialConfig.from_dict(c) for c in member_configs], device="cpu")
    t0 = time.perf_counter()
    while not trainer.run(until=trainer.step + chunk):
        pass
    return time.perf_counter() - t0


def run_bare(steps: int) -> dict:
    """grokray's packs (the plan `grokray run` makes on this machine) trained without Ray or MLflow, as many at
    once as grokray runs: process start, imports, trainer build and training. grokray's wall time minus this is
    what Ray and MLflow cost, measured from outside."""
    import multiprocessing as mp

    from grokray.plan.expand import expand, local_slots
    from grokray.run.options import LaunchOptions

    spec = grid_spec(steps)
    slots = local_slots(spec, os.cpu_count())
    plan = expand(spec, slots=slots)
    packs = [[m.config.to_dict() for m in p.members] for p in plan.packs]
    chunk = LaunchOptions().checkpoint_every
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(min(slots, len(packs))) as pool:
        train_s = pool.starmap(_train_bare, [(p, chunk) for p in packs])
    return {"wall_s": time.perf_counter() - t0, "packs": len(packs), "train_s": train_s}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--gpu-share", type=float, default=0.125,
                        help="on cuda: each plain trial's num_gpus and each grokray pack's resources.gpu")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--grid", type=int, default=8, choices=range(2, 9), metavar="N",
                        help="an N x N grid of learning rate and weight decay (default 8, the whole grid)")
    parser.add_argument("--only", default="grokray,plain",
                        help="comma-separated subset of grokray,bare,plain; bare runs before and after grokray "
                             "(on a noisy host its +-10%% drift between halves swamps the share it measures)")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if not only <= {"grokray", "bare", "plain"}:
        parser.error(f"--only: {args.only!r}; choose from grokray, bare, plain")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    if "bare" in only and args.device != "cpu":
        parser.error("--only bare: on the CPU only")
    share = args.gpu_share if args.device == "cuda" else 0.0
    use_grid(args.grid)
    out = {"machine": f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
           "date": time.strftime("%Y-%m-%d"), "steps": args.steps, "grid": f"{len(LRS)}x{len(WDS)}",
           "device": args.device, "gpu_share": share}
    def bare():
        b = run_bare(args.steps)
        out.setdefault("bare", []).append(b)
        print(f"bare packs (no Ray, no MLflow): {b['wall_s']:.1f} s for {b['packs']} packs, training "
              + ", ".join(f"{t:.1f}" for t in b["train_s"]) + " s", flush=True)

    with tempfile.TemporaryDirectory() as d:
        if "bare" in only:
            bare()
        if "grokray" in only:
            out["grokray"] = g = run_grokray(args.steps, Path(d), share)
            print(f"grokray: {g['wall_s']:.1f} s for {g['configurations']} configurations in {g['packs']} packs "
                  f"({g['model_steps'] / g['wall_s']:.0f} model-steps/s); outside training (Ray + MLflow) "
                  f"{g['overhead_share']:.1%} of core-time, MLflow alone {g['mlflow_share']:.1%} "
                  f"({g['tracker_calls']} requests)", flush=True)
            print("  wall: " + ", ".join(f"{k} {v:.1f} s" for k, v in g["timings"].items()), flush=True)
            print("  core-time: " + ", ".join(f"{k} {v:.1%}" for k, v in g["shares"].items()), flush=True)
            print(f"  Ray + MLflow (everything but training and idle cores): {g['ray_mlflow_share']:.1%}", flush=True)
        if "bare" in only and "grokray" in only:
            bare()  # bare runs before and after grokray: this host drifts by +-10% over minutes
            mean_bare = sum(b["wall_s"] for b in out["bare"]) / len(out["bare"])
            out["ray_mlflow_wall_share"] = 1 - mean_bare / out["grokray"]["wall_s"]
            print(f"Ray + MLflow, measured from outside (1 - mean bare / grokray wall): "
                  f"{out['ray_mlflow_wall_share']:.1%}", flush=True)
        if "plain" in only:
            out["plain"] = p = run_plain(args.steps, Path(d), args.device, share)
            print(f"plain Ray Tune: {p['wall_s']:.1f} s for {p['trials']} trials "
                  f"({p['model_steps'] / p['wall_s']:.0f} model-steps/s)", flush=True)
        if "plain" in out and "grokray" in out:
            out["ratio"] = out["plain"]["wall_s"] / out["grokray"]["wall_s"]
            print(f"wall-time ratio plain / grokray: {out['ratio']:.2f}x")
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
