"""A source streamed out in parts on several backends at once (dbanon.db.parts): the rows one
stream gives, in its order, read from the run's snapshot; one stream where parts cannot be."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import psycopg
import pytest
from psycopg import sql

from dbanon.db import parts
from dbanon.db.catalog import Relation
from dbanon.db.stream import Coded, Keys, Values, copy_columns

KINDS = ["key", "float8", "text", "values", "int8"]


def _query(where: sql.Composable | None) -> sql.Composable:
    return sql.SQL("SELECT id::text, x, label, day, n FROM public.src s{}").format(
        sql.SQL("") if where is None else sql.SQL(" WHERE {}").format(where)
    )


@pytest.fixture
def source(conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch) -> Relation:
    """40,000 rows over some hundred pages: text with NULLs and a few values (some only in
    the later pages, which the first part never sees), dates, floats."""
    conn.execute(
        "CREATE TABLE public.src AS SELECT g AS id, "
        "CASE WHEN g % 7 = 0 THEN NULL ELSE (g * 37 % 1000) / 8.0 END AS x, "
        "CASE WHEN g % 11 = 0 THEN NULL WHEN g > 15000 AND g % 3 = 0 THEN 'b ' || (g % 5) "
        "ELSE 'label ' || (g * 13 % 29) END AS label, "
        "date '2020-01-01' + (g * 7 % 400) AS day, g::int8 * 1000003 AS n "
        "FROM generate_series(1, 40000) g"
    )
    conn.execute("ANALYZE public.src")
    monkeypatch.setattr(parts, "MIN_ROWS", 1000)
    monkeypatch.setattr(parts.os, "cpu_count", lambda: 3)
    return Relation("public", "src")


@pytest.fixture
def run(dsn: str, source: Relation) -> Iterator[psycopg.Connection]:
    """The run's connection, its REPEATABLE READ transaction begun after the source exists."""
    with psycopg.connect(dsn) as c:
        c.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        c.execute("SELECT set_config('max_parallel_workers_per_gather', '2', true)")
        yield c


def _rows(columns: list) -> list[tuple]:
    """Each row's values, decoded from whatever form its column came in."""
    out = []
    for col in columns:
        if isinstance(col, Keys):
            out.append(list(col))
        elif isinstance(col, Coded):
            out.append([col.values[c] for c in col.codes.tolist()])
        elif isinstance(col, Values):
            raw = col.data.tobytes()
            entries = [
                None if n < 0 else raw[s : s + n]
                for s, n in zip(col.starts.tolist(), col.lens.tolist(), strict=True)
            ]
            out.append([entries[c] for c in col.codes.tolist()])
        else:
            out.append(["nan" if v != v else v for v in np.asarray(col).tolist()])
    return list(zip(*out, strict=True))


def test_the_parts_give_the_rows_one_stream_gives_in_its_order(
    run: psycopg.Connection, conn: psycopg.Connection, source: Relation
) -> None:
    assert len(parts.page_ranges(run, source, "s", 40000) or []) == 3
    parted = parts.copy_parts(run, _query, source, "s", KINDS, 40000)
    whole = copy_columns(conn, _query(None), KINDS, 40000)
    assert _rows(parted) == _rows(whole)
    assert len(parted[0]) == 40000


def test_the_parts_read_the_runs_snapshot(
    run: psycopg.Connection, conn: psycopg.Connection, source: Relation
) -> None:
    run.execute("SELECT 1")  # the run's snapshot, taken now
    conn.execute("INSERT INTO public.src SELECT g, 1, 'late', date '2021-01-01', 0 "
                 "FROM generate_series(40001, 45000) g")  # fmt: skip
    conn.execute("DELETE FROM public.src WHERE id <= 100")  # the first part's pages
    parted = parts.copy_parts(run, _query, source, "s", KINDS, 40000)
    keys = [int(k) for k in parted[0]]
    assert keys == sorted(keys) and keys[0] == 1 and keys[-1] == 40000  # the run's rows
    assert "late" not in parted[2].values


def test_in_a_savepoint_the_parts_read_the_snapshot_the_run_exported(
    run: psycopg.Connection, conn: psycopg.Connection, source: Relation,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """PostgreSQL exports no snapshot in a subtransaction (the lattice search's savepoint):
    `export=False` parts read the one the run's Aside exported as it began, and its rows;
    without one, one stream, no error."""
    from dbanon.db import aside

    opened: list[str] = []
    real = parts.on_snapshot

    def counting(c: psycopg.Connection, snapshot: str) -> psycopg.Connection | None:
        opened.append(snapshot)
        return real(c, snapshot)

    monkeypatch.setattr(parts, "on_snapshot", counting)
    run.execute("SELECT 1")  # the run's snapshot, taken now
    with run.transaction():
        alone = parts.copy_parts(run, _query, source, "s", KINDS, 40000, export=False)
    assert opened == [] and len(alone[0]) == 40000  # nothing exported: one stream
    aside.Aside(run, lambda c: None).result()  # the run's Aside: exports its snapshot
    conn.execute("DELETE FROM public.src WHERE id > 39000")  # the last part's pages
    with run.transaction():
        parted = parts.copy_parts(run, _query, source, "s", KINDS, 40000, export=False)
    assert opened and set(opened) == {aside.exported(run)}
    assert _rows(parted) == _rows(alone)  # the run's rows, in their order


@pytest.mark.parametrize("refused", [1, 2])
def test_where_no_second_backend_can_be_had_the_run_reads_its_part(
    run: psycopg.Connection, conn: psycopg.Connection, source: Relation,
    monkeypatch: pytest.MonkeyPatch, refused: int,
) -> None:  # fmt: skip
    real, asked = parts.on_snapshot, []

    def some(c: psycopg.Connection, snapshot: str) -> psycopg.Connection | None:
        asked.append(snapshot)
        return None if len(asked) <= refused else real(c, snapshot)

    monkeypatch.setattr(parts, "on_snapshot", some)
    parted = parts.copy_parts(run, _query, source, "s", KINDS, 40000)
    assert len(asked) == 2
    assert _rows(parted) == _rows(copy_columns(conn, _query(None), KINDS, 40000))


def test_a_part_whose_backend_fails_is_read_by_the_run(
    run: psycopg.Connection, conn: psycopg.Connection, source: Relation
) -> None:
    failed = []

    def query(where: sql.Composable | None) -> sql.Composable:
        last = where is not None and " < " not in where.as_string(conn)
        if last and not failed:  # the last part's backend gets a query it cannot run
            failed.append(where)
            return sql.SQL("SELECT 1/0")
        return _query(where)

    parted = parts.copy_parts(run, query, source, "s", KINDS, 40000)
    assert failed
    assert _rows(parted) == _rows(copy_columns(conn, _query(None), KINDS, 40000))


def test_one_stream_where_parts_would_not_add_up(
    run: psycopg.Connection, conn: psycopg.Connection, source: Relation, dsn: str
) -> None:
    conn.execute("CREATE VIEW public.v AS SELECT * FROM public.src")
    assert parts.page_ranges(run, Relation("public", "v", "v"), "s", 40000) is None
    run.execute("CREATE TEMP TABLE mine AS SELECT * FROM public.src")
    assert parts.page_ranges(run, Relation("pg_temp", "mine"), "s", 40000) is None
    assert parts.page_ranges(run, source, "s", 999) is None  # below MIN_ROWS
    with psycopg.connect(dsn) as committed:  # READ COMMITTED: no snapshot to share
        assert parts.page_ranges(committed, source, "s", 40000) is None
    with psycopg.connect(dsn, autocommit=True) as each:  # a snapshot per statement
        each.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        assert parts.page_ranges(each, source, "s", 40000) is None
