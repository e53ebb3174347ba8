"""Read results that :mod:`bioqpfs.tl` stored in an AnnData back as tidy tables."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._anndata import key_columns

if TYPE_CHECKING:
    import pandas as pd
    from anndata import AnnData

__all__ = ["selection_df"]


def selection_df(adata: AnnData, key: str = "qpfs", *, ranked_only: bool = True) -> pd.DataFrame:
    """Tidy DataFrame of a stored selection: gene, rank, weight, selected (+ method-specific columns).

    Rows are in rank order; genes without a rank are dropped unless ``ranked_only=False``.
    The columns are the ``.var`` columns bioqpfs wrote under ``key`` (``.uns[key]["var_columns"]``)
    with the ``<key>_`` prefix removed; other ``<key>_*`` columns of the user are left out.
    """
    prefix = f"{key}_"
    needed = [f"{key}_rank", f"{key}_weight", f"{key}_selected"]
    missing = [c for c in needed if c not in adata.var.columns]
    if missing:
        raise KeyError(f"no selection stored under key {key!r} (missing .var columns {missing}); "
                       "run bioqpfs.tl.select_genes(..., key_added=key) first")
    # the columns bioqpfs wrote under key (never a user's <key>_* column, nor a longer key's "a_b_*");
    # without a .uns record, the three standard ones
    cols = key_columns(adata, key) or needed
    df = adata.var[cols].copy()
    df.columns = [c[len(prefix):] for c in cols]
    df.insert(0, "gene", adata.var_names.to_numpy())
    if ranked_only:
        df = df[np.isfinite(df["rank"].to_numpy(dtype=float))]
    df = df.sort_values("rank", kind="stable", na_position="last").reset_index(drop=True)
    first = ["gene", "rank", "weight", "selected"]
    return df[first + [c for c in df.columns if c not in first]]
