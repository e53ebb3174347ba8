"""Plots of what :mod:`bioqpfs.tl` stored and :mod:`bioqpfs.evaluate` computed (matplotlib).

Like ``scanpy.pl``: every function takes ``show``/``ax``/``save``; with ``show=False`` it returns
the Axes (or, for :func:`panel`, scanpy's dict of Axes) instead of showing the figure.

- :func:`weights` -- ranked weight curve with the panel cut;
- :func:`error_curve` -- cross-validated error vs panel size, one line per method with sd bands;
- :func:`redundancy` -- redundancy matrix Q (MI or |corr|) among the panel's genes;
- :func:`panel` -- the panel's expression by group (scanpy dot plot, heat map or matrix plot).
"""
from ._error_curve import error_curve
from ._panel import panel
from ._redundancy import redundancy
from ._weights import weights

__all__ = ["weights", "error_curve", "redundancy", "panel"]
