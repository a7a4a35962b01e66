"""Rows written from arrays with one binary COPY, a chunk of rows at a time.

A publish holds what it releases as arrays: keys and columns as the bytes COPY sent them, group
labels as one byte string per group, ids as integers. `copy_rows` writes rows whose fields are
drawn from those without a Python object per row or value: each field is an entry of a
`Dictionary` (byte strings one after another), its hex text, an int4, a number of fixed
width (float8, int8...), or a text[] of entries, looked up per row directly or through a
per-row index (a row's group). Rows go in the order given (a secret permutation, a subset), so
nothing is sorted on the server to shuffle them and nothing is joined to find them. The binary
format writes each value as its type's own binary form: bytes streamed out of a column in
binary go back into a column of the same type as they came, whatever the type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql

from dbanon.db import copykernels as _k
from dbanon.db.ahead import ahead
from dbanon.db.catalog import Column, Relation
from dbanon.db.copykernels import BYTES, FIXED, HEX, HEX8, INT4, NULL_INT, PACKED, RHEX8, TEXTS
from dbanon.db.memory import THRESHOLD
from dbanon.db.stream import _HEADER, Keys, Values

STEP = 1 << 15  # rows packed at once at most (two chunks in hand: one sent, one packed)
# A chunk's arrays of rows x fields int64 (the values, their sizes, their places) stay under
# this many bytes each, half the mmap threshold the dbanon process fixes (dbanon.db.memory):
# they are then reused from the heap chunk after chunk, where larger ones were mapped, faulted
# in and unmapped every chunk.
CHUNK_BYTES = THRESHOLD // 2


def step(fields: int) -> int:
    """Rows packed at once for rows of `fields` fields: a 1M-row release of 10 fields packs
    6,553 at a time, where 32,768 made each chunk map about 8 MB afresh (Mondrian's publish:
    297,000 page faults -> 255,000)."""
    return min(STEP, max(1024, CHUNK_BYTES // (8 * max(fields, 1))))


@dataclass(frozen=True)
class Dictionary:
    """Byte strings one after another: entry e is data[starts[e]:starts[e] + lens[e]], NULL
    where lens[e] < 0."""

    starts: np.ndarray  # int64
    lens: np.ndarray  # int32
    data: np.ndarray  # uint8

    def __len__(self) -> int:
        return len(self.lens)

    @classmethod
    def of_keys(cls, keys: Keys) -> Dictionary:
        """A streamed column (Keys: bytes as they came, -1 for NULL), one entry per row."""
        lens = np.ascontiguousarray(keys.lens, dtype=np.int32)
        starts = np.zeros(len(lens), dtype=np.int64)
        np.cumsum(np.maximum(lens[:-1], 0), out=starts[1:])
        return cls(starts, lens, np.ascontiguousarray(keys.blob, dtype=np.uint8))

    @classmethod
    def of_values(cls, values: Values) -> Dictionary:
        """A column streamed as Values: its distinct values, one entry each (rows read them
        through its codes)."""
        return cls(values.starts, values.lens, values.data)

    @classmethod
    def of(cls, values: Sequence[str | bytes | None]) -> Dictionary:
        """Entries from Python values (few: labels, distinct values): text as UTF-8."""
        raw = [None if v is None else v.encode() if isinstance(v, str) else v for v in values]
        lens = np.array([-1 if b is None else len(b) for b in raw], dtype=np.int32)
        starts = np.zeros(len(lens), dtype=np.int64)
        np.cumsum(np.maximum(lens[:-1], 0), out=starts[1:])
        blob = b"".join(b for b in raw if b is not None)
        return cls(starts, lens, np.frombuffer(blob, dtype=np.uint8).copy())


__all__ = ["BYTES", "FIXED", "HEX", "HEX8", "INT4", "NULL_INT", "RHEX8", "TEXTS", "Dictionary",
           "Field", "as_text", "copy_rows"]  # fmt: skip


@dataclass(frozen=True)
class Field:
    """One column of the rows: per row, values[via[row]] (values[row] without `via`; the row
    itself without `values`), read as `kind` says: an entry of `dictionary` (BYTES, or HEX: its
    bytes as hex text), an int4 (INT4; NULL_INT for NULL), an int8 as 16 hex digits (HEX8;
    RHEX8: after an `r`), a number of fixed width (FIXED: `fixed`), or the text[] of the
    entries of `dictionary` that `elements` lists for it (TEXTS: offsets, entry ids)."""

    kind: int
    values: np.ndarray | None = None
    via: np.ndarray | None = None
    dictionary: Dictionary | None = None
    elements: tuple[np.ndarray, np.ndarray] | None = None
    const: int | None = None  # an INT4 field with this value in every row
    null: int | None = None  # an INT4 field's value that stands for NULL (else NULL_INT)
    width: int = 1  # the fields it stands for (PACKED: several, packed once per group)

    @classmethod
    def entries(cls, dictionary: Dictionary, values: np.ndarray | None = None,
                via: np.ndarray | None = None) -> Field:  # fmt: skip
        return cls(BYTES, values, via, dictionary)

    @classmethod
    def int4(cls, values: np.ndarray, via: np.ndarray | None = None,
             null: int | None = None) -> Field:  # fmt: skip
        return cls(INT4, values, via, null=null)

    @classmethod
    def fixed(cls, values: np.ndarray, dtype: str) -> Field:
        """A column of numbers (no NULL): each row's value in the binary COPY form of a
        big-endian `dtype` (">f8" a float8, ">i8" an int8...), converted at once (not copied
        when of that dtype already) and held without an offset or length per row."""
        raw = np.ascontiguousarray(values, dtype=dtype).view(np.uint8).reshape(-1)
        width = np.array([np.dtype(dtype).itemsize], dtype=np.int32)
        return cls(FIXED, dictionary=Dictionary(np.zeros(1, np.int64), width, raw))

    @classmethod
    def constant(cls, value: int) -> Field:
        return cls(INT4, const=value)

    def at(self, rows: np.ndarray) -> np.ndarray:
        """The field's value (entry id or integer) for each of these rows."""
        if self.const is not None:
            return np.full(len(rows), self.const, dtype=np.int64)
        at = rows if self.via is None else self.via[rows]
        out = at if self.values is None else self.values[at]
        if self.null is not None:  # in int64: NULL_INT wraps to 0 in a narrower type
            out = np.where(out == self.null, NULL_INT, out.astype(np.int64, copy=False))
        return out


def as_text(conn: psycopg.Connection, cols: Sequence[Column]) -> set[str]:
    """The columns whose type (or its base or element type) has no binary form (aclitem, some
    extension types): they are streamed and written as text, then cast back."""
    found = set()
    for col in cols:
        ok = conn.execute(
            """WITH RECURSIVE t (oid) AS (SELECT %s::regtype::oid
                   UNION SELECT v.x FROM t JOIN pg_type p ON p.oid = t.oid,
                   LATERAL (VALUES (p.typbasetype), (p.typelem)) v (x) WHERE v.x <> 0)
               SELECT bool_and(p.typsend <> 0 AND p.typreceive <> 0)
               FROM t JOIN pg_type p ON p.oid = t.oid""",
            [col.type],
        ).fetchone()[0]
        if not ok:
            found.add(col.name)
    return found


# Types whose binary form is equal exactly when two values are equal (`=`, GROUP BY): integers,
# booleans, dates and times (whole microseconds), uuids, bytes. Not numeric (1.0 and 1.00 are
# equal), floats (0 and -0), bpchar (trailing blanks), nor any domain or type not listed here.
_EQUAL_AS_BYTES = ("int2", "int4", "int8", "oid", "bool", "date", "time", "timestamp",
                   "timestamptz", "uuid", "bytea", "char")  # fmt: skip
_TEXT_TYPES = ("text", "varchar", "name")  # equal as bytes under a deterministic collation


def equal_as_bytes(conn: psycopg.Connection, relation: Relation, cols: Sequence[Column]) -> bool:
    """Whether rows streamed from `relation` (binary COPY) with equal bytes in `cols` are
    exactly the rows SQL finds equal in them: then classes of equal values can be counted from
    the streamed codes as a GROUP BY of the relation would count them."""
    if not cols:
        return True
    return bool(conn.execute(
        """SELECT count(*) = %(n)s AND bool_and(
                      t.typnamespace = 'pg_catalog'::regnamespace
                      AND (t.typname = ANY(%(exact)s)
                           OR t.typname = ANY(%(text)s) AND coalesce(c.collisdeterministic, false)))
           FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
           LEFT JOIN pg_collation c ON c.oid = a.attcollation
           WHERE a.attrelid = %(rel)s::regclass AND a.attname = ANY(%(names)s)
             AND a.attnum > 0 AND NOT a.attisdropped""",
        {"n": len({c.name for c in cols}), "exact": list(_EQUAL_AS_BYTES),
         "text": list(_TEXT_TYPES), "rel": relation.ident.as_string(conn),
         "names": [c.name for c in cols]},
    ).fetchone()[0])  # fmt: skip


_EMPTY = Dictionary(np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.uint8))


def copy_rows(
    conn: psycopg.Connection, command: sql.Composable, fields: Sequence[Field],
    rows: np.ndarray,
) -> None:  # fmt: skip
    """`command` (a COPY ... FROM STDIN (FORMAT BINARY)) fed with one row per entry of `rows`
    (row numbers, in the order written), each row's fields as `fields` say. Fields looked up
    through one per-row index (a row's group) side by side are packed once per group, so
    that a row in random order reads one place for them."""
    fields = _per_group(fields, len(rows))
    dicts = [f.dictionary or _EMPTY for f in fields]
    kinds = np.array([f.kind for f in fields], dtype=np.int64)
    width = np.array([f.width for f in fields], dtype=np.int64)
    fdict = np.arange(len(fields), dtype=np.int64)
    # one array type each (C order, writeable), as the compiled kernel takes a tuple of them
    starts = tuple(np.require(d.starts, np.int64, ["C", "W"]) for d in dicts)
    lens = tuple(np.require(d.lens, np.int32, ["C", "W"]) for d in dicts)
    data = tuple(np.require(d.data, np.uint8, ["C", "W"]) for d in dicts)
    lists = [f.elements for f in fields if f.elements is not None]
    if len(lists) > 1:
        raise ValueError("copy_rows: at most one text[] field")
    offs, elems = lists[0] if lists else _NO_LIST
    offs = np.ascontiguousarray(offs, dtype=np.int64)
    elems = np.ascontiguousarray(elems, dtype=np.int64)
    rows = np.asarray(rows)

    at_once = step(len(fields))

    def pack(lo: int) -> np.ndarray:
        part = rows[lo : lo + at_once]
        vals = np.empty((len(part), len(fields)), dtype=np.int64)
        for j, f in enumerate(fields):
            vals[:, j] = f.at(part)
        return _k.pack_rows(kinds, width, fdict, vals, starts, lens, data, offs, elems,
                            _k.HEX_DIGITS)  # fmt: skip

    # Chunk i + 1 is packed (compiled, without the GIL) while chunk i is sent and the server
    # inserts it: the client's packing and the server's insert overlap instead of alternating.
    with conn.cursor() as cur, cur.copy(command) as copy:
        copy.write(_HEADER)
        for chunk in ahead(pack, range(0, len(rows), at_once), 1, "dbanon-pack"):
            # the packed array itself, not a copy of it as bytes (psycopg reads any buffer)
            copy.write(memoryview(chunk))
        copy.write(b"\xff\xff")


_NO_LIST = (np.zeros(1, np.int64), np.zeros(0, np.int64))


def _per_group(fields: Sequence[Field], rows: int) -> list[Field]:
    """The fields, each run of two or more side by side read through the same per-row index
    (`via`) replaced by one PACKED field: their values packed once per index entry, where the
    entries are far fewer than the rows (a row's group; not a row's own number)."""
    out: list[Field] = []
    i = 0
    while i < len(fields):
        via = fields[i].via
        j = i + 1
        while via is not None and j < len(fields) and fields[j].via is via and (
                fields[j].kind not in (TEXTS, PACKED, FIXED)):  # fmt: skip
            j += 1
        run = fields[i:j]
        # what `via` can point at: every field's values (or dictionary entries) hold as many
        entries = min((len(f.values) if f.values is not None else len(f.dictionary or _EMPTY)
                       for f in run), default=0)  # fmt: skip
        if len(run) < 2 or fields[i].kind in (TEXTS, PACKED, FIXED) or 2 * entries > rows:
            out.append(fields[i])
            i += 1
            continue
        dicts = [f.dictionary or _EMPTY for f in run]
        kinds = np.array([f.kind for f in run], dtype=np.int64)
        width = np.ones(len(run), dtype=np.int64)
        vals = np.empty((entries, len(run)), dtype=np.int64)
        for c, f in enumerate(run):
            vals[:, c] = np.arange(entries) if f.values is None else f.values
        starts, lens, data = _k.pack_fields(
            kinds, width, np.arange(len(run), dtype=np.int64), vals,
            tuple(np.require(d.starts, np.int64, ["C", "W"]) for d in dicts),
            tuple(np.require(d.lens, np.int32, ["C", "W"]) for d in dicts),
            tuple(np.require(d.data, np.uint8, ["C", "W"]) for d in dicts),
            *_NO_LIST, _k.HEX_DIGITS,
        )  # fmt: skip
        out.append(Field(PACKED, None, via, Dictionary(starts, lens, data), width=len(run)))
        i = j
    return out
