"""Many small independent pieces of work on every core the process may use, by fork.

A refresh's regrouping tries thousands of small splits, each a fraction of a millisecond of
Python and NumPy set-up: threads would hold the GIL through it, while the database (the
other cores' usual tenant) sits idle meanwhile. Forked workers read the parent's arrays
without a copy and send back only their small results, in the order asked."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

from dbanon.algorithms import warmup

LEAST = 256  # fewer items than this are not worth the fork (a few ms)
_WORK: tuple[Callable[[Any], Any], Sequence[Any]] | None = None  # inherited, not pickled


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _quiet() -> None:
    """A worker leaves an interrupt to its parent, which reports it in one line, and ends
    quietly when the pool is done with it (SIGTERM): the parent's own handlers would raise
    in it and print a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _run(span: tuple[int, int]) -> list[Any]:
    assert _WORK is not None
    fn, items = _WORK
    return [fn(items[i]) for i in range(*span)]


def forked_map(
    fn: Callable[[Any], Any], items: Sequence[Any], least: int | None = None
) -> list[Any]:
    """[fn(x) for x in items], in order: on one forked worker per core when there are at
    least `least` items and more than one core. `fn` must not use a database connection
    (a worker shares the parent's sockets) and must return what pickles."""
    global _WORK
    workers = cores()
    if (
        workers < 2
        or len(items) < (LEAST if least is None else least)
        or "fork" not in mp.get_all_start_methods()
    ):
        return [fn(x) for x in items]
    warmup.join()  # no child inherits numba's compiler lock held by the set-up thread
    step = -(-len(items) // (4 * workers))  # a few spans per worker: even finishing times
    spans = [(i, min(i + step, len(items))) for i in range(0, len(items), step)]
    _WORK = (fn, items)
    try:
        with mp.get_context("fork").Pool(workers, initializer=_quiet) as pool:
            return [y for part in pool.imap(_run, spans) for y in part]
    finally:
        _WORK = None
