"""Pearson-correlation similarity (QPFS eq. 3) and Hall's multiclass relevance (QPFS section 2.1)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["abs_pearson", "hall_relevance", "column_moments"]


def column_moments(X):
    """Per-gene mean and centred sum of squares (float64); dense or sparse X."""
    n = X.shape[0]
    if sp.issparse(X):
        Xc = X.tocsc()
        mean = np.asarray(Xc.sum(axis=0), dtype=np.float64).ravel() / n
        nnz = np.diff(Xc.indptr)
        dev = Xc.data.astype(np.float64) - np.repeat(mean, nnz)
        ss = np.bincount(np.repeat(np.arange(X.shape[1]), nnz), weights=dev**2, minlength=X.shape[1])
        ss += (n - nnz) * mean**2
    else:
        Xd = np.asarray(X, dtype=np.float64)
        mean = Xd.mean(axis=0)
        ss = ((Xd - mean) ** 2).sum(axis=0)
    return mean, ss


def _standardised(X, cols, mean, scale):
    """(X[:, cols] - mean) * scale as dense float64; scale is 0 for constant genes."""
    block = X[:, cols]
    block = block.toarray() if sp.issparse(block) else np.asarray(block, dtype=np.float64)
    return (block - mean[cols]) * scale[cols]


def abs_pearson(X, *, rows=None, dtype=np.float64, block=2048):
    """|Pearson correlation| matrix (genes x genes, or ``rows`` x genes), eq. 3 of the QPFS paper.

    Computed blocked as ``|Z_I^T Z_J|`` with ``Z`` the columns centred and scaled to unit norm.
    A constant gene has no defined correlation: its row and column (diagonal included) are 0.
    """
    n, m = X.shape
    mean, ss = column_moments(X)
    scale = np.zeros(m)
    nz = ss > 0
    scale[nz] = 1.0 / np.sqrt(ss[nz])
    row_idx = np.arange(m) if rows is None else np.asarray(rows, dtype=np.int64)
    out = np.empty((row_idx.size, m), dtype=dtype)
    for i0 in range(0, row_idx.size, block):
        ZI = _standardised(X, row_idx[i0 : i0 + block], mean, scale)
        for j0 in range(0, m, block):
            ZJ = _standardised(X, np.arange(j0, min(m, j0 + block)), mean, scale)
            np.abs(ZI.T @ ZJ, out=out[i0 : i0 + block, j0 : j0 + block], casting="unsafe")
    # exact ones on the diagonal of non-constant genes (GEMM rounding leaves 1 +- 1e-16)
    pos = np.arange(row_idx.size)
    out[pos, row_idx] = nz[row_idx].astype(dtype)
    return out


def hall_relevance(X, y_codes):
    """F_i = sum_k p(K=k) |rho(v_i, 1[K=k])| (Hall 2000; QPFS section 2.1).

    Constant genes get F = 0.
    """
    n, m = X.shape
    n_classes = int(y_codes.max()) + 1
    ind = np.zeros((n, n_classes))
    ind[np.arange(n), y_codes] = 1.0
    p = ind.mean(axis=0)
    ind_c = ind - p
    ind_scale = 1.0 / np.sqrt((ind_c**2).sum(axis=0))
    mean, ss = column_moments(X)
    scale = np.zeros(m)
    nz = ss > 0
    scale[nz] = 1.0 / np.sqrt(ss[nz])
    # sum_s (x_s - mean) ind_c[s, k] = sum_s x_s ind_c[s, k]  (ind_c columns sum to 0)
    XtI = np.asarray(X.T @ ind_c) if sp.issparse(X) else np.asarray(X, dtype=np.float64).T @ ind_c
    rho = XtI * scale[:, None] * ind_scale[None, :]
    return np.abs(rho) @ p
