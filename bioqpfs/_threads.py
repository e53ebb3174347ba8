"""Worker-thread count, resolved the scanpy way, for the kernels' thread pool and numba regions.

Order (first that applies):

1. an explicit ``n_jobs=`` of a face (``tl.select_genes``, ``bioqpfs.select``, ``evaluate.error_curve``);
2. an enclosing face's count (a face calling another keeps the outer count);
3. ``scanpy.settings.n_jobs`` when scanpy is imported and it is not scanpy's default (1), like
   scanpy's own tools (``-1``: every core numba may use);
4. numba's thread count: ``NUMBA_NUM_THREADS`` (default: the number of cores), or
   :func:`numba.set_num_threads`.

The count is held in a context variable for the duration of the face's call and read by
:func:`bioqpfs._kernels.information.n_workers` (the block-pair pool); numba parallel regions get it
through :func:`numba.set_num_threads`, which numba keeps per calling thread, restored afterwards.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
from contextlib import contextmanager
from numbers import Integral

__all__ = ["resolve", "current", "limited", "blas_limited"]

_N_JOBS = contextvars.ContextVar("bioqpfs_n_jobs", default=None)


def _max_threads():
    import numba

    return max(1, int(numba.config.NUMBA_NUM_THREADS))


def _cores():
    """The cores this process may run on (its CPU affinity), or numba's thread count where that is larger (a
    ``NUMBA_NUM_THREADS`` set above the cores on purpose)."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(cores, _max_threads())


_WARNED = set()


def _check(n_jobs, name="n_jobs"):
    """The worker count for a valid ``n_jobs``: -1 is every core; a count above the cores is capped at them, with a
    warning once per (count, cores): the workers run CPU-bound kernels without the GIL, so threads beyond the cores
    only wait, and ``n_jobs=10**6`` would start up to a million threads (one per gene range or block pair)."""
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, Integral) or (n_jobs < 1 and n_jobs != -1):
        raise ValueError(f"{name} must be a positive integer or -1 (all cores), got {n_jobs!r}")
    if n_jobs == -1:
        return _max_threads()
    cores = _cores()
    if n_jobs > cores:
        if (int(n_jobs), cores) not in _WARNED:
            _WARNED.add((int(n_jobs), cores))
            import warnings

            warnings.warn(f"{name}={int(n_jobs)} is more than the {cores} cores this process may use; using {cores} "
                          "worker threads (more would only wait for a core). Pass n_jobs=-1 for every core",
                          UserWarning, stacklevel=4)
        return cores
    return int(n_jobs)


def resolve(n_jobs=None):
    """The worker count for ``n_jobs`` (None: the enclosing face's, scanpy's, then numba's); see the module."""
    if n_jobs is not None:
        return _check(n_jobs)
    outer = _N_JOBS.get()
    if outer is not None:
        return outer
    sc = sys.modules.get("scanpy")
    settings = getattr(sc, "settings", None)
    sc_jobs = getattr(settings, "n_jobs", None)
    if sc_jobs is not None and sc_jobs != 1:
        return _check(sc_jobs, "scanpy.settings.n_jobs")
    import numba

    return max(1, int(numba.get_num_threads()))


def current():
    """The count in force here (:func:`resolve` with no explicit value)."""
    return resolve(None)


@contextmanager
def limited(n_jobs=None):
    """Run the block with ``resolve(n_jobs)`` workers: the kernels' pool and numba regions of this thread."""
    import numba

    n = resolve(n_jobs)
    token = _N_JOBS.set(n)
    before = numba.get_num_threads()
    numba.set_num_threads(min(n, _max_threads()))
    try:
        yield n
    finally:
        numba.set_num_threads(before)
        _N_JOBS.reset(token)


@functools.lru_cache(maxsize=1)
def _blas_controller():
    """threadpoolctl's view of the loaded BLAS libraries, found once per process: finding them reads
    /proc/self/maps and costs 4-6 ms, which was paid on every QP solve, eigen-solve and counting call (62 ms of
    a 0.35 s default-recipe run on pbmc68k_reduced)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def blas_limited(n=1):
    """A context limiting BLAS to ``n`` threads inside the block (no-op without threadpoolctl, a scikit-learn
    dependency).  Matrix-vector loops (Lanczos, SPG, the LDFS/HSFS path) and the counting pool's workers run
    with one: GEMV is memory bound, and on a shared, oversubscribed machine OpenBLAS threads spin (a 1,000 x
    1,000 GEMV measured 35 ms with 2 threads under load against 0.8 ms with one)."""
    try:
        controller = _blas_controller()
    except ImportError:  # pragma: no cover
        return contextlib.nullcontext()
    return controller.limit(limits=n, user_api="blas")
