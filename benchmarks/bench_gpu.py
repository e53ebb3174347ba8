"""The GPU counting backend against the CPU and against the GPU's own float32 GEMMs (issue 17).

    python benchmarks/bench_gpu.py                      # 100,000 cells x 2,000 and 5,000 genes (needs a GPU)
    python benchmarks/bench_gpu.py --quick              # 20,000 x 500: a smoke run (GPU rows skipped without one)
    python benchmarks/bench_gpu.py --deadline 400       # skip the rows that would start after 400 s
    python benchmarks/bench_gpu.py --crossover          # MI matrix on each backend at small shapes (auto's rule)

Data: sparse single-cell-like counts (``_common.poisson_types``: Poisson, 8 cell types, log1p, CSR), mean +- sd
codes.  For every gene count M it prints, in seconds:

* ``GEMM``: the GPU's float32 product ``O^T O`` of the one-hot indicators of all genes (N x 2M, the 2 materialised
  bins of 3), cupy ``matmul``, best of 3 -- the products the MI matrix needs (the kernel computes the upper block
  triangle only, so this overstates its share a little);
* ``MI gpu`` / ``MI cpu``: the MI matrix of the codes (``pairwise_information`` of a code table) counted by the
  cupy / numpy backend (all cores), the codes moved to the GPU and the M x M result copied back included;
  ``ratio`` = MI gpu / GEMM (goal <= 3); ``max|diff|``: the largest difference between the two matrices;
* ``CMI gpu`` / ``CMI cpu``: the SPEC_CMI matrix (``cmi_mean``, per-class counts of 8 types);
* ``qpfs`` / ``spec_cmi`` / ``default`` end to end: ``bioqpfs.select`` on the CSR expression (discretisation,
  relevance, the matrix, the QP / eigenvector, the ranking), ``n_genes=50``, on each backend, and whether the top 50
  agree; ``default`` is the benchmarked default recipe (``method=None``: ``DEFAULT_PANEL``, class-balanced counts,
  the sparse single-cell codes and the k-aware cover extraction), which is what ``tl.select_genes`` runs.

GPU rows run first, then the CPU rows (which dominate the time); ``--deadline`` leaves out the rows that would start
after that many seconds.  Machine facts (GPU, cores) are printed first.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _common import poisson_types

import bioqpfs
from bioqpfs import _device, measures
from bioqpfs._kernels import information as info

#: the end-to-end rows: two paper methods and the default recipe (``method=None``)
E2E_METHODS = ("qpfs", "spec_cmi", "default")


def _sync():
    import cupy

    cupy.cuda.Device().synchronize()


def gemm_seconds(codes, repeats=3):
    """Best seconds of the GPU float32 ``O^T O`` over all genes' materialised indicators."""
    import cupy

    from bioqpfs._kernels.counting_cupy import CupyCounting

    b = CupyCounting(codes, n_bins=3)
    O = b.onehot(slice(None), slice(0, b.n_samples), b.codes, np.float32)
    best = np.inf
    for _ in range(repeats):
        _sync()
        t = time.perf_counter()
        G = O.T @ O
        _sync()
        best = min(best, time.perf_counter() - t)
        del G
    del O, b
    cupy.get_default_memory_pool().free_all_blocks()
    return best


def timed(func, repeats=1):
    best, out = np.inf, None
    for _ in range(repeats):
        t = time.perf_counter()
        out = func()
        best = min(best, time.perf_counter() - t)
    return best, out


def crossover(shapes, repeats=3):
    """MI matrix seconds on each backend for small shapes: where ``backend="auto"`` should switch to the GPU."""
    print(f"{'cells':>8} {'genes':>6} {'cells x genes':>14} {'cpu s':>8} {'gpu s':>8} {'cpu/gpu':>8}", flush=True)
    for n, m in shapes:
        X, _ = poisson_types(n, m, seed=1)
        codes = measures.discretize(X)
        secs = {}
        for backend in ("numpy", "cupy"):
            def run():
                return info.pairwise_information(info.CodeTable(codes, backend=backend), None, "mi")
            run()  # warm-up
            secs[backend] = timed(run, repeats)[0]
        print(f"{n:>8} {m:>6} {n * m:>14.1e} {secs['numpy']:>8.4f} {secs['cupy']:>8.4f} "
              f"{secs['numpy'] / secs['cupy']:>8.1f}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="20,000 cells x 500 genes")
    p.add_argument("--cells", type=int, default=100_000)
    p.add_argument("--genes", type=int, nargs="+", default=[2000, 5000])
    p.add_argument("--deadline", type=float, default=np.inf, help="skip rows starting after this many seconds")
    p.add_argument("--no-cpu", action="store_true", help="GPU rows only")
    p.add_argument("--e2e", choices=["both", "gpu", "cpu", "none"], default="both",
                   help="the backends of the end-to-end rows (bioqpfs.select)")
    p.add_argument("--crossover", action="store_true",
                   help="only the MI matrix on both backends at small shapes (the backend='auto' threshold)")
    args = p.parse_args(argv)
    if args.quick and (args.cells != 100_000 or args.genes != [2000, 5000]):
        p.error("--quick sets 20,000 cells x 500 genes: drop --cells/--genes, or --quick")
    if args.crossover and (args.quick or args.cells != 100_000 or args.genes != [2000, 5000]
                           or args.deadline != np.inf or args.no_cpu or args.e2e != "both"):
        p.error("--crossover times its own small shapes on both backends: drop the other options")
    if args.crossover or args.no_cpu:
        gpu, why = _device.gpu_status()
        if not gpu:
            p.error(f"{'--crossover' if args.crossover else '--no-cpu'} times the GPU backend and there is none here "
                    f"({why}; on a CUDA machine: pip install bioqpfs[gpu])")
    if args.crossover:
        crossover([(700, 765), (2000, 500), (5000, 1000), (10000, 1000), (20000, 500), (20000, 2000),
                   (50000, 1000)])
        return
    if args.quick:
        args.cells, args.genes = 20_000, [500]
    t0 = time.perf_counter()
    gpu, why = _device.gpu_status()
    print(f"cores: {os.cpu_count()}; GPU: {why}", flush=True)
    if gpu:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
        print(f"device: {props['name'].decode()}, cupy {cupy.__version__}, CUDA runtime "
              f"{cupy.cuda.runtime.runtimeGetVersion()}", flush=True)
    X_all, y = poisson_types(args.cells, max(args.genes), seed=0)
    print(f"data: {X_all.shape[0]} cells x {X_all.shape[1]} genes, {X_all.nnz / np.prod(X_all.shape):.1%} non-zero, "
          f"built in {time.perf_counter() - t0:.1f} s", flush=True)
    if gpu:  # warm-up: cupy's kernels compiled, numba's too
        Xw = X_all[:2000, :50]
        measures.mutual_information(Xw, backend="gpu")
        for method in E2E_METHODS:
            bioqpfs.select(Xw, y[:2000], method=None if method == "default" else method, n_genes=5, backend="gpu")
    measures.mutual_information(X_all[:2000, :50], backend="cpu")
    for method in E2E_METHODS:  # numba's compilation (seconds for the default recipe) not in the rows
        bioqpfs.select(X_all[:2000, :50], y[:2000], method=None if method == "default" else method, n_genes=5,
                       backend="cpu")
    rows = {m: {} for m in args.genes}
    data = {}
    for m in args.genes:
        X = X_all[:, :m].tocsr()
        secs, codes = timed(lambda: measures.discretize(X))
        data[m] = (X, codes)
        rows[m]["discretise"] = secs

    def late():
        return time.perf_counter() - t0 > args.deadline

    plan = [("gpu", m) for m in args.genes if gpu] + ([] if args.no_cpu else [("cpu", m) for m in args.genes])
    results = {}
    for backend, m in plan:
        X, codes = data[m]
        r = rows[m]
        if backend == "gpu":
            if late():
                continue
            r["GEMM"] = gemm_seconds(codes)
            pooled_g = info.CodeTable(codes, backend="cupy")
            r["MI gpu"], results["mi", "gpu", m] = timed(lambda: info.pairwise_information(pooled_g, None, "mi"),
                                                         repeats=2)
            del pooled_g
            table_g = info.CodeTable(codes, groups=y, backend="cupy")
            r["CMI gpu"], results["cmi", "gpu", m] = timed(lambda: info.pairwise_information(table_g, None, "cmi_mean"))
            del table_g
        else:
            if late():
                continue
            pooled_c = info.CodeTable(codes, backend="numpy")
            r["MI cpu"], results["mi", "cpu", m] = timed(lambda: info.pairwise_information(pooled_c, None, "mi"))
            del pooled_c
            if late():
                continue
            table_c = info.CodeTable(codes, groups=y, backend="numpy")
            r["CMI cpu"], results["cmi", "cpu", m] = timed(lambda: info.pairwise_information(table_c, None, "cmi_mean"))
            del table_c
        for method in E2E_METHODS:
            if late() or args.e2e not in ("both", backend):
                break
            r[f"{method} {backend}"], results[method, backend, m] = timed(
                lambda: bioqpfs.select(X, y, method=None if method == "default" else method, n_genes=50,
                                       backend=backend, random_state=0))
        print(f"  done: {backend} at M = {m} ({time.perf_counter() - t0:.0f} s)", flush=True)
    print()
    print(f"N = {args.cells} cells; seconds (best of 3 GEMMs, best of 2 GPU MI runs, one run otherwise)")
    cols = ["discretise", "GEMM", "MI gpu", "ratio", "MI cpu", "cpu/gpu", "CMI gpu", "CMI cpu", "qpfs gpu", "qpfs cpu",
            "spec_cmi gpu", "spec_cmi cpu", "default gpu", "default cpu"]
    print("M      " + "".join(f"{c:>13}" for c in cols))
    for m in args.genes:
        r = rows[m]
        if "MI gpu" in r and "GEMM" in r:
            r["ratio"] = r["MI gpu"] / r["GEMM"]
        if "MI gpu" in r and "MI cpu" in r:
            r["cpu/gpu"] = r["MI cpu"] / r["MI gpu"]
        print(f"{m:<7}" + "".join(f"{r[c]:>13.3f}" if c in r else f"{'-':>13}" for c in cols))
    for m in args.genes:
        for kind in ("mi", "cmi"):
            if (kind, "gpu", m) in results and (kind, "cpu", m) in results:
                diff = np.abs(results[kind, "gpu", m] - results[kind, "cpu", m]).max()
                print(f"M = {m} {kind}: max|gpu - cpu| = {diff:.2e}")
        for method in E2E_METHODS:
            if (method, "gpu", m) in results and (method, "cpu", m) in results:
                a, b = results[method, "gpu", m].ranking[:50], results[method, "cpu", m].ranking[:50]
                print(f"M = {m} {method}: top 50 equal: {np.array_equal(a, b)} (same set: {set(a) == set(b)})")
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
