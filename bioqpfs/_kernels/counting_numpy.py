"""The numpy counting backend (the default): one-hot float32 GEMMs over chunks of samples.

Implements :class:`bioqpfs._kernels.counting.CountingBackend` (see that module for the contract) for
codes in a numpy array.  A joint block is ``sum over sample chunks of O_I^T (W O_J)``: the chunk's
one-hot indicators of genes I and J (``nb`` materialised bins each, bin-major columns), exact in
float32 while the number of samples is below 2**24.  With sample weights of few distinct values (class weights:
one per class; :func:`~bioqpfs._kernels.counting.weight_level_runs`) each run of equal weight is counted exactly
the same way and scaled once in float64; with other weights the J indicators are scaled by the weights and the
product runs in float64.  The input keeps its sample order; for per-class counts
this backend reads a class-sorted copy of the codes (:attr:`NumpyCounting.by_class`, classes in input
order within; none when the classes are already contiguous), so that each class is one run of rows.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .counting import CountingBackend, class_runs, weight_level_runs

__all__ = ["NumpyCounting", "ONEHOT_BUDGET"]

#: bytes of one chunk's one-hot indicator block
ONEHOT_BUDGET = 16 * 2**20


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
        self.by_class = self.codes if order is None else self.codes[order]
        self.class_weights = None if weights is None else (weights if order is None else weights[order])
        self.n_classes = len(self.class_rows)

    def codes_of(self, genes):
        return self.codes[:, genes]

    def _weights_of(self, per_class):
        if self.weights is None:
            return None
        return self.class_weights if per_class and self.groups is not None else self.weights

    def margins(self):
        """Counts of every class in every materialised bin, ``(C, genes, nb)`` float64.  Unweighted: one pass over
        each class's rows per run of genes on the worker pool (integer counts, exact; one numpy pass per bin read
        the codes ``nb`` times: 1.2 s of the 32 fine bins of 20,000 cells x 2,000 genes).  Weights of few values
        (class weights): each run of equal weight counted so, then ``value x count`` added in float64, as the joint
        counts are (:meth:`_joint_by_level`; the GEMV per bin over a float64 copy of the indicators it replaced took
        1.5 s of the default recipe's 9.6 s at 40,000 cells x 2,000 genes on 2 cores).  Other weights: a GEMV per
        bin."""
        from .information import run_ranges, split_ranges

        out = np.empty((self.n_classes, self.n_genes, self.nb), dtype=np.float64)

        def count(rows, counts):
            block = self.by_class[rows]
            run_ranges(lambda _, lo, hi: _bin_counts(block, self.nb, counts, lo, hi), split_ranges(self.n_genes))

        w = self.class_weights  # the weights in the order of by_class
        if w is not None and self.level_rows is not None:
            counts = np.empty((self.n_genes, self.nb), dtype=np.float64)
            for c, part in enumerate(self.level_rows):
                out[c] = 0.0
                for rows, value in part:
                    count(rows, counts)
                    out[c] += value * counts
            return out
        for c, rows in enumerate(self.class_rows):
            if w is None:
                count(rows, out[c])
                continue
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
        sub = codes[rows, genes] if isinstance(genes, slice) else codes[rows][:, genes]
        out = np.empty((sub.shape[0], self.nb * sub.shape[1]), dtype=self.count_dtype if dtype is None else dtype)
        g = sub.shape[1]
        for a in range(self.nb):
            np.equal(sub, a, out=out[:, a * g:(a + 1) * g], casting="unsafe")
        return out

    def joint(self, genes_I, genes_J, *, per_class, other=None, out=None):
        cols = self if other is None else other
        bI = genes_I.stop - genes_I.start if isinstance(genes_I, slice) else len(genes_I)
        bJ = genes_J.stop - genes_J.start if isinstance(genes_J, slice) else len(genes_J)
        parts = self.class_rows if per_class else [self.all_rows]
        src, src_cols = (self.by_class, cols.by_class) if per_class else (self.codes, cols.codes)
        weights = self._weights_of(per_class)
        shape = (len(parts), bI * self.nb, bJ * cols.nb)
        size = int(np.prod(shape))
        dt = self.count_dtype
        G = (np.empty(size, dt) if out is None or out.size < size or out.dtype != dt else out[:size]).reshape(shape)
        chunk = max(1, ONEHOT_BUDGET // (4 * max(shape[1], shape[2])))
        same_block = cols is self and isinstance(genes_I, slice) and isinstance(genes_J, slice) and \
            genes_I == genes_J
        if weights is not None and self.level_rows is not None:
            runs = self.level_rows if per_class else [[run for part in self.level_rows for run in part]]
            self._joint_by_level(G, runs, genes_I, genes_J, cols, same_block, chunk)
            return G
        for c, class_rows in enumerate(parts):
            first = True
            for rows in _chunks(class_rows, chunk):
                A = self.onehot(genes_I, rows, src)
                B = A if same_block else cols.onehot(genes_J, rows, src_cols)
                if weights is not None:  # weighted counts sum_s w_s [x_si = a][x_sj = b], in float64
                    B = B * weights[rows][:, None]
                if first:
                    np.matmul(A.T, B, out=G[c])
                    first = False
                else:
                    G[c] += A.T @ B
            if first:  # empty class
                G[c] = 0.0
        return G

    def _joint_by_level(self, G, runs, genes_I, genes_J, cols, same_block, chunk):
        """Weighted counts of weights with few values: ``G[c] = sum_v v x`` the count of class c's samples of weight
        v, each an exact float32 GEMM of 0/1 indicators (float64 for a run of 2**24 samples or more), scaled and
        added in float64 -- 3.4x faster than the float64 GEMM of weighted indicators (20,000 cells, 1,000
        genes, 9 classes)."""
        acc = None
        for c, part in enumerate(runs):
            if not part:
                G[c] = 0.0
            for r, (rows, value) in enumerate(part):
                dt = np.float32 if rows.stop - rows.start < 2**24 else np.float64
                counts = None
                for sub in _chunks(rows, chunk):
                    A = self.onehot(genes_I, sub, self.by_class, dt)
                    B = A if same_block else cols.onehot(genes_J, sub, cols.by_class, dt)
                    if counts is None:
                        if acc is None or acc.shape != (A.shape[1], B.shape[1]) or acc.dtype != dt:
                            acc = np.empty((A.shape[1], B.shape[1]), dtype=dt)
                        counts = np.matmul(A.T, B, out=acc)
                    else:
                        counts += A.T @ B
                _add_scaled(G[c], counts, value, r == 0)  # in float64: value x counts rounded once


@njit(nogil=True, cache=True)
def _bin_counts(block, nb, out, lo, hi):
    """``out[g, a]`` = how many rows of ``block`` have code ``a < nb`` for gene g, genes ``lo..hi``."""
    for g in range(lo, hi):
        for a in range(nb):
            out[g, a] = 0.0
    for s in range(block.shape[0]):
        row = block[s]
        for g in range(lo, hi):
            a = row[g]
            if a < nb:
                out[g, a] += 1.0


@njit(nogil=True, cache=True)
def _add_scaled(G, counts, value, first):
    """``G += value * counts`` (``G = value * counts`` when ``first``) in float64, in one pass without a temporary
    (the counts' block was otherwise converted to float64 and scaled in two more passes: 15% of the MI matrix
    at 72 samples x 7,129 genes)."""
    for i in range(G.shape[0]):
        for j in range(G.shape[1]):
            x = value * np.float64(counts[i, j])
            G[i, j] = x if first else G[i, j] + x
