"""The compiled loop of dbanon.db.pqbulk: imported by it once libpq's functions are known to
LLVM under dbanon's own names (llvmlite's add_symbol), never directly."""

from __future__ import annotations

import numpy as np
from numba import njit, types

# Pointers as 64-bit integers: the calling convention passes both alike.
_get = types.ExternalFunction("dbanon_PQgetCopyData",
                              types.int32(types.uintp, types.uintp, types.int32))  # fmt: skip
_free = types.ExternalFunction("dbanon_PQfreemem", types.void(types.uintp))
_move = types.ExternalFunction("dbanon_memmove",
                               types.uintp(types.uintp, types.uintp, types.uintp))  # fmt: skip


@njit(cache=True, nogil=True)
def pull(conn: int, out: np.ndarray, pos: int, slot: np.ndarray, stop: int) -> tuple[int, int]:
    """COPY rows of libpq connection `conn` appended to out[pos:], until `stop` bytes are
    held or the stream ends: (bytes held, state), state 1 ended (PQgetCopyData's -1: the
    result is to be read), 0 `stop` reached, -2 failed (libpq's error message says why), 2 a
    row that does not fit: its data pointer and size are left in slot[0], slot[1] for the
    caller to take and free."""
    base = out.ctypes.data
    at = slot.ctypes.data
    while pos < stop:
        n = _get(conn, at, 0)
        if n == -1:
            return pos, 1
        if n < 0:
            return pos, -2
        if pos + n > len(out):
            slot[1] = n
            return pos, 2
        _move(base + pos, slot[0], n)
        _free(slot[0])
        pos += n
    return pos, 0
