"""COPY ... TO STDOUT read in bulk: libpq's PQgetCopyData called from compiled code.

libpq hands a COPY's data over one row per PQgetCopyData call. Called from Python (psycopg's
`PGconn.get_copy_data`), each row costs a method call, a tuple and a memoryview: about 0.4 us,
0.4 s of client CPU for a million rows, more than the server spends producing them, so the
client, not the server, set the pace of every extract. `pull` makes the calls from numba-compiled
code without the GIL, copying the rows one after another into a NumPy buffer, until the buffer
holds a chunk or the stream ends: 0.1 s of client CPU a million rows.

It calls the very libpq the connection belongs to: the library is found among the files this
process has mapped (the one psycopg's binary wheel ships, or the system's that psycopg's C or
Python implementation loaded) and its functions' addresses are given to LLVM under names of
dbanon's own, so no other libpq in the process can be picked by name. Where that cannot be
established (not Linux, no unique libpq, a psycopg without `pgconn_ptr`) `reader()` is None and
the caller reads row by row as before.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from functools import cache

import numpy as np

Pull = Callable[[int, np.ndarray, int, np.ndarray, int], tuple[int, int]]

ENDED, FULL, FAILED, BIG = 1, 0, -2, 2  # `pull`'s states


def _libpq_path() -> str | None:
    """The one libpq this process has mapped, or None (none, or more than one)."""
    try:
        with open("/proc/self/maps") as maps:
            found = {line.split()[-1] for line in maps
                     if "/libpq" in line and ".so" in line.rsplit("/", 1)[-1]}  # fmt: skip
    except OSError:
        return None
    found = {p for p in found if os.path.basename(p).startswith("libpq")}
    return found.pop() if len(found) == 1 else None


@cache
def reader() -> tuple[Pull, Callable[[int], None]] | None:
    """(pull, free): the compiled bulk reader and libpq's PQfreemem, or None where the
    connection's libpq cannot be told for sure (see the module's docstring)."""
    import psycopg

    path = _libpq_path()
    if path is None or not hasattr(psycopg.pq.PGconn, "pgconn_ptr"):
        return None
    try:
        lib = ctypes.CDLL(path)
        get, free = lib.PQgetCopyData, lib.PQfreemem
        import llvmlite.binding as llvm

        for name, fn in (("PQgetCopyData", get), ("PQfreemem", free),
                         ("memmove", ctypes.memmove)):  # fmt: skip
            llvm.add_symbol(f"dbanon_{name}", ctypes.cast(fn, ctypes.c_void_p).value)
        from dbanon.db import pqkernels
    except (OSError, AttributeError, ImportError):
        return None
    free.argtypes, free.restype = [ctypes.c_void_p], None
    return pqkernels.pull, free
