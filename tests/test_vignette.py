"""The gene-panel vignette really runs (quick mode) and renders Markdown with its figures."""
import os
import re
import subprocess
import sys
from pathlib import Path

import bioqpfs

ROOT = Path(__file__).resolve().parents[1]
VIGNETTE = ROOT / "vignettes" / "gene_panel_selection.py"


def test_vignette_executes_and_renders(tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(VIGNETTE), "--render", "--quick", "--outdir", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (tmp_path / "gene_panel_selection.md").read_text()
    # it states which methods were present, and that list is the registry's
    registered = re.search(r"^registered methods: (.*)$", md, flags=re.M).group(1).split(", ")
    assert registered == list(bioqpfs.methods())
    used = re.search(r"^used here\s*: (.*)$", md, flags=re.M).group(1).split(", ")
    assert used[0] == "qpfs" and set(used) <= set(registered)
    # every used method has a row in both error tables
    headers = re.findall(r"^mean CV error[^\n]*\n(method[^\n]*)$", md, flags=re.M)
    assert len(headers) == 2                             # PBMC and SRBCT
    for header in headers:
        assert header.split()[1:] == used
    figures = re.findall(r"!\[figure \d+\]\((figures/[^)]+)\)", md)
    assert len(figures) == 4
    for f in figures:
        assert (tmp_path / f).stat().st_size > 5000
    assert "quick mode        : True" in md


NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _skeleton_and_numbers(text):
    return NUMBER.sub("#", text), [float(x) for x in NUMBER.findall(text)]


def test_committed_rendering_is_fresh(tmp_path):
    """The committed vignettes/gene_panel_selection.md is what a fresh render gives.

    Tolerances: the text with every number masked must be identical (code, prose, table layout,
    computed conclusions, figure names); each number may differ from the committed one by at most
    max(0.02, 2 % of it) -- CV errors and bits are printed to 3 decimals and may move in the last
    digits across BLAS/library versions.  The rendering holds no wall-clock times.
    Re-render with ``python vignettes/gene_panel_selection.py --render``.
    """
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(VIGNETTE), "--render", "--outdir", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh = (tmp_path / "gene_panel_selection.md").read_text()
    committed = (ROOT / "vignettes" / "gene_panel_selection.md").read_text()
    hint = "vignettes/gene_panel_selection.md is stale: re-render it (python vignettes/gene_panel_selection.py --render)"
    fresh_lines, committed_lines = fresh.splitlines(), committed.splitlines()
    assert len(fresh_lines) == len(committed_lines), hint
    for i, (a, b) in enumerate(zip(fresh_lines, committed_lines), 1):
        (sa, na), (sb, nb) = _skeleton_and_numbers(a), _skeleton_and_numbers(b)
        assert sa == sb, f"{hint}; line {i} differs:\n fresh:     {a}\n committed: {b}"
        for x, y in zip(na, nb):
            assert abs(x - y) <= max(0.02, 0.02 * abs(y)), f"{hint}; line {i}: {x} vs {y}:\n fresh: {a}\n committed: {b}"
    for f in re.findall(r"!\[figure \d+\]\((figures/[^)]+)\)", committed):
        assert (ROOT / "vignettes" / f).is_file(), f"{f} is referenced but not committed"


def test_vignette_conclusion_follows_its_table():
    """The refit-vs-once sentence is computed from the numbers (it once contradicted its own table)."""
    import pandas as pd

    ns = {"__name__": "not_main"}
    src = VIGNETTE.read_text()
    start = src.index("def optimism_summary")
    exec(src[start:src.index("\n\n\nQUICK", start)], ns)
    idx = pd.MultiIndex.from_tuples([("qpfs", 5), ("spec_cmi", 5), ("random", 5)], names=["method", "n_genes"])
    both = pd.DataFrame({"refit per fold": [0.127, 0.032, 0.347], "selected once (biased)": [0.065, 0.081, 0.222]},
                        index=idx)
    assert ns["optimism_summary"](both, [5]) == ("5 genes: selecting once gave a lower (optimistic) error for 2 of 3 "
                                                 "methods (qpfs, random); not for spec_cmi")
    committed = (ROOT / "vignettes" / "gene_panel_selection.md").read_text()
    assert "the error looks better than it is:" not in committed
