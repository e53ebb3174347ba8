"""Gene selection on an R object through rpy2: convert, run :func:`bioqpfs.tl.select_genes`, write back.

The result goes to rowData (fData) columns named as the ``.var`` columns and to ``metadata(x)[[key]]``
(``notes(x)`` for an ExpressionSet), written on the R side by ``write_result`` in ``helpers.R``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .._registry import result_key
from ._from_anndata import array_to_r, value_to_r
from ._session import call, r_class, rpy2_modules
from ._to_anndata import column_to_py, r_to_anndata

__all__ = ["select_genes", "result_columns"]


def result_columns(adata, key):
    """The ``.var`` columns a selection stored under ``key`` (weight, rank, selected, then method-specific)."""
    first = [f"{key}_weight", f"{key}_rank", f"{key}_selected"]
    missing = [c for c in first if c not in adata.var.columns]
    if missing:
        raise KeyError(f"no selection stored under key {key!r} (missing .var columns {missing})")
    from .._anndata import key_columns

    return first + [c for c in key_columns(adata, key) if c not in first]   # never a user's <key>_* column


def _labels_to_obs(adata, labels, where, what="labels"):
    """Put one value per sample (the class labels, or the batches with ``what="block"``) into ``adata.obs``
    under the column ``what``, or check that the column(s) named exist; return the column name (for the labels,
    a list of names for several columns, coarse to fine: hierarchical labels, as ``tl.select_genes(groupby=[...])``)."""
    # several names: a list of strings, not one per sample, naming at least one column (else: labels of a wrong length)
    names = [labels] if isinstance(labels, str) else list(labels) if (
        what == "labels" and isinstance(labels, (list, tuple)) and labels and len(labels) != adata.n_obs
        and all(isinstance(c, str) for c in labels) and any(c in adata.obs.columns for c in labels)) else None
    if names is not None:
        for name in names:
            if name not in adata.obs.columns:
                raise KeyError(f"{what}={name!r} is not a column of {where}; available: "
                               f"{', '.join(map(str, adata.obs.columns)) or 'none'}")
            _refuse_missing(adata, adata.obs[name], f"{what} column {name!r}", f"x${name}")
        return labels if isinstance(labels, str) else names
    try:
        from rpy2.rinterface import Sexp

        if isinstance(labels, Sexp):
            ro, default_converter, _, localconverter = rpy2_modules()
            with localconverter(default_converter):
                kind = str(call("column_kind", labels)[0])
            labels = column_to_py(labels) if kind != "other" else None
            if labels is None:
                raise TypeError(f"{what} must be a colData column name or an atomic R vector/factor")
    except ImportError:  # pragma: no cover
        pass
    if isinstance(labels, pd.Series):   # matched to the samples by name, as bioqpfs.select does (a default
        from .._validation import align_series  # RangeIndex is positional)

        if len(labels) == adata.n_obs or not isinstance(labels.index, pd.RangeIndex):
            labels = align_series(labels, pd.Index(adata.obs_names), what)
        values = labels.array if isinstance(labels.dtype, pd.CategoricalDtype) else labels.to_numpy()
    else:
        values = labels
    if len(values) != adata.n_obs:
        raise ValueError(f"{what} has {len(values)} values but the object has {adata.n_obs} samples")
    values = pd.Series(values, index=adata.obs_names)
    _refuse_missing(adata, values, what, what)
    column, k = what, 1   # a colData column of that name (e.g. "block" holding the classes) is left as it is
    while column in adata.obs.columns:
        column, k = f"{what}_{k}", k + 1
    adata.obs[column] = values.to_numpy() if not isinstance(values.dtype, pd.CategoricalDtype) else values.array
    return column


def _refuse_missing(adata, values, what, expression):
    """Refuse missing labels (batches) in the words of the R object: the engine's message and its advice are about
    an AnnData, which the caller of :func:`select_genes` does not hold."""
    from .._validation import describe_indices

    missing = np.flatnonzero(pd.isna(pd.Series(values)).to_numpy())
    if missing.size:
        raise ValueError(f"{what} has {missing.size} missing value(s) (samples "
                         f"{describe_indices(missing, adata.obs_names)}); remove those samples (e.g. "
                         f"x[, !is.na({expression})] in R) or give them a value")


def select_genes(robj, labels, *, method=None, n_genes=50, assay=None, key_added=None, random_state=0,
                 block=None, **params):
    """Select a gene panel on a Bioconductor object with :func:`bioqpfs.tl.select_genes`.

    Parameters
    ----------
    robj : rpy2 R object
        SummarizedExperiment, SingleCellExperiment, ExpressionSet or matrix (genes x samples).
    labels : str or sequence or R vector
        A colData (pData) column name, or one class label per sample; or a list of column names, coarse to
        fine (hierarchical labels, as ``groupby=[...]`` of :func:`bioqpfs.tl.select_genes`).
    method : str, optional
        ``None`` (default): the default panel recipe :data:`bioqpfs.DEFAULT_PANEL`, stored under the key
        ``"bioqpfs"`` with ``params$preset = "default"``; a method name (``"qpfs"`` ...) runs that method
        with its published settings, stored under its name.  As in :func:`bioqpfs.tl.select_genes`.
    n_genes : int or "auto", default 50
        Panel size, or ``"auto"``: the one-SE size of a cross-validated error curve of the method, as in
        :func:`bioqpfs.tl.select_genes` (the choice and the curve go to the record's ``n_genes_auto``).
    assay : str, optional
        The assay to select from (default ``logcounts`` for a SingleCellExperiment, as the R package's
        ``assay.type``; the first for a SummarizedExperiment; ``exprs`` for an ExpressionSet).
    key_added, random_state, **params
        As in :func:`bioqpfs.tl.select_genes`: the method's parameters, and its ``backend`` (``"auto"`` /
        ``"cpu"`` / ``"gpu"``: where the counts are made), ``n_jobs``, ``progress``.
    block : str or sequence or R vector, optional
        The batch (donor, study, plate) of every sample, as a colData (pData) column name or one value per
        sample: batch-aware statistics, :func:`bioqpfs.tl.select_genes`'s ``batch_key`` (scran's and the R
        package's name ``block``).  A vector is stored in the column ``"block"`` of the copy the engine sees.

    Returns
    -------
    rpy2 R object
        A modified copy of ``robj`` (R objects are values) with rowData (fData) columns
        ``<key>_weight``, ``<key>_rank``, ``<key>_selected`` (+ method-specific ``<key>_*``) and
        ``metadata(x)[[key]]`` (``notes(x)[[key]]`` for an ExpressionSet) = list(params,
        diagnostics, selected), plus ``n_genes_auto`` (``n_genes``, ``rule``, ``grid``, ``curve``: a
        named list of columns) with ``n_genes="auto"``.  A matrix gives an S4Vectors DataFrame of those columns, with the
        record in its ``metadata()``.  Genes without row names are named by their row number, ``"1"``, ``"2"``, ...
        (in the DataFrame's row names and the record's ``selected``), as the R package's ``selectGenes()`` names them.
    """
    from ..tl import select_genes as tl_select_genes

    cls = r_class(robj)
    if assay is None and cls == "SingleCellExperiment":   # as the R package: scran's log-normalised assay
        assay = "logcounts"
    adata = r_to_anndata(robj, assay=assay, only_x=True)
    ro, default_converter, _, localconverter = rpy2_modules()
    with localconverter(default_converter):
        unnamed = bool(ro.r("function(x) is.null(rownames(x))")(robj)[0])
    if unnamed:   # genes named by their R row number, 1, 2, ... (as the R package does), not AnnData's 0, 1, ...
        adata.var_names = [str(i) for i in range(1, adata.n_vars + 1)]
    where = "the pData of the ExpressionSet" if cls == "ExpressionSet" else (
        "colData(x)" if cls != "matrix" else "a matrix (pass a vector of labels)")
    groupby = _labels_to_obs(adata, labels, where)
    if block is not None:
        if "batch_key" in params:
            raise TypeError("pass the batches once: block= (the R name) or batch_key=, not both")
        params["batch_key"] = _labels_to_obs(adata, block, where, what="block")
    key = result_key(method, key_added)
    with localconverter(default_converter):
        existing = call("existing_result", robj, ro.StrVector([cls]), ro.StrVector([key]))
        columns = [str(c) for c in existing.rx2("columns")]
        kind = str(existing.rx2("kind")[0])
        record = None if kind == "none" else "foreign" if kind == "foreign" else [
            str(c) for c in existing.rx2("var_columns")]
    dropped = take_existing(adata, key, columns, record)
    try:
        tl_select_genes(adata, groupby, method=method, n_genes=n_genes, key_added=key, random_state=random_state,
                        **params)
    except (ValueError, TypeError, KeyError) as e:   # the R object's slots, not adata's
        from ._reticulate import in_r_words

        text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        if in_r_words(text, arguments=False) == text:
            raise
        raise type(e)(in_r_words(text, arguments=False)) from e
    if cls != "matrix":
        record_assay(adata, key, adata.uns["bioqpfs_r"]["assay"])
    # ranks go back as R integers (NA for genes the method did not rank), as the reticulate route gives them
    cols = {c: array_to_r(pd.array(adata.var[c].to_numpy(), dtype="Int64") if c == f"{key}_rank" else adata.var[c])
            for c in result_columns(adata, key)}
    record = value_to_r(adata.uns[key])
    with localconverter(default_converter):
        return call("write_result", robj, ro.StrVector([cls]), ro.ListVector(cols), ro.StrVector([key]), record,
                    ro.StrVector(dropped))


def take_existing(adata, key, columns, record):
    """Give ``adata`` (the engine's copy of an R object) the object's result columns and its record under ``key``,
    so that :func:`bioqpfs.tl.select_genes`'s checks run as on an AnnData: a user's rowData column or metadata
    entry that the result would overwrite is refused, and an earlier run's columns under ``key`` are dropped.

    ``columns``: the rowData (fData) column names; ``record``: ``None`` (no metadata entry under ``key``),
    ``"foreign"`` (an entry that is not a bioqpfs result), or the earlier result's ``var_columns`` (a list; an
    empty one for a result of a version that did not record them).  Returns the columns the R side drops.
    """
    from .._anndata import key_columns

    for c in [] if columns is None else ([columns] if isinstance(columns, str) else list(columns)):
        if str(c) not in adata.var.columns:
            adata.var[str(c)] = np.nan   # a placeholder: only its name is checked
    if record is not None:
        if isinstance(record, str) and record == "foreign":
            adata.uns[key] = {"foreign": True}
        else:
            owned = [record] if isinstance(record, str) else list(record)
            adata.uns[key] = {"params": {"method": ""}, "diagnostics": {}, "selected": [],
                              **({"var_columns": [str(c) for c in owned]} if owned else {})}
    return key_columns(adata, key)


def record_assay(adata, key, assay):
    """Record the assay the selection read (R's ``assay.type``) in ``.uns[key]["params"]["assay"]``."""
    if assay is not None:
        adata.uns[key]["params"]["assay"] = str(assay)
