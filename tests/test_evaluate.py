"""Evaluation: error curves against hand-computed cross-validation references."""
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.svm import SVC

import bioqpfs
from bioqpfs import evaluate


@pytest.fixture(scope="module")
def srbct_small():
    """SRBCT restricted to 150 genes (the first 150 columns) to keep the folds fast."""
    adata = bioqpfs.datasets.srbct()[:, :150].copy()
    return adata


def test_fixed_gene_list_matches_cross_val_score(srbct_small):
    adata = srbct_small
    X, y = adata.X, adata.obs["class"].to_numpy()
    genes = [3, 17, 40, 41, 99, 120, 7]
    df = evaluate.error_curve(X, y, {"fixed": genes}, n_genes=[2, 5, 7], cv=5, random_state=3)
    for k in (2, 5, 7):
        acc = cross_val_score(SVC(kernel="linear", C=1.0), X[:, genes[:k]], y,
                              cv=StratifiedKFold(5, shuffle=True, random_state=3))
        row = df[(df.method == "fixed") & (df.n_genes == k)].iloc[0]
        assert row.mean_error == pytest.approx(1 - acc.mean(), abs=1e-12)
        assert row.sd_error == pytest.approx(np.std(1 - acc, ddof=1), abs=1e-12)
        assert row.n_folds == 5 and not row.refit
    # repeats: repeat r uses seed random_state + r
    df2 = evaluate.error_curve(X, y, {"fixed": genes}, n_genes=5, cv=5, repeats=3, random_state=3)
    errs = np.concatenate([1 - cross_val_score(SVC(kernel="linear", C=1.0), X[:, genes[:5]], y,
                                               cv=StratifiedKFold(5, shuffle=True, random_state=3 + r))
                           for r in range(3)])
    assert df2.mean_error.iloc[0] == pytest.approx(errs.mean(), abs=1e-12)
    assert df2.n_folds.iloc[0] == 15 and df2.repeats.iloc[0] == 3


def test_leave_one_out_and_other_classifier(srbct_small):
    X, y = srbct_small.X, srbct_small.obs["class"].to_numpy()
    genes = [10, 20, 30]
    df = evaluate.error_curve(X, y, [genes], n_genes=3, cv="loo", classifier=KNeighborsClassifier(3))
    wrong = 0
    for i in range(y.size):            # plain leave-one-out loop
        keep = np.arange(y.size) != i
        clf = KNeighborsClassifier(3).fit(X[keep][:, genes], y[keep])
        wrong += clf.predict(X[i:i + 1, genes])[0] != y[i]
    assert df.mean_error.iloc[0] == pytest.approx(wrong / y.size, abs=1e-12)
    assert df.n_folds.iloc[0] == y.size and df.cv.iloc[0] == "loo"


def test_refit_inside_folds_matches_plain_loop(srbct_small):
    X, y = srbct_small.X, srbct_small.obs["class"].to_numpy()
    df, folds = evaluate.error_curve(X, y, "qpfs", n_genes=[3, 8], cv=4, random_state=1, return_folds=True)
    assert df.refit.all()
    ref = {3: [], 8: []}
    for train, test in StratifiedKFold(4, shuffle=True, random_state=1).split(X, y):
        sel = bioqpfs.select(X[train], y[train], method="qpfs", n_genes=8)
        for k in (3, 8):
            g = sel.ranking[:k]
            clf = SVC(kernel="linear", C=1.0).fit(X[train][:, g], y[train])
            ref[k].append(np.mean(clf.predict(X[test][:, g]) != y[test]))
    for k in (3, 8):
        np.testing.assert_allclose(folds[folds.n_genes == k].error.to_numpy(), ref[k], atol=1e-12)
        assert df[df.n_genes == k].mean_error.iloc[0] == pytest.approx(np.mean(ref[k]), abs=1e-12)


def test_a_selection_with_gene_names_is_read_by_name(srbct_small):
    """A Selection made on the genes in another order was evaluated by position: its top genes GENE1, GENE74 ...
    were scored as the data's GENE100, GENE27 ... (error 0.556 against 0.206).  By name now, as a gene list;
    names the data lack are refused."""
    adata = srbct_small
    rev = adata[:, ::-1].copy()
    sel = bioqpfs.select(rev.X, rev.obs["class"].to_numpy(), method="maxrel", n_genes=5,
                         feature_names=rev.var_names)
    names = list(np.asarray(sel.feature_names)[sel.ranking[:5]])
    a = evaluate.error_curve(adata, "class", {"sel": sel}, n_genes=[3, 5], cv=4)
    b = evaluate.error_curve(adata, "class", {"sel": names}, n_genes=[3, 5], cv=4)
    timing = [c for c in a if c.startswith("seconds")]
    pd.testing.assert_frame_equal(a.drop(columns=timing), b.drop(columns=timing))
    other = bioqpfs.select(rev.X, rev.obs["class"].to_numpy(), method="maxrel", n_genes=5,
                           feature_names=[f"x{i}" for i in range(rev.n_vars)])
    with pytest.raises(ValueError, match="x"):
        evaluate.error_curve(adata, "class", {"sel": other}, n_genes=3, cv=4)


def test_selection_bias_is_avoided_by_refitting():
    """Pure noise: selecting on all samples reports an optimistic error, refitting reports ~chance."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(40, 150))
    y = np.repeat(["a", "b"], 20)
    spec = ("qpfs", {"similarity": "correlation", "alpha": 0.9})     # relevance-heavy: the bias shows clearly
    df = evaluate.error_curve(X, y, {"refit": spec}, n_genes=10, cv=5, random_state=0)
    biased = evaluate.error_curve(X, y, {"once": spec}, n_genes=10, cv=5, random_state=0, refit_selection=False)
    assert not biased.refit.iloc[0] and df.refit.iloc[0]
    assert df.mean_error.iloc[0] > 0.35                  # near chance (0.5)
    assert biased.mean_error.iloc[0] < df.mean_error.iloc[0] - 0.2
    # numpy's False is False (it refit every fold and reported refit=True); 0 and 1 are refused, not read as bools
    numpy_false = evaluate.error_curve(X, y, {"once": spec}, n_genes=10, cv=5, random_state=0,
                                       refit_selection=np.False_)
    timing = [c for c in biased.columns if c.startswith("seconds")]
    pd.testing.assert_frame_equal(numpy_false.drop(columns=timing), biased.drop(columns=timing))
    with pytest.raises(ValueError, match="refit_selection must be None, True or False, got 0"):
        evaluate.error_curve(X, y, {"once": spec}, n_genes=10, cv=5, refit_selection=0)


def test_anndata_inputs_stored_and_precomputed(srbct_small):
    adata = srbct_small.copy()
    mask = np.zeros(adata.n_vars, dtype=bool)
    mask[:60] = True
    adata.var["hv"] = mask
    bioqpfs.tl.select_genes(adata, "class", method="qpfs", n_genes=5, mask_var="hv")
    stored = bioqpfs.get.selection_df(adata, "qpfs")
    sel_all = bioqpfs.select(adata.X[:, :60], adata.obs["class"], method="qpfs", n_genes=5)
    names = list(adata.var_names[:60][sel_all.ranking[:5]])
    df = evaluate.error_curve(adata, "class", {"stored": stored, "sel": sel_all, "names": names,
                                               "refit": "qpfs"},
                              n_genes=[2, 5], cv=3, mask_var="hv")
    assert list(df.method.unique()) == ["stored", "sel", "names", "refit"]
    # the three fixed forms of the same panel give identical errors
    for k in (2, 5):
        e = df[df.n_genes == k].set_index("method").mean_error
        assert e["stored"] == e["sel"] == e["names"]
    assert df.set_index("method").refit.to_dict() == {"stored": False, "sel": False, "names": False, "refit": True}
    # sparse input gives the same curve
    adata_sp = adata.copy()
    adata_sp.X = sp.csr_matrix(adata.X)
    df_sp = evaluate.error_curve(adata_sp, "class", {"refit": "qpfs"}, n_genes=[2, 5], cv=3, mask_var="hv")
    np.testing.assert_allclose(df_sp.mean_error, df[df.method == "refit"].mean_error)


def test_clear_errors(srbct_small):
    adata = srbct_small
    X, y = adata.X, adata.obs["class"].to_numpy()
    sel = bioqpfs.select(X, y, method="qpfs", n_genes=5)
    with pytest.raises(ValueError, match="cannot be refit"):
        evaluate.error_curve(X, y, [sel], refit_selection=True, cv=3)
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        evaluate.error_curve(X, y, "nope", cv=3)
    with pytest.raises(ValueError, match="column name, which needs an AnnData"):
        evaluate.error_curve(X, "class", "qpfs")
    with pytest.raises(ValueError, match=r"class\(es\) have fewer than 50 samples"):
        evaluate.error_curve(X, y, [[1, 2]], n_genes=2, cv=50)
    with pytest.raises(ValueError, match="unknown classifier"):
        evaluate.error_curve(X, y, [[1, 2]], n_genes=2, classifier="rbf")
    with pytest.raises(ValueError, match="gene list is empty"):
        evaluate.error_curve(X, y, [[]], n_genes=1)
    with pytest.raises(ValueError, match="not found"):
        evaluate.error_curve(adata, "class", [["no_such_gene"]], n_genes=1)
    with pytest.raises(KeyError, match="not a column of adata.obs"):
        evaluate.error_curve(adata, "klass", "qpfs")


def test_compare_defaults_to_registered_methods(srbct_small):
    df = evaluate.compare(srbct_small[:, :40].copy(), "class", n_genes=[3], cv=3)
    expected = [m for m in ("qpfs", "spec_cmi", "ikm_qpfs", "mrmr_mid", "maxrel", "random") if m in bioqpfs.methods()]
    assert list(df.method) == expected
    assert (df.n_folds == 3).all() and df.refit.all()
    assert isinstance(df, pd.DataFrame) and df.mean_error.between(0, 1).all()


def test_progress_bar_on_stderr(srbct_small, capsys):
    X, y = srbct_small.X, srbct_small.obs["class"].to_numpy()
    quiet = evaluate.error_curve(X, y, [[1, 2, 3]], n_genes=3, cv=3)
    assert capsys.readouterr().err == ""
    import tqdm.auto

    import bioqpfs._progress as prog

    calls = []
    real = tqdm.auto.tqdm

    class Spy(real):
        def __init__(self, *a, **kw):
            calls.append(kw)
            kw["delay"] = 0
            super().__init__(*a, **kw)

    tqdm.auto.tqdm = Spy
    try:
        loud = evaluate.error_curve(X, y, [[1, 2, 3]], n_genes=3, cv=3, progress=True)
    finally:
        tqdm.auto.tqdm = real
    assert calls and calls[0]["total"] == 3 and calls[0]["desc"] == "CV folds"
    assert "CV folds" in capsys.readouterr().err
    pd.testing.assert_frame_equal(quiet, loud)
    assert not prog._ENABLED.get()


def test_sizes_beyond_a_ranking_give_no_row(srbct_small):
    X, y = srbct_small.X, srbct_small.obs["class"].to_numpy()
    df = evaluate.error_curve(X, y, {"short": [4, 9], "long": list(range(6))}, n_genes=[2, 5], cv=3)
    assert df[["method", "n_genes"]].values.tolist() == [["short", 2], ["long", 2], ["long", 5]]


def test_compare_settings_of_one_method(srbct_small):
    a = srbct_small[:, :40].copy()
    df = evaluate.compare(a, "class", {"a=0.2": ("qpfs", {"alpha": 0.2}), "auto": "qpfs"}, n_genes=[3], cv=3)
    assert list(df.method) == ["a=0.2", "auto"]
    X, y = a.X, a.obs["class"].to_numpy()
    ref = []
    for train, test in StratifiedKFold(3, shuffle=True, random_state=0).split(X, y):
        g = bioqpfs.select(X[train], y[train], method="qpfs", n_genes=3, alpha=0.2).ranking[:3]
        ref.append(np.mean(SVC(kernel="linear").fit(X[train][:, g], y[train]).predict(X[test][:, g]) != y[test]))
    assert df.mean_error.iloc[0] == pytest.approx(np.mean(ref), abs=1e-12)


# --------------------------------------------------------------------------------------------
# issue 22 item 4 / issue 16 item 3: scores beside the error, sparse data, cv chosen from the data
# --------------------------------------------------------------------------------------------
def test_scores_beside_the_error_match_cross_validate(srbct_small):
    from sklearn.metrics import make_scorer, matthews_corrcoef
    from sklearn.model_selection import cross_validate

    X, y = srbct_small.X, srbct_small.obs["class"].to_numpy()
    genes = [3, 17, 40, 41, 99]
    df = evaluate.error_curve(X, y, {"fixed": genes}, n_genes=5, cv=4, random_state=2,
                              scoring=make_scorer(matthews_corrcoef))
    ref = cross_validate(SVC(kernel="linear", C=1.0), X[:, genes], y, cv=StratifiedKFold(4, shuffle=True, random_state=2),
                         scoring={"balanced_accuracy": "balanced_accuracy", "f1_macro": "f1_macro",
                                  "accuracy": "accuracy", "mcc": make_scorer(matthews_corrcoef)})
    row = df.iloc[0]
    assert row.scoring == "matthews_corrcoef"
    assert list(df.columns[2:5]) == ["mean_matthews_corrcoef", "sd_matthews_corrcoef", "se_matthews_corrcoef"]
    assert row.mean_matthews_corrcoef == pytest.approx(ref["test_mcc"].mean(), abs=1e-12)
    assert row.mean_balanced_accuracy == pytest.approx(ref["test_balanced_accuracy"].mean(), abs=1e-12)
    assert row.sd_balanced_accuracy == pytest.approx(np.std(ref["test_balanced_accuracy"], ddof=1), abs=1e-12)
    assert row.mean_f1_macro == pytest.approx(ref["test_f1_macro"].mean(), abs=1e-12)
    assert row.mean_error == pytest.approx(1 - ref["test_accuracy"].mean(), abs=1e-12)
    # a scorer name leads the table; the default is the papers' error
    by_name = evaluate.error_curve(X, y, {"fixed": genes}, n_genes=5, cv=4, random_state=2, scoring="balanced_accuracy")
    assert by_name.scoring.iloc[0] == "balanced_accuracy" and by_name.columns[2] == "mean_balanced_accuracy"
    assert by_name.mean_balanced_accuracy.iloc[0] == row.mean_balanced_accuracy
    assert evaluate.error_curve(X, y, {"fixed": genes}, n_genes=5, cv=4).scoring.iloc[0] == "error"
    with pytest.raises(ValueError, match=r"unknown scoring 'balanced_acuracy' \(did you mean 'balanced_accuracy'"):
        evaluate.error_curve(X, y, {"fixed": genes}, n_genes=5, cv=4, scoring="balanced_acuracy")
    with pytest.raises(TypeError, match="scoring must be"):
        evaluate.error_curve(X, y, {"fixed": genes}, n_genes=5, cv=4, scoring=3)


def test_scaling_pipeline_on_sparse_anndata(srbct_small):
    """StandardScaler cannot centre a sparse matrix; the panel columns are densified, so the sparse AnnData
    gives exactly the dense result (and the result of a plain scikit-learn loop)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    dense = srbct_small.copy()
    sparse = srbct_small.copy()
    sparse.X = sp.csr_matrix(np.where(dense.X > np.median(dense.X, axis=0), dense.X, 0.0))   # half zeros, as scRNA
    dense.X = sparse.X.toarray()
    clf = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000))
    kw = dict(n_genes=[3, 6], cv=3, classifier=clf, scoring="balanced_accuracy")
    df_sp = evaluate.error_curve(sparse, "class", "maxrel", **kw)
    df_de = evaluate.error_curve(dense, "class", "maxrel", **kw)
    pd.testing.assert_frame_equal(df_sp.drop(columns="seconds_select"), df_de.drop(columns="seconds_select"))
    X, y = dense.X, dense.obs["class"].to_numpy()
    ref = []
    for train, test in StratifiedKFold(3, shuffle=True, random_state=0).split(X, y):
        g = bioqpfs.select(X[train], y[train], method="maxrel", n_genes=6).ranking[:6]
        ref.append(cross_val_score(clf, X[:, g], y, cv=[(train, test)], scoring="balanced_accuracy")[0])
    assert df_sp[df_sp.n_genes == 6].mean_balanced_accuracy.iloc[0] == pytest.approx(np.mean(ref), abs=1e-12)
    # the named pipeline of the same kind
    assert evaluate.error_curve(sparse, "class", "maxrel", n_genes=3, cv=3, classifier="logreg").n_folds.iloc[0] == 3


def test_default_cv_follows_the_smallest_class(srbct_small):
    X, y = srbct_small.X, srbct_small.obs["class"].to_numpy()    # SRBCT: the smallest class (BL) has 8 samples
    genes = {"fixed": [3, 17, 40]}
    auto = evaluate.error_curve(X, y, genes, n_genes=3)
    assert "8-fold" in evaluate._auto_cv(y)[1] and "'BL', has 8 samples" in evaluate._auto_cv(y)[1]
    assert auto.cv.iloc[0] == "8" and auto.n_folds.iloc[0] == 8
    pd.testing.assert_frame_equal(auto, evaluate.error_curve(X, y, genes, n_genes=3, cv=8))
    # >= 10 per class: the papers' 10-fold; a single-sample class: leave-one-out
    rng = np.random.default_rng(0)
    Xr = rng.normal(size=(41, 5))
    y10 = np.array(["a"] * 20 + ["b"] * 21)
    assert evaluate._auto_cv(y10)[0] == 10
    assert evaluate.error_curve(Xr, y10, {"p": [0, 1]}, n_genes=2).cv.iloc[0] == "10"
    y1 = y10.copy()
    y1[0] = "c"
    assert evaluate._auto_cv(y1)[0] == "loo"
    loo = evaluate.error_curve(Xr, y1, {"p": [0, 1]}, n_genes=2, classifier="knn3")
    assert loo.cv.iloc[0] == "loo" and loo.n_folds.iloc[0] == 41


# --------------------------------------------------------------------------------------------
# suggest_n_genes: the one-standard-error rule (ESL section 7.10) on hand-made tables
# --------------------------------------------------------------------------------------------
def _table(sizes, means, ses, score="error", method="qpfs"):
    return pd.DataFrame({"method": method, "n_genes": sizes, f"mean_{score}": means, f"se_{score}": ses,
                         "scoring": score})


def test_suggest_n_genes_one_se_differs_from_best():
    # best 0.10 at 50; 0.12 at 10 is within 0.10 + 0.025; 0.30 at 5 is not
    t = _table([5, 10, 20, 50], [0.30, 0.12, 0.11, 0.10], [0.02, 0.02, 0.02, 0.025])
    assert evaluate.suggest_n_genes(t) == 10
    assert isinstance(evaluate.suggest_n_genes(t), int)
    # a smaller standard error at the best size: 10 no longer qualifies, 20 does (0.11 <= 0.115)
    t.loc[3, "se_error"] = 0.015
    assert evaluate.suggest_n_genes(t) == 20
    # the best size itself when nothing smaller is close
    assert evaluate.suggest_n_genes(_table([5, 10], [0.4, 0.1], [0.01, 0.01])) == 10
    # row order does not matter
    assert evaluate.suggest_n_genes(t.iloc[::-1]) == 20


def test_suggest_n_genes_margin_and_ties():
    # exactly at the margin qualifies: 0.125 == 0.1 + 0.025
    assert evaluate.suggest_n_genes(_table([5, 10, 20], [0.3, 0.125, 0.1], [0.01, 0.01, 0.025])) == 10
    # tied best means at 10 and 20: the smaller one's SE (0.03) sets the margin, so 5 (0.2) is out;
    # with the larger one's SE (0.2) 5 would qualify
    assert evaluate.suggest_n_genes(_table([5, 10, 20, 40], [0.2, 0.1, 0.1, 0.15], [0.01, 0.03, 0.2, 0.01])) == 10


def test_suggest_n_genes_score_direction():
    # balanced accuracy is higher-is-better: best 0.91 at 50, 0.90 >= 0.91 - 0.02 qualifies, 0.88 does not
    t = _table([5, 10, 20, 50], [0.70, 0.88, 0.90, 0.91], [0.02] * 4, score="balanced_accuracy")
    assert evaluate.suggest_n_genes(t) == 20
    # the same numbers as an error (a loss) put the best at 5
    t2 = t.rename(columns={"mean_balanced_accuracy": "mean_error", "se_balanced_accuracy": "se_error"})
    assert evaluate.suggest_n_genes(t2, score="error") == 5
    # score= overrides the scoring column; a scikit-learn scorer (higher is better) follows the gain rule
    t3 = t.rename(columns={"mean_balanced_accuracy": "mean_roc_auc_ovr", "se_balanced_accuracy": "se_roc_auc_ovr"})
    assert evaluate.suggest_n_genes(t3, score="roc_auc_ovr") == 20


def test_suggest_n_genes_per_method_and_sd_columns():
    a = _table([5, 10, 20], [0.3, 0.12, 0.1], [0.01, 0.01, 0.03], method="qpfs")
    b = _table([5, 10, 20], [0.2, 0.19, 0.1], [0.01, 0.01, 0.02], method="random")
    out = evaluate.suggest_n_genes(pd.concat([b, a], ignore_index=True))
    assert isinstance(out, pd.Series) and out.name == "n_genes"
    assert list(out.index) == ["random", "qpfs"] and out.to_dict() == {"random": 20, "qpfs": 10}
    # no se_ column: sd / sqrt(n_folds) (0.04 / 2 = 0.02 here)
    t = pd.DataFrame({"method": "m", "n_genes": [5, 10, 20], "mean_error": [0.3, 0.115, 0.1],
                      "sd_error": [0.04] * 3, "n_folds": 4})
    assert evaluate.suggest_n_genes(t) == 10
    t["sd_error"] = 0.02     # se 0.01: 0.115 > 0.11
    assert evaluate.suggest_n_genes(t) == 20


def test_suggest_n_genes_matches_plain_loop_on_error_curve(srbct_small):
    adata = srbct_small
    df, folds = evaluate.error_curve(adata.X, adata.obs["class"].to_numpy(), {"fixed": list(range(30))},
                                     n_genes=[1, 2, 4, 8, 16, 30], cv=4, repeats=2, random_state=1, return_folds=True)
    # reference: the rule written out on the per-fold errors
    per_k = {k: folds.loc[folds.n_genes == k, "error"].to_numpy() for k in sorted(set(folds.n_genes))}
    mean = {k: v.mean() for k, v in per_k.items()}
    best = min(per_k, key=lambda k: (mean[k], k))
    se = np.std(per_k[best], ddof=1) / np.sqrt(per_k[best].size)
    expected = min(k for k in per_k if mean[k] <= mean[best] + se + 1e-12)
    assert evaluate.suggest_n_genes(df) == expected


@pytest.mark.parametrize("change, match", [
    (lambda t: t.drop(columns="se_error"), "needs columns"),
    (lambda t: t.drop(columns="mean_error"), "needs columns"),
    (lambda t: t.assign(mean_error=[0.3, np.nan, 0.1]), "NaN for method 'qpfs' at n_genes=10"),
    (lambda t: t.assign(se_error=[0.01, 0.01, np.nan]), "NaN for method 'qpfs' at n_genes=20"),
    (lambda t: t.iloc[:1], "single panel size"),
    (lambda t: t.iloc[:0], "no rows"),
    (lambda t: pd.concat([t, t.iloc[:1]]), "several rows for method 'qpfs' at n_genes=5"),
    (lambda t: t.assign(n_genes=[5.9, 10, 20]), "positive whole number in every row, got 5.9"),
    (lambda t: t.assign(n_genes=[np.nan, 10, 20]), "positive whole number in every row, got nan"),
    (lambda t: t.assign(n_genes=["5", "ten", "20"]), "got 'ten'"),
    (lambda t: t.assign(n_genes=[0, 10, 20]), "got 0"),
    (lambda t: t.assign(n_genes=["5", 5, 20]), "several rows for method 'qpfs' at n_genes=5"),
    (lambda t: t.assign(scoring=["error", "balanced_accuracy", "error"]), "scored by 'error', 'balanced_accuracy'"),
])
def test_suggest_n_genes_bad_tables(change, match):
    t = _table([5, 10, 20], [0.3, 0.12, 0.1], [0.01, 0.01, 0.03])
    with pytest.raises(ValueError, match=match):
        evaluate.suggest_n_genes(change(t))
    with pytest.raises(TypeError, match="DataFrame"):
        evaluate.suggest_n_genes(t.to_dict())


def test_suggest_n_genes_reads_sizes_stored_as_text():
    """A table read back from a CSV of strings: sizes sort as numbers ('10' < '5' as text would pick 10)."""
    t = _table([5, 10, 20], [0.1, 0.1, 0.3], [0.01, 0.01, 0.01])
    assert evaluate.suggest_n_genes(t) == 5
    assert evaluate.suggest_n_genes(t.assign(n_genes=["5", "10", "20"])) == 5
    assert evaluate.suggest_n_genes(t.assign(n_genes=["20", "10", "5"], mean_error=[0.3, 0.1, 0.1])) == 5


# --------------------------------------------------------------------------------------------
# folds and scores a panel cannot be judged by: refused before the CV, or warned about
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def three_classes():
    rng = np.random.default_rng(0)
    y = np.repeat(["a", "b", "c"], 20)
    X = rng.normal(size=(60, 12))
    X[:, 0] += 3 * (y == "a")
    X[:, 1] += 3 * (y == "b")
    return X, y


def test_a_class_missing_from_the_training_part_is_warned_about(three_classes):
    from sklearn.model_selection import KFold

    X, y = three_classes
    with pytest.warns(UserWarning, match=r"in 3 of 3 folds the test part holds classes that the training part lacks "
                                         r"\(e\.g\. fold 0: 'a', 20 test sample"):
        df = evaluate.error_curve(X, y, {"p": [0, 1]}, n_genes=2, cv=KFold(3))
    assert df.mean_error.iloc[0] == 1.0          # what the warning is about: no test sample can be right
    import warnings

    with warnings.catch_warnings():              # a stratified splitter: no warning
        warnings.simplefilter("error")
        evaluate.error_curve(X, y, {"p": [0, 1]}, n_genes=2, cv=StratifiedKFold(3))
    # leave-one-batch-out with the batch confounded with the class: training parts of one class are refused
    with pytest.raises(ValueError, match="fold 0: the training part holds a single class, 'c'"):
        evaluate.error_curve(X[20:], y[20:], {"p": [0, 1]}, n_genes=2, cv="leave_one_batch_out", batch=y[20:])


def test_a_single_sample_class_under_leave_one_out_is_named():
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(21, 4)), np.array(["a"] * 10 + ["b"] * 10 + ["c"])
    with pytest.warns(UserWarning, match="class\\(es\\) 'c' have a single sample"):
        evaluate.error_curve(X, y, {"p": [0, 1]}, n_genes=2, classifier="knn3")


@pytest.mark.parametrize("scoring, n, classifier", [("roc_auc", 2, "linear_svm"), ("roc_auc_ovr", 3, "logreg"),
                                                    ("neg_log_loss", 3, "logreg")])
def test_a_score_undefined_on_a_test_fold_is_refused_before_the_cv(three_classes, scoring, n, classifier,
                                                                   monkeypatch):
    X, y = three_classes
    keep = np.isin(y, ["a", "b", "c"][:n])
    calls = []
    monkeypatch.setattr(evaluate, "select", lambda *a, **k: calls.append(1))
    with pytest.raises(ValueError, match=f"scoring='{scoring}' is undefined on a test fold that holds 1 of the {n} "
                                         "classes \\(fold 0: 1 sample"):
        evaluate.error_curve(X[keep], y[keep], ["maxrel"], n_genes=2, cv="loo", scoring=scoring,
                             classifier=classifier)
    assert not calls                              # refused before any selection ran
    # k-fold: every test fold holds every class, the score is defined
    df = evaluate.error_curve(X[keep], y[keep], {"p": [0, 1]}, n_genes=2, cv=4, scoring=scoring,
                              classifier=classifier)
    assert np.isfinite(df[f"mean_{scoring}"]).all()


def test_splitters_get_groups_repeats_and_clear_errors(three_classes):
    from sklearn.model_selection import GroupKFold, RepeatedStratifiedKFold

    X, y = three_classes
    donor = np.tile(["d1", "d2", "d3", "d4"], 15)
    with pytest.raises(ValueError, match="cv=GroupKFold splits the samples by group: pass the groups as batch="):
        evaluate.error_curve(X, y, {"p": [0, 1]}, n_genes=2, cv=GroupKFold(4))
    df, folds = evaluate.error_curve(X, y, {"p": [0, 1]}, n_genes=2, cv=GroupKFold(4), batch=donor,
                                     return_folds=True)
    assert df.n_folds.iloc[0] == 4
    for f in range(4):                            # each test fold is one donor: the groups reached the splitter
        test = next(te for i, (_, te) in enumerate(GroupKFold(4).split(X, y, donor)) if i == f)
        assert np.unique(donor[test]).size == 1 and folds.n_test.iloc[f] == test.size
    with pytest.raises(ValueError, match=r"cv=StratifiedKFold\(n_splits=30.*cannot split these samples \(n_splits=30 "
                                         r"cannot be greater.*the smallest class, 'a', has 20 sample"):
        evaluate.error_curve(X, y, {"p": [0, 1]}, n_genes=2, cv=StratifiedKFold(30))
    cv = RepeatedStratifiedKFold(n_splits=3, n_repeats=2, random_state=0)
    df, folds = evaluate.error_curve(X, y, {"p": [0, 1]}, n_genes=2, cv=cv, return_folds=True)
    assert df.repeats.iloc[0] == 2 and df.n_folds.iloc[0] == 6
    assert folds[["repeat", "fold"]].to_numpy().tolist() == [[r, f] for r in range(2) for f in range(3)]
    ref = [1 - SVC(kernel="linear", C=1.0).fit(X[tr][:, :2], y[tr]).score(X[te][:, :2], y[te])
           for tr, te in cv.split(X, y)]
    assert folds.error.to_numpy() == pytest.approx(ref, abs=1e-12)


def test_reserved_method_params_and_regressors_are_refused(three_classes):
    from sklearn.linear_model import LinearRegression

    X, y = three_classes
    for key in ("n_genes", "random_state"):
        with pytest.raises(ValueError, match=f"the parameters of 'maxrel' set {key}, which error_curve sets itself"):
            evaluate.error_curve(X, y, ["maxrel"], n_genes=2, method_params={"maxrel": {key: 3}})
        with pytest.raises(ValueError, match=f"the parameters of 'mine' set {key}"):
            evaluate.error_curve(X, y, {"mine": ("maxrel", {key: 3})}, n_genes=2)
    with pytest.raises(TypeError, match="classifier LinearRegression is a regressor"):
        evaluate.error_curve(X, y == "a", {"p": [0, 1]}, n_genes=2, classifier=LinearRegression())


def test_nan_fold_score_is_not_skipped_by_the_mean():
    """A scorer that is NaN on some folds: the row's mean and sd are NaN (with a warning), not a mean over the
    other folds while n_folds counts them all."""
    rng = np.random.default_rng(0)
    X = rng.poisson(2, (60, 10)).astype(float)
    y = np.repeat(["a", "b", "c"], 20)
    calls = []

    def sometimes_nan(estimator, X_test, y_test):
        calls.append(1)
        return np.nan if len(calls) % 3 == 0 else 0.5

    with pytest.warns(UserWarning, match=r"scoring='sometimes_nan' is NaN on \d+ of 10 fold fits"):
        df, folds = evaluate.error_curve(X, y, {"fixed": [0, 1, 2, 3]}, n_genes=[2, 4], cv=5,
                                         scoring=sometimes_nan, return_folds=True)
    assert folds["sometimes_nan"].isna().any()
    assert df["mean_sometimes_nan"].isna().all() and df["sd_sometimes_nan"].isna().all()
    assert (df["n_folds"] == 5).all() and df["mean_error"].notna().all()
    with pytest.raises(ValueError, match="NaN"):
        evaluate.suggest_n_genes(df)


def test_labels_mixing_numbers_and_text():
    """Labels such as 1, 'b', 2.5 (accepted by bioqpfs.select) are evaluated as their texts, not a TypeError from
    numpy's sort deep inside the fold split."""
    rng = np.random.default_rng(1)
    X = rng.poisson(2, (60, 12)).astype(float)
    mixed = np.array([1] * 20 + ["b"] * 20 + [2.5] * 20, dtype=object)
    X[:20, :2] += 4
    text = np.array(["1"] * 20 + ["b"] * 20 + ["2.5"] * 20, dtype=object)
    got = evaluate.error_curve(X, mixed, {"fixed": [0, 1, 2, 3], "qpfs": "qpfs"}, n_genes=[2, 4], cv=4)
    want = evaluate.error_curve(X, text, {"fixed": [0, 1, 2, 3], "qpfs": "qpfs"}, n_genes=[2, 4], cv=4)
    pd.testing.assert_frame_equal(got.drop(columns="seconds_select"), want.drop(columns="seconds_select"))
    batch = np.array([1, "x", 2] * 20, dtype=object)   # batches too: leave-one-batch-out sorts them
    got = evaluate.error_curve(X, mixed, ["qpfs"], n_genes=[2, 4], cv="leave_one_batch_out", batch=batch)
    want = evaluate.error_curve(X, text, ["qpfs"], n_genes=[2, 4], cv="leave_one_batch_out", batch=batch.astype(str))
    pd.testing.assert_frame_equal(got.drop(columns="seconds_select"), want.drop(columns="seconds_select"))


def test_anndata_with_labels_as_a_list(srbct_small):
    """With an AnnData, a list of one label per cell is labels (array-like, as documented), not .obs column names
    ("groupby lists column(s) ... more than once")."""
    adata = srbct_small
    by_column = evaluate.error_curve(adata, "class", {"fixed": [3, 17, 40]}, n_genes=[2, 3], cv=4)
    for labels in (adata.obs["class"].astype(str).tolist(), tuple(adata.obs["class"].astype(str))):
        got = evaluate.error_curve(adata, labels, {"fixed": [3, 17, 40]}, n_genes=[2, 3], cv=4)
        pd.testing.assert_frame_equal(got, by_column)
    with pytest.raises(KeyError, match="not a column of adata.obs"):   # a short list is still column names
        evaluate.error_curve(adata, ["class", "nope"], {"fixed": [3, 17, 40]}, n_genes=[2, 3], cv=4)


@pytest.mark.parametrize("classifier", ["linear_svm", "liblinear", "random_forest"])
def test_classifier_seeded_from_random_state_not_the_global_rng(classifier):
    """scikit-learn draws the seed of an estimator whose random_state is None from NumPy's global RNG at every fit:
    the curve consumed the caller's np.random stream, and a stochastic classifier's scores followed it."""
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(0)
    X = rng.poisson(2, (60, 12)).astype(float)
    y = np.repeat(["a", "b", "c"], 20)
    X[:20, :3] += 2
    clf = RandomForestClassifier(n_estimators=3) if classifier == "random_forest" else classifier
    runs = []
    for seed in (0, 1):
        np.random.seed(seed)
        before = np.random.get_state()
        _, folds = evaluate.error_curve(X, y, {"fixed": list(range(8))}, n_genes=[4, 8], cv=3, classifier=clf,
                                        scoring="accuracy", random_state=2, return_folds=True)
        after = np.random.get_state()
        assert np.array_equal(before[1], after[1]) and before[2] == after[2]
        runs.append(folds)
    pd.testing.assert_frame_equal(runs[0], runs[1])
    if classifier == "random_forest":
        assert clf.random_state is None   # the caller's estimator is left as it was


def test_fixed_panel_shorter_than_every_size_is_refused():
    """A fixed panel shorter than the smallest n_genes got no row: it vanished from the table without a word (an
    empty table when it was the only selection)."""
    rng = np.random.default_rng(0)
    X = rng.poisson(2, (60, 20)).astype(float)
    y = np.repeat(["a", "b", "c"], 20)
    with pytest.raises(ValueError, match=r"the panel 'short' has 3 gene\(s\), fewer than the smallest n_genes \(5\)"):
        evaluate.error_curve(X, y, {"short": [0, 1, 2], "long": list(range(12))}, n_genes=[5, 10], cv=3)
    with pytest.raises(ValueError, match="'short' has 3 gene"):
        evaluate.error_curve(X, y, {"short": [0, 1, 2]}, n_genes=[5, 10], cv=3)
    # a panel shorter than some sizes only: those sizes give no row, as documented
    df = evaluate.error_curve(X, y, {"short": [0, 1, 2, 3, 4, 5], "long": list(range(12))}, n_genes=[5, 10], cv=3)
    assert df.groupby("method", sort=False).size().to_dict() == {"short": 1, "long": 2}


def test_binary_score_on_text_labels_names_pos_label():
    """'f1' on labels 'a'/'b' fails on sklearn's pos_label=1; the advice was "use a classification score", which f1
    is: the message now says to name the positive class, and that advice works."""
    from sklearn.metrics import f1_score, make_scorer

    rng = np.random.default_rng(0)
    X = rng.poisson(2, (40, 6)).astype(float)
    y = np.repeat(["a", "b"], 20)
    X[20:, :2] += 3
    with pytest.raises(ValueError, match=r"pos_label=.b.\), or use a score of all classes") as info:
        evaluate.error_curve(X, y, {"fixed": [0, 1, 2]}, n_genes=[2, 3], cv=4, scoring="f1")
    assert "use a classification score" not in str(info.value)
    df = evaluate.error_curve(X, y, {"fixed": [0, 1, 2]}, n_genes=[2, 3], cv=4,
                              scoring=make_scorer(f1_score, pos_label="b"))
    assert df["mean_f1"].between(0, 1).all()


def test_clusterer_is_not_a_classifier():
    """KMeans has fit and predict, so it passed as a classifier: its cluster numbers were scored as class labels
    (mean_error ~0.9 on separable data, no error)."""
    from sklearn.cluster import KMeans
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    X = rng.poisson(2, (60, 6)).astype(float)
    y = np.repeat([0, 1, 2], 20)
    for clf in (KMeans(3, n_init=2), make_pipeline(StandardScaler(), KMeans(3, n_init=2))):
        with pytest.raises(TypeError, match="is a clustering estimator; pass a classifier"):
            evaluate.error_curve(X, y, {"fixed": [0, 1, 2]}, n_genes=[2, 3], cv=3, classifier=clf)


def test_repeats_with_a_scheme_that_does_not_repeat_is_refused(three_classes):
    """repeats=3 with cv="loo", "leave_one_batch_out" or a splitter object ran once and reported repeats=1 without a
    word; it is refused, saying what repeats instead.  When cv=None chooses leave-one-out it warns."""
    from sklearn.model_selection import GroupKFold

    X, y = three_classes
    donor = np.tile(["d1", "d2", "d3", "d4"], 15)
    with pytest.raises(ValueError, match=r"repeats=3 applies to k-fold CV .* cv='loo' gives the same folds"):
        evaluate.error_curve(X, y, {"p": [0, 1]}, n_genes=2, cv="loo", repeats=3)
    with pytest.raises(ValueError, match=r"cv='leave_one_batch_out' gives the same folds"):
        evaluate.error_curve(X, y, {"p": [0, 1]}, n_genes=2, cv="leave_one_batch_out", batch=donor, repeats=2)
    with pytest.raises(ValueError, match=r"splitter cv=StratifiedKFold is used as given.*RepeatedStratifiedKFold\("
                                         r"n_repeats=3\)"):
        evaluate.error_curve(X, y, {"p": [0, 1]}, n_genes=2, cv=StratifiedKFold(3), repeats=3)
    with pytest.raises(ValueError, match="splitter cv=GroupKFold is used as given"):
        evaluate.error_curve(X, y, {"p": [0, 1]}, n_genes=2, cv=GroupKFold(4), batch=donor, repeats=2)
    # repeats=1 (the default, or given) is the one run these schemes make: accepted
    df = evaluate.error_curve(X, y, {"p": [0, 1]}, n_genes=2, cv=StratifiedKFold(3), repeats=1)
    assert df.repeats.iloc[0] == 1
    # cv=None chose leave-one-out: the user did not pick the scheme, so a warning
    y1 = y.copy()
    y1[0] = "z"
    with pytest.warns(UserWarning, match="repeats=2 is not used: cv=None chose leave-one-out"):
        df = evaluate.error_curve(X, y1, {"p": [0, 1]}, n_genes=2, repeats=2)
    assert df.cv.iloc[0] == "loo" and df.repeats.iloc[0] == 1


@pytest.mark.parametrize("name", ["method", "n_genes", "repeat", "fold", "n_test", "error"])
def test_a_scorer_named_like_a_table_column_gets_its_own_columns(three_classes, name):
    """A callable scorer whose function is named like a per-fold table column ("fold", "method", "n_genes", "repeat",
    "n_test") failed after the first fold's selection with dict()'s "got multiple values for keyword argument";
    like a scorer named "error", it is renamed "<name>_scorer", and the table's own columns keep their values."""
    X, y = three_classes

    def scorer(estimator, X_test, y_test):
        return float(np.mean(estimator.predict(X_test) == y_test))

    scorer.__name__ = name
    df, folds = evaluate.error_curve(X, y, {"p": [0, 1]}, n_genes=[1, 2], cv=3, scoring=scorer, return_folds=True)
    assert df.scoring.tolist() == [f"{name}_scorer"] * 2
    assert list(df.columns[2:5]) == [f"mean_{name}_scorer", f"sd_{name}_scorer", f"se_{name}_scorer"]
    assert df.method.tolist() == ["p", "p"] and df.n_genes.tolist() == [1, 2]
    assert folds.fold.tolist() == [0, 0, 1, 1, 2, 2] and (folds.repeat == 0).all()
    np.testing.assert_allclose(folds[f"{name}_scorer"], 1 - folds.error, atol=1e-12)


def test_random_state_none_seeds_the_methods_as_zero_and_says_so(three_classes):
    """random_state=None (allowed with leave-one-out, leave-one-batch-out or a splitter) seeds the methods and the
    classifier as 0, while bioqpfs.select(random_state=None) is unseeded (scikit-learn's convention, and the
    package's "None: unseeded"); the docstring did not say so.  The behaviour is kept (the table stays reproducible)
    and documented; a Generator gives a fresh draw."""
    X, y = three_classes
    cv = StratifiedKFold(3, shuffle=True, random_state=1)

    def curve(seed):
        return evaluate.error_curve(X, y, ["random"], n_genes=[2, 4], cv=cv, random_state=seed, return_folds=True)[1]

    none = curve(None)
    pd.testing.assert_frame_equal(none, curve(None))
    pd.testing.assert_frame_equal(none, curve(0))
    doc = " ".join(evaluate.error_curve.__doc__.split())
    assert "the methods and the classifier are still seeded as with ``random_state=0``" in doc
    assert "``numpy.random.default_rng()`` for a fresh draw" in doc


def test_k_fold_with_too_small_classes_names_them(srbct_small):
    """cv=5 on real data with a rare cell type said only "the smallest class has 1 sample(s)": not which class, so a
    user could not drop it.  The classes below the fold count are named with their sizes, smallest first."""
    a = srbct_small.copy()
    labels = a.obs["class"].astype(str).to_numpy()
    labels[:1], labels[1:4] = "rare", "few"
    a.obs["class"] = pd.Categorical(labels)
    with pytest.raises(ValueError, match=r"cv=5 folds but 2 class\(es\) have fewer than 5 samples: 'rare' \(1\), "
                                         r"'few' \(3\); use fewer folds.*leave those classes' samples out"):
        evaluate.compare(a, "class", ["random"], n_genes=[5], cv=5)


def test_evaluating_on_raw_counts_is_announced_once(monkeypatch):
    """evaluate.compare on an AnnData whose matrix read holds raw counts scored the panels on them without a word
    (tl.select_genes warns); it warns too, and tl.select_genes(n_genes="auto"), which runs error_curve, says it once."""
    import anndata as ad
    import scanpy as sc

    said = []
    monkeypatch.setattr(sc.logging, "warning", lambda msg, *a, **k: said.append(msg))
    rng = np.random.default_rng(0)
    counts = rng.poisson(rng.uniform(0.2, 5, size=(1, 30)) * np.repeat([[1.0], [3.0]], 30, axis=0)).astype(float)
    a = ad.AnnData(counts, obs=pd.DataFrame({"g": np.repeat(["a", "b"], 30)}, index=[f"c{i}" for i in range(60)]))
    a.var_names = [f"g{i}" for i in range(30)]
    evaluate.compare(a, "g", ["mrmr_mid"], n_genes=[3], cv=3)
    assert len(said) == 1 and said[0].startswith("adata.X holds non-negative integers only (raw counts?); the panels "
                                                 "are selected and scored on them as given")
    said.clear()
    bioqpfs.tl.select_genes(a, "g", method="mrmr_mid", n_genes="auto")
    assert len([m for m in said if "raw counts?" in m]) == 1
    said.clear()
    a.X = np.log1p(counts)
    evaluate.compare(a, "g", ["mrmr_mid"], n_genes=[3], cv=3)
    assert said == []
