"""bioqpfs: global selection of small, non-redundant, class-relevant gene panels.

>>> import bioqpfs
>>> adata = bioqpfs.datasets.srbct()
>>> bioqpfs.tl.select_genes(adata, "class", method="qpfs", n_genes=20)   # doctest: +SKIP
"""
from . import datasets, evaluate, get, measures, pl, tl  # light: matplotlib/scanpy load inside the plot functions
from ._io import read_lazy
from ._registry import DEFAULT_PANEL, batch_methods, hierarchy_methods, methods, select
from ._selection import Selection
from .selectors.qpfs import qpfs
from .selectors.spec_cmi import qip_objective, spec_cmi

__version__ = "0.1.0"
__all__ = ["read_lazy", "select", "methods", "batch_methods", "hierarchy_methods", "DEFAULT_PANEL", "qpfs", "spec_cmi", "qip_objective", "Selection", "measures", "tl", "get", "datasets", "evaluate", "pl", "estimators"]


def __getattr__(name):
    # the sklearn face imports scikit-learn, so it loads on first use (bioqpfs.estimators) only
    if name == "estimators":
        import importlib

        return importlib.import_module(f"{__name__}.estimators")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
