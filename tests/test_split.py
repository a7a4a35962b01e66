"""An audit counted in parts on several backends (`dbanon.models.split`): where it cuts, what
it reads, and when it does not split at all."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from psycopg import sql

from dbanon.api import Database
from dbanon.db import catalog
from dbanon.models import DistinctLDiversity, KAnonymity, Target
from dbanon.models.split import Split, backends, plan


@pytest.fixture
def table(conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """sp.t: 4,000 rows in classes of two or more, QIs g (numeric, each class's value written
    both as 5 and 5.00), z (text, NULL now and then) and c (12 values); analysed; any table
    splits."""
    monkeypatch.setattr("dbanon.models.split.MIN_ROWS", 0)
    monkeypatch.setattr("dbanon.models.split.os.cpu_count", lambda: 4)
    conn.execute("CREATE SCHEMA sp")
    conn.execute(  # rows 2m and 2m + 1 make one class, g written as m % 300 and with 2 decimals
        "CREATE TABLE sp.t AS SELECT CASE WHEN i % 2 = 0 THEN (i / 2 % 300)::numeric "
        "ELSE (i / 2 % 300)::numeric(6, 2) END AS g, "
        "CASE WHEN i / 2 % 17 = 0 THEN NULL ELSE 'z' || (i / 2 % 7) END AS z, i / 2 % 12 AS c "
        "FROM generate_series(0, 3999) i"
    )
    conn.execute("ANALYZE sp.t")
    yield "sp.t"
    conn.execute("DROP SCHEMA sp CASCADE")


QI = ["z", "g", "c"]
K = [KAnonymity(2), KAnonymity(15)]


def part_sizes(split: Split, rel: catalog.Relation) -> list[int]:
    src = sql.SQL("(SELECT z AS q1, g AS q2, c AS q3 FROM {}) src").format(rel.ident)
    rows = split.run(lambda where: sql.SQL("SELECT count(*) FROM {} WHERE {}").format(src, where))
    return [r[0] for r in rows]


def test_parts_cut_the_widest_column_and_add_up_to_the_whole(dsn: str, table: str) -> None:
    """With four backends allowed, the classes are cut at three values of g (the column with
    the most distinct values): every row falls in one part, each part holds about a quarter,
    numeric values written 1 and 1.00 stay one class, NULLs of z are counted, and the figures
    equal those of one query."""
    db = Database(dsn)
    try:
        db.conn.execute("SET max_parallel_workers_per_gather = 3")
        rel = catalog.relation(db.conn, table)
        column, bounds = plan(db.conn, rel, QI)
        assert column == 1 and len(bounds) == 3
        one = [m.check(db.conn, Target(rel.ident, QI, worst="never")) for m in K]
        with backends(db.conn, dsn, rel, QI) as split:
            assert split is not None and len(split.parts) == 4
            sizes = part_sizes(split, rel)
            assert sum(sizes) == 4000 and all(600 < n < 1400 for n in sizes), sizes
            target = Target(rel.ident, QI, worst="never", split=split)
            parts = [m.check(db.conn, target) for m in K]
        rows = db.conn.execute("SELECT z, g, c FROM sp.t").fetchall()
        assert parts == one and one[0].figures["classes"] == len(set(rows))  # Decimal 5 == 5.00
        assert [r.holds for r in parts] == [True, False]  # no class of two is cut in two
    finally:
        db.close()


def test_the_parts_read_the_state_of_one_moment(
    dsn: str, table: str, conn: psycopg.Connection
) -> None:
    """Rows committed after the backends took their snapshot are in no part: the parts add up
    to the table as it was, not to a mix of two states."""
    db = Database(dsn)
    try:
        rel = catalog.relation(db.conn, table)
        before = KAnonymity(2).check(db.conn, Target(rel.ident, QI, worst="never"))
        with backends(db.conn, dsn, rel, QI) as split:
            assert split is not None
            conn.execute("INSERT INTO sp.t SELECT 1000 + i, 'new', i FROM generate_series(1, 50) i")
            target = Target(rel.ident, QI, worst="never", split=split)
            assert KAnonymity(2).check(db.conn, target) == before
            assert sum(part_sizes(split, rel)) == 4000
    finally:
        db.close()


def test_no_split_where_one_query_is_the_right_choice(
    dsn: str, table: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view, a temporary table, a table whose QIs have few values, a server that allows no
    parallel workers, a small table, and a server that refuses more connections: one query,
    and the check still answers."""
    conn.execute("CREATE VIEW sp.v AS SELECT * FROM sp.t")
    db = Database(dsn)
    try:
        view = catalog.relation(db.conn, "sp.v")
        rel = catalog.relation(db.conn, table)
        assert plan(db.conn, view, QI) is None
        db.conn.execute("CREATE TEMP TABLE mine AS SELECT * FROM sp.t")
        db.conn.execute("ANALYZE mine")
        temp = db.conn.execute("SELECT pg_my_temp_schema()::regnamespace::text").fetchone()[0]
        assert plan(db.conn, catalog.Relation(temp, "mine", "r"), QI) is None
        assert plan(db.conn, rel, ["c"]) is None  # every value of c is a common one
        db.conn.execute("SET max_parallel_workers_per_gather = 0")
        assert plan(db.conn, rel, QI) is None
        db.conn.execute("RESET max_parallel_workers_per_gather")
        assert plan(db.conn, rel, QI) is not None
        monkeypatch.setattr("dbanon.models.split.MIN_ROWS", 4001)
        assert plan(db.conn, rel, QI) is None
        monkeypatch.setattr("dbanon.models.split.MIN_ROWS", 0)
        with backends(db.conn, "host=/nonexistent port=1", rel, QI) as split:
            assert split is None
        db.conn.rollback()
        # an array QI (no quantiles of arrays) is passed over for the next widest column
        conn.execute("ALTER TABLE sp.t ADD COLUMN a int[]")
        conn.execute("UPDATE sp.t SET a = ARRAY[g::int, c, length(z)]")
        conn.execute("ANALYZE sp.t")
        assert plan(db.conn, rel, ["a", "c", "g"])[0] == 2
        assert plan(db.conn, rel, ["a", "c"]) is None
        # a materialised view and a partitioned table read the same on every backend: they split
        conn.execute("CREATE MATERIALIZED VIEW sp.m AS SELECT g, z, c FROM sp.t")
        conn.execute("CREATE TABLE sp.p (g numeric, z text, c int) PARTITION BY LIST (c)")
        conn.execute("CREATE TABLE sp.p1 PARTITION OF sp.p DEFAULT")
        conn.execute("INSERT INTO sp.p SELECT g, z, c FROM sp.t")
        conn.execute("ANALYZE sp.m")
        conn.execute("ANALYZE sp.p")
        for name in ("sp.m", "sp.p"):
            assert plan(db.conn, catalog.relation(db.conn, name), QI) is not None, name
    finally:
        db.close()


def test_the_library_check_splits_big_tables(
    dsn: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Database.check` counts a table that plan() splits in parts, with the figures of one
    query (the CLI's `dbanon check` is this call)."""
    used: list[Split | None] = []

    @contextmanager
    def spy(*args: object) -> Iterator[Split | None]:
        with backends(*args) as split:  # type: ignore[arg-type]
            used.append(split)
            yield split

    monkeypatch.setattr("dbanon.api.backends", spy)
    with Database(dsn) as db:
        split = db.check(table, QI, k=15, l=2, sensitive="c", worst="never")
        rel = catalog.relation(db.conn, table)
        models = [KAnonymity(15), DistinctLDiversity(2)]
        one = [m.check(db.conn, Target(rel.ident, QI, "c", worst="never")) for m in models]
        db.conn.rollback()
    assert used and used[0] is not None
    assert split == one


class _Stop(BaseException):
    """What the test's signal raises, as dbanon's Interrupted does on Ctrl-C."""


def test_an_interrupt_stops_every_part(dsn: str, conn: psycopg.Connection) -> None:
    """A signal while the parts run raises in the caller and cancels each part's query on the
    server, not only the one the main thread waits for."""
    parts = [psycopg.connect(dsn, autocommit=True) for _ in range(2)]

    def stop(*_: object) -> None:
        raise _Stop

    old = signal.signal(signal.SIGUSR1, stop)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        split = Split([(c, sql.SQL("true")) for c in parts])
        timer.start()
        started = time.monotonic()
        with pytest.raises(_Stop):
            split.run(lambda where: sql.SQL("SELECT pg_sleep(30) WHERE {}").format(where))
        time.sleep(0.5)
        pids = [c.info.backend_pid for c in parts]
        active = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s) AND state = 'active'",
            [pids],
        ).fetchone()[0]
        assert active == 0 and time.monotonic() - started < 10
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, old)
        for c in parts:
            c.close()
