"""Your own module packed, against your own plain PyTorch loop of the same module: side by side, in one run.

    .venv/bin/python benchmarks/bench_module.py --factory mylab.models:make_net --kwargs '{"width": 256}' \\
        --task '{"name": "modular", "op": "mul", "p": 97, "train_fraction": 0.3}' [--path DIR] [--ks 1,32,128]
    .venv/bin/python benchmarks/bench_module.py --fixtures     # the table in benchmarks/README.md
    .venv/bin/python benchmarks/bench_module.py --fixtures --device cuda --ks 1,32,256,1024   # on a card

For each K it measures model-steps/s of a pack of K members (the `module` family, K seeds of one setting, as a
sweep packs them) and of the loop a researcher writes for one model: `torch.manual_seed(seed); net = factory(...)`,
`torch.optim.AdamW`, the same batches, and a gradient-free pass over every point at the pack's cadence (every step
where the pack measures every step, else every `eval_every` steps and at the curve's log-spaced record steps), so
both do the work a phase classification needs, over the same steps. The two alternate, best of two rounds each;
the ratio is the pack's rate per model over the loop's. One thread.

--fixtures measures three modules in tests/fixtures/userpkg: two written the ordinary way (a one-hot MLP calling
`one_hot(x, p).float()`, width 256, x·y mod 97 at fraction 0.3; a one-layer transformer with
`nn.MultiheadAttention`, d 128, x+y mod 23 at fraction 0.5) and the overhead-bound Liu toy (width 32).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

from grokray.engine import PackTrainer
from grokray.models.user_module import build_module
from grokray.spec.build import build_spec

USERPKG = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "userpkg"
OPTIM = {"default": {"name": "adamw", "lr": 1e-3, "weight_decay": 1.0}}
FIXTURES = {
    "one-hot MLP, width 256": ("userpkg.models:OneHotMLP", {"width": 256},
                               {"name": "modular", "op": "mul", "p": 97, "train_fraction": 0.3}),
    "MHA transformer, d 128": ("userpkg.models:MHATransformer", {"d_model": 128, "n_heads": 4},
                               {"name": "modular", "op": "add", "p": 23, "train_fraction": 0.5}),
    "Liu toy, width 32": ("userpkg.models:LiuToy", {"hidden": [32, 32]},
                          {"name": "addition", "p": 10, "train_size": 45}),
}


def configs_of(factory: str, kwargs: dict, task: dict, k: int):
    raw = {"task": task, "model": {"name": "module", "factory": factory, "kwargs": kwargs}, "optim": OPTIM,
           "train": {"steps": 10**6}, "phases": {"budget": 10**6, "stop_when_classified": False},
           "seeds": list(range(k))}
    return build_spec(raw).trials()


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def pack_rate(configs, seconds: float, device: str) -> tuple[float, PackTrainer, int]:
    """(model-steps/s, the trainer, the steps timed): 20 warm-up steps, then 20 at a time for about `seconds`."""
    trainer = PackTrainer(configs, device=device)
    trainer.compact = False
    trainer.run(until=20)
    synchronize(device)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        trainer.run(until=trainer.step + 20)
    synchronize(device)
    return len(configs) * (trainer.step - 20) / (time.perf_counter() - start), trainer, trainer.step - 20


def plain_loop_rate(config, trainer: PackTrainer, steps: int, device: str) -> float:
    """One model the ordinary way, doing what the pack's member does each step: a training step on its split (full
    batch, or a random batch of the pack's size) and, at the pack's cadence, the loss and accuracy of every point.
    Timed over the pack's own steps (20 to 20 + `steps`): the curve's record steps thin out as training goes on."""
    data = config.task.data()
    train, _ = config.task.split(data, config.seed)
    torch.manual_seed(config.seed)
    net = build_module(config.model, data).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=OPTIM["default"]["lr"], weight_decay=OPTIM["default"]["weight_decay"])
    x, y, xs, ys = (t.to(device) for t in (data.x[train], data.y[train], data.x, data.y))
    every = 1 if trainer.joint or trainer.split else trainer.eval_every
    records = trainer.record_set  # the curve's points, also measured (log-spaced: dense in the first steps)
    batch = None if trainer.full_batch else trainer.batch_size

    def step(t):
        rows = slice(None) if batch is None else torch.randint(len(x), (batch,), device=device)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x[rows]), y[rows]).backward()
        opt.step()
        if t % every == 0 or t in records:  # loss and accuracy on every point, as grokray measures a member
            with torch.no_grad():
                out = net(xs)
                torch.nn.functional.cross_entropy(out, ys, reduction="none"), out.argmax(-1) == ys

    for t in range(20):
        step(t)
    synchronize(device)
    start = time.perf_counter()
    for t in range(20, 20 + steps):
        step(t)
    synchronize(device)
    return steps / (time.perf_counter() - start)


def bench(label: str, factory: str, kwargs: dict, task: dict, ks: list[int], seconds: float,
          device: str = "cpu") -> None:
    for k in ks:
        configs = configs_of(factory, kwargs, task, k)
        pack, plain, trainer = 0.0, 0.0, None
        for _ in range(2):  # alternately, the better of two: a neighbour's burst hits one round only
            rate, trainer, steps = pack_rate(configs, seconds, device)
            pack = max(pack, rate)
            plain = max(plain, plain_loop_rate(configs[0], trainer, steps, device))
        how = "joint" if trainer.joint else "split" if trainer.split else f"every {trainer.eval_every}"
        print(f"| {label} | {how} | {k} | {pack:,.1f} | {plain:,.1f} | {pack / plain:.2f}x |", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--factory", help="package.module:callable, the factory a spec's model.factory names")
    parser.add_argument("--kwargs", default="{}", help="JSON: the factory's model.kwargs")
    parser.add_argument("--task", default='{"name": "modular", "op": "add", "p": 97, "train_fraction": 0.3}',
                        help="JSON: the spec's task block")
    parser.add_argument("--path", default=".", help="the directory that holds your package (default: here)")
    parser.add_argument("--ks", default="1,32,128", help="pack sizes")
    parser.add_argument("--quick", action="store_true", help="0.5 s per point instead of 3 s")
    parser.add_argument("--fixtures", action="store_true", help="the three modules of benchmarks/README.md")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where both train (default: cpu)")
    args = parser.parse_args(argv)
    if not args.fixtures and not args.factory:
        parser.error("give --factory package.module:callable (or --fixtures)")
    torch.set_num_threads(1)
    sys.path.insert(0, str(USERPKG if args.fixtures else Path(args.path).resolve()))
    ks, seconds = [int(v) for v in args.ks.split(",")], 0.5 if args.quick else 3.0
    where = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or platform.machine()
    print(f"# {time.strftime('%Y-%m-%d')} {where}, 1 CPU thread, torch {torch.__version__}; model-steps/s")
    print("| module | pack measures | K | pack | plain loop | pack / plain |")
    print("|---|---|---|---|---|---|")
    if args.fixtures:
        for label, (factory, kwargs, task) in FIXTURES.items():
            bench(label, factory, kwargs, task, ks, seconds, args.device)
    else:
        bench(args.factory, args.factory, json.loads(args.kwargs), json.loads(args.task), ks, seconds, args.device)


if __name__ == "__main__":
    main()
