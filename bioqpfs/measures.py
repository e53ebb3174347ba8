"""Public face of the information and correlation kernels.

All functions take samples x genes matrices (dense NumPy or scipy.sparse; never modified)
and return NumPy arrays.  Array support (scanpy's convention): numpy and scipy.sparse everywhere; a
``dask.array.Array`` chunked by samples (numpy or CSR chunks; the gene axis is rechunked to one chunk) for
:func:`mutual_information`, :func:`conditional_mutual_information`, :func:`entropy` and
:func:`relevance` with ``kind="mi"`` -- counted chunk by chunk, the result equal to the in-memory one
(``discretization="mean_sd"``, ``"quantile"``, ``"zero_quantile"``, ``"auto"`` or ``None``; :func:`discretize`
then returns lazy Dask codes) -- and for :func:`correlation` and :func:`relevance` with ``kind="hall"`` (standardised products
summed chunk by chunk).  The MST relevances refuse Dask input with a clear message.  Every function discretises with the same parameter and default,
``discretization="mean_sd"`` (QPFS section 2.5), as the selectors do; ``discretization=None``
says that the matrix already holds integer codes (e.g. from :func:`discretize`).  Mutual information is in bits by default (``base=2``); every
selector in bioqpfs is invariant to the base.

Examples
--------
>>> import numpy as np
>>> from bioqpfs import measures
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(60, 5)); y = (X[:, 0] > 0).astype(int)
>>> codes = measures.discretize(X)                 # QPFS section 2.5: mean +- sd, 3 bins
>>> Q = measures.mutual_information(X)             # 5 x 5 on the same codes, diagonal = H(X_i)
>>> bool(np.allclose(Q, measures.mutual_information(codes, discretization=None)))
True
>>> F = measures.relevance(X, y)                   # I(X_i; C) on mean +- sd codes
>>> bool(np.argmax(F) == 0)
True
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._device import honours_backend
from ._docs import BACKEND_DOC, N_BINS_DOC, doc_params
from ._kernels import correlation as _corr
from ._kernels import discretize as _disc
from ._kernels import information as _info
from ._kernels.counting_dask import refuse_dask as _refuse_dask
from ._kernels.counting_dask import with_pass_memo
from ._validation import check_base, check_labels, check_matrix, memory_guard, output_guard, sample_names_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    import dask.array
    from numpy.typing import ArrayLike, DTypeLike

    from ._typing import MatrixLike

__all__ = [
    "discretize",
    "mutual_information",
    "conditional_mutual_information",
    "relevance",
    "correlation",
    "entropy",
    "DISCRETIZATIONS",
]

DISCRETIZATIONS = _disc.DISCRETIZATIONS
AUTO_ZERO_FRACTION = _disc.AUTO_ZERO_FRACTION
#: the concrete rule of ``"auto"`` on X (:func:`bioqpfs._kernels.discretize.resolve_discretization`)
resolve_discretization = _disc.resolve_discretization
#: ``(codes, n_levels)`` of validated X: the one discretisation entry point,
#: :func:`bioqpfs._kernels.discretize.codes`
codes_and_levels = _disc.codes


def _matrix(X, discretization):
    """Validated X (:func:`bioqpfs._validation.check_matrix`); integer codes with ``discretization=None`` stay
    integers, so codes are never copied to float64 and back.  Only a plain ndarray takes that path: a subclass
    (``np.matrix``, a masked array) goes through the validation, which makes it an ndarray."""
    if discretization is None and type(X) is np.ndarray and X.ndim == 2 and X.dtype.kind in "iu" \
            and X.shape[0] >= 2 and X.shape[1]:
        return X
    return check_matrix(X)


_UNSET = object()


@doc_params(n_bins=N_BINS_DOC)
@with_pass_memo
def discretize(X: MatrixLike, discretization: str | None = "mean_sd", *, n_bins: int = 3, y: ArrayLike | None = None,
               method: str | None = _UNSET) -> np.ndarray | dask.array.Array:
    """Discretise each gene into integer codes ``0..k-1`` (samples x genes, ``uint8``).

    Parameters
    ----------
    X : array-like or sparse matrix, shape (n_samples, n_genes)
    discretization : {"mean_sd", "quantile", "zero_quantile", "mdl", "auto", None}
        ``"mean_sd"``: QPFS section 2.5 bins (-inf, mu-sd], (mu-sd, mu+sd], (mu+sd, inf) per gene,
        sd the sample standard deviation (ddof=1, as R's ``sd``); ``"quantile"``: ``n_bins``
        equal-frequency bins; ``"zero_quantile"``: for sparse single-cell data, zero (not detected)
        as one level and ``n_bins - 1`` equal-frequency bins of the non-zero values (genes without
        zeros: ``n_bins`` equal-frequency bins); ``"mdl"``: Fayyad--Irani supervised MDL cuts (needs ``y``), at most
        ``bioqpfs._kernels.discretize.MDL_MAX_LEVELS`` (8) levels per gene -- repeated samples can
        make MDL cut a gene into 100+ levels and the MI counting grows with their square, so the
        first cuts of the recursion are kept, with a warning (see ``mdl_codes``); ``"auto"``: ``"zero_quantile"``
        for zero-inflated data (at least :data:`AUTO_ZERO_FRACTION` of the entries exactly 0), else ``"mean_sd"``;
        ``None``: X already holds integer levels, which are mapped to consecutive codes.
    {n_bins}
    y : array-like, optional
        Class labels, for ``"mdl"``.
    method : str, optional
        Deprecated name of ``discretization`` (a ``FutureWarning``).

    Returns
    -------
    ndarray or dask Array of uint8, shape (n_samples, n_genes)
        Codes; bins left empty are removed, so gene g uses ``0..k_g-1``.  For a Dask X, a Dask array of
        the uint8 codes, chunked by samples (README "Dask").
    """
    if method is not _UNSET:
        import warnings

        if discretization != "mean_sd" and discretization != method:   # both given: which one was meant?
            raise TypeError(f"discretize got discretization={discretization!r} and its deprecated name "
                            f"method={method!r}; pass discretization= alone")
        warnings.warn("discretize(method=...) is renamed discretization=..., as in every other measure and "
                      "selector", FutureWarning, stacklevel=2)
        discretization = method
    names = sample_names_of(X)
    X = _matrix(X, discretization)
    if y is not None and discretization != "mdl":   # checked (two classes...) only where it is used
        import warnings

        from ._validation import user_stacklevel

        warnings.warn(f"y is not used by discretization={discretization!r}: only 'mdl' cuts by the labels",
                      UserWarning, stacklevel=user_stacklevel())
        y = None
    y_codes = None if y is None else check_labels(y, X.shape[0], name="y", sample_names=names)[0]
    return _user_codes("discretize", X, discretization, n_bins, y_codes)[0]


def _user_codes(what, X, discretization, n_bins, y_codes=None):
    """:func:`codes_and_levels` for a public measure ``what``, warning when ``n_bins`` is given to a rule that sets
    its own levels (``bioqpfs._validation.warn_unused_n_bins``)."""
    from ._validation import warn_unused_n_bins

    warn_unused_n_bins(what, n_bins, discretization)
    if discretization == "mdl" and y_codes is None:
        if what == "discretize":
            raise ValueError("discretization='mdl' is supervised: pass the class labels as y=")
        raise ValueError(f"{what}: discretization='mdl' is supervised (its cuts follow class labels), and {what} "
                         "takes none; code the genes first, codes = bioqpfs.measures.discretize(X, 'mdl', y=labels), "
                         "then pass the codes with discretization=None")
    return codes_and_levels(X, discretization, n_bins=n_bins, y_codes=y_codes)


def _table(X, discretization, n_bins, groups=None, y_codes=None, what="mutual_information"):
    X = _matrix(X, discretization)
    codes, levels = _user_codes(what, X, discretization, n_bins, y_codes)
    return _info.CodeTable(codes, levels, groups=groups)


def _check_dtype(dtype):
    """Output dtype of the matrix functions: float32 or float64 only (integers would truncate)."""
    try:
        dt = np.dtype(dtype) if dtype is not None else None
    except TypeError:
        dt = None
    if dt is None or dt.type not in (np.float32, np.float64):
        raise TypeError(f"dtype must be numpy.float32 or numpy.float64, got {dtype!r}")
    return dt


@doc_params(n_bins=N_BINS_DOC, backend=BACKEND_DOC)
@honours_backend
@with_pass_memo
def mutual_information(Xd: MatrixLike, Yd: ArrayLike | None = None, *, discretization: str | None = "mean_sd",
                       n_bins: int = 3, base: float = 2, rows: Sequence[int] | np.ndarray | None = None,
                       dtype: DTypeLike = np.float64, backend: str | None = None) -> np.ndarray:
    """Mutual information between genes, or between genes and the columns of ``Yd``.

    ``Q[i, j] = I(X_i; X_j) = sum_ab p(a, b) log p(a, b) / (p(a) p(b))`` with the diagonal
    ``Q[i, i] = H(X_i)`` (self-information, as QPFS uses it).  Counting is one float32 GEMM
    per block of genes (see :mod:`bioqpfs._kernels.information`).

    Parameters
    ----------
    Xd : array-like or sparse, shape (n_samples, n_genes)
        Expression, discretised by ``discretization``; or integer codes (any integer levels per
        gene) with ``discretization=None``.
    Yd : array-like or sparse, shape (n_samples,) or (n_samples, n_cols), optional
        Discrete columns (e.g. class labels); the result is then ``n_genes x n_cols`` (``n_cols = 0``: an
        empty ``n_genes x 0`` array).
    discretization : {"mean_sd", "quantile", "zero_quantile", "mdl", "auto", None}
        How to discretise ``Xd`` first (see :func:`discretize`; default ``"mean_sd"``, QPFS
        section 2.5, as every measure and selector); ``None``: ``Xd`` already holds codes.
    {n_bins}
    base : float
        Logarithm base (2: bits), a finite number > 1.
    rows : 1-D sequence of int, optional
        Compute only these rows of the gene x gene matrix (``len(rows) x n_genes``); a single
        row is ``rows=[i]``.
    dtype : {numpy.float64, numpy.float32}
        Output dtype; float32 halves the memory of large matrices.
    {backend}

    Notes
    -----
    ``Yd`` columns may have any number of levels (e.g. hundreds of classes); genes coded with
    ``discretization=None`` may have at most
    :data:`bioqpfs._kernels.discretize.MAX_LEVELS` levels (a clear error otherwise).
    """
    if Yd is not None and rows is not None:
        raise ValueError("rows= applies to the gene x gene matrix; slice the result instead when Yd is given")
    base = check_base(base)
    dtype = _check_dtype(dtype)
    table = _table(Xd, discretization, n_bins)
    if Yd is None:
        rows_arr = _check_rows(rows, table.n_genes)
        r = table.n_genes if rows is None else len(rows_arr)
        output_guard(r, table.n_genes, dtype, "mutual information")
        return _info.pairwise_information(table, None, "mi", rows=rows_arr, base=base, dtype=dtype)
    import pandas as pd

    if isinstance(Yd, pd.Series):   # a Series (or a DataFrame's columns) is matched to Xd's samples by name
        columns = [Yd]
        labels = ["Yd column 0" if Yd.name is None else f"Yd ({Yd.name!r})"]
    elif isinstance(Yd, pd.DataFrame):   # messages name the DataFrame's column, not its position
        columns = [Yd.iloc[:, j] for j in range(Yd.shape[1])]
        labels = [f"Yd column {c!r}" for c in Yd.columns]
    else:
        # a masked array keeps its mask (np.asarray would read the values under it): its masked entries are
        # missing values, refused by check_labels as those of any other label array
        import scipy.sparse as sp

        if sp.issparse(Yd):   # np.asarray would wrap it in a 0-d object array; its n_samples x n_cols is label-sized
            Yd = Yd.toarray()
        Y = Yd if isinstance(Yd, np.ma.MaskedArray) else np.asarray(Yd)
        if Y.ndim not in (1, 2):
            raise ValueError(f"Yd must be 1-D (one variable) or 2-D (samples x variables), got shape {Y.shape}")
        Y = Y[:, None] if Y.ndim == 1 else Y
        if Y.shape[0] != table.n_samples:
            raise ValueError(f"Yd has {Y.shape[0]} rows but Xd has {table.n_samples} samples")
        columns = [Y[:, j] for j in range(Y.shape[1])]
        labels = [f"Yd column {j}" for j in range(Y.shape[1])]
    if not columns:   # no variable to measure: an empty n_genes x 0 result, as slicing the matrix would give
        return np.zeros((table.n_genes, 0), dtype=dtype)
    names = sample_names_of(Xd)
    ycodes = np.empty((table.n_samples, len(columns)), dtype=np.intp)  # any number of levels (uint8 would wrap)
    ylev = np.empty(len(columns), dtype=np.int64)
    for j, column in enumerate(columns):
        codes_j, _ = check_labels(column, table.n_samples, name=labels[j], min_classes=1,
                                  sample_names=names, check_continuous=False)
        ycodes[:, j] = codes_j
        ylev[j] = codes_j.max() + 1
    ytable = _info.CodeTable(ycodes, ylev)
    return _info.pairwise_information(table, ytable, "mi", base=base, dtype=dtype)


def _check_rows(rows, m):
    if rows is None:
        return None
    arr = np.asarray(rows)
    if arr.ndim == 1 and arr.size == 0:   # [] is float64 to numpy: no row asked for
        arr = arr.astype(np.int64)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        got = f"{rows!r}; for a single row write rows=[{rows!r}]" if arr.ndim == 0 else \
            f"an array of shape {arr.shape} and dtype {arr.dtype}"
        raise TypeError(f"rows must be a 1-D sequence of integer gene indices, got {got}")
    rows = arr
    if rows.size and (rows.min() < 0 or rows.max() >= m):
        raise ValueError(f"rows must lie in 0..{m - 1}")
    return rows.astype(np.int64)


@honours_backend
@with_pass_memo
def entropy(Xd: MatrixLike, *, discretization: str | None = "mean_sd", n_bins: int = 3, base: float = 2,
            backend: str | None = None) -> np.ndarray:
    """Entropy H(X_i) of every gene's codes (``base``: a finite number > 1; 2 gives bits; ``discretization``,
    ``n_bins`` and ``backend`` as in :func:`mutual_information`)."""
    base = check_base(base)
    return _info.entropies(_table(Xd, discretization, n_bins, what="entropy")) / np.log(base)


@honours_backend
@with_pass_memo
def conditional_mutual_information(Xd: MatrixLike, y: ArrayLike, *, discretization: str | None = "mean_sd",
                                   n_bins: int = 3, base: float = 2, rows: Sequence[int] | np.ndarray | None = None,
                                   dtype: DTypeLike = np.float64, class_weight: str | None = None,
                                   backend: str | None = None) -> np.ndarray:
    """Matrix ``C`` with ``C[i, j] = I(X_i; C | X_j)`` for ``i != j`` and ``C[i, i] = I(X_i; C)``.

    This is the (asymmetric) SPEC_CMI matrix of Nguyen et al. 2014, eq. 17-18; its symmetric
    part ``(C + C.T) / 2`` is the SPEC_CMI Q.  Uses ``I(X_i; C | X_j) = H(C | X_j) - H(C | X_i, X_j)``
    with class-wise co-occurrence counts (one GEMM per class and block).  ``base``, ``rows``,
    ``discretization``, ``n_bins``, ``dtype`` and ``backend`` as in :func:`mutual_information`; ``class_weight`` as in
    :func:`relevance`.
    """
    base = check_base(base)
    dtype = _check_dtype(dtype)
    names = sample_names_of(Xd)
    X = _matrix(Xd, discretization)
    y_codes, _ = check_labels(y, X.shape[0], name="y", sample_names=names)
    codes, levels = _user_codes("conditional_mutual_information", X, discretization, n_bins, y_codes)
    table = _info.CodeTable(codes, levels, groups=y_codes, weights=_info.class_sample_weights(y_codes, class_weight))
    rows_arr = _check_rows(rows, table.n_genes)
    r = table.n_genes if rows is None else len(rows_arr)
    output_guard(r, table.n_genes, dtype, "conditional mutual information")
    return _info.pairwise_information(table, None, "cmi", rows=rows_arr, base=base, dtype=dtype)


@doc_params(n_bins=N_BINS_DOC)
@honours_backend
@with_pass_memo
def relevance(X: MatrixLike, y: ArrayLike, *, kind: str = "mi", base: float = 2, discretization: str | None = "mean_sd",
              n_bins: int = 3, class_weight: str | None = None, backend: str | None = None) -> np.ndarray:
    """Class relevance F of every gene.

    Parameters
    ----------
    X : array-like or sparse, shape (n_samples, n_genes)
        Expression (continuous for ``"hall"`` and the MST kinds; for ``"mi"`` discretised by
        ``discretization``, or integer codes with ``discretization=None``).
    y : array-like or pandas Series
        Class labels; a Series is matched to the samples by index when X is a DataFrame
        (see :func:`bioqpfs._validation.check_labels`).
    kind : {"mi", "hall", "mst", "mst_cpx"}
        ``"mi"``: F_i = I(X_i; C) on the discretised gene (``discretization``; ``None`` if X holds
        codes).  ``"hall"``: QPFS section 2.1, F_i = sum_k p(K=k) |rho(v_i, 1[K=k])| on continuous X.
        ``"mst"``: Friedman--Rafsky complexity of each gene alone (Sousa et al. section 3.1),
        F_i = max(0, 1 - R_i / E[R]) with R_i the cross-class edges of the gene's 1-D minimum
        spanning tree and E[R] their expectation under random labels (0 = chance, 1 = classes in
        single runs).  ``"mst_cpx"``: max(0, Delta f_i), Delta f_i = (f_i - f) / f the relative
        increase of the cross-edge count of the MST on all (z-scored) genes when gene i is removed;
        O(N^2 M) work, refused beyond :data:`bioqpfs._kernels.mst.MAX_CPX_WORK`.  Tie rules and the
        f = 0 case: see :mod:`bioqpfs._kernels.mst`.
    base : float
        Logarithm base of ``"mi"`` (2: bits), a finite number > 1.
    discretization : {"mean_sd", "quantile", "zero_quantile", "mdl", "auto", None}
        As in :func:`mutual_information` (``"mi"`` only; the other kinds warn when it or ``n_bins`` is given, and
        refuse an ``n_bins`` that no rule could use, as ``"mi"`` does).
    {n_bins}
    class_weight : {None, "balanced"}
        For ``"mi"``: ``"balanced"`` counts every sample with weight ``N / (C n_c)`` so that every class
        weighs the same (a uniform class prior; see
        :func:`bioqpfs._kernels.information.class_sample_weights`).  The other kinds refuse it.
    backend : {"auto", "cpu", "gpu"}, optional
        Where ``"mi"``'s counts are computed, as in :func:`mutual_information`.
    """
    base = check_base(base)
    if kind in ("hall", "mst", "mst_cpx"):
        try:   # unused by these kinds, but a value no rule could use is a mistake, refused as kind="mi" refuses it
            _disc.check_n_bins(n_bins)
        except (TypeError, ValueError) as e:
            raise type(e)(f"relevance: {e}") from None
    if kind in ("hall", "mst", "mst_cpx") and (discretization != "mean_sd" or n_bins != 3):
        import warnings

        from ._validation import user_stacklevel

        warnings.warn(f"relevance(kind={kind!r}) works on the continuous X: discretization={discretization!r} and "
                      f"n_bins={n_bins!r} are not used (they apply to kind='mi' only)", UserWarning,
                      stacklevel=user_stacklevel())
    names = sample_names_of(X)
    X = _matrix(X, discretization if kind == "mi" else "mean_sd")
    y_codes, _ = check_labels(y, X.shape[0], name="y", sample_names=names)
    weights = _info.class_sample_weights(y_codes, class_weight)
    if weights is not None and kind != "mi":
        raise ValueError(f"class_weight applies to the information relevance (kind='mi'), not kind={kind!r}")
    if kind in ("mst", "mst_cpx"):
        from ._kernels import mst as _mst

        _refuse_dask(X, f"relevance kind={kind!r}", "use kind='mi'")
        if not isinstance(X, np.ndarray):
            memory_guard(8 * X.shape[0] * X.shape[1], f"a dense copy of the {X.shape[0]} x {X.shape[1]} matrix",
                         ["genes"])
            X = X.toarray()
        if kind == "mst":
            return _mst.mst_relevance(X, y_codes)[0]
        memory_guard(8 * X.shape[0] ** 2 * 2, f"the {X.shape[0]} x {X.shape[0]} sample distance matrix",
                     ["samples"])
        return np.maximum(_mst.mst_cpx(X, y_codes)[0], 0.0)
    if kind == "mi":
        codes, levels = _user_codes("relevance", X, discretization, n_bins, y_codes)
        table = _info.CodeTable(codes, levels, groups=y_codes, weights=weights)
        return _info.class_relevance(table) / np.log(base)
    if kind == "hall":
        return _corr.hall_relevance(X, y_codes)
    raise ValueError(f"unknown relevance kind {kind!r}; choose 'mi', 'hall', 'mst' or 'mst_cpx'")


@with_pass_memo
def correlation(X: MatrixLike, *, rows: Sequence[int] | np.ndarray | None = None,
                dtype: DTypeLike = np.float64) -> np.ndarray:
    """|Pearson correlation| between genes (QPFS eq. 3); constant genes give 0 rows/columns.

    ``rows`` and ``dtype`` as in :func:`mutual_information`.  The whole gene x gene matrix is exactly symmetric
    (``Q == Q.T``, its lower triangle the upper one mirrored), as the information matrices are: the blocked
    products ``Z_I^T Z_J`` and ``Z_J^T Z_I`` round differently in the last bit.
    """
    dtype = _check_dtype(dtype)
    X = check_matrix(X)
    rows_arr = _check_rows(rows, X.shape[1])
    r = X.shape[1] if rows is None else len(rows_arr)
    output_guard(r, X.shape[1], dtype, "correlation")
    out = _corr.abs_pearson(X, rows=rows_arr, dtype=dtype)
    if rows is None:
        _mirror_upper(out)
    return out


def _mirror_upper(out, block=1024):
    """Copy the upper triangle of the square ``out`` onto its lower one, in place, block by block (no index arrays
    of the whole matrix)."""
    m = out.shape[0]
    for i0 in range(0, m, block):
        i1 = min(m, i0 + block)
        diag = out[i0:i1, i0:i1]
        lower = np.tril(np.ones(diag.shape, dtype=bool), -1)
        diag[lower] = diag.T[lower]
        for j0 in range(i1, m, block):
            j1 = min(m, j0 + block)
            out[j0:j1, i0:i1] = out[i0:i1, j0:j1].T
