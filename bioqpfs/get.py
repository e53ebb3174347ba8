"""Read results that :mod:`bioqpfs.tl` stored in an AnnData back as tidy tables."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._anndata import key_columns, selection_key, stored_keys

if TYPE_CHECKING:
    import pandas as pd
    from anndata import AnnData

__all__ = ["selection_df"]


def selection_df(adata: AnnData, key: str | None = None, *, ranked_only: bool = True,
                 gene_symbols: str | None = None) -> pd.DataFrame:
    """Tidy DataFrame of a stored selection: gene, rank, weight, selected (+ method-specific columns).

    Rows are in rank order; genes without a rank are dropped unless ``ranked_only=False``.
    The columns are the ``.var`` columns bioqpfs wrote under ``key`` (``.uns[key]["var_columns"]``)
    with the ``<key>_`` prefix removed; other ``<key>_*`` columns of the user are left out.  ``key``: default
    the key :func:`bioqpfs.tl.select_genes` stores under by default (``"bioqpfs"``) when present, else the one
    stored selection.  Rank, weight and selected are read as numbers and booleans, also from a ``.var`` whose
    columns became strings (a CSV round trip), so that the rows are in rank order, not in text order.
    ``gene_symbols``: a column of ``adata.var`` (e.g. symbols when ``var_names`` are Ensembl IDs) added after
    ``gene`` under its own name, as in scanpy's ``sc.get.rank_genes_groups_df(..., gene_symbols=)``.
    """
    key = selection_key(adata, key)
    if gene_symbols is not None and gene_symbols not in adata.var.columns:
        raise KeyError(f"gene_symbols={gene_symbols!r} is not a column of adata.var; available: "
                       f"{', '.join(map(str, adata.var.columns)) or 'none'}")
    prefix = f"{key}_"
    needed = [f"{key}_rank", f"{key}_weight", f"{key}_selected"]
    missing = [c for c in needed if c not in adata.var.columns]
    if missing:
        others = [k for k in stored_keys(adata) if k != key]
        raise KeyError(f"no selection stored under key {key!r} (missing .var columns {missing}); "
                       + (f"selections are stored under {', '.join(map(repr, others))}: pass key=, or "
                          if others else "") + "run bioqpfs.tl.select_genes(..., key_added=key) first")
    # the columns bioqpfs wrote under key (never a user's <key>_* column, nor a longer key's "a_b_*");
    # without a .uns record, the three standard ones
    cols = key_columns(adata, key) or needed
    df = adata.var[cols].copy()
    df.columns = [c[len(prefix):] for c in cols]
    df.insert(0, "gene", adata.var_names.to_numpy())
    if gene_symbols is not None:
        if str(gene_symbols) in df.columns:
            raise ValueError(f"gene_symbols={gene_symbols!r} is also a column of the table ({', '.join(df.columns)}); "
                             "copy the symbols to a .var column of another name")
        df.insert(1, str(gene_symbols), adata.var[gene_symbols].to_numpy())
    for name, kind in (("rank", "number"), ("weight", "number"), ("selected", "bool")):
        df[name] = _typed(df[name], kind, f"{key}_{name}")
    if ranked_only:
        df = df[np.isfinite(df["rank"].to_numpy())]
    df = df.sort_values("rank", kind="stable", na_position="last").reset_index(drop=True)
    first = ["gene", *([str(gene_symbols)] if gene_symbols is not None else []), "rank", "weight", "selected"]
    return df[first + [c for c in df.columns if c not in first]]


def _typed(column, kind, name):
    """A stored column as float64 numbers (``kind="number"``) or booleans (``"bool"``): as written by tl (NaN: no
    rank), or as strings after a round trip through text ("3", "3.0", "nan"; "True"/"False"); anything else is
    refused by name (sorting text would put rank 10 before rank 2)."""
    import pandas as pd

    missing = column.isna().to_numpy()
    if kind == "bool":
        if column.dtype == bool:
            return column
        text = column.map(lambda v: str(v).strip().lower())
        flags = text.map({"true": True, "false": False, "1": True, "0": False, "1.0": True, "0.0": False})
        bad = flags.isna().to_numpy()
        if bad.any():
            raise ValueError(f".var[{name!r}] holds {column[bad].iloc[0]!r}, not True/False; it was not written by "
                             "bioqpfs.tl (or was changed since): run tl.select_genes again")
        return flags.astype(bool)
    if isinstance(column.dtype, np.dtype) and column.dtype.kind in "fiub":  # as tl wrote it
        return column.astype(np.float64)
    numbers = pd.to_numeric(column, errors="coerce")
    numbers = pd.Series(np.asarray(numbers.to_numpy(dtype=np.float64, na_value=np.nan)), index=column.index,
                        name=column.name)
    text = column.map(lambda v: str(v).strip().lower())
    bad = numbers.isna().to_numpy() & ~missing & ~text.isin(["nan", "none", "", "<na>"]).to_numpy()
    if bad.any():
        raise ValueError(f".var[{name!r}] holds {column[bad].iloc[0]!r}, not a number; it was not written by "
                         "bioqpfs.tl (or was changed since): run tl.select_genes again")
    return numbers
