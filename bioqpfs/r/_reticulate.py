"""Entry points of the R package (``selectGenes()`` through reticulate): plain values in, plain values out.

The R side sends the expression matrix as raw little-endian float64 bytes plus its dimensions (whole,
or block by block with :func:`_reticulate_receive`), and :func:`_reticulate_select` answers with plain
Python lists and dicts.  No NumPy array ever crosses reticulate, so the route works with NumPy 2 even
though Debian's reticulate 1.28 was compiled against the NumPy 1 C API.  These names stay private:
only ``R/selectGenes.R`` calls them (as ``engine$`_reticulate_select`(...)`` on ``bioqpfs.r``).
"""
from __future__ import annotations

import inspect
import warnings

import numpy as np
import pandas as pd

from .._registry import resolve_method, result_key
from ._select import record_assay, result_columns, take_existing


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


#: Python words of the engine's messages -> the R object's slots (both routes); the gene names are the row names
_R_SLOTS = (("adata.uns[", "metadata(x)["), ("adata.var has", "rowData(x) has"),
            ("adata.var_names_make_unique()", "rownames(x) <- make.unique(rownames(x))"),
            ("adata.var_names", "rownames(x)"), (" and bioqpfs.get.selection_df could", " could"),
            (".uns[", "metadata(x)["))
#: ... and selectGenes()'s arguments (the R package only: bioqpfs.r.select_genes takes Python's)
_R_ARGUMENTS = (("key_added", "keyAdded"), ("n_genes=", "nGenes = "), ("random_state=", "randomState = "),
                ("batch_key", "block"))


def in_r_words(text, arguments=True):
    """An engine message in the words of R's ``selectGenes()`` (``arguments=False``: only the object's slots, for
    :func:`bioqpfs.r.select_genes`, whose arguments are Python's)."""
    for python, r in _R_SLOTS + (_R_ARGUMENTS if arguments else ()):
        text = text.replace(python, r)
    return text


def _coerce_params(method, params):
    """R numbers arrive as floats: turn whole floats into ints where the method's default is an int."""
    from .._registry import method_function

    sig = inspect.signature(method_function(method)).parameters
    out = {}
    for k, v in params.items():
        default = sig[k].default if k in sig else None
        if isinstance(v, float) and v.is_integer() and isinstance(default, int) and not isinstance(default, bool):
            v = int(v)
        out[k] = v
    return out


# The warnings the last failed selection gave before its error, in R's words: _reticulate_discard hands them to the
# R side, which raises them as R warnings before the error (they were lost with the exception).
_FAILED_WARNINGS: list = []

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
    """Forget every partly received matrix (the R side calls this when a transfer or selection failed); return the
    warnings the failed selection gave before its error (a list of messages in R's words, then forgotten)."""
    _INCOMING.clear()
    messages = list(_FAILED_WARNINGS)
    _FAILED_WARNINGS.clear()
    return messages


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
                       random_state=0, params=None, groupby="labels", assay=None, block=None, block_key=None,
                       label_levels=None, numeric_labels=None, existing_columns=None, existing_results=None):
    """Entry point of the R package: select genes on a matrix sent from R without NumPy crossing reticulate.

    ``data`` is either raw float64 bytes of the whole matrix (R column-major genes x samples), or the
    token of a matrix sent block by block with :func:`_reticulate_receive` (sparse or DelayedMatrix
    assays).  R's ``writeBin(as.double(m), raw())`` writes column after column of the genes x samples
    matrix, i.e. sample after sample: the buffer read as C-order (n_samples, n_features) *is* the
    samples x genes matrix AnnData wants.  ``groupby`` is the colData column the labels came from (or
    ``"labels"`` for a vector) and ``assay`` the assay used; both are recorded in the parameters.  Hierarchical
    labels (R's ``labels = c("lineage", "cell_type")`` or a data frame of levels): ``groupby`` is the list of
    level names, coarse to fine, and ``labels`` one list of labels per level.  ``label_levels``: the levels of
    an R factor, in its order (one list per level of hierarchical labels, ``None`` for a level that was not a
    factor): the class order, as a pandas Categorical's categories give it in Python.  ``numeric_labels``: the
    labels as R numbers, when they were (checked as Python checks labels: continuous values are refused).
    ``existing_columns``, ``existing_results``: the object's rowData columns and what its metadata holds (name ->
    ``"foreign"``, or a bioqpfs result's ``var_columns``; :func:`bioqpfs.r._select.take_existing`), so that a user's column or entry is not
    overwritten and an earlier run's columns are dropped (``dropped`` in the answer).  Python warnings come
    back as ``warnings`` (messages), which R raises as R warnings; when the selection fails, the warnings it gave
    before the error are kept for :func:`_reticulate_discard`, which the R side calls before it stops.
    ``method=None`` (R's ``method = NULL``) is the default recipe and ``n_genes="auto"`` the one-SE size of a
    cross-validated error curve, both as in :func:`bioqpfs.tl.select_genes`.  ``block`` (R's ``block =``, scran's
    name): the batch of every sample, stored as ``obs[block_key]`` (the colData column it came from, else
    ``"block"``) and used as ``batch_key`` (batch-aware statistics).

    Returns plain lists/dicts: ``key`` (where the result is stored: ``key_added``, else the method, else
    ``"bioqpfs"``), ``columns`` (name -> list), ``kinds`` (name -> "double"/"integer"/"logical"/"character";
    ranks are "integer", NaN for unranked genes), ``record`` (params, diagnostics, selected, and
    ``n_genes_auto`` with ``n_genes="auto"``) and
    ``transfer`` (format "dense"/"csr" and number of blocks received).
    """
    import anndata as ad

    from ..tl import select_genes as tl_select_genes

    _FAILED_WARNINGS.clear()
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
    if isinstance(groupby, (list, tuple)):   # hierarchical labels: one list of labels per level, coarse to fine
        groupby = [str(g) for g in groupby]
        if len(labels) != len(groupby):
            raise ValueError(f"received {len(labels)} label level(s) for the {len(groupby)} columns {groupby}")
        levels = [[lab] if isinstance(lab, (str, int, float)) else list(lab) for lab in labels]
    else:
        groupby = str(groupby) if groupby else "labels"
        levels = [[labels] if isinstance(labels, (str, int, float)) else list(labels)]
    names = groupby if isinstance(groupby, list) else [groupby]
    if numeric_labels is not None:   # R numbers: Python's check (continuous values are refused: bin them first)
        from .._validation import check_labels

        values = [numeric_labels] if isinstance(numeric_labels, (int, float)) else list(numeric_labels)
        try:
            check_labels(np.asarray(values, dtype=float), n_samples,
                         name="labels" if names[-1] == "labels" else f"labels ({names[-1]})")
        except ValueError as e:   # in R's words
            raise ValueError(str(e).replace("pandas.cut", "R's cut()").replace("a categorical column", "a factor")
                             ) from None
    orders = [None] * len(names) if label_levels is None else (
        [label_levels] if len(names) == 1 else list(label_levels))

    def categorical(values, order):   # an R factor keeps its level order (it is the class order in Python too)
        values = [str(v) for v in values]
        if order is None:
            return pd.Categorical(values)
        order = [order] if isinstance(order, str) else [str(v) for v in order]
        return pd.Categorical(values, categories=list(dict.fromkeys(order)))

    with warnings.catch_warnings():   # duplicated row names: tl.select_genes warns in R's words (below)
        warnings.filterwarnings("ignore", "Variable names are not unique", UserWarning)
        adata = ad.AnnData(X=X, var=pd.DataFrame(index=pd.Index([str(g) for g in genes])),
                           obs=pd.DataFrame({g: categorical(lab, o) for g, lab, o in zip(names, levels, orders)},
                                            index=pd.Index([str(i) for i in range(n_samples)])))
    batch_key = None
    if block is not None:
        block = [block] if isinstance(block, (str, int, float)) else list(block)
        if len(block) != n_samples:
            raise ValueError(f"block has {len(block)} value(s) but there are {n_samples} samples")
        block = pd.Categorical([str(v) for v in block])
        batch_key, k = str(block_key) if block_key else "block", 1
        while batch_key in names:   # a labels column of that name: the same values are the same column
            if list(adata.obs[batch_key].astype(str)) == list(block.astype(str)):
                raise ValueError(f"block and labels are the same column {batch_key!r}: the batches must differ "
                                 "from the classes")
            batch_key, k = f"{block_key or 'block'}_{k}", k + 1
        adata.obs[batch_key] = block
    key = result_key(method, key_added)
    existing = existing_results.get(key) if isinstance(existing_results, dict) else None
    dropped = take_existing(adata, key, existing_columns, existing)
    params = _coerce_params(resolve_method(method, {})[0], dict(params or {}))
    if isinstance(n_genes, float) and n_genes.is_integer():   # R numbers arrive as floats; "auto" stays a str
        n_genes = int(n_genes)
    with warnings.catch_warnings(record=True) as caught:   # raised on the R side, as R warnings
        warnings.simplefilter("default")
        try:
            tl_select_genes(adata, groupby, method=method, n_genes=n_genes, key_added=key, batch_key=batch_key,
                            random_state=None if random_state is None else int(random_state), **params)
        except Exception as e:   # the warnings given before the error still reach R (_reticulate_discard)
            _FAILED_WARNINGS[:] = list(dict.fromkeys(in_r_words(str(w.message)) for w in caught))
            if not isinstance(e, (ValueError, TypeError, KeyError)):
                raise
            raise type(e)(in_r_words(str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e))) from e
    messages = list(dict.fromkeys(in_r_words(str(w.message)) for w in caught))
    record_assay(adata, key, assay)
    columns, kinds = {}, {}
    for c in result_columns(adata, key):
        a = adata.var[c].to_numpy()
        kinds[c] = "integer" if c == f"{key}_rank" else "logical" if a.dtype.kind == "b" else (
            "double" if a.dtype.kind in "iuf" else "character")
        columns[c] = [bool(x) for x in a] if kinds[c] == "logical" else (
            [float(x) for x in a] if kinds[c] in ("double", "integer") else ["" if x is None else str(x) for x in a])
    # the record keeps "var_columns": a re-run under this key drops those columns (and only those) first
    return {"key": key, "columns": columns, "kinds": kinds, "record": _plain(dict(adata.uns[key])),
            "transfer": transfer, "dropped": list(dropped), "warnings": messages}


