"""R / Bioconductor face: SummarizedExperiment, SingleCellExperiment, ExpressionSet and matrices.

Two routes reach the same engine (:func:`bioqpfs.tl.select_genes`):

- from Python, with rpy2 (``pip install bioqpfs[r]``): :func:`to_anndata`, :func:`from_anndata`
  and :func:`select_genes` take and return R objects.  rpy2 and the R packages are imported
  lazily, and every conversion runs inside ``localconverter(...)`` (the anndata2ri habit), so
  importing :mod:`bioqpfs.r` never starts R and never changes rpy2's global conversion rules.
- from R, with reticulate (the R package at the repository root, ``selectGenes()``): the R side
  sends the expression matrix as raw little-endian float64 bytes plus its dimensions, and
  :func:`_reticulate_select` rebuilds it with :func:`numpy.frombuffer` and answers with plain
  Python lists and dicts.  No NumPy array ever crosses reticulate, so the route works with NumPy 2
  even though Debian's reticulate 1.28 was compiled against the NumPy 1 C API.

The conversion is our own rather than anndata2ri's: anndata2ri 2.0 cannot convert a plain
SummarizedExperiment (``KeyError: SexpS4``) nor an ExpressionSet.

Layout mapping (R holds genes x samples, AnnData samples x genes):

=====================  =========================================  =========================
AnnData                SummarizedExperiment / SingleCellExperiment ExpressionSet
=====================  =========================================  =========================
``X``                  ``assay(x, assay)`` (default: the first)   ``exprs(x)`` (or ``assay``)
``layers``             the other assays                           other assayData elements
``var`` / ``obs``      ``rowData(x)`` / ``colData(x)``            ``fData(x)`` / ``pData(x)``
``obsm``               ``reducedDims(x)`` (SCE only)              --
``uns``                ``metadata(x)``                            ``notes(x)``
=====================  =========================================  =========================

``uns["bioqpfs_r"]`` records the source class and the assay that became ``X`` so that
:func:`from_anndata` rebuilds the same container by default.

Layout of this package (one conversion direction per file, as zellkonverter's ``SCE2AnnData.R`` /
``AnnData2SCE.R``): ``_to_anndata.py`` (R -> AnnData), ``_from_anndata.py`` (AnnData -> R),
``_select.py`` (:func:`select_genes` on R objects), ``_reticulate.py`` (the R package's entry points),
``_session.py`` (lazy rpy2, the R helpers) and ``helpers.R`` (the R side of the conversions).
"""
from __future__ import annotations

from ._from_anndata import from_anndata

# the R package's entry points (R/selectGenes.R calls them on ``bioqpfs.r``): re-exported, private
from ._reticulate import _INCOMING as _INCOMING
from ._reticulate import _reticulate_discard as _reticulate_discard
from ._reticulate import _reticulate_receive as _reticulate_receive
from ._reticulate import _reticulate_select as _reticulate_select
from ._select import result_columns, select_genes
from ._to_anndata import to_anndata

__all__ = ["to_anndata", "from_anndata", "select_genes", "result_columns"]
