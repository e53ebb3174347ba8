"""Input checks shared by every face: one place that turns bad input into a clear error.

Kernels assume validated input; the public functions (``measures``, selectors,
``tl``) call these first.  Every message names what is wrong (which gene/sample/
label) and what to do about it.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import warnings
import weakref

import numpy as np
import scipy.sparse as sp

from ._device import is_cupy_array, is_cupy_sparse, to_host

__all__ = ["check_matrix", "check_dask_matrix", "check_labels", "check_n_genes", "check_random_state", "validate_random_state",
           "check_base", "describe_indices", "gene_list", "gene_positions", "memory_guard", "output_guard", "sample_names_of", "parameter_constraints",
           "Options", "Interval",
           "check_number", "check_positive_int", "seed_of", "InvalidParameterError", "MemoryGuardError",
           "REMEDIES", "one_labels_warning", "one_names_warning", "warn_repeated_names", "is_default_index", "refuse_ambiguous_default_index"]

# The mostly-singleton-classes warning of check_labels is issued once per user call, although the
# labels are checked at several layers (tl, then the selector, then the relevance on the codes):
# codes arrays check_labels returned after warning are not warned about again, and within a
# one_labels_warning() scope the same finding is reported once.
_WARNED_CODES = weakref.WeakValueDictionary()   # id(codes) -> codes
_SCOPE_WARNED = contextvars.ContextVar("bioqpfs_labels_warned", default=None)
# repeated gene names reported in this one_names_warning() scope (a face checks the names again for every method or
# fold it runs; the user hears of them once)
_NAMES_WARNED = contextvars.ContextVar("bioqpfs_names_warned", default=None)


@contextlib.contextmanager
def one_names_warning():
    """Scope (also a decorator) in which the same repeated gene names are warned about at most once (see
    :func:`warn_repeated_names`).  Nested scopes share the outermost one."""
    if _NAMES_WARNED.get() is not None:
        yield
        return
    token = _NAMES_WARNED.set(set())
    try:
        yield
    finally:
        _NAMES_WARNED.reset(token)


def warn_repeated_names(names, what, fix, *, message=None):
    """Warn once (per :func:`one_names_warning` scope) when the gene names ``names`` repeat a name: a panel gene
    with such a name is told apart only by its position.  ``what`` names them in the message, ``fix`` says how to make
    them unique; ``message`` (given the repeated names, described) replaces the whole text.  Returns the repeated
    names (an empty Index when they are unique)."""
    import pandas as pd

    index = pd.Index(np.asarray(names, dtype=object).astype(str))   # via object: numpy StringDType names too
    if index.is_unique:
        return index[:0]
    dup = index[index.duplicated()].unique()
    seen, finding = _NAMES_WARNED.get(), tuple(dup)
    if seen is None or finding not in seen:
        if seen is not None:
            seen.add(finding)
        shown = describe_indices(np.arange(len(dup)), dup)
        warnings.warn(message(len(dup), shown) if message is not None else
                      f"{what} are not unique ({len(dup)} repeated name(s): {shown}); a panel gene with such a name is "
                      "told apart only by its position (Selection.selected), not by Selection.genes or "
                      f"selected_names(): make them unique ({fix})", UserWarning, stacklevel=user_stacklevel())
    return dup


@contextlib.contextmanager
def one_labels_warning():
    """Scope (also a decorator) in which :func:`check_labels` warns about mostly-singleton classes at most once.

    Nested scopes share the outermost one.  A face that checks the labels itself (with a more
    telling name, e.g. ``adata.obs['age']``) before handing them to a selector opens it, so the
    user sees the warning once instead of once per layer.
    """
    if _SCOPE_WARNED.get() is not None:
        yield
        return
    token = _SCOPE_WARNED.set(set())
    try:
        yield
    finally:
        _SCOPE_WARNED.reset(token)


def describe_indices(idx, names=None, limit=5) -> str:
    """Format the first few offending indices (or their names) for an error message."""
    idx = np.asarray(idx).ravel()
    shown = [str(names[i]) if names is not None else str(int(i)) for i in idx[:limit]]
    more = f" and {idx.size - limit} more" if idx.size > limit else ""
    return ", ".join(shown) + more


def gene_list(value, what):
    """A user's gene list as a Python list, in the given order: one name (str) or one integer position alone is a
    list of one.  Refused with a ``TypeError``: ``bytes`` (iterating them gives their byte values, which would be
    read as gene positions: decode them), an unordered collection (a set: the genes are ranked in the given
    order), and anything that is not a sequence."""
    if isinstance(value, (bytes, np.bytes_)):
        raise TypeError(f"{what}: got bytes {value!r}, which are neither a gene name nor a list of them; decode them "
                        f"({value.decode(errors='replace')!r}) or pass a list of str")
    if isinstance(value, (str, np.str_)) or (isinstance(value, (int, np.integer))
                                             and not isinstance(value, (bool, np.bool_))):
        return [value]
    if isinstance(value, (set, frozenset, dict)):
        raise TypeError(f"{what}: a {type(value).__name__} has no order, and the genes are ranked in the given order; "
                        "pass a list")
    try:
        items = list(value)
    except TypeError:
        raise TypeError(f"{what} must be a list of gene names or integer positions, got {value!r}") from None
    nested = [g for g in items if np.ndim(g) > 0 and not isinstance(g, (str, bytes))]
    if nested:   # a 2-D array (a column of positions) or a list of lists: its rows are not genes
        raise ValueError(f"{what}: got a nested list or a {np.ndim(value)}-D array (first entry {nested[0]!r}), but a "
                         f"gene list is flat: one name or position per gene; pass np.ravel({what}) or a flat list")
    return items


def preselected_in_mask(preselected, mask, names=None, space="adata.var"):
    """``preselected`` for a selector that sees only the genes of ``mask`` (``mask_var``): integer positions count
    among all genes (as ``mask_var`` does) and are renumbered among the masked ones; a gene that the mask leaves out
    is refused by name (it cannot be forced into a panel chosen among the others).  ``names``: all the genes' names
    (``None``: positions only); ``space`` names them in messages.  The one rule of ``tl.select_genes`` and
    ``evaluate.error_curve``."""
    from numbers import Integral

    mask = np.asarray(mask, dtype=bool)
    if preselected is None or mask.all():
        return preselected
    items = [preselected] if isinstance(preselected, (str, bytes, Integral)) else list(preselected)
    if items and all(isinstance(g, (Integral, np.integer)) and not isinstance(g, (bool, np.bool_)) for g in items):
        idx = gene_positions(items, None, mask.size, f"preselected (positions in {space})")
        outside = idx[~mask[idx]]
        if outside.size:
            raise ValueError(f"preselected gene(s) {describe_indices(outside, names)} are left out by mask_var; add "
                             "them to the mask (the panel is chosen among the masked genes) or drop them from "
                             "preselected")
        return [int(k) for k in np.cumsum(mask)[idx] - 1]
    if names is None:
        return preselected
    names = np.asarray(names).astype(str)
    given = {str(g) for g in items}
    outside = sorted({g for g in names[~mask] if g in given} - set(names[mask]))
    if outside:
        raise ValueError(f"preselected gene(s) {', '.join(outside[:5])} are left out by mask_var; add them to the mask "
                         "(the panel is chosen among the masked genes) or drop them from preselected")
    return preselected


def gene_positions(genes, names, m, what):
    """Positions of the genes of a user's gene list among the ``m`` genes: the one lookup of ``preselected=``
    (every method) and of ``evaluate``'s fixed panels.

    ``genes``: integer positions, or gene names looked up in ``names`` (as strings, case-sensitive; mixed names
    and positions are read as names).  ``what`` starts every message (``"preselected"``, a panel's label).
    Refused with a message naming the genes: True/False values (a mask: pass its positions), floats (positions are
    integers), a position out of range (checked on Python ints: 2**70 does not overflow), names without ``names``,
    a name not among them (naming the integers of a mixed list), a name that occurs more than once among them
    (ambiguous: make the names unique or give positions), a gene listed twice.  Returns int64 positions, in the
    given order.
    """
    items = list(genes)
    flags = [g for g in items if isinstance(g, (bool, np.bool_))]
    if flags:
        raise ValueError(f"{what}: got True/False values ({', '.join(map(str, flags[:5]))}"
                         f"{' ...' if len(flags) > 5 else ''}), which are neither gene names nor positions; for a "
                         "mask of genes pass its positions, np.flatnonzero(mask)")
    numbers = [g for g in items if isinstance(g, (float, np.floating))]
    if numbers:
        raise ValueError(f"{what}: got the number(s) {', '.join(map(str, numbers[:5]))}"
                         f"{' ...' if len(numbers) > 5 else ''}; gene positions are integers (e.g. "
                         "np.asarray(genes, dtype=int)) and gene names are str")
    if all(isinstance(g, (int, np.integer)) for g in items):
        bad = [g for g in items if not 0 <= int(g) < m]  # Python ints: 2**70 or a uint64 compared without overflow
        if bad:
            raise ValueError(f"{what}: gene position(s) {', '.join(map(str, bad[:5]))}"
                             f"{f' and {len(bad) - 5} more' if len(bad) > 5 else ''} out of range 0..{m - 1}")
        idx = np.asarray([int(g) for g in items], dtype=np.int64)
    else:
        if names is None:
            raise ValueError(f"{what}: gene names given but no feature_names to look them up in; pass "
                             "feature_names= (or an AnnData), or integer positions")
        wanted = [str(g) for g in items]
        lookup = {}
        for i, name in enumerate(names):
            lookup.setdefault(str(name), []).append(i)
        missing = [g for g in wanted if g not in lookup]
        if missing:
            mixed = [str(g) for g in items if isinstance(g, (int, np.integer)) and str(g) not in lookup]
            raise ValueError(f"{what}: gene(s) not found among the genes: {', '.join(missing[:5])}"
                             f"{' ...' if len(missing) > 5 else ''}; check the names (case-sensitive)"
                             + (f"; the list mixes names and integer positions ({', '.join(mixed[:5])}), and a "
                                "mixed list is read as names: give the names only, or the positions only"
                                if mixed else ""))
        ambiguous = sorted({g for g in wanted if len(lookup[g]) > 1})
        if ambiguous:
            raise ValueError(f"{what}: gene name(s) {', '.join(ambiguous[:5])}{' ...' if len(ambiguous) > 5 else ''} "
                             "occur more than once among the gene names, so it is ambiguous which gene is meant; make "
                             "the names unique (e.g. adata.var_names_make_unique()) or give integer positions")
        idx = np.asarray([lookup[g][0] for g in wanted], dtype=np.int64)
    uniq, counts = np.unique(idx, return_counts=True)
    if (counts > 1).any():
        raise ValueError(f"{what}: gene(s) {describe_indices(uniq[counts > 1], names)} listed more than once; a panel "
                         "lists each gene once")
    return idx


def frame_feature_names(columns, name="X"):
    """Gene names from a DataFrame's columns, as text; ``MultiIndex`` columns (one name made of several labels) are
    refused naming the fix: ``np.asarray`` makes them tuples, which cannot be one name each (numpy failed with
    "setting an array element with a sequence")."""
    import pandas as pd

    if isinstance(columns, pd.MultiIndex):
        raise ValueError(f"{name} has MultiIndex columns ({columns.nlevels} levels, e.g. {columns[0]!r}), but each "
                         f"gene needs one name: flatten them ({name}.columns = {name}.columns.map('_'.join) for text "
                         f"levels, or {name}.columns.get_level_values(0)), or pass feature_names=")
    names = np.asarray(columns, dtype=object).astype(str)
    # as tl.select_genes warns for var_names: the panel's names could not tell those genes apart
    warn_repeated_names(names, f"the columns of {name}",
                        f"{name}.columns = anndata.utils.make_index_unique({name}.columns)")
    return names


def _check_shape(shape, name, min_samples, feature_names):
    """A 2-D X's shape against what every method needs: a gene, ``min_samples`` samples, one name per gene."""
    n, m = shape
    if m == 0:
        raise ValueError(f"{name} has no genes (shape {shape})")
    if n < min_samples:
        raise ValueError(f"{name} has {n} sample(s); at least {min_samples} are needed")
    if feature_names is not None and len(feature_names) != m:
        raise ValueError(f"feature_names has {len(feature_names)} entries but {name} has {m} genes (columns); "
                         "pass one name per gene, in column order")
    if feature_names is not None:   # every face's names come through here: select, the selectors, evaluate, tl
        warn_repeated_names(feature_names, "feature_names",
                            "feature_names = anndata.utils.make_index_unique(pandas.Index(feature_names))")


def check_matrix(X, *, name="X", feature_names=None, allow_sparse=True, min_samples=2):
    """Validate an expression matrix (samples x genes); never modifies or copies needlessly.

    Returns a 2-D float array (``float32``/``float64`` kept, other real dtypes cast to
    ``float64``) or a CSR/CSC matrix with the same guarantee, in canonical format (sorted
    indices, no duplicate entries: a non-canonical input is canonicalised on a copy, because
    scipy sums duplicates in place, which would change the caller's matrix).  Complex data raise a
    ``TypeError`` (expression values are real; take ``.real`` or ``abs()`` explicitly).
    NaN/Inf raise a ``ValueError`` naming the first affected genes.  ``feature_names``,
    when given, must have one entry per gene.  A ``dask.array.Array`` stays lazy (:func:`check_dask_matrix`).
    """
    if hasattr(X, "obs_names") and hasattr(X, "var_names"):
        raise TypeError(f"{name} is an AnnData; pass its matrix ({name}.X or a layer) with the labels, or call "
                        "bioqpfs.tl.select_genes(adata, groupby) to work on the AnnData itself")
    from ._io import read_if_on_disk
    from ._kernels.counting_dask import is_dask_array, memoized

    # a cupy array / cupyx.scipy.sparse matrix: discretised on the CPU, counted where backend= says; an on-disk one
    # (h5py dataset, anndata's backed CSRDataset) read whole, as the selectors need all of it
    X = read_if_on_disk(to_host(X))
    if is_dask_array(X):
        return check_dask_matrix(X, name=name, feature_names=feature_names, allow_sparse=allow_sparse,
                                 min_samples=min_samples)
    orig = X
    if sp.issparse(X):
        if not allow_sparse:
            raise TypeError(f"{name} is sparse but this function needs a dense array; call {name}.toarray() first")
        if np.issubdtype(X.dtype, np.complexfloating):
            raise TypeError(f"{name} has complex dtype {X.dtype}; expression values must be real -- pass "
                            f"{name}.real (or abs({name})) explicitly")
        X = X.tocsr() if X.format not in ("csr", "csc") else X
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        if not X.has_canonical_format:  # duplicate or unsorted entries: scipy would sum/sort them in place
            X = X.copy() if X is orig else X
            X.sum_duplicates()
        data = X.data
    else:
        if hasattr(X, "to_numpy"):
            X = _frame_values(X, name)
        if isinstance(X, np.ma.MaskedArray) and np.ma.getmaskarray(X).any():
            # np.asarray would keep the values under the mask: missing entries counted as data, silently
            masked = np.ma.getmaskarray(X)
            cols = np.flatnonzero(masked.any(axis=0)) if masked.ndim == 2 else np.array([0])
            if feature_names is not None and len(feature_names) != masked.shape[-1]:
                feature_names = None   # refused below with its own message once the mask is dealt with
            raise ValueError(f"{name} is a masked array with {int(masked.sum())} masked (missing) value(s) in "
                             f"{cols.size} gene(s): {describe_indices(cols, feature_names)}; the values under the "
                             f"mask would be read as data: impute them ({name}.filled(value)) or drop those genes")
        X = np.asarray(X)
        if X.dtype == object and X.ndim == 0 and sp.issparse(X.item()):  # np.asarray(sparse) wraps, not converts
            raise TypeError(f"{name} is a 0-d NumPy object array holding a scipy.sparse matrix (np.asarray(sparse) "
                            f"does that; it does not convert): pass the sparse matrix itself (it is never densified), "
                            f"or its .toarray()")
        if X.dtype == object or not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
            raise TypeError(f"{name} must be numeric, got dtype {X.dtype}")
        if np.issubdtype(X.dtype, np.complexfloating):
            raise TypeError(f"{name} has complex dtype {X.dtype}; expression values must be real -- pass "
                            f"{name}.real (or np.abs({name})) explicitly")
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        data = X
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (samples x genes), got shape {X.shape}")
    _check_shape(X.shape, name, min_samples, feature_names)
    # once per call for the same X (a face that checks X to name it in messages, then the selector's own check)
    if not memoized("finite", X, lambda: bool(np.isfinite(data).all())):
        if sp.issparse(X):
            Xc = X.tocsc()
            bad_cols = np.unique(np.repeat(np.arange(X.shape[1]), np.diff(Xc.indptr))[~np.isfinite(Xc.data)])
        else:
            bad_cols = np.flatnonzero(~np.isfinite(X).all(axis=0))
        raise ValueError(
            f"{name} contains NaN or infinite values in {bad_cols.size} gene(s): "
            f"{describe_indices(bad_cols, feature_names)}; impute or remove them first "
            "(e.g. drop those genes, or fill missing values)"
        )
    return X


def _frame_values(X, name="X"):
    """``X.to_numpy()`` of a pandas object; nullable numeric columns (``Float64``, ``Int64``, ``boolean``: what
    ``convert_dtypes()`` and ``dtype_backend="numpy_nullable"`` give) and columns of mixed numeric dtypes (float and
    bool) as float64 with NA as NaN, which the NaN check then names, instead of an object array."""
    import pandas as pd

    dtypes = list(X.dtypes) if isinstance(X, pd.DataFrame) else [getattr(X, "dtype", None)]
    numeric = all(not isinstance(d, pd.CategoricalDtype) and (pd.api.types.is_numeric_dtype(d)
                                                                or pd.api.types.is_bool_dtype(d)) for d in dtypes)
    nullable = any(isinstance(d, pd.api.extensions.ExtensionDtype) for d in dtypes)
    mixed = len({str(d) for d in dtypes}) > 1   # e.g. float and bool columns: to_numpy() would give objects
    if numeric and (nullable or mixed):
        return X.to_numpy(dtype=np.float64, na_value=np.nan)
    if not numeric and isinstance(X, pd.DataFrame):  # name the columns (the dtype check would say only "object")
        # (label, dtype) pairs: a label need not be a str (the default columns are 0, 1, ...), so the dtype is not
        # looked up again by the label's text
        bad = [(c, d) for c, d in X.dtypes.items() if isinstance(d, pd.CategoricalDtype)
               or not (pd.api.types.is_numeric_dtype(d) or pd.api.types.is_bool_dtype(d))]
        raise TypeError(f"{name} must be numeric, but {len(bad)} column(s) are not: "
                        f"{', '.join(str(c) for c, _ in bad[:5])}"
                        f"{' ...' if len(bad) > 5 else ''} ({bad[0][1]}); drop annotation columns "
                        f"({name}.drop(columns=[...])) or convert them (pd.to_numeric)")
    return X.to_numpy()


#: name prefix of the Dask arrays whose chunks :func:`check_dask_matrix` has checked
CHECKED_CHUNKS = "bioqpfs-checked-chunks-"


def _canonical_chunk(x, what="X", block_info=None):
    """A sparse chunk as CSR in canonical format (sorted indices, no duplicates): itself if it is, else a converted or
    summed copy; a dense block (a Dask array may mix them whatever its meta says: every chunk kernel takes both) as
    it is.  A chunk whose shape is not the one the array declares for it (``block_info``: a ``map_blocks`` that
    changed the shape without ``chunks=``) is refused naming ``what`` and its samples: the passes would count it as
    it is (a silently wrong mean) or fail deep inside an indexing kernel."""
    declared = None if block_info is None else block_info.get(None, {}).get("chunk-shape")
    if declared is not None and tuple(np.shape(x)) != tuple(declared):
        (lo, hi), _ = block_info[None]["array-location"]
        raise ValueError(f"a chunk of the Dask array {what} holds shape {tuple(np.shape(x))} where the array declares "
                         f"{tuple(declared)} (samples {lo}..{hi - 1}): its blocks do not match its .chunks (a "
                         f"map_blocks that changes the shape needs chunks=...); fix the array's chunks, or load "
                         f"{what} into memory ({what}.compute())")
    if not sp.issparse(x):
        return x
    if x.format != "csr":
        x = x.tocsr()
    elif x.has_canonical_format:
        return x
    else:
        x = x.copy()
    x.sum_duplicates()
    return x


def _host_chunk(x):
    """A cupy chunk copied to numpy (a ``cupyx.scipy.sparse`` one to scipy CSR)."""
    x = to_host(x)
    return x.tocsr() if sp.issparse(x) and x.format != "csr" else x


def check_dask_matrix(X, *, name="X", feature_names=None, allow_sparse=True, min_samples=2):
    """Validate a Dask expression matrix without loading it: the lazy counterpart of :func:`check_matrix`.

    Chunks must be numpy arrays or scipy.sparse matrices, read as CSR (the chunk type is read from the array's
    ``_meta`` and every chunk is checked when read, since Dask infers the meta from an empty chunk; cupy and
    ``cupyx.scipy.sparse`` chunks are copied to the host chunk by chunk, and counted on the GPU under
    ``backend="gpu"``/``"auto"``, :mod:`bioqpfs._device`); the result has the gene axis in one chunk (rechunked if
    needed, :func:`bioqpfs._kernels.counting_dask.sample_chunked`) and a float32/float64 dtype (other real dtypes
    cast lazily; sparse chunks converted to CSR, and CSR chunks with duplicate or unsorted entries canonicalised, on
    a copy, as in memory).  NaN/Inf are
    found in one pass over the chunks and raise a ``ValueError`` naming the genes.
    """
    from ._kernels.counting_dask import sample_chunked
    from ._kernels.discretize_dask import dask_nonfinite_genes

    meta = getattr(X, "_meta", None)
    if is_cupy_array(meta) or is_cupy_sparse(meta):  # cupy chunks: each read to the host where it is discretised
        meta = meta.get()
        meta = meta.tocsr() if sp.issparse(meta) else meta
        X = X.map_blocks(_host_chunk, dtype=X.dtype, meta=meta)
    if sp.issparse(meta):
        if not allow_sparse:
            raise TypeError(f"{name} is a dask array of sparse chunks but this function needs dense chunks; "
                            f"use {name}.map_blocks(lambda b: b.toarray()) first")
        meta = sp.csr_matrix((0, 0), dtype=meta.dtype)  # CSC/COO/... chunks are read as CSR (as in memory)
    elif not isinstance(meta, np.ndarray):
        raise TypeError(f"{name} is a dask array of {type(meta).__name__} chunks; bioqpfs counts numpy or "
                        "scipy.sparse CSR chunks")
    if X.dtype == object or not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise TypeError(f"{name} must be numeric, got a dask array of dtype {X.dtype}")
    if np.issubdtype(X.dtype, np.complexfloating):
        raise TypeError(f"{name} has complex dtype {X.dtype}; expression values must be real -- pass "
                        f"{name}.real explicitly")
    # as check_matrix, per chunk: sparse chunks as CSR with duplicate or unsorted entries summed/sorted, on a copy.
    # Also under a numpy meta: Dask infers it from an empty chunk, so map_blocks(scipy.sparse.coo_matrix) says numpy
    # while its chunks are COO (which crashed inside Dask at the first column selection)
    # (once: an array checked here before keeps its name, so passes memoized for it are reused)
    if not X.name.startswith(CHECKED_CHUNKS):
        from dask.base import tokenize

        X = X.map_blocks(_canonical_chunk, what=name, dtype=X.dtype, meta=meta, name=f"{CHECKED_CHUNKS}{tokenize(X)}")
    X = sample_chunked(X, name)
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    _check_shape(X.shape, name, min_samples, feature_names)
    bad_cols = dask_nonfinite_genes(X)
    if bad_cols.size:
        raise ValueError(
            f"{name} contains NaN or infinite values in {bad_cols.size} gene(s): "
            f"{describe_indices(bad_cols, feature_names)}; impute or remove them first "
            "(e.g. drop those genes, or fill missing values)"
        )
    return X


def sample_names_of(X):
    """Sample names of a pandas DataFrame (its index) or an AnnData (``obs_names``); ``None`` otherwise."""
    import pandas as pd

    if isinstance(X, pd.DataFrame):
        return X.index
    names = getattr(X, "obs_names", None)
    return names if isinstance(names, pd.Index) else None


def is_default_index(index):
    """Whether a pandas index is the default ``RangeIndex`` 0..n-1 (no sample names: positions)."""
    import pandas as pd

    return isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1


def refuse_ambiguous_default_index(index, sample_names, name):
    """Refuse a default-indexed (0..n-1) ``name`` when the samples are named by the same numbers in another order
    (a shuffled DataFrame: ``df.sample(frac=1)``): by position or by name would pick different labels."""
    if (len(index) == len(sample_names) and sample_names.is_unique and not index.equals(sample_names)
            and len(index.symmetric_difference(sample_names)) == 0):
        raise ValueError(f"{name} has the default index 0..{len(index) - 1} and the samples are named by the same "
                         f"numbers in another order (the first sample is named {sample_names[0]}), so it is unclear "
                         f"whether {name} is in sample order or names the samples: pass {name}.to_numpy() (sample "
                         f"order) or {name} indexed by the sample names")


def align_series(y, sample_names, name):
    """Reorder a labels Series to ``sample_names`` by its index (rules in :func:`check_labels`)."""
    idx = y.index
    if idx.equals(sample_names):
        return y
    unique = idx.is_unique and sample_names.is_unique
    if is_default_index(idx):
        refuse_ambiguous_default_index(idx, sample_names, name)
        return y  # a default index carries no sample names: labels are positional
    if unique and len(idx.symmetric_difference(sample_names)) == 0:
        return y.reindex(sample_names)
    if not unique:
        dup = idx[idx.duplicated()].unique() if idx.has_duplicates else sample_names[sample_names.duplicated()].unique()
        where = f"the index of {name} has" if idx.has_duplicates else "the sample names have"
        raise ValueError(f"{where} duplicated entries ({describe_indices(np.arange(len(dup)), dup)}), so {name} "
                         "cannot be matched to the samples by name; pass a plain array in sample order")
    missing = sample_names.difference(idx, sort=False)
    extra = idx.difference(sample_names, sort=False)
    parts = []
    if len(missing):
        parts.append(f"{len(missing)} sample(s) have no label ({describe_indices(np.arange(len(missing)), missing)})")
    if len(extra):
        parts.append(f"{len(extra)} label(s) name no sample ({describe_indices(np.arange(len(extra)), extra)})")
    raise ValueError(f"the index of {name} does not match the sample names: {'; '.join(parts)}. Index the "
                     "labels by the sample names (obs_names / DataFrame index), or pass a plain array in sample order")


def dense_labels(y):
    """A scipy.sparse ``y`` (a column or row of labels, or label levels) as its dense array -- label-sized, as
    ``mutual_information``'s ``Yd``: ``np.asarray`` would wrap it in a 0-d object array; any other ``y`` as it is."""
    return y.toarray() if sp.issparse(y) else y


def check_labels(y, n_samples, *, name="labels", min_classes=2, sample_names=None, check_continuous=True):
    """Validate class labels; return ``(codes, classes)`` with codes in ``0..C-1``.

    Accepts strings, integers, booleans, pandas Categoricals.  Missing labels
    (None/NaN/pd.NA) are an error that names the samples, never silently dropped.

    Parameters
    ----------
    y : array-like or pandas Series, shape (n_samples,)
    n_samples : int
    name : str
        How the labels are called in error messages.
    min_classes : int
        Fewer distinct classes is an error.
    sample_names : pandas Index, optional
        Names of the samples of the data (DataFrame index, AnnData ``obs_names``; see
        :func:`sample_names_of`).  A Series ``y`` is then matched by its index: the same names
        in another order are reordered to the sample order; a default ``RangeIndex`` (0..n-1)
        is taken as positional (refused when the samples are named by the same numbers in another
        order: by position and by name differ, and nothing tells which is meant); any other index that does not hold exactly the sample names is
        an error naming a few missing/extra names.  Without ``sample_names`` (plain arrays)
        labels are always positional.  Messages about missing or blank labels name the samples by
        these names (by position without them, or with a default ``RangeIndex``).

    check_continuous : bool
        Apply the continuous-label rules below (off for arbitrary discrete variables, e.g. the
        ``Yd`` columns of :func:`bioqpfs.measures.mutual_information`).

    Notes
    -----
    Float labels with non-integer values (e.g. 0.37, 1.2) are refused as continuous: treating
    every distinct value as a class gives meaningless relevances.  Bin them first (e.g.
    ``pd.cut``) or use a categorical column; an explicit pandas ``Categorical`` is always taken
    as classes, whatever its categories (e.g. doses 0.5, 1.5).  Labels where more than half of
    at least 10 samples are alone in their class (e.g. ages in years, or sample ids) only give
    a warning: small cross-validation folds of real class labels can look like that.  Datetime,
    timedelta, pandas Period or Interval labels (not an explicit ``Categorical``) are classes (e.g.
    samples grouped by day), but mostly alone in their class they are refused: a time stamp per
    sample is a measurement.  Complex numbers are refused as labels (give strings if meant).

    One class written in two ways -- ``1`` and ``'1'``, ``'1'`` and ``'1.0'``, ``'B'`` and ``'B '``
    -- is an error that names the colliding values: they are different values, so they would
    silently become different classes.  This holds on every face (Python, ``tl``, sklearn, CLI,
    R), which all validate labels here.
    """
    import pandas as pd

    if isinstance(y, pd.Series) and sample_names is not None and len(y) == n_samples:
        y = align_series(y, pd.Index(sample_names), name)
    if isinstance(y, (pd.Series, pd.Index)):
        y = y.array
    y = dense_labels(y)
    explicit_categories = isinstance(y, pd.Categorical) or isinstance(getattr(y, "dtype", None), pd.CategoricalDtype)
    if explicit_categories:
        cat = pd.Categorical(y)
    else:
        arr = np.asarray(y, dtype=object) if not isinstance(y, np.ndarray) else y
        if not arr.dtype.isnative:   # big-endian ('>i8', e.g. read from a file): pandas' hash tables refuse it deep
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if arr.dtype == np.float16:   # pandas has no float16 index ("float16 indexes are not supported"): the
            arr = arr.astype(np.float64)   # same values in float64, exactly
        if arr.ndim != 1:
            arr = np.ravel(arr) if arr.ndim == 2 and 1 in arr.shape else arr
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {np.shape(y)}")
        if arr.dtype == object:
            _check_no_bools_among_numbers(arr, name)
        cat = pd.Categorical(arr)
    if len(cat) != n_samples:
        raise ValueError(f"{name} has {len(cat)} entries but the data have {n_samples} samples")
    # name the samples in messages where they have names (a DataFrame's index, obs_names), else their positions
    shown = None if sample_names is None or is_default_index(sample_names) else sample_names
    missing = np.flatnonzero(np.asarray(cat.isna()))
    if missing.size:
        raise ValueError(
            f"{name} has {missing.size} missing value(s) (at samples {describe_indices(missing, shown)}); "
            "remove those samples or give them a label"
        )
    cat = cat.remove_unused_categories()
    # a blank cell (what the CLI and pandas' readers take for a missing value) or "nan" (what astype(str) makes of a
    # missing value) is not a class: as a class of its own it took panel slots for noise
    blank = [c for c in cat.categories if isinstance(c, str) and (not c.strip() or c == "nan")]
    if blank:
        at = np.flatnonzero(np.isin(np.asarray(cat.astype(object)), blank))
        raise ValueError(
            f"{name} has {at.size} empty or 'nan' label(s) ({', '.join(repr(c) for c in blank)}; at samples "
            f"{describe_indices(at, shown)}): a blank cell or the text of a missing value (astype(str) writes NaN as "
            "'nan') is a missing label, not a class; remove those samples or give them a label"
        )
    _check_not_complex(cat.categories, name)
    classes = np.asarray(cat.categories)
    codes = np.asarray(cat.codes, dtype=np.intp)
    _check_no_colliding_classes(classes, name)
    if check_continuous and _WARNED_CODES.get(id(y)) is not y:  # codes returned by a check that warned already
        if _check_not_continuous(classes, codes, n_samples, name, explicit_categories,
                                 times=_time_kind(cat.categories)):
            _WARNED_CODES[id(codes)] = codes
    if classes.size < min_classes:
        raise ValueError(
            f"{name} has {classes.size} class(es) ({', '.join(map(str, classes))}); "
            f"gene selection needs at least {min_classes} classes to measure relevance"
        )
    return codes, classes


def _check_no_bools_among_numbers(arr, name):
    """Refuse labels mixing True/False with numbers: ``True == 1`` and ``False == 0`` in Python, so grouping would
    silently make one class of True and 1 (``[True, 1, 0]``: two classes, not three)."""
    is_bool = np.fromiter((isinstance(v, (bool, np.bool_)) for v in arr), dtype=bool, count=arr.size)
    if not is_bool.any() or is_bool.all():
        return
    numbers = [v for v, b in zip(arr, is_bool) if not b and isinstance(v, (int, float, np.integer, np.floating))]
    if numbers:
        raise ValueError(f"{name} mixes True/False with numbers (e.g. {arr[is_bool][0]!r} and {numbers[0]!r}); True "
                         "equals 1 and False equals 0, so they would be merged into one class: give labels of one "
                         "kind (e.g. strings)")


def _class_key(value):
    """What a class label means: numbers and numeric strings by their value, booleans and the strings "True" /
    "False" (what a boolean becomes in a file) as booleans, other strings without outer spaces."""
    if isinstance(value, (bool, np.bool_)):
        return ("bool", bool(value))
    if isinstance(value, (int, float, np.integer, np.floating)):
        return ("number", float(value))
    text = str(value).strip()
    if text.lower() in ("true", "false"):
        return ("bool", text.lower() == "true")
    try:
        return ("number", float(text))
    except ValueError:
        return ("text", text)


def _check_no_colliding_classes(classes, name):
    """Refuse one class written in two ways (``1`` and ``'1'``, ``'1'`` and ``'1.0'``, ``'B'`` and ``'B '``).

    They are different values, so they would silently become different classes (after ``write_h5ad``
    or a CSV round trip even ``1`` and ``1.0`` become the strings ``'1'`` and ``'1.0'``).
    """
    if classes.dtype.kind not in "OUS" or classes.size < 2:
        return
    groups = {}
    for c in classes:
        groups.setdefault(_class_key(c), []).append(c)
    clashes = [g for g in groups.values() if len(g) > 1]
    if clashes:
        shown = "; ".join(" and ".join(repr(v.item() if isinstance(v, np.generic) else v) for v in g)
                          for g in clashes[:5])
        raise ValueError(
            f"{name}: the same class is written in different ways ({shown}), so it would count as "
            f"{sum(map(len, clashes))} different classes instead of {len(clashes)}. Make the labels consistent "
            "first: one type and one spelling per class (e.g. all integers, or strings without surrounding spaces)")


def _as_code(name):
    """The labels as the user wrote them, for a fix in a message: ``adata.obs['day']`` (tl's column) or ``y``."""
    return name if name.isidentifier() or name.startswith("adata.obs[") else "y"


def _check_not_complex(categories, name):
    """Refuse complex numbers as class labels (an FFT or a complex matrix's column, almost surely by mistake)."""
    kind = getattr(categories.dtype, "kind", "")
    found = categories[0] if kind == "c" and len(categories) else next(
        (v for v in categories if isinstance(v, (complex, np.complexfloating))), None) if kind == "O" else None
    if found is not None:
        raise ValueError(f"Complex data not supported as class labels: {name} holds complex numbers (e.g. "
                         f"{complex(found)!r}); if these values are names of classes, give them as strings (e.g. "
                         f"{_as_code(name)}.astype(str))")   # "Complex data not supported": scikit-learn's words, its checks ask them


def _time_kind(categories):
    """The kind of the labels when they are points or spans of time or intervals (datetime, timedelta, pandas
    Period or Interval values), else ``None``."""
    import datetime

    import pandas as pd

    dtype = categories.dtype
    if isinstance(dtype, pd.DatetimeTZDtype) or getattr(dtype, "kind", "") == "M":
        return "datetime"
    if getattr(dtype, "kind", "") == "m":
        return "timedelta"
    if isinstance(dtype, pd.PeriodDtype):
        return "Period"
    if isinstance(dtype, pd.IntervalDtype):
        return "Interval"
    if getattr(dtype, "kind", "") == "O" and len(categories):
        kinds = (((datetime.datetime, datetime.date, np.datetime64), "datetime"),
                 ((datetime.timedelta, np.timedelta64), "timedelta"), ((pd.Period,), "Period"),
                 ((pd.Interval,), "Interval"))
        for types, kind in kinds:
            if all(isinstance(v, types) for v in categories):
                return kind
    return None


def _check_not_continuous(classes, codes, n_samples, name, explicit_categories, times=None):
    """Refuse float labels with non-integer values; warn on mostly-singleton classes (see :func:`check_labels`);
    refuse mostly-singleton classes of ``times`` (datetime, timedelta, Period or Interval labels, not an explicit
    Categorical): a time stamp per sample is a measurement, not a class.

    Returns whether the singleton warning applies (it is not repeated inside a :func:`one_labels_warning` scope)."""
    import warnings

    verb = "look" if name.endswith("s") else "looks"
    vals = classes
    if vals.dtype == object and all(isinstance(v, (float, np.floating)) for v in vals):  # a list of floats
        vals = vals.astype(np.float64)
    if not explicit_categories and np.issubdtype(vals.dtype, np.floating) and bool((vals != np.round(vals)).any()):
        raise ValueError(
            f"{name} {verb} continuous ({classes.size} distinct values for {n_samples} samples; non-integer "
            "numbers); bin them (e.g. pandas.cut) or use a categorical column")
    singletons = int((np.bincount(codes, minlength=classes.size) == 1).sum())
    if not (n_samples >= 10 and singletons > n_samples / 2):
        return False
    if times is not None and not explicit_categories:
        import pandas as pd

        raise ValueError(
            f"{name} {verb} continuous: {times} values where {singletons} of {n_samples} samples are alone in their "
            f"class ({classes.size} distinct values, e.g. {pd.Index(classes)[0]}); a time per sample is a measurement, not "
            f"a class: group them (e.g. {_as_code(name)}.dt.floor('D') or .dt.to_period('M') for days or months, "
            "pandas.cut) or give a categorical column")
    seen, finding = _SCOPE_WARNED.get(), (n_samples, classes.size, singletons)
    if seen is None or finding not in seen:
        if seen is not None:
            seen.add(finding)
        warnings.warn(
            f"{name}: {singletons} of {n_samples} samples are alone in their class ({classes.size} classes); "
            "if these labels are a continuous variable or sample ids, bin them (e.g. pandas.cut) or pick a "
            "categorical column", UserWarning, stacklevel=4)
    return True


def check_n_genes(n_genes, n_available, *, what="genes"):
    """Validate a requested panel size against the number of candidate genes."""
    if n_genes is None:
        return None
    n_genes = check_positive_int(n_genes, "n_genes")
    if n_genes > n_available:
        raise ValueError(
            f"n_genes={n_genes} but only {n_available} candidate {what} are available; "
            f"ask for at most {n_available}"
        )
    return n_genes


def check_random_state(random_state, *, name="random_state"):
    """``None``, a non-negative int, or a NumPy ``Generator``/``RandomState``/``SeedSequence``/``BitGenerator``
    -> a ``numpy.random.Generator``.  A ``RandomState`` is turned into one integer seed (drawn from it)."""
    if random_state is None or isinstance(random_state, (np.random.Generator, np.random.SeedSequence,
                                                         np.random.BitGenerator)):
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(int(random_state.randint(np.iinfo(np.int32).max)))
    if isinstance(random_state, (bool, np.bool_)) or not isinstance(random_state, (int, np.integer)) \
            or random_state < 0:
        raise ValueError(f"{name} must be None, a non-negative integer or a numpy.random.Generator, "
                         f"got {random_state!r}")
    return np.random.default_rng(int(random_state))


def seed_of(random_state):
    """``None`` or an int seed from ``random_state`` (validated by :func:`check_random_state`).

    A non-negative int is kept; a NumPy Generator/RandomState/SeedSequence/BitGenerator gives one seed
    drawn from it, so that a face can seed several fits (CV folds, sklearn clones) from it.
    """
    if random_state is None:
        return None
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, (bool, np.bool_)) \
            and random_state >= 0:
        return int(random_state)
    return int(check_random_state(random_state).integers(0, 2**31 - 1))


def validate_random_state(random_state):
    """Reject a bad ``random_state`` (e.g. ``"abc"``, -1, 1.5) with a clear error, without using it.

    For selectors that are deterministic but accept ``random_state`` for a uniform signature, and for
    the registry dispatch: a NumPy ``Generator``/``RandomState`` passes untouched (no number is drawn
    from it), anything else goes through :func:`check_random_state`.
    """
    if not isinstance(random_state, (np.random.Generator, np.random.RandomState, np.random.SeedSequence,
                                     np.random.BitGenerator)):
        check_random_state(random_state)
    return random_state


def check_base(base, *, name="base"):
    """Logarithm base of information measures: a finite number > 1 (2: bits, e: nats).  A base in (0, 1) would
    make every entropy and information negative (the selectors then refused the data as carrying none)."""
    if isinstance(base, (bool, np.bool_)) or not isinstance(base, (int, float, np.integer, np.floating)) \
            or not np.isfinite(base) or base <= 1:
        raise ValueError(f"{name} must be a finite number > 1 (2 for bits, e for nats), got {base!r}")
    return float(base)


def _available_memory_bytes():
    """Available physical memory (``MemAvailable`` of /proc/meminfo), or None where unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _proc_status_bytes(field):
    """A ``kB`` field of /proc/self/status (e.g. VmSize, VmData) in bytes, or None."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _rlimit_headroom():
    """Headroom under the soft ``RLIMIT_AS`` (``ulimit -v``; vs VmSize) and ``RLIMIT_DATA`` (vs VmData), by name."""
    try:
        import resource
    except ImportError:  # not on Windows
        return {}
    out = {}
    for name, field, label in (("RLIMIT_AS", "VmSize", "the address-space limit RLIMIT_AS (ulimit -v)"),
                               ("RLIMIT_DATA", "VmData", "the data-segment limit RLIMIT_DATA (ulimit -d)")):
        soft = resource.getrlimit(getattr(resource, name))[0]
        used = _proc_status_bytes(field)
        if soft != resource.RLIM_INFINITY and used is not None:
            out[label] = max(soft - used, 0)
    return out


#: where the cgroup hierarchies are mounted and where this process's cgroups are listed (tests point at fakes)
CGROUP_ROOT = "/sys/fs/cgroup"
_PROC_CGROUP = "/proc/self/cgroup"
_CGROUP_UNLIMITED = 2**60  # v1 writes "no limit" as a number near 2**63


def _read_int(path):
    try:
        with open(path) as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return None if text in ("", "max") else int(text) if text.isdigit() else None


def _stat_field(path, key):
    """One ``key value`` line of a cgroup memory.stat file, or 0."""
    try:
        with open(path) as fh:
            for line in fh:
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
    except (OSError, ValueError):
        pass
    return 0


def _cgroup_headroom():
    """Smallest (limit - usage) over this process's memory cgroup and its ancestors, v2 or v1; None if unlimited.

    Usage excludes the reclaimable page cache (``inactive_file``), as ``docker stats`` does.  Where the
    path of /proc/self/cgroup is not under the mount (a cgroup namespace), the mount root is used.
    """
    try:
        with open(_PROC_CGROUP) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    best = None
    for line in lines:
        hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and controllers == "":      # v2 (also the unified part of a hybrid setup)
            mounts, files = ("", "unified"), ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):  # v1
            mounts, files = ("memory",), ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        else:
            continue
        for mount in mounts:
            root = os.path.join(CGROUP_ROOT, mount)
            if not os.path.isdir(root):
                continue
            d = os.path.join(root, path.lstrip("/"))
            d = d if os.path.isdir(d) else root
            while True:
                limit, usage = _read_int(os.path.join(d, files[0])), _read_int(os.path.join(d, files[1]))
                if limit is not None and limit < _CGROUP_UNLIMITED and usage is not None:
                    usage -= min(_stat_field(os.path.join(d, "memory.stat"), files[2]), usage)
                    best = max(limit - usage, 0) if best is None else min(best, max(limit - usage, 0))
                if os.path.normpath(d) == os.path.normpath(root):
                    break
                d = os.path.dirname(d)
    return best


def available_memory():
    """The memory an allocation can use now, and the limit that binds.

    The smallest of: available physical memory (``MemAvailable``), the headroom under the soft
    ``RLIMIT_AS`` / ``RLIMIT_DATA`` (limit minus the current VmSize / VmData), and the cgroup v2 / v1
    memory limit minus current usage (containers, batch schedulers, CI).  Returns ``(bytes, label)``,
    or ``(None, None)`` where none is known.
    """
    candidates = {"available physical memory": _available_memory_bytes(), **_rlimit_headroom(),
                  "the memory limit of this container/cgroup": _cgroup_headroom()}
    candidates = {k: v for k, v in candidates.items() if v is not None}
    if not candidates:
        return None, None
    label = min(candidates, key=candidates.get)
    return candidates[label], label


#: what to do about a refused allocation, in the words of each face: (Python, CLI); None where a face has no such
#: option.  Guards name the remedies that fit their caller (e.g. no ``dtype=np.float32`` when it already is).
REMEDIES = {
    "rows": ("compute a subset of rows with rows=...", None),
    "float32": ("use dtype=np.float32", None),
    "genes": ("restrict the genes (e.g. mask_var='highly_variable' in tl.select_genes, or X[:, genes])",
              "restrict the genes with --mask-var (e.g. --mask-var highly_variable)"),
    "nystrom": ("use QPFS+Nystrom (nystrom_rate=..., e.g. 0.05) or method='spec_cmi_nystrom'",
                "use --nystrom-rate (e.g. 0.05) or --method spec_cmi_nystrom"),
    "lower_nystrom": ("lower nystrom_rate", "lower --nystrom-rate"),
    "spg": ("use solver='spg'", "use --solver spg"),
    "spec_cmi": ("use method='spec_cmi'", "use --method spec_cmi"),
    "ikm": ("use a method with O(M) memory (method='ikm_qpfs')", "use --method ikm_qpfs"),
    "samples": ("subsample the samples", "subsample the samples"),
    "components": ("lower n_components", None),
    "lazy": ("use a method with a Dask path, which reads the matrix in sample chunks: method=None (the default "
             "recipe), 'qpfs', 'qpfs_cover', 'spec_cmi', 'spec_cmi_nystrom', 'eqpfs', 'ldfs' or a greedy "
             "baseline ('mrmr_mid', 'jmi', ...; bioqpfs._registry.DASK_METHODS), with any discretization but 'mdl' "
             "(README 'Large data (Dask)')",
             "use the default method or --method qpfs, qpfs_cover, spec_cmi, spec_cmi_nystrom, eqpfs, ldfs or a "
             "greedy baseline (mrmr_mid, jmi, ...), with any --discretization but mdl, which read the file in sample "
             "chunks"),
    "dask": ("install dask (pip install 'bioqpfs[dask]')", "install dask (pip install 'bioqpfs[dask]')"),
}


class MemoryGuardError(MemoryError):
    """An allocation refused before it is attempted; :meth:`message` words the remedies for a face."""

    def __init__(self, what, n_bytes, available, remedies, limit="available physical memory", fraction=1.0):
        self.what, self.n_bytes, self.available, self.remedies = what, n_bytes, available, list(remedies)
        self.limit, self.fraction = limit, fraction
        super().__init__(self.message("python"))

    def message(self, face="python"):
        """The error text for ``face`` ("python" or "cli"): only remedies that exist there.  The usable amount
        (``fraction`` of the available memory) is the one stated, the available memory beside it."""
        col = 0 if face == "python" else 1
        texts = [REMEDIES[r][col] if r in REMEDIES else r for r in self.remedies]
        texts = [t for t in texts if t]
        todo = "; ".join(texts) if texts else "use a machine with more memory"
        usable = f"{self.fraction * self.available / 2**30:.2f} GiB may be used"
        if self.fraction != 1.0:
            usable += f" ({self.fraction:.0%} of the {self.available / 2**30:.2f} GiB available)"
        else:
            usable = f"{self.available / 2**30:.2f} GiB are available"
        return f"{self.what} needs about {self.n_bytes / 2**30:.2f} GiB but only {usable} (bound by {self.limit}); {todo}"


#: the discretizations whose number of levels does not come from ``n_bins``
FIXED_LEVEL_RULES = ("mean_sd", "mdl", None, "none")


def warn_unused_n_bins(func_name, n_bins, discretization):
    """A ``UserWarning`` when ``n_bins`` was given to a method whose discretization does not use it (``mean_sd``:
    three levels; ``mdl``: as many as its cuts; ``None``: the given codes) -- it was silently ignored.  A value that
    no rule could use (not an integer from 2 to 255: ``n_bins=-1``, ``2.5``, ``"3"``) is refused whatever the rule,
    as the rules that use it refuse it: it is a mistake, not an unused setting."""
    from ._kernels.discretize import check_n_bins

    try:
        check_n_bins(n_bins)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{func_name}: {e}") from None
    if isinstance(discretization, str) or discretization is None:
        if discretization in FIXED_LEVEL_RULES and n_bins != 3:
            levels = {"mean_sd": "always three levels (QPFS section 2.5)", "mdl": "as many levels as its cuts"}.get(
                discretization, "the levels of the given codes")
            warnings.warn(f"{func_name}: n_bins={n_bins!r} is not used with discretization={discretization!r} "
                          f"({levels}); n_bins sets the levels of discretization='quantile' or 'zero_quantile'",
                          UserWarning, stacklevel=user_stacklevel())


def user_stacklevel():
    """The ``stacklevel`` of ``warnings.warn``, called from the function that calls this one, that points at the
    first frame outside the bioqpfs package (and contextlib): the user's line, whichever face it came through."""
    import sys

    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    skipped = (package + os.sep, contextlib.__file__)  # contextlib: the faces' ``with`` wrappers
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(skipped):
        frame, level = frame.f_back, level + 1
    return level


def memory_guard(n_bytes, what, remedies, *, fraction=0.8):
    """Refuse an allocation that would not fit in available memory, before attempting it.

    ``remedies``: keys of :data:`REMEDIES` (worded for each face), or free text (a str, or a list
    mixing both) used as is.  ``n_bytes`` is the peak of the whole operation, compared with
    ``fraction`` of :func:`available_memory` (the binding one of physical memory, rlimits and the
    cgroup limit, named in the message).  Raises :class:`MemoryGuardError` (a ``MemoryError``).
    """
    avail, limit = available_memory()
    if avail is not None and n_bytes > fraction * avail:
        raise MemoryGuardError(what, n_bytes, avail, [remedies] if isinstance(remedies, str) else remedies, limit,
                               fraction)


def output_guard(r, m, dtype, what, remedies=None, extra_bytes=0):
    """Refuse an r x m output that would not fit in memory.  ``remedies`` (keys of :data:`REMEDIES`):
    by default those of the public measures -- rows=, float32 (unless it already is), fewer genes, Nystrom.
    ``extra_bytes``: what the caller's next step needs beside the matrix (a solver's working memory)."""
    if remedies is None:
        remedies = ["rows"] + (["float32"] if np.dtype(dtype) != np.float32 else []) + ["genes", "nystrom"]
    what = f"the {r} x {m} {what} matrix" + (" with the solver's working memory" if extra_bytes else "")
    memory_guard(r * m * np.dtype(dtype).itemsize + extra_bytes, what, remedies)


def _is_real(value):
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


class Options:
    """A parameter constraint: one of a fixed set of values (strings, and ``None`` where listed)."""

    def __init__(self, *values):
        self.values = values

    def check(self, where, name, value):
        if (value is None and None in self.values) or (isinstance(value, str) and value in self.values):
            return
        import difflib

        names = [v for v in self.values if isinstance(v, str)]
        close = difflib.get_close_matches(value, names, n=1) if isinstance(value, str) else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        shown = [repr(v) for v in self.values]
        choices = shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"
        raise ValueError(f"{where}: {name} must be {choices}, got {value!r}{hint}")


class Interval:
    """A parameter constraint: a real (``kind="real"``) or whole (``"integer"``) number in a range.

    ``low``/``high`` are bounds (``None``: unbounded), ``closed`` in {"both", "left", "right",
    "neither"} says which are included; ``none=True`` also admits ``None``.  The type rule is the
    one of every numeric parameter (:func:`parameter_constraints`): a bool, a string or NaN is refused.
    """

    def __init__(self, kind, low=None, high=None, *, closed="both", none=False):
        self.kind, self.low, self.high, self.closed, self.none = kind, low, high, closed, none

    def describe(self):
        """``"lie in [0, 1]"``, ``"be >= 0"``, ... (what the error message says the value must do)."""
        left = "[" if self.closed in ("both", "left") else "("
        right = "]" if self.closed in ("both", "right") else ")"
        if self.high is None:
            return f"be {'>=' if left == '[' else '>'} {self.low:g}"
        if self.low is None:
            return f"be {'<=' if right == ']' else '<'} {self.high:g}"
        return f"lie in {left}{self.low:g}, {self.high:g}{right}"

    def check(self, where, name, value):
        if value is None and self.none:
            return
        check_number(value, name, where=where, integer=self.kind == "integer", none=self.none)
        lo_ok = self.low is None or (value >= self.low if self.closed in ("both", "left") else value > self.low)
        hi_ok = self.high is None or (value <= self.high if self.closed in ("both", "right") else value < self.high)
        if not (lo_ok and hi_ok):
            raise ValueError(f"{where}: {name} must {self.describe()}{' (or be None)' if self.none else ''}, "
                             f"got {value!r}")


def check_number(value, name, *, where=None, integer=False, none=False):
    """The one type rule of numeric parameters: a real (or whole, ``integer=True``) number, not a bool, not NaN."""
    what = "a whole number" if integer else "a number"
    prefix = f"{where}: " if where else ""
    if not _is_real(value):
        raise TypeError(f"{prefix}{name} must be {what}{' or None' if none else ''}, got {value!r}")
    if np.isnan(value):
        raise ValueError(f"{prefix}{name} must be {what}, got NaN")
    if integer and (not np.isfinite(value) or float(value) != int(value)):
        raise TypeError(f"{prefix}{name} must be {what}, got {value!r}")
    return value


class InvalidParameterError(ValueError, TypeError):
    """A parameter of the wrong type or value (both a ``ValueError`` and a ``TypeError``, as scikit-learn's)."""


def check_positive_int(value, name, *, minimum=1):
    """The one positive-integer rule (panel sizes, counts): an int (not a bool) >= ``minimum``.

    Raises :class:`InvalidParameterError` (a ``ValueError`` and a ``TypeError``) naming ``name``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def parameter_constraints(**constraints):
    """Decorator of a selector: declare and check its parameters before any work.

    A small equivalent of scikit-learn's ``_parameter_constraints``: ``constraints`` maps a
    parameter name to an :class:`Options` (one of fixed values) or an :class:`Interval` (a number in
    a range); ``random_state`` is always checked by :func:`validate_random_state`.  Parameters not
    declared are typed from their default: a number default (``beta=1.0``,
    ``base=2``) must stay a real number, a bool default a bool; ``base`` follows :func:`check_base`.
    Every violation is a ``TypeError``/``ValueError`` naming the method, the parameter and the value
    (never numpy's "could not convert string to float"), raised when the function is called, so
    every face (``select``, ``tl``, CLI, R, sklearn) and every path (exact, Nystrom, every solver)
    fails before any computation.  The table is kept as ``func.parameter_constraints``.
    """
    import functools
    import inspect

    from ._kernels.counting_dask import pass_memo

    def wrap(func):
        sig = inspect.signature(func)
        unknown = set(constraints) - set(sig.parameters)
        if unknown:
            raise TypeError(f"{func.__name__}: constraints for unknown parameter(s) {sorted(unknown)}")
        table = dict(constraints)
        for name, p in sig.parameters.items():
            if name in table or name == "base":
                continue
            if isinstance(p.default, (bool, np.bool_)):
                table[name] = "bool"
            elif _is_real(p.default):
                table[name] = Interval("real")

        @functools.wraps(func)
        def checked(*args, **kwargs):
            bound = sig.bind_partial(*args, **kwargs)
            for name, value in bound.arguments.items():
                if name == "base":  # the one rule of every information measure
                    check_base(value)
                    continue
                if name == "random_state":  # the one random_state rule, also for deterministic methods
                    validate_random_state(value)
                    continue
                rule = table.get(name)
                if rule == "bool":
                    if not isinstance(value, (bool, np.bool_)):
                        raise TypeError(f"{func.__name__}: {name} must be True or False, got {value!r}")
                elif rule is not None:
                    rule.check(func.__name__, name, value)
            if "n_bins" in bound.arguments and "discretization" in sig.parameters:
                rule = bound.arguments.get("discretization", sig.parameters["discretization"].default)
                warn_unused_n_bins(func.__name__, bound.arguments["n_bins"], rule)
            with pass_memo():  # a Dask X: passes shared by validation, moments and thresholds (one call)
                return func(*args, **kwargs)

        checked.parameter_constraints = table
        return checked

    return wrap
