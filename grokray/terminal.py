"""What the CLI prints at the end of a command: the curve table of `grokray train`, the phase table of a sweep."""

from __future__ import annotations

import argparse
import math
import shlex
import shutil
import sys
from pathlib import Path

from .phases import ordered
from .tracking.trackers import is_remote
from .tracking.uri import DEFAULT_TRACKING_URI, resolve_tracking_uri

EXAMPLES = """examples:
  grokray train sweeps/quickstart.yaml -s optim.decoder.lr=3e-4       one configuration, its curve and phase
  grokray run sweeps/quickstart.yaml --dry-run                         configurations, packs, time estimate
  grokray run sweeps/quickstart.yaml                                   the sweep on Ray Tune, tracked in MLflow
  grokray analyze --experiment quickstart -o figures                   phase diagram and steps heatmap
  grokray search sweeps/degrok_toy.yaml --scale smoke                  Optuna search for the fastest generalization
  grokray ui                                                           MLflow's UI on this directory's runs
  grokray atlas --scale smoke sweeps/quickstart.yaml                   a figure's page in docs/atlas

`grokray COMMAND --help` lists each command's options."""


def curve_table(result, rows: int = 12) -> str:
    """A short table of the recorded curve: about `rows` log-spaced points plus the last one."""
    steps = result.curve["step"]
    if not steps:
        return "(no curve points)"
    picks = sorted({round(i * (len(steps) - 1) / max(1, rows - 1)) for i in range(rows)})
    lines = [f"{'step':>8} {'train/acc':>9} {'val/acc':>8} {'train/loss':>10} {'val/loss':>9}"]
    fmt = lambda v: "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4g}"  # noqa: E731
    for i in picks:
        c = result.curve
        lines.append(f"{steps[i]:>8} {fmt(c['train/acc'][i]):>9} {fmt(c['val/acc'][i]):>8} "
                     f"{fmt(c['train/loss'][i]):>10} {fmt(c['val/loss'][i]):>9}")
    return "\n".join(lines)


def phase_line(result, threshold: float) -> str:
    """`grokray train`'s verdict in words: a crossing that never happened says so instead of printing None."""

    def crossed(step, what):
        if step is None:
            return f"{what} acc never >= {threshold:g}"
        return f"{what} acc >= {threshold:g} at step {step:,}"

    parts = [crossed(result.step_train, "train"), crossed(result.step_val, "val")]
    if result.gap is not None:
        parts.append(f"grokking gap {result.gap:,} steps")
    line = f"phase: {result.phase}  ({'; '.join(parts)}; {result.steps_run:,} steps run)"
    ideal = result.ideal_val_acc
    if ideal is not None and ideal < threshold and result.phase != "diverged":
        line += (f"\nundecodable split: this seed's held-out pairs allow at most {ideal:.2f} val accuracy (Liu's ideal "
                 f"accuracy), below {threshold:g}, so no model can generalize on it; a sweep counts it undecodable, "
                 "apart from the phases, and its diagram leaves it out of the vote. Try another seed (-s seeds=[1])")
    return line


def phase_table(counts: dict[str, int], total: int | None = None) -> str:
    """Counts per phase (the four of Liu et al. first, then any others such as diverged), with shares."""
    total = total if total is not None else sum(counts.values())
    lines = [f"{'phase':<15} {'runs':>5} {'share':>6}"]
    for p in ordered(counts):
        lines.append(f"{p:<15} {counts[p]:>5} {counts[p] / max(total, 1):>6.0%}")
    missing = total - sum(counts.values())
    if missing > 0:
        lines.append(f"{'(unfinished)':<15} {missing:>5} {missing / max(total, 1):>6.0%}")
    return "\n".join(lines)


def search_plan_lines(cfg, n_trials: int, budget: int, estimate, seeds: list[int]) -> list[str]:
    """`grokray search --dry-run`: the study, its space and objective, the trials and the cost estimate."""
    space = "; ".join(f"{k}: {d.describe()}" for k, d in cfg.space.items())
    counted = ("" if len(seeds) == 1 else
               f" at each of seeds {', '.join(map(str, seeds))} (one pack; it scores what a majority of its voting "
               "seeds reached)")
    return [f"study:          {cfg.study} ({cfg.sampler} sampler, seed {cfg.seed}"
            + (", ASHA pruning" if cfg.asha else "") + ")",
            f"search space:   {space}",
            *(f"enqueued:       trial {i}: " + ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}"
                                                        for k, v in values.items())
              for i, values in enumerate(cfg.enqueue)),
            f"objective:      {', '.join(cfg.objective)} (a trial that never generalizes scores {cfg.penalty:g})",
            f"trials:         {n_trials}, {cfg.max_concurrent} at once; each trains one configuration{counted} up "
            f"to {budget:,} steps",
            *(line for line in estimate.lines() if not line.startswith(("configurations:", "packs:"))),
            "(the start point's cost stands for every trial: the searched values change it as the study runs)",
            *([f"then confirms: the best {cfg.confirm.top} settings at fresh seeds "
               f"{', '.join(map(str, cfg.confirm.seeds))} (up to {cfg.confirm.top * len(cfg.confirm.seeds)} more "
               f"configurations, not in the estimate above)"] if cfg.confirm else [])]


def search_report(summary, cfg, threshold: float) -> list[str]:
    """What `grokray search` prints when it ends: trials, the best one (never a penalty), where the study is."""
    other = summary.trials - summary.completed
    lines = [f"study {summary.study_name!r}: {summary.completed} trials ({summary.new_trials} run now"
             + (f"; {other} more failed, interrupted or duplicated" if other else "") + ")"
             + (f", each at {summary.seeds} seeds" if summary.seeds > 1 else "") + f" in {summary.wall_s:.0f} s"]
    told, queued = summary.recovered
    if told or queued:
        lines.append(f"interrupted trials: {told} answered from their finished MLflow run, {queued} run again")
    if summary.completed and not summary.best:
        lines.append(f"no trial generalized: all {summary.completed} scored the penalty ({cfg.penalty:g}); none "
                     f"reached val accuracy {threshold:g} within the budget, so there is no best trial yet")
    for best in summary.best:
        values = ", ".join(f"{n}={v:g}" for n, v in zip(cfg.objective, best["values"], strict=True))
        params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in best["params"].items())
        run = f"; MLflow run {best['mlflow_run_id']}" if best.get("mlflow_run_id") else ""
        seeds = (f", {best['seeds_generalized']} of {best['seeds_voting']} voting seeds generalized"
                 if "seeds_voting" in best else "")
        lines.append(f"best trial #{best['number']}: {values} ({best['phase']}{seeds}); {params}{run}")
    lines += confirmation_lines(summary.confirmation, cfg)
    if summary.journal_path:
        lines += [f"study journal: {summary.journal_path}",
                  f"  optuna.load_study(study_name={summary.study_name!r}, "
                  f"storage=JournalStorage(JournalFileBackend({summary.journal_path!r})))",
                  f"  {grokray_command()} ui --optuna {summary.journal_path}   (optuna-dashboard on "
                  "http://127.0.0.1:8080)"]
    else:
        lines.append(f"study storage: {summary.storage}")
    return lines


def confirmation_lines(confirmation: dict | None, cfg) -> list[str]:
    """The confirmation stage's verdict: the search's best setting at the fresh seeds, median and 90 % interval, and
    the other confirmed settings' medians beside it."""
    if not cfg.confirm:
        return []
    if confirmation is None:
        return ["confirmation: not run (no trial generalized, or the search did not finish; --resume runs it)"]
    best = confirmation["best"]
    if best is None:
        return ["confirmation: no fresh seed could vote (every split undecodable)"]
    seeds = len(best["scores"])
    verdict = (f"median {best['median']:,.0f} steps, 90 % interval {best['low']:,.0f}-{best['high']:,.0f}"
               if best["median"] < cfg.penalty else "the median seed did not generalize within the budget")
    others = "".join(f"; setting {o['setting']}: median {o['median']:,.0f}" for o in best.get("others", []))
    return [f"confirmation at {seeds} fresh seeds: setting {best['setting']} of {len(confirmation['settings'])} "
            f"(1 = the search's best): {verdict}; per seed {', '.join(f'{s:,.0f}' for s in best['scores'])} "
            f"(penalty {cfg.penalty:g}: not generalized){others}; MLflow parent {confirmation['parent_run_id']}"]


def training_line(name: str, config, point: dict, device: str, threads: int) -> str:
    """What `grokray train` trains, said before it starts."""
    values = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items())
    return (f"training {name}: {config.task.registry_name} x {config.model.registry_name}, {values}; up to "
            f"{config.budget_steps:,} steps on {device}, {threads} thread{'s' * (threads > 1)}")


def train_progress(step: int, budget: int, elapsed_s: float) -> None:
    """A plain line every few seconds of a long `grokray train` (engine.run_trial's progress)."""
    done = step / budget
    print(f"  step {step:,} of {budget:,} ({done:.0%}), {elapsed_s:.0f} s, about "
          f"{elapsed_s * (1 - done) / max(done, 1e-9):.0f} s left (it stops earlier once classified)",
          file=sys.stderr, flush=True)


def launch_end(summary, spec_name: str, resume: str = "--resume") -> tuple[list[str], list[str]]:
    """(stdout, stderr) lines every launch ends with: where its runs are, how to look, what went wrong.
    resume: the command that continues the launch (terminal.resume_command)."""
    err = []
    if summary.errored_trials:
        err.append(f"{summary.errored_trials} trials failed after retries; run them again with: {resume}")
        err += [f"  {reason}" for reason in sorted(set(summary.trial_errors.values()))[:5]]
    elif summary.interrupted:
        err.append(f"{summary.kind} launch stopped before the end; continue it with: {resume}")
    parent = summary.parent_run_id or "not made yet (the server never answered): `grokray replay` makes it"
    out = [f"MLflow: experiment {spec_name!r}, parent run {parent}",
           f"look at it: {ui_command(summary.tracking_uri)}"]
    if summary.undelivered_points or summary.undelivered_batches:
        err.append(f"grokray: MLflow at {summary.tracking_uri} did not take {summary.undelivered_points} metric "
                   f"points ({summary.undelivered_batches} batches); they are saved in {summary.undelivered_dir}")
        err.append(f"deliver them once it is back: {grokray_command()} replay {summary.undelivered_dir} "
                   f"--tracking-uri {summary.tracking_uri}")
    return out, err


def ui_command(uri: str) -> str:
    """The command that shows a store: `grokray ui` (MLflow's UI on 127.0.0.1), or the server's own address."""
    if is_remote(uri):
        return f"open {uri}"
    exe = grokray_command()
    return f"{exe} ui" if uri == resolve_tracking_uri(DEFAULT_TRACKING_URI) else f"{exe} ui --tracking-uri {uri}"


def resume_command(argv: list[str] | None = None) -> str:
    """The command that continues this launch: as it was typed (its -s flags decide which launch --resume finds),
    with --resume."""
    args = list(sys.argv[1:] if argv is None else argv)
    return shlex.join([grokray_command(), *(a for a in args if a != "--resume"), "--resume"])


def grokray_command() -> str:
    """`grokray` when that name runs this installation, else the path that does (a virtualenv that is not
    activated): a printed command must work when pasted as it is."""
    mine = Path(sys.executable).with_name("grokray")
    found = shutil.which("grokray")
    if not mine.exists() or (found and Path(found).resolve() == mine.resolve()):
        return "grokray"
    try:
        return str(mine.relative_to(Path.cwd()))
    except ValueError:
        return str(mine)


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("grokray")
    except PackageNotFoundError:
        return "unknown (not installed)"


class OneLineParser(argparse.ArgumentParser):
    """A command-line mistake is one line naming the option and what is allowed, exit 2, like a spec's mistake
    (argparse's default prints the whole usage first: `--scale bogus` was eight lines)."""

    def error(self, message: str):
        self.exit(2, f"grokray: error: {message} (see `{self.prog} --help`)\n")
