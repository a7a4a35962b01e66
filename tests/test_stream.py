"""COPY streams parsed in bulk (dbanon.db.stream) agree with psycopg's own decoding, across
chunk boundaries, NULLs, empty and long text; ids written back arrive as they were."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from psycopg import sql

from dbanon.db import stream

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
