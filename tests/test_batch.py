"""Batch-aware statistics (issue 15 item 1): ``batch=`` in every selector that uses the information / correlation
measures, ``sum_b w_b I_b`` against plain-loop references, planted batch confounding, one batch = no batch,
and the errors of bad batch input."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import reference as ref
import scipy.sparse as sp

import bioqpfs
from bioqpfs._kernels import information as _info
from bioqpfs._registry import batch_methods, methods
from bioqpfs.selectors._common import (
    check_batch,
    info_table,
    one_vs_rest_relevance,
    similarity_and_relevance,
)
from bioqpfs.selectors.eqpfs import eqpfs_matrix


# ---- planted batch confounding --------------------------------------------------------------------------
def _confounded(seed=0):
    """Two classes spread unevenly over two batches (class A: 90 % of batch 0, 10 % of batch 1).

    Gene 0 ("shift") differs between batches only -- no class effect within a batch -- so it is associated with
    the class only through the batch.  Gene 1 ("marker") is higher in class A by the same amount in every batch.
    Genes 2..26 are weaker batch-invariant markers, the rest noise.
    """
    rng = np.random.default_rng(seed)
    n_per_batch, n_noise, n_weak = 150, 120, 25
    batch = np.repeat([0, 1], n_per_batch)
    y = np.concatenate([rng.permutation(np.r_[np.zeros(135), np.ones(15)]),
                        rng.permutation(np.r_[np.zeros(15), np.ones(135)])]).astype(int)
    n = batch.size
    X = rng.normal(size=(n, 2 + n_weak + n_noise))
    X[:, 0] += 3.0 * batch  # batch only
    X[:, 1] += 2.5 * y  # the class, in every batch
    X[:, 2:2 + n_weak] += 1.0 * y[:, None]
    return X, np.where(y == 1, "A", "B"), np.where(batch == 1, "b1", "b0")


@pytest.mark.parametrize("method", ["qpfs", "qpfs_cover", "mrmr_mid"])
def test_planted_batch_confounding(method):
    X, y, batch = _confounded()
    without = bioqpfs.select(X, y, method=method, n_genes=20).ranking
    with_batch = bioqpfs.select(X, y, method=method, n_genes=20, batch=batch).ranking
    assert 0 in without[:20], "the batch-only gene should look class-relevant when batches are ignored"
    assert 0 not in with_batch[:20], "batch-aware statistics must not credit a gene that differs by batch only"
    assert 1 in without[:10] and 1 in with_batch[:10], "a batch-invariant marker stays near the top"


# ---- one batch: exactly the result without ----------------------------------------------------------------
def _small(seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(45, 14))
    y = np.repeat(["a", "b", "c"], 15)
    X[y == "b", 0] += 2.0
    X[y == "c", 3] += 1.5
    X[:, 5] = X[:, 0] + 0.3 * rng.normal(size=45)
    return X, y


def test_every_method_accepting_batch_is_listed():
    assert set(batch_methods()) >= {"qpfs", "qpfs_cover", "eqpfs", "maxrel", "mrmr_mid", "mrmr_miq", "jmi", "cife",
                                    "spec_cmi"}


@pytest.mark.parametrize("method", batch_methods())
@pytest.mark.parametrize("options", [{}, dict(batch_weights="equal", batch_discretization="global")])
def test_one_batch_equals_no_batch(method, options):
    X, y = _small()
    plain = bioqpfs.select(X, y, method=method, n_genes=5)
    one = bioqpfs.select(X, y, method=method, n_genes=5, batch=np.full(45, "only"), **options)
    np.testing.assert_array_equal(one.ranking, plain.ranking)
    np.testing.assert_array_equal(one.weights, plain.weights)
    assert one.params["n_batches"] == 1 and "batch" not in plain.params


@pytest.mark.parametrize("options", [dict(similarity="correlation"), dict(relevance="hall")])
def test_one_batch_equals_no_batch_on_the_correlation_path(options):
    """|correlation| and Hall's relevance standardised X within the one batch: the last bits moved (1e-16 in the
    weights), against the documented "one batch gives exactly the result without batches"."""
    X, y = _small()
    plain = bioqpfs.qpfs(X, y, n_genes=5, **options)
    one = bioqpfs.qpfs(X, y, n_genes=5, batch=np.full(45, "only"), **options)
    np.testing.assert_array_equal(one.weights, plain.weights)
    np.testing.assert_array_equal(one.relevance, plain.relevance)


# ---- sum_b w_b I_b against plain loops ------------------------------------------------------------------
def _batched(seed=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(36, 6))
    y = np.array([0, 1, 2] * 8 + [0] * 6 + [1, 2] * 3)
    batch = np.array([0] * 14 + [1] * 10 + [2] * 6 + [1] * 6)  # batch 2: a single class
    X[:, 0] += 1.5 * y + 2.0 * batch
    X[:, 1] += X[:, 0] * 0.5 + batch
    return X, y, batch


@pytest.mark.parametrize("weighting", ["size", "equal"])
@pytest.mark.parametrize("discretization", ["per_batch", "global"])
def test_batch_information_matches_plain_loops(weighting, discretization):
    X, y, batch = _batched()
    strata = check_batch(batch, X, batch_weights=weighting, batch_discretization=discretization)
    Q, F, _, table = similarity_and_relevance(X, y, similarity="mi", relevance="mi", discretization="mean_sd",
                                              n_bins=3, base=2, batch=strata)
    m = X.shape[1]
    Q_ref = ref.stratified_sum(X, y, batch, weighting, discretization, lambda c, yb: ref.mi_matrix(c))
    F_ref = ref.stratified_sum(X, y, batch, weighting, discretization,
                       lambda c, yb: np.array([ref.mutual_info(c[:, i], yb) for i in range(m)]))
    np.testing.assert_allclose(Q, Q_ref, atol=1e-10)
    np.testing.assert_allclose(F, F_ref, atol=1e-10)
    # the pooled estimate is different: the test can tell
    Q_pooled = ref.mi_matrix(ref.mean_sd_codes(X))
    assert np.abs(Q_pooled - Q_ref).max() > 0.05

    # one-vs-rest relevance of qpfs_cover (class_weight=None): sum_b w_b I_b(X_i; 1[C = c])
    F_c = one_vs_rest_relevance(table, y, 3, class_weight=None, base=2)
    for c in range(3):
        ref_c = ref.stratified_sum(X, y, batch, weighting, discretization,
                           lambda cd, yb: np.array([ref.mutual_info(cd[:, i], (yb == c).astype(int))
                                                    for i in range(m)]))
        np.testing.assert_allclose(F_c[c], ref_c, atol=1e-10)


@pytest.mark.parametrize("weighting", ["size", "equal"])
def test_batch_information_with_sample_weights_matches_plain_loops(weighting):
    """Class-balanced sample weights and batches together: Q_ij = sum_b w_b I_b(X_i; X_j) and I(X_i; X_j | C)
    likewise, each I_b on batch b's weighted samples alone (the one-pass form rescales the weights per batch)."""
    X, y, batch = _batched()
    strata = check_batch(batch, X, batch_weights=weighting)
    codes_of = {b: ref.mean_sd_codes(X[batch == b]) for b in np.unique(batch)}
    # class_weight="balanced" with batches: every class weighs the same within each batch (the one-vs-rest F_c
    # of the class-covering recipe balances so too); any constant per batch cancels in I_b
    cell = batch * (y.max() + 1) + y
    sample_w = 1.0 / np.bincount(cell)[cell]
    table = info_table(X, y, discretization="mean_sd", n_bins=3, grouped=True, batch=strata,
                       class_weight="balanced")
    m = X.shape[1]
    Q = _info.pairwise_information(table, None, "mi", base=2)
    G = _info.pairwise_information(table, None, "mi_given_class", base=2)

    def per_batch(measure):
        return sum(w_b * measure(codes_of[b], y[batch == b], sample_w[batch == b])
                   for b, w_b in zip(*_batch_weights(batch, weighting)))

    Q_ref = per_batch(lambda c, yb, w: np.array([[ref.weighted_mutual_info(c[:, i], c[:, j], w) if i != j else
                                                  ref.weighted_entropy(c[:, i], weights=w)
                                                  for j in range(m)] for i in range(m)]))
    G_ref = per_batch(lambda c, yb, w: np.array([[ref.weighted_cmi(c[:, i], c[:, j], yb, w) if i != j else
                                                  ref.weighted_entropy(c[:, i], yb, weights=w)
                                                  - ref.weighted_entropy(yb, weights=w)
                                                  for j in range(m)] for i in range(m)]))
    np.testing.assert_allclose(Q, Q_ref, atol=1e-10)
    np.testing.assert_allclose(G, G_ref, atol=1e-10)
    # the SPEC_CMI matrix (I(X_i; C | X_j) + I(X_j; C | X_i)) / 2, diagonal I(X_i; C): the (class, batch) pass
    C = _info.pairwise_information(table, None, "cmi_mean", base=2)
    C_ref = per_batch(lambda c, yb, w: np.array([[(ref.weighted_cmi(c[:, i], yb, c[:, j], w)
                                                   + ref.weighted_cmi(c[:, j], yb, c[:, i], w)) / 2 if i != j else
                                                  ref.weighted_mutual_info(c[:, i], yb, w)
                                                  for j in range(m)] for i in range(m)]))
    np.testing.assert_allclose(C, C_ref, atol=1e-10)
    unweighted = _info.pairwise_information(info_table(X, y, discretization="mean_sd", n_bins=3, batch=strata),
                                            None, "mi", base=2)
    assert np.abs(unweighted - Q).max() > 1e-3  # the weights matter: the test can tell


def _batch_weights(batch, weighting):
    names, sizes = np.unique(batch, return_counts=True)
    return names, (sizes / sizes.sum() if weighting == "size" else np.full(names.size, 1.0 / names.size))


@pytest.mark.parametrize("weighting", ["size", "equal"])
def test_batch_cmi_and_eqpfs_match_plain_loops(weighting):
    X, y, batch = _batched()
    strata = check_batch(batch, X, batch_weights=weighting)
    table = info_table(X, y, discretization="mean_sd", n_bins=3, grouped=True, batch=strata)
    C = _info.pairwise_information(table, None, "cmi_mean", base=2)
    C_ref = ref.stratified_sum(X, y, batch, weighting, "per_batch", lambda c, yb: ref.cmi_matrix(c, yb))
    C_ref = (C_ref + C_ref.T) / 2  # the symmetric SPEC_CMI matrix, diagonal I(X_i; C)
    np.testing.assert_allclose(C, C_ref, atol=1e-10)
    # EQPFS: H1 - beta H2, both within-batch averages (batch 2 has one class: I(X; X | C) = I(X; X) there)
    H = eqpfs_matrix(table.codes, table.n_levels, y, 1.0, base=2, batch=strata)
    H_ref = ref.stratified_sum(X, y, batch, weighting, "per_batch",
                       lambda c, yb: ref.mi_matrix(c) - ref.mi_given_class_matrix(c, yb))
    np.fill_diagonal(H_ref, 0.0)
    np.testing.assert_allclose(H, H_ref, atol=1e-10)


@pytest.mark.parametrize("weighting", ["size", "equal"])
def test_batch_correlation_is_weighted_within_batch_correlation(weighting):
    X, y, batch = _batched()
    strata = check_batch(batch, X, batch_weights=weighting)
    Q, _, _, _ = similarity_and_relevance(X, y, similarity="correlation", relevance="hall", discretization="mean_sd",
                                          n_bins=3, base=2, batch=strata)
    names, sizes = np.unique(batch, return_counts=True)
    w = sizes / sizes.sum() if weighting == "size" else np.full(3, 1 / 3)
    m = X.shape[1]
    R = sum(w_b * np.array([[ref.pearson(X[batch == b, i].tolist(), X[batch == b, j].tolist()) for j in range(m)]
                            for i in range(m)]) for b, w_b in zip(names, w))
    np.testing.assert_allclose(Q, np.abs(R), atol=1e-10)


@pytest.mark.parametrize("weighting", ["size", "equal"])
def test_batch_correlation_of_a_gene_constant_in_a_batch_is_renormalised(weighting):
    """Genes 0 and 1 correlated in batch A and all zero in batch B (not detected there): their within-batch
    correlation is renormalised over the batches where they vary, sum_b w_b r_b / sqrt(W_0 W_1) (README
    "Batches"), not halved; a pair varying everywhere is the plain weighted sum."""
    rng = np.random.default_rng(0)
    batch = np.repeat(["A", "B"], 20)
    y = np.tile([0, 1], 20)
    X = rng.normal(size=(40, 4))
    X[:, 1] += X[:, 0]
    X[20:, :2] = 0.0
    strata = check_batch(batch, X, batch_weights=weighting)
    Q, _, _, _ = similarity_and_relevance(X, y, similarity="correlation", relevance="hall", discretization="mean_sd",
                                          n_bins=3, base=2, batch=strata)
    w = 0.5  # equal batch sizes: "size" and "equal" weigh them alike

    def r(i, j, rows):
        return ref.pearson(X[rows, i].tolist(), X[rows, j].tolist())

    A, B = slice(0, 20), slice(20, 40)
    assert Q[0, 1] == pytest.approx(abs(w * r(0, 1, A)) / np.sqrt(w * w), rel=1e-10)  # r_A, not r_A / 2
    assert Q[2, 3] == pytest.approx(abs(w * r(2, 3, A) + w * r(2, 3, B)), rel=1e-10)
    assert Q[0, 2] == pytest.approx(abs(w * r(0, 2, A)) / np.sqrt(w * 1.0), rel=1e-10)


def test_batch_correlation_refuses_a_dense_copy_that_would_not_fit(monkeypatch):
    """|correlation| with batches standardises X densely: refused before the copy, naming the MI route instead."""
    # room for the column moments' float64 copy of the sparse X (12 bytes per stored value), not for the dense copy
    monkeypatch.setattr("bioqpfs._validation.available_memory", lambda: (6000, "available physical memory"))
    X, y, batch = _batched()
    with pytest.raises(MemoryError, match=r"dense within-batch standardised copy of X.*similarity='mi'"):
        bioqpfs.qpfs(sp.csr_matrix(X), y, similarity="correlation", batch=batch, n_genes=3)


@pytest.mark.parametrize("sparse", [False, True])
def test_batch_direction_is_within_batch(sparse):
    """qpfs_cover's "higher in class c" with batches: sum_b w_b (mean_cb - mean_rest,b) / sd_b > 0, by plain loops."""
    import scipy.sparse as sp

    from bioqpfs.selectors._common import higher_in_class

    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 7))
    y, batch = rng.integers(0, 3, 50), rng.integers(0, 2, 50)
    X[:, 0] += 5 * batch
    X[y == 1, 1] += 1.0
    expected = np.zeros((3, 7))
    for b in range(2):
        rows = batch == b
        for c in range(3):
            inside, outside = rows & (y == c), rows & (y != c)
            expected[c] += rows.mean() * (X[inside].mean(0) - X[outside].mean(0)) / X[rows].std(0)
    got = higher_in_class(sp.csr_matrix(X) if sparse else X, y, 3, batch=check_batch(batch, X))
    np.testing.assert_array_equal(got, expected > 0)
    assert not np.array_equal(got, higher_in_class(X, y, 3))  # the pooled direction differs here


# ---- faces and params -------------------------------------------------------------------------------------
def test_params_record_batch_settings():
    X, y, batch = _batched()
    sel = bioqpfs.select(X, y, method="qpfs", batch=batch, batch_weights="equal")
    assert sel.params["batch"] is True and sel.params["n_batches"] == 3
    assert sel.params["batch_weights"] == "equal" and sel.params["batch_discretization"] == "per_batch"


# ---- bad input --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", sorted(set(methods()) - set(batch_methods())))
def test_methods_without_batch_refuse_it(method):
    X, y, batch = _batched()
    with pytest.raises(ValueError, match=f"method '{method}' does not take batch="):
        bioqpfs.select(X, y, method=method, n_genes=3, batch=batch)


def test_batch_none_is_no_batch_for_every_method():
    X, y, _ = _batched()
    for method in ("random", "ldfs"):
        np.testing.assert_array_equal(bioqpfs.select(X, y, method=method, n_genes=3, batch=None).ranking,
                                      bioqpfs.select(X, y, method=method, n_genes=3).ranking)


def test_bad_batch_input():
    X, y, batch = _batched()
    with pytest.raises(ValueError, match="batch has 35 entries but the data have 36 samples"):
        bioqpfs.select(X, y, method="qpfs", batch=batch[:-1])
    missing = batch.astype(object)
    missing[4] = None
    with pytest.raises(ValueError, match="batch has 1 missing value"):
        bioqpfs.select(X, y, method="maxrel", batch=missing)
    with pytest.raises(ValueError, match="batch must be 1-D"):
        bioqpfs.select(X, y, method="qpfs", batch=np.zeros((36, 2)))
    with pytest.raises(ValueError, match="batch_weights"):
        bioqpfs.select(X, y, method="qpfs", batch=batch, batch_weights="sized")
    with pytest.raises(ValueError, match="batch_discretization"):
        bioqpfs.select(X, y, method="mrmr_mid", batch=batch, batch_discretization="local")
    with pytest.raises(ValueError, match="relevance='mst' has no batch-aware form"):
        bioqpfs.select(X, y, method="qpfs", similarity="correlation", relevance="mst", batch=batch)
    lonely = batch.copy()
    lonely[0] = 7
    with pytest.warns(UserWarning, match="batch\\(es\\) 7 have a single sample"):
        bioqpfs.select(X, y, method="maxrel", batch=lonely)
    # sample ids or a continuous covariate (total counts) as the batch: named as such, not "confounded with the
    # labels" with np.float64(...) reprs
    for per_sample in (np.arange(X.shape[0]) * 1.5 + 0.25, np.array([f"cell{i}" for i in range(X.shape[0])])):
        with pytest.raises(ValueError, match=r"every sample a batch of its own \(36 distinct values for 36 samples, "
                                             r"e\.g\. (0\.25|cell0), "):
            bioqpfs.select(X, y, method="maxrel", batch=per_sample)


def test_batch_does_not_mutate_inputs():
    X, y, batch = _batched()
    X0, b0 = X.copy(), batch.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bioqpfs.select(X, y, method="qpfs_cover", batch=batch)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(batch, b0)


# ---- faces: tl (batch_key), CLI (--batch-key), sklearn (fit parameter) --------------------------------------
def _adata():
    import anndata as ad
    import pandas as pd

    X, y, batch = _confounded()
    obs = pd.DataFrame({"ct": pd.Categorical(y), "donor": pd.Categorical(batch)},
                       index=[f"c{i}" for i in range(len(y))])
    return ad.AnnData(X, obs=obs, var=pd.DataFrame(index=[f"g{j}" for j in range(X.shape[1])]))


def test_tl_batch_key_equals_select_with_batch_and_is_recorded():
    adata = _adata()
    bioqpfs.tl.select_genes(adata, "ct", method="qpfs", n_genes=20, batch_key="donor")
    direct = bioqpfs.select(adata.X, adata.obs["ct"].array, method="qpfs", n_genes=20,
                            batch=adata.obs["donor"].to_numpy())
    assert list(adata.uns["qpfs"]["selected"]) == [f"g{i}" for i in direct.selected]
    params = adata.uns["qpfs"]["params"]
    assert params["batch_key"] == "donor" and params["n_batches"] == 2 and params["batch_weights"] == "size"
    assert "g0" not in adata.uns["qpfs"]["selected"]  # the batch-only gene
    with pytest.raises(KeyError, match="batch_key='site' is not a column of adata.obs"):
        bioqpfs.tl.select_genes(adata, "ct", method="qpfs", n_genes=5, batch_key="site")
    with pytest.raises(ValueError, match="method 'ldfs' does not take batch_key"):
        bioqpfs.tl.select_genes(adata, "ct", method="ldfs", n_genes=5, batch_key="donor")
    adata.obs["site"] = adata.obs["donor"].astype(object)
    adata.obs.iloc[3, adata.obs.columns.get_loc("site")] = None
    with pytest.raises(ValueError, match=r"adata.obs\['site'\] has 1 missing value"):
        bioqpfs.tl.select_genes(adata, "ct", method="qpfs", n_genes=5, batch_key="site")


def test_cli_batch_key(tmp_path):
    import subprocess
    import sys

    import anndata as ad

    path, out = tmp_path / "in.h5ad", tmp_path / "out.h5ad"
    _adata().write_h5ad(path)
    r = subprocess.run([sys.executable, "-m", "bioqpfs.cli", "select", str(path), "--groupby", "ct", "--method",
                        "mrmr_mid", "--n-genes", "20", "--batch-key", "donor", "-o", str(out), "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    b = ad.read_h5ad(out)
    assert b.uns["mrmr_mid"]["params"]["batch_key"] == "donor" and "g0" not in list(b.uns["mrmr_mid"]["selected"])


def test_cli_evaluate_batch_key_and_leave_one_batch_out(tmp_path):
    """CLI evaluate --batch-key / --cv leave_one_batch_out give the Python error_curve's table; without the key the
    leave-one-batch-out CV is a usage error naming --batch-key."""
    import subprocess
    import sys

    import pandas as pd

    from bioqpfs import evaluate

    X, y, batch = _three_batches()  # leave-one-batch-out trains on two batches: batch-aware selection matters
    adata = _adata()
    adata.X, adata.obs["ct"], adata.obs["donor"] = X, pd.Categorical(y), pd.Categorical(batch)
    path, tsv = tmp_path / "in.h5ad", tmp_path / "curve.tsv"
    adata.write_h5ad(path)
    base = [sys.executable, "-m", "bioqpfs.cli", "evaluate", str(path), "--groupby", "ct", "--methods", "qpfs,maxrel",
            "--n-genes", "5,20", "-o", str(tsv), "--quiet"]
    r = subprocess.run(base + ["--batch-key", "donor", "--cv", "leave_one_batch_out"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    got = pd.read_csv(tsv, sep="\t")
    want = evaluate.error_curve(adata, "ct", ["qpfs", "maxrel"], n_genes=[5, 20], batch="donor",
                                cv="leave_one_batch_out")
    np.testing.assert_allclose(got["mean_error"], want["mean_error"])
    assert list(got["batch_aware"]) == list(want["batch_aware"]) and got["batch_aware"].all()
    plain = evaluate.error_curve(adata, "ct", ["qpfs", "maxrel"], n_genes=[5, 20], batch="donor",
                                 cv="leave_one_batch_out", batch_selection=False)
    assert not np.allclose(plain["mean_error"], want["mean_error"])  # the batches reached the selections
    r = subprocess.run(base + ["--cv", "leave_one_batch_out"], capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "--batch-key COLUMN" in r.stderr


def test_estimator_batch_fit_parameter():
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import LinearSVC

    from bioqpfs.estimators import BioQPFSSelector

    X, y, batch = _confounded()
    est = BioQPFSSelector(20, method="qpfs").fit(X, y, batch=batch)
    assert not est.get_support()[0] and est.get_support()[1]
    assert est.selection_.params["n_batches"] == 2
    pipe = make_pipeline(BioQPFSSelector(20, method="qpfs"), LinearSVC())
    pipe.fit(X, y, bioqpfsselector__batch=batch)
    assert not pipe[0].get_support()[0]


# ---- evaluate with batches: leave-one-batch-out folds, batch-aware refits --------------------------------------
def _three_batches(seed=3):
    X, y, _ = _confounded(seed)
    batch = np.array(["b0", "b1", "b2"])[np.arange(y.size) % 3]
    return X, y, batch


def test_error_curve_leave_one_batch_out_passes_the_training_batches(monkeypatch):
    """Each fold tests on exactly one batch; a batch-aware method is refit with the training rows' batches, a
    method without batch-aware statistics and a fixed ranking without them (the batch_aware column says so)."""
    import bioqpfs.evaluate as ev

    X, y, batch = _three_batches()
    calls = []
    real = ev.select

    def spy(Xs, ys, *, method, **kw):
        calls.append((method, Xs.shape[0], kw.get("batch")))
        return real(Xs, ys, method=method, **kw)

    monkeypatch.setattr(ev, "select", spy)
    summary, folds = ev.error_curve(X, y, {"mrmr": "mrmr_mid", "rnd": "random", "fixed": [1, 2, 3, 4]},
                                    n_genes=[3], cv="leave_one_batch_out", batch=batch, return_folds=True)
    assert summary.set_index("method")["batch_aware"].to_dict() == {"mrmr": True, "rnd": False, "fixed": False}
    assert (summary["cv"] == "leave_one_batch_out").all() and (summary["n_folds"] == 3).all()
    assert sorted(folds.loc[folds["method"] == "mrmr", "n_test"]) == [100, 100, 100]
    mrmr = [c for c in calls if c[0] == "mrmr_mid"]
    assert len(mrmr) == 3
    for _, n_train, b in mrmr:   # trained on the two other batches, with their batches
        assert n_train == 200 and b is not None and len(set(b)) == 2 and len(b) == 200
    assert all(c[2] is None for c in calls if c[0] == "random")
    # same folds, batches for the folds only
    calls.clear()
    plain = ev.error_curve(X, y, ["mrmr_mid"], n_genes=[3], cv="leave_one_batch_out", batch=batch,
                           batch_selection=False)
    assert all(c[2] is None for c in calls) and not plain["batch_aware"].any()


def test_error_curve_batch_aware_fold_equals_a_hand_run_fold():
    """One leave-one-batch-out fold recomputed by hand (select with the training batches, LinearSVC on the panel)."""
    from sklearn.metrics import balanced_accuracy_score

    from bioqpfs.evaluate import make_classifier

    X, y, batch = _three_batches()
    _, folds = bioqpfs.evaluate.error_curve(X, y, ["mrmr_mid"], n_genes=[5], cv="leave_one_batch_out",
                                            batch=batch, return_folds=True)
    for f, held in enumerate(["b0", "b1", "b2"]):   # LeaveOneGroupOut orders the groups
        train, test = batch != held, batch == held
        genes = bioqpfs.select(X[train], y[train], method="mrmr_mid", n_genes=5, batch=batch[train],
                               random_state=1000 * 0 + f).ranking[:5]
        clf = make_classifier("linear_svm").fit(X[train][:, genes], y[train])
        expected = balanced_accuracy_score(y[test], clf.predict(X[test][:, genes]))
        assert folds.loc[folds["fold"] == f, "balanced_accuracy"].item() == pytest.approx(expected, abs=1e-12)


def test_error_curve_batch_errors():
    X, y, batch = _three_batches()
    with pytest.raises(ValueError, match="cv='leave_one_batch_out' needs the batches: pass batch="):
        bioqpfs.evaluate.error_curve(X, y, ["maxrel"], n_genes=[3], cv="leave_one_batch_out")
    with pytest.raises(ValueError, match="needs at least 2 batches, got only 'b0'"):
        bioqpfs.evaluate.error_curve(X, y, ["maxrel"], n_genes=[3], cv="leave_one_batch_out",
                                     batch=np.full(y.size, "b0"))
    with pytest.raises(ValueError, match="pass the batches as error_curve\\(batch=...\\)"):
        bioqpfs.evaluate.error_curve(X, y, ["maxrel"], n_genes=[3], cv=3, method_params={"maxrel": {"batch": batch}})
    with pytest.raises(ValueError, match="batch='donor' is a column name, which needs an AnnData"):
        bioqpfs.evaluate.error_curve(X, y, ["maxrel"], n_genes=[3], cv=3, batch="donor")
    with pytest.raises(ValueError, match="batch"):
        bioqpfs.evaluate.error_curve(X, y, ["maxrel"], n_genes=[3], cv=3, batch=batch[:-1])
    with pytest.raises(ValueError, match="batch_selection must be True or False"):
        bioqpfs.evaluate.error_curve(X, y, ["maxrel"], n_genes=[3], cv=3, batch=batch, batch_selection="yes")
    with pytest.raises(ValueError, match="one of \\('loo', 'leave_one_batch_out'\\)"):
        bioqpfs.evaluate.error_curve(X, y, ["maxrel"], n_genes=[3], cv="lobo", batch=batch)


def test_tl_n_genes_auto_with_batch_key_uses_the_batches_in_the_folds(monkeypatch):
    import bioqpfs.evaluate as ev

    adata = _adata()
    seen = []
    real = ev.error_curve

    def spy(*args, **kw):
        seen.append(kw.get("batch"))
        return real(*args, **kw)

    monkeypatch.setattr(ev, "error_curve", spy)
    bioqpfs.tl.select_genes(adata, "ct", method="mrmr_mid", n_genes="auto", batch_key="donor")
    assert seen == ["donor"]
    record = adata.uns["mrmr_mid"]
    assert record["params"]["batch_key"] == "donor" and record["n_genes_auto"]["n_genes"] in record["n_genes_auto"]["grid"]
    assert record["n_genes_auto"]["curve"]["batch_aware"].all()


@pytest.mark.parametrize("method, options", [(m, {}) for m in batch_methods()]
                         + [("qpfs", {"similarity": "correlation"}), ("maxrel", {"discretization": "quantile"})])
def test_a_batch_confounded_with_the_labels_is_named(method, options):
    """Each donor a case or a control: within-batch measures have no class contrast left.  The old message blamed
    the genes ("no gene carries information"); the batch is named now, for every method that takes batches."""
    X, y, _ = _batched()
    donor = np.array([f"d{2 * c + i % 2}" for i, c in enumerate(y)])  # 6 donors, each of a single class
    assert all(np.unique(y[donor == d]).size == 1 for d in np.unique(donor))
    with pytest.raises(ValueError, match="every batch holds samples of a single class \\(batches 'd0', 'd1', 'd2', "
                                         "\\.\\.\\.\\): the batch is confounded with the labels"):
        bioqpfs.select(X, y, method=method, n_genes=3, batch=donor, **options)
    crossed = donor.copy()
    crossed[[0, 1]] = crossed[[1, 0]]                                # d0 and d1 now hold two classes: accepted
    bioqpfs.select(X, y, method=method, n_genes=3, batch=crossed, **options)


def test_a_selection_failing_in_a_training_fold_names_the_fold():
    """One class-0 cell sequenced with donor d1 makes the data cross the donors; a training fold without it has every
    donor of one class.  n_genes="auto" failed with the whole-data message ("the batch is confounded with the
    labels"), untrue of the data passed; it names the fold and the refit now."""
    rng = np.random.default_rng(3)
    y = np.repeat([0, 1, 2], 20)
    donor = y.copy()
    donor[0] = 1
    X = rng.normal(size=(60, 12)) + y[:, None] * rng.normal(size=12)
    bioqpfs.select(X, y, method="maxrel", batch=donor, n_genes=3)  # the data themselves are accepted
    with pytest.raises(ValueError, match=r"'maxrel' on the 48 training samples of CV fold \d, whose selection is "
                                         r"refit inside the fold: every batch holds samples of a single class"):
        bioqpfs.evaluate.error_curve(X, y, ["maxrel"], n_genes=[2, 3], cv=5, batch=donor)


def test_balanced_class_weight_is_within_batch_in_every_measure():
    """Two batches that mirror each other (10 A + 2 B, 2 A + 10 B): globally balanced already, so weights over all
    samples would change nothing and a gene separating A from B in both batches would get I_b = H(10/12) = 0.650
    bits.  Balanced within each batch, every I_b has a uniform prior: 1 bit, the same as the one-vs-rest F_c of the
    class-covering recipe (with two classes "A or not" is the class itself)."""
    batch = np.repeat([0, 1], 12)
    y = np.array([0] * 10 + [1] * 2 + [0] * 2 + [1] * 10)
    X = np.c_[y * 5.0 + np.linspace(0, 1, 24), np.random.default_rng(0).normal(size=24)]
    strata = check_batch(batch, X)
    _, F, _, table = similarity_and_relevance(X, y, similarity="mi", relevance="mi", discretization="mean_sd",
                                              n_bins=3, base=2, class_weight="balanced", batch=strata)
    F_c = one_vs_rest_relevance(table, y, 2, class_weight="balanced", base=2)
    assert F[0] == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(F_c[:, 0], F[0], atol=1e-12)
    unweighted = bioqpfs.select(X, y, method="maxrel", batch=batch, discretization="mean_sd").relevance
    assert unweighted[0] == pytest.approx(0.650022, abs=1e-6)  # H(10/12): the test can tell the two weightings


@pytest.mark.parametrize("weights", ["size", "equal"])
def test_spec_cmi_nystrom_rate_takes_batch_and_at_rate_one_is_the_exact_method(weights):
    """Before: spec_cmi(nystrom_rate=..., batch=...) was refused ("does not take batch= yet") while qpfs with
    nystrom_rate takes it.  The refusal was not structural: Nystrom samples rows of the same batch-aware Q.  At
    rate 1.0 (every row a landmark, so the approximation is exact) it gives the exact method's panel."""
    X, y, batch = _batched()
    kw = dict(n_genes=5, batch=batch, batch_weights=weights)
    exact = bioqpfs.spec_cmi(X, y, **kw)
    full = bioqpfs.spec_cmi(X, y, nystrom_rate=1.0, **kw)
    np.testing.assert_array_equal(full.ranking, exact.ranking)
    np.testing.assert_allclose(full.weights / np.linalg.norm(full.weights),
                               exact.weights / np.linalg.norm(exact.weights), atol=1e-10)
    np.testing.assert_allclose(full.relevance, exact.relevance, rtol=1e-12)
    assert full.diagnostics["qip_objective"] == pytest.approx(exact.diagnostics["qip_objective"], rel=1e-12)
    assert full.params["batch_weights"] == weights and full.params["nystrom_rate"] == 1.0
    plain = bioqpfs.spec_cmi(X, y, n_genes=5, nystrom_rate=1.0)
    assert not np.array_equal(plain.relevance, full.relevance)   # the batches were used
    bioqpfs.spec_cmi(X, y, nystrom_rate=0.5, **kw)               # and a real sample runs
