from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._anndata import selection_key
from .._validation import check_positive_int
from ._utils import check_save, finish, gene_labels, new_axes, stored

if TYPE_CHECKING:
    from typing import Literal

    from anndata import AnnData
    from matplotlib.axes import Axes

    from .._typing import PathLike


def weights(adata: AnnData, key: str | None = None, *, n_genes: int | None = None,
            n_ranks: int | Literal["auto", "all"] = "auto", label_top: int = 0, yscale: str = "linear",
            gene_symbols: str | None = None, ax: Axes | None = None, show: bool | None = None, save: PathLike | None = None,
            figsize: tuple[float, float] = (5, 3.5)) -> Axes | None:
    """Ranked weight curve of a stored selection with the panel cut.

    Parameters
    ----------
    adata : AnnData
        With ``.var[f"{key}_weight"]``, ``f"{key}_rank"``, ``f"{key}_selected"`` from
        :func:`bioqpfs.tl.select_genes`.
    key : str, optional
        The selection's key (``key_added``); default ``"bioqpfs"`` (:func:`bioqpfs.tl.select_genes`'s default) when
        stored, else the one stored selection.
    n_genes : int, optional
        Where to draw the cut (>= 1); default the number of stored ``_selected`` genes.
    n_ranks : int, "auto" or "all"
        How many ranks to draw.  ``"auto"`` (default) zooms on what matters: the ranks up to the
        last non-zero weight plus a short zero tail when the method zeroes weights (QPFS gives most
        of 2,308 SRBCT genes weight 0), else ``5 * n_genes`` ranks, and never fewer than the panel.
        ``"all"`` draws every ranked gene; an integer (>= 1) the first ``n_ranks``.
    label_top : int
        Write the names of the first ``label_top`` genes next to their points.
    yscale : str
        Matplotlib y scale (``"linear"``, ``"symlog"`` ...).
    gene_symbols : str, optional
        Column of ``adata.var`` to label the genes by (e.g. symbols when ``var_names`` are Ensembl IDs), as
        scanpy's ``gene_symbols=``; default ``var_names``.
    ax, show, save, figsize
        As in scanpy: ``show=False`` returns the Axes.

    Returns
    -------
    Axes or None
        One line (weight by rank, ``x = 1..n_ranks``), the panel drawn as markers, a vertical cut
        line between rank ``n_genes`` and ``n_genes + 1``.
    """
    check_save(save)
    key = selection_key(adata, key)
    n_genes = None if n_genes is None else check_positive_int(n_genes, "n_genes")
    if isinstance(n_ranks, str) and n_ranks not in ("auto", "all"):
        raise ValueError(f"n_ranks must be an integer >= 1, 'auto' or 'all', got {n_ranks!r}")
    if not isinstance(n_ranks, str):
        n_ranks = check_positive_int(n_ranks, "n_ranks")
    label_top = check_positive_int(label_top, "label_top", minimum=0)
    df, uns = stored(adata, key)
    from matplotlib.scale import get_scale_names

    if yscale not in get_scale_names():
        raise ValueError(f"yscale={yscale!r}; choose one of {', '.join(get_scale_names())}")
    n_ranked, n_nonzero = len(df), int(np.count_nonzero(df["weight"].to_numpy(dtype=float)))
    if n_genes is not None and n_genes > len(df):  # a cut beyond the ranked genes would mark no panel
        raise ValueError(f"n_genes={n_genes} but only {len(df)} genes are ranked under {key!r}")
    cut = int(df["selected"].astype(bool).sum()) if n_genes is None else n_genes
    if n_ranks == "auto":
        n_ranks = auto_ranks(df["weight"].to_numpy(dtype=float), cut)
    if n_ranks != "all":
        df = df.iloc[:n_ranks]
    # positions among the genes present: the stored ranks have gaps once genes were subset away (adata[:, genes]),
    # and comparing them with the panel's count marked the wrong genes
    rank = np.arange(1, len(df) + 1, dtype=float)
    w = df["weight"].to_numpy(dtype=float)
    ax = new_axes(ax, figsize)
    ax.plot(rank, w, color="0.4", lw=1.2, label="weight")
    inside = df["selected"].astype(bool).to_numpy() if n_genes is None else rank <= cut
    ax.scatter(rank[inside], w[inside], s=14, color="C3", zorder=3, label=f"panel ({inside.sum()} genes)")
    ax.axvline(cut + 0.5, color="C3", ls="--", lw=1)
    labels = gene_labels(adata, df["gene"].to_numpy()[:label_top], gene_symbols)
    for r, wi, g in zip(rank[:label_top], w[:label_top], labels):
        ax.annotate(str(g), (r, wi), xytext=(3, 3), textcoords="offset points", fontsize=7)
    method = uns.get("params", {}).get("method", key)
    ax.set_yscale(yscale)
    ax.set_xlabel("rank")
    ax.set_ylabel(f"{key} weight")
    shown = "" if len(df) == n_ranked else f"; ranks 1-{len(df)} shown"
    ax.set_title(f"{method} weights ({n_nonzero} non-zero of {n_ranked} ranked{shown})")
    ax.legend(frameon=False, fontsize=8)
    return finish(ax, show, save)


def auto_ranks(w, cut):
    """Ranks drawn by ``n_ranks="auto"`` for weights ``w`` in rank order and a panel of ``cut`` genes.

    Up to the last non-zero weight plus a tail of max(5, 10 %) zero ranks when some weight is 0, else
    ``5 * cut`` ranks; at least the panel plus that tail, at most every ranked gene.
    """
    nonzero = np.flatnonzero(w)
    if nonzero.size < w.size:
        last = max(int(nonzero[-1]) + 1 if nonzero.size else 0, cut)
        return min(w.size, last + max(5, -(-last // 10)))
    return min(w.size, max(5 * cut, cut + 5))
