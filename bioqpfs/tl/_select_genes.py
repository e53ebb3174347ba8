from __future__ import annotations

import inspect
import warnings
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .. import _device, _progress, _threads
from .._anndata import (
    check_annotations,
    check_mask,
    check_use_raw,
    counts_warning,
    is_record,
    key_columns,
    matrix_name,
    obs_batch,
    obs_labels,
    obs_rep_for,
    source_params,
)
from .._docs import BACKEND_DOC, doc_params
from .._io import to_storable
from .._jit import announce_compilation
from .._kernels.counting_dask import is_dask_array, pass_memo
from .._registry import (
    DASK_METHODS,
    batch_methods,
    check_levels_supported,
    extra_columns,
    method_function,
    resolve_method,
    result_key,
    select,
)
from .._validation import (
    InvalidParameterError,
    check_matrix,
    check_positive_int,
    describe_indices,
    gene_list,
    one_labels_warning,
    one_names_warning,
    preselected_in_mask,
    user_stacklevel,
    warn_repeated_names,
)
from ..selectors._common import check_levels

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Literal

    from anndata import AnnData

    from .._typing import MaskLike, SeedLike


def _check_key(adata, key, method):
    """Validate ``key_added``; return the ``.var`` columns of an earlier bioqpfs run under it (to drop).

    Refuses to overwrite content bioqpfs did not write: an ``.uns[key]`` entry that is not a bioqpfs
    selection (e.g. scanpy's ``"pca"``), or a ``<key>_weight``/``_rank``/``_selected`` column of
    ``.var``, or one of ``method``'s extra columns (:func:`bioqpfs._registry.extra_columns`, e.g.
    ``<key>_class``), that no bioqpfs run under ``key`` wrote -- before any work.
    """
    # '/' and '\\' separate groups and '.' / '..' name them in h5py and zarr: written, such a key replaced or
    # restructured the file's .uns (key_added='.' wrote uns/., the uns group itself, and lost every other entry)
    if not isinstance(key, str) or not key.strip() or key in (".", "..") or any(c in key for c in "/\\"):
        raise ValueError(f"key_added must be a non-empty string without '/' or '\\', and not '.' or '..' (h5ad "
                         f"and zarr read those as paths), got {key!r}")
    if key in adata.uns and not is_record(adata.uns[key]):
        raise ValueError(f"adata.uns[{key!r}] exists and was not written by bioqpfs; choose another key_added "
                         "so that it is not overwritten")
    columns = key_columns(adata, key)
    _check_foreign(adata, key, [f"{key}_{c}" for c in ("weight", "rank", "selected", *extra_columns(method))], columns)
    return columns


def _check_foreign(adata, key, to_write, owned):
    foreign = [c for c in to_write if c in adata.var.columns and c not in owned]
    if foreign:
        raise ValueError(f"adata.var has column(s) {', '.join(foreign[:5])} that were not written by bioqpfs under "
                         f"key {key!r}; choose another key_added or rename those columns")


def _warn_duplicated_names(adata):
    """Warn (as scanpy does) when ``var_names`` are not unique; return the duplicated names."""
    dup = warn_repeated_names(adata.var_names, "adata.var_names", "adata.var_names_make_unique()", message=lambda n, shown: (
        f"adata.var_names are not unique ({n} duplicated name(s): {shown}); a panel containing one of them is "
        "refused, because the selected names could not tell the genes apart. Call adata.var_names_make_unique() "
        "first"))
    return set(dup)


def _check_panel_names(panel, duplicated, key):
    """Refuse a panel whose names are ambiguous (a selected gene's name is duplicated in ``var_names``)."""
    ambiguous = list(dict.fromkeys(g for g in panel if g in duplicated))
    if ambiguous:
        raise ValueError(f"the panel contains gene(s) whose name is not unique in adata.var_names "
                         f"({describe_indices(np.arange(len(ambiguous)), ambiguous)}), so .uns[{key!r}]['selected'] "
                         "and bioqpfs.get.selection_df could not tell them apart; call adata.var_names_make_unique() "
                         "and run again")


#: arguments of the selectors that select_genes takes from the AnnData itself, with what to pass instead
FACE_PARAMS = {"X": "pass layer= or use_raw= to choose the matrix",
               "y": "pass groupby=, a column of adata.obs",
               "batch": "pass batch_key=, a column of adata.obs (recorded in .uns[key]['params'], and used by "
                        "n_genes='auto' too)",
               "feature_names": "the genes are named by adata.var_names"}


def _check_face_params(method_params):
    """Refuse, before any work, a method parameter that select_genes sets from the AnnData (:data:`FACE_PARAMS`):
    ``batch=`` ran batch-aware while ``.uns`` recorded ``batch_key=None`` (the batches of every cell stored as
    a parameter instead), and with ``batch_key`` or the others it failed after the matrix was read."""
    given = [name for name in FACE_PARAMS if name in method_params]
    if given:
        raise TypeError("; ".join(f"{name}= is not a parameter of select_genes, which takes it from the AnnData: "
                                  f"{FACE_PARAMS[name]}" for name in given))


#: exact runs predicted to take longer than this get a logged hint towards QPFS+Nystrom
LONG_RUN_SECONDS = 60.0


def _hint_long_exact_run(method, params, shape, logg):
    """Log a hint when exact QPFS (or the default class-covering QPFS, which builds the same MI matrix) on
    this shape is predicted to take over :data:`LONG_RUN_SECONDS`."""
    if method not in ("qpfs", "qpfs_cover") or params.get("nystrom_rate") is not None:
        return
    from ..selectors.qpfs import predicted_seconds

    secs = predicted_seconds(*shape)
    if secs > LONG_RUN_SECONDS:
        faster = ("nystrom_rate=0.05 computes 5% of its rows (typically several times faster, a close but not "
                  "identical panel), or " if method == "qpfs" else "")
        logg.info(f"    exact {method} on {shape[0]} x {shape[1]} is predicted to take ~{secs / 60:.0f} min here (the "
                  f"{shape[1]} x {shape[1]} MI matrix); {faster}restrict the genes with mask_var="
                  "'highly_variable' (README 'Speed, memory and threads')")


#: panel sizes ``n_genes="auto"`` cross-validates (capped by the number of candidate genes)
AUTO_N_GENES = (5, 10, 15, 20, 30, 40, 50, 75, 100)
#: folds of ``n_genes="auto"``'s cross-validation (fewer when a class has fewer samples)
AUTO_FOLDS = 5


def _check_n_genes(n_genes):
    """``"auto"`` or a positive int, checked before any work; a clear error for anything else."""
    if isinstance(n_genes, str) and n_genes == "auto":
        return n_genes
    try:
        return check_positive_int(n_genes, "n_genes")
    except InvalidParameterError:
        hint = " (lower case)" if isinstance(n_genes, str) and n_genes.strip().lower() == "auto" else ""
        raise InvalidParameterError(f"n_genes must be a positive integer or 'auto'{hint}, got {n_genes!r}") from None


def _auto_n_genes(adata, groupby, labels, method, params, *, n_candidates, layer, use_raw, mask_var, random_state,
                  progress, n_jobs, chunk_size, logg, batch_key=None, backend=None):
    """``n_genes="auto"``: the one-SE size of a cross-validated error curve of ``method`` on ``adata``.

    Returns ``(n_genes, record)`` with ``record`` the h5ad-storable ``.uns[key]["n_genes_auto"]``.
    """
    from .. import evaluate

    n_forced = len(params.get("preselected") or ())
    sizes = sorted({min(max(k, n_forced), n_candidates) for k in AUTO_N_GENES})
    if len(sizes) < 2:
        raise ValueError(f"n_genes='auto' compares panel sizes {list(AUTO_N_GENES)} (capped by the {n_candidates} "
                         f"candidate genes{f' and the {n_forced} preselected ones' if n_forced else ''}), which "
                         f"leaves the single size {sizes[0]}: nothing to choose; pass an integer n_genes")
    finest = labels.iloc[:, -1] if isinstance(labels, pd.DataFrame) else labels  # folds stratify by the finest level
    smallest = int(pd.Series(np.asarray(finest, dtype=object)).value_counts().min())
    cv = AUTO_FOLDS if smallest >= AUTO_FOLDS else None   # None: error_curve's choice from the class sizes
    if random_state is None and smallest >= 2:   # k-fold: its folds are shuffled
        raise ValueError("n_genes='auto' chooses the panel size by k-fold cross-validation, whose shuffled folds need "
                         "a seed: pass random_state= an integer (or an integer n_genes)")
    curve = evaluate.error_curve(adata, groupby, [(method, dict(params))], n_genes=sizes, cv=cv,
                                 random_state=random_state, layer=layer, use_raw=use_raw, mask_var=mask_var,
                                 progress=progress, n_jobs=n_jobs, chunk_size=chunk_size, batch=batch_key,
                                 backend=backend)
    chosen = evaluate.suggest_n_genes(curve)
    row = curve[curve["n_genes"] == chosen].iloc[0]
    logg.info(f"    n_genes='auto': CV error (cv={curve['cv'].iloc[0]}) over sizes {sizes} -> {chosen} genes "
              f"(one-SE rule: error {row['mean_error']:.3f}, best {curve['mean_error'].min():.3f} "
              f"at {int(curve.loc[curve['mean_error'].idxmin(), 'n_genes'])})")
    record = {"n_genes": chosen, "rule": "one standard error (bioqpfs.evaluate.suggest_n_genes)",
              "grid": sizes, "curve": {c: curve[c].to_numpy() for c in curve.columns}}
    return chosen, record


@doc_params(backend=BACKEND_DOC)
@one_labels_warning()   # labels checked here (named by column) and again by the selector: warn once
@one_names_warning()    # var_names warned about here: not again as the selector's feature_names
def select_genes(adata: AnnData, groupby: str | Sequence[str], *, method: str | None = None, n_genes: int | Literal["auto"] = 50,
                 similarity: Literal["mi", "correlation"] = "mi", layer: str | None = None,
                 use_raw: bool | None = None, mask_var: MaskLike = None, preselected: Sequence[str] | None = None,
                 batch_key: str | None = None, key_added: str | None = None, copy: bool = False, random_state: SeedLike = 0,
                 progress: bool | None = None, n_jobs: int | None = None, chunk_size: int | None = None,
                 backend: str | None = None, **method_params) -> AnnData | None:
    """Select a gene panel with a global method and store it in ``adata``.

    Parameters
    ----------
    adata : AnnData
        Cells/samples x genes; typically normalised and log-transformed (a matrix read that holds only
        non-negative integers, raw counts, gets a scanpy warning naming where non-integer values are, e.g.
        ``use_raw=False`` when ``.raw`` holds the counts).  Array support of the matrix read:
        numpy, scipy.sparse, and a Dask array chunked by cells (e.g. X lazily loaded with
        ``anndata.experimental.read_elem_lazy``; MI methods with ``discretization`` "mean_sd", "quantile",
        "zero_quantile" or "auto", the default recipe included), which is
        counted chunk by chunk and never loaded whole.  A backed AnnData (``anndata.read_h5ad(path,
        backed="r")``, dense or CSR X) is read the same way, in sample chunks of ``chunk_size`` rows straight
        from the file, when dask is installed and the method has a Dask path (the
        QPFS, SPEC_CMI and greedy MI methods, LDFS and random, with MI or |Pearson| similarity and any
        discretisation but "mdl"; README "Large data (Dask)"); otherwise its X is read whole, after
        a check that it fits in memory (the error names the fix; the reason is logged).  A file deleted or
        changed during such a run is an error naming the chunk (rows) that could not be read.  An AnnData of
        ``anndata.experimental.read_lazy`` is refused until its ``.obs``/``.var`` are loaded
        (``adata.obs = adata.obs.to_memory()``, the same for ``.var``; X stays lazy).  A view (``adata[mask]``) is
        turned into an actual AnnData in place, with a warning, as scanpy's tools do (the AnnData it
        was taken from is not changed); with ``copy=True`` the view is left as it is.
    groupby : str or list of str
        Column of ``adata.obs`` with the classes the panel must separate.  A list of columns, coarse to fine
        (e.g. ``["lineage", "cell_type"]``), gives hierarchical labels: the class relevance becomes
        ``F_i = sum_l v_l I(X_i; C_l)``, with ``groupby_weights=[v_1, ...]`` through ``**method_params``
        (default 1/L each; see :func:`bioqpfs.qpfs`), so genes that separate the coarse groups count beyond
        their share of the fine classes.  The levels must be nested (each fine class inside one coarse class).
        Only the methods of :func:`bioqpfs.hierarchy_methods` take it (qpfs, eqpfs, maxrel, mrmr_mid,
        mrmr_miq; the default recipe does not: name a method); everything else -- class weights,
        ``n_genes="auto"``'s folds and classifier -- uses the finest level.  ``.uns[key]["params"]`` records
        ``groupby`` (the list), ``groupby_levels`` and ``groupby_weights`` (normalised).  README
        "Hierarchical labels".
    method : str, optional
        ``None`` (default): the benchmarked default panel recipe, :data:`bioqpfs.DEFAULT_PANEL` (README
        "Panel quality"); its parameters can be overridden through ``**method_params``.  A method name
        from :func:`bioqpfs.methods` (``"qpfs"`` ...) runs that method with its published settings.
    n_genes : int or "auto", default 50
        Panel size: the top ``n_genes`` ranked genes get ``<key>_selected = True``.  ``"auto"``:
        choose it by cross-validation first -- :func:`bioqpfs.evaluate.error_curve` of this method
        with these parameters on this AnnData (the selection refit inside every training fold) over
        the sizes :data:`AUTO_N_GENES` = 5, 10, 15, 20, 30, 40, 50, 75, 100 (capped by the number of
        candidate genes, and raised to the number of ``preselected`` genes), 5-fold stratified
        (:data:`AUTO_FOLDS`; error_curve's automatic choice when a class has fewer than 5 samples),
        linear SVM error, seeded by ``random_state``; then the smallest size within one standard
        error of the best (:func:`bioqpfs.evaluate.suggest_n_genes`).  Cost: one selection per fold
        (of the largest size) plus one classifier fit per fold and size, then the final selection
        -- several times a fixed ``n_genes`` (SRBCT, this machine: 3x for ``mrmr_mid``, 8x for
        ``qpfs``; README "Choosing the panel size").  When several sizes reach the best error with no
        spread (e.g. 0 in every fold), the rule returns the smallest of them.  The choice is logged, and
        ``.uns[key]["n_genes_auto"]`` holds ``n_genes`` (the choice), ``rule``, ``grid`` and
        ``curve`` (the error_curve table as a dict of columns: ``pd.DataFrame(...)`` gives it back,
        e.g. for :func:`bioqpfs.pl.error_curve`).  For another grid, classifier or CV scheme, run
        ``error_curve`` and ``suggest_n_genes`` yourself and pass the integer.
    similarity : {"mi", "correlation"}
        Redundancy measure, for the methods that take one.
    layer : str, optional
        Use ``adata.layers[layer]`` instead of ``adata.X``.
    use_raw : bool, optional
        Use ``adata.raw`` (restricted to ``adata.var_names``).  Default ``None`` follows scanpy's
        ``rank_genes_groups``: ``.raw`` when it is set and no ``layer`` is given, else ``.X``.  The
        matrix used is logged and recorded in ``.uns[key]["params"]`` (``layer``, ``use_raw``;
        ``None`` where not given, see :func:`bioqpfs._anndata.source_params`).  (Earlier
        versions used ``.X`` by default: e.g. scanpy's ``pbmc68k_reduced`` is now selected on its
        log-normalised ``.raw`` rather than its scaled ``.X``.)
    mask_var : str, bool array or bool Series, optional
        Only consider these genes (e.g. ``"highly_variable"``); genes outside get NaN weight and rank.  A Series
        is aligned to ``adata.var_names`` by its index (a default ``RangeIndex``: by position).
    preselected : sequence of str or int, optional
        Genes that must be in the panel (a commercial panel to extend, say), ranked first in the given order;
        the method chooses the rest given them (every method; how each conditions on them is in its docstring:
        greedy methods start from them, the QP methods solve the QP over the remaining genes with the relevance
        shifted by the forced genes' redundancy, SPEC_CMI conditions its 0-1 problem on them, LDFS/HSFS leave
        their rows out of the penalty).  ``n_genes`` counts them.  Gene names, or integer positions in
        ``adata.var`` (with ``mask_var`` too); a gene that ``mask_var`` leaves out is refused.
    batch_key : str, optional
        Column of ``adata.obs`` with the batch (donor, study, plate) of every cell: batch-aware statistics --
        every information measure estimated within each batch and averaged, ``sum_b w_b I_b`` (stratified
        estimation as mRMRe's ``strata``), discretisation thresholds per batch, |correlation| within batches
        (see :func:`bioqpfs.qpfs`; ``batch_weights=`` and ``batch_discretization=`` go through
        ``**method_params``).  Recorded in ``.uns[key]["params"]``.  Methods without a batch-aware form
        (:func:`bioqpfs.batch_methods` lists those with one) refuse it.  With ``n_genes="auto"`` the
        cross-validated selections use the training folds' batches too (stratified k-fold, as without).
    key_added : str, optional
        Prefix of the written keys; default the method name, ``"bioqpfs"`` for the default recipe.  A non-empty
        string without ``"/"`` or a backslash, and not ``"."`` or ``".."`` (paths to h5py and zarr).
        Re-running under a key that holds a bioqpfs selection replaces it: the ``.var`` columns the
        earlier run wrote (listed in ``.uns[key]["var_columns"]``) are dropped first, so no column of
        the earlier method is left behind; other columns, even if named ``<key>_*`` (e.g. a user's
        ``qpfs_validated``), are kept.  A key whose ``.uns`` entry was written by something else
        (e.g. ``"pca"``), or whose columns to write exist in ``.var`` but were not written by
        bioqpfs, is refused, never overwritten.
    copy : bool
        Return a modified copy instead of writing into ``adata``.  A backed AnnData needs
        ``copy=False`` (or ``adata.to_memory()`` first).
    random_state : int, numpy Generator or RandomState, or None
        Seed for methods with random choices (default 0; ``None``: unseeded; ``n_genes="auto"`` needs a seed).
    progress : bool, optional
        tqdm bars on stderr for steps longer than a second (MI matrix blocks, QP iterations ...):
        ``True``, ``False``, or ``None`` (default): on when ``scanpy.settings.verbosity`` is info
        (2) or higher.  Rate and ETA are measured from the second step on (the first may include
        numba's one-time compilation).
    n_jobs : int, optional
        Worker threads: a positive count or -1 (all cores).  ``None`` (default): as scanpy,
        ``scanpy.settings.n_jobs`` when it is set to something other than its default 1, else
        ``NUMBA_NUM_THREADS`` (default: the number of cores).  Not recorded in ``.uns`` (it does
        not change the result).
    chunk_size : int, optional
        Samples per chunk when X of a backed AnnData is read lazily (default: as many rows as fit 128 MiB as
        float64, :data:`bioqpfs._io.CHUNK_BYTES`).  With ``progress`` on, a line per chunk read goes to stderr.
    {backend}
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
        - method-specific ``.var[f"{key}_*"]`` columns (all listed in ``"var_columns"``): ``_class`` (the class
          each gene was taken for) with the default recipe (``qpfs_cover``), ``_cluster`` /
          ``_representative`` / ``_cluster_level`` with the IKM family, ``_greedy_score`` with the greedy
          baselines;
        - ``.uns[key]``: ``{"params": ..., "diagnostics": ..., "selected": [genes in rank order],
          "var_columns": [the .var columns written]}``, plus ``"n_genes_auto"`` with ``n_genes="auto"``
          (``params["n_genes"]`` is then the chosen size).
    """
    import anndata as ad
    from scanpy import logging as logg

    if not isinstance(adata, ad.AnnData):
        raise TypeError(f"adata must be an AnnData, got {type(adata).__name__}; for arrays use bioqpfs.select(X, y)")
    check_annotations(adata)
    if adata.isbacked and copy:
        raise ValueError("copy=True is not supported for a backed AnnData; pass copy=False (results are written "
                         "into the in-memory .var/.uns), or load it first with adata = adata.to_memory()")
    if adata.isbacked and adata.is_view:
        raise ValueError("adata is a view of a backed AnnData (e.g. adata[mask] of read_h5ad(path, backed='r')), "
                         "which cannot be made an actual AnnData in place to hold the results; load the subset "
                         "first: adata = adata[mask].to_memory()")
    n_genes = _check_n_genes(n_genes)
    _device.check_backend(backend)
    _check_face_params(method_params)
    named = method
    method, params, preset = resolve_method(method, method_params)
    func = method_function(method)
    accepted = inspect.signature(func).parameters
    if preselected is not None:
        if "preselected" not in accepted:
            raise TypeError(f"method {method!r} does not support preselected genes")
        preselected = gene_list(preselected, "preselected")
        params["preselected"] = preselected
    if "similarity" in accepted:
        params["similarity"] = similarity
    elif similarity != "mi":
        raise TypeError(f"method {method!r} does not take a similarity")
    batch = None
    if batch_key is not None:
        if "batch" not in accepted:
            raise ValueError(f"method {method!r} does not take batch_key (batch-aware statistics); methods that do: "
                             f"{', '.join(batch_methods())}")
        batch = obs_batch(adata, batch_key).array
    if chunk_size is not None:
        check_positive_int(chunk_size, "chunk_size")
    X, whole = obs_rep_for(adata, [(method, {**params, **({} if batch is None else {"batch": batch})})],
                           layer=layer, use_raw=use_raw, chunk_size=chunk_size, progress=_progress.wanted(progress))
    gpu_input = _device.is_gpu_input(X)  # e.g. after rapids-singlecell's anndata_to_GPU: counted on the GPU
    X = _device.to_host(X)
    source = check_use_raw(adata, layer, use_raw)[1]
    mask = check_mask(adata, mask_var)
    if preselected is not None:
        params["preselected"] = preselected_in_mask(params["preselected"], mask, adata.var_names)
    labels = obs_labels(adata, groupby)
    check_levels_supported(method, labels, preset)
    if isinstance(labels, pd.DataFrame):  # hierarchical labels: nesting and weights checked before any work
        check_levels(labels, adata, params.get("groupby_weights"), warn=False)  # the selector warns
    key = result_key(named, key_added)
    stale = _check_key(adata, key, method)
    duplicated = _warn_duplicated_names(adata)
    start = logg.info(f"selecting {n_genes if n_genes != 'auto' else 'n_genes=auto'} genes with {method!r} by {groupby!r} on {source}")
    counts = counts_warning(adata, X, layer, check_use_raw(adata, layer, use_raw)[0])
    if counts is not None and n_genes != "auto":   # n_genes="auto": evaluate.error_curve below says it, once
        logg.warning(counts)
    if whole is not None:
        logg.info(f"    the matrix stored in the file is read whole: {whole}")
    elif is_dask_array(X):
        logg.info(f"    the matrix is read lazily in {len(X.chunks[0])} chunks of up to {X.chunks[0][0]} samples")
    genes = adata.var_names.to_numpy()
    Xm = X if mask.all() else X[:, np.flatnonzero(mask)]
    _hint_long_exact_run(method, params, Xm.shape, logg)
    auto = None
    if n_genes == "auto":
        # the user's preselected: error_curve renumbers positions among mask_var's genes itself (params holds them
        # renumbered already, which read again as positions among all genes named other genes, or refused them)
        given = params if preselected is None else {**params, "preselected": preselected}
        n_genes, auto = _auto_n_genes(adata, groupby, labels, method, given, n_candidates=Xm.shape[1], layer=layer,
                                      use_raw=use_raw, mask_var=mask_var, random_state=random_state,
                                      progress=progress, n_jobs=n_jobs, chunk_size=chunk_size, logg=logg,
                                      batch_key=batch_key, backend=backend)
    with pass_memo(), _progress.requested(progress), _threads.limited(n_jobs), _device.requested(backend), \
            _device.mark_gpu_input(gpu_input), announce_compilation(logg.info) as jit:
        # checked here so that its errors (NaN, inf) name the matrix read, e.g. adata.layers['counts'], not "X";
        # the selector's own check then finds it valid (a Dask X's pass over the chunks is kept in the memo).  Not a
        # Dask X for a method without a Dask path: select() reads it whole after the method's own checks (HSFS's
        # sample limit), and checks it then
        if not is_dask_array(Xm) or method in DASK_METHODS:
            Xm = check_matrix(Xm, name=matrix_name(layer, check_use_raw(adata, layer, use_raw)[0]),
                              feature_names=genes[mask])
        y = labels if isinstance(labels, pd.DataFrame) else \
            labels.to_numpy() if not isinstance(labels.dtype, pd.CategoricalDtype) else labels.array
        sel = select(Xm, y,
                     method=method, n_genes=n_genes, random_state=random_state, feature_names=genes[mask],
                     **params, **({} if batch is None else {"batch": batch}))
    if jit["compiled"]:
        logg.info(f"    kernels compiled in {jit['seconds']:.1f} s (cached for later runs)")
    idx = np.flatnonzero(mask)
    _check_panel_names(genes[idx[sel.selected]], duplicated, key)  # before anything is written
    _check_foreign(adata, key, [f"{key}_{c}" for c in sel.extra_columns], stale)
    # the record, before anything is written: a failure here leaves adata as it was (not new .var columns
    # without their .uns entry)
    record = dict(method=method, preset=preset or "paper",
                  **source_params(adata, groupby=groupby, layer=layer, use_raw=use_raw, mask_var=mask_var),
                  n_genes=n_genes, random_state=random_state, batch_key=batch_key)
    record.update(params)  # what the user asked for, then
    record.update(sel.params)  # what the method resolved (defaults, estimated alpha)
    written = [f"{key}_{c}" for c in ("weight", "rank", "selected", *sel.extra_columns)]
    stored = to_storable({
        "params": record,
        "diagnostics": sel.diagnostics,
        "selected": [str(g) for g in genes[idx[sel.selected]]],
        "var_columns": written,  # what a re-run under this key may drop: only bioqpfs's own columns
        **({"n_genes_auto": auto} if auto is not None else {}),
    })
    if copy:
        adata = adata.copy()  # X above is read-only input; results go to this object
    elif adata.is_view:  # as scanpy's tools (scanpy._utils.view_to_actual): the view becomes an actual AnnData
        warnings.warn("adata is a view (e.g. adata[mask]); making it an actual AnnData in place (a copy of the "
                      "subset) so the results can be written into it, as scanpy's tools do. The AnnData it was "
                      "taken from is not changed; use adata = adata[mask].copy() to avoid this warning",
                      UserWarning, stacklevel=user_stacklevel())
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
    adata.uns[key] = stored
    logg.info("    finished", time=start,
              deep="added\n" + "\n".join(f"    '{c}', .var" for c in written) + f"\n    '{key}', .uns (params, diagnostics, selected{', n_genes_auto' if auto else ''})")
    return adata if copy else None
