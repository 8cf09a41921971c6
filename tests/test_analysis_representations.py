"""Pure representation metrics and Liu's effective theory, checked against values the papers fix."""

import numpy as np
import pytest

from analysis.effective_theory import addition_pairs, p_unique, p_unique_curve, parallelogram_matrix, unique_linear
from analysis.representations import (
    agop_circulant_distance,
    agop_image,
    circulant_distance,
    explained_variance_entropy,
    fourier_spectrum,
    nearest_circulant,
    parallelograms,
    pca,
    rqi,
)


def test_parallelograms_of_full_addition_set():
    quads = parallelograms(10)
    assert quads.shape[1] == 4
    assert (quads[:, 0] + quads[:, 1] == quads[:, 2] + quads[:, 3]).all()
    assert len({tuple(q) for q in quads}) == len(quads)
    # brute force: unordered couples of distinct samples with equal sums
    pairs = addition_pairs(10)
    expected = sum(1 for a in range(len(pairs)) for b in range(a + 1, len(pairs)) if sum(pairs[a]) == sum(pairs[b]))
    assert len(quads) == expected


@pytest.mark.parametrize("dim", [1, 2, 30])
def test_rqi_of_linear_embedding_is_one(dim):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=dim), rng.normal(size=dim)
    emb = a + np.arange(10)[:, None] * b
    assert rqi(emb) == 1.0


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("dim", [1, 2, 30])
def test_rqi_of_random_embedding_is_small(seed, dim):
    emb = np.random.default_rng(seed).normal(size=(10, dim))
    assert rqi(emb) < 0.1


def test_rqi_counts_partial_structure():
    emb = np.arange(10, dtype=float)[:, None]
    emb[9] += 3.0  # breaks every parallelogram that uses symbol 9
    quads = parallelograms(10)
    uses9 = (quads == 9).any(axis=1).mean()
    assert rqi(emb) == pytest.approx(1 - uses9)


def test_rqi_modular_counts_wraparound_parallelograms():
    p = 11
    line = np.arange(p, dtype=float)[:, None]
    assert rqi(line) == 1.0
    assert rqi(line, modulus=p) < 1.0  # (i, j, m, n) with i + j = m + n + p is not a parallelogram on a line
    assert len(parallelograms(p, modulus=p)) > len(parallelograms(p))


def test_pca_entropy():
    rng = np.random.default_rng(1)
    line = np.outer(np.arange(10.0), rng.normal(size=5))
    res = pca(line)
    assert res.explained_variance_ratio[0] == pytest.approx(1.0)
    assert res.entropy == pytest.approx(0.0, abs=1e-9)
    assert explained_variance_entropy([0.25] * 4) == pytest.approx(np.log(4))
    assert res.projected.shape == (10, 5)


@pytest.mark.parametrize("p,k", [(11, 3), (13, 1), (31, 7), (12, 6)])
def test_fourier_single_frequency(p, k):
    rng = np.random.default_rng(k)
    a = np.arange(p)
    emb = np.stack([np.cos(2 * np.pi * k * a / p + 0.3), np.sin(2 * np.pi * k * a / p + 0.3),
                    0.5 * np.cos(2 * np.pi * k * a / p)], axis=1)
    emb = emb + 0.05 * rng.normal(size=emb.shape) + 2.0  # noise and an offset (the DC term is not counted)
    spec = fourier_spectrum(np.vstack([emb, rng.normal(size=(2, 3))]), p=p)  # two extra tokens are ignored
    assert spec.top_frequency == k
    assert spec.top_fraction >= 0.95
    assert spec.fraction.sum() == pytest.approx(1.0)
    assert len(spec.frequencies) == p // 2


def test_fourier_random_embedding_is_spread():
    spec = fourier_spectrum(np.random.default_rng(0).normal(size=(31, 16)))
    assert spec.top_fraction < 0.3


def test_circulant_distance():
    p = 7
    c = np.random.default_rng(0).normal(size=p)
    i = np.arange(p)
    circ = c[(i[None, :] - i[:, None]) % p]
    assert circulant_distance(circ) == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(nearest_circulant(circ), circ)
    hankel = c[(i[None, :] + i[:, None]) % p]  # depends on a+b: circulant after reflecting b -> -b
    assert circulant_distance(hankel) > 0.3
    assert circulant_distance(hankel, reflect=True) == pytest.approx(0.0, abs=1e-12)
    noise = np.random.default_rng(1).normal(size=(p, p))
    assert circulant_distance(noise) > 0.8

    m = np.block([[circ, hankel], [hankel.T, 2 * circ]])
    d = agop_circulant_distance(m, p)
    assert d.total == pytest.approx(0.0, abs=1e-12)
    assert d.reflected.tolist() == [[False, True], [True, False]]
    d_noise = agop_circulant_distance(m + 0.5 * np.random.default_rng(2).normal(size=m.shape), p)
    assert d_noise.total > 0.1
    img = agop_image(m)
    assert np.abs(img).max() == pytest.approx(1.0) and np.all(np.diag(img) == 0)


def test_parallelogram_matrix_rank():
    p = 10
    full = parallelogram_matrix(addition_pairs(p), p)
    assert np.linalg.matrix_rank(full) == p - 2  # nullity 2: translation and scaling
    assert unique_linear(addition_pairs(p), p)
    line = np.arange(p, dtype=float)
    np.testing.assert_allclose(full @ line, 0)
    np.testing.assert_allclose(full @ np.ones(p), 0)
    assert not unique_linear(addition_pairs(p)[:15], p)


def test_effective_theory_phase_transition_p10():
    """Liu et al. Fig. 4a: the transition sits near fraction 0.4."""
    assert p_unique(10, 0.27, n_samples=400, seed=0) < 0.05
    assert p_unique(10, 0.64, n_samples=400, seed=0) > 0.95


def test_effective_theory_curve_is_monotone_enough():
    curve = p_unique_curve(10, [0.2, 0.4, 0.6, 0.8], n_samples=200, seed=1)
    assert list(curve.columns) == ["fraction", "n_train", "p_unique", "stderr"]
    assert curve["n_train"].tolist() == [11, 22, 33, 44]
    assert curve["p_unique"].iloc[0] < 0.05 < curve["p_unique"].iloc[1] < curve["p_unique"].iloc[2]
    assert curve["p_unique"].iloc[3] > 0.95


def test_val_ceiling_and_the_decodable_share_of_training_sets():
    from analysis.effective_theory import val_ceiling

    assert val_ceiling([0, 1, 2], [1, 2, 2, 3]) == 0.75  # label 3 never trained on
    assert val_ceiling([5], []) == 1.0
    curve = p_unique_curve(10, [0.5, 0.8], n_samples=300, seed=2, threshold=0.9)
    # decodable is a stricter event than unique; at 45/55 about 3 in 8 training sets withhold a whole sum
    assert (curve["p_unique_decodable"] <= curve["p_unique"]).all()
    assert 0.4 < curve["p_unique_decodable"].iloc[1] < 0.85 and curve["p_unique"].iloc[1] > 0.95
