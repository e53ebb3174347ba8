"""R -> Python: a SummarizedExperiment, SingleCellExperiment, ExpressionSet or matrix becomes an AnnData.

The R side (``decompose`` in ``helpers.R``) takes the container apart into plain matrices, data
frames and lists; this module copies them into NumPy/pandas objects (the AnnData never shares memory
with R).  The mapping is the table of :mod:`bioqpfs.r`.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from ._session import call, r_class, rpy2_modules

__all__ = ["to_anndata"]


def _field(rlist, name):
    """Element ``name`` of an R list, or None for NULL/missing."""
    ro, default_converter, _, localconverter = rpy2_modules()
    from rpy2.rinterface import NULLType

    names = list(rlist.names) if not isinstance(rlist.names, NULLType) else []
    if name not in names:
        return None
    v = rlist[names.index(name)]
    return None if isinstance(v, NULLType) else v


def _names(robj):
    from rpy2.rinterface import NULLType

    n = robj.names if hasattr(robj, "names") else None
    return [] if n is None or isinstance(n, NULLType) else [str(s) for s in n]


def _strings(rvec, n=None, prefix=""):
    """R character vector (or NULL) -> list of str; NULL gives '0', '1', ... (AnnData's default names)."""
    if rvec is None:
        return [f"{prefix}{i}" for i in range(n)]
    return [str(s) for s in rvec]


def _matrix_to_py(packed):
    """A packed R matrix (genes x samples) -> samples x genes numpy array or scipy CSR matrix (copied)."""
    ro, default_converter, numpy2ri, localconverter = rpy2_modules()
    kind = str(_field(packed, "kind")[0])
    with localconverter(default_converter + numpy2ri.converter) as cv:
        if kind == "dgC":
            import scipy.sparse as sp

            i, p, x, dim = (np.array(cv.rpy2py(_field(packed, k)), copy=True) for k in ("i", "p", "x", "dim"))
            return sp.csc_matrix((x, i, p), shape=tuple(int(d) for d in dim)).T.tocsr()
        m = np.array(cv.rpy2py(_field(packed, "x")), copy=True)
    if m.ndim != 2:
        raise ValueError("bioqpfs: expected a 2-d assay matrix")
    if m.dtype == np.int32 and np.any(m == np.iinfo(np.int32).min):  # R's NA_integer_
        m = np.where(m == np.iinfo(np.int32).min, np.nan, m)
    return np.ascontiguousarray(m.T)


def column_to_py(rvec):
    """One R data.frame column -> numpy/pandas array (NA kept as missing), or None if unsupported."""
    ro, default_converter, numpy2ri, localconverter = rpy2_modules()
    kind = str(call("column_kind", rvec)[0])
    with localconverter(default_converter + numpy2ri.converter) as cv:
        if kind == "factor":
            levels = [str(s) for s in ro.r("levels")(rvec)]
            codes = np.array(ro.r("as.integer")(rvec), dtype=np.int64, copy=True)
            codes = np.where(codes == np.iinfo(np.int32).min, 0, codes) - 1
            return pd.Categorical.from_codes(codes, categories=levels)
        if kind == "logical":
            na = np.array(ro.r("is.na")(rvec), dtype=bool)
            vals = np.array(ro.r("as.integer")(rvec), copy=True)
            if na.any():
                return pd.array([None if n else bool(v) for v, n in zip(vals, na)], dtype="boolean")
            return vals.astype(bool)
        if kind == "integer":
            vals = np.array(cv.rpy2py(rvec), dtype=np.int32, copy=True)
            na = vals == np.iinfo(np.int32).min
            return pd.arrays.IntegerArray(np.where(na, 0, vals).astype(np.int32), na) if na.any() else vals
        if kind == "double":
            return np.array(cv.rpy2py(rvec), dtype=np.float64, copy=True)
        if kind == "character":
            na = np.array(ro.r("is.na")(rvec), dtype=bool)
            return np.array([None if n else str(s) for s, n in zip(rvec, na)], dtype=object)
    return None


def _frame_to_py(rdf, index):
    """R data.frame -> pandas DataFrame with ``index``; unsupported (list/S4) columns are dropped with a warning.

    Repeated column names (an R data frame allows them) are made unique as R's ``make.unique()`` does, with a
    warning: the first column keeps its name (the one ``x$name`` reads in R), the others become ``name.1``,
    ``name.2`` and so on.
    """
    cols, dropped, renamed = {}, [], []
    if rdf is not None:
        names = _names(rdf)
        for j, name in enumerate(names):
            v = column_to_py(rdf[j])
            if v is None:
                dropped.append(name)
                continue
            if name in cols:
                k = 1
                while f"{name}.{k}" in cols or f"{name}.{k}" in names:
                    k += 1
                renamed.append(f"{name} -> {name}.{k}")
                name = f"{name}.{k}"
            cols[name] = v
    if dropped:
        warnings.warn(f"bioqpfs.r: column(s) {dropped} are not atomic vectors and were not converted", stacklevel=3)
    if renamed:
        warnings.warn(f"bioqpfs.r: repeated column name(s) made unique as make.unique() does ({', '.join(renamed)}); "
                      "the first column of a name keeps it, as x$name reads it in R", stacklevel=3)
    return pd.DataFrame(cols, index=pd.Index(index))


_UNSUPPORTED = object()


def _value_to_py(v, where="metadata"):
    """R metadata value -> Python (named list -> dict, list -> list, length-1 vector -> scalar, matrix -> 2-d).

    An integer or logical vector with NA becomes float64 with NaN for NA (as an integer assay's NA does),
    never strings.  Values of other kinds (S4 objects, data frames, functions...) are left out with a warning.
    """
    ro, default_converter, numpy2ri, localconverter = rpy2_modules()
    from rpy2 import rinterface as ri

    if v is None or isinstance(v, ri.NULLType):
        return None
    if isinstance(v, ri.ListSexpVector) and str(ro.r("class")(v)[0]) == "list":
        names = _names(v)
        keyed = bool(names) and all(names)
        items = {}
        for i in range(len(v)):
            label = names[i] if keyed else str(i)
            item = _value_to_py(v[i], f"{where}${label}")
            if item is not _UNSUPPORTED:
                items[label] = item
        return items if keyed else list(items.values())
    if isinstance(v, (ri.FloatSexpVector, ri.IntSexpVector, ri.BoolSexpVector, ri.StrSexpVector)):
        arr = column_to_py(v)
        if arr is not None:
            if isinstance(arr, (pd.arrays.IntegerArray, pd.arrays.BooleanArray)):   # NA: NaN, not the string "None"
                arr = arr.to_numpy(dtype=np.float64, na_value=np.nan)
            arr = np.asarray(arr, dtype=object) if not isinstance(arr, np.ndarray) else arr
            if arr.dtype == object:
                arr = np.asarray(["None" if x is None or x is pd.NA else str(x) for x in arr], dtype=str)
            dim = ro.r("dim")(v)
            if not isinstance(dim, ri.NULLType):
                return arr.reshape(tuple(int(d) for d in dim), order="F")
            if len(arr) == 1:
                return arr[0].item() if isinstance(arr[0], np.generic) else arr[0]
            return arr
    warnings.warn(f"bioqpfs.r: {where} of R class {list(ro.r('class')(v))} was not converted", stacklevel=4)
    return _UNSUPPORTED


def to_anndata(robj, assay=None):
    """Convert a SummarizedExperiment, SingleCellExperiment, ExpressionSet or matrix to AnnData.

    Parameters
    ----------
    robj : rpy2 R object
        Genes in rows, samples/cells in columns (the Bioconductor layout).
    assay : str, optional
        The assay (SE/SCE) or assayData element (ExpressionSet) that becomes ``X``; default the
        first assay (``"exprs"`` for an ExpressionSet).  The other assays become ``layers``.

    Returns
    -------
    AnnData
        Samples x genes; ``obs``/``var`` from colData/rowData (pData/fData), ``obsm`` from
        reducedDims, ``uns`` from metadata (notes), ``uns["bioqpfs_r"]`` = source class and assay.
        Values are copied: the AnnData never shares memory with R.
    """
    return r_to_anndata(robj, assay=assay, only_x=False)


def r_to_anndata(robj, *, assay=None, only_x=False):
    """:func:`to_anndata`; ``only_x=True`` converts only ``X``, names and colData (what a selection reads)."""
    import anndata as ad

    ro, default_converter, numpy2ri, localconverter = rpy2_modules()
    cls = r_class(robj)
    with localconverter(default_converter):
        parts = call("decompose", robj, cls, ro.NULL if assay is None else ro.StrVector([str(assay)]),
                      ro.BoolVector([bool(only_x)]))
    X = _matrix_to_py(_field(parts, "X"))
    n_obs, n_vars = X.shape
    obs_names = _strings(_field(parts, "colnames"), n_obs)
    var_names = _strings(_field(parts, "rownames"), n_vars)
    obs = _frame_to_py(_field(parts, "coldf"), obs_names)
    var = _frame_to_py(_field(parts, "rowdf"), var_names)
    layers = {}
    lay = _field(parts, "layers")
    for j, name in enumerate(_names(lay) if lay is not None else []):
        layers[name] = _matrix_to_py(lay[j])
    obsm = {}
    red = _field(parts, "reduced")
    with localconverter(default_converter + numpy2ri.converter) as cv:
        for j, name in enumerate(_names(red) if red is not None else []):
            obsm[name] = np.array(cv.rpy2py(red[j]), dtype=np.float64, copy=True)
    uns = {}
    meta = _field(parts, "meta")
    if meta is not None and len(meta):
        value = _value_to_py(meta)
        if value is _UNSUPPORTED:
            pass
        elif isinstance(value, dict):
            uns.update(value)
        elif value:
            uns["metadata"] = value
    uns["bioqpfs_r"] = {"class": cls, "assay": str(_field(parts, "assay")[0])}
    return ad.AnnData(X=X, obs=obs, var=var, layers=layers or None, obsm=obsm or None, uns=uns)


