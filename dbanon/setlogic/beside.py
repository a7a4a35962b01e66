"""A grouping run's private map, written on a second backend while the run checks its release.

A run writes its release, then checks it (GROUP BYs over what it wrote: one core of the
server busy, the client idle), then writes its row-to-group map (a million rows: 0.85 s of
COPY, the server's other core idle meanwhile). The map's rows come from the run's arrays, not
from anything the run's transaction wrote, so a second backend can write them during the
checks: into the fresh tables of the next map (`composition.fresh_tables`), in a transaction of
its own, committed and analysed; the run then swaps them in (the old map dropped, the fresh
tables renamed) in its own transaction, as it does tables it wrote itself.

Until the run commits, the fresh tables are not the map (the release reads the old one under
its own name). A run that fails or is refused rolls back, then drops them (a failed swap's
renames are rolled back with it); a run killed leaves them for the release's next run
(`fresh_tables` drops what it finds) or its drop. The writer's rows were committed after the
run's snapshot, so the run itself cannot read them: nothing after the swap reads the new map.
Where no second backend can be had, or its write fails, the run writes the map itself, as
before.
"""

from __future__ import annotations

import threading
from contextlib import suppress
from typing import Any

import psycopg
from psycopg import sql

from dbanon.db.connection import sibling
from dbanon.db.settings import analyze_stage
from dbanon.setlogic import composition, grouped_map, measured_map

Mapped = grouped_map.Mapped | measured_map.Judged  # a run's rows as arrays


def guard(rows: Mapped) -> Any:
    """The module that measures and writes a run's map from its arrays."""
    return measured_map if isinstance(rows, measured_map.Judged) else grouped_map

LOCK_TIMEOUT = "1s"  # the writer only creates and drops the next map's own tables


class Beside:
    """The map of `rows` prepared on the run's connection (the old map's values it keeps read
    now) and written at once on a second backend; `finish` swaps it in on the run's connection
    (or writes it there), `abandon` drops a written one after the run rolled back."""

    def __init__(self, conn: psycopg.Connection, release_id: int,
                 rows: Mapped) -> None:  # fmt: skip
        self._release_id, self._rows, self._guard = release_id, rows, guard(rows)
        self._kept = self._guard.prepare(conn, release_id, rows)
        self._fresh: dict[str | None, sql.Identifier] | None = None  # written and committed
        self._thread: threading.Thread | None = None
        self._side: psycopg.Connection | None = None
        try:
            side = sibling(conn)
            side.execute("SELECT set_config('lock_timeout', %s, false)", [LOCK_TIMEOUT])
            side.commit()
        except psycopg.Error:
            return  # written by the run itself
        self._side = side
        self._thread = threading.Thread(target=self._write, name="dbanon-map", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        assert self._side is not None
        try:
            fresh = composition.fresh_tables(self._side, self._release_id)
            self._guard.write(self._side, self._kept, fresh)
            for table in fresh.values():
                analyze_stage(self._side, table)
            self._side.commit()
            self._fresh = fresh
        except Exception:  # cancelled, or failed: the run writes the map itself (`finish`)
            with suppress(psycopg.Error):
                self._side.rollback()

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def finish(self, conn: psycopg.Connection) -> None:
        """The map in place of the old one, in the run's transaction."""
        self._join()
        if isinstance(self._rows, grouped_map.Mapped):  # the map is replaced: figures stale
            self._rows.runs.pop(self._release_id, None)
        if self._fresh is not None:
            composition.swap_in(conn, self._release_id, self._fresh, analyzed=True)
        else:
            self._guard.put(conn, self._kept)
        self._close()

    def abandon(self, conn: psycopg.Connection) -> None:
        """After the run rolled back (its locks, and any swap of the fresh tables, gone): stop
        the writer, and drop what it committed, on the run's connection."""
        side = self._side
        if side is not None and self._thread is not None and self._thread.is_alive():
            with suppress(psycopg.Error):
                side.cancel_safe()
        self._join()
        self._close()
        if self._fresh is not None:
            try:
                composition.drop_fresh(conn, self._release_id)
                conn.commit()
            except psycopg.Error:  # the next run, or the release's drop, drops them
                with suppress(psycopg.Error):
                    conn.rollback()

    def _close(self) -> None:
        side, self._side = self._side, None
        if side is not None:
            side.close()
