"""Shared runner of the paper reproductions: data, the papers' CV protocol, and the Markdown table.

Each ``paper_*.py`` script declares its paper's protocol and printed numbers (table and row cited) and
calls :func:`main`.  Full runs use the held-out benchmark data in ``../shared/data/benchmarks``
(``BIOQPFS_BENCHMARK_DATA`` overrides the directory; see its SOURCES.md), every gene of continuous data
standardised (the selectors do not depend on it; the SVM converges far faster; codes are used as given); ``--quick`` runs the same code
on gene subsets of the bundled datasets in seconds (the test suite runs it).  The output is a Markdown
file: per dataset, our error beside the paper's, the method ordering of both and the differences.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import bioqpfs  # noqa: E402
from bioqpfs import evaluate  # noqa: E402

BUNDLED = {"colon": "colon", "leukemia": "leukemia", "srbct63": "srbct"}


def data_dir():
    return Path(os.environ.get("BIOQPFS_BENCHMARK_DATA", REPO.parent / "shared" / "data" / "benchmarks"))


def load(name, quick=False, n_genes_quick=150, seed=0):
    """(X, y) of a benchmark dataset; ``quick``: the bundled copy, ``n_genes_quick`` random genes."""
    if quick or not (data_dir() / f"{name}.npz").exists():
        if name not in BUNDLED:
            raise FileNotFoundError(f"dataset {name!r} is not in {data_dir()} and not bundled; set "
                                    "BIOQPFS_BENCHMARK_DATA to the benchmark data directory")
        ad = bioqpfs.datasets.load(BUNDLED[name])
        X, y = np.asarray(ad.X, dtype=np.float64), ad.obs["class"].cat.codes.to_numpy()
    else:
        with np.load(data_dir() / f"{name}.npz", allow_pickle=False) as d:
            X, y = d["X"].astype(np.float64), d["y"].astype(np.int64)
        if np.isnan(X).any():  # arrhythmia: column medians, as load.py
            med = np.nan_to_num(np.nanmedian(X, axis=0))
            r, c = np.where(np.isnan(X))
            X[r, c] = med[c]
    if quick:
        cols = np.sort(np.random.default_rng(seed).choice(X.shape[1], min(n_genes_quick, X.shape[1]), replace=False))
        X = X[:, cols]
    # every gene standardised: the selectors are invariant to it (mean +- sd and MDL bins, correlations), and
    # libsvm's linear SVM on raw intensities (Colon: up to ~20,000) needs seconds per fit instead of milliseconds
    if not name.endswith("_disc"):  # discretised datasets (codes) are used as given; Leukemia is integer but continuous
        sd = X.std(axis=0)
        X = (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    return X, y


def error_table(X, y, methods, sizes, *, cv, repeats=1, classifier="linear_svm", refit_selection=False, seed=0,
                failures=None):
    """{method: {k: mean error %}} by :func:`bioqpfs.evaluate.error_curve` (selection once: the papers' protocol).

    ``failures``: a dict that receives ``{method: message}`` of the methods the selector refuses on these data (each
    method then runs alone, on the same folds: the seed fixes them); without it a refusal is raised."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            df = evaluate.error_curve(X, y, methods, n_genes=sizes, cv=cv, repeats=repeats, classifier=classifier,
                                      refit_selection=refit_selection, random_state=seed)
    except ValueError:
        if failures is None or len(methods) == 1:
            raise
        out = {}
        for name, method in methods.items():
            try:
                out.update(error_table(X, y, {name: method}, sizes, cv=cv, repeats=repeats, classifier=classifier,
                                       refit_selection=refit_selection, seed=seed))
            except ValueError as exc:
                failures[name] = str(exc)
                out[name] = {}
        return out
    out = {}
    for _, row in df.iterrows():
        out.setdefault(row["method"], {})[int(row["n_genes"])] = 100.0 * float(row["mean_error"])
    return out


def _fmt(v):
    return "–" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.2f}"


def _ordering(errors):
    """Methods by mean error over the sizes both report (best first)."""
    means = {m: np.mean(list(e.values())) for m, e in errors.items() if e}
    return sorted(means, key=lambda m: (means[m], m)), means


def _chain(order, means):
    """"A (1.00) < B (2.00) = C (2.00)": ties (equal to 0.005 points) shown as such."""
    out = ""
    for i, m in enumerate(order):
        if i:
            out += " = " if abs(means[m] - means[order[i - 1]]) < 5e-3 else " < "
        out += f"{m} ({means[m]:.2f})"
    return out


def _pattern(order, means):
    """The ordering with ties as sets, to compare two orderings."""
    groups, last = [], None
    for m in order:
        if last is not None and abs(means[m] - last) < 5e-3:
            groups[-1].add(m)
        else:
            groups.append({m})
        last = means[m]
    return groups


def markdown(title, source, protocol, results, notes=""):
    """One section per dataset: ours vs paper per method and size, orderings, differences."""
    lines = [f"# {title}", "", f"Paper: {source}", "", f"Protocol: {protocol}", ""]
    for ds in results:
        ours, paper, cite = ds["ours"], ds["paper"], ds["cite"]
        sizes = ds["sizes"]
        lines += [f"## {ds['name']}", "", f"Printed numbers: {cite}", ""]
        header = "| method | " + " | ".join(f"k={k} ours | k={k} paper" for k in sizes) + " |"
        lines += [header, "|" + "---|" * (1 + 2 * len(sizes))]
        for m in ds["methods"]:
            cells = []
            for k in sizes:
                cells += [_fmt(ours.get(m, {}).get(k)), _fmt(paper.get(m, {}).get(k))]
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        for m, message in ds.get("failures", {}).items():
            lines += ["", f"{m}: not run, the selector refused these data: {message}"]
        if not paper:
            o_ours, mean_ours = _ordering({m: ours.get(m, {}) for m in ds["methods"]})
            lines += ["", "No printed numbers to compare with. Ordering by mean error (best first) -- ours: "
                      + _chain(o_ours, mean_ours) + ".", ""]
            continue
        common = {m: {k: v for k, v in ours.get(m, {}).items() if paper.get(m, {}).get(k) is not None}
                  for m in ds["methods"] if m in paper}
        o_ours, mean_ours = _ordering(common)
        o_paper, mean_paper = _ordering({m: {k: paper[m][k] for k in common[m]} for m in common})
        lines += ["", "Ordering by mean error over the sizes both report (best first) -- ours: "
                  + _chain(o_ours, mean_ours) + "; paper: " + _chain(o_paper, mean_paper) + ".", ""]
        diffs = [f"{m}: {mean_ours[m] - mean_paper[m]:+.2f} points" for m in o_paper if m in mean_ours]
        lines += ["Difference (ours - paper, mean over those sizes): " + "; ".join(diffs) + "."
                  + (" Same ordering." if _pattern(o_ours, mean_ours) == _pattern(o_paper, mean_paper)
                     else " The ordering differs."), ""]
        if ds.get("extra"):
            lines += [ds["extra"], ""]
    if notes:
        lines += ["## Notes", "", notes, ""]
    return "\n".join(lines)


def parse_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="bundled data, gene subsets, few sizes: seconds")
    p.add_argument("-o", "--output", default=None,
                   help="Markdown file to write (default: beside the script; --quick: a *_quick.md there, so the "
                        "committed full-run table stays)")
    return p.parse_args()


def write(text, output, default_name):
    path = Path(output) if output else Path(__file__).resolve().parent / default_name
    path.write_text(text)
    print(f"wrote {path}")
    return path


def run(spec, quick):
    """Run every dataset of ``spec`` (see the paper scripts) and return the results for :func:`markdown`."""
    datasets = [ds for ds in spec["datasets"] if not quick or ds.get("quick", False)]
    missing = [ds["data"] for ds in datasets
               if not quick and ds["data"] not in BUNDLED and not (data_dir() / f"{ds['data']}.npz").exists()]
    if missing:  # before hours of the other datasets, not after
        raise SystemExit(f"dataset(s) {', '.join(missing)} not in {data_dir()} and not bundled: set "
                         "BIOQPFS_BENCHMARK_DATA to the benchmark data directory (or run --quick on the bundled data)")
    results = []
    for ds in datasets:
        t = time.perf_counter()
        X, y = load(ds["data"], quick=quick)
        if ds.get("max_samples") and X.shape[0] > ds["max_samples"]:  # e.g. paper 004: 1,000 random samples
            rows = np.sort(np.random.default_rng(0).choice(X.shape[0], ds["max_samples"], replace=False))
            X, y = X[rows], y[rows]
        sizes = [k for k in ds["sizes"] if k <= X.shape[1]][: 2 if quick else None]
        methods = {name: (method, params) for name, (method, params) in ds["methods"].items()}
        cv = 3 if quick else ds["cv"]
        note = " (quick: bundled data, gene subset)" if quick else ""
        if isinstance(cv, int) and np.bincount(y).min() < cv:  # stratified k-fold needs k samples per class
            cv = int(np.bincount(y).min())
            note += f" ({cv}-fold CV: the smallest class has {cv} samples)"
        failures = {}
        ours = error_table(X, y, methods, sizes, cv=cv, repeats=1 if quick else ds.get("repeats", 1),
                           classifier=ds.get("classifier", "linear_svm"), failures=failures)
        res = dict(name=ds["name"] + note, ours=ours, failures=failures,
                   paper=ds["paper"], cite=ds["cite"], sizes=sizes, methods=list(methods))
        if ds.get("extra"):
            res["extra"] = ds["extra"](X, y)
        results.append(res)
        print(f"{ds['name']}: {time.perf_counter() - t:.1f} s", flush=True)
    return results


def main(spec):
    args = parse_args(spec["title"])
    results = run(spec, args.quick)
    text = markdown(spec["title"], spec["source"], spec["protocol"], results, spec.get("notes", ""))
    name = spec["output"].replace(".md", "_quick.md") if args.quick else spec["output"]
    return write(text, args.output, name)
