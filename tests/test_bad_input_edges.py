"""Edges of an adversarial run (issue 21): the caller's objects never change, no meaningless panel without a
word, scale-free methods stay scale-free, colliding labels and duplicated gene names are named, messages speak
the user's terms, signals during the write leave nothing behind."""
import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from reference import best_first_cut

import bioqpfs
from bioqpfs import get, measures, tl

METHODS = sorted(bioqpfs.methods())


def _informative(n=24, m=8, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    X = rng.normal(size=(n, m))
    X[:, 1] += 2.5 * y
    X[:, 4] -= 2.0 * y
    X[rng.random((n, m)) < 0.4] = 0.0  # sparse-looking
    return X, y


# ---------------------------------------------------------------------------------------------------
# item 5: never change the caller's objects
# ---------------------------------------------------------------------------------------------------
def _non_canonical(D, fmt, seed=1):
    """``D`` as a scipy matrix of format ``fmt`` with unsorted indices and duplicate entries (halves of values)."""
    rng = np.random.default_rng(seed)
    C = sp.coo_matrix(D)
    dup = rng.choice(C.nnz, size=max(1, C.nnz // 4), replace=False)
    data = C.data.copy()
    data[dup] /= 2
    rows = np.concatenate([C.row, C.row[dup]])
    cols = np.concatenate([C.col, C.col[dup]])
    vals = np.concatenate([data, data[dup]])
    perm = rng.permutation(rows.size)
    rows, cols, vals = rows[perm], cols[perm], vals[perm]
    if fmt == "coo":
        return sp.coo_matrix((vals, (rows, cols)), shape=D.shape)
    major, minor = (rows, cols) if fmt == "csr" else (cols, rows)
    order = np.argsort(major, kind="stable")  # grouped by row (column), unsorted within
    indptr = np.concatenate([[0], np.cumsum(np.bincount(major, minlength=D.shape[0 if fmt == "csr" else 1]))])
    cls = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
    M = cls((vals[order], minor[order], indptr), shape=D.shape)
    assert not M.has_canonical_format and M.nnz > sp.coo_matrix(D).nnz
    return M


def _snapshot(M):
    if M.format == "coo":
        return M.format, M.nnz, M.data.copy(), M.row.copy(), M.col.copy()
    return M.format, M.nnz, M.data.copy(), M.indices.copy(), M.indptr.copy()


def _assert_unchanged(M, snap):
    now = _snapshot(M)
    assert now[:2] == snap[:2], f"{snap[0]}: nnz changed from {snap[1]} to {now[1]}"
    for a, b in zip(now[2:], snap[2:]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("method", METHODS)
def test_non_canonical_sparse_input_is_unchanged_and_read_as_its_values(method):
    D, y = _informative()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = bioqpfs.select(D, y, method=method, n_genes=3, random_state=0)
        for fmt in ("csr", "csc", "coo"):
            M = _non_canonical(D, fmt)
            snap = _snapshot(M)
            sel = bioqpfs.select(M, y, method=method, n_genes=3, random_state=0)
            _assert_unchanged(M, snap)
            # duplicates are summed, as scipy defines the matrix: the same panel as the dense values
            np.testing.assert_array_equal(sel.selected, ref.selected)


def test_non_canonical_sparse_is_unchanged_by_measures_tl_estimators_and_evaluate():
    from bioqpfs import evaluate
    from bioqpfs.estimators import BioQPFSSelector

    D, y = _informative()
    for fmt in ("csr", "csc", "coo"):
        M = _non_canonical(D, fmt)
        snap = _snapshot(M)
        measures.discretize(M)
        measures.relevance(M, y)
        measures.relevance(M, y, kind="hall")
        measures.mutual_information(measures.discretize(M))
        measures.correlation(M)
        _assert_unchanged(M, snap)
        if fmt != "coo":  # sklearn's validate_data accepts csr/csc without conversion
            BioQPFSSelector(method="qpfs", n_features_to_select=3).fit(M, y)
            _assert_unchanged(M, snap)
        evaluate.compare(M, y, ["maxrel"], n_genes=[2], cv=3)
        _assert_unchanged(M, snap)
    M = _non_canonical(D, "csr")
    snap = _snapshot(M)
    a = ad.AnnData(M, obs=pd.DataFrame({"cls": pd.Categorical(np.array(["a", "b"])[y])},
                                       index=[f"c{i}" for i in range(len(y))]))
    tl.select_genes(a, "cls", method="qpfs", n_genes=3)
    tl.select_genes(a, "cls", method="mrmr_mid", n_genes=3, copy=True)
    _assert_unchanged(a.X, snap)


def _adata():
    D, y = _informative()
    return ad.AnnData(D, obs=pd.DataFrame({"cls": pd.Categorical(np.array(["a", "b"])[y])},
                                          index=[f"c{i}" for i in range(len(y))]),
                      var=pd.DataFrame(index=[f"g{j}" for j in range(D.shape[1])]))


def test_rerun_keeps_user_columns_that_start_with_the_key():
    a = _adata()
    a.var["qpfs_validated"] = [True, False] * 4
    a.var["qpfs_note"] = "mine"
    tl.select_genes(a, "cls", method="qpfs", n_genes=3)
    assert list(a.uns["qpfs"]["var_columns"]) == ["qpfs_weight", "qpfs_rank", "qpfs_selected"]
    tl.select_genes(a, "cls", method="ikm_qpfs", n_genes=3, key_added="qpfs")   # writes extra columns
    assert "qpfs_cluster" in a.var.columns
    tl.select_genes(a, "cls", method="maxrel", n_genes=2, key_added="qpfs")     # drops ikm's, not the user's
    assert sorted(c for c in a.var.columns if c.startswith("qpfs_")) == [
        "qpfs_note", "qpfs_rank", "qpfs_selected", "qpfs_validated", "qpfs_weight"]
    assert a.var["qpfs_validated"].tolist() == [True, False] * 4 and a.var["qpfs_note"].eq("mine").all()
    assert list(get.selection_df(a, "qpfs").columns) == ["gene", "rank", "weight", "selected"]


def test_rerun_over_a_record_of_an_earlier_version(tmp_path):
    """Records written before ``var_columns`` existed: their standard and extra columns are dropped, others kept."""
    a = _adata()
    tl.select_genes(a, "cls", method="ikm_qpfs", n_genes=3, key_added="k")
    del a.uns["k"]["var_columns"]
    a.var["k_validated"] = 1.0
    a.write_h5ad(tmp_path / "old.h5ad")
    b = ad.read_h5ad(tmp_path / "old.h5ad")
    assert {"gene", "rank", "cluster"} <= set(get.selection_df(b, "k").columns)
    tl.select_genes(b, "cls", method="maxrel", n_genes=3, key_added="k")
    assert sorted(c for c in b.var.columns if c.startswith("k_")) == ["k_rank", "k_selected", "k_validated",
                                                                      "k_weight"]
    c = ad.read_h5ad(tmp_path / "old.h5ad")  # var_columns survive write_h5ad
    tl.select_genes(c, "cls", method="maxrel", n_genes=3, key_added="k")
    c.write_h5ad(tmp_path / "new.h5ad")
    assert list(ad.read_h5ad(tmp_path / "new.h5ad").uns["k"]["var_columns"]) == ["k_weight", "k_rank", "k_selected"]


def test_extra_column_of_the_user_is_never_overwritten():
    a = _adata()
    a.var["k_greedy_score"] = "mine"
    with pytest.raises(ValueError, match="k_greedy_score that were not written by bioqpfs"):
        tl.select_genes(a, "cls", method="mrmr_mid", n_genes=3, key_added="k")
    assert a.var["k_greedy_score"].eq("mine").all() and "k" not in a.uns and "k_weight" not in a.var


# ---------------------------------------------------------------------------------------------------
# item 1: no meaningless panel without a word -- one check in the selector contract, every method
# ---------------------------------------------------------------------------------------------------
NO_INFO = "no gene carries information"
LABEL_FREE = {"random"}                      # never uses the labels: no relevance to check
CONTINUOUS = {"ldfs", "hsfs"}                # criteria on the continuous values, not on discretised codes


def _identical_classes(dtype=np.float64, container=np.asarray, n_half=10, m=8):
    """Both classes hold exactly the same samples: no gene (discretised or not) says anything about them."""
    H = np.random.default_rng(0).normal(size=(n_half, m)).astype(dtype)
    return container(np.vstack([H, H])), np.repeat(["a", "b"], n_half)


@pytest.mark.parametrize("method", sorted(set(METHODS) - LABEL_FREE))
def test_zero_information_is_refused_by_every_method(method):
    for dtype, container in ((np.float64, np.asarray), (np.float32, np.asarray), (np.float64, sp.csr_matrix)):
        X, y = _identical_classes(dtype, container)
        with pytest.raises(ValueError, match=NO_INFO):
            bioqpfs.select(X, y, method=method, n_genes=2)
    # one sample per class (the case: mean +- sd bins put both samples of a gene in one bin, but a gene
    # cut at the mean, or 3 classes of one sample, gives I(X; C) = H(X)): refused as such, by every method
    for n in (2, 3):
        X2 = np.random.default_rng(0).normal(size=(n, 10))
        with pytest.raises(ValueError, match="every class of y has a single sample"):
            bioqpfs.select(X2, list(range(n)), method=method, n_genes=2)
    if method not in CONTINUOUS:
        X, y = _identical_classes()
        with pytest.raises(ValueError, match=NO_INFO):
            bioqpfs.select(X, y, method=method, n_genes=2, discretization="quantile")


def test_zero_information_direct_calls_and_user_relevance():
    from bioqpfs.selectors import baselines

    X, y = _identical_classes()
    for f in (baselines.maxrel, baselines.mrmr_mid, baselines.mrmr_miq, baselines.jmi, baselines.cife):
        with pytest.raises(ValueError, match=NO_INFO):
            f(X, y, n_genes=2)
    Xi, yi = _informative()
    with pytest.raises(ValueError, match=NO_INFO):
        bioqpfs.qpfs(Xi, yi, n_genes=2, relevance=np.zeros(Xi.shape[1]), alpha=0.5)
    assert bioqpfs.select(X, y, method="random", n_genes=2).selected.size == 2   # documented: label-free


def test_zero_information_is_refused_on_every_face(tmp_path):
    import subprocess
    import sys

    from bioqpfs.estimators import BioQPFSSelector

    X, y = _identical_classes()
    a = ad.AnnData(X, obs=pd.DataFrame({"cls": pd.Categorical(y)}, index=[f"c{i}" for i in range(len(y))]))
    with pytest.raises(ValueError, match=NO_INFO):
        tl.select_genes(a, "cls", method="mrmr_mid", n_genes=2)
    assert "mrmr_mid" not in a.uns
    with pytest.raises(ValueError, match=NO_INFO):
        BioQPFSSelector(method="maxrel", n_features_to_select=2).fit(X, y)
    a.write_h5ad(tmp_path / "same.h5ad")
    r = subprocess.run([sys.executable, "-m", "bioqpfs.cli", "select", "same.h5ad", "--groupby", "cls", "--method",
                        "jmi", "--n-genes", "2", "-o", "o.h5ad", "--quiet"], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 1 and NO_INFO in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o.h5ad").exists()


@pytest.mark.parametrize("method", sorted(set(METHODS) - LABEL_FREE))
def test_one_weakly_informative_gene_is_enough(method):
    """The check refuses only when *every* relevance is 0: one informative gene among identical-class noise passes."""
    X, y = _identical_classes(n_half=12)
    X[:, 3] += np.where(y == "b", 2.0, 0.0) * (np.arange(len(y)) % 3 > 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sel = bioqpfs.select(X, y, method=method, n_genes=2, random_state=0)
    assert 3 in sel.ranking[:3]


# ---------------------------------------------------------------------------------------------------
# item 2: scale -- every method's panel is the same for X * 10**k, and for genes scaled each by its own 10**k
# ---------------------------------------------------------------------------------------------------
SCALE_VARIANTS = [(m, {}) for m in METHODS] + [
    ("qpfs", {"similarity": "correlation"}), ("qpfs", {"relevance": "mst"}), ("qpfs", {"discretization": "quantile"}),
    ("mrmr_mid", {"discretization": "mdl"})]


@pytest.mark.parametrize("method,params", SCALE_VARIANTS, ids=[f"{m}-{'-'.join(p.values())}" for m, p in SCALE_VARIANTS])
def test_panel_does_not_depend_on_the_scale_of_the_genes(method, params):
    rng = np.random.default_rng(0)
    n, m = 30, 12
    y = np.arange(n) % 3
    X = rng.normal(size=(n, m))
    X[:, 2] += y
    X[:, 5] -= 0.8 * y
    X[:, 7] += 0.5 * (y == 1)
    per_gene = 10.0 ** rng.integers(-300, 301, size=m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("error", RuntimeWarning)   # no overflow/underflow on the way
        ref = bioqpfs.select(X, y, method=method, n_genes=5, random_state=0, **params).selected
        for k in (-300, -150, 150, 300):
            sel = bioqpfs.select(X * 10.0 ** k, y, method=method, n_genes=5, random_state=0, **params)
            np.testing.assert_array_equal(sel.selected, ref, err_msg=f"X * 1e{k}")
        sel = bioqpfs.select(X * per_gene, y, method=method, n_genes=5, random_state=0, **params)
        np.testing.assert_array_equal(sel.selected, ref, err_msg="each gene scaled by its own 10**k")


# ---------------------------------------------------------------------------------------------------
# item 3: one class written in two ways is refused, naming the values, on every face
# ---------------------------------------------------------------------------------------------------
COLLIDING = [([1, "1", 2, "2"], "1 and '1'"), (["1", "1.0", "2", "2"], "'1' and '1.0'"),
             (["B", "B ", "T", "T"], "'B' and 'B '"), ([1.0, "1", 0, 0], "1.0 and '1'"),
             ([True, "True", False, False], "True and 'True'")]  # a boolean column partly read from text


@pytest.mark.parametrize("labels,shown", COLLIDING)
def test_colliding_labels_are_refused_naming_the_values(labels, shown):
    X, _ = _informative()
    y = np.array(labels * (X.shape[0] // 4), dtype=object)
    for method in ("qpfs", "mrmr_mid", "random"):
        with pytest.raises(ValueError, match="the same class is written in different ways") as e:
            bioqpfs.select(X, y, method=method, n_genes=2)
        assert shown in str(e.value)
    with pytest.raises(ValueError, match="the same class is written in different ways"):
        bioqpfs.select(X, pd.Series(y), method="maxrel", n_genes=2)
    with pytest.raises(ValueError, match="the same class is written in different ways"):
        measures.relevance(X, list(y))


def test_labels_mixing_booleans_and_numbers_are_refused():
    """``[True, 1, 0]`` (three groups) became two classes silently: True == 1 in Python, so pandas grouped them."""
    X, _ = _informative()
    y = np.array([True, 1, 0, 0] * (X.shape[0] // 4), dtype=object)
    for labels in (y, pd.Series(y), list(y)):
        with pytest.raises(ValueError, match=r"mixes True/False with numbers \(e.g. True and 1\); True equals 1"):
            bioqpfs.select(X, labels, method="maxrel", n_genes=2)


def test_labels_that_merely_look_alike_are_accepted():
    X, _ = _informative()
    n = X.shape[0]
    for labels in ([1, 1.0, 2, 2.0], ["B cell", "T cell", "B cell", "T cell"], ["1", "2", "1", "2"],
                   [True, False, True, False]):
        sel = bioqpfs.select(X, np.array(labels * (n // 4), dtype=object), method="maxrel", n_genes=2)
        assert sel.diagnostics["n_classes"] == 2


def test_colliding_labels_on_tl_sklearn_and_cli(tmp_path):
    import subprocess
    import sys

    from bioqpfs.estimators import BioQPFSSelector

    X, _ = _informative()
    y = np.array([1, "1", 2, "2"] * (X.shape[0] // 4), dtype=object)
    a = ad.AnnData(X, obs=pd.DataFrame({"cls": y}, index=[f"c{i}" for i in range(len(y))]))
    with pytest.raises(ValueError, match=r"adata.obs\['cls'\]: the same class is written in different ways"):
        tl.select_genes(a, "cls", method="qpfs", n_genes=2)
    with pytest.raises(ValueError, match="the same class is written in different ways"):
        BioQPFSSelector(method="qpfs", n_features_to_select=2).fit(X, y)
    # a CSV round trip: 1 and 1.0 next to a text label stay the strings "1" and "1.0"
    samples = [f"s{i}" for i in range(X.shape[0])]
    pd.DataFrame(X, index=samples, columns=[f"g{j}" for j in range(X.shape[1])]).to_csv(tmp_path / "x.csv")
    lab = np.array(["1", "1.0", "x", "x"] * (X.shape[0] // 4))
    pd.DataFrame({"cls": lab}, index=samples).to_csv(tmp_path / "lab.csv")
    r = subprocess.run([sys.executable, "-m", "bioqpfs.cli", "select", "x.csv", "--orientation", "samples-by-genes",
                        "--labels", "lab.csv", "--groupby", "cls", "--n-genes", "2", "-o", "o.h5ad", "--quiet"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 1 and "'1' and '1.0'" in r.stderr and "Traceback" not in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------------
# item 4: duplicated gene names -- a warning at the start, an error only for an ambiguous panel
# ---------------------------------------------------------------------------------------------------
def _dup_adata(dup_informative):
    """Genes 1 and 4 are the two complementary informative ones (4 classes: gene 1 splits {a,b}|{c,d},
    gene 4 splits {a,c}|{b,d})."""
    rng = np.random.default_rng(5)
    y = np.arange(40) % 4
    X = rng.normal(size=(40, 8))
    X[:, 1] += 4.0 * (y >= 2)
    X[:, 4] += 4.0 * (y % 2)
    a = ad.AnnData(X, obs=pd.DataFrame({"cls": pd.Categorical(np.array(list("abcd"))[y])},
                                       index=[f"c{i}" for i in range(40)]))
    names = [f"g{j}" for j in range(a.n_vars)]
    if dup_informative:
        names[4] = "g1"      # genes 1 and 4 are the informative ones: the panel holds two genes named g1
    else:
        names[7] = "g6"      # two noise genes share a name, the panel is unambiguous
    a.var_names = names
    return a


@pytest.mark.parametrize("method", ["qpfs", "mrmr_mid", "maxrel", "ldfs"])
def test_duplicated_var_names_warn_and_refuse_only_an_ambiguous_panel(method):
    a = _dup_adata(dup_informative=False)
    with pytest.warns(UserWarning, match=r"var_names are not unique .*g6.*var_names_make_unique"):
        tl.select_genes(a, "cls", method=method, n_genes=2)
    panel = list(a.uns[method]["selected"])
    assert sorted(panel) == ["g1", "g4"]
    assert get.selection_df(a, method)["gene"].head(2).tolist() == panel
    b = _dup_adata(dup_informative=True)
    with pytest.warns(UserWarning, match="var_names are not unique"):
        with pytest.raises(ValueError, match=r"not unique in adata.var_names \(g1\).*var_names_make_unique"):
            tl.select_genes(b, "cls", method=method, n_genes=2)
    assert method not in b.uns and f"{method}_rank" not in b.var.columns
    b.var_names_make_unique()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        tl.select_genes(b, "cls", method=method, n_genes=2)
    assert len(set(b.uns[method]["selected"])) == 2


def test_duplicated_var_names_on_the_cli(tmp_path):
    import subprocess
    import sys

    for dup_informative, rc in ((False, 0), (True, 1)):
        _dup_adata(dup_informative).write_h5ad(tmp_path / "d.h5ad")
        r = subprocess.run([sys.executable, "-m", "bioqpfs.cli", "select", "d.h5ad", "--groupby", "cls",
                            "--n-genes", "2", "-o", "o.h5ad", "--quiet", "--force"], capture_output=True, text=True,
                           timeout=300, cwd=tmp_path)
        assert r.returncode == rc and "var_names are not unique" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert (tmp_path / "o.h5ad").exists() == (rc == 0)
        (tmp_path / "o.h5ad").unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------
# item 6: messages in the user's terms
# ---------------------------------------------------------------------------------------------------
def test_relevance_vector_over_all_genes_is_accepted_when_constant_genes_are_dropped():
    X, y = _informative(n=30, m=10)
    X[:, 6] = 4.2
    F = measures.relevance(X, y)
    assert F.shape == (10,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        sel = bioqpfs.qpfs(X, y, relevance=F, n_genes=3)
        ref = bioqpfs.qpfs(np.delete(X, 6, axis=1), y, relevance=np.delete(F, 6), n_genes=3)
        assert sel.ranking[-1] == 6                               # the constant gene ranks last, weight 0
        np.testing.assert_array_equal(sel.selected, np.where(ref.selected >= 6, ref.selected + 1, ref.selected))
        with pytest.raises(ValueError, match=r"shape \(4,\); expected \(10,\), one value per gene of X"):
            bioqpfs.qpfs(X, y, relevance=F[:4])
        with pytest.raises(TypeError, match="relevance must be one of"):
            bioqpfs.qpfs(X, y, relevance=["a"] * 10)


def _numeric_params():
    import inspect

    from bioqpfs._registry import method_function

    out = []
    for method in METHODS:
        for name, p in inspect.signature(method_function(method)).parameters.items():
            if name in ("X", "y", "feature_names", "random_state", "n_genes", "preselected") or \
                    isinstance(p.default, str):
                continue
            out.append((method, name))
    return out


@pytest.mark.parametrize("method,name", _numeric_params())
def test_every_numeric_parameter_is_named_in_its_error(method, name):
    X, y = _informative()
    for bad in ("abc", [1, 2], float("nan"), {"a": 1}):
        with pytest.raises((TypeError, ValueError)) as e:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                bioqpfs.select(X, y, method=method, n_genes=2, **{name: bad})
        assert name in str(e.value), f"{method}({name}={bad!r}): {e.value}"
        assert "could not convert" not in str(e.value) and "not supported between" not in str(e.value)


def test_numeric_parameter_errors_on_direct_calls_and_tl():
    from bioqpfs.selectors import baselines, transform

    X, y = _informative()
    with pytest.raises(TypeError, match="qpfs: alpha must be a number or None, got 'abc'"):
        bioqpfs.qpfs(X, y, alpha="abc")
    with pytest.raises(TypeError, match="n_bins must be a whole number, got 2.5"):
        baselines.mrmr_mid(X, y, n_bins=2.5, discretization="quantile")
    with pytest.raises(TypeError, match="ldfs: gamma must be a number"):
        transform.ldfs(X, y, gamma="1")
    with pytest.raises(TypeError, match="alpha must be a number or None"):
        tl.select_genes(_adata(), "cls", method="qpfs", n_genes=2, alpha="abc")
    assert bioqpfs.qpfs(X, y, alpha=np.float32(0.5), n_bins=np.int64(3), n_genes=2).params["alpha"] == 0.5


@pytest.mark.parametrize("value", [4.2, 1e-3, -7.1, 1e6 + 0.1, 3.3e200])
def test_a_gene_equal_in_every_sample_is_constant_despite_rounding(value):
    X, y = _informative(n=63, m=6)
    for dtype in (np.float64, np.float32) if abs(value) < 1e38 else (np.float64,):
        Xd = X.astype(dtype)
        Xd[:, 3] = dtype(value)
        for container in (np.asarray, sp.csr_matrix):
            with pytest.warns(UserWarning, match=r"1 constant gene\(s\) .*ranked last .*: 3"):
                sel = bioqpfs.select(container(Xd), y, method="qpfs", n_genes=2)
            assert sel.ranking[-1] == 3 and sel.weights[3] == 0
    # a gene that varies, however little relative to its mean, is not constant
    X[:, 3] = 1.0 + 1e-9 * np.arange(X.shape[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        bioqpfs.select(X, y, method="maxrel", n_genes=2)


# ---------------------------------------------------------------------------------------------------
# item 7: python -m bioqpfs
# ---------------------------------------------------------------------------------------------------
def test_python_dash_m_bioqpfs_is_the_cli(tmp_path):
    import subprocess
    import sys

    a = subprocess.run([sys.executable, "-m", "bioqpfs", "datasets"], capture_output=True, text=True, timeout=300)
    b = subprocess.run([sys.executable, "-m", "bioqpfs.cli", "datasets"], capture_output=True, text=True, timeout=300)
    assert a.returncode == 0 and a.stdout == b.stdout and "srbct" in a.stdout
    r = subprocess.run([sys.executable, "-m", "bioqpfs", "select"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "usage: bioqpfs select" in r.stderr


# ---------------------------------------------------------------------------------------------------
# item 8: Ctrl-C / SIGTERM mid-run and mid-write: 130 / 143, no output, no temporary file
# ---------------------------------------------------------------------------------------------------
_SLOW_WRITE = """
import sys, time, anndata
_write = anndata.AnnData.write_h5ad
class _Finaliser:                       # h5py closes files in finalisers, where Python drops a KeyboardInterrupt
    def __del__(self):
        print("WRITING", flush=True)
        time.sleep(3)
def slow(self, path, *a, **k):          # the real write, then a pause in a finaliser while the temporary file exists
    _write(self, path, *a, **k)
    f = _Finaliser()
    del f
anndata.AnnData.write_h5ad = slow
from bioqpfs.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _run_until(tmp_path, args, marker, sig, script=None, delay=0.0, stream="stdout"):
    import signal as _signal
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", "bioqpfs", *args]
    p = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        for line in getattr(p, stream):         # wait until the run (or the write) is under way
            seen.append(line)
            if marker in line:
                break
        time.sleep(delay)
        p.send_signal(getattr(_signal, sig))
        out, err = p.communicate(timeout=120)
        err = "".join(seen) + err if stream == "stderr" else err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, err


@pytest.mark.parametrize("sig,rc", [("SIGINT", 130), ("SIGTERM", 143)])
def test_signal_during_the_write_leaves_no_output_and_no_temporary_file(tmp_path, sig, rc):
    _adata().write_h5ad(tmp_path / "in.h5ad")
    code, err = _run_until(tmp_path, ["select", "in.h5ad", "--groupby", "cls", "--method", "maxrel", "--n-genes", "2",
                                      "-o", "out.h5ad", "--quiet"], "WRITING", sig, script=_SLOW_WRITE)
    assert code == rc, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5ad"]   # no out.h5ad, no .out.h5ad.bioqpfs-tmp-*.h5ad
    assert "Traceback" not in err


@pytest.mark.parametrize("sig,rc", [("SIGINT", 130), ("SIGTERM", 143)])
def test_signal_mid_run_exits_with_its_code(tmp_path, sig, rc):
    rng = np.random.default_rng(0)
    a = ad.AnnData(rng.normal(size=(300, 600)), obs=pd.DataFrame({"cls": pd.Categorical(np.arange(300) % 3)},
                                                                 index=[f"c{i}" for i in range(300)]))
    a.write_h5ad(tmp_path / "in.h5ad")
    code, err = _run_until(tmp_path, ["select", "in.h5ad", "--groupby", "cls", "--method", "hsfs", "--n-genes",
                                      "5", "-o", "out.h5ad"], "selecting 5 genes", sig, delay=1.0, stream="stderr")
    assert code == rc, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5ad"]


def test_atomic_path_in_library_use_keeps_keyboardinterrupt(tmp_path):
    import os
    import signal as _signal

    from bioqpfs._io import atomic_path

    class Finaliser:   # what h5py does: a Ctrl-C that lands in a finaliser is printed and dropped by Python
        def __del__(self):
            os.kill(os.getpid(), _signal.SIGINT)
            sum(range(1000))

    with pytest.raises(KeyboardInterrupt):
        with atomic_path(tmp_path / "x.txt") as tmp:
            open(tmp, "w").write("partial")
            f = Finaliser()
            del f                                     # the signal arrives here; held until the block ends
            open(tmp, "a").write(" and the rest")     # still runs: the write is never cut in the middle
    assert list(tmp_path.iterdir()) == []
    assert _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
    with atomic_path(tmp_path / "y.txt") as tmp:
        open(tmp, "w").write("ok")
    assert (tmp_path / "y.txt").read_text() == "ok"


def test_cli_file_errors_name_the_file_and_the_cause(tmp_path):
    import subprocess
    import sys

    X, y = _informative(n=12, m=5)
    a = ad.AnnData(X, obs=pd.DataFrame({"cls": np.array(["a", "b"])[y]}, index=[f"s{i}" for i in range(12)]))
    a.write_h5ad(tmp_path / "good.h5ad")
    raw = (tmp_path / "good.h5ad").read_bytes()
    (tmp_path / "trunc.h5ad").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "empty.h5ad").write_bytes(b"")
    (tmp_path / "text.h5ad").write_text("gene,s1\n")
    df = pd.DataFrame(X, index=[f"s{i}" for i in range(12)], columns=[f"g{j}" for j in range(5)])
    df["cls"] = np.array(["a", "b"])[y]
    df.to_csv(tmp_path / "good.csv")
    lines = (tmp_path / "good.csv").read_text().splitlines()
    (tmp_path / "ragged.csv").write_text("\n".join(lines[:3] + [lines[3] + ",9.9,1.1"] + lines[4:]) + "\n")
    (tmp_path / "latin1.csv").write_bytes("\n".join([lines[0], lines[1].replace("s0", "s\xe90")] + lines[2:])
                                          .encode("latin-1"))
    df.to_csv(tmp_path / "tabs.csv", sep="\t")
    df.to_csv(tmp_path / "commas.tsv")
    cases = {"trunc.h5ad": "trunc.h5ad is truncated", "empty.h5ad": "empty.h5ad is empty",
             "/dev/null": "/dev/null is not a regular file", "text.h5ad": "text.h5ad is not an HDF5/.h5ad file",
             "ragged.csv": "ragged.csv is not a rectangular table: line 4 has 9 fields",
             "latin1.csv": "latin1.csv is not UTF-8 text (byte 0xe9",
             "tabs.csv": "tabs.csv is tab-separated, but its name says comma-separated; rename it to .tsv",
             "commas.tsv": "commas.tsv is comma-separated, but its name says tab-separated; rename it to .csv"}
    for name, expected in cases.items():
        r = subprocess.run([sys.executable, "-m", "bioqpfs", "select", name, "--groupby", "cls", "--orientation",
                            "samples-by-genes", "--n-genes", "2", "-o", "o.h5ad", "--quiet"], capture_output=True,
                           text=True, timeout=300, cwd=tmp_path)
        assert r.returncode == 1 and expected in r.stderr, (name, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
    # the same reader serves --labels
    df.drop(columns="cls").to_csv(tmp_path / "expr.csv")
    r = subprocess.run([sys.executable, "-m", "bioqpfs", "select", "expr.csv", "--groupby", "cls", "--orientation",
                        "samples-by-genes", "--labels", "latin1.csv", "--n-genes", "2", "-o", "o.h5ad", "--quiet"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 1 and "latin1.csv is not UTF-8 text" in r.stderr


def test_memory_guard_suggests_what_fits_the_face(tmp_path, monkeypatch):
    import subprocess
    import sys

    from bioqpfs import _validation

    monkeypatch.setattr(_validation, "_available_memory_bytes", lambda: 2**20)   # 1 MiB free
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 800))
    y = np.arange(20) % 2
    codes = measures.discretize(X)
    with pytest.raises(MemoryError) as e:
        measures.mutual_information(codes)
    assert "rows=" in str(e.value) and "dtype=np.float32" in str(e.value)
    with pytest.raises(MemoryError) as e:
        measures.mutual_information(codes, dtype=np.float32)      # already float32: not suggested
    assert "rows=" in str(e.value) and "float32" not in str(e.value)
    with pytest.raises(MemoryError) as e:
        bioqpfs.select(X, y, method="qpfs")                        # a selector chooses rows and dtype itself
    assert "rows=" not in str(e.value) and "dtype" not in str(e.value) and "nystrom_rate" in str(e.value)
    script = ("import sys; from bioqpfs import _validation; _validation._available_memory_bytes = lambda: 2**20; "
              "from bioqpfs.cli import main; sys.exit(main(sys.argv[1:]))")
    a = ad.AnnData(X, obs=pd.DataFrame({"cls": np.array(["a", "b"])[y]}, index=[f"c{i}" for i in range(20)]))
    a.write_h5ad(tmp_path / "in.h5ad")
    r = subprocess.run([sys.executable, "-c", script, "select", "in.h5ad", "--groupby", "cls", "-o", "o.h5ad",
                        "--quiet"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 1 and "GiB" in r.stderr, r.stderr
    assert "--mask-var" in r.stderr and "--nystrom-rate" in r.stderr
    assert not any(w in r.stderr for w in ("rows=", "dtype", "mask_var=", "nystrom_rate="))


# ---------------------------------------------------------------------------------------------------
# item 9: MDL on repeated samples -- the number of levels (and so the counting cost) is bounded
# ---------------------------------------------------------------------------------------------------
def _resampled(seed=0, n_types=6, per=80, m=12):
    """Cell types of different sizes resampled with replacement to equal counts: many repeated samples."""
    rng = np.random.default_rng(seed)
    groups = [rng.normal(loc=0.4 * t, size=(int(rng.integers(4, 30)), m)) for t in range(n_types)]
    X = np.vstack([g[rng.integers(0, len(g), per)] for g in groups])
    return X, np.repeat(np.arange(n_types), per)


def test_mdl_levels_are_bounded_and_the_first_cut_is_kept():
    from bioqpfs._kernels.discretize import MDL_MAX_LEVELS

    X, y = _resampled()
    with pytest.warns(UserWarning, match=r"discretization='mdl' cut \d+ gene\(s\) into more than 8 levels"):
        codes = measures.discretize(X, "mdl", y=y)
    levels = codes.max(axis=0) + 1
    assert levels.max() <= MDL_MAX_LEVELS and (levels == MDL_MAX_LEVELS).any()
    for g in range(X.shape[1]):   # the kept cuts include the top-level (best) cut of every gene
        cut = best_first_cut(X[:, g], y)
        assert len(np.unique(codes[X[:, g] < cut, g])) + len(np.unique(codes[X[:, g] > cut, g])) == levels[g]
        assert codes[X[:, g] < cut, g].max() < codes[X[:, g] > cut, g].min()


def test_mdl_without_repeats_is_unchanged_and_selectors_stay_bounded():
    from bioqpfs._kernels import information as info

    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 10))
    y = np.arange(60) % 3
    X[:, 2] += 2 * y
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)          # no bound needed: no warning, Fayyad-Irani as is
        codes = measures.discretize(X, "mdl", y=y)
    assert codes.max() + 1 < 8
    Xr, yr = _resampled(m=30)
    for method in ("qpfs", "mrmr_mid", "spec_cmi"):
        with pytest.warns(UserWarning, match="discretization='mdl'"):
            sel = bioqpfs.select(Xr, yr, method=method, n_genes=3, discretization="mdl")
        assert sel.selected.size == 3
    with pytest.warns(UserWarning):
        table = info.CodeTable(*measures.codes_and_levels(Xr, "mdl", y_codes=yr))
    assert table.n_bins <= 8    # the global one-hot width every MI count is proportional to (squared)
