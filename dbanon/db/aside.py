"""Read-only work over a run's snapshot on a second backend, while the run goes on.

A run is one REPEATABLE READ transaction on one connection, and a backend runs one statement
at a time: a scan the run only needs at its end (the source's fingerprint, 0.45 s of the server
at 1M rows, every method) waits for the build, though the server has a core to spare while
Python clusters or streams. `Aside` runs such work at once on a sibling connection that imports
the run's snapshot (`pg_export_snapshot`, as `check` does in dbanon.models.split): it reads the
rows the run reads, so the answer is the one the run's own connection would give at the end.
Where no second backend can be had (no connection slot left, a source only this session sees)
the work runs on the run's connection when its result is asked for, as before.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from contextlib import suppress
from typing import Generic, TypeVar

import psycopg
from psycopg import sql

from dbanon.db.connection import sibling

T = TypeVar("T")
LOCK_TIMEOUT = "100ms"
# The snapshot each connection's latest Aside exported: its run's, valid while that
# transaction lasts (PostgreSQL refuses an id whose transaction ended), so one that a
# sibling can still import is the connection's current transaction's.
_EXPORTED: weakref.WeakKeyDictionary[psycopg.Connection, str] = weakref.WeakKeyDictionary()


def exported(conn: psycopg.Connection) -> str | None:
    """The snapshot `conn`'s latest Aside exported, if any (see _EXPORTED): what a read
    inside a savepoint, where PostgreSQL exports none, can give its siblings."""
    return _EXPORTED.get(conn)


def on_snapshot(conn: psycopg.Connection, snapshot: str) -> psycopg.Connection | None:
    """A second backend over `conn`'s server, in a read-only transaction that imported
    `snapshot` (exported by `conn`), or None when none can be had."""
    try:
        side = sibling(conn)
    except psycopg.Error:
        return None
    try:
        side.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        side.read_only = True
        side.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
        # The run holds its locks; the second backend asks anew and would queue behind
        # anyone waiting for a lock the run holds (an ALTER of the source), who waits for
        # the run, which waits for it: a deadlock the server cannot see. So it never
        # waits: a lock not granted at once sends the work back to the run's connection.
        side.execute("SELECT set_config('lock_timeout', %s, true)", [LOCK_TIMEOUT])
        # Its scan of the source must not tell the run's where to start: with synchronized
        # scans a scan of a large table joins one under way, so the run would read the
        # rows in an order that depends on this thread's progress.
        side.execute("SELECT set_config('synchronize_seqscans', 'off', true)")
    except psycopg.Error:
        side.close()
        return None
    return side


class Aside(Generic[T]):
    """`work(connection)` started on a second backend over `conn`'s snapshot; `result()` waits
    for it (or runs it on `conn`), `close()` stops it. `conn` must be in its transaction (not a
    subtransaction), whose snapshot is the one read."""

    def __init__(self, conn: psycopg.Connection, work: Callable[[psycopg.Connection], T]) -> None:
        self._conn, self._work = conn, work
        self._side: psycopg.Connection | None = None
        self._thread: threading.Thread | None = None
        self._out: tuple[bool, object] = (False, None)
        snapshot = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
        _EXPORTED[conn] = snapshot
        side = on_snapshot(conn, snapshot)
        if side is None:
            return
        self._side = side
        self._thread = threading.Thread(target=self._run, name="dbanon-aside", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._out = (True, self._work(self._side))  # type: ignore[arg-type]
        except psycopg.Error as e:  # e.g. a temporary source: the run's own connection reads it
            self._out = (False, e)

    def result(self) -> T:
        if self._thread is not None:
            self._thread.join()
            self.close()
            done, value = self._out
            if done:
                return value  # type: ignore[return-value]
        return self._work(self._conn)

    def close(self) -> None:
        """Stop the work if it still runs (its query cancelled) and end the second backend."""
        side, self._side = self._side, None
        if side is None:
            return
        if self._thread is not None and self._thread.is_alive():
            with suppress(psycopg.Error):
                side.cancel_safe()
            self._thread.join()
        side.close()
