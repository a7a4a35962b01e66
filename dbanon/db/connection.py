"""Which server: `--dsn`, else `DBANON_DSN`, else the embedded one."""

from __future__ import annotations

import os

import psycopg

from dbanon.db import server
from dbanon.errors import DbanonError, first_line


def resolve_dsn(dsn: str | None = None) -> str:
    """The DSN in use, starting the embedded server when none is configured."""
    return dsn or os.environ.get("DBANON_DSN") or server.start()


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


def connect(dsn: str | None = None, **kwargs: object) -> psycopg.Connection:
    """A psycopg connection with dbanon's session memory (`raise_memory`), connection failures
    turned into a one-line error."""
    try:
        conn = psycopg.connect(resolve_dsn(dsn), **kwargs)
    except psycopg.OperationalError as e:
        raise DbanonError(f"cannot connect to PostgreSQL: {first_line(e)}") from None
    try:
        raise_memory(conn)
    except psycopg.Error as e:
        conn.close()
        raise DbanonError(f"cannot set work_mem {os.environ.get('DBANON_WORK_MEM')!r}: "
                          f"{first_line(e)}") from None  # fmt: skip
    return conn
