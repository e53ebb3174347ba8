"""The Dask counting backend: codes in a ``dask.array.Array`` chunked by samples, counted chunk by chunk.

Implements :class:`bioqpfs._kernels.counting.CountingBackend` (see that module for the contract).  Every
count is a sum over samples, so each sample chunk is counted on its own -- by the numpy backend
(:class:`bioqpfs._kernels.counting_numpy.NumpyCounting`) on the worker that holds the chunk, with the
chunk's slice of the class codes and sample weights -- and the small per-chunk count blocks are summed by
Dask's tree reduction (``da.stack(parts).sum(axis=0)``, the way ``scanpy.get.aggregate`` sums per-chunk
aggregates).  Only count blocks (``C x nb|I| x nb|J|``) travel; the codes stay where their chunks are.
Unweighted counts are integers, exact in float32 below 2**24 samples whatever the chunking; weighted counts
are float64 sums, equal to the numpy backend's to float64 rounding.

Each :meth:`DaskCounting.joint` call is one pass over the codes (one Dask graph); run under
``dask.distributed`` the chunks are counted on the cluster's workers.
"""
from __future__ import annotations

import numpy as np

from .counting import CountingBackend
from .counting_numpy import NumpyCounting

__all__ = ["DaskCounting", "is_dask_array", "sample_chunked"]


def is_dask_array(x) -> bool:
    """Whether ``x`` is a ``dask.array.Array`` (without importing dask when it is not installed)."""
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover - dask is an optional extra
        return False
    return isinstance(x, da.Array)


def sample_chunked(x, name="X"):
    """``x`` (a 2-D dask array) with the gene axis in one chunk and no empty sample chunk.

    Counting reads whole rows (all genes of a sample chunk), as ``scanpy.get.aggregate`` does; a matrix split
    along genes is rechunked to one gene chunk (sample chunks kept, so a chunk holds ``rows x genes``).  Empty
    sample chunks are dropped (Dask's own reductions fail on them; they hold no counts).  An
    array with unknown chunk sizes (NaN, e.g. after boolean indexing) is refused: call
    ``x.compute_chunk_sizes()`` first.
    """
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D (samples x genes), got a dask array of shape {x.shape}")
    if any(np.isnan(c) for axis in x.chunks for c in axis):
        raise ValueError(f"{name} is a dask array with unknown chunk sizes; call {name}.compute_chunk_sizes() first")
    rows = tuple(c for c in x.chunks[0] if c) or (0,)
    if len(x.chunks[1]) > 1 or rows != x.chunks[0]:
        x = x.rechunk((rows, -1))
    return x


def _chunk_backend(codes, groups, weights, n_bins, count_dtype):
    return NumpyCounting(np.asarray(codes), n_bins=n_bins, groups=groups, weights=weights, count_dtype=count_dtype)


def _padded(counts, n_classes):
    """Per-class counts of a chunk (classes ``0..max present``) padded with zero blocks to ``n_classes``."""
    if counts.shape[0] == n_classes:
        return counts
    out = np.zeros((n_classes,) + counts.shape[1:], dtype=counts.dtype)
    out[:counts.shape[0]] = counts
    return out


def _chunk_margins(codes, groups, weights, n_bins, count_dtype, n_classes):
    return _padded(_chunk_backend(codes, groups, weights, n_bins, count_dtype).margins(), n_classes)


def _chunk_joint(codes, *codes_cols, groups, weights, genes_I, genes_J, n_bins, n_bins_cols, count_dtype,
                 n_classes):
    """One chunk's joint counts (per class when ``groups`` is given), padded to ``n_classes``."""
    rows = _chunk_backend(codes, groups, weights, n_bins, count_dtype)
    other = _chunk_backend(codes_cols[0], groups, weights, n_bins_cols, count_dtype) if codes_cols else None
    counts = rows.joint(genes_I, genes_J, per_class=groups is not None, other=other)
    return _padded(counts, n_classes)


class DaskCounting(CountingBackend):
    """Counts of integer codes in a Dask array chunked by samples (see :mod:`bioqpfs._kernels.counting`).

    A code matrix split along genes is rechunked to one gene chunk (:func:`sample_chunked`).
    """

    @classmethod
    def accepts(cls, codes):
        return is_dask_array(codes)

    def __init__(self, codes, *, n_bins, groups=None, weights=None, count_dtype=np.float32):
        if not is_dask_array(codes):
            raise TypeError(f"the dask counting backend counts a dask array, got {type(codes).__name__}")
        self.codes = sample_chunked(codes, "codes")
        self.n_samples, self.n_genes = self.codes.shape
        self.n_bins = int(n_bins)
        self.nb = self.n_bins - 1
        self.groups = None if groups is None else np.asarray(groups)
        self.weights = None if weights is None else np.asarray(weights, dtype=np.float64)
        self.count_dtype = count_dtype
        self.n_classes = 1 if self.groups is None or not self.groups.size else int(self.groups.max()) + 1
        bounds = np.concatenate([[0], np.cumsum(self.codes.chunks[0])]).astype(np.int64)
        self.row_chunks = [slice(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]

    @property
    def native_codes(self):
        return self.codes

    def codes_of(self, genes):
        return np.asarray(self.codes[:, genes].compute(), dtype=np.uint8)

    def _sum_per_chunk(self, func, shape, dtype, blocks, per_class=True, **kwargs):
        """``sum over sample chunks k of func(block_k..., groups_k, weights_k, **kwargs)``: a numpy array ``shape``.

        ``blocks``: dask arrays with this backend's sample chunks (gene axis in one chunk); each chunk's slice
        of the class codes and weights is passed with it (small numpy vectors, sliced here by chunk offsets).
        """
        import dask
        import dask.array as da

        parts = []
        delayed_blocks = [b.to_delayed()[:, 0] for b in blocks]
        for k, rows in enumerate(self.row_chunks):
            g = None if self.groups is None or not per_class else self.groups[rows]
            w = None if self.weights is None else self.weights[rows]
            part = dask.delayed(func)(*(d[k] for d in delayed_blocks), groups=g, weights=w, **kwargs)
            parts.append(da.from_delayed(part, shape=shape, dtype=dtype))
        if not parts:
            return np.zeros(shape, dtype=dtype)
        return np.asarray(da.stack(parts).sum(axis=0, dtype=dtype).compute(), dtype=dtype)

    def margins(self):
        shape = (self.n_classes, self.n_genes, self.nb)
        return self._sum_per_chunk(_chunk_margins, shape, np.float64, [self.codes], n_bins=self.n_bins,
                                   count_dtype=self.count_dtype, n_classes=self.n_classes)

    def joint(self, genes_I, genes_J, *, per_class, other=None, out=None):
        cols = self if other is None else other
        bI = len(range(self.n_genes)[genes_I]) if isinstance(genes_I, slice) else len(genes_I)
        bJ = len(range(cols.n_genes)[genes_J]) if isinstance(genes_J, slice) else len(genes_J)
        C = self.n_classes if per_class else 1
        shape = (C, bI * self.nb, bJ * cols.nb)
        blocks = [self.codes]
        if other is not None:
            if other.n_samples != self.n_samples:
                raise ValueError(f"the two code tables have {self.n_samples} and {other.n_samples} samples")
            blocks.append(other.codes.rechunk({0: self.codes.chunks[0]}))
        G = self._sum_per_chunk(_chunk_joint, shape, self.count_dtype, blocks, per_class=per_class,
                                genes_I=genes_I, genes_J=genes_J, n_bins=self.n_bins, n_bins_cols=cols.n_bins,
                                count_dtype=self.count_dtype, n_classes=C)
        if out is not None and out.size >= G.size and out.dtype == G.dtype:
            view = out[:G.size].reshape(G.shape)
            view[...] = G
            return view
        return G

