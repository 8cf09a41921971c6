"""Representation metrics of a trained model's final state. Pure numpy: arrays in, numbers/NamedTuples out.

- RQI (Liu et al. 2022, section 3.1): the fraction of permissible parallelograms present in the embedding.
- PCA of the embeddings and the entropy of the explained-variance ratio (Liu et al. section 4.2, Fig. 7).
- Fourier spectrum of embeddings on Z_p: power per frequency, folded over +-k.
- AGOP helpers for rfm (Mallinar et al.): display image, and distance from (block-)circulant.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["CirculantDistance", "FourierSpectrum", "PCAResult", "agop_circulant_distance", "agop_image",
           "circulant_distance", "embedding_scale", "explained_variance_entropy", "fourier_spectrum",
           "nearest_circulant", "parallelograms", "pca", "rqi"]


# -- RQI -----------------------------------------------------------------------------------------------------
def parallelograms(p: int, pairs=None, modulus: int | None = None) -> np.ndarray:
    """Permissible parallelograms (i, j, m, n): two distinct samples (i, j) != (m, n) of `pairs` (default: all
    p(p+1)/2 unordered pairs i <= j) with i + j = m + n (mod `modulus` when given). Each unordered couple of
    samples appears once. Shape (K, 4), int.

    This is Liu et al.'s P_0(D) (Eq. 1); with the full dataset it is the P_0 that RQI divides by.
    """
    if pairs is None:
        pairs = [(i, j) for i in range(p) for j in range(i, p)]
    pairs = sorted({(min(int(i), int(j)), max(int(i), int(j))) for i, j in pairs})
    groups: dict[int, list[tuple[int, int]]] = {}
    for i, j in pairs:
        groups.setdefault(i + j if modulus is None else (i + j) % modulus, []).append((i, j))
    out = [(*a, *b) for g in groups.values() for k, a in enumerate(g) for b in g[k + 1 :]]
    return np.array(out, dtype=int).reshape(len(out), 4)


def embedding_scale(emb: np.ndarray) -> float:
    """RMS distance of the embeddings from their mean: sqrt(mean_i |e_i - mean(e)|^2)."""
    emb = _as_2d(emb)
    return float(np.sqrt(np.mean(np.sum((emb - emb.mean(axis=0)) ** 2, axis=1))))


def rqi(emb: np.ndarray, delta: float = 0.01, pairs=None, modulus: int | None = None) -> float:
    """Representation quality index |P(R)| / |P_0| (Liu et al. Eq. 3), with the paper's tolerance.

    emb: (p, d) embeddings e_0..e_{p-1} (a 1-D array is read as d = 1).
    delta: Definition 1's tolerance as Liu et al.'s toy code applies it: each dimension is standardized over the
        symbols (zero mean, unit std), and (i, j, m, n) is present when the mean over dimensions of
        ((e_i + e_j) - (e_m + e_n))^2 is below delta (0.01). grokray.models.diagnostics.representation_quality
        is the same measure on a pack's stacked embeddings, logged as the `rqi` curve during training.
    pairs: the dataset whose permissible parallelograms are counted (default the full dataset, P_0 = P_0(D_0)).
    modulus: for modular addition (i + j = m + n mod p).
    A perfectly linear embedding e_i = a + i*b has RQI 1; random embeddings have RQI near 0.
    """
    emb = _as_2d(emb)
    quads = parallelograms(emb.shape[0], pairs, modulus)
    if len(quads) == 0:
        return float("nan")
    std = emb.std(axis=0, ddof=1) if emb.shape[0] > 1 else np.zeros(emb.shape[1])
    if not np.any(std > 0):
        return 0.0  # collapsed embedding: no structure, not a "perfect" one
    e = (emb - emb.mean(axis=0)) / np.where(std > 0, std, np.inf)
    gap = e[quads[:, 0]] + e[quads[:, 1]] - e[quads[:, 2]] - e[quads[:, 3]]
    return float((np.mean(gap**2, axis=1) < delta).mean())


# -- PCA -----------------------------------------------------------------------------------------------------
class PCAResult(NamedTuple):
    components: np.ndarray  # (k, d) principal axes, rows
    explained_variance_ratio: np.ndarray  # (k,) sums to 1
    projected: np.ndarray  # (n, k) centred embeddings in the principal basis
    entropy: float  # -sum r log r of explained_variance_ratio (nats)


def explained_variance_entropy(ratio: np.ndarray) -> float:
    """-sum_i r_i log r_i over the nonzero ratios (Liu et al. section 4.2). 0 for one direction, log k for k equal."""
    r = np.asarray(ratio, dtype=float)
    r = r[r > 0]
    r = r / r.sum()
    return float(-(r * np.log(r)).sum())


def pca(emb: np.ndarray) -> PCAResult:
    """PCA of the rows of `emb` (symbols x dims) by SVD of the centred matrix."""
    emb = _as_2d(emb)
    centred = emb - emb.mean(axis=0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    var = s**2
    total = var.sum()
    ratio = var / total if total > 0 else np.zeros_like(var)
    return PCAResult(vt, ratio, centred @ vt.T, explained_variance_entropy(ratio) if total > 0 else 0.0)


# -- Fourier -------------------------------------------------------------------------------------------------
class FourierSpectrum(NamedTuple):
    frequencies: np.ndarray  # 1..p//2 (k and p-k folded together)
    power: np.ndarray  # power per frequency, summed over embedding dims
    fraction: np.ndarray  # power / power.sum()
    top_frequency: int
    top_fraction: float  # share of the (non-constant) power in the strongest frequency
    dc_fraction: float  # share of the total power in frequency 0 (the mean embedding), reported, not counted


def fourier_spectrum(emb: np.ndarray, p: int | None = None) -> FourierSpectrum:
    """Discrete Fourier transform of the embeddings over the group Z_p (along the symbol axis).

    emb: (n, d) with n >= p; only the first p rows (the residues) are used, so a transformer's extra tokens
    (op, '=') can stay in. Frequencies k and p-k carry the same real content and are folded together; the
    constant term k = 0 is the mean embedding, not structure, and is left out of `fraction`.
    """
    emb = _as_2d(emb)
    p = emb.shape[0] if p is None else p
    if emb.shape[0] < p:
        raise ValueError(f"need at least p={p} embedding rows, got {emb.shape[0]}")
    f = np.fft.fft(emb[:p], axis=0)
    full = np.sum(np.abs(f) ** 2, axis=1)  # (p,)
    ks = np.arange(1, p // 2 + 1)
    power = np.array([full[k] + (full[p - k] if p - k != k else 0.0) for k in ks])
    total = power.sum()
    fraction = power / total if total > 0 else np.zeros_like(power)
    top = int(np.argmax(fraction)) if len(fraction) else 0
    return FourierSpectrum(ks, power, fraction, int(ks[top]) if len(ks) else 0,
                           float(fraction[top]) if len(fraction) else float("nan"),
                           float(full[0] / full.sum()) if full.sum() > 0 else 0.0)


# -- AGOP (rfm) ----------------------------------------------------------------------------------------------
def agop_image(m: np.ndarray, remove_diagonal: bool = True) -> np.ndarray:
    """The AGOP / feature matrix ready to show as an image: diagonal zeroed (it dwarfs the structure) and scaled
    so the largest |entry| is 1."""
    img = np.array(m, dtype=float, copy=True)
    if remove_diagonal:
        np.fill_diagonal(img, 0.0)
    peak = np.abs(img).max()
    return img / peak if peak > 0 else img


def nearest_circulant(a: np.ndarray) -> np.ndarray:
    """Frobenius-nearest circulant matrix C[i, j] = c[(j - i) mod n]: c_k is the mean of the k-th wrapped diagonal."""
    a = np.asarray(a, dtype=float)
    n = a.shape[0]
    if a.shape != (n, n):
        raise ValueError(f"need a square matrix, got {a.shape}")
    i = np.arange(n)
    c = np.array([a[i, (i + k) % n].mean() for k in range(n)])
    return c[(i[None, :] - i[:, None]) % n]


def _reflect_columns(a: np.ndarray) -> np.ndarray:
    n = a.shape[1]
    return a[:, (-np.arange(n)) % n]


def circulant_distance(a: np.ndarray, reflect: bool = False) -> float:
    """|A - C(A)|_F / |A|_F with C the nearest circulant. reflect=True first reindexes columns j -> -j mod n, so a
    matrix depending on i + j (the a+b block of modular addition) counts as circulant."""
    a = np.asarray(a, dtype=float)
    a = _reflect_columns(a) if reflect else a
    norm = np.linalg.norm(a)
    return 0.0 if norm == 0 else float(np.linalg.norm(a - nearest_circulant(a)) / norm)


class CirculantDistance(NamedTuple):
    total: float  # |M - C|_F / |M|_F, C block-wise nearest (reflected where that is nearer)
    blocks: np.ndarray  # (b, b) relative distance of each p x p block
    reflected: np.ndarray  # (b, b) bool: the block is nearer to a reflected circulant


def agop_circulant_distance(m: np.ndarray, p: int, remove_diagonal: bool = False) -> CirculantDistance:
    """Distance of an rfm feature matrix from block-circulant (Mallinar et al.: RFM learns block-circulant features).

    m: (b*p, b*p), e.g. b = 2 for one-hot(a) + one-hot(b) inputs. Each p x p block is compared with its nearest
    circulant, plain or column-reflected (whichever is nearer). remove_diagonal drops the main diagonal first.
    """
    m = np.array(m, dtype=float, copy=True)
    n = m.shape[0]
    if m.shape != (n, n) or n % p:
        raise ValueError(f"need a square matrix whose side is a multiple of p={p}, got {m.shape}")
    if remove_diagonal:
        np.fill_diagonal(m, 0.0)
    b = n // p
    dist = np.zeros((b, b))
    refl = np.zeros((b, b), dtype=bool)
    residual = 0.0
    for r in range(b):
        for c in range(b):
            block = m[r * p : (r + 1) * p, c * p : (c + 1) * p]
            res = []
            for reflect in (False, True):
                x = _reflect_columns(block) if reflect else block
                res.append(float(np.linalg.norm(x - nearest_circulant(x)) ** 2))
            k = int(np.argmin(res))
            refl[r, c] = bool(k)
            residual += res[k]
            bn = np.linalg.norm(block)
            dist[r, c] = 0.0 if bn == 0 else np.sqrt(res[k]) / bn
    norm = np.linalg.norm(m)
    return CirculantDistance(0.0 if norm == 0 else float(np.sqrt(residual) / norm), dist, refl)


def _as_2d(emb) -> np.ndarray:
    emb = np.asarray(emb, dtype=float)
    if emb.ndim == 1:
        emb = emb[:, None]
    if emb.ndim != 2:
        raise ValueError(f"embeddings must be (symbols, dims), got shape {emb.shape}")
    return emb
