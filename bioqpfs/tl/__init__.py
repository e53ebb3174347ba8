"""AnnData face: tools that read an AnnData and write results into ``.var`` / ``.uns``."""
from ._select_genes import select_genes

__all__ = ["select_genes"]
