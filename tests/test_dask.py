"""Dask arrays chunked by samples (issue 13): counting, discretisation and the faces equal the in-memory path.

Oracles: the numpy backend (and the naive ``np.add.at`` backend of ``test_counting_backend.py``) on the
same codes; the in-memory results of the same public functions.  Unweighted counts must agree exactly
whatever the chunking (uneven and empty chunks included); weighted ones to float64 rounding.
"""
from __future__ import annotations

import dask.array as da  # the dev extra installs the dask extra on both CI legs: a missing install must fail
import numpy as np
import pytest
from conftest import TRANSFORM_METHODS
from test_counting_backend import NaiveCounting  # noqa: E402

from bioqpfs._kernels import counting  # noqa: E402
from bioqpfs._kernels import information as info  # noqa: E402
from bioqpfs._kernels.counting_dask import DaskCounting  # noqa: E402
from bioqpfs._kernels.counting_numpy import NumpyCounting  # noqa: E402

#: sample chunkings of the 90 samples below: even, uneven, one chunk, with an empty chunk
CHUNKINGS = [(30, 30, 30), (7, 50, 1, 32), (90,), (40, 0, 50)]


@pytest.fixture(params=[3, 5], ids=["3 bins", "5 bins"])
def coded(request, rng):
    n, m = 90, 23
    y = rng.integers(0, 3, n)
    codes = rng.integers(0, request.param, size=(n, m)).astype(np.uint8)
    codes[:, 4] = (y + rng.integers(0, 2, n)) % request.param
    return codes, y


def test_backend_is_registered_and_chosen_for_dask_arrays():
    x = da.zeros((4, 2), dtype=np.uint8, chunks=(2, 2))
    assert counting.backend_for(x) is DaskCounting
    assert counting.backend_for(np.zeros((4, 2), np.uint8)) is NumpyCounting
    with pytest.raises(TypeError, match="counts a dask array"):
        DaskCounting(np.zeros((4, 2), np.uint8), n_bins=3)


@pytest.fixture(params=["whole", "strips", "per pair"])
def count_ahead(request, monkeypatch):
    """Every way of the Dask backend: the whole count matrix in one pass (it fits), strips of rows (it does not;
    strips of 2 KB: several per matrix), or one pass per block pair (no plan told: ``expect`` not called)."""
    from bioqpfs._kernels import counting_dask

    if request.param != "whole":
        monkeypatch.setattr(counting_dask, "FULL_COUNTS_BUDGET", 0)
        monkeypatch.setattr(counting_dask, "STRIP_BYTES", 2048)
    if request.param == "per pair":
        monkeypatch.setattr(DaskCounting, "expect", lambda self, **kw: None)
    return request.param


@pytest.mark.parametrize("chunks", CHUNKINGS, ids=str)
@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "balanced"])
@pytest.mark.parametrize("kind", ["mi", "cmi", "cmi_mean", "mi_given_class"])
def test_dask_backend_gives_the_numpy_backends_matrices(coded, kind, weighted, chunks, count_ahead):
    codes, y = coded
    groups = None if kind == "mi" and not weighted else y
    w = info.class_sample_weights(y, "balanced") if weighted else None
    X = da.from_array(codes, chunks=(chunks, 23))
    levels = codes.max(axis=0).astype(np.int64) + 1  # what discretize.codes gives with the codes
    default = info.CodeTable(codes, groups=groups, weights=w)
    lazy = info.CodeTable(X, levels, groups=groups, weights=w)
    naive = info.CodeTable(codes, groups=groups, weights=w, backend=NaiveCounting)
    assert isinstance(lazy.backend, DaskCounting)
    np.testing.assert_array_equal(lazy.marginals, default.marginals) if not weighted else \
        np.testing.assert_allclose(lazy.marginals, default.marginals, rtol=1e-12)
    for rows in (None, np.array([5, 0, 17])):
        want = info.pairwise_information(default, None, kind, rows=rows)
        got = info.pairwise_information(lazy, None, kind, rows=rows, n_workers=2)
        second = info.pairwise_information(naive, None, kind, rows=rows)
        if weighted:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(got, second, rtol=1e-12, atol=1e-12)
        else:
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(got, second)
    rel = info.class_relevance(lazy, y)
    assert isinstance(rel, np.ndarray)
    np.testing.assert_allclose(rel, info.class_relevance(default, y), rtol=1e-12, atol=1e-13)


def test_the_whole_matrix_is_one_pass_when_it_fits(rng, monkeypatch):
    from bioqpfs._kernels import counting_dask

    codes = rng.integers(0, 3, size=(80, 70)).astype(np.uint8)
    monkeypatch.setattr(info, "_GEMM_BUDGET", 2**10)  # many block pairs
    passes = []
    count = DaskCounting._count
    monkeypatch.setattr(DaskCounting, "_count", lambda self, *a: passes.append(a) or count(self, *a))
    table = info.CodeTable(da.from_array(codes, chunks=(30, 70)))
    want = info.pairwise_information(info.CodeTable(codes), None, "mi")
    np.testing.assert_array_equal(info.pairwise_information(table, None, "mi"), want)
    assert len(passes) == 1
    monkeypatch.setattr(counting_dask, "FULL_COUNTS_BUDGET", 0)  # does not fit: strips of rows x later columns
    for strip_bytes in (2**20, 60 * 70 * 4 * 4):  # holds every row at once; holds about 60 rows, then the rest
        monkeypatch.setattr(counting_dask, "STRIP_BYTES", strip_bytes)
        passes.clear()
        table = info.CodeTable(da.from_array(codes, chunks=(30, 70)))
        np.testing.assert_array_equal(info.pairwise_information(table, None, "mi"), want)
        assert len(passes) == (1 if strip_bytes == 2**20 else 2)
        np.testing.assert_array_equal(info.pairwise_information(table, None, "mi", rows=[5, 60, 2]),
                                      info.pairwise_information(info.CodeTable(codes), None, "mi", rows=[5, 60, 2]))


def test_gene_chunked_codes_are_rechunked_and_other_table_rechunked(coded, rng):
    codes, y = coded
    X = da.from_array(codes, chunks=(25, 5))  # split along genes too
    table = info.CodeTable(X)
    assert len(table.backend.codes.chunks[1]) == 1
    Y = np.stack([y, rng.integers(0, 7, y.size)], axis=1)
    got = info.pairwise_information(table, info.CodeTable(da.from_array(Y, chunks=(40, 2))), "mi")
    want = info.pairwise_information(info.CodeTable(codes), info.CodeTable(Y), "mi")
    np.testing.assert_array_equal(got, want)


def test_unknown_chunk_sizes_are_refused(coded):
    codes, _ = coded
    X = da.from_array(codes, chunks=(30, 23))
    X = X[X[:, 0] < 10]  # boolean indexing: unknown chunk sizes
    with pytest.raises(ValueError, match="unknown chunk sizes.*compute_chunk_sizes"):
        DaskCounting(X, n_bins=3)


def test_codes_of_and_native_codes(coded):
    codes, _ = coded
    X = da.from_array(codes, chunks=(30, 23))
    b = DaskCounting(X, n_bins=5)
    np.testing.assert_array_equal(b.codes_of([3, 1]), codes[:, [3, 1]])
    assert b.native_codes is b.codes


# ---- discretisation ---------------------------------------------------------------------------------------
def dask_of(X, chunks, sparse=False):
    """X as a Dask array with these sample chunks; ``sparse``: CSR chunks (as anndata's read_elem_lazy gives)."""
    import scipy.sparse as sp

    out = da.from_array(X, chunks=(chunks, X.shape[1]))
    if sparse:
        out = out.map_blocks(sp.csr_matrix, dtype=X.dtype, meta=sp.csr_matrix((0, 0), dtype=X.dtype))
    return out


@pytest.fixture
def expression(rng):
    n, m = 90, 12
    y = rng.integers(0, 3, n)
    X = rng.lognormal(size=(n, m)) * (rng.random((n, m)) < 0.4)
    X[:, 2] += 2.0 * y  # informative
    X[:, 3] = 7.0  # constant
    X[:, 4] *= 1e200  # beyond the extreme-value guard: its squares overflow without it
    X[:, 5] *= 1e-200
    X[:, 6] = 1e8 + rng.normal(size=n)  # large mean, small sd: sums of squares would cancel
    return X, y


@pytest.mark.parametrize("sparse", [False, True], ids=["dense chunks", "csr chunks"])
@pytest.mark.parametrize("chunks", CHUNKINGS, ids=str)
def test_mean_sd_codes_on_dask_equal_the_in_memory_codes(expression, chunks, sparse):
    from bioqpfs._kernels import discretize

    X, _ = expression
    want, want_levels = discretize.codes(X, "mean_sd")
    codes, levels = discretize.codes(dask_of(X, chunks, sparse), "mean_sd")
    assert isinstance(codes, da.Array) and codes.dtype == np.uint8
    np.testing.assert_array_equal(levels, want_levels)
    np.testing.assert_array_equal(codes.compute(), want)
    assert levels[3] == 1  # the constant gene: one level


def test_dask_moments_match_numpy_with_the_extreme_value_guard(expression):
    from bioqpfs._kernels import discretize
    from bioqpfs._kernels.discretize_dask import dask_mean_sd

    X, _ = expression
    mean, sd, s = dask_mean_sd(dask_of(X, (7, 50, 1, 32)))
    want_mean, want_sd, want_s = discretize._column_mean_sd(X)
    np.testing.assert_array_equal(s, want_s)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-14)
    np.testing.assert_allclose(sd, want_sd, rtol=1e-14)
    assert np.isfinite(sd).all()
    # an exact oracle (statistics works in fractions): the large-mean, small-sd gene to 1e-14
    import statistics

    np.testing.assert_allclose(sd[6], statistics.stdev(X[:, 6].tolist()), rtol=1e-14)
    np.testing.assert_allclose(mean[6], statistics.mean(X[:, 6].tolist()), rtol=1e-15)


def test_mdl_on_dask_is_refused_clearly(expression):  # quantile rules: tests/test_dask_quantile.py
    from bioqpfs._kernels import discretize

    X, y = expression
    with pytest.raises(ValueError, match=r"not available for a Dask array.*mean_sd"):
        discretize.codes(dask_of(X, 30), "mdl", y_codes=y)


def test_auto_resolves_on_dask_as_in_memory(expression):
    from bioqpfs._kernels import discretize

    X, _ = expression
    for M in (X, np.where(X == 0, 1.0, X)):
        assert discretize.resolve_discretization(dask_of(M, 40, sparse=True), "auto") == \
            discretize.resolve_discretization(M, "auto")


# ---- the faces: measures, select, tl ----------------------------------------------------------------------
@pytest.fixture
def labelled(rng):
    n, m = 240, 25
    y = rng.integers(0, 4, n)
    X = rng.lognormal(size=(n, m)) * (rng.random((n, m)) < 0.5)
    X[:, :4] += y[:, None] * rng.random(4)
    X[:, 9] = 3.0  # constant
    return X, y


LAYOUTS = [((60, 60, 60, 60), False), ((13, 100, 127), True), ((240,), True)]


@pytest.mark.parametrize("chunks,sparse", LAYOUTS, ids=["dense even", "csr uneven", "csr one chunk"])
def test_given_integer_levels_on_dask_equal_compact_codes(rng, chunks, sparse):
    """discretization=None (X holds levels): each gene's values ranked among its distinct values, as
    ``compact_codes`` does in memory (checked against np.unique per gene), a level seen in one chunk only
    included; non-integer values and too many levels are the in-memory errors, naming the gene."""
    import bioqpfs
    from bioqpfs import measures
    from bioqpfs._kernels import discretize

    n = sum(chunks)
    X = rng.integers(-2, 3, size=(n, 6)).astype(np.float64) * 5
    X[:, 1] = rng.integers(0, 2, n)
    X[n - 1, 2] = 40.0  # a level of the last chunk only
    X[:, 3] = 7.0  # one level
    codes, levels = discretize.codes(dask_of(X, chunks, sparse), None)
    want = np.column_stack([np.unique(X[:, j], return_inverse=True)[1] for j in range(6)])
    np.testing.assert_array_equal(np.asarray(codes.compute()), want)
    np.testing.assert_array_equal(levels, [np.unique(X[:, j]).size for j in range(6)])
    y = (X[:, 0] > 0).astype(int)
    got = bioqpfs.select(dask_of(X, chunks, sparse), y, method="qpfs", n_genes=3, discretization=None)
    np.testing.assert_array_equal(got.ranking, bioqpfs.select(X, y, method="qpfs", n_genes=3,
                                                              discretization=None).ranking)
    bad = X.copy()
    bad[n // 2, 4] = 0.5
    with pytest.raises(ValueError, match=r"needs integer-coded data, but gene\(s\) g4 hold non-integer"):
        discretize.codes(dask_of(bad, chunks, sparse), None, feature_names=[f"g{j}" for j in range(6)])
    with pytest.raises(ValueError, match=r"needs integer-coded data, but gene\(s\) 4 hold"):
        measures.discretize(dask_of(bad, chunks, sparse), discretization=None).compute()
    wide = np.zeros((300, 3))
    wide[:, 1] = np.arange(300)  # 300 levels, 100 per chunk: too many only once the chunks are merged
    with pytest.raises(ValueError, match=r"gene 1 has .*distinct levels; discretization=None supports at most 255"):
        discretize.codes(dask_of(wide, (100, 100, 100), sparse), None)


@pytest.mark.parametrize("chunks,sparse", LAYOUTS, ids=["dense even", "csr uneven", "csr one chunk"])
def test_measures_on_dask_equal_the_in_memory_measures(labelled, chunks, sparse):
    from bioqpfs import measures

    X, y = labelled
    D = dask_of(X, chunks, sparse)
    np.testing.assert_array_equal(measures.mutual_information(D), measures.mutual_information(X))
    np.testing.assert_array_equal(measures.mutual_information(D, rows=[3, 1]), measures.mutual_information(X, rows=[3, 1]))
    np.testing.assert_array_equal(measures.conditional_mutual_information(D, y),
                                  measures.conditional_mutual_information(X, y))
    np.testing.assert_array_equal(measures.entropy(D), measures.entropy(X))
    np.testing.assert_array_equal(measures.relevance(D, y), measures.relevance(X, y))
    # genes x label columns: the in-memory Yd codes are cut to the Dask X's sample chunks (they crashed: .rechunk
    # on a numpy array); checked against a plug-in MI (bits) of the joint histogram
    Yd = np.column_stack([y, np.arange(X.shape[0]) % 3])
    got = measures.mutual_information(D, Yd)
    codes = measures.discretize(X)
    for g in (0, 5):
        for j in range(2):
            joint = np.histogram2d(codes[:, g], Yd[:, j], bins=[np.arange(codes[:, g].max() + 2),
                                                             np.arange(Yd[:, j].max() + 2)])[0] / X.shape[0]
            px, py = joint.sum(1, keepdims=True), joint.sum(0, keepdims=True)
            nz = joint > 0
            assert got[g, j] == pytest.approx(np.sum(joint[nz] * np.log2(joint[nz] / (px @ py)[nz])), abs=1e-12)
    np.testing.assert_allclose(measures.relevance(D, y, class_weight="balanced"),
                               measures.relevance(X, y, class_weight="balanced"), rtol=1e-12, atol=1e-14)
    codes = measures.discretize(D)
    assert isinstance(codes, da.Array)
    np.testing.assert_array_equal(codes.compute(), measures.discretize(X))
    np.testing.assert_array_equal(D.compute().toarray() if sparse else D.compute(), X)  # input untouched


@pytest.mark.filterwarnings("ignore:1 constant gene")
@pytest.mark.parametrize("chunks,sparse", LAYOUTS, ids=["dense even", "csr uneven", "csr one chunk"])
def test_select_on_dask_equals_the_in_memory_selection(labelled, chunks, sparse):
    import bioqpfs

    X, y = labelled
    D = dask_of(X, chunks, sparse)
    got = bioqpfs.select(D, y, method="qpfs", n_genes=6)
    want = bioqpfs.select(X, y, method="qpfs", n_genes=6)
    np.testing.assert_array_equal(got.ranking, want.ranking)
    np.testing.assert_array_equal(got.weights, want.weights)
    got = bioqpfs.select(D, y, method="qpfs_cover", n_genes=6, discretization="mean_sd")
    want = bioqpfs.select(X, y, method="qpfs_cover", n_genes=6, discretization="mean_sd")
    np.testing.assert_array_equal(got.ranking, want.ranking)
    np.testing.assert_allclose(got.weights, want.weights, rtol=1e-10, atol=1e-12)  # class-balanced: weighted counts


class _RowsSeen:
    """A dask callback recording the most samples any task result held (a 2-D array's rows)."""

    def __init__(self):
        import dask

        self.most = 0
        outer = self

        class _Callback(dask.callbacks.Callback):
            def _posttask(self, key, result, dsk, state, worker_id):
                shape = getattr(result, "shape", None)
                if shape is not None and len(shape) == 2:
                    outer.most = max(outer.most, int(shape[0]))

        self.callback = _Callback()


@pytest.mark.filterwarnings("ignore:1 constant gene")
@pytest.mark.parametrize("chunks,sparse", LAYOUTS[1:2], ids=["csr uneven"])  # dense: the other tests
def test_every_method_on_dask_equals_in_memory_and_the_dask_methods_hold_one_chunk(labelled, chunks, sparse):
    """Every registered method takes a Dask X and gives the in-memory selection.  The methods of
    ``DASK_METHODS`` count it chunk by chunk: no task of theirs ever holds more samples than the largest chunk
    (the greedy baselines count one row of the matrix per pass instead of gathering the codes; EQPFS, maxrel
    and random too; LDFS sums its total scatter); the others (gene clustering, HSFS) read it whole after a memory check, then run as in
    memory (HSFS's path turned 1e-15 differences of a chunked z-score into 1.5% weight differences)."""
    import bioqpfs
    from bioqpfs import _registry

    X, y = labelled
    D = dask_of(X, chunks, sparse)
    for method in _registry.methods():
        seen = _RowsSeen()
        with seen.callback:
            got = bioqpfs.select(D, y, method=method, n_genes=6)
        want = bioqpfs.select(D.compute(), y, method=method, n_genes=6)  # the same matrix (dense or CSR)
        # LDFS/HSFS order the genes after the path's non-zero rows by a non-unique quantity (their docstring):
        # LDFS's chunked scatter sums reorder them on some CPUs (AVX-512 OpenBLAS kernels), so compare the rows
        # ranked by weight; every other method's whole ranking
        upto = np.count_nonzero(want.weights) if method in TRANSFORM_METHODS else None
        np.testing.assert_array_equal(got.ranking[:upto], want.ranking[:upto], err_msg=method)
        np.testing.assert_allclose(got.weights, want.weights, rtol=1e-10, atol=1e-12, err_msg=method)
        if method in _registry.DASK_METHODS:
            assert seen.most <= max(chunks), (method, seen.most)
        else:
            assert seen.most == X.shape[0], method  # read whole (the test can tell)


@pytest.mark.filterwarnings("ignore:1 constant gene")
def test_batch_aware_methods_on_dask_equal_in_memory_and_hold_one_chunk(labelled):
    """``batch=`` on a Dask X (CSR chunks that cut across the batches): per-batch thresholds from each batch's rows,
    lazy per-batch codes, the batch-stratified counts, within-batch standardisation for |Pearson| and Hall, the
    within-batch direction of qpfs_cover -- the in-memory selection, and no task holds more samples than a chunk."""
    import bioqpfs
    from bioqpfs import _registry

    X, y = labelled
    batch = np.random.default_rng(5).integers(0, 3, X.shape[0])
    D = dask_of(X, (13, 47, 60, 60, 60), True)  # a batch has ~80 samples: gathering one would show
    runs = [(m, {}) for m in _registry.batch_methods() if m in _registry.DASK_METHODS]
    runs += [("qpfs", dict(similarity="correlation", relevance="hall")), ("qpfs", dict(batch_discretization="global")),
             ("qpfs_cover", dict(batch_weights="equal", discretization="zero_quantile"))]
    assert len(runs) >= 8
    for method, params in runs:
        seen = _RowsSeen()
        with seen.callback:
            got = bioqpfs.select(D, y, method=method, n_genes=6, batch=batch, **params)
        want = bioqpfs.select(D.compute(), y, method=method, n_genes=6, batch=batch, **params)
        np.testing.assert_array_equal(got.ranking, want.ranking, err_msg=f"{method} {params}")
        np.testing.assert_allclose(got.weights, want.weights, rtol=1e-9, atol=1e-12, err_msg=f"{method} {params}")
        assert seen.most <= 60, (method, params, seen.most)


def test_the_methods_that_read_a_dask_x_whole_check_memory_first(labelled, monkeypatch):
    import bioqpfs
    from bioqpfs import _registry

    X, y = labelled
    monkeypatch.setattr("bioqpfs._validation.available_memory", lambda: (1000, "available physical memory"))
    whole = [m for m in _registry.methods() if m not in _registry.DASK_METHODS]
    assert set(whole) == {"ikm_qpfs", "ikma_qpfs", "tlkm_qpfs", "hsfs"}
    for method in whole:
        seen = _RowsSeen()
        with seen.callback, pytest.raises(MemoryError, match=rf"reading the 240 x 25 Dask array whole \(method "
                                                             rf"'{method}' has no Dask path\) needs about .*'eqpfs'"):
            bioqpfs.select(dask_of(X, (60, 60, 60, 60), True), y, method=method, n_genes=6)
        assert seen.most <= 60, method  # refused before X was read whole


def test_hsfs_refuses_too_many_samples_before_reading_a_dask_x():
    """HSFS keeps n x n kernels (at most MAX_HSIC_SAMPLES samples): a Dask X above that is refused with HSFS's own
    message before any chunk is read, not read whole first."""
    import bioqpfs
    from bioqpfs.selectors.transform import MAX_HSIC_SAMPLES

    n = MAX_HSIC_SAMPLES + 1
    X = np.random.default_rng(0).normal(size=(n, 3))
    seen = _RowsSeen()
    with seen.callback, pytest.raises(ValueError, match=rf"{n} samples is above {MAX_HSIC_SAMPLES}: subsample"):
        bioqpfs.select(dask_of(X, (n // 2, n - n // 2)), np.arange(n) % 2, method="hsfs", n_genes=2)
    assert seen.most == 0


def test_ldfs_on_dask_with_more_samples_than_genes_holds_one_chunk_and_gives_the_in_memory_panel():
    """LDFS from its total scatter (the genes' correlation matrix) and class means, summed chunk by chunk: the
    in-memory panel, weights equal to what the 1e-16 differences of chunked sums become along the lambda path
    (L-BFGS-B amplifies them; measured 1e-10..3e-6 on six benchmark sets), and no task holds more than a chunk."""
    import bioqpfs

    rng = np.random.default_rng(3)
    n, m = 3000, 40
    y = rng.integers(0, 4, n)
    X = rng.normal(size=(n, m))
    X[:, :8] += 0.6 * y[:, None] * rng.normal(size=8)
    want = bioqpfs.select(X, y, method="ldfs", n_genes=5)
    for sparse in (False, True):
        seen = _RowsSeen()
        with seen.callback:
            got = bioqpfs.select(dask_of(X, (500, 1000, 1500), sparse), y, method="ldfs", n_genes=5)
        assert set(got.selected) == set(want.selected) and set(want.selected) <= set(range(8))
        np.testing.assert_allclose(got.weights, want.weights, rtol=1e-5, atol=1e-8)
        assert seen.most <= 1500


def test_class_sums_per_chunk_equal_the_product(labelled):
    from bioqpfs._kernels.counting_dask import class_sums

    X, y = labelled
    ind = np.eye(4)[y]
    np.testing.assert_allclose(class_sums(dask_of(X, (13, 100, 127), True), y, 4), (X.T @ ind).T, rtol=1e-13)


@pytest.mark.filterwarnings("ignore:1 constant gene")
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_tl_select_genes_on_lazily_loaded_anndata(labelled, tmp_path, sparse):
    """read_elem_lazy gives a Dask array of numpy (dense) or CSR (sparse) chunks; main failed on the sparse one
    with "X must be numeric, got dtype object"."""
    import anndata as ad
    import h5py
    import pandas as pd
    import scipy.sparse as sp
    from anndata.experimental import read_elem_lazy

    import bioqpfs

    X, y = labelled
    obs = pd.DataFrame({"cell_type": pd.Categorical(np.array(list("abcd"))[y])},
                       index=[f"c{i}" for i in range(y.size)])
    mem = ad.AnnData(sp.csr_matrix(X) if sparse else X, obs=obs)
    mem.write_h5ad(tmp_path / "a.h5ad")
    bioqpfs.tl.select_genes(mem, "cell_type", method="qpfs", n_genes=5, mask_var=np.arange(25) != 3)
    with h5py.File(tmp_path / "a.h5ad", "r") as f:
        lazy = ad.AnnData(read_elem_lazy(f["X"], chunks=(64, X.shape[1])), obs=obs)
        assert isinstance(lazy.X, da.Array)
        bioqpfs.tl.select_genes(lazy, "cell_type", method="qpfs", n_genes=5, mask_var=np.arange(25) != 3)
        assert isinstance(lazy.X, da.Array)  # never loaded into the AnnData
    for col in ("qpfs_weight", "qpfs_rank", "qpfs_selected"):
        np.testing.assert_array_equal(lazy.var[col].to_numpy(), mem.var[col].to_numpy())
    assert list(lazy.uns["qpfs"]["selected"]) == list(mem.uns["qpfs"]["selected"])


# ---- bad input ----------------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:1 constant gene")
def test_bad_dask_input_gets_clear_errors_and_other_sparse_chunks_are_read(labelled):
    import scipy.sparse as sp

    import bioqpfs
    from bioqpfs import measures

    X, y = labelled
    with pytest.raises(TypeError, match="must be numeric, got a dask array of dtype object"):
        measures.mutual_information(da.from_array(X.astype(str).astype(object), chunks=(60, 25)))
    want = bioqpfs.select(X, y, method="qpfs", n_genes=3)
    # CSC chunks are read as CSR, as in memory (they were refused); COO chunks too, though Dask infers a numpy meta
    # for them from an empty chunk (they crashed inside Dask: "'coo_matrix' object is not subscriptable")
    csc = da.from_array(X, chunks=(60, 25)).map_blocks(sp.csc_matrix, dtype=X.dtype, meta=sp.csc_matrix((0, 0)))
    coo = da.from_array(X, chunks=(60, 25)).map_blocks(sp.coo_matrix)
    assert isinstance(coo._meta, np.ndarray)
    for D in (csc, coo):
        got = bioqpfs.select(D, y, method="qpfs", n_genes=3)
        np.testing.assert_array_equal(got.ranking, want.ranking)
        np.testing.assert_allclose(got.weights, want.weights, rtol=1e-12, atol=1e-15)
    Xn = X.copy()
    Xn[130, 7] = np.nan  # inside the second chunk only
    with pytest.raises(ValueError, match="NaN or infinite values in 1 gene.*7"):
        bioqpfs.select(dask_of(Xn, (60, 60, 60, 60), True), y, method="qpfs", n_genes=3)
    with pytest.raises(ValueError, match="kind='mst' is not available for a Dask array"):
        measures.relevance(dask_of(X, 60), y, kind="mst")


@pytest.mark.filterwarnings("ignore:1 constant gene")
@pytest.mark.parametrize("chunks,sparse", LAYOUTS, ids=["dense even", "csr uneven", "csr one chunk"])
def test_pearson_similarity_and_hall_relevance_on_dask_equal_a_direct_computation(labelled, chunks, sparse,
                                                                                monkeypatch):
    """|Pearson| (QPFS eq. 3) and Hall's relevance on a Dask X: chunk sums of the standardised products, checked
    against numpy's corrcoef and a direct Hall sum, in strips (a small STRIP_BYTES: one row per pass) and whole;
    QPFS with them equals the in-memory selection."""
    import bioqpfs
    from bioqpfs import measures
    from bioqpfs._kernels import counting_dask

    X, y = labelled
    D = dask_of(X, chunks, sparse)
    with np.errstate(invalid="ignore", divide="ignore"):
        R = np.abs(np.corrcoef(X, rowvar=False))
    R[9, :] = R[:, 9] = 0.0  # the constant gene: no correlation
    np.testing.assert_allclose(measures.correlation(D), R, rtol=0, atol=1e-12)
    monkeypatch.setattr(counting_dask, "STRIP_BYTES", 8 * X.shape[1])
    np.testing.assert_allclose(measures.correlation(D, rows=[3, 0, 9]), R[[3, 0, 9]], rtol=0, atol=1e-12)
    p = np.bincount(y) / y.size
    hall = [sum(p[k] * abs(np.corrcoef(X[:, g], y == k)[0, 1]) for k in range(p.size)) if g != 9 else 0.0
            for g in range(X.shape[1])]
    np.testing.assert_allclose(measures.relevance(D, y, kind="hall"), hall, rtol=0, atol=1e-12)
    for params in (dict(similarity="correlation"), dict(similarity="correlation", relevance="hall"),
                   dict(relevance="hall", nystrom_rate=0.5)):
        got = bioqpfs.select(D, y, method="qpfs", n_genes=6, **params)
        want = bioqpfs.select(X, y, method="qpfs", n_genes=6, **params)
        np.testing.assert_array_equal(got.ranking, want.ranking, err_msg=str(params))
        np.testing.assert_allclose(got.weights, want.weights, rtol=1e-9, atol=1e-12, err_msg=str(params))


@pytest.mark.filterwarnings("ignore:1 constant gene")
def test_gene_chunked_dask_x_is_rechunked_and_gives_the_same_selection(labelled):
    import bioqpfs

    X, y = labelled
    D = da.from_array(X, chunks=(50, 7))
    np.testing.assert_array_equal(bioqpfs.select(D, y, method="qpfs", n_genes=5).ranking,
                                  bioqpfs.select(X, y, method="qpfs", n_genes=5).ranking)


@pytest.mark.parametrize("method,params", [("qpfs", dict(nystrom_rate=0.2)), ("spec_cmi_nystrom", {})],
                         ids=["qpfs nystrom", "spec_cmi nystrom"])
def test_nystrom_methods_on_dask_equal_in_memory(rng, method, params):
    """The Nystrom paths count only the sampled rows against all genes; on Dask they give the same panel."""
    import bioqpfs

    n, m = 300, 60
    y = rng.integers(0, 4, n)
    X = rng.lognormal(size=(n, m)) * (rng.random((n, m)) < 0.5)
    X[:, :5] += y[:, None]
    got = bioqpfs.select(dask_of(X, (70, 130, 100), True), y, method=method, n_genes=5, random_state=0, **params)
    want = bioqpfs.select(X, y, method=method, n_genes=5, random_state=0, **params)
    np.testing.assert_array_equal(got.ranking, want.ranking)
    np.testing.assert_array_equal(got.weights, want.weights)


class _LoggedRows:
    """An array-like whose every read appends a line to a file (dask may copy the object: the file is shared)."""

    def __init__(self, X, log):
        self.X, self.log = X, log
        self.shape, self.dtype, self.ndim = X.shape, X.dtype, X.ndim

    def __getitem__(self, index):
        if self.X[index].size:
            with open(self.log, "a") as f:
                f.write("read\n")
        return self.X[index]


def _chunk_reads(log, run):
    """How many chunk reads of a :class:`_LoggedRows` ``run()`` makes, and its result."""
    log.write_text("")
    out = run()
    return log.read_text().count("read"), out


@pytest.mark.filterwarnings("ignore:1 constant gene")
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("kept", [True, False], ids=["codes-kept", "codes-lazy"])
def test_one_call_reads_x_once_for_validation_moments_and_thresholds(labelled, sparse, kept, tmp_path, monkeypatch):
    """Validation (NaN/Inf), constant genes and the mean +- sd thresholds share their moment passes within one call
    (``counting_dask.pass_memo``; dropping the constant gene carries them over): QPFS with mean_sd reads every chunk
    3 times (2 moments, then the codes, kept: the used bins, the 2 margin passes and the count matrix read them)
    when the codes fit ``CODES_CACHE_BYTES`` (4 before the used bins were read from the kept codes), else 6 (the
    used bins, and the codes recomputed in each of the 3 count passes), not 9; a second call reads X again
    (nothing kept between calls, so a rewritten file is never answered from an old pass)."""
    from bioqpfs._kernels import counting_dask

    if not kept:
        monkeypatch.setattr(counting_dask, "CODES_CACHE_BYTES", 0)
    import scipy.sparse as sp

    import bioqpfs

    X, y = labelled
    log = tmp_path / "reads"
    D = da.from_array(_LoggedRows(X, log), chunks=(60, X.shape[1]), asarray=False, meta=np.empty((0, 0)))
    if sparse:
        D = D.map_blocks(sp.csr_matrix, dtype=X.dtype, meta=sp.csr_matrix((0, 0), dtype=X.dtype))
    want = bioqpfs.select(X, y, method="qpfs", n_genes=6, discretization="mean_sd")
    for _ in range(2):
        reads, got = _chunk_reads(log, lambda: bioqpfs.select(D, y, method="qpfs", n_genes=6,
                                                              discretization="mean_sd"))
        assert reads == (3 if kept else 6) * 4
        np.testing.assert_array_equal(got.ranking, want.ranking)
        np.testing.assert_array_equal(got.weights, want.weights)
    reads, _ = _chunk_reads(log, lambda: bioqpfs.measures.discretize(D, discretization="mean_sd").compute())
    # one call: 2 moments (validation included), then the codes (kept: their used bins and the result read them),
    # or the used bins and the codes themselves when they do not fit
    assert reads == (3 if kept else 4) * 4


@pytest.mark.filterwarnings("ignore:1 constant gene")
def test_default_recipe_passes_over_x(labelled, tmp_path):
    """The default recipe on zero-inflated data (codes of Q, per-class bins, the 255 pair-order levels: three
    discretisations) reads every chunk 9 times: the moment passes (validation, constant genes and "auto"'s zero
    fraction share them), the two range passes (non-zero values, all values), one order-statistics search for the
    three rules' edges (prefetch_quantile_edges), each code set once (kept: its used bins and the counts read the
    kept codes), the class sums.  It was 15 before the used bins were read from the kept codes and the range pass
    was shared, 11 with one search per rule."""
    import bioqpfs

    X, y = labelled
    log = tmp_path / "reads"
    D = da.from_array(_LoggedRows(X, log), chunks=(60, X.shape[1]), asarray=False, meta=np.empty((0, 0)))
    want = bioqpfs.select(X, y, n_genes=6)
    reads, got = _chunk_reads(log, lambda: bioqpfs.select(D, y, n_genes=6))
    np.testing.assert_array_equal(got.ranking, want.ranking)
    assert got.params["discretization_used"] == "zero_quantile"
    assert reads == 9 * 4, reads / 4


def _chunk_first_row(x):
    return np.ones(3) * x.shape[0], [int(x[0, 0])]


def _combine_in_order(*parts):
    return sum(p[0] for p in parts), [k for p in parts for k in p[1]], len(parts)


def _combine_recording(*parts):
    total, order, _ = _combine_in_order(*parts)
    return total, order


@pytest.mark.parametrize("result_bytes", [0, 2**20, 8 * 2**20, 10**9])
def test_big_chunk_results_are_summed_in_one_chain_per_worker_thread(result_bytes, monkeypatch):
    """Worker memory stays flat in the number of chunks: whole count matrices (>= CHAIN_BYTES per chunk) are summed
    in one chain per worker thread (chunk k in chain k mod S, each link after the previous one, so no worker holds
    more than a running sum and one chunk's matrix), small results in a tree of SPLIT_EVERY; the sum is the same."""
    from bioqpfs import _validation
    from bioqpfs._kernels import counting_dask

    monkeypatch.setattr(counting_dask, "parallel_slots", lambda: 3)
    monkeypatch.setattr(_validation, "available_memory", lambda: (10**12, "test"))  # room for 3 chains of 1 GB
    X = da.arange(100, chunks=5).reshape(100, 1) * 1.0  # 20 chunks; a chunk's first value names it
    X = X.rechunk((5, 1))
    total, order = counting_dask.reduce_chunks(_chunk_first_row, [X], combine=_combine_recording,
                                               result_bytes=result_bytes)
    np.testing.assert_array_equal(total, np.full(3, 100.0))
    if result_bytes >= counting_dask.CHAIN_BYTES:
        assert order == [5 * k for s in range(3) for k in range(s, 20, 3)]  # chains 0,3,6..; 1,4,7..; 2,5,8..
    else:
        assert order == [5 * k for k in range(20)]


@pytest.mark.parametrize("available_gb,chains", [(1000, 3), (8.5, 2), (5, 1), (0.1, 1)])
def test_the_chains_are_as_many_as_the_memory_holds(monkeypatch, available_gb, chains):
    """With many worker threads and big count matrices the chains' sums alone could exhaust the memory (16 threads x
    128 MB sums and as much working space each): as many chains as half the available memory holds at twice the
    result each, at least one; the sum is the same."""
    from bioqpfs import _validation
    from bioqpfs._kernels import counting_dask

    monkeypatch.setattr(counting_dask, "parallel_slots", lambda: 3)
    monkeypatch.setattr(_validation, "available_memory", lambda: (available_gb * 10**9, "test"))
    X = (da.arange(100, chunks=5).reshape(100, 1) * 1.0).rechunk((5, 1))
    total, order = counting_dask.reduce_chunks(_chunk_first_row, [X], combine=_combine_recording,
                                               result_bytes=10**9)
    np.testing.assert_array_equal(total, np.full(3, 100.0))
    assert order == [5 * k for s in range(chains) for k in range(s, 20, chains)]


@pytest.mark.parametrize("key,where", [
    (("concatenate-read-X-rows-_canonical_chunk-abc", 1, 0), "sample chunk 2 of 3 (samples 100..199)"),
    ("_chunk_joint-chunk2-abc", "sample chunk 3 of 3 (samples 200..249)"),
    (("read-raw.X-rows-100-199-abc", 0), "rows 100..199 of raw/X"),
    ("combine-abc", "a sample chunk")])
def test_a_dead_worker_is_reported_with_its_chunk(monkeypatch, key, where):
    """distributed's KilledWorker (a worker process died: killed for memory) becomes a WorkerDiedError naming the
    sample chunk, from the task key: an array block's index, a pass's ``chunk<k>`` or a read's rows."""
    import types

    from bioqpfs._kernels.counting_dask import WorkerDiedError, compute

    class KilledWorker(Exception):  # the shape of distributed.scheduler.KilledWorker
        task = key
        last_worker = types.SimpleNamespace(address="tcp://127.0.0.1:1")
        allowed_failures = 3

    x = da.zeros((250, 4), chunks=((100, 100, 50), 4))
    monkeypatch.setattr(type(x), "compute", lambda self: (_ for _ in ()).throw(KilledWorker()))
    with pytest.raises(WorkerDiedError) as err:
        compute(x)
    assert f"died while it computed {where} (task" in str(err.value)
    assert "after 4 such deaths" in str(err.value) and "chunk_size" in str(err.value)
    assert isinstance(err.value.__cause__, KilledWorker)
    monkeypatch.setattr(type(x), "compute", lambda self: (_ for _ in ()).throw(ValueError("other")))
    with pytest.raises(ValueError, match="other"):  # anything else passes through
        compute(x)


def test_a_chain_reads_each_chunk_inside_its_link(monkeypatch):
    """In a chain (big results) a chunk's own tasks -- its file read -- run inside the link that counts it, not as
    tasks of their own that the scheduler could run ahead and hold: the graph has no read task, and every chunk
    is read once."""
    import threading

    import dask

    from bioqpfs._kernels import counting_dask

    reads, lock = [], threading.Lock()

    def read(k):
        with lock:
            reads.append(k)
        return np.full((5, 1), 5.0 * k)

    monkeypatch.setattr(counting_dask, "parallel_slots", lambda: 2)
    X = da.concatenate([da.from_delayed(dask.delayed(read, pure=True)(k, dask_key_name=f"read-X-rows-{k}"),
                                        shape=(5, 1), dtype=float) for k in range(12)]) * 1.0
    calls = []
    real_compute = counting_dask.compute
    monkeypatch.setattr(counting_dask, "compute", lambda obj, bounds=None: calls.append(obj) or real_compute(obj, bounds))
    total, order = counting_dask.reduce_chunks(_chunk_first_row, [X], combine=_combine_recording,
                                               result_bytes=counting_dask.CHAIN_BYTES)
    np.testing.assert_array_equal(total, np.full(3, 12.0 * 5))
    assert sorted(reads) == list(range(12))  # each chunk read once
    graph = dict(calls[0].__dask_graph__())  # only the links and the final combine: no chunk task of X's own
    assert sorted(k for k in graph if not str(k).startswith("_combine_recording")) == sorted(
        k for k in graph if str(k).startswith("_chunk_first_row-chunk"))
    assert len([k for k in graph if str(k).startswith("_chunk_first_row-chunk")]) == 12


@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "balanced"])
def test_a_chain_counts_each_chunk_into_its_running_sum(monkeypatch, weighted):
    """Memory of a count pass: after its first chunk, a chain's link counts the chunk straight into the chain's sum
    (``joint(add=True)``), so a worker holds one count matrix per chain, not two (the sum and the chunk's own);
    the counts are the in-memory backend's (exact; to float64 rounding with class weights)."""
    from bioqpfs._kernels import counting_dask
    from bioqpfs._kernels.counting_numpy import NumpyCounting

    rng = np.random.default_rng(3)
    n, m = 400, 12
    y = rng.integers(0, 3, n)
    codes = rng.integers(0, 3, size=(n, m)).astype(np.uint8)
    w = info.class_sample_weights(y, "balanced") if weighted else None
    dt = np.float64 if weighted else np.float32
    monkeypatch.setattr(counting_dask, "parallel_slots", lambda: 2)
    monkeypatch.setattr(counting_dask, "CHAIN_BYTES", 1)  # these small matrices are summed in chains too
    adds, joint = [], NumpyCounting.joint

    def spy(self, *args, add=False, **kwargs):
        adds.append(add)
        return joint(self, *args, add=add, **kwargs)

    monkeypatch.setattr(NumpyCounting, "joint", spy)
    D = counting_dask.DaskCounting(da.from_array(codes, chunks=(50, m)), n_bins=3, groups=y, weights=w,
                                   count_dtype=dt)
    every = slice(0, m)
    for per_class in (False, True):
        adds.clear()
        got = D.joint(every, every, per_class=per_class)
        assert sorted(adds) == [False] * 2 + [True] * 6  # 8 chunks in 2 chains: the first link of each counts apart
        want = NumpyCounting(codes, n_bins=3, groups=y, weights=w, count_dtype=dt).joint(every, every,
                                                                                         per_class=per_class)
        if weighted:
            np.testing.assert_allclose(got, want, rtol=1e-13)
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("batch_discretization", [None, "per_batch", "global"])
def test_per_class_bins_of_the_default_recipe_on_dask_equal_in_memory(sparse, batch_discretization):
    """``relevance_bins="per_class"`` (the default recipe): the fine codes, their per-(class, batch) counts and the
    detected counts are sums over sample chunks, so the relevance on a Dask X is the in-memory one exactly, with and
    without batches, and so is the panel."""
    import bioqpfs
    from bioqpfs.selectors import _common

    rng = np.random.default_rng(9)
    n, m = 600, 25
    y = rng.integers(0, 5, n)
    X = np.round(rng.gamma(1.2, 1.0, size=(n, m)), 1) * (rng.random((n, m)) < 0.45)
    X[:, :5] += (y[:, None] == np.arange(5)) * 2.0 * (X[:, :5] > 0)
    kw = {} if batch_discretization is None else dict(batch=rng.integers(0, 3, n),
                                                     batch_discretization=batch_discretization)
    D = dask_of(X, (150, 250, 200), sparse)
    want = bioqpfs.select(X, y, n_genes=6, **kw)
    got = bioqpfs.select(D, y, n_genes=6, **kw)
    assert want.params["relevance_bins"] == "per_class" and want.params["discretization_used"] == "zero_quantile"
    np.testing.assert_array_equal(got.ranking, want.ranking)
    # the recipe's Q has a zero diagonal (self_redundancy="constant"): each QP is definite by the psd shift's margin
    # only, so last-bit differences of the chunked counts reach the weights at ~1e-9; the ranking is exact
    np.testing.assert_allclose(got.weights, want.weights, rtol=0, atol=1e-8)
    strata = None if batch_discretization is None else _common.check_batch(
        kw["batch"], X, batch_weights="size", batch_discretization=batch_discretization)
    F_mem = _common.per_class_bin_relevance(X, y, 5, rule="zero_quantile", n_bins=3, class_weight="balanced", base=2,
                                            batch=strata)
    F_dask = _common.per_class_bin_relevance(D, y, 5, rule="zero_quantile", n_bins=3, class_weight="balanced", base=2,
                                             batch=strata)
    np.testing.assert_array_equal(F_dask, F_mem)


@pytest.mark.parametrize("batch_discretization", [None, "per_batch", "global"])
def test_pair_order_information_of_the_default_recipe_on_dask_equal_in_memory(batch_discretization):
    """On dense data the default recipe adds the pair-order information (``relevance="auto"`` -> ``"mi_order"``;
    on single-cell data also against the nearest class, ``nearest=True``, checked here too):
    its 255-level codes and their per-(class, batch) counts are sums over sample chunks, so the relevance and the
    panel on a Dask X are the in-memory ones, with and without batches."""
    import bioqpfs
    from bioqpfs.selectors import _common

    rng = np.random.default_rng(10)
    n, m = 400, 20
    y = rng.integers(0, 4, n)
    X = rng.normal(size=(n, m)) + (y[:, None] == np.arange(m) % 4) * np.linspace(0.2, 1.5, m)
    kw = {} if batch_discretization is None else dict(batch=rng.integers(0, 3, n),
                                                     batch_discretization=batch_discretization)
    D = dask_of(X, (100, 180, 120), False)
    want = bioqpfs.select(X, y, n_genes=6, **kw)
    got = bioqpfs.select(D, y, n_genes=6, **kw)
    assert want.params["relevance_used"] == "mi_order" and want.params["discretization_used"] == "mean_sd"
    np.testing.assert_array_equal(got.ranking, want.ranking)
    # Q's zero diagonal (self_redundancy="constant") leaves each QP definite by the psd shift's margin only, so
    # Q's last-bit differences (Dask sums its chunks' counts) reach the weights at ~1e-9
    np.testing.assert_allclose(got.weights, want.weights, rtol=0, atol=1e-8)
    strata = None if batch_discretization is None else _common.check_batch(
        kw["batch"], X, batch_weights="size", batch_discretization=batch_discretization)
    for nearest in (False, True):
        F_mem = _common.pair_order_information(X, y, 4, base=2, batch=strata, nearest=nearest)
        np.testing.assert_array_equal(_common.pair_order_information(D, y, 4, base=2, batch=strata, nearest=nearest),
                                      F_mem)


@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "balanced"])
@pytest.mark.parametrize("kind", ["mi", "cmi"])
def test_sparse_codes_on_dask_chunks_give_the_gemm_matrices(rng, monkeypatch, kind, weighted):
    """Dask chunks are counted by the numpy backend, so each chunk takes its own sparse form (its own implicit
    levels): the matrices equal the in-memory GEMM's (exactly for counts, to rounding with weights)."""
    from test_counting_backend import _count_by, _sparse_codes

    codes = _sparse_codes(rng, 120, 25, 3, 0.06)
    y = rng.integers(0, 3, 120)
    groups = None if kind == "mi" and not weighted else y
    w = info.class_sample_weights(y, "balanced") if weighted else None
    _count_by("gemm", monkeypatch)
    want = info.pairwise_information(info.CodeTable(codes, groups=groups, weights=w), None, kind)
    calls = _count_by("sparse", monkeypatch)
    X = da.from_array(codes, chunks=((7, 50, 1, 62), 25))
    got = info.pairwise_information(info.CodeTable(X, codes.max(axis=0).astype(np.int64) + 1, groups=groups,
                                                   weights=w), None, kind, n_workers=2)
    assert calls  # the chunks were counted from their sparse forms
    if weighted:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("meta", ["csr", "numpy"])
def test_a_dask_x_mixing_csr_and_dense_blocks_gives_the_in_memory_panel(meta):
    """Blocks of a Dask X may be CSR or dense whatever its meta says (map_blocks that densifies some): with CSR meta
    a dense block failed deep in the chunk check ("'numpy.ndarray' object has no attribute
    'has_canonical_format'"); both mixes now give the in-memory panel."""
    import scipy.sparse as sp

    import bioqpfs

    rng = np.random.default_rng(0)
    n, m = 120, 15
    y = np.repeat(["a", "b", "c"], n // 3)
    X = rng.poisson(2, size=(n, m)).astype(float)
    for k, g in enumerate((2, 5, 7)):
        X[y == "abc"[k], g] += 4

    def mixed(block, block_info=None):
        return sp.csr_matrix(block) if block_info[0]["chunk-location"][0] % 2 == (meta == "csr") else block

    D = da.from_array(X, chunks=(40, m)).map_blocks(
        mixed, dtype=float, meta=sp.csr_matrix((0, 0)) if meta == "csr" else np.empty((0, 0)))
    for method in (None, "qpfs", "spec_cmi"):
        kw = {} if method is None else dict(method=method)
        want, got = bioqpfs.select(X, y, n_genes=4, **kw), bioqpfs.select(D, y, n_genes=4, **kw)
        np.testing.assert_array_equal(got.selected, want.selected)
        np.testing.assert_allclose(got.weights, want.weights, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("chunk", ["dense", "csr"])
def test_the_estimators_fit_a_dask_x_chunk_by_chunk_and_transform_it_lazily(chunk):
    """A Dask X given to a scikit-learn estimator went through ``validate_data``, which read it whole (np.asarray),
    failed on CSR chunks ("Expected 2D array, got scalar array instead") and on unknown chunk sizes ("cannot
    convert float NaN to integer"); it now goes to select() as a Dask array (the in-memory panel), transform
    indexes it lazily, and unknown chunk sizes are refused with the fix."""
    import dask
    import scipy.sparse as sp

    from bioqpfs.estimators import BaselineSelector, QPFSSelector

    rng = np.random.default_rng(3)
    n, m = 90, 12
    y = rng.integers(0, 3, n)
    X = np.abs(rng.normal(size=(n, m))) * (rng.random((n, m)) < 0.6) + y[:, None] * (np.arange(m) % 3 == 0)
    D = da.from_array(sp.csr_matrix(X) if chunk == "csr" else X, chunks=(30, m))
    for cls in (QPFSSelector, BaselineSelector):
        want = cls(4).fit(X, y)
        with dask.config.set(scheduler="synchronous"):
            got = cls(4).fit(D, y)
        np.testing.assert_array_equal(got.get_support(indices=True), want.get_support(indices=True))
        np.testing.assert_allclose(got.weights_, want.weights_, rtol=1e-12, atol=1e-15)
        assert got.n_features_in_ == m and not hasattr(got, "feature_names_in_")
        Xr = got.transform(D)
        assert isinstance(Xr, da.Array) and Xr.shape == (n, 4)
        kept = Xr.compute()
        np.testing.assert_array_equal(kept.toarray() if sp.issparse(kept) else kept, want.transform(X))
        with pytest.raises(ValueError, match="expecting 12 features"):
            got.transform(D[:, :5])
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        QPFSSelector(4).fit(D[da.from_array(np.ones(n, dtype=bool), chunks=30)], y)


def test_a_chunk_whose_shape_is_not_the_declared_one_is_refused_naming_its_samples():
    """A block of another shape than the array's chunks declare (map_blocks that drops a row, without chunks=) was
    counted as it was: the |Pearson| matrix came back silently (from 57 of the 60 declared samples), the selection
    failed deep in numpy ("index 10 is out of bounds", a matmul "mismatch in its core dimension")."""
    import bioqpfs
    from bioqpfs import measures

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 6))
    y = np.repeat([0, 1, 2], 20)
    lying = da.from_array(X, chunks=(20, 6)).map_blocks(lambda b: b[:-1], dtype=float)
    for call in (lambda: measures.correlation(lying), lambda: measures.relevance(lying, y, kind="hall"),
                 lambda: bioqpfs.select(lying, y, method="qpfs", n_genes=2)):
        with pytest.raises(ValueError, match=r"holds shape \(19, 6\) where the array declares \(20, 6\) \(samples "):
            call()


def test_refusals_on_dask_name_every_rule_with_a_dask_path():
    """discretization='mdl' on a Dask X named only 'mean_sd' or 'quantile' as what to use (not 'zero_quantile' or
    'auto', the default recipe's), and non-integer values under discretization=None suggested 'mdl', which a Dask X
    refuses."""
    from bioqpfs import measures

    X = da.from_array(np.random.default_rng(0).random((20, 3)), chunks=(10, 3))
    y = np.arange(20) % 2
    with pytest.raises(ValueError, match="'mean_sd', 'quantile', 'zero_quantile' or 'auto'"):
        measures.discretize(X, "mdl", y=y)
    with pytest.raises(ValueError, match="non-integer values") as refused:
        measures.discretize(X, None)
    assert "'zero_quantile'" in str(refused.value) and "'mdl' has no Dask path" in str(refused.value)


@pytest.mark.parametrize("fmt", ["coo", "dok"])
def test_sparse_chunks_of_any_format_are_read_whole_or_indexed_as_csr(fmt):
    """The paths that read a Dask X whole (the methods without a Dask path) or take its columns (the estimators'
    transform) got COO or DOK chunks as they were: DOK blocks failed inside scipy when Dask concatenated them
    ("scipy sparse array classes do not support instantiation from a scalar"), COO blocks when indexed
    ("'coo_matrix' object is not subscriptable"); the chunked paths already read them as CSR."""
    import scipy.sparse as sp

    import bioqpfs
    from bioqpfs.estimators import QPFSSelector

    rng = np.random.default_rng(6)
    n, m = 60, 8
    y = rng.integers(0, 3, n)
    X = np.abs(rng.normal(size=(n, m))) * (rng.random((n, m)) < 0.6) + y[:, None] * (np.arange(m) % 3 == 0)
    make = getattr(sp, f"{fmt}_matrix")
    D = da.from_array(X, chunks=(20, m)).map_blocks(make, dtype=float, meta=sp.csr_matrix((0, 0)))
    for method in ("ikm_qpfs", "hsfs"):
        want = bioqpfs.select(X, y, method=method, n_genes=3)
        got = bioqpfs.select(D, y, method=method, n_genes=3)
        np.testing.assert_array_equal(got.ranking, want.ranking)
        np.testing.assert_allclose(got.weights, want.weights, rtol=1e-12, atol=1e-15)
    sel = QPFSSelector(3).fit(D, y)
    np.testing.assert_array_equal(sel.transform(D).compute().toarray(), X[:, sel.get_support()])


def test_an_anndata_with_a_dask_x_is_read_whole_for_a_run_without_a_dask_path():
    """README: MDL and the MST relevances are refused on a Dask array, "the AnnData faces read X whole for them
    instead". That held for a backed or lazily read file only: an AnnData whose X (or layer) is a Dask array of the
    user's was refused ("discretization='mdl' is not available for a Dask array"). It is now read whole after the
    memory check, giving the in-memory panel."""
    import anndata as ad
    import pandas as pd

    import bioqpfs

    rng = np.random.default_rng(2)
    n, m = 60, 8
    y = rng.integers(0, 3, n)
    X = np.abs(rng.normal(size=(n, m))) + y[:, None] * (np.arange(m) % 3 == 0)
    obs = pd.DataFrame({"ct": pd.Categorical(np.array(["a", "b", "c"])[y])}, index=[f"c{i}" for i in range(n)])
    for params in (dict(discretization="mdl"), dict(relevance="mst")):
        want = bioqpfs.tl.select_genes(ad.AnnData(X, obs=obs), "ct", method="qpfs", n_genes=3, copy=True, **params)
        lazy = ad.AnnData(da.from_array(X, chunks=(20, 4)), obs=obs)
        got = bioqpfs.tl.select_genes(lazy, "ct", method="qpfs", n_genes=3, copy=True, **params)
        pd.testing.assert_frame_equal(got.var, want.var)
        layered = ad.AnnData(np.zeros_like(X), obs=obs, layers={"L": da.from_array(X, chunks=(20, m))})
        got = bioqpfs.tl.select_genes(layered, "ct", method="qpfs", n_genes=3, copy=True, layer="L", **params)
        pd.testing.assert_frame_equal(got.var, want.var)


def test_mean_sd_of_a_subnormal_gene_with_an_all_zero_chunk_is_the_in_memory_one():
    """A gene of subnormal values (scale s below 2**-1024) whose chunk holds only zeros (that chunk's scale 1) had
    its chunk mean rescaled by s_b / s = inf: 0 * inf made its Dask mean and sd NaN and its codes all 0, silently;
    the chunk means are now rescaled by their exponent difference."""
    from bioqpfs import measures

    rng = np.random.default_rng(9)
    X = rng.normal(size=(40, 3))
    X[:, 1] = 5e-324 * rng.integers(0, 3, 40)
    X[:10, 1] = 0.0
    want = measures.discretize(X, "mean_sd")
    assert np.unique(want[:, 1]).size > 1
    for chunks in ((10, 3), (1, 3)):
        got = np.asarray(measures.discretize(da.from_array(X, chunks=chunks), "mean_sd"))
        np.testing.assert_array_equal(got, want)


def test_an_anndata_with_a_dask_x_is_refused_by_hsfs_before_it_is_read():
    """A method without a Dask path reads a user's Dask X itself, after its own checks: HSFS refuses more than
    4,000 samples before any chunk is computed (the AnnData faces must not read X whole for it first)."""
    import anndata as ad
    import pandas as pd
    from dask.callbacks import Callback

    import bioqpfs

    n = 4001
    X = da.random.random((n, 3), chunks=(2000, 3))
    obs = pd.DataFrame({"ct": pd.Categorical(np.arange(n) % 2)}, index=[f"c{i}" for i in range(n)])
    ran = []
    with Callback(posttask=lambda key, result, dsk, state, worker_id: ran.append(key)):
        with pytest.raises(ValueError, match="above 4000"):
            bioqpfs.tl.select_genes(ad.AnnData(X, obs=obs), "ct", method="hsfs", n_genes=2)
    assert not ran
