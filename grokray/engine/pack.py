"""Train K configurations of one architecture at once; K = 1 is a single trial.

Each member has its own seed, split, learning rates, weight decays, init scales, widths (padded and masked)
and its own stopping point. Crossings and divergence are tracked on the device, so the host only looks every
`check_every` steps. Members never influence each other: every parameter slice, optimizer moment and random
stream is per member, and the loss is a sum of per-member losses.
"""

from __future__ import annotations

import math
import time
import warnings

import torch

from ..capture import Captured, capture_mode, step_boundary
from ..contracts import family_groups
from ..models import MODELS
from ..optim.degrok import hold_weight_norm_
from ..optim.group import MemberRandom, pack_optimizers
from ..phases import classify, is_decided
from ..phases import gap as phase_gap
from .batches import BATCHES
from .checkpoint import load_pack_state, pack_state_dict
from .curves import member_curve
from .measure import measured_cols, metric_columns
from .memory import keep_freed_memory
from .pack_setup import measuring, norm_targets, pack_member_bytes, progress_tensors
from .precision import forward_context, use_matmul_precision
from .result import METRICS, MemberResult, pack_signature
from .schedule import record_steps
from .splits import draw_splits, ideal_val_accuracies, member_splits
from .states import pack_member_states

# Trainer attributes with one row per pack member (dimension 0), selected together when the pack compacts.
PER_MEMBER_TENSORS = (
    "train_idx", "train_w", "w_train_all", "train_mask_all", "val_mask_all", "val_idx", "val_valid", "n_train", "n_val",
    "has_val",
    "threshold", "cross_train", "cross_val", "diverged", "active", "last", "marks", "norm_target",
)
MARKS = 3  # rows kept per member: measured at its train crossing, its val crossing and its stop (engine.curves)
EVAL_CHUNK = 16384  # samples per member per no-grad eval forward
# Gradients accumulate in place into views of a flat buffer (models/base.py); torch notes that such views do not
# follow its preferred gradient layout. That is deliberate and measured faster here, so the note is silenced.
warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")


class PackTrainer:
    def __init__(self, configs: list, device: str = "cpu"):
        if not configs:
            raise ValueError("a pack needs at least one configuration")
        signatures = {pack_signature(c) for c in configs}
        if len(signatures) != 1:
            raise ValueError("configurations in one pack must share everything but per-member fields")
        self.configs = configs
        self.K = len(configs)
        self.device = torch.device(device)
        if self.device.type == "cpu":
            keep_freed_memory()
        first = configs[0]
        self.dtype = torch.float64 if first.train.dtype == "float64" else torch.float32
        self.data = first.task.data()
        self.family = MODELS.get(first.model.registry_name).build
        self.model = self.family(
            [c.model for c in configs],
            self.data,
            [c.seed for c in configs],
            [{g: c.optim[g].init_scale for g in family_groups(self.family, c.model)} for c in configs],
            self.dtype,
            self.device,
        )
        x, y = self.data.x.to(self.device), self.data.y.to(self.device)
        self.x, self.y = (x.to(self.dtype) if x.is_floating_point() else x), y
        n = len(y)
        streams = self.model.streams if first.train.seed_stream == "script" else None
        splits = draw_splits(configs, self.data, streams)
        self.ideal_val_acc = ideal_val_accuracies(splits, self.data)  # per original member, known before training
        for name, tensor in vars(member_splits(splits, self.data, self.dtype, self.device)).items():
            setattr(self, name, tensor)  # each member's split as [K, ...] rows (see PER_MEMBER_TENSORS)
        self._schedule(configs, n, self.train_idx.shape[1])
        self._progress_state(configs, streams)

    def _schedule(self, configs: list, n: int, width: int) -> None:
        """How the pack steps and measures: precision, capture, batches, when to evaluate and record, the budgets."""
        train = configs[0].train
        self.precision = train.precision
        self.capture = capture_mode(train.capture, self.device)
        self.full_batch = train.batch_size == "full"
        self.batch_size = width if self.full_batch else int(train.batch_size)
        self.joint, self.split, self.eval_every = measuring(configs, self.model, n, width)
        self.check_every = 1 if self.device.type == "cpu" else 16
        self.max_steps = [c.budget_steps for c in configs]
        self.total = max(self.max_steps)
        self.member_records = [
            record_steps(s, c.train.curve_points_per_decade) for s, c in zip(self.max_steps, configs, strict=True)
        ]
        self.record_set = set().union(*self.member_records)
        self.threshold = torch.tensor([c.phases.threshold for c in configs], dtype=torch.float64, device=self.device)

    def _progress_state(self, configs: list, streams) -> None:
        """The optimizers and draws, then each member's progress: device-side, read by the host only at checks."""
        K, train, captured = self.K, configs[0].train, self.capture == "compiled"
        self.optimizers = pack_optimizers(self.model, self.family, configs, compile=captured)
        self.norm_target = norm_targets(self.model, configs, self.device)
        self.holds_norm = bool((~torch.isnan(self.norm_target)).any())
        self.model.head.configure(train)  # train.softmax, train.loss_dtype
        self.rng = MemberRandom([c.seed for c in configs], self.device, salt=0)
        self.batches = BATCHES[train.batches](self.n_train.tolist(), self.batch_size, self.rng, streams)  # batches.py
        self.step = 0
        # The engine's metrics, then the family's own curves (models/diagnostics.py), one column each.
        self.metric_names = METRICS + tuple(self.model.diagnostics())
        for name, tensor in progress_tensors(K, MARKS, len(self.metric_names), self.device).items():
            setattr(self, name, tensor)
        self.stopped_at = [None] * K  # per original member: the step at which it stopped (host side)
        self.stopped_wall: list[float | None] = [None] * K  # and the time.time() then: its MLflow run's end
        self._measured: tuple[int, torch.Tensor] | None = None  # final_eval's (step, row), reused by _check
        self.members = list(range(K))  # original index of each row still in the pack (see _compact)
        self.finished: dict[int, MemberResult] = {}  # results of members compacted out of the pack
        self.all_configs = list(configs)
        self.compact = True  # contracts.Trainer: drop stopped members' rows once a quarter of the pack stopped
        self.forward = Captured(self._forward, "the step's forward", self.device.type == "cuda") if captured \
            else self._forward
        self.curve_steps: list[int] = []
        self.curve_rows: list[torch.Tensor] = []  # [K, n_metrics] per recorded step, moved to CPU at checks
        self._joint_xy = None
        self._split_xy = None

    # -- one step ----------------------------------------------------------------------------------------------
    def _batch(self):
        if self.full_batch:
            return self.train_idx, self.train_w
        return self.batches.next(self.train_idx, self.n_train, self.train_w.dtype)

    def _per_sample(self, idx, rng=None):
        return self._per_sample_xy(self.x[idx], self.y[idx], rng)

    def _per_sample_xy(self, x, y, rng=None):
        with forward_context(self.precision, self.device):
            return self.model.per_sample(x, y, rng)

    def all_points(self):
        """x and y of all N points for every member, [K, N, ...]: the same tensors every step until the pack
        shrinks, so joint mode gathers them (and a model may cache what it derives from them) once."""
        if self._joint_xy is None or self._joint_xy[0].shape[0] != self.K:
            idx = torch.arange(len(self.y), device=self.device).expand(self.K, -1)
            self._joint_xy = (self.x[idx], self.y[idx])
        return self._joint_xy

    def _split_points(self):
        """x and y of every member's training rows and held-out rows (padded), gathered once per pack shape."""
        if self._split_xy is None or self._split_xy[0].shape[0] != self.K:
            tr, va = self.train_idx, self.val_idx
            self._split_xy = (self.x[tr], self.y[tr], self.x[va], self.y[va])
        return self._split_xy

    @torch.no_grad()
    def _evaluate(self):
        """Loss and accuracy of every member on all N points, split by its own train/val weights."""
        n = len(self.y)
        sums = torch.zeros((4, self.K), dtype=torch.float64, device=self.device)
        for start in range(0, n, max(1, EVAL_CHUNK // self.K)):
            idx = torch.arange(start, min(n, start + max(1, EVAL_CHUNK // self.K)), device=self.device)
            loss, correct = self._per_sample(idx.expand(self.K, -1))
            mt, mv, loss = self.train_mask_all[:, idx], self.val_mask_all[:, idx], loss.double()
            sums += torch.stack([(loss * mt).sum(1), (correct * mt).sum(1), (loss * mv).sum(1), (correct * mv).sum(1)])
        n_train = self.n_train.double()
        return sums / torch.stack([n_train, n_train, self.n_val, self.n_val])

    def _observe(self, metrics: torch.Tensor, train_loss: torch.Tensor, step: int):
        """Record crossings and divergence at `step` from a [K, 5] metric row (NaN = not measured)."""
        live = self.active & ~self.diverged
        self.diverged |= live & ~torch.isfinite(train_loss)
        hit_t = live & (metrics[:, 1] >= self.threshold) & (self.cross_train < 0)
        hit_v = live & self.has_val & (metrics[:, 3] >= self.threshold) & (self.cross_val < 0)
        self.cross_train = torch.where(hit_t, step, self.cross_train)
        self.cross_val = torch.where(hit_v, step, self.cross_val)
        hits = torch.stack([hit_t, hit_v], 1).unsqueeze(-1)
        self.marks[:, :2] = torch.where(hits, metrics.unsqueeze(1), self.marks[:, :2])
        self.last = torch.where(~torch.isnan(metrics) & live.view(-1, 1), metrics, self.last)

    def _metrics_row(self, train_loss, train_acc, val_loss, val_acc, with_norm=True):
        return self._with_extra(metric_columns(train_loss, train_acc, val_loss, val_acc, self.has_val), with_norm)

    def _with_extra(self, cols: torch.Tensor, with_norm: bool) -> torch.Tensor:
        """[K, 4] measured columns -> a full metric row: the weight norm and the family's curves, or NaN."""
        if with_norm:
            with torch.no_grad():
                extra = [self.model.weight_norm(), *self.model.diagnostics().values()]
            return torch.cat([cols, torch.stack([e.double() for e in extra], 1)], 1)
        return torch.cat([cols, cols.new_full((self.K, len(self.metric_names) - 4), math.nan)], 1)

    def _measured_cols(self, loss, correct, on_train, val_loss, val_correct, on_val):
        """engine.measure.measured_cols with this pack's counts."""
        return measured_cols(loss, correct, on_train, val_loss, val_correct, on_val, self.n_train, self.n_val,
                             self.has_val)

    def _inputs(self):
        """What this step's forward reads, gathered (and cached) outside it: the forward stays free of side effects."""
        if self.joint:
            x, y = self.all_points()
            self.model.is_full_table(x)  # decided (and cached) here: a data-dependent test breaks a compiled graph
            return x, y
        if self.split:
            return self._split_points()
        return self._batch()

    def _forward(self, inputs, rng):
        """The step's forward: (each member's training loss [K], its measured columns [K, 4] or None).

        Pure in the trainer's tensors (it mutates nothing), so `train.capture: compiled` compiles it as one graph,
        with its backward (grokray/capture.py)."""
        if self.joint:
            loss, correct = self._per_sample_xy(*inputs, rng)
            cols = self._measured_cols(loss, correct, self.train_mask_all, loss, correct, self.val_mask_all)
            return (loss * self.w_train_all).sum(1), cols
        if self.split:
            xt, yt, xv, yv = inputs
            w = self.train_w
            loss, correct = self._per_sample_xy(xt, yt)
            with torch.no_grad():
                val_loss, val_correct = self._per_sample_xy(xv, yv)
            cols = self._measured_cols(loss, correct, (w > 0).double(), val_loss, val_correct, self.val_valid)
            return (loss * w).sum(1), cols
        idx, w = inputs
        loss, correct = self._per_sample(idx, rng)
        train_loss = (loss * w).sum(1)
        if not self.full_batch:
            return train_loss, None
        acc = (correct.double() * (w > 0)).sum(1) / self.n_train.double()
        return train_loss, torch.stack([train_loss.detach().double(), acc, *[torch.full_like(acc, math.nan)] * 2], 1)

    def train_step(self):
        t = self.step
        record = t in self.record_set
        evaluate = t % self.eval_every == 0 or record
        step_boundary(self.device)
        rng = self.rng if self.model.uses_dropout else None
        train_loss, cols = self.forward(self._inputs(), rng)
        if self.joint or self.split:
            row = self._with_extra(cols, record)
        elif evaluate:
            row = self._metrics_row(*self._evaluate())
        elif cols is not None:
            row = self._with_extra(cols, False)
        else:
            row = self._metrics_row(None, None, None, None, False)
        self._observe(row, train_loss.detach(), t)
        if record and (not self.curve_steps or self.curve_steps[-1] != t):  # final_eval may have measured t
            self.curve_steps.append(t)
            self.curve_rows.append(row.detach().clone())  # a CUDA graph's output is overwritten at its next replay
        self.model.zero_grad_flat()
        train_loss.sum().backward()
        member = (self.active & ~self.diverged).view(-1, 1)
        for opt in self.optimizers.values():
            opt.step(t, member)
        if self.holds_norm:
            hold_weight_norm_(list(self.model.flat.values()), self.model.weight_norm(), self.norm_target,
                              member.view(-1))
        self.step = t + 1

    def final_eval(self):
        """Measure the state after the last update of a member whose steps end here (and of the pack)."""
        s = self._evaluate()
        row = self._metrics_row(s[0], s[1], s[2], s[3])
        self._observe(row, s[0], self.step)
        self._measured = (self.step, row)
        if self.step in self.record_set and (not self.curve_steps or self.curve_steps[-1] != self.step):
            self.curve_steps.append(self.step)
            self.curve_rows.append(row)

    # -- host-side bookkeeping ------------------------------------------------------------------------------
    def _check(self):
        """Stop members whose phase is decided, that diverged, or that used up their steps."""
        tr, va = self.cross_train.tolist(), self.cross_val.tolist()
        div, act = self.diverged.tolist(), self.active.tolist()
        stops: dict[int, int] = {}  # row -> the step it stops at
        measure = []
        for k, cfg in enumerate(self.configs):
            if not act[k]:
                continue
            st, sv = (tr[k] if tr[k] >= 0 else None), (va[k] if va[k] >= 0 else None)
            decided = cfg.phases.stop_when_classified and is_decided(st, sv, div[k], self.step, cfg.phases)
            if decided and not div[k] and st is not None and sv is not None:
                # Its last crossing decided it: the run stops there, at a measured row, and its curve ends at
                # the values its summary reports (a measurement one step later could dip under the threshold).
                stops[k] = max(st, sv)
            elif div[k] or decided or self.step >= self.max_steps[k]:
                stops[k] = self.step
                measure.append(k)
        if measure:  # measure the state they stop in, so each curve ends at its own stop (engine.curves)
            measured = self._measured
            row = measured[1] if measured and measured[0] == self.step else self._metrics_row(*self._evaluate())
            idx = torch.tensor(measure, dtype=torch.long, device=self.device)
            self.marks[idx, 2] = row.index_select(0, idx)
        if stops:
            self.active[torch.tensor(list(stops), dtype=torch.long, device=self.device)] = False
            for k, step in stops.items():
                self.stopped_at[self.members[k]] = step
                self.stopped_wall[self.members[k]] = time.time()
        if any(div):  # keep NaN out of later arithmetic on frozen members
            for flat in self.model.flat.values():
                flat.nan_to_num_(0.0, 0.0, 0.0)
        running = sum(act_k and self.stopped_at[m] is None for act_k, m in zip(act, self.members, strict=True))
        if self.compact and 0 < running <= (3 * self.K) // 4:
            self._compact()

    def _compact(self):
        """Drop stopped members from the stacked tensors, so their compute stops too: once a quarter of the pack
        has stopped, so at most log_{4/3} K times (waiting for half cost whole sweeps: in Liu's grids ~40% of a pack
        stops within a thousand steps, the rest runs to the budget). Their results are kept; the rest computes
        exactly what it did, as members never interact; a captured step reuses its code at the new size."""
        current = self._results_now()
        keep = [k for k, m in enumerate(self.members) if self.stopped_at[m] is None]
        for k, m in enumerate(self.members):
            if self.stopped_at[m] is not None:
                self.finished[m] = current[k]
        self.select_members(keep)

    def select_members(self, keep: list[int]):
        """Keep rows `keep` of every per-member tensor and list (a compaction, or a checkpoint of a smaller pack)."""
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        for name in PER_MEMBER_TENSORS:
            setattr(self, name, getattr(self, name).index_select(0, idx))
        for name in ("configs", "members", "max_steps", "member_records"):
            setattr(self, name, [getattr(self, name)[k] for k in keep])
        self.curve_rows = [row.index_select(0, idx) for row in self.curve_rows]
        self.rng.select(keep)
        self.batches.select(keep)
        self.model.select_members(idx)
        for g, opt in self.optimizers.items():
            opt.select_members(idx, self.model.flat[g], self.model.flat_grad[g], self.model.pad_masks.get(g))
        self.K = len(keep)
        self.total = max(self.max_steps)
        self.record_set = set().union(*self.member_records)

    def member_bytes(self) -> int:
        return pack_member_bytes(self.model, self.optimizers.values(), self.dtype, len(self.y))

    def member_states(self) -> list[dict | None]:  # cropped to each member's own shapes (engine.states)
        return pack_member_states(self)

    def done(self) -> bool:
        return all(s is not None for s in self.stopped_at)

    def run(self, until: int | None = None, on_check=None) -> bool:
        """Train until every member stopped (returns True) or `self.step == until` (returns False)."""
        stop = self.total if until is None else min(until, self.total)
        use_matmul_precision(self.precision)
        while not self.done() and self.step < stop:
            self.train_step()
            ends = self.step in self.max_steps  # some member's last step: measure it, as it would be alone
            if self.step % self.check_every == 0 or self.step >= self.total or ends:
                if ends:
                    self.final_eval()
                self._check()
                if on_check is not None:
                    on_check(self)
        if self.step >= self.total and not self.done():
            self._check()
        return self.done()

    def results(self) -> list[MemberResult]:
        """One result per configuration, in the order the pack was given them."""
        now = dict(zip(self.members, self._results_now(), strict=True))
        return [self.finished[m] if m in self.finished else now[m] for m in range(len(self.all_configs))]

    def _results_now(self) -> list[MemberResult]:
        rows = torch.stack(self.curve_rows).cpu().tolist() if self.curve_rows else []  # [T, K, M]
        tr, va, last = self.cross_train.tolist(), self.cross_val.tolist(), self.last.cpu().tolist()
        marked = self.marks.cpu().tolist()  # [K, MARKS, M]
        out = []
        for k, cfg in enumerate(self.configs):
            m = self.members[k]
            stop = self.stopped_at[m] if self.stopped_at[m] is not None else self.step
            st, sv = (tr[k] if tr[k] >= 0 else None), (va[k] if va[k] >= 0 else None)
            diverged = bool(self.diverged[k])
            phase = classify(st, sv, diverged, cfg.phases)
            marks = zip((st, sv, self.stopped_at[m]), marked[k], strict=True)
            curve = member_curve(self.metric_names, ((step, row[k]) for step, row in zip(self.curve_steps, rows,
                                 strict=True)), self.member_records[k], stop, marks)
            final = {m: v for m, v in zip(self.metric_names, last[k], strict=True) if not math.isnan(v)}
            out.append(MemberResult(phase, st, sv, phase_gap(st, sv), stop, final, curve,
                                    self.ideal_val_acc[self.members[k]]))
        return out

    # -- checkpoints: tensors, lists and numbers only, so they load with weights_only=True (engine.checkpoint) -
    def state_dict(self) -> dict:
        return pack_state_dict(self)

    def load_state_dict(self, state: dict):
        load_pack_state(self, state)
