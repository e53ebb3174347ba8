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

``--sparse``: single-cell shapes instead (Poisson log-counts of 8 types at three densities, 2,000 genes, 10,000 and
100,000 cells; ``--quick``: 10,000 cells), coded as the default recipe codes them (``zero_quantile``, 3 bins) and
as the paper does (mean +- sd).  For each it prints the share of kept entries (each gene's most frequent level left
out, :class:`bioqpfs._kernels.counting_numpy.SparseCodes`) and of genes held in the sparse form (``held``: the
sparse ones, blocks laid out by density, where the codes are not sparse on average), the MI matrix with the
automatic choice of counting (``auto s``) against every block pair by GEMM in the same process (``gemm s``, the CSR
never built), best of ``--repeats``, unweighted and with class-balanced weights (the recipe's), and whether the two
matrices are bit-identical.  ``--calibrate`` measures :data:`~bioqpfs._kernels.counting_numpy.SPARSE_COST` on this machine.

``--levels``: the default recipe's three discretisations of a sparse X -- the codes of Q (``zero_quantile``, 3 bins),
and the count of every class in every level of the 32 fine bins of the per-class relevance and of the 255
pair-order levels -- from each gene's non-zero values sorted once (``sorted s``: :func:`bioqpfs._kernels.discretize.
sharing_sorted_columns`, :class:`~bioqpfs._kernels.discretize.SparseLevelCounts`) against each rule's codes counted by
the backend (``codes s``, the way before), best of ``--repeats`` in the same process, with the peak traced memory of
each (tracemalloc: NumPy buffers) and whether the codes and counts are identical.  Shapes: pbmc68k-like 700 x 765 and
Poisson counts of 8 types at 21% and 11% non-zero, 20,000 and 100,000 cells x 2,000 genes (``--quick``: 700 and
20,000 cells).
"""
from __future__ import annotations

import argparse
import contextlib
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


def _mi_seconds(codes, weights, y, repeats, way):
    """(best seconds, matrix) of the MI matrix of ``codes`` counted ``way`` ("auto" or "gemm": no sparse form)."""
    from bioqpfs._kernels import counting_numpy as cn

    old = cn.SPARSE_COST["update"]
    cn.SPARSE_COST["update"] = old if way == "auto" else np.inf  # inf: the sparse form never pays, never built
    try:
        best, Q = np.inf, None
        for _ in range(repeats):
            table = info.CodeTable(codes, groups=None if weights is None else y, weights=weights)
            t = time.perf_counter()
            Q = info.pairwise_information(table, None, "mi")
            best = min(best, time.perf_counter() - t)
        return best, Q
    finally:
        cn.SPARSE_COST["update"] = old


def sparse_rows(cells, genes=2000, repeats=2, scales=(0.6, 0.25, 0.1)):
    """Rows of the ``--sparse`` table (see the module docstring)."""
    from _common import poisson_types

    rows = []
    for n in cells:
        for scale in scales:
            X, y = poisson_types(n, genes, rate_scale=scale)
            for rule in ("zero_quantile", "mean_sd"):
                codes = measures.discretize(X, rule)
                form = info.CodeTable(codes).backend.sparse_codes()
                kept = float(np.mean(form.density)) if form is not None else float("nan")
                held = form.n_held / genes if form is not None else 0.0
                for weighted in (False, True):
                    w = info.class_sample_weights(y, "balanced") if weighted else None
                    t_auto, Q_auto = _mi_seconds(codes, w, y, repeats, "auto")
                    t_gemm, Q_gemm = _mi_seconds(codes, w, y, repeats, "gemm")
                    rows.append(dict(cells=n, genes=genes, nonzero=X.nnz / (n * genes), codes=rule, kept=kept, held=held,
                                     weights="balanced" if weighted else "none", auto_s=t_auto, gemm_s=t_gemm,
                                     ratio=t_gemm / t_auto, identical=bool(np.array_equal(Q_auto, Q_gemm))))
    return rows


def _levels_way(X, y, way):
    """The codes and levels of Q and the class counts of the fine bins and of the pair-order levels, ``way``
    "sorted" or "codes"."""
    from bioqpfs._kernels import discretize as disc
    from bioqpfs.selectors._common import ClassLevelCounts

    C = int(y.max()) + 1
    with disc.sharing_sorted_columns(X) if way == "sorted" else contextlib.nullcontext():
        codes, levels = disc.codes(X, "zero_quantile", n_bins=3)
        fine = ClassLevelCounts(X, "zero_quantile", 32, y, C, use_sorted=way == "sorted").counts()
        order = ClassLevelCounts(X, "quantile", 255, y, C, use_sorted=way == "sorted").counts()
    return codes, levels, fine, order


def levels_rows(shapes, repeats=2):
    """Rows of the ``--levels`` table (see the module docstring): ``shapes`` of ``(cells, genes, rate_scale)``."""
    from _common import poisson_types

    rows = []
    for n, m, scale in shapes:
        X, y = poisson_types(n, m, rate_scale=scale)
        res, secs, peak = {}, {}, {}
        for way in ("sorted", "codes"):
            tracemalloc.start()
            res[way] = _levels_way(X, y, way)
            peak[way] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        for way in ("sorted", "codes", "sorted", "codes")[:2 * repeats]:  # alternating: the machine's drift shared
            secs[way] = min(secs.get(way, np.inf), _timed(lambda: _levels_way(X, y, way)))
        same = all(np.array_equal(a, b) for a, b in zip(res["sorted"], res["codes"]))
        rows.append(dict(cells=n, genes=m, nonzero=X.nnz / (n * m), sorted_s=secs["sorted"], codes_s=secs["codes"],
                         ratio=secs["codes"] / secs["sorted"], sorted_peak_mb=peak["sorted"] / 2**20,
                         codes_peak_mb=peak["codes"] / 2**20, identical=bool(same)))
    return rows


def main_levels(args):
    import pandas as pd

    shapes = [(700, 765, 0.6), (20000, 2000, 0.6), (20000, 2000, 0.2)]
    if not args.quick:
        shapes += [(100000, 2000, 0.6), (100000, 2000, 0.2)]
    _levels_way(*__import__("_common").poisson_types(300, 50), "sorted")  # JIT warm-up
    df = pd.DataFrame(levels_rows(shapes, repeats=min(args.repeats, 2)))
    print(f"{info.n_workers()} worker threads")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3g}"))


def calibrate(n=20000, block=512, repeats=3):
    """SPARSE_COST on this machine, one thread, in float32 GEMM multiply-adds: the scatter of one block pair of
    3-level codes (a kept share of 10%: per update; of 0.5%: per row holding entries) and the restores per gene
    pair, each timed alone."""
    from bioqpfs._kernels import counting_numpy as cn
    from bioqpfs._threads import blas_limited

    rng = np.random.default_rng(0)
    with blas_limited(1):
        A = (rng.random((n, 2 * block)) < 0.5).astype(np.float32)
        mac = min(_timed(lambda: A.T @ A) for _ in range(repeats)) / (n * (2 * block) ** 2)
    scatter = {}
    for share in (0.005, 0.1):
        codes = np.where(rng.random((n, 2 * block)) < share, rng.integers(1, 3, (n, 2 * block)), 0).astype(np.uint8)
        form = cn.SparseCodes(*_csr(codes), 3)
        (lo_I, hi_I, pos_I, _), (lo_J, hi_J, pos_J, _) = form.pair(slice(0, block), slice(block, 2 * block))
        K = np.zeros((2 * block, 2 * block), np.float32)
        m = np.zeros((2, block), np.float32), np.zeros((2, block), np.float32)
        cols = np.empty(block, np.int64)
        run = lambda: cn._scatter_counts(form.indptr, form.gene, form.level, 0, n, lo_I, hi_I, pos_I, lo_J,  # noqa: E731
                                         hi_J, pos_J, K, *m, cols)
        scatter[share] = min(_timed(run) for _ in range(repeats))
    rows_with_entries = n * (1 - (1 - 0.005) ** (2 * block))
    cost = {"update": scatter[0.1] / (n * (0.1 * block) ** 2) / mac, "row": scatter[0.005] / rows_with_entries / mac}
    for L, restore in ((2, cn._restore_2), (3, cn._restore_3), (5, None)):
        nb = L - 1
        K = rng.integers(0, 50, (nb * block, nb * block)).astype(np.float32)
        m_I = rng.integers(0, 500, (nb, block)).astype(np.float32)
        imp = rng.integers(0, L, block).astype(np.uint8)
        out = np.empty_like(K)
        args = (K, m_I, m_I, 5000.0, imp, imp) + ((out,) if restore else (L, out)) + (np.nan, True)
        restore = restore or cn._restore_implicit
        restore(*args)
        secs = min(_timed(lambda: restore(*args)) for _ in range(repeats)) / block ** 2 / mac
        cost[f"restore_{L}" if L < 5 else "restore_level"] = secs / (1 if L < 5 else L * L)
    return cost


def _timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def _csr(codes):
    """(indptr, gene, level, implicit, density) of codes whose implicit level is 0 everywhere."""
    n, m = codes.shape
    r, g = np.nonzero(codes)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(r, minlength=n), out=indptr[1:])
    return indptr, g.astype(np.int32), (codes[r, g] - 1).astype(np.uint8), np.zeros(m, np.uint8), \
        np.count_nonzero(codes, axis=0) / n


def main_sparse(args):
    import pandas as pd

    if args.calibrate:
        print("SPARSE_COST measured (GEMM multiply-adds):", {k: round(v, 1) for k, v in calibrate().items()})
    cells = [10000] if args.quick else [10000, 100000]
    df = pd.DataFrame(sparse_rows(cells, repeats=args.repeats))
    print(f"{info.n_workers()} worker threads")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3g}"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sparse", action="store_true", help="single-cell shapes: sparse against GEMM counting")
    ap.add_argument("--calibrate", action="store_true", help="with --sparse: measure SPARSE_COST here")
    ap.add_argument("--levels", action="store_true", help="the recipe's discretisations: sorted once against codes")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--sizes", type=int, nargs="*", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--float32", action="store_true", help="float32 output (half the memory)")
    args = ap.parse_args(argv)
    if args.sparse and args.levels:
        ap.error("--sparse and --levels are two runs: give one of them")
    if args.calibrate and not args.sparse:
        ap.error("--calibrate measures SPARSE_COST in the --sparse run: add --sparse")
    if (args.sparse or args.levels) and (args.n != 100 or args.sizes is not None or args.float32):
        ap.error("--n, --sizes and --float32 size the dense MI run: drop them with --sparse or --levels")
    if args.sparse:
        return main_sparse(args)
    if args.levels:
        return main_levels(args)
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
