from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._anndata import obs_column, selection_key
from ._utils import check_save, finish, gene_columns, gene_labels, new_axes, panel_genes, stored

if TYPE_CHECKING:
    from typing import Literal

    from anndata import AnnData
    from matplotlib.axes import Axes

    from .._typing import PathLike


def redundancy_matrix(adata, key=None, *, n_genes=None, measure=None, layer=None, use_raw=None):
    """(Q among the panel's genes in rank order, gene names, measure used, unit).

    The expression matrix, the discretisation and the log base are those recorded in
    ``.uns[key]["params"]`` (what :func:`bioqpfs.tl.select_genes` used) unless overridden.
    ``measure="mi"``: mutual information of the discretised genes, diagonal H(X_i) (QPFS's Q);
    ``"correlation"``: |Pearson correlation| (QPFS eq. 3), diagonal 1.
    """
    key = selection_key(adata, key)
    from .. import measures
    from .._anndata import get_obs_rep
    from .._kernels import information as _info
    from ..selectors import _common

    _, uns = stored(adata, key)
    params = dict(uns.get("params", {}))
    genes = panel_genes(adata, key, n_genes)
    if measure is None:
        measure = params.get("similarity") if params.get("similarity") in ("mi", "correlation") else "mi"
    if measure not in ("mi", "correlation"):
        raise ValueError(f"measure must be 'mi' or 'correlation', got {measure!r}")
    if layer is None and use_raw is None:   # the matrix the selection read (absent values: None)
        layer, use_raw = params.get("layer"), bool(params.get("use_raw", False))
        if (layer is not None and layer not in adata.layers) or (use_raw and adata.raw is None):
            read = f"adata.layers[{layer!r}]" if layer is not None else "adata.raw"
            raise KeyError(f"the selection read {read} (.uns[{key!r}]['params']), which this AnnData no longer has; "
                           "pass layer= or use_raw= to draw the redundancy on another matrix")
    idx = gene_columns(adata, genes)   # before reading X: a repeated panel name is refused at once
    X = get_obs_rep(adata, layer=layer, use_raw=use_raw)
    Xp = X[:, idx]
    if hasattr(Xp, "compute"):  # a Dask X: the panel's columns are small
        Xp = Xp.compute()
    Xp = Xp.toarray() if hasattr(Xp, "toarray") else np.asarray(Xp)
    y_codes, batch = _labels_and_batches(adata, params)
    if measure == "mi":
        # the rule the selection applied (every selector that discretises records it): "auto" decided again, on
        # the panel's columns or on the whole matrix (mask_var), could come out another way
        disc = _rule_used(params, "mean_sd")  # None: X holds codes
        if disc == "auto":  # a record from before discretization_used: decided on the whole matrix, as then
            disc = measures.resolve_discretization(X, "auto")
        base = float(params.get("base", 2))
        class_weight = params.get("class_weight") if y_codes is not None else None
        table = _common.info_table(Xp, y_codes, discretization=disc, n_bins=int(params.get("n_bins", 3)),
                                   class_weight=class_weight, batch=batch)
        Q = _info.pairwise_information(table, None, "mi", base=base, dtype=np.float64)
        unit = "MI (bits)" if base == 2 else f"MI (log base {base:g})"
    else:
        Q = measures.correlation(Xp if batch is None else _common.within_batch_standardized(Xp, batch))
        unit = "|Pearson r|"
    return np.asarray(Q, dtype=float), genes, measure, unit


def _rule_used(params, default=None):
    """The discretisation the selection applied: ``params["discretization_used"]``, or for a record without it (made
    before every selector recorded it) the ``"discretization"`` setting."""
    return params.get("discretization_used", params.get("discretization", default))


def _labels_and_batches(adata, params):
    """The class codes (finest level) and :class:`bioqpfs.selectors._common.Batches` the selection counted with,
    from the ``.obs`` columns recorded in ``params`` (``None`` for what was not used): Q of the default recipe is
    weighted by class (``class_weight="balanced"``) and, with ``batch_key``, summed within batches.  A recorded
    column that is gone from ``.obs`` is left out with a warning (the drawn Q is then not the selection's)."""
    import warnings

    from .._validation import check_labels, user_stacklevel
    from ..selectors import _common

    def column(name, what):
        found = obs_column(adata, name)   # a recorded int-named column (groupby=0) is stored as "0"
        if found is not None:
            return adata.obs[found]
        warnings.warn(f"the selection's {what} column {name!r} is no longer in adata.obs, so the redundancy is drawn "
                      f"without it (not the Q the selection used)", UserWarning, stacklevel=user_stacklevel())
        return None

    groupby = params.get("groupby")
    if groupby is not None and not isinstance(groupby, str):  # hierarchical labels: Q's weights use the finest
        groupby = str(list(groupby)[-1])
    labels = column(groupby, "groupby") if groupby is not None and (
        params.get("class_weight") is not None or _rule_used(params) == "mdl") else None
    y_codes = None if labels is None else check_labels(labels, adata.n_obs, name=f"adata.obs[{groupby!r}]")[0]
    batch_key = params.get("batch_key")
    values = column(batch_key, "batch_key") if batch_key is not None else None
    batch = None if values is None else _common.check_batch(
        values.to_numpy(), np.empty((adata.n_obs, 0)), batch_weights=params.get("batch_weights", "size"),
        batch_discretization=params.get("batch_discretization", "per_batch"))
    return y_codes, batch


def redundancy(adata: AnnData, key: str | None = None, *, n_genes: int | None = None,
               measure: Literal["mi", "correlation"] | None = None, diagonal: bool = False,
               annotate: bool | None = None, layer: str | None = None, use_raw: bool | None = None,
               gene_symbols: str | None = None, cmap: str = "viridis", ax: Axes | None = None, show: bool | None = None,
               save: PathLike | None = None, figsize: tuple[float, float] | None = None) -> Axes | None:
    """Heat map of the redundancy Q among the genes of a stored panel (rank order).

    Parameters
    ----------
    adata : AnnData
        With a selection stored by :func:`bioqpfs.tl.select_genes` under ``key``.
    key : str, optional
        The selection's key (``key_added``); default ``"bioqpfs"`` (:func:`bioqpfs.tl.select_genes`'s default) when
        stored, else the one stored selection.
    n_genes : int, optional
        The top ``n_genes`` ranks; default the stored panel (``_selected``).
    measure : {"mi", "correlation"}, optional
        Default: the similarity the selection used (MI otherwise).  Computed with
        :mod:`bioqpfs.measures` on the matrix, discretisation and base the selection used.
    diagonal : bool
        Draw the diagonal (H(X_i) for MI, 1 for correlation).  Off by default, so the colour scale
        shows the off-diagonal redundancy the selection tries to keep low; the masked cells are blank.
    annotate : bool, optional
        Print values in the cells; default when the panel has at most 15 genes.
    layer, use_raw
        Override the expression matrix recorded in ``.uns[key]["params"]``.
    gene_symbols : str, optional
        Column of ``adata.var`` to label the genes by (e.g. symbols when ``var_names`` are Ensembl IDs), as
        scanpy's ``gene_symbols=``; default ``var_names``.
    cmap, ax, show, save, figsize
        As in scanpy: ``show=False`` returns the Axes.

    Returns
    -------
    Axes or None
        One image (``ax.images[0]``) of the n x n matrix, gene names as tick labels, a colour bar.
    """
    check_save(save)
    key = selection_key(adata, key)
    gene_labels(adata, [], gene_symbols)   # a wrong column: before the matrix is computed
    Q, genes, measure, unit = redundancy_matrix(adata, key, n_genes=n_genes, measure=measure, layer=layer,
                                                use_raw=use_raw)
    genes = gene_labels(adata, genes, gene_symbols)
    n = len(genes)
    shown = Q.copy()
    if not diagonal:
        shown[np.diag_indices(n)] = np.nan
    if figsize is None:
        side = min(12.0, 2.5 + 0.28 * n)
        figsize = (side + 1.0, side)
    ax = new_axes(ax, figsize)
    im = ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, interpolation="nearest")
    ax.set_xticks(np.arange(n))
    ax.set_yticks(np.arange(n))
    ax.set_xticklabels(genes, rotation=90, fontsize=7)
    ax.set_yticklabels(genes, fontsize=7)
    if annotate is None:
        annotate = n <= 15
    if annotate:
        for i in range(n):
            for j in range(n):
                if np.isfinite(shown[i, j]):
                    ax.text(j, i, f"{shown[i, j]:.2f}", ha="center", va="center", fontsize=6, color="w")
    ax.figure.colorbar(im, ax=ax, label=unit, shrink=0.8)
    off = Q[~np.eye(n, dtype=bool)]
    mean_off = float(off.mean()) if off.size else float("nan")
    ax.set_title(f"{key}: redundancy among {n} genes (mean off-diagonal {mean_off:.3f})", fontsize=9)
    return finish(ax, show, save)
