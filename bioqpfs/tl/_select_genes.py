from __future__ import annotations

import inspect
import warnings

import numpy as np
import pandas as pd

from .._io import read_backed, to_storable
from .._jit import announce_compilation
from .._registry import method_function, resolve_method, select
from .._validation import check_labels, describe_indices, one_labels_warning


def _in_memory(adata, get):
    """The matrix ``get()`` of ``adata``; a backed (on-disk) one, or an on-disk element of an in-memory AnnData,
    is read once, as the selectors need random access to all of it (a file damaged or truncated while open
    is an error, :func:`bioqpfs._io.read_backed`)."""
    if adata.isbacked:
        return read_backed(get, adata.filename)
    X = get()
    return read_backed(lambda: X) if hasattr(X, "to_memory") or type(X).__module__.startswith("h5py") else X


def _use_raw(adata, layer, use_raw):
    """Resolve ``use_raw`` as scanpy does (``scanpy._utils._check_use_raw``, ``tl.rank_genes_groups``).

    ``None``: ``adata.raw`` when it is set and no ``layer`` is given, else ``.X``/the layer.
    Returns ``(use_raw, what)``: the bool and the matrix's name for messages.
    """
    if use_raw is not None and not isinstance(use_raw, (bool, np.bool_)):
        raise TypeError(f"use_raw must be None, True or False, got {use_raw!r}")
    resolved = (layer is None and adata.raw is not None) if use_raw is None else bool(use_raw)
    what = f"adata.layers[{layer!r}]" if layer is not None else "adata.raw.X" if resolved else "adata.X"
    if use_raw is None and resolved:
        what += " (use_raw=None and adata.raw is set, as in scanpy's rank_genes_groups; use_raw=False for adata.X)"
    return resolved, what


def _expression(adata, layer, use_raw):
    """The matrix to select from, aligned with ``adata.var_names`` (``use_raw`` resolved by :func:`_use_raw`)."""
    implicit = use_raw is None
    use_raw, _ = _use_raw(adata, layer, use_raw)
    if layer is not None and use_raw:
        raise ValueError("pass either layer= or use_raw=True, not both")
    if layer is not None:
        if layer not in adata.layers:
            raise KeyError(f"layer {layer!r} not found; available layers: {list(adata.layers.keys()) or 'none'}")
        return _in_memory(adata, lambda: adata.layers[layer])
    if use_raw:
        if adata.raw is None:
            raise ValueError("use_raw=True but adata.raw is not set")
        missing = adata.var_names.difference(adata.raw.var_names)
        if len(missing):
            raise ValueError(f"{len(missing)} gene(s) of adata.var are not in adata.raw (e.g. {list(missing[:3])})"
                             + ("; use_raw=None selects on adata.raw when it is set (as scanpy's rank_genes_groups "
                                "does): pass use_raw=False to use adata.X" if implicit else ""))
        return _in_memory(adata, lambda: adata.raw[:, adata.var_names].X)
    return _in_memory(adata, lambda: adata.X)


def _mask(adata, mask_var):
    if mask_var is None:
        return np.ones(adata.n_vars, dtype=bool)
    if isinstance(mask_var, str):
        if mask_var not in adata.var.columns:
            raise KeyError(f"mask_var={mask_var!r} is not a column of adata.var (e.g. run sc.pp.highly_variable_genes first)")
        mask = adata.var[mask_var].to_numpy()
    else:
        mask = np.asarray(mask_var)
    if mask.dtype != bool or mask.shape != (adata.n_vars,):
        raise ValueError(f"mask_var must be a boolean column or array with one entry per gene ({adata.n_vars})")
    if not mask.any():
        raise ValueError("mask_var selects no gene")
    return mask


def _labels(adata, groupby):
    if pd.api.types.is_list_like(groupby) or groupby is None:
        shown = repr(groupby) if groupby is None or len(groupby) <= 5 else f"a {type(groupby).__name__} of {len(groupby)}"
        raise TypeError(f"groupby must be the name of one .obs column, got {shown}; to use labels that are not "
                        "in .obs, add them first: adata.obs['labels'] = labels")
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
    check_labels(labels.array, adata.n_obs, name=f"adata.obs[{groupby!r}]")
    return labels


def _is_record(value):
    """Whether an ``.uns`` entry is a selection written by :func:`select_genes`.

    Recognised by its layout: a mapping with ``"params"`` (holding ``"method"``), ``"diagnostics"``
    and ``"selected"``.
    """
    try:
        return {"params", "diagnostics", "selected"} <= set(value.keys()) and "method" in value["params"]
    except (AttributeError, TypeError):
        return False


#: the ``.var`` columns (after ``<key>_``) that versions without a ``"var_columns"`` record could write
_LEGACY_COLUMNS = ("weight", "rank", "selected", "greedy_score", "cluster", "representative", "cluster_level")


def _key_columns(adata, key):
    """The ``.var`` columns an earlier bioqpfs run wrote under ``key`` (present ones, in ``.var`` order).

    ``.uns[key]["var_columns"]`` lists them; a record of an earlier version without that list owns
    only the columns those versions could write (``<key>_weight`` ... see ``_LEGACY_COLUMNS``).  A
    user's column that merely starts with ``<key>_`` (e.g. ``qpfs_validated``) is never one of them.
    """
    record = adata.uns.get(key) if isinstance(key, str) else None
    if not _is_record(record):
        return []
    if "var_columns" in record:
        owned = {str(c) for c in np.atleast_1d(record["var_columns"])}
    else:
        owned = {f"{key}_{c}" for c in _LEGACY_COLUMNS}
    return [c for c in adata.var.columns if c in owned]


def _check_key(adata, key):
    """Validate ``key_added``; return the ``.var`` columns of an earlier bioqpfs run under it (to drop).

    Refuses to overwrite content bioqpfs did not write: an ``.uns[key]`` entry that is not a bioqpfs
    selection (e.g. scanpy's ``"pca"``), or a ``<key>_weight``/``_rank``/``_selected`` column of
    ``.var`` that no bioqpfs run under ``key`` wrote (see :func:`_check_foreign` for the others).
    """
    if not isinstance(key, str) or not key or "/" in key:
        raise ValueError(f"key_added must be a non-empty string without '/', got {key!r}")
    if key in adata.uns and not _is_record(adata.uns[key]):
        raise ValueError(f"adata.uns[{key!r}] exists and was not written by bioqpfs; choose another key_added "
                         "so that it is not overwritten")
    columns = _key_columns(adata, key)
    _check_foreign(adata, key, [f"{key}_{c}" for c in ("weight", "rank", "selected")], columns)
    return columns


def _check_foreign(adata, key, to_write, owned):
    foreign = [c for c in to_write if c in adata.var.columns and c not in owned]
    if foreign:
        raise ValueError(f"adata.var has column(s) {', '.join(foreign[:5])} that were not written by bioqpfs under "
                         f"key {key!r}; choose another key_added or rename those columns")


def _warn_duplicated_names(adata):
    """Warn (as scanpy does) when ``var_names`` are not unique; return the duplicated names."""
    names = adata.var_names
    if names.is_unique:
        return set()
    dup = names[names.duplicated()].unique()
    warnings.warn(f"adata.var_names are not unique ({len(dup)} duplicated name(s): "
                  f"{describe_indices(np.arange(len(dup)), dup)}); a panel containing one of them is refused, "
                  "because the selected names could not tell the genes apart. Call adata.var_names_make_unique() "
                  "first", UserWarning, stacklevel=3)
    return set(dup)


def _check_panel_names(panel, duplicated, key):
    """Refuse a panel whose names are ambiguous (a selected gene's name is duplicated in ``var_names``)."""
    ambiguous = list(dict.fromkeys(g for g in panel if g in duplicated))
    if ambiguous:
        raise ValueError(f"the panel contains gene(s) whose name is not unique in adata.var_names "
                         f"({describe_indices(np.arange(len(ambiguous)), ambiguous)}), so .uns[{key!r}]['selected'] "
                         "and bioqpfs.get.selection_df could not tell them apart; call adata.var_names_make_unique() "
                         "and run again")


@one_labels_warning()   # labels checked here (named by column) and again by the selector: warn once
def select_genes(adata, groupby, *, method=None, n_genes=50, similarity="mi", layer=None, use_raw=None,
                 mask_var=None, preselected=None, key_added=None, copy=False, random_state=0, **method_params):
    """Select a gene panel with a global method and store it in ``adata``.

    Parameters
    ----------
    adata : AnnData
        Cells/samples x genes; typically normalised and log-transformed.  A view (``adata[mask]``) is
        turned into an actual AnnData in place, with a warning, as scanpy's tools do (the AnnData it
        was taken from is not changed); with ``copy=True`` the view is left as it is.
    groupby : str
        Column of ``adata.obs`` with the classes the panel must separate.
    method : str, optional
        ``None`` (default): the benchmarked default panel recipe, :data:`bioqpfs.DEFAULT_PANEL` (README
        "Panel quality"); its parameters can be overridden through ``**method_params``.  A method name
        from :func:`bioqpfs.methods` (``"qpfs"`` ...) runs that method with its published settings.
    n_genes : int
        Panel size: the top ``n_genes`` ranked genes get ``<key>_selected = True``.
    similarity : {"mi", "correlation"}
        Redundancy measure, for the methods that take one.
    layer : str, optional
        Use ``adata.layers[layer]`` instead of ``adata.X``.
    use_raw : bool, optional
        Use ``adata.raw`` (restricted to ``adata.var_names``).  Default ``None`` follows scanpy's
        ``rank_genes_groups``: ``.raw`` when it is set and no ``layer`` is given, else ``.X``.  The
        matrix used is logged and its ``use_raw`` recorded in ``.uns[key]["params"]``.  (Earlier
        versions used ``.X`` by default: e.g. scanpy's ``pbmc68k_reduced`` is now selected on its
        log-normalised ``.raw`` rather than its scaled ``.X``.)
    mask_var : str or bool array, optional
        Only consider these genes (e.g. ``"highly_variable"``); genes outside get NaN weight and rank.
    preselected : sequence of str, optional
        Genes that must be in the panel, ranked first in the given order; the method optimises the
        rest given them (only for methods that support it, e.g. ``"qpfs"``).
    key_added : str, optional
        Prefix of the written keys; default the method name, ``"bioqpfs"`` for the default recipe.  A non-empty string without ``"/"``.
        Re-running under a key that holds a bioqpfs selection replaces it: the ``.var`` columns the
        earlier run wrote (listed in ``.uns[key]["var_columns"]``) are dropped first, so no column of
        the earlier method is left behind; other columns, even if named ``<key>_*`` (e.g. a user's
        ``qpfs_validated``), are kept.  A key whose ``.uns`` entry was written by something else
        (e.g. ``"pca"``), or whose columns to write exist in ``.var`` but were not written by
        bioqpfs, is refused, never overwritten.
    copy : bool
        Return a modified copy instead of writing into ``adata``.  A backed AnnData needs
        ``copy=False`` (or ``adata.to_memory()`` first).
    random_state : int
        Seed for methods with random choices.
    **method_params
        Passed to the method and recorded in ``.uns[key]["params"]``.

    Duplicated ``var_names`` give a warning (as in scanpy); a panel that contains a gene with a
    duplicated name is refused (its names would be ambiguous): call ``adata.var_names_make_unique()``.

    Returns
    -------
    AnnData or None
        The copy when ``copy=True``, else ``None``.  Writes

        - ``.var[f"{key}_weight"]``: the method's weight (float; NaN outside ``mask_var``);
        - ``.var[f"{key}_rank"]``: 1-based rank (float; NaN for unranked genes);
        - ``.var[f"{key}_selected"]``: in the panel (bool);
        - ``.uns[key]``: ``{"params": ..., "diagnostics": ..., "selected": [genes in rank order],
          "var_columns": [the .var columns written]}``.
    """
    import anndata as ad
    from scanpy import logging as logg

    if not isinstance(adata, ad.AnnData):
        raise TypeError(f"adata must be an AnnData, got {type(adata).__name__}; for arrays use bioqpfs.select(X, y)")
    if adata.isbacked and copy:
        raise ValueError("copy=True is not supported for a backed AnnData; pass copy=False (results are written "
                         "into the in-memory .var/.uns), or load it first with adata = adata.to_memory()")
    named = method
    method, params, preset = resolve_method(method, method_params)
    func = method_function(method)
    accepted = inspect.signature(func).parameters
    if preselected is not None:
        if "preselected" not in accepted:
            raise TypeError(f"method {method!r} does not support preselected genes")
        preselected = [preselected] if isinstance(preselected, str) else list(preselected)
        params["preselected"] = preselected
    if "similarity" in accepted:
        params["similarity"] = similarity
    elif similarity != "mi":
        raise TypeError(f"method {method!r} does not take a similarity")
    X = _expression(adata, layer, use_raw)
    use_raw, source = _use_raw(adata, layer, use_raw)
    mask = _mask(adata, mask_var)
    labels = _labels(adata, groupby)
    key = key_added if key_added is not None else (method if named is not None else "bioqpfs")
    stale = _check_key(adata, key)
    duplicated = _warn_duplicated_names(adata)
    start = logg.info(f"selecting {n_genes} genes with {method!r} by {groupby!r} on {source}")
    genes = adata.var_names.to_numpy()
    Xm = X if mask.all() else X[:, np.flatnonzero(mask)]
    with announce_compilation(logg.info) as jit:
        sel = select(Xm, labels.to_numpy() if not isinstance(labels.dtype, pd.CategoricalDtype) else labels.array,
                     method=method, n_genes=n_genes, random_state=random_state, feature_names=genes[mask], **params)
    if jit["compiled"]:
        logg.info(f"    kernels compiled in {jit['seconds']:.1f} s (cached for later runs)")
    idx = np.flatnonzero(mask)
    _check_panel_names(genes[idx[sel.selected]], duplicated, key)  # before anything is written
    _check_foreign(adata, key, [f"{key}_{c}" for c in sel.extra_columns], stale)
    if copy:
        adata = adata.copy()  # X above is read-only input; results go to this object
    elif adata.is_view:  # as scanpy's tools (scanpy._utils.view_to_actual): the view becomes an actual AnnData
        warnings.warn("adata is a view (e.g. adata[mask]); making it an actual AnnData in place (a copy of the "
                      "subset) so the results can be written into it, as scanpy's tools do. The AnnData it was "
                      "taken from is not changed; use adata = adata[mask].copy() to avoid this warning",
                      UserWarning, stacklevel=2)
        adata._init_as_actual(adata.copy())

    weight = np.full(adata.n_vars, np.nan)
    weight[idx] = sel.weights
    rank = np.full(adata.n_vars, np.nan)
    rank[idx] = sel.rank
    selected = np.zeros(adata.n_vars, dtype=bool)
    selected[idx[sel.selected]] = True
    adata.var.drop(columns=stale, inplace=True)  # the earlier bioqpfs run under this key, incl. its extra columns
    adata.var[f"{key}_weight"] = weight
    adata.var[f"{key}_rank"] = rank
    adata.var[f"{key}_selected"] = selected
    written = [f"{key}_weight", f"{key}_rank", f"{key}_selected"]
    for col, values in sel.extra_columns.items():
        values = np.asarray(values)
        if values.dtype.kind == "b":  # False outside mask_var
            full = np.zeros(adata.n_vars, dtype=bool)
        elif values.dtype.kind in "fiu":  # NaN outside mask_var
            full = np.full(adata.n_vars, np.nan)
        else:  # strings: "" outside mask_var
            full = np.full(adata.n_vars, "", dtype=object)
            values = values.astype(str)
        full[idx] = values
        adata.var[f"{key}_{col}"] = full
        written.append(f"{key}_{col}")
    record = dict(method=method, preset=preset or "paper", groupby=groupby, n_genes=n_genes, layer=layer, use_raw=bool(use_raw),
                  mask_var=mask_var if isinstance(mask_var, str) or mask_var is None else "array",
                  random_state=random_state)
    record.update(params)  # what the user asked for ...
    record.update(sel.params)  # ... and what the method resolved (defaults, estimated alpha)
    adata.uns[key] = to_storable({
        "params": record,
        "diagnostics": sel.diagnostics,
        "selected": [str(g) for g in genes[idx[sel.selected]]],
        "var_columns": written,  # what a re-run under this key may drop: only bioqpfs's own columns
    })
    logg.info("    finished", time=start,
              deep="added\n" + "\n".join(f"    '{c}', .var" for c in written) + f"\n    '{key}', .uns (params, diagnostics, selected)")
    return adata if copy else None
