"""tl.select_genes with combinations of options (hunt): each test pairs two calls that must agree, or a
combination whose error must name what the user passed."""
import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest

import bioqpfs


def make_adata(seed=0, n=60, m=20):
    rng = np.random.default_rng(seed)
    y = np.repeat(["a", "b", "c"], n // 3)
    X = rng.normal(size=(n, m))
    for k, c in enumerate("abc"):
        X[y == c, k] += 3
    obs = pd.DataFrame({"ct": pd.Categorical(y), "batch": np.tile(["b1", "b2"], n // 2)},
                       index=[f"c{i}" for i in range(n)])
    return ad.AnnData(X, obs=obs, var=pd.DataFrame(index=[f"g{j}" for j in range(m)]))


def test_auto_n_genes_reads_preselected_positions_among_all_genes_with_mask_var():
    # n_genes="auto" cross-validated with the positions renumbered twice (among mask_var's genes, then again):
    # [15] forced g13 in the folds, and [5] was refused as gene g3, which the user did not pass
    curves = []
    for forced in ([15], ["g15"]):
        a = make_adata()
        a.var["hv"] = ~np.isin(np.arange(a.n_vars), [3, 4])
        bioqpfs.tl.select_genes(a, "ct", method="mrmr_mid", n_genes="auto", mask_var="hv", preselected=forced)
        assert a.uns["mrmr_mid"]["selected"][0] == "g15"
        curves.append(a.uns["mrmr_mid"]["n_genes_auto"]["curve"]["mean_error"])
    np.testing.assert_array_equal(curves[0], curves[1])
    a = make_adata()
    a.var["hv"] = ~np.isin(np.arange(a.n_vars), [3, 4])
    bioqpfs.tl.select_genes(a, "ct", method="mrmr_mid", n_genes="auto", mask_var="hv", preselected=[5])
    assert a.uns["mrmr_mid"]["selected"][0] == "g5"


@pytest.mark.parametrize("kind", ["Series", "array"])
def test_nullable_boolean_mask_var_with_na_is_refused_naming_the_gene(kind):
    # a .var column of pandas' "boolean" dtype with NA was refused naming the gene; the same values as a Series or
    # array became an object array: "mask_var must be a boolean column or array with one entry per gene (20)"
    a = make_adata()
    values = pd.array([True] * 19 + [pd.NA], dtype="boolean")
    mask = pd.Series(values, index=a.var_names) if kind == "Series" else values
    with pytest.raises(ValueError, match=f"the mask_var {kind} has 1 missing value\\(s\\) \\(NA, e.g. gene g19\\)"):
        bioqpfs.tl.select_genes(a, "ct", method="mrmr_mid", n_genes=4, mask_var=mask)
    assert "mrmr_mid" not in a.uns
    bioqpfs.tl.select_genes(a, "ct", method="mrmr_mid", n_genes=4, mask_var=values.fillna(True))
    assert a.var["mrmr_mid_selected"].sum() == 4


def test_batch_as_a_method_parameter_is_refused_before_any_work():
    # batch= through **method_params ran batch-aware with .uns[key]["params"]["batch_key"] None; with batch_key too,
    # or feature_names=/y=/X=, it failed inside select() ("got multiple values for keyword argument"), after the
    # matrix was read
    a = make_adata()
    with pytest.raises(TypeError, match=r"batch= is not a parameter of select_genes, which takes it from the "
                                        r"AnnData: pass batch_key="):
        bioqpfs.tl.select_genes(a, "ct", method="qpfs", n_genes=4, batch=a.obs["batch"].to_numpy())
    with pytest.raises(TypeError, match="batch= is not a parameter"):
        bioqpfs.tl.select_genes(a, "ct", method="qpfs", n_genes=4, batch=a.obs["batch"].to_numpy(),
                                batch_key="batch")
    with pytest.raises(TypeError, match="feature_names= is not a parameter.*adata.var_names"):
        bioqpfs.tl.select_genes(a, "ct", method="qpfs", n_genes=4, feature_names=list(a.var_names))
    assert "qpfs" not in a.uns


def test_an_obs_column_named_by_an_int_is_recorded_and_nothing_is_half_written():
    # an .obs column named 0 was selected on, then recording groupby failed ("'int' object is not iterable") after
    # the .var columns were written: a selection in .var without its .uns entry
    a = make_adata()
    a.obs[0] = a.obs["ct"].to_numpy()
    bioqpfs.tl.select_genes(a, 0, method="mrmr_mid", n_genes=4)
    assert a.uns["mrmr_mid"]["params"]["groupby"] == "0"
    b = make_adata()
    bioqpfs.tl.select_genes(b, "ct", method="mrmr_mid", n_genes=4)
    assert list(a.uns["mrmr_mid"]["selected"]) == list(b.uns["mrmr_mid"]["selected"])
    assert list(a.var.columns) == list(b.var.columns)


def test_a_coarse_level_confounded_with_the_batch_is_warned_about():
    # batch_key equal to the coarse level: every batch holds one lineage, so the batch-aware I(X; lineage) is 0 for
    # every gene and the lineage marker (g2, only in lineage L2's class c) silently left the panel
    a = make_adata()
    a.obs["lin"] = pd.Categorical(np.where(a.obs["ct"] == "c", "L2", "L1"))
    with pytest.warns(UserWarning, match=r"every batch holds a single class of level\(s\) 'lin'") as record:
        bioqpfs.tl.select_genes(a, ["lin", "ct"], method="qpfs", n_genes=5, batch_key="lin")
    assert all(w.filename == __file__ for w in record if "holds a single class" in str(w.message))
    b = make_adata()
    b.obs["lin"] = a.obs["lin"]
    with warnings.catch_warnings(record=True) as record:   # a batch that crosses the levels: no warning
        warnings.simplefilter("always")
        bioqpfs.tl.select_genes(b, ["lin", "ct"], method="qpfs", n_genes=5, batch_key="batch")
    assert not [w for w in record if "holds a single class" in str(w.message)]
