"""`grokray` command line: each command parses its arguments, loads only what it runs, calls the library and maps
the library's typed errors to one line and an exit status (cli_parser.py declares the arguments)."""

from __future__ import annotations

import argparse
import gc
import os
import sys

from .cli_parser import build_parser as make_parser
from .errors import AtlasStopped, LaunchFinished, Mistakes, RayDidNotStart, SpecError
from .run.options import LaunchOptions, clock
from .run.signals import sigterm_as_ctrl_c
from .supervisor import supervise, wanted, watch_supervisor
from .terminal import resume_command
from .tracking.trackers import quiet_store_notices


def _load(args):
    """The spec with the command's --scale and -s overrides; says which overrides pinned a sweep axis. The
    command's options are checked with it: every mistake, spec or option, is reported at once."""
    from .spec.build import load_spec

    mistakes = Mistakes()
    with mistakes.check():
        spec = load_spec(args.spec, args.set, args.scale)
    with mistakes.check():
        _launch_options(args).validate()
    with mistakes.check():
        _something_to_resume(args)
    if getattr(args, "max_configs", 1) < 1:
        mistakes.errors.append(SpecError("--max-configs", f"got {args.max_configs}; must be >= 1"))
    mistakes.raise_any()
    for note in spec.notes:
        print(f"grokray: {note}", file=sys.stderr)
    return spec


def _something_to_resume(args) -> None:
    """--resume with no local store to read: nothing to continue, said before Ray starts or a file is made (a
    server's store is asked by the launch itself, which waits out an outage)."""
    from .tracking.uri import local_store_path, resolve_tracking_uri

    if not getattr(args, "resume", False):
        return
    uri = resolve_tracking_uri(args.tracking_uri)
    path = local_store_path(uri)
    if path is not None and not path.exists():
        raise SpecError("--resume", f"nothing to continue: no MLflow store at {path} ({uri}); run without --resume, "
                        "or name the store with --tracking-uri")


def _train(args) -> int:
    import torch

    from .engine import run_trial
    from .engine.sizing import train_device_note, usable_threads
    from .terminal import curve_table, phase_line, train_progress, training_line

    spec = _load(args)
    point = spec.points()[0]
    config = spec.trial(point)
    for note in train_device_note(args.device):  # a SpecError for cuda where there is none
        print(note, file=sys.stderr)
    threads = usable_threads(spec.resources.cpu)  # a sweep trial's policy: other work on the machine keeps its cores
    torch.set_num_threads(threads)
    print(training_line(spec.name, config, point, args.device, threads), file=sys.stderr)
    result = run_trial(config, device=args.device, progress=train_progress)
    print(curve_table(result))
    print(phase_line(result, config.phases.threshold))
    return 0


def _launch_options(args) -> LaunchOptions:
    """The options every driver takes, from whichever of them this command offers."""
    fields = {"resume": "resume", "max_concurrent": "max_concurrent", "address": "address",
              "tracking_uri": "tracking_uri", "storage": "storage", "checkpoint_every": "checkpoint_every",
              "min_report_s": "report_every", "delivery_wait_s": "delivery_wait", "progress": "progress"}
    return LaunchOptions(**{k: getattr(args, a) for k, a in fields.items() if getattr(args, a, None) is not None},
                         resume_command=resume_command())


def _finish(summary, spec_name: str) -> int:
    """The lines every launch ends with; its exit code (0 done, 1 failed or stopped early, 3 undelivered)."""
    from .terminal import launch_end

    out, err = launch_end(summary, spec_name, resume_command())
    print("\n".join(out))
    if err:
        print("\n".join(err), file=sys.stderr)
    return summary.exit_code


def _run_adaptive(spec, args) -> int:
    from .plan.dry_run import adaptive_lines
    from .plan.lattice import parse_adaptive

    plan = parse_adaptive(spec)  # the spec's adaptive: block, or its defaults for --adaptive
    options = _launch_options(args)
    options.validate()
    x, y = plan.lattice.x, plan.lattice.y
    if args.dry_run:
        print("\n".join(adaptive_lines(spec, plan, args.tracking_uri, not args.no_calibrate, args.spec)))
        return 0

    from .run.adaptive import run_adaptive
    from .terminal import phase_table

    summary = run_adaptive(spec, options)
    print(phase_table(summary.phase_counts, summary.trials))
    print(f"{summary.trials} configurations ({summary.trials / summary.full_grid:.0%} of the {summary.full_grid} "
          f"of the full {x.target}x{y.target} grid) in {summary.rounds} rounds, {summary.wall_s:.0f} s")
    return _finish(summary, spec.name)


def _run(args) -> int:
    from .engine.sizing import local_gpu_count
    from .plan.expand import check_size, expand, local_slots, n_configs
    spec = _load(args)
    if spec.raw.get("search") and not spec.axes:  # it would train the start point alone and call that a sweep
        scale = f" --scale {args.scale}" if args.scale else ""
        raise SpecError("search", f"{args.spec} is a search (a search: block, no sweep axes): run `grokray search "
                        f"{args.spec}{scale}`; `grokray run` trains a spec's sweep grid")
    if args.adaptive or spec.raw.get("adaptive"):
        return _run_adaptive(spec, args)
    limit = None if args.yes else args.max_configs
    if args.dry_run and limit is not None and n_configs(spec) > limit:
        print(f"configurations: {n_configs(spec)}  (more than --max-configs {limit}: a run needs --yes)")
        return 0
    check_size(spec, limit)  # before anything is built: a typo like `num: 1e6` costs nothing
    # the whole sweep is validated before Ray starts or MLflow is written to: by the plan (expand, the dry-run's) or
    # the driver's survey (run_sweep), each parsing every configuration once
    options = _launch_options(args)
    if args.dry_run:
        from .plan.dry_run import estimate

        options.check_local_gpu_share(spec.resources.gpu)  # what the launch would refuse, the dry-run refuses
        gpus = local_gpu_count()  # this machine's cards, if it has any
        plan = expand(spec, slots=local_slots(spec, gpus=gpus))
        est = estimate(plan, spec.name, args.tracking_uri, not args.no_calibrate, args.spec, gpus=gpus)
        print("\n".join([*est.lines(), *family_lines(plan)]))
        return 0

    from .run.grid import run_sweep
    from .terminal import phase_table

    summary = run_sweep(spec, options, max_configs=limit)
    print(phase_table(summary.phase_counts, summary.configurations))
    print(f"{summary.configurations} configurations in {summary.packs} packs, {clock(summary.wall_s)} in all "
          f"(Ray's start to its stop); Ray Tune results: {summary.experiment_path}")
    return _finish(summary, spec.name)


def family_lines(plan, most: int = 8) -> list[str]:
    """What a model family says of its configurations in a dry-run (the module family: the factory's call as it
    will be made), once per distinct line, at most `most` distinct model and task settings."""
    from .models import MODELS

    seen, lines = set(), []
    for pack in plan.packs:
        cfg = pack.members[0].config
        key = (repr(cfg.model), repr(cfg.task), repr(cfg.train))
        hook = getattr(MODELS.get(cfg.model.registry_name).build, "dry_run_lines", None)
        if hook is None or key in seen or len(seen) >= most:
            continue
        seen.add(key)
        lines += [line for line in hook(cfg.model, cfg.task, cfg.train) if line not in lines]
    return lines


def _replay(args) -> int:
    from .run.replay import replay
    from .search.launch.record import link_after_replay  # the search's own step of a replay: its trials linked

    return replay(args.dir, args.tracking_uri, args.wait, link_after_replay)


def _search(args) -> int:
    from .search.config import parse_search
    spec = _load(args)
    cfg = parse_search(spec)  # the search block and every searched field are validated before anything starts
    if args.n_trials is not None and args.n_trials < 1:
        raise SpecError("--n-trials", f"got {args.n_trials}; must be >= 1")
    if args.dry_run:
        return _search_dry_run(spec, cfg, args)
    if args.resume:  # the study must be there: a missing journal is refused, not created empty
        from .run.cluster import resolve_storage
        from .search.study import resume_line

        resume_line(spec, cfg, resolve_storage(args.storage))

    from .search.launch.driver import run_search
    from .terminal import search_report

    summary = run_search(spec, _launch_options(args), n_trials=args.n_trials)
    print("\n".join(search_report(summary, cfg, spec.first_trial().phases.threshold)))
    return _finish(summary, spec.name)


def _search_dry_run(spec, cfg, args) -> int:
    from .plan.dry_run import estimate
    from .plan.estimate import plan_budget
    from .run.cluster import resolve_storage
    from .search.config import search_plan
    from .search.study import new_study_problem, resume_line
    from .terminal import search_plan_lines

    _launch_options(args).check_local_gpu_share(spec.resources.gpu)  # what the launch would refuse, the dry-run too
    n = args.n_trials if args.n_trials is not None else cfg.n_trials
    storage = resolve_storage(args.storage)
    resumes = [resume_line(spec, cfg, storage)] if args.resume else []  # or its SpecError
    if not args.resume:  # a study that is there already: refused by the dry-run as by the launch
        new_study_problem(spec, cfg, storage)
    plan = search_plan(spec, n)
    found = estimate(plan, spec.name, args.tracking_uri, not args.no_calibrate, args.spec, slots=cfg.max_concurrent)
    print("\n".join([*search_plan_lines(cfg, n, plan_budget(plan), found, spec.seeds), *resumes]))
    return 0


def _analyze(args) -> int:
    from .tracking.client import existing_store
    from .tracking.uri import folder_problem

    if args.experiment is None and args.parent is None:
        raise SpecError("--experiment", "give the experiment (the spec's name) or --parent RUN_ID")
    if problem := folder_problem(args.output):  # before anything is read: a figure must have somewhere to go
        raise SpecError("-o", problem)
    uri = existing_store(args.tracking_uri)  # a reading command never creates a store
    from analysis.errors import AXES, COMPARED, COMPARISON, POOL, AnalysisError, X, Y
    from analysis.pipeline import analyze, summary_lines

    source = "--experiment" if args.parent is None else "--parent"
    try:
        result = analyze(args.output, experiment=args.experiment, parent_run_id=args.parent, x=args.x, y=args.y,
                         compare_to=args.compare, tracking_uri=uri, representations=args.representations,
                         log=not args.no_log, all_parents=args.all_parents, narrow=not args.representations,
                         mixed=args.mixed)
    except AnalysisError as exc:  # the input to blame, as its flag
        flag = {X: "--x", Y: "--y", AXES: "--x", COMPARISON: "--compare", COMPARED: "--compare", POOL: "--all-parents"}
        mixed = "; pass --mixed anyway" if exc.part in (COMPARISON, POOL) else ""
        raise SpecError(flag.get(exc.part, source), f"{exc}{mixed}") from None
    except (KeyError, ValueError) as exc:  # a store that cannot say: where the runs came from
        raise SpecError(source, str(exc).strip("'\"")) from None
    print("\n".join(summary_lines(result)))
    print(f"figures: {', '.join(str(f) for f in result.files if f.suffix == '.png')}")
    if result.parent_run_id:
        print(f"logged {len(result.files)} files under analysis/ on parent run {result.parent_run_id}")
    return 0


def _ui(args) -> int:
    from .ui import serve_optuna, serve_runs_ui

    if args.optuna:
        return serve_optuna(args.optuna, args.host, args.port or 8080)
    return serve_runs_ui(args.tracking_uri, args.host, args.port or 5000, args.experiment)


def _atlas_places(args) -> None:
    """Where the atlas writes, checked before a piece trains: its pages' folder, and for a run what its pieces'
    launches check (`-o /proc/x` trained a whole piece, then failed writing its page)."""

    from .tracking.client import existing_store
    from .tracking.uri import folder_problem

    mistakes = Mistakes()
    with mistakes.check():
        if problem := folder_problem(args.output):
            raise SpecError("-o", problem)
    with mistakes.check():
        if args.pages_only:  # a reading command: the store must be there (never made empty)
            existing_store(args.tracking_uri)
        else:
            _launch_options(args).validate()  # the tracking URI, the storage, a Ray address
    mistakes.raise_any()


def _atlas_dry_run(args, figures) -> int:
    """The checks a run makes, then each piece's action and estimate; nothing trained or written."""
    _atlas_places(args)
    from .atlas.dry_run import dry_run_lines  # imports Ray's modules (no Ray started): after the checks
    from .tracking.uri import resolve_tracking_uri

    print("\n".join(dry_run_lines(figures, resolve_tracking_uri(args.tracking_uri))))
    return 0


def _atlas(args) -> int:
    from pathlib import Path

    specs = args.specs or sorted(str(p) for p in Path("sweeps").glob("*.yaml"))
    if not specs:
        raise SpecError("SPEC", "no specs given and no sweeps/*.yaml here; name the spec files")
    if args.dry_run and (args.pages_only or args.from_data):
        raise SpecError("--dry-run", "goes with a run; --pages-only and --from-data train nothing (drop one)")
    if args.from_data:  # no Ray, no MLflow: each page from its data file (and the -s its JSON recorded)
        from .atlas.rerender import rerender_atlas
        return 0 if rerender_atlas(specs, args.scale, args.output) else 1
    from .atlas.plan import plan_atlas

    figures = plan_atlas(specs, args.scale, tuple(args.set))  # all checked before Ray starts or MLflow is written
    if args.dry_run:
        return _atlas_dry_run(args, figures)
    _atlas_places(args)
    for note in dict.fromkeys(n for f in figures for p in f.pieces for n in p.spec.notes):
        print(f"grokray: {note}", file=sys.stderr)
    from .atlas.build import build_atlas, results_lines
    from .run.cluster import resolve_storage
    from .tracking.client import existing_store
    from .tracking.uri import resolve_tracking_uri

    uri = existing_store(args.tracking_uri) if args.pages_only else resolve_tracking_uri(args.tracking_uri)
    results = build_atlas(specs, args.scale, args.output, uri,
                          resolve_storage(args.storage), run=not args.pages_only, overrides=tuple(args.set),
                          progress=args.progress)
    print("\n".join(["", *results_lines(results), f"index: {Path(args.output) / 'README.md'}"]))
    return 1 if any(r.page is None for r in results) else 0


HANDLERS = {"train": _train, "run": _run, "replay": _replay, "search": _search, "ui": _ui, "atlas": _atlas,
            "analyze": _analyze}


def build_parser() -> argparse.ArgumentParser:
    return make_parser(HANDLERS)


EXIT_RAY_DID_NOT_START = 4  # a private local Ray did not come up, tried twice (README: exit codes)
EXIT_BROKEN_PIPE = 141  # as a shell tool killed by SIGPIPE ends, where Python would print a traceback


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("run", "search", "atlas", "replay", "analyze"):
        quiet_store_notices()
    if wanted(args):  # a launch with a private local Ray: its driver runs in a session of its own
        return supervise(sys.argv[1:] if argv is None else list(argv))
    watch_supervisor()
    sigterm_as_ctrl_c()
    try:
        code = _handled(args)
        sys.stdout.flush()  # a reader that went away shows here, not as a traceback at the interpreter's exit
        return code
    except BrokenPipeError:  # `grokray analyze ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def entry() -> int:
    """The console script (`grokray`, `python -m grokray`, `python -m grokray.cli`): main, then its objects frozen
    for the interpreter's exit, whose last collection otherwise walks every object torch, Ray and MLflow built
    (2.2-2.5 s of CPU per process measured on the 2-core VM, and a launch is two processes). Tests call main, which
    leaves them be."""
    code = main()
    gc.freeze()
    _forget_caught_interrupts()
    return code


def _forget_caught_interrupts() -> None:
    """CPython marks a KeyboardInterrupt that is raised inside exec() of a string as unhandled even when it is
    caught (dataclasses and namedtuples make their methods so, and a stop signal during their imports lands there),
    and `python -m` then ends the process by SIGINT instead of with grokray's exit code: CI saw -2 where `grokray
    ui`'s stop returns 130, and a supervised driver's stopped launch (run as `python -m grokray`) would end 130,
    not 1. Running exec() of a string clears the mark (CPython 3.11, Python/pythonrun.c: run_eval_code_obj)."""
    exec("")


def _handled(args) -> int:
    """The command, with grokray's own ends said in one line each: mistakes, a finished launch, a stop."""
    try:
        return args.func(args)
    except SpecError as exc:
        for error in exc.errors:  # every mistake found, one line each
            print(f"grokray: error: {error}", file=sys.stderr)
        if len(exc.errors) > 1:
            print(f"grokray: {len(exc.errors)} mistakes; nothing was run", file=sys.stderr)
        return 2
    except LaunchFinished as done:  # --resume of a finished launch: said, nothing changed
        print(done)
        return 0
    except AtlasStopped as stopped:  # a stop signal during an atlas piece: no page of part of a figure
        print(stopped, file=sys.stderr)
        return 1
    except RayDidNotStart as busy:  # a busy machine: one line, nothing started
        print(busy, file=sys.stderr)
        return EXIT_RAY_DID_NOT_START
    except KeyboardInterrupt:
        print("grokray: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(entry())
