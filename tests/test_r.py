"""The R face (bioqpfs.r, rpy2): conversions, select_genes on R objects, and QPFS against R's quadprog.

Needs R, the Bioconductor packages and rpy2 (``pip install .[r]``); ``bash dev.sh test`` installs
them and sets BIOQPFS_REQUIRE_R=1, which turns a missing rpy2/R into a failure instead of a skip.
"""
from __future__ import annotations

import os
import warnings

import numpy as np
import pandas as pd
import pytest
from reference import one_se_size

if os.environ.get("BIOQPFS_REQUIRE_R") != "1":
    pytest.importorskip("rpy2.robjects", reason="rpy2/R not installed (pip install .[r]); set BIOQPFS_REQUIRE_R=1 to fail instead")

import rpy2.robjects as ro  # noqa: E402
from rpy2.robjects import default_converter  # noqa: E402
from rpy2.robjects.conversion import localconverter  # noqa: E402

import bioqpfs  # noqa: E402
from bioqpfs import r as br  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def R(code):
    with localconverter(default_converter):
        return ro.r(code)


@pytest.fixture(scope="module", autouse=True)
def _r_session():
    R("suppressPackageStartupMessages({library(SummarizedExperiment); library(SingleCellExperiment); "
      "library(Biobase); library(Matrix)})")
    yield
    # R flushes pending warnings (e.g. about the site library) when the embedded session ends at
    # interpreter exit, i.e. after pytest's summary line: drop them and mute R's console from here on.
    from rpy2.rinterface_lib import callbacks

    R('options(warn = -1); if (exists("last.warning", envir = baseenv())) assign("last.warning", NULL, envir = baseenv())')
    callbacks.consolewrite_print = lambda s: None
    callbacks.consolewrite_warnerror = lambda s: None


def rvalue(code, obj):
    """Evaluate ``function(x) <code>`` on an R object; return a Python list of the (atomic) result."""
    with localconverter(default_converter):
        return list(ro.r(f"function(x) {{ {code} }}")(obj))


def rtrue(code, obj):
    out = rvalue(code, obj)
    assert out == [True], f"R: {code} -> {out}"


# 8 genes x 5 samples; X[j, i] (sample j, gene i) = sin(8 j + i + 1), written independently in R and numpy
R_MATRIX = 'matrix(sin(seq_len(40)), 8, 5, dimnames = list(paste0("g", 1:8), paste0("s", 1:5)))'
EXPECTED_X = np.sin(np.arange(1, 41)).reshape(5, 8)

SE_CODE = f"""
SummarizedExperiment(
  assays = list(logcounts = {R_MATRIX}, counts = matrix(1:40, 8, 5)),
  rowData = DataFrame(symbol = letters[1:8], len = c(1:7, NA), score = c(seq(0.5, 3.5, 0.5), NaN)),
  colData = DataFrame(type = factor(c("b", "a", "b", NA, "a"), levels = c("b", "a")),
                      ok = c(TRUE, NA, FALSE, TRUE, TRUE), batch = c("x", "y", NA, "x", "y")),
  metadata = list(study = "toy", version = 2L, weights = c(0.25, 0.75), nested = list(flag = TRUE)))
"""


def test_summarizedexperiment_roundtrip_keeps_values_dimnames_and_annotations():
    se = R(SE_CODE)
    a = br.to_anndata(se)
    np.testing.assert_array_equal(a.X, EXPECTED_X)
    assert list(a.obs_names) == [f"s{i}" for i in range(1, 6)]
    assert list(a.var_names) == [f"g{i}" for i in range(1, 9)]
    np.testing.assert_array_equal(a.layers["counts"], np.arange(1, 41).reshape(5, 8))
    assert list(a.obs["type"].cat.categories) == ["b", "a"]
    assert a.obs["type"].isna().tolist() == [False, False, False, True, False]
    assert a.obs["ok"].tolist()[:1] == [True] and pd.isna(a.obs["ok"].iloc[1])
    assert a.obs["batch"].tolist() == ["x", "y", None, "x", "y"]
    assert a.var["symbol"].tolist() == list("abcdefgh")
    assert pd.isna(a.var["len"].iloc[7]) and a.var["len"].iloc[6] == 7
    assert a.uns["study"] == "toy" and a.uns["version"] == 2 and a.uns["nested"] == {"flag": True}
    np.testing.assert_array_equal(a.uns["weights"], [0.25, 0.75])
    assert a.uns["bioqpfs_r"] == {"class": "SummarizedExperiment", "assay": "logcounts"}

    back = br.from_anndata(a)
    assert rvalue("class(x)", back) == ["SummarizedExperiment"]
    with localconverter(default_converter):
        same = ro.r("""function(x, y) c(
          identical(assay(x, "logcounts"), assay(y, "logcounts")),
          identical(assay(x, "counts", withDimnames = TRUE), assay(y, "counts", withDimnames = TRUE)),
          identical(assayNames(x), assayNames(y)),
          identical(as.data.frame(rowData(x)), as.data.frame(rowData(y))),
          identical(as.data.frame(colData(x)), as.data.frame(colData(y))),
          identical(metadata(x), metadata(y)))""")(se, back)
    assert list(same) == [True] * 6


def test_singlecellexperiment_roundtrip_with_sparse_counts_and_reduced_dims():
    sce = R(f"""local({{
      m <- {R_MATRIX}
      counts <- Matrix::sparseMatrix(i = c(1, 3, 8, 2), j = c(1, 1, 4, 5), x = c(5, 1, 2, 7), dims = c(8, 5),
                                     dimnames = dimnames(m))
      SingleCellExperiment(assays = list(counts = counts, logcounts = m),
                           colData = DataFrame(type = c("a", "b", "a", "b", "a")),
                           reducedDims = list(PCA = matrix(seq_len(10) / 4, 5, 2)))
    }})""")
    a = br.to_anndata(sce, assay="logcounts")
    np.testing.assert_array_equal(a.X, EXPECTED_X)
    counts = a.layers["counts"]
    assert counts.format == "csr"
    dense = np.zeros((5, 8))
    dense[0, 0], dense[0, 2], dense[3, 7], dense[4, 1] = 5, 1, 2, 7
    np.testing.assert_array_equal(counts.toarray(), dense)
    np.testing.assert_array_equal(a.obsm["PCA"], np.arange(1, 11).reshape(2, 5).T / 4)
    back = br.from_anndata(a)
    with localconverter(default_converter):
        same = ro.r("""function(x, y) c(
          is(y, "SingleCellExperiment"), is(assay(y, "counts"), "dgCMatrix"),
          all(as.matrix(assay(x, "counts")) == as.matrix(assay(y, "counts"))),
          identical(assay(x, "logcounts"), assay(y, "logcounts")),
          identical(unname(reducedDim(x, "PCA")), unname(reducedDim(y, "PCA"))),
          identical(colnames(x), colnames(y)), identical(x$type, y$type))""")(sce, back)
    assert list(same) == [True] * 7


def test_expressionset_roundtrip():
    es = R(f"""local({{
      e <- ExpressionSet({R_MATRIX},
        phenoData = AnnotatedDataFrame(data.frame(type = c("a", "b", "a", "b", "a"), age = c(30, 41, NA, 25, 60),
                                                  row.names = paste0("s", 1:5))),
        featureData = AnnotatedDataFrame(data.frame(chr = paste0("chr", 1:8), row.names = paste0("g", 1:8))))
      notes(e) <- list(lab = "toy")
      e
    }})""")
    a = br.to_anndata(es)
    np.testing.assert_array_equal(a.X, EXPECTED_X)
    assert a.obs["type"].tolist() == list("ababa")
    assert np.isnan(a.obs["age"].iloc[2]) and a.obs["age"].iloc[4] == 60
    assert a.var["chr"].tolist() == [f"chr{i}" for i in range(1, 9)]
    assert a.uns["lab"] == "toy" and a.uns["bioqpfs_r"]["assay"] == "exprs"
    back = br.from_anndata(a)
    with localconverter(default_converter):
        same = ro.r("""function(x, y) c(is(y, "ExpressionSet"), identical(exprs(x), exprs(y)),
                                       identical(pData(x), pData(y)), identical(fData(x), fData(y)),
                                       identical(notes(x), notes(y)))""")(es, back)
    assert list(same) == [True] * 5


def test_matrix_roundtrip_and_class_override():
    m = R(R_MATRIX)
    a = br.to_anndata(m)
    np.testing.assert_array_equal(a.X, EXPECTED_X)
    rtrue(f"identical(x, {R_MATRIX})", br.from_anndata(a))
    se = br.from_anndata(a, to="SummarizedExperiment", assay="logcounts")
    rtrue(f'identical(assay(x, "logcounts"), {R_MATRIX})', se)


def test_conversion_errors_are_specific():
    se = R(SE_CODE)
    with pytest.raises(Exception, match="assay 'tpm' not found; available: logcounts, counts"):
        br.to_anndata(se, assay="tpm")
    with pytest.raises(Exception, match="cannot convert an object of class 'list'"):
        br.to_anndata(R("list(a = 1)"))


def toy_expression(n_per_class=12, n_genes=30, seed=7):
    rng = np.random.default_rng(seed)
    y = np.repeat(["A", "B", "C"], n_per_class)
    X = rng.normal(size=(y.size, n_genes))
    X[y == "A", 0] += 4
    X[y == "B", 1] += 4
    X[y == "C", 2] -= 4
    return X, y


@pytest.mark.parametrize("container", ["SummarizedExperiment", "SingleCellExperiment", "ExpressionSet", "matrix"])
def test_select_genes_on_r_objects_equals_tl_select_genes(container):
    import anndata as ad

    X, y = toy_expression()
    adata = ad.AnnData(X=X, obs=pd.DataFrame({"type": pd.Categorical(y)}, index=[f"s{i}" for i in range(y.size)]),
                       var=pd.DataFrame(index=[f"g{i}" for i in range(X.shape[1])]))
    robj = br.from_anndata(adata, to=container, assay="logcounts" if container != "ExpressionSet" else "exprs")
    labels = "type" if container != "matrix" else ro.StrVector(list(y))
    out = br.select_genes(robj, labels, method="qpfs", n_genes=5, key_added="panel", similarity="correlation")

    converted = br.to_anndata(robj)
    if container == "matrix":
        converted.obs["type"] = pd.Categorical(y)
    bioqpfs.tl.select_genes(converted, "type", method="qpfs", n_genes=5, key_added="panel", similarity="correlation")

    getter = {"ExpressionSet": "fData(x)", "matrix": "x"}.get(container, "rowData(x)")
    record = {"ExpressionSet": "notes(x)", "matrix": "metadata(x)"}.get(container, "metadata(x)")
    np.testing.assert_array_equal(rvalue(f"{getter}$panel_weight", out), converted.var["panel_weight"].to_numpy())
    np.testing.assert_array_equal(rvalue(f"{getter}$panel_rank", out), converted.var["panel_rank"].to_numpy())
    assert rvalue(f"{getter}$panel_selected", out) == converted.var["panel_selected"].tolist()
    assert rvalue(f"{record}$panel$selected", out) == list(converted.uns["panel"]["selected"])
    assert rvalue(f"{record}$panel$params$similarity", out) == ["correlation"]
    assert rvalue(f"{record}$panel$params$alpha", out) == [converted.uns["panel"]["params"]["alpha"]]
    if container != "matrix":   # the input's own annotations survive
        assert rvalue("ncol(x)", out) == [y.size]


@pytest.mark.parametrize("container", ["SummarizedExperiment", "ExpressionSet", "matrix"])
def test_select_genes_default_is_the_default_recipe_of_every_face(container):
    """method=None runs bioqpfs.DEFAULT_PANEL under the key "bioqpfs", recorded as preset "default"."""
    import anndata as ad

    X, y = toy_expression()
    adata = ad.AnnData(X=X, obs=pd.DataFrame({"type": pd.Categorical(y)}, index=[f"s{i}" for i in range(y.size)]),
                       var=pd.DataFrame(index=[f"g{i}" for i in range(X.shape[1])]))
    robj = br.from_anndata(adata, to=container)
    labels = "type" if container != "matrix" else ro.StrVector(list(y))
    out = br.select_genes(robj, labels, n_genes=5)
    named = br.select_genes(robj, labels, method="qpfs_cover", class_weight="balanced", discretization="auto",
                            relevance_bins="per_class", relevance="auto", self_redundancy="constant", n_genes=5,
                            key_added="bioqpfs")
    # independent reference: the recipe written out by hand on the arrays, through bioqpfs.select
    ref = bioqpfs.select(X, y, method="qpfs_cover", class_weight="balanced", discretization="auto",
                         relevance_bins="per_class", relevance="auto", self_redundancy="constant", n_genes=5)

    getter = {"ExpressionSet": "fData(x)", "matrix": "x"}.get(container, "rowData(x)")
    record = {"ExpressionSet": "notes(x)", "matrix": "metadata(x)"}.get(container, "metadata(x)")
    np.testing.assert_allclose(rvalue(f"{getter}$bioqpfs_weight", out), ref.weights, rtol=0, atol=1e-12)
    assert rvalue(f"{getter}$bioqpfs_selected", out) == ref.selected_mask.tolist()
    for col in ("weight", "rank", "selected", "class"):
        assert rvalue(f"{getter}$bioqpfs_{col}", out) == rvalue(f"{getter}$bioqpfs_{col}", named), col
    assert rvalue(f"{record}$bioqpfs$params$method", out) == ["qpfs_cover"]
    assert rvalue(f"{record}$bioqpfs$params$preset", out) == ["default"]
    assert rvalue(f"{record}$bioqpfs$params$preset", named) == ["paper"]
    assert rvalue(f"{record}$bioqpfs$params$class_weight", out) == ["balanced"]
    assert rvalue(f"{record}$bioqpfs$params$discretization", out) == ["auto"]
    assert rvalue(f"{record}$bioqpfs$selected", out) == rvalue(f"{record}$bioqpfs$selected", named)
    # a parameter given with the default overrides the recipe's, still recorded as the default preset
    quantile = br.select_genes(robj, labels, n_genes=5, discretization="quantile")
    assert rvalue(f"{record}$bioqpfs$params$discretization", quantile) == ["quantile"]
    assert rvalue(f"{record}$bioqpfs$params$preset", quantile) == ["default"]


def test_reticulate_default_is_the_default_recipe():
    """The R package's route with method = NULL: same key, preset and numbers as tl.select_genes(method=None)."""
    import anndata as ad

    X, y = toy_expression(seed=11)
    data = np.asfortranarray(X.T).astype("<f8").tobytes(order="F")
    genes = [f"g{i}" for i in range(X.shape[1])]
    res = br._reticulate_select(bytearray(data), X.shape[0], X.shape[1], genes, list(y), method=None, n_genes=4.0,
                                params={"n_bins": 3.0})
    assert res["key"] == "bioqpfs"
    adata = ad.AnnData(X=X.copy(), obs=pd.DataFrame({"labels": pd.Categorical(y)}, index=[str(i) for i in range(y.size)]),
                       var=pd.DataFrame(index=genes))
    bioqpfs.tl.select_genes(adata, "labels", n_genes=4, n_bins=3)
    assert res["columns"]["bioqpfs_weight"] == adata.var["bioqpfs_weight"].tolist()
    assert res["columns"]["bioqpfs_class"] == adata.var["bioqpfs_class"].tolist()
    params = res["record"]["params"]
    assert params["method"] == "qpfs_cover" and params["preset"] == "default"
    assert params["class_weight"] == "balanced" and params["discretization"] == "auto"
    assert isinstance(params["n_bins"], int)   # whole R numbers coerced for the resolved method
    ref = bioqpfs.select(X, y, method="qpfs_cover", class_weight="balanced", discretization="auto", n_bins=3,
                         relevance_bins="per_class", relevance="auto", self_redundancy="constant", n_genes=4)
    np.testing.assert_allclose(res["columns"]["bioqpfs_weight"], ref.weights, rtol=0, atol=1e-12)
    assert res["record"]["selected"] == [genes[i] for i in ref.selected]


def test_backend_reaches_the_engine_from_both_r_routes():
    """R's selectGenes(..., backend = ) and rpy2's select_genes(..., backend=) reach tl.select_genes's backend:
    "cpu" gives the panel of no backend, an unknown one the engine's error naming the choices."""
    X, y = toy_expression(seed=3)
    data = np.asfortranarray(X.T).astype("<f8").tobytes(order="F")
    genes = [f"g{i}" for i in range(X.shape[1])]
    plain = br._reticulate_select(bytearray(data), X.shape[0], X.shape[1], genes, list(y), method="qpfs", n_genes=4.0)
    cpu = br._reticulate_select(bytearray(data), X.shape[0], X.shape[1], genes, list(y), method="qpfs", n_genes=4.0,
                                params={"backend": "cpu"})
    assert cpu["record"]["selected"] == plain["record"]["selected"]
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'cpu', 'gpu', got 'tpu'"):
        br._reticulate_select(bytearray(data), X.shape[0], X.shape[1], genes, list(y), method="qpfs", n_genes=4.0,
                              params={"backend": "tpu"})
    import anndata as ad

    adata = ad.AnnData(X=X, obs=pd.DataFrame({"type": pd.Categorical(y)}, index=[f"s{i}" for i in range(y.size)]),
                       var=pd.DataFrame(index=genes))
    robj = br.from_anndata(adata, to="SummarizedExperiment", assay="logcounts")
    out = br.select_genes(robj, "type", method="qpfs", n_genes=4, backend="cpu")
    assert rvalue("metadata(x)$qpfs$selected", out) == plain["record"]["selected"]
    with pytest.raises(ValueError, match="got 'tpu'"):
        br.select_genes(robj, "type", method="qpfs", n_genes=4, backend="tpu")


def test_select_genes_label_errors():
    X, y = toy_expression()
    se = R("function(m, y) SummarizedExperiment(assays = list(logcounts = t(m)), colData = DataFrame(type = y))")(
        ro.r.matrix(ro.FloatVector(X.ravel()), nrow=X.shape[0], byrow=True), ro.StrVector(list(y)))
    with pytest.raises(KeyError, match="'celltype' is not a column of colData\\(x\\); available: type"):
        br.select_genes(se, "celltype")
    y_na = list(y)
    y_na[3] = None
    with pytest.raises(ValueError, match="1 missing value"):
        br.select_genes(se, ro.StrVector([ro.NA_Character if v is None else v for v in y_na]))
    with pytest.raises(ValueError, match="labels has 35 values but the object has 36 samples"):
        br.select_genes(se, list(y[:-1]))


def test_reticulate_entry_point_matches_tl_on_raw_bytes():
    """The R package's route: column-major genes x samples doubles as bytes -> same result as tl."""
    import anndata as ad

    X, y = toy_expression(seed=11)
    data = np.asfortranarray(X.T).astype("<f8").tobytes(order="F")   # what writeBin(as.double(m)) sends
    genes = [f"g{i}" for i in range(X.shape[1])]
    res = br._reticulate_select(bytearray(data), X.shape[0], X.shape[1], genes, list(y), method="qpfs", n_genes=4.0,
                                params={"n_bins": 3.0})
    assert res["key"] == "qpfs"
    adata = ad.AnnData(X=X.copy(), obs=pd.DataFrame({"c": pd.Categorical(y)}, index=[str(i) for i in range(y.size)]),
                       var=pd.DataFrame(index=genes))
    bioqpfs.tl.select_genes(adata, "c", method="qpfs", n_genes=4, n_bins=3)
    assert res["columns"]["qpfs_weight"] == adata.var["qpfs_weight"].tolist()
    assert res["columns"]["qpfs_selected"] == adata.var["qpfs_selected"].tolist()
    assert res["record"]["selected"] == list(adata.uns["qpfs"]["selected"])
    assert isinstance(res["record"]["params"]["n_bins"], int)
    # plain types only (None becomes R's NULL); an absent value is None, never the string "None"
    assert all(type(v) in (list, dict, str, int, float, bool, type(None)) for v in res["record"]["diagnostics"].values())
    params = res["record"]["params"]
    assert params["layer"] is None and params["mask_var"] is None and params["groupby"] == "labels"
    assert "None" not in [v for v in params.values() if isinstance(v, str)]


R_QPFS = """
function(X, y) {
  # QPFS of section 2 written out in R: mean +- sd bins (2.5), MI by table(), alpha_hat (eq. 9),
  # smallest diagonal shift making (1 - alpha) Q definite, then quadprog::solve.QP on the simplex.
  codes <- apply(X, 2, function(v) { mu <- mean(v); s <- sd(v); ifelse(v <= mu - s, 0L, ifelse(v <= mu + s, 1L, 2L)) })
  H <- function(...) { p <- as.vector(table(...)) / length(..1); p <- p[p > 0]; -sum(p * log2(p)) }
  m <- ncol(codes)
  Q <- matrix(0, m, m)
  for (i in seq_len(m)) for (j in seq_len(m))
    Q[i, j] <- H(codes[, i]) + H(codes[, j]) - H(codes[, i], codes[, j])
  F <- vapply(seq_len(m), function(i) H(codes[, i]) + H(y) - H(codes[, i], y), numeric(1))
  alpha <- mean(Q) / (mean(Q) + mean(F))
  G <- (1 - alpha) * Q
  lmin <- min(eigen(G, symmetric = TRUE, only.values = TRUE)$values)
  shift <- max(0, 1e-9 * max(abs(diag(G))) - lmin)
  sol <- quadprog::solve.QP(G + shift * diag(m), alpha * F, cbind(1, diag(m)), c(1, rep(0, m)), meq = 1)
  list(x = sol$solution, alpha = alpha, shift = shift, F = F)
}
"""


def test_qpfs_weights_equal_r_quadprog_on_srbct_subset():
    adata = bioqpfs.datasets.srbct()
    X = np.asarray(adata.X[:, :40], dtype=np.float64)
    y = adata.obs["class"].astype(str).to_numpy()
    sel = bioqpfs.qpfs(X, y, psd_fix="shift")  # the convexified problem R's quadprog can solve
    with localconverter(default_converter):
        Xr = ro.r.matrix(ro.FloatVector(X.ravel()), nrow=X.shape[0], byrow=True)
        out = ro.r(R_QPFS)(Xr, ro.StrVector(list(y)))
        x = np.array(out.rx2("x"))
        alpha = out.rx2("alpha")[0]
        shift = out.rx2("shift")[0]
    assert sel.params["alpha"] == pytest.approx(alpha, abs=1e-12)
    assert sel.diagnostics["psd_shift"] == pytest.approx(shift, abs=1e-10)
    np.testing.assert_allclose(sel.weights, x, atol=1e-8, rtol=0)
    assert np.count_nonzero(sel.weights) < X.shape[1]        # a sparse optimum: the test checks the support too


@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_reticulate_blocks_keep_sparse_and_record_groupby_assay(fmt, monkeypatch):
    """The R package's block route (sparse dgCMatrix slots or DelayedMatrix blocks of samples) rebuilds the
    matrix exactly; sparse stays sparse; groupby/assay are recorded; ranks come back as integers."""
    import anndata as ad
    import scipy.sparse as sp

    X, y = toy_expression(seed=5)
    X = np.maximum(X, 0.0)                                 # about half zeros
    genes = [f"g{i}" for i in range(X.shape[1])]
    n, m = X.shape
    token = f"test-{fmt}"
    for start in range(0, n, 7):                           # blocks of 7 samples, the last one shorter
        block = X[start:start + 7]
        if fmt == "dense":   # R: writeBin(as.double(block)) of the genes x samples block, column-major
            br._reticulate_receive(token, n, m, start, block.shape[0], bytearray(block.astype("<f8").tobytes()))
        else:                # R: the dgCMatrix slots x, i, p of the genes x samples block
            csc = sp.csc_matrix(block.T)
            br._reticulate_receive(token, n, m, start, block.shape[0], bytearray(csc.data.astype("<f8").tobytes()),
                                   bytearray(csc.indices.astype("<i4").tobytes()),
                                   bytearray(csc.indptr.astype("<i4").tobytes()))
    captured = {}
    real = bioqpfs.tl.select_genes

    def spy(adata, *args, **kwargs):
        captured["X"] = adata.X
        return real(adata, *args, **kwargs)

    monkeypatch.setattr(bioqpfs.tl, "select_genes", spy)
    res = br._reticulate_select(token, n, m, genes, list(y), method="mrmr_mid", n_genes=3.0,
                                groupby="cell_type", assay="logcounts")
    monkeypatch.undo()
    assert res["transfer"] == {"format": fmt, "blocks": -(-n // 7)}
    assert sp.issparse(captured["X"]) == (fmt == "csr")
    got = captured["X"].toarray() if sp.issparse(captured["X"]) else captured["X"]
    np.testing.assert_array_equal(got, X)
    assert not br._INCOMING                                 # taken, not kept
    adata = ad.AnnData(X=X.copy(), obs=pd.DataFrame({"c": pd.Categorical(y)}, index=[str(i) for i in range(n)]),
                       var=pd.DataFrame(index=genes))
    bioqpfs.tl.select_genes(adata, "c", method="mrmr_mid", n_genes=3)
    assert res["columns"]["mrmr_mid_weight"] == adata.var["mrmr_mid_weight"].tolist()
    assert res["kinds"]["mrmr_mid_rank"] == "integer"
    ranks = np.array(res["columns"]["mrmr_mid_rank"])
    np.testing.assert_array_equal(ranks, adata.var["mrmr_mid_rank"].to_numpy())   # NaN = unranked (NA in R)
    assert res["record"]["params"]["groupby"] == "cell_type" and res["record"]["params"]["assay"] == "logcounts"


def test_reticulate_bad_blocks_are_refused():
    with pytest.raises(ValueError, match="do not fit a 4 x 3 matrix"):
        br._reticulate_receive("bad", 3, 4, 2, 2, bytearray(np.zeros(8).tobytes()))
    br._reticulate_receive("short", 3, 4, 0, 2, bytearray(np.zeros(8).tobytes()))
    with pytest.raises(ValueError, match="received 2 of 3 samples"):
        br._reticulate_select("short", 3, 4, list("abcd"), ["a", "b", "a"])
    with pytest.raises(ValueError, match="no matrix was received under 'nothing'"):
        br._reticulate_select("nothing", 3, 4, list("abcd"), ["a", "b", "a"])
    br._reticulate_receive("left", 3, 4, 0, 1, bytearray(np.zeros(4).tobytes()))
    br._reticulate_discard()
    assert not br._INCOMING


def test_select_genes_on_r_objects_records_assay_and_integer_ranks():
    X, y = toy_expression()
    se = R("function(m, y) SummarizedExperiment(assays = list(counts = t(m) + 10, logcounts = t(m)), "
           "colData = DataFrame(cell_type = y))")(
        ro.r.matrix(ro.FloatVector(X.ravel()), nrow=X.shape[0], byrow=True), ro.StrVector(list(y)))
    out = br.select_genes(se, "cell_type", method="mrmr_mid", n_genes=3, assay="logcounts")
    assert rvalue("metadata(x)$mrmr_mid$params$groupby", out) == ["cell_type"]
    assert rvalue("metadata(x)$mrmr_mid$params$assay", out) == ["logcounts"]
    rtrue("is.integer(rowData(x)$mrmr_mid_rank)", out)
    ranks = rvalue("rowData(x)$mrmr_mid_rank", out)
    assert sorted(r for r in ranks if r != ro.NA_Integer) == [1, 2, 3]
    assert sum(r == ro.NA_Integer for r in ranks) == X.shape[1] - 3


# --------------------------------------------------------------------------------------------
# n_genes="auto" on the R faces (issue 15 item 4): the choice and the curve go to metadata()
# --------------------------------------------------------------------------------------------
def planted_weak(seed=1, n=80, m=60, k=12):
    """Two classes, genes 0..k-1 each shifted by 0.8 in class B: the CV error falls with panel size for a while."""
    rng = np.random.default_rng(seed)
    y = np.repeat(["A", "B"], n // 2)
    X = rng.normal(size=(n, m))
    X[y == "B", :k] += 0.8
    return X, y


def test_n_genes_auto_on_both_r_routes_records_the_choice_and_the_curve():
    """rpy2's select_genes and the R package's entry point take n_genes="auto": the curve they record is the
    error_curve of the method run directly on the data (default grid capped at 60 genes, 5-fold, seed 0), the
    choice is the one-SE size of that curve, and exactly that many genes are selected."""
    X, y = planted_weak()
    genes = [f"g{i}" for i in range(X.shape[1])]
    grid = [5, 10, 15, 20, 30, 40, 50, 60]
    ref = bioqpfs.evaluate.error_curve(X, y, [("mrmr_mid", {})], n_genes=grid, cv=5, random_state=0)
    chosen = one_se_size(ref["n_genes"], ref["mean_error"], ref["se_error"])
    assert 5 < chosen < 60                     # a curve with something to choose

    import anndata as ad

    se = br.from_anndata(ad.AnnData(X=X, obs=pd.DataFrame({"type": y}, index=[f"s{i}" for i in range(y.size)]),
                                    var=pd.DataFrame(index=genes)), to="SummarizedExperiment", assay="logcounts")
    out = br.select_genes(se, "type", method="mrmr_mid", n_genes="auto")
    auto = "metadata(x)$mrmr_mid$n_genes_auto"
    assert rvalue(f"{auto}$n_genes", out) == [chosen]
    assert rvalue("metadata(x)$mrmr_mid$params$n_genes", out) == [chosen]
    assert rvalue(f"{auto}$grid", out) == grid
    assert rvalue(f"{auto}$curve$n_genes", out) == grid
    np.testing.assert_allclose(rvalue(f"{auto}$curve$mean_error", out), ref["mean_error"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(rvalue(f"{auto}$curve$se_error", out), ref["se_error"], rtol=0, atol=1e-12)
    rtrue("is.data.frame(as.data.frame(metadata(x)$mrmr_mid$n_genes_auto$curve))", out)
    assert sum(rvalue("rowData(x)$mrmr_mid_selected", out)) == chosen

    data = np.asfortranarray(X.T).astype("<f8").tobytes(order="F")
    res = br._reticulate_select(bytearray(data), X.shape[0], X.shape[1], genes, list(y), method="mrmr_mid",
                                n_genes="auto")
    rec = res["record"]["n_genes_auto"]
    assert rec["n_genes"] == chosen and res["record"]["params"]["n_genes"] == chosen and rec["grid"] == grid
    np.testing.assert_allclose(rec["curve"]["mean_error"], ref["mean_error"], rtol=0, atol=1e-12)
    assert all(type(v) is list for v in rec["curve"].values())      # plain lists: no NumPy crosses reticulate
    assert sum(res["columns"]["mrmr_mid_selected"]) == chosen
    assert res["columns"]["mrmr_mid_selected"] == rvalue("rowData(x)$mrmr_mid_selected", out)
    with pytest.raises(ValueError, match="n_genes must be a positive integer or 'auto' \\(lower case\\)"):
        br._reticulate_select(bytearray(data), X.shape[0], X.shape[1], genes, list(y), method="mrmr_mid",
                              n_genes="Auto")


def test_select_genes_block_is_the_batch_as_a_column_or_a_vector():
    """rpy2's select_genes(block=) (the R package's name) = bioqpfs.select(batch=) on the same data, whether the
    batches are a colData column or a vector; it changes the result (the planted gene 3 differs by batch only)."""
    X, y = toy_expression()
    batch = np.tile(["d1", "d2"], y.size // 2)
    X[batch == "d2", 3] += 3
    se = R("function(m, y, b) SummarizedExperiment(assays = list(logcounts = t(m)), colData = DataFrame(type = y, "
           "donor = b))")(ro.r.matrix(ro.FloatVector(X.ravel()), nrow=X.shape[0], byrow=True), ro.StrVector(list(y)),
                         ro.StrVector(list(batch)))
    ref = bioqpfs.select(X, y, method="mrmr_mid", n_genes=4, batch=batch)
    plain = bioqpfs.select(X, y, method="mrmr_mid", n_genes=4)
    assert not np.array_equal(ref.ranking, plain.ranking)
    for block in ("donor", ro.StrVector(list(batch)), list(batch)):
        out = br.select_genes(se, "type", method="mrmr_mid", n_genes=4, block=block)
        ranks = np.array(rvalue("rowData(x)$mrmr_mid_rank", out))
        np.testing.assert_array_equal(np.argsort(np.where(ranks == ro.NA_Integer, 10**6, ranks))[:4], ref.selected)
        assert rvalue("metadata(x)$mrmr_mid$params$batch_key", out) == ["donor" if block == "donor" else "block"]
    with pytest.raises(TypeError, match="block= .* or batch_key=, not both"):
        br.select_genes(se, "type", block="donor", batch_key="donor")
    with pytest.raises(KeyError, match="block='plate' is not a column of colData"):
        br.select_genes(se, "type", block="plate")
    with pytest.raises(ValueError, match="block has 35 values but the object has 36 samples"):
        br.select_genes(se, "type", block=list(batch[:-1]))


def _toy_se(X, y, extra=""):
    return R("function(m, y) SummarizedExperiment(assays = list(logcounts = t(m), counts = round(exp(t(m)))), "
             f"colData = DataFrame(type = y, row.names = paste0('s', seq_along(y)){extra}))")(
        ro.r.matrix(ro.FloatVector(X.ravel()), nrow=X.shape[0], byrow=True), ro.StrVector(list(y)))


def _panel(out, key, getter="rowData(x)"):
    ranks = np.array(rvalue(f"{getter}${key}_rank", out))
    return list(np.argsort(np.where(ranks == ro.NA_Integer, 10**6, ranks), kind="stable"))


def test_select_genes_matches_a_labels_series_by_sample_name():
    """A pandas Series of labels in another sample order (stop 47 hunt): bioqpfs.select matches it by name; the
    rpy2 route took it by position, silently scrambling the classes."""
    X, y = toy_expression()
    se = _toy_se(X, y)
    names = [f"s{i + 1}" for i in range(y.size)]
    shuffled = pd.Series(y, index=names).sample(frac=1, random_state=1)
    ref = bioqpfs.select(X, y, method="qpfs", n_genes=5)
    out = br.select_genes(se, shuffled, method="qpfs", n_genes=5)
    assert _panel(out, "qpfs")[:5] == list(ref.selected)
    with pytest.raises(ValueError, match="the index of labels does not match the sample names"):
        br.select_genes(se, pd.Series(y, index=[f"x{i}" for i in range(y.size)]), method="qpfs", n_genes=5)


def test_select_genes_reads_logcounts_of_a_singlecellexperiment_as_the_r_package():
    X, y = toy_expression()
    sce = R("function(se) as(se, 'SingleCellExperiment')")(_toy_se(X, y))    # counts is not the first assay...
    sce = R("function(x) { SummarizedExperiment::assays(x) <- rev(SummarizedExperiment::assays(x)); x }")(sce)
    assert rvalue("assayNames(x)", sce) == ["counts", "logcounts"]          # ...now it is
    out = br.select_genes(sce, "type", method="qpfs", n_genes=5)
    assert rvalue("metadata(x)$qpfs$params$assay", out) == ["logcounts"]
    assert _panel(out, "qpfs")[:5] == list(bioqpfs.select(X, y, method="qpfs", n_genes=5).selected)


def test_select_genes_never_overwrites_a_users_column_and_replaces_its_own():
    X, y = toy_expression()
    se = _toy_se(X, y)
    first = br.select_genes(se, "type", n_genes=5, key_added="k")           # the default recipe writes k_class
    assert "k_class" in rvalue("colnames(rowData(x))", first)
    again = br.select_genes(first, "type", method="qpfs", n_genes=5, key_added="k")
    assert rvalue("colnames(rowData(x))", again) == ["k_weight", "k_rank", "k_selected"]   # no stale k_class
    assert rvalue("metadata(x)$k$var_columns", again) == ["k_weight", "k_rank", "k_selected"]
    mine = R("function(x) { SummarizedExperiment::rowData(x)$qpfs_selected <- 'validated'; x }")(se)
    with pytest.raises(ValueError, match="rowData\\(x\\) has column\\(s\\) qpfs_selected that were not written"):
        br.select_genes(mine, "type", method="qpfs", n_genes=5)
    noted = R("function(x) { S4Vectors::metadata(x)$qpfs <- list(note = 'curated'); x }")(se)
    with pytest.raises(ValueError, match="metadata\\(x\\)\\['qpfs'\\] exists and was not written by bioqpfs"):
        br.select_genes(noted, "type", method="qpfs", n_genes=5)


def test_select_genes_block_vector_beside_a_labels_column_named_block():
    X, y = toy_expression()
    se = _toy_se(X, y, extra=", block = y")                                  # the classes, in a column 'block'
    batches = list(np.tile(["b1", "b2"], y.size // 2))
    out = br.select_genes(se, "block", method="mrmr_mid", n_genes=4, block=batches)
    ref = bioqpfs.select(X, y, method="mrmr_mid", n_genes=4, batch=np.array(batches))
    assert _panel(out, "mrmr_mid")[:4] == list(ref.selected)
    assert rvalue("metadata(x)$mrmr_mid$params$batch_key", out) == ["block_1"]


def test_metadata_na_in_integer_and_logical_vectors_stays_numeric():
    """metadata(x) integer/logical vectors with NA came back as strings ('1', 'None'); now float64 with NaN."""
    se = R('SummarizedExperiment(list(a = matrix(1:4, 2, 2)), metadata = list(i = c(1L, NA, 3L), '
           'l = c(TRUE, NA, FALSE), l1 = NA, ok = c(2L, 5L), d = c(1.5, NA)))')
    uns = br.to_anndata(se).uns
    np.testing.assert_array_equal(uns["i"], [1.0, np.nan, 3.0])
    assert uns["i"].dtype == np.float64
    np.testing.assert_array_equal(uns["l"], [1.0, np.nan, 0.0])
    assert isinstance(uns["l1"], float) and np.isnan(uns["l1"])
    assert uns["ok"].dtype.kind == "i" and list(uns["ok"]) == [2, 5]   # without NA: unchanged
    np.testing.assert_array_equal(uns["d"], [1.5, np.nan])
    back = br.from_anndata(br.to_anndata(se))   # and back to R: NA, not the string "None"
    rtrue('is.double(metadata(x)$i) && identical(is.na(metadata(x)$i), c(FALSE, TRUE, FALSE))', back)


def test_select_genes_missing_labels_in_r_words():
    """NA labels or batches on an R object: the message named adata.obs and advised adata = adata[...].copy()."""
    se = R('s <- SummarizedExperiment(list(logcounts = matrix(sin(1:120), 4, 30, dimnames = list(paste0("g", 1:4), '
           'paste0("s", 1:30)))), colData = DataFrame(type = factor(rep(c("a", "b", NA), 10)), '
           'batch = rep(c("x", NA), 15))); s')
    for labels, block, match in (("type", None, r"labels column 'type' has 10 missing value\(s\) \(samples s3, "),
                                 (R("rep(c('a', NA), 15)"), None, r"labels has 15 missing value\(s\) \(samples s2, "),
                                 (R("rep(c('a', 'b'), 15)"), "batch", r"block column 'batch' has 15 missing")):
        with pytest.raises(ValueError, match=match) as info:
            br.select_genes(se, labels, block=block, method="qpfs", n_genes=2)
        assert "adata" not in str(info.value) and "!is.na(" in str(info.value)


def test_select_genes_without_row_names_names_genes_from_one():
    """A matrix without row names failed after the selection ("40 elements in value to replace 0 elements"), and an
    SE without row names recorded the panel as AnnData's 0-based names; both now use 1, 2, ... as selectGenes()."""
    X, y = toy_expression()
    m = R("function(m) t(m)")(ro.r.matrix(ro.FloatVector(X.ravel()), nrow=X.shape[0], byrow=True))
    out = br.select_genes(m, ro.StrVector(list(y)), method="qpfs", n_genes=3)
    assert rvalue("rownames(x)", out) == [str(i) for i in range(1, X.shape[1] + 1)]
    rtrue("setequal(metadata(x)$qpfs$selected, rownames(x)[x$qpfs_selected])", out)
    se = R("function(m, y) SummarizedExperiment(assays = list(logcounts = m), colData = DataFrame(type = y))")(
        m, ro.StrVector(list(y)))
    out = br.select_genes(se, "type", method="qpfs", n_genes=3)
    rtrue("is.null(rownames(x)) && setequal(metadata(x)$qpfs$selected, "
          "as.character(which(rowData(x)$qpfs_selected)))", out)


def test_repeated_rowdata_and_coldata_names_are_made_unique_with_a_warning():
    """Two rowData (colData) columns of one name: to_anndata kept the last one and dropped the first silently; now
    both are kept, named as R's make.unique() names them (the first keeps the name, as x$name reads it in R)."""
    se = R('SummarizedExperiment(list(logcounts = matrix(sin(1:24), 4, 6, dimnames = list(paste0("g", 1:4), '
           'paste0("s", 1:6)))), rowData = DataFrame(sym = letters[1:4], sym = LETTERS[1:4], sym.1 = 1:4, '
           'check.names = FALSE), colData = DataFrame(type = rep(c("a", "b"), 3), type = rep(c("u", "v", "w"), 2), '
           'check.names = FALSE))')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        adata = br.to_anndata(se)
    messages = [str(w.message) for w in caught if "repeated column name(s) made unique" in str(w.message)]
    assert len(messages) == 2 and "(sym -> sym.2)" in messages[1] and "(type -> type.1)" in messages[0]
    assert list(adata.var.columns) == ["sym", "sym.2", "sym.1"]
    assert list(adata.var["sym"]) == list("abcd") and list(adata.var["sym.2"]) == list("ABCD")
    assert list(adata.obs.columns) == ["type", "type.1"]
    assert list(adata.obs["type"]) == ["a", "b"] * 3 and list(adata.obs["type.1"]) == ["u", "v", "w"] * 2
    rtrue('identical(make.unique(c("sym", "sym", "sym.1")), c("sym", "sym.2", "sym.1"))', se)


def test_reticulate_warnings_given_before_an_error_reach_r():
    """selectGenes(): the engine's warnings came back only with a result, so a call that then failed lost them (the
    R user saw the error alone); _reticulate_discard, which R's error handler calls, now hands them over."""
    X, y = toy_expression(seed=11)
    data = np.asfortranarray(X.T).astype("<f8").tobytes(order="F")
    genes = [f"g{i}" for i in range(X.shape[1])]
    genes[1] = "g0"   # genes 0 and 1 both separate classes: the panel holds a repeated name (an error, after a warning)
    with pytest.raises(ValueError, match=r"not unique in rownames\(x\) \(g0\)"):
        br._reticulate_select(bytearray(data), X.shape[0], X.shape[1], genes, list(y), method="qpfs", n_genes=4.0)
    messages = br._reticulate_discard()
    assert len(messages) == 1 and "rownames(x) are not unique" in messages[0] and "adata" not in messages[0]
    assert br._reticulate_discard() == []   # handed over once
    genes[1] = "g1"
    res = br._reticulate_select(bytearray(data), X.shape[0], X.shape[1], genes, list(y), method="qpfs", n_genes=4.0)
    assert res["warnings"] == [] and br._reticulate_discard() == []
