"""Plain-loop reference implementations used as independent oracles in the tests.

Every oracle the tests compare bioqpfs against lives here, once (issue 12 item 8): test modules import them
(``import reference as ref``) and define no private copies; ``tests/test_package_structure.py`` fails on a test
function whose name marks it as an oracle (``brute*``, ``bf_*``, ``naive*``, ``reference*``, ``exhaustive*``,
``oracle*``, ``*entropy*``, ``mi``, ``cmi``, ``mutual_info*``) anywhere else.

Nothing here imports bioqpfs: contingency tables are counted with Python dicts, optimisation problems are solved
by enumeration or by scipy/numpy's dense routines, and formulas are written out from the papers.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
from scipy.optimize import check_grad
from scipy.sparse.csgraph import minimum_spanning_tree


def entropy(*cols, base=2.0):
    """Plug-in joint entropy of integer-coded columns, counted with a ``Counter`` of tuples.

    ``H(cols) = -sum_v p(v) log_base p(v)`` with ``p(v) = #{s : (cols[0][s], cols[1][s], ...) = v} / n``.
    Independent of ``bioqpfs._kernels.information`` (no contingency matrices, no GEMM, no numba).

    Parameters
    ----------
    *cols : sequences of int-like
        Equal-length columns; their joint distribution is counted.
    base : float, default 2
        Logarithm base (2: bits, e: nats).

    Returns
    -------
    float
    """
    n = len(cols[0])
    counts = Counter(zip(*[list(map(int, c)) for c in cols]))
    return -sum((c / n) * math.log(c / n, base) for c in counts.values())


def mutual_info(a, b, base=2.0):
    """``I(a; b) = H(a) + H(b) - H(a, b)`` from :func:`entropy` (Cover & Thomas eq. 2.45)."""
    return entropy(a, base=base) + entropy(b, base=base) - entropy(a, b, base=base)


def mi_matrix(X, base=2.0):
    """``M_ij = I(X_i; X_j)`` (:func:`mutual_info`) for every pair of columns, by plain loops (QPFS's Q, paper sec. 2)."""
    m = X.shape[1]
    return np.array([[mutual_info(X[:, i], X[:, j], base) for j in range(m)] for i in range(m)])


def cmi(a, c, given, base=2.0):
    """I(a; c | given) = H(a, given) + H(c, given) - H(given) - H(a, c, given)."""
    return (entropy(a, given, base=base) + entropy(c, given, base=base) - entropy(given, base=base)
            - entropy(a, c, given, base=base))


def cmi_matrix(X, y, base=2.0):
    """``C_ii = I(X_i; y)``, ``C_ij = I(X_i; y | X_j)`` (:func:`mutual_info`, :func:`cmi`), by plain loops."""
    m = X.shape[1]
    out = np.empty((m, m))
    for i in range(m):
        for j in range(m):
            out[i, j] = mutual_info(X[:, i], y, base) if i == j else cmi(X[:, i], y, X[:, j], base)
    return out


def mi_given_class_matrix(X, y, base=2.0):
    """``M_ij = I(X_i; X_j | y)`` (:func:`cmi`) for every pair of columns, by plain loops."""
    m = X.shape[1]
    return np.array([[cmi(X[:, i], X[:, j], y, base) for j in range(m)] for i in range(m)])


def mean_sd_codes(X):
    """QPFS 2.5 bins with R's sd (ddof=1), one gene at a time; a varying gene with every value in the middle
    bin (nearly two-point: balanced binary genes) is cut at the mean instead, codes 0 / 1."""
    out = np.empty(X.shape, dtype=int)
    for g in range(X.shape[1]):
        col = [float(v) for v in X[:, g]]
        mu = sum(col) / len(col)
        sd = math.sqrt(sum((v - mu) ** 2 for v in col) / (len(col) - 1))
        if sd > 0 and all(mu - sd < v <= mu + sd for v in col):
            for s, v in enumerate(col):
                out[s, g] = 0 if v <= mu else 1
            continue
        for s, v in enumerate(col):
            out[s, g] = 0 if v <= mu - sd else (1 if v <= mu + sd else 2)
    return out


def pearson(a, b):
    """Pearson correlation ``sum (a - mean a)(b - mean b) / sqrt(sum (a - mean a)^2 sum (b - mean b)^2)`` of two lists."""
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    num = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    den = math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))
    return num / den


def hall(X, y):
    """QPFS section 2.1 relevance ``F_g = sum_k p(y = k) |r(X_g, 1[y = k])|`` (:func:`pearson`, each class indicator)."""
    classes = sorted(set(y.tolist()))
    out = []
    for g in range(X.shape[1]):
        col = X[:, g].tolist()
        out.append(sum((list(y).count(k) / len(y)) * abs(pearson(col, [1.0 if v == k else 0.0 for v in y]))
                       for k in classes))
    return np.array(out)


def mdl_cuts(values, labels):
    """Fayyad & Irani (1993) recursive MDL cut points, written out directly from the paper."""
    pairs = sorted(zip(values, labels))

    def ent(lbls):
        n = len(lbls)
        return -sum((c / n) * math.log2(c / n) for c in Counter(lbls).values()) if n else 0.0

    cuts = []

    def split(seg):
        n = len(seg)
        if n < 2:
            return
        lbls = [l for _, l in seg]
        e = ent(lbls)
        best, best_w = None, math.inf
        for t in range(1, n):
            if seg[t][0] == seg[t - 1][0]:
                continue
            w = (t * ent(lbls[:t]) + (n - t) * ent(lbls[t:])) / n
            if w < best_w - 1e-12:
                best, best_w = t, w
        if best is None:
            return
        l1, l2 = lbls[:best], lbls[best:]
        k, k1, k2 = len(set(lbls)), len(set(l1)), len(set(l2))
        delta = math.log2(3**k - 2) - (k * e - k1 * ent(l1) - k2 * ent(l2))
        if e - best_w > (math.log2(n - 1) + delta) / n:
            cuts.append((seg[best - 1][0] + seg[best][0]) / 2)
            split(seg[:best])
            split(seg[best:])

    split(pairs)
    return sorted(cuts)


def simplex_kkt_violation(G, a, x):
    """Max violation of the KKT conditions of min 1/2 x'Gx - a'x on the simplex, from scratch: gradient equal
    on the support, not below it off the support, sum 1, x >= 0."""
    g = G @ x - a
    S = x > 1e-9
    nu = g[S].mean()
    return max(np.abs(g[S] - nu).max(), max(0.0, (nu - g[~S]).max(initial=0.0)), abs(x.sum() - 1), -min(0, x.min()))


def simplex_qp_bruteforce(G, a):
    """Exact minimiser of 1/2 x'Gx - a'x on the simplex by enumerating every support (small M only).

    For each support S, solve the face's KKT system [G_SS 1; 1' 0][x; -nu] = [a_S; 1] with numpy's
    least-squares solver (so a singular G -- tied or duplicated genes -- still gives a point of the face);
    keep the feasible solution with the lowest objective.  The optimum lies in the relative interior of
    some face, whose equality-constrained optimum is that point, so the minimum over faces is global.

    Returns
    -------
    x : ndarray
        The minimiser.
    value : float
        ``1/2 x'Gx - a'x`` at ``x``.
    """
    m = len(a)
    best, best_val = None, math.inf
    for size in range(1, m + 1):
        for S in itertools.combinations(range(m), size):
            S = list(S)
            K = np.zeros((size + 1, size + 1))
            K[:size, :size] = G[np.ix_(S, S)]
            K[:size, size] = K[size, :size] = 1.0
            xs = np.linalg.lstsq(K, np.r_[a[S], 1.0], rcond=None)[0][:size]
            if (xs < -1e-12).any():
                continue
            x = np.zeros(m)
            x[S] = np.maximum(xs, 0)
            x /= x.sum()
            val = 0.5 * x @ G @ x - a @ x
            if val < best_val - 1e-15:
                best, best_val = x, val
    return best, best_val


def weighted_entropy(*cols, weights, base=2.0):
    """Entropy of the joint distribution of ``cols`` where sample s counts ``weights[s]`` times."""
    total = float(sum(weights))
    mass = {}
    for key, w in zip(zip(*[list(map(int, c)) for c in cols]), weights):
        mass[key] = mass.get(key, 0.0) + float(w)
    return -sum((v / total) * math.log(v / total, base) for v in mass.values() if v > 0)


def weighted_mutual_info(a, b, weights, base=2.0):
    """``I(a; b) = H(a) + H(b) - H(a, b)`` under sample weights (:func:`weighted_entropy`)."""
    return (weighted_entropy(a, weights=weights, base=base) + weighted_entropy(b, weights=weights, base=base)
            - weighted_entropy(a, b, weights=weights, base=base))


def weighted_cmi(a, c, given, weights, base=2.0):
    """I(a; c | given) under sample weights."""
    h = weighted_entropy
    return (h(a, given, weights=weights, base=base) + h(c, given, weights=weights, base=base)
            - h(given, weights=weights, base=base) - h(a, c, given, weights=weights, base=base))


def quantile_codes(X, n_bins):
    """Equal-frequency bins of all of a gene's values: code = how many of the edges at numpy's default linear
    quantiles ``1/n_bins, ..., (n_bins-1)/n_bins`` lie strictly below the value (right-closed bins), levels
    renumbered 0..k-1 in order."""
    out = np.empty(X.shape, dtype=int)
    for g in range(X.shape[1]):
        col = [float(v) for v in X[:, g]]
        edges = [float(np.quantile(col, q)) for q in np.arange(1, n_bins) / n_bins]
        raw = [sum(v > e for e in edges) for v in col]
        levels = sorted(set(raw))
        out[:, g] = [levels.index(r) for r in raw]
    return out


def zero_quantile_codes(X, n_bins):
    """Zero -> 0; non-zero values -> 1 + their equal-frequency bin among the gene's non-zero values
    (right-closed, ``n_bins - 1`` bins at numpy's default linear quantiles); a gene without zeros gets
    ``n_bins`` equal-frequency bins of all its values.  Levels renumbered 0..k-1 in order."""
    out = np.empty(X.shape, dtype=int)
    for g in range(X.shape[1]):
        col = [float(v) for v in X[:, g]]
        nz = sorted(v for v in col if v != 0)
        if len(nz) == len(col):
            edges = [float(np.quantile(nz, q)) for q in np.arange(1, n_bins) / n_bins]
            raw = [sum(v > e for e in edges) for v in col]
        else:
            edges = [float(np.quantile(nz, q)) for q in np.arange(1, n_bins - 1) / (n_bins - 1)] if nz else []
            raw = [0 if v == 0 else 1 + sum(v > e for e in edges) for v in col]
        levels = sorted(set(raw))
        out[:, g] = [levels.index(r) for r in raw]
    return out


def subset_value_loops(Q, a, S, quad=1.0, lin=1.0):
    """lin * sum_{i in S} a_i + quad * sum_{i,j in S} Q_ij by plain Python loops (float64)."""
    S = [int(i) for i in S]
    lin_part = 0.0 if a is None else sum(float(a[i]) for i in S)
    return lin * lin_part + quad * sum(float(Q[i][j]) for i in S for j in S)


def best_subset_bruteforce(Q, a, k, quad=1.0, lin=1.0, fixed=(), candidates=None):
    """Exhaustive maximum of :func:`subset_value_loops` over |S| = k containing ``fixed``, the rest from ``candidates``."""
    m = len(Q)
    fixed = [int(i) for i in fixed]
    pool = [i for i in (range(m) if candidates is None else candidates) if i not in fixed]
    best, best_val = None, -math.inf
    for rest in itertools.combinations(sorted(set(pool)), k - len(fixed)):
        S = fixed + list(rest)
        v = subset_value_loops(Q, a, S, quad, lin)
        if v > best_val:
            best, best_val = sorted(S), v
    return best, best_val


def spec_cmi_q(codes, y, base=2.0):
    """SPEC_CMI's Q by plain loops (Nguyen et al., KDD 2014, section 3.2).

    ``C_ii = I(X_i; C)``, ``C_ij = I(X_i; C | X_j)`` (:func:`cmi_matrix`), ``Q = (C + C') / 2``.

    Returns
    -------
    Q, C : ndarray
        The symmetrised matrix and the raw conditional-MI matrix.
    """
    C = cmi_matrix(codes, y, base)
    return 0.5 * (C + C.T), C


def best_first_cut(values, labels):
    """The first cut of Fayyad & Irani's MDL discretisation, by brute force.

    Among midpoints between distinct sorted values, the one of least weighted class entropy
    ``(t H(y[:t]) + (n - t) H(y[t:])) / n`` (:func:`entropy`, bits); the first (lowest) one among ties.
    """
    o = np.argsort(values, kind="stable")
    v, y = np.asarray(values)[o], np.asarray(labels)[o]
    best, cut = math.inf, None
    for t in range(1, v.size):
        if v[t] != v[t - 1]:
            w = (t * entropy(y[:t]) + (v.size - t) * entropy(y[t:])) / v.size
            if w < best - 1e-12:
                best, cut = w, 0.5 * (v[t - 1] + v[t])
    return cut


# ------------------------------------------------------- the MI-distance k-means (Prasad & Biswas, paper 003)
def mi_distance(a, b):
    """Eq. 4 of paper 003: ``d(a, b) = 1 - I(a; b) / max(H(a), H(b))`` in nats (0 when both are constant)."""
    ha, hb = entropy(a, base=math.e), entropy(b, base=math.e)
    hmax = max(ha, hb)
    return 0.0 if hmax == 0 else 1.0 - mutual_info(a, b, base=math.e) / hmax


def zscore(x):
    """``(x - mean) / sd`` with the sample sd (ddof=1), as a list."""
    mu = sum(x) / len(x)
    sd = math.sqrt(sum((v - mu) ** 2 for v in x) / (len(x) - 1))
    return [(v - mu) / sd for v in x]


def mean_sd_codes_1d(v):
    """:func:`mean_sd_codes` of one vector, as a list."""
    return mean_sd_codes(np.asarray(v, dtype=float)[:, None])[:, 0].tolist()


def argmin_with_gap(values, gaps):
    """Index of the smallest value (lowest index among ties); appends the margin to the runner-up to ``gaps``."""
    best = min(range(len(values)), key=lambda i: (values[i], i))
    others = [v for i, v in enumerate(values) if i != best]
    if others:
        gaps.append(min(others) - values[best])
    return best


def variant_macqueen(X, order, k):
    """Section 3.1 of paper 003 written out with lists: online pass 1, batch pass 2, nearest member to each mean.

    Genes are visited in ``order``; the first ``k`` seed the clusters; a gene joins the cluster whose coded mean
    is nearest in :func:`mi_distance` and is added to its running sum of z-scores, sign-aligned with the sum.

    Returns
    -------
    labels : ndarray
        Cluster of each gene, in ``order``.
    reps : ndarray
        The representative (member nearest to the final mean) of each cluster.
    n_distances : int
        Distances evaluated (the count formula of section 3.1).
    min_gap : float
        Smallest margin of any nearest-choice (how close the run came to a tie).
    """
    codes = mean_sd_codes(X)
    col = {g: codes[:, g].tolist() for g in order}
    z = {g: zscore(X[:, g].tolist()) for g in order}
    n_dist = 0
    gaps = []
    sums = [list(z[g]) for g in order[:k]]
    ccodes = [col[g] for g in order[:k]]
    label = {g: i for i, g in enumerate(order[:k])}
    for g in order[k:]:
        c = argmin_with_gap([mi_distance(col[g], cc) for cc in ccodes], gaps)
        n_dist += k
        label[g] = c
        sign = 1.0 if sum(a * b for a, b in zip(z[g], sums[c])) >= 0 else -1.0
        sums[c] = [a + sign * b for a, b in zip(sums[c], z[g])]
        ccodes[c] = mean_sd_codes_1d(sums[c])

    def nearest(sums, label):
        reps = []
        for c in range(k):
            members = [g for g in order if label[g] == c]
            mc = mean_sd_codes_1d(sums[c])
            ds = [mi_distance(col[g], mc) for g in members]
            reps.append(members[argmin_with_gap(ds, gaps)])
        return reps, len(order)

    reps, n = nearest(sums, label)
    n_dist += n
    label = {r: c for c, r in enumerate(reps)}
    for g in order:
        if g not in label:
            label[g] = argmin_with_gap([mi_distance(col[g], col[r]) for r in reps], gaps)
            n_dist += k
    sums = [[0.0] * X.shape[0] for _ in range(k)]
    for g in order:
        r = reps[label[g]]
        sign = 1.0 if sum(a * b for a, b in zip(z[g], z[r])) >= 0 else -1.0
        sums[label[g]] = [a + sign * b for a, b in zip(sums[label[g]], z[g])]
    reps, n = nearest(sums, label)
    n_dist += n
    return np.array([label[g] for g in order]), np.array(reps), n_dist, min(gaps)


# ------------------------------------------------------------------------------------------ MST relevance
def mst_cross_edges_scipy(Z, y):
    """(cross count, total squared length) of an MST that, among tied MSTs, has the fewest cross edges.

    scipy's ``minimum_spanning_tree`` on lexicographic weights made exact: rank the distinct squared
    distances, weight = (rank + 1) * N + cross, so a lighter cross count can never outweigh a longer edge
    (a tree has N - 1 < N edges).  scipy treats 0 as "no edge", hence the +1.
    """
    Z = np.asarray(Z, dtype=float).reshape(len(y), -1)
    n = len(y)
    D = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
    _, inv = np.unique(D, return_inverse=True)
    W = (inv.reshape(D.shape) + 1.0) * n + (y[:, None] != y[None, :])
    np.fill_diagonal(W, 0)
    T = minimum_spanning_tree(W).tocoo()
    return int((y[T.row] != y[T.col]).sum()), float(D[T.row, T.col].sum())


def tie_order_expectation(x, y):
    """Average cross count of the sorted chain over every ordering of tied values (brute force).

    Returns the average and the last chain enumerated (a valid sorted order of ``x``).
    """
    vals = np.unique(x)
    groups = [np.flatnonzero(x == v) for v in vals]
    totals = []
    for perms in itertools.product(*[itertools.permutations(g) for g in groups]):
        chain = np.concatenate([np.array(p) for p in perms])
        totals.append(np.sum(y[chain][1:] != y[chain][:-1]))
    return float(np.mean(totals)), chain


# ----------------------------------------------------------------------------------- other written-out rules
def one_se_size(sizes, mean, se):
    """The one-SE rule written out: the best mean (smallest size among ties), then the smallest size within its SE."""
    sizes, mean, se = (np.asarray(v, dtype=float) for v in (sizes, mean, se))
    order = np.argsort(sizes, kind="stable")
    sizes, mean, se = sizes[order], mean[order], se[order]
    best = int(np.flatnonzero(mean == mean.min())[0])
    return int(sizes[np.flatnonzero(mean <= mean[best] + se[best])[0]])


def gradient_error(fun, x0):
    """Relative finite-difference error of an analytic gradient (scipy's ``check_grad``, step 1e-7).

    ``fun(x)`` returns ``(value, gradient)``; the result is ``|g_fd - g| / max(1, |g|)`` at ``x0``.
    """
    f = lambda v: fun(v)[0]  # noqa: E731
    g = lambda v: fun(v)[1]  # noqa: E731
    err = check_grad(f, g, x0, epsilon=1e-7)
    return err / max(1.0, np.linalg.norm(g(x0)))


def is_swap_local_optimum(Q, a, S, quad, lin, fixed=(), candidates=None, tol=1e-9):
    """True when no single swap (a member of ``S`` not in ``fixed`` for a non-member from ``candidates``)
    raises :func:`subset_value_loops` by more than ``tol`` (relative), checked by enumerating every swap."""
    m = len(Q)
    base = subset_value_loops(Q, a, S, quad, lin)
    pool = range(m) if candidates is None else candidates
    for i in S:
        if i in fixed:
            continue
        for j in pool:
            if j in S:
                continue
            T = [j if s == i else s for s in S]
            if subset_value_loops(Q, a, T, quad, lin) > base + tol * max(1.0, abs(base)):
                return False
    return True


def greedy_mi_selection(codes, y, criterion, k, start=(), base=2.0):
    """Greedy forward selection by the published MI criteria, by plain loops over :func:`mutual_info`/:func:`cmi`.

    Relevance ``F_j = I(X_j; C)``; with S the genes chosen so far, the next gene maximises

    - ``mrmr_mid``: ``F_j - mean_{t in S} I(X_j; X_t)`` (Peng et al. 2005, MID),
    - ``mrmr_miq``: ``F_j / mean_{t in S} I(X_j; X_t)`` (MIQ; infinite when the redundancy is 0),
    - ``jmi``: ``sum_{t in S} I((X_j, X_t); C)`` (Yang & Moody 1999; the pair coded as one variable),
    - ``cife``: ``F_j - sum_{t in S} [I(X_j; X_t) - I(X_j; X_t | C)]`` (Lin & Tang 2006),

    the first gene by ``F`` alone (when ``start`` is empty); S starts as ``start`` (forced genes, in order);
    ties (relative 1e-9) go to higher relevance, then lower index.  MI in ``base``.

    Returns
    -------
    list of int
        The chosen gene indices, in order.
    """
    m = codes.shape[1]
    F = [mutual_info(codes[:, j], y, base) for j in range(m)]
    sel = [int(s) for s in start]
    while len(sel) < k:
        scores = {}
        for j in range(m):
            if j in sel:
                continue
            if not sel:
                s = F[j]
            elif criterion == "mrmr_mid":
                s = F[j] - sum(mutual_info(codes[:, j], codes[:, t], base) for t in sel) / len(sel)
            elif criterion == "mrmr_miq":
                red = sum(mutual_info(codes[:, j], codes[:, t], base) for t in sel) / len(sel)
                s = math.inf if red <= 1e-14 else F[j] / red
            elif criterion == "jmi":
                s = sum(mutual_info(codes[:, j].astype(np.int64) * 1000 + codes[:, t], y, base) for t in sel)
            else:  # cife
                s = F[j] - sum(mutual_info(codes[:, j], codes[:, t], base) - cmi(codes[:, j], codes[:, t], y, base)
                               for t in sel)
            scores[j] = s
        best = max(scores.values())
        tol = 0.0 if math.isinf(best) else 1e-9 * max(1.0, abs(best))
        tied = [j for j, s in scores.items() if s >= best - tol]
        sel.append(min(tied, key=lambda j: (-F[j], j)))
    return sel


# ------------------------------------------------------- batch strata (stratified estimation, mRMRe's strata)
def stratified_sum(X, y, batch, weighting, discretization, measure):
    """``sum_b w_b measure(codes_b, y_b)`` over the batches b, by a plain loop.

    ``w_b = n_b / N`` (``weighting="size"``) or ``1 / B`` (``"equal"``); ``codes_b`` are the :func:`mean_sd_codes`
    of batch b's rows alone (``discretization="per_batch"``) or the rows of the codes of all samples
    (``"global"``).  Independent of the package: the codes come from this module's loop reference.
    """
    names, sizes = np.unique(batch, return_counts=True)
    w = sizes / sizes.sum() if weighting == "size" else np.full(names.size, 1.0 / names.size)
    codes_all = mean_sd_codes(X)
    total = 0.0
    for b, w_b in zip(names, w):
        rows = np.flatnonzero(batch == b)
        codes = mean_sd_codes(X[rows]) if discretization == "per_batch" else codes_all[rows]
        total = total + w_b * measure(codes, y[rows])
    return total


def level_weighted_relevance(codes, levels, weights, sample_weights=None, base=2.0):
    """Relevance summed over the levels of hierarchical labels, by plain loops over genes and levels.

    ``F_i = sum_l v_l I(X_i; C_l)`` (bioqpfs README "Hierarchical labels"): :func:`mutual_info` of gene i's codes
    with each level's labels (or :func:`weighted_mutual_info` under ``sample_weights``), weighted by ``v_l``.

    Parameters
    ----------
    codes : array of int, shape (n_samples, n_genes)
    levels : sequence of arrays of int, the class codes of each level
    weights : sequence of float, v_l (used as given: pass them normalised)
    sample_weights : array of float, optional
    base : float
    """
    out = np.zeros(codes.shape[1])
    for i in range(codes.shape[1]):
        for v, c in zip(weights, levels):
            out[i] += v * (mutual_info(codes[:, i], c, base) if sample_weights is None
                           else weighted_mutual_info(codes[:, i], c, sample_weights, base))
    return out


def per_class_bins_mi(x, inc, n_bins, zero_rule, base=2.0):
    """I(codes; 1[C = c]) with class-balanced weights (class c and the rest half each) and bins of the gene's own
    that are equal-frequency under those weights: ``zero_rule`` (and x has zeros): zeros apart, ``n_bins - 1``
    bins of the non-zero values; else ``n_bins`` bins of all values.  Cut k is the boundary between distinct
    sorted values (or below / above all) whose weighted share of the values below it is nearest to q_k (the
    lowest on ties).  Plain loops over the sorted distinct values."""
    x = [float(v) for v in x]
    inc = [bool(v) for v in inc]
    n_in = sum(inc)
    w = [0.5 / n_in if i else 0.5 / (len(x) - n_in) for i in inc]
    zeros = zero_rule and any(v == 0 for v in x)
    part = [s for s in range(len(x)) if not (zeros and x[s] == 0)]
    n_cuts = n_bins - 2 if zeros else n_bins - 1
    values = sorted(set(x[s] for s in part))
    total = sum(w[s] for s in part)
    below = [sum(w[s] for s in part if x[s] < v) / total for v in values] + [1.0]   # boundary below each value
    cuts = []
    for k in range(1, n_cuts + 1):
        q = k / (n_cuts + 1)
        j = min(range(len(below)), key=lambda i: (abs(below[i] - q), i))
        cuts.append(values[j] if j < len(values) else math.inf)    # values >= the cut are above it
    codes = [0 if (zeros and v == 0) else int(zeros) + sum(v >= c for c in cuts) for v in x]
    return weighted_mutual_info(codes, [int(i) for i in inc], weights=w, base=base)


def nearest_class_pair_order_information(X, y, n_classes, batches=None, batch_weights=None):
    """F[c, i] = ln 2 - H_2(min_d A_cd,i) in nats: A_cd = U / (n_c n_d) with U scipy's Mann-Whitney statistic of
    gene i in class c against class d alone (ties one half), pair by pair on the dense values; with ``batches``
    (labels) and ``batch_weights`` (one per sorted batch label), A_cd is the weighted mean of the batches' A_cd
    over the batches holding both classes, and a class sharing no batch with c is left out.  0 for a class with
    no other class to compare with."""
    import scipy.sparse as sp
    from scipy.stats import mannwhitneyu

    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    y = np.asarray(y)
    batches = np.zeros(y.size, dtype=int) if batches is None else np.unique(batches, return_inverse=True)[1]
    batch_weights = np.ones(1) if batch_weights is None else np.asarray(batch_weights, dtype=float)
    F = np.zeros((n_classes, X.shape[1]))
    for c in range(n_classes):
        for i in range(X.shape[1]):
            lowest = None
            for d in range(n_classes):
                num = den = 0.0
                for b, w in enumerate(batch_weights):
                    inc, ind = (y == c) & (batches == b), (y == d) & (batches == b)
                    if d == c or not inc.any() or not ind.any():
                        continue
                    a = mannwhitneyu(X[inc, i], X[ind, i], method="asymptotic").statistic / (inc.sum() * ind.sum())
                    num, den = num + w * a, den + w
                if den > 0:
                    lowest = num / den if lowest is None else min(lowest, num / den)
            if lowest is not None:
                h = 0.0 if lowest in (0.0, 1.0) else -(lowest * np.log(lowest) + (1 - lowest) * np.log(1 - lowest))
                F[c, i] = np.log(2) - h
    return F


def pair_order_information(X, y, n_classes):
    """F[c, i] = ln 2 - H_2(A_c,i) in nats, A = U / (n_c (n - n_c)) with U scipy's Mann-Whitney statistic of gene
    i in class c against the rest (ties count one half), gene by gene on the dense values: the information about
    which sample of a random (class c, other) pair is the class-c one, a binary symmetric channel with crossover
    1 - A.  0 for a class that is absent or alone."""
    import scipy.sparse as sp
    from scipy.stats import mannwhitneyu

    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    F = np.zeros((n_classes, X.shape[1]))
    for c in range(n_classes):
        inc = np.asarray(y) == c
        if inc.all() or not inc.any():
            continue
        for i in range(X.shape[1]):
            a = mannwhitneyu(X[inc, i], X[~inc, i], method="asymptotic").statistic / (inc.sum() * (~inc).sum())
            h = 0.0 if a in (0.0, 1.0) else -(a * np.log(a) + (1 - a) * np.log(1 - a))
            F[c, i] = np.log(2) - h
    return F
