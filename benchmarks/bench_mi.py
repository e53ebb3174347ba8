"""MI matrix speed and memory against the raw float32 GEMMs it needs (issue: Foundation benchmark).

    .venv/bin/python benchmarks/bench_mi.py            # M in 2,000 5,000 10,000 20,000, N = 100, 3 bins
    .venv/bin/python benchmarks/bench_mi.py --quick    # M in 2,000 5,000

For every M it prints

* ``first s``: the first call of ``measures.mutual_information`` on mean +- sd codes in this
  process, and ``best s``: the best of ``--repeats`` further calls (each allocates a new output);
* ``GEMM s``: the raw float32 GEMMs the kernel needs (2 materialised bins per gene, upper-triangular
  block pairs only), measured in the same process, best of two schedules -- multithreaded BLAS on
  large blocks, and the kernel's own schedule (cache-sized blocks on the worker pool, one BLAS
  thread each) -- so the reference is the faster way to do the GEMMs alone (``_common.py``);
* ``ratio`` = best s / GEMM s (the goal is <= 3) and ``ratio1`` = first s / GEMM s;
* ``touch s``: allocating and first writing a fresh array of the output's size before anything
  else in this process -- the page-fault cost that the first call also pays (on a VM it can be
  large and varies from run to run);
* peak traced memory (tracemalloc: NumPy buffers) of the first call against the output size.
"""
from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
from _common import gemm_seconds

from bioqpfs import measures
from bioqpfs._kernels import information as info


def first_touch(n_bytes):
    """Time to allocate and first write an array of ``n_bytes`` (page faults: a machine floor)."""
    t = time.perf_counter()
    a = np.empty(n_bytes // 8)
    a[:] = 0.0
    secs = time.perf_counter() - t
    del a
    return secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--sizes", type=int, nargs="*", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--float32", action="store_true", help="float32 output (half the memory)")
    args = ap.parse_args()
    sizes = args.sizes or ([2000, 5000] if args.quick else [2000, 5000, 10000, 20000])
    rng = np.random.default_rng(0)
    measures.mutual_information(rng.integers(0, 3, size=(20, 300)), discretization=None)  # JIT warm-up (cached after first run)
    dtype = np.float32 if args.float32 else np.float64
    itemsize = np.dtype(dtype).itemsize
    touch = first_touch(max(sizes) ** 2 * itemsize)  # before anything else touches that much memory
    print(f"N={args.n}, 3 bins (mean +- sd), {np.dtype(dtype).name} output, {info.n_workers()} worker threads")
    print(f"first touch of a fresh {max(sizes) ** 2 * itemsize / 2**30:.2f} GiB array in this process: {touch:.2f} s")
    print(f"{'M':>7} {'first s':>8} {'best s':>7} {'GEMM s':>7} {'(big':>6} {'own)':>6} {'ratio':>6} {'ratio1':>6} "
          f"{'touch s':>7} {'peak GiB':>9} {'output GiB':>10} {'peak/out':>8}")
    for m in sizes:
        X = rng.normal(size=(args.n, m)).astype(np.float32)
        codes = measures.discretize(X)
        tracemalloc.start()
        t = time.perf_counter()
        Q = measures.mutual_information(codes, discretization=None, dtype=dtype)
        first = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        out_bytes = Q.nbytes
        del Q
        best = np.inf
        for _ in range(args.repeats):
            t = time.perf_counter()
            Q = measures.mutual_information(codes, discretization=None, dtype=dtype)
            best = min(best, time.perf_counter() - t)
            del Q
        g, big, own = gemm_seconds(info.CodeTable(codes))
        a = first_touch(out_bytes)
        print(f"{m:>7} {first:>8.2f} {best:>7.2f} {g:>7.2f} {big:>6.2f} {own:>6.2f} {best / g:>6.2f} {first / g:>6.2f} "
              f"{a:>7.2f} {peak / 2**30:>9.2f} {out_bytes / 2**30:>10.2f} {peak / out_bytes:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
