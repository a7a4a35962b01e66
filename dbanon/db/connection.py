"""Which server: `--dsn`, else `DBANON_DSN`, else the embedded one."""

from __future__ import annotations

import os

import psycopg

from dbanon.db import server
from dbanon.db.settings import raise_memory
from dbanon.errors import DbanonError, first_line


def resolve_dsn(dsn: str | None = None) -> str:
    """The DSN in use, starting the embedded server when none is configured."""
    return dsn or os.environ.get("DBANON_DSN") or server.start()


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
