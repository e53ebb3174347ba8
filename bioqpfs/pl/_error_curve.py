from __future__ import annotations

import numpy as np

from ._utils import finish, new_axes


def error_curve(df, *, band="sd", methods=None, logx=None, ax=None, show=None, save=None, title=None,
                figsize=(5, 3.5)):
    """Cross-validated error against panel size, one line per method with a shaded band.

    Parameters
    ----------
    df : DataFrame
        From :func:`bioqpfs.evaluate.error_curve` or :func:`bioqpfs.evaluate.compare`
        (columns ``method``, ``n_genes``, ``mean_error``, ``sd_error``, ``se_error``).
    band : {"sd", "se", None}
        Shade mean +- the fold standard deviation (default), +- its standard error, or nothing.
        The band is clipped to [0, 1].
    methods : list of str, optional
        Which methods to draw, in this order (default all, in table order).
    logx : bool, optional
        Log-scale panel size; default when the sizes span a factor of 10 or more.
    ax, show, save, title, figsize
        As in scanpy: ``show=False`` returns the Axes.

    Returns
    -------
    Axes or None
        One ``Line2D`` per method (label = method), one filled band per method.
    """
    need = {"method", "n_genes", "mean_error"}
    if not need <= set(df.columns):
        raise ValueError(f"df needs columns {sorted(need)} (use bioqpfs.evaluate.error_curve); got {list(df.columns)}")
    if df.empty:
        raise ValueError("df has no rows: nothing to plot (did every panel size exceed the genes the methods ranked?)")
    if band not in ("sd", "se", None):
        raise ValueError(f"band must be 'sd', 'se' or None, got {band!r}")
    present = list(dict.fromkeys(df["method"]))
    methods = present if methods is None else list(methods)
    missing = [m for m in methods if m not in present]
    if missing:
        raise ValueError(f"method(s) {missing} not in df; present: {present}")
    ax = new_axes(ax, figsize)
    for i, m in enumerate(methods):
        d = df[df["method"] == m].sort_values("n_genes")
        x = d["n_genes"].to_numpy(dtype=float)
        y = d["mean_error"].to_numpy(dtype=float)
        (line,) = ax.plot(x, y, marker="o", ms=4, color=f"C{i}", label=str(m))
        if band is not None and f"{band}_error" in d:
            s = np.nan_to_num(d[f"{band}_error"].to_numpy(dtype=float))
            ax.fill_between(x, np.clip(y - s, 0, 1), np.clip(y + s, 0, 1), color=line.get_color(), alpha=0.15, lw=0)
    sizes = df["n_genes"].to_numpy(dtype=float)
    if logx is None:
        logx = sizes.max() / max(sizes.min(), 1) >= 10
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel("number of genes")
    what = "error rate"
    if "cv" in df and "classifier" in df:
        cv = str(df["cv"].iloc[0])
        what = f"{'leave-one-out' if cv == 'loo' else cv + '-fold'} CV error ({df['classifier'].iloc[0]})"
    ax.set_ylabel(what)
    ax.set_ylim(bottom=0)
    if title:
        ax.set_title(title)
    ax.legend(frameon=False, fontsize=8)
    return finish(ax, show, save)
