"""Progress bars on stderr for long steps, off unless a face (the CLI) turns them on.

Kernels call :func:`bar`; it returns a no-op object unless :func:`enabled` is active, so library
users see nothing unexpected and tests stay quiet.  Bars appear only for steps longer than one
second (tqdm's ``delay``).
"""
from __future__ import annotations

import contextvars
import sys
from contextlib import contextmanager

__all__ = ["bar", "enabled"]

_ENABLED = contextvars.ContextVar("bioqpfs_progress", default=False)


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
    """Show progress bars inside this block."""
    token = _ENABLED.set(bool(flag))
    try:
        yield
    finally:
        _ENABLED.reset(token)


def bar(total, desc, unit="step"):
    """A tqdm bar (context manager with ``update``) when enabled, else a no-op."""
    if not _ENABLED.get():
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, delay=1.0, leave=False, dynamic_ncols=True)
