"""The run lock is one a consumer cannot take, and it is what serialises runs and drops.

Until now runs serialised on pg_advisory_lock(0x64626E01, hashtext(name)) and grants on the
schema on pg_advisory_xact_lock(0x64626E02, hashtext(schema)): any role that can connect could
take either and make every refresh exit 3 (or stall its swap) indefinitely. The consumer here
holds both old advisory locks, tries every lock it might take on the catalog, and the refresh
goes through anyway."""

from __future__ import annotations

import random
import subprocess
import sys
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from helpers import cli_json, make_table
from psycopg import sql

DX = ["flu", "asthma", "diabetes", "cancer", "gout", "angina"]


@pytest.fixture
def consumer(conn: psycopg.Connection, dsn: str) -> Iterator[str]:
    rng = random.Random(6)
    make_table(
        conn, "h", "ward",
        [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("dx", "text")],
        [(i, rng.randint(20, 79), rng.choice("NSEW"), rng.choice(DX)) for i in range(1, 81)],
    )  # fmt: skip
    role = f"consumer_{uuid.uuid4().hex[:8]}"
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    code, out = cli_json(dsn, "publish", "w", "--source", "h.ward", "--key", "id",
                         "--qi", "age,region", "--sensitive", "dx", "--k", "4",
                         "--algorithm", "mondrian", "--grant", role)  # fmt: skip
    assert code == 0, out
    yield role
    conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def as_role(dsn: str, role: str) -> psycopg.Connection:
    """A session of `role` alone (SET SESSION AUTHORIZATION: no way back to the admin)."""
    c = psycopg.connect(dsn, autocommit=True)
    c.execute(sql.SQL("SET SESSION AUTHORIZATION {}").format(sql.Identifier(role)))
    return c


def test_a_consumer_cannot_block_a_refresh(
    conn: psycopg.Connection, dsn: str, consumer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with as_role(dsn, consumer) as c:
        assert c.execute("SELECT count(*) FROM released.w").fetchone()[0] == 80  # a reader
        # Every advisory lock dbanon ever used, held for the whole test.
        c.execute("SELECT pg_advisory_lock(%s, hashtext('w'))", [0x64626E01])
        c.execute("SELECT pg_advisory_lock(%s, hashtext('released'))", [0x64626E02])
        # What the run lock is now: not the consumer's to take, nor the catalog's tables.
        for attempt in (
            "SELECT FROM dbanon.release WHERE name = 'w' FOR NO KEY UPDATE",
            "SELECT FROM dbanon.release FOR KEY SHARE",
            "LOCK TABLE dbanon.release IN ACCESS SHARE MODE",
            "LOCK TABLE dbanon.run IN ACCESS SHARE MODE",
            "LOCK TABLE pg_catalog.pg_namespace IN SHARE MODE",  # GRANT's RowExclusive
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), c.transaction():
                c.execute(attempt)
        assert c.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        ).fetchone()[0] == 2  # fmt: skip
        # A GRANT that grants nothing (a warning) still holds the schema's catalog row until
        # its transaction ends: PostgreSQL lets any role do that to any schema.
        c.autocommit = False
        c.execute(sql.SQL("GRANT USAGE ON SCHEMA released TO {}").format(
            sql.Identifier(consumer)))  # fmt: skip

        code, out = cli_json(dsn, "refresh", "w")  # no --wait: a busy release would exit 3
        assert code == 0, out
        assert cli_json(dsn, "schedule", "set", "w", "--every", "1 minute")[0] == 0
        code, out = cli_json(dsn, "refresh", "--due", "--force", "--now", "2999-01-01T00:00")
        assert code == 0 and out["results"][0]["outcome"] == "refreshed", out
        # A new grant on the schema is kept waiting, never indefinitely: one line, no change.
        monkeypatch.setattr("dbanon.lifecycle.runs.USAGE_PATIENCE", 1.0)
        code, out = cli_json(dsn, "grant", "w", "pg_monitor")
        assert code == 2 and "another session holds the privileges of schema" in out["error"]
        c.rollback()
        for command in ("grant", "revoke"):
            code, out = cli_json(dsn, command, "w", "pg_monitor")
            assert code == 0, out
        assert c.execute("SELECT count(*) FROM released.w").fetchone()[0] == 80
        c.rollback()
    statuses = [s for (s,) in conn.execute("SELECT status FROM dbanon.run ORDER BY id")]
    assert statuses == ["succeeded"] * 3
    grants = conn.execute("SELECT spec -> 'grants' FROM dbanon.release").fetchone()[0]
    assert grants == [consumer]


HOLDER = """
import sys, time
from dbanon.api import Database
def say(msg):
    if msg.startswith("verifying"):
        print("at", msg, flush=True)
        time.sleep(float(sys.argv[2]))
with Database(sys.argv[1]) as db:
    db.refresh("w", say)
"""


def test_the_run_lock_is_the_catalog_row_and_no_advisory_lock(
    conn: psycopg.Connection, dsn: str, consumer: str
) -> None:
    """While a run holds the release, the lock pg_locks shows is on the catalog, the run trail
    names the run's backend, and a second run exits 3 without leaving a row."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, dsn, "2"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().startswith("at verifying")
    pid = conn.execute("SELECT pid FROM dbanon.run WHERE status = 'running'").fetchone()[0]
    advisory = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s", [pid]
    ).fetchone()[0]
    assert advisory == 0
    code, out = cli_json(dsn, "refresh", "w")
    assert code == 3 and f"backend {pid}" in out["error"], out
    code, out = cli_json(dsn, "grant", "w", "pg_monitor")  # grants take the same lock
    assert code == 3, out
    assert proc.wait(timeout=120) == 0
    statuses = [s for (s,) in conn.execute("SELECT status FROM dbanon.run ORDER BY id")]
    assert statuses == ["succeeded", "succeeded"]  # the busy run left nothing


FIRST = """
import sys, time
from dbanon.api import Database
from dbanon.lifecycle.declare import release_spec
def say(msg):
    if msg.startswith("verifying"):
        print("at", msg, flush=True)
        time.sleep(float(sys.argv[2]))
spec = release_spec("fresh", "h.ward", "id", ["age", "region"], k=4)
with Database(sys.argv[1]) as db:
    db.publish(spec, say)
"""


def test_a_first_publish_holds_its_name_until_it_ends(
    conn: psycopg.Connection, dsn: str, consumer: str
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", FIRST, dsn, "2"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().startswith("at verifying")
    code, out = cli_json(dsn, "publish", "fresh", "--source", "h.ward", "--key", "id",
                         "--qi", "age,region", "--k", "4", "--target", "other.fresh",
                         "--replace")  # fmt: skip
    assert code == 3 and "being published" in out["error"], out
    assert proc.wait(timeout=120) == 0
    rows = conn.execute(
        "SELECT r.target_schema, count(u.*) FROM dbanon.release r "
        "JOIN dbanon.run u ON u.release_id = r.id WHERE r.name = 'fresh' GROUP BY 1"
    ).fetchall()
    assert rows == [("released", 1)]
    assert conn.execute("SELECT to_regnamespace('other')").fetchone()[0] is None


def test_bench_swap_measures_every_refresh(dsn: str) -> None:
    """`dbanon bench swap`, small: one figure per refresh, the lock held within the refresh."""
    code, out = cli_json(dsn, "bench", "swap", "--rows", "2000", "--refreshes", "2")
    assert code == 0, out
    assert len(out["runs"]) == 2 and out["rows"] == 2000
    for run in out["runs"]:
        assert 0 < run["lock_held_seconds"] <= run["refresh_seconds"]
        assert run["reader_queries"] > 0
    assert out["longest_reader_wait_seconds"] == max(
        r["longest_reader_wait_seconds"] for r in out["runs"]
    )
