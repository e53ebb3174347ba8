"""Friedman--Rafsky minimum-spanning-tree relevance (Sousa, Oliveira & Cardoso, section 3.1).

The complexity of a labelled sample is the number of edges of its Euclidean minimum spanning tree
(MST) that join samples of different classes (Friedman & Rafsky 1979): few such "cross" edges
mean the classes occupy separate regions.  Two relevance measures are built from it.

``"mst"`` -- one gene at a time.  In one dimension the MST joins neighbours in sorted order, so
the cross count of gene i is the number of adjacent sorted samples with different labels:
O(N log N) per gene, vectorised over genes with one ``argsort`` along the samples per block of
genes.  The paper only says F_i is "inversely proportional" to the count; we use

    F_i = max(0, 1 - R_i / E[R]),      E[R] = (N - 1) (1 - sum_c n_c (n_c - 1) / (N (N - 1))),

where E[R] is the expected cross count of any fixed spanning tree when the labels are permuted
at random (each of the N - 1 edges joins two distinct random samples).  So F = 0 for a gene no
better than chance (or worse), F -> 1 when every class forms one run (R = C - 1), and F lies in
[0, 1] like I(X; C) of a two-class problem in bits.

*Ties* (equal values of a gene) make the MST non-unique: inside a group of tied samples every
edge has length 0 and any tree of the group is optimal, and between consecutive groups any pair of
endpoints is.  Counting the *minimum* over all MSTs would reward ties (a constant gene would get
R = C - 1, "perfect separation"), so we count the *expectation* over the sorted-neighbour chains
obtained by ordering tied samples uniformly at random -- every such chain is an MST.  For a tied
group g of m_g samples with class counts n_gc, and consecutive groups g, g+1,

    E[R] = sum_g [(m_g - 1) - sum_c n_gc (n_gc - 1) / m_g]  +  sum_g [1 - sum_c n_gc n_(g+1)c / (m_g m_(g+1))]

(an adjacent pair inside a random order is a uniform pair of distinct members; the boundary pair is
one uniform member of each group).  Without ties this is exactly the cross count of the unique
MST; a constant gene gets the permutation expectation, i.e. F = 0.

``"mst_cpx"`` -- the relative complexity increase when gene i is removed from the full set,

    Delta f_i = (f_i - f) / f,

with f the cross count of the MST on all genes and f_i that on all genes but i.  Distances are
Euclidean on z-scored genes (``standardize=True``; otherwise the gene with the largest unit
dominates every distance -- the paper does not say).  The leave-one-out squared distances are
downdated, D2_(-i)[u, v] = D2[u, v] - (x_ui - x_vi)^2, inside an O(N^2) Prim kernel (numba,
parallel over genes), so the M leave-one-out MSTs cost O(N^2 M) time and O(N^2) memory in
total.  Ties between distances (duplicate samples) are broken lexicographically by (length,
cross): among the MSTs the one with fewest cross edges is counted, which Prim finds exactly with
the pair keys (duplicates of one class are joined before a cross edge is used).  f = 0 cannot occur
with two or more classes: a spanning tree needs at least C - 1 >= 1 cross edges to connect C
classes, so f = C - 1 is the fully separated case; the division uses max(f, 1) only so that a
single-class call returns f_i - f instead of dividing by zero.  Negative Delta f_i (removing the gene makes the classes *simpler*) is clipped to 0
for use as a non-negative relevance.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .._jit import skip_failed_cache_writes

__all__ = ["cross_edges_1d", "permutation_expectation", "mst_relevance", "mst_cross_count", "mst_cpx",
           "MAX_CPX_WORK"]

#: N^2 * M above which mst_cpx refuses (about a minute of the numba Prim kernel on two cores)
MAX_CPX_WORK = 2e10
_SORT_BUDGET = 64 * 2**20  # bytes of argsort indices per block of genes


def permutation_expectation(y_codes, n_classes=None):
    """Expected number of cross edges of a spanning tree on N samples under random labelling."""
    y_codes = np.asarray(y_codes)
    n = y_codes.size
    counts = np.bincount(y_codes, minlength=n_classes or 0).astype(np.float64)
    return (n - 1) * (1.0 - np.sum(counts * (counts - 1)) / (n * (n - 1)))


@njit(parallel=True, cache=True)
def _chain_cross(values, labels, n_classes):
    """Expected cross count of the sorted chain of every column, ties ordered uniformly at random.

    values, labels : (N, B), each column sorted by value (labels permuted alongside).
    Per tied group, sum_c n_c (n_c - 1) = sum over members of (n_c(member) - 1), and
    sum_c n_prev,c n_c = sum over members of n_prev,c(member).
    """
    n, b = values.shape
    out = np.zeros(b)
    for j in prange(b):
        cur = np.zeros(n_classes)
        prev = np.zeros(n_classes)
        total = 0.0
        start = 0
        prev_start = -1
        while start < n:
            stop = start + 1
            while stop < n and values[stop, j] == values[start, j]:
                stop += 1
            m = stop - start
            for t in range(start, stop):
                cur[labels[t, j]] += 1.0
            if m > 1:
                same = 0.0
                for t in range(start, stop):
                    same += cur[labels[t, j]] - 1.0
                total += (m - 1) - same / m
            if prev_start >= 0:
                match = 0.0
                for t in range(start, stop):
                    match += prev[labels[t, j]]
                total += 1.0 - match / ((start - prev_start) * m)
                for t in range(prev_start, start):
                    prev[labels[t, j]] = 0.0
            for t in range(start, stop):
                prev[labels[t, j]] = cur[labels[t, j]]
            for t in range(start, stop):
                cur[labels[t, j]] = 0.0
            prev_start = start
            start = stop
        out[j] = total
    return out


def cross_edges_1d(X, y_codes, n_classes=None):
    """Cross-class edge count of the 1-D MST of every gene (expectation over tie orders; see module doc).

    Parameters
    ----------
    X : ndarray, shape (N, M), dense.
    y_codes : int array (N,), classes 0..C-1.

    Returns
    -------
    ndarray (M,) of float64.
    """
    X = np.asarray(X)
    y_codes = np.asarray(y_codes, dtype=np.int64)
    n, m = X.shape
    n_classes = int(y_codes.max()) + 1 if n_classes is None else int(n_classes)
    out = np.empty(m)
    block = max(1, min(m, _SORT_BUDGET // (8 * 3 * max(n, 1))))
    for j0 in range(0, m, block):
        sub = X[:, j0 : j0 + block]
        order = np.argsort(sub, axis=0, kind="stable")
        vals = np.ascontiguousarray(np.take_along_axis(sub, order, axis=0), dtype=np.float64)
        labs = np.ascontiguousarray(y_codes[order])
        out[j0 : j0 + block] = _chain_cross(vals, labs, n_classes)
    return out


def mst_relevance(X, y_codes, n_classes=None):
    """``"mst"`` relevance F_i = max(0, 1 - R_i / E[R]) and the cross counts R_i (see module doc).

    A constant gene's R_i is E[R] (one tied group), but summed group by group it can differ from the closed form
    of :func:`permutation_expectation` in the last bit (F = 1e-16, above the genes at chance); its F is set to
    the exact 0."""
    cross = cross_edges_1d(X, y_codes, n_classes)
    expected = permutation_expectation(y_codes, n_classes)
    F = np.maximum(0.0, 1.0 - cross / expected)
    X = np.asarray(X)
    F[(X == X[:1]).all(axis=0)] = 0.0
    return F, cross


@njit(cache=True)
def _prim(D2, x, labels, downdate):
    """Cross count of the MST on squared distances D2 (minus (x_u - x_v)^2 when ``downdate``).

    Keys are compared lexicographically as (length, cross) so that among tied MSTs the one with
    the fewest cross edges is found; remaining ties go to the lowest sample index.
    """
    n = D2.shape[0]
    in_tree = np.zeros(n, dtype=np.bool_)
    key = np.full(n, np.inf)
    keyc = np.zeros(n, dtype=np.int64)
    key[0] = 0.0
    cross = 0
    for it in range(n):
        u = -1
        for v in range(n):
            if not in_tree[v]:
                if u < 0 or key[v] < key[u] or (key[v] == key[u] and keyc[v] < keyc[u]):
                    u = v
        in_tree[u] = True
        if it > 0:
            cross += keyc[u]
        lu = labels[u]
        xu = x[u]
        for v in range(n):
            if not in_tree[v]:
                w = D2[u, v]
                if downdate:
                    d = xu - x[v]
                    w -= d * d
                c = 1 if labels[v] != lu else 0
                if w < key[v] or (w == key[v] and c < keyc[v]):
                    key[v] = w
                    keyc[v] = c
    return cross


@njit(parallel=True, cache=True)
def _prim_leave_one_out(D2, Z, labels):
    m = Z.shape[1]
    out = np.empty(m, dtype=np.int64)
    for i in prange(m):
        out[i] = _prim(D2, np.ascontiguousarray(Z[:, i]), labels, True)
    return out


def squared_distances(Z):
    """Dense N x N squared Euclidean distances from exact differences (duplicate samples give exact 0)."""
    from scipy.spatial.distance import pdist, squareform

    return squareform(pdist(np.asarray(Z, dtype=np.float64), "sqeuclidean"))


def mst_cross_count(D2, y_codes):
    """Cross-class edges of the MST of a dense squared-distance matrix (ties: fewest cross edges)."""
    D2 = np.ascontiguousarray(D2, dtype=np.float64)
    labels = np.ascontiguousarray(y_codes, dtype=np.int64)
    return int(_prim(D2, np.zeros(D2.shape[0]), labels, False))


def standardize(X):
    """z-score every column (ddof=1); constant columns become 0.

    Scale-safe: the moments are those of ``X / s`` (:func:`bioqpfs._kernels.correlation.scaled_column_moments`,
    ``s`` an exact power of two, 1 for ordinary genes), so a gene in units of 1e160 or 1e-170 gets the z-scores
    of the same gene in ordinary units (``X.std`` overflowed to inf or underflowed to 0 there, and the gene
    became all 0: its relevance 0, silently)."""
    from .correlation import scaled_column_moments

    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    mean, ss, s = scaled_column_moments(X)
    sd = np.sqrt(ss / (n - 1)) if n > 1 else np.zeros(X.shape[1])
    Z = (X / s - mean) / np.where(sd > 0, sd, 1.0)
    Z[:, ~(sd > 0)] = 0.0
    return Z


def mst_cpx(X, y_codes, *, standardize_genes=True, max_work=MAX_CPX_WORK):
    """``"mst_cpx"``: Delta f_i = (f_i - f) / f for every gene (see module doc).

    Returns
    -------
    delta : ndarray (M,), the relative complexity increase (unclipped; may be negative)
    f : int, cross count of the MST on all genes
    f_loo : ndarray (M,) of int, cross count without each gene
    """
    X = np.asarray(X)
    n, m = X.shape
    work = float(n) * n * m
    if work > max_work:
        raise ValueError(
            f"relevance 'mst_cpx' needs {m} leave-one-out minimum spanning trees on {n} samples "
            f"(N^2 M = {work:.2g} operations, limit {max_work:.2g}); subsample the samples (the work grows with "
            f"N^2), restrict the genes (e.g. highly variable genes), or use relevance='mst' (per gene, O(N log N))"
        )
    Z = standardize(X) if standardize_genes else np.asarray(X, dtype=np.float64)
    D2 = squared_distances(Z)
    labels = np.ascontiguousarray(y_codes, dtype=np.int64)
    f = int(_prim(D2, np.zeros(n), labels, False))
    f_loo = _prim_leave_one_out(D2, np.asfortranarray(Z), labels)
    delta = (f_loo - f) / max(f, 1)
    return delta, f, f_loo


skip_failed_cache_writes(globals())  # numba's cache is an optimisation: a full disk must not fail a selection
