"""`grokray` command line. Parses arguments and calls library functions; no logic of its own."""

from __future__ import annotations

import argparse
import sys

from .errors import SpecError


def _train(args) -> int:
    import torch

    from .engine import run_trial
    from .report import curve_table
    from .spec import load_spec

    spec = load_spec(args.spec, args.set, args.scale)
    config = spec.first_trial()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SpecError("--device", "cuda requested but no CUDA device is available; allowed here: cpu")
    result = run_trial(config, device=args.device)
    print(curve_table(result))
    print(f"phase: {result.phase}  (train>=thr at step {result.step_train}, val>=thr at step {result.step_val}, "
          f"gap {result.gap}, steps run {result.steps_run})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grokray", description="Phase-diagram sweeps of grokking models.")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("spec", help="YAML spec file")
        p.add_argument("-s", "--set", action="append", default=[], metavar="KEY=VALUE",
                       help="dotted override, e.g. -s optim.decoder.lr=3e-4 (repeatable)")
        p.add_argument("--scale", choices=["smoke"], default=None, help="apply the spec's smoke: preset")

    train = sub.add_parser("train", help="train one configuration (the first sweep point) and print its phase")
    common(train)
    train.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    train.set_defaults(func=_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SpecError as exc:
        print(f"grokray: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("grokray: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
