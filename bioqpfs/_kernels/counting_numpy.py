"""The numpy counting backend (the default): one-hot float32 GEMMs over chunks of samples.

Implements :class:`bioqpfs._kernels.counting.CountingBackend` (see that module for the contract) for
codes in a numpy array.  A joint block is ``sum over sample chunks of O_I^T (W O_J)``: the chunk's
one-hot indicators of genes I and J (``nb`` materialised bins each, bin-major columns), exact in
float32 while the number of samples is below 2**24.  With sample weights of few distinct values (class weights:
one per class; :func:`~bioqpfs._kernels.counting.weight_level_runs`) each run of equal weight is counted exactly
the same way and scaled once in float64; with other weights the J indicators are scaled by the weights and the
product runs in float64.  A block of few genes I (:data:`DIRECT_GENES`: a greedy selector's row per step) is
counted straight from the codes instead (:meth:`NumpyCounting._joint_direct`), unless weighted otherwise than by
few values or against another table's genes: the same integers.  The input keeps its sample order; for per-class
joint counts this backend reads a class-sorted copy of the codes (:attr:`NumpyCounting.by_class`, classes in input
order within; none when the classes are already contiguous), so that each class is one run of rows.  The copy is
made on the first joint count: the margins (a table regrouped by class for the relevance) are counted from the codes
in their input order, by the label of each sample's run.

**Sparse codes** (single-cell data: most of a gene's samples share one level, its zeros).  The joint counts of a
pair of genes only need the levels other than one per gene, and which level is left out does not matter: the counts
involving it follow from the margins.  So each gene's most frequent level is left out (:class:`SparseCodes`,
its *implicit* level), the other entries are kept row by row (CSR: gene and level of every entry), and a block
pair of genes is counted by visiting, in every sample, each pair of its kept entries (:func:`_scatter_counts`,
``sum_s n_I(s) n_J(s)`` updates against the GEMM's ``N (nb |I|)(nb |J|)`` multiply-adds); the implicit levels'
counts are then restored from the margins of the same rows (:func:`_restore_implicit`), exactly, as integers.
The counts, hence every result, are bit-identical to the GEMM's.  Which way a block pair is counted follows a
cost model of both (:data:`SPARSE_COST`, measured by ``benchmarks/bench_mi.py --sparse``), from the genes'
densities of kept entries.  Codes sparse on average (below ~14% of the entries off their gene's most frequent level,
3 levels) hold every gene, in gene order.  Codes denser on average but with many sparse genes (single-cell data at
~20% non-zero: genes from nearly never to nearly always detected) hold only their sparse genes, and the information
matrix then lays its blocks out by density (:meth:`NumpyCounting.gene_order`), so that the pairs of sparse genes are
counted from the CSR and the blocks of dense genes by GEMM whole.  Codes without enough sparse genes (microarrays)
never build the CSR (:meth:`SparseCodes.held_genes`).
"""
from __future__ import annotations

import threading

import numpy as np
from numba import njit

from .._jit import skip_failed_cache_writes
from .counting import CountingBackend, class_runs, weight_level_runs

__all__ = ["NumpyCounting", "SparseCodes", "ONEHOT_BUDGET", "SPARSE_COST", "DIRECT_GENES"]

#: bytes of one chunk's one-hot indicator block
ONEHOT_BUDGET = 16 * 2**20
#: the two ways to count a block pair priced in float32 GEMM multiply-adds (one thread; 2-core Intel Xeon with
#: AVX-512, 0.014 ns each; ``benchmarks/bench_mi.py --sparse --calibrate``): one update of the sparse scatter
#: (~3 ns, a random access into the block's counts), one sample row holding kept entries (~0.3 us: its first
#: accesses miss the cache), and per gene pair the restore of the implicit levels with 2 levels (0.4 ns), 3 (9 ns)
#: and any other number L (``restore_level`` x L^2: 45 ns for 3 levels, 103 ns for 5).  They only choose the way;
#: the counts are the same either way.
#: rows on which :meth:`SparseCodes.build` first looks whether codes are clearly too dense to build it
DECIDE_ROWS = 10000
#: the least share of the GEMM's multiply-adds that the sparse form must save to be built (:meth:`SparseCodes.build`)
MIN_SAVING = 0.1
#: blocks of at most this many genes I (a greedy selector's row per step) are counted straight from the codes
#: (:meth:`NumpyCounting._joint_direct`) rather than by GEMM
DIRECT_GENES = 4
#: the direct count runs on the worker pool from this many updates (samples x |I| x |J|) per worker, with its
#: per-worker integer tables within DIRECT_BYTES (beyond, on fewer workers)
DIRECT_WORK = 2**20
DIRECT_BYTES = 64 * 2**20
SPARSE_COST = {"update": 220.0, "row": 20000.0, "restore_2": 30.0, "restore_3": 650.0, "restore_level": 320.0}


def _add_product(G, A, B):
    """``G += A.T @ B`` in place, for exact counts (0/1 indicators, integer sums): one BLAS GEMM with ``beta = 1``
    writing into ``G``, without the ``A.T @ B`` temporary numpy makes (a whole count block: 64 MB for 2,000 genes
    in 3 bins, per sample chunk of a Dask pass) nor the extra pass that adds it.  The counts are integers below
    2**24 (float32) or 2**53 (float64), so they are the same bits in any order of summation; weighted (non-integer)
    counts must not come here.  numpy's ``+=`` when the operands are not laid out for it."""
    from scipy.linalg import blas

    dt = G.dtype
    if (dt in (np.float32, np.float64) and A.dtype == dt and B.dtype == dt and G.flags.c_contiguous
            and A.flags.c_contiguous and B.flags.c_contiguous and G.size):
        # in Fortran terms: G.T (q x p) += B.T (q x rows) @ A (rows x p), every operand without a copy
        gemm = blas.get_blas_funcs("gemm", dtype=dt)
        out = gemm(1.0, B.T, A.T, beta=1.0, c=G.T, trans_b=True, overwrite_c=True)
        if np.shares_memory(out, G):
            return
        G[...] = out.T  # a wrapper that copied c: its result is still G + A.T @ B
        return
    G += A.T @ B


def _chunks(rows, chunk):
    """Consecutive slices of at most ``chunk`` samples of the slice ``rows``."""
    for s in range(rows.start, rows.stop, chunk):
        yield slice(s, min(rows.stop, s + chunk))


class NumpyCounting(CountingBackend):
    """Counts of integer codes held in a numpy array (see :mod:`bioqpfs._kernels.counting`)."""

    @classmethod
    def accepts(cls, codes):
        return isinstance(codes, np.ndarray)

    def __init__(self, codes, *, n_bins, groups=None, weights=None, count_dtype=np.float32):
        self.codes = np.asarray(codes)
        self.n_samples, self.n_genes = self.codes.shape
        self.n_bins = int(n_bins)
        self.nb = self.n_bins - 1
        self.groups = None if groups is None else np.asarray(groups)
        self.weights = weights
        self.count_dtype = count_dtype
        self.all_rows = slice(0, self.n_samples)
        # per-class counts read each class's samples as one contiguous run: when the classes are interleaved,
        # from a class-sorted copy of the codes (n_samples x n_genes bytes, private to this backend; gathering
        # the rows on every block pair instead cost 11% on 10^4 cells x 1,000 genes, 8 classes)
        levels = weight_level_runs(self.groups, weights, self.n_samples)
        if levels is None:
            order, self.class_rows = class_runs(self.groups, self.n_samples)
            self.level_rows = None
        else:  # weights of few values (class weights): each class's samples further sorted by weight
            order, self.class_rows, self.level_rows = levels
        self._order = order
        self._by_class = self.codes if order is None else None  # the class-sorted copy: made on first use
        self._by_class_lock = threading.Lock()
        self.class_weights = None if weights is None else (weights if order is None else weights[order])
        self.n_classes = len(self.class_rows)
        self._sparse = None  # SparseCodes of by_class, built on the first joint count (False: not worth it)
        self._sparse_lock = threading.Lock()

    @property
    def by_class(self):
        """The codes with each class's samples as one run of rows (:attr:`class_rows`; within a class by weight
        value, :attr:`level_rows`): ``codes`` itself when they are so already, else a copy made on first use
        (thread-safe; rows gathered on the worker pool)."""
        if self._by_class is None:
            with self._by_class_lock:
                if self._by_class is None:
                    from .information import run_ranges, split_ranges

                    out = np.empty_like(self.codes)
                    run_ranges(lambda _, lo, hi: _take_rows(self.codes, self._order, out, lo, hi),
                               split_ranges(self.n_samples))
                    self._by_class = out
        return self._by_class

    def _run_labels(self, runs):
        """Each sample's run (input order) for ``runs``, a list of slices of :attr:`by_class` rows."""
        label = np.empty(self.n_samples, dtype=np.int64)
        for k, rows in enumerate(runs):
            label[rows] = k
        if self._order is not None:
            label[self._order] = label.copy()
        return label

    def sparse_codes(self):
        """:class:`SparseCodes` of :attr:`by_class`, built once on first use (thread-safe); ``None`` when the codes
        are too dense for it to pay (:meth:`SparseCodes.build`)."""
        if self._sparse is None:
            with self._sparse_lock:
                if self._sparse is None:
                    self._sparse = SparseCodes.build(self.by_class, self.n_bins) or False
        return self._sparse or None

    def gene_order(self):
        """The order in which the information matrix should lay out its gene blocks: the sparse form's
        (:attr:`SparseCodes.order`, by density, so that a block pair is counted from it whole or not at all); ``None``
        without one, or when it holds every gene in gene order (any order counts the same)."""
        sparse = self.sparse_codes() if self._exact_counts else None
        return None if sparse is None or sparse.in_gene_order else sparse.order

    @property
    def _exact_counts(self):
        """Whether every count is exact integers (unweighted, or weights of few values counted run by run): the
        counts the sparse form can give."""
        return self.weights is None or self.level_rows is not None

    def expect(self, *, rows, per_class):
        """Build the sparse form before the block pairs (the ``expect`` hook of the counting contract): from the
        caller's thread its passes run on the worker pool, from a worker's they would run alone."""
        if self._exact_counts:
            self.sparse_codes()

    def codes_of(self, genes):
        return self.codes[:, genes]

    def _weights_of(self, per_class):
        if self.weights is None:
            return None
        return self.class_weights if per_class and self.groups is not None else self.weights

    def margins(self):
        """Counts of every class in every materialised bin, ``(C, genes, nb)`` float64.  Unweighted: one pass over
        the codes in their input order, each sample counted for its class, runs of genes on the worker pool (integer
        counts, exact; no class-sorted copy; one numpy pass per bin read the codes ``nb`` times: 1.2 s of the 32 fine
        bins of 20,000 cells x 2,000 genes).  Weights of few values
        (class weights): each run of equal weight counted so, then ``value x count`` added in float64, as the joint
        counts are (:meth:`_joint_by_level`; the GEMV per bin over a float64 copy of the indicators it replaced took
        1.5 s of the default recipe's 9.6 s at 40,000 cells x 2,000 genes on 2 cores).  Other weights: a GEMV per
        bin."""
        from .information import run_ranges, split_ranges

        w = self.class_weights  # the weights in the order of by_class
        if w is None or self.level_rows is not None:  # exact integer counts of every run, in one pass
            runs = self.class_rows if w is None else [rows for part in self.level_rows for rows, _ in part]
            counts = np.zeros((len(runs), self.n_genes, self.nb))
            labels = self._run_labels(runs)
            run_ranges(lambda _, lo, hi: _labelled_bin_counts(self.codes, labels, self.nb, counts, lo, hi),
                       split_ranges(self.n_genes))
            if w is None:
                return counts
            out = np.empty((self.n_classes, self.n_genes, self.nb), dtype=np.float64)
            k = 0
            for c, part in enumerate(self.level_rows):
                out[c] = 0.0
                for _, value in part:
                    out[c] += value * counts[k]
                    k += 1
            return out
        out = np.empty((self.n_classes, self.n_genes, self.nb), dtype=np.float64)
        for c, rows in enumerate(self.class_rows):  # other weights: a GEMV per bin
            block = self.by_class[rows]
            for a in range(self.nb):
                out[c, :, a] = w[rows] @ (block == a)
        return out

    def onehot(self, genes, rows, source=None, dtype=None):
        """Indicators (len(rows) x nb*len(genes)) in the count dtype, bin-major: column ``a*len(genes) + g``.

        Bin-major columns make every (bin a, bin b) sub-block of the count matrix a contiguous
        gene x gene tile, so the fused pass reads all its operands with unit stride.  ``source``: the codes
        the rows index (default the input order; :attr:`by_class` for per-class rows).
        """
        codes = self.codes if source is None else source
        dtype = self.count_dtype if dtype is None else dtype
        if isinstance(genes, slice):
            sub = codes[rows, genes]
        elif isinstance(rows, slice):  # the genes gathered in numba: numpy's fancy index took 4 ns per entry
            genes = np.asarray(genes, dtype=np.int64)
            sub = np.empty((rows.stop - rows.start, genes.size), dtype=codes.dtype)
            _take_columns(codes, rows.start, genes, sub)
        else:
            sub = codes[rows][:, genes]
        out = np.empty((sub.shape[0], self.nb * sub.shape[1]), dtype=dtype)
        g = sub.shape[1]
        for a in range(self.nb):
            np.equal(sub, a, out=out[:, a * g:(a + 1) * g], casting="unsafe")
        return out

    def joint(self, genes_I, genes_J, *, per_class, other=None, out=None, add=False):
        """The counting contract's ``joint``; ``out``: a buffer to count into (any shape, used when large enough).
        With ``add``, the counts are added to ``out`` instead, which must then have the result's shape and dtype
        (a Dask chain's running sum, :func:`bioqpfs._kernels.counting_dask.reduce_chunks`: no count matrix of the
        chunk's own besides it).  Exact counts add to the same bits as counting apart and adding; weighted counts
        of few values add each run's ``value x counts`` to ``out`` in turn."""
        cols = self if other is None else other
        bI = genes_I.stop - genes_I.start if isinstance(genes_I, slice) else len(genes_I)
        bJ = genes_J.stop - genes_J.start if isinstance(genes_J, slice) else len(genes_J)
        parts = self.class_rows if per_class else [self.all_rows]
        src, src_cols = (self.by_class, cols.by_class) if per_class else (self.codes, cols.codes)
        weights = self._weights_of(per_class)
        shape = (len(parts), bI * self.nb, bJ * cols.nb)
        size = int(np.prod(shape))
        dt = self.count_dtype
        if add:
            if out is None or out.shape != shape or out.dtype != dt or not out.flags.c_contiguous:
                raise ValueError(f"joint(add=True) adds into an out of shape {shape} and dtype {np.dtype(dt)}")
            G = out
        else:
            G = (np.empty(size, dt) if out is None or out.size < size or out.dtype != dt else out[:size]).reshape(shape)
        chunk = max(1, ONEHOT_BUDGET // (4 * max(shape[1], shape[2])))
        same_block = cols is self and (genes_I is genes_J or isinstance(genes_I, slice) and
                                       isinstance(genes_J, slice) and genes_I == genes_J)
        levelled = weights is not None and self.level_rows is not None
        if cols is self and bI <= DIRECT_GENES and (weights is None or levelled):
            self._joint_direct(G, genes_I, genes_J, per_class, levelled, add)
            return G
        sparse = self.sparse_codes() if cols is self and self._exact_counts else None
        pair = None if sparse is None else sparse.pair(genes_I, genes_J)
        if levelled:
            runs = self.level_rows if per_class else [[run for part in self.level_rows for run in part]]
            self._joint_by_level(G, runs, genes_I, genes_J, cols, same_block, chunk, sparse, pair, add)
            return G
        for c, class_rows in enumerate(parts):
            if pair is not None and sparse.pays(pair, class_rows.stop - class_rows.start):
                # the same samples as class_rows of src: the rows of by_class (all of them when pooled)
                sparse_rows = self.class_rows[c] if per_class else self.all_rows
                if add and pair.whole:  # added in place (integers: exact in the count dtype)
                    sparse.count(pair, sparse_rows, G[c], value=1.0, first=False)
                elif add:
                    counts = np.empty_like(G[c])
                    self._count_with_sparse(counts, sparse, pair, sparse_rows, genes_I, genes_J, class_rows, src,
                                            chunk)
                    G[c] += counts
                else:
                    self._count_with_sparse(G[c], sparse, pair, sparse_rows, genes_I, genes_J, class_rows, src,
                                            chunk)
                continue
            first = not add
            for rows in _chunks(class_rows, chunk):
                A = self.onehot(genes_I, rows, src)
                B = A if same_block else cols.onehot(genes_J, rows, src_cols)
                if weights is not None:  # weighted counts sum_s w_s [x_si = a][x_sj = b], in float64
                    B = B * weights[rows][:, None]
                if first:
                    np.matmul(A.T, B, out=G[c])
                    first = False
                elif weights is None:
                    _add_product(G[c], A, B)
                else:  # float64 weighted counts: summed as numpy does (GEMM's beta = 1 would round differently)
                    G[c] += A.T @ B
            if first and not add:  # empty class
                G[c] = 0.0
        return G

    def _joint_direct(self, G, genes_I, genes_J, per_class, levelled, add):
        """:meth:`joint` for a block of at most :data:`DIRECT_GENES` genes I (a greedy step's row): the counts taken
        straight from the codes (:func:`_direct_counts`, runs of samples on the worker pool, each into its own integer
        table, then summed) instead of the GEMM of indicators of every gene of J, whose output is only ``nb |I|`` rows
        (50,000 cells x 2,000 genes, one row: 0.1 s against 1.5 s).  Exact integer counts, in the GEMM's bin-major
        layout, so the same bits; class weights of few values counted run by run and scaled and added in float64 as
        :meth:`_joint_by_level` does."""
        from .information import n_workers, run_ranges, split_ranges

        if levelled:
            by_class = self.level_rows if per_class else [[run for part in self.level_rows for run in part]]
            runs, src = [rows for part in by_class for rows, _ in part], self.by_class
        else:
            runs, src = (self.class_rows, self.by_class) if per_class else ([self.all_rows], self.codes)
        I, J = _gene_index(genes_I), _gene_index(genes_J)
        starts = np.array([rows.start for rows in runs], dtype=np.int64)
        stops = np.array([rows.stop for rows in runs], dtype=np.int64)
        table = (len(runs), self.nb * I.size, self.nb * J.size)
        dt = np.int32 if self.n_samples < 2**31 else np.int64
        nbytes = int(np.prod(table)) * np.dtype(dt).itemsize
        # parallel only for enough work (a microarray's row is counted inline), and tables within DIRECT_BYTES
        parts = min(n_workers(), self.n_samples * I.size * J.size // DIRECT_WORK, DIRECT_BYTES // max(1, nbytes))
        ranges = split_ranges(self.n_samples, max(1, parts))
        tables = np.zeros((len(ranges),) + table, dtype=dt)
        run_ranges(lambda p, lo, hi: _direct_counts(src, I, J, self.nb, starts, stops, tables[p], lo, hi), ranges)
        counts = tables[0] if len(ranges) == 1 else tables.sum(axis=0, dtype=dt)
        if not levelled:
            if add:
                G += counts
            else:
                G[...] = counts
            return
        k = 0
        for c, part in enumerate(by_class):
            if not part and not add:
                G[c] = 0.0
            for r, (_, value) in enumerate(part):
                _add_scaled(G[c], counts[k], value, r == 0 and not add)  # in float64, as _joint_by_level
                k += 1

    def _count_with_sparse(self, out, sparse, pair, sparse_rows, genes_I, genes_J, rows, src, chunk):
        """``out`` (bin-major, as :meth:`joint`) = the exact joint counts of the samples ``rows`` of ``src``
        (``sparse_rows`` of :attr:`by_class` are the same samples): the genes of the block pair that
        :class:`SparseCodes` holds counted from it (:meth:`SparseCodes.count`), every count involving another gene
        of the pair by GEMM -- its rows against all of J, then the held genes of I against the others of J.  Each part
        is exact integers, so ``out`` is the same bits as one GEMM of the whole pair."""
        held_I, held_J = pair.held_I, pair.held_J
        if pair.whole:
            sparse.count(pair, sparse_rows, out)
            return
        nb, bI, bJ = self.nb, out.shape[0] // self.nb, out.shape[1] // self.nb
        gI, gJ = _gene_index(genes_I), _gene_index(genes_J)
        other_I = np.setdiff1d(np.arange(bI), held_I, assume_unique=True)
        other_J = np.setdiff1d(np.arange(bJ), held_J, assume_unique=True)
        rows_held, cols_held = _bin_major(held_I, bI, nb), _bin_major(held_J, bJ, nb)
        out[np.ix_(rows_held, cols_held)] = sparse.count(
            pair, sparse_rows, np.empty((rows_held.size, cols_held.size), dtype=out.dtype))
        if other_I.size:
            out[_bin_major(other_I, bI, nb)] = self._gemm(gI[other_I], gJ, rows, src, chunk, out.dtype)
        if other_J.size:
            out[np.ix_(rows_held, _bin_major(other_J, bJ, nb))] = self._gemm(gI[held_I], gJ[other_J], rows, src,
                                                                             chunk, out.dtype)

    def _gemm(self, genes_I, genes_J, rows, src, chunk, dtype):
        """The joint counts of the samples ``rows`` of ``src`` for two index arrays of genes, GEMMs over chunks."""
        counts = None
        for sub in _chunks(rows, chunk):
            A, B = self.onehot(genes_I, sub, src, dtype), self.onehot(genes_J, sub, src, dtype)
            if counts is None:
                counts = A.T @ B
            else:
                _add_product(counts, A, B)
        return np.zeros((self.nb * genes_I.size, self.nb * genes_J.size), dtype) if counts is None else counts

    def _joint_by_level(self, G, runs, genes_I, genes_J, cols, same_block, chunk, sparse=None, pair=None, add=False):
        """Weighted counts of weights with few values: ``G[c] = sum_v v x`` the count of class c's samples of weight
        v, each an exact float32 GEMM of 0/1 indicators (float64 for a run of 2**24 samples or more), scaled and
        added in float64 -- 3.4x faster than the float64 GEMM of weighted indicators (20,000 cells, 1,000
        genes, 9 classes).  With ``sparse`` (:class:`SparseCodes`, ``pair`` its block pair) a run is counted from
        it where that pays: the same exact counts, scaled and added the same way.  With ``add``, every run is added
        to ``G`` as it stands."""
        acc = None
        for c, part in enumerate(runs):
            if not part and not add:
                G[c] = 0.0
            for r, (rows, value) in enumerate(part):
                first = r == 0 and not add
                dt = np.float32 if rows.stop - rows.start < 2**24 else np.float64
                if pair is not None and sparse.pays(pair, rows.stop - rows.start):
                    if pair.whole:
                        sparse.count(pair, rows, G[c], value=value, first=first)
                    else:
                        counts = np.empty(G[c].shape, dtype=dt)
                        self._count_with_sparse(counts, sparse, pair, rows, genes_I, genes_J, rows, self.by_class,
                                                chunk)
                        _add_scaled(G[c], counts, value, first)
                    continue
                counts = None
                for sub in _chunks(rows, chunk):
                    A = self.onehot(genes_I, sub, self.by_class, dt)
                    B = A if same_block else cols.onehot(genes_J, sub, cols.by_class, dt)
                    if counts is None:
                        if acc is None or acc.shape != (A.shape[1], B.shape[1]) or acc.dtype != dt:
                            acc = np.empty((A.shape[1], B.shape[1]), dtype=dt)
                        counts = np.matmul(A.T, B, out=acc)
                    else:
                        _add_product(counts, A, B)
                _add_scaled(G[c], counts, value, first)  # in float64: value x counts rounded once


class _BlockPair(tuple):
    """A block pair of :meth:`SparseCodes.pair`: the tuple ``(I, J)`` of its held genes (``(lo, hi, pos, idx)``
    each), with ``held_I``/``held_J`` their positions in the blocks and ``whole`` when they are all of them."""

    def __new__(cls, I, J, held_I, held_J, whole):
        self = super().__new__(cls, (I, J))
        self.held_I, self.held_J, self.whole = held_I, held_J, whole
        return self


def _gene_index(genes):
    """A block's genes (a slice or an index array) as an int64 index array."""
    if isinstance(genes, slice):
        return np.arange(genes.start, genes.stop, dtype=np.int64)
    return np.asarray(genes, dtype=np.int64).ravel()


def _bin_major(positions, n_block, nb):
    """The rows (columns) of a block's bin-major counts that hold the genes at ``positions``: ``a * n_block + p``
    for every bin ``a`` and position ``p``, in the order :meth:`NumpyCounting.onehot` gives those genes."""
    return (np.arange(nb)[:, None] * n_block + np.asarray(positions)[None, :]).ravel()


@njit(nogil=True, cache=True)
def _direct_counts(codes, I, J, nb, starts, stops, out, lo, hi):
    """``out[k, a * |I| + i, b * |J| + j] += 1`` for every sample s of rows ``lo..hi`` in run k (``starts[k]..
    stops[k]``) with code a < ``nb`` of gene ``I[i]`` and b < ``nb`` of gene ``J[j]``: the joint counts of
    :meth:`NumpyCounting._joint_direct`, bin-major as :meth:`NumpyCounting.onehot` lays them out."""
    n_I = I.size
    n_J = J.size
    for k in range(starts.size):
        T = out[k]
        for s in range(max(lo, starts[k]), min(hi, stops[k])):
            row = codes[s]
            for i in range(n_I):
                a = row[I[i]]
                if a >= nb:
                    continue
                t = T[a * n_I + i]
                for j in range(n_J):
                    b = row[J[j]]
                    if b < nb:
                        t[b * n_J + j] += 1


@njit(nogil=True, cache=True)
def _take_columns(codes, r0, genes, out):
    """``out[s, p] = codes[r0 + s, genes[p]]``."""
    for s in range(out.shape[0]):
        for p in range(genes.size):
            out[s, p] = codes[r0 + s, genes[p]]


@njit(nogil=True, cache=True)
def _take_rows(codes, order, out, lo, hi):
    """``out[r] = codes[order[r]]`` for the rows ``lo..hi``."""
    for r in range(lo, hi):
        out[r] = codes[order[r]]


def level_counts(codes, n_bins):
    """``(genes, n_bins)``: how many rows of ``codes`` hold each level of every gene (float64), genes in runs on the
    worker pool (:func:`_labelled_bin_counts` with one label)."""
    from .information import run_ranges, split_ranges

    out = np.zeros((1, codes.shape[1], n_bins))
    labels = np.zeros(codes.shape[0], dtype=np.int64)
    run_ranges(lambda _, lo, hi: _labelled_bin_counts(codes, labels, n_bins, out, lo, hi), split_ranges(codes.shape[1]))
    return out[0]


@njit(nogil=True, cache=True)
def _labelled_bin_counts(codes, labels, nb, out, lo, hi):
    """``out[labels[s], g, a] += 1`` for every sample s whose code ``a`` of gene g is below ``nb``, genes ``lo..hi``."""
    for s in range(codes.shape[0]):
        row = codes[s]
        k = labels[s]
        for g in range(lo, hi):
            a = row[g]
            if a < nb:
                out[k, g, a] += 1.0


@njit(nogil=True, cache=True)
def _add_scaled(G, counts, value, first):
    """``G += value * counts`` (``G = value * counts`` when ``first``) in float64, in one pass without a temporary
    (the counts' block was otherwise converted to float64 and scaled in two more passes: 15% of the MI matrix
    at 72 samples x 7,129 genes)."""
    for i in range(G.shape[0]):
        for j in range(G.shape[1]):
            x = value * np.float64(counts[i, j])
            G[i, j] = x if first else G[i, j] + x


class SparseCodes:
    """Codes without each gene's most frequent level, row by row: the sparse form of :class:`NumpyCounting`.

    ``implicit[g]`` is gene g's most frequent level (the lowest on ties); ``density[g]`` is the share of gene g's
    samples not at it (*kept*).  ``order`` lists the genes by increasing density (``rank`` is its inverse), and the
    first ``n_held`` of them -- those sparse enough for counting their pairs from this form to pay
    (:meth:`held_genes`) -- are *held*: their kept entries of every row are in CSR form, ``gene`` (int32: the gene's
    rank, increasing within a row) and ``level`` (uint8, the *compressed* level: ``a`` below the implicit level,
    ``a - 1`` above it).  A block pair counts its held genes from it and every pair involving another gene by GEMM
    (:meth:`NumpyCounting._count_with_sparse`); the information matrix lays its blocks out in ``order``
    (:func:`bioqpfs._kernels.information.pairwise_information`), so that a block pair is held whole or not at all.
    Built from the codes in three passes over the rows (each gene's level counts, then each row's count of
    entries, then the entries), on the worker pool.
    """

    def __init__(self, indptr, gene, level, implicit, density, n_bins, order=None, n_held=None):
        self.indptr, self.gene, self.level = indptr, gene, level
        self.implicit, self.density, self.n_bins = implicit, density, int(n_bins)
        m = implicit.size
        self.order = np.arange(m) if order is None else np.asarray(order, dtype=np.int64)
        self.rank = np.empty(m, dtype=np.int64)
        self.rank[self.order] = np.arange(m)
        self.n_held = m if n_held is None else int(n_held)
        self.held = self.rank < self.n_held
        self.in_gene_order = bool(np.array_equal(self.order, np.arange(m)))

    @staticmethod
    def held_genes(density, n_bins, min_saving=None):
        """``(order, n_held)``: the order of the genes for the blocks of the information matrix and how many of the
        first are *held* (their pairs counted from the sparse form wherever that pays); ``n_held`` 0: build no form.

        A pair of genes with kept densities ``d_i, d_j`` costs about ``d_i d_j x update`` per sample from the form
        against ``(n_bins - 1)^2`` multiply-adds by GEMM (:data:`SPARSE_COST`).  Codes sparse enough on average
        (``mean(d)^2 x update < (n_bins - 1)^2``) hold every gene in gene order: an average block pair pays.
        Otherwise (single-cell data with genes from nearly never to nearly always detected: 21% non-zero) the genes
        go by increasing density and the ``k`` sparsest are held, ``k`` maximising the saving over their pairs,
        ``(n_bins - 1)^2 k^2 - update (d_1 + ... + d_k)^2``, if it is at least ``min_saving`` (default
        :data:`MIN_SAVING`) of the GEMM's work; blocks of dense genes are then counted by GEMM whole instead of
        every block mixing both."""
        m = density.size
        update, nb2 = SPARSE_COST["update"], (n_bins - 1) ** 2
        if m == 0 or not np.isfinite(update):  # the form never pays (benchmarks: every pair by GEMM)
            return np.arange(m), 0
        if float(np.mean(density)) ** 2 * update < nb2:
            return np.arange(m), m
        order = np.argsort(density, kind="stable")
        k = np.arange(1, m + 1, dtype=np.float64)
        saving = nb2 * k * k - update * np.cumsum(density[order]) ** 2
        best = int(np.argmax(saving))
        if saving[best] < (MIN_SAVING if min_saving is None else min_saving) * nb2 * m * m:
            return order, 0
        return order, best + 1

    @classmethod
    def build(cls, codes, n_bins):
        """The sparse form of ``codes`` (samples x genes, levels ``0..n_bins-1``), or ``None`` when it would not pay
        (:meth:`held_genes` holds no gene: microarrays; single-cell codes whose genes are nearly all dense), or would
        not fit in a quarter of the available memory (5 bytes per held entry): the GEMM then counts everything.  One
        pass over the codes decides; beyond 40,000 samples, codes clearly too dense (half the least saving) are
        already refused on :data:`DECIDE_ROWS` evenly spaced rows (0.3 s of a pass at 100,000 x 2,000)."""
        from .._validation import available_memory
        from .information import run_ranges, split_ranges

        n, m = codes.shape
        if n == 0 or m == 0 or n_bins < 2 or n_bins > 255:
            return None
        if n > 4 * DECIDE_ROWS:  # clearly dense on evenly spaced rows: no pass over all of them
            rows = codes[:: n // DECIDE_ROWS]
            counts = level_counts(rows, n_bins)
            if cls.held_genes(1.0 - counts.max(axis=1) / rows.shape[0], n_bins, MIN_SAVING / 2)[1] == 0:
                return None
        counts = level_counts(codes, n_bins)
        implicit = np.argmax(counts, axis=1).astype(np.uint8)
        kept = n - counts.max(axis=1)
        order, n_held = cls.held_genes(kept / n, n_bins)
        n_kept = int(kept[order[:n_held]].sum())
        if n_held == 0 or 5 * n_kept + 8 * n > available_memory()[0] // 4:
            return None
        per_row = np.empty(n, dtype=np.int64)
        row_ranges = split_ranges(n)
        # a held gene's implicit level, 255 for any other (never a level: n_bins <= 255): one comparison per entry
        skip = np.full(m, 255, dtype=np.uint8)
        skip[order[:n_held]] = implicit[order[:n_held]]
        run_ranges(lambda _, lo, hi: _count_kept(codes, skip, per_row, lo, hi), row_ranges)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(per_row, out=indptr[1:])
        gene = np.empty(n_kept, dtype=np.int32)
        level = np.empty(n_kept, dtype=np.uint8)
        in_gene_order = bool(np.array_equal(order, np.arange(m)))
        run_ranges(lambda _, lo, hi: _fill_kept(codes, skip, order[:n_held], in_gene_order, indptr, gene, level, lo,
                                                hi), row_ranges)
        return cls(indptr, gene, level, implicit, kept / n, n_bins, order, n_held)

    def _genes(self, idx):
        """``(lo, hi, pos, idx)`` of held genes ``idx`` (an index array): the range of ranks spanned, the position
        in ``idx`` of each rank of the range (-1: not in it) and ``idx``."""
        if idx.size == 0:
            return 0, 0, np.empty(0, dtype=np.int32), idx
        ranks = self.rank[idx]
        lo, hi = int(ranks.min()), int(ranks.max()) + 1
        pos = np.full(hi - lo, -1, dtype=np.int32)
        pos[ranks - lo] = np.arange(idx.size, dtype=np.int32)
        return lo, hi, pos, idx

    def pair(self, genes_I, genes_J):
        """The block pair ``(I, J)`` prepared for :meth:`count` and :meth:`pays` (:class:`_BlockPair`: its held
        genes); ``None`` when either block holds none, or repeats a gene (then counted by GEMM)."""
        I, J = _gene_index(genes_I), _gene_index(genes_J)
        if np.unique(I).size != I.size or np.unique(J).size != J.size:
            return None
        held_I, held_J = np.flatnonzero(self.held[I]), np.flatnonzero(self.held[J])
        if held_I.size == 0 or held_J.size == 0:
            return None
        return _BlockPair(self._genes(I[held_I]), self._genes(J[held_J]), held_I, held_J,
                          held_I.size == I.size and held_J.size == J.size)

    def pays(self, pair, n_rows):
        """Whether counting the held genes of ``pair`` on a run of ``n_rows`` samples from this form costs less than
        their GEMM, by :data:`SPARSE_COST`: ``rows x (D_I D_J x update + row) + |I| |J| x restore`` against ``rows x
        (L-1)^2 |I| |J|`` multiply-adds, with ``D`` the expected kept entries of a sample in the block (from the
        genes' densities over all samples).  The restore does not shrink with the run: a small class is counted by
        GEMM."""
        (_, _, _, idx_I), (_, _, _, idx_J) = pair
        n_I, n_J, nb = idx_I.size, idx_J.size, self.n_bins - 1
        dense = float(n_rows) * nb * nb * n_I * n_J
        if dense == 0.0:
            return False
        L = self.n_bins
        restore = SPARSE_COST[f"restore_{L}"] if L in (2, 3) else SPARSE_COST["restore_level"] * L * L
        sparse = float(n_rows) * (self.density[idx_I].sum() * self.density[idx_J].sum() * SPARSE_COST["update"]
                                  + SPARSE_COST["row"]) + n_I * n_J * restore
        return sparse < dense

    def count(self, pair, rows, out, value=None, first=True):
        """``out`` (``(L-1) |I|, (L-1) |J|`` of the held genes of the pair, bin-major as :meth:`NumpyCounting.joint`)
        = their exact joint counts in the samples ``rows`` (a slice of the rows this form was built from); with ``value``, ``out = value x counts``
        (``first``) or ``out += value x counts`` in float64, as :func:`_add_scaled` adds a GEMM's counts."""
        (lo_I, hi_I, pos_I, idx_I), (lo_J, hi_J, pos_J, idx_J) = pair
        n_I, n_J, nb = idx_I.size, idx_J.size, self.n_bins - 1
        n_rows = rows.stop - rows.start
        dt = np.float32 if n_rows < 2**24 else np.float64
        K = np.zeros((nb * n_I, nb * n_J), dtype=dt)
        m_I = np.zeros((nb, n_I), dtype=dt)
        m_J = np.zeros((nb, n_J), dtype=dt)
        _scatter_counts(self.indptr, self.gene, self.level, rows.start, rows.stop, lo_I, hi_I, pos_I, lo_J, hi_J,
                        pos_J, K, m_I, m_J, np.empty(max(1, n_J), dtype=np.int64))
        counts = (K, m_I, m_J, float(n_rows), self.implicit[idx_I], self.implicit[idx_J])
        scale = (np.nan if value is None else float(value), bool(first))
        if self.n_bins == 2:
            _restore_2(*counts, out, *scale)
        elif self.n_bins == 3:
            _restore_3(*counts, out, *scale)
        else:
            _restore_implicit(*counts, self.n_bins, out, *scale)
        return out


@njit(nogil=True, cache=True)
def _count_kept(codes, skip, out, lo, hi):
    """``out[s]``: the entries of row s of ``codes`` that are neither their gene's ``skip`` level (a held gene's
    implicit level) nor those of a gene not held (``skip`` 255: all of them), rows ``lo..hi``."""
    for s in range(lo, hi):
        row = codes[s]
        n = 0
        for g in range(row.size):
            n += (row[g] != skip[g]) & (skip[g] != 255)
        out[s] = n


@njit(nogil=True, cache=True)
def _fill_kept(codes, skip, held, in_gene_order, indptr, gene, level, lo, hi):
    """The CSR entries (rank, compressed level) of the held genes in rows ``lo..hi`` of ``codes`` (see
    :class:`SparseCodes`; ``skip`` as :func:`_count_kept`, ``held`` the held genes in rank order): genes visited in
    gene order when that is their rank order (a sequential pass, 1.7x faster), else in rank order."""
    for s in range(lo, hi):
        k = indptr[s]
        row = codes[s]
        for t in range(row.size if in_gene_order else held.size):
            g = t if in_gene_order else held[t]
            a = row[g]
            p = skip[g]
            if a != p and p != 255:
                gene[k] = t
                level[k] = a - 1 if a > p else a
                k += 1


@njit(nogil=True, cache=True, inline="always")
def _first_at_least(gene, lo, hi, value):
    """The first position in ``lo..hi`` whose gene is at least ``value`` (``hi`` if none): binary search."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if gene[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(nogil=True, cache=True)
def _scatter_counts(indptr, gene, level, r0, r1, lo_I, hi_I, pos_I, lo_J, hi_J, pos_J, K, m_I, m_J, cols):
    """Joint counts of the kept entries of rows ``r0..r1``: ``K[a * |I| + i, b * |J| + j] += 1`` for every row holding
    gene ``I[i]`` at compressed level a and gene ``J[j]`` at b, and the margins ``m_I[a, i]``, ``m_J[b, j]``.  A row's
    entries in a gene range are found by binary search (genes increase within a row); ``pos`` maps a gene of the
    range to its position in the block (-1: not in it)."""
    n_I = m_I.shape[1]
    n_J = m_J.shape[1]
    for s in range(r0, r1):
        lo = indptr[s]
        hi = indptr[s + 1]
        if lo == hi:
            continue
        f0 = _first_at_least(gene, lo, hi, lo_J)
        f1 = _first_at_least(gene, f0, hi, hi_J)
        k = 0
        for f in range(f0, f1):
            p = pos_J[gene[f] - lo_J]
            if p >= 0:
                b = level[f]
                cols[k] = b * n_J + p
                m_J[b, p] += 1.0
                k += 1
        e0 = _first_at_least(gene, lo, hi, lo_I)
        e1 = _first_at_least(gene, e0, hi, hi_I)
        for e in range(e0, e1):
            p = pos_I[gene[e] - lo_I]
            if p >= 0:
                a = level[e]
                m_I[a, p] += 1.0
                row = K[a * n_I + p]
                for t in range(k):
                    row[cols[t]] += 1.0


@njit(nogil=True, cache=True)
def _restore_implicit(K, m_I, m_J, n_rows, imp_I, imp_J, L, out, value, first):
    """The full joint counts from the kept ones: for genes i, j with implicit levels p, q, ``n_aq = m_a(i) - sum_b
    n_ab`` (b != q), ``n_pb = m_b(j) - sum_a n_ab`` (a != p, b != q) and ``n_pq = rows - sum_a m_a(i) - sum_b n_pb``;
    then the levels ``0..L-2`` of both into ``out`` (bin-major, the last level implicit as in the GEMM).  Every value
    is an integer, so the result equals the GEMM's exactly.  ``value`` not NaN: ``out = value x n`` (``first``) or
    ``out += value x n``, rounded as :func:`_add_scaled` rounds."""
    scaled = not np.isnan(value)
    n_I = imp_I.size
    n_J = imp_J.size
    T = np.empty((L, L))
    for i in range(n_I):
        p = imp_I[i]
        for j in range(n_J):
            q = imp_J[j]
            corner = n_rows
            for a in range(L):
                if a == p:
                    continue
                ac = a - 1 if a > p else a
                margin = np.float64(m_I[ac, i])
                corner -= margin
                for b in range(L):
                    if b == q:
                        continue
                    bc = b - 1 if b > q else b
                    v = np.float64(K[ac * n_I + i, bc * n_J + j])
                    T[a, b] = v
                    margin -= v
                T[a, q] = margin
            for b in range(L):
                if b == q:
                    continue
                bc = b - 1 if b > q else b
                v = np.float64(m_J[bc, j])
                for a in range(L):
                    if a != p:
                        v -= T[a, b]
                T[p, b] = v
                corner -= v
            T[p, q] = corner
            for a in range(L - 1):
                for b in range(L - 1):
                    _put(out, a * n_I + i, b * n_J + j, T[a, b], value, scaled, first)


@njit(nogil=True, cache=True, inline="always")
def _levels_01(q, kept0, kept1, implicit):
    """Levels 0 and 1 of a gene with implicit level ``q`` from its values at its kept levels and its implicit one."""
    v0 = implicit if q == 0 else kept0
    v1 = implicit if q == 1 else (kept0 if q == 0 else kept1)
    return v0, v1


@njit(nogil=True, cache=True, inline="always")
def _put(out, r, c, v, value, scaled, first):
    """``out[r, c] = v``, or scaled by ``value`` and written (``first``) or added in float64 as :func:`_add_scaled`."""
    if not scaled:
        out[r, c] = v
    elif first:
        out[r, c] = value * v
    else:
        out[r, c] = out[r, c] + value * v


@njit(nogil=True, cache=True)
def _restore_3(K, m_I, m_J, n_rows, imp_I, imp_J, out, value, first):
    """:func:`_restore_implicit` for 3 levels, without its loops over levels (45 -> 8 ns per gene pair): the rows
    of gene i's table at its kept levels (k0, k1) and at its implicit level, then levels 0 and 1 of both genes
    picked from them (:func:`_levels_01`)."""
    n_I = imp_I.size
    n_J = imp_J.size
    scaled = not np.isnan(value)
    for i in range(n_I):
        p = imp_I[i]
        mi0 = np.float64(m_I[0, i])
        mi1 = np.float64(m_I[1, i])
        rest_i = n_rows - mi0 - mi1
        for j in range(n_J):
            q = imp_J[j]
            k00 = np.float64(K[i, j])
            k01 = np.float64(K[i, n_J + j])
            k10 = np.float64(K[n_I + i, j])
            k11 = np.float64(K[n_I + i, n_J + j])
            # the 3 x 3 table, rows (k0, k1, implicit) of gene i, columns (k0, k1, implicit) of gene j
            a2 = mi0 - k00 - k01
            b2 = mi1 - k10 - k11
            c0 = np.float64(m_J[0, j]) - k00 - k10
            c1 = np.float64(m_J[1, j]) - k01 - k11
            c2 = rest_i - c0 - c1
            a_0, a_1 = _levels_01(q, k00, k01, a2)  # row k0
            b_0, b_1 = _levels_01(q, k10, k11, b2)  # row k1
            c_0, c_1 = _levels_01(q, c0, c1, c2)  # row implicit
            u0, u1 = _levels_01(p, a_0, b_0, c_0)  # levels 0, 1 of gene i at level 0 of gene j
            w0, w1 = _levels_01(p, a_1, b_1, c_1)  # ... at level 1 of gene j
            _put(out, i, j, u0, value, scaled, first)
            _put(out, i, n_J + j, w0, value, scaled, first)
            _put(out, n_I + i, j, u1, value, scaled, first)
            _put(out, n_I + i, n_J + j, w1, value, scaled, first)


@njit(nogil=True, cache=True)
def _restore_2(K, m_I, m_J, n_rows, imp_I, imp_J, out, value, first):
    """:func:`_restore_implicit` for 2 levels (``out`` holds level 0 of both genes): from the one kept count ``k``,
    ``n_00`` is ``k``, ``m(i) - k``, ``m(j) - k`` or ``rows - m(i) - m(j) + k`` as level 0 is kept or implicit in
    each gene."""
    n_I = imp_I.size
    n_J = imp_J.size
    scaled = not np.isnan(value)
    for i in range(n_I):
        kept_i = imp_I[i] == 1  # level 0 of gene i is its kept level
        mi = np.float64(m_I[0, i])
        for j in range(n_J):
            k = np.float64(K[i, j])
            mj = np.float64(m_J[0, j])
            if kept_i:
                v = k if imp_J[j] == 1 else mi - k
            else:
                v = mj - k if imp_J[j] == 1 else n_rows - mi - mj + k
            _put(out, i, j, v, value, scaled, first)


skip_failed_cache_writes(globals())  # numba's cache is an optimisation: a full disk must not fail a selection
