from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..evaluate import suggest_n_genes
from ._utils import check_save, finish, new_axes

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Literal

    import pandas as pd
    from matplotlib.axes import Axes

    from .._typing import PathLike

#: how the scores of :func:`bioqpfs.evaluate.error_curve` are named on the y axis
_SCORE_LABELS = {"error": "error", "balanced_accuracy": "balanced accuracy", "f1_macro": "macro-F1",
                 "accuracy": "accuracy"}


def error_curve(df: pd.DataFrame, *, score: str | None = None, band: Literal["sd", "se"] | None = "sd",
                methods: Sequence[str] | None = None, suggest: bool | None = None, logx: bool | None = None,
                ax: Axes | None = None, show: bool | None = None, save: PathLike | None = None,
                title: str | None = None, figsize: tuple[float, float] = (5, 3.5)) -> Axes | None:
    """Cross-validated score (by default the error) against panel size, one line per method with a shaded band.

    Parameters
    ----------
    df : DataFrame
        From :func:`bioqpfs.evaluate.error_curve` or :func:`bioqpfs.evaluate.compare`
        (columns ``method``, ``n_genes``, ``mean_<score>`` and optionally ``sd_<score>``, ``se_<score>``).
    score : str, optional
        Which score to draw: default the table's ``scoring`` column (the ``scoring=`` given to
        :func:`~bioqpfs.evaluate.error_curve`; ``"error"`` for tables without it).  Any score the table
        holds, e.g. ``"balanced_accuracy"`` or ``"f1_macro"``.  The y axis is labelled with it.
    band : {"sd", "se", None}
        Shade mean +- the fold standard deviation (default), +- its standard error, or nothing.
        The band is clipped to [0, 1] when the score lies in [0, 1].
    methods : list of str, optional
        Which methods to draw, in this order (default all, in table order).
    suggest : bool, optional
        Mark each method's size chosen by the one-standard-error rule
        (:func:`bioqpfs.evaluate.suggest_n_genes` on the drawn ``score``) with a dashed vertical line in
        the method's colour, labelled ``"<method>: one-SE size <k>"`` in the legend.  ``None``
        (default): mark every method the rule applies to (at least two sizes, finite standard
        errors) and skip the others silently; ``True``: mark every drawn method, raising the rule's
        error where it does not apply; ``False``: no marks.
    logx : bool, optional
        Log-scale panel size; default when the sizes span a factor of 10 or more.
    ax, show, save, title, figsize
        As in scanpy: ``show=False`` returns the Axes.

    Returns
    -------
    Axes or None
        One ``Line2D`` per method (label = method), one filled band per method, then (with
        ``suggest``) one vertical ``Line2D`` per marked method.
    """
    check_save(save)
    if score is None:
        score = str(df["scoring"].iloc[0]) if "scoring" in df.columns and len(df) else "error"
    need = {"method", "n_genes", f"mean_{score}"}
    if "fold" in df.columns and f"mean_{score}" not in df.columns:
        raise ValueError("df is the per-fold table (error_curve(..., return_folds=True)'s second table); pass the "
                         "summary table, its first")
    if not need <= set(df.columns):
        have = [c[5:] for c in df.columns if isinstance(c, str) and c.startswith("mean_")]
        raise ValueError(f"df needs columns {sorted(need)} (use bioqpfs.evaluate.error_curve); got {list(df.columns)}"
                         + (f"; scores in this table: {', '.join(have)}" if have else ""))
    if df.empty:
        raise ValueError("df has no rows: nothing to plot (did every panel size exceed the genes the methods ranked?)")
    if suggest not in (None, True, False):
        raise ValueError(f"suggest must be None, True or False, got {suggest!r}")
    if band not in ("sd", "se", None):
        raise ValueError(f"band must be 'sd', 'se' or None, got {band!r}")
    sizes = pd.to_numeric(df["n_genes"], errors="coerce")
    if sizes.isna().any():
        raise ValueError(f"n_genes must be numbers in every row, got {df['n_genes'][sizes.isna()].iloc[0]!r}; pass "
                         "the table error_curve returned")
    df = df.assign(n_genes=sizes)   # a copy: sizes stored as text plot (and sort) as numbers
    dup = df.duplicated(["method", "n_genes"])
    if dup.any():
        row = df[dup].iloc[0]
        raise ValueError(f"df has several rows for method {row['method']!r} at n_genes={row['n_genes']:g}; pass one "
                         "error_curve table (not several concatenated), or label the runs apart")
    present = list(dict.fromkeys(df["method"]))
    methods = present if methods is None else [methods] if isinstance(methods, str) else list(methods)
    missing = [m for m in methods if m not in present]
    if missing:
        raise ValueError(f"method(s) {missing} not in df; present: {present}")
    if not methods or len(set(methods)) < len(methods):   # an empty plot, or a method drawn twice in two colours
        raise ValueError(f"methods must name each method to draw once, got {methods!r}; present: {present}")
    column = pd.to_numeric(df[f"mean_{score}"], errors="coerce")
    empty = [m for m in methods if not np.isfinite(column[df["method"] == m].to_numpy(dtype=float)).any()]
    if empty == methods:   # every line would be blank: an empty plot, silently
        raise ValueError(f"column 'mean_{score}' has no finite value for {'method' if len(empty) == 1 else 'methods'} "
                         f"{', '.join(map(repr, empty))} (all NaN): nothing to draw; check that the scoring worked "
                         "(error_curve's per-fold table, return_folds=True), or draw another score with score=")
    if empty:
        import warnings

        warnings.warn(f"column 'mean_{score}' has no finite value for method(s) {', '.join(map(repr, empty))} "
                      "(all NaN): they are in the legend but draw no line", UserWarning, stacklevel=2)
    ax = new_axes(ax, figsize)
    means = df[f"mean_{score}"].to_numpy(dtype=float)
    unit = bool(np.all((means[np.isfinite(means)] >= 0) & (means[np.isfinite(means)] <= 1)))  # a rate or a [0, 1] score
    lo, hi = (0.0, 1.0) if unit else (-np.inf, np.inf)
    for i, m in enumerate(methods):
        d = df[df["method"] == m].sort_values("n_genes")
        x = d["n_genes"].to_numpy(dtype=float)
        y = d[f"mean_{score}"].to_numpy(dtype=float)
        (line,) = ax.plot(x, y, marker="o", ms=4, color=f"C{i}", label=str(m))
        spread = d[f"{band}_{score}"] if band is not None and f"{band}_{score}" in d else (
            d[f"sd_{score}"] / np.sqrt(d["n_folds"].to_numpy(dtype=float))   # the SE from sd and the folds
            if band == "se" and {f"sd_{score}", "n_folds"} <= set(d.columns) else None)
        if spread is not None:
            s = np.nan_to_num(np.asarray(spread, dtype=float))
            ax.fill_between(x, np.clip(y - s, lo, hi), np.clip(y + s, lo, hi), color=line.get_color(), alpha=0.15,
                            lw=0)
    if suggest is not False:
        for i, m in enumerate(methods):
            try:
                k = suggest_n_genes(df[df["method"] == m], score=score)
            except ValueError:
                if suggest:
                    raise
                continue
            ax.axvline(k, color=f"C{i}", ls="--", lw=1, label=f"{m}: one-SE size {k}")
    sizes = df["n_genes"].to_numpy(dtype=float)
    if logx is None:
        logx = sizes.max() / max(sizes.min(), 1) >= 10
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel("number of genes")
    label = _SCORE_LABELS.get(score, score)
    what = "error rate" if score == "error" else label
    if "cv" in df and "classifier" in df:
        cv = str(df["cv"].iloc[0])
        scheme = "leave-one-out" if cv == "loo" else f"{cv}-fold" if cv.isdigit() else cv
        what = f"{scheme} CV {label} ({df['classifier'].iloc[0]})"
    ax.set_ylabel(what)
    if unit:
        ax.set_ylim(bottom=0, top=1.02 if score != "error" else None)
    if title:
        ax.set_title(title)
    ax.legend(frameon=False, fontsize=8)
    return finish(ax, show, save)
