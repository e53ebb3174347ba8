"""The one discretisation entry point (``_kernels.discretize.codes``) and its vector form (issue 12, item 2)."""
from __future__ import annotations

import numpy as np
import pytest
import reference as ref
import scipy.sparse as sp

from bioqpfs import measures
from bioqpfs._kernels import discretize as disc


def test_codes_dispatches_every_rule_to_its_kernel(rng):
    X = rng.normal(size=(40, 7))
    X[:, 3] = np.where(rng.random(40) < 0.6, 0.0, np.abs(X[:, 3]))  # zero-inflated gene
    y = rng.integers(0, 3, 40)
    normal = [0, 1, 2, 4, 5, 6]  # every bin used: no compaction, so the codes are the oracle's bins (QPFS 2.5)
    np.testing.assert_array_equal(disc.codes(X)[0][:, normal], ref.mean_sd_codes(X[:, normal]))
    for rule, kw, direct in [("quantile", {"n_bins": 4}, lambda: disc.quantile_codes(X, 4)),
                             ("zero_quantile", {"n_bins": 4}, lambda: disc.zero_quantile_codes(X, 4)),
                             ("mdl", {"y_codes": y}, lambda: disc.mdl_codes(X, y))]:
        got, want = disc.codes(X, rule, **kw), direct()
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    with pytest.raises(ValueError, match="pass the class labels"):
        disc.codes(X, "mdl")
    with pytest.raises(ValueError, match="unknown discretization 'bins'"):
        disc.codes(X, "bins")
    # the measures face and the selectors' helper are the same function, not a second dispatch
    assert measures.codes_and_levels is disc.codes
    assert measures.resolve_discretization is disc.resolve_discretization


def test_auto_resolves_by_the_zero_fraction(rng):
    dense = rng.normal(size=(30, 5))
    sparse = sp.random(30, 5, density=0.3, random_state=0, format="csr")
    assert disc.resolve_discretization(dense, "auto") == "mean_sd"
    assert disc.resolve_discretization(sparse, "auto") == "zero_quantile"
    np.testing.assert_array_equal(disc.codes(sparse, "auto", n_bins=3)[0], disc.zero_quantile_codes(sparse, 3)[0])


def test_integer_codes_are_read_as_integers():
    """discretization=None on integer codes: no float64 round trip, which merged levels 2**53 and 2**53 + 1."""
    big = 2**53
    levels = np.array([[big, 0], [big + 1, 1], [big, 0], [big + 1, 1]], dtype=np.int64)
    codes, n_levels = disc.codes(levels, None)
    np.testing.assert_array_equal(n_levels, [2, 2])
    np.testing.assert_array_equal(codes[:, 0], [0, 1, 0, 1])
    # through the public face too: the gene has two equally likely levels, 1 bit
    np.testing.assert_allclose(measures.entropy(levels, discretization=None), [1.0, 1.0])
    u8 = np.array([[0, 3], [255, 3], [7, 1]], dtype=np.uint8)
    np.testing.assert_array_equal(disc.codes(u8, None)[0], [[0, 1], [2, 1], [1, 0]])


@pytest.mark.parametrize("scale", [1.0, 2.0**600, 2.0**-600])
def test_vector_codes_is_the_matrix_rule_at_any_scale(rng, scale):
    """k-means' vector form gives the codes of the matrix rule, also for values whose squares overflow or
    underflow (the extreme-value guard the k-means copy lacked: at 2**600 every value fell in one bin)."""
    V = rng.normal(size=(57, 6)) * rng.uniform(0.1, 5, 6) + rng.normal(size=6)
    out = np.empty(57, dtype=np.uint8)
    for j in range(V.shape[1]):
        v = V[:, j] * scale
        assert disc.vector_codes(v.copy(), disc.VECTOR_RULES["mean_sd"], 3, out) == 3
        np.testing.assert_array_equal(out, ref.mean_sd_codes(V[:, j:j + 1])[:, 0])
        np.testing.assert_array_equal(out, disc.codes(v[:, None])[0][:, 0])
        disc.vector_codes(v.copy(), disc.VECTOR_RULES["quantile"], 4, out)
        np.testing.assert_array_equal(out, disc.codes(v[:, None], "quantile", n_bins=4)[0][:, 0])


def _two_point_genes(rng, n=40):
    """Genes mean +- sd leaves in one bin: two values, half the samples each (0/1, 2/7, a bool column, the
    balanced labels themselves), and one with 21 of 40 (still inside: p < n / (2n - 1)); a gene of 3 values."""
    y = np.repeat([0, 1], n // 2)
    X = np.column_stack([y, np.where(y == 1, 7.0, 2.0), rng.permutation(y), (np.arange(n) < 21).astype(float),
                         rng.normal(size=n)])
    return X, y


def test_mean_sd_cuts_a_two_point_gene_at_the_mean(rng):
    """Every value within mu -+ sd: the paper's bins gave one code, so a gene equal to two balanced classes had
    I(X; C) = 0 and was never selected; it is cut at the mean now (the plain-loop reference does the same)."""
    X, y = _two_point_genes(rng)
    codes, n_levels = disc.codes(X)
    np.testing.assert_array_equal(n_levels, [2, 2, 2, 2, 3])
    np.testing.assert_array_equal(codes[:, :4], ref.mean_sd_codes(X[:, :4]))
    np.testing.assert_array_equal(codes[:, 0], y)
    for make in (sp.csr_matrix, sp.csc_matrix):
        np.testing.assert_array_equal(disc.codes(make(X[:, :4]))[0], codes[:, :4])
    assert measures.relevance(X, y)[0] == pytest.approx(1.0)  # one bit, as the reference: it was 0
    assert measures.relevance(X[:, :1].astype(bool), y)[0] == pytest.approx(1.0)  # bool data too
    out = np.empty(X.shape[0], dtype=np.uint8)
    for j in range(X.shape[1]):  # k-means' vector form: the same rule
        assert disc.vector_codes(X[:, j].copy(), disc.VECTOR_RULES["mean_sd"], 3, out) == n_levels[j]
        np.testing.assert_array_equal(out, codes[:, j])
    constant = np.full((10, 1), 4.2)  # sd from round-off only: still one level
    assert disc.codes(constant)[1][0] == 1


def test_mean_sd_two_point_gene_on_dask_and_per_batch(rng):
    """The Dask rule (one more pass, only when such a gene exists) and the per-batch codes (in memory, Dask)
    cut the same genes at the same means."""
    import dask.array as da  # the dev extra installs dask on both CI legs: a missing install must fail

    from bioqpfs._kernels.discretize_dask import dask_codes, dask_group_codes

    X, _ = _two_point_genes(rng, n=40)
    codes, n_levels = disc.codes(X)
    lazy, lazy_levels = dask_codes(da.from_array(X, chunks=(15, 5)), "mean_sd")
    np.testing.assert_array_equal(lazy.compute(), codes)
    np.testing.assert_array_equal(lazy_levels, n_levels)
    groups = np.tile([0, 1], 20)  # each group: the same two-point genes
    grouped, _ = dask_group_codes(da.from_array(X, chunks=(15, 5)), "mean_sd", groups)
    grouped = grouped.compute()
    for g in (0, 1):
        np.testing.assert_array_equal(grouped[groups == g], disc.codes(X[groups == g])[0])


def test_parallel_sparse_kernels_equal_scipy(rng, monkeypatch):
    """The CSR transpose, column max |x| and per-column sum of squares run over ranges on the worker pool from 2**16
    stored entries on: against scipy / numpy, bit for bit, with empty rows and columns and several range counts."""
    import scipy.sparse as sp

    from bioqpfs._kernels import correlation as corr
    from bioqpfs._kernels import discretize as disc
    from bioqpfs._kernels import information as info

    for n, m, parts in [(400, 300, 3), (2000, 40, 7), (1200, 180, 1)]:
        monkeypatch.setattr(info, "n_workers", lambda parts=parts: parts)
        X = sp.random(n, m, density=0.3, format="csr", random_state=rng.integers(1 << 30), dtype=np.float32)
        X.data = (X.data - 0.5) * 1e3
        X = X[np.r_[0:n // 2, n // 2 + 5:n]]  # a few empty rows are fine; keep it canonical CSR
        assert X.nnz >= 2**14
        X = sp.vstack([X] * 4, format="csr") if X.nnz < 2**16 else X
        want = X.tocsc().astype(np.float64)
        got = disc.csc_float64(X)
        for a in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(got, a), getattr(want, a))
        big = X.astype(np.float64) * 2.0**600  # extreme genes: divisors other than 1
        np.testing.assert_array_equal(corr.column_scales(big), corr.scales_of_amax(
            np.asarray(abs(big).max(axis=0).toarray(), dtype=np.float64).ravel()))
        assert (corr.column_scales(big) != 1).any()
        mean, sd, _ = disc._column_mean_sd(X)
        nnz = np.diff(want.indptr)
        m0 = np.asarray(want.sum(axis=0)).ravel() / X.shape[0]
        ss = np.bincount(np.repeat(np.arange(m), nnz), weights=(want.data - np.repeat(m0, nnz)) ** 2, minlength=m)
        ss += (X.shape[0] - nnz) * m0**2
        np.testing.assert_array_equal(mean, m0)
        np.testing.assert_array_equal(sd, np.sqrt(np.maximum(ss / (X.shape[0] - 1), 0.0)))


def test_codes_from_edges_on_every_layout(rng):
    """Dense (float32/float64), CSR and CSC give the codes of the plain comparison count ``sum_k x > e_k``."""
    import scipy.sparse as sp

    from bioqpfs._kernels import discretize as disc

    X = rng.poisson(0.8, size=(120, 9)).astype(np.float64) * rng.random((120, 9))
    X[:, 3] = 0.0
    for n_edges in (2, 31):  # counted, and found by bisection
        edges = np.sort(rng.choice(np.r_[np.unique(X), -np.inf, np.inf], size=(n_edges, 9)), axis=0)
        want = (X[None, :, :] > edges[:, None, :]).sum(axis=0)
        for layout in (X, X.astype(np.float32), sp.csr_matrix(X), sp.csc_matrix(X)):
            x32 = getattr(layout, "dtype", None) == np.float32
            ref = (X.astype(np.float32)[None].astype(np.float64) > edges[:, None, :]).sum(axis=0) if x32 else want
            np.testing.assert_array_equal(disc.codes_from_edges(layout, edges), ref)


@pytest.mark.parametrize("n_bins", [3, 7, 16, 255])
@pytest.mark.parametrize("n", [5, 72, 300])
def test_quantile_codes_match_reference_with_few_and_many_bins(n_bins, n):
    """Both paths of ``quantile_codes`` (np.quantile + edges for few bins; one argsort per gene from 7 bins on,
    as the 255 levels of the pair-order information use): fewer samples than bins, heavy ties, negative and
    huge values, dense C/F order, float32, CSR/CSC/COO (sparse: the order statistics of the non-zero values and
    the count of zeros, never densified), stored zeros; X is left as it was."""
    rng = np.random.default_rng(n + n_bins)
    X = rng.normal(size=(n, 9))
    X[:, 1] = np.round(X[:, 1], 1) * (rng.random(n) < 0.5)   # ties and zeros
    X[:, 2] = rng.integers(-2, 3, size=n)                    # five tied values
    X[:, 3] = 7.0                                            # constant
    X[:, 4] = rng.normal(size=n) * 1e300                     # differences overflow
    X[:, 5] = np.where(rng.random(n) < 0.5, 0.0, 5e-324)     # the smallest subnormal
    X[:, 6] = 0.0                                            # never detected
    X[:, 7] = -np.abs(X[:, 7]) * (rng.random(n) < 0.3)       # negative values and zeros (sparse: no positives)
    explicit = sp.csr_matrix(X)
    explicit.data[::3] = 0.0                                 # stored zeros are zeros
    for XX, ref_X in ((X, X), (np.asfortranarray(X), X), (sp.csr_matrix(X), X), (sp.csc_matrix(X), X),
                      (sp.coo_matrix(X), X), (explicit, explicit.toarray())):
        want = ref.quantile_codes(ref_X, n_bins)
        before = XX.copy()
        codes, levels = disc.quantile_codes(XX, n_bins)
        np.testing.assert_array_equal(codes, want)
        np.testing.assert_array_equal(levels, want.max(axis=0) + 1)
        assert (XX != before).nnz == 0 if sp.issparse(XX) else np.array_equal(XX, before)
    small = X[:, [0, 1, 2, 3]].astype(np.float32)
    np.testing.assert_array_equal(disc.quantile_codes(small, n_bins)[0], ref.quantile_codes(small, n_bins))
    np.testing.assert_array_equal(disc.quantile_codes(sp.csr_matrix(small), n_bins)[0], ref.quantile_codes(small, n_bins))


def _single_cell_like(rng, n, m, *, negative=False, explicit_zeros=False, fmt="csr"):
    """Sparse counts with ties, a dense gene, an empty gene and (optionally) negative values and stored zeros."""
    X = sp.random(n, m, density=0.25, format="csr", random_state=int(rng.integers(1 << 30)))
    X.data = np.round(X.data * 6) + 1.0  # integer-like: many ties
    X = X.tolil()
    X[:, 0] = rng.normal(size=(n, 1)) + 5  # dense: no zeros
    X[:, 1] = 0.0  # all zeros
    X = X.tocsr()
    if negative:
        X.data[::5] *= -1
    if explicit_zeros:
        X.data[::7] = 0.0  # stored zeros are zeros
    return X.asformat(fmt)


@pytest.mark.parametrize("rule", ["quantile", "zero_quantile"])
@pytest.mark.parametrize("fmt,negative,explicit_zeros,dtype", [
    ("csr", False, False, np.float64), ("csc", True, True, np.float64), ("csr", True, False, np.float32),
    ("coo", False, True, np.float64), ("csr", True, True, np.float32)])
def test_sparse_level_counts_equal_counting_the_codes(rng, rule, fmt, negative, explicit_zeros, dtype):
    """SparseLevelCounts (sorted columns, no codes; a float32 X's values kept float32) against a per-class bincount of
    the dense X's codes (in float64)."""
    n, m, C = 300, 12, 4
    X = _single_cell_like(rng, n, m, negative=negative, explicit_zeros=explicit_zeros, fmt=fmt).astype(dtype)
    y = rng.integers(0, C, n)
    y[:3] = C  # a fifth class of three samples
    dense = X.toarray().astype(np.float64)
    for n_bins in (2, 3, 32, 255):
        codes, levels = disc.codes(dense, rule, n_bins=n_bins)  # the dense path: an independent implementation
        L = max(2, int(levels.max()))
        want = np.zeros((C + 1, m, L))
        for c in range(C + 1):
            for g in range(m):
                want[c, g] = np.bincount(codes[y == c, g], minlength=L)
        got = disc.SparseLevelCounts(X, rule, n_bins)
        np.testing.assert_array_equal(got.n_levels, levels)
        assert got.width == L
        np.testing.assert_array_equal(got.counts(y, C + 1), want)
        np.testing.assert_array_equal(got.pooled(), want.sum(axis=0))
        # a range of labels and a slice of genes
        np.testing.assert_array_equal(got.counts(y, C + 1, slice(3, 9), 1, 3), want[1:3, 3:9])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_shared_sorted_columns_give_the_same_codes_and_edges(rng, monkeypatch, dtype):
    """One sort per block; a float32 X's sorted values stay float32 (half the memory) and give the same bits."""
    X = _single_cell_like(rng, 400, 15, negative=True, explicit_zeros=True).astype(dtype)
    built = []
    original = disc.SortedColumns.__init__

    def counting_init(self, Xs):
        built.append(Xs)
        original(self, Xs)

    monkeypatch.setattr(disc.SortedColumns, "__init__", counting_init)
    plain = [disc.codes(X, rule, n_bins=k) for rule in ("quantile", "zero_quantile") for k in (3, 32, 255)]
    assert built == []  # outside a sharing block the few-bin rules keep their partial sorts
    with disc.sharing_sorted_columns(X):
        shared = [disc.codes(X, rule, n_bins=k) for rule in ("quantile", "zero_quantile") for k in (3, 32, 255)]
        disc.SparseLevelCounts(X, "quantile", 255)
        disc.codes(X[:200], "quantile", n_bins=3)  # another matrix: not shared
        assert len(built) == 1 and built[0] is X
        form = disc.sorted_columns(X)
        assert form.values.dtype == dtype
        for g in range(X.shape[1]):  # ascending, and the values of each gene's samples
            a, b = form.bounds[g], form.bounds[g + 1]
            assert (np.diff(form.values[a:b]) >= 0).all()
            np.testing.assert_array_equal(form.values[a:b], X.toarray()[form.rows[a:b], g])
            assert (X.toarray()[:, g] != 0).sum() == b - a
    assert disc.shared_sorted_columns(X) is None  # dropped with the block
    for (c0, l0), (c1, l1) in zip(plain, shared):
        np.testing.assert_array_equal(c0, c1)
        np.testing.assert_array_equal(l0, l1)


def test_bench_mi_levels_rows():
    """``bench_mi.py --levels`` on a small shape: the sorted columns and the codes give the same codes and counts."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import bench_mi

    rows = bench_mi.levels_rows([(800, 60, 0.3)], repeats=1)
    assert len(rows) == 1 and rows[0]["identical"]
    assert rows[0]["sorted_s"] > 0 and rows[0]["codes_s"] > 0 and rows[0]["sorted_peak_mb"] > 0
