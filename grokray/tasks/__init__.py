"""Task registry. A task is a config dataclass with `data()` and `split(data, seed)` methods."""

from ..registry import Registry
from .base import TaskData

TASKS = Registry("task")

from . import algorithmic, images, teacher  # noqa: E402,F401  (registers entries)

__all__ = ["TASKS", "TaskData"]
