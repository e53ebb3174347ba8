"""TLKM-QPFS, IKM-QPFS, IKMA-QPFS against QPFS: time, peak memory and error rates (paper 003, Tables 2-4, 6).

    .venv/bin/python benchmarks/bench_ikm_qpfs.py            # Colon, Leukemia, synthetic 100 x 20,000
    .venv/bin/python benchmarks/bench_ikm_qpfs.py --quick    # Colon and synthetic 100 x 5,000 only
    .venv/bin/python benchmarks/bench_ikm_qpfs.py --refit    # also LOO with selection refit in every fold

Time: wall clock of one untraced run, after every method has run once on a small set (numba's compilation is
not timed; the machine is shared: read the ratios to QPFS, which are measured in
the same process right next to each other).  Memory: peak traced allocation (tracemalloc: NumPy buffers;
numba's own small work arrays are not traced) of a second run.  Error rates: the paper's protocol
(section 5.2) -- data scaled to [-1, 1] per gene, genes selected once on all samples, leave-one-out error
of a linear SVM (LIBLINEAR L2-regularised L2-loss, C = 1) on the top-k genes, k = 10, 20, 30, 50, 100.
Selecting on all samples before cross-validating is optimistic (selection bias); ``--refit`` adds the
bias-free variant for the clustering methods (selection refit on the 61/71 training samples of each fold).

Reference QPFS: ``bioqpfs.qpfs`` with its default solver (quadprog up to a few thousand genes, the
large-scale first-order solver beyond).  On the synthetic 20,000-gene set exact QPFS needs the 20,000^2 MI
matrix (3.2 GB in float64) and is not run; QPFS+Nystrom at rate 0.05 (as the paper did for RAC) is run
instead when this bioqpfs has it.
"""
from __future__ import annotations

import argparse
import inspect
import os
import time
import tracemalloc
import warnings

import _common
import numpy as np
import pandas as pd

import bioqpfs
from bioqpfs.selectors.ikm_qpfs import ikm_qpfs, ikma_qpfs, tlkm_qpfs
from bioqpfs.selectors.qpfs import qpfs

KS = (10, 20, 30, 50, 100)
METHODS = {"TLKM": tlkm_qpfs, "IKM": ikm_qpfs, "IKMA": ikma_qpfs}
#: paper Table 2 (seconds), Table 3 (KB), Table 6 (error %, k = 10, 20, 30, 50, 100)
PAPER = {
    "colon": dict(time=dict(QPFS=104.90, TLKM=0.44, IKM=1.39, IKMA=0.76),
                  memory_kb=dict(QPFS=84472, TLKM=9727, IKM=10075, IKMA=9884),
                  error=dict(QPFS=[14.52, 24.19, 19.36, 20.97, 24.19], TLKM=[20.97, 14.52, 14.52, 17.74, 17.74],
                             IKM=[17.74, 22.58, 14.52, 14.52, 19.35], IKMA=[16.13, 12.90, 16.13, 22.58, 20.97])),
    "leukemia": dict(time=dict(QPFS=4864.69, TLKM=17.06, IKM=38.35, IKMA=38.20),
                     memory_kb=dict(QPFS=636103, TLKM=13874, IKM=12503, IKMA=10427),
                     error=dict(QPFS=[13.89, 9.72, 5.56, 6.94, 5.56], TLKM=[18.06, 15.28, 4.17, 5.56, 5.56],
                                IKM=[13.89, 13.89, 6.94, 4.17, 4.17], IKMA=[13.89, 13.89, 6.94, 4.17, 4.17])),
}


def load_benchmark(name):
    X, y, names = _common.load_benchmark(name)  # the papers' data folder (BIOQPFS_BENCHMARK_DATA)
    return X.astype(np.float64), y, names


def synthetic(n=100, m=20000, seed=0):
    """Co-expression modules plus noise genes; a few modules and single genes carry the class.

    Half the genes form modules of 25 noisy copies (noise sd 0.6) of a latent factor; 8 modules shift their
    factor with the class (effect 1.2 sd), 40 independent genes shift by 1.0 sd; the rest is N(0, 1) noise.
    """
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], n // 2)
    sign = 2.0 * y - 1.0
    X = rng.normal(size=(n, m))
    size, n_mod = 25, (m // 2) // 25
    for g in range(n_mod):
        latent = rng.normal(size=n) + (0.6 * sign if g < 8 else 0.0)
        X[:, g * size:(g + 1) * size] = latent[:, None] + 0.6 * rng.normal(size=(n, size))
    X[:, n_mod * size:n_mod * size + 40] += 0.5 * sign[:, None]
    perm = rng.permutation(m)
    return X[:, perm], y, np.array([f"g{i}" for i in range(m)])


def warm_up():
    """Run every timed method once on a small synthetic set, so that no timed run includes numba's compilation
    (the first dataset's first method paid it: seconds against TLKM's 0.4 s on Colon)."""
    X, y, _ = synthetic(n=20, m=300, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qpfs(X, y, n_genes=5)
        if "nystrom_rate" in inspect.signature(qpfs).parameters:
            qpfs(X, y, n_genes=5, nystrom_rate=0.2)
        for func in METHODS.values():
            func(X, y, random_state=0)


def measure(func, X, y, **kw):
    """(selection, seconds of an untraced run, peak traced MB of a second run)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        t = time.perf_counter()
        sel = func(X, y, **kw)
        seconds = time.perf_counter() - t
        tracemalloc.start()
        func(X, y, **kw)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return sel, seconds, peak


def scaled(X):
    lo, hi = X.min(axis=0), X.max(axis=0)
    return 2.0 * (X - lo) / np.where(hi > lo, hi - lo, 1.0) - 1.0


def loo_errors(X, y, selections, refit_methods=None):
    from bioqpfs.evaluate import error_curve

    specs = {k: v for k, v in selections.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fixed = error_curve(scaled(X), y, specs, n_genes=KS, classifier="liblinear", cv="loo",
                            refit_selection=None)
        tables = [fixed.assign(protocol="select once (paper)")]
        if refit_methods:
            refit = error_curve(scaled(X), y, refit_methods, n_genes=KS, classifier="liblinear", cv="loo")
            tables.append(refit.assign(protocol="refit per fold"))
    df = pd.concat(tables)
    # a ranking shorter than k gives no prediction in that fold: report k only where every fold had k genes
    df.loc[df["n_folds"] < df["n_folds"].max(), "mean_error"] = np.nan
    wide = df.pivot_table(index=["protocol", "method"], columns="n_genes", values="mean_error", sort=False,
                          dropna=False) * 100
    return wide.reindex(columns=list(KS)).dropna(how="all")  # pivot's cross product adds absent pairs


def run_dataset(label, X, y, *, reference, refit, paper_key=None, errors=True):
    print(f"\n=== {label}: {X.shape[0]} samples x {X.shape[1]} genes, {np.unique(y).size} classes ===", flush=True)
    rows, sels = [], {}
    ref_name, ref_func, ref_kw = reference if reference else (None, None, None)
    entries = ([(ref_name, ref_func, ref_kw)] if reference else []) + [(k, f, {}) for k, f in METHODS.items()]
    for name, func, kw in entries:
        sel, secs, peak = measure(func, X, y, random_state=0, **kw)
        d = sel.diagnostics
        sels[name] = sel
        ranked = d.get("n_ranked_by_qpfs", sel.ranking.size)   # clustering methods: genes weighed by QPFS
        rows.append(dict(method=name, seconds=secs, peak_MB=peak, ranked=ranked,
                         qpfs_calls=d.get("n_qpfs_calls", 1), distances=d.get("n_distance_computations", 0),
                         levels=d.get("levels_reached", 0), solver=d.get("solver", d.get("qpfs_solver", "")),
                         alpha=d.get("alpha_hat", d.get("alpha_used", np.nan))))
        print(f"  {name:10s} {secs:8.2f} s  {peak:9.1f} MB  ranked {ranked}", flush=True)
    table = pd.DataFrame(rows).set_index("method")
    if reference:
        table["time_vs_ref"] = table["seconds"] / table.loc[ref_name, "seconds"]
        table["mem_vs_ref"] = table["peak_MB"] / table.loc[ref_name, "peak_MB"]
    if paper_key:
        p = PAPER[paper_key]
        table["paper_s"] = [p["time"].get(m, np.nan) for m in table.index]
        table["paper_KB"] = [p["memory_kb"].get(m, np.nan) for m in table.index]
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.precision", 3):
        print(table.to_string())
    if not errors:
        return table, None
    refit_methods = {f"{k}": k.lower() + "_qpfs" for k in METHODS} if refit else None
    err = loo_errors(X, y, sels, refit_methods)
    if paper_key:
        paper = pd.DataFrame(PAPER[paper_key]["error"], index=list(KS)).T
        paper.index = pd.MultiIndex.from_product([["paper Table 6"], paper.index])
        err = pd.concat([err, paper])
    print("  LOO error rate (%) of a linear SVM on the top-k genes (NaN: fewer than k genes ranked, in any fold)")
    with pd.option_context("display.width", 200, "display.precision", 2):
        print(err.to_string())
    return table, err


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="Colon and a 100 x 5,000 synthetic set only")
    ap.add_argument("--refit", action="store_true", help="also LOO with selection refit in every fold")
    args = ap.parse_args(argv)
    print(f"bioqpfs {bioqpfs.__version__}; {os.cpu_count()} CPUs (shared; timings are noisy, ratios are "
          f"measured in the same process)")
    warm_up()   # numba's compilation outside every timed run
    X, y, _ = load_benchmark("colon")
    run_dataset("Colon", X, y, reference=("QPFS", qpfs, {}), refit=args.refit, paper_key="colon")
    if not args.quick:
        X, y, _ = load_benchmark("leukemia")
        run_dataset("Leukemia", X, y, reference=("QPFS", qpfs, {}), refit=args.refit, paper_key="leukemia")
    m = 5000 if args.quick else 20000
    X, y, _ = synthetic(m=m)
    if m <= 5000:
        reference = ("QPFS", qpfs, {})
    elif "nystrom_rate" in inspect.signature(qpfs).parameters:
        reference = ("QPFS+Nys", qpfs, dict(nystrom_rate=0.05))
        print(f"\n(exact QPFS at M={m} would need the {m}^2 MI matrix, {m * m * 8 / 2**30:.1f} GiB in float64: "
              "QPFS+Nystrom at rate 0.05 is the reference)")
    else:
        reference = None
        print(f"\n(exact QPFS at M={m} would need the {m}^2 MI matrix, {m * m * 8 / 2**30:.1f} GiB: not run)")
    run_dataset("synthetic modules", X, y, reference=reference, refit=False)
    if not args.quick:
        scaling()


def scaling(ms=(5000, 10000, 20000)):
    """Time, traced peak and distance count against M at N = 100: all three should grow ~linearly."""
    print("\n=== scaling in M (synthetic, N = 100; ratios to the smallest M) ===")
    rows = []
    for m in ms:
        X, y, _ = synthetic(m=m)
        for name, func in METHODS.items():
            sel, secs, peak = measure(func, X, y, random_state=0)
            rows.append(dict(M=m, method=name, seconds=secs, peak_MB=peak,
                             distances=sel.diagnostics["n_distance_computations"]))
    df = pd.DataFrame(rows)
    first = df[df["M"] == ms[0]].set_index("method")
    for col in ("seconds", "peak_MB", "distances"):
        df[f"{col}_ratio"] = df[col].to_numpy() / first.loc[df["method"], col].to_numpy()
    with pd.option_context("display.width", 200, "display.precision", 3):
        print(df.to_string(index=False))


if __name__ == "__main__":
    main()
