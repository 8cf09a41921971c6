"""`grokray search`, the whole of it: the settings that remove the grokking delay ("de-grokking").

Two floors in one package. Below run/: config (the spec's search: block), objective (the pure objective functions)
and confirm (the confirmation's rules) import neither Optuna nor Ray; sampler, study (storage, resume, recovery)
and artifacts (the parent run's report) import Optuna, not Ray. Above run/, driving a Launch: the subpackage
launch/ (driver: `grokray search`; searcher: Tune's Searcher over the study, the Ray-facing file; record: the
study's report, trial links and finished parent in the store; confirmation: the fresh-seed launch).
Importing this package loads the lower floor's pure modules only.
"""

from ..objectives import generalized, grokking_gap, objective_values, time_to_generalize
from .config import Dist, SearchConfig, parse_search

__all__ = ["Dist", "SearchConfig", "generalized", "grokking_gap", "objective_values", "parse_search",
           "time_to_generalize"]
