"""Memory guards count what a step really allocates, and the steps keep their temporaries bounded (the memory-guard
hunt: every finding measured with tracemalloc, or refused under a small patched budget before it allocates)."""
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from bioqpfs import _validation
from bioqpfs._kernels import correlation as corr


def _peak(func, *args, **kwargs):
    """``(result, tracemalloc peak in bytes)`` of one call."""
    tracemalloc.start()
    try:
        result = func(*args, **kwargs)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _budget(monkeypatch, n_bytes):
    """Pretend ``n_bytes`` are available (the guards refuse beyond 0.8 of it)."""
    monkeypatch.setattr(_validation, "available_memory", lambda: (n_bytes, "a test budget"))


@pytest.fixture
def tall_dense():
    rng = np.random.default_rng(0)
    return rng.random((4000, 500), dtype=np.float32)   # 8 MB: a float64 copy is 16 MB, its squares 16 more


def test_dense_moments_are_blockwise(monkeypatch, tall_dense):
    """The column moments of a dense X hold one column block and its centred copy, not a float64 copy of X and
    its squares (16 bytes per entry, four times a float32 X, before any guard)."""
    monkeypatch.setattr(corr, "MOMENT_BLOCK_BYTES", 2**20)
    (mean, ss, _), peak = _peak(corr.scaled_column_moments, tall_dense)
    assert peak < 3 * 2**20 + 2**19
    Xd = tall_dense.astype(np.float64)                      # the whole-matrix formulas, bit for bit
    assert np.array_equal(mean, Xd.mean(axis=0))
    assert np.array_equal(ss, ((Xd - Xd.mean(axis=0)) ** 2).sum(axis=0))


def test_moment_blocks_are_never_one_column_wide():
    """numpy sums a single column pairwise but a wider block sample after sample, as the whole matrix: a last
    block of one column is merged into the one before, so blockwise moments are the whole matrix's bit for bit."""
    X = np.empty((1000, 17))
    assert list(corr.column_blocks(X, 8 * 1000 * 4, min_width=2)) == [(0, 4), (4, 8), (8, 12), (12, 17)]
    assert list(corr.column_blocks(X, 8 * 1000 * 4)) == [(0, 4), (4, 8), (8, 12), (12, 16), (16, 17)]
    assert list(corr.column_blocks(np.empty((10, 1)), 8, min_width=2)) == [(0, 1)]
    rng = np.random.default_rng(1)
    Y = rng.standard_normal((5000, 9))
    mean, ss, _ = corr.scaled_column_moments(Y)
    assert np.array_equal(mean, Y.mean(axis=0)) and np.array_equal(ss, ((Y - Y.mean(axis=0)) ** 2).sum(axis=0))


def test_prepare_of_a_dense_x_stays_below_x(monkeypatch, tall_dense):
    """``prepare`` (every selector's first step) made 16 bytes per entry of temporaries (64 MB here)."""
    from bioqpfs.selectors._common import prepare

    monkeypatch.setattr(corr, "MOMENT_BLOCK_BYTES", 2**20, raising=False)
    _, peak = _peak(prepare, tall_dense, np.arange(4000) % 3)
    assert peak < tall_dense.nbytes


def test_sparse_moments_guard_their_float64_columns(monkeypatch):
    X = sp.random(2000, 300, density=0.2, format="csr", random_state=0, dtype=np.float32)
    _budget(monkeypatch, int(10 * X.nnz / 0.8))          # less than the 12 bytes per stored value of the copy
    with pytest.raises(MemoryError, match=r"float64 columns of the 2000 x 300 sparse X .*subsample the samples"):
        corr.scaled_column_moments(X)
    _budget(monkeypatch, int(14 * X.nnz / 0.8) + 2**16)
    mean, ss, _ = corr.scaled_column_moments(X)
    Xd = X.toarray().astype(np.float64)
    assert np.allclose(mean, Xd.mean(axis=0), rtol=1e-12) and np.allclose(ss, Xd.var(axis=0) * 2000, rtol=1e-10)


def test_mean_sd_codes_of_a_dense_x_need_the_codes_and_a_block(monkeypatch, tall_dense):
    """``measures.discretize`` of a dense X made a float64 copy and its variance temporary (16 bytes per entry)."""
    from bioqpfs import measures

    monkeypatch.setattr(corr, "MOMENT_BLOCK_BYTES", 2**20, raising=False)
    measures.discretize(tall_dense[:50])                 # numba's compiled kernels loaded before the measurement
    codes, peak = _peak(measures.discretize, tall_dense)
    assert peak < tall_dense.size + 4 * 2**20            # the uint8 codes, two 1 MB blocks and small vectors



def test_codes_are_guarded(monkeypatch, tall_dense):
    from bioqpfs import measures

    _budget(monkeypatch, int(0.9 * tall_dense.size / 0.8))
    with pytest.raises(MemoryError, match=r"the 4000 x 500 discretised codes"):
        measures.discretize(tall_dense)


@pytest.fixture
def tall_sparse():
    X = sp.random(20000, 300, density=0.05, format="csr", random_state=2, dtype=np.float32)
    X.data = np.log1p(10 * X.data)
    return X


def test_correlation_blocks_shrink_to_the_available_memory(monkeypatch, tall_sparse):
    """|Pearson| held an n x 2048 float64 block while it built another with three n x 2048 temporaries (170 MB
    here, with a guard of the 0.7 MB output only); the blocks are standardised in place and narrowed to fit."""
    from bioqpfs import measures

    want = corr.abs_pearson(tall_sparse)
    _budget(monkeypatch, 40 * 2**20)
    assert corr.product_block_width(20000, 300, 2048, 300 * 300 * 8) < 300
    got, peak = _peak(measures.correlation, tall_sparse)
    assert peak < 45 * 2**20
    assert np.allclose(got, want, rtol=0, atol=1e-12)
    _budget(monkeypatch, 10 * 2**20)                      # not even MIN_PRODUCT_BLOCK genes fit
    with pytest.raises(MemoryError, match=r"20000 x 64 float64 standardised gene blocks"):
        measures.correlation(tall_sparse)


def test_correlation_blocks_of_a_dense_ish_sparse_x_count_the_column_slices(monkeypatch):
    """Beside its dense blocks, a sparse block holds X's column slice and its float64 copy (20 bytes per stored
    entry of a float32 CSR): at 30% non-zero the blocks chosen for a 60 MB budget peaked at 65 MB, over the 48 MB
    the guard allows; the widths now count the slices of the genes with the most entries."""
    X = sp.random(20000, 300, density=0.3, format="csr", random_state=2, dtype=np.float32)
    X.data = np.log1p(10 * X.data)
    mom = corr.scaled_column_moments(X)
    want = corr.pearson(X, absolute=True, moments=mom)
    _budget(monkeypatch, 60 * 2**20)
    got, peak = _peak(corr.pearson, X, absolute=True, moments=mom)
    assert peak <= 0.8 * 60 * 2**20
    assert np.allclose(got, want, rtol=0, atol=1e-12)
    per_gene = np.sort(np.bincount(X.indices, minlength=300))[::-1]
    assert corr.sparse_slice_bytes(X, 2048)[9] == 20 * per_gene[:10].sum()   # 4 + 4 and 8 + 4 bytes per entry


def test_within_batch_standardisation_holds_three_dense_copies(monkeypatch):
    """The in-memory within-batch standardisation (|correlation| or Hall's relevance with batches) held X as
    dense float64, the result, a batch's centred rows and their squares: 4 dense copies.  The rows are now
    standardised in place, their squares summed by column blocks: 3 copies and one block, and the same bits as
    the whole-matrix formula (checked against it here)."""
    from bioqpfs.selectors._common import Batches, within_batch_standardized

    monkeypatch.setattr(corr, "MOMENT_BLOCK_BYTES", 2**20)
    n, m = 6000, 400
    X = sp.random(n, m, density=0.3, format="csr", random_state=1, dtype=np.float32)
    codes = np.repeat([0, 1, 2], [4000, 1500, 500])
    batch = Batches(codes, np.array(["a", "b", "c"]), "equal", "pooled")
    W, peak = _peak(within_batch_standardized, X, batch)
    assert peak <= 3 * 8 * n * m + 2**20 + 2**18
    D = X.toarray().astype(np.float64)
    for b in range(3):   # the whole-matrix formula, bit for bit
        xb = D[codes == b] - D[codes == b].mean(axis=0)
        sd = np.sqrt((xb ** 2).mean(axis=0))
        want = np.divide(xb, sd, out=np.zeros_like(xb), where=sd > 0) * np.sqrt(batch.weights[b] * n / xb.shape[0])
        assert np.array_equal(W[codes == b], want)


def test_standardised_blocks_leave_x_alone():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((50, 6))
    before = X.copy()
    Z = corr.pearson(X)
    assert np.array_equal(X, before)
    assert np.allclose(Z, np.corrcoef(X.T), atol=1e-14)


def test_hall_relevance_of_a_dense_x_needs_no_float64_copy(monkeypatch, tall_dense):
    monkeypatch.setattr(corr, "MOMENT_BLOCK_BYTES", 2**20, raising=False)
    y = np.arange(4000) % 3
    want = corr.hall_relevance(tall_dense.astype(np.float64), y)
    F, peak = _peak(corr.hall_relevance, tall_dense, y)
    assert peak < 4 * 2**20                                 # 1 MB column blocks, not 8 bytes per entry of X
    assert np.allclose(F, want, rtol=1e-12, atol=0)


def test_ldfs_scatter_guard_counts_the_samples(monkeypatch, tall_dense):
    """LDFS from S_T guarded d x d alone (4.2 MB here) while it copied the kept genes (n x d) and built S_T from
    n x block standardised blocks: with room for S_T but not for the copy it is refused before any work."""
    import bioqpfs

    y = np.arange(4000) % 3
    _budget(monkeypatch, 10 * 2**20)
    with pytest.raises(MemoryError, match=r"LDFS's 500 x 500 total scatter \(q = 2\) from 4000 samples"):
        bioqpfs.select(tall_dense, y, method="ldfs", n_genes=5)


def test_class_sums_of_a_dense_x_need_no_float64_copy(monkeypatch, tall_dense):
    from bioqpfs._kernels.counting_dask import class_sums

    monkeypatch.setattr(corr, "MOMENT_BLOCK_BYTES", 2**20, raising=False)
    y = np.arange(4000) % 3
    s = np.ones(500)
    want = class_sums(tall_dense.astype(np.float64), y, 3)
    got, peak = _peak(class_sums, tall_dense, y, 3, s=s)
    assert peak < 3 * 2**20 and np.array_equal(got, want)


def test_eqpfs_guard_counts_its_temporaries_and_the_solver(monkeypatch):
    """EQPFS guarded 2 M^2 float64 (H and H2), not ``beta * H2`` beside them nor the solver's working memory:
    with room for the two matrices but not for the solver it is refused before they are counted."""
    import bioqpfs
    from bioqpfs.selectors import _qp

    m = 300
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, m)), np.arange(40) % 2
    _budget(monkeypatch, int(3 * 8 * m * m / 0.8))
    with pytest.raises(MemoryError, match=r"300 x 300 EQPFS redundancy matrices with the solver's working memory"):
        bioqpfs.select(X, y, method="eqpfs", n_genes=5)
    assert _qp.solver_working_bytes(m) > 0


def test_refusal_states_the_usable_memory(monkeypatch):
    """A refusal of 0.5 GiB said "only 0.6 GiB are available", which reads as if it fitted: the guard compares
    with 0.8 of it, and the message now says so."""
    _budget(monkeypatch, int(0.6 * 2**30))
    with pytest.raises(MemoryError, match=r"needs about 0\.52 GiB but only 0\.48 GiB may be used \(80% of the 0\.60 GiB "
                                          r"available\) \(bound by a test budget\)") as err:
        _validation.memory_guard(int(0.52 * 2**30), "half a GiB", ["genes"])
    assert "restrict the genes with --mask-var" in err.value.message("cli")


def test_error_curve_guards_its_dense_panels(monkeypatch):
    """error_curve densified each (fold, method) panel with no guard, and kept the previous one alive."""
    from sklearn.neighbors import NearestCentroid

    import bioqpfs

    X = sp.random(4000, 300, density=0.2, format="csr", random_state=0, dtype=np.float32)
    y = np.arange(4000) % 4
    sel = bioqpfs.select(X, y, method="maxrel")
    _budget(monkeypatch, 10 * 2**20)                     # the 4000 x 300 float32 panel and its two parts: 14 MB
    with pytest.raises(MemoryError, match=r"dense 4000 x 300 panels of the error curve .*smaller n_genes grid "
                                          r"\(its largest size, 300.*subsample the samples"):
        bioqpfs.evaluate.error_curve(X, y, sel, n_genes=[5, 300], cv=3, classifier=NearestCentroid())
    table = bioqpfs.evaluate.error_curve(X, y, sel, n_genes=[5, 100], cv=3, classifier=NearestCentroid())
    assert list(table["n_genes"]) == [5, 100]


def test_nearest_class_pair_order_holds_one_gene_block(monkeypatch):
    """The default recipe's relevance (pair-order information against the nearest class) took the level counts
    of all genes at once under a 512 MiB block: 2,000 genes x 15 cell types held ~180 MB whatever the number of
    cells, the recipe's peak on 10,000 cells.  The gene block is bounded by PAIR_ORDER_BLOCK_BYTES (64 MiB); each
    gene's values come from its own slices, so the block changes no bit (checked against 1-gene blocks)."""
    from bioqpfs.selectors import _common

    n, m, C = 1500, 2000, 15
    y = np.arange(n) % C
    X = sp.random(n, m, density=0.2, format="csr", random_state=1, dtype=np.float32)
    F, peak = _peak(_common.pair_order_information, X, y, C, base=2, rule="quantile", nearest=True)
    assert peak < _common.PAIR_ORDER_BLOCK_BYTES + 8 * 2**20
    few = X[:, :40]
    want = _common.pair_order_information(few, y, C, base=2, rule="quantile", nearest=True)
    assert np.array_equal(F[:, :40], want)
    monkeypatch.setattr(_common, "PAIR_ORDER_BLOCK_BYTES", 1)
    assert np.array_equal(_common.pair_order_information(few, y, C, base=2, rule="quantile", nearest=True), want)


def _definite_q(m):
    Q = np.full((m, m), 0.01, dtype=np.float32)
    Q[np.diag_indices(m)] = 1.0
    return Q


def test_cholesky_certificate_holds_one_dense_copy(monkeypatch):
    """The Cholesky certificate of a definite Q (``min_eigenvalue_with_safety``, ``apply_psd_fix``) held two float64
    copies of G beside Q (``G.dense()``'s cast and symmetrised copies, then the Fortran copy): 0.96 GiB for a
    0.24 GiB float32 Q of 8,000 genes.  It now builds the Fortran copy in place; the factor is the same."""
    from bioqpfs._kernels import psd

    _budget(monkeypatch, 64 * 2**30)                     # the certificate is taken (it fits a quarter of this)
    m = 1200
    Q = _definite_q(m)
    floor, peak = _peak(psd.min_eigenvalue_with_safety, Q)
    assert floor == psd.DEFINITE_FLOOR * 1.0             # certified definite by the factorisation
    assert peak < 1.25 * 8 * m * m                       # was 2 x 8 M^2
    assert peak <= psd.certificate_bytes(m) + 2**20


def test_solver_estimate_counts_the_cholesky_certificate(monkeypatch):
    """``solver_working_bytes`` (the guards of qpfs, qpfs_cover, eqpfs) counted the active-set working set,
    capped at ACTIVE_SET_MAX_SUPPORT^2 genes, but not the certificate's dense float64 copy of G (8 M^2): beyond
    ~8,700 genes the copy is the larger (qpfs on a definite Q of 16,000 genes: estimate 1.5 GiB, peak 4.8 GiB).
    The cap is lowered here to reach that regime at a testable size.  Where the copy would not fit (a quarter of
    the available memory) the certificate is skipped and not counted, so the guard refuses nothing more."""
    from bioqpfs._kernels import psd, simplex_qp
    from bioqpfs.selectors._qp import solver_working_bytes

    monkeypatch.setattr(simplex_qp, "ACTIVE_SET_MAX_SUPPORT", 64)
    _budget(monkeypatch, 64 * 2**30)
    m = 1200
    Q = _definite_q(m)
    _, peak = _peak(psd.min_eigenvalue_with_safety, Q)
    estimate = solver_working_bytes(m, "auto", "shift")
    assert peak <= estimate <= 1.5 * peak
    assert solver_working_bytes(m, "auto", "clip") == 3 * 8 * m * m   # clipping: its dense eigen-solve, no certificate
    _budget(monkeypatch, 3 * 8 * m * m)                  # the copy is over a quarter: skipped, and not counted
    small = solver_working_bytes(m, "auto", "shift")
    assert small < 8 * m * m
    _, peak = _peak(psd.min_eigenvalue_with_safety, Q)
    assert peak <= small


def test_nystrom_guard_counts_the_error_estimate(monkeypatch):
    """QPFS+Nystrom guarded 3 r M float64 (the sampled rows and their factors), but its peak is the error
    estimate's: C, U, U diag(lam), the exact error rows and three block temporaries of the sampled rows -- 0.43 GiB
    against an estimate of 0.27 GiB at r = 772 of 15,433 genes.  The estimate now covers the measured peak."""
    import bioqpfs
    from bioqpfs.selectors import qpfs_nystrom

    rng = np.random.default_rng(5)
    X = sp.csr_matrix(np.log1p(rng.poisson(0.4, size=(300, 3000)).astype(np.float32)))
    y = np.arange(300) % 3
    seen = []
    real_guard = qpfs_nystrom.memory_guard
    monkeypatch.setattr(qpfs_nystrom, "memory_guard", lambda n, *a, **k: (seen.append(n), real_guard(n, *a, **k)))
    bioqpfs.select(X[:, :200], y, method="qpfs", nystrom_rate=0.1, n_genes=5)   # compiled before the measurement
    from bioqpfs._kernels import nystrom

    rows_seen = []
    real_eigh = nystrom.nystrom_eigh

    def eigh(C, rows, **kw):
        rows_seen.append(C.nbytes)
        tracemalloc.reset_peak()
        return real_eigh(C, rows, **kw)

    monkeypatch.setattr(nystrom, "nystrom_eigh", eigh)
    seen.clear()
    _, peak = _peak(bioqpfs.select, X, y, method="qpfs", nystrom_rate=0.1, n_genes=5)
    assert len(seen) == 1 and len(rows_seen) == 1
    assert peak <= seen[0] <= 1.5 * peak                 # was 3 r M: 0.5 of the peak after the rows


def test_cholesky_certificate_stays_below_the_openblas_crash(monkeypatch):
    """scipy's OpenBLAS ``dpotrf`` (multithreaded) died with SIGSEGV on a definite 15,600 x 15,600 G (1.9 GiB; 15,500
    passed), inside the 2 GiB the certificate allowed: such a G is now left to Lanczos, without any allocation."""
    from bioqpfs._kernels import psd, simplex_qp

    _budget(monkeypatch, 64 * 2**30)
    assert not simplex_qp.dense_copy_fits(15600, psd.CHOLESKY_MAX_BYTES)
    assert psd.certificate_bytes(15600) == 0
    G = simplex_qp.QPMatrix(U=np.ones((15600, 1)), w=np.ones(1), shift=1.0)
    assert psd.cholesky_factor(G, 0.0) is None


def test_clustering_guard_counts_the_kmeans_peak(monkeypatch):
    """The clustering guard of tlkm/ikm/ikma_qpfs counted the codes twice and two float64 copies of the genes
    (18 bytes per entry), but level-1 k-means also holds the genes' codes sliced in processing order, the copy of X
    without its constant genes and, in pass 2, m x k blocks: 0.148 GiB measured against 0.132 estimated at 15,458
    genes of 505 cells.  The estimate (``kmeans.variant_macqueen_bytes``) now covers the measured peak."""
    from bioqpfs.selectors import ikm_qpfs

    rng = np.random.default_rng(3)
    X = sp.csr_matrix(np.log1p(rng.poisson(0.3, size=(300, 3000)).astype(np.float32)))
    X[:, :40] = 0.0                                     # constant genes: X is copied without them
    X.eliminate_zeros()
    y = np.arange(300) % 3
    seen = []
    real_guard = ikm_qpfs.memory_guard
    monkeypatch.setattr(ikm_qpfs, "memory_guard",
                        lambda n, what, *a, **k: (seen.append((what, n)), real_guard(n, what, *a, **k)))
    kw = dict(n_genes=5, n_clusters=15, max_split=2)
    with pytest.warns(UserWarning, match="constant"):   # compiled before the measurement, on the same X: with a cold
        ikm_qpfs.tlkm_qpfs(X, y, **kw)                  # numba cache a smaller warm-up left compilation in the peak
    seen.clear()
    with pytest.warns(UserWarning, match="constant"):
        _, peak = _peak(ikm_qpfs.tlkm_qpfs, X, y, **kw)
    estimate = dict(seen)["clustering 2960 genes"]
    assert peak <= estimate <= 1.3 * peak                # was 18 N M: 0.88 of the peak
