import os
import sys

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import bioqpfs


def make_adata(rng, n=60, m=12, sparse=False):
    y = rng.integers(0, 3, size=n)
    X = rng.poisson(1.0, size=(n, m)).astype(np.float32)
    X[:, :3] += 3 * y[:, None]
    obs = pd.DataFrame({"group": pd.Categorical(np.array(["A", "B", "C"])[y]),
                        "int_group": y, "str_group": np.array(["x", "y", "z"])[y].astype(object)},
                       index=[f"c{i}" for i in range(n)])
    var = pd.DataFrame({"highly_variable": np.arange(m) % 2 == 0, "existing": np.arange(m)},
                       index=[f"g{j}" for j in range(m)])
    a = ad.AnnData(sp.csr_matrix(X) if sparse else X, obs=obs, var=var)
    a.uns["keep_me"] = {"a": 1}
    return a


def test_writes_var_and_uns_and_keeps_existing(rng):
    a = make_adata(rng)
    assert bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=4) is None
    for c in ("qpfs_weight", "qpfs_rank", "qpfs_selected", "existing", "highly_variable"):
        assert c in a.var
    assert a.uns["keep_me"] == {"a": 1}
    assert a.var["qpfs_selected"].sum() == 4
    sel = bioqpfs.select(a.X, a.obs["group"], method="qpfs", n_genes=4)
    np.testing.assert_allclose(a.var["qpfs_weight"].to_numpy(), sel.weights)
    ranked = list(a.var_names[sel.ranking[:4]])
    assert list(a.uns["qpfs"]["selected"]) == ranked
    assert set(a.var_names[a.var["qpfs_selected"]]) == set(ranked)
    assert a.uns["qpfs"]["params"]["method"] == "qpfs"
    assert 0 < a.uns["qpfs"]["params"]["alpha"] < 1
    df = bioqpfs.get.selection_df(a, "qpfs")
    assert list(df.columns[:4]) == ["gene", "rank", "weight", "selected"]
    assert list(df["gene"][:4]) == ranked and (np.diff(df["rank"]) > 0).all()


@pytest.mark.parametrize("col", ["group", "int_group", "str_group"])
def test_label_types_give_same_result(rng, col):
    a = make_adata(rng)
    bioqpfs.tl.select_genes(a, col, method="qpfs", n_genes=3)
    b = make_adata(np.random.default_rng(12345))
    bioqpfs.tl.select_genes(b, "group", method="qpfs", n_genes=3)
    np.testing.assert_allclose(a.var["qpfs_weight"], b.var["qpfs_weight"])


def test_sparse_equals_dense(rng):
    a = make_adata(np.random.default_rng(1))
    b = make_adata(np.random.default_rng(1), sparse=True)
    bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=5)
    bioqpfs.tl.select_genes(b, "group", method="qpfs", n_genes=5)
    np.testing.assert_array_equal(a.var["qpfs_rank"], b.var["qpfs_rank"])


def test_copy_mask_layer_key(rng):
    a = make_adata(rng)
    a.layers["counts"] = a.X.copy()
    out = bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=2, mask_var="highly_variable", layer="counts",
                                  key_added="hv", copy=True)
    assert "hv_rank" not in a.var and out is not a
    assert np.isnan(out.var.loc[~out.var["highly_variable"], "hv_rank"]).all()
    assert np.isfinite(out.var.loc[out.var["highly_variable"], "hv_rank"]).all()
    assert not out.var.loc[~out.var["highly_variable"], "hv_selected"].any()
    assert out.uns["hv"]["params"]["layer"] == "counts"


def test_use_raw(rng):
    a = make_adata(rng)
    a.raw = a.copy()
    a.X = np.zeros_like(a.X)  # X is useless; raw has the data
    bioqpfs.tl.select_genes(a, "group", method="qpfs", use_raw=True, n_genes=5)
    b = make_adata(np.random.default_rng(12345))
    bioqpfs.tl.select_genes(b, "group", method="qpfs", n_genes=5)
    np.testing.assert_allclose(a.var["qpfs_weight"], b.var["qpfs_weight"])


def test_h5ad_round_trip(rng, tmp_path):
    a = make_adata(rng)
    bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=3)
    a.write_h5ad(tmp_path / "a.h5ad")
    b = ad.read_h5ad(tmp_path / "a.h5ad")
    assert list(b.uns["qpfs"]["selected"]) == list(a.uns["qpfs"]["selected"])
    assert b.uns["qpfs"]["params"]["alpha"] == a.uns["qpfs"]["params"]["alpha"]
    assert set(b.uns["qpfs"]["diagnostics"]) == set(a.uns["qpfs"]["diagnostics"])
    pd.testing.assert_frame_equal(bioqpfs.get.selection_df(a, "qpfs"), bioqpfs.get.selection_df(b, "qpfs"))


def test_errors(rng):
    a = make_adata(rng)
    with pytest.raises(KeyError, match="not a column of adata.obs"):
        bioqpfs.tl.select_genes(a, "nope", method="qpfs")
    a.obs["holes"] = a.obs["group"].astype(object)
    a.obs.iloc[3, a.obs.columns.get_loc("holes")] = np.nan
    with pytest.raises(ValueError, match=r"1 missing value\(s\) \(cells c3\)"):
        bioqpfs.tl.select_genes(a, "holes", method="qpfs")
    with pytest.raises(KeyError, match="layer 'x' not found"):
        bioqpfs.tl.select_genes(a, "group", method="qpfs", layer="x")
    with pytest.raises(KeyError, match="mask_var"):
        bioqpfs.tl.select_genes(a, "group", method="qpfs", mask_var="hv")
    with pytest.raises(ValueError, match="n_genes=99"):
        bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=99)
    assert "qpfs_rank" not in a.var  # nothing half-written after errors


def test_view_with_copy_true(rng):
    a = make_adata(rng)
    out = bioqpfs.tl.select_genes(a[:40], "group", method="qpfs", n_genes=5, copy=True)
    assert out.n_obs == 40 and "qpfs_rank" in out.var and "qpfs_rank" not in a.var


def test_dataset_loaders():
    for load, shape, n_classes in ((bioqpfs.datasets.srbct, (63, 2308), 4), (bioqpfs.datasets.colon, (62, 2000), 2),
                                   (bioqpfs.datasets.leukemia, (72, 7129), 2)):
        a = load()
        assert a.shape == shape and a.obs["class"].nunique() == n_classes and a.var_names.is_unique


@pytest.mark.parametrize("sparse", [False, True])
def test_backed_input(rng, tmp_path, sparse):
    a = make_adata(np.random.default_rng(7), sparse=sparse)
    a.write_h5ad(tmp_path / "a.h5ad")
    b = ad.read_h5ad(tmp_path / "a.h5ad", backed="r")
    bioqpfs.tl.select_genes(b, "group", method="qpfs", n_genes=3)
    c = make_adata(np.random.default_rng(7))
    bioqpfs.tl.select_genes(c, "group", method="qpfs", n_genes=3)
    np.testing.assert_allclose(b.var["qpfs_weight"], c.var["qpfs_weight"])


def test_method_params_recorded_and_preselected_guard(rng):
    a = make_adata(rng)
    bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=3, alpha=0.25, discretization="quantile", n_bins=4)
    p = a.uns["qpfs"]["params"]
    assert p["alpha"] == 0.25 and p["discretization"] == "quantile" and p["n_bins"] == 4


def test_extra_columns_of_every_dtype_survive_h5ad(rng, tmp_path, monkeypatch):
    """Method-specific columns (bool, int, float, str) are written with a mask and round-trip through h5ad."""
    from bioqpfs import _registry

    def fake(X, y, *, n_genes=None, random_state=None, feature_names=None):
        """Rank genes in input order (test double for the extra-columns path)."""
        m = X.shape[1]
        return bioqpfs.Selection("fake", np.ones(m) / m, np.arange(m), n_genes=n_genes,
                                 extra_columns={"flag": np.arange(m) % 2 == 0, "cluster": np.arange(m),
                                                "score": np.linspace(0, 1, m), "label": np.array(["x"] * m)})

    monkeypatch.setitem(_registry._METHODS, "fake", _registry._Method("tests.fake", "fake", "test", "baseline"))
    monkeypatch.setattr(_registry, "method_function", lambda name: fake)
    import bioqpfs.tl._select_genes as tlmod
    monkeypatch.setattr(tlmod, "method_function", lambda name: fake)
    monkeypatch.setattr(tlmod, "select", lambda X, y, method, **kw: fake(X, y, **{k: v for k, v in kw.items()}))
    a = make_adata(rng)
    bioqpfs.tl.select_genes(a, "group", method="fake", n_genes=2, mask_var="highly_variable")
    assert a.var["fake_flag"].dtype == bool and not a.var.loc[~a.var["highly_variable"], "fake_flag"].any()
    assert np.isnan(a.var.loc[~a.var["highly_variable"], "fake_cluster"]).all()
    a.write_h5ad(tmp_path / "x.h5ad")
    b = ad.read_h5ad(tmp_path / "x.h5ad")
    pd.testing.assert_frame_equal(bioqpfs.get.selection_df(a, "fake"), bioqpfs.get.selection_df(b, "fake"),
                                  check_dtype=False)


# --------------------------------------------------------------------------------------------
# issue 22 item 5: scanpy habits (.raw, views, first-run compilation)
# --------------------------------------------------------------------------------------------
@pytest.fixture
def scanpy_log():
    """scanpy's info messages, as a list of lines."""
    import io

    import scanpy as sc

    buf, old = io.StringIO(), sc.settings.verbosity
    sc.settings.verbosity = 3
    sc.settings.logfile = buf
    try:
        yield lambda: buf.getvalue().splitlines()
    finally:
        sc.settings.logfile = sys.stderr
        sc.settings.verbosity = old


def test_use_raw_none_follows_rank_genes_groups(rng, scanpy_log):
    """.raw is used when set and use_raw=None, as scanpy's rank_genes_groups does; .X, a layer or use_raw=False
    otherwise.  References: the same selection run on the intended matrix directly."""
    a = make_adata(rng)
    raw_X = a.X.copy()
    a.raw = a.copy()
    a.X = np.random.default_rng(1).permutation(a.X)   # .X: the labels no longer match (a "scaled" matrix)
    a.layers["L"] = a.X.copy()
    y = a.obs["group"].array

    def ref(X):
        return bioqpfs.select(X, y, method="qpfs", n_genes=4).weights

    bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=4)
    np.testing.assert_allclose(a.var["qpfs_weight"], ref(raw_X))
    assert a.uns["qpfs"]["params"]["use_raw"] is True
    assert any("on adata.raw.X (use_raw=None and adata.raw is set" in line for line in scanpy_log())
    bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=4, use_raw=False, key_added="x")
    np.testing.assert_allclose(a.var["x_weight"], ref(a.X))
    assert a.uns["x"]["params"]["use_raw"] is False
    bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=4, layer="L", key_added="l")   # a layer wins over .raw
    np.testing.assert_allclose(a.var["l_weight"], ref(a.X))
    assert any("on adata.layers['L']" in line for line in scanpy_log())
    # evaluate resolves the matrix the same way
    e_raw = bioqpfs.evaluate.error_curve(a, "group", [["g0", "g1"]], n_genes=2, cv=3)
    e_ref = bioqpfs.evaluate.error_curve(raw_X, a.obs["group"].to_numpy(), [[0, 1]], n_genes=2, cv=3)
    assert e_raw.mean_error.iloc[0] == e_ref.mean_error.iloc[0]
    # a .raw that lacks genes of .var: the error says how to use .X
    b = make_adata(rng)
    b.raw = b[:, :6].copy()
    with pytest.raises(ValueError, match="pass use_raw=False to use adata.X"):
        bioqpfs.tl.select_genes(b, "group", method="qpfs")
    with pytest.raises(TypeError, match="use_raw must be None, True or False"):
        bioqpfs.tl.select_genes(a, "group", method="qpfs", use_raw="yes")


def test_view_becomes_actual_as_in_scanpy(rng):
    a = make_adata(rng)
    before = a.var.copy()
    v = a[a.obs["group"] != "C"]
    with pytest.warns(UserWarning, match="adata is a view"):
        assert bioqpfs.tl.select_genes(v, "group", method="qpfs", n_genes=3) is None
    assert not v.is_view and v.n_obs == int((a.obs["group"] != "C").sum())
    pd.testing.assert_frame_equal(a.var, before)                     # the parent is untouched
    ref = a[a.obs["group"] != "C"].copy()
    bioqpfs.tl.select_genes(ref, "group", method="qpfs", n_genes=3)
    pd.testing.assert_frame_equal(v.var, ref.var)
    # an error before anything is written leaves the view a view
    w = a[:30]
    with pytest.raises(KeyError, match="not a column of adata.obs"):
        bioqpfs.tl.select_genes(w, "nope", method="qpfs")
    with pytest.raises(TypeError, match="does not take parameter"):
        bioqpfs.tl.select_genes(w, "group", method="qpfs", alpah=0.5)
    assert w.is_view


def test_compilation_is_announced_once_and_only_when_it_happens():
    from numba import njit

    from bioqpfs._jit import MESSAGE, announce_compilation

    @njit(cache=False)
    def f(x):
        return x + 1

    @njit(cache=False)
    def g(x):
        return f(x) * 2

    said = []
    with announce_compilation(said.append) as state:
        assert g(1) == 4                       # two kernels compiled (g and the f it calls)
    assert said == [MESSAGE] and state["compiled"] and state["seconds"] > 0
    with announce_compilation(said.append) as state:
        assert g(2) == 6                       # already compiled: nothing to say
    assert said == [MESSAGE] and not state["compiled"] and state["seconds"] == 0


def test_cold_kernel_cache_is_announced_by_tl(tmp_path):
    """A fresh numba cache (NUMBA_CACHE_DIR) compiles and says so; the second process loads the cache silently."""
    import subprocess

    code = ("import scanpy as sc, bioqpfs; sc.settings.verbosity = 3; "
            "a = bioqpfs.datasets.srbct()[:, :60].copy(); "
            "bioqpfs.tl.select_genes(a, 'class', method='qpfs', n_genes=3)")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr + runs[1].stderr
    assert "compiling kernels (first run only" in runs[0].stderr and "kernels compiled in" in runs[0].stderr
    assert "compiling kernels" not in runs[1].stderr


def test_default_recipe_is_the_benchmarked_method_with_its_levers(rng):
    """method=None runs DEFAULT_PANEL (README 'Panel quality'); a named method keeps its published settings."""
    from bioqpfs import DEFAULT_PANEL

    a = make_adata(rng)
    bioqpfs.tl.select_genes(a, "group", n_genes=4)
    rec = a.uns["bioqpfs"]["params"]
    assert rec["method"] == DEFAULT_PANEL["method"] and rec["preset"] == "default"
    for k, v in DEFAULT_PANEL["params"].items():
        assert rec[k] == v
    direct = bioqpfs.select(a.X, a.obs["group"], method=DEFAULT_PANEL["method"], n_genes=4, random_state=0,
                            **DEFAULT_PANEL["params"])
    assert list(a.uns["bioqpfs"]["selected"]) == list(a.var_names[direct.selected])
    # the user's parameters win over the recipe's
    bioqpfs.tl.select_genes(a, "group", n_genes=4, discretization="mean_sd", key_added="md")
    assert a.uns["md"]["params"]["discretization"] == "mean_sd" and a.uns["md"]["params"]["preset"] == "default"
    # a named method: paper settings, its own key
    bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=4)
    assert a.uns["qpfs"]["params"]["preset"] == "paper" and a.uns["qpfs"]["params"]["discretization"] == "mean_sd"


def test_select_default_recipe_equals_the_named_method_with_its_params(rng):
    from bioqpfs import DEFAULT_PANEL

    a = make_adata(rng)
    sel = bioqpfs.select(a.X, a.obs["group"].to_numpy(), n_genes=3)
    assert sel.params["preset"] == "default"
    ref = bioqpfs.select(a.X, a.obs["group"].to_numpy(), method=DEFAULT_PANEL["method"], n_genes=3,
                         **DEFAULT_PANEL["params"])
    np.testing.assert_array_equal(sel.ranking, ref.ranking)
    assert "preset" not in ref.params


def _strings(value):
    """Every str found in a (nested) .uns value."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, str):
        return [value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "OUS":
        return [str(v) for v in value.ravel()]
    return []


def test_provenance_records_what_was_used_and_absent_as_none(rng, tmp_path):
    """The matrix, genes and labels read are recorded; what was not given is None, never "None" (issue 12)."""
    a = make_adata(rng)
    a.layers["counts"] = rng.poisson(2.0, size=a.shape).astype(np.float32)   # unlike X: pl must read it
    bioqpfs.tl.select_genes(a, "int_group", method="qpfs", n_genes=3)
    bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=3, layer="counts", mask_var="highly_variable",
                            key_added="lay")
    params = a.uns["qpfs"]["params"]
    assert params["groupby"] == "int_group" and params["use_raw"] is False
    assert params["layer"] is None and params["mask_var"] is None and params["class_weight"] is None
    assert a.uns["lay"]["params"]["layer"] == "counts" and a.uns["lay"]["params"]["mask_var"] == "highly_variable"
    a.write_h5ad(tmp_path / "a.h5ad")
    b = ad.read_h5ad(tmp_path / "a.h5ad")
    for key in ("qpfs", "lay"):
        assert "None" not in _strings(b.uns[key])
    assert b.uns["qpfs"]["params"].get("layer") is None   # None, or absent where anndata < 0.12 drops it
    assert b.uns["lay"]["params"]["layer"] == "counts"
    # pl reads back the recorded matrix: the layer's MI equals the MI of the layer's panel columns
    genes = list(bioqpfs.get.selection_df(b, "lay")["gene"][:3])
    from bioqpfs.pl._redundancy import redundancy_matrix

    Q, *_ = redundancy_matrix(b, "lay")
    ref = bioqpfs.measures.mutual_information(b[:, genes].layers["counts"], discretization="mean_sd")
    np.testing.assert_allclose(Q, ref)


def test_one_accessor_serves_every_face():
    """tl, evaluate, pl and get read AnnData through bioqpfs._anndata only (no face imports tl's privates)."""
    import ast
    import pathlib

    root = pathlib.Path(bioqpfs.__file__).parent
    for rel in ("evaluate.py", "get.py", "r/_select.py", "pl/_redundancy.py", "pl/_panel.py", "tl/_select_genes.py"):
        tree = ast.parse((root / rel).read_text())
        names = {m.module for m in ast.walk(tree) if isinstance(m, ast.ImportFrom) and m.module}
        assert not any(n.endswith("_select_genes") for n in names), rel
        assert any(n.endswith("_anndata") for n in names), rel


# --------------------------------------------------------------------------------------------
# n_genes="auto": the one-SE size of a cross-validated error curve
# --------------------------------------------------------------------------------------------
def _planted(seed, n=300, m=150, k=15, shift=0.8):
    """Two classes; genes 0..k-1 each shifted by ``shift`` in class 1 with independent noise, so every
    informative gene adds to the separation and the rest add only noise: the error falls until ~k genes."""
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], n // 2)
    X = rng.normal(size=(n, m))
    X[:, :k] += shift * y[:, None]
    return ad.AnnData(X, obs=pd.DataFrame({"c": pd.Categorical(np.array(["a", "b"])[y])},
                                          index=[f"c{i}" for i in range(n)]),
                      var=pd.DataFrame(index=[f"g{j}" for j in range(m)]))


@pytest.mark.parametrize("seed", [0, 1])
def test_auto_n_genes_finds_the_planted_size_and_survives_h5ad(seed, tmp_path):
    from bioqpfs import evaluate

    a = _planted(seed)
    bioqpfs.tl.select_genes(a, "c", method="mrmr_mid", n_genes="auto")
    auto = a.uns["mrmr_mid"]["n_genes_auto"]
    assert 10 <= auto["n_genes"] <= 20        # 15 planted informative genes (grid 5, 10, 15, 20, 30 ...)
    assert a.uns["mrmr_mid"]["params"]["n_genes"] == auto["n_genes"] == a.var["mrmr_mid_selected"].sum()
    assert list(auto["grid"]) == [5, 10, 15, 20, 30, 40, 50, 75, 100]
    curve = pd.DataFrame(auto["curve"])
    # the stored curve is error_curve's, 5-fold with the same seed
    ref = evaluate.error_curve(a, "c", ["mrmr_mid"], n_genes=[5, 10, 15, 20, 30, 40, 50, 75, 100], cv=5,
                               random_state=0)
    np.testing.assert_allclose(curve["mean_error"], ref["mean_error"])
    assert evaluate.suggest_n_genes(curve) == auto["n_genes"]
    # the panel is the method's top n_genes="chosen" panel
    b = _planted(seed)
    bioqpfs.tl.select_genes(b, "c", method="mrmr_mid", n_genes=int(auto["n_genes"]))
    assert list(a.uns["mrmr_mid"]["selected"]) == list(b.uns["mrmr_mid"]["selected"])
    path = tmp_path / "auto.h5ad"
    a.write_h5ad(path)
    back = ad.read_h5ad(path).uns["mrmr_mid"]["n_genes_auto"]
    assert int(back["n_genes"]) == auto["n_genes"]
    pd.testing.assert_frame_equal(pd.DataFrame(back["curve"]), curve, check_dtype=False, check_like=True)  # h5ad sorts keys
    bioqpfs.pl.error_curve(pd.DataFrame(back["curve"]), show=False)   # plots straight from the stored curve


def test_auto_n_genes_caps_the_grid_and_respects_preselected(rng):
    a = make_adata(rng, n=60, m=12)
    bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes="auto", preselected=["g7", "g8", "g9", "g10",
                                                                                     "g11", "g5"])
    auto = a.uns["qpfs"]["n_genes_auto"]
    assert list(auto["grid"]) == [6, 10, 12]          # 5 -> 6 preselected genes; 15.. capped at 12 genes
    assert auto["n_genes"] in (6, 10, 12)
    assert list(a.uns["qpfs"]["selected"][:6]) == ["g7", "g8", "g9", "g10", "g11", "g5"]
    few = make_adata(rng, n=60, m=5)
    with pytest.raises(ValueError, match="single size 5: nothing to choose"):
        bioqpfs.tl.select_genes(few, "group", method="qpfs", n_genes="auto")
    assert "qpfs" not in few.uns
    # unseeded: the folds are shuffled, so the size could not be reproduced; the message names n_genes='auto'
    with pytest.raises(ValueError, match="n_genes='auto' chooses the panel size by k-fold cross-validation, whose "
                                         "shuffled folds need a seed: pass random_state="):
        bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes="auto", random_state=None, key_added="none")
    assert "none" not in a.uns


@pytest.mark.parametrize("bad, match", [("Auto", r"positive integer or 'auto' \(lower case\)"),
                                        (0, "positive integer or 'auto', got 0"),
                                        (-1, "positive integer or 'auto', got -1"),
                                        (2.5, "positive integer or 'auto', got 2.5"),
                                        ("all", "positive integer or 'auto', got 'all'")])
def test_auto_n_genes_bad_values(rng, bad, match):
    a = make_adata(rng)
    with pytest.raises(ValueError, match=match):
        bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=bad)
    assert "qpfs" not in a.uns and "qpfs_rank" not in a.var


@pytest.mark.parametrize("method", ["random", "ikm_qpfs"])
def test_a_seed_object_is_recorded_alike_by_every_method(method):
    """A Generator or RandomState seed is recorded as its str ('Generator(PCG64)') for every method; the random
    baseline wrote 'generator' for both kinds."""
    rng = np.random.default_rng(0)
    adata = ad.AnnData(rng.poisson(2.0, (60, 12)).astype(np.float32))
    adata.obs["cls"] = pd.Categorical(np.repeat(["a", "b", "c"], 20))
    for seed, want in ((np.random.default_rng(1), "Generator(PCG64)"),
                       (np.random.RandomState(1), "RandomState(MT19937)")):
        bioqpfs.tl.select_genes(adata, "cls", method=method, n_genes=3, random_state=seed)
        assert adata.uns[method]["params"]["random_state"] == want


def test_selections_compare_by_identity_and_are_hashable():
    """The dataclass's generated == compared the ndarray fields and raised ("truth value of an array is
    ambiguous"), so `sel in [other]` failed too, and a Selection was unhashable."""
    import pickle

    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 20)
    X = rng.normal(size=(40, 6)) + 2.0 * y[:, None] * (np.arange(6) < 2)
    sel = bioqpfs.select(X, y, method="maxrel", n_genes=2)
    twin = pickle.loads(pickle.dumps(sel))
    assert sel == sel and sel != twin and sel in [twin, sel] and len({sel, twin}) == 2
    np.testing.assert_array_equal(twin.ranking, sel.ranking)


def test_int_named_batch_key_column_is_accepted_as_groupby_is(rng):
    """groupby=0 read an int-named .obs column while batch_key=0 was refused as "not the name of one .obs column"."""
    a = make_adata(rng)
    a.obs["batch"] = np.array(["b1", "b2"])[np.arange(a.n_obs) % 2]
    a.obs[0] = a.obs["group"]
    a.obs[1] = a.obs["batch"]
    bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=4, batch_key="batch", key_added="named")
    bioqpfs.tl.select_genes(a, 0, method="qpfs", n_genes=4, batch_key=1, key_added="numbered")
    assert list(a.uns["numbered"]["selected"]) == list(a.uns["named"]["selected"])
    np.testing.assert_array_equal(a.var["numbered_weight"], a.var["named_weight"])
    with pytest.raises(KeyError, match="batch_key=2 is not a column of adata.obs"):
        bioqpfs.tl.select_genes(a, 0, method="qpfs", n_genes=4, batch_key=2)
    with pytest.raises(TypeError, match="batch_key must be the name of one .obs column"):
        bioqpfs.tl.select_genes(a, 0, method="qpfs", n_genes=4, batch_key=["batch"])


def test_non_finite_values_are_named_by_the_matrix_read(rng, tmp_path):
    """A NaN in a layer or in .raw was reported as "X contains NaN or infinite values" by tl.select_genes (and evaluate on an
    AnnData), although adata.X was not read; the message names the matrix read."""
    a = make_adata(rng)
    a.layers["counts"] = a.X.copy()
    a.layers["counts"][3, 2] = np.nan
    with pytest.raises(ValueError, match=r"^adata\.layers\['counts'\] contains NaN or infinite values in 1 gene\(s\): g2"):
        bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes=3, layer="counts")
    with pytest.raises(ValueError, match=r"^adata\.layers\['counts'\] contains NaN or infinite values"):
        bioqpfs.tl.select_genes(a, "group", method="qpfs", n_genes="auto", layer="counts")
    with pytest.raises(ValueError, match=r"^adata\.layers\['counts'\] contains NaN or infinite values"):
        bioqpfs.evaluate.error_curve(a, "group", "qpfs", n_genes=[2, 3], layer="counts")
    r = a.copy()
    r.raw = ad.AnnData(a.layers["counts"], obs=a.obs[[]], var=a.var[[]])
    with pytest.raises(ValueError, match=r"^adata\.raw\.X contains NaN or infinite values in 1 gene\(s\): g2"):
        bioqpfs.tl.select_genes(r, "group", method="qpfs", n_genes=3)
    a.X[0, 5] = np.inf
    with pytest.raises(ValueError, match=r"^adata\.X contains NaN or infinite values in 1 gene\(s\): g5"):
        bioqpfs.tl.select_genes(a, "group", n_genes=3, mask_var=np.arange(a.n_vars) != 2)
    b = make_adata(np.random.default_rng(7))
    b.X[1, 4] = np.nan
    b.write_h5ad(tmp_path / "nan.h5ad")
    backed = ad.read_h5ad(tmp_path / "nan.h5ad", backed="r")   # read lazily in chunks (a Dask X)
    with pytest.raises(ValueError, match=r"^adata\.X contains NaN or infinite values in 1 gene\(s\): g4"):
        bioqpfs.tl.select_genes(backed, "group", method="qpfs", n_genes=3)


def test_a_users_column_named_like_a_methods_extra_column_is_refused_before_the_selection(rng, monkeypatch):
    """A user's .var column bioqpfs_class (the default recipe writes <key>_class) was refused only after the
    selection had run, which may take long; it is now refused before it, from the registry's declaration."""
    from bioqpfs.tl import _select_genes

    a = make_adata(rng)
    a.var["bioqpfs_class"] = "mine"
    a.var["mrmr_mid_greedy_score"] = 1.0

    def must_not_run(*args, **kwargs):
        raise AssertionError("the selection ran before the column was refused")

    monkeypatch.setattr(_select_genes, "select", must_not_run)
    with pytest.raises(ValueError, match="adata.var has column.s. bioqpfs_class that were not written by bioqpfs"):
        bioqpfs.tl.select_genes(a, "group", n_genes=3)
    with pytest.raises(ValueError, match="mrmr_mid_greedy_score that were not written by bioqpfs"):
        bioqpfs.tl.select_genes(a, "group", method="mrmr_mid", n_genes=3)
    assert list(a.var["bioqpfs_class"].unique()) == ["mine"]


@pytest.mark.parametrize("method", sorted(bioqpfs.methods()))
def test_registered_extra_columns_are_those_each_method_returns(method):
    """tl refuses a colliding column before the run from the registry's declaration, so it must match the run."""
    from bioqpfs._registry import extra_columns

    a = make_adata(np.random.default_rng(3))
    sel = bioqpfs.select(a.X, a.obs["group"].to_numpy(), method=method, n_genes=3)
    assert sorted(sel.extra_columns) == sorted(extra_columns(method))


def test_a_panel_selected_on_raw_counts_is_announced_with_where_the_log_values_are(monkeypatch):
    """Counts in .X (or in .raw, which use_raw=None reads, with the log-normalised values in .X) were selected on
    without a word, although the methods are meant for normalised, log-transformed expression; a scanpy warning
    now names the matrix read and where non-integer values are.  Log-normalised input gets none."""
    import scanpy as sc

    said = []
    monkeypatch.setattr(sc.logging, "warning", lambda msg, *a, **k: said.append(msg))
    rng = np.random.default_rng(0)
    counts = rng.poisson(rng.uniform(0.2, 5, size=(1, 40)) * np.repeat([[1.0], [3.0]], 30, axis=0)).astype(np.float32)
    a = ad.AnnData(sp.csr_matrix(counts), obs=pd.DataFrame({"g": np.repeat(["a", "b"], 30)},
                                                            index=[f"c{i}" for i in range(60)]))
    a.var_names = [f"g{i}" for i in range(40)]
    bioqpfs.tl.select_genes(a, "g", method="mrmr_mid", n_genes=3)
    assert len(said) == 1 and said[0].startswith("adata.X holds non-negative integers only (raw counts?)")
    assert "sc.pp.normalize_total, sc.pp.log1p" in said[0]
    b = a.copy()
    b.raw = b.copy()                       # counts kept in .raw, log-normalised values in .X
    b.X = sp.csr_matrix(np.log1p(counts))
    said.clear()
    bioqpfs.tl.select_genes(b, "g", method="mrmr_mid", n_genes=3)
    assert len(said) == 1 and said[0].startswith("adata.raw.X holds non-negative integers")
    assert "are in adata.X (use_raw=False)" in said[0]
    said.clear()
    bioqpfs.tl.select_genes(b, "g", method="mrmr_mid", n_genes=3, use_raw=False)
    assert said == []


def test_the_warnings_a_notebook_gets_point_at_its_own_line():
    """tl.select_genes on a view (adata[mask]) warned from contextlib.py, and its constant-gene and
    duplicated-name warnings from bioqpfs's own files (fixed stacklevels, wrong under the faces' wrappers): a
    notebook showed a library line, and warnings.filterwarnings(module=...) could not target the user's code.
    They point at the caller's line now, as estimators' and pl.panel's do."""
    import warnings

    a = bioqpfs.datasets.srbct()[:, :60].copy()
    a.X[:, 3] = 1.0                                      # a constant gene
    a.var_names = [*a.var_names[:-1], a.var_names[0]]    # a repeated name (outside the panel)
    view = a[a.obs["class"] != "BL"]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        bioqpfs.tl.select_genes(view, "class", method="qpfs", n_genes=3)
        bioqpfs.tl.select_genes(a, "class", n_genes=3)   # the default recipe
    said = {key: [w.filename for w in record if key in str(w.message)]
            for key in ("adata is a view", "constant gene", "duplicated name(s)")}
    assert all(said.values()), said
    assert all(f == __file__ for files in said.values() for f in files), said


def test_selection_df_adds_a_gene_symbols_column():
    """var_names as Ensembl IDs: get.selection_df listed only the IDs, and took no gene_symbols= as scanpy's
    sc.get.rank_genes_groups_df does; the symbols come after "gene", under the column's name, in rank order."""
    a = bioqpfs.datasets.srbct()[:, :80].copy()
    a.var["gene_symbols"] = a.var_names.to_numpy()
    a.var_names = [f"ENSG{i:011d}" for i in range(a.n_vars)]
    bioqpfs.tl.select_genes(a, "class", method="mrmr_mid", n_genes=4)
    df = bioqpfs.get.selection_df(a, gene_symbols="gene_symbols")
    assert list(df.columns[:5]) == ["gene", "gene_symbols", "rank", "weight", "selected"]
    assert list(df["gene_symbols"]) == list(a.var.loc[df["gene"], "gene_symbols"])
    assert df["rank"].tolist() == sorted(df["rank"].tolist())
    with pytest.raises(KeyError, match="gene_symbols='symbol' is not a column of adata.var"):
        bioqpfs.get.selection_df(a, gene_symbols="symbol")
