"""The counting backend interface (issue 12 item 6): a second backend is one class implementing the contract.

``NaiveCounting`` below implements :class:`bioqpfs._kernels.counting.CountingBackend` the simplest way
(``np.add.at`` over samples, one gene pair at a time, no GEMM, no chunks, no class reordering).  Plugged into
the unchanged coefficient algebra and block plan it must give the default backend's MI, CMI, I(X; X | C) and
class relevance -- exactly for integer counts, to rounding with sample weights -- which is what a Dask or cupy
backend has to satisfy too.
"""
from __future__ import annotations

import numpy as np
import pytest
import reference as ref
import scipy.sparse as sp

from bioqpfs._kernels import counting
from bioqpfs._kernels import information as info
from bioqpfs._kernels.counting_numpy import NumpyCounting


class NaiveCounting(counting.CountingBackend):
    """Reference backend: counts by np.add.at, sample by sample, in the input order."""

    @classmethod
    def accepts(cls, codes):
        return isinstance(codes, np.ndarray)

    def __init__(self, codes, *, n_bins, groups=None, weights=None, count_dtype=np.float32):
        self._codes = np.asarray(codes)
        self.n_samples, self.n_genes = self._codes.shape
        self.n_bins, self.nb = n_bins, n_bins - 1
        self.groups = np.zeros(self.n_samples, np.int64) if groups is None else np.asarray(groups)
        self.n_classes = int(self.groups.max()) + 1 if self.n_samples else 1
        self.weights = weights
        self.count_dtype = count_dtype
        self.w = np.ones(self.n_samples) if weights is None else np.asarray(weights, dtype=np.float64)

    def codes_of(self, genes):
        return self._codes[:, genes]

    def margins(self):
        full = np.zeros((self.n_classes, self.n_genes, self.n_bins))
        for g in range(self.n_genes):
            np.add.at(full, (self.groups, g, self._codes[:, g]), self.w)
        return full[:, :, :self.nb]

    def joint(self, genes_I, genes_J, *, per_class, other=None, out=None):
        cols = self if other is None else other
        I = np.arange(self.n_genes)[genes_I]
        J = np.arange(cols.n_genes)[genes_J]
        C = self.n_classes if per_class else 1
        cls = self.groups if per_class else np.zeros(self.n_samples, np.int64)
        G = np.zeros((C, self.nb, I.size, cols.nb, J.size))
        for ii, i in enumerate(I):
            for jj, j in enumerate(J):
                a, b = self._codes[:, i], cols.codes_of(j)
                keep = (a < self.nb) & (b < cols.nb)  # only the materialised bins
                np.add.at(G, (cls[keep], a[keep], ii, b[keep], jj), self.w[keep])
        return G.reshape(C, self.nb * I.size, cols.nb * J.size).astype(self.count_dtype)


@pytest.fixture(params=[3, 5], ids=["3 bins", "5 bins"])
def coded(request, rng):
    n, m = 90, 23
    y = rng.integers(0, 3, n)
    codes = rng.integers(0, request.param, size=(n, m)).astype(np.uint8)
    codes[:, 4] = (y + rng.integers(0, 2, n)) % request.param  # one informative gene
    return codes, y


@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "balanced"])
@pytest.mark.parametrize("kind", ["mi", "cmi", "cmi_mean", "mi_given_class"])
def test_naive_backend_gives_the_default_backends_matrices(coded, kind, weighted):
    codes, y = coded
    groups = None if kind == "mi" and not weighted else y
    w = info.class_sample_weights(y, "balanced") if weighted else None
    default = info.CodeTable(codes, groups=groups, weights=w)
    naive = info.CodeTable(codes, groups=groups, weights=w, backend=NaiveCounting)
    assert isinstance(default.backend, NumpyCounting) and isinstance(naive.backend, NaiveCounting)
    for rows in (None, np.array([5, 0, 17])):
        want = info.pairwise_information(default, None, kind, rows=rows)
        got = info.pairwise_information(naive, None, kind, rows=rows, n_workers=2)
        if weighted:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        else:
            np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(info.class_relevance(naive, y), info.class_relevance(default, y), atol=1e-13)


def test_gene_by_column_matrices_with_another_backend(coded, rng):
    codes, y = coded
    Y = np.stack([y, rng.integers(0, 7, y.size)], axis=1)
    got = info.pairwise_information(info.CodeTable(codes, backend=NaiveCounting),
                                    info.CodeTable(Y, backend=NaiveCounting), "mi")
    want = np.array([[ref.mutual_info(codes[:, i], Y[:, j]) for j in range(2)] for i in range(codes.shape[1])])
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_samples_are_not_reordered(coded):
    """The table keeps the input order (a grouped table used to hold a class-sorted copy of the codes)."""
    codes, y = coded
    table = info.CodeTable(codes, groups=y)
    assert table.codes is codes or np.shares_memory(table.codes, codes)
    np.testing.assert_array_equal(table.codes, codes)


def test_backend_selection():
    assert counting.backend_for(np.zeros((2, 2), np.uint8)) is NumpyCounting
    assert counting.backend_for(np.zeros((2, 2), np.uint8), "numpy") is NumpyCounting
    with pytest.raises(ValueError, match="unknown counting backend 'gpu'"):
        counting.backend_for(np.zeros((2, 2)), "gpu")
    with pytest.raises(TypeError, match="no counting backend accepts codes of type list"):
        counting.backend_for([[0, 1]])


# ---- the sparse form of the numpy backend (counting_numpy.SparseCodes) -------------------------------------------
def _sparse_codes(rng, n, m, n_bins, share):
    """Codes where each gene sits on one level (any level, per gene) except for about ``share`` of its samples."""
    codes = np.repeat(rng.integers(0, n_bins, m)[None].astype(np.uint8), n, axis=0)
    moved = rng.random((n, m)) < share
    codes[moved] = rng.integers(0, n_bins, int(moved.sum()))
    codes[:, 0] = rng.integers(0, n_bins, n)  # a dense gene among sparse ones
    return codes


def _count_by(way, monkeypatch):
    """Make the numpy backend count every block pair by GEMM (``"gemm"``) or from its sparse form (``"sparse"``), a
    block of few genes too (no direct count); returns the list to which every count from the sparse form appends its
    rows."""
    from bioqpfs._kernels import counting_numpy as cn
    monkeypatch.setattr(cn, "DIRECT_GENES", 0)
    cost = dict.fromkeys(cn.SPARSE_COST, 0.0)
    if way == "gemm":
        cost["update"] = 1e12
    monkeypatch.setattr(cn, "SPARSE_COST", cost)
    calls, count = [], cn.SparseCodes.count

    def spy(self, pair, rows, out, **scale):
        calls.append(rows)
        return count(self, pair, rows, out, **scale)
    monkeypatch.setattr(cn.SparseCodes, "count", spy)
    return calls


@pytest.mark.parametrize("n_bins", [2, 3, 5])
@pytest.mark.parametrize("weights", [None, "balanced", "other"])
def test_sparse_form_counts_equal_the_gemm_and_the_naive_backend(rng, monkeypatch, n_bins, weights):
    """Joint counts from the kept entries and the margins (the implicit levels restored) are exactly the GEMM's, for
    every block shape the callers pass: one block with itself, two overlapping ranges, index arrays (Nystrom rows),
    per class and pooled; with class weights each run of equal weight is counted so.  Other weights keep the GEMM."""
    n, m = 211, 29
    codes = _sparse_codes(rng, n, m, n_bins, 0.15)
    y = rng.integers(0, 4, n)
    w = {None: None, "balanced": info.class_sample_weights(y, "balanced"), "other": rng.random(n) + 0.5}[weights]
    blocks = [(slice(0, 20), slice(0, 20)), (slice(3, 17), slice(10, 29)), (np.array([5, 2, 28]), slice(0, 29)),
              (slice(0, 29), np.array([28, 0, 7, 8])), (slice(4, 4), slice(0, 29))]
    naive = NaiveCounting(codes, n_bins=n_bins, groups=y, weights=w)
    for per_class in (False, True):
        for I, J in blocks:
            got = {}
            for way in ("gemm", "sparse"):
                calls = _count_by(way, monkeypatch)
                backend = NumpyCounting(codes, n_bins=n_bins, groups=y, weights=w)
                got[way] = backend.joint(I, J, per_class=per_class).copy()
                assert bool(calls) == (way == "sparse" and weights != "other" and got[way].size > 0)
            np.testing.assert_array_equal(got["sparse"], got["gemm"])
            want = naive.joint(I, J, per_class=per_class)
            if weights is None:
                np.testing.assert_array_equal(got["sparse"], want)
            else:
                np.testing.assert_allclose(got["sparse"], want, rtol=1e-6)  # float32 counts


@pytest.mark.parametrize("weights", [None, "balanced"])
@pytest.mark.parametrize("way", ["gemm", "sparse"])
def test_joint_adds_into_a_running_sum(rng, monkeypatch, weights, way):
    """``joint(..., out=S, add=True)`` (a Dask chain adding a chunk into its sum) gives ``S +`` the counts: the same
    bits for integer counts, by GEMM or from the sparse form, pooled and per class (a class absent from the chunk
    included); with class weights each run is added in float64, equal to rounding.  The sum is written in place."""
    n, m, n_bins = 307, 26, 3
    codes = _sparse_codes(rng, n, m, n_bins, 0.2)
    y = rng.integers(0, 3, n)  # class 3 of the 4 has no sample here
    w = None if weights is None else info.class_sample_weights(np.append(y, 3), "balanced")[:n]
    _count_by(way, monkeypatch)
    dt = np.float32 if w is None else np.float64
    for per_class in (False, True):
        for I, J in [(slice(0, m), slice(0, m)), (slice(2, 11), slice(5, 26))]:
            backend = NumpyCounting(codes, n_bins=n_bins, groups=y, weights=w, count_dtype=dt)
            counts = backend.joint(I, J, per_class=per_class)
            running = rng.integers(0, 50, size=counts.shape).astype(dt)
            want = running + counts
            got = backend.joint(I, J, per_class=per_class, out=running, add=True)
            assert got is running
            if w is None:
                np.testing.assert_array_equal(running, want)
            else:
                np.testing.assert_allclose(running, want, rtol=1e-14)
    with pytest.raises(ValueError, match=r"add=True\) adds into an out of shape"):
        backend.joint(slice(0, 3), slice(0, 3), per_class=False, out=np.zeros((1, 2, 2), dt), add=True)


@pytest.mark.parametrize("n_bins", [2, 3, 5, 17])
@pytest.mark.parametrize("weights", [None, "balanced"])
def test_direct_counts_of_few_genes_are_the_gemms(rng, monkeypatch, n_bins, weights):
    """A block of at most ``DIRECT_GENES`` genes I (a greedy step's row) is counted straight from the codes, on
    several workers' sample ranges (``DIRECT_WORK`` lowered; N not a multiple of their length): the same bits as the
    GEMM (``DIRECT_GENES`` 0) in the same dtype, shape and bin-major layout -- pooled and per class, slices and index
    arrays (a repeated gene), an empty block, added into a running sum; with class weights run by run."""
    from bioqpfs._kernels import counting_numpy as cn
    n, m = 1009, 31
    codes = rng.integers(0, n_bins, (n, m)).astype(np.uint8)
    y = rng.integers(0, 4, n)
    w = None if weights is None else info.class_sample_weights(y, "balanced")
    dt = np.float32 if w is None else np.float64
    blocks = [(slice(7, 8), slice(0, m)), (np.array([30, 2, 2, 9]), slice(3, 29)), (slice(0, 4), np.array([8, 1, 30])),
              (slice(4, 4), slice(0, m))]
    monkeypatch.setattr(cn, "DIRECT_WORK", 64)
    monkeypatch.setattr(info, "n_workers", lambda: 3)  # sample ranges of 337, 337 and 335
    for per_class in (False, True):
        for I, J in blocks:
            got, running = {}, None
            for direct in (True, False):
                monkeypatch.setattr(cn, "DIRECT_GENES", 4 if direct else 0)
                backend = NumpyCounting(codes, n_bins=n_bins, groups=y, weights=w, count_dtype=dt)
                counts = backend.joint(I, J, per_class=per_class).copy()
                if running is None:  # integer counts: the running sum of a Dask chain
                    running = rng.integers(0, 50, size=counts.shape).astype(dt)
                summed = backend.joint(I, J, per_class=per_class, out=running.copy(), add=True)
                got[direct] = counts, summed
            for a, b in zip(got[True], got[False]):
                assert a.dtype == b.dtype and a.shape == b.shape
                np.testing.assert_array_equal(a, b)


def test_sparse_form_keeps_the_most_frequent_level_out(rng):
    """The implicit level is each gene's most frequent one (lowest on ties), the kept entries are the others with
    their level renumbered around it, and dense codes build no sparse form."""
    from bioqpfs._kernels.counting_numpy import SparseCodes
    codes = np.array([[0, 2, 1], [0, 2, 2], [1, 2, 0], [0, 1, 0]], dtype=np.uint8)
    assert SparseCodes.build(codes, 3) is None  # 4 of 12 entries kept: GEMMs are cheaper
    from bioqpfs._kernels import counting_numpy as cn
    old = cn.SPARSE_COST["update"]
    cn.SPARSE_COST["update"] = 10.0  # every gene held: 2^2 x 3^2 - 10 x (0.25 + 0.25 + 0.5)^2 > 2^2 x 2^2 - 10 x 0.5^2
    try:
        form = SparseCodes.build(codes, 3)
    finally:
        cn.SPARSE_COST["update"] = old
    np.testing.assert_array_equal(form.implicit, [0, 2, 0])  # gene 2: level 0 twice, 1 and 2 once
    np.testing.assert_array_equal(form.indptr, [0, 1, 2, 3, 4])
    kept = [(s, int(g), int(a)) for s in range(4) for g, a in
            zip(form.gene[form.indptr[s]:form.indptr[s + 1]], form.level[form.indptr[s]:form.indptr[s + 1]])]
    assert kept == [(0, 2, 0), (1, 2, 1), (2, 0, 0), (3, 1, 1)]
    np.testing.assert_allclose(form.density, [0.25, 0.25, 0.5])
    np.testing.assert_array_equal(form.order, [0, 1, 2])  # by density, stable: the CSR's genes are their ranks
    assert SparseCodes.build(rng.integers(0, 3, (200, 30)).astype(np.uint8), 3) is None  # microarray-like
    assert SparseCodes.build(_sparse_codes(rng, 200, 30, 3, 0.05), 3) is not None  # ~8% kept
    # beyond 4 x DECIDE_ROWS samples, clearly dense codes are refused on a sample of rows; sparse ones still built
    assert SparseCodes.build(rng.integers(0, 3, (41000, 40)).astype(np.uint8), 3) is None
    assert SparseCodes.build(_sparse_codes(rng, 41000, 40, 3, 0.05), 3) is not None


@pytest.mark.parametrize("kind", ["mi", "cmi", "mi_given_class"])
def test_sparse_form_gives_bit_identical_matrices(rng, monkeypatch, kind):
    """End to end through the block plan, the worker pool and the fused passes: the same bits either way."""
    codes = _sparse_codes(rng, 400, 60, 3, 0.08)
    y = rng.integers(0, 5, 400)
    w = info.class_sample_weights(y, "balanced")
    out = {}
    for way in ("gemm", "sparse"):
        calls = _count_by(way, monkeypatch)
        table = info.CodeTable(codes, groups=y, weights=w)
        out[way] = info.pairwise_information(table, None, kind, n_workers=2)
        assert bool(calls) == (way == "sparse")
    np.testing.assert_array_equal(out["sparse"], out["gemm"])


def _mixed_codes(rng, n, m):
    """Codes of genes from nearly constant to nearly uniform (single-cell-like: a few dense genes among sparse
    ones), in a shuffled order."""
    share = rng.permutation(np.concatenate([rng.uniform(0.0, 0.12, m - m // 3), rng.uniform(0.3, 0.9, m // 3)]))
    codes = np.repeat(rng.integers(0, 3, m)[None].astype(np.uint8), n, axis=0)
    moved = rng.random((n, m)) < share
    codes[moved] = rng.integers(0, 3, int(moved.sum()))
    return codes


def test_sparse_form_holds_the_sparse_genes_in_density_order(rng):
    """The held genes are the k sparsest, k maximising the saving of the cost model over every prefix (a direct
    loop here); the CSR holds exactly their kept entries, gene ranks increasing in a row, levels compressed."""
    from bioqpfs._kernels import counting_numpy as cn
    codes = _mixed_codes(rng, 3000, 40)
    form = cn.SparseCodes.build(codes, 3)
    kept = np.array([3000 - np.bincount(codes[:, g], minlength=3).max() for g in range(40)]) / 3000
    order = sorted(range(40), key=lambda g: (kept[g], g))
    best_k, best = 0, 0.0
    for k in range(1, 41):
        saving = 4 * k * k - cn.SPARSE_COST["update"] * sum(kept[g] for g in order[:k]) ** 2
        if saving > best:
            best_k, best = k, saving
    assert 0 < best_k < 40 and best / (4 * 40 * 40) >= cn.MIN_SAVING
    np.testing.assert_array_equal(form.order, order)
    assert form.n_held == best_k
    np.testing.assert_array_equal(np.flatnonzero(form.held), np.sort(order[:best_k]))
    for s in (0, 7, 2999):
        entries = form.gene[form.indptr[s]:form.indptr[s + 1]], form.level[form.indptr[s]:form.indptr[s + 1]]
        want = []
        for t, g in enumerate(order[:best_k]):
            a, p = int(codes[s, g]), int(form.implicit[g])
            if a != p:
                want.append((t, a - 1 if a > p else a))
        assert list(zip(*(e.tolist() for e in entries))) == want


@pytest.mark.parametrize("kind", ["mi", "cmi", "cmi_mean", "mi_given_class"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n_bins", [3, 4])
def test_blocks_in_density_order_give_the_bits_of_the_gene_order(rng, monkeypatch, kind, weighted, n_bins):
    """With a sparse form the information matrix lays its blocks out by density: blocks held whole (counted from the
    form), blocks straddling the held genes' end (split between the form and GEMMs) and blocks of dense genes, each
    pair's entries from its cell with the lower gene as the row (transposed counts where the block has it the other
    way).  Every entry is the same bits as the plan in gene order with every pair counted by GEMM."""
    from bioqpfs._kernels import counting_numpy as cn
    codes = _mixed_codes(rng, 3000, 70)
    if n_bins == 4:
        codes = codes + (codes == 2) * rng.integers(0, 2, codes.shape).astype(np.uint8)
    y = rng.integers(0, 4, 3000)
    w = info.class_sample_weights(y, "balanced") if weighted else None
    monkeypatch.setattr(info, "_GEMM_BUDGET", 2**14)  # blocks of a few genes: many of each kind
    ways = {}
    whole, ordered = [], []
    count, write_ordered = cn.SparseCodes.count, info._write_ordered

    def spy_count(self, pair, *args, **kw):
        whole.append(pair.whole)
        return count(self, pair, *args, **kw)

    def spy_write(*args):
        ordered.append(1)
        return write_ordered(*args)
    monkeypatch.setattr(cn.SparseCodes, "count", spy_count)
    monkeypatch.setattr(info, "_write_ordered", spy_write)
    costs = dict(cn.SPARSE_COST, row=0.0)  # the form pays on these few samples wherever its pairs are sparse
    for way in ("gemm", "auto"):
        cost = dict(costs)
        if way == "gemm":
            cost["update"] = np.inf
        monkeypatch.setattr(cn, "SPARSE_COST", cost)
        table = info.CodeTable(codes, groups=y, weights=w)
        form = table.backend.sparse_codes()
        assert (form is None) == (way == "gemm")
        ways[way] = info.pairwise_information(table, None, kind, n_workers=2)
    assert 0 < form.n_held < 70
    assert ordered and True in whole and False in whole  # blocks held whole and blocks split
    np.testing.assert_array_equal(ways["auto"], ways["gemm"])


def test_bench_mi_sparse_rows():
    """``bench_mi.py --sparse`` on a small shape: both ways give the same bits, and the rows carry the timings."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import bench_mi

    rows = bench_mi.sparse_rows([1500], genes=300, repeats=1, scales=(0.1,))
    assert len(rows) == 4 and all(r["identical"] for r in rows)
    assert all(r["auto_s"] > 0 and r["gemm_s"] > 0 and 0 < r["kept"] < 0.1 and r["held"] == 1.0 for r in rows)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_class_sums_are_scipys_product_bit_for_bit(fmt, dtype):
    """The parallel class sums of a sparse X add in scipy's order: the same float64 sums as ``X.T @ 1[C = c]``."""
    from bioqpfs._kernels.counting_dask import class_sums

    rng = np.random.default_rng(3)
    X = sp.random(500, 40, density=0.3, format=fmt, random_state=4, dtype=dtype)
    X.data = ((X.data - 0.5) * 10.0 ** rng.uniform(-3, 6, X.nnz)).astype(dtype)  # cancellations: order matters
    y = rng.integers(0, 5, 500)
    y[y == 3] = 4  # class 3 absent
    indicator = np.zeros((500, 5))
    indicator[np.arange(500), y] = 1.0
    want = np.asarray(X.T @ indicator, dtype=np.float64).T
    got = class_sums(X, y, 5)
    np.testing.assert_array_equal(got, want)
    assert got.flags.f_contiguous == want.flags.f_contiguous  # laid out alike: what follows rounds alike
    assert (got[3] == 0).all()
    scale = np.full(40, 2.0**-8)
    np.testing.assert_array_equal(class_sums(X, y, 5, s=scale), np.asarray((X * 2.0**8).T @ indicator).T)  # X / s


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_detected_class_sums_count_the_non_zero_values(fmt):
    """The detected indicator of a sparse X (the per-class bins' zeros) is 1 byte per stored value, on X's own index
    arrays, and its class sums count each class's non-zero values exactly: stored zeros and negatives included."""
    from bioqpfs._kernels.counting_dask import class_sums
    from bioqpfs.selectors._common import _detected

    rng = np.random.default_rng(5)
    X = sp.random(300, 25, density=0.4, format=fmt, random_state=6, dtype=np.float32)
    X.data -= 0.3  # negative values
    X.data[::7] = 0.0  # stored zeros
    y = rng.integers(0, 4, 300)
    D = _detected(X)
    assert D.data.itemsize == 1 and np.shares_memory(D.indices, X.indices)
    want = np.zeros((4, 25))
    np.add.at(want, y, X.toarray() != 0)
    np.testing.assert_array_equal(class_sums(D, y, 4), want)


@pytest.mark.parametrize("weights", ["none", "balanced", "other"])
def test_margins_need_no_class_sorted_copy(coded, rng, weights):
    """The margins of interleaved classes equal the naive backend's (exactly: integer counts, one float64 scaling
    per run), and only other weights (a GEMV per bin) make the class-sorted copy, which equals the gathered rows."""
    codes, y = coded
    w = {"none": None, "balanced": info.class_sample_weights(y, "balanced"),
         "other": rng.uniform(0.5, 2.0, y.size)}[weights]
    backend = NumpyCounting(codes, n_bins=int(codes.max()) + 1, groups=y, weights=w)
    assert backend._order is not None and backend._by_class is None
    want = NaiveCounting(codes, n_bins=int(codes.max()) + 1, groups=y, weights=w).margins()
    if weights == "balanced":  # one weight per class: its value times the class's integer counts, one rounding
        counts = NaiveCounting(codes, n_bins=int(codes.max()) + 1, groups=y).margins()
        exact = np.stack([w[y == c][0] * counts[c] for c in range(3)])
        np.testing.assert_allclose(want, exact, rtol=1e-14)  # the naive sums, sample by sample, round otherwise
        want = exact
    got = backend.margins()
    if weights == "other":
        np.testing.assert_allclose(got, want, rtol=1e-13)
        assert backend._by_class is not None
    else:
        np.testing.assert_array_equal(got, want)
        assert backend._by_class is None
    np.testing.assert_array_equal(backend.by_class, codes[np.argsort(y, kind="stable")] if weights != "balanced"
                                  else codes[backend._order])
    ungrouped = NumpyCounting(codes, n_bins=int(codes.max()) + 1)
    np.testing.assert_array_equal(ungrouped.margins(), NaiveCounting(codes, n_bins=int(codes.max()) + 1).margins())
    assert ungrouped.by_class is codes
