"""The contract every gradient-trained family implements, and the stacking that makes packs free.

A family writes `init_member` (one member's tensors, drawn from that member's generator at that member's
size) and `forward` (stacked). `PackedModel.__init__` pads and stacks the members; K = 1 is an ordinary
single trial.

Storage: each parameter group lives in ONE flat [K, P] tensor and the named parameters are leaf views into it,
with their `.grad` pre-set to views of a matching flat gradient buffer (autograd then accumulates in place).
The optimizer does a handful of elementwise ops on the flat buffers per step, however many tensors the model
has: that is most of the speed of a small model's step.
"""

from __future__ import annotations

import torch

from .diagnostics import addition_parallelograms, fourier_concentration, operand_columns, representation_quality
from .layers import encode_inputs, linear, mlp, pad_stack, table_linear, table_ranges


class PackedModel(torch.nn.Module):
    """A gradient-trained family (contracts.Family, trained by engine.PackTrainer)."""

    groups: tuple[str, ...] = ("embedding", "decoder")
    per_member_fields: frozenset[str] = frozenset()  # config fields that may differ inside one pack
    defaults: dict = {}  # train:/phases: values of this family's own (none: the global defaults)
    example: dict = {}  # the contract tests' task and model: each family sets its own
    trainer = "pack"
    max_pack_size: int | None = None
    uses_dropout: bool = False
    # Full-batch training on small data measures every point every step. True: one forward over all of them, whose
    # backward then also runs over the held-out rows (cheap for MLPs, and the full symbol table has a fast first
    # layer); False: training rows forward and backward, held-out rows forward only (engine/pack.py).
    joint_forward: bool = True

    def __init__(
        self,
        configs: list,
        data,
        seeds: list[int],
        init_scales: list[dict[str, float]],
        dtype=torch.float32,
        device="cpu",
    ):
        super().__init__()
        self.cfg = configs[0]  # shared architecture; per-member fields are read from `self.configs`
        self.configs = configs
        self.data_meta = data
        gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
        members = [self.init_member(c, data, g, sc) for c, g, sc in zip(configs, gens, init_scales, strict=True)]
        K = len(configs)
        pieces: dict[str, list] = {g: [] for g in self.groups}
        masks: dict[str, list] = {g: [] for g in self.groups}
        self.layout: dict[str, tuple[str, int, int, tuple]] = {}  # name -> (group, start, stop, shape)
        for name in members[0]:
            stacked, mask = pad_stack([m[name] for m in members])
            group = self.group_of(name)
            start = sum(t.shape[1] for t in pieces[group])
            pieces[group].append(stacked.reshape(K, -1))
            masks[group].append(
                torch.ones_like(pieces[group][-1], dtype=torch.bool) if mask is None else mask.reshape(K, -1)
            )
            self.layout[name] = (group, start, start + pieces[group][-1].shape[1], tuple(stacked.shape[1:]))
        self.flat = {g: torch.cat(pieces[g], 1).to(dtype=dtype, device=device) for g in self.groups if pieces[g]}
        self.pad_masks = {g: torch.cat(masks[g], 1).to(device) for g in self.flat if not torch.cat(masks[g], 1).all()}
        self._build_leaves()
        self.head = self.make_head(configs, data, gens, dtype, device)
        self.streams = gens  # each member's generator past its init: train.seed_stream script draws on from it
        self._table = table_ranges(data.x)  # the task's points as a full symbol table, or None
        self._table_check = (None, False)  # (input tensor, is it every member's copy of that table)
        self._quads = None  # Liu's addition parallelograms, built at the first diagnostics

    def _build_leaves(self):
        """Named leaf parameters as views of the flat buffers, their grads as views of the flat grads."""
        self.flat_grad = {g: torch.zeros_like(f) for g, f in self.flat.items()}
        self.leaves = torch.nn.ParameterDict()
        for name, (group, start, stop, shape) in self.layout.items():
            leaf = torch.nn.Parameter(self.flat[group][:, start:stop].view(-1, *shape))
            leaf.grad = self.flat_grad[group][:, start:stop].view(-1, *shape)
            self.leaves[name.replace(".", "__")] = leaf
        self._by_name = {name: self.leaves[name.replace(".", "__")] for name in self.layout}

    def select_members(self, idx: torch.Tensor):
        """Keep only rows `idx` (a pack compacting away its finished members)."""
        self.flat = {g: f.index_select(0, idx) for g, f in self.flat.items()}
        self.pad_masks = {g: m.index_select(0, idx) for g, m in self.pad_masks.items()}
        self._build_leaves()
        self.configs = [self.configs[i] for i in idx.tolist()]
        self.head = self.head.select(idx)
        self.select_extra(idx)

    def select_extra(self, idx: torch.Tensor):
        """Families with per-member buffers of their own (beyond params and head) select them here."""

    # -- what a family provides -------------------------------------------------------------------------
    @staticmethod
    def check_task(model, task, path: str) -> None:
        """Raise a SpecError naming `path` if this model cannot train on `task` (default: any task)."""

    @staticmethod
    def cross_entropy(model, task) -> bool:
        """Whether this configuration's loss is a cross-entropy over class logits (train.softmax: stablemax
        replaces its softmax). Default: no."""
        return False

    @staticmethod
    def init_member(cfg, data, gen: torch.Generator, init_scales: dict[str, float]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def make_head(self, configs, data, gens, dtype, device):
        raise NotImplementedError

    def group_of(self, name: str) -> str:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, rng=None) -> torch.Tensor:
        """x: [K, B, ...] inputs -> [K, B, out_dim]. `rng` (a MemberRandom) is given only in training mode."""
        raise NotImplementedError

    def measures_jointly(self, n_points: int) -> bool:
        """A full-batch pack measured every step: one forward over all N points, training and held-out, with a
        backward over all (joint), or forward and backward over the training rows and a gradient-free forward over
        the held-out rows (split). The family's `joint_forward` says which, measured once for its architecture."""
        return self.joint_forward

    def per_sample(self, x: torch.Tensor, y: torch.Tensor, rng=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Each member's loss and correctness on its rows, [K, B] each: the forward, then the head."""
        return self.head.per_sample(self(x, rng), y)

    # -- shared --------------------------------------------------------------------------------------------
    def p(self, name: str) -> torch.Tensor:
        """The stacked [K, ...] leaf parameter `name` (a view into its group's flat buffer)."""
        return self._by_name[name]

    def encoded(self, x: torch.Tensor) -> torch.Tensor:
        """One-hot symbol inputs (floats pass through), cached while the same input tensor comes back: in
        full-batch training that is every step, and building the one-hot was a tenth of a small net's step."""
        cached = getattr(self, "_encoded", None)
        if cached is None or cached[0] is not x:
            self._encoded = (x, encode_inputs(x, self.vocab_size, next(iter(self.flat.values())).dtype))
        return self._encoded[1]

    def input_mlp(self, x: torch.Tensor, prefix: str, n_layers: int, activation: str, bias: bool) -> torch.Tensor:
        """An MLP on the inputs (one-hot symbols or features) whose layer 0 goes through `input_linear`."""
        h = self.input_linear(x, self.p(f"{prefix}0.w"), self.p(f"{prefix}0.b") if bias else None)
        return mlp(h, self.p, prefix, n_layers, activation, bias, start=1)

    def input_linear(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        """one_hot(x) @ w (+ b) for symbols, x @ w (+ b) for features.

        When x is every member's copy of the task's whole symbol table (joint full-batch training on modular and
        permutation tasks), no one-hot is built: `table_linear` broadcast-adds each operand's rows of w. The
        one-hot matmul and its backward were about 40% of a quadratic net's packed step at p = 23.
        """
        if self.is_full_table(x):
            return table_linear(self._table, self.vocab_size, w, b)
        return linear(self.encoded(x), w, b)

    def is_full_table(self, x: torch.Tensor) -> bool:
        """Checked once per input tensor: joint training passes the same one every step."""
        if self._table_check[0] is not x:
            table = self.data_meta.x
            full = self._table is not None and x.shape[1:] == table.shape and bool((x == table.to(x.device)).all())
            self._table_check = (x, full)
        return self._table_check[1]

    def named_stacked(self):
        yield from self._by_name.items()

    def zero_grad_flat(self):
        """Zero the flat gradient buffers in place (never set .grad to None: the views must survive)."""
        for g in self.flat_grad.values():
            g.zero_()

    def weight_norm(self) -> torch.Tensor:
        """Per-member L2 norm of all parameters, [K] (Omnigrok's diagnostic)."""
        norms = torch.stack([torch.linalg.vector_norm(f, dim=1) for f in self.flat.values()])
        return torch.linalg.vector_norm(norms, dim=0)

    def diagnostics(self) -> dict[str, torch.Tensor]:
        """Family curves beside the engine's metrics, [K] each, measured with the weight norm. The names must not
        change between calls: the trainer reads them once. On modular tasks: the Fourier concentration of the
        weights that see the input symbols."""
        meta = self.data_meta.meta
        out = {}
        w = self.symbol_weights() if "op" in meta else None
        if w is not None:
            out["fourier_concentration"] = fourier_concentration(w, meta["p"])
        emb = self.embeddings() if meta.get("parallelograms") else None
        if emb is not None:  # Liu's addition: the representation quality index of the symbol embeddings
            if self._quads is None:
                self._quads = addition_parallelograms(meta["p"]).to(emb.device)
            out["rqi"] = representation_quality(emb[:, : meta["p"]], self._quads)
        return out

    def io_names(self) -> set[str]:
        """The parameters that read the inputs or write the outputs (Muon leaves them to AdamW by default):
        the first and the last matrix of the model, in the order it declares them."""
        matrices = [name for name, (_, _, _, shape) in self.layout.items() if len(shape) == 2]
        return {matrices[0], matrices[-1]} if matrices else set()

    def embeddings(self) -> torch.Tensor | None:
        """[K, V, d] learned symbol embeddings for families that have them (Liu's RQI is measured on them)."""
        return None

    def symbol_weights(self) -> torch.Tensor | None:
        """[K, ≥ p, c] weights indexed by input symbol (rows past p, e.g. a transformer's '=' token, are ignored);
        None if the family has none. Default: a first layer `fc0.w` on the one-hot operands."""
        if "fc0.w" not in self.layout:
            return None
        return operand_columns(self.p("fc0.w"), self.data_meta.meta["p"], self.data_meta.x.shape[-1])

    @property
    def size(self) -> int:
        return next(iter(self.flat.values())).shape[0]
