"""Pieces every selector shares: validated inputs, Q and F from the measures, constant genes."""
from __future__ import annotations

import time
import warnings

import numpy as np

from .. import measures
from .._kernels import correlation as _corr
from .._validation import check_labels, check_matrix, describe_indices

SIMILARITIES = ("mi", "correlation")
RELEVANCES = ("mi", "hall", "mst", "mst_cpx")


def prepare(X, y, feature_names=None):
    """Validate (X, y); return (X, y_codes, classes, constant_mask)."""
    X = check_matrix(X, feature_names=feature_names)
    y_codes, classes = check_labels(y, X.shape[0], name="y")
    _, ss = _corr.column_moments(X)
    constant = ss <= 0
    return X, y_codes, classes, constant


def warn_constant(constant, feature_names):
    idx = np.flatnonzero(constant)
    if idx.size:
        warnings.warn(
            f"{idx.size} constant gene(s) carry no information and get weight 0, ranked last: "
            f"{describe_indices(idx, feature_names)}",
            UserWarning,
            stacklevel=3,
        )


def similarity_and_relevance(X, y_codes, *, similarity, relevance, discretization, n_bins, base):
    """Q (|Pearson| or MI) and F for the genes of X.

    ``relevance`` may be a kind ("mi", "hall") or a precomputed vector.  Defaults follow the
    QPFS paper (section 2.1): MI redundancy with MI relevance, correlation with Hall's relevance.
    """
    t0 = time.perf_counter()
    if similarity not in SIMILARITIES:
        raise ValueError(f"unknown similarity {similarity!r}; choose one of {SIMILARITIES}")
    if relevance is None:
        relevance = "mi" if similarity == "mi" else "hall"
    codes = None
    if similarity == "mi" or (isinstance(relevance, str) and relevance == "mi"):
        codes, levels = measures._codes(X, discretization, n_bins=n_bins, y_codes=y_codes)
    if similarity == "mi":
        from .._kernels import information as _info

        measures._output_guard(X.shape[1], X.shape[1], np.float64, "mutual information")
        Q = _info.pairwise_information(_info.CodeTable(codes, levels), None, "mi", base=base)
    else:
        measures._output_guard(X.shape[1], X.shape[1], np.float64, "correlation")
        Q = _corr.abs_pearson(X)
    if isinstance(relevance, str):
        if relevance == "mi":
            F = measures.relevance(codes, y_codes, kind="mi", base=base, discretization=None)
        elif relevance == "hall":
            F = _corr.hall_relevance(X, y_codes)
        elif relevance in ("mst", "mst_cpx"):  # Sousa et al. section 3.1, see bioqpfs._kernels.mst
            F = measures.relevance(X, y_codes, kind=relevance)
        else:
            raise ValueError(f"unknown relevance {relevance!r}; choose one of {RELEVANCES} or pass a vector")
    else:
        F = np.asarray(relevance, dtype=np.float64)
        if F.shape != (X.shape[1],):
            raise ValueError(f"relevance vector has shape {F.shape}; expected ({X.shape[1]},), one value per gene")
        if not np.isfinite(F).all() or (F < 0).any():
            raise ValueError("relevance vector must be finite and non-negative")
        relevance = "user"
    return Q, F, relevance, time.perf_counter() - t0
