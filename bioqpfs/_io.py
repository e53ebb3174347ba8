"""Small I/O helpers: atomic writes and conversion of results to h5ad/R-safe types."""
from __future__ import annotations

import os
import signal
import tempfile
import threading
from contextlib import contextmanager

import numpy as np

__all__ = ["atomic_path", "to_storable"]


def _umask():
    """The process umask, read without changing it (Linux), else by the set-and-restore idiom."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def _held_signals():
    """Hold SIGINT/SIGTERM while the block runs; yield the list of those received.

    A Ctrl-C that arrives inside h5py/HDF5 can surface in a finaliser, where Python prints and drops
    it, so the write would finish as if nothing happened; and SIGTERM has no Python handler by
    default, so no cleanup would run.  Holding both and acting after the block avoids both.  Only
    in the main thread (elsewhere signal handlers cannot be set; nothing is held).
    """
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    received = []
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in _HELD_SIGNALS}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _deliver(signum):
    """Act on a held signal as its handler would have (KeyboardInterrupt for SIGINT by default)."""
    handler = signal.getsignal(signum)
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)


@contextmanager
def atomic_path(path):
    """Yield a temporary path next to ``path``; move it into place only if the block succeeds.

    SIGINT (Ctrl-C) and SIGTERM received while the block runs are held until it ends: the temporary
    file is then removed, ``path`` is left as it was, and the signal takes effect (KeyboardInterrupt,
    or the process's SIGTERM handler; the CLI exits 130 / 143).
    """
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    received = []
    try:
        with _held_signals() as received:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.splitext(path)[1], dir=d)
            os.close(fd)
            try:
                yield tmp
                if not received:
                    # mkstemp creates the file 0600; give the result the mode a plain open() would (0666 & ~umask)
                    os.chmod(tmp, 0o666 & ~_umask())
                    os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
    finally:
        if received:  # also when the block failed: the signal is what the user asked for
            _deliver(received[0])


def to_storable(value):
    """Convert a value to types that survive ``write_h5ad``/``read_h5ad`` and the R bridge.

    None -> "None"; numpy scalars -> Python scalars; sequences -> NumPy arrays (str arrays when not
    all numeric/bool); dicts recursively (keys as str).  Anything else -> its ``str``.
    """
    if value is None:
        return "None"
    if isinstance(value, dict):
        return {str(k): to_storable(v) for k, v in value.items()}
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, np.ndarray)):
        arr = np.asarray(value, dtype=object) if not isinstance(value, np.ndarray) else value
        if arr.dtype != object and arr.dtype.kind in "biuf":
            return np.asarray(arr)
        items = list(np.ravel(arr))
        if items and all(isinstance(v, (bool, np.bool_)) for v in items):
            return np.asarray(items, dtype=bool)
        if items and all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
                         for v in items):
            return np.asarray(items, dtype=np.float64 if any(isinstance(v, (float, np.floating)) for v in items) else np.int64)
        return np.asarray(["None" if v is None else str(v) for v in items], dtype=str)
    return str(value)
