"""dbanon's session memory (`raise_memory`), and local_settings: a few statements run with
other server settings, and nothing leaks out."""

from __future__ import annotations

import psycopg
import pytest

from dbanon.db.connection import connect
from dbanon.db.settings import local_settings
from dbanon.errors import DbanonError


def _show(conn: psycopg.Connection, name: str) -> str:
    return conn.execute("SELECT current_setting(%s)", [name]).fetchone()[0]


def test_settings_hold_inside_and_are_restored(conn: psycopg.Connection) -> None:
    with conn.transaction():
        conn.execute("SET LOCAL work_mem = '64MB'")
        with local_settings(conn, work_mem="4MB", enable_hashagg="off"):
            assert _show(conn, "work_mem") == "4MB"
            assert _show(conn, "enable_hashagg") == "off"
        assert _show(conn, "work_mem") == "64MB"
        assert _show(conn, "enable_hashagg") == "on"
    assert _show(conn, "work_mem") != "64MB"


def test_a_failed_statement_is_reported_not_masked(conn: psycopg.Connection) -> None:
    """In an aborted transaction the restore cannot run; the rollback restores instead."""
    with (
        pytest.raises(psycopg.errors.DivisionByZero),
        conn.transaction(),
        local_settings(conn, enable_hashagg="off"),
    ):
        conn.execute("SELECT 1 / 0")
    assert _show(conn, "enable_hashagg") == "on"


def test_settings_end_with_the_transaction(conn: psycopg.Connection) -> None:
    with conn.transaction(), local_settings(conn, enable_hashagg="off"):
        pass
    assert _show(conn, "enable_hashagg") == "on"
    with conn.transaction():
        cm = local_settings(conn, enable_hashagg="off")
        cm.__enter__()  # never left: only the end of the transaction undoes it
    assert _show(conn, "enable_hashagg") == "on"


def test_dbanon_sessions_get_more_memory_never_less(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dbanon connection raises work_mem and maintenance_work_mem (kept after a rollback),
    keeps a larger value the session already has, keeps the server's with DBANON_WORK_MEM=0,
    and turns a value PostgreSQL cannot read into one line."""
    monkeypatch.delenv("DBANON_WORK_MEM", raising=False)
    with connect(dsn) as conn:
        conn.rollback()
        assert _show(conn, "work_mem") == "256MB"
        assert _show(conn, "maintenance_work_mem") == "512MB"
    with connect(dsn, options="-c work_mem=1GB") as conn:
        assert _show(conn, "work_mem") == "1GB"
    with psycopg.connect(dsn) as plain:
        server = _show(plain, "work_mem")
    monkeypatch.setenv("DBANON_WORK_MEM", "0")
    with connect(dsn) as conn:
        assert _show(conn, "work_mem") == server
    monkeypatch.setenv("DBANON_WORK_MEM", "64MB")
    with connect(dsn) as conn:
        assert _show(conn, "work_mem") == ("64MB" if server in ("4MB", "1MB") else server)
    monkeypatch.setenv("DBANON_WORK_MEM", "lots")
    with pytest.raises(DbanonError, match="cannot set work_mem 'lots'"):
        connect(dsn)
