"""Server settings of dbanon's own sessions and of a few statements, never the server's.

- The session: `raise_memory` gives dbanon's connections a work_mem and maintenance_work_mem
  fit for GROUP BYs and sorts of millions of rows (never lowering what the server allows).
- A few statements of the current transaction: `local_settings` changes settings with
  `set_config(name, value, true)`, which ends with the transaction whatever happens, and puts
  the previous values back as soon as the statements that need them are done; used to shape a
  plan where the planner's cost model is wrong about it, or to give a sort more memory
  (`work_mem_at_least`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import pq, sql

# Memory for each sort and hash of dbanon's own session (not the server's setting). PostgreSQL's
# default of 4MB sends a GROUP BY over a million released rows to disk: 3.1 s where 256MB takes
# 1.0 s. A server or role that allows more keeps its value; DBANON_WORK_MEM=0 leaves it alone.
WORK_MEM = "256MB"
MAINTENANCE_WORK_MEM = "512MB"  # index builds (the private group map's key)


def raise_memory(conn: psycopg.Connection) -> None:
    """Raise the session's work_mem and maintenance_work_mem to dbanon's (DBANON_WORK_MEM
    overrides work_mem), never lowering them; committed, so a later rollback keeps them."""
    work = os.environ.get("DBANON_WORK_MEM", WORK_MEM)
    if work in ("", "0"):
        return
    for name, value in (("work_mem", work), ("maintenance_work_mem", MAINTENANCE_WORK_MEM)):
        conn.execute(
            "SELECT set_config(%(n)s, %(v)s, false) "
            "WHERE pg_size_bytes(current_setting(%(n)s)) < pg_size_bytes(%(v)s)",
            {"n": name, "v": value},
        )
    if not conn.autocommit:
        conn.commit()


@contextmanager
def local_settings(conn: psycopg.Connection, **settings: str) -> Iterator[None]:
    """Run the block with `settings` (e.g. enable_hashagg="off"). Takes effect only inside a
    transaction; on an autocommit connection it changes nothing."""
    old = {
        name: conn.execute("SELECT current_setting(%s)", [name]).fetchone()[0]
        for name in settings
    }
    for name, value in settings.items():
        conn.execute("SELECT set_config(%s, %s, true)", [name, value])
    try:
        yield
    finally:
        # A failed statement leaves the transaction aborted; its rollback restores them anyway.
        if conn.info.transaction_status == pq.TransactionStatus.INTRANS:
            for name, value in old.items():
                conn.execute("SELECT set_config(%s, %s, true)", [name, value])


def work_mem_at_least(conn: psycopg.Connection, size: str) -> str:
    """The larger of the current work_mem and `size`, for `local_settings` (the current one
    when DBANON_WORK_MEM=0 asks to keep the server's)."""
    current = conn.execute("SELECT current_setting('work_mem')").fetchone()[0]
    if os.environ.get("DBANON_WORK_MEM") in ("", "0"):
        return current
    return conn.execute(
        "SELECT CASE WHEN pg_size_bytes(%s) < pg_size_bytes(%s) THEN %s ELSE %s END",
        [current, size, size, current],
    ).fetchone()[0]


# Sample of a run's own staging tables (300 rows per unit): their readers need row counts and
# rough distinct counts to size hashes, not histograms. The default (100: 30,000 rows read at
# random) took 0.3-0.4 s per table of a refresh of 288,000 rows.
STAGE_STATISTICS = "10"


def analyze_stage(conn: psycopg.Connection, table: sql.Composable) -> None:
    """ANALYZE one of the run's staging tables (or a private map) from a small sample."""
    with local_settings(conn, default_statistics_target=STAGE_STATISTICS):
        conn.execute(sql.SQL("ANALYZE {}").format(table))
