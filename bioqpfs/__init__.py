"""bioqpfs: global selection of small, non-redundant, class-relevant gene panels.

>>> import bioqpfs
>>> adata = bioqpfs.datasets.srbct()
>>> bioqpfs.tl.select_genes(adata, "class", method="qpfs", n_genes=20)   # doctest: +SKIP
"""
from . import datasets, get, measures, tl
from ._registry import methods, select
from ._selection import Selection
from .selectors.qpfs import qpfs

__version__ = "0.1.0"
__all__ = ["select", "methods", "qpfs", "Selection", "measures", "tl", "get", "datasets"]
