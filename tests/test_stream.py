"""COPY streams parsed in bulk (dbanon.db.stream) agree with psycopg's own decoding, across
chunk boundaries, NULLs, empty and long text; ids written back arrive as they were."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from psycopg import sql

from dbanon.db import stream
from dbanon.db.catalog import NUMERIC, Column

VALUES = ["", "a", "é", "Ünïcødé ✓", "x" * 300, "tab\there", "13021", None]


@pytest.fixture
def mixed(conn: psycopg.Connection) -> int:
    conn.execute("CREATE TABLE mixed (id text, v float8, t text, u text)")
    rng = np.random.default_rng(1)
    rows = []
    for i in range(2500):
        v = None if i % 97 == 0 else float(rng.normal()) * 10 ** int(rng.integers(-5, 6))
        t = VALUES[int(rng.integers(0, len(VALUES)))]
        rows.append((f"k{i:05d}-é" if i % 7 else str(i), v, t, str(int(rng.integers(0, 9)))))
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO mixed VALUES (%s, %s, %s, %s)", rows)
    conn.commit()
    return len(rows)


QUERY = sql.SQL("SELECT id, v, t, u FROM mixed")


@pytest.mark.parametrize("hint", ["exact", "none", "short"])
@pytest.mark.parametrize("chunk", [None, 64, 1000])
def test_columns_agree_with_psycopg(
    conn: psycopg.Connection, mixed: int, chunk: int | None, hint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    if chunk:  # tiny chunks: rows and fields cut anywhere
        monkeypatch.setattr(stream, "CHUNK", chunk)
    want = stream.copy_out(conn, QUERY, ["text", "float8", "text", "text"])
    rows = {"exact": mixed, "none": 0, "short": 10}[hint]  # arrays sized, or grown as rows come
    keys, v, t, u = stream.copy_columns(conn, QUERY, ["key", "float8", "text", "text"], rows)
    assert isinstance(keys, stream.Keys) and list(keys) == want[0] and len(keys) == mixed
    got_v = [None if np.isnan(x) else x for x in v.tolist()]  # type: ignore[union-attr]
    assert got_v == want[1]
    for coded, column in ((t, want[2]), (u, want[3])):
        assert isinstance(coded, stream.Coded)
        assert coded.objects().tolist() == column
        assert len(coded.values) == len(set(column))  # each distinct value once
    assert t.objects()[0] is t.values[t.codes[0]]  # type: ignore[union-attr]
    if chunk is None:  # one chunk: values numbered in the order of their bytes, NULL last
        known = [x for x in t.values if x is not None]  # type: ignore[union-attr]
        assert known == sorted(known, key=str.encode) and t.values[-1] is None  # type: ignore[union-attr]


@pytest.mark.parametrize("chunk", [None, 4096])
def test_text_of_many_distinct_values_in_one_chunk(
    conn: psycopg.Connection, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk with thousands of distinct texts (past the first sizes of the table the values
    are told apart in, which grows with them) codes each row as psycopg decodes it."""
    if chunk:
        monkeypatch.setattr(stream, "CHUNK", chunk)
    query = sql.SQL(
        "SELECT CASE WHEN i % 101 = 0 THEN NULL ELSE md5((i % 3000)::text) END "
        "FROM generate_series(1, 9000) i"
    )
    (want,) = stream.copy_out(conn, query, ["text"])
    (got,) = stream.copy_columns(conn, query, ["text"], len(want))
    assert isinstance(got, stream.Coded)
    assert got.objects().tolist() == want
    assert len(got.values) == len(set(want)) > 2900


def test_dedupe_numbers_each_distinct_text_once() -> None:
    """The chunk kernel itself: equal bytes get one code, different bytes different codes, as
    the table grows past its first sizes (the column's dictionary would hide a split value)."""
    from dbanon.db.copykernels import dedupe

    rng = np.random.default_rng(3)
    texts = [f"v{int(x)}".encode() for x in rng.integers(0, 5000, size=20000)]
    lens = np.array([len(t) for t in texts] + [-1], dtype=np.int32)
    buf = np.frombuffer(b"".join(texts), dtype=np.uint8)
    offs = np.concatenate([[0], np.cumsum(lens[:-1])[:-1], [0]]).astype(np.int32)
    codes, first = dedupe(buf, offs, lens)
    assert codes[-1] == -1  # NULL
    assert len(first) == len(set(texts))
    seen: dict[bytes, int] = {}
    for text, code in zip(texts, codes[:-1].tolist(), strict=True):
        assert seen.setdefault(text, code) == code
    assert [texts[i] for i in first.tolist()] == list(seen)  # numbered as they first came


@pytest.mark.parametrize("chunk", [None, 64])
def test_integer_keys_sent_binary_read_as_the_servers_text(
    conn: psycopg.Connection, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An "intkey" column (an int2, int4 or int8 sent binary) gives the bytes of the same
    column cast to text, to the extremes of each type; a NULL in it is refused."""
    if chunk:
        monkeypatch.setattr(stream, "CHUNK", chunk)
    rng = np.random.default_rng(7)
    for typ, bits in (("int2", 16), ("int4", 32), ("int8", 64)):
        low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        drawn = rng.integers(low, high, size=3000, dtype=np.int64, endpoint=True).tolist()
        values = [0, 1, -1, 9, 10, -10, 99, -100, low, high, low + 1, high - 1, *drawn]
        conn.execute(sql.SQL("CREATE TEMP TABLE {} (v {})").format(
            sql.Identifier(f"k_{typ}"), sql.SQL(typ)))  # fmt: skip
        with conn.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(
                sql.Identifier(f"k_{typ}"))) as copy:  # fmt: skip
            for v in values:
                copy.write_row((v,))
        query = sql.SQL("SELECT v, v::text FROM {}").format(sql.Identifier(f"k_{typ}"))
        got, want = stream.copy_columns(conn, query, ["intkey", "key"])
        assert isinstance(got, stream.Keys) and isinstance(want, stream.Keys)
        assert got.blob.tobytes() == want.blob.tobytes()
        assert got.lens.tolist() == want.lens.tolist() and list(got) == [str(v) for v in values]
    with pytest.raises(ValueError, match="NULL"):
        stream.copy_columns(conn, sql.SQL("SELECT NULL::int4 FROM generate_series(1, 3)"),
                            ["intkey"])  # fmt: skip


def test_key_field_sends_integer_keys_as_they_are() -> None:
    for typ, kind in (("integer", "intkey"), ("bigint", "intkey"), ("smallint", "intkey"),
                      ("text", "key"), ("numeric", "key"), ("uuid", "key")):  # fmt: skip
        col = Column("id", typ, NUMERIC, True)
        expr, got = stream.key_field(col, "s")
        assert got == kind
        assert ("::text" in repr(expr)) == (kind == "key")


@pytest.mark.parametrize("chunk", [None, 64, 1000])
def test_values_code_any_type_and_write_back_as_they_came(
    conn: psycopg.Connection, mixed: int, chunk: int | None, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A "values" column: each distinct value's bytes once (numbered as they first came, NULL an
    entry of its own), a code per row, the dictionary grown and rehashed past its first size
    (2,500 distinct ids, floats); written back with copy_rows, the same rows in their types."""
    from dbanon.db.rows import Dictionary, Field, copy_rows

    if chunk:
        monkeypatch.setattr(stream, "CHUNK", chunk)
    query = sql.SQL("SELECT id, v, t, u::int4, u::int4 FROM mixed")
    *cols, n = stream.copy_columns(conn, query, ["values"] * 4 + ["int4"], 10)
    want = conn.execute(sql.SQL("SELECT id, v, t, u::int4 FROM mixed")).fetchall()
    assert n.tolist() == [r[3] for r in want]  # type: ignore[union-attr]
    for j, col in enumerate(cols):
        assert isinstance(col, stream.Values) and len(col.codes) == mixed
        assert len(col) == len({r[j] for r in want})  # each distinct value once
        assert (col.null() >= 0) == any(r[j] is None for r in want)
    assert cols[3].codes[0] == 0 and len(cols[3]) == 9  # type: ignore[union-attr]
    conn.execute("CREATE TEMP TABLE back AS SELECT id, v, t, u::int4 AS u FROM mixed WITH NO DATA")
    fields = [Field.entries(Dictionary.of_values(c), c.codes) for c in cols]  # type: ignore[union-attr]
    order = np.arange(mixed)[::-1]
    copy_rows(conn, sql.SQL("COPY back FROM STDIN (FORMAT BINARY)"), fields, order)
    # (the heap may put a later row into an earlier page's free space: compared as multisets)
    got = conn.execute("SELECT * FROM back").fetchall()
    assert sorted(got, key=repr) == sorted(want, key=repr)


def test_a_failing_or_abandoned_stream_leaves_the_connection_usable(
    conn: psycopg.Connection, mixed: int
) -> None:
    """The stream is read from libpq directly: a server error mid-stream raises psycopg's
    error, and a stream left early (a parse error here) is cancelled and drained; either way
    the transaction can be rolled back and the connection used again."""
    failing = sql.SQL("SELECT 1 / (2000 - row_number() OVER ())::int4 FROM mixed")
    with pytest.raises(psycopg.errors.DivisionByZero):
        stream.copy_columns(conn, failing, ["int4"])
    conn.rollback()
    with pytest.raises(ValueError, match="int4"):
        stream.copy_columns(conn, sql.SQL("SELECT t FROM mixed"), ["int4"])
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM mixed").fetchone() == (mixed,)
    conn.autocommit = True  # outside a transaction too
    assert len(stream.copy_columns(conn, sql.SQL("SELECT v FROM mixed"), ["float8"])[0]) == mixed


def test_ids_round_trip(conn: psycopg.Connection, mixed: int) -> None:
    keys = stream.copy_columns(conn, sql.SQL("SELECT id FROM mixed"), ["key"])[0]
    ids = np.arange(mixed, dtype=np.int64)[::-1] - 7  # negative ids too
    conn.execute("CREATE TEMP TABLE back (key text, gid int4)")
    stream.copy_in_ids(conn, sql.Identifier("back"), keys, ids)  # type: ignore[arg-type]
    got = conn.execute("SELECT key, gid FROM back").fetchall()
    assert got == list(zip(list(keys), ids.tolist(), strict=True))  # type: ignore[arg-type]
    assert conn.execute("SELECT count(*) FROM back b JOIN mixed m ON m.id = b.key").fetchone() == (
        mixed,
    )


def test_empty_result(conn: psycopg.Connection, mixed: int) -> None:
    keys, v, t = stream.copy_columns(
        conn, sql.SQL("SELECT id, v, t FROM mixed WHERE false"), ["key", "float8", "text"]
    )
    assert len(keys) == 0 and len(v) == 0 and t.values == []  # type: ignore[union-attr,arg-type]


def test_fetch_arrays_agree_with_psycopg(conn: psycopg.Connection) -> None:
    """int4[], int8[] and float8[] values come back as numpy arrays equal to psycopg's own
    decoding, negative and large values included; NULL (array_agg of no rows) is empty, and
    a NULL element is refused rather than misread."""
    query = sql.SQL(
        "SELECT array_agg(g::int4 * 7919 - 50000), array_agg(g::int8 * 3000000007 * -1), "
        "array_agg(g / 3.0::float8), (SELECT array_agg(1::int4) WHERE false) "
        "FROM generate_series(1, 2000) g"
    )
    a, b, c, empty = stream.fetch_arrays(conn, query)
    ref = conn.execute(query).fetchone()
    assert a.dtype == np.int32 and a.tolist() == ref[0]
    assert b.dtype == np.int64 and b.tolist() == ref[1]
    assert c.dtype == np.float64 and c.tolist() == ref[2]
    assert len(empty) == 0
    with pytest.raises(ValueError, match="NULL"):
        stream.fetch_arrays(conn, sql.SQL("SELECT ARRAY[1, NULL]::int4[]"))


def test_bulk_reader_reads_as_row_by_row(
    conn: psycopg.Connection, mixed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled PQgetCopyData loop (dbanon.db.pqbulk) is what reads here, and reads what
    psycopg's row-by-row calls read, rows far longer than a chunk's room included (taken
    apart and freed), chunk boundaries anywhere."""
    import sys

    from dbanon.db import pqbulk

    if sys.platform.startswith("linux"):
        assert pqbulk.reader() is not None  # else every test here reads row by row
    conn.execute("INSERT INTO mixed SELECT 'long' || g, g, repeat('é', 150000 * g), 'u' "
                 "FROM generate_series(1, 3) g")  # fmt: skip
    query = sql.SQL("SELECT id, v, t, u FROM mixed ORDER BY id")
    kinds = ["key", "float8", "key", "text"]
    for chunk in (None, 64, 5000):
        if chunk:
            monkeypatch.setattr(stream, "CHUNK", chunk)
        bulk = stream.copy_columns(conn, query, kinds)
        with monkeypatch.context() as m:
            m.setattr(stream, "_bulk", lambda: None)
            rows = stream.copy_columns(conn, query, kinds)
        assert list(bulk[0]) == list(rows[0]) and len(rows[0]) == mixed + 3
        assert np.array_equal(bulk[1], rows[1], equal_nan=True)
        assert list(bulk[2]) == list(rows[2]) and max(len(x or "") for x in bulk[2]) == 450000
        assert bulk[3].objects().tolist() == rows[3].objects().tolist()
