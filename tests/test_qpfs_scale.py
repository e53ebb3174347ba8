"""QPFS at genome scale (issue 3): large-scale solver, Nystrom, indefinite Q, EQPFS, forced genes.

References are independent of the code under test: quadprog on explicitly formed matrices, KKT
conditions evaluated here, numpy eigendecompositions, plain-loop information measures
(tests/reference.py), brute-force support enumeration.
"""
import math

import numpy as np
import pytest
import reference as ref
import scipy.linalg as sla

import bioqpfs
from bioqpfs import measures
from bioqpfs._kernels import nystrom as nys
from bioqpfs._kernels import psd
from bioqpfs._kernels import simplex_qp as sq
from bioqpfs.selectors import qpfs as qmod
from bioqpfs.selectors import qpfs_nystrom as qnys
from bioqpfs.selectors.eqpfs import eqpfs

kkt_violation = ref.simplex_kkt_violation


def quadprog_dense(G, a):
    return sq.solve_quadprog(np.asarray(G, dtype=np.float64), a)


@pytest.fixture(scope="module")
def srbct():
    ad = bioqpfs.datasets.srbct()
    X = np.asarray(ad.X)
    y = ad.obs["class"].cat.codes.to_numpy()
    return X, y, ad.var_names.to_numpy()


@pytest.fixture(scope="module")
def srbct_mi(srbct):
    X, y, _ = srbct
    codes = measures.discretize(X)
    return measures.mutual_information(codes, discretization=None), measures.relevance(codes, y, discretization=None)


# ----------------------------------------------------------------------------------------------
# the solver
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(3))
def test_project_simplex_is_the_euclidean_projection(seed):
    rng = np.random.default_rng(seed)
    v = rng.normal(size=40) * 2
    x = sq.project_simplex(v)
    xq = quadprog_dense(np.eye(40), v)  # argmin 1/2|x|^2 - v'x = argmin |x - v|^2 on the simplex
    np.testing.assert_allclose(x, xq, atol=1e-12)


@pytest.mark.parametrize("m,rank", [(30, 5), (200, 40), (600, 600)])
def test_spg_matches_quadprog_on_random_psd(m, rank):
    rng = np.random.default_rng(m)
    B = rng.normal(size=(m, rank))
    G = B @ B.T / rank + 1e-3 * np.eye(m)
    a = rng.uniform(0, 2, size=m)
    xq = quadprog_dense(G, a)
    x, info = sq.solve_spg(G, a)
    fq, fx = sq.objective(G, a, xq), sq.objective(G, a, x)
    assert abs(fx - fq) <= 1e-8 * abs(fq)
    np.testing.assert_allclose(x, xq, atol=1e-6)
    assert kkt_violation(G, a, x) < 1e-10
    assert info["converged"] and info["kkt_residual"] < 1e-10 and info["iterations"] >= 1


def test_spg_on_low_rank_products_matches_dense_quadprog():
    rng = np.random.default_rng(7)
    m, k = 300, 12
    U = np.linalg.qr(rng.normal(size=(m, k)))[0]
    w = rng.uniform(0.5, 5, size=k)
    a = rng.uniform(0, 1, size=m)
    op = sq.QPMatrix(U=U, w=w, shift=1e-2)
    G = (U * w) @ U.T + 1e-2 * np.eye(m)
    x, _ = sq.solve_spg(op, a)
    np.testing.assert_allclose(x, quadprog_dense(G, a), atol=1e-6)
    assert kkt_violation(G, a, x) < 1e-10


@pytest.mark.parametrize("m", [120, 1500])
def test_spg_matches_quadprog_on_real_mi(srbct_mi, m):
    Q, F = srbct_mi
    idx = np.sort(np.random.default_rng(m).choice(Q.shape[0], m, replace=False))
    Qs, Fs = Q[np.ix_(idx, idx)], F[idx]
    alpha = qmod.alpha_hat(Qs, Fs)[0]
    xq, dq = qmod.solve_qpfs(Qs, Fs, alpha, solver="quadprog")
    xs, ds = qmod.solve_qpfs(Qs, Fs, alpha, solver="spg")
    # quadprog's answer is polished when its KKT residual lands just above 1e-9 * scale (threaded BLAS
    # rounding can put it either side): both labels are the quadprog path
    assert dq["solver"] in ("quadprog", "quadprog+polish") and ds["solver"] == "spg"
    assert ds["psd_shift"] == pytest.approx(dq["psd_shift"], rel=1e-6)
    assert ds["indefinite"] == (m == 1500)  # the large real MI matrix is indefinite
    G = (1 - alpha) * Qs + ds["psd_shift"] * np.eye(m)
    fq, fs = sq.objective(G, alpha * Fs, xq), sq.objective(G, alpha * Fs, xs)
    assert abs(fs - fq) <= 1e-8 * abs(fq)
    np.testing.assert_allclose(xs, xq, atol=1e-6)
    assert kkt_violation(G, alpha * Fs, xs) < 1e-9


def test_auto_solver_picks_quadprog_for_small_problems(srbct_mi):
    Q, F = srbct_mi
    _, d_small = qmod.solve_qpfs(Q[:50, :50], F[:50], 0.3)
    _, d_big = qmod.solve_qpfs(Q[:400, :400], F[:400], 0.3)
    assert d_small["solver"] == "quadprog" and d_big["solver"] == "active_set"
    assert d_big["iterations"] >= 1 and d_big["kkt_residual"] < 1e-10 and "objective" in d_big


# ----------------------------------------------------------------------------------------------
# indefinite Q
# ----------------------------------------------------------------------------------------------

def _indefinite(m=60, seed=3):
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(m, m))
    Q = np.abs(B @ B.T) / m
    Q += np.diag(rng.uniform(-0.3, 0.1, size=m))  # pushes some eigenvalues negative
    Q[np.diag_indices(m)] = np.maximum(np.diag(Q), 0.05)
    F = rng.uniform(0, 1, size=m)
    return Q, F


@pytest.mark.parametrize("solver", ["quadprog", "spg"])
def test_indefinite_instance_each_fix_solved_and_recorded(solver):
    Q, F = _indefinite()
    Q[0, 1] = Q[1, 0] = 3 * np.sqrt(Q[0, 0] * Q[1, 1])
    alpha = 0.3
    G0 = (1 - alpha) * Q
    lam, V = np.linalg.eigh(G0)
    assert lam[0] < 0
    # shift
    x, d = qmod.solve_qpfs(Q, F, alpha, solver=solver, psd_fix="shift")
    assert d["psd_fix_applied"] == "shift" and d["indefinite"]
    assert d["psd_shift"] == pytest.approx(-lam[0], rel=1e-6)
    G = G0 + d["psd_shift"] * np.eye(Q.shape[0])
    np.testing.assert_allclose(x, quadprog_dense(G, alpha * F), atol=1e-6)
    # clip: nearest PSD matrix, formed here independently
    x, d = qmod.solve_qpfs(Q, F, alpha, solver=solver, psd_fix="clip")
    assert d["psd_fix_applied"] == "clip" and d["n_clipped"] == int((lam < 0).sum())
    Gc = (V * np.maximum(lam, 0)) @ V.T + d["psd_shift"] * np.eye(Q.shape[0])
    assert kkt_violation(Gc, alpha * F, x) < 1e-8
    # none: a KKT point of the non-convex problem, reported as local (quadprog refuses)
    if solver == "quadprog":
        with pytest.raises(ValueError, match="non-convex"):
            qmod.solve_qpfs(Q, F, alpha, solver=solver, psd_fix="none")
    else:
        x, d = qmod.solve_qpfs(Q, F, alpha, solver=solver, psd_fix="none")
        assert d["psd_fix_applied"] == "none" and d["local"] and d["psd_shift"] == 0
        assert kkt_violation(G0, alpha * F, x) < 1e-8


def test_clip_by_lanczos_equals_dense_clip_and_falls_back_to_shift(monkeypatch):
    Q, F = _indefinite(m=80, seed=5)
    alpha = 0.3
    lam, V = np.linalg.eigh((1 - alpha) * Q)
    n_neg = int((lam < 0).sum())
    assert 0 < n_neg < 20
    monkeypatch.setattr(psd, "CLIP_DENSE_MAX", 10)  # force the Lanczos path
    x, d = qmod.solve_qpfs(Q, F, alpha, solver="spg", psd_fix="clip")
    assert d["psd_fix_applied"] == "clip" and d["n_clipped"] == n_neg
    Gc = (V * np.maximum(lam, 0)) @ V.T
    assert kkt_violation(Gc + d["psd_shift"] * np.eye(80), alpha * F, x) < 1e-8
    # more negative eigenvalues than Lanczos may clip: clip the most negative, shift the rest
    monkeypatch.setattr(psd, "CLIP_LANCZOS_MAX", 2)
    x, d = qmod.solve_qpfs(Q, F, alpha, solver="spg", psd_fix="clip")
    assert d["psd_fix_applied"] == "clip+shift" and d["n_clipped"] == 2
    assert d["psd_shift"] == pytest.approx(-lam[1], rel=1e-5)
    G = (1 - alpha) * Q - (V[:, :2] * lam[:2]) @ V[:, :2].T + d["psd_shift"] * np.eye(80)
    assert np.linalg.eigvalsh(G)[0] > -1e-10
    assert kkt_violation(G, alpha * F, x) < 1e-8


def test_qpfs_records_fix_on_real_data(srbct):
    X, y, _ = srbct
    for fix in ("shift", "clip", "none"):
        sel = bioqpfs.qpfs(X[:, :600], y, n_genes=10, psd_fix=fix)
        d = sel.diagnostics
        assert sel.params["psd_fix"] == fix and d["psd_fix"] == fix
        assert d["psd_fix_applied"] in {"shift", "clip", "none"} and d["indefinite"]
        assert d["local"] == (fix == "none")
        assert np.isclose(sel.weights.sum(), 1) and (sel.weights >= 0).all()


# ----------------------------------------------------------------------------------------------
# Nystrom
# ----------------------------------------------------------------------------------------------

def test_nystrom_exact_for_known_rank():
    """Section 2.2: with rank k and r >= k independent rows the eigen-decomposition is exact."""
    rng = np.random.default_rng(0)
    m, k = 300, 8
    B = rng.normal(size=(m, k))
    Q = B @ B.T
    rows = nys.sample_rows(m, 0.05, rng)  # r = 15 >= k
    lam, U, info = nys.nystrom_eigh(Q[rows], rows)
    ref_lam = np.linalg.eigvalsh(Q)[::-1][:k]
    assert lam.size == k
    np.testing.assert_allclose(lam, ref_lam, rtol=1e-8)
    np.testing.assert_allclose((U * lam) @ U.T, Q, atol=1e-8 * np.abs(Q).max())
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-8)
    assert info["sum_Q_hat"] == pytest.approx(Q.sum(), rel=1e-8)


def test_subspace_qp_full_rank_equals_exact_qp():
    """p = 1, delta -> 0, PD Q: the published subspace QP (eq. 5) is the exact QP (eq. 2)."""
    rng = np.random.default_rng(1)
    m = 150
    B = rng.normal(size=(m, m + 5))
    Q = B @ B.T / m
    F = rng.uniform(0, 1, size=m)
    alpha = 0.4
    rows = np.arange(m)
    lam, U, _ = nys.nystrom_eigh(Q, rows)
    assert lam.size == m
    y, _ = qnys._solve_subspace(lam, U, F, alpha, np.zeros(0, dtype=int), None)
    x_exact = quadprog_dense((1 - alpha) * Q, alpha * F)
    np.testing.assert_allclose(U @ y, x_exact, atol=1e-6)


def test_nystrom_p1_lowrank_equals_exact_qpfs_with_clip(srbct):
    """p = 1 makes Q_hat = Q_+ (negative part dropped): the low-rank QP is exact QPFS with clip."""
    X, y, _ = srbct
    Xs = X[:, :250]
    a = 0.3
    s_exact = bioqpfs.qpfs(Xs, y, alpha=a, psd_fix="clip")
    s_nys = bioqpfs.qpfs(Xs, y, alpha=a, nystrom_rate=1.0, nystrom_qp="lowrank", random_state=0)
    np.testing.assert_allclose(s_nys.weights, s_exact.weights, atol=1e-6)
    # alpha_hat from Q_hat (eq. 9) = mean of the positive part of Q
    Q = measures.mutual_information(measures.discretize(Xs))
    lam, V = np.linalg.eigh(Q)
    q_plus = ((V * np.maximum(lam, 0)) @ V.T).mean()
    s_hat = bioqpfs.qpfs(Xs, y, nystrom_rate=1.0, random_state=0)
    assert s_hat.diagnostics["q_bar"] == pytest.approx(q_plus, rel=1e-8)


def test_nystrom_diagnostics_reproducibility_and_error_estimate(srbct):
    X, y, _ = srbct
    Xs = X[:, :600]
    m = Xs.shape[1]
    s1 = bioqpfs.qpfs(Xs, y, n_genes=20, nystrom_rate=0.2, eig_threshold=0.5, random_state=1)
    s1b = bioqpfs.qpfs(Xs, y, n_genes=20, nystrom_rate=0.2, eig_threshold=0.5, random_state=1)
    s2 = bioqpfs.qpfs(Xs, y, n_genes=20, nystrom_rate=0.2, eig_threshold=0.5, random_state=2)
    np.testing.assert_array_equal(s1.weights, s1b.weights)
    assert not np.array_equal(s1.weights, s2.weights)
    d = s1.diagnostics
    assert d["r"] == math.ceil(0.2 * m)
    assert d["k_tilde"] <= d["r"]
    assert d["gamma_bound"] == pytest.approx((m + 1) * (m - d["k_tilde"]) * 0.5 / 2)
    assert d["nystrom_qp"] == "subspace" and d["solver"] == "quadprog (subspace)"
    # the published constraints hold: x = U y on the simplex
    assert np.isclose(s1.weights.sum(), 1) and (s1.weights >= 0).all()
    # ||Q - Q_hat||_F estimate against the truth
    Q = measures.mutual_information(measures.discretize(Xs))
    rows = nys.sample_rows(m, 0.2, np.random.default_rng(1))
    lam, U, _ = nys.nystrom_eigh(Q[rows], rows, eig_threshold=0.5)
    true = np.linalg.norm(Q - (U * lam) @ U.T)
    assert d["frobenius_error_estimate"] == pytest.approx(true, rel=0.3)


def test_one_nystrom_error_estimate_for_qpfs_and_spec_cmi_against_brute_force(monkeypatch):
    """The ||Q - Q_hat||_F estimate is one kernel function: with every unsampled row as an error row it equals
    the brute-force Frobenius norm of Q - U diag(lam) U^T on a small matrix (blocks of ROW_BLOCK rows too), and
    both QPFS + Nystrom and SPEC_CMI + Nystrom report what it returns."""
    rng = np.random.default_rng(3)
    m = 40
    B = rng.normal(size=(m, 6))
    Q = B @ B.T + 0.3 * rng.normal(size=(m, m))
    Q = 0.5 * (Q + Q.T)                                 # symmetric, indefinite, not low rank
    rows = nys.sample_rows(m, 0.3, rng)
    lam, U, _ = nys.nystrom_eigh(Q[rows], rows)
    rest = np.setdiff1d(np.arange(m), rows)
    diff = Q - (U * lam) @ U.T                          # the M x M matrices, formed only here
    true = math.sqrt(sum(diff[i, j] ** 2 for i in range(m) for j in range(m)))
    norm_q = math.sqrt(sum(Q[i, j] ** 2 for i in range(m) for j in range(m)))
    monkeypatch.setattr(nys, "ROW_BLOCK", 5)            # several blocks of sampled rows
    est = nys.error_estimate(Q[rows], rows, Q[rest], rest, U, lam)
    assert est["frobenius_error_estimate"] == pytest.approx(true, rel=1e-12)
    assert est["relative_frobenius_error_estimate"] == pytest.approx(true / norm_q, rel=1e-12)
    assert est["n_error_rows"] == rest.size
    # a subset of the unsampled rows: their squared error scaled by (M - r) / e, plus the sampled rows exactly
    sub = nys.error_rows(m, rows, 7, np.random.default_rng(0))
    assert sub.size == 7 and not np.isin(sub, rows).any() and (np.diff(sub) > 0).all()
    part = nys.error_estimate(Q[rows], rows, Q[sub], sub, U, lam)["frobenius_error_estimate"]
    expect = math.sqrt((diff[rows] ** 2).sum() + (diff[sub] ** 2).sum() * rest.size / 7)
    assert part == pytest.approx(expect, rel=1e-12)
    # both Nystrom methods report the shared function's result
    seen = []
    real = nys.error_estimate
    monkeypatch.setattr(nys, "error_estimate", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    X = rng.normal(size=(40, 30))
    y = np.arange(40) % 2
    X[:, :3] += y[:, None]
    for method in ("qpfs", "spec_cmi_nystrom"):
        kw = dict(nystrom_rate=0.3) if method == "qpfs" else {}
        sel = bioqpfs.select(X, y, method=method, n_genes=3, **kw)
        assert sel.diagnostics["frobenius_error_estimate"] == seen[-1]["frobenius_error_estimate"], method
    assert len(seen) == 2


def test_nystrom_lowrank_and_subspace_differ_as_documented(srbct):
    X, y, _ = srbct
    Xs = X[:, :400]
    kw = dict(n_genes=10, nystrom_rate=0.1, random_state=0, alpha=0.3)
    sub = bioqpfs.qpfs(Xs, y, nystrom_qp="subspace", **kw)
    low = bioqpfs.qpfs(Xs, y, nystrom_qp="lowrank", **kw)
    # same Q_hat: the low-rank optimum is over the whole simplex, so never worse on Q_hat
    assert low.diagnostics["objective_nystrom"] <= sub.diagnostics["objective_nystrom"] + 1e-9
    assert low.diagnostics["solver"] == "spg"


def test_nystrom_never_forms_the_full_matrix(srbct, monkeypatch):
    X, y, _ = srbct
    from bioqpfs._kernels import information as info

    seen = []
    orig = info.pairwise_information

    def spy(*args, rows=None, **kw):
        seen.append(None if rows is None else len(rows))
        return orig(*args, rows=rows, **kw)

    monkeypatch.setattr(info, "pairwise_information", spy)
    bioqpfs.qpfs(X, y, nystrom_rate=0.05, random_state=0)
    assert seen and None not in seen and max(seen) <= math.ceil(0.05 * X.shape[1])


# ----------------------------------------------------------------------------------------------
# forced genes
# ----------------------------------------------------------------------------------------------

def test_preselected_first_in_order_and_rest_is_conditioned_optimum(srbct):
    X, y, names = srbct
    Xs, ns = X[:, :200], names[:200]
    forced = [ns[50], ns[3], ns[120]]
    alpha = 0.3
    sel = bioqpfs.qpfs(Xs, y, n_genes=12, alpha=alpha, preselected=forced, feature_names=ns, solver="quadprog")
    assert list(ns[sel.ranking[:3]]) == forced
    s = sel.params["preselected_share"]
    assert s == pytest.approx(3 / 12)
    # conditioned problem built here: x_P = s/|P|, x_R = (1-s) z
    Q = measures.mutual_information(measures.discretize(Xs))
    F = measures.relevance(Xs, y)
    P = np.array([50, 3, 120])
    R = np.setdiff1d(np.arange(200), P)
    G = (1 - alpha) * (1 - s) * Q[np.ix_(R, R)]
    a = alpha * F[R] - (1 - alpha) * s * Q[np.ix_(R, P)].mean(axis=1)
    lam_min = np.linalg.eigvalsh(G)[0]
    assert sel.diagnostics["psd_shift"] == pytest.approx(max(0, -lam_min), rel=1e-6)
    z = quadprog_dense(G + sel.diagnostics["psd_shift"] * np.eye(R.size), a)
    np.testing.assert_allclose(sel.weights[R], (1 - s) * z, atol=1e-6)
    np.testing.assert_allclose(sel.weights[P], s / 3)
    # the rest follows by weight
    rest = sel.ranking[3:]
    assert (np.diff(sel.weights[rest]) <= 1e-12).all()
    # the large-scale solver and integer indices give the same
    sel2 = bioqpfs.qpfs(Xs, y, n_genes=12, alpha=alpha, preselected=[50, 3, 120], solver="spg")
    np.testing.assert_allclose(sel2.weights, sel.weights, atol=1e-6)


def test_preselected_with_nystrom_and_errors(srbct):
    X, y, names = srbct
    Xs, ns = X[:, :300], names[:300]
    sel = bioqpfs.qpfs(Xs, y, n_genes=5, nystrom_rate=0.2, preselected=[7, 9], random_state=0)
    assert list(sel.ranking[:2]) == [7, 9]
    assert np.isclose(sel.weights.sum(), 1) and (sel.weights >= -1e-15).all()
    with pytest.raises(ValueError, match="not found"):
        bioqpfs.qpfs(Xs, y, preselected=["NO_SUCH_GENE"], feature_names=ns)
    with pytest.raises(ValueError, match="more than once"):
        bioqpfs.qpfs(Xs, y, preselected=[1, 1])
    with pytest.raises(ValueError, match="out of range"):
        bioqpfs.qpfs(Xs, y, preselected=[5000])


# ----------------------------------------------------------------------------------------------
# EQPFS
# ----------------------------------------------------------------------------------------------

def test_eqpfs_against_plain_loop_references(rng):
    n, m = 90, 9
    y = rng.integers(0, 3, size=n)
    X = rng.normal(size=(n, m)) + 0.9 * y[:, None] * (np.arange(m) < 4)
    X[:, 5] = X[:, 0] + 0.3 * rng.normal(size=n)
    beta = 0.7
    sel = eqpfs(X, y, beta=beta)
    codes = ref.mean_sd_codes(X)
    H = ref.mi_matrix(codes) - beta * ref.mi_given_class_matrix(codes, y)
    np.fill_diagonal(H, 0)
    f = np.array([ref.mutual_info(codes[:, g], y) for g in range(m)])
    lam = sel.params["lam"]
    assert lam == pytest.approx(max(0, -np.linalg.eigvalsh(H)[0]), rel=1e-6, abs=1e-9)
    alpha = f.mean() / (2 * H.sum() / (m * (m - 1)))
    assert sel.params["alpha"] == pytest.approx(alpha, rel=1e-9)
    Hl = H + lam * np.eye(m)
    xb, vb = ref.simplex_qp_bruteforce(2 * alpha * Hl, f)  # alpha x'Hx - f'x
    np.testing.assert_allclose(sel.weights, xb, atol=1e-6)
    assert sel.diagnostics["objective_eq13"] == pytest.approx(vb, rel=1e-8, abs=1e-12)
    # given alpha, beta = 0, lam: plain QPFS redundancy with a common diagonal
    sel0 = eqpfs(X, y, alpha=0.5, beta=0.0, lam=3.0)
    H0 = ref.mi_matrix(codes)
    np.fill_diagonal(H0, 3.0)
    xb0, _ = ref.simplex_qp_bruteforce(H0, f)
    np.testing.assert_allclose(sel0.weights, xb0, atol=1e-6)


def test_eqpfs_small_lambda_is_fixed_and_reported(rng):
    y = rng.integers(0, 2, size=60)
    X = rng.normal(size=(60, 12)) + y[:, None] * (np.arange(12) < 3)
    sel = eqpfs(X, y, lam=0.0, psd_fix="shift")
    d = sel.diagnostics
    assert d["redundancy_min_eigenvalue"] < 0 and d["indefinite"] and d["psd_fix_applied"] == "shift"
    assert np.isclose(sel.weights.sum(), 1)


# ----------------------------------------------------------------------------------------------
# faces
# ----------------------------------------------------------------------------------------------

def test_registry_tl_and_cli_reach_the_new_options(tmp_path):
    ad = bioqpfs.datasets.srbct()[:, :300].copy()
    bioqpfs.tl.select_genes(ad, "class", method="qpfs", n_genes=5, nystrom_rate=0.3, solver="spg")
    assert ad.uns["qpfs"]["params"]["nystrom_rate"] == 0.3
    assert "k_tilde" in ad.uns["qpfs"]["diagnostics"]
    assert "eqpfs" in bioqpfs.methods()
    sel = bioqpfs.select(ad.X, ad.obs["class"], method="eqpfs", n_genes=4, beta=0.5)
    assert sel.method == "eqpfs" and len(sel.selected) == 4

    from bioqpfs.cli import main

    inp = tmp_path / "in.h5ad"
    ad.write_h5ad(inp)
    genes = list(ad.var_names[[10, 4]])
    out = tmp_path / "out.h5ad"
    rc = main(["select", str(inp), "--groupby", "class", "--method", "qpfs", "--n-genes", "6", "--solver", "spg",
               "--nystrom-rate", "0.5", "--preselected", ",".join(genes), "-o", str(out), "--quiet"])
    assert rc == 0
    import anndata

    res = anndata.read_h5ad(out)
    assert list(res.uns["qpfs"]["selected"][:2]) == genes
    assert res.uns["qpfs"]["params"]["nystrom_rate"] == 0.5
    assert res.uns["qpfs"]["diagnostics"]["n_preselected"] == 2


def test_psd_fix_none_sign_by_a_loose_lanczos_run(srbct_mi, monkeypatch):
    """psd_fix="none" needs only the sign of lambda_min: a loose Lanczos run whose Ritz value (never below
    lambda_min) is negative settles it; a non-negative one is confirmed at full precision (issue 14)."""
    Q, F = srbct_mi
    m = 600                                   # above the dense-LAPACK size: the Lanczos path
    Q, F = Q[:m, :m], F[:m]
    alpha = 0.5
    exact = float(np.linalg.eigvalsh((1 - alpha) * Q)[0])   # the independent reference
    assert exact < 0                          # real MI matrices are indefinite
    calls = []
    real = sq.smallest_eigenvalue
    monkeypatch.setattr(sq, "smallest_eigenvalue",
                        lambda G, **kw: calls.append(kw.get("tol")) or real(G, **kw))
    x, d = qmod.solve_qpfs(Q, F, alpha, psd_fix="none")
    assert calls == [psd.NONE_SIGN_TOL] and d["indefinite"] and d["psd_fix_applied"] == "none"
    assert exact <= d["min_eigenvalue"] <= 0.95 * exact   # an upper bound, within 5% of the value
    G0 = (1 - alpha) * Q
    assert d["local"] and kkt_violation(G0, alpha * F, x) < 1e-8
    # a PSD Q: the loose run is not trusted; a Cholesky factorisation certifies it definite ("none needed", a convex
    # problem), and the loose value is reported (an upper bound within a few percent)
    calls.clear()
    P = Q - exact / (1 - alpha) * np.eye(m) + 1e-3 * np.eye(m)
    exact_p = float(np.linalg.eigvalsh((1 - alpha) * P)[0])
    x, d = qmod.solve_qpfs(P, F, alpha, psd_fix="none")
    assert calls == [psd.NONE_SIGN_TOL] and d["eigen_method"] == "cholesky"
    assert d["psd_fix_applied"] == "none needed" and not d["local"]
    assert exact_p <= d["min_eigenvalue"] * (1 + 1e-9) <= 1.15 * exact_p
    # without the factorisation (too large a copy), the full run confirms it, as before
    calls.clear()
    monkeypatch.setattr(psd, "CHOLESKY_MAX_BYTES", 0)
    x2, d = qmod.solve_qpfs(P, F, alpha, psd_fix="none")
    assert calls == [psd.NONE_SIGN_TOL, None] and d["psd_fix_applied"] == "none needed" and not d["local"]
    assert d["min_eigenvalue"] == pytest.approx(exact_p, rel=1e-6)
    np.testing.assert_array_equal(x2, x)


def test_definite_g_certified_by_cholesky_for_the_shift(srbct_mi, monkeypatch):
    """psd_fix="shift" on a definite G (beyond the dense-LAPACK size): a Cholesky factorisation of G - margin I
    proves that no shift is needed, instead of a full-precision Lanczos run; an indefinite G is shifted as before."""
    Q, F = srbct_mi
    m = 600
    Q, F = Q[:m, :m], F[:m]
    alpha = 0.5
    exact = float(np.linalg.eigvalsh((1 - alpha) * Q)[0])
    P = Q - exact / (1 - alpha) * np.eye(m) + 1e-3 * np.eye(m)
    calls = []
    real = sq.smallest_eigenvalue
    monkeypatch.setattr(sq, "smallest_eigenvalue", lambda G, **kw: calls.append(kw.get("tol")) or real(G, **kw))
    x, d = qmod.solve_qpfs(P, F, alpha, psd_fix="shift")
    assert d["eigen_method"] == "cholesky" and d["psd_shift"] == 0.0 and d["psd_fix_applied"] == "none needed"
    # the value reported comes from the factor (Lanczos on the inverse, a few products), not from a run on G
    assert calls == [] and d["eigen_matvecs"] < 60
    assert d["min_eigenvalue"] == pytest.approx((1 - alpha) * 1e-3, rel=1e-8)
    monkeypatch.setattr(psd, "CHOLESKY_MAX_BYTES", 0)
    x_ref, d_ref = qmod.solve_qpfs(P, F, alpha, psd_fix="shift")
    assert d_ref["eigen_method"] == "lanczos" and d_ref["psd_shift"] == 0.0
    np.testing.assert_array_equal(x, x_ref)
    monkeypatch.undo()
    x, d = qmod.solve_qpfs(Q, F, alpha, psd_fix="shift")   # indefinite: the factorisation fails, Lanczos shifts
    assert d["eigen_method"] == "lanczos" and d["psd_shift"] == pytest.approx(-exact * (1 + 1e-9), rel=1e-6)


def test_definite_beyond_against_eigenvalues(rng):
    A = rng.normal(size=(60, 60))
    G = sq.QPMatrix(A @ A.T + 0.5 * np.eye(60))
    lam = float(np.linalg.eigvalsh(G.dense())[0])
    assert psd.definite_beyond(G, 0.0) and psd.definite_beyond(G, 0.9 * lam)
    assert not psd.definite_beyond(G, 1.1 * lam)
    assert not psd.definite_beyond(sq.QPMatrix(A + A.T), 0.0)   # indefinite


def test_shared_eigenvalue_of_a_definite_q_is_a_certified_bound(srbct_mi, monkeypatch):
    """qpfs_cover's shared q_min beyond 500 genes: a definite Q is certified by one Cholesky factorisation (a lower
    bound, no Lanczos run), and every per-class problem then gets the shift of the exact eigenvalue (none) and the
    same optimum; an indefinite Q still gets its eigenvalue (the shift needs it)."""
    Q, F = srbct_mi
    m = 600
    Q, F = Q[:m, :m], F[:m]
    exact = float(np.linalg.eigvalsh(Q)[0])                # the independent reference
    assert exact < 0
    P = Q + (1e-3 - exact) * np.eye(m)                     # definite, lambda_min = 1e-3
    calls = []
    real = sq.smallest_eigenvalue
    monkeypatch.setattr(sq, "smallest_eigenvalue", lambda G, **kw: calls.append(kw.get("tol")) or real(G, **kw))
    bound = psd.min_eigenvalue_with_safety(P)
    assert calls == [] and 0 < bound == psd.DEFINITE_FLOOR * np.max(np.diag(P)) <= 1e-3
    for alpha in (0.3, 0.9):
        x1, d1 = qmod.solve_qpfs(P, F, alpha, psd_fix="shift")
        x2, d2 = qmod.solve_qpfs(P, F, alpha, psd_fix="shift", q_min_eigenvalue=bound)
        assert d1["psd_shift"] == d2["psd_shift"] == 0.0
        np.testing.assert_allclose(x2, x1, atol=1e-9)
    calls.clear()
    q = psd.min_eigenvalue_with_safety(Q)                  # indefinite: the full-precision value
    assert calls == [None] and q == pytest.approx(exact, rel=1e-8) and q <= exact


def test_lanczos_without_a_ritz_value_falls_back_to_lapack(monkeypatch):
    """ARPACK can stop without a single Ritz value (a clustered spectrum bottom); the eigenvalue is then the dense
    LAPACK one, never NaN (a NaN made the psd shift silently 0); too large for a dense copy: a clear error."""
    import scipy.sparse.linalg as ssl

    rng = np.random.default_rng(3)
    A = rng.normal(size=(600, 600))
    G = sq.QPMatrix((A + A.T) / 2, scale=1.0)
    exact = float(np.linalg.eigvalsh(G.dense())[0])

    def stuck(*args, **kwargs):
        raise ssl.ArpackNoConvergence("no convergence", np.zeros(0), np.zeros((600, 0)))

    monkeypatch.setattr(ssl, "eigsh", stuck)
    lam, info = sq.smallest_eigenvalue(G, return_info=True)
    assert lam == pytest.approx(exact, rel=1e-12) and info["method"] == "lapack" and info["converged"]
    monkeypatch.setattr(sq, "DENSE_FALLBACK_BYTES", 1000)
    with pytest.raises(RuntimeError, match="did not converge.*psd_fix='clip'"):
        sq.smallest_eigenvalue(G)


def test_cholesky_factor_checks_a_leading_block_first(monkeypatch, rng):
    """An indefinite leading block proves G indefinite (interlacing), so the factorisation of all of G is skipped;
    a definite leading block leaves the verdict to the whole factorisation (the block is only a shortcut)."""
    monkeypatch.setattr(psd, "LEADING_CHECK", 20)
    m = 100
    A = rng.normal(size=(m, m))
    P = A @ A.T / m + 0.1 * np.eye(m)                       # definite
    L = psd.cholesky_factor(sq.QPMatrix(P, scale=2.0), 0.05)
    np.testing.assert_allclose(np.tril(L) @ np.tril(L).T, 2.0 * P - 0.05 * np.eye(m), atol=1e-10)
    lead_bad = P.copy()
    lead_bad[3, 3] = -1.0                                   # indefinite within the leading 20 x 20 block
    tail_bad = P.copy()
    tail_bad[90, 90] = -1.0                                 # definite leading block, indefinite G
    full = []
    real = sla.lapack.dpotrf
    monkeypatch.setattr(sla.lapack, "dpotrf", lambda a, **kw: full.append(a.shape[0]) or real(a, **kw))
    assert psd.cholesky_factor(sq.QPMatrix(lead_bad, scale=1.0), 0.0) is None and full == [20]
    full.clear()
    assert psd.cholesky_factor(sq.QPMatrix(tail_bad, scale=1.0), 0.0) is None and full == [20, m]
    assert not psd.definite_beyond(sq.QPMatrix(tail_bad, scale=1.0), 0.0)
