"""A grouping run's map written on a second backend during the checks (dbanon.setlogic.beside):
the same map as the run writes itself, none of it left behind by a run that fails after it was
written, and what a killed run left dropped by the next run and by the release's drop."""

from __future__ import annotations

import random
import threading

import psycopg
import pytest
from helpers import cli_json, make_table
from psycopg import sql

from dbanon.errors import DbanonError
from dbanon.lifecycle import publish
from dbanon.setlogic import beside, composition, grouped_map

WRITE = grouped_map.write  # as imported, before a test spies on it
QI = ["--qi", "age,region", "--sensitive", "dx", "--k", "4", "--algorithm", "mondrian"]


def _source(conn: psycopg.Connection, n: int = 400) -> None:
    rng = random.Random(n)
    make_table(conn, "h", "ward", [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"),
                                   ("dx", "text")],
               [(i, rng.randint(18, 90), rng.choice("NSEW"), rng.choice(["flu", "gout", "ulcer"]))
                for i in range(n)])  # fmt: skip


def _rid(conn: psycopg.Connection, name: str) -> int:
    return conn.execute("SELECT id FROM dbanon.release WHERE name = %s", [name]).fetchone()[0]


def _map(conn: psycopg.Connection, rid: int) -> tuple[list, list, list]:
    """The map's rows, sets and shown values, in order."""
    return tuple(conn.execute(sql.SQL("SELECT * FROM {} ORDER BY 1, 2").format(
        composition.table(rid, part))).fetchall() for part in (None, "sets", "shown"))  # fmt: skip


def _next_tables(conn: psycopg.Connection) -> list[str]:
    return [n for (n,) in conn.execute(
        "SELECT relname FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace "
        "WHERE s.nspname = 'dbanon' AND relname LIKE 'group\\_map\\_%\\_next' ORDER BY 1")]


def _writes(monkeypatch: pytest.MonkeyPatch) -> tuple[list[bool], list]:
    """Record, per map written, whether a second backend wrote it, and what it was written
    from (`grouped_map.Prepared`)."""
    seen: list[bool] = []
    kept: list = []
    write, prepare = grouped_map.write, grouped_map.prepare

    def prepared(conn: psycopg.Connection, *a: object) -> grouped_map.Prepared:
        kept.append((conn.info.backend_pid, prepare(conn, *a)))  # type: ignore[arg-type]
        return kept[-1][1]

    def spy(conn: psycopg.Connection, what: grouped_map.Prepared, fresh: dict) -> None:
        seen.append(conn.info.backend_pid != kept[-1][0])
        write(conn, what, fresh)

    monkeypatch.setattr(grouped_map, "write", spy)
    monkeypatch.setattr(grouped_map, "prepare", prepared)
    return seen, kept


def test_the_map_written_beside_is_the_map_the_run_would_write(
    conn: psycopg.Connection, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refresh's map as the second backend wrote it is, row for row, what the run's own
    connection writes from the same prepared rows; with no second backend, the run writes
    it."""
    _source(conn)
    seen, kept = _writes(monkeypatch)
    code, out = cli_json(dsn, "publish", "w", "--source", "h.ward", "--key", "id", *QI)
    assert code == 0, out
    conn.execute("UPDATE h.ward SET age = age + 1 WHERE id % 9 = 0")
    conn.execute("DELETE FROM h.ward WHERE id % 11 = 0")
    code, out = cli_json(dsn, "refresh", "w")  # a map with old sets and values kept
    assert code == 0, out
    rid = _rid(conn, "w")
    mine = {p: sql.Identifier(f"mine_{p or 'rows'}") for p in (None, "sets", "shown")}
    for p, cols in ((None, composition.COLUMNS), ("sets", composition.SETS),
                    ("shown", composition.SHOWN)):  # fmt: skip
        conn.execute(sql.SQL("CREATE TEMP TABLE {} {}").format(mine[p], cols))
    WRITE(conn, kept[-1][1], mine)
    for p in (None, "sets", "shown"):
        query = "SELECT * FROM {} ORDER BY 1, 2, 3" if p is None else "SELECT * FROM {} ORDER BY 1"
        written = conn.execute(sql.SQL(query).format(composition.table(rid, p))).fetchall()
        assert written == conn.execute(sql.SQL(query).format(mine[p])).fetchall(), p
        assert written or p == "shown"
    assert seen == [True, True] and _next_tables(conn) == []

    def refused(_conn: psycopg.Connection) -> psycopg.Connection:
        raise psycopg.OperationalError("too many clients")

    monkeypatch.setattr(beside, "sibling", refused)
    conn.execute("UPDATE h.ward SET age = age - 1 WHERE id % 9 = 0")
    code, out = cli_json(dsn, "refresh", "w")
    assert code == 0, out
    assert seen[2:] == [False] and len(_map(conn, rid)[0]) == 400 - 37


def test_a_run_that_fails_after_the_map_was_written_leaves_the_old_one(
    conn: psycopg.Connection, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _source(conn)
    code, out = cli_json(dsn, "publish", "w", "--source", "h.ward", "--key", "id", *QI)
    assert code == 0, out
    rid = _rid(conn, "w")
    before, released = _map(conn, rid), conn.execute("SELECT * FROM released.w").fetchall()
    seen, _ = _writes(monkeypatch)
    written = threading.Event()
    write = beside.Beside._write

    def writing(self: beside.Beside) -> None:
        write(self)
        written.set()

    def refuse(*_a: object) -> None:
        assert written.wait(60)  # the map committed beside before the run fails
        raise DbanonError("refused after the map was written")

    monkeypatch.setattr(beside.Beside, "_write", writing)

    monkeypatch.setattr(publish, "compose", refuse)
    conn.execute("DELETE FROM h.ward WHERE id % 5 = 0")
    code, out = cli_json(dsn, "refresh", "w")
    assert code != 0 and "refused after the map" in out["error"], out
    assert seen == [True]  # written and committed beside, then dropped
    assert _map(conn, rid) == before and _next_tables(conn) == []
    assert sorted(conn.execute("SELECT * FROM released.w").fetchall()) == sorted(released)


def test_what_a_killed_run_left_is_dropped_by_the_next_run_and_by_the_drop(
    conn: psycopg.Connection, dsn: str
) -> None:
    _source(conn)
    code, out = cli_json(dsn, "publish", "w", "--source", "h.ward", "--key", "id", *QI)
    assert code == 0, out
    rid = _rid(conn, "w")

    def left() -> None:  # the next map, written and committed beside a run then killed
        with conn.transaction():
            composition.fresh_tables(conn, rid)
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, 'x', 0, NULL, NULL, NULL)").format(
                sql.Identifier("dbanon", f"group_map_{rid}_next")), [rid])  # fmt: skip

    left()
    conn.execute("DELETE FROM h.ward WHERE id % 7 = 0")
    code, out = cli_json(dsn, "refresh", "w")
    assert code == 0, out
    assert _next_tables(conn) == []
    assert "x" not in {r[1] for r in _map(conn, rid)[0]}
    left()
    code, out = cli_json(dsn, "drop", "w", "--yes")
    assert code == 0, out
    assert _next_tables(conn) == []
