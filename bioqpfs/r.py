"""R / Bioconductor face: SummarizedExperiment, SingleCellExperiment, ExpressionSet and matrices.

Two routes reach the same engine (:func:`bioqpfs.tl.select_genes`):

- from Python, with rpy2 (``pip install bioqpfs[r]``): :func:`to_anndata`, :func:`from_anndata`
  and :func:`select_genes` take and return R objects.  rpy2 and the R packages are imported
  lazily, and every conversion runs inside ``localconverter(...)`` (the anndata2ri habit), so
  importing :mod:`bioqpfs.r` never starts R and never changes rpy2's global conversion rules.
- from R, with reticulate (the R package at the repository root, ``selectGenes()``): the R side
  sends the expression matrix as raw little-endian float64 bytes plus its dimensions, and
  :func:`_reticulate_select` rebuilds it with :func:`numpy.frombuffer` and answers with plain
  Python lists and dicts.  No NumPy array ever crosses reticulate, so the route works with NumPy 2
  even though Debian's reticulate 1.28 was compiled against the NumPy 1 C API.

The conversion is our own rather than anndata2ri's: anndata2ri 2.0 cannot convert a plain
SummarizedExperiment (``KeyError: SexpS4``) nor an ExpressionSet.

Layout mapping (R holds genes x samples, AnnData samples x genes):

=====================  =========================================  =========================
AnnData                SummarizedExperiment / SingleCellExperiment ExpressionSet
=====================  =========================================  =========================
``X``                  ``assay(x, assay)`` (default: the first)   ``exprs(x)`` (or ``assay``)
``layers``             the other assays                           other assayData elements
``var`` / ``obs``      ``rowData(x)`` / ``colData(x)``            ``fData(x)`` / ``pData(x)``
``obsm``               ``reducedDims(x)`` (SCE only)              --
``uns``                ``metadata(x)``                            ``notes(x)``
=====================  =========================================  =========================

``uns["bioqpfs_r"]`` records the source class and the assay that became ``X`` so that
:func:`from_anndata` rebuilds the same container by default.
"""
from __future__ import annotations

import inspect
import math
import warnings

import numpy as np
import pandas as pd

from ._registry import resolve_method, result_key

__all__ = ["to_anndata", "from_anndata", "select_genes", "result_columns"]

_CLASSES = ("SingleCellExperiment", "SummarizedExperiment", "ExpressionSet", "matrix")

# R helpers, evaluated once into a private environment when first needed.
_R_HELPERS = r"""
local({
r_class <- function(x) {
  if (methods::is(x, "SingleCellExperiment")) "SingleCellExperiment"
  else if (methods::is(x, "SummarizedExperiment")) "SummarizedExperiment"
  else if (methods::is(x, "ExpressionSet")) "ExpressionSet"
  else if (is.matrix(x) || methods::is(x, "Matrix")) "matrix"
  else stop("bioqpfs: cannot convert an object of class '", paste(class(x), collapse = "/"),
            "'; expected a SummarizedExperiment, SingleCellExperiment, ExpressionSet or matrix", call. = FALSE)
}
decompose <- function(x, cls, assay, only_x) {
  red <- list(); meta <- list()
  if (cls == "ExpressionSet") {
    env <- Biobase::assayData(x)
    mats <- if (is.environment(env)) mget(ls(env), envir = env) else as.list(env)
    default <- if ("exprs" %in% names(mats)) "exprs" else names(mats)[1]
    rowdf <- Biobase::fData(x); coldf <- Biobase::pData(x); meta <- Biobase::notes(x)
  } else if (cls == "matrix") {
    mats <- list(X = x); default <- "X"; rowdf <- NULL; coldf <- NULL
  } else {
    mats <- as.list(SummarizedExperiment::assays(x, withDimnames = TRUE))
    if (length(mats) && is.null(names(mats))) names(mats) <- paste0("assay", seq_along(mats))
    default <- names(mats)[1]
    rowdf <- as.data.frame(SummarizedExperiment::rowData(x), optional = TRUE)
    coldf <- as.data.frame(SummarizedExperiment::colData(x), optional = TRUE)
    meta <- S4Vectors::metadata(x)
    if (cls == "SingleCellExperiment") red <- as.list(SingleCellExperiment::reducedDims(x))
  }
  if (!length(mats)) stop("bioqpfs: the object holds no assay", call. = FALSE)
  if (is.null(assay)) assay <- default
  if (!assay %in% names(mats))
    stop("bioqpfs: assay '", assay, "' not found; available: ", paste(names(mats), collapse = ", "), call. = FALSE)
  pack <- function(m) {
    if (methods::is(m, "dgCMatrix")) list(kind = "dgC", i = m@i, p = m@p, x = m@x, dim = dim(m))
    else { m <- as.matrix(m); storage.mode(m) <- if (is.logical(m)) "logical" else if (is.integer(m)) "integer" else "double"
           list(kind = "dense", x = m) }
  }
  others <- if (only_x) list() else lapply(mats[setdiff(names(mats), assay)], pack)
  list(X = pack(mats[[assay]]), assay = assay, layers = others,
       rownames = rownames(x), colnames = colnames(x),
       rowdf = if (only_x) NULL else rowdf, coldf = coldf,
       meta = if (only_x) list() else meta, reduced = if (only_x) list() else red)
}
column_kind <- function(v) {
  if (is.factor(v)) "factor" else if (is.logical(v)) "logical" else if (is.integer(v)) "integer"
  else if (is.double(v)) "double" else if (is.character(v)) "character" else "other"
}
dgc <- function(i, p, x, dim) methods::new("dgCMatrix", i = as.integer(i), p = as.integer(p), x = as.double(x), Dim = as.integer(dim))
frame <- function(cols, rn, s4) {
  df <- if (s4) S4Vectors::make_zero_col_DFrame(length(rn)) else data.frame(row.names = seq_along(rn))
  rownames(df) <- rn
  for (nm in names(cols)) df[[nm]] <- cols[[nm]]
  df
}
build <- function(cls, assays, rn, cn, rowcols, colcols, meta, reduced) {
  assays <- lapply(assays, function(m) { dimnames(m) <- list(rn, cn); m })
  if (cls == "matrix") return(assays[[1]])
  if (cls == "ExpressionSet") {
    ad <- do.call(Biobase::assayDataNew, c(list(storage.mode = "list"), assays))
    pd <- Biobase::AnnotatedDataFrame(frame(colcols, cn, FALSE))
    fd <- Biobase::AnnotatedDataFrame(frame(rowcols, rn, FALSE))
    e <- methods::new("ExpressionSet", assayData = ad, phenoData = pd, featureData = fd)
    if (length(meta)) Biobase::notes(e) <- meta
    return(e)
  }
  args <- list(assays = assays, rowData = frame(rowcols, rn, TRUE), colData = frame(colcols, cn, TRUE),
               metadata = meta)
  if (cls == "SingleCellExperiment") {
    args$reducedDims <- lapply(reduced, function(m) { rownames(m) <- cn; m })
    do.call(SingleCellExperiment::SingleCellExperiment, args)
  } else do.call(SummarizedExperiment::SummarizedExperiment, args)
}
write_result <- function(x, cls, cols, key, record) {
  if (cls == "matrix") {
    out <- frame(cols, rownames(x), TRUE)
    S4Vectors::metadata(out)[[key]] <- record
    return(out)
  }
  if (cls == "ExpressionSet") {
    fd <- Biobase::fData(x)
    for (nm in names(cols)) fd[[nm]] <- cols[[nm]]
    Biobase::fData(x) <- fd
    n <- Biobase::notes(x); n[[key]] <- record; Biobase::notes(x) <- n
    return(x)
  }
  rd <- SummarizedExperiment::rowData(x)
  for (nm in names(cols)) rd[[nm]] <- cols[[nm]]
  SummarizedExperiment::rowData(x) <- rd
  S4Vectors::metadata(x)[[key]] <- record
  x
}
list(r_class = r_class, decompose = decompose, column_kind = column_kind, dgc = dgc, frame = frame, build = build, write_result = write_result)
})
"""

_state: dict = {}


def _rpy2():
    """Import rpy2 lazily; a clear message when it is missing."""
    try:
        import rpy2.robjects as ro
        from rpy2.robjects import default_converter, numpy2ri
        from rpy2.robjects.conversion import localconverter
    except ImportError as err:  # pragma: no cover - depends on the installation
        raise ImportError(
            "bioqpfs.r needs rpy2 and R: pip install 'bioqpfs[r]' (rpy2 3.5.17 for R 4.2; building it needs "
            "the Debian packages r-base-core libpcre2-dev libblas-dev)"
        ) from err
    return ro, default_converter, numpy2ri, localconverter


def _helpers():
    """The R helper functions (a named R list), created on first use."""
    if "helpers" not in _state:
        ro, default_converter, _, localconverter = _rpy2()
        with localconverter(default_converter):
            ro.r('suppressPackageStartupMessages({library(methods); requireNamespace("S4Vectors", quietly = TRUE)})')
            _state["helpers"] = ro.r(_R_HELPERS)
    return _state["helpers"]


def _call(name, *args):
    ro, default_converter, _, localconverter = _rpy2()
    h = _helpers()
    with localconverter(default_converter):
        return h.rx2(name)(*args)


def _r_class(robj):
    return str(_call("r_class", robj)[0])


# ---------------------------------------------------------------------------- R -> Python
def _field(rlist, name):
    """Element ``name`` of an R list, or None for NULL/missing."""
    ro, default_converter, _, localconverter = _rpy2()
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
    ro, default_converter, numpy2ri, localconverter = _rpy2()
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


def _column_to_py(rvec):
    """One R data.frame column -> numpy/pandas array (NA kept as missing), or None if unsupported."""
    ro, default_converter, numpy2ri, localconverter = _rpy2()
    kind = str(_call("column_kind", rvec)[0])
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
    """R data.frame -> pandas DataFrame with ``index``; unsupported (list/S4) columns are dropped with a warning."""
    cols, dropped = {}, []
    if rdf is not None:
        for j, name in enumerate(_names(rdf)):
            v = _column_to_py(rdf[j])
            if v is None:
                dropped.append(name)
            else:
                cols[name] = v
    if dropped:
        warnings.warn(f"bioqpfs.r: column(s) {dropped} are not atomic vectors and were not converted", stacklevel=3)
    return pd.DataFrame(cols, index=pd.Index(index))


_UNSUPPORTED = object()


def _value_to_py(v, where="metadata"):
    """R metadata value -> Python (named list -> dict, list -> list, length-1 vector -> scalar, matrix -> 2-d).

    Values of other kinds (S4 objects, data frames, functions...) are left out with a warning.
    """
    ro, default_converter, numpy2ri, localconverter = _rpy2()
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
        arr = _column_to_py(v)
        if arr is not None:
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
    return _to_anndata(robj, assay=assay, only_x=False)


def _to_anndata(robj, *, assay=None, only_x=False):
    import anndata as ad

    ro, default_converter, numpy2ri, localconverter = _rpy2()
    cls = _r_class(robj)
    with localconverter(default_converter):
        parts = _call("decompose", robj, cls, ro.NULL if assay is None else ro.StrVector([str(assay)]),
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


# ---------------------------------------------------------------------------- Python -> R
def _array_to_r(a):
    """1-d numpy/pandas array -> R vector (categorical -> factor, nullable -> NA, object -> character)."""
    ro, default_converter, numpy2ri, localconverter = _rpy2()
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


def _value_to_r(v):
    """Python metadata value -> R (dict -> named list, sequences -> vectors, None -> NULL); None if unsupported."""
    ro, default_converter, numpy2ri, localconverter = _rpy2()
    if v is None:
        return ro.NULL
    if isinstance(v, dict):
        items = {str(k): _value_to_r(x) for k, x in v.items()}
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
        from ._io import to_storable

        arr = to_storable(list(v) if isinstance(v, (pd.Series, pd.Index)) else v)
        if isinstance(arr, np.ndarray) and arr.ndim == 1:
            return _array_to_r(arr)
        if isinstance(arr, np.ndarray):
            with localconverter(default_converter + numpy2ri.converter) as cv:
                return cv.py2rpy(arr)
    return None


def _matrix_to_r(M):
    """samples x genes numpy/scipy matrix -> genes x samples R matrix (dgCMatrix for sparse input)."""
    ro, default_converter, numpy2ri, localconverter = _rpy2()
    import scipy.sparse as sp

    if sp.issparse(M):
        csr = sp.csr_matrix(M)  # CSR of samples x genes == CSC of genes x samples
        csr.sort_indices()
        with localconverter(default_converter + numpy2ri.converter) as cv:
            return _call("dgc", cv.py2rpy(csr.indices.astype(np.int32)), cv.py2rpy(csr.indptr.astype(np.int32)),
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
    ro, *_ = _rpy2()
    cols = {str(c): _array_to_r(df[c]) for c in df.columns}
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
    ro, default_converter, numpy2ri, localconverter = _rpy2()
    record = adata.uns.get("bioqpfs_r", {}) if isinstance(adata.uns.get("bioqpfs_r", {}), dict) else {}
    cls = to or record.get("class", "SingleCellExperiment")
    if cls not in _CLASSES:
        raise ValueError(f"to={cls!r} is not one of {', '.join(_CLASSES)}")
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
        rv = _value_to_r(v)
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
        return _call("build", ro.StrVector([cls]), ro.ListVector(mats), ro.StrVector(list(map(str, adata.var_names))),
                     ro.StrVector(list(map(str, adata.obs_names))), _frame_to_r(adata.var), _frame_to_r(adata.obs),
                     ro.ListVector(meta) if meta else ro.r("list()"),
                     ro.ListVector(reduced) if reduced else ro.r("list()"))


# ---------------------------------------------------------------------------- selection
def result_columns(adata, key):
    """The ``.var`` columns a selection stored under ``key`` (weight, rank, selected, then method-specific)."""
    first = [f"{key}_weight", f"{key}_rank", f"{key}_selected"]
    missing = [c for c in first if c not in adata.var.columns]
    if missing:
        raise KeyError(f"no selection stored under key {key!r} (missing .var columns {missing})")
    from ._anndata import key_columns

    return first + [c for c in key_columns(adata, key) if c not in first]   # never a user's <key>_* column


def _labels_to_obs(adata, labels, where):
    """Put the class labels into ``adata.obs``; return the groupby column name."""
    if isinstance(labels, str):
        if labels not in adata.obs.columns:
            raise KeyError(f"labels={labels!r} is not a column of {where}; available: "
                           f"{', '.join(map(str, adata.obs.columns)) or 'none'}")
        return labels
    try:
        from rpy2.rinterface import Sexp

        if isinstance(labels, Sexp):
            ro, default_converter, _, localconverter = _rpy2()
            with localconverter(default_converter):
                kind = str(_call("column_kind", labels)[0])
            labels = _column_to_py(labels) if kind != "other" else None
            if labels is None:
                raise TypeError("labels must be a colData column name or an atomic R vector/factor")
    except ImportError:  # pragma: no cover
        pass
    values = labels.to_numpy() if isinstance(labels, pd.Series) else labels
    if len(values) != adata.n_obs:
        raise ValueError(f"labels has {len(values)} values but the object has {adata.n_obs} samples")
    values = pd.Series(values, index=adata.obs_names)
    adata.obs["labels"] = values.to_numpy() if not isinstance(values.dtype, pd.CategoricalDtype) else values.array
    return "labels"


def select_genes(robj, labels, *, method=None, n_genes=50, assay=None, key_added=None, random_state=0,
                 **params):
    """Select a gene panel on a Bioconductor object with :func:`bioqpfs.tl.select_genes`.

    Parameters
    ----------
    robj : rpy2 R object
        SummarizedExperiment, SingleCellExperiment, ExpressionSet or matrix (genes x samples).
    labels : str or sequence or R vector
        A colData (pData) column name, or one class label per sample.
    method : str, optional
        ``None`` (default): the default panel recipe :data:`bioqpfs.DEFAULT_PANEL`, stored under the key
        ``"bioqpfs"`` with ``params$preset = "default"``; a method name (``"qpfs"`` ...) runs that method
        with its published settings, stored under its name.  As in :func:`bioqpfs.tl.select_genes`.
    n_genes, key_added, random_state, **params
        As in :func:`bioqpfs.tl.select_genes`.
    assay : str, optional
        The assay to select from (default the first; ``exprs`` for an ExpressionSet).

    Returns
    -------
    rpy2 R object
        A modified copy of ``robj`` (R objects are values) with rowData (fData) columns
        ``<key>_weight``, ``<key>_rank``, ``<key>_selected`` (+ method-specific ``<key>_*``) and
        ``metadata(x)[[key]]`` (``notes(x)[[key]]`` for an ExpressionSet) = list(params,
        diagnostics, selected).  A matrix gives an S4Vectors DataFrame of those columns, with the
        record in its ``metadata()``.
    """
    from .tl import select_genes as tl_select_genes

    cls = _r_class(robj)
    adata = _to_anndata(robj, assay=assay, only_x=True)
    where = "the pData of the ExpressionSet" if cls == "ExpressionSet" else (
        "colData(x)" if cls != "matrix" else "a matrix (pass a vector of labels)")
    groupby = _labels_to_obs(adata, labels, where)
    key = result_key(method, key_added)
    tl_select_genes(adata, groupby, method=method, n_genes=n_genes, key_added=key, random_state=random_state,
                    **params)
    if cls != "matrix":
        _record_assay(adata, key, adata.uns["bioqpfs_r"]["assay"])
    ro, default_converter, _, localconverter = _rpy2()
    # ranks go back as R integers (NA for genes the method did not rank), as the reticulate route gives them
    cols = {c: _array_to_r(pd.array(adata.var[c].to_numpy(), dtype="Int64") if c == f"{key}_rank" else adata.var[c])
            for c in result_columns(adata, key)}
    record = _value_to_r(adata.uns[key])
    with localconverter(default_converter):
        return _call("write_result", robj, ro.StrVector([cls]), ro.ListVector(cols), ro.StrVector([key]), record)


# ---------------------------------------------------------------------------- reticulate entry point
def _plain(v):
    """Python/numpy value -> lists, dicts and scalars only (what reticulate converts without NumPy)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v.tolist()]
    if isinstance(v, np.generic):
        return v.item()
    return v


def _coerce_params(method, params):
    """R numbers arrive as floats: turn whole floats into ints where the method's default is an int."""
    from ._registry import method_function

    sig = inspect.signature(method_function(method)).parameters
    out = {}
    for k, v in params.items():
        default = sig[k].default if k in sig else None
        if isinstance(v, float) and v.is_integer() and isinstance(default, int) and not isinstance(default, bool):
            v = int(v)
        out[k] = v
    return out


# Matrices arriving from R in blocks of samples (a sparse dgCMatrix, or a DelayedMatrix read block by block),
# keyed by a token the R side picks; taken (and forgotten) by _reticulate_select.
_INCOMING: dict = {}


def _reticulate_receive(token, n_samples, n_features, start, n_rows, data, indices=None, indptr=None):
    """Receive rows ``start:start+n_rows`` (samples) of a samples x genes matrix from R, without NumPy crossing.

    Dense: ``data`` = little-endian float64 bytes of the genes x block R matrix (column-major, i.e. sample
    after sample).  Sparse: the block's dgCMatrix slots ``x`` (float64 bytes), ``i`` and ``p`` (int32
    bytes) -- a genes x samples CSC matrix is the samples x genes CSR matrix, so it stays sparse.
    """
    import scipy.sparse as sp

    n_samples, n_features, start, n_rows = int(n_samples), int(n_features), int(start), int(n_rows)
    state = _INCOMING.setdefault(str(token), {"shape": (n_samples, n_features), "dense": None, "sparse": [],
                                              "blocks": 0, "rows": 0})
    if state["shape"] != (n_samples, n_features) or start < 0 or start + n_rows > n_samples:
        _INCOMING.pop(str(token), None)
        raise ValueError(f"block rows {start}:{start + n_rows} do not fit a {n_features} x {n_samples} matrix")
    values = np.frombuffer(bytes(data), dtype="<f8")
    if indices is None:
        if values.size != n_rows * n_features:
            _INCOMING.pop(str(token), None)
            raise ValueError(f"received {values.size} values for a {n_features} x {n_rows} block")
        if state["dense"] is None:
            state["dense"] = np.empty((n_samples, n_features))
        state["dense"][start:start + n_rows] = values.reshape(n_rows, n_features)
    else:
        block = sp.csr_matrix((values.copy(), np.frombuffer(bytes(indices), dtype="<i4").copy(),
                               np.frombuffer(bytes(indptr), dtype="<i4").copy()), shape=(n_rows, n_features))
        state["sparse"].append((start, block))
    state["blocks"] += 1
    state["rows"] += n_rows
    return state["blocks"]


def _reticulate_discard():
    """Forget every partly received matrix (the R side calls this when a transfer or selection failed)."""
    _INCOMING.clear()


def _take_incoming(token):
    """The matrix assembled from the blocks received under ``token`` (ndarray or CSR), and its transfer record."""
    import scipy.sparse as sp

    state = _INCOMING.pop(str(token), None)
    if state is None:
        raise ValueError(f"no matrix was received under {token!r}")
    n_samples, n_features = state["shape"]
    if state["rows"] != n_samples or (state["dense"] is not None and state["sparse"]):
        raise ValueError(f"received {state['rows']} of {n_samples} samples in mixed or overlapping blocks")
    if state["dense"] is not None:
        X, fmt = state["dense"], "dense"
    else:
        X = sp.vstack([b for _, b in sorted(state["sparse"], key=lambda sb: sb[0])], format="csr")
        X.sort_indices()
        fmt = "csr"
    return X, {"format": fmt, "blocks": state["blocks"]}


def _reticulate_select(data, n_samples, n_features, genes, labels, method=None, n_genes=50, key_added=None,
                       random_state=0, params=None, groupby="labels", assay=None):
    """Entry point of the R package: select genes on a matrix sent from R without NumPy crossing reticulate.

    ``data`` is either raw float64 bytes of the whole matrix (R column-major genes x samples), or the
    token of a matrix sent block by block with :func:`_reticulate_receive` (sparse or DelayedMatrix
    assays).  R's ``writeBin(as.double(m), raw())`` writes column after column of the genes x samples
    matrix, i.e. sample after sample: the buffer read as C-order (n_samples, n_features) *is* the
    samples x genes matrix AnnData wants.  ``groupby`` is the colData column the labels came from (or
    ``"labels"`` for a vector) and ``assay`` the assay used; both are recorded in the parameters.
    ``method=None`` (R's ``method = NULL``) is the default recipe, as in :func:`bioqpfs.tl.select_genes`.

    Returns plain lists/dicts: ``key`` (where the result is stored: ``key_added``, else the method, else
    ``"bioqpfs"``), ``columns`` (name -> list), ``kinds`` (name -> "double"/"integer"/"logical"/"character";
    ranks are "integer", NaN for unranked genes), ``record`` (params, diagnostics, selected) and
    ``transfer`` (format "dense"/"csr" and number of blocks received).
    """
    import anndata as ad

    from .tl import select_genes as tl_select_genes

    n_samples, n_features = int(n_samples), int(n_features)
    if isinstance(data, str):
        X, transfer = _take_incoming(data)
    else:
        X = np.frombuffer(bytes(data), dtype="<f8")
        if X.size != n_samples * n_features:
            raise ValueError(f"received {X.size} values for a {n_features} x {n_samples} matrix")
        X, transfer = X.reshape(n_samples, n_features).copy(), {"format": "dense", "blocks": 1}
    if X.shape != (n_samples, n_features):
        raise ValueError(f"received a {X.shape[1]} x {X.shape[0]} matrix, expected {n_features} x {n_samples}")
    genes = [genes] if isinstance(genes, str) else list(genes)
    labels = [labels] if isinstance(labels, (str, int, float)) else list(labels)
    groupby = str(groupby) if groupby else "labels"
    adata = ad.AnnData(X=X, var=pd.DataFrame(index=pd.Index([str(g) for g in genes])),
                       obs=pd.DataFrame({groupby: pd.Categorical([str(v) for v in labels])},
                                        index=pd.Index([str(i) for i in range(n_samples)])))
    key = result_key(method, key_added)
    params = _coerce_params(resolve_method(method, {})[0], dict(params or {}))
    tl_select_genes(adata, groupby, method=method, n_genes=int(n_genes), key_added=key,
                    random_state=None if random_state is None else int(random_state), **params)
    _record_assay(adata, key, assay)
    columns, kinds = {}, {}
    for c in result_columns(adata, key):
        a = adata.var[c].to_numpy()
        kinds[c] = "integer" if c == f"{key}_rank" else "logical" if a.dtype.kind == "b" else (
            "double" if a.dtype.kind in "iuf" else "character")
        columns[c] = [bool(x) for x in a] if kinds[c] == "logical" else (
            [float(x) for x in a] if kinds[c] in ("double", "integer") else ["" if x is None else str(x) for x in a])
    # the R record keeps its documented fields; "var_columns" only serves tl re-runs on the AnnData
    record = {k: v for k, v in adata.uns[key].items() if k != "var_columns"}
    return {"key": key, "columns": columns, "kinds": kinds, "record": _plain(record), "transfer": transfer}


def _record_assay(adata, key, assay):
    """Record the assay the selection read (R's ``assay.type``) in ``.uns[key]["params"]["assay"]``."""
    if assay is not None:
        adata.uns[key]["params"]["assay"] = str(assay)
