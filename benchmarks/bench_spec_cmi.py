"""SPEC_CMI speed: ranking time given Q (paper Table 3) and end-to-end SPEC_CMI with the CMI matrix.

    python benchmarks/bench_spec_cmi.py            # full: ranking M = 1k/5k/10k/20k, end to end M = 2k/10k/20k
    python benchmarks/bench_spec_cmi.py --quick    # ranking M = 1k/2k, end to end M = 2k (under a minute)

1. Ranking given Q (Nguyen et al. 2014, Table 3: SPEC_CMI 0.01 s / 0.17 s / 0.68 s / 2.63 s at
   M = 1,000 / 5,000 / 10,000 / 20,000 in Matlab on a 2.9 GHz i7).  As in the paper, Q is a random
   symmetric matrix (here entrywise non-negative, uniform [0, 1)).  Reference in the same process:
   one product ``Q @ v`` (the Lanczos method needs a few dozen), and at M <= 2,000 the full
   ``numpy.linalg.eigh`` that an iterative solver avoids.

2. End to end, N = 100 samples, 3 classes, genes loading on 40 latent factors (5 shifted by the
   class): discretisation + the CMI matrix Q (default storage: float64 below 5,000 genes, float32
   from there on) + eigenvector + ranking.  Reference: the raw float32
   GEMM time of the class-wise indicator products the CMI matrix needs -- for each class c the
   (M*b) x (M*b) products O_c^T O_c over the upper block triangle, with b = 2 materialised bins
   (what the kernel computes; the third bin follows from marginals) and with all b = 3 bins (the
   naive C * B^2 count), each the faster of two schedules (``_common.py``).  Goal: end to end at
   M = 20,000 under 30 s, CMI within 3x of the GEMM.
   SPEC_CMI + Nystrom (gamma = 0.2) is timed on the same data, with the top-50 overlap with the
   exact panel.

The machine is shared (2 cores, other jobs): compare ratios, not absolute seconds.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from _common import gemm_seconds, synthetic


def random_q(m, rng):
    """Symmetric uniform [0, 1) matrix, symmetrised block by block (no M x M temporary)."""
    Q = rng.random((m, m))
    b = 2048
    for i in range(0, m, b):
        Q[i:i + b, :i] = Q[:i, i:i + b].T
        D = Q[i:i + b, i:i + b]
        D[...] = np.triu(D) + np.triu(D, 1).T
    return Q


def bench_ranking(sizes, repeats):
    from bioqpfs._kernels import spectral as sp

    print("\n== ranking given Q (paper Table 3; SPEC_CMI Matlab: 0.01/0.17/0.68/2.63 s at 1k/5k/10k/20k) ==")
    print(f"{'M':>7} {'lanczos s':>10} {'matvecs':>8} {'1 matvec s':>11} {'ratio':>7} {'eigh s':>8} {'eigh/lanczos':>13}")
    rng = np.random.default_rng(0)
    for m in sizes:
        Q = random_q(m, rng)
        v = np.ones(m)
        t = time.perf_counter()
        for _ in range(3):
            Q @ v
        t_mv = (time.perf_counter() - t) / 3
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            lam, x, info = sp.dominant_eigenvector(Q)
            x, _ = sp.sign_consistent(x)
            np.argsort(-x, kind="stable")
            times.append(time.perf_counter() - t)
        t_l = float(np.median(times))
        eig = ""
        if m <= 2000:
            t = time.perf_counter()
            w, V = np.linalg.eigh(Q)
            t_e = time.perf_counter() - t
            assert abs(abs(V[:, -1] @ x) - 1) < 1e-8
            eig = f"{t_e:8.2f} {t_e / t_l:13.1f}"
        print(f"{m:>7,} {t_l:10.3f} {info['n_matvec']:>8} {t_mv:11.4f} {t_l / t_mv:7.1f} {eig}", flush=True)
        del Q


def bench_end_to_end(sizes, with_nystrom=True):
    import bioqpfs
    from bioqpfs import measures
    from bioqpfs._kernels import information as info
    from bioqpfs.selectors import spec_cmi as sc

    print("\n== end-to-end SPEC_CMI, N = 100, 3 classes (goal: < 30 s at M = 20,000; CMI <= 3x GEMM) ==")
    print(f"{'M':>7} {'total s':>8} {'CMI s':>7} {'eig s':>7} {'GEMM b=2':>9} {'CMI/GEMM2':>10} {'GEMM b=3':>9} "
          f"{'CMI/GEMM3':>10} {'nys0.2 s':>9} {'top50':>6}")
    # warm the numba kernels
    X, y = synthetic(300)
    bioqpfs.spec_cmi(X, y)
    for m in sizes:
        X, y = synthetic(m)
        t = time.perf_counter()
        sel = bioqpfs.spec_cmi(X, y, n_genes=50)
        total = time.perf_counter() - t
        d = sel.diagnostics
        codes, levels = measures.codes_and_levels(X, "mean_sd")
        table = info.CodeTable(codes, levels, groups=y)
        g2 = gemm_seconds(table, classes=True, repeats=1)[0]
        g3 = gemm_seconds(table, classes=True, n_bins=table.n_bins, repeats=1)[0]
        nys = top = ""
        if with_nystrom:
            t = time.perf_counter()
            s2 = sc.spec_cmi_nystrom(X, y, n_genes=50, nystrom_rate=0.2, random_state=0)
            t_n = time.perf_counter() - t
            nys = f"{t_n:9.2f}"
            top = f"{np.intersect1d(s2.selected, sel.selected).size:>6}"
        print(f"{m:>7,} {total:8.2f} {d['seconds_measures']:7.2f} {d['seconds_solve']:7.2f} {g2:9.2f} "
              f"{d['seconds_measures'] / g2:10.1f} {g3:9.2f} {d['seconds_measures'] / g3:10.1f} {nys} {top}", flush=True)
        del sel


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes only (under a minute)")
    args = ap.parse_args(argv)
    if args.quick:
        bench_ranking([1000, 2000], repeats=3)
        bench_end_to_end([2000])
    else:
        bench_ranking([1000, 5000, 10000, 20000], repeats=3)
        bench_end_to_end([2000, 10000, 20000])


if __name__ == "__main__":
    main()
