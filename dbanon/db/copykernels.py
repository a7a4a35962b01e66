"""The compiled (numba) kernels of dbanon.db.stream and dbanon.db.rows: index the fields of a
binary COPY chunk, gather fixed-width fields, concatenate text bytes, code text values, pack rows
for COPY in. Kept apart so that importing the streaming module does not load numba. The parsing
kernels release the GIL (nogil): a chunk is parsed in a thread while the next one is read."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def int32(buf: np.ndarray, p: int) -> int:
    v = (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16)
    v |= (np.int64(buf[p + 2]) << 8) | np.int64(buf[p + 3])
    return v - (1 << 32) if v >= (1 << 31) else v


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def gather(buf: np.ndarray, offs: np.ndarray, lens: np.ndarray, width: int) -> np.ndarray:
    """uint8[rows, width]: each field's bytes, zero-padded (NULL: all zero)."""
    out = np.zeros((len(offs), width), np.uint8)
    for i in range(len(offs)):
        for b in range(max(lens[i], 0)):
            out[i, b] = buf[offs[i] + b]
    return out


@njit(cache=True, nogil=True)
def concat(buf: np.ndarray, offs: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The fields' bytes one after another (NULL: none)."""
    total = 0
    for i in range(len(lens)):
        total += max(lens[i], 0)
    out = np.empty(total, np.uint8)
    p = 0
    for i in range(len(lens)):
        _copy(out, p, buf, offs[i], max(lens[i], 0))
        p += max(lens[i], 0)
    return out


@njit(cache=True, nogil=True)
def binary_ints(buf: np.ndarray, offs: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Binary int2/int4/int8 fields (big-endian, their width their length) as int64; a NULL
    field (-1) reads as 0."""
    out = np.zeros(len(lens), np.int64)
    for i in range(len(lens)):
        w = lens[i]
        if w <= 0:
            continue
        v = np.int64(np.int8(buf[offs[i]]))  # the sign, from the first byte
        for b in range(1, w):
            v = (v << 8) | np.int64(buf[offs[i] + b])
        out[i] = v
    return out


@njit(cache=True, inline="always")
def _copy(out: np.ndarray, p: int, src: np.ndarray, s: int, n: int) -> None:
    """out[p:p + n] = src[s:s + n], through views: the compiler then knows they do not
    overlap (8x faster than indexing both arrays in the loop)."""
    o = out[p : p + n]
    d = src[s : s + n]
    for b in range(n):
        o[b] = d[b]


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
        _copy(out, p, blob, start, max(lens[i], 0))
        p += max(lens[i], 0)
        start += max(lens[i], 0)
        put32(out, p, 4)
        put32(out, p + 4, ids[i])
        p += 8
    return out


# Field kinds of `pack_rows` (dbanon.db.rows): the bytes of a dictionary entry, an int4, the
# hex text of an entry's bytes, a text[] of entries, fields packed already (an entry's bytes
# as they are, length words included: several fields at once), the 16 hex digits of an int8
# (its big-endian bytes), alone or after an `r`, and a fixed-width value (entry e is
# data[e * w:(e + 1) * w], w = lens[0]: a column of numbers without an offset per row).
BYTES, INT4, HEX, TEXTS, PACKED, HEX8, RHEX8, FIXED = 0, 1, 2, 3, 4, 5, 6, 7
NULL_INT = -(1 << 63)  # an INT4 field's NULL
HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


@njit(cache=True)
def _sizes(kind: int, v: np.ndarray, ln: np.ndarray, offs: np.ndarray, elems: np.ndarray,
           out: np.ndarray) -> None:  # fmt: skip
    """Bytes of each row's value of one field (after its 4-byte length; -1: NULL; PACKED:
    the whole entry)."""
    for r in range(len(v)):
        x = v[r]
        if kind == INT4:
            out[r] = -1 if x == NULL_INT else 4
        elif kind == HEX8 or kind == RHEX8:  # noqa: SIM109 - compiled: no tuple membership
            out[r] = 16 if kind == HEX8 else 17
        elif x < 0:
            out[r] = -1
        elif kind == FIXED:
            out[r] = ln[0]
        elif kind == TEXTS:
            n = 12 if offs[x + 1] == offs[x] else 20
            for e in range(offs[x], offs[x + 1]):
                n += 4 + max(ln[elems[e]], 0)
            out[r] = n
        elif ln[x] < 0:
            out[r] = -1
        else:
            out[r] = 2 * ln[x] if kind == HEX else ln[x]


@njit(cache=True)
def _write(kind: int, v: np.ndarray, st: np.ndarray, ln: np.ndarray, dt: np.ndarray,
           offs: np.ndarray, elems: np.ndarray, digits: np.ndarray, size: np.ndarray,
           at: np.ndarray, out: np.ndarray) -> None:  # fmt: skip
    """Write one field of every row at its place (`at`: its length word, or a PACKED entry)."""
    if kind == FIXED:  # a loop of its own: a few bytes a row, copied without a view each
        w = ln[0]
        for r in range(len(v)):
            p, s = at[r], v[r] * w
            put32(out, p, w)
            for b in range(w):
                out[p + 4 + b] = dt[s + b]
        return
    for r in range(len(v)):
        p, n, x = at[r], size[r], v[r]
        if kind == PACKED:
            _copy(out, p, dt, st[x], n)
            continue
        put32(out, p, n)
        p += 4
        if n < 0:
            continue
        if kind == INT4:
            put32(out, p, x)
        elif kind == HEX8 or kind == RHEX8:  # noqa: SIM109 - compiled: no tuple membership
            if kind == RHEX8:
                out[p] = 114  # r
                p += 1
            for b in range(8):
                byte = (x >> (56 - 8 * b)) & 255
                out[p + 2 * b] = digits[byte >> 4]
                out[p + 2 * b + 1] = digits[byte & 15]
        elif kind == TEXTS:
            count = offs[x + 1] - offs[x]
            put32(out, p, 1 if count else 0)  # dimensions
            put32(out, p + 4, 0)  # no NULL element
            put32(out, p + 8, 25)  # of text
            p += 12
            if count:
                put32(out, p, count)
                put32(out, p + 4, 1)  # lower bound
                p += 8
            for e in range(offs[x], offs[x + 1]):
                y = elems[e]
                put32(out, p, ln[y])
                p += 4
                _copy(out, p, dt, st[y], max(ln[y], 0))
                p += max(ln[y], 0)
        elif kind == HEX:
            s = st[x]
            for b in range(ln[x]):
                out[p + 2 * b] = digits[dt[s + b] >> 4]
                out[p + 2 * b + 1] = digits[dt[s + b] & 15]
        else:
            _copy(out, p, dt, st[x], n)


@njit(cache=True)
def _pack(
    kinds: np.ndarray, width: np.ndarray, fdict: np.ndarray, vals: np.ndarray, starts: tuple,
    lens: tuple, data: tuple, offs: np.ndarray, elems: np.ndarray, digits: np.ndarray,
    header: bool,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(bytes, where each row's begin): the rows of `vals`, each with a field count first when
    `header` (width[f]: the fields field f stands for). Field by field, so that each field's
    arrays are looked up once per chunk."""
    m, nf = vals.shape
    size = np.empty((nf, m), np.int64)
    for f in range(nf):
        _sizes(kinds[f], vals[:, f].copy(), lens[fdict[f]], offs, elems, size[f])
    at = np.empty((nf, m), np.int64)
    begin = np.empty(m + 1, np.int64)
    p = 0
    for r in range(m):
        begin[r] = p
        if header:
            p += 2
        for f in range(nf):
            at[f, r] = p
            p += (0 if kinds[f] == PACKED else 4) + max(size[f, r], 0)
    begin[m] = p
    out = np.empty(p, np.uint8)
    if header:
        count = 0
        for f in range(nf):
            count += width[f]
        for r in range(m):
            out[begin[r]] = (count >> 8) & 255
            out[begin[r] + 1] = count & 255
    for f in range(nf):
        d = fdict[f]
        _write(kinds[f], vals[:, f].copy(), starts[d], lens[d], data[d], offs, elems, digits,
               size[f], at[f], out)
    return out, begin


@njit(cache=True, nogil=True)
def pack_rows(
    kinds: np.ndarray, width: np.ndarray, fdict: np.ndarray, vals: np.ndarray, starts: tuple,
    lens: tuple, data: tuple, offs: np.ndarray, elems: np.ndarray, digits: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Binary COPY rows, one per row of `vals` (rows x fields): field f of row r is, by
    kinds[f], entry vals[r, f] of dictionary fdict[f] (BYTES; its HEX text), the int4
    vals[r, f] (NULL_INT: NULL), the text[] of entries elems[offs[v]:offs[v + 1]] (TEXTS), or
    width[f] fields packed already (PACKED: `pack_fields`'s entries). A dictionary is
    (starts, lens, data): entry e is data[starts[e]:starts[e] + lens[e]], NULL where
    lens[e] < 0; a negative entry id is NULL too."""
    return _pack(kinds, width, fdict, vals, starts, lens, data, offs, elems, digits, True)[0]


@njit(cache=True)
def pack_fields(
    kinds: np.ndarray, width: np.ndarray, fdict: np.ndarray, vals: np.ndarray, starts: tuple,
    lens: tuple, data: tuple, offs: np.ndarray, elems: np.ndarray, digits: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """`pack_rows`'s fields of each row of `vals`, without the rows' field counts, as a
    dictionary (starts, lens, data) of one entry per row: a PACKED field's entries."""
    out, begin = _pack(kinds, width, fdict, vals, starts, lens, data, offs, elems, digits,
                       False)  # fmt: skip
    return begin[:-1].copy(), (begin[1:] - begin[:-1]).astype(np.int32), out


@njit(cache=True)
def group_ends(gid: np.ndarray, key: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi): per group, the first row holding its least and its greatest `key`
    (-1 for a group without rows; gid < 0: a row in no group)."""
    lo = np.full(groups, -1, np.int64)
    hi = np.full(groups, -1, np.int64)
    for i in range(len(gid)):
        g = gid[i]
        if g < 0:
            continue
        if lo[g] < 0 or key[i] < key[lo[g]]:
            lo[g] = i
        if hi[g] < 0 or key[i] > key[hi[g]]:
            hi[g] = i
    return lo, hi


@njit(cache=True)
def _special(dt: np.ndarray, s: int, n: int) -> bool:
    """Whether a bound must be quoted in a range literal: empty, or holding a quote, a
    backslash, a comma, a bracket, a parenthesis or a blank."""
    if n == 0:
        return True
    for b in range(n):
        c = dt[s + b]
        if c <= 32 or c == 34 or c == 92 or c == 44 or c == 40 or c == 41 or c == 91 or c == 93:
            return True
    return False


@njit(cache=True)
def _bound(out: np.ndarray, p: int, dt: np.ndarray, s: int, n: int, quote: bool) -> int:
    """Write one bound (quoted where it must be) at p; returns the position after it."""
    if quote and _special(dt, s, n):
        out[p] = 34
        p += 1
        for b in range(n):
            c = dt[s + b]
            if c == 34 or c == 92:
                out[p] = 92
                p += 1
            out[p] = c
            p += 1
        out[p] = 34
        return p + 1
    for b in range(n):
        out[p + b] = dt[s + b]
    return p + n


@njit(cache=True)
def _same_text(starts: np.ndarray, lens: np.ndarray, data: np.ndarray, a: int, b: int) -> bool:
    if lens[a] != lens[b]:
        return False
    for x in range(max(lens[a], 0)):  # noqa: SIM110 - compiled: no generators
        if data[starts[a] + x] != data[starts[b] + x]:
            return False
    return True


@njit(cache=True)
def tied(gid: np.ndarray, key: np.ndarray, starts: np.ndarray, lens: np.ndarray,
         data: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:  # fmt: skip
    """Per group: whether a row of it ties its least or greatest `key` with another text (two
    values one float8 cannot tell apart: its true bounds are then found otherwise)."""
    out = np.zeros(len(lo), np.bool_)
    for i in range(len(gid)):
        g = gid[i]
        if g < 0 or out[g]:
            continue
        at_lo = key[i] == key[lo[g]] and not _same_text(starts, lens, data, i, lo[g])
        out[g] = at_lo or (key[i] == key[hi[g]] and not _same_text(starts, lens, data, i, hi[g]))
    return out


@njit(cache=True)
def range_labels(
    starts: np.ndarray, lens: np.ndarray, data: np.ndarray, lo: np.ndarray, hi: np.ndarray,
    typed: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Each group's released value from the text of its least and greatest rows (a
    dictionary: starts, lens, data): the value alone when they read the same, else
    `[lo,hi]`; `typed`: always `[lo,hi]`, bounds quoted where a range literal needs it."""
    g = len(lo)
    same = np.empty(g, np.bool_)
    for i in range(g):
        same[i] = _same_text(starts, lens, data, lo[i], hi[i])
    out_lens = np.empty(g, np.int32)
    size = 0
    for i in range(g):
        a, b = max(lens[lo[i]], 0), max(lens[hi[i]], 0)
        n = a if same[i] and not typed else 3 + (2 * a + 2 + 2 * b + 2 if typed else a + b)
        out_lens[i] = n  # an upper bound when typed; set exactly below
        size += n
    out = np.empty(size, np.uint8)
    out_starts = np.empty(g, np.int64)
    p = 0
    for i in range(g):
        out_starts[i] = p
        s, a = starts[lo[i]], max(lens[lo[i]], 0)
        if same[i] and not typed:
            for b in range(a):
                out[p + b] = data[s + b]
            p += a
        else:
            out[p] = 91  # [
            p = _bound(out, p + 1, data, s, a, typed)
            out[p] = 44  # ,
            p = _bound(out, p + 1, data, starts[hi[i]], max(lens[hi[i]], 0), typed)
            out[p] = 93  # ]
            p += 1
        out_lens[i] = p - out_starts[i]
    return out_starts, out_lens, out[:p]


@njit(cache=True, nogil=True)
def _key_hash(blob: np.ndarray, s: int, n: int) -> np.uint64:
    """FNV-1a of n bytes of blob from s."""
    h = np.uint64(14695981039346656037)
    for b in range(n):
        h = (h ^ np.uint64(blob[s + b])) * np.uint64(1099511628211)
    return h


@njit(cache=True, nogil=True)
def _same_bytes(a: np.ndarray, s: int, b: np.ndarray, t: int, n: int) -> bool:
    for x in range(n):  # noqa: SIM110 - compiled: no generators
        if a[s + x] != b[t + x]:
            return False
    return True


@njit(cache=True, nogil=True)
def dedupe(buf: np.ndarray, offs: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(local code of each field, -1 for NULL; the first field of each distinct value): a
    chunk's text values told apart by an open-addressing hash of their bytes. The table grows
    with the distinct values, not the rows: a chunk's 70,000 rows of a column of a few values
    once filled a 2 MiB table (above the process's mmap threshold: mapped, zeroed and faulted
    in per column and chunk, a third of a stream's page faults)."""
    m = len(lens)
    size = 1024
    mask = size - 1
    table = np.full(size, -1, np.int64)
    codes = np.empty(m, np.int32)
    first = np.empty(m, np.int64)
    d = 0
    for i in range(m):
        ln = lens[i]
        if ln < 0:
            codes[i] = -1
            continue
        o = offs[i]
        slot = np.int64(_key_hash(buf, o, ln) & np.uint64(mask))
        while True:
            c = table[slot]
            if c < 0:
                table[slot] = d
                first[d] = i
                codes[i] = d
                d += 1
                if 2 * d > size:  # half full: twice the room, every value placed again
                    size *= 2
                    mask = size - 1
                    table = np.full(size, -1, np.int64)
                    for e in range(d):
                        j = first[e]
                        at = np.int64(_key_hash(buf, offs[j], lens[j]) & np.uint64(mask))
                        while table[at] >= 0:
                            at = (at + 1) & mask
                        table[at] = e
                break
            j = first[c]
            if lens[j] == ln and _same_bytes(buf, offs[j], buf, o, ln):
                codes[i] = c
                break
            slot = (slot + 1) & mask
    return codes, first[:d]


@njit(cache=True)
def int_texts(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A dictionary (starts, lens, data) of the decimal text of each integer."""
    return prefixed_int_texts(np.zeros(0, np.uint8), v)


@njit(cache=True)
def prefixed_int_texts(prefix: np.ndarray, v: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """A dictionary (starts, lens, data) of `prefix` (bytes) then each integer's decimal text."""
    n, width = len(v), len(prefix)
    lens = np.empty(n, np.int32)
    for i in range(n):
        x = _magnitude(v[i])
        d = 1 if v[i] >= 0 else 2
        while x >= 10:
            x //= np.uint64(10)
            d += 1
        lens[i] = width + d
    starts = np.zeros(n, np.int64)
    for i in range(1, n):
        starts[i] = starts[i - 1] + lens[i - 1]
    out = np.empty(starts[n - 1] + lens[n - 1] if n else 0, np.uint8)
    for i in range(n):
        for j in range(width):
            out[starts[i] + j] = prefix[j]
        x, p = _magnitude(v[i]), starts[i] + lens[i] - 1
        if v[i] < 0:
            out[starts[i] + width] = 45  # -
        while True:
            out[p] = 48 + x % np.uint64(10)
            p -= 1
            x //= np.uint64(10)
            if x == 0:
                break
    return starts, lens, out


@njit(cache=True, inline="always")
def _magnitude(x: np.int64) -> np.uint64:
    """|x| without overflow (the least int8 has no positive twin)."""
    return np.uint64(x) if x >= 0 else np.uint64(-(x + 1)) + np.uint64(1)


@njit(cache=True, nogil=True)
def match_keys(blob: np.ndarray, lens: np.ndarray, other_blob: np.ndarray,
               other_lens: np.ndarray) -> np.ndarray:  # fmt: skip
    """For each key (blob, lens: bytes one after another, -1 NULL), the place of the equal key
    among the others (-1: none); the others' keys are distinct."""
    m = len(other_lens)
    size = 16
    while size < 2 * m:
        size *= 2
    mask = size - 1
    table = np.full(size, -1, np.int64)
    starts = np.empty(m, np.int64)
    p = 0
    for j in range(m):
        starts[j] = p
        n = max(other_lens[j], 0)
        slot = np.int64(_key_hash(other_blob, p, n) & np.uint64(mask))
        while table[slot] >= 0:
            slot = (slot + 1) & mask
        table[slot] = j
        p += n
    out = np.full(len(lens), -1, np.int64)
    p = 0
    for i in range(len(lens)):
        n = lens[i]
        if n < 0:
            continue
        slot = np.int64(_key_hash(blob, p, n) & np.uint64(mask))
        while table[slot] >= 0:
            j = table[slot]
            if other_lens[j] == n and _same_bytes(other_blob, starts[j], blob, p, n):
                out[i] = j
                break
            slot = (slot + 1) & mask
        p += n
    return out


@njit(cache=True, nogil=True)
def code_values(buf: np.ndarray, offs: np.ndarray, lens: np.ndarray, start: int,
                out: np.ndarray, table: np.ndarray, dstarts: np.ndarray, dlens: np.ndarray,
                data: np.ndarray, state: np.ndarray) -> int:  # fmt: skip
    """Code fields start.. of a chunk by their bytes into a dictionary kept across chunks: entry
    e is data[dstarts[e]:dstarts[e] + dlens[e]], found through `table` (open addressing, a power
    of two long, -1 empty); state = [entries, bytes of data used]. NULL is code -1. Returns the
    field it stopped at: the end, or the first new value the arrays have no room for (the
    caller grows them, `rehash`, and calls again from there)."""
    mask = len(table) - 1
    d, used = state[0], state[1]
    for i in range(start, len(lens)):
        ln = lens[i]
        if ln < 0:
            out[i] = -1
            continue
        o = offs[i]
        slot = np.int64(_key_hash(buf, o, ln) & np.uint64(mask))
        while True:
            c = table[slot]
            if c < 0:
                if d >= len(dlens) or used + ln > len(data) or 2 * (d + 1) > len(table):
                    state[0], state[1] = d, used
                    return i
                table[slot] = d
                dstarts[d], dlens[d] = used, ln
                _copy(data, used, buf, o, ln)
                used += ln
                out[i] = d
                d += 1
                break
            if dlens[c] == ln and _same_bytes(data, dstarts[c], buf, o, ln):
                out[i] = c
                break
            slot = (slot + 1) & mask
    state[0], state[1] = d, used
    return len(lens)


@njit(cache=True)
def rehash(table: np.ndarray, dstarts: np.ndarray, dlens: np.ndarray, data: np.ndarray,
           entries: int) -> None:  # fmt: skip
    """Fill `table` (all -1, a power of two long) with the dictionary's first `entries`."""
    mask = len(table) - 1
    for c in range(entries):
        slot = np.int64(_key_hash(data, dstarts[c], dlens[c]) & np.uint64(mask))
        while table[slot] >= 0:
            slot = (slot + 1) & mask
        table[slot] = c


@njit(cache=True)
def row_hashes(codes: np.ndarray, hashes: np.ndarray, offs: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's values: codes[r, j] is its value's entry in column j, whose
    entries' hashes are hashes[offs[j]:]; mixed column by column (murmur3's finaliser), so a
    row's hash depends on each value and its column."""
    n, d = codes.shape
    out = np.empty(n, np.uint64)
    for r in range(n):
        h = np.uint64(0x9E3779B97F4A7C15)
        for j in range(d):
            h ^= hashes[offs[j] + codes[r, j]]
            h ^= h >> np.uint64(33)
            h *= np.uint64(0xFF51AFD7ED558CCD)
            h ^= h >> np.uint64(33)
            h *= np.uint64(0xC4CEB93FE1A85EC5)
            h ^= h >> np.uint64(33)
        out[r] = h
    return out


@njit(cache=True)
def entry_hashes(starts: np.ndarray, lens: np.ndarray, data: np.ndarray) -> np.ndarray:
    """FNV-1a of each dictionary entry's bytes, its length mixed in (NULL: length -1)."""
    out = np.empty(len(lens), np.uint64)
    for e in range(len(lens)):
        h = _key_hash(data, starts[e], max(lens[e], 0))
        out[e] = (h ^ np.uint64(lens[e] + 1)) * np.uint64(1099511628211)
    return out


@njit(cache=True, nogil=True)
def hex_fingerprints(blob: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:  # fmt: skip
    """A map's fingerprints as its text holds them (lens -1: NULL), read as PostgreSQL reads
    ('x' || 16 hex digits)::bit(64)::int8, the digits after a leading 'r' (the RECORD kind)
    or the first 16 (MD5's), a shorter one padded with zeros on the right: (value, present,
    of the RECORD kind) per entry."""
    n = len(lens)
    fp = np.zeros(n, np.int64)
    has = np.zeros(n, np.bool_)
    record = np.zeros(n, np.bool_)
    p = 0
    for i in range(n):
        k = lens[i]
        if k < 0:
            continue
        has[i] = True
        s = p
        if k > 0 and blob[p] == 114:  # 'r'
            record[i] = True
            s += 1
        end = p + k
        v = np.uint64(0)
        for d in range(16):
            c = blob[s + d] if s + d < end else 48
            if 48 <= c <= 57:
                x = c - 48
            elif 97 <= c <= 102:
                x = c - 87
            else:
                x = c - 55  # 'A'..'F'
            v = (v << np.uint64(4)) | np.uint64(x)
        fp[i] = np.int64(v)
        p = end
    return fp, has, record
