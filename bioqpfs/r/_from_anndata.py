"""Python -> R: an AnnData becomes a SingleCellExperiment, SummarizedExperiment, ExpressionSet or matrix.

Values are converted here (NumPy/pandas -> R vectors, matrices, named lists) and the container is
assembled on the R side (``build`` in ``helpers.R``).  The mapping is the table of :mod:`bioqpfs.r`.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from ._session import CLASSES, call, rpy2_modules

__all__ = ["from_anndata"]


def array_to_r(a):
    """1-d numpy/pandas array -> R vector (categorical -> factor, nullable -> NA, object -> character)."""
    ro, default_converter, numpy2ri, localconverter = rpy2_modules()
    if isinstance(a, pd.Series):
        a = a.array
    if isinstance(a.dtype, pd.CategoricalDtype):
        cat = pd.Categorical(a)
        codes = np.asarray(cat.codes, dtype=np.int64) + 1
        f = ro.IntVector([ro.NA_Integer if c == 0 else int(c) for c in codes])
        with localconverter(default_converter):
            return ro.r("function(codes, lev) factor(lev[codes], levels = lev)")(
                f, ro.StrVector([str(c) for c in cat.categories]))
    numpy_backed = pd.arrays.NumpyExtensionArray if hasattr(pd.arrays, "NumpyExtensionArray") else pd.arrays.PandasArray
    if isinstance(a, pd.api.extensions.ExtensionArray) and not isinstance(a, numpy_backed):
        na = np.asarray(pd.isna(a))
        if a.dtype.kind == "b":
            return ro.BoolVector([ro.NA_Logical if n else bool(v) for v, n in zip(a, na)])
        if a.dtype.kind in "iu":
            return ro.IntVector([ro.NA_Integer if n else int(v) for v, n in zip(a, na)])
        if a.dtype.kind == "f":
            return ro.FloatVector([ro.NA_Real if n else float(v) for v, n in zip(a, na)])
        a = np.asarray(a, dtype=object)
    a = np.asarray(a)
    if a.dtype.kind == "b":
        return ro.BoolVector(a.tolist())
    if a.dtype.kind in "iu" and (a.size == 0 or (a.min() > -2**31 and a.max() < 2**31)):
        return ro.IntVector(a.astype(np.int64).tolist())
    if a.dtype.kind in "iuf":
        return ro.FloatVector(a.astype(np.float64).tolist())
    return ro.StrVector([ro.NA_Character if (v is None or (isinstance(v, float) and math.isnan(v))) else str(v)
                         for v in a.tolist()])


def value_to_r(v):
    """Python metadata value -> R (dict -> named list, sequences -> vectors, None -> NULL); None if unsupported."""
    ro, default_converter, numpy2ri, localconverter = rpy2_modules()
    if v is None:
        return ro.NULL
    if isinstance(v, dict):
        items = {str(k): value_to_r(x) for k, x in v.items()}
        return ro.ListVector({k: x for k, x in items.items() if x is not None}) if items else ro.r("list()")
    if isinstance(v, (bool, np.bool_)):
        return ro.BoolVector([bool(v)])
    if isinstance(v, (int, np.integer)):
        return ro.IntVector([int(v)]) if -2**31 < int(v) < 2**31 else ro.FloatVector([float(v)])
    if isinstance(v, (float, np.floating)):
        return ro.FloatVector([float(v)])
    if isinstance(v, str):
        return ro.StrVector([v])
    if isinstance(v, (list, tuple, np.ndarray, pd.Series, pd.Index)):
        from .._io import to_storable

        arr = to_storable(list(v) if isinstance(v, (pd.Series, pd.Index)) else v)
        if isinstance(arr, np.ndarray) and arr.ndim == 1:
            return array_to_r(arr)
        if isinstance(arr, np.ndarray):
            with localconverter(default_converter + numpy2ri.converter) as cv:
                return cv.py2rpy(arr)
    return None


def _matrix_to_r(M):
    """samples x genes numpy/scipy matrix -> genes x samples R matrix (dgCMatrix for sparse input)."""
    ro, default_converter, numpy2ri, localconverter = rpy2_modules()
    import scipy.sparse as sp

    if sp.issparse(M):
        csr = sp.csr_matrix(M)  # CSR of samples x genes == CSC of genes x samples
        csr.sort_indices()
        with localconverter(default_converter + numpy2ri.converter) as cv:
            return call("dgc", cv.py2rpy(csr.indices.astype(np.int32)), cv.py2rpy(csr.indptr.astype(np.int32)),
                         cv.py2rpy(csr.data.astype(np.float64)), ro.IntVector([M.shape[1], M.shape[0]]))
    A = np.asarray(M)
    if A.dtype.kind not in "biuf":
        raise TypeError(f"bioqpfs.r: cannot send a matrix of dtype {A.dtype} to R")
    if A.dtype.kind in "iu" and A.size and (A.min() <= -2**31 or A.max() >= 2**31):
        A = A.astype(np.float64)
    elif A.dtype.kind in "iu":
        A = A.astype(np.int32)
    elif A.dtype.kind == "f":
        A = A.astype(np.float64)
    with localconverter(default_converter + numpy2ri.converter) as cv:
        return cv.py2rpy(np.asfortranarray(A.T))


def _frame_to_r(df):
    ro, *_ = rpy2_modules()
    cols = {str(c): array_to_r(df[c]) for c in df.columns}
    return ro.ListVector(cols) if cols else ro.r("list()")


def from_anndata(adata, to=None, *, assay=None):
    """Convert an AnnData to a Bioconductor container.

    Parameters
    ----------
    adata : AnnData
    to : {"SingleCellExperiment", "SummarizedExperiment", "ExpressionSet", "matrix"}, optional
        Default: the class recorded by :func:`to_anndata` in ``uns["bioqpfs_r"]``, else
        SingleCellExperiment.
    assay : str, optional
        Name of the assay that receives ``X``; default the recorded name, else ``"X"`` (``"exprs"``
        for an ExpressionSet).  ``layers`` become the other assays.

    Returns
    -------
    rpy2 R object
        Genes x samples; rowData/colData (fData/pData) from var/obs, reducedDims from obsm (SCE),
        metadata (notes) from the storable part of ``uns``.
    """
    ro, default_converter, numpy2ri, localconverter = rpy2_modules()
    record = adata.uns.get("bioqpfs_r", {}) if isinstance(adata.uns.get("bioqpfs_r", {}), dict) else {}
    cls = to or record.get("class", "SingleCellExperiment")
    if cls not in CLASSES:
        raise ValueError(f"to={cls!r} is not one of {', '.join(CLASSES)}")
    if assay is None:
        assay = record.get("assay") if record.get("class") == cls and record.get("assay") else (
            "exprs" if cls == "ExpressionSet" else "X")
    if adata.X is None:
        raise ValueError("adata.X is empty; nothing to convert")
    mats = {assay: _matrix_to_r(adata.X)}
    if cls != "matrix":
        for name, M in adata.layers.items():
            if name is None:   # anndata >= 0.13 lists X itself as layers[None]
                continue
            if name in mats:
                raise ValueError(f"layer {name!r} has the same name as the assay receiving X; pass another assay=")
            mats[name] = _matrix_to_r(M)
    meta = {}
    for k, v in adata.uns.items():
        if k == "bioqpfs_r":
            continue
        rv = value_to_r(v)
        if rv is None:
            warnings.warn(f"bioqpfs.r: uns[{k!r}] of type {type(v).__name__} was not converted", stacklevel=2)
        else:
            meta[str(k)] = rv
    reduced = {}
    if cls == "SingleCellExperiment":
        with localconverter(default_converter + numpy2ri.converter) as cv:
            for k, v in adata.obsm.items():
                if isinstance(v, np.ndarray) and v.ndim == 2 and v.dtype.kind in "biuf":
                    reduced[str(k)] = cv.py2rpy(np.asfortranarray(v, dtype=np.float64))
                else:
                    warnings.warn(f"bioqpfs.r: obsm[{k!r}] is not a numeric matrix and was not converted", stacklevel=2)
    with localconverter(default_converter):
        return call("build", ro.StrVector([cls]), ro.ListVector(mats), ro.StrVector(list(map(str, adata.var_names))),
                     ro.StrVector(list(map(str, adata.obs_names))), _frame_to_r(adata.var), _frame_to_r(adata.obs),
                     ro.ListVector(meta) if meta else ro.r("list()"),
                     ro.ListVector(reduced) if reduced else ro.r("list()"))


