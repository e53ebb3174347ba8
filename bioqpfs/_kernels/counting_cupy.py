"""The cupy counting backend: one-hot GEMMs on a CUDA GPU (issue 17; install the ``gpu`` extra).

Implements :class:`bioqpfs._kernels.counting.CountingBackend` (see that module for the contract).  The codes are
moved to the GPU once (uint8, ``n_samples x n_genes`` bytes; numpy codes are copied, cupy codes used as they are);
a joint block is ``sum over sample chunks of O_I^T (W O_J)``, the chunk's one-hot indicators of genes I and J
(``nb`` materialised bins each, bin-major columns) built on the device:

* **exact**: unweighted indicators are float32 and each sample chunk's GEMM accumulates in float32, exact for
  integer counts below 2**24 (a chunk never has more samples); the chunks are summed in the count dtype, float64
  from 2**24 samples on (the :class:`bioqpfs._kernels.information.CodeTable`'s choice).  Not int8
  (cuBLAS runs it slower and its int32 path is not what cupy's ``matmul`` gives) and not float16 outputs (integers
  stop being exact above 2048).  Weighted counts (``class_weight="balanced"``, batch strata) are float64 GEMMs.
* **per class**: the codes are sorted by class once on the device, so each class is one run of rows.

Besides the contract's ``joint`` (a numpy result), :meth:`CupyCounting.joint_device` leaves the counts on the
device: :func:`bioqpfs._kernels.information.pairwise_information` turns them into information entries there
(:func:`bioqpfs._kernels.information._array_phi_sums`) and copies only the output back.

The array module is the class attribute ``xp`` (cupy, imported on first use); the tests run the same code with
numpy in its place (``tests/test_gpu.py``), so the backend's logic is checked on machines without a GPU too.
"""
from __future__ import annotations

import numpy as np

from .. import _device
from .counting import MAX_WEIGHT_LEVELS, CountingBackend, class_runs

__all__ = ["CupyCounting", "DEVICE_ONEHOT_BUDGET", "DEVICE_BLOCK_BUDGET"]

#: bytes of one sample chunk's one-hot indicator block on the device
DEVICE_ONEHOT_BUDGET = 512 * 2**20
#: bytes of one block pair's counts and phi-sum temporaries on the device (capped at a quarter of the free memory)
DEVICE_BLOCK_BUDGET = 4 * 2**30


def _cupy():
    import cupy

    return cupy


class CupyCounting(CountingBackend):
    """Counts of integer codes on a CUDA device (see :mod:`bioqpfs._kernels.counting_cupy`)."""

    #: the array module (None: cupy, imported on first use)
    xp = None

    @classmethod
    def array_module(cls):
        return cls.xp if cls.xp is not None else _cupy()

    @classmethod
    def accepts(cls, codes):
        from .._device import is_cupy_array

        return is_cupy_array(codes)

    @classmethod
    def to_host(cls, a):
        """A device array as numpy."""
        xp = cls.array_module()
        return a.get() if hasattr(a, "get") and xp is not np else np.asarray(a)

    def __init__(self, codes, *, n_bins, groups=None, weights=None, count_dtype=np.float32):
        xp = self.array_module()
        if not self.accepts(codes):  # host codes to be copied: refused clearly when they would crowd the device
            n_bytes, free = int(np.prod(np.shape(codes))), self.free_bytes()
            if free is not None and n_bytes > free // 2:
                n, m = np.shape(codes)
                raise MemoryError(
                    f"the {n} x {m} codes take {n_bytes / 2**30:.1f} GiB on the GPU, more than half of its free memory "
                    f"({free / 2**30:.1f} GiB), which the counts need too: pass backend='cpu', or X as a Dask array "
                    "chunked by samples (each chunk is then counted on the GPU in turn)")
        self.codes = xp.asarray(codes, dtype=xp.uint8)
        if self.codes.ndim != 2:
            raise ValueError(f"codes must be 2-D (samples x genes), got shape {self.codes.shape}")
        self.n_samples, self.n_genes = (int(s) for s in self.codes.shape)
        self.n_bins = int(n_bins)
        self.nb = self.n_bins - 1
        self.groups = None if groups is None else np.asarray(groups)
        self.weights = None if weights is None else np.asarray(weights, dtype=np.float64)
        self.count_dtype = count_dtype
        self.all_rows = slice(0, self.n_samples)
        self._w = None if self.weights is None else xp.asarray(self.weights)
        order, self.class_rows = class_runs(self.groups, self.n_samples)
        d_order = None if order is None else xp.asarray(order)
        self.by_class = self.codes if order is None else self.codes[d_order]
        self._w_by_class = self._w if order is None or self._w is None else self._w[d_order]
        self._host_w_by_class = None if self.weights is None else (self.weights if order is None else
                                                                    self.weights[order])
        self.n_classes = len(self.class_rows)

    @property
    def native_codes(self):
        return self.codes

    @classmethod
    def take_rows(cls, codes, rows):
        xp = cls.array_module()
        return xp.asarray(codes)[xp.asarray(np.asarray(rows, dtype=np.int64))]

    def codes_of(self, genes):
        if not isinstance(genes, slice):
            genes = self.array_module().asarray(np.asarray(genes, dtype=np.int64))
        return self.to_host(self.codes[:, genes])

    def _weights_of(self, per_class):
        if self._w is None:
            return None
        return self._w_by_class if per_class and self.groups is not None else self._w

    def margins(self):
        """As the numpy backend's, bit for bit: integer counts; with weights of at most :data:`MAX_WEIGHT_LEVELS`
        values (class weights) each class's samples of one weight value counted and ``value x count`` added in
        float64 in ascending value order; with other weights a GEMV per bin."""
        xp = self.array_module()
        w_host = self._host_w_by_class
        if w_host is not None and np.unique(w_host).size <= MAX_WEIGHT_LEVELS:
            out = np.zeros((self.n_classes, self.n_genes, self.nb), dtype=np.float64)
            for c, rows in enumerate(self.class_rows):
                w_c = w_host[rows]
                values = np.unique(w_c)
                for value in values:
                    sel = rows if values.size == 1 else xp.asarray(np.flatnonzero(w_c == value) + rows.start)
                    block = self.by_class[sel]
                    counts = xp.stack([(block == a).sum(axis=0) for a in range(self.nb)], axis=1)
                    out[c] += value * self.to_host(counts).astype(np.float64)
            return out
        out = xp.empty((self.n_classes, self.n_genes, self.nb), dtype=xp.float64)
        w = self._weights_of(True)
        for c, rows in enumerate(self.class_rows):
            block = self.by_class[rows]
            for a in range(self.nb):
                hit = block == a
                out[c, :, a] = hit.sum(axis=0) if w is None else w[rows] @ hit.astype(xp.float64)
        return self.to_host(out)

    def free_bytes(self):
        """Free device memory in bytes (cupy's pool included); None when unknown (the numpy stand-in)."""
        xp = self.array_module()
        if xp is np:
            return None
        return _device.free_device_bytes()

    def block_budget(self):
        """Bytes one block pair may use on the device: :data:`DEVICE_BLOCK_BUDGET`, at most a quarter of the free
        memory."""
        free = self.free_bytes()
        return DEVICE_BLOCK_BUDGET if free is None else max(64 * 2**20, min(DEVICE_BLOCK_BUDGET, free // 4))

    def onehot(self, genes, rows, source, dtype):
        """Indicators ``(len(rows), nb * len(genes))`` in ``dtype`` on the device, bin-major (as the numpy backend's)."""
        xp = self.array_module()
        sub = source[rows, genes] if isinstance(genes, slice) else source[rows][:, genes]
        g = sub.shape[1]
        out = xp.empty((sub.shape[0], self.nb * g), dtype=dtype)
        for a in range(self.nb):
            out[:, a * g:(a + 1) * g] = sub == a
        return out

    def joint_device(self, genes_I, genes_J, *, per_class, other=None):
        """:meth:`joint`, the counts left on the device (``count_dtype``)."""
        xp = self.array_module()
        cols = self if other is None else other
        if not isinstance(cols, CupyCounting):
            raise TypeError(f"the column codes are counted by {type(cols).__name__}, the rows on the GPU: build both "
                            "tables under the same backend")
        if cols.n_samples != self.n_samples:
            raise ValueError(f"the two code tables have {self.n_samples} and {cols.n_samples} samples")
        same_block = cols is self and isinstance(genes_I, slice) and isinstance(genes_J, slice) and \
            genes_I == genes_J
        if not isinstance(genes_I, slice):
            genes_I = xp.asarray(np.asarray(genes_I, dtype=np.int64))
        if not isinstance(genes_J, slice):
            genes_J = xp.asarray(np.asarray(genes_J, dtype=np.int64))
        bI = len(range(self.n_genes)[genes_I]) if isinstance(genes_I, slice) else int(genes_I.size)
        bJ = len(range(cols.n_genes)[genes_J]) if isinstance(genes_J, slice) else int(genes_J.size)
        parts = self.class_rows if per_class else [self.all_rows]
        src, src_cols = (self.by_class, cols.by_class) if per_class else (self.codes, cols.codes)
        weights = self._weights_of(per_class)
        dt = np.dtype(self.count_dtype)
        # unweighted: every chunk's GEMM is float32 on 0/1 (exact: a chunk has fewer than 2**24 samples), summed in
        # the count dtype (float32 below 2**24 samples in all, float64 beyond: the CodeTable's choice); weighted:
        # float64 GEMMs
        gemm_dt = np.dtype(np.float32) if weights is None else np.dtype(np.float64)
        G = xp.zeros((len(parts), bI * self.nb, bJ * cols.nb), dtype=dt)
        width = max(bI * self.nb, bJ * cols.nb, 1)
        chunk = int(min(2**24 - 1, max(1, DEVICE_ONEHOT_BUDGET // (2 * gemm_dt.itemsize * width))))
        for c, class_rows in enumerate(parts):
            for lo in range(class_rows.start, class_rows.stop, chunk):
                rows = slice(lo, min(class_rows.stop, lo + chunk))
                A = self.onehot(genes_I, rows, src, gemm_dt)
                B = A if same_block else cols.onehot(genes_J, rows, src_cols, gemm_dt)
                if weights is not None:  # weighted counts sum_s w_s [x_si = a][x_sj = b], float64
                    B = B * weights[rows][:, None]
                G[c] += A.T @ B
        return G

    def joint(self, genes_I, genes_J, *, per_class, other=None, out=None):
        return self.to_host(self.joint_device(genes_I, genes_J, per_class=per_class, other=other))
