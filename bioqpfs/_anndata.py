"""The one AnnData accessor every face uses (tl, evaluate, pl, get, the R faces).

Modelled on scanpy's ``scanpy/get/get.py`` (``_get_obs_rep``, ``_check_mask``) and
``scanpy._utils._check_use_raw``: which matrix (``layer`` / ``use_raw`` / ``.X``), which genes
(``mask_var``) and which labels (``groupby``) a call reads are resolved here, once, with one set of
error messages.  :func:`source_params` records what was used for ``.uns[key]["params"]``; a value
that was not given is stored as a real ``None`` (anndata >= 0.12 writes it to h5ad, earlier versions
leave the key out; reticulate and rpy2 turn it into R's ``NULL``), never as the string ``"None"``.
Readers therefore use ``params.get(name)``.  :func:`obs_rep_for` is the variant for the selection faces: a
backed ``.X`` becomes a Dask array of sample chunks read from the file when the methods can count it so.

Also here: which ``.uns`` entries and ``.var`` columns are a bioqpfs selection
(:func:`is_record`, :func:`key_columns`), read by ``tl`` (re-runs), ``get`` and the R faces.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ._io import lazy_rows, read_backed, stored_bytes
from ._kernels.counting_dask import compute, csr_chunks, is_dask_array
from ._validation import check_labels, describe_indices

__all__ = ["in_memory", "check_use_raw", "matrix_name", "check_has_x", "get_obs_rep", "obs_rep_for", "check_annotations", "check_mask",
           "obs_labels", "obs_column", "source_params", "is_record", "key_columns",
           "counts_warning"]


def in_memory(adata, get):
    """The matrix ``get()`` of ``adata``; a backed (on-disk) one, or an on-disk element of an in-memory AnnData,
    is read once, as the selectors need random access to all of it (a file damaged or truncated while open
    is an error, :func:`bioqpfs._io.read_backed`)."""
    if adata.isbacked:
        return read_backed(get, adata.filename)
    X = get()
    return read_backed(lambda: X) if hasattr(X, "to_memory") or type(X).__module__.startswith("h5py") else X


def check_annotations(adata):
    """Refuse an AnnData whose ``.obs``/``.var`` are not pandas DataFrames (``anndata.experimental.read_lazy``
    gives xarray-backed ones), naming the two ways that work; its lazy X itself is fine (a Dask array)."""
    lazy = [name for name in ("obs", "var") if not isinstance(getattr(adata, name), pd.DataFrame)]
    if lazy:
        raise TypeError(
            f"adata.{' and adata.'.join(lazy)} {'is' if len(lazy) == 1 else 'are'} lazily loaded "
            f"({type(getattr(adata, lazy[0])).__name__}, anndata.experimental.read_lazy), which bioqpfs cannot read "
            "labels from or write results into; load the annotations and keep X lazy: adata.obs = "
            "adata.obs.to_memory(); adata.var = adata.var.to_memory() -- or open the file with "
            "anndata.read_h5ad(path, backed='r'), whose X bioqpfs reads in sample chunks")


def check_use_raw(adata, layer, use_raw):
    """Resolve ``use_raw`` as scanpy does (``scanpy._utils._check_use_raw``, ``tl.rank_genes_groups``).

    ``None``: ``adata.raw`` when it is set and no ``layer`` is given, else ``.X``/the layer.

    Returns
    -------
    (bool, str)
        Whether ``.raw`` is read, and the matrix's name for messages and logs.
    """
    if use_raw is not None and not isinstance(use_raw, (bool, np.bool_)):
        raise TypeError(f"use_raw must be None, True or False, got {use_raw!r}")
    resolved = (layer is None and adata.raw is not None) if use_raw is None else bool(use_raw)
    what = matrix_name(layer, resolved)
    if use_raw is None and resolved:
        what += " (use_raw=None and adata.raw is set, as in scanpy's rank_genes_groups; use_raw=False for adata.X)"
    return resolved, what


def matrix_name(layer, raw):
    """The name of the matrix read (``adata.layers['counts']``, ``adata.raw.X``, ``adata.X``), for the checks of it
    (:func:`bioqpfs._validation.check_matrix`'s ``name``); ``raw``: :func:`check_use_raw`'s resolved ``use_raw``."""
    return f"adata.layers[{layer!r}]" if layer is not None else "adata.raw.X" if raw else "adata.X"


def _x_of(adata):
    """``adata.X`` (a backed one stays in the file), ``None`` also for a backed file written without X; a
    damaged file (its X unreadable) gives a non-None marker: the reading of X then names the file."""
    try:
        return adata.X
    except KeyError:  # h5py: "object 'X' doesn't exist" -- or a damaged file
        if not adata.isbacked:
            raise
        import h5py

        try:
            with h5py.File(adata.filename, "r") as f:
                return None if "X" not in f else Ellipsis
        except (OSError, KeyError, RuntimeError):
            return Ellipsis


def check_has_x(adata, layer, raw):
    """A clear error when ``adata.X`` is to be read but holds no matrix (``X=None``: an AnnData of layers only,
    which anndata allows), naming the layers to pass instead."""
    if layer is None and not raw and _x_of(adata) is None:
        layers = list(adata.layers.keys())
        raise ValueError("adata.X is None (this AnnData holds no matrix in X); pass layer= to select on one of its "
                         f"layers ({', '.join(map(repr, layers)) if layers else 'it has none'})"
                         + (" or use_raw=True" if adata.raw is not None else ""))


def get_obs_rep(adata, *, layer=None, use_raw=None):
    """The samples x genes matrix to read, aligned with ``adata.var_names`` (scanpy's ``_get_obs_rep``).

    ``layer``: ``adata.layers[layer]``; ``use_raw`` as in :func:`check_use_raw` (``.raw`` restricted
    to ``adata.var_names``); else ``adata.X``.  Backed matrices are read into memory.  Array support:
    whatever the AnnData holds (numpy, scipy.sparse).
    """
    implicit = use_raw is None
    use_raw, _ = check_use_raw(adata, layer, use_raw)
    if layer is not None and use_raw:
        raise ValueError("pass either layer= or use_raw=True, not both")
    check_has_x(adata, layer, use_raw)
    if layer is not None:
        if layer not in adata.layers:
            raise KeyError(f"layer {layer!r} not found; available layers: {list(adata.layers.keys()) or 'none'}")
        return in_memory(adata, lambda: adata.layers[layer])
    if use_raw:
        if adata.raw is None:
            raise ValueError("use_raw=True but adata.raw is not set")
        genes = _raw_positions(adata, implicit)
        if adata.isbacked:  # anndata's backed adata.raw[:, names].X is the stored matrix whole, in its own gene order
            X = in_memory(adata, lambda: adata.raw.X)
            return X if genes is None else X[:, genes]
        if not adata.raw.var_names.is_unique:  # anndata's lookup by name refuses any repeated name of .raw
            return in_memory(adata, lambda: adata.raw.X[:, np.arange(adata.raw.n_vars) if genes is None else genes])
        return in_memory(adata, lambda: adata.raw[:, adata.var_names].X)
    return in_memory(adata, lambda: adata.X)


def obs_rep_for(adata, runs, *, layer=None, use_raw=None, chunk_size=None, progress=False):
    """:func:`get_obs_rep` for the selections ``runs`` (``(method, params)`` pairs) will make; a backed or lazily
    read matrix is read in sample chunks when every run can count it so.

    A backed AnnData (``anndata.read_h5ad(path, backed="r")``, not a view) whose ``.X`` or ``.raw.X`` is read
    (``.raw`` is what ``use_raw=None`` reads when it is set, as in scanpy) becomes a Dask array of sample chunks
    of ``chunk_size`` rows (:func:`bioqpfs._io.lazy_rows`: dense or CSR, each chunk read from the file when a
    task needs it, a changed or deleted file an error naming the chunk; ``.raw``'s columns of
    ``adata.var_names`` taken chunk by chunk) when dask is installed and every run has a Dask path
    (:func:`bioqpfs._registry.dask_refusal`).  Otherwise the matrix is read whole, as :func:`get_obs_rep` does,
    after a check that its stored size fits the available memory (:func:`bioqpfs._validation.memory_guard`,
    whose error names the fix).  A backed file's layers are in memory already (anndata reads them when it
    opens the file).  A matrix that already is such a Dask array of file chunks (the CLI's lazily read
    zarr store puts them in ``.X``, ``.layers`` and ``.raw``) is treated the same way: kept lazy, or read
    whole after the memory check; so is any other Dask matrix (checked as the dense float64 it may become), which
    the runs without a Dask path (``discretization="mdl"``, the MST relevances) refused.

    Returns
    -------
    (X, str or None)
        The matrix, and why a backed or lazy X was read whole (for the log; ``None`` when it is lazy or was in
        memory).
    """
    from ._registry import DASK_METHODS, dask_refusal

    whole = lambda: get_obs_rep(adata, layer=layer, use_raw=use_raw)  # noqa: E731
    raw = check_use_raw(adata, layer, use_raw)[0]
    check_has_x(adata, layer, raw)
    if not adata.isbacked or adata.is_view or layer is not None:  # a backed file's layers are read at its opening
        source = adata.layers[layer] if layer is not None and layer in adata.layers else (
            adata.raw.X if raw and adata.raw is not None else adata.X)
        X = whole()
        if not is_dask_array(X):
            return X, None
        stored = getattr(source, "bioqpfs_stored_bytes", None)
        # a Dask array of the user's: a method without a Dask path reads it itself (select(), HSFS's sample limit
        # checked first); read here for the settings that a method with one refuses (mdl, the MST relevances)
        why = _refusal(runs if stored is not None else [r for r in runs if r[0] in DASK_METHODS], X, dask_refusal)
        if why is None:
            return X, None
        if stored is None:  # checked as the dense float64 it may become
            _guard(8 * X.shape[0] * X.shape[1], "the Dask matrix", why)
        else:
            _guard(stored, "a lazily read matrix", why)
        return compute(csr_chunks(X)), why
    if raw:
        if adata.raw is None:
            raise ValueError("use_raw=True but adata.raw is not set")
        genes = _raw_positions(adata, use_raw is None)
    elem = "raw/X" if raw else "X"
    try:
        import dask.array  # noqa: F401
    except ImportError:
        X, why = None, "dask is not installed"
    else:
        try:
            X = lazy_rows(adata.filename, elem, chunk_size=chunk_size, progress=progress)
        except FileNotFoundError:  # removed or moved since it was opened: the open handle still reads it whole
            X, why = None, "the file is no longer at its path (removed or moved since it was opened)"
        else:
            why = f"{elem} is stored by columns (CSC), which cannot be read by samples" if X is None else None
            if X is not None and raw and genes is not None:
                X = _columns_of_chunks(X, genes)
    why = why or _refusal(runs, X, dask_refusal)
    if why is None:
        return X, None
    _guard(stored_bytes(adata.raw.X if raw else adata.X), f"{elem} of {adata.filename}", why)
    return whole(), why


#: rows :func:`counts_warning` looks at (enough to tell counts from log values; cheap on any matrix)
COUNTS_CHECK_ROWS = 2000


def counts_warning(adata, X, layer, raw, *, what="the panel is selected on them as given"):
    """The warning text when ``X`` (the matrix a selection reads) looks like raw counts, else ``None``.

    Raw counts: only non-negative integers, some above 1, in its first :data:`COUNTS_CHECK_ROWS` rows (scanpy's
    ``check_nonnegative_integers`` test, on a sample).  The selections' measures are meant for normalised,
    log-transformed expression (sequencing depth differs between cells), and neither scanpy nor bioqpfs said
    anything when ``.X`` or ``.raw`` still held counts.  The text names the matrix and what to pass instead:
    a layer or ``.X``/``.raw`` of this AnnData that holds non-integer values, else normalising first.
    A Dask or backed matrix is not looked at (reading it is the costly part).  ``what``: what is done with them.
    """
    if is_dask_array(X) or not _looks_like_counts(X):
        return None
    name = matrix_name(layer, raw)
    others = []
    if raw or layer is not None:
        if _x_of(adata) is not None and not _looks_like_counts(_first_rows(adata.X)):
            others.append("adata.X (use_raw=False)" if raw else "adata.X (leave out layer=)")
    elif adata.raw is not None and not _looks_like_counts(_first_rows(adata.raw.X)):
        others.append("adata.raw (use_raw=True)")
    others += [f"adata.layers[{k!r}] (layer={k!r})" for k in adata.layers.keys() if k != layer and not _looks_like_counts(
        _first_rows(adata.layers[k]))][:3]
    fix = (f"; non-integer values, perhaps the log-normalised ones, are in {', '.join(others)}" if others else
           "; normalise and log-transform them first (sc.pp.normalize_total, sc.pp.log1p), keeping the counts in "
           "a layer (adata.layers['counts'] = adata.X.copy())")
    return (f"{name} holds non-negative integers only (raw counts?); {what}, while "
            f"the methods are meant for normalised, log-transformed expression{fix}")


def _first_rows(X):
    if is_dask_array(X) or hasattr(X, "to_memory") or type(X).__module__.startswith("h5py"):
        return None
    return X[:COUNTS_CHECK_ROWS]


def _looks_like_counts(X):
    if X is None:
        return False
    X = _first_rows(X)
    if X is None:
        return False
    values = X.data if hasattr(X, "data") and hasattr(X, "indptr") else np.asarray(X)
    values = np.asarray(values)
    if values.dtype.kind not in "fiu" or values.size == 0:
        return False
    if values.dtype.kind == "f" and (not np.isfinite(values).all() or (values != np.round(values)).any()):
        return False
    return bool((values >= 0).all() and (values > 1).any())


def _raw_positions(adata, implicit):
    """The columns of ``adata.raw`` that hold ``adata.var_names``, in their order (``None``: all of them, as
    stored); the error of :func:`get_obs_rep` when some are missing."""
    raw_names = adata.raw.var_names
    if raw_names.equals(adata.var_names):
        return None
    missing = _raw_missing(adata, implicit)
    if missing:
        raise ValueError(missing)
    if raw_names.is_unique:
        return raw_names.get_indexer(adata.var_names)
    # a name twice in .raw is harmless unless adata.var holds it: then which column is meant is ambiguous
    twice = raw_names.duplicated(keep=False)
    ambiguous = adata.var_names.intersection(raw_names[twice])
    if len(ambiguous):
        raise ValueError(f"{len(ambiguous)} gene(s) of adata.var occur more than once in adata.raw (e.g. "
                         f"{list(ambiguous[:3])}), so which column of .raw holds them is ambiguous; make the names of "
                         ".raw unique (adata.raw = adata.raw.to_adata() after var_names_make_unique()), or pass "
                         "use_raw=False to use adata.X")
    return np.flatnonzero(~twice)[raw_names[~twice].get_indexer(adata.var_names)]


def _raw_missing(adata, implicit):
    """The error text when genes of ``adata.var`` are not in ``adata.raw`` (``None`` when all are)."""
    missing = adata.var_names.difference(adata.raw.var_names)
    if not len(missing):
        return None
    return (f"{len(missing)} gene(s) of adata.var are not in adata.raw (e.g. {list(missing[:3])})"
            + ("; use_raw=None selects on adata.raw when it is set (as scanpy's rank_genes_groups does): pass "
               "use_raw=False to use adata.X" if implicit else ""))


def _columns_of_chunks(X, genes):
    """The columns ``genes`` of a Dask array of sample chunks (dense or scipy CSR chunks), chunk by chunk."""
    import dask.array as da

    genes = np.asarray(genes, dtype=np.int64)
    out = da.map_blocks(lambda block: block[:, genes], X, chunks=(X.chunks[0], (genes.size,)), dtype=X.dtype,
                        meta=X._meta)
    out.bioqpfs_stored_bytes = X.bioqpfs_stored_bytes
    return out


def _refusal(runs, X, dask_refusal):
    for method, params in runs:
        why = dask_refusal(method, params, X)
        if why is not None:
            return why
    return None


def _guard(n_bytes, what, why):
    from ._validation import memory_guard

    memory_guard(n_bytes, f"reading {what} whole ({why})",
                 (["lazy"] if why != "dask is not installed" else ["dask", "lazy"]))


def check_mask(adata, mask_var):
    """Boolean gene mask from ``mask_var`` (``None``, a ``.var`` column name or a bool array; scanpy's ``_check_mask``)."""
    if mask_var is None:
        return np.ones(adata.n_vars, dtype=bool)
    if isinstance(mask_var, str):
        if mask_var not in adata.var.columns:
            raise KeyError(f"mask_var={mask_var!r} is not a column of adata.var (e.g. run sc.pp.highly_variable_genes first)")
        column = adata.var[mask_var]
        _check_mask_na(column, column.index, f"mask_var={mask_var!r}")
        mask = column.to_numpy()
    elif isinstance(mask_var, pd.Series):  # aligned to the genes by its index, as labels and batches are
        _check_mask_na(mask_var, mask_var.index, "the mask_var Series")
        mask = _aligned_to_genes(adata, mask_var)
    else:
        _check_mask_na(mask_var, adata.var_names, "the mask_var array")
        mask = np.asarray(mask_var)
    if mask.dtype != bool or mask.shape != (adata.n_vars,):
        raise ValueError(f"mask_var must be a boolean column or array with one entry per gene ({adata.n_vars})")
    if not mask.any():
        raise ValueError("mask_var selects no gene")
    return mask


def _check_mask_na(values, genes, what):
    """Refuse a pandas nullable boolean ``mask_var`` (``"boolean"`` dtype) that holds NA, naming the first such gene
    (``genes``: its index, or ``adata.var_names`` for an array; ``what`` names the mask) -- otherwise it became an
    object array, refused as not boolean without a word about the NA."""
    if not pd.api.types.is_bool_dtype(getattr(values, "dtype", None)):
        return
    na = np.asarray(pd.isna(values), dtype=bool)
    if na.any():
        first = f", e.g. gene {genes[np.flatnonzero(na)[0]]}" if len(genes) == na.size else ""
        raise ValueError(f"{what} has {int(na.sum())} missing value(s) (NA{first}); a mask needs True or "
                         "False for every gene: fill them (True keeps a gene as a candidate)")


def _aligned_to_genes(adata, series):
    """A ``mask_var`` Series in ``adata.var`` order: by its index when that holds the gene names (any order),
    by position when it is a default ``RangeIndex``; another index is refused (positions would be a guess)."""
    index, names = series.index, adata.var_names
    if index.equals(names):
        return series.to_numpy()
    if isinstance(index, pd.RangeIndex) and index.equals(pd.RangeIndex(adata.n_vars)):
        return series.to_numpy()
    if index.is_unique and names.is_unique and len(index) == len(names) and index.isin(names).all():
        return series.reindex(names).to_numpy()
    missing = names[~names.isin(index)]
    raise ValueError("mask_var is a Series whose index is not adata.var_names"
                     + (f" (e.g. gene {missing[0]!r} has no entry)" if len(missing) else " (repeated or extra names)")
                     + "; index it by adata.var_names, or pass a boolean array in adata.var order")


def obs_labels(adata, groupby, *, min_classes=2):
    """The class labels ``adata.obs[groupby]`` (a Series), checked and named by their column.

    ``groupby`` may be a list of columns, coarse to fine (hierarchical labels, e.g. ``["lineage", "cell_type"]``):
    a DataFrame of them, each column checked as one (their nesting is checked by the selector,
    :func:`bioqpfs.selectors._common.check_levels`); a list of one column is that column.
    """
    if isinstance(groupby, (list, tuple)) and groupby and all(isinstance(g, str) for g in groupby):
        repeated = sorted({g for g in groupby if groupby.count(g) > 1})
        if repeated:
            raise ValueError(f"groupby lists column(s) {', '.join(map(repr, repeated))} more than once; give each "
                             "level once, coarse to fine")
        if len(groupby) == 1:
            return obs_labels(adata, groupby[0])
        # a coarse level may hold one class (left out with a warning by check_levels); the finest needs two
        return pd.DataFrame({g: obs_labels(adata, g, min_classes=2 if g == groupby[-1] else 1) for g in groupby},
                            index=adata.obs_names)
    if pd.api.types.is_list_like(groupby) or groupby is None:
        shown = repr(groupby) if groupby is None or len(groupby) <= 5 else f"a {type(groupby).__name__} of {len(groupby)}"
        raise TypeError(f"groupby must be the name of one .obs column, or a list of column names (hierarchical "
                        f"labels, coarse to fine), got {shown}; to use labels that are not in .obs, add them first: "
                        "adata.obs['labels'] = labels")
    if groupby not in adata.obs.columns:
        raise KeyError(f"groupby={groupby!r} is not a column of adata.obs; available: {', '.join(map(str, adata.obs.columns)) or 'none'}")
    labels = adata.obs[groupby]
    missing = np.flatnonzero(labels.isna().to_numpy())
    if missing.size:
        raise ValueError(
            f"adata.obs[{groupby!r}] has {missing.size} missing value(s) (cells {describe_indices(missing, adata.obs_names)}); "
            "remove those cells (adata = adata[adata.obs[groupby].notna()].copy()) or give them a label"
        )
    # one class, continuous values...: reported here with the column's name
    check_labels(labels.array, adata.n_obs, name=f"adata.obs[{groupby!r}]", min_classes=min_classes)
    return labels


def obs_batch(adata, batch_key):
    """The batch of every cell, ``adata.obs[batch_key]`` (a Series), checked and named by its column: present,
    no missing values (one batch is fine: the batch-aware measures then equal the plain ones).  As for ``groupby``
    (:func:`obs_labels`), a column name need not be a str (an int-named column, ``batch_key=0``)."""
    if pd.api.types.is_list_like(batch_key) or batch_key is None:
        raise TypeError(f"batch_key must be the name of one .obs column, got {batch_key!r}; to use batches that "
                        "are not in .obs, add them first: adata.obs['batch'] = batches")
    if batch_key not in adata.obs.columns:
        raise KeyError(f"batch_key={batch_key!r} is not a column of adata.obs; available: "
                       f"{', '.join(map(str, adata.obs.columns)) or 'none'}")
    batch = adata.obs[batch_key]
    missing = np.flatnonzero(batch.isna().to_numpy())
    if missing.size:
        raise ValueError(
            f"adata.obs[{batch_key!r}] has {missing.size} missing value(s) (cells "
            f"{describe_indices(missing, adata.obs_names)}); remove those cells or give them a batch")
    return batch


def obs_column(adata, name):
    """The ``.obs`` column a recorded name refers to: ``name`` itself when it is a column, else the one column whose
    text is ``name`` (:func:`source_params` records an int-named column, ``groupby=0``, as ``"0"``); ``None`` when
    there is no such column (or several, e.g. ``0`` and ``"0"``)."""
    columns = adata.obs.columns
    if name in columns:
        return name
    matches = [c for c in columns if str(c) == str(name)]
    return matches[0] if len(matches) == 1 else None


def source_params(adata, *, groupby, layer, use_raw, mask_var, assay=None):
    """What a call read, for ``.uns[key]["params"]``: ``groupby``, ``layer``, ``use_raw`` (resolved), ``mask_var``.

    ``groupby`` is the column name, or the list of column names of hierarchical labels (coarse to fine).

    ``layer`` is ``None`` when ``.X``/``.raw`` was read; ``mask_var`` is the column name, ``"array"``
    for a boolean array, or ``None``; ``assay`` (the R assay or ExpressionSet element the matrix came
    from) is added when given.  Absent values are real ``None``, never the string ``"None"``.
    """
    one = isinstance(groupby, str) or not pd.api.types.is_list_like(groupby)  # a column name may be an int
    record = {"groupby": str(groupby) if one else [str(g) for g in groupby], "layer": layer, "use_raw": check_use_raw(adata, layer, use_raw)[0],
              "mask_var": mask_var if isinstance(mask_var, str) or mask_var is None else "array"}
    if assay is not None:
        record["assay"] = str(assay)
    return record


def is_record(value):
    """Whether an ``.uns`` entry is a selection written by :func:`bioqpfs.tl.select_genes`.

    Recognised by its layout: a mapping with ``"params"`` (holding ``"method"``), ``"diagnostics"``
    and ``"selected"``.
    """
    try:
        return {"params", "diagnostics", "selected"} <= set(value.keys()) and "method" in value["params"]
    except (AttributeError, TypeError):
        return False


#: the ``.var`` columns (after ``<key>_``) that versions without a ``"var_columns"`` record could write
_LEGACY_COLUMNS = ("weight", "rank", "selected", "greedy_score", "cluster", "representative", "cluster_level")


def selection_key(adata, key):
    """The key of a stored selection to read: ``key`` itself when given; else (``None``) the key of
    :func:`bioqpfs.tl.select_genes`'s default, ``"bioqpfs"``, when a selection is stored under it, else the one
    selection stored, else an error naming the stored keys to choose from."""
    if key is not None:
        if not isinstance(key, str):
            raise TypeError(f"key must be the str a selection is stored under (key_added=), got {key!r}")
        return key
    keys = stored_keys(adata)
    if "bioqpfs" in keys:
        return "bioqpfs"
    if len(keys) == 1:
        return keys[0]
    if not keys:
        raise KeyError("no selection is stored in this AnnData; run bioqpfs.tl.select_genes(adata, groupby) first")
    raise KeyError(f"several selections are stored ({', '.join(map(repr, keys))}); pass key= to choose one")


def stored_keys(adata):
    """The ``.uns`` keys of the selections stored by :func:`bioqpfs.tl.select_genes` (:func:`is_record`)."""
    return [str(k) for k, v in adata.uns.items() if is_record(v)]


def key_columns(adata, key):
    """The ``.var`` columns an earlier bioqpfs run wrote under ``key`` (present ones, in ``.var`` order).

    ``.uns[key]["var_columns"]`` lists them; a record of an earlier version without that list owns
    only the columns those versions could write (``<key>_weight`` ... see ``_LEGACY_COLUMNS``).  A
    user's column that merely starts with ``<key>_`` (e.g. ``qpfs_validated``) is never one of them.
    """
    record = adata.uns.get(key) if isinstance(key, str) else None
    if not is_record(record):
        return []
    if "var_columns" in record:
        owned = {str(c) for c in np.atleast_1d(record["var_columns"])}
    else:
        owned = {f"{key}_{c}" for c in _LEGACY_COLUMNS}
    return [c for c in adata.var.columns if c in owned]
