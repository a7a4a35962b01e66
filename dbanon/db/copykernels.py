"""The compiled (numba) kernels of dbanon.db.stream: index the fields of a binary COPY chunk,
gather fixed-width fields, concatenate text bytes, pack (key, id) rows for COPY in. Kept apart
so that importing the streaming module does not load numba."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def int32(buf: np.ndarray, p: int) -> int:
    v = (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16)
    v |= (np.int64(buf[p + 2]) << 8) | np.int64(buf[p + 3])
    return v - (1 << 32) if v >= (1 << 31) else v


@njit(cache=True)
def scan(
    buf: np.ndarray, pos: int, nf: int, offs: np.ndarray, lens: np.ndarray
) -> tuple[int, int, int]:
    """Index the complete rows of `buf` from `pos`: each field's offset and length (-1: NULL).

    Returns (rows, position after the last complete row, state): state 1 at the trailer,
    -1 on a row with another number of fields, else 0 (more data needed)."""
    n = len(buf)
    r = 0
    while r < offs.shape[0] and pos + 2 <= n:
        count = (np.int64(buf[pos]) << 8) | np.int64(buf[pos + 1])
        if count == 0xFFFF:
            return r, pos + 2, 1
        if count != nf:
            return r, pos, -1
        p = pos + 2
        complete = True
        for f in range(nf):
            if p + 4 > n:
                complete = False
                break
            ln = int32(buf, p)
            p += 4
            if ln > 0 and p + ln > n:
                complete = False
                break
            offs[r, f] = p
            lens[r, f] = ln
            if ln > 0:
                p += ln
        if not complete:
            break
        pos = p
        r += 1
    return r, pos, 0


@njit(cache=True)
def gather(buf: np.ndarray, offs: np.ndarray, lens: np.ndarray, width: int) -> np.ndarray:
    """uint8[rows, width]: each field's bytes, zero-padded (NULL: all zero)."""
    out = np.zeros((len(offs), width), np.uint8)
    for i in range(len(offs)):
        for b in range(max(lens[i], 0)):
            out[i, b] = buf[offs[i] + b]
    return out


@njit(cache=True)
def concat(buf: np.ndarray, offs: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The fields' bytes one after another (NULL: none)."""
    total = 0
    for i in range(len(lens)):
        total += max(lens[i], 0)
    out = np.empty(total, np.uint8)
    p = 0
    for i in range(len(lens)):
        for b in range(max(lens[i], 0)):
            out[p + b] = buf[offs[i] + b]
        p += max(lens[i], 0)
    return out


@njit(cache=True)
def put32(out: np.ndarray, p: int, v: int) -> None:
    v &= 0xFFFFFFFF
    out[p] = (v >> 24) & 255
    out[p + 1] = (v >> 16) & 255
    out[p + 2] = (v >> 8) & 255
    out[p + 3] = v & 255


@njit(cache=True)
def pack(
    blob: np.ndarray, start: int, lens: np.ndarray, ids: np.ndarray, lo: int, hi: int
) -> np.ndarray:
    """Binary COPY rows (key text, gid int4) for rows lo..hi-1, row lo's key at blob[start]."""
    size = 0
    for i in range(lo, hi):
        size += 14 + max(lens[i], 0)
    out = np.empty(size, np.uint8)
    p = 0
    for i in range(lo, hi):
        out[p] = 0
        out[p + 1] = 2
        put32(out, p + 2, lens[i])
        p += 6
        for b in range(max(lens[i], 0)):
            out[p + b] = blob[start + b]
        p += max(lens[i], 0)
        start += max(lens[i], 0)
        put32(out, p, 4)
        put32(out, p + 4, ids[i])
        p += 8
    return out
