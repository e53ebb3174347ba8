"""Entropies, mutual information and conditional MI matrices from integer codes, by blocked GEMM.

Counting is a matrix product.  For a block of genes I with one-hot indicator matrix
``O_I`` (samples x genes*bins, float32) the joint counts of every pair of genes are
``O_I.T @ O_J``: exact in float32 while the number of samples is below 2**24.  Only the first
``k-1`` bins of each gene are materialised; the counts involving the last bin follow from the
marginals (``n_{a,last} = n_a - sum_b n_ab``...), which cuts the GEMM work by ``(k-1)^2/k^2``
(4/9 for 3 bins).  A fused numba pass then turns each block of counts into entries of the
output with a ``n log n`` lookup table, writing both triangles of symmetric outputs so only
block pairs ``J >= I`` are computed.  On sparse codes (single-cell data, each gene mostly at one level) the numpy
backend counts a block pair from the entries off each gene's most frequent level instead, when its cost model says
that is cheaper, with bit-identical counts (:class:`bioqpfs._kernels.counting_numpy.SparseCodes`).  Where only
part of the genes are sparse, the blocks of a whole gene x gene matrix are laid out by density (the backend's
``gene_order``), and each entry is still computed with the lower gene as the row, so the matrix is the same bits.

Three parts, each replaceable on its own:

1. **counting backend** (:mod:`bioqpfs._kernels.counting`, the interface and its contract;
   :mod:`bioqpfs._kernels.counting_numpy`, the default): margins and joint count blocks.  A :class:`CodeTable`
   holds the bin layout, class sizes and margins of a code matrix and counts through its backend; the
   samples keep their input order.
2. **block plan** (:func:`block_plan`): which gene blocks to count, sized from a per-worker memory budget.
3. **coefficient algebra** (:func:`_coefficients` and the fused numba passes): counts -> entries, below.

Scheduling: the block pairs are tasks on a pool of worker threads (``n_workers=`` of
:func:`pairwise_information`; default the face's ``n_jobs``, ``scanpy.settings.n_jobs`` or numba's thread
count, see :mod:`bioqpfs._threads`).  Each worker runs the GEMM of its pair with one BLAS thread, then the fused pass
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

Counts are sufficient statistics: they add over chunks of samples (the numpy backend accumulates them
chunk by chunk), so a backend for sample-chunked (e.g. Dask) data only has to sum its chunks' counts.
Results are in nats inside the kernel and divided by ``ln(base)`` on output.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed, wait

import numpy as np
from numba import njit

from .. import _progress, _threads
from .._jit import skip_failed_cache_writes
from .._validation import check_base
from . import counting as _counting

__all__ = ["CodeTable", "pairwise_information", "entropies", "class_conditional_entropies", "class_sample_weights",
           "class_relevance", "mi_of_joint_counts", "stratum_margins", "CLASS_WEIGHTS", "split_ranges", "run_ranges",
           "run_tasks"]

#: values of ``class_weight`` in every information measure and MI-based selector
CLASS_WEIGHTS = (None, "balanced")


def class_sample_weights(groups, class_weight, strata=None):
    """Per-sample count weights for ``class_weight``: None (every sample counts once) or ``"balanced"``.

    ``"balanced"``: ``w_s = N / (C n_c)`` for a sample of class c (scikit-learn's ``class_weight="balanced"``
    rule), so every class carries the same total weight N / C and the weights sum to N.  With these
    weights the class prior in every (conditional) entropy is uniform: I(X; C) weighs a type of 8 cells
    as much as one of 240, as balanced accuracy does.

    ``strata`` (batch codes per sample): balanced within every stratum, ``w_s = n_b / (C_b n_cb)`` for a
    sample of class c in batch b (``C_b`` the classes present in b), so that every ``I_b`` of a stratified
    measure ``sum_b w_b I_b`` has a uniform class prior, as the one-vs-rest relevance of the class-covering
    recipe has, and batch b keeps its weight n_b.  (Weights balanced over all samples would leave a batch of
    10 A and 2 B cells with the prior 10:2 inside it.)
    """
    if class_weight is None:
        return None
    if not isinstance(class_weight, str) or class_weight != "balanced":
        raise ValueError(f"class_weight must be None or 'balanced', got {class_weight!r}")
    groups = np.asarray(groups, dtype=np.int64)
    if strata is None:
        counts = np.bincount(groups)
        present = np.count_nonzero(counts)
        return groups.size / (present * counts[groups].astype(np.float64))
    strata = np.asarray(strata, dtype=np.int64)
    cells = strata * (int(groups.max()) + 1) + groups  # one code per (batch, class)
    n_cell = np.bincount(cells)
    n_batch = np.bincount(strata)
    classes_in_batch = np.bincount(np.flatnonzero(n_cell) // (int(groups.max()) + 1), minlength=n_batch.size)
    return n_batch[strata] / (classes_in_batch[strata] * n_cell[cells].astype(np.float64))

_DUMMY = np.empty((1, 1))
_GEMM_BUDGET = 4 * 2**20  # bytes of counts (all classes) per worker and block pair: stays in cache


class CodeTable:
    """Integer codes (samples x genes) prepared for counting: the bin layout, the class sizes, the margins.

    The counts themselves come from a counting backend (:mod:`bioqpfs._kernels.counting`; numpy by default,
    :mod:`bioqpfs._kernels.counting_numpy`); the samples keep their input order.

    Parameters
    ----------
    codes : array of uint8, shape (n_samples, n_genes), values ``0..n_levels[g]-1``
        numpy, or any container a registered backend accepts.
    n_levels : ndarray of int, optional
        Levels of every gene (default: from the codes).
    groups : ndarray of int, optional
        Class codes ``0..C-1`` per sample; when given, counts are also kept per class.
    weights : ndarray of float, optional
        Non-negative weight of every sample (e.g. class-balanced: ``N / (C n_c)`` for a sample of class
        c, so every class counts equally).  Every count becomes a weighted count ``sum_s w_s [...]`` --
        one weighted one-hot GEMM -- and every probability ``n_ab / N`` becomes ``n^w_ab / sum_s w_s``;
        the formulas above are unchanged.  Weighted counts are accumulated in float64 and ``phi`` is
        evaluated directly (``x ln x``) instead of from the integer lookup table.
    backend : str or CountingBackend subclass, optional
        The counting backend (a name of :data:`bioqpfs._kernels.counting.BACKENDS` or a class); default:
        the first that accepts ``codes``.
    strata : ndarray of int, optional
        Stratum (batch) codes ``0..B-1`` per sample, with ``strata_weights`` (``w_b >= 0``, one per stratum,
        summing to 1).  Every information measure of a stratified table is then the weighted sum of the
        measure within each stratum, ``sum_b w_b I_b`` -- counts are accumulated within each stratum only
        (stratified estimation as in mRMRe's ``strata``; De Jay et al., Bioinformatics 2013).  With
        ``w_b = p(b)`` this is the information conditional on the stratum, e.g. ``I(X_i; X_j | B)``.
    marginals : ndarray, optional
        The per-class margins (``(C, n_genes, n_bins - 1)``, as the backend's ``margins()``) when already counted
        (:meth:`stratum_tables` counts every stratum's in one pass).
    """

    def __init__(self, codes, n_levels=None, groups=None, weights=None, backend=None, strata=None,
                 strata_weights=None, marginals=None):
        if not hasattr(codes, "shape"):
            codes = np.asarray(codes)
        if n_levels is None:
            from .._device import to_host

            n_levels = np.asarray(to_host(codes.max(axis=0))).astype(np.int64) + 1 if codes.size else \
                np.ones(codes.shape[1], np.int64)
        self.n_levels = np.asarray(n_levels)
        self.groups = None if groups is None else np.asarray(groups)
        self.strata = None if strata is None else np.asarray(strata, dtype=np.int64)
        self.strata_weights = None if strata is None else np.asarray(strata_weights, dtype=np.float64)
        self._stratum_tables = None
        self._regrouped = {}  # strata_as_groups
        self.n_samples, self.n_genes = codes.shape
        self.n_levels = np.asarray(n_levels)
        self.n_bins = max(2, int(np.max(n_levels)))  # global bin count k
        self.nb = self.n_bins - 1  # materialised bins per gene
        if groups is None:
            class_order, sizes = None, np.array([self.n_samples])
        else:
            groups = np.asarray(groups)
            class_order = np.argsort(groups, kind="stable")  # weights are summed class by class
            sizes = np.bincount(groups)
        self.n_classes = sizes.size
        if weights is None:
            self.weights = None
            self.total = float(self.n_samples)
            # float32 holds every integer count exactly below 2**24 samples; beyond, count in float64
            self.count_dtype = np.float32 if self.n_samples < 2**24 else np.float64
            self.class_sizes = sizes.astype(np.float64)
        else:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (self.n_samples,) or not np.isfinite(w).all() or (w < 0).any() or not w.sum() > 0:
                raise ValueError("sample weights must be finite, non-negative, not all zero, one per sample")
            self.weights = w
            self.count_dtype = np.float64
            # sums in class order (the order of the class-wise counts)
            w_sorted = w if class_order is None else w[class_order]
            self.total = float(w_sorted.sum())
            bounds = np.concatenate([[0], np.cumsum(sizes)])
            self.class_sizes = np.add.reduceat(w_sorted, bounds[:-1]) if self.n_samples else np.zeros(self.n_classes)
            self.class_sizes[sizes == 0] = 0.0
        if isinstance(backend, type) and issubclass(backend, _counting.CountingBackend):
            cls = backend
        else:
            cls = _counting.backend_for(codes, backend)
        self.backend = cls(codes, n_bins=self.n_bins, groups=groups, weights=self.weights,
                           count_dtype=self.count_dtype)
        self.phi = _phi_table(self.n_samples)
        # per-class marginal (weighted) counts of every materialised bin: (C, genes, nb)
        self.marginals = self.backend.margins() if marginals is None else np.asarray(marginals, dtype=np.float64)

    def regrouped(self, groups):
        """The same codes, weights and strata with other ``groups`` (None: pooled counts)."""
        return CodeTable(self.backend.native_codes, self.n_levels, groups=groups, weights=self.weights,
                         backend=type(self.backend), strata=self.strata, strata_weights=self.strata_weights)

    def stratum_tables(self, groups=None):
        """``[(w_b, table_b, rows_b)]``: the table of every stratum's samples (same bin layout, groups -- or the
        class codes ``groups`` given here -- and weights restricted to them), its weight and its sample indices;
        ``[(1.0, self, all)]`` without strata.  Every stratum's margins come from one pass over the codes
        (:meth:`stratum_margins`), not one per stratum."""
        if self.strata is None:
            return [(1.0, self, np.arange(self.n_samples))]
        if groups is None and self._stratum_tables is not None:
            return self._stratum_tables
        labels = self.groups if groups is None else np.asarray(groups, dtype=np.int64)
        margins = self.stratum_margins(labels)
        codes = self.backend.native_codes  # a Dask table's stay lazy: each stratum's rows of its chunks
        tables = []
        for b, w_b in enumerate(self.strata_weights):
            rows = np.flatnonzero(self.strata == b)
            sub_groups = None if labels is None else labels[rows]
            n_classes = 1 if labels is None else (int(sub_groups.max()) + 1 if rows.size else 0)
            sub = CodeTable(type(self.backend).take_rows(codes, rows), self.n_levels, groups=sub_groups,
                            weights=None if self.weights is None else self.weights[rows],
                            backend=type(self.backend), marginals=margins[:n_classes, b])
            tables.append((float(w_b), sub, rows))
        if groups is None:
            self._stratum_tables = tables
        return tables

    def stratum_margins(self, groups=None, weighted=True):
        """``(C, B, n_genes, n_bins - 1)``: the (weighted, unless ``weighted=False``) margins of every class
        (``groups``, default none: one class) within every stratum, in one pass over the codes -- the codes
        grouped by (class, stratum) pairs."""
        return stratum_margins(self.backend.native_codes, self.n_bins, groups, self.strata,
                               self.strata_weights.size, weights=self.weights if weighted else None,
                               backend=type(self.backend))

    def strata_as_groups(self, by_class=False):
        """The same codes as one table whose groups are the strata (``by_class``: the (class, stratum) pairs), its
        sample weights rescaled so that stratum b carries ``w_b`` of the total (kept when ``w_b = p(b)``
        already): then ``I(X_i; X_j | groups)`` is ``sum_b w_b I_b(X_i; X_j)`` (``by_class``:
        ``sum_b w_b I_b(X_i; X_j | C)``), counted in one pass instead of one per stratum.  Rescaling the
        weights of a stratum by a constant does not change the information within it."""
        key = bool(by_class)
        cache = self._regrouped
        if key not in cache:
            groups = self.strata
            if by_class and self.groups is not None:
                groups = np.unique(self.groups * self.strata_weights.size + self.strata, return_inverse=True)[1]
            base = np.ones(self.n_samples) if self.weights is None else self.weights
            held = np.bincount(self.strata, weights=base, minlength=self.strata_weights.size)
            if np.allclose(held / held.sum(), self.strata_weights, rtol=1e-12, atol=0):
                weights = self.weights  # w_b = p(b) already (unweighted: integer counts, as without strata)
            else:
                scale = np.divide(self.strata_weights, held, out=np.zeros_like(held), where=held > 0)
                weights = base * scale[self.strata]
            cache[key] = CodeTable(self.backend.native_codes, self.n_levels, groups=np.ravel(groups), weights=weights,
                                   backend=type(self.backend))
        return cache[key]

    @property
    def codes(self):
        """The codes in sample order (numpy)."""
        return self.backend.codes_of(slice(None))

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

    def phi_marginal(self):
        """P_g = sum_a phi(n_a) over all bins of gene g (pooled over classes), and the same per class."""
        tot = self.marginals.sum(axis=0)
        last = self.total - tot.sum(axis=1)
        pooled = self.phi_of(tot).sum(axis=1) + self.phi_of(last)
        per_class = self.phi_of(self.marginals).sum(axis=2)
        per_class += self.phi_of(self.class_sizes[:, None] - self.marginals.sum(axis=2))
        return pooled, per_class.sum(axis=0)


def stratum_margins(codes, n_bins, groups, strata, n_strata, *, n_classes=None, weights=None, backend=None):
    """``(C, B, n_genes, n_bins - 1)``: the counts (``weights``: weighted) of every class (``groups``; None: one
    class) within every stratum (``strata`` ``0..B-1``; None: one) in every materialised bin, in one pass over
    the codes -- the codes grouped by (class, stratum) pairs, counted by the counting ``backend`` (a class; default
    the first that accepts ``codes``; a Dask array chunk by chunk).  ``n_classes``: C (default: the largest class
    code + 1); absent pairs are zero."""
    n = codes.shape[0]
    labels = np.zeros(n, dtype=np.int64) if groups is None else np.asarray(groups, dtype=np.int64)
    if n_classes is None:
        n_classes = int(labels.max()) + 1 if labels.size else 1
    pairs = labels * n_strata + (0 if strata is None else np.asarray(strata, dtype=np.int64))
    # float32 holds every integer count exactly below 2**24 samples; weights and beyond: float64
    count_dtype = np.float32 if weights is None and n < 2**24 else np.float64
    cls = backend if isinstance(backend, type) else _counting.backend_for(codes, backend)
    counts = cls(codes, n_bins=n_bins, groups=pairs, weights=weights, count_dtype=count_dtype).margins()
    out = np.zeros((n_classes * n_strata,) + counts.shape[1:])
    out[:counts.shape[0]] = counts  # pairs beyond the last present one are empty
    return out.reshape(n_classes, n_strata, *counts.shape[1:])


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
    if table.strata is not None:  # sum_b w_b I_b(X; C) = I(X; C | B) for w_b = p(b)
        return sum(w * class_relevance(t) for w, t, _ in table.stratum_tables(groups))
    if table.n_classes < 2 and groups is not None:
        table = CodeTable(table.backend.native_codes, table.n_levels, groups=groups, weights=table.weights,
                          backend=type(table.backend))
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
    ``a`` of gene ``i`` (the layout of :meth:`bioqpfs._kernels.counting.CountingBackend.joint`).
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
                       out_up, scratch, write_lo, weighted):
    """:func:`_fused_block` for 3 bins per gene (2 materialised), the default discretisation, without classes
    (``"mi"``; with classes: :func:`_class_block_3bins`).

    The inner loop runs over ``j`` with unit stride in every array (bin-major ``G``); the nine ``phi`` lookups
    per cell dominate (measured on one core: 4.7 ns per gene pair).  Counts stay in the count dtype (float32:
    exact integers below 2**24).
    """
    bI = margI.shape[1]
    bJ = margJ.shape[1]
    for i in range(bI):
        ri = r_up[i]
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


@njit(nogil=True, cache=True)
def _class_block_3bins(G, margI, margJ, sizes, phi, vary_J, off_vJ, const_J, off_cJ, constI, phi_margI, phi_margJ,
                       r_up, c_up, s_t, s_tc, out_up, scratch, write_lo, work, pooledI, pooledJ, n_total, weighted):
    """:func:`_fused_block_3bins` with classes (the class-conditional kinds): ``s_t T + s_tc Tc`` with ``Tc`` the
    sum over classes of the phi-sums of the class-wise 3 x 3 tables, ``T`` that of the pooled table.

    A gene constant within class c puts all of the class's samples in one row (column) of the table, so that
    table's phi-sum is the other gene's per-class marginal phi-sum ``phi(n_0) + phi(n_1) + phi(n_2)``
    (``phi_marg*[c, g]``, :func:`_constant_within_class`): the same three non-zero terms, added in the same
    order, as the nine-cell sum, so the shortcut is bit-identical for integer counts.  Per class, the
    ``j`` of the block are listed as varying (``vary_J[off_vJ[c]:off_vJ[c + 1]]``, nine lookups each) and
    constant (``const_J[...]``, one addition); a row ``i`` constant within c adds ``phi_margJ[c]`` whole.  On
    many small classes (cell types x batches) most genes of a class are constant: pbmc68k_reduced's 10 cell types
    x 3 cell-cycle phases leave 55% of the class-wise pairs to count.  ``work`` (5 x bJ float64) holds the
    pooled counts (for T) and Tc of one row; ``pooledI``/``pooledJ`` (genes x 2) are the pooled marginals.
    """
    C = G.shape[0]
    bI = margI.shape[1]
    bJ = margJ.shape[1]
    need_t = s_t != 0.0
    for i in range(bI):
        ri = r_up[i]
        for k in range(5):
            for j in range(bJ):
                work[k, j] = 0.0
        for c in range(C):
            if need_t:  # the pooled table needs only the 4 pooled materialised counts
                for j in range(bJ):
                    work[0, j] += G[c, i, j]
                    work[1, j] += G[c, i, bJ + j]
                    work[2, j] += G[c, bI + i, j]
                    work[3, j] += G[c, bI + i, bJ + j]
            if constI[c, i]:
                for j in range(bJ):
                    work[4, j] += phi_margJ[c, j]
                continue
            p = phi_margI[c, i]
            for jj in range(off_cJ[c], off_cJ[c + 1]):
                work[4, const_J[jj]] += p
            a0 = margI[c, i, 0]
            a1 = margI[c, i, 1]
            rest = sizes[c] - a0 - a1
            for jj in range(off_vJ[c], off_vJ[c + 1]):
                j = vary_J[jj]
                work[4, j] += _phi_sum_3x3(phi, G[c, i, j], G[c, i, bJ + j], G[c, bI + i, j], G[c, bI + i, bJ + j],
                                           a0, a1, margJ[c, j, 0], margJ[c, j, 1], rest, weighted)
        if need_t:
            a0 = pooledI[i, 0]
            a1 = pooledI[i, 1]
            rest = n_total - a0 - a1
            for j in range(bJ):
                T = _phi_sum_3x3(phi, work[0, j], work[1, j], work[2, j], work[3, j], a0, a1, pooledJ[j, 0],
                                 pooledJ[j, 1], rest, weighted)
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
def _write_ordered(out, I, J, up, scr, up_t, scr_t, r_lo, c_lo, diagonal_block):
    """The entries of a block pair of genes ``I`` x ``J`` (index arrays) into ``out``, both triangles, as the plan in
    gene order writes them (:func:`_write_transposed`): for genes u < v, ``out[u, v]`` is the upper entry and
    ``out[v, u] = r_lo[v] + c_lo[u] + scr`` the mirrored one, both from the cell whose row gene is u -- ``up, scr``
    (``I x J``) or, where ``I[i] > J[j]``, ``up_t, scr_t`` (``J x I``, computed from the transposed counts).  A
    diagonal block (``I`` is ``J``) writes each pair from its cell with ``u < v`` only."""
    for i in range(I.size):
        u = I[i]
        for j in range(J.size):
            v = J[j]
            if u < v:
                out[u, v] = up[i, j]
                out[v, u] = r_lo[v] + c_lo[u] + scr[i, j]
            elif u > v:
                if diagonal_block:
                    continue
                out[v, u] = up_t[j, i]
                out[u, v] = r_lo[u] + c_lo[v] + scr_t[j, i]
            else:
                out[u, u] = up[i, j]


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


# ---- block plan ---------------------------------------------------------------------------------------
def _block_size(table_rows: CodeTable, table_cols: CodeTable, n_classes, n_out=None):
    """Genes per block so one worker's block of class-wise counts stays within ``_GEMM_BUDGET``.

    The budget is per worker thread and small (a few MB) so that the fused pass reads the counts
    from cache right after the GEMM wrote them.  ``n_out`` (entries of the output) caps the budget for small
    problems: at the output's float64 size for integer counts, at a quarter of it for weighted counts.  (A
    quarter made the blocks of a class-wise matrix so small that per-GEMM overheads dominated: SPEC_CMI on
    pbmc68k_reduced's 765 genes and 10 cell types took 1.3x the time.  Weighted counts keep it: their float64
    sums depend on the BLAS tiling, and ``tests/test_kernel_identity.py`` holds them bit-identical.  Matrices
    beyond ~1,000 genes reach ``_GEMM_BUDGET`` either way.)
    """
    per = np.dtype(table_rows.count_dtype).itemsize * n_classes * table_rows.nb * table_cols.nb
    share = 4 if table_rows.weighted else 1
    budget = _GEMM_BUDGET if n_out is None else min(_GEMM_BUDGET, max(2**18, n_out * 8 // share))
    b = int(np.sqrt(budget / per))
    return max(16, min(b, 4096))


def block_plan(table_rows: CodeTable, table_cols: CodeTable, n_classes, n_rows, symmetric):
    """The gene blocks of an ``n_rows x table_cols.n_genes`` information matrix: ``(pairs, bs, bs_cols)``.

    ``pairs`` lists the ``(i0, j0)`` corners of the blocks to count -- rows ``i0:i0+bs`` (positions in the
    requested rows), columns ``j0:j0+bs_cols``; ``symmetric`` (a whole gene x gene matrix): only blocks on
    or above the diagonal, the others are mirrored.  The block size keeps one worker's class-wise counts
    within ``_GEMM_BUDGET`` (:func:`_block_size`); with few rows (Nystrom, greedy baselines) the column
    blocks widen to the same budget.
    """
    m_cols = table_cols.n_genes
    bs = _block_size(table_rows, table_cols, n_classes, n_out=n_rows * m_cols)
    bs_cols = bs if symmetric else max(bs, min(m_cols, bs * bs // max(1, min(n_rows, bs))))
    pairs = [(i0, j0) for i0 in range(0, n_rows, bs)
             for j0 in range(i0 if symmetric else 0, m_cols, bs_cols)]
    return pairs, bs, bs_cols


def n_workers():
    """The default worker count of the blocked kernels: the count of the calling face (``n_jobs=``), else
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
    """A persistent pool of ``workers`` threads (a new one when the count changes).

    The pool it replaces is not shut down: another thread may still be submitting to it (faces run in two threads
    with different ``n_jobs``: "cannot schedule new futures after shutdown"); its threads end once the last caller
    holding it has dropped it (ThreadPoolExecutor's own clean-up of an unreferenced pool)."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None or _EXECUTOR._max_workers != workers:
            _EXECUTOR = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bioqpfs-count")
        return _EXECUTOR


def run_tasks(task, items, progress, workers=None):
    """Run ``task(item)`` for every item on ``workers`` pool threads (default :func:`n_workers`; inline with
    one worker or one item).

    Each task runs whole on one pool thread, BLAS limited to one thread: here a block pair (GEMM, then the fused
    pass on the counts it just wrote, still in its cache), in ``qpfs_cover`` one class's QP.  One level of threads
    only: BLAS threads and numba threads alternating on the same cores spin-wait against each other (measured 1.7x
    slower on 2 cores).
    """
    pool_size = n_workers() if workers is None else int(workers)
    workers = min(pool_size, len(items))
    if threading.current_thread().name.startswith("bioqpfs-count"):
        workers = 1  # called from a task of the pool itself: inline (waiting on the pool from it could deadlock)
    if workers <= 1:
        for it in items:
            task(it)
            progress.update()
        return
    futures = []
    # the limit is lifted only once no task runs: a task that limits BLAS itself (a QP solve) and ends after it
    # would restore the one thread it found, leaving the process with one BLAS thread after a failed run
    with _threads.blas_limited(1):
        try:
            pool = _executor(pool_size)
            futures = [pool.submit(task, it) for it in items]
            for f in as_completed(futures):
                f.result()
                progress.update()
        except BaseException:
            for f in futures:
                f.cancel()
            wait(futures)
            raise


def split_ranges(n, parts=None):
    """``[(p, lo, hi)]``: ``parts`` (default :func:`n_workers`, at most n) consecutive ranges covering ``0..n``."""
    parts = max(1, min(int(n), n_workers() if parts is None else int(parts)))
    step = -(-int(n) // parts)
    return [(p, p * step, min(int(n), (p + 1) * step)) for p in range(parts)]


def run_ranges(func, ranges):
    """``func(p, lo, hi)`` for every range of :func:`split_ranges`: on the worker pool from the main thread (a nogil
    numba kernel per range runs in parallel), inline from any other thread -- a Dask scheduler's or this pool's,
    already running in parallel.  The pool is fork-safe; numba's own parallel regions are not (after one, a fork()ed
    child of GNU OpenMP aborts: ``tests/test_measures.py::test_pool_works_in_forked_child``).  BLAS is left alone:
    the kernels do not call it, and a threadpoolctl limit entered from several threads at once (Dask chunks) can
    leave the process with the wrong BLAS thread count."""
    if len(ranges) <= 1 or threading.current_thread() is not threading.main_thread():
        for item in ranges:
            func(*item)
        return
    pool = _executor(n_workers())
    futures = [pool.submit(func, *item) for item in ranges]
    try:
        for f in futures:
            f.result()
    except BaseException:
        for f in futures:
            f.cancel()
        wait(futures)
        raise


# ---- coefficient algebra ------------------------------------------------------------------------------
def _coefficients(kind, table_rows: CodeTable, tc: CodeTable, same, ln_b):
    """The affine map from the phi-sums of a cell's counts to the output (module docstring formulas).

    ``out[i, j] = r_up[i] + c_up[j] + s_t T_ij + s_tc Tc_ij`` above the diagonal and
    ``out[j, i] = r_lo[j] + c_lo[i] + s_t T_ij + s_tc Tc_ij`` for the mirrored entry, with ``T`` the
    pooled and ``Tc`` the class-wise phi-sums; returns ``(r_up, c_up, r_lo, c_lo, s_t, s_tc)``.
    """
    n = table_rows.total
    if kind == "mi":  # I = ln N + (T - P_i - P_j)/N
        pooled, _ = table_rows.phi_marginal()
        rterm = (0.5 * np.log(n) - pooled / n) / ln_b
        cterm = rterm if same else (0.5 * np.log(n) - tc.phi_marginal()[0] / n) / ln_b
        return rterm, cterm, cterm, rterm, 1.0 / (n * ln_b), 0.0
    if kind not in ("cmi", "cmi_mean", "mi_given_class"):
        raise ValueError(f"unknown kind {kind!r}")
    if table_rows.n_classes < 2:
        raise ValueError("class-conditional information needs class labels with at least 2 classes")
    if not same:
        raise ValueError("class-conditional kinds are gene x gene only")
    h_x_given_c, h_c_given_x, h_c = class_conditional_entropies(table_rows)
    if kind == "cmi":  # I(X_i; C | X_j) = H(C | X_j) - H(C | X_i, X_j)
        zero = np.zeros(table_rows.n_genes)
        hc = h_c_given_x / ln_b
        return zero, hc, zero, hc, -1.0 / (n * ln_b), 1.0 / (n * ln_b)
    if kind == "cmi_mean":
        half = 0.5 * h_c_given_x / ln_b
        return half, half, half, half, -1.0 / (n * ln_b), 1.0 / (n * ln_b)
    rterm = (h_x_given_c + 0.5 * (h_c - np.log(n))) / ln_b  # mi_given_class
    return rterm, rterm, rterm, rterm, 0.0, 1.0 / (n * ln_b)


def _constant_within_class(table: CodeTable):
    """``(constant, phi_marg)``, both ``(C, n_genes)``: whether every sample of class c has the same code of gene g
    (an empty class: every gene), and ``phi(n_0) + phi(n_1) + phi(n_2)`` of the gene's three bin counts in the
    class (the phi-sum of any 3 x 3 table with that gene constant, :func:`_class_block_3bins`).  Weighted
    counts: no gene is treated as constant (the derived cells of a weighted table carry round-off, so the
    shortcut would not be bit-identical to counting).
    """
    m = table.marginals  # (C, genes, 2) exact integers when unweighted
    shape = m.shape[:2]
    if table.weighted:
        return np.zeros(shape, dtype=bool), np.zeros(shape)
    sizes = table.class_sizes[:, None]
    cdt = table.count_dtype
    m0, m1 = m[..., 0].astype(cdt), m[..., 1].astype(cdt)
    last = sizes.astype(cdt) - m0 - m1  # as the kernel computes the last bin
    constant = (m0 == sizes) | (m1 == sizes) | (last == sizes)
    phi = table.phi
    phi_marg = phi[m0.astype(np.int64)] + phi[m1.astype(np.int64)] + phi[last.astype(np.int64)]
    return constant, phi_marg


def pairwise_information(table_rows: CodeTable, table_cols: CodeTable | None, kind, *, rows=None,
                         base=2.0, dtype=np.float64, out=None, n_workers=None):
    """Gene x gene (or gene x column) information matrix.

    Three parts: the coefficient algebra (:func:`_coefficients`, counts -> entries, and the fused numba
    passes), the block plan (:func:`block_plan`) and the counting backend of the tables
    (:mod:`bioqpfs._kernels.counting`), scheduled as block-pair tasks on ``n_workers`` threads.

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
        Logarithm base of the output, a finite number > 1 (2: bits).
    n_workers : int, optional
        Worker threads for the block pairs; default :func:`n_workers` (the face's ``n_jobs``).  The
        result does not depend on it.
    """
    base = check_base(base)
    same = table_cols is None
    if table_rows.strata is not None or (not same and table_cols.strata is not None):
        return _stratified_information(table_rows, table_cols, kind, rows, base, dtype, out, n_workers)
    tc = table_rows if same else table_cols
    if table_rows.weighted and not same and tc.weighted and not np.array_equal(table_rows.weights, tc.weights):
        raise ValueError("the two code tables carry different sample weights")
    m_cols = tc.n_genes
    row_idx = np.arange(table_rows.n_genes) if rows is None else np.asarray(rows, dtype=np.int64)
    r = row_idx.size
    ln_b = np.log(base)
    r_up_all, c_up_all, r_lo_all, c_lo_all, s_t, s_tc = _coefficients(kind, table_rows, tc, same, ln_b)
    if out is None:
        out = np.empty((r, m_cols), dtype=dtype)
    conditional = kind != "mi"
    symmetric_blocks = same and rows is None
    on_device = hasattr(table_rows.backend, "joint_device")
    if not same and type(tc.backend) is not type(table_rows.backend) and (on_device or
                                                                          hasattr(tc.backend, "joint_device")):
        # one table on the GPU, the other not (the size rule of backend="auto"): count both where the rows are
        tc = CodeTable(tc.codes, tc.n_levels, groups=tc.groups, weights=tc.weights, backend=type(table_rows.backend))
    coefficients = (r_up_all, c_up_all, r_lo_all, c_lo_all, s_t, s_tc)
    if on_device:  # an array backend (cupy): counts and phi-sums stay on the device, the entries come back
        _array_information(table_rows, tc, same, conditional, row_idx, symmetric_blocks, coefficients, out)
    else:
        _blocked_information(table_rows, tc, same, conditional, rows, row_idx, symmetric_blocks, kind, out,
                             n_workers, coefficients)
    if same and kind in ("cmi", "cmi_mean"):
        _, hcx, hc_ = class_conditional_entropies(table_rows)
        out[np.arange(r), row_idx] = (hc_ - hcx[row_idx]) / ln_b  # I(X_i; C)
    return out


def _blocked_information(table_rows, tc, same, conditional, rows, row_idx, symmetric_blocks, kind, out, n_workers,
                         coefficients):
    """The entries of :func:`pairwise_information` on the CPU: block pairs on the worker pool, each a GEMM of the
    counting backend then a fused numba pass (:func:`_fused_block_3bins`, :func:`_class_block_3bins`,
    :func:`_fused_block`) and the mirrored write.  A backend with a ``gene_order`` (the numpy backend's sparse form
    of codes whose genes are sparse only in part) has the blocks of a whole matrix taken in that order
    (``ordered_block_pair``, :func:`_write_ordered`): the same entries, bit for bit."""
    r_up_all, c_up_all, r_lo_all, c_lo_all, s_t, s_tc = coefficients
    n = table_rows.total
    r = row_idx.size
    m_cols = tc.n_genes
    C = table_rows.n_classes if conditional else 1
    sizes = table_rows.class_sizes if conditional else np.array([float(n)])
    cdt = table_rows.count_dtype
    margR = (table_rows.marginals if conditional else table_rows.marginals.sum(axis=0)[None]).astype(cdt)
    margC = (tc.marginals if conditional else tc.marginals.sum(axis=0)[None]).astype(cdt)
    sizes = sizes.astype(cdt)
    pooledR = table_rows.marginals.sum(axis=0)  # (genes, nb) over all classes, float64
    pooledC = tc.marginals.sum(axis=0)
    pairs, bs, bs_cols = block_plan(table_rows, tc, C, r, symmetric_blocks)
    three_bins = table_rows.nb == 2 and tc.nb == 2
    class_wise = three_bins and C > 1  # the class-conditional kinds (same genes) on the default 3 bins
    if class_wise:
        constant, phi_marg = _constant_within_class(table_rows)
    other = None if same else tc.backend
    if same and hasattr(table_rows.backend, "expect"):  # a backend may count ahead (counting.py contract)
        table_rows.backend.expect(rows=rows, per_class=conditional)
    order = table_rows.backend.gene_order() if symmetric_blocks and hasattr(table_rows.backend, "gene_order") \
        else None
    local = threading.local()  # per-worker buffers, freed with this call

    def fused(G, I, J, out_up, scr, write_lo):
        """The fused pass of the counts ``G`` of genes ``I`` x ``J`` (slices or index arrays) into ``out_up`` and,
        with ``write_lo``, the phi-sum part of every entry into ``scr``."""
        bJ = out_up.shape[1]
        args = (r_up_all[I], c_up_all[J], s_t, s_tc, out_up, scr, write_lo)
        mI, mJ = np.ascontiguousarray(margR[:, I]), np.ascontiguousarray(margC[:, J])
        if class_wise:
            if getattr(local, "work", None) is None or local.work.shape[1] < bJ:
                local.work = np.empty((5, bJ))
            const_J = constant[:, J]
            cls_v, vary_J = np.nonzero(~const_J)
            cls_c, fixed_J = np.nonzero(const_J)
            classes = np.arange(C + 1)
            _class_block_3bins(G, mI, mJ, sizes, table_rows.phi, vary_J, np.searchsorted(cls_v, classes), fixed_J,
                               np.searchsorted(cls_c, classes), np.ascontiguousarray(constant[:, I]),
                               np.ascontiguousarray(phi_marg[:, I]), np.ascontiguousarray(phi_marg[:, J]), *args,
                               local.work, pooledR[I], pooledC[J], float(n), table_rows.weighted)
        elif three_bins:
            _fused_block_3bins(G, mI, mJ, sizes, table_rows.phi, *args, table_rows.weighted)
        else:
            _fused_block(G, mI, mJ, sizes, table_rows.phi, table_rows.nb, tc.nb, conditional, *args,
                         table_rows.weighted)

    def buffer(name, shape):
        """A per-worker float64 buffer of at least ``shape``, viewed as ``shape``."""
        size = int(np.prod(shape))
        if getattr(local, name, None) is None or getattr(local, name).size < size:
            setattr(local, name, np.empty(size))
        return getattr(local, name)[:size].reshape(shape)

    def joint(I, J):
        """The counts of genes ``I`` x ``J`` from the backend, into this worker's reused buffer."""
        G = table_rows.backend.joint(I, J, per_class=conditional, other=other, out=getattr(local, "buf", None))
        if getattr(local, "buf", None) is None or G.size > local.buf.size:
            local.buf = G.ravel()
        return G

    def block_pair(pair):
        i0, j0 = pair
        Ipos = slice(i0, min(r, i0 + bs))
        I = row_idx[Ipos]
        I_arg = slice(int(I[0]), int(I[-1]) + 1) if (I.size and np.all(np.diff(I) == 1)) else I
        J = slice(j0, min(m_cols, j0 + bs_cols))
        bI, bJ = len(I), J.stop - J.start
        G = joint(I_arg, J)
        diag = symmetric_blocks and j0 == i0
        write_lo = symmetric_blocks  # diagonal blocks mirror their upper triangle
        scr = buffer("scratch", (bI, bJ)) if write_lo else _DUMMY
        fused(G, I, J, out[Ipos, J], scr, write_lo)
        if write_lo:
            _write_transposed(scr, r_lo_all[J], c_lo_all[I], out[J, Ipos], diag)

    def ordered_block_pair(pair):
        """A block pair of genes taken in ``order`` (the backend's: by density, :meth:`SparseCodes.gene_order`).
        Every entry gets the bits of the plan in gene order: the pair (u, v), u < v, is computed with u as the row
        gene -- from the counts transposed where the block has them the other way round."""
        i0, j0 = pair
        diag = j0 == i0
        I = np.sort(order[i0:i0 + bs])  # within a block in gene order: the writes into out go row by row
        J = I if diag else np.sort(order[j0:j0 + bs])
        G = joint(I, J)  # a whole matrix: other is None
        bI, bJ = I.size, J.size
        up, scr = buffer("up", (bI, bJ)), buffer("scratch", (bI, bJ))
        fused(G, I, J, up, scr, True)
        if diag:  # (u, v) and (v, u) both in the block: each pair is written from its cell with u < v
            up_t, scr_t = up.T, scr.T
        else:
            up_t, scr_t = buffer("up_t", (bJ, bI)), buffer("scratch_t", (bJ, bI))
            fused(np.ascontiguousarray(G.transpose(0, 2, 1)), J, I, up_t, scr_t, True)
        _write_ordered(out, I, J, up, scr, up_t, scr_t, r_lo_all, c_lo_all, diag)
    with _progress.bar(len(pairs), f"{kind} matrix", unit="block") as progress:  # closed on an error too
        run_tasks(block_pair if order is None else ordered_block_pair, pairs, progress, n_workers)


def _array_phi_sums(xp, G, margI, margJ, sizes, nbI, nbJ, need_tc):
    """``(T, Tc)`` of every cell of a block of counts, as whole-array operations of the array module ``xp`` (cupy
    on the GPU; numpy in the tests): the vectorised form of :func:`_fused_block`, any number of bins and classes.

    ``G``: ``(C, nbI * bI, nbJ * bJ)`` counts, bin-major; ``margI`` ``(C, bI, nbI)``, ``margJ`` ``(C, bJ, nbJ)``
    and ``sizes`` ``(C,)`` float64.  ``T[i, j] = sum_ab phi(n_ab)`` over the pooled ``(nbI + 1) x (nbJ + 1)``
    table of genes i and j (the last row and column from the margins), ``Tc`` the same summed over the class-wise
    tables (None unless ``need_tc``); ``phi(n) = n ln n``.
    """
    C = G.shape[0]
    bI, bJ = margI.shape[1], margJ.shape[1]

    def phi(x):
        return xp.where(x > 0, x * xp.log(xp.where(x > 0, x, 1.0)), 0.0)

    g = G.reshape(C, nbI, bI, nbJ, bJ).astype(xp.float64)
    rs = g.sum(axis=3)  # (C, nbI, bI, bJ): n_{a, .} over the materialised columns
    cs = g.sum(axis=1)  # (C, bI, nbJ, bJ)
    row_last = xp.transpose(margI, (0, 2, 1))[:, :, :, None] - rs  # n_{a, last}
    col_last = xp.transpose(margJ, (0, 2, 1))[:, None, :, :] - cs  # n_{last, b}
    corner = (sizes[:, None, None] - margI.sum(axis=2)[:, :, None] - margJ.sum(axis=2)[:, None, :]
              + rs.sum(axis=1))  # n_{last, last}
    if C == 1:
        T = phi(g[0]).sum(axis=(0, 2)) + phi(row_last[0]).sum(axis=0) + phi(col_last[0]).sum(axis=1) + phi(corner[0])
        return T, (T if need_tc else None)
    T = (phi(g.sum(axis=0)).sum(axis=(0, 2)) + phi(row_last.sum(axis=0)).sum(axis=0)
         + phi(col_last.sum(axis=0)).sum(axis=1) + phi(corner.sum(axis=0)))
    if not need_tc:
        return T, None
    Tc = (phi(g).sum(axis=(0, 1, 3)) + phi(row_last).sum(axis=(0, 1)) + phi(col_last).sum(axis=(0, 2))
          + phi(corner).sum(axis=0))
    return T, Tc


def _array_information(table_rows, tc, same, conditional, row_idx, symmetric_blocks, coefficients, out):
    """The entries of :func:`pairwise_information` with an array counting backend (cupy: :mod:`.counting_cupy`).

    Per block pair: the counts (:meth:`~bioqpfs._kernels.counting_cupy.CupyCounting.joint_device`), their phi-sums
    (:func:`_array_phi_sums`) and the affine map of :func:`_coefficients` all on the device; the block's entries
    (and, for a whole symmetric matrix, the mirrored block) are copied into ``out`` -- every entry crosses once.
    Blocks are as large as the backend's device budget allows (one block pair for a few thousand genes).
    """
    backend = table_rows.backend
    xp = backend.array_module()
    host = backend.to_host
    r_up, c_up, r_lo, c_lo, s_t, s_tc = (xp.asarray(np.asarray(v, dtype=np.float64)) if isinstance(v, np.ndarray)
                                         else float(v) for v in coefficients)
    r, m_cols = row_idx.size, tc.n_genes
    C = table_rows.n_classes if conditional else 1
    nbI, nbJ = table_rows.nb, tc.nb
    margR = xp.asarray(table_rows.marginals if conditional else table_rows.marginals.sum(axis=0)[None])
    margC = xp.asarray(tc.marginals if conditional else tc.marginals.sum(axis=0)[None])
    sizes = xp.asarray(table_rows.class_sizes if conditional else np.array([float(table_rows.total)]))
    need_tc = s_tc != 0.0
    # bytes per output cell: the counts, their float64 copy and phi temporaries, the row/column sums
    per_cell = C * nbI * nbJ * (np.dtype(table_rows.count_dtype).itemsize + 24) + 8 * C * (nbI + nbJ) * 3 + 64
    bs = int(max(16, min(max(r, m_cols), np.sqrt(backend.block_budget() / per_cell))))
    other = None if same else tc.backend
    d_rows = xp.asarray(row_idx)
    for i0 in range(0, r, bs):
        Ipos = slice(i0, min(r, i0 + bs))
        I = row_idx[Ipos]
        I_arg = slice(int(I[0]), int(I[-1]) + 1) if np.all(np.diff(I) == 1) else I
        dI = d_rows[Ipos]
        for j0 in range(i0 if symmetric_blocks else 0, m_cols, bs):
            J = slice(j0, min(m_cols, j0 + bs))
            G = backend.joint_device(I_arg, J, per_class=conditional, other=other)
            T, Tc = _array_phi_sums(xp, G, margR[:, dI], margC[:, J], sizes, nbI, nbJ, need_tc)
            del G
            base = s_t * T + (s_tc * Tc if need_tc else 0.0)
            block = r_up[dI][:, None] + c_up[J][None, :] + base
            if symmetric_blocks:
                lower = r_lo[J][:, None] + c_lo[dI][None, :] + base.T  # out[j, i] of the mirrored block
                if j0 == i0:  # the diagonal block: its lower triangle mirrors its upper one, as on the CPU
                    k = xp.arange(block.shape[0])
                    block = xp.where(k[:, None] > k[None, :], lower, block)
                else:
                    out[J, Ipos] = host(lower)
            out[Ipos, J] = host(block)


def _stratified_information(table_rows, table_cols, kind, rows, base, dtype, out, n_workers):
    """``sum_b w_b`` of the information matrix within every stratum b (:class:`CodeTable` ``strata=``).

    ``"mi"`` and ``"mi_given_class"`` are one conditional pass with the strata (and classes) as the groups
    (:meth:`CodeTable.strata_as_groups`).  For ``"cmi"`` and ``"cmi_mean"`` each stratum is computed alone; a stratum
    with a single class carries no class-conditional information (every entry, diagonal I(X_i; C) included, is 0
    within it) and is skipped.
    """
    if table_cols is not None:
        raise ValueError("stratified (batch-aware) information is gene x gene only: pass table_cols=None")
    if kind in ("mi", "mi_given_class"):
        t = table_rows.strata_as_groups(by_class=kind == "mi_given_class")
        return pairwise_information(t, None, "mi_given_class" if t.n_classes > 1 else "mi", rows=rows, base=base,
                                    dtype=dtype, out=out, n_workers=n_workers)
    r = table_rows.n_genes if rows is None else len(rows)
    if out is None:
        out = np.zeros((r, table_rows.n_genes), dtype=dtype)
    else:
        out[...] = 0
    part = None  # one buffer for every stratum's matrix
    for w, t, _ in table_rows.stratum_tables():
        if np.count_nonzero(t.class_sizes) < 2:
            continue
        part = pairwise_information(t, None, kind, rows=rows, base=base, dtype=dtype, n_workers=n_workers,
                                    out=part)
        if w != 1.0:
            np.multiply(part, w, out=part)
        np.add(out, part, out=out)
    return out


skip_failed_cache_writes(globals())  # numba's cache is an optimisation: a full disk must not fail a selection
