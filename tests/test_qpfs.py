import warnings

import numpy as np
import pandas as pd
import pytest
import reference as ref
import scipy.sparse as sp

import bioqpfs
from bioqpfs import measures
from bioqpfs.selectors.qpfs import alpha_hat, solve_qpfs


def example1():
    """80 samples whose empirical joint distribution of (S, G, C) is exactly Fig. 1 of Nguyen et al. 2014.

    S in 1..4 (20 each); C = 0 for S in {1, 2}, 1 otherwise; G agrees with C in 19 of 20 samples per S
    (P(S=1, G=1) = 0.0125 = 1/80, ...).
    """
    S = np.repeat([1, 2, 3, 4], 20)
    C = (S >= 3).astype(int)
    G = C.copy()
    G[np.arange(4) * 20] = 1 - C[np.arange(4) * 20]  # one flipped sample per value of S
    return np.column_stack([S, G]), C


def test_example1_information_quantities():
    X, C = example1()
    Q = measures.mutual_information(X, discretization=None)   # X holds the example's codes
    F = measures.relevance(X, C, discretization=None)
    assert Q[0, 0] == pytest.approx(2.0, abs=1e-12)          # H(S) = 2 bits
    assert Q[1, 1] == pytest.approx(1.0, abs=1e-12)          # H(G) = 1 bit
    assert Q[0, 1] == pytest.approx(0.7136, abs=5e-5)        # I(S; G)
    assert F[0] == pytest.approx(1.0, abs=1e-12)             # I(S; C)
    assert F[1] == pytest.approx(0.7136, abs=5e-5)           # I(G; C)


def test_example1_qpfs_reproduces_printed_solution():
    """SPEC_CMI paper eq. 3: QPFS with alpha_hat gives x* = [0.42, 0.58] (coughing ranked above smoking)."""
    X, C = example1()
    sel = bioqpfs.qpfs(X, C, discretization=None, feature_names=["S", "G"])
    np.testing.assert_allclose(np.round(sel.weights, 2), [0.42, 0.58])
    assert sel.selected_names() == ["G", "S"]
    q_bar = (2 + 1 + 2 * 0.7136) / 4
    f_bar = (1 + 0.7136) / 2
    assert sel.params["alpha"] == pytest.approx(q_bar / (q_bar + f_bar), abs=1e-4)


def _random_problem(rng, m):
    Z = rng.normal(size=(m + 3, m))
    Q = Z.T @ Z / m
    F = rng.uniform(0, 1, size=m)
    return Q, F


@pytest.mark.parametrize("seed", range(6))
def test_solver_matches_support_enumeration(seed):
    rng = np.random.default_rng(seed)
    Q, F = _random_problem(rng, 7)
    alpha = rng.uniform(0.1, 0.9)
    x, diag = solve_qpfs(Q.copy(), F, alpha)
    xb, vb = ref.simplex_qp_bruteforce((1 - alpha) * Q, alpha * F)
    np.testing.assert_allclose(x, xb, atol=1e-7)
    assert diag["objective"] == pytest.approx(vb, rel=1e-9, abs=1e-12)
    assert diag["kkt_residual"] < 1e-8
    assert diag["psd_shift"] < 1e-6


def test_indefinite_q_is_shifted_and_reported(rng):
    Q, F = _random_problem(rng, 6)
    Q[0, 1] = Q[1, 0] = 3 * np.sqrt(Q[0, 0] * Q[1, 1])  # breaks PSD
    alpha = 0.4
    lam_min = np.linalg.eigvalsh((1 - alpha) * Q).min()
    assert lam_min < 0
    x, diag = solve_qpfs(Q.copy(), F, alpha)
    assert diag["indefinite"] and diag["psd_fix"] == "shift"
    assert diag["psd_shift"] == pytest.approx(-lam_min, rel=1e-6)
    G = (1 - alpha) * Q + diag["psd_shift"] * np.eye(6)
    xb, _ = ref.simplex_qp_bruteforce(G, alpha * F)
    np.testing.assert_allclose(x, xb, atol=1e-6)


def test_qpfs_end_to_end_against_references(rng):
    n, m = 60, 6
    y = rng.integers(0, 3, size=n)
    X = rng.normal(size=(n, m)) + 0.8 * y[:, None] * (np.arange(m) < 3)
    sel = bioqpfs.qpfs(X, y, psd_fix="shift")
    codes = ref.mean_sd_codes(X)
    Q = ref.mi_matrix(codes)
    F = np.array([ref.mutual_info(codes[:, g], y) for g in range(m)])
    alpha = Q.mean() / (Q.mean() + F.mean())
    assert sel.params["alpha"] == pytest.approx(alpha, rel=1e-12)
    G = (1 - alpha) * Q + sel.diagnostics["psd_shift"] * np.eye(m)
    xb, _ = ref.simplex_qp_bruteforce(G, alpha * F)
    np.testing.assert_allclose(sel.weights, xb, atol=1e-7)
    # ranking: weight desc, ties (zero weights) by relevance desc
    w, order = sel.weights, sel.ranking
    assert (np.diff(w[order]) <= 1e-12).all()
    zero = order[w[order] == 0]
    assert (np.diff(F[zero]) <= 1e-12).all()


def test_correlation_similarity_uses_hall_relevance(rng):
    X = rng.normal(size=(40, 5))
    y = (X[:, 0] + 0.3 * rng.normal(size=40) > 0).astype(int)
    sel = bioqpfs.qpfs(X, y, similarity="correlation", psd_fix="shift")
    assert sel.params["relevance"] == "hall"
    Q = np.abs(np.corrcoef(X, rowvar=False))
    F = ref.hall(X, y)
    a = Q.mean() / (Q.mean() + F.mean())
    xb, _ = ref.simplex_qp_bruteforce((1 - a) * Q + sel.diagnostics["psd_shift"] * np.eye(5), a * F)
    np.testing.assert_allclose(sel.weights, xb, atol=1e-7)
    assert sel.ranking[0] == 0


def test_ties_ranked_by_relevance_then_index():
    from bioqpfs._selection import rank_by_weight

    w = np.array([0.0, 0.5, 0.0, 0.5, 0.0])
    F = np.array([0.1, 0.2, 0.3, 0.9, 0.3])
    np.testing.assert_array_equal(rank_by_weight(w, F), [3, 1, 2, 4, 0])


def test_sparse_input_same_selection(rng):
    X = rng.poisson(1.0, size=(50, 8)).astype(float)
    y = rng.integers(0, 2, size=50)
    a = bioqpfs.qpfs(X, y)
    b = bioqpfs.qpfs(sp.csr_matrix(X), y)
    np.testing.assert_array_equal(a.ranking, b.ranking)
    np.testing.assert_allclose(a.weights, b.weights, atol=1e-12)


def test_constant_gene_gets_zero_weight_and_ranks_last(rng):
    X = rng.normal(size=(30, 5))
    X[:, 2] = 7.0
    y = rng.integers(0, 2, size=30)
    with pytest.warns(UserWarning, match="1 constant gene"):
        sel = bioqpfs.qpfs(X, y)
    assert sel.weights[2] == 0 and sel.ranking[-1] == 2
    assert sel.diagnostics["constant_genes"] == [2]


def test_bad_inputs_give_clear_errors(rng):
    X = rng.normal(size=(20, 4))
    y = np.repeat(["a", "b"], 10)
    Xn = X.copy()
    Xn[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"NaN or infinite values in 1 gene\(s\): g2"):
        bioqpfs.qpfs(Xn, y, feature_names=["g0", "g1", "g2", "g3"])
    with pytest.raises(ValueError, match="1 class"):
        bioqpfs.qpfs(X, ["a"] * 20)
    yn = pd.Series(y, dtype=object)
    yn[5] = np.nan
    with pytest.raises(ValueError, match="missing value"):
        bioqpfs.qpfs(X, yn)
    with pytest.raises(ValueError, match="n_genes=10 but only 4"):
        bioqpfs.qpfs(X, y, n_genes=10)
    with pytest.raises(ValueError, match="20 entries but the data have 19"):
        bioqpfs.qpfs(X[:19], y)
    with pytest.raises(ValueError, match="alpha must lie"):
        bioqpfs.qpfs(X, y, alpha=1.5)
    with pytest.raises(ValueError, match="every gene is constant"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bioqpfs.qpfs(np.ones((20, 3)), y)
    with pytest.raises(ValueError, match="unknown method"):
        bioqpfs.select(X, y, method="nope")
    with pytest.raises(TypeError, match="does not take parameter"):
        bioqpfs.select(X, y, method="qpfs", alhpa=0.3)


def test_caller_arrays_not_modified(rng):
    X = rng.normal(size=(30, 6))
    y = rng.integers(0, 2, size=30)
    X0, y0 = X.copy(), y.copy()
    bioqpfs.qpfs(X, y)
    bioqpfs.qpfs(X, y, similarity="correlation")
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)


def test_alpha_hat_definition():
    Q = np.array([[2.0, 1.0], [1.0, 1.0]])
    F = np.array([1.0, 0.5])
    a, q, f = alpha_hat(Q, F)
    assert (q, f) == (1.25, 0.75) and a == pytest.approx(1.25 / 2.0)


def test_default_psd_fix_none_is_a_kkt_point_of_the_unconvexified_problem(rng):
    """Default psd_fix='none': no change to Q; the weights satisfy the simplex KKT conditions of eq. 2 itself."""
    from bioqpfs._kernels import simplex_qp

    n, m = 40, 30
    y = rng.integers(0, 2, size=n)
    X = rng.normal(size=(n, m)) + 0.7 * y[:, None] * (np.arange(m) < 5)
    sel = bioqpfs.qpfs(X, y)
    assert sel.params.get("psd_fix", "none") == "none" and sel.diagnostics["psd_shift"] == 0.0
    Q = ref.mi_matrix(ref.mean_sd_codes(X))
    F = np.array([ref.mutual_info(ref.mean_sd_codes(X)[:, g], y) for g in range(m)])
    a = sel.params["alpha"]
    assert simplex_qp.kkt_residual((1 - a) * Q, a * F, sel.weights) < 1e-7
    assert sel.diagnostics["local"] == bool(np.linalg.eigvalsh((1 - a) * Q).min() < 0)


@pytest.mark.parametrize("kind", ["mst", "mst_cpx"])
def test_mst_relevance_by_name_equals_passing_the_vector(rng, kind):
    """relevance='mst'/'mst_cpx' (Sousa et al. 3.1) gives the same QPFS as passing measures.relevance's vector."""
    X = rng.normal(size=(30, 8))
    y = rng.integers(0, 2, size=30)
    X[:, 1] += 2 * y
    by_name = bioqpfs.qpfs(X, y, relevance=kind)
    F = measures.relevance(X, y, kind=kind)
    by_vector = bioqpfs.qpfs(X, y, relevance=F)
    np.testing.assert_allclose(by_name.weights, by_vector.weights, atol=1e-12)
    np.testing.assert_allclose(by_name.relevance, F)
    assert by_name.params["relevance"] == kind


def test_default_handles_psd_singular_q_from_identical_genes(rng):
    """Identical genes make Q PSD but singular: quadprog's factorisation needs a margin; the answer must
    still be the optimum of the unshifted problem (checked by the KKT conditions)."""
    from bioqpfs._kernels import simplex_qp

    X = rng.poisson(2.0, size=(24, 6)).astype(float)
    X[:, 3] = X[:, 0]
    X[:, 4] = X[:, 0]
    y = np.repeat([0, 1], 12)
    sel = bioqpfs.qpfs(X, y)
    codes = ref.mean_sd_codes(X)
    Q = ref.mi_matrix(codes)
    F = np.array([ref.mutual_info(codes[:, g], y) for g in range(6)])
    a = sel.params["alpha"]
    assert simplex_qp.kkt_residual((1 - a) * Q, a * F, sel.weights) < 1e-8
    assert sel.diagnostics["psd_shift"] == 0.0
