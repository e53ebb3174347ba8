"""Progress bars and worker threads of the Python faces (issue 14): progress=None / n_jobs=None the scanpy way."""
import time

import numba
import numpy as np
import pytest
import scanpy as sc

import bioqpfs
from bioqpfs import _progress, _threads
from bioqpfs._kernels import information as info


@pytest.fixture
def verbosity():
    old = sc.settings.verbosity
    yield
    sc.settings.verbosity = old


@pytest.fixture
def sc_jobs():
    old = sc.settings.n_jobs
    yield
    sc.settings.n_jobs = old


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 20)
    X = rng.normal(size=(60, 40))
    X[:, :3] += y[:, None]
    return X, y


# ----------------------------------------------------------------------------------------------
# progress
# ----------------------------------------------------------------------------------------------

def test_progress_none_follows_scanpy_verbosity(verbosity):
    sc.settings.verbosity = 1  # warning: scanpy's default
    assert _progress.wanted(None) is False
    sc.settings.verbosity = 2  # info
    assert _progress.wanted(None) is True
    assert _progress.wanted(False) is False
    with _progress.enabled(False):  # an enclosing explicit choice wins over the verbosity
        assert _progress.wanted(None) is False
    sc.settings.verbosity = 0
    assert _progress.wanted(True) is True
    with pytest.raises(TypeError, match="progress must be True, False or None"):
        _progress.wanted("yes")


@pytest.mark.parametrize("flag", [np.True_, np.False_])
def test_progress_takes_numpy_bools(flag, data, monkeypatch):
    """np.True_ / np.False_ (a flag read from an array or a config table) were refused by progress= while the faces'
    other flags (refit_selection) take them."""
    X, y = data
    made = _spy_tqdm(monkeypatch)
    assert _progress.wanted(flag) is bool(flag)
    bioqpfs.select(X, y, method="qpfs", n_genes=5, solver="spg", progress=flag)
    assert bool(made) is bool(flag)


def _spy_tqdm(monkeypatch):
    import tqdm.auto

    made = []
    real = tqdm.auto.tqdm

    class Spy(real):
        def __init__(self, *a, **kw):
            made.append(kw["desc"])
            super().__init__(*a, **kw)

    monkeypatch.setattr(tqdm.auto, "tqdm", Spy)
    return made


@pytest.mark.parametrize("face", ["select", "tl"])
def test_faces_show_bars_when_asked_or_verbose(face, data, monkeypatch, verbosity):
    X, y = data
    made = _spy_tqdm(monkeypatch)

    def run(**kw):
        if face == "select":
            return bioqpfs.select(X, y, method="qpfs", n_genes=5, solver="spg", **kw).ranking
        import anndata as ad

        a = ad.AnnData(X.astype(np.float32))
        a.obs["c"] = y.astype(str)
        bioqpfs.tl.select_genes(a, "c", method="qpfs", n_genes=5, solver="spg", **kw)
        return a.var["qpfs_rank"].to_numpy()

    sc.settings.verbosity = 1
    quiet = run()
    assert made == []
    loud = run(progress=True)
    assert "QP (spg)" in made and "mi matrix" in " ".join(made).lower()
    made.clear()
    sc.settings.verbosity = 2
    run()
    assert "QP (spg)" in made
    made.clear()
    run(progress=False)
    assert made == []
    np.testing.assert_array_equal(quiet, loud)


def _spg_of_many_steps(X, y):
    from bioqpfs._kernels import simplex_qp

    rng = np.random.default_rng(0)
    A = rng.normal(size=(200, 200))
    G = A @ A.T / 200 + np.diag(np.logspace(-3, 2, 200))  # 30 SPG iterations: the bar's update every 20 is reached
    with _progress.enabled():
        simplex_qp.solve_spg(G, rng.normal(size=200), polish=False)


@pytest.mark.parametrize("run, step", [
    (lambda X, y: bioqpfs.select(X, y, method="qpfs", n_genes=5, progress=True), "mi matrix"),  # the block pool
    (_spg_of_many_steps, "QP (spg)"),
    (lambda X, y: bioqpfs.select(X, y, method="ikm_qpfs", n_genes=5, progress=True),
     "QPFS on cluster representatives"),
    (lambda X, y: bioqpfs.select(X, y, method="tlkm_qpfs", n_genes=5, progress=True),
     "QPFS on cluster representatives"),
    # an error after the bar was made, before its first step
    (lambda X, y: bioqpfs.select(X, y, method="ikm_qpfs", n_genes=10**6, progress=True), None),
])
def test_a_failing_run_closes_its_bars(run, step, data, monkeypatch):
    """A Ctrl-C (or an error) inside a step closed none of the bars: they stayed on the terminal and in tqdm's
    instances, so the next run's bars were drawn one line lower."""
    made = []
    warm = _progress._warm_tqdm()

    class Interrupted(warm):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

        def update(self, n=1):
            if self.desc == step:
                raise KeyboardInterrupt
            return super().update(n)

    monkeypatch.setattr(_progress, "_warm_tqdm", lambda: Interrupted)
    with pytest.raises(KeyboardInterrupt if step else ValueError):
        run(*data)
    assert made and all(b.disable for b in made), [b.desc for b in made if not b.disable]


def test_first_eta_ignores_the_warm_up_step():
    """A slow first step (JIT compilation) must not set the rate: after it, 5 fast steps set the ETA."""
    with _progress.enabled(True):
        b = _progress.bar(100, "test")
    b.mininterval = 0
    time.sleep(0.6)  # the first step: compilation
    b.update(1)
    for _ in range(5):
        time.sleep(0.02)
        b.update(1)
    fd = b.format_dict
    rate = fd["rate"] or (fd["n"] - fd["initial"]) / fd["elapsed"]
    b.close()
    # steps of ~0.02 s: about 50/s; counting the first step it would be 6 / 0.7 s, under 10/s
    assert rate > 20
    assert (100 - 6) / rate < 5  # ETA a few seconds, not ~11 s


# ----------------------------------------------------------------------------------------------
# threads
# ----------------------------------------------------------------------------------------------

def test_worker_count_order(sc_jobs):
    sc.settings.n_jobs = 1  # scanpy's default: not a choice, numba's count applies
    assert _threads.resolve(None) == numba.get_num_threads()
    sc.settings.n_jobs = 2
    assert _threads.resolve(None) == 2
    assert _threads.resolve(1) == 1
    sc.settings.n_jobs = -1
    assert _threads.resolve(None) == numba.config.NUMBA_NUM_THREADS
    with _threads.limited(1):
        assert _threads.current() == 1 and info.n_workers() == 1 and numba.get_num_threads() == 1
        with _threads.limited(None):  # an inner face keeps the outer count
            assert info.n_workers() == 1
    assert _threads.current() == numba.config.NUMBA_NUM_THREADS


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", True])
def test_bad_n_jobs_is_a_clear_error(bad, data):
    X, y = data
    with pytest.raises(ValueError, match=r"n_jobs must be a positive integer or -1"):
        bioqpfs.select(X, y, method="qpfs", n_genes=5, n_jobs=bad)


def test_error_curve_checks_n_jobs_before_reading_x(sc_jobs):
    """error_curve read X (a backed or Dask matrix: possibly minutes) before it refused a bad n_jobs."""
    import anndata as ad
    import dask
    import dask.array as da

    rng = np.random.default_rng(0)
    values = rng.normal(size=(60, 40))
    reads = []

    def read():
        reads.append(1)
        return values

    adata = ad.AnnData(da.from_delayed(dask.delayed(read, pure=False)(), shape=values.shape, dtype=values.dtype))
    adata.obs["c"] = np.repeat(["a", "b", "c"], 20)
    with pytest.raises(ValueError, match=r"n_jobs must be a positive integer or -1"):
        bioqpfs.evaluate.error_curve(adata, "c", ["qpfs"], n_genes=[3], cv=3, n_jobs=0)
    sc.settings.n_jobs = -2
    with pytest.raises(ValueError, match=r"scanpy.settings.n_jobs must be a positive integer or -1"):
        bioqpfs.evaluate.error_curve(adata, "c", ["qpfs"], n_genes=[3], cv=3)
    assert reads == []


def test_faces_pass_n_jobs_to_the_counting_pool(data, monkeypatch, sc_jobs):
    X, y = data
    seen = []
    real = info.n_workers

    def spy():
        seen.append(real())
        return seen[-1]

    monkeypatch.setattr(info, "n_workers", spy)
    sc.settings.n_jobs = 2
    r1 = bioqpfs.select(X, y, method="qpfs", n_genes=5, n_jobs=1).ranking
    assert seen and set(seen) == {1}
    seen.clear()
    r2 = bioqpfs.select(X, y, method="qpfs", n_genes=5).ranking
    assert seen and set(seen) == {2}
    np.testing.assert_array_equal(r1, r2)
    seen.clear()
    bioqpfs.evaluate.error_curve(X, y, ["qpfs"], n_genes=[3], cv=3, n_jobs=1)
    assert seen and set(seen) == {1}


def test_a_huge_n_jobs_is_capped_at_the_cores_with_one_warning(data, monkeypatch):
    """n_jobs=10**6 was taken literally: the counting pool was made for a million workers and split the genes into
    one range per gene, a thread each (threads beyond the cores only wait: the kernels are CPU bound, without the
    GIL).  It is now capped at the cores this process may use, with one warning naming both numbers."""
    import os
    import warnings

    X, y = data
    monkeypatch.setattr(_threads, "_WARNED", set(), raising=False)   # warned once per process: start afresh
    cores = max(len(os.sched_getaffinity(0)), numba.config.NUMBA_NUM_THREADS)
    peak = []
    real = info.run_ranges

    def spy(func, ranges):   # one range per worker thread
        peak.append(len(ranges))
        real(func, ranges)

    monkeypatch.setattr(info, "run_ranges", spy)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        big = bioqpfs.select(X, y, method="qpfs", n_genes=5, n_jobs=10**6).ranking
        bioqpfs.select(X, y, method="qpfs", n_genes=5, n_jobs=10**6)
    shown = [str(w.message) for w in record if "n_jobs" in str(w.message)]
    assert shown == [f"n_jobs=1000000 is more than the {cores} cores this process may use; using {cores} worker "
                     "threads (more would only wait for a core). Pass n_jobs=-1 for every core"]
    assert _threads.resolve(10**6) == cores and _threads.resolve(cores) == cores
    assert peak and max(peak) <= cores
    np.testing.assert_array_equal(big, bioqpfs.select(X, y, method="qpfs", n_genes=5, n_jobs=cores).ranking)


def test_a_failed_pool_run_restores_the_blas_threads(monkeypatch):
    """The pool lifted its one-BLAS-thread limit before waiting for the tasks still running after one failed; such a
    task limiting BLAS itself (qpfs_cover's class QP solves) then restored the one thread it had found, and the
    process went on with one BLAS thread.  The limit is modelled as threadpoolctl's: saved on entry, restored on
    exit, one count for the process."""
    import contextlib
    import threading

    blas = {"threads": 4}

    @contextlib.contextmanager
    def limited(n=1):
        saved, blas["threads"] = blas["threads"], n
        try:
            yield
        finally:
            blas["threads"] = saved

    monkeypatch.setattr(_threads, "blas_limited", limited)
    entered = threading.Event()

    def task(i):
        if i == 0:
            entered.wait(5)
            raise ValueError("a failing task")
        with _threads.blas_limited(1):
            entered.set()
            time.sleep(0.3)   # still running when the failure reaches the caller

    with pytest.raises(ValueError, match="a failing task"):
        info.run_tasks(task, [0, 1], _progress.bar(2, "tasks"), workers=2)
    assert blas["threads"] == 4


def test_pools_of_two_threads_with_different_counts_do_not_stop_each_other():
    """A face in one thread (n_jobs=2) and one in another (n_jobs=3): the second shut the shared pool of the first
    down while the first was still submitting its tasks ("cannot schedule new futures after shutdown")."""
    import threading

    done = []

    class Items(list):
        def __iter__(self):   # while this caller submits its tasks, another thread runs with another count
            for k, item in enumerate(list.__iter__(self)):
                if k == 1:
                    other = threading.Thread(target=info.run_tasks,
                                             args=(done.append, [0, 1, 2], _progress.bar(3, "b"), 3))
                    other.start()
                    other.join()
                yield item

    info.run_tasks(done.append, Items(range(4)), _progress.bar(4, "a"), workers=2)
    assert sorted(done) == [0, 0, 1, 1, 2, 2, 3]


# ----------------------------------------------------------------------------------------------
# the hint for long exact runs
# ----------------------------------------------------------------------------------------------

class _Log:
    def __init__(self):
        self.lines = []

    def info(self, msg, **kw):
        self.lines.append(msg)


def test_long_exact_run_hint_names_nystrom():
    import bioqpfs.tl._select_genes as tlmod

    log = _Log()
    tlmod._hint_long_exact_run("qpfs", {}, (2000, 20000), log)  # the 2,000 x 20,000 shape: minutes
    assert len(log.lines) == 1 and "nystrom_rate=0.05" in log.lines[0] and "2000 x 20000" in log.lines[0]
    for method, params, shape in [("qpfs", {}, (20000, 2000)), ("qpfs", {"nystrom_rate": 0.05}, (2000, 20000)),
                                  ("maxrel", {}, (2000, 20000))]:
        tlmod._hint_long_exact_run(method, params, shape, log)
    assert len(log.lines) == 1
    tlmod._hint_long_exact_run("qpfs_cover", {}, (2000, 20000), log)  # the default: no Nystrom, mask_var only
    assert len(log.lines) == 2 and "nystrom" not in log.lines[1] and "mask_var" in log.lines[1]


def test_select_genes_checks_the_shape_it_runs(data, monkeypatch):
    import anndata as ad

    import bioqpfs.tl._select_genes as tlmod

    seen = []
    monkeypatch.setattr(tlmod, "_hint_long_exact_run", lambda method, params, shape, logg: seen.append((method, shape)))
    X, y = data
    a = ad.AnnData(X.astype(np.float32))
    a.obs["c"] = y.astype(str)
    a.var["hv"] = np.arange(40) < 30
    bioqpfs.tl.select_genes(a, "c", n_genes=5, mask_var="hv")
    assert seen == [("qpfs_cover", (60, 30))]   # the default recipe builds the same MI matrix
