"""Backed (lazy) AnnData read in sample chunks (issue 13 item 4): tl, evaluate and the CLI.

Oracle: the in-memory AnnData of the same file, run through the same public function (the lazy path counts
the same codes chunk by chunk; unweighted counts are exact).  Memory: the whole-matrix read
(``_io.read_backed``) must not run, and no read of the file may return more rows than a chunk.  Bad input:
the file deleted or changed between building the graph and computing it.
"""
from __future__ import annotations

import os
import re

import anndata as ad
import dask.array as da  # the dev extra installs dask on both CI legs: a missing install must fail
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import bioqpfs
from bioqpfs import _io, _registry, cli

N, M, CHUNK = 240, 25, 64


@pytest.fixture
def h5ad(rng, tmp_path, request):
    """An .h5ad with dense or CSR X (``request.param``: sparse?) and its in-memory AnnData."""
    sparse = getattr(request, "param", False)
    y = rng.integers(0, 4, N)
    X = rng.lognormal(size=(N, M)) * (rng.random((N, M)) < 0.5)
    X[:, :4] += y[:, None] * rng.random(4)
    obs = pd.DataFrame({"cell_type": pd.Categorical(np.array(list("abcd"))[y])}, index=[f"c{i}" for i in range(N)])
    mem = ad.AnnData(sp.csr_matrix(X) if sparse else X, obs=obs,
                     var=pd.DataFrame(index=[f"g{j}" for j in range(M)]))
    path = tmp_path / "a.h5ad"
    mem.write_h5ad(path)
    return path, mem


@pytest.fixture
def spy(monkeypatch):
    """Records the row ranges read lazily, and fails if the whole-matrix read runs."""
    reads = []
    read_rows = _io._read_rows

    def rows(filename, elem, start, stop, **kw):
        reads.append((start, stop))
        return read_rows(filename, elem, start, stop, **kw)

    def whole(*a, **k):
        raise AssertionError("the backed X was read whole")

    monkeypatch.setattr(_io, "_read_rows", rows)
    monkeypatch.setattr("bioqpfs._anndata.read_backed", whole)
    return reads


def _backed(path):
    return ad.read_h5ad(path, backed="r")


@pytest.mark.parametrize("h5ad", [False, True], ids=["dense", "csr"], indirect=True)
@pytest.mark.parametrize("method,params", [("qpfs", dict(discretization="mean_sd")),
                                           ("qpfs_cover", dict(discretization="mean_sd")),
                                           ("qpfs_cover", dict(discretization="mean_sd", relevance="auto")),
                                           ("qpfs", dict(discretization="mean_sd", nystrom_rate=0.4)),
                                           ("spec_cmi", dict(discretization="mean_sd"))],
                         ids=["qpfs", "qpfs_cover", "qpfs_cover pair-order", "qpfs nystrom", "spec_cmi"])
def test_backed_anndata_is_read_in_chunks_and_gives_the_in_memory_selection(h5ad, spy, method, params):
    path, mem = h5ad
    bioqpfs.tl.select_genes(mem, "cell_type", method=method, n_genes=6, **params)
    backed = _backed(path)
    bioqpfs.tl.select_genes(backed, "cell_type", method=method, n_genes=6, chunk_size=CHUNK,
                            mask_var=np.arange(M) != 3, **params)
    bioqpfs.tl.select_genes(mem, "cell_type", method=method, n_genes=6, mask_var=np.arange(M) != 3, **params)
    assert backed.isbacked and not isinstance(backed.X, (np.ndarray, sp.spmatrix, da.Array))  # still on disk
    np.testing.assert_allclose(backed.var[f"{method}_weight"], mem.var[f"{method}_weight"], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(backed.var[f"{method}_rank"], mem.var[f"{method}_rank"])
    assert list(backed.uns[method]["selected"]) == list(mem.uns[method]["selected"])
    assert spy and max(b - a for a, b in spy) <= CHUNK
    assert {a for a, _ in spy} == {0, 64, 128, 192}
    backed.file.close()


@pytest.mark.parametrize("h5ad", [True], ids=["csr"], indirect=True)
def test_the_default_recipe_reads_a_backed_zero_inflated_x_in_chunks(h5ad, spy):
    """method=None: qpfs_cover with discretization='auto' -> zero_quantile on this half-zero X, now exact on Dask."""
    path, mem = h5ad
    bioqpfs.tl.select_genes(mem, "cell_type", n_genes=6)
    backed = _backed(path)
    bioqpfs.tl.select_genes(backed, "cell_type", n_genes=6, chunk_size=CHUNK)
    assert mem.uns["bioqpfs"]["params"]["discretization"] == "auto"
    # the recipe's Q has a zero diagonal (self_redundancy="constant"): each QP is definite by the psd shift's
    # margin only, so the chunked MI's last-bit differences reach the weights at ~1e-9; the ranking is the same
    np.testing.assert_allclose(backed.var["bioqpfs_weight"], mem.var["bioqpfs_weight"], rtol=0, atol=1e-8)
    np.testing.assert_array_equal(backed.var["bioqpfs_rank"], mem.var["bioqpfs_rank"])
    assert list(backed.uns["bioqpfs"]["selected"]) == list(mem.uns["bioqpfs"]["selected"])
    assert spy and max(b - a for a, b in spy) <= CHUNK
    backed.file.close()


@pytest.mark.parametrize("h5ad", [True], ids=["csr"], indirect=True)
def test_the_default_recipe_passes_over_a_backed_x(h5ad, spy):
    """The Dask-path check reads nothing ('auto' is asked of both rules it can become, not resolved on X), and the
    zero fraction of 'auto' and the per-class bins' zero test come from the validation pass: 15 passes over the
    file, not 18."""
    path, _ = h5ad
    X = _io.lazy_rows(path, "X", chunk_size=CHUNK)
    assert _registry.dask_refusal("qpfs_cover", {"discretization": "auto"}, X) is None
    assert "mdl" in _registry.dask_refusal("qpfs_cover", {"discretization": "mdl"}, X)
    assert spy == []
    backed = _backed(path)
    bioqpfs.tl.select_genes(backed, "cell_type", n_genes=6, chunk_size=CHUNK)
    assert sum(a == 0 for a, _ in spy) <= 15
    backed.file.close()


@pytest.mark.parametrize("h5ad", [True], ids=["csr"], indirect=True)
@pytest.mark.parametrize("method", ["qpfs_cover", "mrmr_mid"])
def test_batch_key_on_a_backed_anndata_is_read_in_chunks(h5ad, spy, method):
    """batch_key with a backed X: per-batch thresholds and counts chunk by chunk, the in-memory result."""
    path, mem = h5ad
    mem.obs["donor"] = pd.Categorical(np.array(["d1", "d2", "d3"])[np.arange(N) % 3])
    bioqpfs.tl.select_genes(mem, "cell_type", method=method, n_genes=6, batch_key="donor")
    backed = _backed(path)
    backed.obs["donor"] = mem.obs["donor"].to_numpy()
    bioqpfs.tl.select_genes(backed, "cell_type", method=method, n_genes=6, batch_key="donor", chunk_size=CHUNK)
    np.testing.assert_allclose(backed.var[f"{method}_weight"], mem.var[f"{method}_weight"], rtol=0, atol=1e-12)
    assert list(backed.uns[method]["selected"]) == list(mem.uns[method]["selected"])
    assert spy and max(b - a for a, b in spy) <= CHUNK
    backed.file.close()


@pytest.mark.parametrize("h5ad", [True], ids=["csr"], indirect=True)
@pytest.mark.parametrize("method,params,most", [
    ("qpfs", {"discretization": "mean_sd"}, 6), ("qpfs_cover", {"discretization": "auto"}, 11),
    ("qpfs", {"similarity": "correlation", "relevance": "hall"}, 8)],
    ids=["mean_sd", "default recipe (zero_quantile)", "pearson+hall (within-batch standardisation)"])
def test_per_batch_thresholds_read_x_as_often_for_any_number_of_batches(h5ad, spy, method, params, most):
    """Per-batch statistics on a backed X: every batch's moments (mean +- sd thresholds, within-batch
    standardisation) or order statistics (quantiles) in the same passes -- an atlas has tens of donors, and each
    batch used to cost its own passes over the file (mean +- sd: 9 reads of a chunk with 2 batches, 27 with 8;
    |Pearson| + Hall: 10 and 22) --
    and the in-memory selection."""
    path, mem = h5ad
    reads = {}
    for n_batches in (2, 8):
        mem.obs["donor"] = pd.Categorical([f"d{i % n_batches}" for i in range(N)])
        bioqpfs.tl.select_genes(mem, "cell_type", method=method, n_genes=6, batch_key="donor", **params)
        backed = _backed(path)
        backed.obs["donor"] = mem.obs["donor"].to_numpy()
        spy.clear()
        bioqpfs.tl.select_genes(backed, "cell_type", method=method, n_genes=6, batch_key="donor", chunk_size=CHUNK,
                                **params)
        reads[n_batches] = sum(a == 0 for a, _ in spy)  # reads of the first chunk
        np.testing.assert_allclose(backed.var[f"{method}_weight"], mem.var[f"{method}_weight"], rtol=0, atol=1e-12)
        assert list(backed.uns[method]["selected"]) == list(mem.uns[method]["selected"])
        backed.file.close()
    assert reads[8] == reads[2] <= most, reads


@pytest.mark.parametrize("h5ad", [True], ids=["csr"], indirect=True)
def test_evaluate_on_a_backed_anndata_equals_in_memory(h5ad, spy):
    path, mem = h5ad
    kw = dict(n_genes=[3, 5], cv=3, method_params={"qpfs": {"discretization": "mean_sd"}}, return_folds=True)
    want = bioqpfs.evaluate.error_curve(mem, "cell_type", ["qpfs"], **kw)
    backed = _backed(path)
    got = bioqpfs.evaluate.error_curve(backed, "cell_type", ["qpfs"], chunk_size=100, **kw)
    pd.testing.assert_frame_equal(got[1], want[1])
    cols = [c for c in want[0].columns if c != "seconds_select"]
    pd.testing.assert_frame_equal(got[0][cols], want[0][cols])
    assert spy and max(b - a for a, b in spy) <= 100
    # a fixed ranking needs no selection: the panel's columns are read in chunks too
    panel = {"panel": list(mem.var_names[:4])}
    spy.clear()
    got = bioqpfs.evaluate.error_curve(backed, "cell_type", panel, n_genes=[2, 4], cv=3, chunk_size=100)
    want = bioqpfs.evaluate.error_curve(mem, "cell_type", panel, n_genes=[2, 4], cv=3)
    np.testing.assert_array_equal(got["mean_error"], want["mean_error"])
    assert spy
    backed.file.close()


@pytest.mark.parametrize("h5ad", [True], ids=["csr"], indirect=True)
def test_a_method_without_a_dask_path_reads_x_whole_after_a_memory_check(h5ad, monkeypatch):
    path, mem = h5ad
    backed = _backed(path)
    bioqpfs.tl.select_genes(backed, "cell_type", method="ikm_qpfs", n_genes=5)
    bioqpfs.tl.select_genes(mem, "cell_type", method="ikm_qpfs", n_genes=5)
    np.testing.assert_array_equal(backed.var["ikm_qpfs_rank"], mem.var["ikm_qpfs_rank"])
    # the MST relevance has no Dask path either (the reason is logged)
    bioqpfs.tl.select_genes(backed, "cell_type", method="qpfs", n_genes=5, relevance="mst")
    # a file larger than the memory available is refused before the read, naming the fix
    monkeypatch.setattr("bioqpfs._validation.available_memory", lambda: (1000, "available physical memory"))
    with pytest.raises(MemoryError, match=r"reading X of .*a\.h5ad whole \(method 'ikm_qpfs' has no Dask path.*"
                                          r"needs about .*any discretization but 'mdl'"):
        bioqpfs.tl.select_genes(backed, "cell_type", method="ikm_qpfs", n_genes=5)
    with pytest.raises(MemoryError, match=r"discretization='mdl' is not available for a Dask array"):
        bioqpfs.tl.select_genes(backed, "cell_type", method="qpfs", n_genes=5, discretization="mdl")
    monkeypatch.setitem(__import__("sys").modules, "dask.array", None)  # dask not installed
    with pytest.raises(MemoryError, match=r"dask is not installed.*pip install 'bioqpfs\[dask\]'"):
        bioqpfs.tl.select_genes(backed, "cell_type", method="qpfs", n_genes=5)
    backed.file.close()


@pytest.fixture
def h5ad_with_raw(rng, tmp_path):
    """An .h5ad as scanpy leaves it: scaled dense X of 25 genes, and ``.raw`` with the CSR counts of 35 genes in
    another order (X's genes among them); its in-memory AnnData."""
    n_raw = M + 10
    y = rng.integers(0, 4, N)
    counts = rng.poisson(0.8, size=(N, n_raw)).astype(np.float32)
    counts[:, :6] += y[:, None] * rng.integers(1, 3, 6)
    raw_names = np.array([f"g{j}" for j in range(n_raw)])
    kept = np.sort(rng.permutation(n_raw)[:M])[::-1]
    obs = pd.DataFrame({"cell_type": pd.Categorical(np.array(list("abcd"))[y])}, index=[f"c{i}" for i in range(N)])
    mem = ad.AnnData(rng.normal(size=(N, M)), obs=obs, var=pd.DataFrame(index=raw_names[kept]))
    mem.raw = ad.AnnData(sp.csr_matrix(np.log1p(counts)), obs=obs, var=pd.DataFrame(index=raw_names))
    path = tmp_path / "raw.h5ad"
    mem.write_h5ad(path)
    return path, mem


@pytest.mark.parametrize("method,params,atol", [("qpfs", dict(discretization="mean_sd"), 1e-12),
                                                (None, {}, 1e-8)], ids=["qpfs", "default recipe"])
def test_a_backed_raw_is_read_in_chunks(h5ad_with_raw, spy, monkeypatch, method, params, atol):
    """use_raw=None reads .raw when it is set (scanpy's rule): of a backed file, .raw.X is read in sample chunks
    too, its columns of adata.var_names taken chunk by chunk -- it used to be read whole, with no memory check and
    no log line -- and the in-memory AnnData's panel comes out."""
    path, mem = h5ad_with_raw
    elems = []
    read_rows = _io._read_rows
    monkeypatch.setattr(_io, "_read_rows", lambda filename, elem, *a, **k: elems.append(elem) or read_rows(
        filename, elem, *a, **k))
    key = method or "bioqpfs"
    bioqpfs.tl.select_genes(mem, "cell_type", method=method, n_genes=6, **params)
    backed = _backed(path)
    bioqpfs.tl.select_genes(backed, "cell_type", method=method, n_genes=6, chunk_size=CHUNK, **params)
    assert set(elems) == {"raw/X"} and spy and max(b - a for a, b in spy) <= CHUNK
    np.testing.assert_allclose(backed.var[f"{key}_weight"], mem.var[f"{key}_weight"], rtol=0, atol=atol)
    np.testing.assert_array_equal(backed.var[f"{key}_rank"], mem.var[f"{key}_rank"])
    assert list(backed.uns[key]["selected"]) == list(mem.uns[key]["selected"])
    backed.file.close()


def test_a_backed_raw_read_whole_is_checked_against_the_memory_first(h5ad_with_raw, monkeypatch):
    """Read whole (a method without a Dask path), a backed .raw gives the in-memory matrix: anndata's backed
    ``raw[:, adata.var_names].X`` is the stored matrix whole, in its own gene order (35 genes for 25: an error;
    the same genes in another order: a panel of the wrong names, silently)."""
    from bioqpfs._anndata import get_obs_rep

    path, mem = h5ad_with_raw
    backed = _backed(path)
    np.testing.assert_array_equal(get_obs_rep(backed).toarray(), get_obs_rep(mem).toarray())
    bioqpfs.tl.select_genes(backed, "cell_type", method="ikm_qpfs", n_genes=5)  # no Dask path: read whole
    bioqpfs.tl.select_genes(mem, "cell_type", method="ikm_qpfs", n_genes=5)
    np.testing.assert_array_equal(backed.var["ikm_qpfs_rank"], mem.var["ikm_qpfs_rank"])
    monkeypatch.setattr("bioqpfs._validation.available_memory", lambda: (1000, "available physical memory"))
    with pytest.raises(MemoryError, match=r"reading raw/X of .*raw\.h5ad whole \(method 'ikm_qpfs' has no Dask path"):
        bioqpfs.tl.select_genes(backed, "cell_type", method="ikm_qpfs", n_genes=5)
    backed.file.close()
    renamed = _with_gene_not_in_raw(mem, path.with_name("renamed.h5ad"))
    with pytest.raises(ValueError, match=r"1 gene\(s\) of adata.var are not in adata.raw.*use_raw=False"):
        bioqpfs.tl.select_genes(renamed, "cell_type", method="qpfs", n_genes=2)
    renamed.file.close()


@pytest.mark.parametrize("method", ["ikm_qpfs", "qpfs"], ids=["read whole", "read in chunks"])
def test_a_backed_raw_of_the_same_genes_in_another_order_names_the_right_genes(rng, tmp_path, method):
    """The silent case of anndata's backed raw subsetting: the same genes in another order gave a panel of the
    right size under the wrong names."""
    y = rng.integers(0, 3, N)
    counts = rng.poisson(0.8, size=(N, M)).astype(np.float64)
    counts[:, 2] += 3 * (y == 1)
    names = np.array([f"g{j}" for j in range(M)])
    obs = pd.DataFrame({"cell_type": pd.Categorical(np.array(list("abc"))[y])}, index=[f"c{i}" for i in range(N)])
    mem = ad.AnnData(rng.normal(size=(N, M)), obs=obs, var=pd.DataFrame(index=names[::-1]))
    mem.raw = ad.AnnData(sp.csr_matrix(np.log1p(counts)), obs=obs, var=pd.DataFrame(index=names))
    mem.write_h5ad(tmp_path / "same.h5ad")
    backed = _backed(tmp_path / "same.h5ad")
    for adata in (mem, backed):
        bioqpfs.tl.select_genes(adata, "cell_type", method=method, n_genes=3)
    assert list(backed.uns[method]["selected"]) == list(mem.uns[method]["selected"])
    assert "g2" in list(mem.uns[method]["selected"])
    backed.file.close()


@pytest.mark.parametrize("method", ["ikm_qpfs", "qpfs"], ids=["read whole", "read in chunks"])
def test_a_raw_with_a_repeated_gene_name_is_read_unless_the_name_is_one_of_var(rng, tmp_path, method):
    """A name twice in ``.raw`` gave pandas' "Reindexing only valid with uniquely valued Index objects" (in memory
    and backed), even when ``.var`` does not hold it: now such a ``.raw`` is read (the panel is the one of a
    ``.raw`` without the extra column), and a repeated name that ``.var`` holds is refused by name."""
    y = rng.integers(0, 3, N)
    counts = rng.poisson(0.8, size=(N, M + 1)).astype(np.float64)
    counts[:, 2] += 3 * (y == 1)
    names = np.array([f"g{j}" for j in range(M)] + ["g0"])  # g0 twice in .raw
    obs = pd.DataFrame({"cell_type": pd.Categorical(np.array(list("abc"))[y])}, index=[f"c{i}" for i in range(N)])
    with pytest.warns(UserWarning, match="not unique"):  # anndata warns and keeps them
        raw = ad.AnnData(sp.csr_matrix(np.log1p(counts)), obs=obs, var=pd.DataFrame(index=names))
    var = names[1:M][::-1]  # not g0
    mem = ad.AnnData(rng.normal(size=(N, var.size)), obs=obs, var=pd.DataFrame(index=var))
    mem.raw = raw
    mem.write_h5ad(tmp_path / "dup.h5ad")
    plain = ad.AnnData(np.log1p(counts[:, 1:M][:, ::-1]), obs=obs, var=pd.DataFrame(index=var))
    bioqpfs.tl.select_genes(plain, "cell_type", method=method, n_genes=3)
    backed = _backed(tmp_path / "dup.h5ad")
    for adata in (mem, backed):
        bioqpfs.tl.select_genes(adata, "cell_type", method=method, n_genes=3)
        assert list(adata.uns[method]["selected"]) == list(plain.uns[method]["selected"])
        np.testing.assert_array_equal(adata.var[f"{method}_rank"], plain.var[f"{method}_rank"])
    backed.file.close()
    with_g0 = ad.AnnData(rng.normal(size=(N, 2)), obs=obs, var=pd.DataFrame(index=["g1", "g0"]))
    with_g0.raw = raw
    with pytest.raises(ValueError, match=r"1 gene\(s\) of adata.var occur more than once in adata.raw "
                                         r"\(e.g. \['g0'\]\).*use_raw=False"):
        bioqpfs.tl.select_genes(with_g0, "cell_type", method=method, n_genes=1)


def _with_gene_not_in_raw(mem, path):
    """``mem`` with one gene of ``.var`` renamed (so it is missing from ``.raw``), written to ``path``, opened backed."""
    renamed = mem.copy()
    renamed.var_names = ["not_in_raw", *renamed.var_names[1:]]
    renamed.write_h5ad(path)
    return _backed(path)


@pytest.mark.parametrize("bad", [0, -5, 2.5, "10"])
def test_bad_chunk_size_is_refused_before_any_read(h5ad, spy, bad):
    path, mem = h5ad
    backed = _backed(path)
    with pytest.raises((ValueError, TypeError), match="chunk_size"):
        bioqpfs.tl.select_genes(backed, "cell_type", method="qpfs", n_genes=5, chunk_size=bad)
    with pytest.raises((ValueError, TypeError), match="chunk_size"):
        bioqpfs.evaluate.error_curve(backed, "cell_type", ["qpfs"], n_genes=[3], cv=3, chunk_size=bad)
    assert spy == [] and "qpfs_weight" not in backed.var
    backed.file.close()
    with pytest.raises((ValueError, TypeError), match="chunk_size"):   # read_lazy clamped these to 1-row chunks
        bioqpfs.read_lazy(path, chunk_size=bad)


def test_dask_refusal_names_each_reason(rng):
    X = da.from_array(rng.random((20, 3)), chunks=(10, 3))
    assert _registry.dask_refusal("qpfs", {}, X) is None
    assert _registry.dask_refusal("spec_cmi_nystrom", {"discretization": "mean_sd"}, X) is None
    assert "no Dask path" in _registry.dask_refusal("ikm_qpfs", {}, X)
    assert _registry.dask_refusal("jmi", {}, X) is None
    assert _registry.dask_refusal("qpfs", {"similarity": "correlation", "relevance": "hall"}, X) is None
    assert "relevance='mst'" in _registry.dask_refusal("qpfs", {"relevance": "mst"}, X)
    assert _registry.dask_refusal("qpfs_cover", {"batch": np.zeros(20)}, X) is None
    Z = da.from_array(np.where(rng.random((20, 3)) < 0.5, 0.0, 1.0), chunks=(10, 3))
    assert _registry.dask_refusal("qpfs_cover", {"discretization": "auto"}, Z) is None  # zero_quantile on Dask
    assert "discretization='mdl'" in _registry.dask_refusal("qpfs", {"discretization": "mdl"}, X)


# ---- CLI ------------------------------------------------------------------------------------------------------
def _select(path, out, *extra):
    return cli.main(["select", str(path), "--groupby", "cell_type", "--method", "qpfs", "--discretization",
                     "mean_sd", "--n-genes", "5", "-o", str(out), "--tsv", str(out) + ".tsv", *extra])


@pytest.mark.parametrize("h5ad", [True], ids=["csr"], indirect=True)
def test_cli_chunk_size_on_a_backed_file_equals_the_in_memory_run(h5ad, tmp_path, monkeypatch, capfd):
    path, _ = h5ad
    monkeypatch.setattr(_io, "PROGRESS_SECONDS", 0.0)
    assert _select(path, tmp_path / "mem.h5ad", "--no-lazy") == 0
    capfd.readouterr()
    with monkeypatch.context() as m:  # anndata's write of a backed AnnData would read a sparse X's arrays whole
        m.setattr(ad.AnnData, "write_h5ad", lambda *a, **k: pytest.fail("backed AnnData written by anndata"))
        assert _select(path, tmp_path / "lazy.h5ad", "--lazy", "--chunk-size", "100") == 0
    err = capfd.readouterr().err
    assert f"read rows 200..239 (chunk 3 of 3) of X in {path}" in err  # progress per chunk
    assert (tmp_path / "lazy.h5ad.tsv").read_text() == (tmp_path / "mem.h5ad.tsv").read_text()
    a, b = ad.read_h5ad(tmp_path / "mem.h5ad"), ad.read_h5ad(tmp_path / "lazy.h5ad")
    pd.testing.assert_frame_equal(a.var, b.var)
    assert (a.X != b.X).nnz == 0  # the output holds the input's X
    assert list(a.uns["qpfs"]["selected"]) == list(b.uns["qpfs"]["selected"])
    assert {k: str(v) for k, v in a.uns["qpfs"]["params"].items()} == \
        {k: str(v) for k, v in b.uns["qpfs"]["params"].items()}
    assert _select(path, tmp_path / "q.h5ad", "--lazy", "--quiet") == 0
    assert "read rows" not in capfd.readouterr().err
    # evaluate too
    assert cli.main(["evaluate", str(path), "--groupby", "cell_type", "--n-genes", "3,5", "--cv", "3",
                     "-o", str(tmp_path / "ev.tsv"), "--chunk-size", "64", "--lazy"]) == 0
    assert "(chunk 4 of 4)" in capfd.readouterr().err


@pytest.mark.parametrize("h5ad", [False], ids=["dense"], indirect=True)
def test_cli_reads_large_files_lazily_by_default(h5ad, tmp_path, monkeypatch, spy):
    path, _ = h5ad
    monkeypatch.setattr(cli, "LAZY_BYTES", os.path.getsize(path))  # not above: read into memory
    assert _select(path, tmp_path / "o.h5ad", "--chunk-size", "80") == 0
    assert spy == []
    monkeypatch.setattr(cli, "LAZY_BYTES", os.path.getsize(path) - 1)  # above: lazy
    assert _select(path, tmp_path / "o.h5ad", "--chunk-size", "80") == 0
    assert {a for a, _ in spy} == {0, 80, 160}
    assert _select(path, tmp_path / "o.h5ad", "--chunk-size", "x") == 2  # usage error


def test_cli_help_documents_the_lazy_options():
    sub = cli._parser()._subparsers._group_actions[0].choices["select"].format_help()
    assert "--chunk-size N" in sub and "--lazy" in sub and "--no-lazy" in sub and "1 GiB" in sub


# ---- bad input: the file deleted or changed during the run -----------------------------------------------------
def _after_graph(monkeypatch, damage):
    """Run ``damage()`` once the lazy X is built and before anything is computed from it."""
    refusal = _registry.dask_refusal

    def hook(method, params, X):
        damage()
        return refusal(method, params, X)

    monkeypatch.setattr(_registry, "dask_refusal", hook)


@pytest.mark.parametrize("h5ad", [False, True], ids=["dense", "csr"], indirect=True)
@pytest.mark.parametrize("how", ["deleted", "truncated", "rewritten"])
def test_file_changed_during_a_lazy_run_is_an_error_naming_the_chunk(h5ad, monkeypatch, how):
    path, _ = h5ad
    size = os.path.getsize(path)

    def damage():
        if how == "deleted":
            os.remove(path)
        elif how == "truncated":
            os.truncate(path, size // 2)
        else:  # same size, other bytes: a copy overwritten in place
            with open(path, "r+b") as fh:
                fh.seek(size - 8)
                fh.write(b"\0" * 8)
            st = os.stat(path)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))

    backed = _backed(path)
    _after_graph(monkeypatch, damage)
    why = "no longer exists" if how == "deleted" else "was changed"
    with pytest.raises(ValueError, match=rf"cannot read rows \d+\.\.\d+ \(chunk \d of 4\) of X in .*a\.h5ad: .*{why}"):
        bioqpfs.tl.select_genes(backed, "cell_type", method="qpfs", n_genes=5, chunk_size=CHUNK)
    assert "qpfs_weight" not in backed.var and "qpfs" not in backed.uns  # nothing half-written
    backed.file.close()


@pytest.mark.parametrize("h5ad", [True], ids=["csr"], indirect=True)
def test_cli_input_deleted_during_a_lazy_run_writes_nothing(h5ad, tmp_path, monkeypatch, capsys):
    path, _ = h5ad
    _after_graph(monkeypatch, lambda: os.remove(path))
    out = tmp_path / "out" / "o.h5ad"
    out.parent.mkdir()
    assert _select(path, out, "--lazy", "--chunk-size", "100") == 1
    err = capsys.readouterr().err
    assert f"cannot read rows 0..99 (chunk 1 of 3) of X in {path}: the file no longer exists" in err or \
        "(chunk" in err and "no longer exists" in err
    assert os.listdir(out.parent) == []  # no output, no temporary file


@pytest.mark.parametrize("h5ad", [True], ids=["csr"], indirect=True)
def test_cli_input_changed_after_the_selection_is_not_copied_to_the_output(h5ad, tmp_path, monkeypatch, capsys):
    """The output of a lazy run is a copy of the input with the results: refused if the input changed meanwhile."""
    path, _ = h5ad
    select_genes = bioqpfs.tl.select_genes

    def then_touch(*a, **k):
        select_genes(*a, **k)
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))

    monkeypatch.setattr(bioqpfs.tl, "select_genes", then_touch)
    out = tmp_path / "out" / "o.h5ad"
    out.parent.mkdir()
    assert _select(path, out, "--lazy") == 1
    assert "changed during the run" in capsys.readouterr().err
    assert os.listdir(out.parent) == []


def test_task_names_carry_the_rows(h5ad):
    """A scheduler's own error about a task (distributed's KilledWorker names the task) names the chunk."""
    path, _ = h5ad
    X = _io.lazy_rows(path, chunk_size=100)
    keys = {k[0] if isinstance(k, tuple) else k for k in dict(X.__dask_graph__())}
    assert {k.rsplit("-", 1)[0] for k in keys if str(k).startswith("read-")} == \
        {"read-X-rows-0-99", "read-X-rows-100-199", "read-X-rows-200-239"}
    np.testing.assert_array_equal(X.compute(), _backed(path).X[()])


# ---- anndata.experimental.read_lazy ------------------------------------------------------------------------------
@pytest.mark.parametrize("h5ad", [True], ids=["csr"], indirect=True)
def test_read_lazy_anndata_is_refused_clearly_and_works_once_obs_and_var_are_loaded(h5ad):
    import anndata.experimental
    import xarray  # noqa: F401  (the dev extra installs it: read_lazy needs it)

    read_lazy = getattr(anndata.experimental, "read_lazy", None)
    if read_lazy is None:
        pytest.skip("this anndata (< 0.12) has no experimental.read_lazy")
    path, mem = h5ad
    lazy = read_lazy(path)
    assert isinstance(lazy.X, da.Array)
    with pytest.raises(TypeError, match=r"adata\.obs and adata\.var are lazily loaded .*read_lazy.*"
                                        r"adata\.obs = adata\.obs\.to_memory\(\).*backed='r'"):
        bioqpfs.tl.select_genes(lazy, "cell_type", method="qpfs", n_genes=5)
    with pytest.raises(TypeError, match="lazily loaded"):
        bioqpfs.evaluate.error_curve(lazy, "cell_type", ["qpfs"], n_genes=[3], cv=3)
    lazy.obs, lazy.var = lazy.obs.to_memory(), lazy.var.to_memory()
    bioqpfs.tl.select_genes(lazy, "cell_type", method="qpfs", n_genes=5)
    bioqpfs.tl.select_genes(mem, "cell_type", method="qpfs", n_genes=5)
    assert isinstance(lazy.X, da.Array)  # X never loaded into the AnnData
    np.testing.assert_allclose(lazy.var["qpfs_weight"], mem.var["qpfs_weight"], rtol=0, atol=1e-12)
    assert list(lazy.uns["qpfs"]["selected"]) == list(mem.uns["qpfs"]["selected"])


@pytest.mark.parametrize("h5ad", [False, True], ids=["dense", "csr"], indirect=True)
def test_a_file_removed_or_truncated_after_opening_and_before_the_run(h5ad):
    """Removed after read_h5ad(backed='r'): it cannot be reopened by path for chunks, so X is read whole through
    the open handle (the stored values: the in-memory panel).  Truncated: an error naming the file, no result."""
    import os

    path, mem = h5ad
    bioqpfs.tl.select_genes(mem, "cell_type", method="qpfs", n_genes=5, discretization="mean_sd")
    backed = _backed(path)
    os.remove(path)
    bioqpfs.tl.select_genes(backed, "cell_type", method="qpfs", n_genes=5, discretization="mean_sd")
    assert list(backed.uns["qpfs"]["selected"]) == list(mem.uns["qpfs"]["selected"])
    backed.file.close()
    mem.write_h5ad(path)
    backed = _backed(path)
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(ValueError, match=r"a\.h5ad.*(damaged or was changed|truncated)"):
        bioqpfs.tl.select_genes(backed, "cell_type", method="qpfs", n_genes=5, discretization="mean_sd",
                                key_added="after_truncation")
    assert "after_truncation" not in backed.uns and "after_truncation_weight" not in backed.var
    backed.file.close()


# ---- zarr stores -------------------------------------------------------------------------------------------------
@pytest.fixture(params=[(2, False), (2, True), (3, True)], ids=["v2-dense", "v2-csr", "v3-csr-sharded"])
def zarr_store(h5ad, tmp_path, request):
    """The fixture's AnnData written as a zarr store (format 2 or 3; small chunks, so a sample chunk spans
    several stored chunks), with ``.raw`` (the same genes) for the CSR stores; its in-memory AnnData."""
    fmt, sparse = request.param
    _, mem = h5ad
    mem = mem.copy()
    if sparse:
        mem.X = sp.csr_matrix(mem.X)
        mem.raw = mem.copy()
    path = tmp_path / "a.zarr"
    with ad.settings.override(zarr_write_format=fmt):
        if fmt == 3:  # sharded: a shard of 4 chunks of 50 values
            import zarr

            mem.write_zarr(path, chunks=(50,))
            group = zarr.open_group(path, mode="r+")
            for name in ("data", "indices", "indptr"):
                for where in ("X", "raw/X"):
                    old = group[f"{where}/{name}"]
                    values = old[:]
                    del group[f"{where}/{name}"]
                    group.create_array(f"{where}/{name}", data=values, chunks=(50,), shards=(200,),
                                       attributes=dict(old.attrs))
            zarr.consolidate_metadata(path)  # anndata opens the store by its consolidated metadata
        else:
            mem.write_zarr(path, chunks=(50, 10) if not sparse else (50,))
    return path, mem


def test_zarr_store_read_by_sample_chunks_equals_the_stored_matrix(zarr_store):
    path, mem = zarr_store
    X = _io.lazy_rows(path, chunk_size=70)
    assert X.chunks[0] == (70, 70, 70, 30)
    want = mem.X.toarray() if sp.issparse(mem.X) else mem.X
    got = X.compute()
    np.testing.assert_array_equal(got.toarray() if sp.issparse(got) else got, want)
    assert X.bioqpfs_stored_bytes == (mem.X.data.nbytes + mem.X.indices.nbytes + mem.X.indptr.nbytes
                                      if sp.issparse(mem.X) else mem.X.nbytes)
    assert _io.is_zarr_store(path) and not _io.is_zarr_store(path.parent) and not _io.is_zarr_store(path / "zarr.json")


def test_cli_on_a_zarr_store_lazy_and_whole_equal_the_in_memory_run(zarr_store, tmp_path, monkeypatch, capfd):
    path, mem = zarr_store
    monkeypatch.setattr(_io, "PROGRESS_SECONDS", 0.0)
    reads = []
    read_rows = _io._read_rows
    monkeypatch.setattr(_io, "_read_rows", lambda f, elem, a, b, **kw: reads.append((elem, a, b)) or
                        read_rows(f, elem, a, b, **kw))
    mem_path = tmp_path / "mem.h5ad"
    mem.write_h5ad(mem_path)
    assert _select(mem_path, tmp_path / "mem_out.h5ad") == 0
    assert _select(path, tmp_path / "whole.h5ad", "--no-lazy") == 0
    assert reads == []
    capfd.readouterr()
    assert _select(path, tmp_path / "lazy.h5ad", "--lazy", "--chunk-size", "100") == 0
    matrix = "raw/X" if mem.raw is not None else "X"  # use_raw=auto reads .raw, as scanpy does
    assert {(e, a) for e, a, _ in reads} >= {(matrix, 0), (matrix, 100), (matrix, 200)}
    assert max(b - a for _, a, b in reads) == 100  # never more than a chunk at once
    assert f"(chunk 3 of 3) of {matrix} in {path}" in capfd.readouterr().err
    want = (tmp_path / "mem_out.h5ad.tsv").read_text()
    assert (tmp_path / "whole.h5ad.tsv").read_text() == want
    assert (tmp_path / "lazy.h5ad.tsv").read_text() == want
    out = ad.read_h5ad(tmp_path / "lazy.h5ad")  # the output holds the input, with the results
    np.testing.assert_array_equal(out.X.toarray() if sp.issparse(out.X) else out.X,
                                  mem.X.toarray() if sp.issparse(mem.X) else mem.X)
    pd.testing.assert_frame_equal(out.var, ad.read_h5ad(tmp_path / "mem_out.h5ad").var)


def test_zarr_method_without_a_dask_path_reads_the_store_whole(zarr_store, tmp_path):
    path, mem = zarr_store
    assert _select(path, tmp_path / "lazy.h5ad", "--lazy", "--method", "ikm_qpfs") == 0
    assert _select(path, tmp_path / "whole.h5ad", "--no-lazy", "--method", "ikm_qpfs") == 0
    assert (tmp_path / "lazy.h5ad.tsv").read_text() == (tmp_path / "whole.h5ad.tsv").read_text()


@pytest.mark.parametrize("how", ["chunk deleted", "store deleted", "rewritten"])
def test_zarr_store_changed_during_a_lazy_run_is_an_error_naming_the_chunk(zarr_store, tmp_path, monkeypatch, capsys,
                                                                          how):
    """zarr reads a missing chunk as zeros without an error; the lazy reader refuses it, naming the chunk."""
    import shutil

    path, mem = zarr_store
    matrix = "raw/X" if mem.raw is not None else "X"

    def damage():
        if how == "store deleted":
            shutil.rmtree(path)
        elif how == "chunk deleted":  # the last stored chunk of the values (a data chunk of a CSR matrix)
            files = sorted((os.path.join(d, f) for d, _, fs in os.walk(path / matrix) for f in fs
                            if not f.startswith(".") and f != "zarr.json"), key=os.path.getmtime)
            os.remove(files[-1])
        else:  # written again (the same values: zarr rewrites the metadata)
            mem.write_zarr(path)

    _after_graph(monkeypatch, damage)
    out = tmp_path / "out" / "o.h5ad"
    out.parent.mkdir()
    assert _select(path, out, "--lazy", "--chunk-size", "100") == 1
    err = capsys.readouterr().err
    why = {"store deleted": "no longer exists", "chunk deleted": "is gone since the lazy run started",
           "rewritten": "changed"}[how]
    assert re.search(rf"cannot read rows \d+\.\.\d+ \(chunk \d of 3\) of {matrix} in {path}: .*{why}", err), err
    assert os.listdir(out.parent) == []  # no output, no temporary file


def test_cli_refuses_a_directory_that_is_not_a_zarr_store(tmp_path, capsys):
    (tmp_path / "d.zarr").mkdir()
    assert _select(tmp_path / "d.zarr", tmp_path / "o.h5ad") == 1
    assert "is a directory, not a file or a zarr store" in capsys.readouterr().err


def test_read_lazy_zarr_in_python_equals_the_in_memory_selection(zarr_store, monkeypatch):
    """bioqpfs.read_lazy: the Python face of the lazy zarr reader (tl and evaluate read the chunks)."""
    path, mem = zarr_store
    mem = mem.copy()
    mem.layers["counts"] = mem.X.copy()
    lazy_path = path.parent / "b.zarr"
    mem.write_zarr(lazy_path)
    lazy = bioqpfs.read_lazy(lazy_path, chunk_size=100)
    assert isinstance(lazy.X, da.Array) and isinstance(lazy.layers["counts"], da.Array)
    assert lazy.X.chunks[0] == (100, 100, 40)
    assert (lazy.raw is not None) == (mem.raw is not None)
    pd.testing.assert_frame_equal(lazy.obs, mem.obs)
    for layer in (None, "counts"):
        bioqpfs.tl.select_genes(mem, "cell_type", method="qpfs", n_genes=5, discretization="mean_sd", layer=layer)
        bioqpfs.tl.select_genes(lazy, "cell_type", method="qpfs", n_genes=5, discretization="mean_sd", layer=layer)
        assert list(lazy.uns["qpfs"]["selected"]) == list(mem.uns["qpfs"]["selected"])
        np.testing.assert_allclose(lazy.var["qpfs_weight"], mem.var["qpfs_weight"], rtol=0, atol=1e-12)
    assert isinstance(lazy.X, da.Array)  # never loaded into the AnnData
    a = bioqpfs.evaluate.error_curve(mem, "cell_type", ["qpfs"], n_genes=[3], cv=3)
    b = bioqpfs.evaluate.error_curve(lazy, "cell_type", ["qpfs"], n_genes=[3], cv=3)
    timing = [c for c in a if c.startswith("seconds")]
    pd.testing.assert_frame_equal(a.drop(columns=timing), b.drop(columns=timing))
    h5 = path.parent / "c.h5ad"
    mem.write_h5ad(h5)
    assert bioqpfs.read_lazy(h5).isbacked  # an .h5ad is opened backed


def test_lazy_zarr_keeps_raw_varm(h5ad, tmp_path):
    """read_lazy (and so the CLI's --lazy) rebuilt .raw from raw/X and raw/var only: .raw.varm was lost from the
    output, silently."""
    _, mem = h5ad
    mem = mem.copy()
    mem.X = sp.csr_matrix(mem.X)
    raw = mem.copy()
    raw.varm["loadings"] = np.arange(2 * raw.n_vars, dtype=float).reshape(raw.n_vars, 2)
    mem.raw = raw
    store = tmp_path / "varm.zarr"
    mem.write_zarr(store)
    lazy = bioqpfs.read_lazy(store, chunk_size=100)
    np.testing.assert_array_equal(lazy.raw.varm["loadings"], raw.varm["loadings"])
    assert _select(store, tmp_path / "out.h5ad", "--lazy") == 0
    np.testing.assert_array_equal(ad.read_h5ad(tmp_path / "out.h5ad").raw.varm["loadings"], raw.varm["loadings"])


@pytest.mark.parametrize("method, params", [("ldfs", {}), ("qpfs", {"similarity": "correlation"}),
                                            ("mrmr_mid", {})])
def test_dask_chunks_of_another_sparse_format_under_a_numpy_meta(rng, method, params):
    """X.map_blocks(scipy.sparse.coo_matrix) gives COO chunks under a numpy meta: the correlation kernels failed
    inside scipy ("'coo_matrix' object is not subscriptable"); the correlation kernels read such a chunk as CSR now."""
    X = rng.lognormal(size=(120, 15)) * (rng.random((120, 15)) < 0.5)
    y = np.repeat([0, 1, 2], 40)
    X[:, 3] += 2.0 * (y == 1)
    coo = da.from_array(X, chunks=(50, 15)).map_blocks(sp.coo_matrix)
    got = bioqpfs.select(coo, y, method=method, n_genes=4, **params)
    want = bioqpfs.select(X, y, method=method, n_genes=4, **params)
    np.testing.assert_array_equal(got.ranking, want.ranking)
    np.testing.assert_allclose(got.weights, want.weights, rtol=1e-9, atol=1e-12)


def test_pl_panel_on_backed_views_and_lazily_read_stores(zarr_store, tmp_path):
    """pl.panel failed on a view of a backed AnnData (anndata: "to copy ... in backed mode, pass a filename") and
    on read_lazy's AnnData (scanpy's dot plot); it plots the panel's columns read as the selection reads them."""
    import matplotlib

    matplotlib.use("Agg")
    from bioqpfs.pl._panel import _panel_data

    path, mem = zarr_store
    bioqpfs.tl.select_genes(mem, "cell_type", method="qpfs", n_genes=4)
    genes = list(mem.uns["qpfs"]["selected"])
    h5 = tmp_path / "sel.h5ad"
    mem.write_h5ad(h5)
    store = tmp_path / "sel.zarr"
    mem.write_zarr(store)
    src = mem.raw.to_adata() if mem.raw is not None else mem
    want = src[:, genes].X
    want = want.toarray() if sp.issparse(want) else want
    backed = ad.read_h5ad(h5, backed="r")
    for data in (backed, backed[:150], bioqpfs.read_lazy(store, chunk_size=100)):
        axes = bioqpfs.pl.panel(data, "qpfs", show=False)
        assert axes
        part = _panel_data(data, genes, ["cell_type"], None, None).X
        part = part.toarray() if sp.issparse(part) else np.asarray(part)
        np.testing.assert_allclose(part, want[:data.n_obs])
    backed.file.close()
