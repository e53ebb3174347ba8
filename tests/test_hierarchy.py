"""Hierarchical labels (issue 15 item 2): ``y`` with one column per level, coarse to fine (``groupby=[...]``),
F = sum_l v_l I(X; C_l) in every relevance-based method, against a plain-loop reference; the planted
lineage / within-lineage genes; one level = the plain call; refusals and bad input; the faces (tl, h5ad, CLI,
sklearn, evaluate)."""
from __future__ import annotations

import subprocess
import sys

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import reference as ref

import bioqpfs
from bioqpfs._registry import hierarchy_methods, methods
from bioqpfs.selectors._common import check_levels, similarity_and_relevance
from bioqpfs.selectors.baselines import maxrel

HIERARCHY_METHODS = ["qpfs", "eqpfs", "maxrel", "mrmr_mid", "mrmr_miq"]


def _planted(seed=0, n_per_type=30, n_noise=27):
    """Two lineages of four cell types each (30 samples per type).

    Gene 0 separates the lineages only (shifted by 2.5 in the second lineage, the same in its four types); genes
    1 and 2 separate the cell types within each lineage only (shifted by 6 in two of the four types of *each*
    lineage, so they tell nothing about the lineage); the rest is noise.  On the finest level alone genes 1 and
    2 are more relevant than gene 0 (by ~0.05 bits on seeds 0..5); with both levels and equal weights gene 0 is
    (its lineage information counts fully, the within-lineage information half).
    """
    rng = np.random.default_rng(seed)
    cell_type = np.repeat(np.arange(8), n_per_type)
    lineage, local = cell_type // 4, cell_type % 4
    X = rng.normal(size=(cell_type.size, 3 + n_noise))
    X[:, 0] += 2.5 * lineage
    X[:, 1] += 6.0 * (local % 2)
    X[:, 2] += 6.0 * (local // 2)
    y = np.column_stack([np.array(["myeloid", "lymphoid"])[lineage], np.array([f"type{c}" for c in cell_type])])
    return X, y


def test_hierarchy_methods_are_the_relevance_based_ones():
    assert hierarchy_methods() == sorted(HIERARCHY_METHODS)
    assert "hierarchy_methods" in bioqpfs.__all__


# ---- the planted test of the issue ---------------------------------------------------------------------------
@pytest.mark.parametrize("method", HIERARCHY_METHODS)
def test_planted_lineage_and_within_lineage_genes(method):
    X, y = _planted()
    finest = bioqpfs.select(X, y[:, 1], method=method, n_genes=3)
    both = bioqpfs.select(X, y, method=method, n_genes=3)
    assert {0, 1, 2} <= set(both.ranking[:3]), "lineage gene and within-lineage genes are all in the panel"
    rank_finest, rank_both = list(finest.ranking).index(0), list(both.ranking).index(0)
    assert rank_finest == 2, "on the finest level alone the within-lineage genes rank above the lineage gene"
    assert rank_both < rank_finest, "with both levels the lineage-only gene ranks higher"
    assert both.params["groupby_weights"] == [0.5, 0.5]


# ---- F against the plain-loop reference ----------------------------------------------------------------------
def _levels_codes(y):
    return [pd.factorize(y[:, i], sort=True)[0] for i in range(y.shape[1])]


@pytest.mark.parametrize("weights", [None, [3.0, 1.0], [0.0, 1.0]])
def test_relevance_is_the_weighted_sum_of_level_informations(weights):
    X, y = _planted(n_per_type=10, n_noise=5)
    codes = ref.mean_sd_codes(X)
    v = np.full(2, 0.5) if weights is None else np.asarray(weights) / np.sum(weights)
    expected = ref.level_weighted_relevance(codes, _levels_codes(y), v)
    sel = maxrel(X, y, groupby_weights=weights)
    np.testing.assert_allclose(sel.relevance, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sel.params["groupby_weights"], v)
    fy, levels = check_levels(y, X, weights)          # the same F inside the QP methods
    codes_fine = levels.codes[-1]
    _, F, _, _ = similarity_and_relevance(X, codes_fine, similarity="mi", relevance="mi", discretization="mean_sd",
                                          n_bins=3, base=2, need_full=False, levels=levels)
    np.testing.assert_allclose(F, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(bioqpfs.qpfs(X, y, groupby_weights=weights).relevance, expected, rtol=1e-10, atol=1e-12)


def test_class_weight_uses_the_finest_level_for_every_level():
    """class_weight='balanced' weighs the samples by their finest class (N / (C n_c)), and every level's MI is
    computed under those weights."""
    X, y = _planted(n_per_type=10, n_noise=4)
    keep = np.r_[0:10, 10:14, 20:80]                     # unequal cell types
    X, y = X[keep], y[keep]
    levels = _levels_codes(y)
    fine = levels[-1]
    sizes = np.bincount(fine)
    w = fine.size / (sizes.size * sizes[fine])
    expected = ref.level_weighted_relevance(ref.mean_sd_codes(X), levels, [0.5, 0.5], sample_weights=w)
    sel = maxrel(X, y, class_weight="balanced")
    np.testing.assert_allclose(sel.relevance, expected, rtol=1e-9, atol=1e-12)


def test_levels_with_batches():
    """Hierarchy and batch combine: F = sum_l v_l sum_b w_b I_b(X; C_l), each batch discretised on its own."""
    X, y = _planted(n_per_type=12, n_noise=4)
    batch = np.tile([0, 1], X.shape[0] // 2)
    levels = _levels_codes(y)
    expected = sum(0.5 * ref.level_weighted_relevance(ref.mean_sd_codes(X[batch == b]),
                                                      [c[batch == b] for c in levels], [0.5, 0.5])
                   for b in (0, 1))
    np.testing.assert_allclose(maxrel(X, y, batch=batch).relevance, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("method", HIERARCHY_METHODS)
def test_a_coarse_level_confounded_with_the_batch_is_warned_about_on_every_face(method):
    """A batch that holds one lineage each (the lineage is the batch): the batch-aware I(X; lineage) is 0 for every
    gene, so the lineage level silently contributed nothing.  Every selector of hierarchical labels warns, naming
    the level, at the user's line; a batch that crosses the lineages gives no such warning."""
    import warnings

    X, y = _planted(n_per_type=12, n_noise=4)
    lineage = y[:, 0]
    with pytest.warns(UserWarning, match=r"every batch holds a single class of level\(s\) 'level 0'") as record:
        bioqpfs.select(X, y, method=method, n_genes=3, batch=lineage)
    assert all(w.filename == __file__ for w in record if "holds a single class" in str(w.message))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        bioqpfs.select(X, y, method=method, n_genes=3, batch=np.tile([0, 1], X.shape[0] // 2))
    assert not [w for w in record if "holds a single class" in str(w.message)]


# ---- one level: exactly the plain call -----------------------------------------------------------------------
@pytest.mark.parametrize("method", HIERARCHY_METHODS)
def test_one_level_or_a_repeated_finest_level_equals_the_plain_call(method):
    X, y = _planted(n_per_type=12, n_noise=10)
    plain = bioqpfs.select(X, y[:, 1], method=method, n_genes=5)
    one = bioqpfs.select(X, y[:, [1]], method=method, n_genes=5)                  # a single column
    twice = bioqpfs.select(X, y[:, [1, 1]], method=method, n_genes=5)            # 0.5 I + 0.5 I = I exactly
    for other in (one, twice):
        np.testing.assert_array_equal(other.ranking, plain.ranking)
        np.testing.assert_array_equal(other.weights, plain.weights)
        np.testing.assert_array_equal(other.relevance, plain.relevance)
    assert "groupby_weights" not in one.params and twice.params["groupby_levels"] == ["level 0", "level 1"]


def test_hall_relevance_is_summed_over_levels_too():
    X, y = _planted(n_per_type=12, n_noise=6)
    levels = _levels_codes(y)
    expected = 0.25 * ref.hall(X, levels[0]) + 0.75 * ref.hall(X, levels[1])
    sel = bioqpfs.qpfs(X, y, similarity="correlation", groupby_weights=[1, 3])
    np.testing.assert_allclose(sel.relevance, expected, rtol=1e-9)


# ---- refusals and bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize("method", sorted(set(methods()) - set(HIERARCHY_METHODS) - {"sdp_cmi"}))
def test_other_methods_refuse_hierarchical_labels_by_name(method):
    X, y = _planted(n_per_type=6, n_noise=3)
    with pytest.raises(ValueError, match=rf"method '{method}' does not take hierarchical labels.*qpfs"):
        bioqpfs.select(X, y, method=method, n_genes=3)


def test_direct_call_of_another_method_refuses_too():
    from bioqpfs.selectors.baselines import jmi

    X, y = _planted(n_per_type=6, n_noise=3)
    with pytest.raises(ValueError, match="y has 2 columns.*finest level alone"):
        jmi(X, y, n_genes=3)
    with pytest.raises(ValueError, match="the default recipe, method=None"):
        bioqpfs.select(X, y, n_genes=3)


def test_non_nested_levels_name_the_fine_class():
    X, y = _planted(n_per_type=6, n_noise=3)
    y = y.copy()
    y[0, 1] = "type5"                       # a type of the second lineage now also in the first
    with pytest.raises(ValueError, match=r"not nested: class 'type5' of level 'level 1' lies in 2 classes of "
                                         r"level 'level 0' \('lymphoid', 'myeloid'\)"):
        bioqpfs.qpfs(X, y, n_genes=3)
    frame = pd.DataFrame(y, columns=["lineage", "cell_type"])
    with pytest.raises(ValueError, match="class 'type5' of level 'cell_type'"):
        maxrel(X, frame)


@pytest.mark.parametrize(("weights", "error", "match"), [
    ([1.0, 2.0, 3.0], ValueError, "3 value.*2 level"),
    ([1.0, -1.0], ValueError, "non-negative"),
    ([0.0, 0.0], ValueError, "not all zero"),
    ([np.nan, 1.0], ValueError, "finite"),
    ("abc", TypeError, "list of numbers"),
    (0.5, ValueError, "1 value.*2 level"),
])
def test_bad_groupby_weights(weights, error, match):
    X, y = _planted(n_per_type=6, n_noise=3)
    with pytest.raises(error, match=match):
        bioqpfs.qpfs(X, y, groupby_weights=weights)


def test_groupby_weights_with_one_level():
    X, y = _planted(n_per_type=6, n_noise=3)
    with pytest.raises(ValueError, match="2 value.*1 level"):
        maxrel(X, y[:, 1], groupby_weights=[1, 1])
    np.testing.assert_array_equal(maxrel(X, y[:, 1], groupby_weights=[2.0]).relevance,
                                  maxrel(X, y[:, 1]).relevance)


@pytest.mark.parametrize("method", HIERARCHY_METHODS)
def test_a_coarse_level_of_one_class_is_left_out_with_a_warning(method):
    """The data subset to one lineage: the lineage level was refused ("needs at least 2 classes"); it carries no
    information, so it is left out (named in a warning) and the call equals the plain one on the finest level."""
    X, y = _planted(n_per_type=12, n_noise=10)
    one_lineage = y[:, 0] == "myeloid"
    X, y = X[one_lineage], y[one_lineage]
    plain = bioqpfs.select(X, y[:, 1], method=method, n_genes=5)
    frame = pd.DataFrame(y, columns=["lineage", "cell_type"])
    with pytest.warns(UserWarning, match=r"level\(s\) 'lineage' hold a single class \('myeloid'\)"):
        both = bioqpfs.select(X, frame, method=method, n_genes=5)
    np.testing.assert_array_equal(both.ranking, plain.ranking)
    np.testing.assert_array_equal(both.weights, plain.weights)
    assert both.params["groupby_levels"] == ["cell_type"] and both.params["groupby_weights"] == [1.0]
    with pytest.raises(ValueError, match="weight only to level.*'lineage'.*'cell_type' a positive weight"), \
            pytest.warns(UserWarning, match="single class"):
        bioqpfs.select(X, frame, method=method, n_genes=5, groupby_weights=[1, 0])
    with pytest.raises(ValueError, match="level 'cell_type' has 1 class"):  # the finest level still needs two
        bioqpfs.select(X[:12], frame.iloc[:12], method=method, n_genes=5)


def test_a_coarse_level_of_one_class_in_tl_and_evaluate():
    """tl and evaluate refused the one-class level in their own label check; now one warning each, and the same
    results as the finest level alone."""
    X, y = _planted(n_per_type=12, n_noise=10)
    keep = y[:, 0] == "myeloid"
    obs = pd.DataFrame(y[keep], columns=["lineage", "cell_type"], index=[f"c{i}" for i in range(keep.sum())])
    adata = ad.AnnData(X[keep], obs=obs)
    with pytest.warns(UserWarning, match="single class") as record:
        bioqpfs.tl.select_genes(adata, ["lineage", "cell_type"], method="qpfs", n_genes=4, key_added="both")
    assert sum("single class" in str(w.message) for w in record) == 1
    bioqpfs.tl.select_genes(adata, "cell_type", method="qpfs", n_genes=4, key_added="plain")
    assert list(adata.uns["both"]["selected"]) == list(adata.uns["plain"]["selected"])
    assert adata.uns["both"]["params"]["groupby_levels"] == ["cell_type"]
    with pytest.warns(UserWarning, match="'lineage' hold a single class") as record:
        both = bioqpfs.evaluate.error_curve(adata, ["lineage", "cell_type"], ["qpfs"], n_genes=[2, 4], cv=3)
    assert sum("single class" in str(w.message) for w in record) == 1, "once, not once per fold"
    plain = bioqpfs.evaluate.error_curve(adata, "cell_type", ["qpfs"], n_genes=[2, 4], cv=3)
    timing = [c for c in both if c.startswith("seconds")]
    pd.testing.assert_frame_equal(both.drop(columns=timing), plain.drop(columns=timing))


def test_missing_label_in_a_level_is_named():
    X, y = _planted(n_per_type=6, n_noise=3)
    frame = pd.DataFrame(y, columns=["lineage", "cell_type"])
    frame.loc[3, "lineage"] = None
    with pytest.raises(ValueError, match="level 'lineage'.*missing"):
        bioqpfs.qpfs(X, frame)


def test_caller_labels_are_not_mutated():
    X, y = _planted(n_per_type=6, n_noise=3)
    frame = pd.DataFrame(y, columns=["lineage", "cell_type"])
    before, X0 = frame.copy(), X.copy()
    bioqpfs.qpfs(X, frame, groupby_weights=[1, 2])
    pd.testing.assert_frame_equal(frame, before)
    np.testing.assert_array_equal(X, X0)


# ---- faces ---------------------------------------------------------------------------------------------------
def _adata(seed=0):
    X, y = _planted(seed, n_per_type=15, n_noise=12)
    obs = pd.DataFrame({"lineage": pd.Categorical(y[:, 0]), "cell_type": pd.Categorical(y[:, 1])},
                       index=[f"c{i}" for i in range(X.shape[0])])
    return ad.AnnData(X, obs=obs, var=pd.DataFrame(index=[f"g{j}" for j in range(X.shape[1])]))


def test_tl_records_the_levels_and_round_trips_h5ad(tmp_path):
    adata = _adata()
    bioqpfs.tl.select_genes(adata, ["lineage", "cell_type"], method="qpfs", n_genes=3, groupby_weights=[3, 1])
    params = adata.uns["qpfs"]["params"]
    assert list(params["groupby"]) == ["lineage", "cell_type"]
    assert list(params["groupby_levels"]) == ["lineage", "cell_type"]
    np.testing.assert_allclose(params["groupby_weights"], [0.75, 0.25])
    X, y = _planted(0, n_per_type=15, n_noise=12)
    direct = bioqpfs.qpfs(X, y, n_genes=3, groupby_weights=[3, 1])
    np.testing.assert_array_equal(adata.var["qpfs_weight"].to_numpy(), direct.weights)
    path = tmp_path / "h.h5ad"
    adata.write_h5ad(path)
    back = ad.read_h5ad(path)
    assert list(back.uns["qpfs"]["params"]["groupby"]) == ["lineage", "cell_type"]
    np.testing.assert_allclose(back.uns["qpfs"]["params"]["groupby_weights"], [0.75, 0.25])
    assert list(back.uns["qpfs"]["selected"]) == list(adata.uns["qpfs"]["selected"])
    # a single-column list is the plain call
    bioqpfs.tl.select_genes(adata, ["cell_type"], method="qpfs", n_genes=3, key_added="one")
    bioqpfs.tl.select_genes(adata, "cell_type", method="qpfs", n_genes=3, key_added="plain")
    np.testing.assert_array_equal(adata.var["one_weight"], adata.var["plain_weight"])


def test_tl_refusals_before_any_work():
    adata = _adata()
    with pytest.raises(ValueError, match="default recipe.*does not take hierarchical labels"):
        bioqpfs.tl.select_genes(adata, ["lineage", "cell_type"], n_genes=3)
    with pytest.raises(ValueError, match="'cell_type'.*more than once"):
        bioqpfs.tl.select_genes(adata, ["cell_type", "cell_type"], method="qpfs", n_genes=3)
    with pytest.raises(KeyError, match="'celltype' is not a column"):
        bioqpfs.tl.select_genes(adata, ["lineage", "celltype"], method="qpfs", n_genes=3)
    adata.obs["mixed"] = adata.obs["cell_type"].astype(str)
    adata.obs.loc["c0", "mixed"] = "type7"
    with pytest.raises(ValueError, match="not nested: class 'type7' of level 'mixed'"):
        bioqpfs.tl.select_genes(adata, ["lineage", "mixed"], method="qpfs", n_genes=3)
    assert "qpfs" not in adata.uns


def test_evaluate_refits_on_every_level_and_classifies_the_finest(monkeypatch):
    adata = _adata()
    X, y = _planted(0, n_per_type=15, n_noise=12)
    seen = []
    real = bioqpfs.evaluate.select

    def recording(X, y, **kw):
        seen.append(np.shape(y))
        return real(X, y, **kw)

    monkeypatch.setattr(bioqpfs.evaluate, "select", recording)
    curve = bioqpfs.evaluate.error_curve(adata, ["lineage", "cell_type"], ["maxrel"], n_genes=[2, 3], cv=3)
    assert len(seen) == 3 and all(len(s) == 2 and s[1] == 2 for s in seen), "every fold's selection gets both levels"
    same = bioqpfs.evaluate.error_curve(X, y, ["maxrel"], n_genes=[2, 3], cv=3)
    np.testing.assert_allclose(curve["mean_error"], same["mean_error"])
    # folds and classifier: the finest level (a fixed panel scores as with the cell types alone, not the lineages)
    fixed = {"panel": [1, 2, 0]}
    hier = bioqpfs.evaluate.error_curve(X, y, fixed, n_genes=[1, 2], cv=3)
    fine = bioqpfs.evaluate.error_curve(X, y[:, 1], fixed, n_genes=[1, 2], cv=3)
    coarse = bioqpfs.evaluate.error_curve(X, y[:, 0], fixed, n_genes=[1, 2], cv=3)
    np.testing.assert_array_equal(hier["mean_error"], fine["mean_error"])
    assert not np.allclose(hier["mean_error"], coarse["mean_error"])


def test_n_genes_auto_with_levels():
    adata = _adata()
    bioqpfs.tl.select_genes(adata, ["lineage", "cell_type"], method="maxrel", n_genes="auto")
    assert adata.uns["maxrel"]["n_genes_auto"]["n_genes"] == adata.uns["maxrel"]["params"]["n_genes"]
    assert list(adata.uns["maxrel"]["params"]["groupby"]) == ["lineage", "cell_type"]


def test_sklearn_estimator_takes_a_2d_y():
    from bioqpfs.estimators import BaselineSelector, QPFSSelector

    X, y = _planted(n_per_type=12, n_noise=6)
    est = QPFSSelector(n_features_to_select=3).fit(X, y)
    np.testing.assert_array_equal(est.weights_, bioqpfs.qpfs(X, y, n_genes=3).weights)
    est = BaselineSelector(method="maxrel", n_features_to_select=3, method_params={"groupby_weights": [1, 3]})
    assert est.fit(X, pd.DataFrame(y)).selection_.params["groupby_weights"] == [0.25, 0.75]
    with pytest.raises(ValueError, match="'jmi' does not take hierarchical labels"):
        BaselineSelector(method="jmi", n_features_to_select=3).fit(X, y)


def test_cli_groupby_levels(tmp_path):
    X, y = _planted(n_per_type=12, n_noise=6)
    df = pd.DataFrame(X, columns=[f"g{j}" for j in range(X.shape[1])], index=[f"s{i}" for i in range(X.shape[0])])
    df.insert(0, "lineage", y[:, 0])
    df.insert(1, "cell_type", y[:, 1])
    table, out = tmp_path / "t.csv", tmp_path / "out.h5ad"
    df.to_csv(table)
    r = subprocess.run([sys.executable, "-m", "bioqpfs.cli", "select", str(table), "--orientation", "samples-by-genes",
                        "--groupby", "lineage,cell_type", "--groupby-weights", "1,3", "--method", "maxrel",
                        "--n-genes", "3", "-o", str(out), "--quiet"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    a = ad.read_h5ad(out)
    assert list(a.uns["maxrel"]["params"]["groupby"]) == ["lineage", "cell_type"]
    np.testing.assert_allclose(a.uns["maxrel"]["params"]["groupby_weights"], [0.25, 0.75])
    np.testing.assert_array_equal(a.var["maxrel_weight"].to_numpy(),
                                  maxrel(X, y, n_genes=3, groupby_weights=[1, 3]).weights)
    r = subprocess.run([sys.executable, "-m", "bioqpfs.cli", "select", str(table), "--orientation", "samples-by-genes",
                        "--groupby", "lineage,cell_type", "--method", "jmi", "-o", str(out), "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "does not take hierarchical labels" in r.stderr
    tsv = tmp_path / "curve.tsv"
    r = subprocess.run([sys.executable, "-m", "bioqpfs.cli", "evaluate", str(table), "--orientation",
                        "samples-by-genes", "--groupby", "lineage,cell_type", "--methods", "maxrel", "--n-genes", "2,3",
                        "--cv", "3", "-o", str(tsv), "--quiet"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    expected = bioqpfs.evaluate.error_curve(X, y, ["maxrel"], n_genes=[2, 3], cv=3)
    np.testing.assert_allclose(pd.read_csv(tsv, sep="\t")["mean_error"], expected["mean_error"])
    # --groupby-weights reaches every method named (each must take hierarchical labels)
    r = subprocess.run([sys.executable, "-m", "bioqpfs.cli", "evaluate", str(table), "--orientation",
                        "samples-by-genes", "--groupby", "lineage,cell_type", "--groupby-weights", "3,1", "--methods",
                        "maxrel,mrmr_mid", "--n-genes", "1,2", "--cv", "3", "-o", str(tsv), "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    expected = bioqpfs.evaluate.error_curve(X, y, ["maxrel", "mrmr_mid"], n_genes=[1, 2], cv=3,
                                            method_params={"maxrel": {"groupby_weights": [3, 1]},
                                                           "mrmr_mid": {"groupby_weights": [3, 1]}})
    unweighted = bioqpfs.evaluate.error_curve(X, y, ["maxrel", "mrmr_mid"], n_genes=[1, 2], cv=3)
    got = pd.read_csv(tsv, sep="\t")
    np.testing.assert_allclose(got["mean_error"], expected["mean_error"])
    assert not np.allclose(expected["mean_error"], unweighted["mean_error"])  # the weights change the panels
    r = subprocess.run([sys.executable, "-m", "bioqpfs.cli", "evaluate", str(table), "--orientation",
                        "samples-by-genes", "--groupby", "lineage,cell_type", "--groupby-weights", "3,1", "--methods",
                        "jmi", "-o", str(tsv), "--quiet"], capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "--groupby-weights is for methods that take hierarchical labels" in r.stderr


def test_r_faces_take_several_label_columns():
    """rpy2 face (a list of colData columns) and the R package's entry point (labels per level, groupby a list)."""
    pytest.importorskip("rpy2.robjects", reason="rpy2/R not installed (pip install .[r])")
    from bioqpfs import r as br

    adata = _adata()
    reference = adata.copy()
    bioqpfs.tl.select_genes(reference, ["lineage", "cell_type"], method="qpfs", n_genes=3)
    robj = br.from_anndata(adata, to="SummarizedExperiment", assay="logcounts")
    out = br.to_anndata(br.select_genes(robj, ["lineage", "cell_type"], method="qpfs", n_genes=3))
    np.testing.assert_array_equal(out.var["qpfs_weight"].to_numpy(), reference.var["qpfs_weight"].to_numpy())
    assert list(out.uns["qpfs"]["params"]["groupby"]) == ["lineage", "cell_type"]
    X = adata.X
    data = np.asfortranarray(X.T).astype("<f8").tobytes(order="F")
    res = br._reticulate_select(bytearray(data), X.shape[0], X.shape[1], list(adata.var_names),
                                [list(adata.obs["lineage"].astype(str)), list(adata.obs["cell_type"].astype(str))],
                                method="qpfs", n_genes=3.0, groupby=["lineage", "cell_type"])
    assert res["columns"]["qpfs_weight"] == reference.var["qpfs_weight"].tolist()
    assert res["record"]["params"]["groupby"] == ["lineage", "cell_type"]


def test_panel_plot_groups_by_the_finest_recorded_level():
    adata = _adata()
    bioqpfs.tl.select_genes(adata, ["lineage", "cell_type"], method="maxrel", n_genes=3)
    axes = bioqpfs.pl.panel(adata, "maxrel", show=False)
    labels = [t.get_text() for t in axes["mainplot_ax"].get_yticklabels()]
    assert labels == sorted(set(adata.obs["cell_type"]))


# ---- Dask / backed X: the levels are counted chunk by chunk like the finest level ---------------------------
def test_levels_on_a_dask_x_and_a_backed_anndata_equal_in_memory(tmp_path):
    """Regrouping a Dask code table by each level keeps the Dask counting backend (it used to hand the backend a
    numpy array and fail); tl on a backed h5ad read in sample chunks gives the in-memory panel."""
    import dask.array as da

    X, y = _planted()
    mem = bioqpfs.select(X, y, method="qpfs", n_genes=5, discretization="mean_sd")
    lazy = bioqpfs.select(da.from_array(X, chunks=(70, X.shape[1])), y, method="qpfs", n_genes=5,
                          discretization="mean_sd")
    np.testing.assert_allclose(lazy.weights, mem.weights, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(lazy.ranking, mem.ranking)
    adata = _adata()
    adata.write_h5ad(tmp_path / "a.h5ad")
    bioqpfs.tl.select_genes(adata, ["lineage", "cell_type"], method="qpfs", n_genes=5, discretization="mean_sd")
    backed = ad.read_h5ad(tmp_path / "a.h5ad", backed="r")
    bioqpfs.tl.select_genes(backed, ["lineage", "cell_type"], method="qpfs", n_genes=5, discretization="mean_sd",
                            chunk_size=40)
    assert list(backed.uns["qpfs"]["selected"]) == list(adata.uns["qpfs"]["selected"])
    np.testing.assert_allclose(backed.var["qpfs_weight"], adata.var["qpfs_weight"], rtol=0, atol=1e-12)


# ---- a row of labels is one level ---------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["qpfs", "maxrel", "spec_cmi", "ldfs"])
def test_a_row_of_labels_is_one_level_not_one_level_per_sample(method):
    """``y`` of shape (1, n_samples) is one row of labels, as check_labels reads it (it flattens a row or a
    column alike): it used to be taken for n_samples hierarchical levels, so the methods without levels refused
    "hierarchical labels (60 levels)" and those with levels "y level 'level 0' has 1 entries"."""
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 20)
    X = rng.normal(size=(60, 12)) + np.outer(y == 2, rng.random(12) * 2)
    flat = bioqpfs.select(X, y, method=method, n_genes=4)
    row = bioqpfs.select(X, y[None, :], method=method, n_genes=4)
    np.testing.assert_array_equal(row.ranking, flat.ranking)
    np.testing.assert_array_equal(row.weights, flat.weights)
