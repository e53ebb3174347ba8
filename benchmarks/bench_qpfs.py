"""QPFS at genome and single-cell scale: seconds, peak memory, solver work, objective gap (issues 3, 14).

    python benchmarks/bench_qpfs.py            # full run: N=100 at M = 2,000 / 10,000 / 20,000, then the
                                               # single-cell shapes 20,000 x 2,000 and 2,000 x 20,000 (~15 min)
    python benchmarks/bench_qpfs.py --sc100k   # add 100,000 cells x 2,000 genes (long; run it niced)
    python benchmarks/bench_qpfs.py --quick    # M = 500 / 1,000 / 2,000 and small single-cell shapes, a few minutes
    python benchmarks/bench_qpfs.py --itmo /path/to/venv/bin/python   # add ITMO_FS qpfs_filter at the smallest M
    python benchmarks/bench_qpfs.py --psd-evidence   # CV error / stability of psd_fix on SRBCT, Colon, Leukemia
    python benchmarks/bench_qpfs.py --face-factor    # the active-set solver's kept Cholesky factor against a new
                                                     # factorisation per step, on the default recipe's class QPs

N=100 shapes: synthetic data, 100 samples, 3 classes: genes load on 40 latent factors (so Q is
redundant as in expression data) and the genes of 5 factors shift with the class.
Single-cell shapes (issue 14): sparse Poisson counts, log1p, 8 cell types with 10% of the genes
type-dependent (``_common.poisson_types``), and 2,000 cells x 20,000 genes with 50 planted genes
(``_common.planted_sparse``).

Each configuration runs in a fresh subprocess so its peak RSS (``resource.getrusage``, includes the
interpreter and libraries; the import-only baseline is printed too) is its own.  Timings are end to
end (``qpfs(X, y)``: discretisation, MI, alpha, psd fix, QP), split into measures (MI + F) and solve
(psd fix + QP).  ``old/new``: the same QP, in the same process, solved again by the previous default
(``solver="spg"``) and by the new default (``"auto"``: quadprog up to 300 genes, the active-set solver
beyond); the ratio of their solve seconds and the difference of their objectives.  The machine is
shared: the load average is printed with every row.

``--face-factor``: the class QPs of the default recipe (``bioqpfs.select(X, y)``, one simplex QP per class on a
shared Q), captured as the active-set solver receives them, then solved again in this process by the active-set
iterations twice: with the Cholesky factor of the working-set block kept along the steps (the solver) and with the
block read and factored anew at every step (the cost of the solver before, same iterations).  Shapes: single-cell
(``poisson_types``, sparse; 20,000 x 2,000 and x 5,000 cells x genes, ``--quick`` 3,000 x 800) and microarray
(Leukemia, 72 x 7,129, and synthetic 100 x 2,000).  Prints the solver seconds of each (best of 3, all classes), the
ratio, the steps, the largest working set and max |x_kept - x_anew|.

Objective gap (Nystrom): ``g(x) - g(x*)`` relative to ``|g(x*)|`` with ``g`` the exact problem solved at that
M (eq. 2 with the exact alpha_hat and the psd fix of the exact run), ``x*`` the exact optimum.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from _common import load_benchmark, planted_sparse, poisson_types, synthetic

HERE = os.path.dirname(os.path.abspath(__file__))


def _rss_mb():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _data(cfg):
    data = cfg.get("data", "factors")
    if data == "factors":
        return synthetic(cfg["m"], seed=cfg.get("seed", 0))
    if data == "types":
        return poisson_types(cfg["n"], cfg["m"], seed=cfg.get("seed", 0))
    return planted_sparse(cfg["n"], cfg["m"], seed=cfg.get("seed", 0))


def _compare_solvers(X, y, sel, psd_fix, solvers):
    """The QP of ``sel`` (same Q, F, alpha) solved by each of ``solvers``, one after the other in this process."""
    from bioqpfs.selectors import qpfs as Q_
    from bioqpfs.selectors._common import prepare, similarity_and_relevance

    X, y_codes, _, constant = prepare(X, y)
    keep = np.flatnonzero(~constant)
    m = keep.size
    Q, F, *_ = similarity_and_relevance(X[:, keep], y_codes, similarity="mi", relevance=None, discretization="mean_sd",
                                        n_bins=3, base=2, dtype=np.float32 if m >= Q_.FLOAT32_FROM else np.float64)
    res = {}
    for solver in solvers:
        t = time.perf_counter()
        _, d = Q_.solve_qpfs(Q, F, sel.params["alpha"], solver=solver, psd_fix=psd_fix)
        res[solver] = dict(seconds_solve=time.perf_counter() - t, iterations=d["iterations"], solver_used=d["solver"],
                           n_nonzero=d["n_nonzero"], kkt=d["kkt_residual"], objective=d["objective_convexified"])
    return res


def run_one(cfg):
    """Child process: one configuration; prints a JSON line."""
    from bioqpfs.selectors import qpfs as Q_

    X, y = _data(cfg)
    base = _rss_mb()
    out = dict(cfg)
    t = time.perf_counter()
    if cfg["kind"] == "exact":
        sel = Q_.qpfs(X, y, solver=cfg["solver"], psd_fix=cfg.get("psd_fix", "shift"), n_genes=50)
        out["seconds"] = time.perf_counter() - t
        out["peak_rss_mb"] = _rss_mb()
        x = sel.weights
        d = sel.diagnostics
        out.update(objective=d["objective"], objective_convexified=d["objective_convexified"],
                   alpha=sel.params["alpha"], psd_shift=d.get("psd_shift"), min_eigenvalue=d.get("min_eigenvalue"),
                   n_nonzero=d["n_nonzero"], iterations=d["iterations"], kkt=d["kkt_residual"], solver_used=d["solver"],
                   seconds_measures=d["seconds_measures"], seconds_solve=d["seconds_solve"])
        if cfg.get("data") == "planted":
            out["planted_in_top50"] = len(set(sel.ranking[:50].tolist()) & set(range(50)))
        if cfg.get("compare"):
            out["compare"] = _compare_solvers(X, y, sel, cfg.get("psd_fix", "shift"), cfg["compare"])
        if cfg.get("gap_files"):
            # objectives of other runs' weights on this exact problem (same alpha, same psd fix)
            from bioqpfs.selectors._common import similarity_and_relevance

            Q, F, *_ = similarity_and_relevance(
                X, y, similarity="mi", relevance=None, discretization="mean_sd", n_bins=3, base=2, need_full=True,
                dtype=np.float32 if cfg["m"] >= Q_.FLOAT32_FROM else np.float64)
            a = sel.params["alpha"]
            shift = d.get("psd_shift") or 0.0

            def g(w):
                s = np.flatnonzero(w)
                qw = np.asarray(Q[s], dtype=np.float64).T @ w[s]
                return 0.5 * (1 - a) * w @ qw - a * F @ w, 0.5 * (1 - a) * w @ qw + 0.5 * shift * w @ w - a * F @ w

            g0, g0c = g(x)
            gaps = {}
            for name, path in cfg["gap_files"].items():
                w = np.load(path)
                gw, gwc = g(w)
                gaps[name] = dict(gap=(gw - g0) / abs(g0), gap_convexified=(gwc - g0c) / abs(g0c),
                                  top50_overlap=len(set(np.argsort(-w, kind="stable")[:50])
                                                     & set(np.argsort(-x, kind="stable")[:50])) / 50)
            out["gaps"] = gaps
    else:
        sel = Q_.qpfs(X, y, nystrom_rate=cfg["p"], random_state=cfg.get("seed", 0), eig_threshold=cfg.get("delta", 0.0),
                      nystrom_qp=cfg.get("nystrom_qp", "auto"), n_genes=50)
        out["seconds"] = time.perf_counter() - t
        out["peak_rss_mb"] = _rss_mb()
        x = sel.weights
        d = sel.diagnostics
        out.update(alpha=sel.params["alpha"], r=d["r"], k_tilde=d["k_tilde"], n_nonzero=d["n_nonzero"],
                   rel_frob_err=d["relative_frobenius_error_estimate"], nystrom_qp=d["nystrom_qp"],
                   seconds_rows=d["seconds_rows"], seconds_eigen=d["seconds_eigen"], seconds_qp=d["seconds_qp"],
                   seconds_measures=d["seconds_measures"], seconds_solve=d["seconds_solve"])
        if cfg.get("data") == "planted":
            out["planted_in_top50"] = len(set(sel.ranking[:50].tolist()) & set(range(50)))
    out["load"] = os.getloadavg()[0]
    out["baseline_rss_mb"] = base
    if cfg.get("save"):
        np.save(cfg["save"], x)
    print("RESULT " + json.dumps(out, default=float))


def spawn(cfg, python=sys.executable):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([python, os.path.abspath(__file__), "--one", json.dumps(cfg)], capture_output=True, text=True,
                       env=env)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"configuration {cfg} failed:\n{p.stderr[-3000:]}")


ITMO_SNIPPET = r"""
import sys, time, json, resource, numpy as np
sys.path.insert(0, {here!r})
from _common import planted_sparse, poisson_types, synthetic
X, y = synthetic({m})
from ITMO_FS.filters.univariate import qpfs_filter
t = time.perf_counter()
try:
    res = qpfs_filter(X.astype(np.float64), y + 1)  # it expects labels 1..C
    ok = "ok"
except Exception as e:
    res = None; ok = type(e).__name__ + ": " + str(e)[:120]
print("RESULT " + json.dumps(dict(seconds=time.perf_counter() - t, status=ok,
      peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))
"""


def run_itmo(python, m):
    p = subprocess.run([python, "-c", ITMO_SNIPPET.format(here=HERE, m=m)], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return dict(seconds=float("nan"), status="failed: " + p.stderr[-300:].replace("\n", " "))


def _show(name, r, notes=""):
    print(f"{name:38s} {r['seconds']:9.2f} {r.get('peak_rss_mb', float('nan')):9.0f} {r.get('n_nonzero', 0):5d}  {notes}",
          flush=True)


def _solver_notes(r):
    """measures / solve split, solver work, and the old/new comparison of one exact run."""
    notes = (f"measures {r['seconds_measures']:.1f}s solve {r['seconds_solve']:.1f}s [{r['solver_used']}, "
             f"{r['iterations']} it, KKT {r['kkt']:.1e}]")
    c = r.get("compare")
    if c and "spg" in c and "auto" in c:
        o, n = c["spg"], c["auto"]
        notes += (f"; same QP: spg {o['seconds_solve']:.1f}s ({o['iterations']} it) / auto {n['seconds_solve']:.2f}s "
                  f"= {o['seconds_solve'] / max(n['seconds_solve'], 1e-9):.0f}x, |obj diff| "
                  f"{abs(o['objective'] - n['objective']):.1e}")
    if "planted_in_top50" in r:
        notes += f"; planted genes in top 50: {r['planted_in_top50']}/50"
    return notes + f"; load {r['load']:.1f}"


def bench(quick, itmo_python, sc100k=False):
    sizes = [500, 1000, 2000] if quick else [2000, 10000, 20000]
    rates = [0.01, 0.05, 0.1] if not quick else [0.05, 0.1, 0.2]
    small, big = sizes[0], sizes[-1]
    tmp = tempfile.mkdtemp(prefix="bench_qpfs_")
    print(f"synthetic N=100, 3 classes; sizes {sizes}; Nystrom p {rates} at M={big}; cpus={os.cpu_count()}")
    print(f"{'config':38s} {'seconds':>9s} {'peak MB':>9s} {'nnz':>5s}  notes")

    show = _show
    # quadprog vs the default at the smallest size, same process family
    rq = spawn(dict(kind="exact", m=small, solver="quadprog"))
    rs = spawn(dict(kind="exact", m=small, solver="auto", save=os.path.join(tmp, "auto_small.npy"),
                    gap_files={}, compare=["spg", "auto"]))
    show(f"exact quadprog M={small}", rq, f"solve {rq['seconds_solve']:.2f}s (baseline RSS {rq['baseline_rss_mb']:.0f} MB)")
    show(f"exact auto     M={small}", rs,
         _solver_notes(rs) + f"; vs quadprog end-to-end {rq['seconds'] / rs['seconds']:.1f}x, "
         f"solve {rq['seconds_solve'] / max(rs['seconds_solve'], 1e-9):.0f}x, "
         f"|obj diff|/|obj| {abs(rq['objective_convexified'] - rs['objective_convexified']) / abs(rq['objective_convexified']):.1e}")
    if itmo_python:
        ri = run_itmo(itmo_python, small)
        show(f"ITMO_FS qpfs_filter M={small}", ri, f"{ri['status']}; bioqpfs is {ri['seconds'] / rs['seconds']:.0f}x faster")
    for m in sizes[1:-1]:
        r = spawn(dict(kind="exact", m=m, solver="auto", compare=["spg", "auto"]))
        show(f"exact auto     M={m}", r, _solver_notes(r) + f", shift {r['psd_shift']:.3g}")
    files = {}
    nys = []
    for p in rates:
        f = os.path.join(tmp, f"nys_{p}.npy")
        r = spawn(dict(kind="nystrom", m=big, p=p, save=f))
        files[f"nystrom p={p}"] = f
        nys.append(r)
    re_ = spawn(dict(kind="exact", m=big, solver="auto", gap_files=files, compare=["spg", "auto"]))
    show(f"exact auto     M={big}", re_, _solver_notes(re_) + f", lambda_min {re_['min_eigenvalue']:.3g}, "
                                        f"shift {re_['psd_shift']:.3g}")
    for p, r in zip(rates, nys):
        g = re_["gaps"][f"nystrom p={p}"]
        show(f"nystrom p={p:<5g} M={big}", r,
             f"r={r['r']} k~={r['k_tilde']} rows {r['seconds_rows']:.1f}s eig {r['seconds_eigen']:.1f}s "
             f"QP {r['seconds_qp']:.1f}s; gap {g['gap']:.3f} (convexified {g['gap_convexified']:.3f}), "
             f"top-50 overlap {g['top50_overlap']:.2f}, ||Q-Qhat||_F/||Q||_F ~ {r['rel_frob_err']:.2f}")
    bench_single_cell(quick, sc100k, show)


def bench_single_cell(quick, sc100k, show):
    """Issue 14 shapes: exact QPFS (psd_fix 'none', the default, and 'shift') and QPFS+Nystrom on sparse counts."""
    n_types, n_big, m_planted = (2000, 500, 3000) if quick else (20000, 2000, 20000)
    print("\nsingle-cell shapes (sparse Poisson log1p; cells x genes); old = spg, auto = the default solver")
    print(f"{'config':38s} {'seconds':>9s} {'peak MB':>9s} {'nnz':>5s}  notes")
    shapes = [dict(data="types", n=n_types, m=500 if quick else 2000)]
    if sc100k:
        shapes.append(dict(data="types", n=100000, m=2000))
    shapes.append(dict(data="planted", n=n_big, m=m_planted))
    for shape in shapes:
        label = f"{shape['n']} x {shape['m']} {shape['data']}"
        for fix in ("none", "shift"):
            compare = ["spg", "auto"] if not (shape["n"] >= 100000 and fix == "shift") else ["auto"]
            r = spawn(dict(kind="exact", solver="auto", psd_fix=fix, compare=compare, **shape))
            show(f"{label} {fix}", r, _solver_notes(r))
        if shape["data"] == "planted":
            r = spawn(dict(kind="nystrom", p=0.05, **shape))
            show(f"{label} nystrom p=0.05", r, f"measures {r['seconds_measures']:.1f}s solve {r['seconds_solve']:.1f}s, "
                                               f"planted genes in top 50: {r['planted_in_top50']}/50; load {r['load']:.1f}")


# ------------------------------------------------------------------------------------------------
# the kept face factor of the active-set solver
# ------------------------------------------------------------------------------------------------

def _refactor_every_step():
    """A ``_FaceFactor`` that keeps no factor: every face is solved from ``G[S, S]`` read and factored anew
    (``_solve_face``: scipy's ``cho_factor`` and ``cho_solve``), the solver's steps before the factor was kept (same
    working sets, same face solutions up to round-off)."""
    from bioqpfs._kernels import simplex_qp as sq

    class RefactorEveryStep(sq._FaceFactor):
        def __init__(self, G, S):
            self.G, self.S, self.L = G, np.asarray(S, dtype=np.int64), None

        def add(self, new):
            self.S = np.concatenate([self.S, np.asarray(new, dtype=np.int64)])

        def keep(self, mask):
            self.S = self.S[mask]

        def solve(self, a):
            return sq._solve_face(self.G.block(self.S), a, self.S)

    return RefactorEveryStep


def _class_qps(X, y):
    """The active-set problems of the default recipe on (X, y), as ``_polish`` receives them."""
    import bioqpfs
    from bioqpfs._kernels import simplex_qp as sq

    caught, polish = [], sq._polish

    def spy(G, a, x, scale, convex, max_polish, max_support=None):
        caught.append((G, a.copy(), x.copy(), scale, convex, max_polish, max_support))
        return polish(G, a, x, scale, convex, max_polish, max_support)

    sq._polish = spy
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bioqpfs.select(X, y, n_genes=50)
    finally:
        sq._polish = polish
    return caught


def face_factor(quick=False):
    from bioqpfs import _threads
    from bioqpfs._kernels import simplex_qp as sq

    shapes = [("single-cell", 3000, 800)] if quick else [("single-cell", 20000, 2000), ("single-cell", 20000, 5000)]
    shapes += [("synthetic", 100, 500 if quick else 2000)] + ([] if quick else [("leukemia", 72, 7129)])
    print(f"default recipe's class QPs, active-set solver: factor kept vs factored anew each step (best of 3); "
          f"cpus={os.cpu_count()}")
    print(f"{'data':12s} {'cells x genes':>15s} {'QPs':>4s} {'steps':>6s} {'max nnz':>8s} {'kept s':>8s} "
          f"{'anew s':>8s} {'anew/kept':>9s} {'max|dx|':>8s}")
    anew = _refactor_every_step()
    kept = sq._FaceFactor
    for data, n, m in shapes:
        if data == "single-cell":
            X, y = poisson_types(n, m)
        elif data == "synthetic":
            X, y = synthetic(m, n=n)
        else:
            X, y, _ = load_benchmark(data)  # the papers' data folder (BIOQPFS_BENCHMARK_DATA)
        problems = _class_qps(X, y)
        results, seconds = {}, {}
        for name, cls in (("kept", kept), ("anew", anew)):
            sq._FaceFactor = cls
            try:
                best = np.inf
                for _ in range(3):
                    t = time.perf_counter()
                    out = []
                    for G, a, x0, scale, convex, max_polish, max_support in problems:
                        with _threads.blas_limited(1):
                            out.append(sq._polish(G, a, x0, scale, convex, max_polish, max_support))
                    best = min(best, time.perf_counter() - t)
            finally:
                sq._FaceFactor = kept
            results[name], seconds[name] = out, best
        dx = max((float(np.max(np.abs(k[0] - w[0]))) for k, w in zip(results["kept"], results["anew"])), default=0.0)
        steps = sum(r[1] for r in results["kept"])
        support = max((int(np.count_nonzero(r[0])) for r in results["kept"]), default=0)
        print(f"{data:12s} {f'{X.shape[0]} x {X.shape[1]}':>15s} {len(problems):4d} {steps:6d} {support:8d} "
              f"{seconds['kept']:8.3f} {seconds['anew']:8.3f} {seconds['anew'] / max(seconds['kept'], 1e-9):9.2f} "
              f"{dx:8.1e}", flush=True)


# ------------------------------------------------------------------------------------------------
# psd_fix evidence
# ------------------------------------------------------------------------------------------------

def psd_evidence(datasets=("srbct", "colon", "leukemia"), fixes=("shift", "clip", "none"), sizes=(10, 20, 50),
                 n_splits=5, n_repeats=2):
    from sklearn.model_selection import RepeatedStratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    from bioqpfs.selectors.qpfs import qpfs

    print(f"{n_splits}-fold CV x {n_repeats}, genes selected on each training fold, linear SVM (C=1) on the top "
          f"{sizes}; error = mean over folds and sizes; stability = mean pairwise Jaccard of the top-20 sets")
    for name in datasets:
        X, y, _ = load_benchmark(name)  # the papers' data folder (BIOQPFS_BENCHMARK_DATA)
        cv = RepeatedStratifiedKFold(n_splits=n_splits, n_repeats=n_repeats, random_state=0)
        for fix in fixes:
            errs, tops, secs, nnz = [], [], [], []
            for tr, te in cv.split(X, y):
                t = time.perf_counter()
                sel = qpfs(X[tr], y[tr], psd_fix=fix)
                secs.append(time.perf_counter() - t)
                nnz.append(sel.diagnostics["n_nonzero"])
                tops.append(set(sel.ranking[:20].tolist()))
                e = []
                for k in sizes:
                    g = sel.ranking[:k]
                    clf = make_pipeline(StandardScaler(), SVC(kernel="linear", C=1.0))
                    clf.fit(X[tr][:, g], y[tr])
                    e.append(np.mean(clf.predict(X[te][:, g]) != y[te]))
                errs.append(e)
            errs = np.asarray(errs)
            jac = [len(a & b) / len(a | b) for i, a in enumerate(tops) for b in tops[i + 1:]]
            print(f"{name:9s} M={X.shape[1]:5d} {fix:6s} error {100 * errs.mean():5.1f}% "
                  f"(by size {', '.join(f'{100 * v:.1f}' for v in errs.mean(axis=0))}) "
                  f"stability {np.mean(jac):.3f}  nnz {np.mean(nnz):.0f}  {np.mean(secs):.1f}s/fit "
                  f"[{sel.diagnostics['psd_fix_applied']}]", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (M up to 2,000)")
    ap.add_argument("--sc100k", action="store_true", help="add the 100,000 cells x 2,000 genes shape")
    ap.add_argument("--single-cell", action="store_true", help="only the single-cell shapes")
    ap.add_argument("--itmo", default=None, help="python of a throwaway venv with ITMO_FS installed")
    ap.add_argument("--psd-evidence", action="store_true")
    ap.add_argument("--face-factor", action="store_true", help="the active-set solver's kept factor (see above)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    modes = [f for f, on in (("--face-factor", args.face_factor), ("--psd-evidence", args.psd_evidence),
                             ("--single-cell", args.single_cell)) if on]
    if len(modes) > 1:
        ap.error(f"{' and '.join(modes)} are separate runs: give one of them")
    if args.psd_evidence and (args.quick or args.sc100k):
        ap.error("--psd-evidence has no sizes to choose: drop --quick/--sc100k")
    if args.face_factor and args.sc100k:
        ap.error("--face-factor has its own shapes (--quick: small ones): drop --sc100k")
    if args.itmo and modes:
        ap.error("--itmo adds ITMO_FS to the default run (synthetic shapes): drop it or the other mode")
    if args.one:
        run_one(json.loads(args.one))
    elif args.face_factor:
        face_factor(args.quick)
    elif args.psd_evidence:
        psd_evidence()
    elif args.single_cell:
        bench_single_cell(args.quick, args.sc100k, _show)
    else:
        bench(args.quick, args.itmo, args.sc100k)


if __name__ == "__main__":
    main()
