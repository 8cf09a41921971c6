"""Any torch.nn.Module, packed: the `module` family trains K copies of the user's own module as one pack.

`factory: "mylab.models:make_net"` builds one ordinary module; each member builds its own from its seed's generator
(torch's global generator is set to it while the factory runs, as `torch.manual_seed(seed); make_net()` would), so
a member starts where the same module built alone starts. The members' parameters are stacked into grokray's flat
per-group buffers (models/base.py), and the forward runs the one module over every member's parameters with
torch.func (`functional_call` under `vmap`): every optimizer kind, de-grokking method, checkpoint, compaction and
capture mode works on it unchanged.

What the module must be: a pure function of its parameters, buffers and inputs (no in-place buffer updates, so no
batch-norm running statistics; no `.item()` or data-dependent Python branches, which vmap cannot batch). It reads
one member's rows, [B, ...] (integer symbol ids or float features, as the task gives them), and returns [B, out]
(out: the task's classes, target_dim for target_vectors, 1 or nothing for a regression).
"""

from __future__ import annotations

import torch

from ..contracts import measured_every_step
from . import MODELS
from .base import PackedModel
from .heads import ClassificationHead, OneHotMSEHead, ScalarRegressionHead, TargetVectorHead, target_vectors
from .module_check import check_dtype, check_module, dry_run_lines
from .user_module import (
    DROPOUT,
    ONE_GROUP,
    Functional,
    ModuleConfig,
    build_module,
    group_of_name,
    module_groups,
    with_output_dim,
)

# Rows a member chunk holds on a CPU (the module's forward and loss run that many members' rows at a time): the
# MHA transformer's 265 training rows run 61 members a chunk, Liu's toy (45 rows) a whole pack.
CPU_CHUNK_ROWS = 16384
# A member whose rows alone reach this many fills a CPU core's matmul units by itself: batching it with others gains
# nothing and vmap's batched matmuls cost, so each member is called as its own loop calls it (the one-hot MLP, 2,822
# rows at K = 32, side by side in one process: 1.02x its plain loop member by member, 0.92x vmapped 2 or 5 a chunk).
MEMBER_ALONE_ROWS = 2048
# A full-batch table of at most this many points is measured by one forward over all of them (joint), above it by a
# forward and backward over the training rows and a gradient-free forward over the held-out ones (split).
JOINT_MAX_POINTS = 256


def cpu_chunk(rows: int) -> int:
    """Members per chunk on a CPU for `rows` rows each: 1 where a member's rows alone fill a core, else as many as
    CPU_CHUNK_ROWS rows hold."""
    return 1 if rows >= MEMBER_ALONE_ROWS else max(1, CPU_CHUNK_ROWS // max(1, rows))


@MODELS.register("module", ModuleConfig)
class ModuleFamily(PackedModel):
    example = {  # the contract-test size: torch's own nn.Linear on 50 digits
        "task": {"name": "images", "train_size": 50},
        "model": {"name": "module", "factory": "torch.nn:Linear"},
        "optim": {"default": {"name": "adamw", "lr": 1e-2}},
    }
    groups = (ONE_GROUP,)  # without model.groups; groups_for gives a configuration's own

    def __init__(self, configs, data, seeds, init_scales, dtype=torch.float32, device="cpu"):
        self.groups = module_groups(configs[0])
        self._modules_built: list[torch.nn.Module] = []
        self._params: tuple = (None, {})  # (the leaves they view, {name: stacked parameter}): rebuilt on compaction
        self._training: bool | None = None  # the module's mode now: Module.train walks every submodule
        # a pack built of one member calls the module plainly for its whole run, compacted packs keep vmap: a
        # member's rounding never changes mid-run (Functional says why)
        self.solo = len(configs) == 1
        super().__init__(configs, data, seeds, init_scales, dtype, device)

    @classmethod
    def groups_for(cls, cfg) -> tuple[str, ...]:
        return module_groups(cfg)

    @staticmethod
    def check_task(model, task, path):
        check_module(model, task)

    @staticmethod
    def dry_run_lines(model, task, train) -> list[str]:
        return [*dry_run_lines(model, task), measuring_line(task, train)]

    @staticmethod
    def check_train(model, task, train) -> None:
        """The module's forward in the pack's dtype: a module that casts to float32 is refused naming train.dtype
        before anything starts (it died mid-training with a traceback)."""
        check_dtype(model, task, train.dtype)

    @staticmethod
    def cross_entropy(model, task) -> bool:
        return model.loss == "cross_entropy" and task.data().num_classes is not None

    def init_member(self, cfg, data, gen, init_scales):
        module = build_module(cfg, data, gen)
        self._modules_built.append(module)
        return {n: p.detach() * init_scales[group_of_name(cfg, n)] for n, p in module.named_parameters()}

    def group_of(self, name):
        return group_of_name(self.cfg, name)

    def make_head(self, configs, data, gens, dtype, device):
        built, self._modules_built = self._modules_built, []
        float_like = {"dtype": dtype, "device": device}
        self.member_buffers = {n: torch.stack([dict(m.named_buffers())[n] for m in built]).to(
            **(float_like if b.is_floating_point() else {"device": device})) for n, b in built[0].named_buffers()}
        base = built[0].to(**float_like)
        self.functional = Functional(base)  # a plain attribute: its own parameters are never the pack's
        self.uses_dropout = any(isinstance(m, DROPOUT) and m.p > 0 or isinstance(m, torch.nn.MultiheadAttention)
                                and m.dropout > 0 for m in base.modules())
        self._embedding = next((f"{n}.weight" for n, m in base.named_modules()
                                if isinstance(m, torch.nn.Embedding) and f"{n}.weight" in self.layout), None)
        if data.num_classes is None:
            return ScalarRegressionHead(float(data.meta.get("tolerance", 0.5)))
        if self.cfg.loss == "target_vectors":
            targets = torch.stack([target_vectors(g, data.num_classes, self.cfg.target_dim) for g in gens])
            return TargetVectorHead(targets.to(dtype=dtype, device=device))
        return OneHotMSEHead(data.num_classes) if self.cfg.loss == "mse" else ClassificationHead(data.num_classes)

    def select_extra(self, idx):
        self.member_buffers = {n: b.index_select(0, idx) for n, b in self.member_buffers.items()}

    def forward(self, x, rng=None):
        call = self.functional.solo if self.solo else self.functional
        return with_output_dim(self._run(lambda params: call(params, self.member_buffers, x), x.device, rng))

    def measures_jointly(self, n_points: int) -> bool:
        """Joint only on a table of at most JOINT_MAX_POINTS points, where one call costs less than two; above it
        no backward over held-out rows (a user's transformer at 529 points paid one, a third of its step)."""
        return n_points <= JOINT_MAX_POINTS

    def per_sample(self, x, y, rng=None):
        """The forward and the loss together, member by member in chunks of about CPU_CHUNK_ROWS rows on a CPU, one
        member at a time from MEMBER_ALONE_ROWS rows (user_module.Functional.scored says why); the whole pack at once
        on a GPU, which wants the larger batch."""
        chunk = cpu_chunk(x.shape[1]) if x.device.type == "cpu" else len(x)
        if chunk >= len(x) or not self.head.rowwise:  # one chunk (the head outside vmap: fewer batched ops, which
            return super().per_sample(x, y, rng)      # an overhead-bound toy feels), or a loss of per-member targets
        return self._run(lambda params: self.functional.scored(self.head, chunk, params, self.member_buffers, x, y),
                         x.device, rng)

    def _run(self, call, device, rng):
        # train mode but for a dropout model's measuring forwards (eval mode would also route attention to torch's
        # fused inference kernels, which vmap runs member by member and autograd cannot differentiate)
        training = torch.is_grad_enabled() or not self.uses_dropout
        if training != self._training:
            self.functional.module.train(training)
            self._training = training
        if self._params[0] is not self.leaves:
            self._params = (self.leaves, {name: self.p(name) for name in self.layout})
        if rng is not None and self.uses_dropout:  # this step's masks: each member its own, from the pack's streams
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(int(rng.rand((), torch.float64, device).sum().item() * 2**52) % 2**63)
                return call(self._params[1])
        return call(self._params[1])

    def embeddings(self):
        """The first nn.Embedding's table (Liu's RQI on addition, the Fourier concentration on modular tasks)."""
        return self.p(self._embedding) if self._embedding else None

    def symbol_weights(self):
        return self.embeddings()


def measuring_line(task, train) -> str:
    """What the dry-run says of how a pack of this module measures and chunks (engine.pack_setup.measuring's rule,
    with JOINT_MAX_POINTS and CPU_CHUNK_ROWS)."""
    data = task.data()
    n, width = len(data.y), len(task.split(data, 0)[0])
    rows = (n if n <= JOINT_MAX_POINTS else width) if train.batch_size == "full" else int(train.batch_size)
    chunk = (f"on a CPU each member runs alone, called as its own loop calls it ({rows} rows fill a core)"
             if cpu_chunk(rows) == 1 else f"on a CPU a chunk of {cpu_chunk(rows)} members' rows runs at a time")
    if not measured_every_step(train, False, n, width):  # a dropout module: see its pack's measuring
        return f"model.factory:  {rows} rows a step, every point measured every eval_every steps; {chunk}"
    if n <= JOINT_MAX_POINTS:
        return (f"model.factory:  {n} points, full batch: one forward over all of them each step (joint: at most "
                f"{JOINT_MAX_POINTS} points, where one call costs less than two); {chunk}")
    return (f"model.factory:  {n} points, full batch: each step's backward covers the {width} training rows only, "
            f"the held-out rows are measured without one (split); {chunk}")
