"""Liu et al.'s effective theory for toy addition: when does a training set pin down a linear representation?

Section 3.2: a training set D (unordered pairs i <= j of the p symbols) implies the parallelogram equations
e_i + e_j = e_m + e_n for every two of its samples with i + j = m + n (an ideal model with zero training loss and
an injective decoder must satisfy them). Each embedding dimension obeys the same equations, so take 1D embeddings:
the equations form a matrix A (one row per parallelogram, p columns). Its null space always contains the
translations and scalings (e_i = a + i*b), so nullity(A) >= 2. When nullity(A) == 2 (rank(A) == p - 2) the
representation is unique up to those two degrees of freedom and the model generalizes; the probability of that
over random training sets of a given size has a phase transition near a data fraction of 0.4 (Figure 4a).

Everything here is numpy only and computed by sampling training sets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from grokray.tasks.parallelograms import ideal_accuracy, parallelogram_matrix

__all__ = ["addition_pairs", "ideal_accuracy", "p_unique", "p_unique_curve", "parallelogram_matrix", "unique_linear",
           "val_ceiling"]


def addition_pairs(p: int) -> list[tuple[int, int]]:
    """The full toy-addition dataset: the p(p+1)/2 unordered pairs (i, j), i <= j."""
    return [(i, j) for i in range(p) for j in range(i, p)]


def unique_linear(pairs: Iterable[tuple[int, int]], p: int) -> bool:
    """True when the parallelogram equations of `pairs` leave only e_i = a + i*b: rank(A) == p - 2."""
    a = parallelogram_matrix(pairs, p)
    return a.shape[0] >= p - 2 and int(np.linalg.matrix_rank(a)) == p - 2


def _n_train(p: int, fraction: float) -> int:
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must lie in [0, 1], got {fraction}")
    return int(round(fraction * p * (p + 1) / 2))


def val_ceiling(train_labels: Iterable, val_labels: Sequence) -> float:
    """The best validation accuracy any decoder can reach: the share of held-out points whose label occurs in
    training. A label never trained on (toy addition: both pairs of a sum withheld) has a target the decoder never
    saw, so it is missed whatever the representation."""
    seen = set(np.asarray(list(train_labels)).tolist())
    val = np.asarray(list(val_labels))
    return float(np.mean([v in seen for v in val.tolist()])) if len(val) else 1.0


def p_unique(p: int, fraction: float, n_samples: int = 1000, seed: int = 0, threshold: float | None = None) -> float:
    """Probability that a uniformly random training set of round(fraction * p(p+1)/2) pairs determines a unique
    linear representation (Liu et al. Fig. 4a), estimated from `n_samples` sampled training sets. With a
    threshold, the training set must also leave a val_ceiling >= threshold (every label decodable enough)."""
    pairs = np.array(addition_pairs(p))
    sums = pairs.sum(1)
    n = _n_train(p, fraction)
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(n_samples):
        idx = rng.choice(len(pairs), size=n, replace=False)
        ok = unique_linear(pairs[idx], p)
        if ok and threshold is not None:
            held = np.setdiff1d(np.arange(len(pairs)), idx)
            ok = val_ceiling(sums[idx], sums[held]) >= threshold
        hits += ok
    return hits / n_samples


def p_unique_curve(p: int, fractions: Sequence[float], n_samples: int = 1000, seed: int = 0,
                   threshold: float | None = None) -> pd.DataFrame:
    """p_unique over a range of fractions: columns fraction, n_train, p_unique, stderr (binomial), and with a
    threshold p_unique_decodable (also every held-out label decodable to that accuracy)."""
    rows = []
    for k, f in enumerate(fractions):
        prob = p_unique(p, float(f), n_samples, seed + k)
        row = {"fraction": float(f), "n_train": _n_train(p, float(f)), "p_unique": prob,
               "stderr": float(np.sqrt(prob * (1 - prob) / n_samples))}
        if threshold is not None:
            row["p_unique_decodable"] = p_unique(p, float(f), n_samples, seed + k, threshold)
        rows.append(row)
    cols = ["fraction", "n_train", "p_unique", "stderr"] + (["p_unique_decodable"] if threshold is not None else [])
    return pd.DataFrame(rows, columns=cols)
