from __future__ import annotations

import inspect

import numpy as np
import pandas as pd

from .._io import to_storable
from .._registry import method_function, select
from .._validation import check_labels, describe_indices, one_labels_warning


def _in_memory(X):
    """Backed (on-disk) matrices are read once: the selectors need random access to all of it."""
    if hasattr(X, "to_memory"):
        return X.to_memory()
    if type(X).__module__.startswith("h5py"):
        return X[()]
    return X


def _expression(adata, layer, use_raw):
    """The matrix to select from, aligned with ``adata.var_names``."""
    if layer is not None and use_raw:
        raise ValueError("pass either layer= or use_raw=True, not both")
    if layer is not None:
        if layer not in adata.layers:
            raise KeyError(f"layer {layer!r} not found; available layers: {list(adata.layers.keys()) or 'none'}")
        return _in_memory(adata.layers[layer])
    if use_raw:
        if adata.raw is None:
            raise ValueError("use_raw=True but adata.raw is not set")
        missing = adata.var_names.difference(adata.raw.var_names)
        if len(missing):
            raise ValueError(f"{len(missing)} gene(s) of adata.var are not in adata.raw (e.g. {list(missing[:3])})")
        return _in_memory(adata.raw[:, adata.var_names].X)
    return _in_memory(adata.X)


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


def _key_columns(adata, key):
    """``.var`` columns named ``<key>_*``, except those of a longer bioqpfs key (``<key>_x`` for key ``key_x``)."""
    longer = [k for k, v in adata.uns.items() if isinstance(k, str) and k != key and k.startswith(f"{key}_")
              and _is_record(v)]
    return [c for c in adata.var.columns if isinstance(c, str) and c.startswith(f"{key}_")
            and not any(c.startswith(f"{k}_") for k in longer)]


def _check_key(adata, key):
    """Validate ``key_added``; return the ``.var`` columns of an earlier bioqpfs run under it (to drop).

    Refuses to overwrite content bioqpfs did not write: an ``.uns[key]`` entry that is not a bioqpfs
    selection (e.g. scanpy's ``"pca"``), or ``<key>_*`` columns of ``.var`` without one.
    """
    if not isinstance(key, str) or not key or "/" in key:
        raise ValueError(f"key_added must be a non-empty string without '/', got {key!r}")
    columns = _key_columns(adata, key)
    if key in adata.uns and not _is_record(adata.uns[key]):
        raise ValueError(f"adata.uns[{key!r}] exists and was not written by bioqpfs; choose another key_added "
                         "so that it is not overwritten")
    if key not in adata.uns and columns:
        raise ValueError(f"adata.var has column(s) {', '.join(columns[:5])} that were not written by bioqpfs under "
                         f"key {key!r}; choose another key_added or remove those columns")
    return columns


@one_labels_warning()   # labels checked here (named by column) and again by the selector: warn once
def select_genes(adata, groupby, *, method="qpfs", n_genes=50, similarity="mi", layer=None, use_raw=None,
                 mask_var=None, preselected=None, key_added=None, copy=False, random_state=0, **method_params):
    """Select a gene panel with a global method and store it in ``adata``.

    Parameters
    ----------
    adata : AnnData
        Cells/samples x genes; typically normalised and log-transformed.
    groupby : str
        Column of ``adata.obs`` with the classes the panel must separate.
    method : str
        A method name from :func:`bioqpfs.methods` (``"qpfs"`` ...).
    n_genes : int
        Panel size: the top ``n_genes`` ranked genes get ``<key>_selected = True``.
    similarity : {"mi", "correlation"}
        Redundancy measure, for the methods that take one.
    layer : str, optional
        Use ``adata.layers[layer]`` instead of ``adata.X``.
    use_raw : bool, optional
        Use ``adata.raw`` (restricted to ``adata.var_names``).  Default: no.
    mask_var : str or bool array, optional
        Only consider these genes (e.g. ``"highly_variable"``); genes outside get NaN weight and rank.
    preselected : sequence of str, optional
        Genes that must be in the panel, ranked first in the given order; the method optimises the
        rest given them (only for methods that support it, e.g. ``"qpfs"``).
    key_added : str, optional
        Prefix of the written keys; default the method name.  A non-empty string without ``"/"``.
        Re-running under a key that holds a bioqpfs selection replaces it: all of its ``<key>_*``
        columns of ``.var`` are dropped first, so no column of the earlier method is left behind.
        A key whose ``.uns`` entry was written by something else (e.g. ``"pca"``), or with
        ``<key>_*`` columns in ``.var`` but no bioqpfs ``.uns[key]`` entry, is refused, never overwritten.
    copy : bool
        Return a modified copy instead of writing into ``adata``.  A backed AnnData needs
        ``copy=False`` (or ``adata.to_memory()`` first).
    random_state : int
        Seed for methods with random choices.
    **method_params
        Passed to the method and recorded in ``.uns[key]["params"]``.

    Returns
    -------
    AnnData or None
        The copy when ``copy=True``, else ``None``.  Writes

        - ``.var[f"{key}_weight"]``: the method's weight (float; NaN outside ``mask_var``);
        - ``.var[f"{key}_rank"]``: 1-based rank (float; NaN for unranked genes);
        - ``.var[f"{key}_selected"]``: in the panel (bool);
        - ``.uns[key]``: ``{"params": ..., "diagnostics": ..., "selected": [genes in rank order]}``.
    """
    import anndata as ad
    from scanpy import logging as logg

    if not isinstance(adata, ad.AnnData):
        raise TypeError(f"adata must be an AnnData, got {type(adata).__name__}; for arrays use bioqpfs.select(X, y)")
    if adata.isbacked and copy:
        raise ValueError("copy=True is not supported for a backed AnnData; pass copy=False (results are written "
                         "into the in-memory .var/.uns), or load it first with adata = adata.to_memory()")
    if adata.is_view and not copy:
        raise ValueError("adata is a view; results cannot be written into it. Use adata = adata.copy() "
                         "first, or pass copy=True")
    func = method_function(method)
    accepted = inspect.signature(func).parameters
    params = dict(method_params)
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
    mask = _mask(adata, mask_var)
    labels = _labels(adata, groupby)
    key = key_added if key_added is not None else method
    stale = _check_key(adata, key)
    start = logg.info(f"selecting {n_genes} genes with {method!r} by {groupby!r}")
    adata = adata.copy() if copy else adata  # X above is read-only input; results go to this object
    genes = adata.var_names.to_numpy()
    Xm = X if mask.all() else X[:, np.flatnonzero(mask)]
    sel = select(Xm, labels.to_numpy() if not isinstance(labels.dtype, pd.CategoricalDtype) else labels.array,
                 method=method, n_genes=n_genes, random_state=random_state, feature_names=genes[mask], **params)

    idx = np.flatnonzero(mask)
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
    record = dict(method=method, groupby=groupby, n_genes=n_genes, layer=layer, use_raw=bool(use_raw),
                  mask_var=mask_var if isinstance(mask_var, str) or mask_var is None else "array",
                  random_state=random_state)
    record.update(params)  # what the user asked for ...
    record.update(sel.params)  # ... and what the method resolved (defaults, estimated alpha)
    adata.uns[key] = to_storable({
        "params": record,
        "diagnostics": sel.diagnostics,
        "selected": [str(g) for g in genes[idx[sel.selected]]],
    })
    logg.info("    finished", time=start,
              deep="added\n" + "\n".join(f"    '{c}', .var" for c in written) + f"\n    '{key}', .uns (params, diagnostics, selected)")
    return adata if copy else None
