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
