"""Packed versus unpacked training throughput, measured side by side in one run on this machine.

For each model and K in {1, 8, 32, 128} it trains K copies of one configuration as a pack and reports
model-steps/s, the gain over the unpacked engine (K = 1), achieved matmul GFLOP/s and that as a fraction of the
sgemm peak measured at the start of the same run. A plain PyTorch loop (nn.Module + torch.optim.AdamW, what a
user would write) is measured too, as the outside reference. Warm-up steps are excluded. At each K the variants
alternate over two rounds (one with --quick), the better of each kept. One thread.

    .venv/bin/python benchmarks/bench_pack.py [--quick] [--capture] [--unfused] [--rqi] [--models toy32,...]
                                              [--device cuda] [--ks 1,32,...] [--generic]

"eager" is the reference step (train.capture: eager; on a CPU, torch's fused Adam/AdamW kernel once per member
row); --unfused adds the same pack with the optimizer written as ~11 elementwise passes over [K, P] (what the
engine did before), --capture the same pack with train.capture: compiled (issue 50: forward, backward and updates
compiled once by torch.compile, CUDA graphs on a GPU), side by side with eager at each K; its compilation is
timed apart and left out of the rate. --rqi adds the toy without its RQI curve (Liu's representation
quality index, measured at the record steps), to show what that curve costs.

--generic (issue 60) adds, beside the hand-stacked family at each K, the same architecture written as a plain
torch.nn.Module (tests/fixtures/userpkg/userpkg/models.py: LiuToy, PowerTransformer) and packed by the `module` family
with torch.func; with --capture, compiled too. Its row says how many times slower than the hand-stacked pack it is.

--methods (issue 37) measures instead each de-grokking method (Grokfast EMA and MA, ⊥Grad, the held weight norm,
StableMax, Muon) against plain AdamW at each K, alternately in the same run.

--device cuda (issue 29) runs the same on the GPU, K = 1, 32, 256, 1024, 4096 by default, with the fp32 matmul peak
and the TF32 matmul peak
measured there and the pack's peak GPU memory per K; a K that does not fit is reported as out of memory, not
skipped, since what limits the largest K is one of the things measured.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

from grokray.engine import PackTrainer
from grokray.models import MODELS
from grokray.spec.build import build_spec

TOY = {
    "task": {"name": "addition", "p": 10, "train_size": 45},
    "model": {"name": "toy", "embed_dim": 1, "hidden": [200, 200], "head": "classification"},
    "optim": {"default": {"name": "adamw", "lr": 1e-3}},
    "phases": {"stop_when_classified": False},
}
MODELS_TO_BENCH = {
    # name: (raw spec, overrides) -- the overhead-bound and the compute-bound regimes of issue 4
    "toy32": (TOY, ["model.hidden=[32, 32]"]),
    "toy200": (TOY, []),
    "quadratic": (
        {"task": {"name": "modular", "op": "add", "p": 23, "train_fraction": 0.5},
         "model": {"name": "quadratic", "width": 64}, "optim": {"default": {"name": "adamw", "lr": 1e-3}},
         "phases": {"stop_when_classified": False}},
        [],
    ),
    "transformer": (
        {"task": {"name": "modular", "op": "add", "p": 23, "train_fraction": 0.5},
         "model": {"name": "transformer", "d_model": 32, "n_heads": 4, "d_mlp": 128},
         "optim": {"default": {"name": "adamw", "lr": 1e-3, "weight_decay": 1.0}},
         "phases": {"stop_when_classified": False}},
        [],
    ),
    # the Grokfast benchmark at the paper's scale (issue 37): x*y mod 97, width 128, batch 512
    "grokfast": (
        {"task": {"name": "modular", "op": "mul", "p": 97, "nonzero_b": True, "train_fraction": 0.5},
         "model": {"name": "transformer", "n_layers": 2, "d_model": 128, "n_heads": 4, "d_mlp": 512},
         "optim": {"default": {"name": "adamw", "lr": 1e-3, "betas": [0.9, 0.98], "weight_decay": 0.0}},
         "train": {"batch_size": 512}, "phases": {"stop_when_classified": False}},
        [],
    ),
}


# The hand-stacked families' architectures as plain torch modules of a user's (issue 60), packed by `module`.
USERPKG = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "userpkg"
GENERIC = {
    "toy32": {"name": "module", "factory": "userpkg.models:LiuToy", "kwargs": {"hidden": [32, 32]}},
    "toy200": {"name": "module", "factory": "userpkg.models:LiuToy", "kwargs": {"hidden": [200, 200]}},
    "transformer": {"name": "module", "factory": "userpkg.models:PowerTransformer",
                    "kwargs": {"d_model": 32, "n_heads": 4, "d_mlp": 128}},
}


def variant_spec(name: str, variant: str):
    """(raw spec, overrides) of model `name` as `variant` measures it: the module family's variants swap in the plain
    module of the same architecture (and drop the hand-stacked family's model overrides)."""
    raw, overrides = MODELS_TO_BENCH[name]
    if not variant.startswith("module"):
        return raw, overrides
    return {**raw, "model": GENERIC[name]}, [o for o in overrides if not o.startswith("model.")]


def sgemm_peak(device: str, precision: str = "highest") -> float:
    """GFLOP/s of a large float32 matmul; precision "high" lets a CUDA card use TF32."""
    n = 1024 if device == "cpu" else 8192  # a GPU needs a large product to reach its peak
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    torch.set_float32_matmul_precision(precision)
    try:
        a @ b
        best = min(_timed(lambda: a @ b, 5, device) for _ in range(3))
    finally:
        torch.set_float32_matmul_precision("highest")
    return 2 * n**3 / best / 1e9


def _sync(device: str):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn, n, device="cpu"):
    _sync(device)
    t = time.perf_counter()
    for _ in range(n):
        fn()
    _sync(device)
    return (time.perf_counter() - t) / n


def matmul_flops_per_model_step(trainer: PackTrainer) -> float:
    """Matmul FLOPs of one member per step: forward + backward (3x forward) over the rows that are trained, plus a
    forward over the held-out rows when the step evaluates them separately ("split")."""
    m = trainer.model
    if m.__class__.__name__ == "TransformerModel":
        c = m.cfg
        seq, d = (4 if c.op_token else 3), c.d_model
        per_point = 2 * d * m.head.out_dim
        for i in range(c.n_layers):  # keys/values at every position; the rest where it is used (the last layer: '=')
            keep = 1 if i == c.n_layers - 1 else seq
            per_point += 2 * (2 * d * d * seq + 2 * d * d * keep + 2 * d * c.d_mlp * keep) + 4 * keep * seq * d
    else:  # MLP-shaped families: every 2-D weight is one matmul per sample
        skip = {"embed"}
        if trainer.joint and hasattr(m, "is_full_table") and m.is_full_table(trainer.all_points()[0]):
            skip.add("fc0.w")  # the full symbol table's first layer is broadcast adds, not a matmul
        per_point = 2 * sum(p[0].numel() for name, p in m.named_stacked() if p.dim() == 3 and name not in skip)
    if trainer.joint:
        return 3.0 * per_point * len(trainer.y)
    if trainer.split:
        return per_point * (3.0 * float(trainer.n_train.double().mean()) + float(trainer.n_val.mean()))
    return 3.0 * per_point * trainer.batch_size


# The de-grokking methods (issue 37), each as the overrides that switch it on in every group.
METHODS = {
    "adamw (reference)": [],
    "grokfast ema": ["optim.default.grad_filter=ema"],
    "grokfast ma (window 100)": ["optim.default.grad_filter=ma", "optim.default.filter_window=100"],
    "orthogonal (⊥Grad)": ["optim.default.orthogonal=true"],
    "weight norm held": ["train.weight_norm=initial"],
    "stablemax": ["train.softmax=stablemax"],
    "muon": ["optim.default.name=muon", "optim.default.momentum=0.95"],
}


def methods_table(names: list[str], ks: list[int], seconds: float, device: str) -> None:
    """Each method's model-steps/s beside plain AdamW's, measured alternately at each K (same run, same device)."""
    print("| model | method | K | model-steps/s | cost per step vs AdamW |")
    print("|---|---|---|---|---|")
    for name in names:
        raw, overrides = MODELS_TO_BENCH[name]
        for k in ks:
            best: dict[str, float] = {}
            for _ in range(2):  # two alternating rounds, the better of each: a neighbour's burst hits one only
                for method, extra in METHODS.items():
                    rate, _ = pack_rate(raw, [*overrides, *extra], k, seconds, "eager", device)
                    best[method] = max(rate, best.get(method, 0.0))
            reference = best["adamw (reference)"]
            for method, rate in best.items():
                print(f"| {name} | {method} | {k} | {rate:,.0f} | {reference / rate:.2f}x |", flush=True)


def pack_rate(raw, overrides, k: int, seconds: float, variant: str, device: str = "cpu") -> tuple[float, PackTrainer]:
    if variant == "no-rqi":  # the toy without embeddings to measure: no rqi curve, everything else the same
        from grokray.models.toy import ToyModel

        original, ToyModel.embeddings = ToyModel.embeddings, lambda self: None
        try:
            return pack_rate(raw, overrides, k, seconds, "eager", device)
        finally:
            ToyModel.embeddings = original
    over = [*overrides, "train.steps=1000000", "phases.budget=1000000"]
    over += [f"train.capture={'compiled' if variant.endswith('compiled') else 'eager'}"]
    cfg = build_spec(raw, over).first_trial()
    trainer = PackTrainer([cfg] * k, device=device)
    if variant == "unfused":
        for opt in trainer.optimizers.values():
            opt.fused = None
    warm = time.perf_counter()
    trainer.run(until=20)  # warm-up (and compilation) excluded
    trainer.warmup_seconds = time.perf_counter() - warm
    _sync(device)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        trainer.run(until=trainer.step + 20)
        steps += 20
    _sync(device)
    return k * steps / (time.perf_counter() - start), trainer


def plain_torch_rate(raw, overrides, seconds: float, device: str = "cpu") -> float | None:
    """The loop a user writes for the toy model: nn.Module, torch.optim.AdamW, full batch."""
    cfg = build_spec(raw, overrides).first_trial()
    if cfg.model.registry_name != "toy":
        return None
    data = cfg.task.data()
    train, _ = cfg.task.split(data, 0)
    data.x, data.y = data.x.to(device), data.y.to(device)
    sizes = [cfg.model.embed_dim, *cfg.model.hidden, data.num_classes]
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers += [torch.nn.Linear(a, b)] + ([torch.nn.Tanh()] if i < len(sizes) - 2 else [])
    emb = torch.nn.Embedding(data.vocab_size, cfg.model.embed_dim).to(device)
    dec = torch.nn.Sequential(*layers).to(device)
    opt = torch.optim.AdamW([*emb.parameters(), *dec.parameters()], lr=1e-3)
    x, y = data.x[train.to(device)], data.y[train.to(device)]

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(dec(emb(x[:, 0]) + emb(x[:, 1])), y)
        loss.backward()
        opt.step()
        with torch.no_grad():  # the evaluation a phase classification needs, every step
            dec(emb(data.x[:, 0]) + emb(data.x[:, 1])).argmax(-1)

    for _ in range(20):
        step()
    _sync(device)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        steps += 1
    _sync(device)
    return steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="0.5 s per point instead of 3 s")
    parser.add_argument("--capture", action="store_true", help="also measure train.capture=compiled, beside eager")
    parser.add_argument("--unfused", action="store_true", help="also measure the unfused (11-pass) optimizer")
    parser.add_argument("--rqi", action="store_true", help="also measure the toy without its RQI curve")
    parser.add_argument("--models", default="toy32,toy200,quadratic,transformer",
                        help=f"of {', '.join(MODELS_TO_BENCH)} (grokfast: the paper-scale Grokfast model, opt-in)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--ks", help="pack sizes (default: 1,8,32,128 on a CPU, 1,32,256,1024,4096 on a GPU)")
    parser.add_argument("--generic", action="store_true",
                        help="also the module family on the same architectures (toy32, toy200, transformer)")
    parser.add_argument("--methods", action="store_true",
                        help="instead: each de-grokking method's step cost against plain AdamW (issue 37)")
    args = parser.parse_args()
    gpu = args.device.startswith("cuda")
    ks = [int(v) for v in (args.ks or ("1,32,256,1024,4096" if gpu else "1,8,32,128")).split(",")]
    torch.set_num_threads(1)
    seconds = 0.5 if args.quick else 3.0
    rounds = 1 if args.quick else 2
    peak = sgemm_peak(args.device)
    cpu = f"{platform.processor() or platform.machine()}, 1 thread"
    where = torch.cuda.get_device_name(args.device) if gpu else cpu
    tf32 = f", TF32 {sgemm_peak(args.device, 'high'):.1f}" if gpu else ""
    print(f"# {time.strftime('%Y-%m-%d')} {where}, torch {torch.__version__}; fp32 matmul peak (same run, same "
          f"device): {peak:.1f} GFLOP/s{tf32}")
    if args.methods:
        return methods_table(args.models.split(","), ks, seconds, args.device)
    memory = " peak GPU MiB |" if gpu else ""
    print(f"| model | optimizer | K | model-steps/s | x unpacked (K=1) | matmul GFLOP/s | % of matmul peak |{memory}")
    print("|---|---|---|---|---|---|---|" + "---|" * gpu)
    for name in args.models.split(","):
        raw, overrides = MODELS_TO_BENCH[name]
        if raw["model"]["name"] not in MODELS:
            print(f"| {name} | (model family not registered) | | | | | |")
            continue
        plain = plain_torch_rate(raw, overrides, seconds, args.device)
        if plain:
            print(f"| {name} | plain torch loop (reference) | 1 | {plain:,.0f} | | | |" + " |" * gpu)
        variants = ["eager"] + ["unfused"] * args.unfused + ["compiled"] * args.capture
        variants += ["no-rqi"] * (args.rqi and raw["model"]["name"] == "toy")
        if args.generic and name in GENERIC:
            sys.path.append(str(USERPKG))
            variants += ["module"] + ["module compiled"] * args.capture
        base = {}
        for k in ks:
            measured = {}
            for _ in range(rounds):  # side by side at each K, alternately, the better of the rounds: a load change
                for variant in variants:  # hits every variant alike, and a neighbour's burst one round only
                    measured[variant] = better(measured.get(variant), measure(name, variant, k, seconds, args.device))
            for variant in variants:
                print(row(name, variant, k, measured[variant], base, peak, gpu), flush=True)


def measure(name: str, variant: str, k: int, seconds: float, device: str):
    """(model-steps/s, the trainer, peak GPU memory), or None where the pack does not fit the card."""
    raw, overrides = variant_spec(name, variant)
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    try:
        rate, trainer = pack_rate(raw, overrides, k, seconds, variant, device)
    except torch.cuda.OutOfMemoryError:
        return None
    memory = torch.cuda.max_memory_allocated(device) if device.startswith("cuda") else 0
    return rate, trainer, memory


def better(a, b):
    return b if a is None or (b is not None and b[0] > a[0]) else a


def row(name: str, variant: str, k: int, measured, base: dict, peak: float, gpu: bool) -> str:
    """One table row (`measured`: measure's answer); on a GPU with the pack's peak memory, and a K that does not fit
    says so."""
    if measured is None:
        total = torch.cuda.mem_get_info()[1]
        return f"| {name} | {variant} | {k} | out of memory ({total / 2**30:.0f} GiB card) | | | | |"
    rate, trainer, peak_bytes = measured
    base.setdefault(variant, rate)
    base[(variant, k)] = rate
    if not variant.startswith("module"):  # the module's matmuls are the hand-stacked family's (same architecture)
        base[("flops", k)] = matmul_flops_per_model_step(trainer)
    gflops = rate * base.get(("flops", k), 0.0) / 1e9
    memory = f" {peak_bytes / 2**20:,.0f} |" if gpu else ""
    label = variant
    if variant == "compiled" and ("eager", k) in base:  # the captured step beside the eager one at this K
        label = f"compiled: {rate / base[('eager', k)]:.2f}x eager (compiling {trainer.warmup_seconds:.0f} s)"
    hand = ("compiled" if variant == "module compiled" else "eager", k)
    if variant.startswith("module") and hand in base:  # the plain module packed, beside the hand-stacked pack
        label = f"{variant} (torch.func): {base[hand] / rate:.2f}x slower than hand-stacked {hand[0]}"
    return (f"| {name} | {label} | {k} | {rate:,.0f} | {rate / base[variant]:.1f} | {gflops:.1f} | "
            f"{100 * gflops / peak:.0f}% |{memory}")


if __name__ == "__main__":
    main()
