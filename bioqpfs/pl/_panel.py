from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._anndata import check_use_raw, obs_column, selection_key
from ._utils import check_save, finish, gene_columns, gene_labels, panel_genes

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Literal

    from anndata import AnnData
    from matplotlib.axes import Axes

    from .._typing import PathLike


_KINDS = ("dotplot", "heatmap", "matrixplot")


def _panel_data(adata, genes, groupby, layer, use_raw):
    """What the plot reads, as a small in-memory AnnData: the panel's columns of the matrix scanpy would read
    (``layer``, ``.raw`` or X: :func:`bioqpfs._anndata.get_obs_rep`, which reads a backed or lazily read file
    correctly), ``.obs[groupby]`` (a list of columns), the genes' ``.var`` rows and the group colours.  scanpy then plots it whatever
    ``adata`` is -- a view (a copy of a backed view fails in anndata), backed, or read lazily (scanpy's dot plot
    failed on one) -- and writes into it, not into the caller's object (string columns made categoricals, group
    colours)."""
    import anndata as ad
    import pandas as pd

    from .._anndata import get_obs_rep

    X = get_obs_rep(adata, layer=layer, use_raw=use_raw)
    idx = gene_columns(adata, genes)   # repeated names elsewhere in var_names: get_indexer refused them
    part = X[:, idx]
    if hasattr(part, "compute"):   # a Dask X: the panel's columns are small
        part = part.compute()
    # named by their text: scanpy takes a non-str groupby (an int-named column, groupby=0) for a list of columns
    obs = pd.DataFrame({str(g): adata.obs[g] for g in groupby}, index=adata.obs_names)
    used = {}
    for g in obs.columns:
        if not isinstance(obs[g].dtype, pd.CategoricalDtype):   # numbers: scanpy would bin them into intervals
            obs[g] = pd.Categorical(obs[g])
        # a category no cell has (left by a cell subset: adata[adata.obs[g] != "T"]) failed in scanpy (pandas KeyError)
        used[g] = obs[g].cat.categories.isin(obs[g].unique())
        obs[g] = obs[g].cat.remove_unused_categories()
    var = adata.var.iloc[idx].copy()
    var.index = pd.Index([str(g) for g in genes])
    data = ad.AnnData(part, obs=obs, var=var)
    for g in groupby:
        colors = f"{g}_colors"
        if colors in adata.uns:   # one colour per category: those of the categories kept
            kept = used[str(g)]
            data.uns[colors] = np.asarray(adata.uns[colors])[kept] if len(adata.uns[colors]) == kept.size else \
                adata.uns[colors]
    return data



def panel(adata: AnnData, key: str | None = None, groupby: str | Sequence[str] | None = None, *,
          kind: Literal["dotplot", "heatmap", "matrixplot"] = "dotplot", n_genes: int | None = None,
          show: bool | None = None, save: PathLike | None = None, **kwargs) -> dict[str, Axes] | None:
    """The panel's expression by group, through scanpy's dot plot / heat map / matrix plot.

    Parameters
    ----------
    adata : AnnData
        With a selection stored by :func:`bioqpfs.tl.select_genes` under ``key``.
    key : str, optional
        The selection's key (``key_added``); default ``"bioqpfs"`` (:func:`bioqpfs.tl.select_genes`'s default) when
        stored, else the one stored selection.
    groupby : str or list of str, optional
        ``.obs`` column to group cells by; default the column the selection used
        (``.uns[key]["params"]["groupby"]``; its finest level for hierarchical labels).  A list of columns groups
        by their combinations, as in scanpy.
    kind : {"dotplot", "heatmap", "matrixplot"}
        :func:`scanpy.pl.dotplot`, :func:`scanpy.pl.heatmap` or :func:`scanpy.pl.matrixplot`.
    n_genes : int, optional
        The top ``n_genes`` ranks; default the stored panel.  Genes appear in rank order.
    show, save
        As in scanpy, except that ``save`` is the exact file written (e.g. ``"panel.png"``; the
        format follows the suffix), as in the other ``bioqpfs.pl`` functions -- scanpy's own
        ``save=`` writes ``figures/<kind><save>`` and is deprecated from scanpy 1.12.
    **kwargs
        Passed to the scanpy function (``use_raw``, ``layer``, ``standard_scale``, ``dendrogram``...).
        ``gene_symbols="<a .var column>"`` labels the genes by that column (e.g. symbols when ``var_names``
        are Ensembl IDs), as in scanpy; the panel itself is still read from ``var_names``.

    Returns
    -------
    dict of Axes or None
        What scanpy returns with ``show=False`` (e.g. ``"mainplot_ax"`` for a dot plot,
        ``"heatmap_ax"`` for a heat map).  ``adata`` is left as it was, a view included (scanpy itself
        would turn string ``.obs`` columns into categoricals and store group colours in ``.uns``).
    """
    check_save(save)
    key = selection_key(adata, key)
    import scanpy as sc

    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    genes = list(panel_genes(adata, key, n_genes))
    if groupby is None:
        groupby = dict(adata.uns.get(key, {}).get("params", {})).get("groupby")
        if groupby is None:
            raise ValueError(f"groupby not given and not recorded in .uns[{key!r}]['params']")
        if not isinstance(groupby, str):   # hierarchical labels (coarse to fine): group by the finest level
            groupby = str(list(groupby)[-1])
        recorded = f" (the column the selection used, .uns[{key!r}]['params']['groupby']: pass groupby=)"
    else:
        recorded = ""
    columns = list(groupby) if isinstance(groupby, (list, tuple)) else [groupby]   # several: scanpy's combinations
    found = [obs_column(adata, g) for g in columns]   # a recorded int-named column (groupby=0) is stored as "0"
    missing = [g for g, c in zip(columns, found) if c is None]
    if missing or not columns:
        raise KeyError(f"groupby={missing[0] if missing else groupby!r} is not a column of adata.obs{recorded}; "
                       f"available: {', '.join(map(str, adata.obs.columns)) or 'none'}")
    use_raw = kwargs.get("use_raw")
    if check_use_raw(adata, kwargs.get("layer"), use_raw)[0]:   # the matrix scanpy will read: .raw
        missing = [g for g in genes if adata.raw is None or g not in adata.raw.var_names]
        if missing:
            if use_raw:
                raise ValueError(f"use_raw=True but panel gene(s) {missing[:5]} are not in adata.raw"
                                 + ("" if adata.raw is not None else " (adata.raw is not set)"))
            kwargs["use_raw"] = False   # scanpy would look the genes up in .raw and fail
    func = getattr(sc.pl, kind)
    data = _panel_data(adata, genes, found, kwargs.pop("layer", None), kwargs.pop("use_raw", None))
    # scanpy looks the names given up in the gene_symbols column: the panel's symbols, not its var_names
    names = genes if kwargs.get("gene_symbols") is None else gene_labels(data, genes, kwargs["gene_symbols"])
    axes = func(data, names, groupby=[str(c) for c in found] if len(found) > 1 else str(found[0]), show=False,
                **kwargs)
    if kwargs.get("return_fig"):   # scanpy's plot object (DotPlot, MatrixPlot) or Figure: the caller draws/saves it
        if save:
            raise ValueError("save= with return_fig=True: save the returned object instead (its .savefig(path))")
        return axes
    fig = next(iter(axes.values())).figure if isinstance(axes, dict) else axes.figure
    return finish(axes, show, save, fig=fig)
