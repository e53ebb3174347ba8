"""Class-balanced counting (class_weight="balanced") and zero/non-zero discretisation (issue 22 levers).

Oracles: plain dict-counting weighted entropies in tests/reference.py.
"""
import numpy as np
import pytest
import reference as ref
import scipy.sparse as sp

import bioqpfs
from bioqpfs import measures
from bioqpfs._kernels import information as info


@pytest.fixture(scope="module")
def coded():
    rng = np.random.default_rng(7)
    n, m = 61, 7
    y = np.repeat([0, 1, 2], [40, 15, 6])
    return rng.integers(0, 3, size=(n, m)).astype(np.uint8), rng.integers(0, 4, size=(n, m)).astype(np.uint8), y


@pytest.mark.parametrize("four_levels", [False, True])
def test_weighted_counts_match_dict_reference(coded, four_levels):
    codes3, codes4, y = coded
    codes = codes4 if four_levels else codes3
    m = codes.shape[1]
    w = np.random.default_rng(1).uniform(0.1, 5.0, size=codes.shape[0])
    t = info.CodeTable(codes, weights=w)
    want = np.array([[ref.weighted_mutual_info(codes[:, i], codes[:, j], w) for j in range(m)] for i in range(m)])
    np.testing.assert_allclose(info.pairwise_information(t, None, "mi"), want, atol=1e-12)
    np.testing.assert_allclose(info.pairwise_information(t, None, "mi", rows=np.array([4, 1])), want[[4, 1]],
                               atol=1e-12)
    tg = info.CodeTable(codes, groups=y, weights=w)
    cmi = np.array([[ref.weighted_mutual_info(codes[:, i], y, w) if i == j else
                     ref.weighted_cmi(codes[:, i], y, codes[:, j], w) for j in range(m)] for i in range(m)])
    np.testing.assert_allclose(info.pairwise_information(tg, None, "cmi"), cmi, atol=1e-12)
    given_c = np.array([[ref.weighted_cmi(codes[:, i], codes[:, j], y, w) for j in range(m)] for i in range(m)])
    off = ~np.eye(m, dtype=bool)
    np.testing.assert_allclose(info.pairwise_information(tg, None, "mi_given_class", base=2)[off], given_c[off],
                               atol=1e-12)
    F = np.array([ref.weighted_mutual_info(codes[:, i], y, w) for i in range(m)])
    np.testing.assert_allclose(info.class_relevance(tg) / np.log(2), F, atol=1e-12)


def test_unit_weights_equal_plain_counts(coded):
    codes, _, y = coded
    plain = info.pairwise_information(info.CodeTable(codes, groups=y), None, "cmi_mean")
    ones = info.pairwise_information(info.CodeTable(codes, groups=y, weights=np.ones(codes.shape[0])), None, "cmi_mean")
    np.testing.assert_allclose(ones, plain, atol=1e-13)


def test_balanced_weights_make_the_class_prior_uniform(coded):
    codes, _, y = coded
    w = info.class_sample_weights(y, "balanced")
    assert w.sum() == pytest.approx(y.size)
    np.testing.assert_allclose(np.bincount(y, weights=w), y.size / 3)
    # I(X; C) under balanced weights = the MI of a dataset where every class is replicated to equal size
    reps = np.lcm.reduce(np.bincount(y)) // np.bincount(y)
    idx = np.concatenate([np.repeat(np.flatnonzero(y == c), reps[c]) for c in range(3)])
    F = measures.relevance(codes, y, discretization=None, class_weight="balanced")
    F_rep = measures.relevance(codes[idx], y[idx], discretization=None)
    np.testing.assert_allclose(F, F_rep, atol=1e-12)


def test_balanced_relevance_ranks_a_rare_type_marker_first():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], [300, 300, 12])
    X = rng.normal(size=(y.size, 40))
    X[:, 3] += 3.0 * (y == 2)          # marks the rare type only
    X[:, 5] += 1.2 * (y == 0)          # a split of the two big types
    plain = measures.relevance(X, y)
    bal = measures.relevance(X, y, class_weight="balanced")
    assert np.argmax(plain) == 5 and np.argmax(bal) == 3


@pytest.mark.parametrize("method", ["qpfs", "maxrel", "mrmr_mid", "mrmr_miq", "jmi", "cife", "spec_cmi"])
def test_class_weight_in_selectors_equals_replicated_classes(method):
    rng = np.random.default_rng(3)
    y = np.repeat([0, 1, 2], [30, 20, 10])
    X = rng.normal(size=(y.size, 25)) + 1.5 * (y[:, None] == (np.arange(25) % 4)[None, :])
    codes = measures.discretize(X)
    reps = np.array([2, 3, 6])
    idx = np.concatenate([np.repeat(np.flatnonzero(y == c), reps[c]) for c in range(3)])
    a = bioqpfs.select(codes, y, method=method, n_genes=8, discretization=None, class_weight="balanced")
    b = bioqpfs.select(codes[idx], y[idx], method=method, n_genes=8, discretization=None)
    np.testing.assert_array_equal(a.ranking[:8], b.ranking[:8])
    assert a.params["class_weight"] == "balanced"


def test_class_weight_bad_values_are_named():
    X = np.random.default_rng(0).normal(size=(20, 5))
    y = np.repeat([0, 1], 10)
    with pytest.raises(ValueError, match="class_weight must be None or 'balanced'"):
        bioqpfs.select(X, y, method="qpfs", class_weight="balance")
    with pytest.raises(ValueError, match="class_weight"):
        bioqpfs.select(X, y, method="qpfs", similarity="correlation", class_weight="balanced")
    with pytest.raises(ValueError, match="kind='mi'"):
        measures.relevance(X, y, kind="hall", class_weight="balanced")


@pytest.mark.parametrize("n_bins", [2, 3, 5])
def test_zero_quantile_codes_match_reference(n_bins):
    rng = np.random.default_rng(2)
    X = np.where(rng.random((80, 12)) < 0.6, 0.0, rng.lognormal(size=(80, 12)))
    X[:, 0] = rng.normal(size=80)          # no zeros: plain quantiles
    X[:, 1] = 0.0                          # all zero: one level
    X[:5, 2] = 0.0
    X[5:, 2] = 2.5                         # one non-zero value
    X[:, 3] = rng.integers(-2, 3, size=80)  # negative values, zeros and heavy ties
    X[:, 4] = np.round(X[:, 4], 1)          # ties among the non-zero values
    want = ref.zero_quantile_codes(X, n_bins)
    np.testing.assert_array_equal(measures.discretize(X, "zero_quantile", n_bins=n_bins), want)
    Xs = sp.csr_matrix(X)
    Xs.data = np.concatenate([Xs.data, [0.0]])[: Xs.data.size]  # keep the same matrix
    np.testing.assert_array_equal(measures.discretize(Xs, "zero_quantile", n_bins=n_bins), want)
    # explicit stored zeros are zeros
    coo = sp.coo_matrix(X)
    explicit = sp.csc_matrix((np.concatenate([coo.data, [0.0]]), (np.concatenate([coo.row, [3]]),
                              np.concatenate([coo.col, [1]]))), shape=X.shape)
    np.testing.assert_array_equal(measures.discretize(explicit, "zero_quantile", n_bins=n_bins), want)


def test_auto_discretization_follows_the_zero_fraction():
    rng = np.random.default_rng(5)
    dense = rng.normal(size=(50, 6))
    sparse = np.where(rng.random((50, 6)) < 0.7, 0.0, rng.lognormal(size=(50, 6)))
    assert measures.resolve_discretization(dense, "auto") == "mean_sd"
    assert measures.resolve_discretization(sp.csr_matrix(sparse), "auto") == "zero_quantile"
    np.testing.assert_array_equal(measures.discretize(sparse, "auto"), measures.discretize(sparse, "zero_quantile"))
    np.testing.assert_array_equal(measures.discretize(dense, "auto"), measures.discretize(dense, "mean_sd"))
    y = np.repeat([0, 1], 25)
    sel = bioqpfs.select(sparse, y, method="qpfs", discretization="auto")
    assert sel.params["discretization"] == "auto" and sel.params["discretization_used"] == "zero_quantile"
