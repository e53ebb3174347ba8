"""Tell the user when a call spends its time compiling numba kernels (a cold on-disk cache).

The kernels are ``@njit(cache=True)``: the first call after an install (or after a kernel's source
changed) compiles them -- seconds to tens of seconds, e.g. about 20 s for ``ikm_qpfs`` -- and later calls
load the machine code from numba's cache.  numba announces every real compilation, and only those
(a cache hit loads without compiling), through its event API (``numba.core.event``, kind
``"numba:compile"``); the faces listen for it, so the message appears exactly when the wait happens,
at no cost when the cache is warm.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

__all__ = ["announce_compilation", "skip_failed_cache_writes", "MESSAGE"]

MESSAGE = "compiling kernels (first run only; numba caches them on disk, later runs start at once)"


@contextmanager
def announce_compilation(log):
    """Call ``log(MESSAGE)`` once when numba starts compiling inside this block.

    Parameters
    ----------
    log : callable
        Receives one string (e.g. scanpy's ``logg.info``).  Called from the thread that compiles,
        at most once per block.

    Yields
    ------
    dict
        ``{"compiled": bool, "seconds": float}`` filled in as the block runs: whether anything was
        compiled and the time spent in top-level compilations (summed over threads).
    """
    from numba.core import event

    state = {"compiled": False, "seconds": 0.0}
    lock = threading.Lock()
    local = threading.local()   # nested compilations (a kernel calling another) are timed once

    class _Listener(event.Listener):
        def on_start(self, ev):
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            if depth == 0:
                local.t0 = time.perf_counter()
            with lock:
                first = not state["compiled"]
                state["compiled"] = True
            if first:
                log(MESSAGE)

        def on_end(self, ev):
            local.depth -= 1
            if local.depth == 0:
                with lock:
                    state["seconds"] += time.perf_counter() - local.t0

    with event.install_listener("numba:compile", _Listener()):
        yield state


_cache_warned = threading.Event()


def skip_failed_cache_writes(namespace):
    """Let the ``@njit(cache=True)`` kernels of ``namespace`` (a kernel module's ``globals()``) run when numba
    cannot write their machine code to its on-disk cache.

    The cache only saves compilation time, but numba raises the ``OSError`` of a failed write (a full disk, a
    quota) from the call that compiled the kernel, so every selection failed ("No space left on device") until
    the cache was warm.  The write of each kernel's cache is wrapped: a failed write is skipped with one
    ``RuntimeWarning`` per process, and the kernel runs from the machine code just compiled.  Only these
    kernels: numba's behaviour for other code is left as it is.
    """
    for obj in list(namespace.values()):
        cache = getattr(obj, "_cache", None)
        save = getattr(cache, "save_overload", None)
        if save is None or getattr(save, "skips_failed_writes", False):
            continue

        def save_or_warn(sig, data, save=save):
            try:
                save(sig, data)
            except OSError as e:
                if not _cache_warned.is_set():
                    _cache_warned.set()
                    import warnings

                    from ._validation import user_stacklevel

                    warnings.warn(f"numba could not write the compiled kernels to its cache ({e}); bioqpfs runs, "
                                  "but compiles them again in every new process: free some space, or point "
                                  "NUMBA_CACHE_DIR at a writable directory", RuntimeWarning,
                                  stacklevel=user_stacklevel())

        save_or_warn.skips_failed_writes = True
        cache.save_overload = save_or_warn
