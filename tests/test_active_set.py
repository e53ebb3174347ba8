"""The working-set (active-set) simplex-QP solver (issue 14) against independent references.

References: quadprog on explicitly formed dense matrices, brute-force enumeration of every support
(each face's equality-constrained optimum from numpy's dense solver, kept when it is feasible and
satisfies the KKT conditions), and first/second-order optimality conditions evaluated here.
"""

import numpy as np
import pytest
import reference as ref

import bioqpfs
from bioqpfs import measures
from bioqpfs._kernels import simplex_qp as sq
from bioqpfs.selectors import qpfs as qmod

kkt_violation = ref.simplex_kkt_violation


def scale_of(G, a):
    return float(np.max(np.abs(a)) + np.max(np.abs(np.diag(G))))


def check_same_as_quadprog(G, a, x, info):
    """Objective within 1e-8 of quadprog's; where quadprog itself misses its KKT conditions (nearly singular G) the
    answer must be at least as good, and the KKT conditions (sufficient for a convex G) must hold."""
    xq = sq.solve_quadprog(G, a)
    fq, fx = sq.objective(G, a, xq), sq.objective(G, a, x)
    if kkt_violation(G, a, xq) <= 1e-9 * scale_of(G, a):
        assert abs(fx - fq) <= 1e-8 * max(abs(fq), 1e-12)
        np.testing.assert_allclose(x, xq, atol=1e-6)
    else:
        assert fx <= fq + 1e-8 * max(abs(fq), 1e-12)
    assert kkt_violation(G, a, x) <= 1e-9 * scale_of(G, a)
    assert info["kkt_residual"] <= 1e-9 * scale_of(G, a)
    assert info["converged"] and not info["local"]


@pytest.mark.parametrize("m,rank,shift", [(30, 5, 1e-3), (200, 40, 1e-3), (600, 600, 1e-3), (400, 10, 1e-6)])
def test_matches_quadprog_on_random_psd(m, rank, shift):
    rng = np.random.default_rng(m + rank)
    B = rng.normal(size=(m, rank))
    G = B @ B.T / rank + shift * np.eye(m)
    a = rng.uniform(0, 2, size=m)
    x, info = sq.solve_active_set(G, a)
    assert info["solver"] == "active_set" and info["iterations"] >= 1
    check_same_as_quadprog(G, a, x, info)


def test_float32_storage_keeps_a_float64_kkt_check():
    rng = np.random.default_rng(5)
    m = 300
    B = rng.normal(size=(m, 20))
    G = (B @ B.T / 20 + 1e-2 * np.eye(m)).astype(np.float32)
    a = rng.uniform(0, 1, size=m)
    x, info = sq.solve_active_set(sq.QPMatrix(G), a)
    check_same_as_quadprog(G.astype(np.float64), a, x, info)


@pytest.fixture(scope="module")
def srbct_mi():
    ad = bioqpfs.datasets.srbct()
    X = np.asarray(ad.X)
    y = ad.obs["class"].cat.codes.to_numpy()
    codes = measures.discretize(X)
    return measures.mutual_information(codes), measures.relevance(codes, y, discretization=None)


@pytest.mark.parametrize("m", [150, 1000])
def test_matches_quadprog_on_real_mi(srbct_mi, m):
    Q, F = srbct_mi
    idx = np.sort(np.random.default_rng(m).choice(Q.shape[0], m, replace=False))
    Qs, Fs = Q[np.ix_(idx, idx)], F[idx]
    alpha = qmod.alpha_hat(Qs, Fs)[0]
    xq, dq = qmod.solve_qpfs(Qs, Fs, alpha, solver="quadprog", psd_fix="shift")
    xa, da = qmod.solve_qpfs(Qs, Fs, alpha, solver="active_set", psd_fix="shift")
    assert da["solver"] == "active_set"
    G = (1 - alpha) * Qs + da["psd_shift"] * np.eye(m)
    fq, fa = sq.objective(G, alpha * Fs, xq), sq.objective(G, alpha * Fs, xa)
    assert abs(fa - fq) <= 1e-8 * abs(fq)
    np.testing.assert_allclose(xa, xq, atol=1e-6)
    assert kkt_violation(G, alpha * Fs, xa) <= 1e-9 * scale_of(G, alpha * Fs)


def test_auto_uses_active_set_beyond_quadprog_range_and_agrees_with_spg_on_real_mi(srbct_mi):
    """psd_fix='none' on the indefinite full SRBCT matrix: the default solver reaches the same local optimum as
    spg did before it (same objective, same support), and that point is a local minimum."""
    Q, F = srbct_mi
    alpha = qmod.alpha_hat(Q, F)[0]
    xa, da = qmod.solve_qpfs(Q, F, alpha, solver="auto", psd_fix="none")
    xs, ds = qmod.solve_qpfs(Q, F, alpha, solver="spg", psd_fix="none")
    assert da["solver"] == "active_set" and da["indefinite"] and da["local"]
    assert da["objective"] == pytest.approx(ds["objective"], rel=1e-9)
    np.testing.assert_array_equal(np.flatnonzero(xa), np.flatnonzero(xs))
    G = (1 - alpha) * Q
    assert kkt_violation(G, alpha * F, xa) <= 1e-9 * scale_of(G, alpha * F)
    S = np.flatnonzero(xa)
    B = G[np.ix_(S, S)]
    Z = np.vstack([np.eye(S.size - 1), -np.ones((1, S.size - 1))])
    assert np.linalg.eigvalsh(Z.T @ B @ Z).min() > 0  # second-order condition on the face


# ----------------------------------------------------------------------------------------------
# degenerate cases
# ----------------------------------------------------------------------------------------------

def test_single_gene():
    x, info = sq.solve_active_set(np.array([[2.0]]), np.array([0.3]))
    assert x.tolist() == [1.0] and info["kkt_residual"] == 0.0


def test_zero_relevance_minimises_redundancy_only():
    rng = np.random.default_rng(1)
    B = rng.normal(size=(80, 80))
    G = B @ B.T / 80 + 1e-2 * np.eye(80)
    a = np.zeros(80)
    x, info = sq.solve_active_set(G, a)
    check_same_as_quadprog(G, a, x, info)


@pytest.mark.parametrize("seed", range(4))
def test_ties_and_duplicate_genes_match_brute_force(seed):
    """Identical genes (singular G) and tied relevance: the objective equals the enumerated global minimum."""
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(6, 4))
    B = np.vstack([B, B[[0, 2]]])  # genes 6, 7 copy genes 0, 2: G is singular, the optimum is not unique
    G = B @ B.T / 4
    a = rng.uniform(0, 1, size=8)
    a[6], a[7] = a[0], a[2]
    a[3] = a[1]  # a tie in relevance between distinct genes
    _, f_best = ref.simplex_qp_bruteforce(G, a)
    x, info = sq.solve_active_set(G, a)
    assert sq.objective(G, a, x) == pytest.approx(f_best, abs=1e-10 * scale_of(G, a))
    assert kkt_violation(G, a, x) <= 1e-9 * scale_of(G, a)


def test_huge_support_and_handover_to_spg():
    """A dominant ridge spreads the weight over every gene; with a working-set cap below the support the solver
    hands its point to spg, and both paths give quadprog's optimum."""
    rng = np.random.default_rng(3)
    m = 400
    B = rng.normal(size=(m, 30))
    G = B @ B.T / 300 + np.eye(m)
    a = rng.uniform(0, 0.01, size=m)
    x, info = sq.solve_active_set(G, a)
    assert info["solver"] == "active_set" and info["n_nonzero"] > m // 2
    check_same_as_quadprog(G, a, x, info)
    x2, info2 = sq.solve_active_set(G, a, max_support=100)
    assert info2["solver"] == "active_set+spg"
    check_same_as_quadprog(G, a, x2, info2)


def test_negative_curvature_face_is_left_to_a_local_minimum():
    """On an indefinite G the stationary point of a concave face is a maximum along it; the solver must leave it.

    G = [[1, 2], [2, 1]], a = 0: on x1 + x2 = 1 the objective is concave, with its stationary point at (1/2, 1/2)
    (objective 0.75) and its minima at the vertices (0.5).  Started from (1/2, 1/2), a solver that only solves
    the face KKT system stops there."""
    G = np.array([[1.0, 2.0], [2.0, 1.0]])
    a = np.zeros(2)
    x, info = sq.solve_active_set(G, a, x0=np.array([0.5, 0.5]), convex=False)
    assert sorted(x.tolist()) == [0.0, 1.0]
    assert info["objective"] == pytest.approx(0.5) and info["local"]


@pytest.mark.parametrize("seed", range(5))
def test_indefinite_random_result_is_a_local_minimum(seed):
    """First- and second-order conditions checked here; the enumerated global minimum bounds it from below."""
    rng = np.random.default_rng(seed)
    m = 10
    B = rng.normal(size=(m, m))
    G = (B + B.T) / 2 + 1.5 * np.eye(m)  # indefinite
    assert np.linalg.eigvalsh(G)[0] < 0
    a = rng.uniform(0, 1, size=m)
    x, info = sq.solve_active_set(G, a, convex=False)
    _, f_best = ref.simplex_qp_bruteforce(G, a)
    f = sq.objective(G, a, x)
    assert f >= f_best - 1e-12  # sanity of the reference
    assert kkt_violation(G, a, x) <= 1e-9 * scale_of(G, a)
    S = np.flatnonzero(x > 1e-12)
    if S.size > 1:
        Z = np.vstack([np.eye(S.size - 1), -np.ones((1, S.size - 1))])
        assert np.linalg.eigvalsh(Z.T @ G[np.ix_(S, S)] @ Z).min() >= -1e-10
    assert info["local"] and info["converged"]


def test_unknown_solver_names_the_choices():
    with pytest.raises(ValueError, match="active_set"):
        sq.solve(np.eye(3), np.ones(3), solver="newton")


@pytest.mark.parametrize("preselected", [None, [2]])
def test_genes_that_carry_nothing_are_pooled_and_their_mass_moved_onto_the_others(rng, preselected):
    """Genes with a zero row of Q and zero relevance (one level after discretisation: MDL leaves most microarray
    genes so) are pooled into one variable of the QP (``_qp._solve_pooling_null_genes``), which must still solve
    the full shifted problem: quadprog on it (the KKT conditions with a forced gene).  The weights returned then
    move the null genes' mass, proportionally, onto the other non-forced genes: 0 for them, the full problem's
    ranking for the rest."""
    from bioqpfs.selectors import _qp

    m_info, m_null = 12, 40
    Qi = rng.uniform(0, 1, size=(m_info, m_info))
    Qi = 0.5 * (Qi + Qi.T)
    np.fill_diagonal(Qi, 1.0)                   # indefinite: a large shift, which the pooled variable must carry
    Q = np.zeros((m_info + m_null,) * 2)
    Q[:m_info, :m_info] = Qi
    Q[m_info:, m_info:] = rng.normal(scale=1e-15, size=(m_null, m_null))  # the +-1e-14 of the MI algebra
    Q = 0.5 * (Q + Q.T)
    F = np.zeros(m_info + m_null)
    F[:m_info] = rng.uniform(0.001, 0.01, m_info)  # small: the null genes take weight (the redundancy dominates)
    alpha = 0.3
    x, diag = _qp.solve_qpfs(Q, F, alpha, psd_fix="shift", preselected=preselected, preselected_share=0.2)
    assert diag["n_null_pooled"] == m_null == diag["n_null"] and diag["psd_shift"] > 0.1
    assert np.all(x[m_info:] == 0) and x.sum() == pytest.approx(1.0)
    if preselected is None:
        G = (1 - alpha) * Q + diag["psd_shift"] * np.eye(Q.shape[0])
        xq = sq.solve_quadprog(G, alpha * F)     # the full problem: the null genes share its mass equally
        assert xq[m_info:].min() > 0 and np.ptp(xq[m_info:]) <= 1e-6
        assert diag["null_weight"] == pytest.approx(xq[m_info:].sum(), abs=1e-6)
        np.testing.assert_allclose(x[:m_info], xq[:m_info] / xq[:m_info].sum(), atol=1e-6)
    else:  # the forced gene holds its share; the rest is the simplex QP of solve_qpfs's docstring
        s, P = 0.2, np.array(preselected)
        R = np.setdiff1d(np.arange(Q.shape[0]), P)
        GR = (1 - alpha) * (1 - s) * Q[np.ix_(R, R)] + diag["psd_shift"] * np.eye(R.size)
        aR = alpha * F[R] - (1 - alpha) * s * Q[np.ix_(R, P)].sum(axis=1) / P.size
        zq = sq.solve_quadprog(GR, aR)
        info = R < m_info
        if zq[info].sum() > 1e-8:
            assert x[P[0]] == pytest.approx(s)
            np.testing.assert_allclose(x[R[info]], (1 - s) * zq[info] / zq[info].sum(), atol=1e-6)
        else:   # here the full problem gives every other gene nothing: the forced gene holds the whole weight
            assert zq[~info].sum() == pytest.approx(1.0) and diag["null_weight"] == pytest.approx(1 - s)
            assert x[P[0]] == 1.0 and np.all(x[R] == 0)


def test_mdl_panel_with_pooled_null_genes_is_the_unpooled_panel(monkeypatch):
    """End to end (the default recipe with ``discretization="mdl"``, most genes one level): the same ranking and
    weights as when every null gene is its own QP variable."""
    from bioqpfs._kernels import simplex_qp
    from bioqpfs.selectors import _qp

    r = np.random.default_rng(5)
    n, m = 60, 300
    y = np.repeat([0, 1, 2], 20)
    X = r.normal(size=(n, m))
    X[:, :12] += 2.5 * (y[:, None] == (np.arange(12) % 3))
    pooled = bioqpfs.select(X, y, discretization="mdl", n_genes=10)
    assert pooled.params["discretization"] == "mdl"
    monkeypatch.setattr(_qp, "_solve_pooling_null_genes", lambda Q, R, Gf, a, solver, convex, fix:
                        simplex_qp.solve(Gf, a, solver=solver, convex=convex))
    plain = bioqpfs.select(X, y, discretization="mdl", n_genes=10)
    np.testing.assert_array_equal(pooled.ranking[:60], plain.ranking[:60])
    np.testing.assert_allclose(pooled.weights, plain.weights, atol=1e-9)


@pytest.mark.parametrize("method", ["qpfs", "eqpfs"])
def test_mdl_ranks_a_gene_of_one_level_last(method):
    """End to end (the hunt's case): with discretization="mdl", genes that MDL leaves uncut (zero entropy, zero
    relevance) are a sink of the QP, and one of them was ranked first.  Now every gene of one level has weight 0
    and ranks after every gene with relevance; the panel does not depend on the order of the genes.  EQPFS (its
    diagonal is lambda for every gene, so such a gene shows no zero row) had one in its 4-gene panel."""
    import warnings

    from bioqpfs import measures

    r = np.random.default_rng(11)
    n, m = 120, 25
    y = np.repeat([0, 1, 2, 3], 30)
    X = np.abs(r.normal(size=(n, m))) * (r.random((n, m)) < 0.6)
    for j in range(8):
        X[:, j] += (y == j % 4) * (0.8 + 0.2 * j)
    levels = measures.discretize(X, "mdl", y=y).max(axis=0) + 1
    one = np.flatnonzero(levels == 1)
    assert one.size >= 10
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sel = bioqpfs.select(X, y, method=method, n_genes=4, discretization="mdl")
        perm = r.permutation(m)
        sel2 = bioqpfs.select(X[:, perm], y, method=method, n_genes=4, discretization="mdl")
    assert np.all(sel.weights[one] == 0)
    rank = np.argsort(sel.ranking)
    assert rank[one].min() > rank[np.setdiff1d(np.arange(m), one)].max()
    np.testing.assert_array_equal(perm[sel2.selected], sel.selected)


def _spd(rng, n, rank=None, shift=1e-3):
    B = rng.normal(size=(n, rank or n))
    return B @ B.T / B.shape[1] + shift * np.eye(n)


@pytest.mark.parametrize("drop", [[0], [39], [17], [0, 5, 6, 39], list(range(1, 40))], ids=["first", "last", "middle",
                                                                                        "several", "all but one"])
def test_cholesky_delete_equals_a_new_factorisation(rng, drop):
    """Deleting rows and columns of a factored matrix by rank-one updates gives numpy's factor of the smaller one."""
    A = _spd(rng, 40)
    L = np.asfortranarray(np.linalg.cholesky(A))
    stay = np.ones(40, dtype=bool)
    stay[drop] = False
    k = sq._cholesky_delete(L, stay)
    assert k == stay.sum()
    np.testing.assert_allclose(np.tril(L[:k, :k]), np.linalg.cholesky(A[np.ix_(stay, stay)]), atol=1e-12)


def test_face_factor_follows_the_working_set(rng, monkeypatch):
    """The factor kept along additions and deletions is the factor of G[S, S] in the order of S, and its face
    solutions are those of the dense KKT solve (``_solve_face``), for Q stored as float32 behind an index too."""
    monkeypatch.setattr(sq, "FACE_FACTOR_ANEW_MAX", 0)  # update at every size (small faces are factored anew)
    n = 60
    Q = _spd(rng, 80, rank=20, shift=0.0).astype(np.float32)
    index = rng.permutation(80)[:n]
    G = sq.QPMatrix(Q, scale=0.7, index=index).with_lowrank(rng.normal(size=(n, 2)), np.array([0.3, 0.1])).with_shift(0.05)
    a = rng.uniform(0, 1, size=n)
    face = sq._FaceFactor(G, np.array([7]))
    steps = [("add", np.array([3, 50, 12])), ("add", rng.permutation(np.setdiff1d(np.arange(n), [7, 3, 50, 12]))[:30]),
             ("keep", [1, 4, 33]), ("add", np.array([59])), ("keep", [0])]
    for kind, arg in steps:
        if kind == "add":
            face.add(arg)
        else:
            mask = np.ones(face.S.size, dtype=bool)
            mask[arg] = False
            face.keep(mask)
        B = G.block(face.S)
        np.testing.assert_allclose(face.L @ face.L.T, B, atol=1e-12)
        z, nu = face.solve(a)
        z0, nu0 = sq._solve_face(B, a, face.S)
        np.testing.assert_allclose(z, z0, atol=1e-9)
        assert nu == pytest.approx(nu0, abs=1e-9)
    assert face.S.size == 31 and face.S[0] == 50 and not np.isin([7, 3], face.S).any()  # gene 3 at position 1, 7 last


def test_face_factor_sets_a_singular_face_aside(rng, monkeypatch):
    """A gene identical to one already in S (no shift) makes G[S, S] singular: no factor, and the face is solved
    by the KKT system of the block, as before; a later deletion of the copy lets the next step factor again."""
    monkeypatch.setattr(sq, "FACE_FACTOR_ANEW_MAX", 0)
    B0 = rng.normal(size=(6, 3))
    B0 = np.vstack([B0, B0[[2]]])  # gene 6 copies gene 2
    G = sq.QPMatrix(B0 @ B0.T)
    a = rng.uniform(0, 1, size=7)
    face = sq._FaceFactor(G, np.array([0, 1, 2]))
    assert face.L is not None
    face.add(np.array([6]))
    assert face.L is None
    z, nu = face.solve(a)
    z0, nu0 = sq._solve_face(G.block(face.S), a, face.S)
    np.testing.assert_allclose(z, z0)
    face.keep(np.array([True, True, True, False]))
    face.add(np.array([4]))
    assert face.L is not None
    np.testing.assert_allclose(face.L @ face.L.T, G.block(face.S), atol=1e-12)


def test_bench_face_factor_quick_rows(capsys):
    """``bench_qpfs.py --face-factor --quick``: both ways of factoring solve the same class QPs (same weights)."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import bench_qpfs

    bench_qpfs.main(["--face-factor", "--quick"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith(("single-cell", "synthetic"))]
    assert [r[0] for r in rows] == ["single-cell", "synthetic"]
    for r in rows:
        n_qps, kept, anew, dx = int(r[4]), float(r[7]), float(r[8]), float(r[10])
        assert n_qps >= 1 and kept > 0 and anew > 0 and dx <= 1e-12
