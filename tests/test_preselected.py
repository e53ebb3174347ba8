"""``preselected=`` for every registered method (issue 15 item 3): forced genes first in the given order, the
rest chosen given them; checked against independent references (plain-loop greedy, the KKT conditions of the
reduced QP, the eigenvector and the exhaustive optimum of the conditioned QIP_CMI)."""
import inspect
import warnings

import numpy as np
import pandas as pd
import pytest
import reference as ref

import bioqpfs
from bioqpfs._registry import method_function, methods
from bioqpfs.selectors import _qp

METHODS = sorted(methods())


def _data(seed=0, n=60, m=24, n_classes=3):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % n_classes
    X = rng.normal(size=(n, m))
    X[:, :4] += 1.5 * y[:, None]
    X[:, 5] = X[:, 0] + 0.1 * rng.normal(size=n)   # a redundant copy of gene 0
    return X, y, [f"g{i}" for i in range(m)]


def _codes(seed=0, n=50, m=10):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    codes = rng.integers(0, 3, size=(n, m))
    codes[:, 1] = np.where(rng.random(n) < 0.7, y, codes[:, 1])
    codes[:, 4] = np.where(rng.random(n) < 0.5, y, codes[:, 4])
    codes[:, 6] = codes[:, 1]
    return codes.astype(np.uint8), y


@pytest.mark.parametrize("method", METHODS)
def test_every_method_ranks_forced_genes_first_and_empty_list_changes_nothing(method):
    assert "preselected" in inspect.signature(method_function(method)).parameters
    X, y, names = _data()
    kw = dict(n_genes=6, feature_names=names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = bioqpfs.select(X, y, method=method, **kw)
        empty = bioqpfs.select(X, y, method=method, preselected=[], **kw)
        forced = bioqpfs.select(X, y, method=method, preselected=["g20", "g5", "g1"], **kw)
        by_index = bioqpfs.select(X, y, method=method, preselected=[20, 5, 1], n_genes=6)
    np.testing.assert_array_equal(empty.ranking, plain.ranking)
    np.testing.assert_array_equal(empty.weights, plain.weights)
    assert "preselected" not in plain.params
    assert list(forced.ranking[:3]) == [20, 5, 1]
    assert list(np.asarray(names)[forced.selected[:3]]) == ["g20", "g5", "g1"]
    assert forced.params["preselected"] == ["g20", "g5", "g1"]
    assert len(set(forced.ranking[:6].tolist())) == 6
    np.testing.assert_array_equal(by_index.ranking[:6], forced.ranking[:6])


@pytest.mark.parametrize("criterion", ["mrmr_mid", "mrmr_miq", "jmi", "cife"])
@pytest.mark.parametrize("start", [[7], [6, 2], [9, 0, 3]])
def test_greedy_starts_from_the_forced_set_as_a_plain_loop_does(criterion, start):
    codes, y = _codes()
    sel = bioqpfs.select(codes, y, method=criterion, n_genes=6, preselected=start, discretization=None)
    assert list(sel.ranking) == ref.greedy_mi_selection(codes, y, criterion, 6, start=start)
    assert np.isnan(sel.extra_columns["greedy_score"][start]).all()


def test_shared_forced_gene_qp_satisfies_the_kkt_conditions_of_the_reduced_qp():
    rng = np.random.default_rng(4)
    m = 12
    B = rng.normal(size=(m, m))
    Q = B @ B.T / m + 0.1 * np.eye(m)            # PSD: the reduced QP is convex, KKT = optimum
    F = rng.random(m)
    P = np.array([9, 3])
    alpha, s = 0.4, 0.3
    x, d = _qp.solve_qpfs(Q, F, alpha, preselected=P, preselected_share=s, psd_fix="none")
    np.testing.assert_allclose(x[P], s / 2)
    R = np.setdiff1d(np.arange(m), P)
    # the reduced QP written out here: min 1/2 (1-a)(1-s) z'Q_RR z - [a F_R - (1-a) s Q_RP u]'z on the simplex
    G = (1 - alpha) * (1 - s) * Q[np.ix_(R, R)]
    a = alpha * F[R] - (1 - alpha) * s * Q[np.ix_(R, P)].mean(axis=1)
    z = x[R] / (1 - s)
    assert ref.simplex_kkt_violation(G, a, z) < 1e-7
    np.testing.assert_allclose(z, ref.simplex_qp_bruteforce(G, a)[0], atol=1e-6)


@pytest.mark.parametrize("method", ["qpfs", "eqpfs", "tlkm_qpfs"])
def test_qp_methods_record_the_share_and_weigh_forced_genes_equally(method):
    X, y, names = _data(1)
    sel = bioqpfs.select(X, y, method=method, n_genes=8, preselected=["g9", "g2"], feature_names=names)
    s = sel.params["preselected_share"]
    assert s == pytest.approx(2 / 8)
    np.testing.assert_allclose(sel.weights[[9, 2]], s / 2)
    assert sel.weights.sum() == pytest.approx(1.0)


def _spec_q(codes, y):
    C = ref.cmi_matrix(codes, y)
    Q = 0.5 * (C + C.T)
    Q[np.diag_indices_from(Q)] = np.diag(C)
    return Q


def test_spec_cmi_rest_is_the_dominant_eigenvector_of_the_conditioned_problem():
    codes, y = _codes(2, m=9)
    Q = _spec_q(codes, y)
    P = [5, 2]
    R = np.setdiff1d(np.arange(9), P)
    # the conditioning: x'Qx = x_R'Q'x_R + 1'Q_PP 1 for every 0-1 x with x_P = 1
    Qc = Q[np.ix_(R, R)] + np.diag(2 * Q[np.ix_(R, P)].sum(axis=1))
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = np.zeros(9)
        x[P] = 1
        x[R] = rng.integers(0, 2, R.size)
        assert x @ Q @ x == pytest.approx(x[R] @ Qc @ x[R] + Q[np.ix_(P, P)].sum())
    sel = bioqpfs.select(codes, y, method="spec_cmi", n_genes=4, preselected=P, discretization=None)
    lam, V = np.linalg.eigh(Qc)
    v = np.abs(V[:, -1])
    np.testing.assert_allclose(sel.weights[R], v, atol=1e-8)
    np.testing.assert_allclose(sel.weights[P], v.max())
    assert list(sel.ranking[:2]) == P


def test_sdp_cmi_with_forced_genes_reaches_the_exhaustive_optimum_containing_them():
    codes, y = _codes(3, m=9)
    Q = _spec_q(codes, y)
    P = [7, 0]
    sel = bioqpfs.select(codes, y, method="sdp_cmi", n_genes=4, preselected=P, discretization=None)
    best, best_val = ref.best_subset_bruteforce(Q, None, 4, lin=0.0, fixed=P)
    assert sorted(sel.selected.tolist()) == best
    assert sel.diagnostics["qip_objective"] == pytest.approx(best_val, rel=1e-9)
    assert sel.diagnostics["exhaustive_optimum"] == pytest.approx(best_val, rel=1e-9)
    assert list(sel.ranking[:2]) == P


@pytest.mark.parametrize("method", METHODS)
def test_every_method_takes_a_panel_of_the_forced_genes_only(method):
    """Before: sdp_cmi refused n_genes == len(preselected) ("no gene left to choose") while every other method
    gave the forced genes as the panel and ranked the rest.  sdp_cmi now does too, ranking the rest as it
    would add them (its relaxation for one more gene), with the panel's exact objective."""
    X, y, names = _data(m=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sel = bioqpfs.select(X, y, method=method, n_genes=2, preselected=[7, 1])
        assert list(sel.selected) == [7, 1] and len(set(sel.ranking.tolist())) == len(sel.ranking)
        if method == "sdp_cmi":
            nxt = bioqpfs.select(X, y, method=method, n_genes=3, preselected=[7, 1])
            np.testing.assert_array_equal(sel.ranking, nxt.ranking)
            Q = _spec_q(bioqpfs.measures.discretize(X), y)
            panel = Q[np.ix_([7, 1], [7, 1])].sum()
            for key in ("qip_objective", "sdp_bound", "exhaustive_optimum"):
                assert sel.diagnostics[key] == pytest.approx(panel, rel=1e-9)
            assert sel.diagnostics["relative_gap"] == 0.0


def test_maxrel_and_random_keep_their_order_for_the_rest():
    X, y, names = _data()
    plain = bioqpfs.select(X, y, method="maxrel")
    forced = bioqpfs.select(X, y, method="maxrel", preselected=[10, 0])
    assert list(forced.ranking) == [10, 0] + [g for g in plain.ranking if g not in (10, 0)]
    r0 = bioqpfs.select(X, y, method="random", random_state=3)
    r1 = bioqpfs.select(X, y, method="random", random_state=3, preselected=[4])
    assert list(r1.ranking) == [4] + [g for g in r0.ranking if g != 4]


def test_ldfs_leaves_forced_rows_unpenalised_and_fills_the_panel_with_informative_genes():
    X, y, _ = _data(5, m=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sel = bioqpfs.select(X, y, method="ldfs", n_genes=5, preselected=[12])
    assert sel.ranking[0] == 12 and sel.params["target_genes"] == 4
    assert sel.weights[12] > 0                      # unpenalised: used by the transformation
    assert set(sel.ranking[1:5].tolist()) <= {0, 1, 2, 3, 5}   # the class-shifted genes


@pytest.mark.parametrize("method", ["mrmr_mid", "spec_cmi", "ldfs", "qpfs_cover"])
def test_one_validation_with_clear_errors(method):
    X, y, names = _data()
    X = X.copy()
    X[:, 22] = 1.0
    with pytest.raises(ValueError, match="not found among the genes: NOPE"):
        bioqpfs.select(X, y, method=method, preselected=["g1", "NOPE"], feature_names=names)
    with pytest.raises(ValueError, match="more than once"):
        bioqpfs.select(X, y, method=method, preselected=[3, 3])
    with pytest.raises(ValueError, match=r"n_genes=2 but 3 genes are preselected"):
        bioqpfs.select(X, y, method=method, n_genes=2, preselected=[1, 2, 3])
    with pytest.raises(ValueError, match="out of range"):
        bioqpfs.select(X, y, method=method, preselected=[99])
    with pytest.raises(ValueError, match="no feature_names"):
        bioqpfs.select(X, y, method=method, preselected=["g1"])
    with pytest.warns(UserWarning, match="preselected gene.*g22.*constant"):
        sel = bioqpfs.select(X, y, method=method, n_genes=4, preselected=["g22", "g1"], feature_names=names)
    assert list(sel.ranking[:2]) == [22, 1]


def test_faces_tl_estimator_and_cli(tmp_path):
    import anndata as ad

    from bioqpfs import cli, tl
    from bioqpfs.estimators import BioQPFSSelector

    X, y, names = _data()
    adata = ad.AnnData(X, obs=pd.DataFrame({"class": pd.Categorical(y.astype(str))}, index=[f"c{i}" for i in range(60)]),
                       var=pd.DataFrame(index=names))
    tl.select_genes(adata, "class", method="jmi", n_genes=5, preselected=["g15", "g3"], use_raw=False)
    assert list(adata.uns["jmi"]["selected"][:2]) == ["g15", "g3"]
    est = BioQPFSSelector(5, method="mrmr_mid", method_params={"preselected": ["g15", "g3"]})
    est.fit(pd.DataFrame(X, columns=names), y)
    assert list(est.selection_.ranking[:2]) == [15, 3]
    # CLI: comma-separated names, or a file of names (an existing file wins)
    path = tmp_path / "in.h5ad"
    adata.write_h5ad(path)
    genes = tmp_path / "panel.txt"
    genes.write_text("# my panel\ng15\n\ng3\n")
    for value in ("g15,g3", str(genes)):
        out = tmp_path / "out.h5ad"
        rc = cli.main(["select", str(path), "--groupby", "class", "--method", "maxrel", "--n-genes", "4",
                       "--preselected", value, "-o", str(out), "--use-raw", "no", "--quiet"])
        assert rc == 0
        assert list(ad.read_h5ad(out).uns["maxrel"]["selected"][:2]) == ["g15", "g3"]
    rc = cli.main(["select", str(path), "--groupby", "class", "--method", "maxrel", "--preselected",
                   str(tmp_path / "missing.txt"), "-o", str(tmp_path / "o2.h5ad"), "--quiet"])
    assert rc != 0


def test_eqpfs_rest_satisfies_the_kkt_conditions_of_its_reduced_qp():
    """EQPFS (eq. 13) given forced genes, rebuilt from plain-loop MI/CMI: the remaining weights are a KKT point
    (= the optimum: H1 - beta H2 + lambda I is PSD) of the reduced problem of the shared forced-gene QP."""
    codes, y = _codes(4, m=10)
    P = np.array([8, 1])
    sel = bioqpfs.select(codes, y, method="eqpfs", n_genes=5, preselected=P, discretization=None)
    H = ref.mi_matrix(codes) - ref.mi_given_class_matrix(codes, y)
    H[np.diag_indices_from(H)] = sel.params["lam"]
    f = np.array([ref.mutual_info(codes[:, j], y) for j in range(10)])
    alpha, s = sel.params["alpha"], sel.params["preselected_share"]
    assert s == pytest.approx(2 / 5)
    R = np.setdiff1d(np.arange(10), P)
    G = 2 * alpha * (1 - s) * H[np.ix_(R, R)] + sel.diagnostics["psd_shift"] * np.eye(R.size)
    a = f[R] - 2 * alpha * s * H[np.ix_(R, P)].mean(axis=1)
    assert ref.simplex_kkt_violation(G, a, sel.weights[R] / (1 - s)) < 1e-7
    assert list(sel.ranking[:2]) == [8, 1]


def _with_constant_gene(seed, m):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), 15)
    X = rng.normal(size=(45, m))
    X[:, 0] += y * 0.7
    X[:, 1] += (y == 1) * 1.2
    X[:, 2] += (y == 2) * 1.2
    X[:, 3] = X[:, 0] + 0.6 * rng.normal(size=45)
    X[:, m - 1] = 3.0                                                     # constant
    return X, y


@pytest.mark.parametrize("method, params, seeds", [("sdp_cmi", {}, [19]),
                                                   ("spec_cmi", {"polish": True}, [4, 6]),
                                                   ("spec_cmi", {}, [4])])
def test_a_constant_forced_gene_takes_its_slot_and_does_not_steer_the_rest(method, params, seeds):
    """A constant preselected gene keeps its rank but "does not steer the choice of the other genes": the other
    n_genes - 1 are the method's panel of n_genes - 1 without it (its slot was not subtracted: SDP_CMI chose a
    panel one gene too large and cut it, and the polish swapped in the wrong genes), and the reported objective is
    that panel's (brute force over every pair for SDP_CMI)."""
    import itertools

    from bioqpfs import measures

    for seed in seeds:
        X, y = _with_constant_gene(seed, 8 if method == "sdp_cmi" else 10)
        m = X.shape[1] - 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            k = 3 if method == "sdp_cmi" else 4
            forced = bioqpfs.select(X, y, method=method, n_genes=k, preselected=[m], **params)
            plain = bioqpfs.select(X[:, :m], y, method=method, n_genes=k - 1, **params)
        assert forced.selected[0] == m
        assert set(forced.selected[1:]) == set(plain.selected), seed
        Qc = measures.conditional_mutual_information(X[:, :m], y)
        Q = 0.5 * (Qc + Qc.T)
        rest = list(forced.selected[1:])
        assert forced.diagnostics["qip_objective"] == pytest.approx(Q[np.ix_(rest, rest)].sum(), rel=1e-6)
        if method == "sdp_cmi":   # the brute-force best pair
            best = max(itertools.combinations(range(m), 2), key=lambda S: Q[np.ix_(S, S)].sum())
            assert set(rest) == set(best)


def test_error_curve_reads_preselected_positions_among_all_genes_with_mask_var():
    """As tl.select_genes does ("positions in adata.var, with mask_var too"): error_curve passed them unchanged to
    a selector that sees only the masked genes, so position 4 forced the masked list's 5th gene (g8)."""
    import anndata as ad

    from bioqpfs import evaluate

    rng = np.random.default_rng(0)
    y = np.repeat(["a", "b", "c"], 20)
    X = rng.normal(size=(60, 12))
    X[:, 0] += 2.0 * (y == "a")
    hv = np.zeros(12, dtype=bool)
    hv[[0, 2, 4, 6, 8, 10]] = True
    adata = ad.AnnData(X, obs=pd.DataFrame({"c": y}, index=[f"s{i}" for i in range(60)]),
                       var=pd.DataFrame({"hv": hv}, index=[f"g{j}" for j in range(12)]))
    bioqpfs.tl.select_genes(adata, "c", method="maxrel", n_genes=3, mask_var="hv", preselected=[4])
    assert adata.uns["maxrel"]["selected"][0] == "g4"
    curve = evaluate.error_curve(adata, "c", {"m": ("maxrel", {"preselected": [4]})}, n_genes=[1], cv=3,
                                 mask_var="hv")
    fixed = evaluate.error_curve(adata, "c", {"g4": ["g4"]}, n_genes=[1], cv=3, mask_var="hv")
    assert curve.mean_error.iloc[0] == fixed.mean_error.iloc[0]
    with pytest.raises(ValueError, match="preselected gene\\(s\\) g3 are left out by mask_var"):
        evaluate.error_curve(adata, "c", {"m": ("maxrel", {"preselected": [3]})}, n_genes=[1], cv=3, mask_var="hv")
