"""Bad input at the faces (CLI, tl, get, evaluate, pl, estimators): clear errors, no silent wrong answers,
no overwritten inputs, no dropped foreign .var/.uns content."""
import subprocess
import sys

import anndata as ad
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import bioqpfs  # noqa: E402
from bioqpfs import evaluate, get, measures, pl, tl  # noqa: E402
from bioqpfs.estimators import QPFSSelector  # noqa: E402


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "bioqpfs.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def last_line(r):
    return r.stderr.strip().splitlines()[-1]


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _data(n=30, m=6, seed=3):
    rng = np.random.default_rng(seed)
    y = np.array(["a", "b"])[np.arange(n) % 2]
    X = rng.normal(size=(n, m))
    X[:, 2] += 3 * (y == "b")
    return pd.DataFrame(X, index=[f"s{i}" for i in range(n)], columns=[f"g{j}" for j in range(m)]), y


@pytest.fixture
def files(tmp_path):
    df, y = _data()
    sbg = df.copy()
    sbg["tissue"] = y
    sbg.to_csv(tmp_path / "sbg.csv")
    df.T.to_csv(tmp_path / "gbs.csv")
    pd.DataFrame({"tissue": y, "batch": "x"}, index=df.index).to_csv(tmp_path / "labels.csv")
    a = ad.AnnData(df.to_numpy(), obs=pd.DataFrame({"tissue": pd.Categorical(y)}, index=df.index),
                   var=pd.DataFrame(index=df.columns))
    a.write_h5ad(tmp_path / "in.h5ad")
    return tmp_path, y


def _adata(n=40, m=10, seed=0):
    df, y = _data(n, m, seed)
    return ad.AnnData(df.to_numpy(), obs=pd.DataFrame({"cls": pd.Categorical(y)}, index=df.index),
                      var=pd.DataFrame(index=df.columns))


# ---------------------------------------------------------------------------------------------------
# item 1: no output is written over an input, or over another output
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["tsv_over_csv", "tsv_over_h5ad", "output_over_labels", "plot_over_labels"])
def test_cli_outputs_never_overwrite_inputs(files, case):
    d, _ = files
    args = {
        "tsv_over_csv": ("sbg.csv", "--orientation", "samples-by-genes", "-o", "o.h5ad", "--tsv", "sbg.csv"),
        "tsv_over_h5ad": ("in.h5ad", "-o", "o.h5ad", "--tsv", "in.h5ad"),
        "output_over_labels": ("gbs.csv", "--orientation", "genes-by-samples", "--labels", "labels.csv",
                               "-o", "labels.csv"),
        "plot_over_labels": ("gbs.csv", "--orientation", "genes-by-samples", "--labels", "labels.tsv.png",
                             "-o", "o.h5ad", "--plot", "labels.tsv.png"),
    }[case]
    if case == "plot_over_labels":   # a labels file whose name happens to end in .png
        (d / "labels.tsv.png").write_bytes((d / "labels.csv").read_bytes().replace(b",", b"\t"))
    victim = d / args[-1]
    before = victim.read_bytes()
    r = run("select", *args, "--groupby", "tissue", "--n-genes", "3", "--quiet", cwd=d)
    assert r.returncode == 1, r.stderr
    assert "--force" in last_line(r) and ("is the input file" in r.stderr or "is the --labels file" in r.stderr)
    assert victim.read_bytes() == before
    assert not (d / "o.h5ad").exists()


def test_cli_evaluate_output_over_input_and_colliding_outputs(files):
    d, _ = files
    before = (d / "sbg.csv").read_bytes()
    r = run("evaluate", "sbg.csv", "--orientation", "samples-by-genes", "--groupby", "tissue", "--n-genes", "2",
            "--cv", "3", "-o", "sbg.csv", "--quiet", cwd=d)
    assert r.returncode == 1 and "is the input file" in r.stderr
    assert (d / "sbg.csv").read_bytes() == before
    r = run("select", "in.h5ad", "--groupby", "tissue", "--n-genes", "3", "-o", "x.h5ad", "--tsv", "./x.h5ad",
            "--quiet", "--force", cwd=d)
    assert r.returncode == 1 and "name the same file" in r.stderr
    assert not (d / "x.h5ad").exists()


def test_cli_force_still_allows_overwriting_the_input(files):
    d, _ = files
    r = run("select", "in.h5ad", "--groupby", "tissue", "--n-genes", "3", "--method", "maxrel", "-o", "in.h5ad",
            "--force", "--quiet", cwd=d)
    assert r.returncode == 0, r.stderr
    assert ad.read_h5ad(d / "in.h5ad").var["maxrel_selected"].sum() == 3


# ---------------------------------------------------------------------------------------------------
# item 18: outputs and options validated before computing
# ---------------------------------------------------------------------------------------------------
def test_cli_outputs_checked_before_computing(files):
    d, _ = files
    (d / "adir").mkdir()
    base = ("select", "in.h5ad", "--groupby", "tissue", "--n-genes", "3", "--quiet")
    r = run(*base, "-o", "adir", cwd=d)
    assert r.returncode == 1 and last_line(r) == "bioqpfs: error: -o 'adir' is a directory; give a file name"
    r = run(*base, "-o", "in.h5ad/x.h5ad", cwd=d)
    assert r.returncode == 1 and "is a file, not a directory" in r.stderr and "Errno" not in r.stderr
    r = run(*base, "-o", "o.h5ad", "--plot", "w.jpg", cwd=d)
    assert r.returncode == 1 and "--plot file 'w.jpg' must end in one of .png, .pdf, .svg" in r.stderr
    assert not (d / "o.h5ad").exists()      # nothing written before the error
    r = run(*base, "-o", "o.h5ad", "--tsv", "adir", cwd=d)
    assert r.returncode == 1 and "--tsv 'adir' is a directory" in r.stderr and "bioqpfs-tmp-" not in r.stderr
    assert not (d / "o.h5ad").exists()
    r = run("evaluate", "in.h5ad", "--groupby", "tissue", "--n-genes", "2", "--cv", "3", "-o", "adir", "--quiet",
            cwd=d)
    assert r.returncode == 1 and "-o 'adir' is a directory" in r.stderr


def test_cli_random_state_and_cv_are_usage_errors(files):
    d, _ = files
    r = run("select", "in.h5ad", "--groupby", "tissue", "--random-state", "-1", "-o", "o.h5ad", cwd=d)
    assert r.returncode == 2 and "argument --random-state" in r.stderr
    for bad in ("abc", "1", "0", "2.5"):
        r = run("evaluate", "in.h5ad", "--groupby", "tissue", "--cv", bad, "-o", "e.tsv", cwd=d)
        assert r.returncode == 2 and "argument --cv" in r.stderr, (bad, r.stderr)
        assert "invalid literal" not in r.stderr


def test_cli_cv_loo_any_case(files):
    d, _ = files
    r = run("evaluate", "in.h5ad", "--groupby", "tissue", "--n-genes", "2", "--cv", "LOO", "--methods", "maxrel",
            "-o", "e.tsv", "--quiet", cwd=d)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(d / "e.tsv", sep="\t")
    assert df["cv"].tolist() == ["loo"] and df["n_folds"].tolist() == [30]


# ---------------------------------------------------------------------------------------------------
# items 7, 14: labels file and table names
# ---------------------------------------------------------------------------------------------------
def test_cli_labels_file_without_the_groupby_column(files):
    d, y = files
    pd.read_csv(d / "labels.csv", index_col=0).rename(columns={"tissue": "kind"}).to_csv(d / "l2.csv")
    r = run("select", "gbs.csv", "--orientation", "genes-by-samples", "--labels", "l2.csv", "--groupby", "tissue",
            "-o", "o.h5ad", "--n-genes", "3", "--quiet", cwd=d)
    assert r.returncode == 1 and "has no column(s) 'tissue' (columns: kind, batch)" in r.stderr
    # a single label column may have any name (documented fallback)
    pd.read_csv(d / "labels.csv", index_col=0)[["tissue"]].rename(columns={"tissue": "kind"}).to_csv(d / "l1.csv")
    r = run("select", "gbs.csv", "--orientation", "genes-by-samples", "--labels", "l1.csv", "--groupby", "tissue",
            "-o", "o.h5ad", "--n-genes", "3", "--method", "maxrel", "--quiet", cwd=d)
    assert r.returncode == 0, r.stderr
    assert ad.read_h5ad(d / "o.h5ad").obs["tissue"].astype(str).tolist() == list(y)


def test_cli_duplicated_ids_and_genes_are_named(files):
    d, _ = files
    lab = pd.read_csv(d / "labels.csv", index_col=0)
    pd.concat([lab, lab.iloc[[4, 7]]]).to_csv(d / "ldup.csv")
    r = run("select", "gbs.csv", "--orientation", "genes-by-samples", "--labels", "ldup.csv", "--groupby", "tissue",
            "-o", "o.h5ad", "--n-genes", "3", "--quiet", cwd=d)
    assert r.returncode == 1 and "duplicated sample ids (row names): s4, s7" in r.stderr
    text = (d / "sbg.csv").read_text().splitlines()
    text[0] = text[0].replace("g3", "g0")
    (d / "dup.csv").write_text("\n".join(text) + "\n")
    r = run("select", "dup.csv", "--orientation", "samples-by-genes", "--groupby", "tissue", "-o", "o.h5ad",
            "--n-genes", "3", "--quiet", cwd=d)
    assert r.returncode == 1 and "duplicated genes (column names): g0" in r.stderr
    assert not (d / "o.h5ad").exists()


# ---------------------------------------------------------------------------------------------------
# item 8: keys of tl.select_genes
# ---------------------------------------------------------------------------------------------------
def test_tl_rerun_drops_the_old_methods_columns():
    a = _adata()
    tl.select_genes(a, "cls", method="ikm_qpfs", n_genes=3, key_added="k")
    assert "k_cluster" in a.var.columns
    a.var["other"] = 1.0
    tl.select_genes(a, "cls", method="maxrel", n_genes=3, key_added="k")
    assert sorted(c for c in a.var.columns if c.startswith("k_")) == ["k_rank", "k_selected", "k_weight"]
    assert list(get.selection_df(a, "k").columns) == ["gene", "rank", "weight", "selected"]
    assert "other" in a.var.columns


def test_tl_refuses_foreign_keys_and_keeps_their_content():
    a = _adata()
    a.uns["pca"] = {"params": {"zero_center": True}, "variance": np.ones(3)}
    with pytest.raises(ValueError, match=r"adata.uns\['pca'\] exists and was not written by bioqpfs"):
        tl.select_genes(a, "cls", method="maxrel", n_genes=3, key_added="pca")
    assert set(a.uns["pca"]) == {"params", "variance"} and "pca_weight" not in a.var.columns
    a.var["z_weight"] = "mine"   # a column bioqpfs would write, not written by it: refused
    with pytest.raises(ValueError, match="z_weight that were not written by bioqpfs"):
        tl.select_genes(a, "cls", method="maxrel", n_genes=3, key_added="z")
    assert a.var["z_weight"].eq("mine").all() and "z" not in a.uns
    for bad in ("a/b", "", " ", ".", "..", "a\\b"):
        with pytest.raises(ValueError, match="key_added must be a non-empty string without '/'"):
            tl.select_genes(a, "cls", method="maxrel", n_genes=3, key_added=bad)
    assert set(a.uns) == {"pca"}


def test_a_key_with_dots_round_trips_with_the_other_uns_entries(tmp_path):
    """key_added='.' was accepted and written as uns/., the uns group itself: read back, every other .uns entry
    was gone (and write_zarr failed).  '.' and '..' are refused (above); a key holding dots is an ordinary name."""
    import anndata as ad

    a = _adata()
    a.uns["mine"] = {"x": 1}
    tl.select_genes(a, "cls", method="maxrel", n_genes=3, key_added="run.v1")
    a.write_h5ad(tmp_path / "a.h5ad")
    b = ad.read_h5ad(tmp_path / "a.h5ad")
    assert set(b.uns) == {"mine", "run.v1"} and b.uns["mine"]["x"] == 1
    np.testing.assert_array_equal(b.var["run.v1_rank"], a.var["run.v1_rank"])


def test_get_selection_df_ignores_a_longer_key():
    a = _adata()
    tl.select_genes(a, "cls", method="maxrel", n_genes=3, key_added="k")
    tl.select_genes(a, "cls", method="ikm_qpfs", n_genes=3, key_added="k_b")
    assert list(get.selection_df(a, "k").columns) == ["gene", "rank", "weight", "selected"]
    tl.select_genes(a, "cls", method="maxrel", n_genes=2, key_added="k")    # re-run keeps k_b's columns
    assert "k_b_cluster" in a.var.columns and a.var["k_selected"].sum() == 2


# ---------------------------------------------------------------------------------------------------
# item 19: tl / pl / estimator argument errors
# ---------------------------------------------------------------------------------------------------
def test_tl_argument_errors(tmp_path):
    a = _adata()
    with pytest.raises(TypeError, match="adata must be an AnnData, got ndarray"):
        tl.select_genes(a.X, "cls", method="maxrel", n_genes=3)
    with pytest.raises(TypeError, match=r"groupby must be the name of one .obs column, or a list of column names "
                                         r"\(hierarchical labels, coarse to fine\), got \['cls', 3\]"):
        tl.select_genes(a, ["cls", 3], method="maxrel", n_genes=3)
    a.write_h5ad(tmp_path / "b.h5ad")
    b = ad.read_h5ad(tmp_path / "b.h5ad", backed="r")
    try:
        with pytest.raises(ValueError, match="backed AnnData; pass copy=False"):
            tl.select_genes(b, "cls", method="maxrel", n_genes=3, copy=True)
    finally:
        b.file.close()


def test_estimator_missing_labels_named():
    X = np.random.default_rng(0).normal(size=(8, 4))
    y = ["a", "b", None, "a", "b", "a", "b", "a"]
    with pytest.raises(ValueError, match=r"y has 1 missing value\(s\) \(at samples 2\)"):
        QPFSSelector(n_features_to_select=2).fit(X, y)


def test_missing_and_blank_labels_are_named_by_the_samples_names_when_they_have_them():
    """With a DataFrame X (or an AnnData) the samples have names: messages about missing or blank labels gave their
    positions, which the user has to look up; they name the samples, and keep positions for a default RangeIndex."""
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(8, 4)), index=[f"cell{i}" for i in range(8)], columns=list("abcd"))
    y = np.array(["a", "b", None, "a", "b", "a", "b", "a"], dtype=object)
    with pytest.raises(ValueError, match=r"y has 1 missing value\(s\) \(at samples cell2\)"):
        bioqpfs.select(X, y, method="maxrel", n_genes=2)
    y[2] = " "
    with pytest.raises(ValueError, match=r"1 empty or 'nan' label\(s\) \(' '; at samples cell2\)"):
        measures.relevance(X, y)
    with pytest.raises(ValueError, match=r"\(at samples 2\)"):
        bioqpfs.select(X.reset_index(drop=True), np.where(y == " ", None, y), method="maxrel", n_genes=2)


@pytest.fixture
def stored():
    a = _adata()
    tl.select_genes(a, "cls", method="maxrel", n_genes=3)
    return a


def test_pl_panel_leaves_obs_unchanged(stored):
    stored.obs["donor"] = np.array(["d1", "d2"] * 20, dtype=object)
    dtypes = stored.obs.dtypes.copy()
    donor = stored.obs["donor"].dtype      # object (pandas 2) or str (pandas 3): a string column, not categorical
    obs = stored.obs
    pl.panel(stored, "maxrel", "cls", show=False)
    assert stored.obs["donor"].dtype == donor and obs["donor"].dtype == donor
    assert not isinstance(donor, pd.CategoricalDtype)
    assert stored.obs.dtypes.equals(dtypes)


def test_pl_argument_errors(stored):
    with pytest.raises(ValueError, match="df has no rows"):
        pl.error_curve(pd.DataFrame(columns=["method", "n_genes", "mean_error", "sd_error"]), show=False)
    for kw, msg in [({"n_genes": -1}, "n_genes must be an integer >= 1, got -1"),
                    ({"n_ranks": 0}, "n_ranks must be an integer >= 1, got 0"),
                    ({"n_genes": "x"}, "n_genes must be an integer >= 1, got 'x'"),
                    ({"label_top": -2}, "label_top must be an integer >= 0")]:
        with pytest.raises(ValueError, match=msg):
            pl.weights(stored, "maxrel", show=False, **kw)
    dup = stored.copy()
    dup.var_names = ["g0", "g1", "g2", "g0"] + list(stored.var_names[4:])
    with pytest.raises(ValueError, match=r"panel gene 'g0' is repeated in adata.var_names.*var_names_make_unique"):
        pl.redundancy(dup, "maxrel", show=False)


# ---------------------------------------------------------------------------------------------------
# item 17: evaluate arguments
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_genes, err, msg", [
    ("12", TypeError, "n_genes must be a positive integer or a list"),
    ([2.7], ValueError, "not a positive integer: 2.7"),
    (True, TypeError, "n_genes must be a positive integer or a list"),
    ([2, 0], ValueError, "not a positive integer: 0"),
])
def test_evaluate_bad_n_genes(n_genes, err, msg):
    with pytest.raises(err, match=msg):
        evaluate.error_curve(_adata(), "cls", ["maxrel"], cv=3, n_genes=n_genes)


def test_evaluate_method_params_and_random_state():
    a = _adata()
    with pytest.raises(ValueError, match="method_params for 'qpfz' would be ignored"):
        evaluate.error_curve(a, "cls", ["qpfs"], cv=3, n_genes=[2], method_params={"qpfz": {"alpha": 0.5}})
    with pytest.raises(ValueError, match="random_state must be None, a non-negative integer"):
        evaluate.error_curve(a, "cls", ["maxrel"], cv=3, n_genes=[2], random_state="x")
    df = evaluate.error_curve(a, "cls", ["maxrel"], cv=3, n_genes=[2], random_state=np.random.default_rng(1))
    assert df["n_folds"].tolist() == [3]


def test_evaluate_aligns_a_labels_series_by_sample_name():
    """A shuffled labels Series must give the same curve as the .obs column it came from."""
    import anndata as ad
    import numpy as np
    import pandas as pd

    from bioqpfs import evaluate

    rng = np.random.default_rng(0)
    y = np.repeat(["a", "b"], 20)
    X = rng.normal(size=(40, 10))
    X[:, 0] += 3 * (y == "a")
    adata = ad.AnnData(X, obs=pd.DataFrame({"cls": pd.Categorical(y)}, index=[f"c{i}" for i in range(40)]))
    shuffled = pd.Series(y, index=adata.obs_names).sample(frac=1, random_state=0)
    a = evaluate.error_curve(adata, shuffled, ["maxrel"], cv=5, n_genes=[1, 2])
    b = evaluate.error_curve(adata, "cls", ["maxrel"], cv=5, n_genes=[1, 2])
    np.testing.assert_array_equal(a["mean_error"].to_numpy(), b["mean_error"].to_numpy())
    assert a["mean_error"].max() < 0.25  # gene 0 separates the classes; a misaligned y gives ~0.5


def test_plot_save_is_validated_and_atomic(tmp_path):
    import anndata as ad
    import matplotlib
    import numpy as np
    import pandas as pd

    import bioqpfs

    matplotlib.use("Agg")
    rng = np.random.default_rng(0)
    y = np.repeat(["a", "b"], 15)
    X = rng.normal(size=(30, 8))
    X[:, 0] += 2 * (y == "a")
    adata = ad.AnnData(X, obs=pd.DataFrame({"cls": pd.Categorical(y)}, index=[f"c{i}" for i in range(30)]))
    bioqpfs.tl.select_genes(adata, "cls", method="qpfs", n_genes=3)
    with pytest.raises(ValueError, match="yscale='bogus'"):
        bioqpfs.pl.weights(adata, show=False, yscale="bogus")
    with pytest.raises(ValueError, match="image format"):
        bioqpfs.pl.weights(adata, show=False, save=tmp_path / "w.xyz")
    (tmp_path / "d.png").mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        bioqpfs.pl.weights(adata, show=False, save=tmp_path / "d.png")
    out = tmp_path / "new_dir" / "w.png"  # a missing folder is created, as the CLI does
    bioqpfs.pl.weights(adata, show=False, save=out)
    assert out.read_bytes()[:4] == b"\x89PNG" and not list(out.parent.glob(".*.bioqpfs-tmp-*"))


# ---------------------------------------------------------------------------------------------------
# stop 44: defects found by a bad-input hunt over the faces
# ---------------------------------------------------------------------------------------------------
def _masked(n=60, m=20):
    rng = np.random.default_rng(0)
    y = np.array(list("abc") * (n // 3))
    X = rng.normal(size=(n, m)).astype(np.float32)
    for j in range(m):
        X[y == "abc"[j % 3], j] += 1.0 + 0.1 * j
    a = ad.AnnData(X, obs=pd.DataFrame({"cls": y}, index=[f"c{i}" for i in range(n)]),
                   var=pd.DataFrame(index=[f"g{j}" for j in range(m)]))
    a.var["hv"] = np.arange(m) >= m // 2
    return a


def test_tl_preselected_positions_count_in_var_and_genes_outside_mask_var_are_refused():
    """An integer preselected gene is a position in adata.var, as mask_var is (it used to be counted among the
    masked genes: [3] forced g13); a gene that mask_var leaves out is refused by name, not "not found"."""
    a = _masked()
    tl.select_genes(a, "cls", method="qpfs", n_genes=3, preselected=[13], mask_var="hv")
    assert a.uns["qpfs"]["selected"][0] == "g13"
    assert list(a.uns["qpfs"]["params"]["preselected"]) == ["g13"]
    for given in ([3], ["g3"], ["g13", "g3"]):
        with pytest.raises(ValueError, match=r"g3 are left out by mask_var"):
            tl.select_genes(a, "cls", method="qpfs", n_genes=3, preselected=given, mask_var="hv")
    with pytest.raises(ValueError, match=r"preselected \(positions in adata.var\): gene position\(s\) 20 out of range 0\.\.19"):
        tl.select_genes(a, "cls", method="qpfs", n_genes=3, preselected=[20], mask_var="hv")
    tl.select_genes(a, "cls", method="qpfs", n_genes=3, preselected=[3])  # no mask: positions as before
    assert a.uns["qpfs"]["selected"][0] == "g3"


def test_tl_mask_var_series_is_aligned_by_gene_names():
    a = _masked()
    wanted = ["g10", "g11", "g12", "g13", "g14"]
    reversed_series = pd.Series(a.var_names.isin(wanted), index=a.var_names)[::-1]
    tl.select_genes(a, "cls", method="maxrel", n_genes=3, mask_var=reversed_series)
    assert a.var_names[a.var["maxrel_rank"].notna()].tolist() == wanted
    tl.select_genes(a, "cls", method="maxrel", n_genes=3, mask_var=pd.Series(a.var_names.isin(wanted)))  # positions
    assert a.var_names[a.var["maxrel_rank"].notna()].tolist() == wanted
    foreign = pd.Series(True, index=[f"x{j}" for j in range(a.n_vars)])
    with pytest.raises(ValueError, match=r"index is not adata.var_names \(e.g. gene 'g0' has no entry\)"):
        tl.select_genes(a, "cls", method="maxrel", n_genes=3, mask_var=foreign)


def test_evaluate_fixed_panels_refuse_repeated_and_ambiguous_genes():
    a = _masked()
    with pytest.raises(ValueError, match="panel: gene.s. g0 listed more than once"):
        evaluate.error_curve(a, "cls", {"panel": ["g0", "g0", "g0"]}, n_genes=[1, 3], cv=3)
    with pytest.raises(ValueError, match="more than once"):
        evaluate.error_curve(a, "cls", {"panel": [4, 4]}, n_genes=[1, 2], cv=3)
    a.var_names = ["g0", "g0"] + [f"g{j}" for j in range(2, a.n_vars)]
    table = evaluate.error_curve(a, "cls", {"panel": ["g5", "g6"]}, n_genes=[1, 2], cv=3)  # unique names: fine
    b = a.copy()
    b.var_names = [f"u{j}" for j in range(b.n_vars)]
    want = evaluate.error_curve(b, "cls", {"panel": ["u5", "u6"]}, n_genes=[1, 2], cv=3)
    np.testing.assert_array_equal(table["mean_error"], want["mean_error"])
    with pytest.raises(ValueError, match="g0 occur more than once among the gene names"):
        evaluate.error_curve(a, "cls", {"panel": ["g0", "g6"]}, n_genes=[1, 2], cv=3)


def test_evaluate_fixed_panels_read_dataframe_columns_as_gene_names():
    df, y = _data()
    by_name = evaluate.error_curve(df, y, {"p": ["g2", "g0"]}, n_genes=[1, 2], cv=3)
    by_position = evaluate.error_curve(df.to_numpy(), y, {"p": [2, 0]}, n_genes=[1, 2], cv=3)
    np.testing.assert_array_equal(by_name["mean_error"], by_position["mean_error"])


def test_anndata_without_x_names_its_layers_on_every_face(tmp_path):
    rng = np.random.default_rng(0)
    a = ad.AnnData(obs=pd.DataFrame({"cls": list("ab") * 20}, index=[f"c{i}" for i in range(40)]),
                   var=pd.DataFrame(index=[f"g{j}" for j in range(10)]),
                   layers={"counts": rng.poisson(2, (40, 10)).astype(np.float32)})
    message = r"adata.X is None .*pass layer= to select on one of its layers \('counts'\)"
    with pytest.raises(ValueError, match=message):
        tl.select_genes(a, "cls", n_genes=3)
    with pytest.raises(ValueError, match=message):
        evaluate.error_curve(a, "cls", ["maxrel"], n_genes=[2], cv=3)
    tl.select_genes(a, "cls", method="maxrel", n_genes=3, layer="counts")
    assert a.var["maxrel_selected"].sum() == 3
    a.write_h5ad(tmp_path / "nox.h5ad")
    for lazy in ([], ["--lazy"]):
        r = run("select", "nox.h5ad", "--groupby", "cls", "--n-genes", "3", "-o", "o.h5ad", "--quiet", *lazy,
                cwd=tmp_path)
        assert r.returncode == 1 and "adata.X is None" in last_line(r) and "'counts'" in last_line(r), r.stderr


def test_tl_refuses_a_view_of_a_backed_anndata_before_any_work(tmp_path):
    a = _masked()
    a.write_h5ad(tmp_path / "x.h5ad")
    b = ad.read_h5ad(tmp_path / "x.h5ad", backed="r")
    with pytest.raises(ValueError, match=r"view of a backed AnnData.*adata\[mask\].to_memory\(\)"):
        tl.select_genes(b[:30], "cls", method="maxrel", n_genes=3)
    b.file.close()


def test_nullable_dataframe_x_is_read_as_float64_and_its_missing_values_named():
    import bioqpfs

    df, y = _data()
    nullable = df.convert_dtypes()
    assert all(isinstance(d, pd.Float64Dtype) for d in nullable.dtypes)
    np.testing.assert_array_equal(bioqpfs.select(nullable, y, method="maxrel", n_genes=2).ranking,
                                  bioqpfs.select(df, y, method="maxrel", n_genes=2).ranking)
    nullable.iloc[3, 4] = pd.NA
    with pytest.raises(ValueError, match=r"NaN or infinite values in 1 gene\(s\): g4"):
        bioqpfs.select(nullable, y, method="maxrel", n_genes=2)
    with pytest.raises(ValueError, match=r"gene\(s\): g4"):
        evaluate.error_curve(nullable, y, ["maxrel"], n_genes=[2], cv=3)


def test_evaluate_scoring_that_cannot_score_fails_before_any_selection(monkeypatch):
    from sklearn.metrics import accuracy_score, make_scorer

    a = _masked()
    calls = []
    original = evaluate.select
    monkeypatch.setattr(evaluate, "select", lambda *args, **kw: calls.append(1) or original(*args, **kw))
    with pytest.raises(TypeError, match=r"metric\(y_true, y_pred\).*make_scorer\(accuracy_score\)"):
        evaluate.error_curve(a, "cls", ["maxrel"], n_genes=[2], cv=3, scoring=accuracy_score)
    with pytest.raises(ValueError, match="no class probabilities; use classifier='logreg'"):
        evaluate.error_curve(a, "cls", ["maxrel"], n_genes=[2], cv=3, scoring="roc_auc_ovr")
    for scoring in ("roc_auc", "f1", "precision"):
        with pytest.raises(ValueError, match="3 classes; use a multiclass score"):
            evaluate.error_curve(a, "cls", ["maxrel"], n_genes=[2], cv=3, scoring=scoring)
    with pytest.raises(ValueError, match="regression score"):
        evaluate.error_curve(a, "cls", ["maxrel"], n_genes=[2], cv=3, scoring="r2")
    assert calls == []
    ok = evaluate.error_curve(a, "cls", ["maxrel"], n_genes=[2], cv=3, scoring="roc_auc_ovr", classifier="logreg")
    wrapped = evaluate.error_curve(a, "cls", ["maxrel"], n_genes=[2], cv=3, scoring=make_scorer(accuracy_score))
    assert calls and 0.5 < ok["mean_roc_auc_ovr"].iloc[0] <= 1
    np.testing.assert_allclose(wrapped["mean_accuracy"], 1 - wrapped["mean_error"])


def test_cli_select_output_must_be_h5ad(files):
    d, _ = files
    r = run("select", "in.h5ad", "--groupby", "tissue", "--n-genes", "3", "-o", "panel.csv", "--quiet", cwd=d)
    assert r.returncode == 1 and "-o file 'panel.csv' must end in .h5ad" in last_line(r), r.stderr
    assert not (d / "panel.csv").exists()


def _gene_list_data(m):
    """60 samples of 3 classes x ``m`` genes g0.. as (X, y, names, AnnData with .obs["ct"])."""
    X = np.random.default_rng(0).normal(size=(60, m))
    y = np.repeat(["a", "b", "c"], 20)
    names = [f"g{i}" for i in range(m)]
    adata = ad.AnnData(X, obs=pd.DataFrame({"ct": y}, index=[f"c{i}" for i in range(60)]),
                       var=pd.DataFrame(index=names))
    return X, y, names, adata


def test_a_gene_list_of_bytes_or_without_order_is_refused_on_every_face():
    """``preselected=b"g3"`` was iterated into its byte values (103, 51) and forced those gene positions silently;
    a set of names was ranked in an order that changed from run to run.  A single int now works on ``tl`` as in
    ``select``."""
    import bioqpfs

    X, y, names, adata = _gene_list_data(120)
    for bad in (b"g3", np.bytes_(b"g3")):
        with pytest.raises(TypeError, match=r"preselected: got bytes .*decode them \('g3'\)"):
            bioqpfs.select(X, y, method="qpfs", n_genes=5, preselected=bad, feature_names=names)
        with pytest.raises(TypeError, match=r"preselected: got bytes"):
            bioqpfs.tl.select_genes(adata.copy(), "ct", method="qpfs", n_genes=5, preselected=bad)
        with pytest.raises(TypeError, match=r"mine: got bytes"):
            bioqpfs.evaluate.error_curve(adata, "ct", {"mine": bad}, n_genes=[1], cv=3)
    with pytest.raises(TypeError, match="a set has no order"):
        bioqpfs.select(X, y, method="qpfs", n_genes=5, preselected={"g3", "g7"}, feature_names=names)
    out = bioqpfs.tl.select_genes(adata, "ct", method="qpfs", n_genes=5, preselected=3, copy=True)
    assert out.var["qpfs_rank"].idxmin() == "g3"


def test_gene_lists_of_numbers_flags_huge_positions_or_mixed_kinds_get_a_message_that_says_what_to_pass():
    """Floats were read as names ("not found: 3.0"), a boolean mask as names ("not found: False, False, ..."), a
    position >= 2**63 ended in numpy's OverflowError, and a list mixing names and positions said only "not found:
    7".  Every face (select, tl with and without mask_var, error_curve's panels) gets the one message."""
    import bioqpfs

    X, y, names, adata = _gene_list_data(20)
    cases = [([3.0, 7.0], r"got the number\(s\) 3.0, 7.0; gene positions are integers"),
             (np.arange(20) == 3, r"got True/False values .*np.flatnonzero\(mask\)"),
             ([2**70], r"gene position\(s\) 1180591620717411303424 out of range 0..19"),
             (np.array([2**64 - 1], dtype=np.uint64), r"gene position\(s\) 18446744073709551615 out of range"),
             (["g3", 7], r"gene\(s\) not found among the genes: 7; .*mixes names and integer positions \(7\)")]
    for genes, message in cases:
        for feature_names in (names, None):
            if isinstance(genes, list) and "g3" in genes and feature_names is None:
                continue
            with pytest.raises(ValueError, match=r"preselected: " + message):
                bioqpfs.select(X, y, method="qpfs", n_genes=5, preselected=genes, feature_names=feature_names)
        with pytest.raises(ValueError, match=message):
            bioqpfs.tl.select_genes(adata.copy(), "ct", method="qpfs", n_genes=5, preselected=genes)
        with pytest.raises(ValueError, match=message):
            bioqpfs.tl.select_genes(adata.copy(), "ct", method="qpfs", n_genes=5, preselected=genes,
                                    mask_var=np.arange(20) % 2 == 1)
        with pytest.raises(ValueError, match=r"mine: " + message):
            evaluate.error_curve(adata, "ct", {"mine": genes}, n_genes=[1], cv=3)


def test_one_panel_not_wrapped_in_a_list_is_named_as_genes():
    """``error_curve(adata, "cls", ["g3", "g7"])`` reads the list as selections, so "g3" as a method name: the message
    now says that "g3" is a gene and how to pass one panel."""
    adata = _adata()
    with pytest.raises(ValueError, match=r"unknown method 'g3'.*'g3' is a gene: a fixed panel is one item of the "
                                         r"selections.*\[\['g3', \.\.\.\]\]"):
        evaluate.error_curve(adata, "cls", ["g3", "g7"], n_genes=[1], cv=3)


def test_error_curve_reads_generators_of_selections_and_genes_once():
    """On an AnnData error_curve reads the selections twice (to plan the read of a lazy X, then to run them): a
    generator was empty the second time ("no selection or method to evaluate", "the gene list is empty")."""
    adata = _adata()
    want = evaluate.error_curve(adata, "cls", [["g3", "g7"]], n_genes=[2], cv=3)
    for selections in ((s for s in [["g3", "g7"]]), [(g for g in ["g3", "g7"])], {"panel0": iter(["g3", "g7"])}):
        got = evaluate.error_curve(adata, "cls", selections, n_genes=[2], cv=3)
        pd.testing.assert_frame_equal(got, want)
    got = evaluate.error_curve(adata, "cls", (m for m in ["maxrel"]), n_genes=[2], cv=3)
    assert list(got["method"]) == ["maxrel"]
