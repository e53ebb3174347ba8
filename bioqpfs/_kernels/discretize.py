"""Discretisation of expression matrices into small integer codes (samples x genes, ``uint8``).

:func:`codes` is the one entry point: every measure (:mod:`bioqpfs.measures`) and every selector
discretises through it, with one parameter name and one set of rules (:data:`DISCRETIZATIONS`).
Every rule returns ``codes`` with values ``0..k_g-1`` for gene ``g`` (empty bins removed, so ``k_g``
is the number of distinct levels actually used) -- the form the counting kernels in
:mod:`bioqpfs._kernels.information` expect.  Dense and sparse inputs give identical codes.

:func:`vector_codes` is the same mean +- sd / equal-frequency rule for one vector inside a numba
loop (k-means re-discretises a cluster's running mean after every assignment,
:mod:`bioqpfs._kernels.kmeans`): a call of :func:`codes` costs ~150 us there against ~3 us.
"""
from __future__ import annotations

import contextlib
import contextvars
import math

import numpy as np
import scipy.sparse as sp
from numba import njit

from .._jit import skip_failed_cache_writes
from .correlation import (
    EXTREME_EXP,
    column_blocks,
    csc_arrays,
    csc_float64,
    dense_columns,
    shared_column_moments,
)

__all__ = ["codes", "resolve_discretization", "DISCRETIZATIONS", "AUTO_ZERO_FRACTION", "AUTO_RULES", "vector_codes",
           "compact_codes", "mean_sd_codes", "quantile_codes", "zero_quantile_codes", "mdl_codes", "MAX_LEVELS",
           "MDL_MAX_LEVELS", "codes_from_edges", "zero_quantile_rule", "zero_quantile_edges", "linear_quantile_ranks",
           "numpy_lerp", "check_n_bins", "bin_presence", "bin_ranks"]

MAX_LEVELS = 255  # codes are uint8
#: the rules of :func:`codes` (``None``: the input already holds integer levels)
DISCRETIZATIONS = ("mean_sd", "quantile", "zero_quantile", "mdl", "auto", None)
#: ``discretization="auto"`` uses ``"zero_quantile"`` when at least this fraction of the entries of X is exactly
#: zero (sparse single-cell data: 67% on pbmc68k_reduced's log-normalised .raw) and ``"mean_sd"`` otherwise
#: (microarrays: 0% on SRBCT, Colon, Leukemia)
AUTO_ZERO_FRACTION = 0.25
#: most levels MDL gives a gene (see :func:`mdl_codes`): the counting cost grows with the square of the levels
MDL_MAX_LEVELS = 8


def _is_dask(X):
    from .counting_dask import is_dask_array

    return is_dask_array(X)


#: the rules ``discretization="auto"`` resolves to (:func:`resolve_discretization`)
AUTO_RULES = ("zero_quantile", "mean_sd")


def resolve_discretization(X, discretization):
    """The concrete rule ``discretization`` stands for on X: ``"auto"`` -> ``"zero_quantile"`` for zero-inflated
    data (at least :data:`AUTO_ZERO_FRACTION` exact zeros), else ``"mean_sd"``; other values unchanged."""
    if not (isinstance(discretization, str) and discretization == "auto"):
        return discretization
    n, m = X.shape
    if _is_dask(X):
        from .discretize_dask import dask_zero_fraction

        return "zero_quantile" if dask_zero_fraction(X) >= AUTO_ZERO_FRACTION else "mean_sd"
    nonzero = X.count_nonzero() if hasattr(X, "count_nonzero") and not isinstance(X, np.ndarray) else \
        np.count_nonzero(X)
    return "zero_quantile" if n * m and 1.0 - nonzero / (n * m) >= AUTO_ZERO_FRACTION else "mean_sd"


def codes(X, discretization="mean_sd", *, n_bins=3, y_codes=None, feature_names=None):
    """``(codes, n_levels)`` of X by the rule ``discretization``: the one discretisation entry point.

    Parameters
    ----------
    X : ndarray, scipy.sparse matrix or dask.array.Array, shape (n_samples, n_genes)
        Validated expression (:func:`bioqpfs._validation.check_matrix`: float32/float64, CSR/CSC), or
        integer codes (any integer dtype) for ``discretization=None``, which are used as they are.  A Dask
        array (chunked by samples; numpy or scipy.sparse chunks) gives lazy Dask codes
        (:mod:`bioqpfs._kernels.discretize_dask`: ``"mean_sd"``, ``"quantile"``, ``"zero_quantile"`` and ``None``,
        the same codes as in memory; ``"auto"`` resolves by a pass counting the zeros).
    discretization : {"mean_sd", "quantile", "zero_quantile", "mdl", "auto", None}
        ``"mean_sd"``: :func:`mean_sd_codes` (QPFS section 2.5); ``"quantile"``: :func:`quantile_codes`;
        ``"zero_quantile"``: :func:`zero_quantile_codes`; ``"mdl"``: :func:`mdl_codes` (needs ``y_codes``);
        ``"auto"``: :func:`resolve_discretization`; ``None``: :func:`compact_codes` (X holds levels).
    n_bins : int
        Bins of ``"quantile"`` and ``"zero_quantile"``.
    y_codes : ndarray of int, optional
        Class codes ``0..C-1``, for ``"mdl"``.
    feature_names : sequence of str, optional
        Gene names for the messages of ``discretization=None``.

    Returns
    -------
    codes : ndarray of uint8 (a dask array for a dask X), shape (n_samples, n_genes)
    n_levels : ndarray of int64, shape (n_genes,)
    """
    discretization = resolve_discretization(X, discretization)
    if _is_dask(X):  # codes stay a lazy Dask array with X's sample chunks
        from .discretize_dask import dask_codes

        return dask_codes(X, discretization, n_bins=n_bins, feature_names=feature_names)
    from .._validation import memory_guard

    memory_guard(X.shape[0] * X.shape[1], f"the {X.shape[0]} x {X.shape[1]} discretised codes (one byte each)",
                 ["genes", "lazy", "samples"])
    if discretization is None:
        return compact_codes(X, feature_names=feature_names)
    if discretization == "mean_sd":
        return mean_sd_codes(X)
    if discretization == "quantile":
        return quantile_codes(X, n_bins)
    if discretization == "zero_quantile":
        return zero_quantile_codes(X, n_bins)
    if discretization == "mdl":
        if y_codes is None:
            raise ValueError("discretization='mdl' is supervised: pass the class labels y")
        return mdl_codes(X, y_codes)
    raise ValueError(f"unknown discretization {discretization!r}; choose one of {DISCRETIZATIONS}")


def compact_codes(X, *, feature_names=None):
    """Map the integer values of each gene to consecutive codes ``0..k-1`` (in sorted order).

    Used for ``discretization=None``: the input already holds discrete levels, coded in any
    integers (``0..k-1``, ``1..4``, ``{-2, 0, 2}``...).  Non-integer values raise ``ValueError``
    naming the gene.  An integer-typed X (e.g. codes from :func:`codes`) is read as integers, without a
    float64 copy.

    Returns
    -------
    codes : ndarray of uint8, shape (n_samples, n_genes)
    n_levels : ndarray of int, shape (n_genes,)
    """
    n, m = X.shape
    integer = isinstance(X, np.ndarray) and X.dtype.kind in "iub"
    if integer and X.size and X.min() >= 0 and X.max() < 256:
        # small non-negative integers (e.g. codes from :func:`codes`): the values are bins, compacted in place on a
        # uint8 copy by the parallel presence / rank passes (100,000 x 2,000 codes: seconds per 64 MB block before)
        codes = X.astype(np.uint8)
        n_levels = _compact_inplace(codes, int(X.max()) + 1)
        _check_max_levels(n_levels, 0, feature_names)
        return codes, n_levels
    codes = np.empty((n, m), dtype=np.uint8)
    n_levels = np.empty(m, dtype=np.int64)
    for start, stop in column_blocks(X):
        # integers: their own dtype (uint64 past 2**63 would wrap in int64); the span is taken in float64 below
        block = X[:, start:stop] if integer else dense_columns(X, start, stop)
        bad = np.zeros(0, np.int64) if integer else np.flatnonzero((block != np.round(block)).any(axis=0))
        if bad.size:
            from .._validation import describe_indices

            names = None if feature_names is None else np.asarray(feature_names)[start:]
            raise ValueError(
                f"discretization=None needs integer-coded data, but gene(s) {describe_indices(bad, names)} "
                "hold non-integer values; pass discretization='mean_sd' (or 'quantile'/'mdl') to discretise them"
            )
        lo = block.min(axis=0)
        span = block.max(axis=0).astype(np.float64) - lo.astype(np.float64)   # int64 would overflow past 2**63
        if span.size and span.max() < 4096:
            # presence table of each offset value per gene -> rank of each value among the present ones
            offs = (block - lo).astype(np.int64)
            present = np.zeros((int(span.max()) + 1, stop - start), dtype=bool)
            present[offs, np.arange(stop - start)[None, :]] = True
            rank = np.cumsum(present, axis=0) - 1
            out = rank[offs, np.arange(stop - start)[None, :]]
            levels = present.sum(axis=0)
        else:
            out = np.empty(block.shape, dtype=np.int64)
            levels = np.empty(stop - start, dtype=np.int64)
            for j in range(stop - start):
                u, inv = np.unique(block[:, j], return_inverse=True)
                out[:, j] = inv
                levels[j] = u.size
        _check_max_levels(levels, start, feature_names)
        codes[:, start:stop] = out
        n_levels[start:stop] = levels
    return codes, n_levels


def _check_max_levels(levels, start, feature_names):
    """A clear error naming the first gene (``start`` + position) with more than :data:`MAX_LEVELS` levels."""
    if levels.size and levels.max() > MAX_LEVELS:
        j = int(np.argmax(levels))
        raise ValueError(
            f"gene {feature_names[start + j] if feature_names is not None else start + j} has {levels[j]} distinct "
            f"levels; discretization=None supports at most {MAX_LEVELS} -- discretise continuous data instead"
        )


def _column_mean_sd(X):
    """Per-gene ``(mean, sd, s)`` of ``X[:, g] / s[g]``: sample standard deviation (ddof=1, as R's
    ``sd``), float64; ``s`` is the exact power-of-two divisor of
    :func:`bioqpfs._kernels.correlation.column_scales` (1 except for genes of extreme magnitude,
    so ordinary genes get exactly the plain formulas)."""
    # the moments of the correlation kernels (blockwise for a dense X): ``ss / (n - 1)`` is numpy's
    # ``var(ddof=1)`` of the whole matrix, bit for bit; those of ``prepare``'s constant-gene test when X is the
    # call's X or its gene subset (computed once per call)
    mean, ss, s = shared_column_moments(X)
    var = ss / (X.shape[0] - 1)
    return mean, np.sqrt(np.maximum(var, 0.0)), s


#: beyond this many edges per gene a code is found by binary search in the gene's (sorted) edges instead of one
#: comparison pass per edge (the fine bins of ``relevance_bins="per_class"``: 31 edges)
SEARCH_FROM_EDGES = 4


def codes_from_edges(X, edges, offset=None, zero_rule=False):
    """codes[s, g] = number of edges[:, g] strictly below X[s, g] (bins are right-closed; each gene's edges are
    non-decreasing, ``+inf`` pads), plus ``offset[g]`` (uint8, default 0); with ``zero_rule`` a zero of X gets
    code 0 whatever the edges (the ``"zero_quantile"`` rule, :func:`zero_quantile_rule`).

    Parallel over runs of samples (a CSC matrix: of genes) on the worker pool, reading X as it is -- dense float32
    or float64, CSR or CSC without a dense copy; a sparse matrix's zeros get each gene's code of 0.  (Per 64 MB
    column block with numpy it was 1.35 s of a 5.2 s ``mean_sd`` discretisation of 20,000 x 5,000 CSR on 2 cores.)
    """
    from .information import run_ranges, split_ranges

    n, m = X.shape
    edges_t = np.ascontiguousarray(np.asarray(edges, dtype=np.float64).T)
    offset = np.zeros(m, dtype=np.uint8) if offset is None else np.ascontiguousarray(offset, dtype=np.uint8)
    zero_rule = bool(zero_rule)
    codes = np.empty((n, m), dtype=np.uint8)
    search = edges_t.shape[1] >= SEARCH_FROM_EDGES
    if sp.issparse(X) and X.format in ("csr", "csc"):
        zero = np.zeros(m, dtype=np.uint8) if zero_rule else \
            _codes_of_values(np.zeros(m), np.arange(m), edges_t, search) + offset
        ptr = X.indptr.astype(np.int64)
        kernel, parts = (_codes_csr, n) if X.format == "csr" else (_codes_csc, m)
        run_ranges(lambda _, lo, hi: kernel(X.data, X.indices, ptr, edges_t, zero, offset, zero_rule, search, codes,
                                            lo, hi), split_ranges(parts))
        return codes
    if sp.issparse(X):
        return codes_from_edges(X.tocsr(), edges, offset, zero_rule)
    block = np.asarray(X)
    if block.dtype not in (np.float32, np.float64):
        block = block.astype(np.float64)
    run_ranges(lambda _, lo, hi: _codes_dense(block, edges_t, offset, zero_rule, search, codes, lo, hi),
               split_ranges(n))
    return codes


@njit(inline="always")
def _edges_below(v, e):
    """How many of the sorted edges ``e`` lie strictly below ``v`` (a left bisection)."""
    lo, hi = 0, e.size
    while lo < hi:
        mid = (lo + hi) // 2
        if e[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(inline="always")
def _code_of(v, e, search):
    """Edges of ``e`` strictly below ``v``: by bisection (``search``), else by counting (any order)."""
    if search:
        return _edges_below(v, e)
    c = 0
    for k in range(e.size):
        if v > e[k]:
            c += 1
    return c


@njit(cache=True)
def _codes_of_values(vals, cols, edges_t, search):
    out = np.empty(vals.size, dtype=np.uint8)
    for i in range(vals.size):
        out[i] = _code_of(vals[i], edges_t[cols[i]], search)
    return out


@njit(inline="always")
def _entry_code(v, e, offset, zero_rule, search):
    """The code of one stored value: 0 for a zero under the zero rule, else ``offset`` + edges below it."""
    if zero_rule and v == 0:
        return np.uint8(0)
    return np.uint8(offset + _code_of(v, e, search))


@njit(nogil=True, cache=True)
def _codes_dense(block, edges_t, offset, zero_rule, search, out, lo, hi):
    for s in range(lo, hi):
        for g in range(block.shape[1]):
            out[s, g] = _entry_code(block[s, g], edges_t[g], offset[g], zero_rule, search)


@njit(nogil=True, cache=True)
def _codes_csr(data, indices, indptr, edges_t, zero, offset, zero_rule, search, out, lo, hi):
    for s in range(lo, hi):
        row = out[s]
        row[:] = zero
        for k in range(indptr[s], indptr[s + 1]):
            g = indices[k]
            row[g] = _entry_code(data[k], edges_t[g], offset[g], zero_rule, search)


@njit(nogil=True, cache=True)
def _codes_csc(data, indices, indptr, edges_t, zero, offset, zero_rule, search, out, lo, hi):
    for g in range(lo, hi):
        z = zero[g]
        for s in range(out.shape[0]):
            out[s, g] = z
        e = edges_t[g]
        for k in range(indptr[g], indptr[g + 1]):
            out[indices[k], g] = _entry_code(data[k], e, offset[g], zero_rule, search)


def bin_presence(codes, n_bins):
    """``present[a, g]``: some sample of gene g has code a (bool, ``(n_bins, n_genes)``; codes below ``n_bins``).

    Runs of samples in parallel on the worker pool, each marking its own table, then OR-ed."""
    from .information import run_ranges, split_ranges

    codes = np.asarray(codes)
    n, m = codes.shape
    if n == 0 or m == 0:
        return np.zeros((n_bins, m), dtype=bool)
    ranges = split_ranges(n)
    tables = np.zeros((len(ranges), n_bins, m), dtype=bool)
    run_ranges(lambda p, lo, hi: _presence(codes, tables[p], lo, hi), ranges)
    return tables.any(axis=0)


@njit(nogil=True, cache=True)
def _presence(codes, table, lo, hi):
    for s in range(lo, hi):
        for g in range(codes.shape[1]):
            table[codes[s, g], g] = True


@njit(nogil=True, cache=True)
def _remap_codes(codes, rank, lo, hi):
    for s in range(lo, hi):
        for g in range(codes.shape[1]):
            codes[s, g] = rank[codes[s, g], g]


def bin_ranks(present):
    """``rank[a, g]``: the new code of bin a of gene g once the empty bins are removed (uint8)."""
    return (np.cumsum(present, axis=0) - 1).astype(np.uint8)


def _compact_inplace(codes, n_bins):
    """Remove empty bins so every gene uses codes 0..k-1; returns n_levels.  The codes are rewritten (one parallel
    pass) only when some gene has an empty bin below a used one."""
    from .information import run_ranges, split_ranges

    present = bin_presence(codes, n_bins)
    rank = bin_ranks(present)
    if not np.all((rank == np.arange(n_bins)[:, None]) | ~present):
        run_ranges(lambda _, lo, hi: _remap_codes(codes, rank, lo, hi), split_ranges(codes.shape[0]))
    return present.sum(axis=0).astype(np.int64)


def mean_sd_edges(mean, sd, s, split=None):
    """The ``(2, genes)`` edges ``mu -+ sd`` of :func:`mean_sd_codes` (moments of ``X / s``, scaled back), with
    the genes ``split`` (a boolean mask) cut at the mean instead: edges ``(mu, +inf)``, two bins
    (:func:`mean_sd_codes`: a non-constant gene that mean +- sd leaves in one bin)."""
    with np.errstate(over="ignore"):  # an edge beyond the float range is +-inf: no value crosses it
        edges = np.vstack([mean - sd, mean + sd]) * s
        if split is not None and np.any(split):
            edges[0, split], edges[1, split] = (mean * s)[split], np.inf
    return edges


def one_level_spread(n_levels, sd):
    """Genes that mean +- sd left in one bin although they vary (``sd > 0``): :func:`mean_sd_codes` cuts them at
    the mean instead."""
    return (np.asarray(n_levels) == 1) & (np.asarray(sd) > 0)


def mean_sd_codes(X):
    """Three bins per gene, QPFS section 2.5: (-inf, mu-sd], (mu-sd, mu+sd], (mu+sd, inf).

    ``mu`` is the gene's sample mean and ``sd`` its sample standard deviation (ddof=1).
    A constant gene (sd = 0) falls entirely in the first bin.  A gene that varies but has every value within
    ``mu -+ sd`` -- a two-valued gene about half of whose samples hold each value (a binary marker equal to two
    balanced classes, 0/1 or bool data) -- would get one code and no information at all; it is cut at the mean
    instead, (-inf, mu], (mu, inf) (two levels), the rule the paper's bins give any other two-valued gene.
    """
    mean, sd, s = _column_mean_sd(X)
    codes = codes_from_edges(X, mean_sd_edges(mean, sd, s))
    n_levels = _compact_inplace(codes, 3)
    split = one_level_spread(n_levels, sd)
    if split.any():  # rare (nearly two-point genes): only their columns are coded again
        genes = np.flatnonzero(split)
        sub = X[:, genes] if not sp.issparse(X) or X.format in ("csr", "csc") else X.tocsc()[:, genes]
        part = codes_from_edges(sub, mean_sd_edges(mean, sd, s, split)[:, genes])
        n_levels[genes] = _compact_inplace(part, 3)
        codes[:, genes] = part
    return codes, n_levels


def quantile_codes(X, n_bins):
    """Equal-frequency bins: edges at the ``1/n_bins, ..., (n_bins-1)/n_bins`` sample quantiles.

    Bins are right-closed; ties can leave a bin empty, in which case the gene gets fewer levels.  The edges are
    ``np.quantile``'s (``'linear'``, bit for bit).  With a few bins they come from ``np.quantile``'s partial sorts
    and the codes from :func:`codes_from_edges`; from :data:`SORT_FROM_RANKS` order statistics on (``n_bins >= 7``,
    e.g. the 255 levels of the pair-order information) each gene is argsorted once (numpy's sort, genes split over
    the worker pool), its edges read off the sorted values and its codes assigned by one walk up them -- the same
    codes: 20,000 x 2,000 float64 at 255 levels 5.0 -> 1.9 s on 2 cores (254 quantiles by partition were 3.6 s).
    A sparse X is never densified: :func:`sparse_quantile_edges` finds the edges from the order statistics of each
    gene's non-zero values and its count of zeros, and :func:`codes_from_edges` codes the stored entries.
    """
    n_bins = check_n_bins(n_bins)
    n, m = X.shape
    if sp.issparse(X) and n > 0:  # order statistics of the non-zero values alone; the zeros never densified
        codes = codes_from_edges(X if X.format in ("csr", "csc") else X.tocsr(), sparse_quantile_edges(X, n_bins))
        return codes, _compact_inplace(codes, n_bins)
    if 2 * (n_bins - 1) < SORT_FROM_RANKS or n == 0:
        q = np.arange(1, n_bins) / n_bins
        edges = np.empty((n_bins - 1, m))
        for start, stop in column_blocks(X):
            edges[:, start:stop] = np.quantile(dense_columns(X, start, stop), q, axis=0)
        codes = codes_from_edges(X, edges)
        return codes, _compact_inplace(codes, n_bins)
    from .information import run_ranges, split_ranges

    lo, hi, t = linear_quantile_ranks(np.int64(n), np.arange(1, n_bins) / n_bins)
    codes = np.empty((n, m), dtype=np.uint8)
    for start, stop in column_blocks(X, max_bytes=16 * 2**20):  # the block, its argsort and sorted copy: 48 MB
        block = dense_columns(X, start, stop).T  # genes x samples
        g = stop - start
        order = np.empty((g, n), dtype=np.int64)
        ordered = np.empty((g, n))

        def sort_genes(_, a, b):
            order[a:b] = np.argsort(block[a:b], axis=1)
            ordered[a:b] = np.take_along_axis(block[a:b], order[a:b], axis=1)

        run_ranges(sort_genes, split_ranges(g))
        edges = numpy_lerp(ordered[:, lo], ordered[:, hi], t)  # (genes, n_bins - 1), np.quantile's
        out = np.empty((g, n), dtype=np.uint8)
        run_ranges(lambda _, a, b: _codes_of_sorted(ordered, order, edges, out, a, b), split_ranges(g))
        codes[:, start:stop] = out.T
    return codes, _compact_inplace(codes, n_bins)


def sparse_quantile_edges(X, n_bins, form=None):
    """``np.quantile``'s equal-frequency edges of every column of a sparse X, bit for bit, ``(n_bins - 1, genes)``,
    without densifying it: a column with ``neg`` negative values and ``z`` zeros has as its rank-r order statistic
    the r-th smallest of its non-zero values for ``r < neg``, 0 for ``neg <= r < neg + z`` and the (r - z)-th smallest
    non-zero value beyond (explicit zeros are zeros); the two order statistics and the weight of numpy's
    ``'linear'`` rule (:func:`linear_quantile_ranks`, :func:`numpy_lerp`) then give the edge.  The non-zero
    values' order statistics come from partial sorts per gene (:func:`_segment_order_statistics`), in blocks of
    genes of at most 16 MB of ranks.  The 255-level pair-order codes of 40,000 x 2,000 CSR counts at 21% non-zero
    took 3.8 s densified (1.2 s of it slicing CSR column blocks) on 2 cores.  ``form``: X's
    :class:`SortedColumns`, read instead (default: the shared one of :func:`sharing_sorted_columns`, else a fresh
    copy that the partial sorts reorder)."""
    from .information import run_ranges, split_ranges

    n, m = X.shape
    values, count, presorted = (form.values, form.count, True) if form is not None else _sparse_nonzero(X)
    bounds = np.concatenate([[0], np.cumsum(count)])
    neg = np.zeros(m, dtype=np.int64)  # each gene's negative values (no per-entry cumulative count: 8 bytes each)
    run_ranges(lambda _, lo, hi: _count_negative(values, bounds, neg, lo, hi), split_ranges(m))
    zeros = n - count
    lo, hi, t = linear_quantile_ranks(np.int64(n), np.arange(1, n_bins) / n_bins)
    full = np.concatenate([lo, hi])  # the ranks in a whole column, the same for every gene
    k = n_bins - 1
    edges = np.empty((k, m))
    step = max(1, 2**21 // full.size)
    for g0 in range(0, m, step):
        g1 = min(m, g0 + step)
        nb, zb = neg[g0:g1, None], zeros[g0:g1, None]
        in_zero = (full >= nb) & (full < nb + zb)
        ranks = np.where(in_zero, 0, np.where(full < nb, full, full - zb))
        stats = _segment_order_statistics(values, bounds[g0:g1 + 1], ranks, presorted)
        stats[in_zero] = 0.0
        edges[:, g0:g1] = numpy_lerp(stats[:, :k], stats[:, k:], t).T
    return edges


@njit(nogil=True, cache=True)
def _count_negative(values, bounds, out, lo, hi):
    """``out[g]``: the negative values among ``values[bounds[g]:bounds[g + 1]]`` for the genes ``lo..hi``."""
    for g in range(lo, hi):
        c = 0
        for k in range(bounds[g], bounds[g + 1]):
            if values[k] < 0:
                c += 1
        out[g] = c


@njit(nogil=True, cache=True)
def _codes_of_sorted(ordered, order, edges, out, lo, hi):
    """``out[g, order[g, r]]`` = the edges of ``edges[g]`` strictly below ``ordered[g, r]``, for each gene's values in
    ascending order (``order``: their argsort): one walk up the non-decreasing edges per gene."""
    for g in range(lo, hi):
        e = edges[g]
        j = 0
        for r in range(ordered.shape[1]):
            v = ordered[g, r]
            while j < e.size and e[j] < v:
                j += 1
            out[g, order[g, r]] = j


def check_n_bins(n_bins):
    """``n_bins`` as an int, or a clear error: an integer between 2 and :data:`MAX_LEVELS` (codes are uint8)."""
    if isinstance(n_bins, (bool, np.bool_)) or not isinstance(n_bins, (int, np.integer)):
        raise TypeError(f"n_bins must be an integer between 2 and {MAX_LEVELS}, got {n_bins!r}")
    if not 2 <= n_bins <= MAX_LEVELS:
        raise ValueError(f"n_bins must be between 2 and {MAX_LEVELS}, got {n_bins}")
    return int(n_bins)


def zero_quantile_codes(X, n_bins):
    """Zero versus non-zero, then equal-frequency bins of the non-zero values: for sparse single-cell data.

    Gene g's code is 0 where ``X[s, g] == 0`` (not detected) and ``1..n_bins-1`` for its non-zero
    values, cut at the ``1/(n_bins-1), ..., (n_bins-2)/(n_bins-1)`` quantiles of those values alone
    (right-closed bins).  Mean +- sd bins put most of a zero-inflated gene's detected values and its
    zeros together or split the detected values by the zeros' weight; here detection is one level
    and the expression level among detecting cells the others.  A gene without zeros (dense,
    microarray-like) gets ``n_bins`` equal-frequency bins of all its values, as in
    :func:`quantile_codes`.  Sparse input is read without densifying it.  The quantiles are those of
    ``np.quantile`` (bit for bit, :func:`zero_quantile_edges`), found for a block of genes at once by
    partial sorts of their non-zero values; the codes are :func:`zero_quantile_rule` of the edges (the rule
    the Dask path applies per sample chunk).
    """
    n_bins = check_n_bins(n_bins)
    n, m = X.shape
    if sp.issparse(X):  # every gene's non-zero values at once (a CSR X transposed in parallel), or the shared sort
        values, count, presorted = _sparse_nonzero(X)
        edges, offset = zero_quantile_edges(values, count, n, n_bins, presorted)
        del values
        # codes row after row: the CSR kernel writes the codes in their memory order
        Xc = X if X.format in ("csr", "csc") else X.tocsr()
    else:
        edges = np.empty((n_bins - 1, m))
        offset = np.empty(m, dtype=np.uint8)
        Xc = X
        for start, stop in column_blocks(X):
            values, count = _nonzero_values(X, start, stop)
            edges[:, start:stop], offset[start:stop] = zero_quantile_edges(values, count, n, n_bins)
    codes = codes_from_edges(Xc, edges, offset, zero_rule=True)
    return codes, _compact_inplace(codes, n_bins)


def _nonzero_values(X, start, stop):
    """The non-zero values of columns ``start:stop`` (float64, column after column, a fresh array) and each
    column's count of them (explicit zeros of a sparse X are zeros)."""
    if sp.issparse(X):  # CSC
        lo, hi = X.indptr[start], X.indptr[stop]
        values = np.array(X.data[lo:hi], dtype=np.float64)
        gene = np.repeat(np.arange(stop - start), np.diff(X.indptr[start:stop + 1]))
        keep = values != 0
        return values[keep], np.bincount(gene[keep], minlength=stop - start)
    block = dense_columns(X, start, stop).T   # genes x samples: its boolean selection runs gene after gene
    nonzero = block != 0
    return block[nonzero], nonzero.sum(axis=1)


#: order statistics per segment from which a full sort is cheaper than numba's ``np.partition`` (one partition
#: pass per rank): 62 ranks (the 32 fine bins of the per-class relevance bins) of 230 values took 27 ms by
#: partition and 8 ms by sort for 765 genes, 4 ranks 7 ms and 8 ms
SORT_FROM_RANKS = 12


def _segment_order_statistics(values, bounds, ranks, presorted=False):
    """``out[j, r]``: the ``ranks[j, r]``-th smallest (0-based) of segment ``values[bounds[j]:bounds[j+1]]``
    (a partial sort of each segment: linear time per rank, as ``np.quantile``'s ``np.partition``; a sort for
    :data:`SORT_FROM_RANKS` ranks or more); runs of segments in parallel on the worker pool.  ``presorted``: every
    segment is ascending already (:class:`SortedColumns`), so the order statistics are read off (values untouched).
    NaN for an empty segment."""
    from .information import run_ranges, split_ranges

    out = np.full(ranks.shape, np.nan)
    n_segments = bounds.size - 1
    if presorted:
        filled = np.diff(bounds) > 0
        out[filled] = values[bounds[:-1][filled, None] + ranks[filled]]
        return out
    if n_segments > 0:
        run_ranges(lambda _, lo, hi: _order_statistics_of_segments(values, bounds, ranks, out, lo, hi),
                   split_ranges(n_segments))
    return out


@njit(nogil=True, cache=True)
def _order_statistics_of_segments(values, bounds, ranks, out, lo, hi):
    by_sort = ranks.shape[1] >= SORT_FROM_RANKS
    for j in range(lo, hi):
        if bounds[j + 1] > bounds[j]:
            segment = values[bounds[j]:bounds[j + 1]]
            part = np.sort(segment) if by_sort else np.partition(segment, ranks[j])
            for r in range(ranks.shape[1]):
                out[j, r] = part[ranks[j, r]]


class SortedColumns:
    """Every gene's non-zero values of a sparse X in ascending order, with the samples that hold them.

    One CSC copy (:func:`bioqpfs._kernels.correlation.csc_arrays`; explicit zeros dropped: they are zeros) whose
    columns are then sorted by value, genes in parallel on the worker pool.  Every equal-frequency rule reads it: the
    edges are order statistics read off the sorted values (bit for bit those of the partial sorts,
    :func:`zero_quantile_edges`, :func:`sparse_quantile_edges`), and :class:`SparseLevelCounts` counts every class in
    every level by one walk up each column, with no codes matrix.  The values keep a float32 X's dtype (exact in
    float64, where every order statistic is read and every comparison with an edge is made: the same bits) and are
    float64 otherwise: 8 or 12 bytes per stored entry (8 more while it is built).

    Attributes
    ----------
    values : ndarray of float32 (a float32 X) or float64, the non-zero values, gene after gene, ascending within a
        gene
    rows : ndarray of int32 (int64 beyond 2**31 samples), the sample of each value
    bounds : ndarray of int64, shape (n_genes + 1,), gene g's values are ``values[bounds[g]:bounds[g + 1]]``
    n_samples : int
    """

    def __init__(self, X):
        from .._validation import memory_guard
        from .information import run_ranges, split_ranges

        dtype = np.float32 if X.dtype == np.float32 else np.float64
        each = np.dtype(dtype).itemsize + 4
        memory_guard((each + 8) * X.nnz + 8 * X.shape[1], f"the sorted columns of the {X.shape[0]} x {X.shape[1]} "
                     f"sparse X ({X.nnz} stored values, {each} bytes each and 8 more while they are sorted)",
                     ["genes", "lazy", "samples"])
        values, rows, bounds = csc_arrays(X, dtype)
        if np.count_nonzero(values) < values.size:  # explicit zeros are zeros
            keep = values != 0
            kept = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
            values, rows, bounds = values[keep], rows[keep], kept[bounds]
        m = bounds.size - 1
        # several ranges per worker: genes differ in their counts of values, and so in their sorting time
        run_ranges(lambda _, lo, hi: _sort_segments(values, rows, bounds, lo, hi),
                   split_ranges(m, 4 * _n_workers()))
        self.values, self.rows, self.bounds, self.n_samples = values, rows, bounds, int(X.shape[0])

    @property
    def count(self):
        """Each gene's number of non-zero values (int64)."""
        return np.diff(self.bounds)


def _n_workers():
    from .information import n_workers

    return n_workers()


@njit(nogil=True, cache=True)
def _sort_segments(values, rows, bounds, lo, hi):
    """Sort ``values[bounds[g]:bounds[g + 1]]`` of every gene ``lo..hi`` in place, carrying ``rows`` along."""
    for g in range(lo, hi):
        a, b = bounds[g], bounds[g + 1]
        if b - a > 1:
            order = np.argsort(values[a:b])
            values[a:b] = values[a:b][order]
            rows[a:b] = rows[a:b][order]


#: the call-scoped :class:`SortedColumns` of :func:`sharing_sorted_columns`: ``[X, SortedColumns or None]``
_SHARED_SORTED = contextvars.ContextVar("bioqpfs_shared_sorted_columns", default=None)


@contextlib.contextmanager
def sharing_sorted_columns(X):
    """Within the block, the rules that read sorted columns of this very sparse X share one :class:`SortedColumns`.

    A selector that discretises X several times -- the default recipe codes it for Q (3 bins), for the per-class
    relevance bins (32 fine bins) and for the pair-order information (255 levels) -- sorts each gene once instead
    of once per rule.  The sorted form is built at its first use and dropped when the block ends; another
    matrix (a row subset, a copy) is not shared.  Outside such a block the few-bin rules keep their partial
    sorts (cheaper than a full sort for one rule), and :class:`SparseLevelCounts` builds its own sorted form."""
    token = _SHARED_SORTED.set([X, None])
    try:
        yield
    finally:
        _SHARED_SORTED.reset(token)


def shared_sorted_columns(X):
    """The :class:`SortedColumns` of X shared by the enclosing :func:`sharing_sorted_columns` (built now if it is
    the first use), or None when no block shares X."""
    shared = _SHARED_SORTED.get()
    if shared is None or shared[0] is not X:
        return None
    if shared[1] is None:
        shared[1] = SortedColumns(X)
    return shared[1]


def sorted_columns(X):
    """The :class:`SortedColumns` of the sparse X: the shared one (:func:`sharing_sorted_columns`) or a new one."""
    shared = shared_sorted_columns(X)
    return SortedColumns(X) if shared is None else shared


def _sparse_nonzero(X):
    """``(values, count, presorted)``: the non-zero values of the sparse X gene after gene (explicit zeros dropped)
    and each gene's count of them -- the shared sorted columns (``presorted``: ascending within a gene, in a float32
    X's dtype; not to be written) or a fresh float64 copy that the partial sorts may reorder."""
    shared = shared_sorted_columns(X)
    if shared is not None:
        return shared.values, shared.count, True
    Xc = csc_float64(X)
    values, count = Xc.data, np.diff(Xc.indptr).astype(np.int64)
    if np.count_nonzero(values) < values.size:  # explicit zeros are zeros
        kept = np.concatenate([[0], np.cumsum(values != 0, dtype=np.int64)])
        values, count = values[values != 0], kept[Xc.indptr[1:]] - kept[Xc.indptr[:-1]]
    return values, count, False


#: the rules :class:`SparseLevelCounts` counts from sorted columns
SORTED_RULES = ("quantile", "zero_quantile")


class SparseLevelCounts:
    """The levels of the ``"quantile"`` or ``"zero_quantile"`` codes of a sparse X and the count of every class in
    every level of every gene, from its sorted columns (:class:`SortedColumns`) without the codes matrix.

    The same levels as :func:`codes` (the same edges, bit for bit; empty bins removed, so gene g uses levels
    ``0..n_levels[g]-1``) and the same counts as counting those codes per class
    (:func:`bioqpfs._kernels.information.stratum_margins` and the implicit last level): integers, exact.  Each
    gene's edges cut its sorted values into runs (a binary search per edge), a run's samples are counted by their
    labels, and the zeros of each class are its size less its counted values.  At 100,000 x 2,000 sparse counts
    (11% non-zero) the 255-level codes alone took 2.9 s on 2 cores, a pass over 200 MB of codes; the runs read the
    22 million stored values once.

    Parameters
    ----------
    X : scipy.sparse matrix, shape (n_samples, n_genes)
    rule : {"quantile", "zero_quantile"}
    n_bins : int
    """

    def __init__(self, X, rule, n_bins):
        from .information import run_ranges, split_ranges

        if rule not in SORTED_RULES:
            raise ValueError(f"SparseLevelCounts counts the rules {SORTED_RULES}, got {rule!r}")
        n_bins = check_n_bins(n_bins)
        form = sorted_columns(X)
        n, m = X.shape
        if rule == "zero_quantile":
            edges, offset = zero_quantile_edges(form.values, form.count, n, n_bins, presorted=True)
            zero_code = np.zeros(m, dtype=np.int64)  # a gene without zeros has no zero to code
        else:
            edges = sparse_quantile_edges(X, n_bins, form=form)
            offset = np.zeros(m, dtype=np.uint8)
            zero_code = (edges < 0).sum(axis=0).astype(np.int64)  # the edges strictly below 0
        edges_t = np.ascontiguousarray(edges.T)
        offset = offset.astype(np.int64)
        ends = np.empty((m, n_bins - 1), dtype=np.int64)  # ends[g, j]: gene g's values at most edges[j, g]
        raw = np.zeros((m, n_bins), dtype=np.int64)  # every gene's samples at each code before compaction
        run_ranges(lambda _, lo, hi: _run_ends(form.values, form.bounds, edges_t, offset, zero_code, n, ends, raw, lo, hi),
                   split_ranges(m))
        present = raw > 0
        self.n_levels = present.sum(axis=1).astype(np.int64)
        self.rank = (np.cumsum(present, axis=1) - 1).astype(np.int64)  # a code's level once empty bins are gone
        self.form, self.ends, self.offset, self.zero_code = form, ends, offset, zero_code
        self._raw = raw

    @property
    def width(self):
        """The levels of the widest gene, at least 2 (the last axis of :meth:`counts`)."""
        return max(2, int(self.n_levels.max())) if self.n_levels.size else 2

    def pooled(self):
        """``(n_genes, width)``: the samples of every gene in each of its levels (float64)."""
        out = np.zeros((self._raw.shape[0], self.width))
        g, code = np.nonzero(self._raw)
        out[g, self.rank[g, code]] = self._raw[g, code]
        return out

    def counts(self, labels, n_labels, genes=None, first=0, last=None):
        """``(last - first, len(genes), width)``: the samples of label ``first..last-1`` (``labels``: a code
        ``0..n_labels-1`` per sample) of every gene of ``genes`` (a slice, default all) in each of its levels (float64)."""
        from .information import run_ranges, split_ranges

        labels = np.asarray(labels, dtype=np.int64)
        last = n_labels if last is None else last
        g0, g1, _ = (genes or slice(None)).indices(self.rank.shape[0])
        sizes = np.bincount(labels, minlength=n_labels)[first:last].astype(np.float64)
        out = np.zeros((last - first, g1 - g0, self.width))
        if g1 > g0 and last > first:
            f = self.form
            run_ranges(lambda _, lo, hi: _run_counts(f.rows, f.bounds, self.ends, self.offset, self.zero_code,
                                                     self.rank, labels, first, sizes, out, g0, lo, hi),
                       split_ranges(g1 - g0))
        return out


@njit(nogil=True, cache=True)
def _edge_end(values, a, b, e):
    """The first position in the sorted ``values[a:b]`` whose value exceeds ``e`` (a right bisection)."""
    lo, hi = a, b
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] <= e:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(nogil=True, cache=True)
def _run_ends(values, bounds, edges_t, offset, zero_code, n, ends, raw, lo, hi):
    """For genes ``lo..hi``: ``ends[g, j]``, the end of the run of sorted values with ``j`` edges below them (the
    values at most edge j), and ``raw[g, code]``, the samples at each code (the zeros at ``zero_code[g]``)."""
    k = ends.shape[1]
    for g in range(lo, hi):
        a, b = bounds[g], bounds[g + 1]
        start = a
        for j in range(k + 1):
            end = _edge_end(values, start, b, edges_t[g, j]) if j < k else b
            if j < k:
                ends[g, j] = end
            if end > start:
                raw[g, offset[g] + j] += end - start
            start = end
        if b - a < n:
            raw[g, zero_code[g]] += n - (b - a)


@njit(nogil=True, cache=True)
def _run_counts(rows, bounds, ends, offset, zero_code, rank, labels, first, sizes, out, g0, lo, hi):
    """``out[label - first, g - g0, level]`` for genes ``g0 + lo..g0 + hi`` (see :meth:`SparseLevelCounts.counts`)."""
    k = ends.shape[1]
    n_out = out.shape[0]
    for i in range(lo, hi):
        g = g0 + i
        start, b = bounds[g], bounds[g + 1]
        for j in range(k + 1):
            end = ends[g, j] if j < k else b
            if end > start:
                level = rank[g, offset[g] + j]
                for p in range(start, end):
                    c = labels[rows[p]] - first
                    if 0 <= c < n_out:
                        out[c, i, level] += 1.0
            start = end
        zero = rank[g, zero_code[g]]
        for c in range(n_out):  # each class's zeros: its size less its counted values
            held = 0.0
            for level in range(out.shape[2]):
                held += out[c, i, level]
            if sizes[c] > held:
                out[c, i, zero] += sizes[c] - held


def linear_quantile_ranks(count, q):
    """The two order statistics (0-based ranks) and the weight of ``np.quantile``'s default ``'linear'`` rule for
    ``count`` values: ``virtual = (count - 1) q``, ranks ``floor(virtual)`` and the next one (both the last at the
    top), weight ``virtual - floor(virtual)`` -- computed as numpy computes them, so edges are bit-identical."""
    virtual = (count - 1) * q
    i = np.floor(virtual)
    top = virtual >= count - 1
    return (np.where(top, count - 1, i).astype(np.int64), np.where(top, count - 1, i + 1).astype(np.int64),
            virtual - i)


def numpy_lerp(a, b, t):
    """numpy's linear interpolation of ``np.quantile`` (``numpy.lib._function_base_impl._lerp``), operation for
    operation, so that the edges are bit-identical: ``a + (b-a) t``, or ``b - (b-a)(1-t)`` where ``t >= 0.5``."""
    d = b - a
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(t >= 0.5, b - d * (1 - t), a + d * t)


def zero_quantile_edges(values, count, n_samples, n_bins, presorted=False):
    """Edges and offsets of the ``"zero_quantile"`` rule from each gene's non-zero values.

    ``values``: the genes' non-zero values, gene after gene (any order within a gene; reordered in place, unless
    ``presorted``: ascending within every gene, read as they are);
    ``count[g]``: how many are gene g's.  A gene with ``count == n_samples`` (no zeros) gets the ``n_bins - 1``
    equal-frequency edges of all its values and offset 0; another gene the ``n_bins - 2`` of its non-zero values
    (``+inf`` pads) and offset 1; an all-zero gene only ``+inf``.  Returns ``(edges (n_bins - 1, n_genes),
    offset uint8 (n_genes,))``.
    """
    count = np.asarray(count, dtype=np.int64)
    full = count == n_samples
    q = np.where(full[:, None], np.arange(1, n_bins)[None, :] / n_bins,   # (genes, n_bins - 1); NaN: no cut
                 np.append(np.arange(1, n_bins - 1) / (n_bins - 1), np.nan)[None, :])
    cut = ~np.isnan(q) & (count > 0)[:, None]
    lo, hi, t = linear_quantile_ranks(count[:, None], np.where(cut, q, 0.0))
    ranks = np.where(cut[:, :, None], np.stack([lo, hi], axis=2), 0).reshape(count.size, -1)
    stats = _segment_order_statistics(values, np.concatenate([[0], np.cumsum(count)]), ranks, presorted)
    stats = stats.reshape(count.size, n_bins - 1, 2)
    edges = np.where(cut, numpy_lerp(stats[:, :, 0], stats[:, :, 1], t), np.inf).T
    return np.ascontiguousarray(edges), np.where(full, 0, 1).astype(np.uint8)


def zero_quantile_rule(x, edges, offset):
    """Codes of a block by the ``"zero_quantile"`` rule: 0 where ``x == 0``, else ``offset[g]`` plus the number of
    ``edges[:, g]`` strictly below ``x`` (right-closed bins; ``+inf`` edges pad genes with fewer cuts).

    ``offset`` is 1 for a gene with zeros (code 0 is "not detected") and 0 for a gene without (its ``n_bins``
    equal-frequency bins).  Dense or scipy.sparse ``x`` (only the stored entries are read; explicit zeros are
    zeros); uint8 codes, dense.  One rule for :func:`zero_quantile_codes` and the Dask path (per sample chunk).
    """
    return codes_from_edges(x, edges, offset, zero_rule=True)


@njit(cache=True)
def entropy_of_counts(counts, total, bits):
    """Shannon entropy of a vector of counts summing to ``total``: in bits (log2) or nats (ln)."""
    h = 0.0
    for c in counts:
        if c > 0:
            p = c / total
            h -= p * (np.log2(p) if bits else np.log(p))
    return h


@njit(cache=True)
def _mdl_cuts_sorted(v, y, n_classes):
    """Fayyad & Irani (1993) recursive minimum-description-length cut points of sorted values ``v``.

    A cut T of segment S (n samples, k classes present, class entropy Ent(S)) into S1, S2 is
    accepted when  Gain > log2(n-1)/n + Delta/n,  Delta = log2(3^k - 2) - [k Ent(S) - k1 Ent(S1) - k2 Ent(S2)],
    with Gain = Ent(S) - |S1|/n Ent(S1) - |S2|/n Ent(S2); T minimises the weighted entropy among cuts
    between distinct values.  Returns the accepted cut values (midpoints), unsorted, and the depth of
    the recursion at which each was accepted (0: the first cut of the whole gene).
    """
    n = v.shape[0]
    cum = np.zeros((n + 1, n_classes), dtype=np.float64)
    for t in range(n):
        cum[t + 1] = cum[t]
        cum[t + 1, y[t]] += 1.0
    cuts = np.empty(n, dtype=np.float64)
    depths = np.empty(n, dtype=np.int64)
    n_cuts = 0
    stack = np.empty((2 * n + 2, 3), dtype=np.int64)
    top = 0
    stack[0, 0] = 0
    stack[0, 1] = n
    stack[0, 2] = 0
    top = 1
    while top > 0:
        top -= 1
        s = stack[top, 0]
        e = stack[top, 1]
        depth = stack[top, 2]
        size = e - s
        if size < 2:
            continue
        tot = cum[e] - cum[s]
        ent = entropy_of_counts(tot, size, True)
        best = -1
        best_w = np.inf
        for t in range(s + 1, e):  # cut between t-1 and t
            if v[t] == v[t - 1]:
                continue
            left = cum[t] - cum[s]
            right = tot - left
            w = ((t - s) * entropy_of_counts(left, t - s, True)
                 + (e - t) * entropy_of_counts(right, e - t, True)) / size
            if w < best_w - 1e-12:
                best_w = w
                best = t
        if best < 0:
            continue
        left = cum[best] - cum[s]
        right = tot - left
        e1 = entropy_of_counts(left, best - s, True)
        e2 = entropy_of_counts(right, e - best, True)
        k = 0
        k1 = 0
        k2 = 0
        for c in range(n_classes):
            k += tot[c] > 0
            k1 += left[c] > 0
            k2 += right[c] > 0
        gain = ent - best_w
        delta = np.log2(3.0**k - 2.0) - (k * ent - k1 * e1 - k2 * e2)
        if gain > (np.log2(size - 1.0) + delta) / size:
            cuts[n_cuts] = 0.5 * (v[best - 1] + v[best])
            depths[n_cuts] = depth
            n_cuts += 1
            stack[top, 0] = s
            stack[top, 1] = best
            stack[top, 2] = depth + 1
            stack[top + 1, 0] = best
            stack[top + 1, 1] = e
            stack[top + 1, 2] = depth + 1
            top += 2
    return cuts[:n_cuts], depths[:n_cuts]


def mdl_codes(X, y, max_levels=None):
    """Supervised Fayyad--Irani MDL discretisation of every gene against class codes ``y``.

    A gene with no accepted cut gets a single level (it carries no class information
    at this sample size).

    At most ``max_levels`` levels per gene (default :data:`MDL_MAX_LEVELS`): on data with repeated
    samples (e.g. cells resampled so that every type counts equally) the MDL criterion accepts cuts
    between copies and can give a gene 100+ levels, and the MI counting grows with the square of the
    largest number of levels (a 2,400 x 765 PBMC matrix had not finished QPFS in 5 minutes).  Beyond
    the bound, the cuts of the shallowest recursion depths are kept (the first, most informative
    splits; ties in the order MDL accepted them), and a warning says how many genes were cut back.
    """
    import warnings

    max_levels = MDL_MAX_LEVELS if max_levels is None else int(max_levels)
    n, m = X.shape
    y = np.asarray(y, dtype=np.int64)
    n_classes = int(y.max()) + 1
    codes = np.empty((n, m), dtype=np.uint8)
    n_levels = np.empty(m, dtype=np.int64)
    n_bounded, most = 0, 0
    for start, stop in column_blocks(X):
        block = dense_columns(X, start, stop)
        order = np.argsort(block, axis=0, kind="stable")
        for j in range(stop - start):
            col = block[:, j]
            o = order[:, j]
            cuts, depths = _mdl_cuts_sorted(col[o], y[o], n_classes)
            if cuts.size >= max_levels:
                n_bounded += 1
                most = max(most, cuts.size + 1)
                cuts = cuts[np.argsort(depths, kind="stable")[: max_levels - 1]]
            cuts = np.sort(cuts)
            codes[:, start + j] = np.searchsorted(cuts, col, side="left")
            n_levels[start + j] = cuts.size + 1
    if n_bounded:
        warnings.warn(f"discretization='mdl' cut {n_bounded} gene(s) into more than {max_levels} levels (up to "
                      f"{most}; typical of repeated samples): kept the {max_levels - 1} first cuts of each, because "
                      "the MI counting cost grows with the square of the number of levels", UserWarning, stacklevel=2)
    return codes, n_levels


#: the rules :func:`vector_codes` implements, by the number it takes
VECTOR_RULES = {"mean_sd": 0, "quantile": 1}


@njit(cache=True)
def vector_codes(v, rule, n_bins, out):
    """Codes of one vector by the ``"mean_sd"`` (``rule`` 0) or ``"quantile"`` (1) rule of :func:`codes`.

    The form of :func:`mean_sd_codes` / :func:`quantile_codes` that a numba loop can call (k-means,
    :mod:`bioqpfs._kernels.kmeans`).  ``rule`` 0: edges ``mu -+ sd`` (ddof=1), QPFS section 2.5, with the
    same extreme-value guard (moments of ``v / s``, ``s`` the power of two of
    :func:`bioqpfs._kernels.correlation.column_scales`; 1 for ordinary vectors) and the same cut at the mean
    for a varying vector left in one bin (:func:`mean_sd_codes`); 1: ``n_bins``
    equal-frequency bins (edges at the ``j/n_bins`` sample quantiles, linear interpolation).
    ``code = #{edges e : v > e}`` (right-closed bins); bins left empty are removed so the codes are
    ``0..levels-1``.  Writes ``out`` (uint8, len(v)) and returns ``levels``.  Sums run in sample order,
    where the matrix functions use numpy's pairwise sums: the edges can differ in the last bit, so a
    value within one ulp of an edge may fall on the other side.
    """
    n = v.shape[0]
    if rule == 0:
        amax = 0.0
        for s in range(n):
            amax = max(amax, abs(v[s]))
        scale = 1.0
        if amax > 0.0:
            e = math.frexp(amax)[1]
            if abs(e - 1) > EXTREME_EXP:
                scale = math.ldexp(1.0, e - 1)
        mu = 0.0
        for s in range(n):
            mu += v[s] / scale
        mu /= n
        ss = 0.0
        for s in range(n):
            ss += (v[s] / scale - mu) ** 2
        sd = np.sqrt(ss / max(1, n - 1))
        edges = np.array([(mu - sd) * scale, (mu + sd) * scale])
        if sd > 0:  # every value within mu -+ sd (a nearly two-point vector): cut at the mean (mean_sd_codes)
            inside = True
            for s in range(n):
                if v[s] <= edges[0] or v[s] > edges[1]:
                    inside = False
                    break
            if inside:
                edges = np.array([mu * scale, np.inf])
    else:
        edges = np.quantile(v, np.arange(1, n_bins) / n_bins)
    nb = edges.shape[0] + 1
    present = np.zeros(nb, dtype=np.bool_)
    for s in range(n):
        c = 0
        for e in edges:
            if v[s] > e:
                c += 1
        out[s] = c
        present[c] = True
    rank = np.zeros(nb, dtype=np.uint8)
    levels = 0
    for b in range(nb):
        rank[b] = levels
        if present[b]:
            levels += 1
    for s in range(n):
        out[s] = rank[out[s]]
    return levels


skip_failed_cache_writes(globals())  # numba's cache is an optimisation: a full disk must not fail a selection
