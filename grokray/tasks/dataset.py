"""A task from the user's own arrays: inputs and labels from an .npz or .pt file, or from a factory function.

Each seed splits them as the built-in tasks do (train_fraction or train_size, a sweepable axis; split_seed to hold
the split while the seed varies the init). Integer labels are classes; float labels are a regression whose
accuracy is |prediction - label| < tolerance, so crossing steps and phases apply unchanged. Integer inputs are
symbol ids (vocab_size = their largest + 1), float inputs features.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..errors import SpecError
from ..spec.blocks import bounded
from ..user_code import import_reference
from . import TASKS
from .algorithmic import SplitTask
from .base import TaskData

SUFFIXES = (".npz", ".pt", ".pth")


def _as_tensor(value, what: str, field: str) -> torch.Tensor:
    try:
        tensor = value.detach().cpu() if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
    except (TypeError, ValueError) as exc:
        raise SpecError(field, f"{what} is not an array ({type(value).__name__}: {exc})") from None
    if tensor.dtype == torch.bool or tensor.is_complex() or not (tensor.is_floating_point() or tensor.dtype in (
            torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)):
        raise SpecError(field, f"{what} has dtype {tensor.dtype}; allowed: integers or floats")
    return tensor


def _read_file(path: Path) -> dict:
    """The named arrays of an .npz, or the dict of tensors of a .pt (read with weights_only=True); a file that does
    not load (damaged, cut short, pickled objects) is one line naming task.path, whatever the reader raised."""
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as npz:
                return {k: npz[k] for k in npz.files}
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - zipfile, numpy's pickle refusal, torch's unpickler, a short read
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:240]
        kind, example = (("an .npz of arrays", "np.savez(path, x=x, y=y)") if path.suffix == ".npz" else
                         ("a torch.save file of tensors", "torch.save({'x': x, 'y': y}, path)"))
        raise SpecError("task.path", f"{str(path)!r} does not load as {kind} ({why}); save plain numeric arrays, "
                        f"e.g. {example}") from None
    if not isinstance(loaded, dict):
        raise SpecError("task.path", f"{str(path)!r} holds a {type(loaded).__name__}; expected a dict of named "
                        "tensors, e.g. torch.save({'x': x, 'y': y}, path)")
    return loaded


@functools.lru_cache(maxsize=8)
def _load(path: str | None, stamp: tuple, factory: str | None, kwargs_json: str) -> dict:
    """The raw named arrays, once per file version (its size and mtime in `stamp`) or factory call."""
    if path is not None:
        return _read_file(Path(path))
    make = import_reference(factory, "task.factory")
    try:
        out = make(**json.loads(kwargs_json))
    except Exception as exc:  # noqa: BLE001 - the user's factory failed: said in one line, before anything starts
        raise SpecError("task.factory", f"{factory!r} raised {type(exc).__name__}: {exc}") from None
    if isinstance(out, tuple | list) and len(out) == 2:
        return {"x": out[0], "y": out[1], "__pair__": True}
    if isinstance(out, dict):
        return out
    raise SpecError("task.factory", f"{factory!r} returned a {type(out).__name__}; expected (inputs, labels) or a "
                    "dict of named arrays")


def _arrays(raw: dict, source: str, inputs: str, labels: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The inputs and labels of the raw named arrays, with the names the spec gives them."""
    named = {k: v for k, v in raw.items() if k != "__pair__"}
    pair = raw.get("__pair__", False)
    for key, which in (("inputs", inputs), ("labels", labels)):
        if not pair and which not in named:
            raise SpecError(f"task.{key}", f"{source} has no array {which!r}; it has: "
                            f"{', '.join(map(str, named)) or 'none'}")
    x = _as_tensor(named["x" if pair else inputs], f"{source}'s inputs", "task.inputs")
    y = _as_tensor(named["y" if pair else labels], f"{source}'s labels", "task.labels")
    if y.dim() != 1 or x.dim() < 1 or len(x) != len(y) or len(y) < 2:
        raise SpecError("task.labels", f"{source}: inputs {tuple(x.shape)} and labels {tuple(y.shape)}; expected "
                        "inputs [N, ...] and labels [N], N >= 2")
    return x, y


@functools.lru_cache(maxsize=8)
def _checked_arrays(path, stamp, factory, kwargs_json, inputs, labels, num_classes) -> tuple:
    """(x, y, classes, vocab): symbol ids or float64 features, classes or float64 targets, each value checked."""
    source = f"{path!r}" if path is not None else f"{factory!r}'s result"
    x, y = _arrays(_load(path, stamp, factory, kwargs_json), source, inputs, labels)
    x = x.double() if x.is_floating_point() else x.long()
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise SpecError("task.inputs", "the inputs hold NaN or infinite values")
    classes = None
    if y.is_floating_point():
        if not bool(torch.isfinite(y).all()):
            raise SpecError("task.labels", "the labels hold NaN or infinite values")
        y = y.double()
    else:
        y = y.long()
        if int(y.min()) < 0:
            raise SpecError("task.labels", f"integer labels are classes 0..C-1; got {int(y.min())}")
        classes = num_classes or int(y.max()) + 1
        if classes <= int(y.max()):
            raise SpecError("task.num_classes", f"got {classes}; the labels reach {int(y.max())}")
    vocab = int(x.max()) + 1 if not x.is_floating_point() and x.numel() else None
    if vocab is not None and int(x.min()) < 0:
        raise SpecError("task.inputs", f"integer inputs are symbol ids >= 0; got {int(x.min())}")
    return x, y, classes, vocab


@TASKS.register("dataset")
@dataclass
class DatasetTask(SplitTask):
    path: str | None = None  # an .npz of named arrays, or a .pt dict of tensors (relative to the working directory)
    factory: str | None = None  # "package.module:function" returning (inputs, labels) or a dict of named arrays
    kwargs: dict = field(default_factory=dict)  # the factory's keyword arguments (any of them may be swept)
    inputs: str = "x"  # the array of inputs: [N, ...] integer symbol ids or float features
    labels: str = "y"  # the array of labels: [N] integer classes or float regression targets
    num_classes: int | None = bounded(None, ge=1, doc="default: the largest integer label + 1")
    tolerance: float = bounded(0.5, gt=0.0, doc="float labels: a prediction within this of the label is correct")

    def validate(self, path):
        if (self.path is None) == (self.factory is None):
            raise SpecError(f"{path}.path", "set path (an .npz or .pt file) or factory ('package.module:function'), "
                            "exactly one")
        if self.path is not None:
            where = Path(self.path).expanduser()
            if where.suffix not in SUFFIXES:
                raise SpecError(f"{path}.path", f"got {self.path!r}; allowed: a file ending in {', '.join(SUFFIXES)}")
            if not where.is_file():
                raise SpecError(f"{path}.path", f"{self.path!r} does not exist (looked from {Path.cwd()})")
            self.path = str(where.resolve())  # a Tune worker runs in its trial's folder: it reads the same file
        if self.kwargs and self.factory is None:
            raise SpecError(f"{path}.kwargs", "only applies with factory; a file's arrays take no arguments")
        data = self.data()
        self.validate_split(path, len(data.y))

    def _checked(self) -> tuple:
        """(x, y, classes, vocab): the arrays read and checked once per file version or factory call and fields
        (every configuration of a sweep parses its task: a large array is not scanned again for each)."""
        stamp = ()
        if self.path is not None:
            stat = Path(self.path).stat()
            stamp = (stat.st_size, stat.st_mtime_ns)
        return _checked_arrays(self.path, stamp, self.factory, json.dumps(self.kwargs, sort_keys=True, default=str),
                               self.inputs, self.labels, self.num_classes)

    def data(self) -> TaskData:
        x, y, classes, vocab = self._checked()
        meta = {"tolerance": self.tolerance} if classes is None else {}
        return TaskData(x=x, y=y, num_classes=classes, vocab_size=vocab, meta=meta)

    @property
    def symbolic(self) -> bool:
        """Integer inputs are symbol ids (what models with embedding tables need)."""
        return not self._checked()[0].is_floating_point()
