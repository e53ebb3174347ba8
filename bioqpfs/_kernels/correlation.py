"""Pearson-correlation similarity (QPFS eq. 3) and Hall's multiclass relevance (QPFS section 2.1).

Genes of extreme magnitude (max |x| beyond 2**+-500, e.g. 1e307) are divided by a power of two
before any sum is formed (:func:`column_scales`), so sums of squares neither overflow nor
underflow.  Dividing by a power of two is exact, and ordinary genes are not rescaled at all, so
their results are bit-identical to the plain formulas.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

from .._jit import skip_failed_cache_writes

__all__ = ["abs_pearson", "pearson", "hall_relevance", "column_moments", "scaled_column_moments",
           "shared_column_moments", "column_scales", "divide_columns", "column_blocks", "dense_columns",
           "MOMENT_BLOCK_BYTES", "product_block_width", "sparse_slice_bytes", "MIN_PRODUCT_BLOCK"]

EXTREME_EXP = 500  # |binary exponent| of max |x| beyond which a gene is rescaled
#: float64 bytes of one column block of a dense X in :func:`scaled_column_moments` and :func:`hall_relevance` (the
#: block and its centred copy are the moments' only temporaries, so they need about twice this for any dense X)
MOMENT_BLOCK_BYTES = 16 * 2**20


def dense_columns(X, start, stop):
    """Columns ``start:stop`` of X as a dense float64 array (blocks keep memory bounded); a view of a float64
    numpy X, never to be written to."""
    block = X[:, start:stop]
    if sp.issparse(block):
        block = block.toarray()
    return np.asarray(block, dtype=np.float64)


def column_blocks(X, max_bytes=64 * 2**20, *, min_width=1):
    """``(start, stop)`` of consecutive column blocks of X, each at most ``max_bytes`` as dense float64 and at
    least ``min_width`` columns wide (a narrower last block is merged into the one before)."""
    n, m = X.shape
    step = max(1, min_width, min(m, max_bytes // max(1, 8 * n)))
    start = 0
    while start < m:
        stop = m if m - start - step < min_width else start + step
        yield start, stop
        start = stop


def column_scales(X):
    """Per-gene power-of-two divisor ``s_g``: 1 for ordinary genes; for a gene whose max |x| lies
    beyond ``2**+-500``, the power of two that brings it into [1, 2)."""
    if sp.issparse(X) and X.format == "csr" and X.nnz >= 2**16:  # scipy's column max transposes X first
        from .information import run_ranges, split_ranges

        ranges = split_ranges(X.shape[0])
        part = np.zeros((len(ranges), X.shape[1]))
        ptr = X.indptr.astype(np.int64)
        run_ranges(lambda p, lo, hi: _csr_column_absmax(X.data, X.indices, ptr, part[p], lo, hi), ranges)
        amax = part.max(axis=0)
    elif sp.issparse(X):
        amax = np.asarray(abs(X).max(axis=0).toarray(), dtype=np.float64).ravel()
    else:
        Xd = np.asarray(X)
        amax = np.maximum(Xd.max(axis=0), -Xd.min(axis=0)).astype(np.float64)  # no |X| copy
    return scales_of_amax(amax)


@njit(nogil=True, cache=True)
def _csr_column_absmax(data, indices, indptr, out, lo, hi):
    """``out[g] = max(out[g], |x|)`` over the entries of rows ``lo..hi`` of a CSR matrix (zeros: ``out`` starts at 0)."""
    for k in range(indptr[lo], indptr[hi]):
        v = abs(np.float64(data[k]))
        if v > out[indices[k]]:
            out[indices[k]] = v


def scales_of_amax(amax):
    """The divisors of :func:`column_scales` from each gene's max |x| (float64)."""
    _, e = np.frexp(amax)
    return np.where((amax > 0) & (np.abs(e - 1) > EXTREME_EXP), np.ldexp(1.0, e - 1), 1.0)


def divide_columns(X, s):
    """X[:, g] / s[g] (float64; dense or CSC), without copying when every s is 1."""
    if sp.issparse(X):
        Xc = X.tocsc()
        if Xc.dtype != np.float64:
            Xc = Xc.astype(np.float64)
        if (s != 1).any():
            Xc = Xc.copy() if Xc is X else Xc
            Xc.data = Xc.data / np.repeat(s, np.diff(Xc.indptr))
        return Xc
    Xd = np.asarray(X, dtype=np.float64)
    return Xd / s if (s != 1).any() else Xd


def csc_float64(X):
    """A float64 CSC copy of the sparse X, entries of each column in sample order (as ``X.tocsc()``); a CSR X is
    transposed in parallel (a counting sort, :func:`_count_columns` / :func:`_scatter_rows`: scipy's ``tocsc`` is one
    thread, 0.45 s of 20,000 x 5,000 at 22% non-zero)."""
    return sp.csc_matrix(csc_arrays(X), shape=X.shape)


def csc_arrays(X, dtype=np.float64):
    """``(data, rows, col_ptr)`` of :func:`csc_float64` (fresh data of ``dtype``; int32 rows below 2**31 samples,
    int64 column pointers), without the matrix: scipy's constructor would give the rows the column pointers' dtype
    (a second copy of them, 4 bytes per entry more)."""
    from .information import run_ranges, split_ranges

    if X.format != "csr" or X.nnz < 2**16:
        Xc = X.tocsc().astype(dtype)
        return Xc.data, Xc.indices, Xc.indptr.astype(np.int64)
    n, m = X.shape
    indptr = X.indptr.astype(np.int64)
    ranges = split_ranges(n)
    slots = np.zeros((len(ranges) + 1, m), dtype=np.int64)  # row p + 1: run p's entries per column
    run_ranges(lambda p, lo, hi: _count_columns(X.indices, indptr, slots[p + 1], lo, hi), ranges)
    totals = slots.sum(axis=0)
    col_ptr = np.concatenate([[0], np.cumsum(totals)])
    slots = np.cumsum(slots, axis=0)[:-1] + col_ptr[:-1]  # run p's first position in every column
    data = np.empty(X.nnz, dtype=dtype)
    rows = np.empty(X.nnz, dtype=np.int32 if n < 2**31 else np.int64)
    run_ranges(lambda p, lo, hi: _scatter_rows(X.data, X.indices, indptr, slots[p], data, rows, lo, hi), ranges)
    return data, rows, col_ptr


@njit(nogil=True, cache=True)
def _count_columns(indices, indptr, counts, lo, hi):
    for k in range(indptr[lo], indptr[hi]):
        counts[indices[k]] += 1


@njit(nogil=True, cache=True)
def _scatter_rows(data, indices, indptr, slot, out_data, out_rows, lo, hi):
    """Rows ``lo..hi`` of a CSR matrix into their CSC positions (``slot``: this run's next position per column)."""
    for s in range(lo, hi):
        for k in range(indptr[s], indptr[s + 1]):
            g = indices[k]
            pos = slot[g]
            out_data[pos] = data[k]
            out_rows[pos] = s
            slot[g] = pos + 1


@njit(nogil=True, cache=True)
def _column_sum_squares(data, indptr, mean, out, lo, hi):
    """``out[g] = sum_k (data[k] - mean[g])**2`` over each CSC column g of ``lo..hi``, in its entry order."""
    for g in range(lo, hi):
        acc = 0.0
        for k in range(indptr[g], indptr[g + 1]):
            d = data[k] - mean[g]
            acc += d * d
        out[g] = acc


def scaled_column_moments(X):
    """``(mean, ss, s)``: mean and centred sum of squares of ``X[:, g] / s[g]`` (float64), ``s`` from
    :func:`column_scales`.  The moments of X itself are ``mean * s`` and ``ss * s**2``.  A Dask X (chunked by
    samples) is reduced chunk by chunk (:func:`bioqpfs._kernels.discretize_dask.dask_scaled_moments`)."""
    from .counting_dask import is_dask_array

    if is_dask_array(X):
        from .discretize_dask import dask_scaled_moments

        return dask_scaled_moments(X)
    n, m = X.shape
    s = column_scales(X)
    if sp.issparse(X):
        from .._validation import memory_guard
        from .information import run_ranges, split_ranges

        scaled = bool((s != 1).any())
        memory_guard((12 + 8 * scaled) * X.nnz + 16 * m,
                     f"the float64 columns of the {n} x {m} sparse X ({X.nnz} stored values, 12 bytes each)",
                     ["genes", "lazy", "samples"])
        data, rows, ptr = csc_arrays(X)  # a fresh copy (a CSR X transposed in parallel): rescaling it in place is safe
        del rows  # the moments need each column's values, not their samples
        counts = np.diff(ptr)
        if scaled:
            data /= np.repeat(s, counts)
        # the column sums as scipy's ``Xs.sum(axis=0)`` of the CSC copy forms them (one reduceat over the non-empty
        # columns), bit for bit
        filled = np.flatnonzero(counts)
        sums = np.zeros(m)
        if filled.size:
            sums[filled] = np.add.reduceat(data, ptr[filled])
        mean = sums / n
        # two-pass formula for accuracy (zeros contribute mean^2 each), each column's squares summed in sample
        # order (as np.bincount of the entries would, bit for bit), the columns in parallel
        ss = np.zeros(m)
        run_ranges(lambda _, lo, hi: _column_sum_squares(data, ptr, mean, ss, lo, hi), split_ranges(m))
        ss += (n - counts) * mean**2
        return mean, ss, s
    # dense: blocks of columns (:data:`MOMENT_BLOCK_BYTES`), never a float64 copy of the whole X.  numpy reduces a
    # block of two or more columns sample after sample, as it does the whole matrix (a single column would be
    # summed pairwise), so the moments are the whole-matrix formulas' bit for bit
    mean, ss = np.empty(m), np.empty(m)
    for start, stop in column_blocks(X, MOMENT_BLOCK_BYTES, min_width=2):
        block = dense_columns(X, start, stop)
        if (s[start:stop] != 1).any():
            block = block / s[start:stop]
        mean[start:stop] = block.mean(axis=0)
        centred = block - mean[start:stop]
        np.square(centred, out=centred)
        ss[start:stop] = centred.sum(axis=0)
    return mean, ss, s


def shared_column_moments(X):
    """:func:`scaled_column_moments` of X computed once per call: within
    :func:`bioqpfs._kernels.counting_dask.pass_memo` (opened around every public call) the result is kept for
    this very X -- the constant-gene test of ``prepare``, the mean +- sd thresholds and the standardisations
    of one call share it -- and carried over, sliced, to the gene subset of
    :func:`bioqpfs._kernels.counting_dask.take_genes` (each gene's moments are computed alone: the same bits).
    Outside a call, or for another matrix (a copy, a row subset), they are computed afresh."""
    from .counting_dask import memoized

    return memoized("moments", X, lambda: scaled_column_moments(X))


def column_moments(X):
    """Per-gene mean and centred sum of squares (float64); dense or sparse X.

    For genes of extreme magnitude the sum of squares can exceed the float64 range (inf); use
    :func:`scaled_column_moments` where that matters.
    """
    mean, ss, s = scaled_column_moments(X)
    with np.errstate(over="ignore"):
        return mean * s, ss * s**2


def _standardised(X, cols, mean, scale, s=None):
    """(X[:, cols] / s - mean) * scale as dense float64 (``s``: divisors of :func:`column_scales`, default 1);
    scale is 0 for constant genes.  One fresh float64 array, standardised in place (X is never written)."""
    if sp.issparse(X) and X.format not in ("csr", "csc"):   # a Dask chunk of COO (its meta said numpy)
        X = X.tocsr()
    block = X[:, cols]
    if sp.issparse(block):
        block = block.astype(np.float64, copy=False).toarray()   # the float64 entries first: one dense array
    else:
        block = np.array(block, dtype=np.float64)   # a copy even of float64 X: written in place below
    if s is not None:
        block /= s[cols]
    block -= mean[cols]
    block *= scale[cols]
    return block


#: a gene whose values differ by less than this many units in the last place of its mean is constant
CONSTANT_ULPS = 64


def constant_columns(mean, ss, n):
    """Whether each gene is constant: its centred sum of squares is at most ``n * (CONSTANT_ULPS * eps * mean)**2``.

    A relative tolerance: a gene equal to 0.1 (or 4.2) in every sample has a centred sum of squares of ~1e-32
    (~1e-28) from the rounding of its mean, not 0; scaled by that it would get a correlation of any size.
    ``mean`` and ``ss`` as :func:`scaled_column_moments` gives them (the rule is the same for ``X / s``).
    """
    return ss <= n * (CONSTANT_ULPS * np.finfo(np.float64).eps * mean) ** 2


def _inverse_norms(ss, mean, n):
    """``(scale, nz)``: ``1 / sqrt(ss)`` of the genes that vary (``nz``), 0 for the constant ones
    (:func:`constant_columns`)."""
    nz = ~constant_columns(mean, ss, n)
    scale = np.zeros(ss.size)
    scale[nz] = 1.0 / np.sqrt(ss[nz])
    return scale, nz


def abs_pearson(X, *, rows=None, dtype=np.float64, block=2048):
    """|Pearson correlation| matrix (genes x genes, or ``rows`` x genes), eq. 3 of the QPFS paper.

    Computed blocked as ``|Z_I^T Z_J|`` with ``Z`` the columns centred and scaled to unit norm.  Numpy or
    scipy.sparse X; a Dask array chunked by samples sums the chunks' ``Z_I^T Z_J`` (:func:`_dask_pearson`).
    A constant gene has no defined correlation: its row and column (diagonal included) are 0.
    """
    return pearson(X, rows=rows, dtype=dtype, block=block, absolute=True)


def pearson(X, *, rows=None, dtype=np.float64, block=2048, absolute=False, moments=None):
    """Pearson correlation matrix (genes x genes, or ``rows`` x genes), signed unless ``absolute``: the total
    scatter ``S_T = Z^T Z / n`` of z-scored genes (LDFS).  ``moments``: X's :func:`scaled_column_moments` where
    the caller has them already.  As :func:`abs_pearson` otherwise."""
    n, m = X.shape
    mean, ss, s = scaled_column_moments(X) if moments is None else moments
    scale, nz = _inverse_norms(ss, mean, n)
    row_idx = np.arange(m) if rows is None else np.asarray(rows, dtype=np.int64)
    out_bytes = row_idx.size * m * np.dtype(dtype).itemsize
    from .counting_dask import is_dask_array

    if not is_dask_array(X):
        block = product_block_width(n, m, block, out_bytes, sparse_bytes=sparse_slice_bytes(X, block))
    out = np.empty((row_idx.size, m), dtype=dtype)
    if is_dask_array(X):
        _dask_pearson(X, row_idx, mean, scale, s, block, out, absolute=absolute)
    else:
        for i0, j0, product in _product_blocks(X, row_idx, mean, scale, s, block):
            tile = out[i0 : i0 + block, j0 : j0 + block]
            np.abs(product, out=tile, casting="unsafe") if absolute else np.copyto(tile, product, casting="unsafe")
    # exact ones on the diagonal of non-constant genes (GEMM rounding leaves 1 +- 1e-16)
    pos = np.arange(row_idx.size)
    out[pos, row_idx] = nz[row_idx].astype(dtype)
    return out


#: fewest genes per standardised block of :func:`pearson` when memory is short (below it the GEMMs get slow)
MIN_PRODUCT_BLOCK = 64


def sparse_slice_bytes(X, block):
    """``b[w - 1]``: the bytes that :func:`_standardised` holds beside its dense block for a ``w``-gene block of a
    sparse X (``w <= block``), at most: the sparse column slice and, unless X is float64, its float64 copy, for the
    ``w`` genes with the most stored entries.  ``None`` for a dense X."""
    if not sp.issparse(X):
        return None
    X = X if X.format in ("csr", "csc") else X.tocsr()
    col_nnz = np.diff(X.indptr) if X.format == "csc" else np.bincount(X.indices, minlength=X.shape[1])
    per_entry = X.data.itemsize + X.indices.itemsize
    if X.dtype != np.float64:
        per_entry += 8 + X.indices.itemsize
    top = np.sort(col_nnz)[::-1][:max(1, min(block, X.shape[1]))]
    return per_entry * np.cumsum(top, dtype=np.int64)


def product_block_width(n, m, block, out_bytes=0, *, sparse_bytes=None):
    """Genes per standardised block of :func:`pearson` on ``n`` samples: ``block`` (at most ``m``) where two
    ``n x block`` float64 blocks and their product (and, for a sparse X, the column slice behind a block,
    ``sparse_bytes`` of :func:`sparse_slice_bytes`) fit beside the ``out_bytes`` output in 0.8 of the available
    memory (:func:`bioqpfs._validation.available_memory`), else as many as fit; refused (a ``MemoryError``)
    when not even :data:`MIN_PRODUCT_BLOCK` genes fit.  The products' rounding depends on the block width (the
    GEMM tiling), so a full-width block is kept wherever it fits: results differ in the last bits only where
    memory is too short for it."""
    from .._validation import available_memory, memory_guard

    def need(b):
        b = np.asarray(b)
        extra = 0 if sparse_bytes is None else sparse_bytes[np.minimum(b, sparse_bytes.size) - 1]
        return out_bytes + 2 * 8 * n * b + 8 * b * b + extra

    width = max(1, min(block, m))
    avail, _ = available_memory()
    if avail is not None and need(width) > 0.8 * avail:
        widths = np.arange(1, width + 1)
        fit = widths[need(widths) <= 0.8 * avail]
        width = max(min(width, MIN_PRODUCT_BLOCK), int(fit[-1]) if fit.size else 0)
    memory_guard(int(need(width)), f"the {n} x {width} float64 standardised gene blocks of the correlation "
                 f"(with its output)", ["genes", "samples"])
    return width


def _product_blocks(X, rows, mean, scale, s, block):
    """``(i0, j0, Z_I^T Z_J)`` for the ``block`` x ``block`` tiles of ``Z_rows^T Z`` (Z: X's columns centred by
    ``mean`` and scaled by ``scale``, after the divisors ``s``), one standardised row block at a time."""
    m = X.shape[1]
    for i0 in range(0, rows.size, block):
        ZI = _standardised(X, rows[i0 : i0 + block], mean, scale, s)
        for j0 in range(0, m, block):
            yield i0, j0, ZI.T @ _standardised(X, np.arange(j0, min(m, j0 + block)), mean, scale, s)


def _chunk_products(x, *, rows, mean, scale, s, block):
    """One sample chunk's ``Z_rows^T Z`` (float64, rows x genes) with the global centring and scaling."""
    out = np.empty((rows.size, x.shape[1]))
    for i0, j0, product in _product_blocks(x, rows, mean, scale, s, block):
        out[i0 : i0 + block, j0 : j0 + block] = product
    return out


def _dask_pearson(X, row_idx, mean, scale, s, block, out, absolute):
    """``out[:] = Z_rows^T Z`` (its absolute values when ``absolute``) of a Dask X: the products are sums over
    samples, so each chunk's are summed (:func:`bioqpfs._kernels.counting_dask.reduce_chunks`) about the global moments (two passes of their own,
    shared with the rest of the call).  Rows go in strips of at most ``STRIP_BYTES`` of float64 products, one
    pass each, so a worker holds one chunk's standardised block (samples x ``block`` genes) and two strips."""
    from .counting_dask import STRIP_BYTES, reduce_chunks, sample_chunked

    X = sample_chunked(X)
    m = X.shape[1]
    per_strip = max(1, STRIP_BYTES // (8 * max(m, 1)))
    for r0 in range(0, row_idx.size, per_strip):
        rows = row_idx[r0 : r0 + per_strip]
        sums = reduce_chunks(_chunk_products, [X], rows=rows, mean=mean, scale=scale, s=s, block=block,
                             result_bytes=8 * rows.size * m)
        target = out[r0 : r0 + rows.size]
        np.abs(sums, out=target, casting="unsafe") if absolute else np.copyto(target, sums, casting="unsafe")


def hall_relevance(X, y_codes):
    """F_i = sum_k p(K=k) |rho(v_i, 1[K=k])| (Hall 2000; QPFS section 2.1).

    Constant genes get F = 0.  Numpy or scipy.sparse X, or a Dask array chunked by samples (the products
    ``X^T (1[K=k] - p_k)`` are summed over its chunks).
    """
    from .counting_dask import is_dask_array, reduce_chunks, sample_chunked

    n, m = X.shape
    n_classes = int(y_codes.max()) + 1
    ind = np.zeros((n, n_classes))
    ind[np.arange(n), y_codes] = 1.0
    p = ind.mean(axis=0)
    ind_c = ind - p
    ind_scale = 1.0 / np.sqrt((ind_c**2).sum(axis=0))
    mean, ss, s = shared_column_moments(X)
    scale, _ = _inverse_norms(ss, mean, n)
    # sum_s (x_s - mean) ind_c[s, k] = sum_s x_s ind_c[s, k]  (ind_c columns sum to 0)
    if is_dask_array(X):
        XtI = reduce_chunks(_chunk_class_products, [sample_chunked(X)], vectors=dict(ind_c=ind_c), s=s)
    elif sp.issparse(X):
        XtI = _chunk_class_products(X, ind_c=ind_c, s=s)
    else:  # a dense X in column blocks: never a float64 copy of the whole matrix
        XtI = np.empty((m, n_classes))
        for start, stop in column_blocks(X, MOMENT_BLOCK_BYTES):
            XtI[start:stop] = _chunk_class_products(X[:, start:stop], ind_c=ind_c, s=s[start:stop])
    rho = XtI * scale[:, None] * ind_scale[None, :]
    return np.abs(rho) @ p


def _chunk_class_products(x, *, ind_c, s):
    """``(x / s)^T ind_c`` of a block of samples (genes x classes, float64)."""
    return np.asarray(divide_columns(x, s).T @ ind_c)


skip_failed_cache_writes(globals())  # numba's cache is an optimisation: a full disk must not fail a selection
