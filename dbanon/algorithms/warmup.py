"""numba's CPU target set up in a thread while the run waits on the server.

The first compiled call in a process builds numba's target context (its typing and lowering
registries, and scipy.linalg for BLAS): 0.6-1.1 s on this machine, paid by every publish and
refresh before its first kernel whatever the table's size, loading from the cache or not.
`start()` pays it in a thread at the start of a run, while the main thread waits on the server
(connecting, validating and counting the source); the first real kernel then costs what
loading it from the cache costs (about 20 ms). numba's compiler lock orders the two threads;
`join()` before a fork, so that no child inherits that lock held by the thread.

The set-up leaves scipy's BLAS and LAPACK out (`_without_blas`): numba's target imports them
for np.dot and np.linalg in compiled code, which no dbanon kernel calls, and scipy.linalg is
about 15 MB of every publish's resident set.
"""

from __future__ import annotations

import sys
import threading
from contextlib import suppress
from importlib import import_module

from numba import njit

_started: list[threading.Thread] = []
_lock = threading.Lock()


@njit(cache=True, nogil=True)
def _one(x: int) -> int:
    return x + 1


_BLAS = ("scipy.linalg.cython_blas", "scipy.linalg.cython_lapack")


def _without_blas() -> None:
    """Import numba's array target (numba.np.arraymath, which probes for scipy's BLAS as it is
    imported) with the BLAS modules unimportable, then make them importable again: compiled
    np.dot and np.linalg are then unavailable in this process, scipy.linalg itself is not."""
    if "numba.np.arraymath" in sys.modules:
        return
    blocked = [m for m in _BLAS if m not in sys.modules]
    for m in blocked:
        sys.modules[m] = None  # type: ignore[assignment]
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        for m in blocked:
            if sys.modules.get(m, 0) is None:
                del sys.modules[m]


def _warm() -> None:
    with suppress(Exception):  # best effort: the run's own first kernel says what fails
        _one(1)


def start() -> None:
    """Set numba's target up in a thread, once per process. The BLAS modules are made
    unimportable for a moment (`_without_blas`) here, before the thread: an import of
    scipy.linalg by another thread meanwhile (sklearn's, say) would fail."""
    with _lock:
        if not _started:
            with suppress(Exception):
                _without_blas()
            thread = threading.Thread(target=_warm, name="dbanon-numba-warmup", daemon=True)
            thread.start()
            _started.append(thread)


def preload(module: str) -> None:
    """Import `module` in a thread, while the run waits on the server: scikit-learn's forest
    takes about a second to import, most of it before the rows it fits are read. Joined with
    the set-up (`join`), so that no fork inherits an import lock held; an import that fails
    here fails again, and says why, where the run imports the module itself."""

    def load() -> None:
        with suppress(Exception):
            import_module(module)

    if module in sys.modules:  # imported already (an experiment's later publishes)
        return
    with _lock:
        thread = threading.Thread(target=load, name=f"dbanon-preload-{module}", daemon=True)
        thread.start()
        _started.append(thread)


def join() -> None:
    """Wait for the set-up and the preloads started."""
    for thread in _started:
        thread.join()
