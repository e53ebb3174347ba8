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

The codes themselves stay lazy: ``X.map_blocks`` of the in-memory rule with the global thresholds, recoded to
``0..k_g-1``; every count pass recomputes them chunk by chunk (persist them on a cluster to trade worker
memory, 1 byte per entry, for time).  Chunks may be numpy arrays or scipy.sparse matrices (what
``anndata.experimental.read_elem_lazy`` gives for sparse X).

``"quantile"`` / ``"zero_quantile"`` (exact quantiles need every value of a gene in one place) and ``"mdl"``
(a sort of every gene's values) are refused for now, with the rule to use instead.
"""
from __future__ import annotations

import numpy as np

from . import discretize as _disc
from .correlation import scaled_column_moments, scales_of_amax
from .counting_dask import reduce_chunks, sample_chunked

__all__ = ["dask_codes", "dask_zero_fraction", "dask_mean_sd", "dask_scaled_moments", "dask_nonfinite_genes"]


def _abs_max(x):
    import scipy.sparse as sp

    if sp.issparse(x):
        return np.asarray(abs(x).max(axis=0).toarray(), dtype=np.float64).ravel()
    x = np.asarray(x)
    return np.maximum(x.max(axis=0), -x.min(axis=0)).astype(np.float64)


def _chunk_moments(x):
    """``(max |x|, n, mean, s)`` of one chunk, per gene (the mean of ``x / s``)."""
    mean, _, s = scaled_column_moments(x)
    return _abs_max(x), float(x.shape[0]), mean, s


def _combine_moments(*parts):
    """Chan's pairwise update of chunk means, at the common power-of-two scale of the larger max |x|."""
    amax = np.max([p[0] for p in parts], axis=0)
    s = scales_of_amax(amax)
    n, mean = 0.0, None
    for _, n_b, mean_b, s_b in parts:
        mean_b = mean_b * (s_b / s)  # a power of two: exact
        if mean is None:
            n, mean = n_b, mean_b
            continue
        n += n_b
        mean = mean + (mean_b - mean) * (n_b / n)
    return amax, n, mean, s


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
    _, n, mean, s = reduce_chunks(_chunk_moments, [X], combine=_combine_moments)
    return mean, reduce_chunks(_chunk_centred_ss, [X], mean=mean, s=s), s


def dask_mean_sd(X):
    """Per-gene ``(mean, sd, s)`` of a Dask X, as :func:`bioqpfs._kernels.discretize._column_mean_sd` (ddof=1)."""
    mean, ss, s = dask_scaled_moments(X)
    return mean, np.sqrt(np.maximum(ss / max(X.shape[0] - 1.0, 1.0), 0.0)), s


def _chunk_nonzero(x):
    import scipy.sparse as sp

    return np.array([x.count_nonzero() if sp.issparse(x) else np.count_nonzero(x)], dtype=np.int64)


def dask_zero_fraction(X):
    """The fraction of exact zeros in a Dask X (for ``discretization="auto"``)."""
    n, m = X.shape
    return 1.0 - int(reduce_chunks(_chunk_nonzero, [X])[0]) / (n * m) if n * m else 0.0


def _chunk_nonfinite(x):
    import scipy.sparse as sp

    if sp.issparse(x):
        x = x.tocoo()
        return np.bincount(x.col[~np.isfinite(x.data)], minlength=x.shape[1])
    return (~np.isfinite(np.asarray(x))).sum(axis=0)


def dask_nonfinite_genes(X):
    """Indices of the genes of a Dask X with a NaN or infinite value (one pass)."""
    return np.flatnonzero(reduce_chunks(_chunk_nonfinite, [X]))


def _chunk_presence(x, *, edges, n_bins):
    return _disc.bin_presence(_disc.codes_from_edges(x, edges), n_bins)


def _chunk_codes(x, edges, rank):
    c = _disc.codes_from_edges(x, edges)
    return rank[c, np.arange(c.shape[1])[None, :]]


def dask_codes(X, discretization, *, n_bins=3):
    """``(codes, n_levels)`` of a Dask X: codes a lazy uint8 Dask array with X's sample chunks (gene axis in one
    chunk), ``n_levels`` numpy.  ``discretization`` is already resolved (not ``"auto"``)."""
    X = sample_chunked(X)
    if discretization == "mean_sd":
        mean, sd, s = dask_mean_sd(X)
        with np.errstate(over="ignore"):  # an edge beyond the float range is +-inf: no value crosses it
            edges = np.vstack([mean - sd, mean + sd]) * s
        present = reduce_chunks(_chunk_presence, [X], edges=edges, n_bins=3)
        rank = _disc.bin_ranks(present)
        codes = X.map_blocks(_chunk_codes, edges, rank, dtype=np.uint8, meta=np.empty((0, 0), np.uint8))
        return codes, present.sum(axis=0).astype(np.int64)
    if discretization in ("quantile", "zero_quantile"):
        raise ValueError(
            f"discretization={discretization!r} is not available for a Dask array yet (exact quantiles need all "
            "of a gene's values in one place); use discretization='mean_sd' (exact on Dask), or load X into "
            "memory (X.compute()) for quantile bins")
    if discretization == "mdl":
        raise ValueError("discretization='mdl' is not available for a Dask array (MDL sorts every gene's values: "
                         "not in bounded memory); use discretization='mean_sd', or load X into memory (X.compute())")
    if discretization is None:
        raise ValueError("discretization=None (X already holds integer levels) is not available for a Dask array "
                         "yet; use discretization='mean_sd', or load X into memory (X.compute())")
    raise ValueError(f"unknown discretization {discretization!r}; choose one of {_disc.DISCRETIZATIONS}")
