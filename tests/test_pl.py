"""Plots render with Agg; the axes hold what the stored selection / error table says."""
import inspect

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from sklearn.metrics import mutual_info_score  # noqa: E402

import bioqpfs  # noqa: E402
from bioqpfs import measures, pl  # noqa: E402
from bioqpfs._registry import method_function  # noqa: E402


@pytest.fixture(scope="module")
def adata():
    a = bioqpfs.datasets.srbct()[:, :120].copy()
    bioqpfs.tl.select_genes(a, "class", method="qpfs", n_genes=8)
    bioqpfs.tl.select_genes(a, "class", method="qpfs", n_genes=6, similarity="correlation", key_added="qc")
    return a


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _ranked(a, key):
    var = a.var[np.isfinite(a.var[f"{key}_rank"])].sort_values(f"{key}_rank")
    return var


def test_weights_curve(adata):
    ax = pl.weights(adata, "qpfs", n_ranks="all", show=False)
    assert isinstance(ax, matplotlib.axes.Axes)
    var = _ranked(adata, "qpfs")
    line = ax.lines[0]
    np.testing.assert_array_equal(line.get_xdata(), np.arange(1, len(var) + 1))
    np.testing.assert_allclose(line.get_ydata(), var["qpfs_weight"].to_numpy())
    assert ax.collections[0].get_offsets().shape[0] == 8           # the panel's markers
    cut = ax.lines[1]
    assert np.allclose(cut.get_xdata(), 8.5)                        # between rank 8 and 9
    assert ax.get_xlabel() == "rank" and ax.get_ylabel() == "qpfs weight"
    assert ax.get_title().startswith("qpfs weights")
    ax2 = pl.weights(adata, "qpfs", n_genes=3, n_ranks=20, label_top=2, show=False)
    assert len(ax2.lines[0].get_xdata()) == 20 and np.allclose(ax2.lines[1].get_xdata(), 3.5)
    assert [t.get_text() for t in ax2.texts] == list(var.index[:2])


@pytest.mark.parametrize("method", ["qpfs", "spec_cmi", "mrmr_mid"])
def test_weights_zoom_on_panel_by_default(method):
    """SRBCT, 20-gene panel: the default draws the panel and the non-zero weights, not 2,308 ranks."""
    a = bioqpfs.datasets.srbct()
    bioqpfs.tl.select_genes(a, "class", method=method, n_genes=20)
    var = _ranked(a, method)
    w = var[f"{method}_weight"].to_numpy()
    ax = pl.weights(a, method, show=False)
    x = ax.lines[0].get_xdata()
    np.testing.assert_array_equal(x, np.arange(1, x.size + 1))
    np.testing.assert_allclose(ax.lines[0].get_ydata(), w[:x.size])
    assert ax.collections[0].get_offsets().shape[0] == 20        # the whole panel is drawn
    if (w == 0).any():   # every non-zero weight is drawn, then a short zero tail (QPFS: 68 non-zero of 2,308)
        last = int(np.flatnonzero(w)[-1]) + 1
        assert last + 5 <= x.size <= min(len(w), max(last, 20) + max(5, -(-max(last, 20) // 10)))
        assert (w[x.size:] == 0).all()
    else:                # dense weights (SPEC_CMI): the panel is a fifth of the axis (mRMR ranks only 20)
        assert x.size == min(len(w), 100)
    assert 20 / x.size >= 0.18                                   # not squashed at x ~ 0
    assert (f"ranks 1-{x.size} shown" in ax.get_title()) == (x.size < len(w))
    assert len(pl.weights(a, method, n_ranks="all", show=False).lines[0].get_xdata()) == len(w)
    assert len(pl.weights(a, method, n_ranks=7, show=False).lines[0].get_xdata()) == 7
    with pytest.raises(ValueError, match="n_ranks"):
        pl.weights(a, method, n_ranks="some", show=False)


def test_weights_missing_key(adata):
    with pytest.raises(KeyError, match="no selection stored under key 'nope'"):
        pl.weights(adata, "nope", show=False)


def test_error_curve_lines_and_bands():
    df = pd.DataFrame({"method": ["qpfs"] * 3 + ["random"] * 3, "n_genes": [5, 10, 50] * 2,
                       "mean_error": [0.3, 0.2, 0.1, 0.6, 0.5, 0.45], "sd_error": [0.1, 0.05, 0.2, 0.1, 0.1, 0.1],
                       "se_error": [0.03] * 6, "cv": "10", "classifier": "linear_svm"})
    ax = pl.error_curve(df, suggest=False, show=False)
    assert [ln.get_label() for ln in ax.lines] == ["qpfs", "random"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [0.3, 0.2, 0.1])
    np.testing.assert_allclose(ax.lines[1].get_xdata(), [5, 10, 50])
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2
    ys = bands[0].get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(0.0) and ys.max() == pytest.approx(0.4)   # 0.1 - 0.2 clipped at 0; 0.3 + 0.1
    assert ax.get_xscale() == "log"                      # 5..50 spans a factor 10
    assert ax.get_ylabel() == "10-fold CV error (linear_svm)" and ax.get_xlabel() == "number of genes"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["qpfs", "random"]
    ax2 = pl.error_curve(df, band=None, methods=["random"], logx=False, suggest=False, show=False)
    assert len(ax2.lines) == 1 and not ax2.collections and ax2.get_xscale() == "linear"
    with pytest.raises(ValueError, match="not in df"):
        pl.error_curve(df, methods=["mrmr"], show=False)


def test_error_curve_from_evaluate(adata):
    df = bioqpfs.evaluate.error_curve(adata, "class", {"panel": bioqpfs.get.selection_df(adata, "qpfs")},
                                      n_genes=[2, 4, 8], cv="loo")
    ax = pl.error_curve(df, show=False)
    np.testing.assert_allclose(ax.lines[0].get_ydata(), df.mean_error)
    assert ax.get_ylabel().startswith("leave-one-out")


def test_redundancy_mi_against_independent_mi(adata):
    ax = pl.redundancy(adata, "qpfs", show=False)
    genes = list(_ranked(adata, "qpfs").index[:8])
    assert [t.get_text() for t in ax.get_xticklabels()] == genes
    assert [t.get_text() for t in ax.get_yticklabels()] == genes
    img = ax.images[0].get_array()
    assert img.shape == (8, 8) and img.mask[np.diag_indices(8)].all()   # diagonal hidden by default
    codes = measures.discretize(adata[:, genes].X)                        # QPFS section 2.5 bins
    for i in range(8):
        for j in range(8):
            if i != j:
                ref = mutual_info_score(codes[:, i], codes[:, j]) / np.log(2)   # nats -> bits
                assert img[i, j] == pytest.approx(ref, abs=1e-9)
    assert len(ax.texts) == 8 * 7                                        # annotated (<= 15 genes)
    ax_d = pl.redundancy(adata, "qpfs", diagonal=True, n_genes=4, annotate=False, show=False)
    d = ax_d.images[0].get_array()
    H = [mutual_info_score(codes[:, i], codes[:, i]) / np.log(2) for i in range(4)]
    np.testing.assert_allclose(np.diag(d), H, atol=1e-9)
    assert not ax_d.texts


def test_redundancy_correlation_follows_stored_similarity(adata):
    ax = pl.redundancy(adata, "qc", diagonal=True, show=False)
    genes = list(_ranked(adata, "qc").index[:6])
    ref = np.abs(np.corrcoef(adata[:, genes].X.T.astype(float)))
    np.testing.assert_allclose(ax.images[0].get_array(), ref, atol=1e-6)
    assert ax.figure.axes[-1].get_ylabel() == "|Pearson r|"


def test_panel_dotplot_and_heatmap(adata):
    genes = list(_ranked(adata, "qpfs").index[:8])
    axs = pl.panel(adata, "qpfs", show=False)                     # groupby read from .uns
    main = axs["mainplot_ax"]
    assert [t.get_text() for t in main.get_xticklabels()] == genes
    assert sorted(t.get_text() for t in main.get_yticklabels()) == sorted(adata.obs["class"].cat.categories)
    axs = pl.panel(adata, "qpfs", "class", kind="heatmap", n_genes=3, show=False)
    assert [t.get_text() for t in axs["heatmap_ax"].get_xticklabels()] == genes[:3]
    with pytest.raises(ValueError, match="kind must be one of"):
        pl.panel(adata, "qpfs", kind="violin", show=False)
    with pytest.raises(KeyError, match="not a column of adata.obs"):
        pl.panel(adata, "qpfs", "cell_type", show=False)


@pytest.mark.parametrize("kind", ["dotplot", "heatmap", "matrixplot"])
def test_panel_saves_exactly_the_given_path(adata, tmp_path, monkeypatch, kind):
    """Like the other pl functions (scanpy's save= would write figures/<kind><save>)."""
    import warnings

    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as record:   # scanpy >= 1.12 deprecates its own save=
        warnings.simplefilter("always")
        assert isinstance(pl.panel(adata, "qpfs", kind=kind, save="panel.png", show=False), dict)
    assert not [str(w.message) for w in record if "save" in str(w.message)]
    assert (tmp_path / "panel.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = tmp_path / "sub" / "p.pdf"
    pl.panel(adata, "qpfs", kind=kind, save=out, show=False)
    assert out.read_bytes()[:4] == b"%PDF"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["panel.png", "sub"]   # no figures/ directory
    with pytest.raises(ValueError, match="image format"):
        pl.panel(adata, "qpfs", kind=kind, save="panel", show=False)


def test_scanpy_style_save_values_get_a_clear_error(adata):
    """scanpy's save=True / save='.png' (figures/<kind><suffix>): a bare TypeError from os.fspath, and '.png'
    said the name must end in an image format although it does."""
    with pytest.raises(TypeError, match=r"save= is the path of the file to write.*got True"):
        pl.weights(adata, "qpfs", show=False, save=True)
    with pytest.raises(ValueError, match=r"save='.png' is a suffix alone.*save='figures/weights.png'"):
        pl.weights(adata, "qpfs", show=False, save=".png")


@pytest.mark.parametrize("plot", ["weights", "redundancy", "panel", "error_curve"])
@pytest.mark.parametrize("save", ["w.xyz", 5, "a_directory", "", " ", 0])
def test_a_bad_save_fails_before_drawing(adata, tmp_path, monkeypatch, plot, save):
    """save= was checked only when the drawn figure was saved: the call failed after the work (redundancy's
    gene x gene matrix) and left its figure open (drawn under the error in a notebook)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_directory").mkdir()
    table = pd.DataFrame({"method": ["qpfs"] * 2, "n_genes": [2, 4], "mean_error": [0.3, 0.2],
                          "sd_error": [0.1, 0.1], "scoring": ["error"] * 2})
    calls = {"weights": lambda: pl.weights(adata, "qpfs", show=False, save=save),
             "redundancy": lambda: pl.redundancy(adata, "qpfs", show=False, save=save),
             "panel": lambda: pl.panel(adata, "qpfs", show=False, save=save),
             "error_curve": lambda: pl.error_curve(table, show=False, save=save)}
    with pytest.raises((TypeError, ValueError), match="save="):
        calls[plot]()
    assert plt.get_fignums() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_directory"]


def test_an_empty_save_is_refused_and_false_writes_nothing(adata, tmp_path, monkeypatch):
    """Before: save="" (e.g. an unset config value) drew the plot and wrote nothing, silently."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"save='' names no file, so nothing would be written.*save=None"):
        pl.weights(adata, "qpfs", show=False, save="")
    assert plt.get_fignums() == []
    for off in (None, False, np.False_):
        assert pl.weights(adata, "qpfs", show=False, save=off) is not None
        plt.close("all")
    assert list(tmp_path.iterdir()) == []


def test_show_and_save(adata, tmp_path):
    out = tmp_path / "w.png"
    assert pl.weights(adata, "qpfs", show=True, save=str(out)) is None   # shown (no-op with Agg): returns None
    assert out.stat().st_size > 1000
    fig, ax = plt.subplots()
    assert pl.weights(adata, "qpfs", ax=ax, show=False) is ax


@pytest.mark.parametrize("method", list(bioqpfs.methods()))
def test_every_registered_method_plots(method):
    """The plots read whatever tl stored for any registered method (ranked genes, weights, panel)."""
    a = bioqpfs.datasets.srbct()[:, :40].copy()
    bioqpfs.tl.select_genes(a, "class", method=method, n_genes=5, random_state=0)
    var = _ranked(a, method)
    ax = pl.weights(a, method, n_ranks="all", show=False)
    np.testing.assert_allclose(ax.lines[0].get_ydata(), var[f"{method}_weight"].to_numpy())
    ax = pl.redundancy(a, method, show=False)
    assert [t.get_text() for t in ax.get_xticklabels()] == list(var.index[:5])
    axs = pl.panel(a, method, kind="matrixplot", show=False)
    assert [t.get_text() for t in axs["mainplot_ax"].get_xticklabels()] == list(var.index[:5])


def test_error_curve_draws_the_chosen_score(adata):
    df = bioqpfs.evaluate.error_curve(adata, "class", {"panel": bioqpfs.get.selection_df(adata, "qpfs")},
                                      n_genes=[2, 4, 8], cv=3, scoring="balanced_accuracy")
    ax = pl.error_curve(df, show=False)                      # the table's scoring leads
    np.testing.assert_allclose(ax.lines[0].get_ydata(), df.mean_balanced_accuracy)
    assert ax.get_ylabel() == "3-fold CV balanced accuracy (linear_svm)"
    ys = [c for c in ax.collections if isinstance(c, PolyCollection)][0].get_paths()[0].vertices[:, 1]
    assert ys.max() <= 1.0 and ys.max() == pytest.approx(min(1.0, (df.mean_balanced_accuracy + df.sd_balanced_accuracy).max()))
    ax2 = pl.error_curve(df, score="f1_macro", show=False)  # any score the table holds
    np.testing.assert_allclose(ax2.lines[0].get_ydata(), df.mean_f1_macro)
    assert "macro-F1" in ax2.get_ylabel()
    np.testing.assert_allclose(pl.error_curve(df, score="error", show=False).lines[0].get_ydata(), df.mean_error)
    with pytest.raises(ValueError, match="scores in this table: balanced_accuracy, error, f1_macro"):
        pl.error_curve(df, score="roc_auc", show=False)


def test_panel_use_raw_without_raw_is_a_clear_error(adata):
    """The .raw rule is the one of bioqpfs._anndata: use_raw=True without .raw says so (was an AttributeError)."""
    assert adata.raw is None
    with pytest.raises(ValueError, match=r"adata.raw is not set"):
        pl.panel(adata, "qpfs", use_raw=True, show=False)


def _one_se_lines(ax):
    return {ln.get_label(): ln for ln in ax.lines if "one-SE size" in ln.get_label()}


def test_error_curve_marks_the_one_se_size():
    # qpfs: best 0.10 at 50, 0.12 at 10 within 0.10 + 0.03 -> 10; random: best 0.45 at 50 (+0.01) -> 50
    df = pd.DataFrame({"method": ["qpfs"] * 3 + ["random"] * 3, "n_genes": [5, 10, 50] * 2,
                       "mean_error": [0.3, 0.12, 0.1, 0.6, 0.5, 0.45], "sd_error": [0.1] * 6,
                       "se_error": [0.03, 0.03, 0.03, 0.01, 0.01, 0.01], "scoring": "error"})
    ax = pl.error_curve(df, show=False)
    marks = _one_se_lines(ax)
    assert set(marks) == {"qpfs: one-SE size 10", "random: one-SE size 50"}
    np.testing.assert_allclose(marks["qpfs: one-SE size 10"].get_xdata(), [10, 10])
    assert marks["qpfs: one-SE size 10"].get_color() == ax.lines[0].get_color()   # the method's colour
    assert "qpfs: one-SE size 10" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert not _one_se_lines(pl.error_curve(df, suggest=False, show=False))
    # the drawn score decides: balanced accuracy is higher-is-better
    acc = df.assign(mean_balanced_accuracy=[0.7, 0.88, 0.9, 0.5, 0.6, 0.9], se_balanced_accuracy=0.02)
    assert set(_one_se_lines(pl.error_curve(acc, score="balanced_accuracy", show=False))) == {
        "qpfs: one-SE size 10", "random: one-SE size 50"}
    # a method with one size: skipped by default, an error with suggest=True
    one = pd.concat([df, pd.DataFrame({"method": ["solo"], "n_genes": [5], "mean_error": [0.2], "sd_error": [0.1],
                                       "se_error": [0.03], "scoring": "error"})], ignore_index=True)
    assert len(_one_se_lines(pl.error_curve(one, show=False))) == 2
    with pytest.raises(ValueError, match="single panel size"):
        pl.error_curve(one, suggest=True, show=False)
    with pytest.raises(ValueError, match="suggest must be"):
        pl.error_curve(df, suggest="yes", show=False)


def test_redundancy_of_the_default_recipe_is_the_q_the_selection_used():
    """The default recipe records discretization="auto" and counts Q with every class weighted equally: the plot
    re-decided "auto" on the panel's columns alone (dense marker genes: mean +- sd, while the selection used
    zero_quantile) and drew the unweighted MI.  Now it draws the weighted MI of the rule used (reference: the
    zero/quantile codes and the weighted entropies of tests/reference.py)."""
    import anndata as ad
    import reference as ref

    rng = np.random.default_rng(0)
    y = np.repeat(["a", "b", "c"], [80, 30, 10])
    n, m = y.size, 15
    X = rng.poisson(1, size=(n, m)).astype(float)
    X[rng.random((n, m)) < 0.7] = 0  # zero-inflated background genes
    X[:, 12:] = rng.lognormal(1, 0.5, size=(n, 3))  # three dense marker genes
    for k, c in enumerate("abc"):
        X[y == c, 12 + k] += 3
    adata = ad.AnnData(X, obs=pd.DataFrame({"cls": y}, index=[f"s{i}" for i in range(n)]),
                       var=pd.DataFrame(index=[f"g{i}" for i in range(m)]))
    bioqpfs.tl.select_genes(adata, "cls", n_genes=4)
    params = adata.uns["bioqpfs"]["params"]
    assert params["discretization"] == "auto" and params["discretization_used"] == "zero_quantile"
    assert params["class_weight"] == "balanced"
    Q, genes, _, _ = pl._redundancy.redundancy_matrix(adata, "bioqpfs")
    codes = ref.zero_quantile_codes(X[:, adata.var_names.get_indexer(genes)], 3)
    weights = 1.0 / pd.Series(y).map(pd.Series(y).value_counts()).to_numpy()  # every class weighs the same
    want = np.array([[ref.weighted_mutual_info(codes[:, i], codes[:, j], weights) for j in range(len(genes))]
                     for i in range(len(genes))])
    np.testing.assert_allclose(Q, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", ["dotplot", "heatmap"])
def test_panel_leaves_the_callers_anndata_and_view_as_they_were(adata, kind):
    """scanpy writes into what it plots: on a view it turned string .obs columns into categoricals, which made the
    caller's view an actual AnnData (anndata's "initializing view as actual"); a heat map stored group colours in
    .uns.  The view stays a view with its columns, and neither the view nor the AnnData gains .uns keys."""
    import warnings

    a = adata.copy()
    a.obs["label"] = a.obs["class"].astype(str).to_numpy()  # a string column, as read from a CSV
    view = a[a.obs_names[: a.n_obs // 2 * 2][::2]]
    before, dtype = set(a.uns), a.obs["label"].dtype  # object, or pandas 3's str
    for target in (view, a):
        with warnings.catch_warnings():
            warnings.simplefilter("error", category=UserWarning)  # anndata's ImplicitModificationWarning
            pl.panel(target, "qpfs", "label", kind=kind, show=False)
        assert target.obs["label"].dtype == dtype and set(target.uns) == before
    assert view.is_view


def test_redundancy_with_batches_is_the_within_batch_q_the_selection_used():
    """With batch_key the selection's Q is sum_b w_b I_b, each batch discretised on its own (batch_discretization
    "per_batch") and the classes weighted equally within each batch: the plot drew the pooled MI.  Reference: per-batch zero/quantile
    codes and weighted entropies (tests/reference.py), batches weighted by their size."""
    import anndata as ad
    import reference as ref

    rng = np.random.default_rng(1)
    y = np.repeat(["a", "b", "c"], [70, 40, 20])
    batch = rng.choice(["x", "y"], size=y.size)
    n, m = y.size, 12
    X = rng.poisson(1.5, size=(n, m)).astype(float) * (rng.random((n, m)) < 0.5)
    X[batch == "y"] *= 3.0  # a batch effect
    for k, c in enumerate("abc"):
        X[y == c, k] += 4 * (X[y == c, k] > 0) + 1
    adata = ad.AnnData(X, obs=pd.DataFrame({"cls": y, "b": batch}, index=[f"s{i}" for i in range(n)]),
                       var=pd.DataFrame(index=[f"g{i}" for i in range(m)]))
    bioqpfs.tl.select_genes(adata, "cls", n_genes=4, batch_key="b")
    assert adata.uns["bioqpfs"]["params"]["batch_discretization"] == "per_batch"
    Q, genes, _, _ = pl._redundancy.redundancy_matrix(adata, "bioqpfs")
    idx = adata.var_names.get_indexer(genes)
    cell = pd.Series(batch) + "/" + pd.Series(y)  # class_weight="balanced": equal classes within each batch
    weights = 1.0 / cell.map(cell.value_counts()).to_numpy()
    want = np.zeros((len(genes), len(genes)))
    for b in ("x", "y"):
        rows = np.flatnonzero(batch == b)
        codes = ref.zero_quantile_codes(X[np.ix_(rows, idx)], 3)
        want += rows.size / n * np.array([[ref.weighted_mutual_info(codes[:, i], codes[:, j], weights[rows])
                                           for j in range(len(genes))] for i in range(len(genes))])
    np.testing.assert_allclose(Q, want, rtol=1e-9, atol=1e-12)


def test_get_and_pl_read_the_selection_tl_stored_by_default_and_ranks_as_numbers(adata):
    """get/pl defaulted to key="qpfs" while tl.select_genes(adata, groupby) stores under "bioqpfs": the first call
    of the README was followed by a KeyError.  Now key=None reads "bioqpfs", else the one stored selection, else
    names the keys.  A .var whose columns became strings (a CSV round trip) was sorted as text (rank 10 before 2)."""
    from bioqpfs import get

    a = adata.copy()
    with pytest.raises(KeyError, match=r"several selections are stored \('qpfs', 'qc'\); pass key="):
        get.selection_df(a)
    bioqpfs.tl.select_genes(a, "class", n_genes=5)
    assert get.selection_df(a).equals(get.selection_df(a, "bioqpfs"))
    assert pl.weights(a, show=False).get_ylabel() == "bioqpfs weight"
    one = adata.copy()
    del one.uns["qc"]
    assert get.selection_df(one).equals(get.selection_df(one, "qpfs"))
    with pytest.raises(KeyError, match=r"no selection stored under key 'other'.*stored under 'qpfs', 'qc'"):
        get.selection_df(adata, "other")
    text = adata.copy()
    text.var = text.var.astype(str)
    got = get.selection_df(text, "qpfs")
    want = get.selection_df(adata, "qpfs")
    assert list(got["gene"]) == list(want["gene"]) and got["selected"].dtype == bool
    np.testing.assert_array_equal(got["rank"], want["rank"])
    text.var.loc[text.var_names[0], "qpfs_rank"] = "first"
    with pytest.raises(ValueError, match=r"\.var\['qpfs_rank'\] holds 'first', not a number"):
        get.selection_df(text, "qpfs")


def test_weights_refuse_a_cut_beyond_the_ranked_genes(adata):
    """pl.weights(n_genes=50) with fewer genes ranked drew the cut at 50.5 and a legend "panel (12 genes)" silently;
    pl.redundancy and pl.panel refused it already, in the same words."""
    ranked = len(_ranked(adata, "qpfs"))
    with pytest.raises(ValueError, match=rf"n_genes={ranked + 1} but only {ranked} genes are ranked under 'qpfs'"):
        pl.weights(adata, "qpfs", n_genes=ranked + 1, show=False)
    pl.weights(adata, "qpfs", n_genes=ranked, show=False)


# ---- tables and objects a user has edited (stop 47 hunt) ---------------------------------------------------------
def test_weights_marks_the_selected_genes_after_a_gene_subset(adata):
    """After adata[:, genes] the stored ranks have gaps: comparing them with the panel's count marked only the
    selected genes of rank <= the count (1 of 3 here)."""
    from bioqpfs import get

    a = adata.copy()
    bioqpfs.tl.select_genes(a, "class", method="qpfs", n_genes=5, key_added="w")
    ranked = list(get.selection_df(a, "w")["gene"])
    keep = [ranked[0], ranked[3], ranked[4]] + ranked[10:12]               # selected ranks 1, 4, 5 and two others
    sub = a[:, keep].copy()
    ax = pl.weights(sub, "w", show=False)
    marked = ax.collections[0].get_offsets()[:, 0]
    np.testing.assert_array_equal(marked, [1, 2, 3])                        # the three selected genes, by position
    assert [t.get_text() for t in ax.get_legend().get_texts()][1] == "panel (3 genes)"


def test_error_curve_plot_reads_edited_tables_or_says_why_not():
    t = pd.DataFrame({"method": "qpfs", "n_genes": ["2", "4", "6", "10"], "mean_error": [0.3, 0.15, 0.1, 0.08],
                      "sd_error": [0.02] * 4, "n_folds": 10, "scoring": "error"})
    ax = pl.error_curve(t, show=False)
    np.testing.assert_array_equal(ax.get_lines()[0].get_xdata(), [2, 4, 6, 10])   # text sorted as "10" < "2"
    assert ax.get_lines()[1].get_xdata()[0] == bioqpfs.evaluate.suggest_n_genes(t)
    ax = pl.error_curve(t, band="se", show=False)                              # SE from sd / sqrt(n_folds)
    assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 1
    assert pl.error_curve(t, methods="qpfs", show=False).get_lines()[0].get_label() == "qpfs"  # not 'q','p',...
    with pytest.raises(ValueError, match="several rows for method 'qpfs' at n_genes=2; pass one error_curve table"):
        pl.error_curve(pd.concat([t, t]), show=False)                          # a zig-zag line, the mark dropped
    folds = pd.DataFrame({"method": "qpfs", "n_genes": [2, 4], "repeat": 0, "fold": [0, 1], "error": [0.1, 0.2]})
    with pytest.raises(ValueError, match="per-fold table .* pass the summary table"):
        pl.error_curve(folds, show=False)


def test_panel_and_redundancy_with_a_repeated_name_outside_the_panel_and_a_numeric_groupby(adata):
    """tl.select_genes accepts var_names repeated outside the panel; pl.panel failed in pandas ("Reindexing only
    valid with uniquely valued Index objects") and pl.redundancy refused them; an integer .obs column was binned
    into intervals by scanpy's dot plot (KeyError)."""
    a = adata.copy()
    genes = list(a.uns["qpfs"]["selected"])
    names = np.array(a.var_names, dtype=object)
    outside = [i for i, g in enumerate(names) if g not in genes][:2]
    names[outside[1]] = names[outside[0]]                                    # a repeated name, not in the panel
    a.var_names = pd.Index(names.astype(str))
    axes = pl.panel(a, "qpfs", show=False)
    assert axes
    from bioqpfs.pl._redundancy import redundancy_matrix

    np.testing.assert_allclose(redundancy_matrix(a, "qpfs")[0], redundancy_matrix(adata, "qpfs")[0])
    a.obs["code"] = a.obs["class"].cat.codes.astype(int)
    assert pl.panel(a, "qpfs", groupby="code", show=False)
    names[outside[0]] = genes[0]                                             # a panel gene's name repeated
    a.var_names = pd.Index(names.astype(str))
    with pytest.raises(ValueError, match=f"panel gene '{genes[0]}' is repeated in adata.var_names"):
        pl.redundancy(a, "qpfs", show=False)


def _labelled(X, y, **obs):
    import anndata as ad

    n, m = X.shape
    return ad.AnnData(X, obs=pd.DataFrame({"cls": y, **obs}, index=[f"s{i}" for i in range(n)]),
                      var=pd.DataFrame(index=[f"g{i}" for i in range(m)]))


def _class_genes(rng, y, m, shift=2.0):
    """Positive expression (no zeros) of m genes, the first three shifted up in one class each."""
    X = rng.lognormal(1.0, 0.5, size=(y.size, m))
    for k, c in enumerate(np.unique(y)[:3]):
        X[y == c, k] += shift
    return X


@pytest.mark.parametrize("method", ["mrmr_mid", "maxrel", "spec_cmi", "eqpfs"])
def test_redundancy_after_mask_var_uses_the_rule_the_selection_applied(method):
    """Only qpfs and qpfs_cover recorded discretization_used: for the other MI methods pl.redundancy decided
    discretization="auto" again on the whole .X, here zero-heavy (zero_quantile), while the selection saw only
    the masked genes, which have no zeros (mean_sd).  The drawn Q is now the MI of the masked panel under the rule
    the selection applied."""
    rng = np.random.default_rng(2)
    y = np.repeat(["a", "b", "c"], [30, 30, 30])
    X = np.zeros((y.size, 40))
    X[:, :12] = _class_genes(rng, y, 12)
    X[:, 12:] = rng.poisson(2.0, size=(y.size, 28)) * (rng.random((y.size, 28)) < 0.1)  # zero-heavy elsewhere
    mask = np.arange(40) < 12
    rule = measures.resolve_discretization(X[:, mask], "auto")
    assert rule == "mean_sd" and measures.resolve_discretization(X, "auto") == "zero_quantile"  # the premise
    adata = _labelled(X, y)
    bioqpfs.tl.select_genes(adata, "cls", method=method, n_genes=5, mask_var=mask, discretization="auto")
    params = adata.uns[method]["params"]
    assert params["discretization"] == "auto" and params["discretization_used"] == rule
    assert params.get("class_weight") is None
    Q, genes, _, _ = pl._redundancy.redundancy_matrix(adata, method)
    idx = adata.var_names.get_indexer(genes)
    assert mask[idx].all()
    np.testing.assert_allclose(Q, measures.mutual_information(X[:, idx], discretization=rule), rtol=1e-12,
                               atol=1e-12)


def test_redundancy_of_qpfs_uses_the_rule_decided_without_the_constant_genes():
    """QPFS leaves the constant genes out of Q and discretised the others, deciding "auto" on them, but recorded
    the rule decided on every gene: six all-zero genes made that zero_quantile, while mean_sd was applied."""
    rng = np.random.default_rng(3)
    y = np.repeat(["a", "b", "c"], [30, 30, 30])
    X = np.zeros((y.size, 12))
    X[:, :6] = _class_genes(rng, y, 6) * (rng.random((y.size, 6)) > 0.1)  # 10 % zeros; genes 6.. all zero
    assert measures.resolve_discretization(X, "auto") == "zero_quantile"
    assert measures.resolve_discretization(X[:, :6], "auto") == "mean_sd"
    adata = _labelled(X, y)
    with pytest.warns(UserWarning, match="constant"):
        bioqpfs.tl.select_genes(adata, "cls", method="qpfs", n_genes=4, discretization="auto")
    assert adata.uns["qpfs"]["params"]["discretization_used"] == "mean_sd"
    Q, genes, _, _ = pl._redundancy.redundancy_matrix(adata, "qpfs")
    idx = adata.var_names.get_indexer(genes)
    assert (idx < 6).all()
    np.testing.assert_allclose(Q, measures.mutual_information(X[:, idx], discretization="mean_sd"), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("method", ["mrmr_mid", "maxrel", "jmi", "spec_cmi", "eqpfs"])
def test_redundancy_of_a_selection_with_mdl_bins(method):
    """discretization="mdl" cuts by the class labels: the labels were loaded only when discretization_used said
    "mdl", which only qpfs recorded, so the other methods' plot failed ("pass the class labels y")."""
    rng = np.random.default_rng(4)
    y = np.repeat(["a", "b", "c"], [30, 30, 30])
    X = _class_genes(rng, y, 10)
    adata = _labelled(X, y)
    bioqpfs.tl.select_genes(adata, "cls", method=method, n_genes=4, discretization="mdl")
    assert adata.uns[method]["params"]["discretization_used"] == "mdl"
    assert pl.redundancy(adata, method, show=False).images
    Q, genes, _, _ = pl._redundancy.redundancy_matrix(adata, method)
    codes = measures.discretize(X[:, adata.var_names.get_indexer(genes)], "mdl", y=y)
    assert codes.max() > 0   # the cuts are not empty
    np.testing.assert_allclose(Q, measures.mutual_information(codes, discretization=None), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", ["qpfs", "mrmr_mid", "spec_cmi", "eqpfs"])
def test_redundancy_with_batches_and_no_class_weights(method):
    """With batch_key and no class_weight the labels are not loaded, and the per-batch discretisation indexed the
    missing labels (IndexError: array is 0-dimensional).  Q is sum_b (n_b / n) I_b, each batch binned on its own."""
    rng = np.random.default_rng(5)
    y = np.repeat(["a", "b", "c"], [40, 30, 20])
    batch = rng.choice(["x", "y"], size=y.size)
    X = _class_genes(rng, y, 10)
    X[batch == "y"] *= 3.0  # a batch effect
    adata = _labelled(X, y, b=batch)
    bioqpfs.tl.select_genes(adata, "cls", method=method, n_genes=4, batch_key="b")
    params = adata.uns[method]["params"]
    assert params.get("class_weight") is None and params["batch_discretization"] == "per_batch"
    assert params["discretization_used"] == "mean_sd"
    assert pl.redundancy(adata, method, show=False).images
    Q, genes, _, _ = pl._redundancy.redundancy_matrix(adata, method)
    idx = adata.var_names.get_indexer(genes)
    want = sum(np.mean(batch == b) * measures.mutual_information(X[np.ix_(batch == b, idx)]) for b in ("x", "y"))
    np.testing.assert_allclose(Q, want, rtol=1e-9, atol=1e-12)


CLUSTER_METHODS = ("tlkm_qpfs", "ikm_qpfs", "ikma_qpfs")


@pytest.mark.parametrize("method", [m for m in bioqpfs.methods()
                                    if "discretization" in inspect.signature(method_function(m)).parameters])
def test_every_method_that_discretises_records_the_rule_it_applied(method):
    """params["discretization_used"] is what pl.redundancy draws Q with: every method that discretises records
    it (the rule its "auto" or default setting stood for on the genes it discretised)."""
    rng = np.random.default_rng(6)
    y = np.repeat([0, 1, 2], 20)
    X = _class_genes(rng, y, 12)
    sel = bioqpfs.select(X, y, method=method, n_genes=4)
    assert sel.params["discretization_used"] == measures.resolve_discretization(X, sel.params["discretization"])
    if method not in CLUSTER_METHODS:  # these refuse "auto" (cluster means are binned by the genes' own rule)
        Z = X * (rng.random(X.shape) < 0.5)
        sel = bioqpfs.select(Z, y, method=method, n_genes=4, discretization="auto")
        assert sel.params["discretization"] == "auto" and sel.params["discretization_used"] == "zero_quantile"


def test_panel_and_redundancy_find_an_int_named_groupby_column_recorded_as_text(adata):
    """tl records groupby=0 (an int-named .obs column) as "0": pl.panel failed (TypeError while joining the column
    names of its KeyError) and pl.redundancy of the default recipe (class-weighted Q) drew Q without the labels,
    warning that the column was gone."""
    import warnings

    a = adata.copy()
    a.obs[0] = a.obs["class"]
    bioqpfs.tl.select_genes(a, 0, n_genes=6, key_added="intcol")
    bioqpfs.tl.select_genes(a, "class", n_genes=6, key_added="named")
    assert a.uns["intcol"]["params"]["groupby"] == "0"
    assert pl.panel(a, "intcol", show=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from bioqpfs.pl._redundancy import redundancy_matrix

        np.testing.assert_array_equal(redundancy_matrix(a, "intcol")[0], redundancy_matrix(a, "named")[0])
    with pytest.raises(KeyError, match="groupby='nope' is not a column of adata.obs; available: "):
        pl.panel(a, "intcol", groupby="nope", show=False)


def test_panel_groups_by_several_columns_and_names_a_recorded_column_that_is_gone(adata):
    """groupby=["lin", "class"] (as tl takes hierarchical labels) failed inside pandas ("unhashable type: 'list'");
    it groups by the columns' combinations, as scanpy does.  A recorded groupby column removed from .obs is named
    as the selection's, with the fix (pass groupby=)."""
    a = adata.copy()
    a.obs["lin"] = a.obs["class"].map({"EWS": "x", "BL": "x", "NB": "y", "RMS": "y"}).astype(str)
    axes = pl.panel(a, "qpfs", groupby=["lin", "class"], kind="matrixplot", show=False)
    labels = [t.get_text() for t in axes["mainplot_ax"].get_yticklabels()]
    assert len(labels) == a.obs["class"].nunique() and all("_" in t for t in labels)
    del a.obs["class"]
    with pytest.raises(KeyError, match=r"groupby='class' is not a column of adata.obs \(the column the selection "
                                       r"used, .uns\['qpfs'\]\['params'\]\['groupby'\]: pass groupby=\)"):
        pl.panel(a, "qpfs", show=False)


def test_error_curve_refuses_an_empty_or_repeated_methods_list():
    """methods=[] drew empty axes (and a legend warning) and methods=["a", "a"] drew the method twice in two
    colours, one-SE line included, without a word."""
    df = pd.DataFrame({"method": ["a", "a", "b", "b"], "n_genes": [2, 4, 2, 4], "mean_error": [0.4, 0.2, 0.5, 0.3],
                       "sd_error": [0.1] * 4, "se_error": [0.05] * 4})
    for methods in ([], ["a", "a"]):
        with pytest.raises(ValueError, match=r"methods must name each method to draw once, got .*present: \['a', 'b'\]"):
            pl.error_curve(df, methods=methods, show=False)
    assert len(pl.error_curve(df, methods=["b"], show=False).lines) >= 1


def test_panel_whose_genes_were_all_subset_away_says_so(adata):
    """After adata[:, other_genes] removed every panel gene, pl.panel / pl.redundancy said only "no gene is marked
    selected", as if the selection had chosen none; the error says the stored panel's genes are gone."""
    genes = set(adata.uns["qpfs"]["selected"])
    a = adata[:, [g for g in adata.var_names if g not in genes]].copy()
    for plot in (pl.panel, pl.redundancy):
        with pytest.raises(ValueError, match=r"none of the 8 genes of the stored panel \(.uns\['qpfs'\]\['selected'\]\) "
                                             r"is in adata.var any more .*pass n_genes="):
            plot(a, "qpfs", show=False)
    assert pl.redundancy(a, "qpfs", n_genes=3, show=False) is not None


def test_panel_partly_subset_away_warns_naming_the_missing_genes(adata):
    """Before: with some panel genes subset away (adata[:, genes]), pl.panel / pl.redundancy drew the genes left
    without a word, as if the panel were smaller."""
    panel = list(adata.uns["qpfs"]["selected"])
    gone = [panel[1], panel[4]]
    a = adata[:, [g for g in adata.var_names if g not in gone]].copy()
    for plot in (pl.panel, pl.redundancy):
        with pytest.warns(UserWarning, match=rf"2 of the 8 genes of the panel stored under 'qpfs' are not in "
                                             rf"adata.var any more .*: {gone[0]}, {gone[1]}; drawing the 6 left"):
            plot(a, "qpfs", show=False)
    import warnings

    with warnings.catch_warnings():   # the whole panel present, or n_genes= chosen: no warning
        warnings.simplefilter("error")
        pl.redundancy(adata, "qpfs", show=False)
        pl.redundancy(a, "qpfs", n_genes=3, show=False)


def test_error_curve_with_an_all_nan_score_refuses_or_warns():
    """Before: a mean_<score> column of NaN only (a scoring that failed on every fold) drew an empty plot, and a
    method whose scores were all NaN had a legend entry and no line, silently."""
    t = pd.DataFrame({"method": ["a"] * 3 + ["b"] * 3, "n_genes": [2, 4, 6] * 2,
                      "mean_error": [np.nan] * 3 + [0.3, 0.2, 0.1], "sd_error": 0.01, "scoring": "error"})
    with pytest.raises(ValueError, match=r"column 'mean_error' has no finite value for method 'a' \(all NaN\): "
                                         r"nothing to draw"):
        pl.error_curve(t, methods=["a"], show=False)
    assert plt.get_fignums() == []
    with pytest.warns(UserWarning, match=r"column 'mean_error' has no finite value for method\(s\) 'a' \(all NaN\)"):
        ax = pl.error_curve(t, show=False)
    assert len(ax.lines) >= 2


@pytest.mark.parametrize("kind", ["dotplot", "heatmap", "matrixplot"])
def test_panel_draws_the_groups_present_when_a_category_has_no_cell(adata, kind):
    """A category no cell has (left by a cell subset, adata[adata.obs["class"] != "BL"] as a view or after
    remove/add of categories) made pl.panel fail inside pandas ("['ZZ'] not in index") instead of drawing the
    groups present; their colours stay theirs."""
    a = adata.copy()
    a.obs["class"] = a.obs["class"].cat.add_categories(["ZZ"])
    a.uns["class_colors"] = np.array(["#111111", "#222222", "#333333", "#444444", "#555555"])
    axes = pl.panel(a, "qpfs", kind=kind, show=False)
    if kind != "heatmap":
        shown = [t.get_text() for t in axes["mainplot_ax"].get_yticklabels()]
        assert shown == list(adata.obs["class"].cat.categories)
    assert list(a.obs["class"].cat.categories)[-1] == "ZZ" and len(a.uns["class_colors"]) == 5   # left as it was
    view = adata[adata.obs["class"] != adata.obs["class"].cat.categories[0]]
    assert pl.panel(view, "qpfs", kind=kind, show=False)


def test_redundancy_names_the_recorded_matrix_that_is_gone(adata):
    """The selection's layer (or .raw) removed since: pl.redundancy said only "layer 'l' not found" (or "use_raw=True
    but adata.raw is not set", a parameter the caller never passed); it says the selection read it, and how to go on."""
    a = adata.copy()
    a.layers["l"] = a.X.copy()
    bioqpfs.tl.select_genes(a, "class", method="qpfs", n_genes=4, layer="l", key_added="L")
    a.raw = a.copy()
    bioqpfs.tl.select_genes(a, "class", method="qpfs", n_genes=4, key_added="R")
    del a.layers["l"]
    a.raw = None
    with pytest.raises(KeyError, match=r"the selection read adata.layers\['l'\] \(.uns\['L'\]\['params'\]\), which "
                                       r"this AnnData no longer has; pass layer= or use_raw="):
        pl.redundancy(a, "L", show=False)
    with pytest.raises(KeyError, match=r"the selection read adata.raw \(.uns\['R'\]\['params'\]\)"):
        pl.redundancy(a, "R", show=False)
    assert pl.redundancy(a, "L", use_raw=False, show=False) is not None


def test_panel_labels_genes_by_a_gene_symbols_column(adata):
    """var_names as Ensembl IDs with symbols in .var: pl.panel(..., gene_symbols="gene_symbols") passed the panel's
    IDs to scanpy, which looked them up among the symbols and failed ("Could not find keys [...]"); the genes are
    labelled by the column, in rank order, as scanpy's own gene_symbols= does."""
    a = adata.copy()
    a.var["gene_symbols"] = [f"SYM{i}" for i in range(a.n_vars)]
    genes = list(_ranked(a, "qpfs").index[:8])
    axs = pl.panel(a, "qpfs", gene_symbols="gene_symbols", show=False)
    shown = [t.get_text() for t in axs["mainplot_ax"].get_xticklabels()]
    assert shown == list(a.var.loc[genes, "gene_symbols"])
    axs = pl.panel(a, "qpfs", kind="heatmap", gene_symbols="gene_symbols", show=False)
    assert [t.get_text() for t in axs["heatmap_ax"].get_xticklabels()] == list(a.var.loc[genes, "gene_symbols"])
    with pytest.raises(KeyError, match="gene_symbols='symbol' is not a column of adata.var"):
        pl.panel(a, "qpfs", gene_symbols="symbol", show=False)


def test_weights_and_redundancy_label_genes_by_a_gene_symbols_column(adata):
    """var_names as Ensembl IDs: pl.weights and pl.redundancy had no gene_symbols= (a TypeError), so their gene
    labels were IDs while scanpy's plots (and pl.panel) showed symbols."""
    a = adata.copy()
    a.var["gene_symbols"] = [f"SYM{i}" for i in range(a.n_vars)]
    genes = list(_ranked(a, "qpfs").index[:8])
    symbols = list(a.var.loc[genes, "gene_symbols"])
    ax = pl.weights(a, "qpfs", label_top=3, gene_symbols="gene_symbols", show=False)
    assert [t.get_text() for t in ax.texts] == symbols[:3]
    ax = pl.redundancy(a, "qpfs", gene_symbols="gene_symbols", show=False)
    assert [t.get_text() for t in ax.get_xticklabels()] == symbols
    assert [t.get_text() for t in ax.get_yticklabels()] == symbols
    for plot in (pl.weights, pl.redundancy):
        with pytest.raises(KeyError, match="gene_symbols='symbol' is not a column of adata.var"):
            plot(a, "qpfs", gene_symbols="symbol", show=False)
