"""grokray's command line: its commands and flags (cli.py runs them)."""

from __future__ import annotations

import argparse

from .run.options import PROGRESS_MODES
from .spec.keys import SCALES
from .terminal import EXAMPLES, OneLineParser, package_version


def _tracking_flag() -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument("--tracking-uri", default=None, metavar="URI",
                       help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    return flags


def _launch_flags() -> argparse.ArgumentParser:
    """The flags of every command that launches trials (the fields of LaunchOptions)."""
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument("--resume", action="store_true", help="continue the last interrupted launch of this spec (a "
                       "search: its study; stored trials keep their values, none is re-run)")
    flags.add_argument("--max-concurrent", type=int, default=None, metavar="N", help="trials (packs) running at once")
    flags.add_argument("--address", default=None, metavar="ADDR",
                       help="Ray cluster to join (default: $RAY_ADDRESS, else a private local Ray)")
    flags.add_argument("--storage", default=None, metavar="PATH",
                       help="Ray Tune results and checkpoints, and undelivered metrics: a local path or shared/cloud "
                            "URI (default: ./grokray-results; a search's journal defaults to <PATH>/<study>.optuna"
                            ".journal unless search.storage names a journal file or an RDB URL)")
    flags.add_argument("--checkpoint-every", type=int, default=1000, metavar="STEPS", help="steps per chunk; after "
                       "a chunk, a pack reports at most every --report-every seconds")
    flags.add_argument("--report-every", type=float, default=None, metavar="SECONDS",
                       help="how often a pack sends its new curve points to MLflow, checkpoints and reports to "
                            "Tune (default: after a tenth of the pack's time so far, from 5 to 30 s; a search "
                            "every chunk; a node that dies loses at most this much of each "
                            "pack's work)")
    flags.add_argument("--delivery-wait", type=float, default=60.0, metavar="SECONDS", help="after a tracking "
                       "outage, how long to retry held-back metrics before leaving them for `grokray replay` (60)")
    _progress_flag(flags)
    return flags


def _progress_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress", choices=PROGRESS_MODES, default="auto", help="auto: a live line on a terminal, a "
                   "plain line at most every 30 s in a log (nohup, ray job, CI); always: plain lines; never")


def _spec_args(p: argparse.ArgumentParser) -> None:
    """The spec and how it is changed: every command that reads one."""
    p.add_argument("spec", help="YAML spec file")
    p.add_argument("-s", "--set", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted override, e.g. -s optim.decoder.lr=3e-4 (repeatable)")
    p.add_argument("--scale", choices=SCALES, default=None, help="apply the spec's smoke: or reduced: preset "
                   "(paper: the spec as written)")


def _add_train(sub, handlers) -> None:
    train = sub.add_parser("train", help="train one configuration (the first sweep point) and print its phase")
    _spec_args(train)
    train.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to train the configuration "
                       "(default: cpu; cuda needs a CUDA build of torch)")
    train.set_defaults(func=handlers["train"])


def _add_run(sub, handlers, tracking, launching) -> None:
    run = sub.add_parser("run", parents=[launching, tracking],
                         help="run the whole sweep on Ray Tune, tracked in MLflow")
    _spec_args(run)
    run.add_argument("--dry-run", action="store_true",
                     help="print configurations, packs, model-steps and a cost estimate; start nothing")
    run.add_argument("--no-calibrate", action="store_true",
                     help="with --dry-run: assume a flat model-steps/s instead of timing a few packs here (~1 s each)")
    run.add_argument("--adaptive", action="store_true",
                     help="adaptive phase diagram (the spec's adaptive: block, else its defaults); a spec "
                          "with an adaptive: block runs adaptively anyway (-s adaptive=null: full grid)")
    run.add_argument("--max-configs", type=int, default=100_000, metavar="N",
                     help="refuse a sweep that expands to more configurations unless --yes (default: 100000)")
    run.add_argument("--yes", action="store_true", help="run however many configurations the spec expands to")
    run.set_defaults(func=handlers["run"])


def _add_replay(sub, handlers, tracking) -> None:
    replay = sub.add_parser("replay", parents=[tracking],
                            help="deliver metrics a launch saved on disk while MLflow was unreachable")
    replay.add_argument("dir", help="the directory the launch named (<storage>/undelivered/<parent run id>)")
    replay.add_argument("--wait", type=float, default=60.0, metavar="SECONDS",
                        help="keep retrying an unreachable server this long (default: 60)")
    replay.set_defaults(func=handlers["replay"])


def _add_search(sub, handlers, tracking, launching) -> None:
    search = sub.add_parser("search", parents=[launching, tracking], help="Optuna search (inside Ray Tune) for "
                            "the settings that generalize fastest (the spec's search: block); a resumable study")
    _spec_args(search)
    search.add_argument("--n-trials", type=int, default=None, metavar="N",
                        help="trials the study should hold when done (default: search.n_trials)")
    search.add_argument("--dry-run", action="store_true",
                        help="print the study, its space, trials, budget and a cost estimate; start nothing")
    search.add_argument("--no-calibrate", action="store_true",
                        help="with --dry-run: assume a flat model-steps/s instead of timing the start point here")
    search.set_defaults(func=handlers["search"])


def _port(text: str) -> int:
    """A TCP port, 1 to 65535 (socket's own error for 70000 was a traceback)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port; give a number from 1 to 65535") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"got {port}; a port is from 1 to 65535")
    return port


def _add_ui(sub, handlers, tracking) -> None:
    ui = sub.add_parser("ui", parents=[tracking],
                        help="MLflow's UI on this store (or --optuna: a search's study in optuna-dashboard), on "
                             "127.0.0.1; prints the address of the sweep's runs")
    ui.add_argument("--experiment", default=None, metavar="NAME",
                    help="the experiment to open (default: the one with the latest sweep)")
    ui.add_argument("--host", default="127.0.0.1", help="address to serve on (default: 127.0.0.1, this machine only)")
    ui.add_argument("--port", type=_port, default=None, help="port (default: 5000; with --optuna 8080)")
    ui.add_argument("--optuna", default=None, metavar="JOURNAL", help="serve the study journal grokray search "
                    "wrote, with optuna-dashboard (pip install -e '.[dashboard]')")
    ui.set_defaults(func=handlers["ui"])


def _add_atlas(sub, handlers, tracking) -> None:
    atlas = sub.add_parser("atlas", parents=[tracking], help="run every figure's spec at a scale (skipping what "
                           "MLflow holds) and write one page per figure, with its diagram and the paper's expectation")
    atlas.add_argument("specs", nargs="*", metavar="SPEC", help="spec files (default: sweeps/*.yaml)")
    atlas.add_argument("--scale", choices=SCALES, required=True, help="smoke / reduced: the spec's preset; paper: "
                       "the spec itself (in its atlas pieces)")
    atlas.add_argument("-o", "--output", default="docs/atlas", metavar="DIR", help="pages (default: docs/atlas)")
    atlas.add_argument("--storage", default=None, metavar="PATH",
                       help="Ray Tune results and search journals (default: ./grokray-results)")
    atlas.add_argument("--pages-only", action="store_true", help="write pages from what MLflow holds; run nothing")
    atlas.add_argument("--from-data", action="store_true", help="redraw the pages in --output from their data files")
    atlas.add_argument("--dry-run", action="store_true", help="say what each piece would do (run, resume or skip) "
                       "and its estimate; train and write nothing")
    _progress_flag(atlas)
    atlas.add_argument("-s", "--set", action="append", default=[], metavar="KEY=VALUE",
                       help="dotted override for every piece of every figure, after the pieces' own (repeatable); "
                            "the pages quote it in their commands")
    atlas.set_defaults(func=handlers["atlas"])


def _add_analyze(sub, handlers, tracking) -> None:
    analyze = sub.add_parser("analyze", parents=[tracking], help="phase diagram, steps heatmap and phase table of "
                             "a sweep from MLflow; the figures are also logged on its parent run")
    analyze.add_argument("--experiment", default=None, metavar="NAME",
                         help="MLflow experiment (the spec's name); its latest parent run unless --all-parents")
    analyze.add_argument("--parent", default=None, metavar="RUN_ID", help="one `grokray run` (its parent run id)")
    analyze.add_argument("--all-parents", action="store_true", help="pool every launch (a configuration once)")
    analyze.add_argument("--mixed", action="store_true", help="compare or pool launches of different budgets, "
                         "thresholds or seeds (refused otherwise)")
    analyze.add_argument("--x", default=None, metavar="AXIS", help="x axis (default: the first swept axis)")
    analyze.add_argument("--y", default=None, metavar="AXIS", help="y axis (default: the second swept axis)")
    analyze.add_argument("--compare", default=None, metavar="OTHER",
                         help="another experiment (its latest parent run) or parent run id sharing the axes")
    analyze.add_argument("--representations", action="store_true",
                         help="RQI / PCA entropy / Fourier / AGOP metrics from saved final states "
                              "(spec: artifacts: {final_state: true})")
    analyze.add_argument("--no-log", action="store_true", help="do not log the files on the parent run")
    analyze.add_argument("-o", "--output", required=True, metavar="DIR", help="directory for the PNG/SVG/CSV files")
    analyze.set_defaults(func=handlers["analyze"])


def build_parser(handlers: dict) -> argparse.ArgumentParser:
    """grokray's argument parser; `handlers`: command name -> the function that runs it (cli.py's)."""
    parser = OneLineParser(prog="grokray", description="Phase-diagram sweeps of grokking models.", epilog=EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"grokray {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    tracking, launching = _tracking_flag(), _launch_flags()

    _add_train(sub, handlers)
    _add_run(sub, handlers, tracking, launching)
    _add_replay(sub, handlers, tracking)
    _add_search(sub, handlers, tracking, launching)
    _add_ui(sub, handlers, tracking)
    _add_atlas(sub, handlers, tracking)
    _add_analyze(sub, handlers, tracking)
    return parser
