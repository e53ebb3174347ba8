"""Progress bars on stderr for long steps.

Kernels call :func:`bar`; it returns a no-op object unless bars are on, so library users see
nothing unexpected and tests stay quiet.  Faces turn them on: the CLI with :func:`enabled`, and
``tl.select_genes`` / ``bioqpfs.select`` / ``evaluate.error_curve`` with :func:`requested` from their
``progress=`` argument (``True``; ``False``; ``None``: on when ``scanpy.settings.verbosity`` is info
or higher, scanpy optional).  Bars appear only for steps longer than one second (tqdm's ``delay``).

The first step of a run often includes numba's compilation (seconds, once per installation), so
its duration says nothing about the next ones: the bars estimate their rate and ETA from the
second step on (a 4 s run had shown "04:58" left after its first step).
"""
from __future__ import annotations

import contextvars
import sys
from contextlib import contextmanager

import numpy as np

__all__ = ["bar", "enabled", "requested", "wanted"]

#: True / False inside an enabled() block, None where nothing has chosen (then scanpy's verbosity decides)
_ENABLED = contextvars.ContextVar("bioqpfs_progress", default=None)


class _NoBar:
    def update(self, n=1):
        pass

    def close(self):
        pass

    def set_postfix_str(self, s):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@contextmanager
def enabled(flag=True):
    """Show progress bars inside this block (or hide them, ``flag=False``)."""
    token = _ENABLED.set(bool(flag))
    try:
        yield
    finally:
        _ENABLED.reset(token)


def wanted(progress=None):
    """Whether a face's ``progress`` argument turns bars on: True/False as given; None keeps an
    enclosing choice (e.g. the CLI's) or follows scanpy's verbosity (info or higher), if scanpy is
    imported."""
    if progress is not None:
        if not isinstance(progress, (bool, np.bool_)):   # numpy's bools too, as the faces' other flags
            raise TypeError(f"progress must be True, False or None, got {progress!r}")
        return bool(progress)
    if _ENABLED.get() is not None:
        return _ENABLED.get()
    sc = sys.modules.get("scanpy")
    verbosity = getattr(getattr(sc, "settings", None), "verbosity", None)
    try:
        return verbosity is not None and int(verbosity) >= 2  # scanpy.Verbosity.info == 2
    except (TypeError, ValueError):
        return False


def requested(progress=None):
    """Context for a face: bars on or off as :func:`wanted` decides."""
    return enabled(wanted(progress))


def _warm_tqdm():
    """tqdm whose rate and ETA start after the first step (which may include JIT compilation)."""
    from tqdm.auto import tqdm

    class WarmTqdm(tqdm):
        _warm = False

        def update(self, n=1):
            if self._warm or self.disable:
                return super().update(n)
            self._warm = True
            # first step done: count it, then measure the rate from here (as tqdm.reset does, keeping n)
            self.n += n
            self.initial = self.last_print_n = self.n
            self.last_print_t = self.start_t = self._time()
            self._ema_dn = type(self._ema_dn)(self.smoothing)
            self._ema_dt = type(self._ema_dt)(self.smoothing)
            return None

    return WarmTqdm


def bar(total, desc, unit="step"):
    """A tqdm bar (context manager with ``update``) when enabled, else a no-op."""
    if not _ENABLED.get():
        return _NoBar()
    return _warm_tqdm()(total=total, desc=desc, unit=unit, file=sys.stderr, delay=1.0, leave=False,
                        dynamic_ncols=True)
