"""Fixed-size subset search: best-improvement one-in/one-out swaps on a quadratic set function.

    value(S) = lin * sum_{i in S} a_i + quad * sum_{i, j in S} Q_ij,      |S| = k fixed,

with Q symmetric.  Two users share this one implementation:

* SDP_CMI / SPEC_CMI polish (Nguyen et al., KDD 2014, QIP of eq. 18: ``quad = 1``, ``lin = 0``):
  the panel extracted from a relaxation is improved on the true x^T Q x;
* k-aware QPFS panel extraction (Rodriguez-Lujan et al., JMLR 2010, eq. 6 restricted to the uniform
  weights 1/k on S: ``lin = alpha / k``, ``quad = -(1 - alpha) / (2 k^2)``, ``a = F``).

Only the k rows ``Q[S]`` are ever read (k x M), so Q may be a large dense array (float32 is fine,
sums are float64), a memory map, or any object supporting integer-array row access ``Q[rows]``
and ``.shape``.  Swapping member i out and outsider j in changes the value by

    delta(i, j) = lin (a_j - a_i) + quad (2 (g_j - Q_ji) + Q_jj - 2 g_i + Q_ii),   g = Q[:, S] 1,

so each iteration costs O(k M): g is recomputed from the k rows held (no drift), and the best
delta over all (i, j) pairs is taken.  The search stops at a local optimum: no single swap
improves the value by more than ``rel_tol`` times the magnitude of its terms.
"""
from __future__ import annotations

import numpy as np

from .ranking import rank_descending

__all__ = ["swap_search", "subset_value", "SWAP_REL_TOL"]

#: relative improvement a swap must exceed (of ``|lin| sum |a_S| + |quad| sum |Q_SS|``); keeps
#: round-off from cycling between equal-valued sets.
SWAP_REL_TOL = 1e-9


def _index_array(values, M, what):
    arr = np.asarray(values)
    if arr.dtype == bool:
        if arr.shape != (M,):
            raise ValueError(f"{what}: a boolean mask must have one entry per feature ({M}), got shape {arr.shape}")
        return np.flatnonzero(arr)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a 1-d list of feature indices, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not (np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr))):
            raise TypeError(f"{what} must hold integer feature indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    bad = arr[(arr < 0) | (arr >= M)]
    if bad.size:
        raise ValueError(f"{what}: index {int(bad[0])} is out of range for {M} features (valid: 0..{M - 1})")
    return arr


def _diagonal(Q, M, diag):
    if diag is None:
        if not hasattr(Q, "diagonal"):
            raise TypeError("Q has no .diagonal(); pass diag= (the M diagonal entries Q_ii)")
        diag = Q.diagonal()
    d = np.asarray(diag, dtype=np.float64).ravel()
    if d.shape != (M,):
        raise ValueError(f"the diagonal of Q must have {M} entries, got {d.size}")
    return d


def _rows(Q, idx):
    """``Q[idx]`` as a dense float64 array (ndarray, memory map, scipy.sparse, or any row-indexable object)."""
    rows = Q[idx]
    if hasattr(rows, "toarray"):
        rows = rows.toarray()
    return np.asarray(rows, dtype=np.float64)


def subset_value(Q, a, S, *, quad=1.0, lin=1.0):
    """``lin * sum_{i in S} a_i + quad * sum_{i,j in S} Q_ij`` evaluated directly in float64."""
    S = np.asarray(S, dtype=np.int64)
    block = _rows(Q, np.sort(S))[:, np.sort(S)]
    lin_part = 0.0 if a is None else float(np.asarray(a, dtype=np.float64)[S].sum())
    return float(lin * lin_part + quad * block.sum())


def swap_search(Q, a, start, *, quad=1.0, lin=1.0, candidates=None, fixed=None, max_swaps=None, diag=None,
                rel_tol=SWAP_REL_TOL):
    r"""Improve a k-subset by best-improvement one-in/one-out swaps until none improves.

    Parameters
    ----------
    Q : array-like (M, M), symmetric
        Dense ndarray (float32 or float64), scipy.sparse matrix, or anything with ``.shape`` and row
        access ``Q[rows]`` (rows an increasing integer array).  Only ``Q[S]`` rows are read.
    a : array-like (M,) or None
        Linear coefficients (None: all zero, e.g. the SPEC_CMI QIP).
    start : array-like of int
        The initial subset (distinct indices); its size k is kept.
    quad, lin : float
        Coefficients of the quadratic and linear terms.
    candidates : array-like of int or bool mask, optional
        Features allowed to *enter* the subset (default: all).  Members of ``start`` outside it may
        leave but not come back.
    fixed : array-like of int, optional
        Members of ``start`` that may never leave (forced genes).
    max_swaps : int, optional
        Stop after this many swaps (default: until a local optimum; the value rises strictly at
        every swap, so the search always ends).
    diag : array-like (M,), optional
        The diagonal Q_ii when Q has no ``.diagonal()`` method.
    rel_tol : float
        A swap is taken only if it improves the value by more than ``rel_tol`` times
        ``|lin| sum |a_S| + |quad| sum |Q_SS|``.

    Returns
    -------
    S : ndarray of int (k,)
        The final subset, members ordered by marginal contribution
        ``value(S) - value(S \ {i}) = lin a_i + quad (2 g_i - Q_ii)``, best first; contributions
        equal up to ``rel_tol`` (relative to the largest) are ties, broken by lower index.
    value : float
        value(S), evaluated directly in float64 from ``Q[S]``.
    n_swaps : int
        Number of swaps made.

    Notes
    -----
    Among equally good swaps the one with the lowest (leaving index, entering index) is taken, and
    the result does not depend on the order of ``start``.  The result is a local optimum of the
    swap neighbourhood, not necessarily the global optimum (that is NP-hard: the densest
    k-subgraph problem for ``lin = 0``).
    """
    shape = getattr(Q, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"Q must be a square (M, M) matrix, got shape {shape}")
    M = int(shape[0])
    for name, v in (("quad", quad), ("lin", lin), ("rel_tol", rel_tol)):
        if not np.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
    if rel_tol < 0:
        raise ValueError(f"rel_tol must be >= 0, got {rel_tol!r}")
    if a is None:
        a = np.zeros(M)
    else:
        a = np.asarray(a, dtype=np.float64).ravel()
        if a.shape != (M,):
            raise ValueError(f"a must have one entry per feature ({M}), got {a.size}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"a has non-finite entries (e.g. index {int(np.flatnonzero(~np.isfinite(a))[0])})")
    S = _index_array(start, M, "start")
    if S.size == 0:
        raise ValueError("start is empty: give the initial subset (its size k is kept)")
    uniq, counts = np.unique(S, return_counts=True)
    if uniq.size != S.size:
        raise ValueError(f"start has repeated indices (e.g. {int(uniq[counts > 1][0])}); give k distinct features")
    S = uniq  # sorted: the search does not depend on the order of start
    fixed_set = np.zeros(M, dtype=bool)
    if fixed is not None:
        f = _index_array(fixed, M, "fixed")
        outside = np.setdiff1d(f, S)
        if outside.size:
            raise ValueError(f"fixed feature {int(outside[0])} is not in start; fixed members must be part of the "
                             "initial subset")
        fixed_set[f] = True
    may_enter = np.ones(M, dtype=bool)
    if candidates is not None:
        may_enter[:] = False
        may_enter[_index_array(candidates, M, "candidates")] = True
    if max_swaps is not None:
        if isinstance(max_swaps, bool) or not isinstance(max_swaps, (int, np.integer)) or max_swaps < 0:
            raise ValueError(f"max_swaps must be a non-negative integer or None, got {max_swaps!r}")
    d = _diagonal(Q, M, diag)
    if not np.all(np.isfinite(d)):
        raise ValueError("Q has non-finite diagonal entries")

    R = _rows(Q, S)  # (k, M) rows of the members
    if not np.all(np.isfinite(R)):
        raise ValueError("Q has non-finite entries in the rows of the start subset")
    n_swaps = 0
    while max_swaps is None or n_swaps < max_swaps:
        g = R.sum(axis=0)
        leave = np.flatnonzero(~fixed_set[S])
        enter_mask = may_enter.copy()
        enter_mask[S] = False
        enter = np.flatnonzero(enter_mask)
        if leave.size == 0 or enter.size == 0:
            break
        gain_in = lin * a[enter] + quad * (2.0 * g[enter] + d[enter])  # value of adding j to S
        loss_out = lin * a[S[leave]] + quad * (2.0 * g[S[leave]] - d[S[leave]])  # contribution of i
        delta = gain_in[None, :] - loss_out[:, None] - 2.0 * quad * R[np.ix_(leave, enter)]
        best = int(np.argmax(delta))  # rows by leaving index, columns by entering index: lowest pair first
        p, q = divmod(best, enter.size)
        scale = abs(lin) * np.abs(a[S]).sum() + abs(quad) * np.abs(R[:, S]).sum()
        if not delta[p, q] > rel_tol * scale:
            break
        S = S.copy()
        S[leave[p]] = enter[q]
        order = np.argsort(S)
        S = S[order]
        R[leave[p]] = _rows(Q, np.array([enter[q]]))[0]
        R = R[order]
        if not np.all(np.isfinite(R[np.searchsorted(S, enter[q])])):
            raise ValueError(f"Q has non-finite entries in row {int(enter[q])}")
        n_swaps += 1

    g = R.sum(axis=0)
    contrib = lin * a[S] + quad * (2.0 * g[S] - d[S])
    S_out = S[rank_descending([contrib], S, rel_tol)]
    value = float(lin * a[S].sum() + quad * R[:, S].sum())
    return S_out, value, n_swaps
