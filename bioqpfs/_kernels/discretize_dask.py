"""Discretisation of a Dask expression matrix chunked by samples (the Dask side of :func:`discretize.codes`).

``"mean_sd"`` (QPFS section 2.5) in three passes over X, never holding more than one chunk:

1. per chunk, each gene's max |x|, count and mean (of ``x / s_k`` with the chunk's power-of-two guard
   :func:`bioqpfs._kernels.correlation.column_scales`), combined in a tree by Chan et al.'s pairwise update
   (``mean = mean_a + d n_b / n``, ``d = mean_b - mean_a``) after bringing both to the common power-of-two
   scale of the larger max |x|, which is the in-memory guard's scale;
2. per chunk, the centred sum of squares about that mean, summed -- the in-memory two-pass formula, so the
   thresholds ``mean -+ sd`` equal the in-memory ones to float64 rounding (a few ulps; a value within that
   distance of a threshold could fall in the neighbouring bin), genes of extreme magnitude included;
3. per chunk, which bins are used (empty bins are removed, as in memory).

Pass 1 also counts each gene's NaN/Inf values (the validation of a Dask X), and passes 1 and 2 are kept for the
rest of the call (:func:`bioqpfs._kernels.counting_dask.pass_memo`, carried over to a gene subset by
:func:`~bioqpfs._kernels.counting_dask.take_genes`): validation, the constant-gene test and the thresholds read X
twice in all, not five times.

The codes themselves stay lazy: ``X.map_blocks`` of the in-memory rule with the global thresholds, recoded to
``0..k_g-1``; every count pass recomputes them chunk by chunk (persist them on a cluster to trade worker
memory, 1 byte per entry, for time).  Chunks may be numpy arrays or scipy.sparse matrices (what
``anndata.experimental.read_elem_lazy`` gives for sparse X).

``"quantile"`` / ``"zero_quantile"``: the same edges as :func:`bioqpfs._kernels.discretize.quantile_codes` /
:func:`~bioqpfs._kernels.discretize.zero_quantile_codes`, exactly (bit for bit, so the codes are identical), without
ever holding a gene's column or X.  ``np.quantile``'s default ('linear') q-quantile of n values is
``lerp(v[i], v[j], gamma)`` with ``i = floor((n-1) q)``, ``j = i + 1`` (``i = j = n-1`` at the top) and
``gamma = (n-1) q - i``; the order statistics ``v[i]``, ``v[j]`` of every gene (of its non-zero values for
``"zero_quantile"``; of all, implicit sparse zeros included, for ``"quantile"``) are found by bracket refinement
(:func:`dask_order_statistics`) on order-preserving 64-bit integer keys of the float64 values (so extreme
magnitudes, subnormals and negative values need no care):

1. one pass: each gene's count of values, smallest and largest key -- the first bracket ``[lo, hi]``;
2. each further pass, per distinct bracket of the open targets (gene, rank) -- the targets of a gene share one
   at first; a bracket is only ever replaced by disjoint parts of itself, so a gene's distinct brackets are
   disjoint and each value falls in at most one, found by binary search -- holding more than ``L`` values: a
   histogram of ``H`` equal key-width bins over ``[lo, hi]`` with each bin's smallest and largest key, summed over
   the chunks; each of its targets' bracket becomes the bin holding the target's rank, shrunk to its smallest and
   largest key, so ties (discrete single-cell values) close it at once (``lo == hi``: the value); a bracket
   holding at most ``L`` values is collected in that pass instead (sorted on the driver: exact).  A bracket's key width falls by ``H``
   each pass (at most ``ceil(64 / log2 H)`` passes); in practice one or two passes after the first (40,000 x 300
   sparse log1p counts: 2 passes in all for the ``"zero_quantile"`` edges, 3 for ``"quantile"``, against 2 for
   the mean +- sd thresholds), each chunk's non-zero entries read once per pass by a numba loop
   (:func:`_refine_entries`);
3. one pass: which bins are used (empty bins are removed, as in memory); the codes stay lazy, as above.

Memory: per pass the chunk results hold ``24 H`` bytes per histogram bracket and 24 bytes per collected value,
at most :data:`QUANTILE_BUDGET` (brackets beyond it wait for the next pass, with all their targets); ``H``
(16..1024, a power of two) and ``L`` follow, each pass, from the budget and the number of distinct brackets.
A reduction task combines up to :data:`~bioqpfs._kernels.counting_dask.SPLIT_EVERY` such results at once.  A
chunk's work space is 24 bytes per non-zero entry (key, gene index, multiplicity) besides the chunk.

``"mdl"`` (a sort of every gene's values) and ``discretization=None`` are refused, with the rule to use instead.
"""
from __future__ import annotations

from functools import partial

import numpy as np
from numba import njit

from .._jit import skip_failed_cache_writes
from . import discretize as _disc
from .correlation import scaled_column_moments, scales_of_amax
from .counting_dask import is_dask_array, memo_active, memo_holds, memoized, reduce_chunks, sample_chunked

__all__ = ["dask_codes", "dask_zero_fraction", "nonzero_counts", "dask_mean_sd", "dask_scaled_moments", "dask_nonfinite_genes",
           "dask_order_statistics", "dask_quantile_edges", "prefetch_quantile_edges", "QUANTILE_BUDGET"]

#: bytes of one pass's chunk result in the quantile search (histograms and collected values; see the module doc)
QUANTILE_BUDGET = 64 * 2**20


def _abs_max(x):
    import scipy.sparse as sp

    if sp.issparse(x):
        return np.asarray(abs(x).max(axis=0).toarray(), dtype=np.float64).ravel()
    x = np.asarray(x)
    return np.maximum(x.max(axis=0), -x.min(axis=0)).astype(np.float64)


def _chunk_moments(x):
    """``(max |x|, n, mean, s, non-finite count, non-zero count)`` of one chunk, per gene (the mean of ``x / s``)."""
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf: counted here, refused by the caller
        mean, _, s = scaled_column_moments(x)
        return _abs_max(x), float(x.shape[0]), mean, s, _chunk_nonfinite(x), _chunk_nonzero(x)


def _combine_moments(*parts):
    """Chan's pairwise update of chunk means, at the common power-of-two scale of the larger max |x|.

    A chunk mean is brought to that scale by its exponent difference (``ldexp``: exact, as multiplying by the power
    of two ``s_b / s`` is), not by the ratio itself, which overflows for a gene of subnormal values (``s`` below
    2**-1024) whose chunk holds only zeros (``s_b`` = 1): ``0 * inf`` made its mean NaN, and its thresholds."""
    amax = np.max([p[0] for p in parts], axis=0)
    s = scales_of_amax(amax)
    e = np.frexp(s)[1]
    n, mean = 0.0, None
    with np.errstate(invalid="ignore", over="ignore"):
        for _, n_b, mean_b, s_b, _, _ in parts:
            mean_b = np.ldexp(mean_b, np.frexp(s_b)[1] - e)  # times the power of two s_b / s: exact
            if mean is None:
                n, mean = n_b, mean_b
                continue
            n += n_b
            mean = mean + (mean_b - mean) * (n_b / n)
    return amax, n, mean, s, sum(p[4] for p in parts), sum(p[5] for p in parts)


def _first_pass(X):
    """Pass 1 over a Dask X: ``(max |x|, n, mean, s, non-finite count, non-zero count)`` per gene, read once per
    call (:func:`bioqpfs._kernels.counting_dask.memoized`): validation (:func:`dask_nonfinite_genes`), the
    constant-gene test, the mean +- sd thresholds and ``discretization="auto"`` (:func:`dask_zero_fraction`) all
    start from it."""
    return memoized("first pass", X, lambda: reduce_chunks(_chunk_moments, [X], combine=_combine_moments))


def _chunk_centred_ss(x, *, mean, s):
    """Sum over the chunk of ``(x / s - mean)**2`` per gene (sparse: stored entries, plus mean**2 per zero)."""
    import scipy.sparse as sp

    if sp.issparse(x):
        x = x.tocsc()
        nnz = np.diff(x.indptr)
        dev = x.data / np.repeat(s, nnz) - np.repeat(mean, nnz)
        ss = np.bincount(np.repeat(np.arange(x.shape[1]), nnz), weights=dev**2, minlength=x.shape[1])
        return ss.astype(np.float64) + (x.shape[0] - nnz) * mean**2
    return ((np.asarray(x, dtype=np.float64) / s - mean) ** 2).sum(axis=0)


def dask_scaled_moments(X):
    """``(mean, ss, s)`` of a Dask X, as :func:`bioqpfs._kernels.correlation.scaled_column_moments` (the mean
    and centred sum of squares of ``X[:, g] / s[g]``).

    Two passes: the mean (and the guard's scale) by Chan's merge, then the centred sum of squares about that
    mean -- the in-memory two-pass formula.  The merged sum of squares of pass 1 alone lost digits on genes
    with ``|mean| >> sd`` (relative error 9e-10 on a gene of mean 1e8 and sd 1, against 0 for two passes).
    """
    def compute():
        _, _, mean, s, _, _ = _first_pass(X)
        return mean, reduce_chunks(_chunk_centred_ss, [X], mean=mean, s=s), s

    return memoized("moments", X, compute)


def dask_mean_sd(X):
    """Per-gene ``(mean, sd, s)`` of a Dask X, as :func:`bioqpfs._kernels.discretize._column_mean_sd` (ddof=1)."""
    mean, ss, s = dask_scaled_moments(X)
    return mean, np.sqrt(np.maximum(ss / max(X.shape[0] - 1.0, 1.0), 0.0)), s


def _chunk_nonzero(x):
    """The number of non-zero values of each gene in one chunk (NaN counts; a stored zero does not), int64;
    a CSR/CSC matrix is read in place (no copy of its index arrays)."""
    import scipy.sparse as sp

    if sp.issparse(x):
        if x.format == "csc":
            return _csc_nonzero(x.data, x.indptr)
        x = x if x.format == "csr" else x.tocsr()
        return _csr_nonzero(x.data, x.indices, x.shape[1])
    return np.count_nonzero(np.asarray(x), axis=0).astype(np.int64)


@njit(cache=True, nogil=True)
def _csr_nonzero(data, indices, m):
    out = np.zeros(m, dtype=np.int64)
    for k in range(data.size):
        if data[k] != 0:
            out[indices[k]] += 1
    return out


@njit(cache=True, nogil=True)
def _csc_nonzero(data, indptr):
    out = np.zeros(indptr.size - 1, dtype=np.int64)
    for j in range(indptr.size - 1):
        for k in range(indptr[j], indptr[j + 1]):
            if data[k] != 0:
                out[j] += 1
    return out


def nonzero_counts(X):
    """The number of non-zero values of each gene (int64): of a Dask X from the first pass (:func:`_first_pass`,
    memoized), of numpy or scipy.sparse directly."""
    if is_dask_array(X):
        return _first_pass(sample_chunked(X))[5]
    return _chunk_nonzero(X)


def dask_zero_fraction(X):
    """The fraction of exact zeros in a Dask X (for ``discretization="auto"``), from the first pass
    (:func:`_first_pass`: no pass of its own when validation has read X, and none for a gene subset of it)."""
    n, m = X.shape
    return 1.0 - int(nonzero_counts(X).sum()) / (n * m) if n * m else 0.0


def _chunk_nonfinite(x):
    import scipy.sparse as sp

    if sp.issparse(x):
        x = x.tocoo()
        return np.bincount(x.col[~np.isfinite(x.data)], minlength=x.shape[1])
    return (~np.isfinite(np.asarray(x))).sum(axis=0)


def dask_nonfinite_genes(X):
    """Indices of the genes of a Dask X with a NaN or infinite value (pass 1 of the moments, :func:`_first_pass`)."""
    return np.flatnonzero(_first_pass(X)[4])


def _chunk_codes(x, rule, rank):
    c = rule(x)
    return rank[c, np.arange(c.shape[1])[None, :]]


def _chunk_presence(c, *, n_bins):
    return _disc.bin_presence(c, n_bins)


def _chunk_ranked(c, rank):
    return rank[c, np.arange(c.shape[1])[None, :]]


def _lazy_codes(X, rule, n_bins):
    """``(codes, n_levels)``: the codes of ``rule`` (a per-chunk function) with empty bins removed.

    The uncompacted codes are computed once and kept when they fit (:func:`~bioqpfs._kernels.counting_dask.kept_codes`,
    1 byte per value): the used bins are then read from them, and the compacted codes (which the counting backend
    keeps in turn) are made from them, so X is read once here instead of twice (the used bins, then the codes) --
    on a lazily read file one pass over it fewer per discretisation.  Codes too large to keep stay lazy: one pass
    for the used bins, and the codes recomputed from X where they are read."""
    from .counting_dask import kept_codes

    raw = kept_codes(X.map_blocks(rule, dtype=np.uint8, meta=np.empty((0, 0), np.uint8)))
    present = reduce_chunks(_chunk_presence, [raw], n_bins=n_bins)
    rank = _disc.bin_ranks(present)
    codes = raw.map_blocks(_chunk_ranked, rank, dtype=np.uint8, meta=np.empty((0, 0), np.uint8))
    return codes, present.sum(axis=0).astype(np.int64)


# ---- exact quantiles: order statistics by bracket refinement (see the module docstring) ---------------------
_SIGN = np.uint64(1 << 63)
_UMAX = np.uint64(2**64 - 1)


def _float_keys(v):
    """Order-preserving uint64 keys of float64 values (the IEEE bits, sign bit flipped; negatives reversed)."""
    b = np.ascontiguousarray(v, dtype=np.float64).view(np.int64)
    flip = (b >> 63).view(np.uint64) | _SIGN  # arithmetic shift: all bits for a negative value, else the sign bit
    return b.view(np.uint64) ^ flip


def _key_values(k):
    """The float64 values of :func:`_float_keys` keys."""
    k = np.asarray(k, dtype=np.uint64)
    return np.ascontiguousarray(np.where(k >= _SIGN, k ^ _SIGN, ~k)).view(np.float64)


_ZERO_KEY = _float_keys(np.zeros(1))[0]


def _chunk_entries(x, groups=None, n_groups=1):
    """``(genes, keys, n_zero)``: gene index and key of each non-zero entry of a chunk, and each gene's zeros
    (sparse: implicit and explicit zeros; never densified).  With ``groups`` (the chunk's samples' group codes
    ``0..n_groups-1``) the genes are the ``n_groups * M`` (group, gene) pairs ``group * M + gene``: each group's
    values of a gene are a gene of their own."""
    import scipy.sparse as sp

    if sp.issparse(x):
        x = x.tocoo()
        keep = x.data != 0
        rows, genes, vals = x.row[keep], x.col[keep].astype(np.int64), x.data[keep]
    else:
        x = np.asarray(x)
        rows, genes = np.nonzero(x)
        vals = x[rows, genes]
    m = x.shape[1]
    if groups is None:
        return genes, _float_keys(vals), x.shape[0] - np.bincount(genes, minlength=m)
    groups = np.asarray(groups, dtype=np.int64).ravel()
    genes = groups[rows] * m + genes
    held = np.repeat(np.bincount(groups, minlength=n_groups), m)  # each (group, gene)'s samples in the chunk
    return genes, _float_keys(vals), held - np.bincount(genes, minlength=n_groups * m)


def _chunk_range(x, *, with_zeros, groups=None, n_groups=1):
    """``(3, M)`` uint64: each gene's count of values, smallest and largest key (``with_zeros``: zeros are values);
    with ``groups``, of the ``n_groups * M`` (group, gene) pairs (:func:`_chunk_entries`)."""
    genes, keys, n_zero = _chunk_entries(x, groups, n_groups)
    m = x.shape[1] * n_groups
    count = np.bincount(genes, minlength=m).astype(np.uint64)
    lo, hi = np.full(m, _UMAX), np.zeros(m, dtype=np.uint64)
    np.minimum.at(lo, genes, keys)
    np.maximum.at(hi, genes, keys)
    if with_zeros:
        z = n_zero > 0
        count += n_zero.astype(np.uint64)
        lo[z], hi[z] = np.minimum(lo[z], _ZERO_KEY), np.maximum(hi[z], _ZERO_KEY)
    return np.stack([count, lo, hi])


def _combine_range(*parts):
    p = np.stack(parts)
    return np.stack([p[:, 0].sum(axis=0), p[:, 1].min(axis=0), p[:, 2].max(axis=0)])


@njit(cache=True)
def _refine_entries(genes, keys, weights, first, lo, hi, shift, collect, hslot, H, counts, mins, maxs,
                    out_t, out_k, out_w, fill):
    """The loop of :func:`_chunk_refine`: each entry (gene, key, multiplicity) into the bracket of its gene that
    holds it, found by binary search: gene g's brackets are ``first[g]:first[g+1]``, disjoint and ordered by
    ``lo``.  ``fill`` False: histogram brackets into ``counts``/``mins``/``maxs`` and the number of collected
    entries returned; True: the collected entries written to ``out_*``."""
    c = 0
    for e in range(genes.size):
        g, k = genes[e], keys[e]
        a, b = first[g], first[g + 1]
        while a < b:  # the first bracket starting above k
            mid = (a + b) // 2
            if lo[mid] <= k:
                a = mid + 1
            else:
                b = mid
        t = a - 1
        if t < first[g] or k > hi[t]:
            continue
        if collect[t]:
            if fill:
                out_t[c], out_k[c], out_w[c] = t, k, weights[e]
            c += 1
        elif not fill:
            i = hslot[t] * H + np.int64((k - lo[t]) >> shift[t])
            counts[i] += weights[e]
            mins[i] = min(mins[i], k)
            maxs[i] = max(maxs[i], k)
    return c


def _chunk_refine(x, targets, *, with_zeros, H, groups=None, n_groups=1, into=None):
    """One chunk's share of a refinement pass over the brackets ``targets = (gene, lo, hi, shift, collect)``
    (ordered by gene, then ``lo``; a gene's brackets disjoint): bracket t (gene ``gene[t]``, keys
    ``[lo[t], hi[t]]``) gets, if a histogram bracket (``~collect[t]``), the count, smallest and largest key of each
    of its ``H`` bins ``(key - lo) >> shift``; if collected, every (bracket, key, multiplicity) in it.  The
    chunk's zeros count as one entry per gene (key of 0.0, multiplicity the number of zeros) when
    ``with_zeros``.  With ``groups``, genes are (group, gene) pairs (:func:`_chunk_entries`).  With ``into`` (a
    chain's result so far, :func:`bioqpfs._kernels.counting_dask.reduce_chunks`) the chunk's histograms are counted
    into its arrays and its collected entries appended: :func:`_combine_refine` of the two, with no histograms of
    the chunk's own (integer counts, minima and maxima: the same in any order)."""
    gene, lo, hi, shift, collect = targets
    genes, keys, n_zero = _chunk_entries(x, groups, n_groups)
    weights = np.ones(genes.size, dtype=np.int64)
    if with_zeros:
        z = np.flatnonzero(n_zero > 0)
        genes = np.concatenate([genes, z])
        keys = np.concatenate([keys, np.full(z.size, _ZERO_KEY)])
        weights = np.concatenate([weights, n_zero[z].astype(np.int64)])
    first = np.searchsorted(gene, np.arange(x.shape[1] * n_groups + 1))
    hslot = np.cumsum(~collect) - 1  # a histogram bracket's row
    n_hist = int((~collect).sum())
    if into is None:
        counts = np.zeros(n_hist * H, dtype=np.int64)
        mins, maxs = np.full(n_hist * H, _UMAX), np.zeros(n_hist * H, dtype=np.uint64)
    else:  # the running result's arrays, updated in place (C-contiguous: ravel is a view)
        counts, mins, maxs = (a.ravel() for a in into[:3])
    args = (genes, keys, weights, first, lo, hi, shift, collect, hslot, H, counts, mins, maxs)
    out = [np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.int64)]
    n_out = _refine_entries(*args, *out, False)
    out = [np.empty(n_out, np.int64), np.empty(n_out, np.uint64), np.empty(n_out, np.int64)]
    if n_out:
        _refine_entries(*args, *out, True)
    if into is not None:
        return into[0], into[1], into[2], tuple(np.concatenate([had, new]) for had, new in zip(into[3], out))
    shape = (n_hist, H)
    return counts.reshape(shape), mins.reshape(shape), maxs.reshape(shape), tuple(out)


_chunk_refine.adds_into = True


def _combine_refine(*parts):
    counts = np.sum([p[0] for p in parts], axis=0)
    mins = np.minimum.reduce([p[1] for p in parts])
    maxs = np.maximum.reduce([p[2] for p in parts])
    got = tuple(np.concatenate([p[3][i] for p in parts]) for i in range(3))
    return counts, mins, maxs, got


def _plan(n_targets, budget, hist_bins, collect_max):
    """``(H, L)`` for ``n_targets``: the histogram bins (a power of two, 16..1024) and the largest bracket whose
    values are collected, so that one pass over all the targets stays near ``budget`` bytes."""
    per_target = budget // (24 * max(n_targets, 1))
    H = hist_bins or int(2 ** np.clip(np.floor(np.log2(max(per_target, 1))), 4, 10))
    return H, collect_max or int(np.clip(per_target, 64, 2**16))


def dask_order_statistics(X, gene, rank, *, nonzero_only, budget=QUANTILE_BUDGET, hist_bins=None, collect_max=None,
                          first=None, groups=None):
    """Exact order statistics of the genes of a Dask X: ``value[t]`` = the ``rank[t]``-th smallest (0-based) of
    gene ``gene[t]``'s values (its non-zero values with ``nonzero_only``), by bracket refinement (module doc).

    Parameters
    ----------
    X : dask.array.Array, shape (n_samples, n_genes)
        Chunked by samples, gene axis in one chunk (:func:`bioqpfs._kernels.counting_dask.sample_chunked`);
        numpy or scipy.sparse chunks, finite values.
    gene, rank : ndarray of int, shape (n_targets,)
        The targets; ``rank[t]`` below gene ``gene[t]``'s count of values.
    nonzero_only : bool
        Order the non-zero values only (zeros, explicit sparse zeros included, are skipped).
    budget : int
        Bytes of one pass's chunk result (:data:`QUANTILE_BUDGET`).
    hist_bins, collect_max : int, optional
        ``H`` (a power of two) and ``L`` instead of those the budget gives (tests force the multi-pass path).
    first : ndarray, optional
        The ``(3, n_genes)`` result of the first pass (count, smallest, largest key) if already computed.
    groups : ndarray of int, optional
        A group code ``0..G-1`` per sample: the genes are then the ``G * n_genes`` (group, gene) pairs
        ``group * n_genes + gene`` (the values of a gene within a group), all searched in the same passes.

    Returns
    -------
    values : ndarray of float64, shape (n_targets,)
    n_passes : int
        Passes over X, the first included.
    """
    import dask

    gene, rank = np.asarray(gene, dtype=np.int64), np.asarray(rank, dtype=np.int64)
    grouped = _grouping(groups)
    n_passes = 0
    if first is None:
        first, n_passes = reduce_chunks(_chunk_range, [X], combine=_combine_range, with_zeros=not nonzero_only,
                                        result_bytes=24 * X.shape[1] * grouped.get("n_groups", 1), **grouped), 1
    count, lo, hi = first[0].astype(np.int64)[gene], first[1][gene], first[2][gene]
    if (rank < 0).any() or (rank >= count).any():
        raise ValueError("dask_order_statistics: a rank outside its gene's values")
    r, n = rank.copy(), count.copy()  # rank within the bracket, values in it
    done = lo == hi
    while not done.all():
        # the distinct brackets of the open targets, by gene and lo: the targets of a gene share one bracket at
        # first, and a bracket is only ever replaced by disjoint parts of itself, so a gene's distinct brackets are
        # disjoint -- an entry falls in at most one, found by binary search (_refine_entries)
        act = np.flatnonzero(~done)
        act = act[np.lexsort((hi[act], lo[act], gene[act]))]
        g_act, lo_act, hi_act = gene[act], lo[act], hi[act]
        new = np.ones(act.size, dtype=bool)
        new[1:] = (g_act[1:] != g_act[:-1]) | (lo_act[1:] != lo_act[:-1]) | (hi_act[1:] != hi_act[:-1])
        bracket = np.cumsum(new) - 1  # each open target's bracket
        heads = act[new]
        H, L = _plan(heads.size, budget, hist_bins, collect_max)
        collect = n[heads] <= L
        cost = np.where(collect, 24 * n[heads], 24 * H)
        take = np.cumsum(cost) <= budget  # brackets beyond the budget wait, with all their targets
        take[0] = True
        heads, collect, cost = heads[take], collect[take], cost[take]
        within = take[bracket]
        act, bracket = act[within], bracket[within]  # the taken brackets are the first ones: same numbering
        width = (hi[heads] - lo[heads]).astype(np.float64)  # rounding up only widens the bins: still < H of them
        shift = np.maximum(np.frexp(width)[1] - int(np.log2(H)), 0).astype(np.uint64)
        # the brackets enter the graph once (a delayed value every chunk task depends on), not once per chunk
        targets = dask.delayed((gene[heads], lo[heads], hi[heads], shift, collect), pure=True, traverse=False)
        counts, mins, maxs, (ct, ck, cw) = reduce_chunks(_chunk_refine, [X], combine=_combine_refine,
                                                         targets=targets, with_zeros=not nonzero_only, H=H,
                                                         result_bytes=int(cost.sum()), **grouped)
        n_passes += 1
        hist = ~collect[bracket]  # the bin of its bracket's histogram holding the target rank becomes the bracket
        h, row = act[hist], (np.cumsum(~collect) - 1)[bracket[hist]]
        cum = np.cumsum(counts, axis=1)
        span = int(cum[:, -1].max()) + 1 if cum.size else 1  # rows side by side, each sorted: one search for all
        b = np.searchsorted((cum + span * np.arange(cum.shape[0])[:, None]).ravel(), r[h] + span * row,
                            side="right") - H * row
        r[h] -= np.where(b > 0, cum[row, np.maximum(b - 1, 0)], 0)
        n[h], lo[h], hi[h] = counts[row, b], mins[row, b], maxs[row, b]
        done[h] = lo[h] == hi[h]
        c, cb = act[~hist], bracket[~hist]  # collected: the rank-th key of the sorted bracket
        order = np.lexsort((ck, ct))
        ct, ck, cum = ct[order], ck[order], np.cumsum(cw[order])
        start = np.searchsorted(ct, cb, side="left")
        base = np.where(start > 0, cum[np.maximum(start - 1, 0)], 0)
        lo[c] = hi[c] = ck[np.searchsorted(cum, base + r[c], side="right")]
        done[c] = True
    return _key_values(lo), n_passes


def _grouping(groups):
    """The keyword arguments of a grouped pass (:func:`_chunk_entries`): none without groups."""
    if groups is None:
        return {}
    groups = np.asarray(groups, dtype=np.int64)
    return dict(vectors={"groups": groups}, n_groups=int(groups.max()) + 1 if groups.size else 1)


def dask_quantile_edges(X, n_bins, *, nonzero_only, groups=None, **search):
    """Edges of :func:`bioqpfs._kernels.discretize.quantile_codes` (``nonzero_only=False``) or of
    :func:`~bioqpfs._kernels.discretize.zero_quantile_codes` (``True``) for a Dask X, bit-identical.

    With ``groups`` (a group code per sample), every group's edges from its own samples, all groups in the same
    passes: ``edges`` is then ``(n_bins - 1, G, n_genes)`` and ``offset`` ``(G, n_genes)``.  Without ``groups``
    the result is kept for the call (:func:`~bioqpfs._kernels.counting_dask.memoized`), where
    :func:`prefetch_quantile_edges` may have put it.

    Returns
    -------
    edges : ndarray of float64, shape (n_bins - 1, n_genes)
        ``+inf`` pads a gene with zeros (``n_bins - 2`` cuts of its non-zero values) and an all-zero gene.
    offset : ndarray of uint8, shape (n_genes,)
        For :func:`~bioqpfs._kernels.discretize.zero_quantile_rule`: 0 for a gene without zeros (all its values
        in ``n_bins`` bins), 1 otherwise (``None`` for ``nonzero_only=False``).
    n_passes : int
        Passes over X of the search that gave them, the range passes included.
    """
    X = sample_chunked(X)  # as prefetch_quantile_edges keys it
    request = (int(n_bins), bool(nonzero_only))
    if groups is not None or search:
        return _requested_edges(X, [request], groups=groups, **search)[0]
    return memoized(_edges_kind(*request), X, lambda: _requested_edges(X, [request])[0])


def prefetch_quantile_edges(X, requests):
    """Search the edges of several equal-frequency rules of the same Dask X in one search, for the rest of the
    call: ``requests`` lists ``(n_bins, nonzero_only)``, the arguments of the :func:`dask_quantile_edges` calls to
    come (the default recipe: 3 bins of the non-zero values for Q, 32 for the per-class bins, 255 levels of all
    values for the pair order).  Each bracket-refinement pass reads X once for all their targets, so the search
    costs the passes of the longest instead of the sum (10,000 cells x 2,000 genes: 3 refinement passes instead
    of 7).  The edges are the same bits as each call's own search (the same order statistics).  Nothing happens
    outside :func:`~bioqpfs._kernels.counting_dask.pass_memo` (nothing would keep them) or for requests already
    kept."""
    X = sample_chunked(X)
    todo = [r for r in dict.fromkeys((int(k), bool(nz)) for k, nz in requests) if not memo_holds(_edges_kind(*r), X)]
    if len(todo) < 2 or not memo_active():
        return
    for request, result in zip(todo, _requested_edges(X, todo)):
        memoized(_edges_kind(*request), X, lambda result=result: result)


def _edges_kind(n_bins, nonzero_only):
    return f"quantile edges n_bins={n_bins} nonzero_only={nonzero_only}"


def _range_pass(X, nonzero_only, grouped):
    """The first pass (:func:`_chunk_range`): each gene's count of values, smallest and largest key; kept for the
    call without groups (it does not depend on the number of bins: every rule of the recipe shares it)."""
    m = X.shape[1] * grouped.get("n_groups", 1)

    def first_pass():  # a chunk's result grows with groups x genes: large ones are summed in chains (reduce_chunks)
        return reduce_chunks(_chunk_range, [X], combine=_combine_range, with_zeros=not nonzero_only,
                             result_bytes=24 * m, **grouped)

    return first_pass() if grouped else memoized(f"range nonzero_only={nonzero_only}", X, first_pass)


def _edge_targets(count, n, n_bins, nonzero_only):
    """The order statistics of the edges of one rule: ``(gene, row, lo_rank, hi_rank, t, full)``, edge ``row`` of
    gene ``gene`` being ``lerp(v[lo_rank], v[hi_rank], t)`` (:func:`bioqpfs._kernels.discretize.linear_quantile_ranks`)
    of its ``count`` values (non-zero ones with ``nonzero_only``) out of ``n`` samples; ``full``: the genes whose
    every value is ordered (all cuts of ``n_bins`` bins; the others: ``n_bins - 2`` cuts after the zero bin)."""
    q_all, q_nz = np.arange(1, n_bins) / n_bins, np.arange(1, n_bins - 1) / (n_bins - 1)
    full = (count == n) & (count > 0)  # all genes for "quantile"
    genes, qs, rows = [], [], []
    for sel, q in ((np.flatnonzero(full), q_all), (np.flatnonzero(~full & (count > 0)), q_nz)):
        for i, qi in enumerate(q):
            genes.append(sel)
            qs.append(np.full(sel.size, qi))
            rows.append(np.full(sel.size, i))
    gene, q, row = (np.concatenate(v).astype(dtype) for v, dtype in
                    ((genes, np.int64), (qs, np.float64), (rows, np.int64)))
    lo_rank, hi_rank, t = _disc.linear_quantile_ranks(count[gene], q)
    return gene, row, lo_rank, hi_rank, t, full


def _requested_edges(X, requests, groups=None, **search):
    """``[(edges, offset, n_passes)]`` of :func:`dask_quantile_edges` for every ``(n_bins, nonzero_only)`` request,
    from one search of all their order statistics.  Requests of both kinds are searched among all values, a
    non-zero value's rank shifted by its gene's zeros -- where every non-zero value is positive (the zeros then come
    first); otherwise each kind has its own search."""
    grouped = _grouping(groups)
    n_groups = grouped.get("n_groups", 1)
    m = X.shape[1] * n_groups
    # each (group, gene) holds all its group's samples
    n = np.repeat(np.bincount(groups, minlength=n_groups), X.shape[1]) if groups is not None else X.shape[0]
    kinds = {nz for _, nz in requests}
    firsts = {nz: _range_pass(X, nz, grouped) for nz in sorted(kinds)}
    mixed = len(kinds) == 2
    if mixed and (firsts[True][1] <= _ZERO_KEY).any():  # a negative value among the non-zero ones: no shift
        by_kind = {nz: iter(_requested_edges(X, [r for r in requests if r[1] == nz], groups, **search))
                   for nz in kinds}
        return [next(by_kind[nz]) for _, nz in requests]
    search_nonzero = not mixed and True in kinds
    first = firsts[search_nonzero]
    parts = []
    for n_bins, nonzero_only in requests:
        count = firsts[nonzero_only][0].astype(np.int64)
        gene, row, lo_rank, hi_rank, t, full = _edge_targets(count, n, n_bins, nonzero_only)
        if nonzero_only and not search_nonzero:  # the rank among all values: after the gene's zeros
            zeros = (n - count)[gene] if groups is not None else n - count[gene]
            lo_rank, hi_rank = lo_rank + zeros, hi_rank + zeros
        parts.append((gene, row, lo_rank, hi_rank, t, full))
    gene = np.concatenate([p[0] for p in parts])
    lo_rank, hi_rank = np.concatenate([p[2] for p in parts]), np.concatenate([p[3] for p in parts])
    # the distinct (gene, rank) targets, by gene then rank: one int64 key each (np.unique over the columns of a
    # 2-row array sorts a structured view, 5 s for the million targets of 255 levels x 2,000 genes; 0.1 s so)
    span = int(first[0].max()) + 1 if first[0].size else 1
    keys, where = np.unique(np.concatenate([gene * span + lo_rank, gene * span + hi_rank]), return_inverse=True)
    targets = np.divmod(keys, span)
    values, n_passes = dask_order_statistics(X, targets[0], targets[1], nonzero_only=search_nonzero, first=first,
                                             groups=groups, **search) if gene.size else (np.zeros(0), 0)
    a, b = values[where[:gene.size]], values[where[gene.size:]]
    results, at = [], 0
    for (n_bins, nonzero_only), (g, row, _, _, t, full) in zip(requests, parts):
        edges = np.full((n_bins - 1, m), np.inf)
        edges[row, g] = _disc.numpy_lerp(a[at:at + g.size], b[at:at + g.size], t)
        at += g.size
        offset = np.where(full, 0, 1).astype(np.uint8) if nonzero_only else None
        if groups is not None:
            edges = edges.reshape(n_bins - 1, n_groups, X.shape[1])
            offset = None if offset is None else offset.reshape(n_groups, X.shape[1])
        results.append((edges, offset, n_passes + len(firsts)))
    return results


def dask_codes(X, discretization, *, n_bins=3, feature_names=None, _search=None):
    """``(codes, n_levels)`` of a Dask X: codes a lazy uint8 Dask array with X's sample chunks (gene axis in one
    chunk), ``n_levels`` numpy.  ``discretization`` is already resolved (not ``"auto"``; ``None``: X holds levels,
    :func:`dask_compact_codes`, whose messages name ``feature_names``); ``_search``: private parameters of
    :func:`dask_order_statistics` (tests)."""
    X = sample_chunked(X)
    if discretization is None:
        return dask_compact_codes(X, feature_names=feature_names)
    rule, n_out = _dask_rule(X, discretization, n_bins=n_bins, _search=_search)
    codes, n_levels = _lazy_codes(X, rule, n_out)
    if discretization == "mean_sd":  # a varying gene left in one bin is cut at the mean, as in memory
        mean, sd, s = dask_mean_sd(X)  # memoized by _dask_rule: no pass
        split = _disc.one_level_spread(n_levels, sd)
        if split.any():  # one more pass for the used bins, only then
            codes, n_levels = _lazy_codes(X, partial(_disc.codes_from_edges,
                                                     edges=_disc.mean_sd_edges(mean, sd, s, split)), 3)
    return codes, n_levels


def _dask_rule(X, discretization, *, n_bins=3, _search=None):
    """``(rule, n_bins)``: the per-chunk function giving the uncompacted codes of ``discretization`` with X's
    global thresholds (their passes run now), and its number of bins."""
    from functools import partial

    if discretization == "mean_sd":
        mean, sd, s = dask_mean_sd(X)
        return partial(_disc.codes_from_edges, edges=_disc.mean_sd_edges(mean, sd, s)), 3
    if discretization in ("quantile", "zero_quantile"):
        n_bins = _disc.check_n_bins(n_bins)
        zero = discretization == "zero_quantile"
        edges, offset, _ = dask_quantile_edges(X, n_bins, nonzero_only=zero, **(_search or {}))
        rule = partial(_disc.zero_quantile_rule, edges=edges, offset=offset) if zero else \
            partial(_disc.codes_from_edges, edges=edges)
        return rule, n_bins
    if discretization == "mdl":
        raise ValueError("discretization='mdl' is not available for a Dask array (MDL sorts every gene's values: "
                         "not in bounded memory); use discretization='mean_sd', 'quantile', 'zero_quantile' or 'auto' (the "
                         "rules with a Dask path), or load X into memory (X.compute())")
    raise ValueError(f"unknown discretization {discretization!r}; choose one of {_disc.DISCRETIZATIONS}")


def dask_compact_codes(X, *, feature_names=None):
    """``discretization=None`` on a Dask X (integer levels given): :func:`bioqpfs._kernels.discretize.compact_codes`
    chunk by chunk, the same codes -- one pass collects every gene's distinct values (at most ``MAX_LEVELS`` + 1
    kept per gene, so memory is bounded whatever the data) and whether any is not an integer; the codes (each
    value's rank among its gene's values) stay lazy.  The errors are those of the in-memory function."""
    X = sample_chunked(X)
    m = X.shape[1]
    values, bad, many = reduce_chunks(_chunk_levels_seen, [X], combine=_merge_levels_seen)
    names = None if feature_names is None else np.asarray(feature_names)
    if bad.any():
        from .._validation import describe_indices

        raise ValueError(
            f"discretization=None needs integer-coded data, but gene(s) {describe_indices(np.flatnonzero(bad), names)} "
            "hold non-integer values; pass discretization='mean_sd' (or 'quantile', 'zero_quantile', 'auto': 'mdl' has "
            "no Dask path) to discretise them")
    n_levels = np.array([v.size for v in values], dtype=np.int64)
    if many.any() or (m and n_levels.max() > _disc.MAX_LEVELS):
        j = int(np.flatnonzero(many)[0]) if many.any() else int(np.argmax(n_levels))
        count = f"more than {_disc.MAX_LEVELS}" if many[j] else str(n_levels[j])
        raise ValueError(
            f"gene {names[j] if names is not None else j} has {count} distinct "
            f"levels; discretization=None supports at most {_disc.MAX_LEVELS} -- discretise continuous data instead")
    codes = X.map_blocks(_chunk_ranks, values=values, dtype=np.uint8, meta=np.empty((0, 0), np.uint8))
    return codes, n_levels


def _dense_chunk(x):
    return np.asarray(x.toarray() if hasattr(x, "toarray") else x, dtype=np.float64)


def _chunk_levels_seen(x):
    """``(values, bad, many)`` of one chunk: each gene's sorted distinct values (empty when it has a non-integer
    value or more than ``MAX_LEVELS`` + 1 of them), whether it has a non-integer value, and whether too many."""
    x = _dense_chunk(x)
    bad = (x != np.round(x)).any(axis=0)
    values, many = [], np.zeros(x.shape[1], dtype=bool)
    for j in range(x.shape[1]):
        v = np.unique(x[:, j]) if not bad[j] else np.zeros(0)
        many[j] = v.size > _disc.MAX_LEVELS
        values.append(v[:0] if many[j] else v)
    return values, bad, many


def _merge_levels_seen(*parts):
    values = [np.unique(np.concatenate([p[0][j] for p in parts])) for j in range(len(parts[0][0]))]
    bad = np.logical_or.reduce([p[1] for p in parts])
    many = np.logical_or.reduce([p[2] for p in parts])
    for j, v in enumerate(values):
        if v.size > _disc.MAX_LEVELS:
            many[j] = True
            values[j] = v[:0]
    return values, bad, many


def _chunk_ranks(x, *, values):
    """A chunk's codes: each value's rank among its gene's distinct values (uint8)."""
    x = _dense_chunk(x)
    out = np.empty(x.shape, dtype=np.uint8)
    for j, v in enumerate(values):
        out[:, j] = np.searchsorted(v, x[:, j])
    return out


def dask_group_codes(X, discretization, groups, *, n_bins=3):
    """Per-batch codes of a Dask X, as ``bioqpfs.selectors._common.discretized`` makes in memory: each group's
    (batch's) thresholds from its own samples, its codes compacted to its own used bins, a group of one sample
    all 0; ``n_levels`` the most over the groups.  The codes stay lazy, X's chunks, each chunk coded by its
    samples' groups.

    Passes over X, whatever the number of groups: mean +- sd thresholds take two (every group's moments, then
    every group's centred sums of squares, :func:`_group_mean_sd_rules`), quantile thresholds those of one exact
    search for all the (group, gene) pairs (:func:`dask_quantile_edges` with ``groups``), the used bins one.

    Parameters
    ----------
    X : dask.array.Array (samples x genes)
    discretization : str, resolved (not ``"auto"``)
    groups : ndarray of int, group code ``0..G-1`` of every sample
    """
    import dask
    import dask.array as da

    X = sample_chunked(X)
    groups = np.asarray(groups, dtype=np.int64)
    n_groups = int(groups.max()) + 1 if groups.size else 0
    spread = np.bincount(groups, minlength=n_groups) >= 2  # a single sample has no spread: one level
    rules, n_out = [None] * n_groups, n_bins
    if discretization == "mean_sd":
        (rules, moments), n_out = _group_mean_sd_rules(X, groups, n_groups, spread), 3
    elif discretization in ("quantile", "zero_quantile"):
        n_out = _disc.check_n_bins(n_bins)
        zero = discretization == "zero_quantile"
        edges, offset, _ = dask_quantile_edges(X, n_out, nonzero_only=zero, groups=groups)
        for g in np.flatnonzero(spread):
            e = np.ascontiguousarray(edges[:, g])
            rules[g] = partial(_disc.zero_quantile_rule, edges=e, offset=offset[g]) if zero else \
                partial(_disc.codes_from_edges, edges=e)
    else:  # refused with the in-memory message (mdl), or unknown
        _dask_rule(X, discretization, n_bins=n_bins)
    shared = dask.delayed(rules, pure=True)  # one key in the graph, not a copy of every threshold per chunk
    present = reduce_chunks(_chunk_group_levels, [X], vectors={"groups": groups}, rules=shared, n_bins=n_out,
                            n_groups=n_groups, result_bytes=n_groups * n_out * X.shape[1])
    if discretization == "mean_sd":  # a gene varying in a group but left in one bin: cut at the group's mean
        split = {g: _disc.one_level_spread(present[g].sum(axis=0), moments[g][1]) for g in np.flatnonzero(spread)}
        if any(v.any() for v in split.values()):  # one more pass for the used bins, only then
            for g, v in split.items():
                rules[g] = partial(_disc.codes_from_edges, edges=_disc.mean_sd_edges(*moments[g], v))
            shared = dask.delayed(rules, pure=True)
            present = reduce_chunks(_chunk_group_levels, [X], vectors={"groups": groups}, rules=shared,
                                    n_bins=n_out, n_groups=n_groups, result_bytes=n_groups * n_out * X.shape[1])
    ranks = [None if rule is None else _disc.bin_ranks(present[g]) for g, rule in enumerate(rules)]
    levels = np.ones(X.shape[1], dtype=np.int64)
    for g in np.flatnonzero(spread):
        levels = np.maximum(levels, present[g].sum(axis=0).astype(np.int64))
    G = da.from_array(groups[:, None], chunks=(X.chunks[0], 1))
    codes = da.map_blocks(_chunk_group_codes, X, G, rules=rules, ranks=ranks, dtype=np.uint8, chunks=X.chunks,
                          meta=np.empty((0, 0), np.uint8))
    return codes, levels


def _rows_of_groups(groups):
    """``[(g, rows)]`` for every group present in a chunk's group codes."""
    groups = np.asarray(groups).ravel()
    return [(int(g), np.flatnonzero(groups == g)) for g in np.unique(groups)]


def _chunk_group_moments(x, *, groups, n_groups):
    """:func:`_chunk_moments` of each group's rows in the chunk (None for a group without rows here)."""
    out = [None] * n_groups
    for g, rows in _rows_of_groups(groups):
        out[g] = _chunk_moments(x[rows])
    return out


def _combine_group_moments(*parts):
    merged = []
    for g in range(len(parts[0])):
        present = [p[g] for p in parts if p[g] is not None]
        merged.append(_combine_moments(*present) if present else None)
    return merged


def _chunk_group_centred_ss(x, *, groups, means, scales):
    """:func:`_chunk_centred_ss` of each group's rows about its own mean, ``(G, genes)`` (0 for a group not here)."""
    out = np.zeros((means.shape[0], x.shape[1]))
    for g, rows in _rows_of_groups(groups):
        out[g] = _chunk_centred_ss(x[rows], mean=means[g], s=scales[g])
    return out


def _chunk_group_levels(x, *, groups, rules, n_bins, n_groups):
    """Which bins each group's rule uses in the chunk: bool ``(G, n_bins, genes)`` (:func:`bioqpfs._kernels.discretize.bin_presence`
    per group; summed over chunks, bools add as "or")."""
    out = np.zeros((n_groups, n_bins, x.shape[1]), dtype=bool)
    for g, rows in _rows_of_groups(groups):
        if rules[g] is not None:
            out[g] = _disc.bin_presence(rules[g](x[rows]), n_bins)
    return out


def dask_group_scaled_moments(X, groups, n_groups):
    """:func:`dask_scaled_moments` of every group's rows, ``(means, ss, scales)`` each ``(n_groups, genes)``, in
    two passes over X for all the groups: the moments (Chan's merge per group), then the centred sums of
    squares about each group's own mean (a group without rows: mean 0, ss 0, scale 1)."""
    import dask

    groups = np.asarray(groups, dtype=np.int64)
    moments = reduce_chunks(_chunk_group_moments, [X], vectors={"groups": groups}, combine=_combine_group_moments,
                            n_groups=n_groups, result_bytes=32 * n_groups * X.shape[1])
    m = X.shape[1]
    means, scales = np.zeros((n_groups, m)), np.ones((n_groups, m))
    for g, part in enumerate(moments):
        if part is not None:
            means[g], scales[g] = part[2], part[3]
    ss = reduce_chunks(_chunk_group_centred_ss, [X], vectors={"groups": groups}, means=dask.delayed(means, pure=True),
                       scales=dask.delayed(scales, pure=True), result_bytes=8 * n_groups * m)
    return means, ss, scales


def _group_mean_sd_rules(X, groups, n_groups, spread):
    """Every group's mean +- sd rule (:func:`dask_mean_sd` of its rows) from :func:`dask_group_scaled_moments`,
    and its ``(mean, sd, s)`` (``None`` for both where a group has no spread)."""
    means, ss, scales = dask_group_scaled_moments(X, groups, n_groups)
    sizes = np.bincount(groups, minlength=n_groups).astype(np.float64)
    rules, moments = [None] * n_groups, [None] * n_groups
    for g in np.flatnonzero(spread):
        moments[g] = (means[g], np.sqrt(np.maximum(ss[g] / max(sizes[g] - 1.0, 1.0), 0.0)), scales[g])
        rules[g] = partial(_disc.codes_from_edges, edges=_disc.mean_sd_edges(*moments[g]))
    return rules, moments


def _chunk_group_codes(x, g, *, rules, ranks):
    """A chunk's codes, each sample coded by its group's rule and compacted by its group's used bins."""
    g = np.asarray(g).ravel()
    out = np.zeros(x.shape, dtype=np.uint8)
    for b in np.unique(g):
        if rules[b] is None:
            continue
        rows = np.flatnonzero(g == b)
        out[rows] = _chunk_codes(x[rows], rules[b], ranks[b])
    return out


skip_failed_cache_writes(globals())  # numba's cache is an optimisation: a full disk must not fail a selection
