"""The GPU counting backend (issue 17): ``backend="auto" | "cpu" | "gpu"`` and the cupy backend.

Two halves:

* everywhere: the cupy backend's code run with numpy in cupy's place (:class:`StandIn`) must give the numpy
  backend's counts exactly and its information matrices to 1e-10 -- the device path of
  ``pairwise_information`` (whole-array phi-sums, mirrored blocks) is checked on machines without a GPU; and the
  ``backend=`` option is validated and refuses ``"gpu"`` clearly where there is none;
* on a machine with cupy and a CUDA device (skipped elsewhere, with the reason): real cupy counts equal the CPU's
  exactly, MI to 1e-10, on dense, CSR, cupy, ``cupyx.scipy.sparse`` and Dask inputs, and every registered
  MI-based method selects the same genes on the GPU as on the CPU.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import bioqpfs
from bioqpfs import _device
from bioqpfs._kernels import counting
from bioqpfs._kernels import information as info
from bioqpfs._kernels.counting_cupy import CupyCounting
from bioqpfs._kernels.counting_numpy import NumpyCounting

GPU, WHY_NOT = _device.gpu_status()
needs_gpu = pytest.mark.skipif(not GPU, reason=f"no GPU: {WHY_NOT}")


class StandIn(CupyCounting):
    """The cupy backend's code with numpy as its array module."""

    xp = np


@pytest.fixture(params=[3, 5], ids=["3 bins", "5 bins"])
def coded(request, rng):
    n, m = 150, 37
    y = rng.integers(0, 4, n)
    codes = rng.integers(0, request.param, size=(n, m)).astype(np.uint8)
    codes[:, 4] = (y + rng.integers(0, 2, n)) % request.param  # an informative gene
    codes[:, 7] = 0  # a constant one
    return codes, y


@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "balanced"])
@pytest.mark.parametrize("kind", ["mi", "cmi", "cmi_mean", "mi_given_class"])
def test_device_path_gives_the_cpu_matrices(coded, kind, weighted, monkeypatch):
    codes, y = coded
    groups = None if kind == "mi" and not weighted else y
    w = info.class_sample_weights(y, "balanced") if weighted else None
    cpu = info.CodeTable(codes, groups=groups, weights=w)
    dev = info.CodeTable(codes, groups=groups, weights=w, backend=StandIn)
    assert isinstance(dev.backend, StandIn)
    np.testing.assert_array_equal(dev.marginals, cpu.marginals)
    for per_class in (False, True):  # counts exact; weighted ones to float64 rounding (the backend contract: the
        # numpy backend sums exact counts per weight value, the device float64 GEMMs of the weights)
        np.testing.assert_allclose(dev.backend.joint(slice(2, 30), [5, 0, 36, 7], per_class=per_class),
                                   cpu.backend.joint(slice(2, 30), np.array([5, 0, 36, 7]), per_class=per_class),
                                   rtol=1e-13 if weighted else 0, atol=0)
    # small device blocks: several block pairs, diagonal and mirrored ones
    monkeypatch.setattr(StandIn, "block_budget", lambda self: 64 * 2**10)
    for rows in (None, np.array([5, 0, 17, 36])):
        want = info.pairwise_information(cpu, None, kind, rows=rows)
        got = info.pairwise_information(dev, None, kind, rows=rows)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
        if rows is None and kind != "cmi":
            np.testing.assert_array_equal(got, got.T)  # exactly symmetric, as on the CPU


def test_device_path_gene_by_column_and_strata(coded, rng):
    codes, y = coded
    cols = rng.integers(0, 3, size=(codes.shape[0], 6)).astype(np.uint8)
    want = info.pairwise_information(info.CodeTable(codes), info.CodeTable(cols), "mi")
    got = info.pairwise_information(info.CodeTable(codes, backend=StandIn), info.CodeTable(cols), "mi")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    strata = rng.integers(0, 3, codes.shape[0])
    sw = np.bincount(strata) / strata.size
    for kind in ("mi", "cmi_mean", "mi_given_class"):
        groups = None if kind == "mi" else y
        a = info.CodeTable(codes, groups=groups, strata=strata, strata_weights=sw)
        b = info.CodeTable(codes, groups=groups, strata=strata, strata_weights=sw, backend=StandIn)
        np.testing.assert_allclose(info.pairwise_information(b, None, kind), info.pairwise_information(a, None, kind),
                                   rtol=0, atol=1e-10)
    np.testing.assert_allclose(info.class_relevance(b), info.class_relevance(a), rtol=0, atol=1e-12)


def test_device_counts_are_chunked_exactly(coded, monkeypatch):
    codes, y = coded
    import bioqpfs._kernels.counting_cupy as cc

    monkeypatch.setattr(cc, "DEVICE_ONEHOT_BUDGET", 2000)  # a few samples per chunk
    dev = StandIn(codes, n_bins=int(codes.max()) + 1, groups=y)
    cpu = NumpyCounting(codes, n_bins=int(codes.max()) + 1, groups=y)
    np.testing.assert_array_equal(dev.joint(slice(None), slice(None), per_class=True),
                                  cpu.joint(slice(0, codes.shape[1]), slice(0, codes.shape[1]), per_class=True))


def test_device_counts_in_float64_from_float32_chunks(coded, monkeypatch):
    """Beyond 2**24 samples the counts are float64 sums of float32 chunk GEMMs (chunks shrunk here)."""
    codes, y = coded
    import bioqpfs._kernels.counting_cupy as cc

    monkeypatch.setattr(cc, "DEVICE_ONEHOT_BUDGET", 5000)
    dev = StandIn(codes, n_bins=int(codes.max()) + 1, groups=y, count_dtype=np.float64)
    G = dev.joint(slice(None), slice(None), per_class=True)
    assert G.dtype == np.float64
    cpu = NumpyCounting(codes, n_bins=int(codes.max()) + 1, groups=y)
    np.testing.assert_array_equal(G, cpu.joint(slice(0, codes.shape[1]), slice(0, codes.shape[1]), per_class=True))


def test_codes_too_large_for_the_device_are_refused_clearly(coded, monkeypatch):
    codes, _ = coded
    monkeypatch.setattr(StandIn, "free_bytes", lambda self: codes.nbytes)  # the codes would take all of it
    with pytest.raises(MemoryError, match=r"150 x 37 codes take .* more than half of its free memory.*backend='cpu'"):
        StandIn(codes, n_bins=5)
    monkeypatch.setattr(StandIn, "free_bytes", lambda self: 4 * codes.nbytes)
    StandIn(codes, n_bins=5)


def test_backend_option_is_validated():
    for bad in ("cuda", 1, "GPUs"):
        with pytest.raises(ValueError, match="backend must be one of 'auto', 'cpu', 'gpu'"):
            _device.check_backend(bad)
    assert _device.check_backend("GPU") == "gpu" and _device.check_backend(None) is None
    X = np.random.default_rng(0).normal(size=(40, 8))
    y = np.repeat([0, 1], 20)
    with pytest.raises(ValueError, match="backend must be one of"):
        bioqpfs.select(X, y, method="qpfs", backend="cuda")


def test_backend_choice_reaches_the_code_tables(monkeypatch):
    codes = np.zeros((10, 3), np.uint8)
    monkeypatch.setattr(_device, "gpu_status", lambda: (False, "cupy is not installed"))
    with _device.requested("auto"):
        assert counting.backend_for(codes) is NumpyCounting
    with _device.requested("cpu"):
        assert counting.backend_for(codes) is NumpyCounting
    with pytest.raises(RuntimeError, match="needs cupy and a CUDA device, but cupy is not installed.*backend='cpu'"):
        with _device.requested("gpu"):
            pass
    monkeypatch.setattr(_device, "gpu_status", lambda: (True, "1 CUDA device(s)"))
    with _device.requested("gpu"):
        assert counting.backend_for(codes) is CupyCounting
        with _device.requested("cpu"):  # an inner face's explicit choice wins
            assert counting.backend_for(codes) is NumpyCounting
        with _device.requested(None):  # an inner face without one keeps the outer's
            assert counting.backend_for(codes) is CupyCounting
    with _device.requested("auto"):  # small: the CPU; large or an input on the GPU: the GPU
        assert counting.backend_for(codes) is NumpyCounting
        monkeypatch.setattr(_device, "AUTO_GPU_CELLS", 30)
        assert counting.backend_for(codes) is CupyCounting


def _indefinite_qp_matrix(m, rng):
    from bioqpfs._kernels.simplex_qp import QPMatrix

    A = rng.normal(size=(m + 40, m + 40)).astype(np.float32)
    Q = (A + A.T) / 2  # indefinite, float32 as the MI matrix beyond FLOAT32_FROM genes
    index = np.sort(rng.choice(m + 40, m, replace=False))
    U = rng.normal(size=(m, 2))
    return QPMatrix(Q, scale=0.7, U=U, w=np.array([0.5, -0.2]), shift=0.3, index=index)


def test_lanczos_products_on_the_device_path(monkeypatch, rng):
    """lambda_min's Lanczos products through the device path (numpy in cupy's place): the same products, so the
    same value to the last bit, and the eigenvalue of the dense G; a Q too large for the device stays on the CPU."""
    from bioqpfs._kernels.simplex_qp import smallest_eigenvalue

    G = _indefinite_qp_matrix(700, rng)
    want = np.linalg.eigvalsh(G.dense())[0]
    lam_cpu, info_cpu = smallest_eigenvalue(G, return_info=True)
    assert info_cpu["device"] == "cpu"
    monkeypatch.setattr(_device, "products_on_gpu", lambda n_entries: True)
    monkeypatch.setattr(_device, "array_module", lambda: np)
    monkeypatch.setattr(_device, "free_device_bytes", lambda: 10 * G.Q.nbytes)
    lam_dev, info_dev = smallest_eigenvalue(G, return_info=True)
    assert info_dev["device"] == "gpu" and info_dev["matvecs"] == info_cpu["matvecs"]
    assert lam_dev == lam_cpu
    np.testing.assert_allclose(lam_dev, want, rtol=1e-5)
    monkeypatch.setattr(_device, "free_device_bytes", lambda: G.Q.nbytes)  # the copy would take all of it
    assert smallest_eigenvalue(G, return_info=True)[1]["device"] == "cpu"


def test_lanczos_products_follow_the_backend(monkeypatch):
    monkeypatch.setattr(_device, "gpu_status", lambda: (True, "1 CUDA device(s)"))
    big = _device.AUTO_GPU_CELLS
    with _device.requested("auto"):
        assert not _device.products_on_gpu(big - 1) and _device.products_on_gpu(big)
        with _device.mark_gpu_input(True):  # an input on the GPU: every size
            assert _device.products_on_gpu(10)
    with _device.requested("cpu"):
        assert not _device.products_on_gpu(big)
    with _device.requested("gpu"):
        assert _device.products_on_gpu(10)
    monkeypatch.setattr(_device, "gpu_status", lambda: (False, "cupy is not installed"))
    with _device.requested("auto"):
        assert not _device.products_on_gpu(big)


@needs_gpu
def test_lanczos_products_on_the_gpu(rng):
    from bioqpfs._kernels.simplex_qp import smallest_eigenvalue

    G = _indefinite_qp_matrix(1500, rng)
    want = np.linalg.eigvalsh(G.dense())[0]
    with _device.requested("cpu"):
        lam_cpu, info_cpu = smallest_eigenvalue(G, return_info=True)
    with _device.requested("gpu"):
        lam_gpu, info_gpu = smallest_eigenvalue(G, return_info=True)
    assert (info_cpu["device"], info_gpu["device"]) == ("cpu", "gpu")
    np.testing.assert_allclose(lam_gpu, want, rtol=1e-5)
    np.testing.assert_allclose(lam_gpu, lam_cpu, rtol=1e-5)


@pytest.mark.skipif(GPU, reason="a GPU is present")
def test_gpu_refused_without_one_on_every_face(tmp_path):
    X = np.random.default_rng(0).normal(size=(40, 8))
    y = np.repeat(["a", "b"], 20)
    with pytest.raises(RuntimeError, match="needs cupy and a CUDA device"):
        bioqpfs.select(X, y, method="qpfs", backend="gpu")
    with pytest.raises(RuntimeError, match="needs cupy and a CUDA device"):
        bioqpfs.measures.mutual_information(X, backend="gpu")
    import anndata as ad

    adata = ad.AnnData(X, obs={"cls": y})
    with pytest.raises(RuntimeError, match="needs cupy and a CUDA device"):
        bioqpfs.tl.select_genes(adata, "cls", method="qpfs", n_genes=3, backend="gpu")
    # auto runs on the CPU
    bioqpfs.select(X, y, method="qpfs", backend="auto")


@pytest.mark.skipif(GPU, reason="a GPU is present")
def test_cli_backend(tmp_path):
    from bioqpfs import cli

    out = tmp_path / "out.h5ad"
    base = ["select", "--dataset", "srbct", "--groupby", "class", "--method", "maxrel", "--n-genes", "5", "--quiet"]
    assert cli.main(base + ["--backend", "gpu", "-o", str(out)]) == 1
    assert not out.exists()
    assert cli.main(base + ["--backend", "cpu", "-o", str(out)]) == 0
    assert cli.main(base + ["--backend", "cuda", "-o", str(out)]) == 2  # argparse: a usage error


# ---- on a GPU machine ----------------------------------------------------------------------------------------
def _expression(n, m, seed=0, n_classes=5):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    X = rng.poisson(0.6, size=(n, m)).astype(np.float64)
    X[:, :10] += y[:, None] * rng.uniform(0.5, 1.5, 10)
    return np.log1p(X), y


@needs_gpu
@pytest.mark.parametrize("weighted", [False, True], ids=["counts", "balanced"])
def test_gpu_counts_equal_cpu_counts_exactly(weighted):
    import cupy

    rng = np.random.default_rng(1)
    codes = rng.integers(0, 3, size=(5000, 300)).astype(np.uint8)
    y = rng.integers(0, 6, 5000)
    w = info.class_sample_weights(y, "balanced") if weighted else None
    cpu = info.CodeTable(codes, groups=y, weights=w)
    gpu = info.CodeTable(cupy.asarray(codes), groups=y, weights=w)
    assert isinstance(gpu.backend, CupyCounting)
    if weighted:  # float64 sums in another order
        np.testing.assert_allclose(gpu.marginals, cpu.marginals, rtol=1e-13)
    else:
        np.testing.assert_array_equal(gpu.marginals, cpu.marginals)
    for per_class in (False, True):
        want = cpu.backend.joint(slice(0, 300), slice(0, 300), per_class=per_class)
        got = gpu.backend.joint(slice(0, 300), slice(0, 300), per_class=per_class)
        if weighted:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
        else:
            np.testing.assert_array_equal(got, want)
    for kind in ("mi", "cmi", "cmi_mean", "mi_given_class"):
        tab_c, tab_g = (cpu, gpu) if kind != "mi" else (cpu.regrouped(None), gpu.regrouped(None))
        np.testing.assert_allclose(info.pairwise_information(tab_g, None, kind),
                                   info.pairwise_information(tab_c, None, kind), rtol=0, atol=1e-10)


@needs_gpu
def test_gpu_mi_on_every_input_type():
    import cupy
    import cupyx.scipy.sparse as csp

    X, y = _expression(3000, 200)
    want = bioqpfs.measures.mutual_information(X, backend="cpu")
    Xs = sp.csr_matrix(X)
    for name, data in [("dense", X), ("csr", Xs), ("cupy", cupy.asarray(X)), ("cupyx csr", csp.csr_matrix(Xs))]:
        got = bioqpfs.measures.mutual_information(data, backend="gpu")
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10, err_msg=name)
    import dask.array as da

    got = bioqpfs.measures.mutual_information(da.from_array(X, chunks=(700, -1)), backend="gpu")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10, err_msg="dask")
    got = bioqpfs.measures.mutual_information(da.from_array(cupy.asarray(X), chunks=(700, -1)), backend="gpu")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10, err_msg="dask with cupy chunks")


def _counting_methods():
    from bioqpfs._registry import DASK_METHODS

    return sorted(set(DASK_METHODS) & set(bioqpfs.methods()))


@needs_gpu
@pytest.mark.parametrize("method", _counting_methods())
def test_every_mi_method_selects_the_same_on_the_gpu(method):
    X, y = _expression(2000, 120, seed=3)
    cpu = bioqpfs.select(X, y, method=method, n_genes=15, backend="cpu")
    gpu = bioqpfs.select(X, y, method=method, n_genes=15, backend="gpu")
    np.testing.assert_array_equal(gpu.ranking[:15], cpu.ranking[:15], err_msg=method)
    np.testing.assert_allclose(gpu.weights, cpu.weights, rtol=1e-6, atol=1e-8, err_msg=method)


@needs_gpu
@pytest.mark.parametrize("shape", [(2000, 120), (3000, 700)], ids=["LAPACK eigenvalue", "Lanczos on the GPU"])
def test_default_recipe_on_the_gpu(shape):
    X, y = _expression(*shape, seed=4)
    cpu = bioqpfs.select(X, y, n_genes=15, backend="cpu")
    gpu = bioqpfs.select(X, y, n_genes=15, backend="gpu")
    np.testing.assert_array_equal(gpu.ranking[:15], cpu.ranking[:15])


def test_bench_gpu_quick_rows(capsys, monkeypatch):
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import bench_gpu

    bench_gpu.main(["--cells", "3000", "--genes", "60", "--e2e", "cpu"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("60 "))
    cells = row.split()
    assert len(cells) == 15 and all(c == "-" or float(c) >= 0 for c in cells[1:])
    if not GPU:
        assert cells[2] == "-" and float(cells[5]) > 0  # no GEMM row; MI cpu timed
    monkeypatch.setattr(CupyCounting, "xp", np)  # the crossover rows with numpy in cupy's place
    bench_gpu.crossover([(500, 40)], repeats=1)
    assert "cpu/gpu" in capsys.readouterr().out
