"""Entropies, mutual information and conditional MI matrices from integer codes, by blocked GEMM.

Counting is a matrix product.  For a block of genes I with one-hot indicator matrix
``O_I`` (samples x genes*bins, float32) the joint counts of every pair of genes are
``O_I.T @ O_J``: exact in float32 while the number of samples is below 2**24.  Only the first
``k-1`` bins of each gene are materialised; the counts involving the last bin follow from the
marginals (``n_{a,last} = n_a - sum_b n_ab``...), which cuts the GEMM work by ``(k-1)^2/k^2``
(4/9 for 3 bins).  A fused numba pass then turns each block of counts into entries of the
output with a ``n log n`` lookup table, writing both triangles of symmetric outputs so only
block pairs ``J >= I`` are computed.

Scheduling: the block pairs are tasks on a pool of worker threads (``n_workers()``: the face's
``n_jobs``, ``scanpy.settings.n_jobs`` or numba's thread count, see :mod:`bioqpfs._threads`).  Each worker runs the GEMM of its pair with one BLAS thread, then the fused pass
and the mirrored write while the ~4 MB of counts are still in its cache.  This replaced
multithreaded BLAS on large blocks followed by a numba-parallel pass: the two thread pools
spin-waited against each other on the same cores (per block pair, GEMM 14 -> 20 ms and the pass
8 -> 17 ms when interleaved, 2 cores), and the 48 MB count blocks went through main memory.

With ``phi(n) = n ln n`` and ``T_ij = sum_ab phi(n_ab)``, ``P_i = sum_a phi(n_a)``:

* ``H(X_i) = ln N - P_i / N`` and ``H(X_i, X_j) = ln N - T_ij / N``;
* ``I(X_i; X_j) = H(X_i) + H(X_j) - H(X_i, X_j) = ln N + (T_ij - P_i - P_j) / N``;
* with class-wise counts ``n_abc`` and ``Tc_ij = sum_abc phi(n_abc)``:
  ``H(C | X_i, X_j) = (T_ij - Tc_ij) / N``, so ``I(X_i; C | X_j) = H(C | X_j) - H(C | X_i, X_j)``
  (SPEC_CMI paper eq. 15), and ``I(X_i; X_j | C) = H(X_i|C) + H(X_j|C) + H(C) - ln N + Tc_ij / N``.

Counts are sufficient statistics: they add over chunks of samples, and every function here
accumulates them chunk by chunk, so the same code runs on sample-chunked (e.g. Dask) data.
Results are in nats inside the kernel and divided by ``ln(base)`` on output.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed, wait

import numpy as np
from numba import njit

from .. import _progress, _threads
from .._validation import check_base

__all__ = ["CodeTable", "pairwise_information", "entropies", "class_conditional_entropies", "class_sample_weights",
           "class_relevance", "mi_of_joint_counts", "CLASS_WEIGHTS"]

#: values of ``class_weight`` in every information measure and MI-based selector
CLASS_WEIGHTS = (None, "balanced")


def class_sample_weights(groups, class_weight):
    """Per-sample count weights for ``class_weight``: None (every sample counts once) or ``"balanced"``.

    ``"balanced"``: ``w_s = N / (C n_c)`` for a sample of class c (scikit-learn's ``class_weight="balanced"``
    rule), so every class carries the same total weight N / C and the weights sum to N.  With these
    weights the class prior in every (conditional) entropy is uniform: I(X; C) weighs a type of 8 cells
    as much as one of 240, as balanced accuracy does.
    """
    if class_weight is None:
        return None
    if not isinstance(class_weight, str) or class_weight != "balanced":
        raise ValueError(f"class_weight must be None or 'balanced', got {class_weight!r}")
    groups = np.asarray(groups, dtype=np.int64)
    counts = np.bincount(groups)
    present = np.count_nonzero(counts)
    return groups.size / (present * counts[groups].astype(np.float64))

_DUMMY = np.empty((1, 1))
_GEMM_BUDGET = 4 * 2**20  # bytes of counts (all classes) per worker and block pair: stays in cache
_ONEHOT_BUDGET = 16 * 2**20  # bytes for one one-hot chunk of samples


class CodeTable:
    """Integer codes (samples x genes) prepared for counting.

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_samples, n_genes), values ``0..n_levels[g]-1``.
    groups : ndarray of int, optional
        Class codes ``0..C-1`` per sample; when given, counts are also kept per class.
    weights : ndarray of float, optional
        Non-negative weight of every sample (e.g. class-balanced: ``N / (C n_c)`` for a sample of class
        c, so every class counts equally).  Every count becomes a weighted count ``sum_s w_s [...]`` --
        one weighted one-hot GEMM -- and every probability ``n_ab / N`` becomes ``n^w_ab / sum_s w_s``;
        the formulas above are unchanged.  Weighted counts are accumulated in float64 and ``phi`` is
        evaluated directly (``x ln x``) instead of from the integer lookup table.
    """

    def __init__(self, codes, n_levels=None, groups=None, weights=None):
        codes = np.asarray(codes)
        if n_levels is None:
            n_levels = codes.max(axis=0).astype(np.int64) + 1 if codes.size else np.ones(codes.shape[1], np.int64)
        self.n_samples, self.n_genes = codes.shape
        self.n_bins = max(2, int(np.max(n_levels)))  # global bin count k
        self.nb = self.n_bins - 1  # materialised bins per gene
        if groups is None:
            self.order = None
            self.class_bounds = np.array([0, self.n_samples])
            self.codes = codes
        else:
            groups = np.asarray(groups)
            self.order = np.argsort(groups, kind="stable")
            sizes = np.bincount(groups)
            self.class_bounds = np.concatenate([[0], np.cumsum(sizes)])
            self.codes = codes[self.order]
        self.n_classes = self.class_bounds.size - 1
        if weights is None:
            self.weights = None
            self.total = float(self.n_samples)
            # float32 holds every integer count exactly below 2**24 samples; beyond, count in float64
            self.count_dtype = np.float32 if self.n_samples < 2**24 else np.float64
            self.class_sizes = np.diff(self.class_bounds).astype(np.float64)
        else:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (self.n_samples,) or not np.isfinite(w).all() or (w < 0).any() or not w.sum() > 0:
                raise ValueError("sample weights must be finite, non-negative, not all zero, one per sample")
            self.weights = w if self.order is None else w[self.order]
            self.total = float(self.weights.sum())
            self.count_dtype = np.float64
            self.class_sizes = np.add.reduceat(self.weights, self.class_bounds[:-1]) if self.n_samples else \
                np.zeros(self.n_classes)
            self.class_sizes[np.diff(self.class_bounds) == 0] = 0.0
        self.phi = _phi_table(self.n_samples)
        # per-class marginal (weighted) counts of every materialised bin: (C, genes, nb)
        self.marginals = np.empty((self.n_classes, self.n_genes, self.nb), dtype=np.float64)
        for c in range(self.n_classes):
            rows = slice(self.class_bounds[c], self.class_bounds[c + 1])
            block = self.codes[rows]
            for a in range(self.nb):
                if self.weights is None:
                    self.marginals[c, :, a] = (block == a).sum(axis=0)
                else:
                    self.marginals[c, :, a] = self.weights[rows] @ (block == a)

    @property
    def weighted(self):
        return self.weights is not None

    def phi_of(self, counts):
        """``phi(n) = n ln n`` of (weighted) counts: the lookup table for integer counts, else directly."""
        counts = np.asarray(counts, dtype=np.float64)
        if self.weights is None:
            return self.phi[np.rint(counts).astype(np.int64)]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(counts > 0, counts * np.log(np.where(counts > 0, counts, 1.0)), 0.0)

    def onehot(self, genes, rows, weighted=False):
        """float32 indicators (len(rows) x nb*len(genes)), bin-major: column ``a*len(genes) + g`` = [code == a].

        ``weighted``: each row multiplied by its sample weight (tables with ``weights``), so that
        ``onehot(I).T @ onehot(J, weighted=True)`` are the weighted joint counts.

        Bin-major columns make every (bin a, bin b) sub-block of the count matrix a contiguous
        gene x gene tile, so the fused pass reads all its operands with unit stride.
        """
        sub = self.codes[rows, genes] if isinstance(genes, slice) else self.codes[rows][:, genes]
        out = np.empty((sub.shape[0], self.nb * sub.shape[1]), dtype=self.count_dtype)
        g = sub.shape[1]
        for a in range(self.nb):
            np.equal(sub, a, out=out[:, a * g:(a + 1) * g], casting="unsafe")
        if weighted and self.weights is not None:
            out *= self.weights[rows][:, None]
        return out

    def phi_marginal(self):
        """P_g = sum_a phi(n_a) over all bins of gene g (pooled over classes), and the same per class."""
        tot = self.marginals.sum(axis=0)
        last = self.total - tot.sum(axis=1)
        pooled = self.phi_of(tot).sum(axis=1) + self.phi_of(last)
        per_class = self.phi_of(self.marginals).sum(axis=2)
        per_class += self.phi_of(self.class_sizes[:, None] - self.marginals.sum(axis=2))
        return pooled, per_class.sum(axis=0)


def _phi_table(n):
    k = np.arange(n + 1, dtype=np.float64)
    out = np.zeros(n + 1)
    out[1:] = k[1:] * np.log(k[1:])
    return out


def entropies(table: CodeTable):
    """H(X_g) in nats for every gene."""
    pooled, _ = table.phi_marginal()
    n = table.total
    return np.log(n) - pooled / n


def class_conditional_entropies(table: CodeTable):
    """(H(X_g | C), H(C | X_g), H(C)) in nats, from the per-class marginals."""
    n = table.total
    pooled, per_class = table.phi_marginal()
    h_x = np.log(n) - pooled / n
    p_c = table.class_sizes / n
    h_c = -np.sum(p_c[p_c > 0] * np.log(p_c[p_c > 0]))
    h_xc = np.log(n) - per_class / n  # H(X, C)
    return h_xc - h_c, h_xc - h_x, h_c


@njit(inline="always")
def _phi_at(phi, x, weighted):
    """phi(x) = x ln x: from the lookup table for an integer count, directly for a weighted count."""
    if weighted:
        return x * np.log(x) if x > 0.0 else 0.0
    return phi[np.int32(x)]


def class_relevance(table: CodeTable, groups=None):
    """I(X_g; C) = H(C) - H(C | X_g) in nats for every gene: the one relevance-by-information function.

    ``table`` grouped by class (its weights included); or ungrouped with the class codes ``groups``, in which
    case its codes are regrouped (same weights).  (QPFS section 2.1, F_i = I(X_i; C); SPEC_CMI eq. 18.)
    """
    if table.n_classes < 2 and groups is not None:
        table = CodeTable(table.codes, None, groups=groups, weights=table.weights)
    _, h_c_given_x, h_c = class_conditional_entropies(table)
    return np.maximum(h_c - h_c_given_x, 0.0)


def mi_of_joint_counts(joint):
    """I(S; X_i) in nats from (weighted) joint counts ``joint[s, i, a]`` of a discrete S and each gene's bins.

    ``sum_{s,a} p(s, a) ln(p(s, a) / (p(s) p(a)))`` per gene i (e.g. S = "class c or not" for the one-vs-rest
    relevance of :func:`bioqpfs.selectors._common.one_vs_rest_relevance`).
    """
    total = joint.sum(axis=(0, 2))[None, :, None]
    p = joint / total
    ps = p.sum(axis=2, keepdims=True)
    pa = p.sum(axis=0, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p / (ps * pa)), 0.0)
    return np.maximum(terms.sum(axis=(0, 2)), 0.0)


@njit(nogil=True, cache=True)
def _fused_block(G, margI, margJ, sizes, phi, nbI, nbJ, need_tc, r_up, c_up, s_t, s_tc,
                 out_up, scratch, write_lo, weighted):
    """Turn class-wise count blocks into output entries (any number of bins).

    G : (C, nbI*bI, nbJ*bJ) counts of the materialised bins, bin-major: row ``a*bI + i`` is bin
    ``a`` of gene ``i`` (see :meth:`CodeTable.onehot`).
    value(i, j) = r_up[i] + c_up[j] + s_t*T_ij + s_tc*Tc_ij  -> out_up[i, j]
    ``weighted``: the counts are weighted (non-integer) sums, phi is computed directly (:func:`_phi_at`).
    s_t*T_ij + s_tc*Tc_ij -> scratch[i, j] when ``write_lo`` (:func:`_write_transposed` then fills
    the mirrored block).
    """
    C = G.shape[0]
    bI = margI.shape[1]
    bJ = margJ.shape[1]
    rs = np.empty((C, nbI))
    cs = np.empty((C, nbJ))
    tot = np.empty((nbI + 1, nbJ + 1))
    for i in range(bI):
        for j in range(bJ):
            T = 0.0
            Tc = 0.0
            for u in range(nbI + 1):
                for v in range(nbJ + 1):
                    tot[u, v] = 0.0
            for c in range(C):
                for a in range(nbI):
                    rs[c, a] = 0.0
                for b in range(nbJ):
                    cs[c, b] = 0.0
                corner = sizes[c]
                for a in range(nbI):
                    row = a * bI + i
                    for b in range(nbJ):
                        g = G[c, row, b * bJ + j]
                        rs[c, a] += g
                        cs[c, b] += g
                        tot[a, b] += g
                        if need_tc:
                            Tc += _phi_at(phi, g, weighted)
                for a in range(nbI):
                    d = margI[c, i, a] - rs[c, a]  # n_{a, last}
                    tot[a, nbJ] += d
                    corner -= margI[c, i, a]
                    if need_tc:
                        Tc += _phi_at(phi, d, weighted)
                for b in range(nbJ):
                    d = margJ[c, j, b] - cs[c, b]  # n_{last, b}
                    tot[nbI, b] += d
                    corner -= margJ[c, j, b]
                    if need_tc:
                        Tc += _phi_at(phi, d, weighted)
                for a in range(nbI):
                    corner += rs[c, a]
                tot[nbI, nbJ] += corner
                if need_tc:
                    Tc += _phi_at(phi, corner, weighted)
            for u in range(nbI + 1):
                for v in range(nbJ + 1):
                    T += _phi_at(phi, tot[u, v] if weighted else tot[u, v] + 0.5, weighted)
            base = s_t * T + s_tc * Tc
            out_up[i, j] = r_up[i] + c_up[j] + base
            if write_lo:
                scratch[i, j] = base


@njit(inline="always")
def _phi_sum_3x3(phi, g00, g01, g10, g11, a0, a1, b0, b1, rest, weighted):
    """sum of phi over the 3 x 3 table whose 4 materialised cells are ``g..``, with row marginals
    ``a0, a1``, column marginals ``b0, b1`` and ``rest = n - a0 - a1`` (the last row's total)."""
    n02 = a0 - g00 - g01
    n12 = a1 - g10 - g11
    n20 = b0 - g00 - g10
    n21 = b1 - g01 - g11
    n22 = rest - b0 - b1 + g00 + g01 + g10 + g11
    return (_phi_at(phi, g00, weighted) + _phi_at(phi, g01, weighted) + _phi_at(phi, g10, weighted)
            + _phi_at(phi, g11, weighted) + _phi_at(phi, n02, weighted) + _phi_at(phi, n12, weighted)
            + _phi_at(phi, n20, weighted) + _phi_at(phi, n21, weighted) + _phi_at(phi, n22, weighted))


@njit(nogil=True, cache=True)
def _fused_block_3bins(G, margI, margJ, sizes, phi, r_up, c_up, s_t, s_tc,
                       out_up, scratch, write_lo, work, pooledI, pooledJ, n_total, weighted):
    """:func:`_fused_block` for 3 bins per gene (2 materialised), the default discretisation.

    The inner loops run over ``j`` with unit stride in every array (bin-major ``G``); the nine
    ``phi`` lookups per cell dominate (measured on one core: 4.7 ns per gene pair with one class,
    22 ns with three; AVX-512 gathers measured no faster than scalar loads here).  Counts stay in
    the count dtype (float32: exact integers below 2**24).  When C > 1, ``work`` (5 x bJ float64) holds the
    pooled counts and Tc, and ``pooledI``/``pooledJ`` (genes x 2) are the pooled marginals.
    """
    C = G.shape[0]
    bI = margI.shape[1]
    bJ = margJ.shape[1]
    for i in range(bI):
        ri = r_up[i]
        if C == 1:
            a0 = margI[0, i, 0]
            a1 = margI[0, i, 1]
            rest = sizes[0] - a0 - a1
            for j in range(bJ):
                g00 = G[0, i, j]
                g01 = G[0, i, bJ + j]
                g10 = G[0, bI + i, j]
                g11 = G[0, bI + i, bJ + j]
                b0 = margJ[0, j, 0]
                b1 = margJ[0, j, 1]
                base = s_t * _phi_sum_3x3(phi, g00, g01, g10, g11, a0, a1, b0, b1, rest, weighted)
                out_up[i, j] = ri + c_up[j] + base
                if write_lo:
                    scratch[i, j] = base
            continue
        # class-wise: Tc accumulates phi of every class count; the pooled table (for T) needs only
        # the 4 pooled materialised counts -- its derived cells follow from the pooled marginals
        need_t = s_t != 0.0
        for k in range(5):
            for j in range(bJ):
                work[k, j] = 0.0
        for c in range(C):
            a0 = margI[c, i, 0]
            a1 = margI[c, i, 1]
            rest = sizes[c] - a0 - a1
            for j in range(bJ):
                g00 = G[c, i, j]
                g01 = G[c, i, bJ + j]
                g10 = G[c, bI + i, j]
                g11 = G[c, bI + i, bJ + j]
                b0 = margJ[c, j, 0]
                b1 = margJ[c, j, 1]
                work[4, j] += _phi_sum_3x3(phi, g00, g01, g10, g11, a0, a1, b0, b1, rest, weighted)
                if need_t:
                    work[0, j] += g00
                    work[1, j] += g01
                    work[2, j] += g10
                    work[3, j] += g11
        if need_t:
            a0 = pooledI[i, 0]
            a1 = pooledI[i, 1]
            rest = n_total - a0 - a1
            for j in range(bJ):
                g00 = work[0, j]
                g01 = work[1, j]
                g10 = work[2, j]
                g11 = work[3, j]
                b0 = pooledJ[j, 0]
                b1 = pooledJ[j, 1]
                T = _phi_sum_3x3(phi, g00, g01, g10, g11, a0, a1, b0, b1, rest, weighted)
                work[4, j] = s_t * T + s_tc * work[4, j]
        else:
            for j in range(bJ):
                work[4, j] = s_tc * work[4, j]
        for j in range(bJ):
            base = work[4, j]
            out_up[i, j] = ri + c_up[j] + base
            if write_lo:
                scratch[i, j] = base


@njit(nogil=True, cache=True)
def _write_transposed(scratch, r_lo, c_lo, out_lo, diagonal_block):
    """out_lo[j, i] = r_lo[j] + c_lo[i] + scratch[i, j], in 32 x 32 tiles that stay in L1.

    In a diagonal block (``out_lo`` is the block itself) only ``j > i`` is written, so the block
    is exactly symmetric in its ``scratch`` part.
    """
    bI, bJ = scratch.shape
    tile = 32
    for j0 in range(0, bJ, tile):
        j1 = min(bJ, j0 + tile)
        for i0 in range(0, bI, tile):
            i1 = min(bI, i0 + tile)
            if diagonal_block and i0 >= j1:
                continue
            for j in range(j0, j1):
                rj = r_lo[j]
                i_stop = min(i1, j) if diagonal_block else i1
                for i in range(i0, i_stop):
                    out_lo[j, i] = rj + c_lo[i] + scratch[i, j]


def _block_size(table_rows: CodeTable, table_cols: CodeTable, n_classes, n_out=None):
    """Genes per block so one worker's block of class-wise counts stays within ``_GEMM_BUDGET``.

    The budget is per worker thread and small (a few MB) so that the fused pass reads the counts
    from cache right after the GEMM wrote them.  ``n_out`` (entries of the output) caps the
    budget at a quarter of the output for tiny problems.
    """
    per = np.dtype(table_rows.count_dtype).itemsize * n_classes * table_rows.nb * table_cols.nb
    budget = _GEMM_BUDGET if n_out is None else min(_GEMM_BUDGET, max(2**18, n_out * 8 // 4))
    b = int(np.sqrt(budget / per))
    return max(16, min(b, 4096))


def _counts(table_rows: CodeTable, genes_I, table_cols: CodeTable, genes_J, C, buf=None):
    """Class-wise joint counts (C, nbI*|I|, nbJ*|J|), bin-major, accumulated over sample chunks.

    ``buf`` is reused between calls (a fresh array per block costs page faults).
    """
    bI = genes_I.stop - genes_I.start if isinstance(genes_I, slice) else len(genes_I)
    bJ = genes_J.stop - genes_J.start if isinstance(genes_J, slice) else len(genes_J)
    shape = (C, bI * table_rows.nb, bJ * table_cols.nb)
    size = int(np.prod(shape))
    dt = table_rows.count_dtype
    G = (np.empty(size, dt) if buf is None or buf.size < size or buf.dtype != dt else buf[:size]).reshape(shape)
    chunk = max(1, _ONEHOT_BUDGET // (4 * max(shape[1], shape[2])))
    # C == 1 pools every sample, also when the table is grouped by class (kind="mi" on a grouped table)
    bounds = table_rows.class_bounds if C > 1 else np.array([0, table_rows.n_samples])
    same_block = table_cols is table_rows and isinstance(genes_I, slice) and genes_I == genes_J
    for c in range(C):
        first = True
        for s in range(bounds[c], bounds[c + 1], chunk):
            rows = slice(s, min(bounds[c + 1], s + chunk))
            A = table_rows.onehot(genes_I, rows)
            B = A if same_block else table_cols.onehot(genes_J, rows)
            if table_rows.weighted:  # weighted counts sum_s w_s [x_si = a][x_sj = b], in float64
                B = B * table_rows.weights[rows][:, None]
            if first:
                np.matmul(A.T, B, out=G[c])
                first = False
            else:
                G[c] += A.T @ B
        if first:  # empty class
            G[c] = 0.0
    return G


def n_workers():
    """Worker threads for the blocked kernels: the count of the calling face (``n_jobs=``), else
    ``scanpy.settings.n_jobs``, else numba's thread count (:mod:`bioqpfs._threads`)."""
    return _threads.current()


_EXECUTOR = None
_EXECUTOR_LOCK = threading.Lock()


def _forget_executor():
    """In a forked child the parent's worker threads do not exist: start a fresh pool on demand."""
    global _EXECUTOR, _EXECUTOR_LOCK
    _EXECUTOR = None
    _EXECUTOR_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_executor)


def _executor(workers):
    """A persistent pool of ``workers`` threads (recreated when the count changes)."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None or _EXECUTOR._max_workers != workers:
            if _EXECUTOR is not None:
                _EXECUTOR.shutdown(wait=False)
            _EXECUTOR = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bioqpfs-count")
        return _EXECUTOR


def _run_tasks(task, items, progress):
    """Run ``task(item)`` for every item on the worker pool (inline with one worker or one item).

    Each worker computes whole block pairs -- GEMM (BLAS limited to one thread) then the fused
    pass on the counts it just wrote, still in its cache.  One level of threads only: BLAS threads
    and numba threads alternating on the same cores spin-wait against each other (measured 1.7x
    slower on 2 cores).
    """
    workers = min(n_workers(), len(items))
    if workers <= 1:
        for it in items:
            task(it)
            progress.update()
        return
    futures = []
    try:
        with _blas_threads(1):
            pool = _executor(n_workers())
            futures = [pool.submit(task, it) for it in items]
            for f in as_completed(futures):
                f.result()
                progress.update()
    except BaseException:
        for f in futures:
            f.cancel()
        wait(futures)
        raise


def _blas_threads(n):
    """Limit BLAS to ``n`` threads inside the block (threadpoolctl; no-op without it)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(n, user_api="blas")


def pairwise_information(table_rows: CodeTable, table_cols: CodeTable | None, kind, *, rows=None,
                         base=2.0, dtype=np.float64, out=None):
    """Gene x gene (or gene x column) information matrix.

    Parameters
    ----------
    table_rows : CodeTable
        Genes whose rows are computed (with ``groups`` set for the class-conditional kinds).
    table_cols : CodeTable or None
        Column variables; ``None`` means the same genes (symmetric work sharing).
    kind : {"mi", "cmi", "cmi_mean", "mi_given_class"}
        ``"mi"``: I(X_i; X_j) (diagonal H(X_i));
        ``"cmi"``: C[i, j] = I(X_i; C | X_j), diagonal I(X_i; C);
        ``"cmi_mean"``: the symmetric SPEC_CMI matrix (C[i, j] + C[j, i]) / 2 =
        (H(C|X_i) + H(C|X_j)) / 2 - H(C | X_i, X_j), diagonal I(X_i; C);
        ``"mi_given_class"``: I(X_i; X_j | C), diagonal H(X_i | C).
    rows : array of int, optional
        Compute only these rows (all columns): the ``[A B]`` block Nystrom needs.
    base : float
        Logarithm base of the output, a finite number > 0 and != 1 (2: bits).
    """
    base = check_base(base)
    same = table_cols is None
    tc = table_rows if same else table_cols
    if not same and not (table_rows.order is None and tc.order is None) and not (
            table_rows.order is not None and tc.order is not None and np.array_equal(table_rows.order, tc.order)):
        raise ValueError("the two code tables order their samples differently (one is grouped by class); "
                         "build both with the same groups")
    if table_rows.weighted and not same and tc.weighted and not np.array_equal(table_rows.weights, tc.weights):
        raise ValueError("the two code tables carry different sample weights")
    n = table_rows.total
    m_cols = tc.n_genes
    row_idx = np.arange(table_rows.n_genes) if rows is None else np.asarray(rows, dtype=np.int64)
    r = row_idx.size
    if out is None:
        out = np.empty((r, m_cols), dtype=dtype)
    conditional = kind in ("cmi", "cmi_mean", "mi_given_class")
    C = table_rows.n_classes if conditional else 1
    if conditional and table_rows.n_classes < 2:
        raise ValueError("class-conditional information needs class labels with at least 2 classes")
    ln_b = np.log(base)

    pooled, per_class = table_rows.phi_marginal()
    if kind == "mi":
        # I = ln N + (T - P_i - P_j)/N
        rterm = (0.5 * np.log(n) - pooled / n) / ln_b
        cterm = rterm if same else (0.5 * np.log(n) - tc.phi_marginal()[0] / n) / ln_b
        r_up_all, c_up_all, r_lo_all, c_lo_all = rterm, cterm, cterm, rterm
        s_t, s_tc = 1.0 / (n * ln_b), 0.0
    elif kind == "cmi":
        _, h_c_given_x, _ = class_conditional_entropies(table_rows)
        zero = np.zeros(table_rows.n_genes)
        hc = h_c_given_x / ln_b
        r_up_all, c_up_all, r_lo_all, c_lo_all = zero, hc, zero, hc
        s_t, s_tc = -1.0 / (n * ln_b), 1.0 / (n * ln_b)
    elif kind == "cmi_mean":
        _, h_c_given_x, _ = class_conditional_entropies(table_rows)
        half = 0.5 * h_c_given_x / ln_b
        r_up_all = c_up_all = r_lo_all = c_lo_all = half
        s_t, s_tc = -1.0 / (n * ln_b), 1.0 / (n * ln_b)
    elif kind == "mi_given_class":
        h_x_given_c, _, h_c = class_conditional_entropies(table_rows)
        rterm = (h_x_given_c + 0.5 * (h_c - np.log(n))) / ln_b
        r_up_all, c_up_all, r_lo_all, c_lo_all = rterm, rterm, rterm, rterm
        s_t, s_tc = 0.0, 1.0 / (n * ln_b)
    else:
        raise ValueError(f"unknown kind {kind!r}")
    if conditional and not same:
        raise ValueError("class-conditional kinds are gene x gene only")

    sizes = table_rows.class_sizes if conditional else np.array([float(n)])
    cdt = table_rows.count_dtype
    margR = (table_rows.marginals if conditional else table_rows.marginals.sum(axis=0)[None]).astype(cdt)
    margC = (tc.marginals if conditional else tc.marginals.sum(axis=0)[None]).astype(cdt)
    sizes = sizes.astype(cdt)
    pooledR = table_rows.marginals.sum(axis=0)  # (genes, nb) over all classes, float64
    pooledC = tc.marginals.sum(axis=0)
    symmetric_blocks = same and rows is None
    bs = _block_size(table_rows, tc, C, n_out=r * m_cols)
    # with few rows (Nystrom, greedy baselines) widen the column blocks to the same budget
    bs_cols = bs if symmetric_blocks else max(bs, min(m_cols, bs * bs // max(1, min(r, bs))))
    pairs = [(i0, j0) for i0 in range(0, r, bs)
             for j0 in range(i0 if symmetric_blocks else 0, m_cols, bs if symmetric_blocks else bs_cols)]
    three_bins = table_rows.nb == 2 and tc.nb == 2
    local = threading.local()  # per-worker buffers, freed with this call

    def block_pair(pair):
        i0, j0 = pair
        Ipos = slice(i0, min(r, i0 + bs))
        I = row_idx[Ipos]
        I_arg = slice(int(I[0]), int(I[-1]) + 1) if (I.size and np.all(np.diff(I) == 1)) else I
        J = slice(j0, min(m_cols, j0 + (bs if symmetric_blocks else bs_cols)))
        bI, bJ = len(I), J.stop - J.start
        G = _counts(table_rows, I_arg, tc, J, C, getattr(local, "buf", None))
        if getattr(local, "buf", None) is None or G.size > local.buf.size:
            local.buf = G.ravel()
        diag = symmetric_blocks and j0 == i0
        write_lo = symmetric_blocks  # diagonal blocks mirror their upper triangle
        if write_lo and (getattr(local, "scratch", None) is None or local.scratch.size < bI * bJ):
            local.scratch = np.empty(bI * bJ)
        scr = local.scratch[: bI * bJ].reshape(bI, bJ) if write_lo else _DUMMY
        args = (r_up_all[I], c_up_all[J], s_t, s_tc, out[Ipos, J], scr, write_lo)
        mI, mJ = np.ascontiguousarray(margR[:, I]), np.ascontiguousarray(margC[:, J])
        if three_bins:
            if C > 1 and (getattr(local, "work", None) is None or local.work.shape[1] < bJ):
                local.work = np.empty((5, bJ))
            work = local.work if C > 1 else _DUMMY
            _fused_block_3bins(G, mI, mJ, sizes, table_rows.phi, *args, work,
                               pooledR[I], pooledC[J], float(n), table_rows.weighted)
        else:
            _fused_block(G, mI, mJ, sizes, table_rows.phi, table_rows.nb, tc.nb, conditional, *args,
                         table_rows.weighted)
        if write_lo:
            _write_transposed(scr, r_lo_all[J], c_lo_all[I], out[J, Ipos], diag)

    progress = _progress.bar(len(pairs), f"{kind} matrix", unit="block")
    _run_tasks(block_pair, pairs, progress)
    progress.close()
    if same:
        diag_rows = np.arange(r)
        if kind in ("cmi", "cmi_mean"):
            _, hcx, hc_ = class_conditional_entropies(table_rows)
            out[diag_rows, row_idx] = (hc_ - hcx[row_idx]) / ln_b  # I(X_i; C)
    return out
