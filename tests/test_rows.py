"""Rows written from arrays with one binary COPY (dbanon.db.rows) arrive as psycopg reads them
back: every field kind, NULLs, rows in any order, fields packed once per group, and values of
any type written back in the binary form they were streamed out in."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from psycopg import sql

from dbanon.db import rows
from dbanon.db.rows import HEX, HEX8, NULL_INT, RHEX8, TEXTS, Dictionary, Field, copy_rows
from dbanon.db.stream import Keys, copy_columns

WORDS = ["", "a", "é", "Ünïcødé ✓", "x" * 300, "tab\there", "13021", "{1,2}", "\"q\""]


def _fields(n: int, groups: int, rng: np.random.Generator) -> tuple[list[Field], list[list]]:
    """Fields of n rows and what each row should read back as."""
    gid = rng.integers(0, groups, n)
    labels = [None if g % 7 == 3 else f"[{g},{g * 3}]{WORDS[g % len(WORDS)]}"
              for g in range(groups)]  # fmt: skip
    label_dict = Dictionary.of(labels)
    per_row = [None if i % 11 == 0 else WORDS[i % len(WORDS)] + str(i) for i in range(n)]
    ints = rng.integers(-(2**31), 2**31, n)
    ints[::13] = NULL_INT
    fps = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    raw = rng.integers(0, 256, (n, 16)).astype(np.uint8)
    hexed = Dictionary(np.arange(n, dtype=np.int64) * 16, np.full(n, 16, np.int32), raw.ravel())
    tags = Dictionary.of(WORDS)
    lists = [rng.integers(0, len(WORDS), rng.integers(0, 5)).tolist() for _ in range(groups)]
    offs = np.r_[0, np.cumsum([len(x) for x in lists])].astype(np.int64)
    elems = np.array([e for x in lists for e in x], dtype=np.int64)
    which = np.where(np.arange(groups) % 5 == 1, -1, np.arange(groups))
    fields = [
        Field.entries(label_dict, None, gid),  # two fields through one index: packed per group
        Field.int4(np.arange(groups) * 10, gid),
        Field.entries(Dictionary.of_keys(Keys.of([v or "" for v in per_row]))),
        Field.int4(ints),
        Field.constant(7),
        Field(HEX, dictionary=hexed),
        Field(TEXTS, which, gid, tags, (offs, elems)),
        Field.int4(np.arange(n)),  # the row's number, to read them back in the order written
        Field(HEX8, fps),
        Field(RHEX8, fps),
    ]
    want = [
        [labels[g] for g in gid],
        [int(g) * 10 for g in gid],
        [v or "" for v in per_row],
        [None if x == NULL_INT else int(x) for x in ints],
        [7] * n,
        [bytes(r).hex() for r in raw],
        [None if which[g] < 0 else [WORDS[e] for e in lists[g]] for g in gid],
        list(range(n)),
        [int(x).to_bytes(8, "big", signed=True).hex() for x in fps],
        ["r" + int(x).to_bytes(8, "big", signed=True).hex() for x in fps],
    ]
    return fields, want


@pytest.mark.parametrize("step", [None, 7])
def test_every_field_kind_reads_back(
    conn: psycopg.Connection, step: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if step:  # chunks of a few rows
        monkeypatch.setattr(rows, "STEP", step)
    rng = np.random.default_rng(3)
    n, groups = 500, 37
    fields, want = _fields(n, groups, rng)
    assert len(rows._per_group(fields, n)) == len(fields) - 1  # the first two packed as one
    conn.execute("CREATE TEMP TABLE r (l text, g int4, w text, i int4, c int4, h text, t text[], "
                 "n int4, x text, y text)")  # fmt: skip
    order = rng.permutation(n)[: n - 20]  # rows in any order, some not at all
    copy_rows(conn, sql.SQL("COPY r FROM STDIN (FORMAT BINARY)"), fields, order)
    got = conn.execute("SELECT * FROM r ORDER BY n").fetchall()
    assert got == [tuple(col[i] for col in want) for i in sorted(order.tolist())]


def test_a_chunks_arrays_stay_below_the_processs_mmap_threshold() -> None:
    """Rows x fields int64 arrays of one chunk are reused from the heap, not mapped afresh
    each chunk (dbanon.db.memory fixes the threshold); chunks stay large for narrow rows."""
    from dbanon.db import memory

    for fields in range(1, 129):
        at_once = rows.step(fields)
        assert 1024 <= at_once <= rows.STEP
        assert at_once * fields * 8 <= memory.THRESHOLD
    assert rows.step(1) == rows.STEP


def test_streamed_values_of_any_type_go_back_as_they_were(conn: psycopg.Connection) -> None:
    """A column streamed in binary ("key" kind) and written back into a column of its type
    holds the same values: numerics of many digits, ranges, json, arrays, bytea, NULL."""
    conn.execute(
        """CREATE TEMP TABLE src AS SELECT g,
               (1234567890.0123456789 + g)::numeric AS n, int4range(g, g + 3) AS r,
               jsonb_build_object('g', g, 'é', array[g]) AS j, array[g, NULL, -g] AS a,
               CASE WHEN g % 3 = 0 THEN NULL ELSE decode(md5(g::text), 'hex') END AS b,
               (date '2020-02-29' + g) AS d
           FROM generate_series(1, 300) g"""
    )
    cols = ["n", "r", "j", "a", "b", "d"]
    streamed = copy_columns(conn, sql.SQL("SELECT {} FROM src ORDER BY g").format(
        sql.SQL(", ").join(map(sql.Identifier, cols))), ["key"] * len(cols))  # fmt: skip
    conn.execute("CREATE TEMP TABLE back AS SELECT n, r, j, a, b, d FROM src WITH NO DATA")
    reverse = np.arange(300)[::-1]
    fields = [Field.entries(Dictionary.of_keys(k)) for k in streamed]  # type: ignore[arg-type]
    copy_rows(conn, sql.SQL("COPY back FROM STDIN (FORMAT BINARY)"), fields, reverse)
    assert conn.execute("SELECT * FROM back").fetchall() == conn.execute(
        "SELECT n, r, j, a, b, d FROM src ORDER BY g DESC").fetchall()  # fmt: skip


def test_no_rows(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TEMP TABLE e (x text, y int4)")
    d = Dictionary.of(["a"])
    copy_rows(conn, sql.SQL("COPY e FROM STDIN (FORMAT BINARY)"),
              [Field.entries(d, np.zeros(0, np.int64)), Field.int4(np.zeros(0, np.int64))],
              np.zeros(0, dtype=np.int64))  # fmt: skip
    assert conn.execute("SELECT count(*) FROM e").fetchone() == (0,)


def test_fixed_width_numbers_read_back_in_their_types(conn: psycopg.Connection) -> None:
    """Field.fixed: float8 (-0.0, NaN, infinities, subnormals), int8, int4 and int2 columns,
    each row's value at its place, rows in any order."""
    rng = np.random.default_rng(5)
    n = 400
    floats = rng.normal(size=n) * 10.0 ** rng.integers(-300, 300, n)
    floats[:6] = [-0.0, np.nan, np.inf, -np.inf, 5e-324, 1.7976931348623157e308]
    big = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    ints = rng.integers(-(2**31), 2**31, n)
    shorts = rng.integers(-(2**15), 2**15, n)
    conn.execute("CREATE TEMP TABLE f (n int4, x float8, b int8, i int4, s int2)")
    order = rng.permutation(n)
    fields = [Field.int4(np.arange(n)), Field.fixed(floats, ">f8"), Field.fixed(big, ">i8"),
              Field.fixed(ints.astype(float), ">i4"), Field.fixed(shorts, ">i2")]  # fmt: skip
    copy_rows(conn, sql.SQL("COPY f FROM STDIN (FORMAT BINARY)"), fields, order)
    got = conn.execute("SELECT n, x, b, i, s FROM f ORDER BY ctid").fetchall()
    assert [g[0] for g in got] == order.tolist()  # in the order given
    for i, x, b, j, s in got:
        assert np.array_equal(np.float64(x), floats[i], equal_nan=True)
        assert np.signbit(np.float64(x)) == np.signbit(floats[i])
        assert (b, j, s) == (big[i], ints[i], shorts[i])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_an_int4_fields_null_marker_is_null_in_any_width(
    conn: psycopg.Connection, dtype: type
) -> None:
    """Field.int4(values, null=0): rows whose value is 0 are NULL, whatever the array's width
    (NULL_INT does not fit in int32: a narrower where() wrapped it to 0)."""
    values = np.array([3, 0, 5, 0], dtype=dtype)
    conn.execute("CREATE TEMP TABLE b (x int4)")
    copy_rows(conn, sql.SQL("COPY b FROM STDIN (FORMAT BINARY)"), [Field.int4(values, null=0)],
              np.arange(4))  # fmt: skip
    assert [x for (x,) in conn.execute("SELECT x FROM b").fetchall()] == [3, None, 5, None]
