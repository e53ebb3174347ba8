"""The README's examples run as written: every ```python block (in order, in one namespace, as a reader types
them one after the other) and every ``bioqpfs`` command of its ```bash blocks, on the bundled SRBCT data.

Nothing ran them before: a block used ``anndata`` without importing it, and the batch and hierarchy blocks used
``X``, ``y``, ``donors`` and ``y2d`` that no block defined.

Two explicit mechanisms, and only these, stand in for what the README says the reader brings:

* ``STAND_INS``: a block whose comment says ``# adata: yours, with .obs["<column>"]`` gets SRBCT with those columns
  (``cell_type`` = the tumour class, ``donor`` = three synthetic batches, ``lineage`` = two groups of classes) and,
  for the backed-file block, that AnnData written to ``atlas.h5ad`` in the working directory. No parameter of a
  block is changed.
* ``NOT_RUN``: blocks that need what CI has not (a GPU, a Dask scheduler); each is named by its first line, and a
  test checks that every name is still a block of the README, so the list cannot go stale.

The commands are run through ``bioqpfs.cli.main`` in-process (``python -m bioqpfs`` is the same entry point,
``bioqpfs/__main__.py``) in a temporary directory holding the files they name (``data.h5ad``, ``expr.csv``,
``labels.csv``, made from SRBCT), with ``--quiet`` added to ``select`` and ``evaluate`` (no progress bars; it
changes no result).
"""
from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import bioqpfs

README = Path(__file__).resolve().parents[1] / "README.md"

# Blocks not run here, by their first line: why, and what was checked instead (their names exist with these
# signatures: tl.select_genes(backend=, chunk_size=), measures.mutual_information(backend=), dask's Client).
NOT_RUN = {
    'from dask.distributed import Client; client = Client("tcp://scheduler:8786")   # or LocalCluster()':
        "connects to a Dask scheduler that CI does not have (tests/test_dask_cluster.py runs a LocalCluster)",
    'bioqpfs.tl.select_genes(adata, "cell_type", backend="gpu")':
        "needs a CUDA GPU (tests/test_gpu.py covers backend='gpu' where there is one)",
}

# Blocks that start from the reader's own AnnData, by their first line -> what the stand-in provides.
STAND_INS = {
    '# adata: yours, with .obs["cell_type"] and .obs["donor"]; X, y, donors: the same as arrays': "adata",
    '# adata: yours, with .obs["lineage"] and .obs["cell_type"] (every cell type inside one lineage); X as above':
        "adata",
    "import anndata": "atlas.h5ad",
}


def python_blocks():
    """``[(line, code)]`` of README's ```python blocks, ``line`` the 1-based line of the block's first line."""
    text = README.read_text()
    return [(text[:m.start(1)].count("\n") + 1, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


def cli_commands():
    """Every command of README's ```bash blocks that starts with ``bioqpfs``, continuation lines joined, comments
    dropped, as argv lists."""
    text = README.read_text()
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        for command in re.sub(r"\\\n\s*", "", block).splitlines():
            if command.startswith("bioqpfs "):
                commands.append(shlex.split(command, comments=True)[1:])
    return commands


def first_line(code):
    return code.splitlines()[0].rstrip()


def stand_in_adata():
    """SRBCT with the .obs columns the README's later blocks name (nested: every cell type in one lineage)."""
    adata = bioqpfs.datasets.srbct()
    adata.obs["cell_type"] = adata.obs["class"]
    adata.obs["donor"] = pd.Categorical(np.array(["d1", "d2", "d3"])[np.arange(adata.n_obs) % 3])
    lineage = {"BL": "lymphoid", "NB": "neural", "EWS": "mesenchymal", "RMS": "mesenchymal"}
    adata.obs["lineage"] = pd.Categorical(adata.obs["class"].astype(str).map(lineage))
    return adata


def test_the_lists_name_blocks_that_exist():
    firsts = [first_line(code) for _, code in python_blocks()]
    for name in [*NOT_RUN, *STAND_INS]:
        assert firsts.count(name) == 1, f"{name!r} is not the first line of exactly one README python block"


def test_every_python_block_runs(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt  # the Agg backend: tests/conftest.py

    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    ran = 0
    for line, code in python_blocks():
        head = first_line(code)
        if head in NOT_RUN:
            continue
        if STAND_INS.get(head) == "adata":
            namespace["adata"] = stand_in_adata()
        elif STAND_INS.get(head) == "atlas.h5ad":
            stand_in_adata().write_h5ad(tmp_path / "atlas.h5ad")
        try:
            exec(compile(code, f"README.md:{line}", "exec"), namespace)
        except Exception as err:
            raise AssertionError(f"the README's python block at line {line} ({head!r}) fails: "
                                 f"{type(err).__name__}: {err}") from err
        finally:
            plt.close("all")
        ran += 1
        if ran == 1:  # the first block's comments: the data's shape and selection_df's leading columns
            adata = namespace["adata"]
            assert adata.shape == (63, 2308) and "class" in adata.obs
            df = bioqpfs.get.selection_df(adata, "bioqpfs")
            assert list(df.columns[:4]) == ["gene", "rank", "weight", "selected"]
    assert ran == len(python_blocks()) - len(NOT_RUN)


def test_every_cli_command_runs(tmp_path, monkeypatch, capsys):
    from bioqpfs import cli

    commands = cli_commands()
    assert {argv[0] for argv in commands} >= {"select", "evaluate", "datasets", "--version"}
    monkeypatch.chdir(tmp_path)
    adata = stand_in_adata()
    adata.write_h5ad("data.h5ad")
    pd.DataFrame(adata.X.T, index=adata.var_names, columns=adata.obs_names).to_csv("expr.csv")
    pd.DataFrame({"tissue": adata.obs["class"].astype(str)}, index=adata.obs_names).to_csv("labels.csv")
    for argv in commands:
        try:
            rc = cli.main([*argv, "--quiet"] if argv[0] in ("select", "evaluate") else argv)
        except SystemExit as stop:  # --version exits as argparse does
            rc = stop.code
        assert rc in (0, None), f"README command {shlex.join(['bioqpfs', *argv])} exits {rc}: {capsys.readouterr().err}"
        for i, arg in enumerate(argv[:-1]):
            if arg in ("-o", "--tsv", "--plot"):
                assert Path(argv[i + 1]).exists(), f"bioqpfs {shlex.join(argv)} did not write {argv[i + 1]}"


@pytest.mark.parametrize("which", ["python", "cli"])
def test_a_broken_example_fails_its_test(which, tmp_path, monkeypatch, capsys):
    """The runners above fail when a README example breaks: a wrong parameter name in the first python block, an
    .obs column that does not exist in the first command, each in a copy of the README."""
    text = README.read_text()
    if which == "python":
        broken = text.replace('selection_df(adata, "bioqpfs")', 'selection_df(adata, "bioqpfs", n_top=3)', 1)
    else:
        broken = text.replace("--groupby cell_type --n-genes 50", "--groupby celltype --n-genes 50", 1)
    assert broken != text
    (tmp_path / "README.md").write_text(broken)
    monkeypatch.setattr(sys.modules[__name__], "README", tmp_path / "README.md")
    (tmp_path / "run").mkdir()
    with pytest.raises(AssertionError, match="README"):
        if which == "python":
            test_every_python_block_runs(tmp_path / "run", monkeypatch)
        else:
            test_every_cli_command_runs(tmp_path / "run", monkeypatch, capsys)
