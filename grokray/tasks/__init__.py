"""Task registry. A task is a config dataclass with `data()` and `split(data, seed)` methods; one of the user's own
("package.module:Class", or an installed package's `grokray.tasks` entry point) is adopted here."""

import dataclasses

from ..errors import SpecError
from ..registry import Registry
from .base import TaskData


def adopt_task(name: str, obj, field: str):
    """A user's task is its own config: a dataclass with data() -> TaskData and split(data, seed) -> (train, val)."""
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj) and callable(getattr(obj, "data", None))
            and callable(getattr(obj, "split", None))):
        raise SpecError(field, f"{name!r} is not a task: expected a dataclass with data() -> TaskData and "
                        "split(data, seed) -> (train indices, val indices) (grokray.tasks.base.SplitFields gives "
                        "train_fraction), or task: {name: dataset, factory: ...} for arrays of your own")
    return None


TASKS = Registry("task", adopt_task)

from . import algorithmic, dataset, images, teacher  # noqa: E402,F401  (registers entries)

__all__ = ["TASKS", "TaskData"]
