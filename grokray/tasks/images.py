"""Image classification with a small training subset (Liu et al. appendix J, Omnigrok): grokking on MNIST.

`digits` is scikit-learn's bundled 8x8 digits (1797 images, offline, the default); `mnist` reads a local copy
from `path`: a directory of the four IDX files (optionally .gz) or an .npz with x_train, y_train, x_test,
y_test (Keras layout). Nothing is downloaded. Pixels are scaled to [0, 1].

Each trial trains on `train_size` images drawn (seeded) from the training pool. Validation is MNIST's test set,
or, for digits, which has no test set, every pool image not drawn for training.
"""

from __future__ import annotations

import functools
import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from ..errors import SpecError
from ..spec.blocks import bounded
from . import TASKS
from .base import TaskData, random_split

IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
DIGITS_SIZE = 1797


def read_idx(path: Path) -> np.ndarray:
    """One IDX file (the MNIST format): magic 0x0000 08 <ndim>, big-endian int32 sizes, then uint8 data."""
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    if raw[:3] != b"\x00\x00\x08":
        raise ValueError(f"{path} is not an unsigned-byte IDX file")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _idx_file(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def mnist_arrays(path: Path) -> dict[str, np.ndarray]:
    if path.is_dir():
        files = {key: _idx_file(path, stem) for key, stem in IDX_FILES.items()}
        missing = [IDX_FILES[k] for k, f in files.items() if f is None and k in ("x_train", "y_train")]
        if missing:
            raise SpecError("task.path", f"{str(path)!r} has no {', '.join(missing)}[.gz] (expected MNIST IDX files)")
        return {key: read_idx(f) for key, f in files.items() if f is not None}
    with np.load(path) as npz:
        if not {"x_train", "y_train"} <= set(npz.files):
            raise SpecError("task.path", f"{str(path)!r} needs arrays x_train and y_train; it has {npz.files}")
        return {k: npz[k] for k in IDX_FILES if k in npz.files}


@functools.lru_cache(maxsize=4)
def load_images(dataset: str, path: str | None, pool_size: int | None):
    """(x [N, pixels] float64 in [0, 1], y [N] long, size of the training pool at the front)."""
    if dataset == "digits":
        from sklearn.datasets import load_digits

        bunch = load_digits()
        x, y = bunch.data / 16.0, bunch.target
        parts = [(x, y)]
    else:
        arrays = mnist_arrays(Path(path).expanduser())
        parts = [(arrays["x_train"][:pool_size], arrays["y_train"][:pool_size])]
        if "x_test" in arrays and "y_test" in arrays:
            parts.append((arrays["x_test"], arrays["y_test"]))
        parts = [(np.asarray(a, dtype=np.float64).reshape(len(a), -1) / 255.0, b) for a, b in parts]
    x = torch.from_numpy(np.concatenate([a for a, _ in parts])).double()
    y = torch.from_numpy(np.concatenate([b for _, b in parts]).astype(np.int64))
    return x, y, len(parts[0][0])


@TASKS.register("images")
@dataclass
class ImagesTask:
    dataset: Literal["digits", "mnist"] = "digits"
    path: str | None = None  # mnist: a directory of IDX files or an .npz
    train_size: int = bounded(1000, ge=1, doc="training images drawn from the pool (Omnigrok: 1000)")
    pool_size: int | None = bounded(None, ge=1, doc="mnist: use only the first this-many training images")
    split_seed: int | None = bounded(None, ge=0, lt=2**32)  # None: the trial seed draws the training subset

    def validate(self, path):
        if self.dataset == "digits":
            if self.path is not None:
                raise SpecError(f"{path}.path", "digits is bundled with scikit-learn; path is only for mnist")
            if self.train_size >= DIGITS_SIZE:
                raise SpecError(
                    f"{path}.train_size",
                    f"got {self.train_size}; digits has {DIGITS_SIZE} images and needs some left for validation",
                )
            return
        if self.path is None:
            raise SpecError(
                f"{path}.path",
                "mnist needs a local copy: a directory of IDX files or an .npz "
                "(grokray downloads nothing); or use dataset: digits",
            )
        where = Path(self.path).expanduser()
        if not where.exists():
            raise SpecError(f"{path}.path", f"{self.path!r} does not exist")
        if self.pool_size is not None and self.train_size > self.pool_size:
            raise SpecError(f"{path}.train_size", f"got {self.train_size}; larger than pool_size={self.pool_size}")

    def data(self) -> TaskData:
        x, y, pool = load_images(self.dataset, self.path, self.pool_size)
        if self.train_size > (pool if len(y) > pool else pool - 1):  # without a test set, keep one to validate
            raise SpecError("task.train_size", f"got {self.train_size}; the training pool has {pool} images")
        return TaskData(x=x, y=y, num_classes=10, meta={"pool": pool, "dataset": self.dataset})

    def split(self, data: TaskData, seed: int):
        pool, seed = data.meta["pool"], seed if self.split_seed is None else self.split_seed
        train, val = random_split(pool, self.train_size, seed)
        if pool < len(data.y):  # a test set follows the pool
            val = torch.arange(pool, len(data.y))
        return train, val.sort().values
