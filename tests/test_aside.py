"""Work beside a run (dbanon.db.aside): on a second backend, over the run's snapshot; on
the run's own connection where a second backend cannot read what it needs; stopped with it."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from dbanon.db.aside import Aside
from dbanon.db.connection import sibling


def _count_and_pid(table: str, wait: threading.Event | None = None):  # noqa: ANN202
    def work(c: psycopg.Connection) -> tuple[int, int]:
        if wait is not None:
            assert wait.wait(30)
        n = c.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # a test's own literal
        return int(n), int(c.execute("SELECT pg_backend_pid()").fetchone()[0])

    return work


def _ends(conn: psycopg.Connection, pid: int) -> bool:
    """Whether backend `pid` is gone within a few seconds (a closed connection's backend exits
    just after the client hangs up)."""
    for _ in range(100):
        if not conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def run(dsn: str, conn: psycopg.Connection):  # noqa: ANN201
    """A run's connection in its REPEATABLE READ transaction, over a table of 3 rows."""
    conn.execute("CREATE TABLE public.t AS SELECT g FROM generate_series(1, 3) g")
    with psycopg.connect(dsn) as c:
        c.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        c.execute("SELECT 1")  # the transaction's snapshot, taken now
        yield c


def test_the_work_reads_the_runs_snapshot_on_another_backend(
    run: psycopg.Connection, conn: psycopg.Connection
) -> None:
    go = threading.Event()
    aside = Aside(run, _count_and_pid("public.t", go))
    conn.execute("INSERT INTO public.t VALUES (4)")  # committed after the run's snapshot
    go.set()
    rows, pid = aside.result()
    assert rows == 3  # what the run's own connection sees, not the table as it is now
    assert pid != run.info.backend_pid
    assert _ends(conn, pid)  # the second backend ended with its result


def test_a_temporary_source_is_read_on_the_runs_own_connection(run: psycopg.Connection) -> None:
    run.execute("CREATE TEMP TABLE only_here AS SELECT 1 AS x")
    rows, pid = Aside(run, _count_and_pid("only_here")).result()
    assert (rows, pid) == (1, run.info.backend_pid)


def test_closing_stops_the_work_and_its_backend(
    run: psycopg.Connection, conn: psycopg.Connection
) -> None:
    started = threading.Event()

    def sleeps(c: psycopg.Connection) -> None:
        started.set()
        c.execute("SELECT pg_sleep(120)")

    aside = Aside(run, sleeps)
    assert started.wait(30)
    side = aside._side.info.backend_pid  # type: ignore[union-attr]
    began = time.monotonic()
    aside.close()
    assert time.monotonic() - began < 60  # the query was cancelled, not waited for
    assert _ends(conn, side)


def test_a_sibling_is_the_same_database_and_role(run: psycopg.Connection) -> None:
    with sibling(run) as other:
        ask = "SELECT current_database(), current_user, inet_server_port()"
        assert other.execute(ask).fetchone() == run.execute(ask).fetchone()


def test_a_lock_queued_behind_the_run_sends_the_work_back_to_it(
    dsn: str, run: psycopg.Connection
) -> None:
    """Someone waits for a lock the run holds (an ALTER of the source): the second backend,
    queued behind them, would wait for the run, which waits for it. It gives up instead, and
    the run's own connection, which holds its lock, does the work."""
    assert run.execute("SELECT count(*) FROM public.t").fetchone()[0] == 3  # the run's lock
    with psycopg.connect(dsn) as alter:
        alter.execute("SET lock_timeout = '60s'")  # a bound for this test, should it hang
        waiting = threading.Thread(target=lambda: alter.execute("LOCK TABLE public.t"))
        waiting.start()
        try:
            for _ in range(200):  # until the ALTER queues behind the run
                if run.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the lock request never queued")
            rows, pid = Aside(run, _count_and_pid("public.t")).result()
            assert (rows, pid) == (3, run.info.backend_pid)
        finally:
            run.rollback()  # the ALTER's lock is granted
            waiting.join()
            alter.rollback()
