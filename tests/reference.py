"""Plain-loop reference implementations used as independent oracles in the tests.

Nothing here shares code with bioqpfs: contingency tables are counted with Python dicts.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np


def entropy(*cols, base=2.0):
    n = len(cols[0])
    counts = Counter(zip(*[list(map(int, c)) for c in cols]))
    return -sum((c / n) * math.log(c / n, base) for c in counts.values())


def mutual_info(a, b, base=2.0):
    return entropy(a, base=base) + entropy(b, base=base) - entropy(a, b, base=base)


def mi_matrix(X, base=2.0):
    m = X.shape[1]
    return np.array([[mutual_info(X[:, i], X[:, j], base) for j in range(m)] for i in range(m)])


def cmi(a, c, given, base=2.0):
    """I(a; c | given) = H(a, given) + H(c, given) - H(given) - H(a, c, given)."""
    return (entropy(a, given, base=base) + entropy(c, given, base=base) - entropy(given, base=base)
            - entropy(a, c, given, base=base))


def cmi_matrix(X, y, base=2.0):
    m = X.shape[1]
    out = np.empty((m, m))
    for i in range(m):
        for j in range(m):
            out[i, j] = mutual_info(X[:, i], y, base) if i == j else cmi(X[:, i], y, X[:, j], base)
    return out


def mi_given_class_matrix(X, y, base=2.0):
    m = X.shape[1]
    return np.array([[cmi(X[:, i], X[:, j], y, base) for j in range(m)] for i in range(m)])


def mean_sd_codes(X):
    """QPFS 2.5 bins with R's sd (ddof=1), one gene at a time."""
    out = np.empty(X.shape, dtype=int)
    for g in range(X.shape[1]):
        col = [float(v) for v in X[:, g]]
        mu = sum(col) / len(col)
        sd = math.sqrt(sum((v - mu) ** 2 for v in col) / (len(col) - 1))
        for s, v in enumerate(col):
            out[s, g] = 0 if v <= mu - sd else (1 if v <= mu + sd else 2)
    return out


def pearson(a, b):
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    num = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    den = math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))
    return num / den


def hall(X, y):
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
    """Exact minimiser of 1/2 x'Gx - a'x on the simplex by enumerating supports (small M, G PD).

    For each support S, solve the KKT system [G_SS 1; 1' 0][x; -nu] = [a_S; 1]; keep the feasible,
    dual-feasible solution with the lowest objective.
    """
    m = len(a)
    best, best_val = None, math.inf
    for size in range(1, m + 1):
        for S in itertools.combinations(range(m), size):
            S = list(S)
            K = np.zeros((size + 1, size + 1))
            K[:size, :size] = G[np.ix_(S, S)]
            K[:size, size] = 1.0
            K[size, :size] = 1.0
            rhs = np.concatenate([a[S], [1.0]])
            try:
                sol = np.linalg.solve(K, rhs)
            except np.linalg.LinAlgError:
                continue
            xs = sol[:size]
            if (xs < -1e-12).any():
                continue
            x = np.zeros(m)
            x[S] = xs
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
    return (weighted_entropy(a, weights=weights, base=base) + weighted_entropy(b, weights=weights, base=base)
            - weighted_entropy(a, b, weights=weights, base=base))


def weighted_cmi(a, c, given, weights, base=2.0):
    """I(a; c | given) under sample weights."""
    h = weighted_entropy
    return (h(a, given, weights=weights, base=base) + h(c, given, weights=weights, base=base)
            - h(given, weights=weights, base=base) - h(a, c, given, weights=weights, base=base))


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


def greedy_mi_bruteforce(codes, y, criterion, k, start=(), base=2.0):
    """Greedy forward selection with the published MI criteria by plain loops, S starting at ``start``.

    mRMR MID: F_j - mean_s I(X_j; X_s); MIQ: F_j / mean_s I(X_j; X_s) (inf for zero redundancy); JMI:
    sum_s I((X_j, X_s); C); CIFE: F_j - sum_s [I(X_j; X_s) - I(X_j; X_s | C)]; F_j = I(X_j; C).  The first pick
    of an empty S is the most relevant gene.  Ties within 1e-9 * max(1, |best|): higher F, then lower index.
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
