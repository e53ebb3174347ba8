"""MST relevance against scipy's minimum_spanning_tree and brute force over tie orders."""
import math

import numpy as np
import pytest
from reference import mst_cross_edges_scipy, tie_order_expectation

import bioqpfs
from bioqpfs import measures
from bioqpfs._kernels import mst


def test_1d_counts_match_scipy_without_ties(rng):
    n, m = 40, 12
    y = rng.integers(0, 3, n)
    X = rng.normal(size=(n, m))
    got = mst.cross_edges_1d(X, y)
    ref = [mst_cross_edges_scipy(X[:, j], y)[0] for j in range(m)]
    np.testing.assert_array_equal(got, ref)


def test_1d_tie_rule_is_expectation_over_tie_orders(rng):
    n = 11
    for trial in range(6):
        y = rng.integers(0, 3, n)
        x = rng.integers(0, 4, n).astype(float)  # heavy ties, groups of a few samples
        sizes = np.unique(x, return_counts=True)[1]
        if np.prod([math.factorial(s) for s in sizes]) > 50000:
            continue
        expect, chain = tie_order_expectation(x, y)
        got = mst.cross_edges_1d(x[:, None], y)[0]
        assert got == pytest.approx(expect, abs=1e-12)
        # every tie order is a minimum spanning tree: its length equals scipy's MST length
        chain_len = float(((x[chain][1:] - x[chain][:-1]) ** 2).sum())
        assert chain_len == pytest.approx(mst_cross_edges_scipy(x, y)[1])
        # and the count lies between the fewest-cross MST (scipy, lexicographic) and the chain maximum
        assert got >= mst_cross_edges_scipy(x, y)[0] - 1e-12


def test_1d_constant_gene_is_chance_and_separated_gene_is_one(rng):
    y = np.repeat([0, 1, 2], 10)
    X = np.column_stack([np.ones(30), y + 0.01 * rng.normal(size=30), rng.normal(size=30)])
    F, cross = mst.mst_relevance(X, y)
    assert cross[0] == pytest.approx(mst.permutation_expectation(y))
    assert F[0] == 0.0
    assert cross[1] == 2 and F[1] == pytest.approx(1 - 2 / mst.permutation_expectation(y))
    expected = 29 * (1 - 3 * 10 * 9 / (30 * 29))
    assert mst.permutation_expectation(y) == pytest.approx(expected)
    assert 0.0 <= F[2] < F[1]


def test_multid_counts_match_scipy(rng):
    n = 35
    y = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 5))
    D2 = mst.squared_distances(X)
    assert mst.mst_cross_count(D2, y) == mst_cross_edges_scipy(X, y)[0]
    # ties: duplicated samples (distance 0) and a grid with many equal distances
    Xt = np.vstack([X[:10], X[:10], X[:15]])
    yt = rng.integers(0, 3, Xt.shape[0])
    assert mst.mst_cross_count(mst.squared_distances(Xt), yt) == mst_cross_edges_scipy(Xt, yt)[0]
    G = rng.integers(0, 3, size=(30, 2)).astype(float)
    yg = rng.integers(0, 2, 30)
    assert mst.mst_cross_count(mst.squared_distances(G), yg) == mst_cross_edges_scipy(G, yg)[0]


def test_mst_cpx_matches_leave_one_out_scipy(rng):
    n, m = 30, 7
    y = rng.integers(0, 3, n)
    X = rng.normal(size=(n, m)) * rng.uniform(0.5, 5, m)
    X[:, 2] += 2 * y
    delta, f, f_loo = mst.mst_cpx(X, y)
    Z = (X - X.mean(0)) / X.std(0, ddof=1)
    assert f == mst_cross_edges_scipy(Z, y)[0]
    ref = np.array([mst_cross_edges_scipy(np.delete(Z, i, axis=1), y)[0] for i in range(m)])
    np.testing.assert_array_equal(f_loo, ref)
    np.testing.assert_allclose(delta, (ref - f) / f)
    assert np.argmax(delta) == 2
    # ties from duplicated samples and integer data
    Xi = rng.integers(0, 3, size=(24, 4)).astype(float)
    yi = rng.integers(0, 2, 24)
    _, fi, fli = mst.mst_cpx(Xi, yi, standardize_genes=False)
    assert fi == mst_cross_edges_scipy(Xi, yi)[0]
    assert fli.tolist() == [mst_cross_edges_scipy(np.delete(Xi, i, axis=1), yi)[0] for i in range(4)]


def test_mst_cpx_zero_complexity_and_refusal(rng):
    y = np.repeat([0, 1], 10)
    X = np.column_stack([y * 10.0 + rng.normal(size=20) * 0.1, rng.normal(size=20)])
    delta, f, f_loo = mst.mst_cpx(X, y, standardize_genes=False)
    assert f == 1  # two separated clusters: one bridging edge
    y2 = np.repeat([0, 1], 10)
    X2 = np.column_stack([y2 * 10.0, y2 * 10.0 + rng.normal(size=20) * 0.01])
    d2, f2, fl2 = mst.mst_cpx(X2, y2, standardize_genes=False)
    assert f2 == 1 and np.all(d2 == 0)
    with pytest.raises(ValueError, match="subsample the samples"):
        mst.mst_cpx(np.zeros((1000, 50)), np.zeros(1000, dtype=int), max_work=1e6)


def test_f_is_at_least_classes_minus_one(rng):
    # a spanning tree over C classes needs >= C - 1 cross edges, so f = 0 never reaches the division
    y = np.repeat([0, 1, 2], 8)
    X = np.column_stack([y * 100.0 + rng.normal(size=24), rng.normal(size=24)])
    delta, f, f_loo = mst.mst_cpx(X, y, standardize_genes=False)
    assert f == 2 and np.all(f_loo >= 2)


def test_public_relevance_and_qpfs(rng):
    n = 60
    y = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 20))
    X[:, 4] += 3 * y
    X0 = X.copy()
    F = measures.relevance(X, y, kind="mst")
    assert F.shape == (20,) and np.all(F >= 0) and np.argmax(F) == 4
    Fc = measures.relevance(X, y, kind="mst_cpx")
    assert np.all(Fc >= 0) and np.argmax(Fc) == 4
    np.testing.assert_array_equal(X, X0)
    from bioqpfs.selectors._common import similarity_and_relevance

    y_codes = np.asarray(y)
    for kind, ref in (("mst", F), ("mst_cpx", Fc)):
        Q, F_used, name, _ = similarity_and_relevance(X, y_codes, similarity="mi", relevance=kind,
                                                      discretization="mean_sd", n_bins=3, base=2)
        assert name == kind and Q.shape == (20, 20)
        np.testing.assert_allclose(F_used, ref)
    sel = bioqpfs.select(X, y, method="qpfs", relevance=F, n_genes=3)
    assert sel.ranking[0] == 4
    with pytest.raises(ValueError, match="mst_cpx"):
        measures.relevance(X, y, kind="bogus")


def test_blocks_and_sparse_input_give_the_same_counts(rng, monkeypatch):
    import scipy.sparse as sp

    n, m = 30, 50
    y = rng.integers(0, 2, n)
    X = np.where(rng.random((n, m)) < 0.6, 0.0, rng.poisson(3, (n, m)).astype(float))  # zero-inflated: many ties
    full = mst.cross_edges_1d(X, y)
    monkeypatch.setattr(mst, "_SORT_BUDGET", 8 * 3 * n * 7)  # blocks of 7 genes
    np.testing.assert_array_equal(mst.cross_edges_1d(X, y), full)
    np.testing.assert_allclose(measures.relevance(sp.csr_matrix(X), y, kind="mst"),
                               np.maximum(0, 1 - full / mst.permutation_expectation(y)))


@pytest.mark.parametrize("factor", [1e160, 1e-170, 2.0**600])
def test_mst_cpx_relevance_does_not_depend_on_a_genes_units(factor):
    """mst_cpx z-scores the genes: X.std overflowed (1e160) or underflowed (1e-170), the gene became all 0 and
    its relevance 0 (the informative genes 0 and 1 dropped out of a qpfs panel, noise genes came in)."""
    rng = np.random.default_rng(4)
    y = np.repeat(np.arange(3), 14)[:40]
    X = rng.normal(size=(40, 8))
    X[:, :4] += y[:, None] * np.array([1.5, 1.0, 0.7, 0.4])
    F = measures.relevance(X, y, kind="mst_cpx")
    assert F[0] > 0
    for genes in ([0], slice(None)):
        scaled = X.copy()
        scaled[:, genes] *= factor
        np.testing.assert_allclose(measures.relevance(scaled, y, kind="mst_cpx"), F, rtol=1e-12, atol=1e-15)
