"""Deterministic rankings that do not depend on floating-point noise.

Two genes whose scores are equal in exact arithmetic (copies of each other, genes with the same
contingency table, symmetric genes of an eigenvector) get values that differ by round-off, and the
round-off depends on the order of the operations: two faithful implementations (or one on two
machines, BLAS builds, block sizes) then order them differently.  Every ranking in bioqpfs
therefore first makes values closer than a relative tolerance exactly equal (:func:`snap_ties`) and
only then applies its stable tie rule (:func:`rank_descending`): the next key, and finally the
lower index.
"""
from __future__ import annotations

import numpy as np

__all__ = ["RANK_REL_TOL", "snap_ties", "rank_descending", "round_robin"]

#: values closer than this, relative to the largest magnitude among those compared, are ties.
#: Information and correlation scores are computed in float64 to ~1e-15 relative; solver weights
#: to ~1e-12 and better: 1e-9 is far above the noise and far below any real difference.  Not so for exact
#: copies under a QP made nearly singular on purpose (EQPFS's and the default recipe's psd shift leave a
#: curvature of ~1e-9 along the copies' difference): their weights differ by 1e-8 - 1e-6 relative, so the
#: order among copies there is the solver's (deterministic for the same input, not by index); a QP with a
#: singular Q (``psd_fix="none"``) puts a copy's weight on whichever copy its active set reaches.
RANK_REL_TOL = 1e-9


def snap_ties(x, rel_tol=RANK_REL_TOL):
    """Make values that differ by less than ``rel_tol * max|x|`` exactly equal (to the largest).

    The values are sorted and every run of consecutive gaps below the tolerance becomes one value
    (so a long chain of tiny gaps is one tie; rounding to fixed decimals instead would split pairs
    that straddle a rounding boundary).  Non-finite values are left as they are.  Returns a new
    float64 array.
    """
    x = np.array(x, dtype=np.float64)
    finite = np.isfinite(x)
    if np.count_nonzero(finite) < 2 or rel_tol <= 0:
        return x
    xf = x[finite]
    order = np.argsort(-xf, kind="stable")
    xs = xf[order]
    new_group = np.concatenate([[True], (xs[:-1] - xs[1:]) > rel_tol * np.max(np.abs(xs))])
    first = np.maximum.accumulate(np.where(new_group, np.arange(xs.size), 0))
    snapped = np.empty_like(xf)
    snapped[order] = xs[first]
    x[finite] = snapped
    return x


def rank_descending(keys, index, rel_tol=RANK_REL_TOL):
    """Positions that sort items by ``keys[0]`` decreasing, then ``keys[1]`` decreasing, ..., then ``index`` increasing.

    Parameters
    ----------
    keys : sequence of array-like (n,)
        Scores of the n items, most important first; each is snapped with :func:`snap_ties` (among
        these n items) before sorting.
    index : array-like of int (n,)
        The final tie-break (e.g. the gene indices).
    rel_tol : float

    Returns
    -------
    order : ndarray of int (n,), positions into the n items.
    """
    index = np.asarray(index)
    cols = [index] + [-snap_ties(k, rel_tol) for k in reversed(list(keys))]
    return np.lexsort(cols)


def round_robin(rankings, n=None, scores=None, min_relative=0.0):
    """Interleave per-group rankings: round r adds the r-th item of every group in turn, unless already taken.

    After r full rounds the result is the union of the groups' top-r lists (scanpy's round-robin of marker
    lists): an item ranked r-th by two groups counts for both, so a shared marker covers two groups with one
    slot and a panel of fewer items than groups can still reach every group.

    With ``scores`` and ``min_relative > 0`` a group waits while its next item is weak: in each round, a group
    whose next (untaken) item scores below ``min_relative`` times the best next item of the round adds nothing
    and keeps that item for a later round, so a group with no real marker (every item near 0) does not fill
    every other slot with noise while the others still have strong items.

    Parameters
    ----------
    rankings : sequence of array-like of int
        One ranking per group, best first (they may share items and differ in length).
    n : int, optional
        Stop after this many items (default: until every ranking is exhausted).
    scores : sequence of array-like of float, optional
        Per group, a score for every item (indexed by item), e.g. the group's relevance.
    min_relative : float in [0, 1)
        The waiting threshold relative to the round's best next item (0: the plain round-robin).

    Returns
    -------
    order : ndarray of int
        The interleaved items, each once.
    owner : ndarray of int
        For each item of ``order``, the group that added it (the first group, in order, ranking it r-th).
    """
    lists = [np.asarray(r, dtype=np.int64) for r in rankings]
    gated = scores is not None and min_relative > 0
    if gated and not 0 <= min_relative < 1:
        raise ValueError(f"min_relative must be in [0, 1), got {min_relative!r}")
    pos = [0] * len(lists)
    taken, order, owner = set(), [], []
    while n is None or len(order) < n:
        live = [g for g in range(len(lists)) if pos[g] < lists[g].size]
        if not live:
            break
        if gated:
            fresh = [float(scores[g][lists[g][pos[g]]]) for g in live if int(lists[g][pos[g]]) not in taken]
            bar = min_relative * max(fresh, default=0.0)
        for g in live:
            item = int(lists[g][pos[g]])
            if item in taken:  # ranked r-th here and already in: it covers this group too
                pos[g] += 1
            elif not gated or float(scores[g][item]) >= bar:
                if n is not None and len(order) >= n:
                    break
                taken.add(item)
                order.append(item)
                owner.append(g)
                pos[g] += 1
    return np.asarray(order, dtype=np.int64), np.asarray(owner, dtype=np.int64)
