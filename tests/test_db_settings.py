"""local_settings: a few statements run with other server settings, and nothing leaks out."""

from __future__ import annotations

import psycopg
import pytest

from dbanon.db.settings import local_settings


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
