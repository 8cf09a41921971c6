"""Liu et al.'s parallelograms of an addition training set, in numpy: the equations a training set implies for an
ideal model, and the ideal accuracy they allow (Appendix E). A property of the split alone, so the engine reports
it for every run of an addition task and the analysis can tell an undecodable split from a failed model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def parallelogram_matrix(pairs: Iterable[tuple[int, int]], p: int, modulus: int | None = None) -> np.ndarray:
    """Rows e_i + e_j - e_m - e_n for training samples with equal sums (mod `modulus` when given).

    Only consecutive samples of each equal-sum group get a row: the differences of all other couples in the group
    are sums of these, so the row space (hence the rank) equals that of the full set of parallelogram equations.
    """
    groups: dict[int, list[tuple[int, int]]] = {}
    for i, j in pairs:
        s = i + j if modulus is None else (i + j) % modulus
        groups.setdefault(s, []).append((int(i), int(j)))
    rows = []
    for group in groups.values():
        for (i, j), (m, n) in zip(group, group[1:], strict=False):
            row = np.zeros(p)
            row[i] += 1
            row[j] += 1
            row[m] -= 1
            row[n] -= 1
            rows.append(row)
    return np.array(rows).reshape(len(rows), p)


def ideal_accuracy(train_pairs: Sequence[tuple[int, int]], val_pairs: Sequence[tuple[int, int]], p: int,
                   modulus: int | None = None, tol: float = 1e-9) -> float:
    """Liu et al.'s ideal accuracy (Appendix E, Eqs. 13-14, 17) on the held-out pairs: the share an ideal model
    (zero training loss, injective decoder) can get right from this training set alone.

    The training set's parallelogram equations A imply every parallelogram whose equation lies in A's row space
    (the augmented set). A held-out (i, j) is decodable when some training sample (m, n) with the same sum makes
    (i, j, m, n) such an implied parallelogram: then e_i + e_j = e_m + e_n and the decoder's known answer for
    (m, n) is right for (i, j). A sum with no training sample is never decodable. It bounds the real accuracy
    from above; a split whose ideal accuracy is below the phase threshold cannot reach it whatever is trained.
    """
    val_pairs = list(val_pairs)
    if not val_pairs:
        return 1.0
    a = parallelogram_matrix(train_pairs, p, modulus)
    basis = np.linalg.svd(a, full_matrices=False)[2] if len(a) else np.zeros((0, p))
    rank = int(np.sum(np.linalg.svd(a, compute_uv=False) > tol * max(1, p))) if len(a) else 0
    basis = basis[:rank]
    by_sum: dict[int, list[tuple[int, int]]] = {}
    for m, n in train_pairs:
        by_sum.setdefault((m + n) if modulus is None else (m + n) % modulus, []).append((int(m), int(n)))

    def implied(row: np.ndarray) -> bool:
        return bool(np.linalg.norm(row - basis.T @ (basis @ row)) <= 1e-7 * max(1.0, np.linalg.norm(row)))

    hits = 0
    for i, j in val_pairs:
        s = (i + j) if modulus is None else (i + j) % modulus
        for m, n in by_sum.get(s, []):
            row = np.zeros(p)
            row[i] += 1
            row[j] += 1
            row[m] -= 1
            row[n] -= 1
            if implied(row):
                hits += 1
                break
    return hits / len(val_pairs)


def split_ideal_accuracy(data, train_idx, val_idx) -> float | None:
    """The ideal accuracy of one member's split of `data` (a TaskData whose meta marks it as Liu's addition), or
    None for a task it does not apply to."""
    if not data.meta.get("parallelograms"):
        return None
    pairs = [tuple(int(v) for v in row) for row in data.x.tolist()]
    return ideal_accuracy([pairs[i] for i in train_idx.tolist()], [pairs[i] for i in val_idx.tolist()],
                          int(data.meta["p"]))
