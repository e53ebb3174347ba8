"""MI matrix speed and memory against the raw float32 GEMMs it needs (issue: Foundation benchmark).

    .venv/bin/python benchmarks/bench_mi.py            # M in 2,000 5,000 10,000 20,000, N = 100, 3 bins
    .venv/bin/python benchmarks/bench_mi.py --quick    # M in 2,000 5,000

For every M it prints the wall time of ``measures.mutual_information`` on mean +- sd codes, its
peak traced memory (tracemalloc: NumPy buffers) next to the size of the float64 output, and the
time of the bare GEMMs on the same one-hot blocks (2 materialised bins per gene, upper-triangular
block pairs only) measured in the same process -- the ratio is what the goal (<= 3x) is about.
"""
from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from bioqpfs import measures
from bioqpfs._kernels import information as info


def gemm_reference(codes, repeats=1):
    """Time of the float32 GEMMs alone, same blocks as the kernel uses (best of ``repeats``)."""
    table = info.CodeTable(codes)
    m = codes.shape[1]
    bs = info._block_size(table, table, 1, n_out=m * m)
    best = np.inf
    for _ in range(repeats):
        buf = None
        t = time.perf_counter()
        for i0 in range(0, m, bs):
            A = table.onehot(slice(i0, min(m, i0 + bs)), slice(None))
            for j0 in range(i0, m, bs):
                B = A if j0 == i0 else table.onehot(slice(j0, min(m, j0 + bs)), slice(None))
                shape = (A.shape[1], B.shape[1])
                if buf is None or buf.size < shape[0] * shape[1]:
                    buf = np.empty(shape[0] * shape[1], np.float32)
                np.matmul(A.T, B, out=buf[: shape[0] * shape[1]].reshape(shape))
        best = min(best, time.perf_counter() - t)
    return best


def first_touch(n_bytes):
    """Time to allocate and first write an array of the output's size (page faults: a machine floor)."""
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
    ap.add_argument("--float32", action="store_true", help="float32 output (half the memory)")
    args = ap.parse_args()
    sizes = args.sizes or ([2000, 5000] if args.quick else [2000, 5000, 10000, 20000])
    rng = np.random.default_rng(0)
    measures.mutual_information(rng.integers(0, 3, size=(20, 30)))  # JIT warm-up (cached after first run)
    dtype = np.float32 if args.float32 else np.float64
    print(f"N={args.n}, 3 bins (mean +- sd), {np.dtype(dtype).name} output")
    print("ratio = seconds / GEMM s;  ratio2 = (seconds - alloc s) / GEMM s, i.e. without the page-fault floor")
    print(f"{'M':>7} {'seconds':>8} {'GEMM s':>7} {'alloc s':>7} {'ratio':>6} {'ratio2':>6} {'peak GiB':>9} "
          f"{'output GiB':>10} {'peak/out':>8}")
    for m in sizes:
        X = rng.normal(size=(args.n, m)).astype(np.float32)
        codes = measures.discretize(X)
        tracemalloc.start()
        t = time.perf_counter()
        Q = measures.mutual_information(codes, dtype=dtype)
        secs = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        out_bytes = Q.nbytes
        del Q
        g = gemm_reference(codes)
        a = first_touch(out_bytes)
        print(f"{m:>7} {secs:>8.2f} {g:>7.2f} {a:>7.2f} {secs / g:>6.2f} {(secs - a) / g:>6.2f} {peak / 2**30:>9.2f} "
              f"{out_bytes / 2**30:>10.2f} {peak / out_bytes:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
