"""Reliability as a tested property (issue 18): memory limits set by the environment, durable atomic
writes, and faults on the output side (a full disk, a file-size limit, an unwritable directory).

Faults run in subprocesses, each bounded by a timeout; the data are small so each test takes seconds.
"""
import io
import os
import signal
import stat
import subprocess
import sys
import textwrap

import anndata as ad
import numpy as np
import pandas as pd
import pytest

from bioqpfs import _io, _validation

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="rlimits, /proc and /dev/full: Linux")


def _run(script, *args, cwd=None, timeout=180, **kw):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, **kw)


def _h5ad(path, n=40, m=30, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    X = rng.normal(size=(n, m)) + 2.0 * y[:, None] * (np.arange(m) < 3)
    a = ad.AnnData(X, obs=pd.DataFrame({"cls": pd.Categorical(np.array(["a", "b"])[y])},
                                       index=[f"c{i}" for i in range(n)]),
                   var=pd.DataFrame(index=[f"g{j}" for j in range(m)]))
    a.write_h5ad(path)
    return path


# ---------------------------------------------------------------------------------------------------
# item 1: the memory guard knows the limits that the environment sets
# ---------------------------------------------------------------------------------------------------
#: sets the soft limit to the current usage + 1 GiB *after* the imports (numba/LLVM reserve address
#: space at import), then asks for exact QPFS on 20,000 genes: Q alone is 20,000^2 float32 = 1.5 GiB
_UNDER_RLIMIT = """
import resource, sys
import numpy as np
import bioqpfs
from bioqpfs import _validation
limit, field = sys.argv[1], {"RLIMIT_AS": "VmSize", "RLIMIT_DATA": "VmData"}[sys.argv[1]]
used = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(field + ":"))
resource.setrlimit(getattr(resource, limit), (used + 2**30, resource.RLIM_INFINITY))
rng = np.random.default_rng(0)
X = rng.normal(size=(30, 20000)).astype(np.float32)
y = np.arange(30) % 2
if sys.argv[2] == "python":
    try:
        bioqpfs.qpfs(X, y, n_genes=5)
    except _validation.MemoryGuardError as e:
        print("GUARD:", e)
        sys.exit(3)
else:
    import anndata as ad, pandas as pd
    from bioqpfs.cli import main
    sys.exit(main(["select", sys.argv[3], "--groupby", "cls", "--method", "qpfs", "--n-genes", "5",
                   "-o", sys.argv[4], "--quiet"]))
"""


@pytest.mark.parametrize("limit", ["RLIMIT_AS", "RLIMIT_DATA"])
def test_rlimit_refusal_is_the_guards_and_names_the_limit(limit):
    """Before: the guard looked at physical memory only, so numpy's raw 'Unable to allocate' came out."""
    r = _run(_UNDER_RLIMIT, limit, "python", timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "GUARD:" in r.stdout and limit in r.stdout, r.stdout
    assert "20000 x 20000" in r.stdout and "with the solver's working memory" in r.stdout
    assert "nystrom_rate" in r.stdout and "mask_var" in r.stdout       # what to do, in Python words
    assert "Unable to allocate" not in r.stdout + r.stderr


def test_rlimit_refusal_on_the_cli_names_the_limit_and_cli_flags(tmp_path):
    rng = np.random.default_rng(1)
    y = np.arange(30) % 2
    a = ad.AnnData(rng.normal(size=(30, 20000)).astype(np.float32),
                   obs=pd.DataFrame({"cls": np.array(["a", "b"])[y]}, index=[f"c{i}" for i in range(30)]))
    a.write_h5ad(tmp_path / "in.h5ad")
    r = _run(_UNDER_RLIMIT, "RLIMIT_AS", "cli", "in.h5ad", "out.h5ad", cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("bioqpfs: error:") and "RLIMIT_AS (ulimit -v)" in line, r.stderr
    assert "--mask-var" in line and "--nystrom-rate" in line and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5ad"]


def _cgroup_tree(root, version, levels):
    """A fake cgroup mount: ``levels`` = [(path, limit or None, usage, inactive_file)], outermost first."""
    mount = root / ("" if version == 2 else "memory")
    files = (("memory.max", "memory.current", "inactive_file") if version == 2 else
             ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"))
    for path, limit, usage, inactive in levels:
        d = mount / path.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / files[0]).write_text(("max" if version == 2 else str(2**63 - 4096)) if limit is None else str(limit))
        (d / files[1]).write_text(str(usage))
        (d / "memory.stat").write_text(f"anon 1\n{files[2]} {inactive}\nactive_file 7\n")
    proc = root / "proc_cgroup"
    own = levels[-1][0]
    proc.write_text(f"0::{own}\n" if version == 2 else f"5:cpu,cpuacct:/\n4:memory:{own}\n0::/\n")
    return proc


@pytest.mark.parametrize("version", [1, 2])
def test_cgroup_limit_minus_usage_is_read_from_the_binding_level(tmp_path, monkeypatch, version):
    GiB = 2**30
    # the container (outer) allows 3 GiB and uses 2.5 (0.25 of it reclaimable page cache): 0.75 GiB left;
    # the job's own cgroup allows 2 GiB and uses 0.5: 1.5 GiB left.  The outer one binds.
    proc = _cgroup_tree(tmp_path, version, [("/", None, 5 * GiB, 0), ("/ctr", 3 * GiB, 10 * GiB // 4, GiB // 4),
                                             ("/ctr/job", 2 * GiB, GiB // 2, 0)])
    monkeypatch.setattr(_validation, "CGROUP_ROOT", str(tmp_path))
    monkeypatch.setattr(_validation, "_PROC_CGROUP", str(proc))
    assert _validation._cgroup_headroom() == 3 * GiB - (10 * GiB // 4 - GiB // 4)
    monkeypatch.setattr(_validation, "_available_memory_bytes", lambda: 64 * GiB)
    monkeypatch.setattr(_validation, "_rlimit_headroom", lambda: {})
    avail, label = _validation.available_memory()
    assert avail == 3 * GiB // 4 and "cgroup" in label
    _validation.memory_guard(GiB // 2, "half a GiB", ["genes"])            # 0.5 <= 0.8 * 0.75: passes
    with pytest.raises(MemoryError, match=r"needs about 1\.00 GiB but only 0\.60 GiB may be used \(80% of the 0\.75 GiB "
                                          r"available\) \(bound by the "
                                          r"memory limit of this container/cgroup\)"):
        _validation.memory_guard(GiB, "one GiB", ["genes"])


def test_unlimited_cgroup_is_no_limit(tmp_path, monkeypatch):
    proc = _cgroup_tree(tmp_path, 2, [("/", None, 2**30, 0), ("/a", None, 2**30, 0)])
    monkeypatch.setattr(_validation, "CGROUP_ROOT", str(tmp_path))
    monkeypatch.setattr(_validation, "_PROC_CGROUP", str(proc))
    assert _validation._cgroup_headroom() is None


def test_qpfs_guard_covers_the_solvers_working_memory(monkeypatch):
    """The estimate is Q plus the solver (here quadprog: ~4 M^2 float64), not Q alone: with room for Q
    but not for the solver the refusal comes before Q is computed."""
    from bioqpfs.selectors import qpfs as _qpfs

    m = 200
    q_bytes = m * m * 8
    monkeypatch.setattr(_validation, "available_memory", lambda: (int(2 * q_bytes / 0.8), "test limit"))
    calls = []
    monkeypatch.setattr(_qpfs, "solve_qpfs", lambda *a, **k: calls.append(1))
    rng = np.random.default_rng(0)
    with pytest.raises(MemoryError, match=r"200 x 200 mutual information matrix with the solver's working memory"):
        _qpfs.qpfs(rng.normal(size=(20, m)), np.arange(20) % 2, n_genes=3)
    assert calls == []
    assert _qpfs.solver_working_bytes(m) == 4 * m * m * 8                       # quadprog
    # beyond quadprog: the active-set factor (up to ACTIVE_SET_MAX_SUPPORT genes, three times over) and O(M) vectors
    from bioqpfs._kernels import simplex_qp
    for big in (5000, 20000):
        factor = 3 * 8 * min(big, simplex_qp.ACTIVE_SET_MAX_SUPPORT) ** 2
        assert factor <= _qpfs.solver_working_bytes(big, "auto", "shift") < factor + 400 * big * 8


# ---------------------------------------------------------------------------------------------------
# item 2: durable atomic writes
# ---------------------------------------------------------------------------------------------------
def test_atomic_write_flushes_file_then_replaces_then_flushes_directory(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.fspath(src), os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    out = tmp_path / "res.tsv"
    with _io.atomic_path(out) as tmp:
        assert os.path.dirname(tmp) == str(tmp_path)
        assert os.path.basename(tmp).startswith(".res.tsv" + _io.TMP_MARK) and tmp.endswith(".tsv")
        with open(tmp, "w") as fh:
            fh.write("a\tb\n")
    assert events == [("fsync", tmp), ("replace", tmp, str(out)), ("fsync", str(tmp_path))]
    assert out.read_text() == "a\tb\n" and os.listdir(tmp_path) == ["res.tsv"]


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_output_mode_is_0666_minus_umask(tmp_path, umask):
    r = _run("""
        import os, sys
        os.umask(int(sys.argv[2], 8))
        from bioqpfs._io import atomic_path
        with atomic_path(sys.argv[1]) as tmp:
            open(tmp, "w").write("x")
        """, tmp_path / "o.txt", oct(umask), timeout=60)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(tmp_path / "o.txt").st_mode) == 0o666 & ~umask


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444])
def test_an_existing_output_keeps_its_mode(tmp_path, mode):
    """A rewritten output kept the new-file mode 0666 & ~umask: a private 0600 result became world-readable."""
    from bioqpfs._io import atomic_path

    out = tmp_path / "o.tsv"
    out.write_text("old")
    os.chmod(out, mode)
    with atomic_path(out) as tmp:
        open(tmp, "w").write("new")
    assert out.read_text() == "new" and stat.S_IMODE(os.stat(out).st_mode) == mode


def test_a_table_to_dev_stdout_streams_into_a_pipe(tmp_path):
    """``--tsv /dev/stdout`` with stdout a pipe: its real path (/proc/<pid>/fd/pipe:[N]) does not exist, and the
    CLI ran the whole selection, then failed staging a temporary file there, writing no output at all."""
    _h5ad(tmp_path / "in.h5ad")
    r = _run(_CLI, "select", "in.h5ad", "--groupby", "cls", "--method", "maxrel", "--n-genes", "3", "-o", "out.h5ad",
             "--tsv", "/dev/stdout", "--quiet", cwd=tmp_path, timeout=120)   # capture_output: stdout is a pipe
    assert r.returncode == 0, r.stderr
    table = pd.read_csv(io.StringIO(r.stdout), sep="\t")
    assert list(table.columns[:3]) == ["gene", "rank", "weight"] and table["rank"].tolist()[:3] == [1, 2, 3]
    assert (tmp_path / "out.h5ad").is_file()


def test_a_failed_block_leaves_no_directory_it_created(tmp_path):
    """Output directories are made when an output is staged; a failed run left them behind, empty."""
    from bioqpfs._io import atomic_outputs

    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError, match="late failure"):
        with atomic_outputs() as stage:
            open(stage(tmp_path / "a" / "b" / "out.tsv"), "w").write("x")
            open(stage(tmp_path / "kept" / "c" / "out.png"), "w").write("x")
            raise RuntimeError("late failure")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"] and not list((tmp_path / "kept").iterdir())
    with atomic_outputs() as stage:   # a successful run keeps them
        open(stage(tmp_path / "a" / "b" / "out.tsv"), "w").write("x")
    assert (tmp_path / "a" / "b" / "out.tsv").read_text() == "x"


def test_failed_flush_or_block_leaves_old_file_and_no_temporary(tmp_path, monkeypatch):
    import errno

    out = tmp_path / "o.txt"
    out.write_text("old")
    with pytest.raises(RuntimeError):
        with _io.atomic_path(out) as tmp:
            open(tmp, "w").write("new")
            raise RuntimeError("the block failed")
    assert out.read_text() == "old" and os.listdir(tmp_path) == ["o.txt"]

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_io, "_fsync", full)    # the disk fills while the data are flushed
    with pytest.raises(OSError, match=r"cannot write .*o\.txt: no space left on the device"):
        with _io.atomic_path(out) as tmp:
            open(tmp, "w").write("new")
    assert out.read_text() == "old" and os.listdir(tmp_path) == ["o.txt"]


def test_symlinked_output_replaces_the_target_not_the_link(tmp_path):
    (tmp_path / "real.txt").write_text("old")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    with _io.atomic_path(tmp_path / "link.txt") as tmp:
        open(tmp, "w").write("new")
    assert (tmp_path / "link.txt").is_symlink() and (tmp_path / "real.txt").read_text() == "new"


def test_a_loop_of_symlinks_is_an_error_not_replaced(tmp_path):
    """realpath stops at a loop of links and the write replaced the link with a file, hiding the loop; open() says
    "Too many levels of symbolic links"."""
    (tmp_path / "a.txt").symlink_to("b.txt")
    (tmp_path / "b.txt").symlink_to("a.txt")
    with pytest.raises(OSError, match="symbolic links form a loop"):
        with _io.atomic_path(tmp_path / "a.txt") as tmp:
            open(tmp, "w").write("new")
    assert (tmp_path / "a.txt").is_symlink() and (tmp_path / "b.txt").is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.txt"]


@pytest.mark.parametrize("under", [["weights.png"], ["sub", "weights.png"]])
def test_an_output_under_a_file_is_named_as_such(tmp_path, under):
    """A file where a directory of the path should be was reported by os.makedirs as "File exists" (pl's save=
    "panel.png/weights.png", say); open() calls it "Not a directory".  Nothing is left behind."""
    (tmp_path / "panel.png").write_text("old")
    with pytest.raises(NotADirectoryError, match=r"panel\.png is a file, not a directory"):
        with _io.atomic_path(tmp_path.joinpath("panel.png", *under)) as tmp:
            open(tmp, "w").write("new")
    assert (tmp_path / "panel.png").read_text() == "old" and os.listdir(tmp_path) == ["panel.png"]


# ---------------------------------------------------------------------------------------------------
# item 3 (the output side): a full disk, a file-size limit, an unwritable directory
# ---------------------------------------------------------------------------------------------------
_CLI = "import sys; from bioqpfs.cli import main; sys.exit(main(sys.argv[1:]))"


def _digest(path):
    import hashlib

    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.mark.parametrize("opt", ["-o", "--tsv"])
def test_full_disk_output_is_a_clear_error_and_the_input_is_intact(tmp_path, opt):
    """/dev/full (reached through a link, so that an old version cannot replace the device node itself):
    before, the link was replaced by a regular file and the run exited 0 as if the result was written."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    inp = _h5ad(tmp_path / "in.h5ad")
    before = _digest(inp)
    full = "full.h5ad" if opt == "-o" else "full.out"  # -o writes an .h5ad
    (tmp_path / full).symlink_to("/dev/full")
    args = ["select", "in.h5ad", "--groupby", "cls", "--method", "maxrel", "--n-genes", "3", "--quiet"]
    args += ["-o", full] if opt == "-o" else ["-o", "out.h5ad", "--tsv", full]
    r = _run(_CLI, *args, cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "bioqpfs: error: cannot write /dev/full: no space left on the device" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert (tmp_path / full).is_symlink() and stat.S_ISCHR(os.stat("/dev/full").st_mode)
    assert _digest(inp) == before
    assert not [p for p in os.listdir(tmp_path) if _io.TMP_MARK in p]


def test_file_size_limit_mid_write_leaves_no_output_and_no_temporary(tmp_path):
    """A disk that fills during the write, simulated by RLIMIT_FSIZE (the write fails with EFBIG).  With h5py >=
    3.16 (anndata 0.13) HDF5 printed an "Exception ignored" traceback for every object it could not flush, then
    the process segfaulted at exit (rc -11) after the CLI's message; it now ends with the message and exit 1."""
    _h5ad(tmp_path / "in.h5ad", m=400)
    script = """
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        import os
        from bioqpfs.cli import main
        assert main(sys.argv[1:-3] + ["-o", "warm.h5ad", "--quiet"]) == 0  # numba's cache written before the limit
        os.remove("warm.h5ad")
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, resource.RLIM_INFINITY))
        sys.exit(main())  # reads sys.argv, as the console script does
        """
    r = _run(script, "select", "in.h5ad", "--groupby", "cls", "--method", "maxrel", "--n-genes", "3", "-o",
             "out.h5ad", "--quiet", cwd=tmp_path, timeout=120)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "cannot write" in r.stderr and "out.h5ad" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "Exception ignored" not in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["in.h5ad"]


@pytest.fixture
def unwritable_dir(tmp_path):
    """A directory nobody may write to: 0555 for a user; for root (who writes anywhere) immutable (chattr +i)."""
    d = tmp_path / "ro"
    d.mkdir()
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode != 0:
            pytest.skip("running as root and chattr +i is not available here")
        yield d
        subprocess.run(["chattr", "-i", str(d)], capture_output=True)
    else:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)


def test_unwritable_output_directory(tmp_path, unwritable_dir):
    _h5ad(tmp_path / "in.h5ad")
    r = _run(_CLI, "select", "in.h5ad", "--groupby", "cls", "--method", "maxrel", "--n-genes", "2",
             "-o", "ro/out.h5ad", "--quiet", cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "bioqpfs: error: -o 'ro/out.h5ad'" in r.stderr and "is not writable" in r.stderr, r.stderr
    # the library face (no up-front check): the error names the output, no temporary file is left
    r = _run("""
        import sys
        from bioqpfs._io import atomic_path
        with atomic_path(sys.argv[1]) as tmp:
            open(tmp, "w").write("x")
        """, unwritable_dir / "o.txt", timeout=60)
    assert r.returncode == 1
    assert f"cannot write {unwritable_dir}/o.txt: " in r.stderr and "choose a writable directory" in r.stderr, \
        r.stderr
    assert os.listdir(unwritable_dir) == []


# ---------------------------------------------------------------------------------------------------
# item 3: signals at real times, concurrent writers, an input cut short or removed while it is read
# ---------------------------------------------------------------------------------------------------
def _slow_write_h5ad(path, n_columns=400):
    """A small h5ad that takes ~0.7 s to write and ~0.4 s to read: anndata writes each of its many .obs
    columns as its own HDF5 object (the matrix itself is 60 x 300), so a signal can land mid-write."""
    n, m = 60, 300
    rng = np.random.default_rng(1)
    y = np.arange(n) % 2
    X = rng.normal(size=(n, m)) + 2.0 * y[:, None] * (np.arange(m) < 3)
    index = [f"c{i}" for i in range(n)]
    obs = pd.concat([pd.DataFrame({"cls": pd.Categorical(np.array(["a", "b"])[y])}, index=index),
                     pd.DataFrame({f"x{j}": np.arange(n) for j in range(n_columns)}, index=index)], axis=1)
    ad.AnnData(X, obs=obs, var=pd.DataFrame(index=[f"g{j}" for j in range(m)])).write_h5ad(path)
    return path


def _wait_for(condition, proc, what, timeout=120):
    """Poll ``condition()`` every 5 ms until it holds; fail (after killing ``proc``) if ``proc`` ends first."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"the run ended (rc {proc.returncode}) or timed out before {what}")
        time.sleep(0.005)


_CAUGHT = {signal.SIGINT: (130, "bioqpfs: interrupted"), signal.SIGTERM: (143, "bioqpfs: terminated"),
           signal.SIGKILL: (-signal.SIGKILL, None)}


@pytest.mark.parametrize("phase, sig", [(phase, sig) for phase in ("computation", "write")
                                        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
                                        if (phase, sig) != ("computation", signal.SIGKILL)],
                         ids=lambda v: getattr(v, "name", v))
def test_signal_mid_run_leaves_no_output_and_no_temporary(tmp_path, sig, phase):
    """Real signals at real times in a ``bioqpfs select`` process.  Mid-computation: QPFS on 100 x 3,000
    (seconds), signalled once it has logged the start of the selection.  Mid-write: signalled as soon as
    the temporary output appears (the write takes ~0.7 s), over an older output that must be left as it
    was.  SIGINT/SIGTERM exit 130/143 with nothing new on disk; SIGKILL cannot clean up, but leaves at
    most a hidden temporary file, never a partial output (killed mid-computation, nothing is written yet:
    not a separate case)."""
    work = tmp_path / "work"
    work.mkdir()
    if phase == "computation":
        _h5ad(work / "in.h5ad", n=100, m=3000)
        method, old = "qpfs", None
    else:
        _slow_write_h5ad(work / "in.h5ad")
        method, old = "maxrel", b"an earlier result"
        (work / "out.h5ad").write_bytes(old)
    log = tmp_path / "stderr.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", _CLI, "select", "in.h5ad", "--groupby", "cls", "--method",
                                 method, "--n-genes", "5", "-o", "out.h5ad"], cwd=work, stdout=subprocess.DEVNULL,
                                stderr=err)
    try:
        if phase == "computation":
            _wait_for(lambda: "selecting 5 genes" in log.read_text(), proc, "the selection started")
        else:
            _wait_for(lambda: any(_io.TMP_MARK in p for p in os.listdir(work)), proc, "the output was being written")
        proc.send_signal(sig)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = log.read_text()
    code, message = _CAUGHT[sig]
    assert rc == code, stderr
    if message is not None:
        assert message in stderr and "Traceback" not in stderr, stderr
    left = sorted(os.listdir(work))
    if sig == signal.SIGKILL:  # at most the hidden temporary file that no cleanup could remove
        left = [p for p in left if not (p.startswith(".out.h5ad" + _io.TMP_MARK))]
    assert left == (["in.h5ad"] if old is None else ["in.h5ad", "out.h5ad"]), left
    if old is not None:
        assert (work / "out.h5ad").read_bytes() == old


_LOST_SIGNAL_CLI = textwrap.dedent("""
    import signal, sys
    from bioqpfs import tl
    from bioqpfs.cli import main

    real = tl.select_genes

    class Finalised:
        def __del__(self):  # the handler's exception is raised here: Python prints "Exception ignored" and drops it
            signal.raise_signal(getattr(signal, sys.argv[1]))
            for _ in range(10000):
                pass

    def select_genes(*args, **kwargs):
        real(*args, **kwargs)
        Finalised()

    tl.select_genes = select_genes
    sys.exit(main(sys.argv[2:]))
""")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda v: v.name)
def test_a_signal_whose_exception_is_lost_in_a_finaliser_still_stops_the_run(tmp_path, sig):
    """A signal that lands in a finaliser or weakref callback (seen in CI: a ``WeakValueDictionary`` entry
    removed during garbage collection) has its exception printed and dropped; the run must still exit
    130 / 143 and write nothing (the record of :data:`bioqpfs._io.signals_received`), not finish with 0; the
    dropped exception is not printed as a traceback either (one "bioqpfs: interrupted" line, as for any signal)."""
    _h5ad(tmp_path / "in.h5ad", n=40, m=30)
    proc = subprocess.run([sys.executable, "-c", _LOST_SIGNAL_CLI, sig.name, "select", "in.h5ad", "--groupby", "cls",
                           "--method", "maxrel", "--n-genes", "3", "-o", "out.h5ad", "--tsv", "out.tsv"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    code, message = _CAUGHT[sig]
    assert proc.returncode == code and message in proc.stderr, proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["in.h5ad"]


_FULL_CACHE_DISK = textwrap.dedent("""
    import errno, warnings
    import numba.core.caching as caching

    def full(self, *args, **kwargs):  # every write of numba's on-disk cache fails as on a full disk
        raise OSError(errno.ENOSPC, "No space left on device")

    caching.IndexDataCacheFile.save = full
    import numpy as np
    import bioqpfs

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 12)), np.arange(40) % 2
    X[y == 1, 3] += 3.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ranking = bioqpfs.select(X, y, method="maxrel", n_genes=3).ranking
    print(int(ranking[0]), sum("could not write the compiled kernels" in str(w.message) for w in caught))
""")


def test_a_full_disk_for_numbas_cache_does_not_fail_the_selection(tmp_path):
    """numba raises the OSError of a failed cache write from the call that compiled: on a full disk every
    selection failed until the cache was warm.  With an empty cache directory (everything compiles) and every
    cache write failing, the selection runs and warns once."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    proc = subprocess.run([sys.executable, "-c", _FULL_CACHE_DISK], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["3", "1"], proc.stdout + proc.stderr[-3000:]


def test_two_concurrent_writers_leave_one_whole_result(tmp_path):
    """Two ``bioqpfs select`` runs (different methods) write the same -o at the same time: both succeed,
    and the file is a valid h5ad holding exactly one of the two selections, equal to that run's own TSV."""
    import anndata as ad

    _slow_write_h5ad(tmp_path / "in.h5ad", n_columns=200)
    procs = {m: subprocess.Popen([sys.executable, "-c", _CLI, "select", "in.h5ad", "--groupby", "cls", "--method", m,
                                  "--n-genes", "5", "-o", "out.h5ad", "--tsv", f"{m}.tsv", "--quiet"], cwd=tmp_path,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for m in ("maxrel", "mrmr_mid")}
    for m, p in procs.items():
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    result = ad.read_h5ad(tmp_path / "out.h5ad")
    keys = [m for m in procs if m in result.uns]
    assert len(keys) == 1, list(result.uns)
    (m,) = keys
    table = pd.read_csv(tmp_path / f"{m}.tsv", sep="\t")
    assert list(result.uns[m]["selected"]) == list(table.loc[table["selected"], "gene"])
    assert result.var[f"{m}_selected"].sum() == 5 and f"{m}_weight" in result.var
    assert not [p for p in os.listdir(tmp_path) if _io.TMP_MARK in p]


def test_input_truncated_while_the_cli_reads_it_is_a_clear_error(tmp_path):
    """The input is cut to half its size while ``bioqpfs select`` reads it (once HDF5 has it open).
    Before: h5py's 'Unable to synchronously open object (bad symbol table node signature)', naming no file
    (or, when the cut came before the matrix was read, a selection from zeros)."""
    _slow_write_h5ad(tmp_path / "in.h5ad", n_columns=600)
    proc = subprocess.Popen([sys.executable, "-c", _CLI, "select", "in.h5ad", "--groupby", "cls", "--method",
                             "maxrel", "--n-genes", "3", "-o", "out.h5ad", "--quiet"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def reading():  # two handles on the input: bioqpfs's own (for its size) and HDF5's, i.e. read_h5ad has begun
        fds = f"/proc/{proc.pid}/fd"
        try:
            return sum(os.readlink(f"{fds}/{fd}").endswith("in.h5ad") for fd in os.listdir(fds)) >= 2
        except OSError:
            return False

    try:
        _wait_for(reading, proc, "the input was being read")
        os.truncate(tmp_path / "in.h5ad", os.path.getsize(tmp_path / "in.h5ad") // 2)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stderr
    assert "bioqpfs: error: in.h5ad " in stderr and "truncated" in stderr and "Traceback" not in stderr, stderr
    assert sorted(os.listdir(tmp_path)) == ["in.h5ad"]


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_backed_input_truncated_or_removed_while_open(tmp_path, sparse):
    """A backed AnnData (``read_h5ad(backed='r')``) whose file is truncated, or removed, after it was opened
    and before ``tl.select_genes`` reads the matrix.  Removed: the open handle still reads it whole, so
    the result is the one of the intact data (independent reference: ``bioqpfs.select`` on the arrays).
    Truncated: an error naming the file.  Before: HDF5 read the missing bytes of the dense matrix as zeros
    and the selection was silently computed from them (a different panel, no error); the sparse one failed
    with h5py's KeyError 'Unable to synchronously open object (unable to determine object type)'."""
    import scipy.sparse as sps

    import bioqpfs

    rng = np.random.default_rng(3)
    n, m = 60, 400
    y = np.arange(n) % 3
    X = rng.gamma(1.0, size=(n, m)) * (rng.random((n, m)) < 0.5) + 3.0 * (y[:, None] == np.arange(m) % 3) * (
        np.arange(m) >= m - 6)   # the informative genes are the last columns: the part a truncation cuts off
    obs = pd.DataFrame({"cls": pd.Categorical(np.array(list("abc"))[y])}, index=[f"c{i}" for i in range(n)])
    var = pd.DataFrame(index=[f"g{j}" for j in range(m)])
    expected = bioqpfs.select(X, y, method="maxrel", n_genes=4, feature_names=var.index).genes
    for fault in ("removed", "truncated"):
        path = tmp_path / f"{fault}.h5ad"
        ad.AnnData(sps.csr_matrix(X) if sparse else X, obs=obs, var=var).write_h5ad(path)
        backed = ad.read_h5ad(path, backed="r")
        try:
            if fault == "removed":
                os.remove(path)
                bioqpfs.tl.select_genes(backed, "cls", method="maxrel", n_genes=4, use_raw=False)
                assert list(backed.uns["maxrel"]["selected"]) == list(expected)
            else:
                os.truncate(path, os.path.getsize(path) // 2)
                # dense: the values read, checked against the file's size; sparse: opening its group fails
                with pytest.raises(ValueError, match=rf"{path.name}(:| was truncated while it was read).*(stored ones|"
                                                     r"damaged or was changed while it was open)"):
                    bioqpfs.tl.select_genes(backed, "cls", method="maxrel", n_genes=4, use_raw=False)
                assert "maxrel" not in backed.uns
        finally:
            backed.file.close()
