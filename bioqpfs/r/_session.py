"""The R session of the rpy2 route: rpy2 imported lazily, and the R helpers of ``helpers.R`` loaded once.

Nothing here runs at import: importing :mod:`bioqpfs.r` never starts R.  Every R call goes through
:func:`call` inside ``localconverter(default_converter)`` (the anndata2ri habit), so rpy2's global
conversion rules are never changed.
"""
from __future__ import annotations

from importlib import resources

#: The containers the R face converts, in the order they are tested (``r_class`` in ``helpers.R``).
CLASSES = ("SingleCellExperiment", "SummarizedExperiment", "ExpressionSet", "matrix")

_state: dict = {}


def rpy2_modules():
    """Import rpy2 lazily; a clear message when it is missing.

    Returns
    -------
    tuple
        ``(rpy2.robjects, default_converter, numpy2ri, localconverter)``.
    """
    try:
        import rpy2.robjects as ro
        from rpy2.robjects import default_converter, numpy2ri
        from rpy2.robjects.conversion import localconverter
    except ImportError as err:  # pragma: no cover - depends on the installation
        raise ImportError(
            "bioqpfs.r needs rpy2 and R: pip install 'bioqpfs[r]' (rpy2 3.5.17 for R 4.2; building it needs "
            "the Debian packages r-base-core libpcre2-dev libblas-dev)"
        ) from err
    return ro, default_converter, numpy2ri, localconverter


def _helpers():
    """The R helper functions (a named R list evaluated from the shipped ``helpers.R``), created on first use."""
    if "helpers" not in _state:
        ro, default_converter, _, localconverter = rpy2_modules()
        source = resources.files(__package__).joinpath("helpers.R").read_text(encoding="utf-8")
        with localconverter(default_converter):
            ro.r('suppressPackageStartupMessages({library(methods); requireNamespace("S4Vectors", quietly = TRUE)})')
            _state["helpers"] = ro.r(source)
    return _state["helpers"]


def call(name, *args):
    """Call the R helper ``name`` of ``helpers.R`` on R objects ``args``; returns the R result."""
    ro, default_converter, _, localconverter = rpy2_modules()
    h = _helpers()
    with localconverter(default_converter):
        return h.rx2(name)(*args)


def r_class(robj):
    """Which of :data:`CLASSES` ``robj`` is (an error naming its R class otherwise)."""
    return str(call("r_class", robj)[0])
