"""Shared by the plots: read a stored selection, finish a figure the scanpy way."""
from __future__ import annotations

import numpy as np

from .._validation import check_positive_int, user_stacklevel


def stored(adata, key):
    """(tidy table of the ranked genes in rank order, .uns[key] dict) of a selection stored by tl."""
    from ..get import selection_df

    df = selection_df(adata, key)
    if df.empty:
        raise ValueError(f"the selection stored under {key!r} ranks no gene")
    return df, dict(adata.uns.get(key, {}))


def panel_genes(adata, key, n_genes):
    """Names of the panel in rank order: the stored ``_selected`` genes, or the top ``n_genes`` ranks."""
    df, uns = stored(adata, key)
    if n_genes is None:
        genes = df.loc[df["selected"].astype(bool), "gene"].to_numpy()
        if genes.size == 0:
            panel = np.atleast_1d(uns.get("selected", []))
            gone = (f": none of the {panel.size} genes of the stored panel (.uns[{key!r}]['selected']) is in "
                    "adata.var any more (genes subset away after select_genes); pass n_genes= for the top ranks "
                    "left, or run tl.select_genes again" if panel.size else "; pass n_genes=")
            raise ValueError(f"no gene is marked selected under {key!r}{gone}")
        panel = np.asarray(np.atleast_1d(uns.get("selected", [])), dtype=object).astype(str)   # numpy StringDType too
        gone = [g for g in panel if g not in set(genes.astype(str))]
        if gone:   # a panel partly subset away: drawn with the genes left, said so
            import warnings

            shown = ", ".join(gone[:10]) + (f" and {len(gone) - 10} more" if len(gone) > 10 else "")
            warnings.warn(f"{len(gone)} of the {panel.size} genes of the panel stored under {key!r} are not in "
                          f"adata.var any more (subset away after select_genes): {shown}; drawing the "
                          f"{genes.size} left", UserWarning, stacklevel=user_stacklevel())
        return genes.astype(str)
    n_genes = check_positive_int(n_genes, "n_genes")
    if n_genes > len(df):
        raise ValueError(f"n_genes={n_genes} but only {len(df)} genes are ranked under {key!r}")
    return df["gene"].to_numpy()[:n_genes].astype(str)




def new_axes(ax, figsize):
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def check_save(save):
    """Refuse a ``save=`` that names no image file to write (a plot function calls it first: nothing is computed or
    drawn for a call that would fail, and no figure is left open); ``None`` or ``False`` writes nothing.  An empty
    path (``save=""``) is refused, not read as "do not save": it names no file, so nothing would be written."""
    import os

    from matplotlib.backend_bases import FigureCanvasBase

    if save is None or (isinstance(save, (bool, np.bool_)) and not save):
        return
    if isinstance(save, bool) or not isinstance(save, (str, os.PathLike)):
        raise TypeError(f"save= is the path of the file to write (e.g. save='figures/weights.png'), got {save!r}; "
                        "scanpy's save=True / suffix convention is not used here")
    save = os.fspath(save)
    if not save.strip():
        raise ValueError(f"save={save!r} names no file, so nothing would be written; give the path of the file to "
                         "write (e.g. save='figures/weights.png'), or save=None not to write one")
    if save.startswith(".") and os.path.splitext(save)[1] == "" and "/" not in save:   # ".png": a suffix alone
        raise ValueError(f"save={save!r} is a suffix alone; give the path of the file to write, e.g. "
                         f"save='figures/weights{save}' (scanpy's suffix convention is not used here)")
    formats = FigureCanvasBase.get_supported_filetypes()
    if os.path.splitext(save)[1].lstrip(".").lower() not in formats:
        raise ValueError(f"save={save!r}: the file name must end in an image format matplotlib writes "
                         f"({', '.join('.' + f for f in sorted(formats))})")
    if os.path.isdir(save):
        raise ValueError(f"save={save!r} is a directory; give a file name")


def save_figure(fig, save):
    """Write ``fig`` to exactly the path ``save`` (format from its suffix, :func:`check_save`), atomically."""
    import os

    from .._io import atomic_path

    check_save(save)
    save = os.fspath(save)
    with atomic_path(save) as tmp:  # a partial file never replaces an existing one
        fig.savefig(tmp, bbox_inches="tight", format=os.path.splitext(save)[1].lstrip(".").lower())


def finish(ax, show, save, *, fig=None):
    """Save if asked; show (``show=None`` follows ``scanpy.settings.autoshow``) or return ``ax``.

    ``ax`` may be anything a plot returns (scanpy's dict of Axes); ``fig`` is then its figure.
    """
    import matplotlib.pyplot as plt

    if save:
        save_figure(ax.figure if fig is None else fig, save)
    if show is None:
        from scanpy import settings

        show = settings.autoshow
    if show:
        plt.show()
        return None
    return ax


def gene_columns(adata, genes):
    """Positions in ``adata.var`` of the panel's ``genes`` (names): repeated names elsewhere in ``var_names`` are
    fine (``tl.select_genes`` accepts such data); a panel gene whose name is repeated, or missing, is refused."""
    names = np.asarray(adata.var_names).astype(str)
    idx = []
    for g in genes:
        where = np.flatnonzero(names == str(g))
        if where.size != 1:
            raise ValueError(f"panel gene {str(g)!r} is {'not in' if where.size == 0 else 'repeated in'} adata.var_names, "
                             "so its column cannot be found by name" + (
                                 "; call adata.var_names_make_unique() first" if where.size else ""))
        idx.append(int(where[0]))
    return np.asarray(idx, dtype=np.int64)


def gene_labels(adata, genes, gene_symbols):
    """The labels of ``genes`` (``var_names``) in a plot: themselves, or their ``adata.var[gene_symbols]`` entries
    (scanpy's ``gene_symbols=``, e.g. symbols when ``var_names`` are Ensembl IDs); a column that is not in
    ``.var`` is an error naming the columns."""
    if gene_symbols is None:
        return [str(g) for g in genes]
    if gene_symbols not in adata.var.columns:
        raise KeyError(f"gene_symbols={gene_symbols!r} is not a column of adata.var; available: "
                       f"{', '.join(map(str, adata.var.columns)) or 'none'}")
    column = adata.var[gene_symbols].to_numpy()
    return [str(column[i]) for i in gene_columns(adata, genes)]
