"""Baselines and transformation-based selectors: speed of greedy mRMR and Table-1-style CV errors.

Part 1 -- mRMR speed (N = 100 samples, M in {2,000; 10,000} genes, K = 50 picks): bioqpfs
``mrmr_mid`` against a plain-loop reference implemented here (same criterion, same tie rule: its
selection order must be identical) and, side by side in the same run, the PyPI packages
``pymrmr`` (Peng's C++ mRMR, MID, on the same discretised codes) and ``mrmr-selection``
(``mrmr_classif``; F-statistic relevance and correlation redundancy -- a different criterion, so
only its time is comparable).  They are not project dependencies: pass the Python of a throwaway
venv that has them with ``--competitor-python`` (default: /tmp/mrmrvenv/bin/python if it exists),
e.g. ``python -m venv /tmp/mrmrvenv && /tmp/mrmrvenv/bin/pip install mrmr-selection pymrmr``.
Times are ratios against the references measured in the same run.

Part 2 -- paper 004 Table 1 protocol on data available offline: 5-fold stratified CV error (%) of
a linear SVM (C = 1, genes standardised inside the fold) on the genes selected *inside each
training fold* by HSFS, LDFS, mRMR (MID) and MaxRel, with the mean selection time per fold.
wine ships with scikit-learn; wdbc, madelon and arcene come from the papers' data folder
(``BIOQPFS_BENCHMARK_DATA``, default ../shared/data/benchmarks)
(madelon subsampled, stratified, to ``--madelon-samples`` as the paper subsampled to 1,000).

    python benchmarks/bench_baselines.py            # full run (long: HSFS/LDFS on arcene)
    python benchmarks/bench_baselines.py --quick    # small sizes, a minute or two
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
import warnings

import numpy as np
from _common import load_benchmark

import bioqpfs
from bioqpfs import measures

# paper 004, Table 1 (5-fold CV error %, Gaussian-kernel SVM) for orientation
PAPER_TABLE1 = {"wine": dict(n_genes=2, hsfs=4.58, ldfs=8.96), "arcene": dict(n_genes=10, hsfs=11.99, ldfs=22.11),
                "madelon": dict(n_genes=10, hsfs=24.72, ldfs=34.74)}


# ----------------------------------------------------------------------------------- part 1: mRMR speed
def plain_loop_mrmr(codes, y, k):
    """Textbook greedy mRMR (MID) with explicit loops over candidates; MI from np.bincount joint counts."""
    n, m = codes.shape
    c = codes.astype(np.int64)

    def mi(a, b, kb):
        joint = np.bincount(a * kb + b, minlength=3 * kb).astype(float) / n
        pa = np.bincount(a, minlength=3).astype(float) / n
        pb = np.bincount(b, minlength=kb).astype(float) / n
        pj = joint.reshape(3, kb)
        nz = pj > 0
        return float(np.sum(pj[nz] * np.log2(pj[nz] / np.outer(pa, pb)[nz])))

    ky = int(y.max()) + 1
    F = np.array([mi(c[:, j], y, ky) for j in range(m)])
    red = np.zeros(m)
    sel = []
    for _ in range(k):
        scores = {j: (F[j] if not sel else F[j] - red[j] / len(sel)) for j in range(m) if j not in sel}
        best = max(scores.values())
        tol = 1e-9 * max(1.0, abs(best))
        tied = [j for j, v in scores.items() if v >= best - tol]
        pick = min(tied, key=lambda j: (-F[j], j))  # ties: higher relevance, then lower index
        sel.append(pick)
        for j in range(m):
            if j not in sel:
                red[j] += mi(c[:, j], c[:, pick], 3)
    return sel


_COMPETITOR = r"""
import json, sys, time
import numpy as np, pandas as pd
codes = np.load(sys.argv[1]); y = np.load(sys.argv[2]); k = int(sys.argv[3]); which = sys.argv[4]
names = [f"g{j}" for j in range(codes.shape[1])]
out = {}
if which == "pymrmr":
    import pymrmr
    df = pd.DataFrame(codes.astype(int), columns=names)
    df.insert(0, "class", y.astype(int))
    t = time.perf_counter(); sel = pymrmr.mRMR(df, "MID", k); out["seconds"] = time.perf_counter() - t
    out["order"] = [int(s[1:]) for s in sel]
else:
    from mrmr import mrmr_classif
    X = pd.DataFrame(codes.astype(float), columns=names)
    t = time.perf_counter(); sel = mrmr_classif(X=X, y=pd.Series(y), K=k, show_progress=False)
    out["seconds"] = time.perf_counter() - t
    out["order"] = [int(s[1:]) for s in sel]
print("RESULT" + json.dumps(out))
"""


def run_competitor(python, which, codes, y, k, timeout):
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "c.npy"), codes)
        np.save(os.path.join(tmp, "y.npy"), y)
        script = os.path.join(tmp, "run.py")
        with open(script, "w") as fh:
            fh.write(_COMPETITOR)
        try:
            proc = subprocess.run([python, script, os.path.join(tmp, "c.npy"), os.path.join(tmp, "y.npy"), str(k),
                                   which], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return dict(error=f"timeout after {timeout} s")
        for line in proc.stdout.splitlines():
            if line.startswith("RESULT"):
                return json.loads(line[6:])
        return dict(error=(proc.stderr.strip().splitlines() or ["no output"])[-1][:200])


def common_prefix(a, b):
    n = 0
    for u, v in zip(a, b):
        if u != v:
            break
        n += 1
    return n


def bench_mrmr(ms, k, competitor_python, pymrmr_max_m, timeout):
    print(f"== mRMR (MID) speed: N = 100 samples, K = {k} picks, 2 classes, mean +- sd 3-bin codes")
    if not competitor_python:
        print("(pymrmr and mrmr-selection not run: no --competitor-python; python -m venv /tmp/mrmrvenv && "
              "/tmp/mrmrvenv/bin/pip install mrmr-selection pymrmr)")
    rows = []
    for m in ms:
        rng = np.random.default_rng(m)
        y = rng.integers(0, 2, 100)
        X = rng.normal(size=(100, m))
        X[:, : m // 50] += rng.uniform(0.3, 1.5, m // 50) * y[:, None]  # some informative genes
        codes = measures.discretize(X)
        bioqpfs.select(X[:, :200], y, method="mrmr_mid", n_genes=5)  # numba compilation outside the timing
        t = time.perf_counter()
        sel = bioqpfs.select(X, y, method="mrmr_mid", n_genes=k)
        t_ours = time.perf_counter() - t
        t = time.perf_counter()
        ref = plain_loop_mrmr(codes, y, k)
        t_ref = time.perf_counter() - t
        same = sel.ranking.tolist() == ref
        row = dict(M=m, ours=t_ours, plain_loop=t_ref, same_order_as_plain_loop=same)
        print(f"M={m:>6}: bioqpfs {t_ours:8.3f} s | plain-loop reference {t_ref:8.2f} s "
              f"(x{t_ref / t_ours:,.0f}) | same selection order: {same}")
        if competitor_python:
            for which in ("pymrmr", "mrmr-selection"):
                if which == "pymrmr" and m > pymrmr_max_m:
                    print(f"          {which:15s} skipped (M > --pymrmr-max-m={pymrmr_max_m})")
                    continue
                res = run_competitor(competitor_python, which, codes, y, k, timeout)
                if "error" in res:
                    print(f"          {which:15s} failed: {res['error']}")
                    row[which] = res["error"]
                    continue
                agree = common_prefix(res["order"], sel.ranking.tolist())
                overlap = len(set(res["order"]) & set(sel.ranking.tolist()))
                print(f"          {which:15s} {res['seconds']:8.2f} s -> bioqpfs is x{res['seconds'] / t_ours:,.0f} "
                      f"faster | same first {agree}/{k} picks, {overlap}/{k} genes in common")
                row[which] = res["seconds"]
                row[which + "_prefix"] = agree
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------- part 2: CV errors
def load_sets(names, madelon_samples, arcene_genes):
    out = {}
    for name in names:
        if name == "wine":
            from sklearn.datasets import load_wine

            d = load_wine()
            out[name] = (d.data, d.target)
            continue
        X, y, _ = load_benchmark(name)  # the papers' data folder (BIOQPFS_BENCHMARK_DATA)
        if name == "madelon" and madelon_samples < X.shape[0]:
            from sklearn.model_selection import train_test_split

            X, _, y, _ = train_test_split(X, y, train_size=madelon_samples, stratify=y, random_state=0)
        if name == "arcene" and arcene_genes < X.shape[1]:
            X = X[:, :arcene_genes]
        out[name] = (np.asarray(X, dtype=np.float64), np.asarray(y))
    return out


def bench_cv(sets, methods, n_genes, folds):
    from sklearn.model_selection import StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    print(f"\n== {folds}-fold CV error (%) of a linear SVM (C=1) on the genes selected inside each training fold")
    results = {}
    for name, (X, y) in sets.items():
        k = n_genes.get(name, 10)
        print(f"-- {name}: {X.shape[0]} samples x {X.shape[1]} genes, {np.unique(y).size} classes, {k} genes")
        for method in methods:
            errs, secs = [], []
            for fold, (tr, te) in enumerate(StratifiedKFold(folds, shuffle=True, random_state=0).split(X, y)):
                t = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    sel = bioqpfs.select(X[tr], y[tr], method=method, n_genes=k, random_state=fold)
                secs.append(time.perf_counter() - t)
                g = sel.selected
                clf = make_pipeline(StandardScaler(), SVC(kernel="linear", C=1.0)).fit(X[tr][:, g], y[tr])
                errs.append(100.0 * np.mean(clf.predict(X[te][:, g]) != y[te]))
            paper = PAPER_TABLE1.get(name, {}).get(method)
            ptxt = f" (paper Table 1: {paper})" if paper is not None else ""
            print(f"   {method:9s} error {np.mean(errs):6.2f} +- {np.std(errs):5.2f}   selection {np.mean(secs):8.2f} s/fold"
                  f"{ptxt}", flush=True)
            results[(name, method)] = (float(np.mean(errs)), float(np.mean(secs)))
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: M in {500, 2000}, K = 20, wine + wdbc only")
    ap.add_argument("--part", choices=["all", "mrmr", "cv"], default="all")
    default_py = "/tmp/mrmrvenv/bin/python" if os.path.exists("/tmp/mrmrvenv/bin/python") else ""
    ap.add_argument("--competitor-python", default=default_py,
                    help="python of a throwaway venv with pymrmr and mrmr-selection ('' to skip them)")
    ap.add_argument("--pymrmr-max-m", type=int, default=2000, help="skip pymrmr above this M (it is O(hours))")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds allowed per competitor run")
    ap.add_argument("--madelon-samples", type=int, default=1000)
    ap.add_argument("--datasets", default=None, help="comma-separated subset of wine,wdbc,madelon,arcene")
    ap.add_argument("--methods", default="hsfs,ldfs,mrmr_mid,maxrel")
    args = ap.parse_args(argv)
    if args.part in ("all", "mrmr"):
        ms, k = ([500, 2000], 20) if args.quick else ([2000, 10000], 50)
        bench_mrmr(ms, k, args.competitor_python, args.pymrmr_max_m, args.timeout)
    if args.part in ("all", "cv"):
        names = args.datasets.split(",") if args.datasets else (["wine", "wdbc"] if args.quick
                                                                 else ["wine", "wdbc", "madelon", "arcene"])
        sets = load_sets(names, args.madelon_samples, 10000)
        n_genes = dict(wine=2, wdbc=5, madelon=10, arcene=10)
        bench_cv(sets, args.methods.split(","), n_genes, 5)


if __name__ == "__main__":
    main()
