"""The paper reproduction scripts (benchmarks/reproduce) run in their --quick mode and write their table.

Full runs take minutes to hours and are not part of the test command.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPRO = Path(__file__).resolve().parents[1] / "benchmarks" / "reproduce"
SCRIPTS = sorted(p.name for p in REPRO.glob("paper_*.py"))


def test_one_script_per_paper():
    papers = sorted(p.name[:3] for p in (Path(__file__).resolve().parents[1] / ".." / "shared" / "papers").glob("0*.txt"))
    assert [s[len("paper_"):len("paper_") + 3] for s in SCRIPTS] == (papers or ["000", "001", "002", "003", "004"])


@pytest.mark.parametrize("script", SCRIPTS)
def test_quick_mode_writes_markdown_table(script, tmp_path):
    out = tmp_path / "table.md"
    env = dict(os.environ, PYTHONPATH=str(REPRO.parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(REPRO / script), "--quick", "-o", str(out)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("# Paper") and "| method |" in text and "Protocol:" in text
    assert "ours" in text and "Ordering" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| method")]
    assert rows and all(any(ch.isdigit() for ch in r) for r in rows)  # every method row has numbers


def test_full_run_without_the_data_folder_stops_before_running_anything(tmp_path, monkeypatch):
    """Papers 002 and 003 ran their bundled datasets (LOO, minutes to hours) before failing with a traceback on the
    first one that only the data folder holds."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("reproduce_common", REPRO / "_common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    monkeypatch.setenv("BIOQPFS_BENCHMARK_DATA", str(tmp_path))
    ran = []
    monkeypatch.setattr(common, "error_table", lambda *a, **k: ran.append(1) or {})
    paper = dict(datasets=[dict(name="Colon", data="colon", quick=True, cv=3, sizes=[5], methods={}, paper={},
                                cite=""),
                           dict(name="WDBC", data="wdbc", quick=False, cv=3, sizes=[5], methods={}, paper={}, cite="")])
    with pytest.raises(SystemExit, match="wdbc.*BIOQPFS_BENCHMARK_DATA"):
        common.run(paper, quick=False)
    assert ran == []
    assert [r["name"] for r in common.run(paper, quick=True)] == ["Colon (quick: bundled data, gene subset)"]


def test_quick_run_without_output_keeps_the_committed_full_run_table(monkeypatch):
    """``paper_*.py --quick`` (as each script's docstring shows it) wrote over the committed full-run Markdown."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("reproduce_common_main", REPRO / "_common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    written = []
    monkeypatch.setattr(common, "run", lambda paper, quick: [])
    monkeypatch.setattr(common, "write", lambda text, output, name: written.append((output, name)))
    monkeypatch.setattr(sys, "argv", ["paper_000_qpfs.py", "--quick"])
    paper = dict(title="t", source="s", protocol="p", output="paper_000_qpfs.md", datasets=[])
    common.main(paper)
    monkeypatch.setattr(sys, "argv", ["paper_000_qpfs.py"])
    common.main(paper)
    assert written == [(None, "paper_000_qpfs_quick.md"), (None, "paper_000_qpfs.md")]


def test_a_method_refused_on_a_dataset_is_reported_not_fatal(monkeypatch):
    """Paper 001's full run stopped with a traceback on Colon: QPFS with MST CPX relevance (zero for every gene
    there) is refused by the selector, and the whole reproduction died with it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("reproduce_common_failures", REPRO / "_common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    paper = dict(datasets=[dict(name="Colon", data="colon", quick=True, cv=3, sizes=[5], paper={}, cite="",
                                methods={"MaxRel": ("maxrel", {}), "bad": ("qpfs", {"alpha": -1.0})})])
    (res,) = common.run(paper, quick=True)
    assert set(res["ours"]["MaxRel"]) == {5} and res["ours"]["bad"] == {} and "alpha" in res["failures"]["bad"]
    text = common.markdown("t", "s", "p", [res])
    assert "| bad | – | – |" in text and "bad: not run, the selector refused these data:" in text
