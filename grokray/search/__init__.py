"""Optuna adapter: `grokray search` looks for the settings that remove the grokking delay ("de-grokking").

`config` (the spec's search: block) and `objective` (the pure objective functions) import neither Optuna nor
Ray; `runner` (OptunaSearch inside Ray Tune, the persistent study) and `report` (the parent run's artifacts) do,
so import them by module: `from grokray.search.runner import run_search`.
"""

from .config import Dist, SearchConfig, parse_search
from .objective import generalized, grokking_gap, objective_values, time_to_generalize

__all__ = ["Dist", "SearchConfig", "generalized", "grokking_gap", "objective_values", "parse_search",
           "time_to_generalize"]
