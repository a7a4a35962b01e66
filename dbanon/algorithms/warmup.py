"""numba's CPU target set up in a thread while the run waits on the server.

The first compiled call in a process builds numba's target context (its typing and lowering
registries, and scipy.linalg for BLAS): 0.6-1.1 s on this machine, paid by every publish and
refresh before its first kernel whatever the table's size, loading from the cache or not.
`start()` pays it in a thread at the start of a run, while the main thread waits on the server
(connecting, validating and counting the source); the first real kernel then costs what
loading it from the cache costs (about 20 ms). numba's compiler lock orders the two threads;
`join()` before a fork, so that no child inherits that lock held by the thread.
"""

from __future__ import annotations

import threading
from contextlib import suppress

from numba import njit

_started: list[threading.Thread] = []
_lock = threading.Lock()


@njit(cache=True, nogil=True)
def _one(x: int) -> int:
    return x + 1


def _warm() -> None:
    with suppress(Exception):  # best effort: the run's own first kernel says what fails
        _one(1)


def start() -> None:
    """Set numba's target up in a thread, once per process."""
    with _lock:
        if not _started:
            thread = threading.Thread(target=_warm, name="dbanon-numba-warmup", daemon=True)
            thread.start()
            _started.append(thread)


def join() -> None:
    """Wait for the set-up, if one was started."""
    for thread in _started:
        thread.join()
