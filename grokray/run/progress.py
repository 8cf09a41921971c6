"""The progress of a launch: configurations done of the total, phase counts so far, an ETA. A Tune callback,
shown for every driver. On a terminal it is one live line; in a log (nohup, `ray job submit`, CI) a plain
timestamped line every 30 s, whether or not a pack reported since, so a long sweep is never minutes of silence.
Modes: auto (by the output), always (plain lines even on a terminal), never.

The ETA extrapolates the share of the work done, at the moment that share was reported, and counts down between
reports (it used to grow with the clock until the next one). A member that stopped early (classified, diverged)
counts as its whole budget: that work is done, never to be trained. So the share only grows, and the ETA does not
swing back up when a pack of early stoppers ends."""

from __future__ import annotations

import signal
import sys
import time

from ray import tune

from .disk import RUN_FREE, free_bytes, megabytes
from .options import clock

PLAIN_EVERY_S = 30.0


class ProgressLine(tune.Callback):
    """Configurations done/total, phase counts so far, ETA: a live line or plain lines (see the module doc)."""

    def __init__(self, total_configs: int, total_work: float, mode: str = "auto", every_s: float = PLAIN_EVERY_S,
                 label: str = ""):
        self.total_configs = total_configs
        self.label = label  # what part of a launch this is (an adaptive round), said on every line
        self.total_work = max(total_work, 1.0)
        self.mode, self.every_s = mode, every_s
        self.live = self.plain = False
        self._reset()

    def _reset(self):
        self.latest: dict[str, dict] = {}
        self.start = time.time()
        self.measured = (0.0, self.start)  # (share done, when it was first seen)
        self.last_draw = 0.0
        self.last_plain = -float("inf")
        self.width = 0
        self.said_done = False
        self.seeded = False  # the restored trials' results taken (_restored)
        self.base = 0.0  # the share done before this launch (a resume's restored packs): no time of ours went there

    def setup(self, **info):
        self._reset()
        tty = sys.stdout.isatty()
        self.live = self.mode == "auto" and tty
        self.plain = self.mode == "always" or (self.mode == "auto" and not tty)

    def share(self) -> tuple[float, int]:
        """(the share of the work done, the configurations done) by the latest results."""
        done = sum(r.get("members_done", 0) for r in self.latest.values())
        work = 0.0
        for r in self.latest.values():
            stopped = r.get("members_done", 0)
            work += stopped * r.get("total", r.get("step", 0)) + (r.get("members", 0) - stopped) * r.get("step", 0)
        # configurations done are a floor on the share done (a pack restored from MLflow reports no budget)
        return max(min(1.0, work / self.total_work), done / max(1, self.total_configs)), done

    def line(self) -> str:
        frac, done = self.share()
        phases: dict[str, int] = {}
        for r in self.latest.values():
            for p, n in (r.get("phases") or {}).items():
                phases[p] = phases.get(p, 0) + n
        now = time.time()
        elapsed = now - self.start
        if frac != self.measured[0]:  # a new share: when it was measured, so the ETA counts down until the next
            self.measured = (frac, now)
        at = self.measured[1] - self.start
        ours = frac - self.base  # a resume's ETA from its own progress, not the packs its earlier launch trained
        left = max(0.0, at * (1 - frac) / ours - (now - self.measured[1])) if ours > 0.02 else None
        eta = ("done" if done >= self.total_configs else "ETA ?" if left is None else f"ETA {clock(left)}")
        counts = " ".join(f"{p} {n}" for p, n in sorted(phases.items())) or "-"
        where = f"{self.label}: " if self.label else ""
        return f"[grokray] {where}{done}/{self.total_configs} configurations | {counts} | {clock(elapsed)} {eta}"

    def _draw(self, force=False):
        if self.plain:
            if (force or time.time() - self.last_plain >= self.every_s) and not self.said_done:
                self.last_plain = time.time()
                text = self.line()
                self.said_done = text.endswith(" done")  # the end is said once, whoever draws it last
                sys.stdout.write(f"{time.strftime('%H:%M:%S')} {text}\n")
                sys.stdout.flush()
            return
        if not self.live or (not force and time.time() - self.last_draw < 0.5):
            return
        self.last_draw = time.time()
        text = self.line()
        sys.stdout.write("\r" + text.ljust(self.width))
        sys.stdout.flush()
        self.width = len(text)

    def _restored(self, trials) -> None:
        """Once, at the run's first step or result: the last result of every trial Tune restored, so a resumed
        launch counts, from its first line, the packs its earlier launch finished. Later results arrive one by
        one through on_trial_result."""
        if self.seeded:
            return
        self.seeded = True
        self.latest.update({t.trial_id: t.last_result for t in trials
                            if t.last_result and t.trial_id not in self.latest})
        self.base = self.share()[0]

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._restored(trials)
        said = self.latest.get(trial.trial_id, {}).get("checkpoint_set_aside")
        if result.get("checkpoint_set_aside") and not said:  # a pack that could not continue: said once
            sys.stderr.write(("\n" if self.live and self.width else "") + result["checkpoint_set_aside"] + "\n")
            sys.stderr.flush()
        self.latest[trial.trial_id] = result
        self._draw()

    def on_step_end(self, iteration, trials, **info):
        self._restored(trials)
        self._draw()  # the clock moves on between reports: a plain line every interval, a live line every 0.5 s

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._draw(force=self.live)  # a live line moves at once; a log gets a line per interval

    def on_experiment_end(self, trials, **info):
        if self.plain and self.latest:
            self._draw(force=True)  # where it ended
        elif self.live and self.width:
            self._draw(force=True)
            sys.stdout.write("\n")
            sys.stdout.flush()

    def __getstate__(self):  # Tuner pickles its run config; the live state is rebuilt in setup()
        state = dict(self.__dict__)
        state["latest"] = {}
        return state


class DiskWatch(tune.Callback):
    """Stops the launch as Ctrl-C would (Tune saves its state, the parent ends KILLED, --resume continues) when
    the free space under --storage falls below RUN_FREE, before checkpoints and Tune's state fail to write; says
    so in one line (run/disk.py has why)."""

    def __init__(self, storage: str, every_s: float = 2.0):
        self.storage, self.every_s = storage, every_s
        self.checked, self.full = 0.0, False

    def on_step_end(self, iteration, trials, **info):
        if self.full or time.monotonic() - self.checked < self.every_s:
            return
        self.checked = time.monotonic()
        free = free_bytes(self.storage)
        if free < RUN_FREE:
            self.full = True
            print(f"\ngrokray: no space left on {self.storage} ({megabytes(free)} free, under {megabytes(RUN_FREE)}):"
                  " stopping the launch as Ctrl-C would; free some space, then continue it with --resume",
                  file=sys.stderr, flush=True)
            signal.raise_signal(signal.SIGINT)
