"""Optuna adapter: `grokray search` looks for the settings that remove the grokking delay ("de-grokking").

config (the spec's search: block) and objective (the pure objective functions) import neither Optuna nor Ray;
study (storage, sampler, resume, recovery) and artifacts (the parent run's report) import Optuna, not Ray. The
driver that runs the study inside Ray Tune is `grokray.run.search`.
"""

from .config import Dist, SearchConfig, parse_search
from .objective import generalized, grokking_gap, objective_values, time_to_generalize

__all__ = ["Dist", "SearchConfig", "generalized", "grokking_gap", "objective_values", "parse_search",
           "time_to_generalize"]
