"""COPY streaming between PostgreSQL and numpy: QI columns out, group ids back in.

The binary COPY protocol avoids text parsing on both sides. `copy_columns` reads the raw stream
in chunks of a few MiB and indexes each chunk's fields in compiled code (numba), then converts
whole columns at once: no Python object is made per value, and memory beyond the result is two
chunks (one is parsed in a thread, by kernels that release the GIL, while the next is read).
Text columns come back as their distinct values and an int32 code per row; row keys as one byte
blob, written back as they came by `copy_in_ids`. `copy_out` (a list per column, decoded by
psycopg) stays for small results; `fetch_arrays` reads a few numeric columns of many rows as one
array value each.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import pq, sql

if TYPE_CHECKING:
    from dbanon.db.catalog import Column

CHUNK = 1 << 23  # bytes of stream indexed at once (8 MiB)
# Keys are short: the blob starts at this many bytes per expected row and grows as needed.
_KEY_BYTES = 16
_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags 0, no header extension
KINDS = ("float8", "int8", "int4", "text", "key", "intkey", "values")
_KEYS = ("key", "intkey")  # received as Keys: text bytes ("intkey": an integer's, sent binary)


def copy_out(
    conn: psycopg.Connection, query: sql.Composable, types: Sequence[str]
) -> list[list[object]]:
    """Columns of a query's result (one list per column), streamed with binary COPY."""
    cols: list[list[object]] = [[] for _ in types]
    appends = [c.append for c in cols]
    with (
        conn.cursor() as cur,
        cur.copy(sql.SQL("COPY ({}) TO STDOUT (FORMAT BINARY)").format(query)) as copy,
    ):
        copy.set_types(list(types))
        for row in copy.rows():
            for append, value in zip(appends, row, strict=True):
                append(value)
    return cols


@dataclass
class Coded:
    """A text column as its distinct values (None for NULL) and each row's code into them."""

    values: list[str | None]
    codes: np.ndarray  # int32, one per row

    @classmethod
    def of(cls, values: Iterable[str | None]) -> Coded:
        """From one value per row already in Python (small inputs; COPY builds its own)."""
        index: dict[str | None, int] = {}
        codes = np.fromiter((index.setdefault(v, len(index)) for v in values), np.int32)
        return cls(list(index), codes)

    def objects(self) -> np.ndarray:
        """One value per row as an object array (references to the distinct values)."""
        out = np.empty(len(self.values), dtype=object)
        out[:] = self.values
        return out[self.codes]


@dataclass
class Keys:
    """Row keys as text, kept as the bytes COPY sent: one blob, each key's start and length
    (-1 for NULL). Decoded only when iterated (a refresh that keeps earlier groups)."""

    blob: np.ndarray  # uint8: the keys' bytes one after another
    lens: np.ndarray  # int32: each key's length in bytes, -1 for NULL (no bytes)

    def __len__(self) -> int:
        return len(self.lens)

    @classmethod
    def of(cls, keys: Iterable[str]) -> Keys:
        """Keys already decoded (a method that streamed them as text)."""
        raw = [k.encode() for k in keys]
        return cls(np.frombuffer(b"".join(raw), dtype=np.uint8),
                   np.array([len(b) for b in raw], dtype=np.int32))  # fmt: skip

    def __iter__(self) -> Iterator[str | None]:
        raw = self.blob.tobytes()
        start = 0
        for n in self.lens.tolist():
            yield None if n < 0 else raw[start : start + n].decode()
            start += max(n, 0)


@dataclass
class Values:
    """A column of any type as its distinct values, each the bytes COPY sent (in binary: the
    type's own form, which COPY reads back into the type), numbered in the order they first
    came, and each row's code into them; NULL is an entry of its own, of length -1."""

    codes: np.ndarray  # int32, one per row
    starts: np.ndarray  # int64, one per distinct value
    lens: np.ndarray  # int32, -1 for NULL
    data: np.ndarray  # uint8: the values' bytes one after another

    def __len__(self) -> int:
        return len(self.lens)

    def null(self) -> int:
        """The code of NULL, -1 when no row is NULL."""
        found = np.flatnonzero(self.lens < 0)
        return int(found[0]) if len(found) else -1


def _k():  # noqa: ANN202 - a module
    """The compiled kernels, imported at first use: importing this module (as every method
    and the lifecycle do) must not load numba, so `dbanon check` starts fast."""
    from dbanon.db import copykernels

    return copykernels


def _grow(a: np.ndarray, used: int, need: int) -> np.ndarray:
    """`a` with room for `need` items past `used` (x1.5 or more when it must grow)."""
    if used + need <= len(a):
        return a
    out = np.empty(max(used + need, len(a) * 3 // 2, 1024), dtype=a.dtype)
    out[:used] = a[:used]
    return out


class _Column:
    """One column being received, written into arrays sized for the rows expected (grown if
    more come), so that no chunk outlives its parsing: the heap holds the result and one
    chunk's temporaries, nothing else."""

    def __init__(self, kind: str, rows: int) -> None:
        if kind not in KINDS:
            raise ValueError(f"column kind must be one of {KINDS}, got {kind!r}")
        self.kind = kind
        self.n = 0
        dtype = {"float8": np.float64, "int8": np.int64, "int4": np.int32}.get(kind, np.int32)
        self.out = np.empty(rows, dtype=dtype)  # values, codes, or key lengths
        self.blob = np.empty(_KEY_BYTES * rows if kind in _KEYS else 0, dtype=np.uint8)
        self.used = 0  # bytes of blob in use
        self.index: dict[str | None, int] = {}  # text: distinct value -> code
        if kind == "values":  # the dictionary so far, and its hash table (see _values)
            self.table = np.full(1 << 10, -1, dtype=np.int64)
            self.dstarts = np.empty(1 << 9, dtype=np.int64)
            self.dlens = np.empty(1 << 9, dtype=np.int32)
            self.data = np.empty(1 << 12, dtype=np.uint8)
            self.state = np.zeros(2, dtype=np.int64)  # entries, bytes of data used

    def add(self, buf: np.ndarray, offs: np.ndarray, lens: np.ndarray) -> None:
        m = len(lens)
        self.out = _grow(self.out, self.n, m)
        part = self.out[self.n : self.n + m]
        if self.kind == "float8":
            part[:] = _k().gather(buf, offs, lens, 8).view(">f8").reshape(-1)
            part[lens < 0] = np.nan
        elif self.kind == "int8":  # NULL reads as 0
            part[:] = _k().gather(buf, offs, lens, 8).view(">i8").reshape(-1)
        elif self.kind == "int4":
            if (lens != 4).any():
                raise ValueError("COPY stream: an int4 column holds a NULL or another type")
            part[:] = _k().gather(buf, offs, lens, 4).view(">i4").reshape(-1)
        elif self.kind == "values":
            self._values(buf, offs, lens, part)
        elif self.kind in _KEYS:
            if self.kind == "key":  # contiguous, as _codes passes them: one compiled signature
                raw = _k().concat(buf, np.ascontiguousarray(offs), np.ascontiguousarray(lens))
            elif (lens < 0).any():
                raise ValueError("COPY stream: an integer key column holds a NULL")
            else:
                _, lens, raw = _k().int_texts(_k().binary_ints(buf, offs, lens))
            self.blob = _grow(self.blob, self.used, len(raw))
            self.blob[self.used : self.used + len(raw)] = raw
            self.used += len(raw)
            part[:] = lens
        else:
            part[:] = self._codes(buf, offs, lens)
        self.n += m

    def _codes(self, buf: np.ndarray, offs: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """Codes of a chunk's text values: distinct values told apart by a hash of their bytes
        in compiled code, so only distinct values become Python strings; new ones are numbered
        in the order of their bytes (NULL after them), as a sort of the chunk would."""
        local, first = _k().dedupe(buf, offs, lens)
        n = lens[first]
        raw = _k().concat(buf, offs[first], n).tobytes()
        ends = np.cumsum(n).tolist()
        distinct = [raw[e - w : e] for e, w in zip(ends, n.tolist(), strict=True)]
        for v in sorted(set(distinct)):
            self.index.setdefault(v.decode(), len(self.index))
        code = np.array([self.index[v.decode()] for v in distinct], dtype=np.int32)
        out = code[local] if len(code) else np.zeros(len(local), dtype=np.int32)
        if (local < 0).any():
            out[local < 0] = self.index.setdefault(None, len(self.index))
        return out

    def _values(self, buf: np.ndarray, offs: np.ndarray, lens: np.ndarray,
                part: np.ndarray) -> None:  # fmt: skip
        """Codes of a chunk's values by their bytes, in compiled code: a value seen before (in
        any chunk) gets its code, a new one the next; the arrays grow (the table rehashed)
        whenever a new value has no room."""
        at = 0
        while True:
            at = _k().code_values(buf, offs, lens, at, part, self.table, self.dstarts,
                                  self.dlens, self.data, self.state)  # fmt: skip
            if at == len(lens):
                return
            d, used = (int(x) for x in self.state)
            if d >= len(self.dlens):
                self.dstarts = _grow(self.dstarts, d, 1)
                self.dlens = _grow(self.dlens, d, 1)
            self.data = _grow(self.data, used, int(lens[at]))
            if 2 * (d + 1) > len(self.table):
                self.table = np.full(2 * len(self.table), -1, dtype=np.int64)
                _k().rehash(self.table, self.dstarts, self.dlens, self.data, d)

    def extend(self, other: _Column) -> None:
        """`other`'s rows (a later part of the same query's rows) after these: codes of text
        and values are renumbered into this column's dictionary, which keeps its own."""
        m = other.n
        self.out = _grow(self.out, self.n, m)
        part = self.out[self.n : self.n + m]
        theirs = other.out[:m]
        if self.kind in ("float8", "int8", "int4"):
            part[:] = theirs
        elif self.kind in _KEYS:
            self.blob = _grow(self.blob, self.used, other.used)
            self.blob[self.used : self.used + other.used] = other.blob[: other.used]
            self.used += other.used
            part[:] = theirs
        elif self.kind == "text":
            index = self.index
            remap = np.array([index.setdefault(v, len(index)) for v in other.index],
                             dtype=np.int32)  # fmt: skip
            part[:] = remap[theirs] if len(remap) else theirs
        else:  # values: their dictionary's entries coded as a chunk of this stream's
            d, used = (int(x) for x in other.state)
            remap = np.empty(d, dtype=np.int32)
            starts = other.dstarts[:d]  # as a chunk's offsets: int32 (scan's) where they fit
            self._values(other.data[:used], starts.astype(np.int32) if used < 2**31 else starts,
                         other.dlens[:d], remap)  # fmt: skip
            part[:] = np.where(theirs < 0, -1, remap[np.maximum(theirs, 0)] if d else -1)
        self.n += m

    def result(self) -> np.ndarray | Coded | Keys | Values:
        """The whole column (views of the arrays filled; no copy)."""
        filled = self.out[: self.n]
        if self.kind in ("float8", "int8", "int4"):
            return filled
        if self.kind == "text":
            return Coded(list(self.index), filled)
        if self.kind == "values":
            d, used = (int(x) for x in self.state)
            starts, lens, data = self.dstarts[:d], self.dlens[:d], self.data[:used]
            if (filled < 0).any():  # NULL: an entry of its own, after the values
                filled[filled < 0] = d
                starts, lens = np.append(starts, used), np.append(lens, np.int32(-1))
            return Values(filled, starts, lens, data)
        return Keys(self.blob[: self.used], filled)


INTEGER_KEYS = ("smallint", "integer", "bigint")


def key_field(key: Column, ref: str | None = None) -> tuple[sql.Composable, str]:
    """A key column's expression in an extract (over the source's alias `ref`) and its COPY
    kind. Keys are held and matched as their text (the map keeps them so); an integer key is
    sent as its binary integer and its text made here ("intkey"): the server's output function
    and text send took 0.13 s of every half million rows, the client's digits take 0.01 s."""
    ident = key.ident if ref is None else sql.SQL("{}.{}").format(sql.Identifier(ref), key.ident)
    if key.type in INTEGER_KEYS:
        return ident, "intkey"
    return sql.SQL("{}::text").format(ident), "key"


def copy_columns(
    conn: psycopg.Connection,
    query: sql.Composable,
    kinds: Sequence[str],
    rows: int = 0,
    progress: Callable[[int], None] | None = None,
) -> list[np.ndarray | Coded | Keys | Values]:
    """Columns of a query's result, streamed with binary COPY: per `kinds`, a float64 array
    (NaN for NULL) for "float8", an int64 array for "int8" (NOT NULL columns), an int32 array
    for "int4" (no NULL), a Coded for "text", Keys for "key" (text) and "intkey" (an int2, int4
    or int8 made text), Values for "values" (any type).
    The query must produce float8, int8, int4 and text columns of those types; `rows`, the rows
    expected, sizes the arrays;
    `progress` hears the rows received so far after each chunk."""
    return [c.result() for c in receive(conn, query, kinds, rows, progress)]


def receive(
    conn: psycopg.Connection,
    query: sql.Composable,
    kinds: Sequence[str],
    rows: int = 0,
    progress: Callable[[int], None] | None = None,
) -> list[_Column]:
    """copy_columns' columns before their results are taken (so that another stream's can be
    appended to them: dbanon.db.parts)."""
    cols = [_Column(k, rows) for k in kinds]
    nf = len(kinds)
    # The stream since the last chunk was parsed (appending each message, a row, to a
    # bytearray is cheaper than keeping the messages: each holds a buffer of the driver's).
    pending: bytearray | memoryview = bytearray()
    header = True
    finished = False
    job: Future | None = None  # the previous chunk, being parsed while this one is read
    seen = 0  # rows scanned so far (the parser may still be adding the latest chunk)
    messages = _messages(conn, sql.SQL("COPY ({}) TO STDOUT (FORMAT BINARY)").format(query))
    with ThreadPoolExecutor(max_workers=1) as parser, closing(messages):
        data: bytes | memoryview = b"."
        while data:
            data = next(messages, b"")
            if not pending and not header and isinstance(data, memoryview):
                pending = data  # a fresh chunk of whole rows (the bulk reader's): read in place
            else:
                if not isinstance(pending, bytearray):
                    pending = bytearray(pending)
                pending += data
            if len(pending) < CHUNK and data:
                continue
            if header:
                if len(pending) < 19:
                    continue
                ext = int.from_bytes(pending[15:19], "big")
                del pending[: 19 + ext]
                header = False
            buf = np.frombuffer(pending, dtype=np.uint8)  # no copy: parsed, then let go
            pos, found = 0, []
            while not finished:
                # Fresh per chunk: two pairs used in turn save few page faults (most of a pair
                # is never touched) and keep both resident, 16 MiB more at hamdist's peak.
                cap = max(len(buf) // (2 + 4 * nf), 1)
                offs = np.empty((cap, nf), np.int32)  # a chunk is far below 2 GiB
                lens = np.empty((cap, nf), np.int32)
                rows, pos_after, state = _k().scan(buf, pos, nf, offs, lens)
                if state < 0:
                    raise ValueError("COPY stream: a row with an unexpected number of fields")
                if rows:
                    found.append((offs[:rows], lens[:rows]))
                    seen += rows
                pos = pos_after
                finished = state == 1
                if rows < cap:
                    break
            if job is not None:
                job.result()  # chunks are added in order
            job = parser.submit(_add, cols, buf, found)
            pending = pending[pos:]  # a new bytearray (or a view): `buf` is never resized
            if progress is not None:
                progress(seen)
        if job is not None:
            job.result()
    return cols


def _add(cols: list[_Column], buf: np.ndarray, found: list[tuple[np.ndarray, np.ndarray]]
         ) -> None:  # fmt: skip
    """Add a chunk's rows (`found`: the fields' offsets and lengths, as scanned) to the columns."""
    for offs, lens in found:
        for f, col in enumerate(cols):
            col.add(buf, offs[:, f], lens[:, f])


def _messages(conn: psycopg.Connection, copy: sql.Composable) -> Iterator[memoryview]:
    """The data messages of a COPY ... TO STDOUT (one a row), read with libpq's PQgetCopyData
    on the connection's own libpq handle: psycopg's Copy.read spends about 0.5 us more a
    message in Python (0.5 s of a 1.3 s stream of 1M rows). The statement runs in the
    connection's transaction as psycopg's would (its BEGIN first, with its isolation level);
    an error raises as psycopg raises it, and a stream left early (an error while parsing, an
    interrupt) is cancelled and drained, so the connection is usable (in a failed transaction)."""
    if conn.info.transaction_status == pq.TransactionStatus.IDLE and not conn.autocommit:
        conn.execute("SELECT")  # psycopg opens the transaction as it would for the COPY
    encoding = conn.info.encoding
    with conn.lock:
        pg = conn.pgconn
        pg.send_query(copy.as_bytes(conn))
        result = pg.get_result()
        if result is None or result.status != pq.ExecStatus.COPY_OUT:
            while pg.get_result() is not None:
                pass
            raise psycopg.errors.error_from_result(result, encoding) if result else (
                psycopg.OperationalError("COPY: no result"))  # fmt: skip
        ended = False
        try:
            bulk = _bulk()
            if bulk is None:
                while True:
                    n, data = pg.get_copy_data(0)
                    if n < 0:
                        ended = True
                        break
                    yield data
            else:
                yield from _pulled(pg, *bulk)
                ended = True
        finally:
            if not ended:  # left early: stop the server's side, read what it still sends
                conn.cancel_safe()
                while pg.get_copy_data(0)[0] >= 0:
                    pass
            final = pg.get_result()
            while pg.get_result() is not None:
                pass
        if final is not None and final.status != pq.ExecStatus.COMMAND_OK and ended:
            raise psycopg.errors.error_from_result(final, encoding)


def _bulk() -> tuple[Any, Callable[[int], None]] | None:
    from dbanon.db.pqbulk import reader

    return reader()


def _pulled(pg: Any, pull: Any, free: Callable[[int], None]) -> Iterator[memoryview]:
    """The COPY's data in chunks of about CHUNK bytes, rows whole, read by the compiled
    PQgetCopyData loop (dbanon.db.pqbulk) until the stream ends; each chunk a fresh array."""
    from dbanon.db import pqbulk

    slot = np.zeros(2, dtype=np.uint64)
    conn = int(pg.pgconn_ptr)
    pool: list[np.ndarray] = []
    while True:
        buf = _free_buffer(pool)
        pos, state = pull(conn, buf, 0, slot, CHUNK)
        if state == pqbulk.BIG:  # a row longer than the room left: taken apart
            n = int(slot[1])
            row = np.frombuffer((ctypes.c_uint8 * n).from_address(int(slot[0])), np.uint8)
            buf = np.concatenate([buf[:pos], row])
            free(int(slot[0]))
            pos = len(buf)
        if pos:
            yield memoryview(buf[:pos])
        if state == pqbulk.FAILED:
            raise psycopg.OperationalError(
                "receiving copy data failed: " + (pg.error_message or b"").decode(errors="replace")
            )
        if state == pqbulk.ENDED:
            return


def _free_buffer(pool: list[np.ndarray]) -> np.ndarray:
    """A chunk buffer of `pool` that nothing holds any more (the chunk before last, parsed
    and let go), or a new one added to it: a chunk is above the process's mmap threshold
    (dbanon.db.memory), so a fresh buffer per chunk was mapped and faulted in anew each time."""
    for buf in pool:
        if sys.getrefcount(buf) == 3:  # the pool, this loop and the call: nobody else
            return buf
    buf = np.empty(CHUNK + (1 << 16), dtype=np.uint8)
    pool.append(buf)
    return buf


def copy_in_ids(
    conn: psycopg.Connection, table: sql.Identifier, keys: Keys, ids: np.ndarray
) -> None:
    """Write (key text, gid int4) pairs into a staging table with binary COPY, built in
    compiled code a chunk of rows at a time."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    lens = keys.lens.astype(np.int64)
    step = 1 << 18
    with (
        conn.cursor() as cur,
        cur.copy(sql.SQL("COPY {} (key, gid) FROM STDIN (FORMAT BINARY)").format(table)) as copy,
    ):
        copy.write(_HEADER)
        start = 0
        for lo in range(0, len(ids), step):
            hi = min(lo + step, len(ids))
            copy.write(_k().pack(keys.blob, start, lens, ids, lo, hi).tobytes())
            start += int(np.maximum(lens[lo:hi], 0).sum())
        copy.write(b"\xff\xff")


# Binary array types `fetch_arrays` reads: oid -> (element dtype, element bytes).
_ARRAYS = {1007: (">i4", 4), 1016: (">i8", 8), 1022: (">f8", 8)}


def _parse_array(dtype: str, width: int, raw: Any) -> np.ndarray:
    """A binary array value (a one-dimensional array without NULLs) as a native array."""
    if int.from_bytes(raw[0:4], "big") == 0:  # no dimension: empty
        return np.empty(0, dtype=dtype[1:])
    if int.from_bytes(raw[0:4], "big") != 1 or int.from_bytes(raw[4:8], "big"):
        raise ValueError("fetch_arrays: only one-dimensional arrays without NULLs")
    n = int.from_bytes(raw[12:16], "big")
    # after the 20-byte header, per element: its length (4 bytes), then its value
    values = np.ndarray((n,), dtype=dtype, buffer=raw, offset=24, strides=(4 + width,))
    return values.astype(dtype[1:])


def fetch_arrays(
    conn: psycopg.Connection, query: sql.Composable, params: Sequence[Any] | None = None
) -> list[np.ndarray]:
    """The columns of a one-row query whose values are int4[], int8[] or float8[] arrays
    without NULL elements (`array_agg` of NOT NULL columns), as numpy arrays (native byte
    order; empty for a NULL array, as array_agg over no rows gives).

    Faster than `copy_columns` for a few numeric columns of many rows: the server sends each
    column as one binary value, parsed straight from the result by a loader into a numpy
    array (no bytes copy), where COPY costs a message (and a Python call) per row. An array
    is limited to 1 GB: 134 M int4 values."""
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    def loader(dtype: str, width: int) -> type[Loader]:
        class _Array(Loader):
            format = Format.BINARY

            def load(self, data: Any) -> np.ndarray:
                return _parse_array(dtype, width, data)

        return _Array

    with conn.cursor(binary=True) as cur:
        for oid, (dtype, width) in _ARRAYS.items():
            cur.adapters.register_loader(oid, loader(dtype, width))
        cur.execute(query, params)
        oids = [d.type_code for d in cur.description or []]
        bad = [oid for oid in oids if oid not in _ARRAYS]
        if bad:
            raise ValueError(f"fetch_arrays: a column of type oid {bad[0]}, not a number array")
        row = cur.fetchone()
    if row is None:
        raise ValueError("fetch_arrays: the query returned no row")
    return [
        np.empty(0, dtype=_ARRAYS[oid][0][1:]) if a is None else a
        for oid, a in zip(oids, row, strict=True)
    ]
