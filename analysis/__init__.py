"""Analysis of grokray sweeps: MLflow runs -> DataFrames -> phases, phase diagrams, comparisons, figures.

Data functions (load, diagram, representations, effective_theory) return DataFrames and NamedTuples; the
functions in `analysis.plots` only draw them. mlflow is imported when runs are loaded, matplotlib when
`analysis.plots` is imported.
"""

from .artifacts import load_states, representation_metrics, state_metrics
from .diagram import (
    Comparison,
    FractionCurve,
    PhaseGrid,
    compare,
    generalization_vs_fraction,
    is_log_spaced,
    log_axes,
    phase_counts,
    phase_grid,
    pivot,
    remaining_axes,
    transition_lines,
)
from .effective_theory import addition_pairs, p_unique, p_unique_curve, parallelogram_matrix, unique_linear
from .load import load_curves, load_runs, parent_runs, runs_to_frame
from .pipeline import Analysis, analyze
from .representations import (
    CirculantDistance,
    FourierSpectrum,
    PCAResult,
    agop_circulant_distance,
    agop_image,
    circulant_distance,
    embedding_scale,
    explained_variance_entropy,
    fourier_spectrum,
    nearest_circulant,
    parallelograms,
    pca,
    rqi,
)

__all__ = [
    "Analysis", "analyze", "load_states", "representation_metrics", "state_metrics",
    "CirculantDistance", "Comparison", "FourierSpectrum", "FractionCurve", "PCAResult", "PhaseGrid",
    "addition_pairs", "agop_circulant_distance", "agop_image", "circulant_distance", "compare", "embedding_scale",
    "explained_variance_entropy", "fourier_spectrum", "generalization_vs_fraction", "is_log_spaced", "load_curves",
    "load_runs", "log_axes", "nearest_circulant", "p_unique", "p_unique_curve", "parallelogram_matrix",
    "parallelograms", "parent_runs", "pca", "phase_counts", "phase_grid", "pivot", "remaining_axes", "rqi",
    "runs_to_frame", "transition_lines", "unique_linear",
]
