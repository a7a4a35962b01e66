"""Which server, in this order: `--dsn`; else `DBANON_DSN`; else libpq's own environment when it
names a server (PGHOST, PGHOSTADDR or PGSERVICE set: then every PG* variable, the service file
and the passfile apply, as for psql); else dbanon's embedded server.

A lone PGPORT, PGUSER or PGDATABASE names no server: it does not take dbanon away from its
embedded server (which pins its own socket and port, so such variables do not reach it either).
"""

from __future__ import annotations

import os

import psycopg

from dbanon.db import server
from dbanon.db.settings import raise_memory
from dbanon.errors import DbanonError, first_line

# libpq variables that name a server; any one of them hands the choice to libpq.
LIBPQ_SERVER_VARIABLES = ("PGHOST", "PGHOSTADDR", "PGSERVICE")
PRECEDENCE = (
    "--dsn, then DBANON_DSN, then libpq's environment (when PGHOST, PGHOSTADDR or PGSERVICE "
    "is set), then the embedded server"
)


def choose(dsn: str | None = None) -> tuple[str, str]:
    """The DSN in use and where it came from (the embedded server is started if it is the
    choice). For libpq's environment the DSN is empty: libpq fills everything in itself."""
    if dsn:
        return dsn, "--dsn"
    if os.environ.get("DBANON_DSN"):
        return os.environ["DBANON_DSN"], "DBANON_DSN"
    named = [v for v in LIBPQ_SERVER_VARIABLES if os.environ.get(v)]
    if named:
        return "", f"libpq environment ({', '.join(f'{v}={os.environ[v]}' for v in named)})"
    return server.start(), f"embedded server ({server.data_dir()})"


def resolve_dsn(dsn: str | None = None) -> str:
    """The DSN in use, starting the embedded server when it is the choice."""
    return choose(dsn)[0]


def unreachable(origin: str, why: str) -> str:
    """A failed connection in one line, saying what chose that server: a PGHOST left in the
    shell takes dbanon away from its embedded server, and libpq's own words do not say so
    (psycopg names a host from the environment `None`)."""
    host = os.environ.get("PGHOST")
    if origin.startswith("libpq") and host:
        why = why.replace("host None", f"host {host!r}")
    order = "" if origin == "--dsn" else f"; order: {PRECEDENCE}"
    return f"cannot connect to PostgreSQL: {why} (server chosen by {origin}{order})"


def connect(dsn: str | None = None, **kwargs: object) -> psycopg.Connection:
    """A psycopg connection with dbanon's session memory (`raise_memory`), connection failures
    turned into a one-line error."""
    chosen, origin = choose(dsn)
    try:
        conn = psycopg.connect(chosen, **kwargs)
    except psycopg.OperationalError as e:
        raise DbanonError(unreachable(origin, first_line(e))) from None
    try:
        raise_memory(conn)
    except psycopg.Error as e:
        conn.close()
        raise DbanonError(f"cannot set work_mem {os.environ.get('DBANON_WORK_MEM')!r}: "
                          f"{first_line(e)}") from None  # fmt: skip
    return conn


def sibling(conn: psycopg.Connection) -> psycopg.Connection:
    """Another connection to `conn`'s server, database and role (its parameters as libpq
    reports them, the password it was opened with too), with dbanon's session memory: for work
    beside a run's own connection, which knows no DSN. psycopg.Error when one cannot be had."""
    password = conn.pgconn.password
    extra = {"password": password.decode()} if password else {}
    other = psycopg.connect(conn.info.dsn, **extra)
    try:
        raise_memory(other)
    except BaseException:
        other.close()
        raise
    return other
