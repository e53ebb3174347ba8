"""Bundled real gene-expression datasets, loadable offline as AnnData (class in ``.obs["class"]``).

Sources and licences: ``data/README.md`` in the repository.  All three come from the
MIT-licensed ``datamicroarray`` R package (ramhiser/datamicroarray @a95f6f6).
"""
from __future__ import annotations

from importlib import resources

import numpy as np

__all__ = ["srbct", "colon", "leukemia", "available", "load"]

_INFO = {
    "srbct": ("srbct63.npz", "Khan et al. 2001 small round blue cell tumours, training set: 63 samples x 2,308 genes, "
                             "4 classes (EWS, RMS, NB, BL); values as shipped in datamicroarray (not standardised here)."),
    "colon": ("colon.npz", "Alon et al. 1999 colon tissue: 62 samples x 2,000 genes, normal vs tumour; raw intensities."),
    "leukemia": ("leukemia.npz", "Golub et al. 1999 leukaemia: 72 samples x 7,129 probes, ALL vs AML; raw Affymetrix values."),
}


def available() -> dict[str, str]:
    """Names of the bundled datasets with a one-line description."""
    return {k: v[1] for k, v in _INFO.items()}


def load(name: str):
    """Load a bundled dataset by name as AnnData (samples x genes)."""
    import anndata as ad
    import pandas as pd

    if not isinstance(name, str):   # a list or a number: "unhashable type" from the lookup before
        raise TypeError(f"name must be one dataset name (a str), got {name!r}; available: {', '.join(_INFO)}")
    if name not in _INFO:
        raise ValueError(f"unknown dataset {name!r}; available: {', '.join(_INFO)}")
    fname, desc = _INFO[name]
    with resources.files(__package__).joinpath(fname).open("rb") as fh, np.load(fh, allow_pickle=False) as d:
        X = d["X"].astype(np.float32)
        y = d["y"]
        class_names = d["class_names"].astype(str)
        genes = d["feature_names"].astype(str)
    # some probe ids repeat in the sources: make names unique (keep the first as is)
    genes = pd.Index(genes)
    if not genes.is_unique:
        genes = pd.Index(ad.utils.make_index_unique(genes))
    obs = pd.DataFrame({"class": pd.Categorical(class_names[y], categories=sorted(set(class_names)))},
                       index=[f"{name}_{i}" for i in range(X.shape[0])])
    adata = ad.AnnData(X=X, obs=obs, var=pd.DataFrame(index=genes))
    adata.uns["dataset"] = {"name": name, "description": desc, "source": "ramhiser/datamicroarray @a95f6f6",
                            "licence": "MIT"}
    return adata


def srbct():
    """Khan 2001 SRBCT training set (63 x 2,308, 4 tumour classes in ``obs["class"]``)."""
    return load("srbct")


def colon():
    """Alon 1999 colon (62 x 2,000, normal vs tumour in ``obs["class"]``)."""
    return load("colon")


def leukemia():
    """Golub 1999 leukaemia (72 x 7,129, ALL vs AML in ``obs["class"]``)."""
    return load("leukemia")
