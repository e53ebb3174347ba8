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

__all__ = ["announce_compilation", "MESSAGE"]

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
