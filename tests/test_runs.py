"""Releases a DBA can leave running: ownership, one run at a time, kills, swaps, the run trail,
schedules. Concurrency and kills are tested with real processes, never threads."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from helpers import cli_json, make_table, snapshot, stray_builds
from psycopg import sql

from dbanon.api import Database
from dbanon.lifecycle.declare import release_spec

DX = ["flu", "asthma", "diabetes", "cancer", "gout", "angina"]


@pytest.fixture
def ward(conn: psycopg.Connection) -> psycopg.Connection:
    rng = random.Random(8)
    rows = [
        (i, rng.randint(20, 79), rng.choice(["N", "S", "E", "W"]), rng.choice(DX))
        for i in range(1, 401)
    ]
    make_table(
        conn, "h", "ward",
        [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("dx", "text")],
        rows,
    )  # fmt: skip
    return conn


def publish(dsn: str, name: str, *args: str) -> tuple[int, dict]:
    return cli_json(dsn, "publish", name, "--source", "h.ward", "--key", "id",
                    "--qi", "age,region", *args)  # fmt: skip


def statuses(conn: psycopg.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT status FROM dbanon.run ORDER BY id").fetchall()]


def released_relations(conn: psycopg.Connection, schema: str = "released") -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'v') ORDER BY 1",
            [schema],
        ).fetchall()
    ]


# --- items 1 and 2: ownership ------------------------------------------------------------------


def test_a_user_table_named_like_a_build_object_survives(
    ward: psycopg.Connection, dsn: str
) -> None:
    make_table(ward, "ops", "dbanon_build_audit", [("x", "int")], [(1,), (2,)])
    make_table(ward, "ops", "dbanon_build_aud", [("x", "int")], [(3,)])
    for _ in range(2):
        assert publish(dsn, "aud", "--target", "ops.audit", "--k", "5", "--replace")[0] == 0
        assert cli_json(dsn, "refresh", "aud")[0] == 0
    assert ward.execute("SELECT sum(x) FROM ops.dbanon_build_audit").fetchone()[0] == 3
    assert ward.execute("SELECT sum(x) FROM ops.dbanon_build_aud").fetchone()[0] == 3
    assert released_relations(ward, "ops") == ["audit", "dbanon_build_aud", "dbanon_build_audit"]


def test_retargeting_leaves_exactly_one_released_object(ward: psycopg.Connection, dsn: str) -> None:
    role = f"reader_{uuid.uuid4().hex[:8]}"
    ward.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    try:
        assert publish(dsn, "rt", "--k", "5", "--grant", role)[0] == 0
        code, out = publish(dsn, "rt", "--k", "5", "--target", "other.rt2", "--replace")
        assert code == 0, out
        assert released_relations(ward) == [] and released_relations(ward, "other") == ["rt2"]
        ward.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
        assert ward.execute("SELECT count(*) FROM other.rt2").fetchone()[0] == 400
        ward.execute("RESET ROLE")
    finally:
        ward.execute("RESET ROLE")
        ward.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        ward.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


# --- item 3: one run at a time, with processes ---------------------------------------------------


def _refresh_loop(dsn: str, times: int, barrier: mp.synchronize.Barrier) -> list[str]:
    outcomes = []
    with Database(dsn) as db:
        for _ in range(times):
            barrier.wait(timeout=60)
            db.refresh("race", wait=60)
            outcomes.append("ok")
    return outcomes


def _publish_loop(
    dsn: str, who: str, role: str, times: int, barrier: mp.synchronize.Barrier
) -> None:
    with Database(dsn) as db:
        for i in range(times):
            spec = release_spec(
                f"{who}{i}", "h.ward", "id", ["age", "region"], k=5,
                target=f"fresh{i}.{who}", grants=[role],
            )  # fmt: skip
            barrier.wait(timeout=60)
            db.publish(spec)


def _run_pair(target, args_a: tuple, args_b: tuple) -> None:  # noqa: ANN001
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=target, args=(*a, barrier)) for a in (args_a, args_b)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0, 0]


def test_concurrent_refreshes_and_first_publishes_end_cleanly(
    ward: psycopg.Connection, dsn: str
) -> None:
    times = 20
    assert publish(dsn, "race", "--k", "5")[0] == 0
    _run_pair(_refresh_loop, (dsn, times), (dsn, times))
    assert statuses(ward) == ["succeeded"] * (1 + 2 * times)
    assert released_relations(ward) == ["race"]

    role = f"reader_{uuid.uuid4().hex[:8]}"
    ward.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    try:
        _run_pair(_publish_loop, (dsn, "a", role, times), (dsn, "b", role, times))
        for i in range(times):
            assert released_relations(ward, f"fresh{i}") == ["a", "b"]
            usage = "SELECT has_schema_privilege(%s, %s, 'USAGE')"
            assert ward.execute(usage, [role, f"fresh{i}"]).fetchone()[0]
    finally:
        ward.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        ward.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_busy_release_says_so_with_exit_3(ward: psycopg.Connection, dsn: str) -> None:
    assert publish(dsn, "busy", "--k", "5")[0] == 0
    with psycopg.connect(dsn) as other:  # another dbanon session holds the run lock
        other.execute("SELECT FROM dbanon.release WHERE name = 'busy' FOR NO KEY UPDATE")
        code, out = cli_json(dsn, "refresh", "busy")
        assert code == 3 and "being published, refreshed or changed by" in out["error"]
        started = time.monotonic()
        threading.Timer(1.0, other.commit).start()
        code, out = cli_json(dsn, "refresh", "busy", "--wait", "20")
        assert code == 0 and time.monotonic() - started >= 0.9, out


# --- item 3 / 5: kills ---------------------------------------------------------------------------

KILLER = """
import os, sys, time
from dbanon.api import Database
phase = sys.argv[2]
def say(msg):
    if msg.startswith(phase):
        print("at", msg, flush=True)
        time.sleep(600)
with Database(sys.argv[1]) as db:
    db.refresh("victim", say)
"""


@pytest.mark.parametrize(
    "phase",
    ["validating", "streaming", "clustering", "materialising", "verifying", "swapping",
     "recording"],
)  # fmt: skip
def test_a_killed_run_changes_nothing_and_is_marked_abandoned(
    ward: psycopg.Connection, dsn: str, phase: str
) -> None:
    assert publish(dsn, "victim", "--k", "5")[0] == 0
    before = snapshot(ward)["relations"]["released.victim"]
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLER, dsn, phase], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().startswith("at " + phase)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    after = snapshot(ward)
    assert after["relations"]["released.victim"] == before
    assert not stray_builds(ward)
    assert statuses(ward) == ["succeeded", "running"]
    assert cli_json(dsn, "refresh", "victim", "--wait", "30")[0] == 0
    assert statuses(ward) == ["succeeded", "abandoned", "succeeded"]
    # a next map the killed run wrote beside it (dbanon.setlogic.beside) is gone with that run
    assert not ward.execute("SELECT relname FROM pg_class WHERE relname LIKE "
                            "'group\\_map\\_%\\_next'").fetchall()  # fmt: skip


# --- item 4: swaps that do not stall readers -----------------------------------------------------


def test_the_swap_waits_for_a_reader_without_stalling_new_ones(
    ward: psycopg.Connection, dsn: str
) -> None:
    assert publish(dsn, "busyread", "--k", "5")[0] == 0
    with psycopg.connect(dsn) as reader:
        reader.execute("SELECT count(*) FROM released.busyread").fetchone()  # holds its lock
        result: dict = {}

        def refresh() -> None:
            result["out"] = cli_json(dsn, "refresh", "busyread")

        worker = threading.Thread(target=refresh)
        worker.start()
        time.sleep(3)
        assert worker.is_alive()  # waiting for the reader
        started = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as newcomer:
            newcomer.execute("SET statement_timeout = '10s'")
            assert newcomer.execute("SELECT count(*) FROM released.busyread").fetchone()[0] == 400
        assert time.monotonic() - started < 5  # queued behind one attempt at most
        reader.commit()
        worker.join(timeout=60)
    code, out = result["out"]
    assert code == 0, out
    rep = cli_json(dsn, "report", "busyread")[1]
    assert rep["method_metrics"]["swap_waited_seconds"] >= 2


# --- item 5: the trail ---------------------------------------------------------------------------


def test_every_error_is_a_failed_run(ward: psycopg.Connection, dsn: str) -> None:
    assert publish(dsn, "dep", "--k", "5")[0] == 0
    # An event trigger of the DBA's refuses the build's DDL: a PostgreSQL error.
    ward.execute("CREATE FUNCTION h.no_ddl() RETURNS event_trigger LANGUAGE plpgsql AS "
                 "$$BEGIN RAISE EXCEPTION 'no DDL during the audit'; END$$")
    ward.execute("CREATE EVENT TRIGGER no_ddl ON ddl_command_start EXECUTE FUNCTION h.no_ddl()")
    code, out = cli_json(dsn, "refresh", "dep")
    ward.execute("DROP EVENT TRIGGER no_ddl")
    assert code == 2 and "PostgreSQL" in out["error"]
    assert statuses(ward) == ["succeeded", "failed"]
    error = ward.execute("SELECT error FROM dbanon.run ORDER BY id DESC").fetchone()[0]
    assert "no DDL during the audit" in error
    assert ward.execute("SELECT count(*) FROM released.dep").fetchone()[0] == 400


def test_fingerprint_and_rows_come_from_the_released_snapshot(
    ward: psycopg.Connection, dsn: str
) -> None:
    assert publish(dsn, "snap", "--k", "5")[0] == 0
    code, out = cli_json(dsn, "refresh", "snap")
    rows, released, fp = ward.execute(
        "SELECT source_rows, released_rows, source_fingerprint FROM dbanon.run ORDER BY id DESC"
    ).fetchone()
    assert rows == released == 400 and fp.startswith("400:")


# --- item 6: schedules ---------------------------------------------------------------------------


def test_refresh_due_follows_the_schedule(ward: psycopg.Connection, dsn: str) -> None:
    assert publish(dsn, "daily", "--k", "5")[0] == 0
    assert publish(dsn, "nightly", "--k", "5")[0] == 0
    assert publish(dsn, "manual", "--k", "5")[0] == 0
    assert cli_json(dsn, "schedule", "daily", "--every", "6 hours")[0] == 0
    assert cli_json(dsn, "schedule", "nightly", "--cron", "0 3 1 1 *")[0] == 0
    code, out = cli_json(dsn, "schedule", "manual", "--every", "soon")
    assert code == 2 and "is not an interval" in out["error"]
    code, out = cli_json(dsn, "schedule", "manual", "--cron", "at three")
    assert code == 2 and "is not a cron expression" in out["error"]

    now = datetime.now(timezone.utc)

    def due(at: datetime, *extra: str) -> dict[str, str]:
        code, out = cli_json(dsn, "refresh", "--due", "--now", at.isoformat(), *extra)
        assert code == 0, out
        return {r["release"]: r["outcome"] for r in out["results"]}

    # Both ran at publish. The cron one is due on 1 January only (the clock says November).
    assert due(now + timedelta(hours=1)) == {"daily": "not due", "nightly": "not due"}
    ward.execute("UPDATE h.ward SET age = age + 1 WHERE id <= 10")
    assert due(now + timedelta(hours=7)) == {"daily": "refreshed", "nightly": "not due"}
    later = now + timedelta(days=60)  # past 1 January
    assert due(later) == {"daily": "skipped", "nightly": "refreshed"}
    assert due(later + timedelta(hours=7), "--force") == {
        "daily": "refreshed",
        "nightly": "refreshed",
    }
    code, listed = cli_json(dsn, "schedule", "list")
    assert {s["release"] for s in listed["schedules"]} == {"daily", "nightly"}
    runs = dict(
        ward.execute(
            "SELECT r.name, array_agg(u.status ORDER BY u.id) FROM dbanon.run u "
            "JOIN dbanon.release r ON r.id = u.release_id GROUP BY r.name"
        ).fetchall()
    )
    assert runs["daily"] == ["succeeded", "succeeded", "skipped", "succeeded"]
    assert runs["manual"] == ["succeeded"]


def test_schedule_install_prints_valid_units(dsn: str, tmp_path: Path) -> None:
    code, out = cli_json(dsn, "schedule", "install", "--cron")
    assert code == 0
    fields = out["cron"].split()
    assert fields[:5] == ["*/5", "*", "*", "*", "*"] and "refresh" in fields and "--due" in fields
    code, out = cli_json(dsn, "schedule", "install", "--systemd", "--write", str(tmp_path))
    assert code == 0 and len(out["written"]) == 2
    service = (tmp_path / "dbanon-refresh.service").read_text()
    assert "ExecStart=" in service and "--due" in service
    assert "OnCalendar=*:0/5" in (tmp_path / "dbanon-refresh.timer").read_text()
    analyze = shutil.which("systemd-analyze")
    if analyze:
        done = subprocess.run(
            [analyze, "verify", str(tmp_path / "dbanon-refresh.timer")],
            capture_output=True, text=True,
        )  # fmt: skip
        assert "error" not in done.stderr.lower(), done.stderr


# --- item 8: smaller holes -----------------------------------------------------------------------


@pytest.mark.parametrize("schema", ["dbanon", "public", "information_schema", "pg_catalog"])
def test_reserved_target_schemas_are_refused(
    ward: psycopg.Connection, dsn: str, schema: str
) -> None:
    before = snapshot(ward)
    code, out = publish(dsn, "bad", "--k", "5", "--target", f"{schema}.x")
    assert code == 2 and f"cannot go to schema {schema}:" in out["error"]
    assert snapshot(ward) == before


def test_a_qi_whose_type_changed_is_refused_on_refresh(ward: psycopg.Connection, dsn: str) -> None:
    assert publish(dsn, "typed", "--k", "5")[0] == 0
    ward.execute("ALTER TABLE h.ward ALTER COLUMN age TYPE text")
    code, out = cli_json(dsn, "refresh", "typed")
    assert code == 2 and "age was integer, is text now" in out["error"]


def test_demo_reload_keeps_what_depends_on_the_demo_table(
    dsn: str, conn: psycopg.Connection
) -> None:
    with Database(dsn) as db:
        from dbanon.demo import load_adult

        load_adult(db)
        conn.execute("CREATE VIEW demo.mine AS SELECT count(*) AS n FROM demo.adult")
        load_adult(db)
    assert conn.execute("SELECT n FROM demo.mine").fetchone()[0] == 45222


def test_refused_runs_do_not_show_as_json_garbage(ward: psycopg.Connection, dsn: str) -> None:
    """`refresh` of a release that does not exist: one JSON error, exit 2."""
    code, out = cli_json(dsn, "refresh", "nope")
    assert code == 2 and json.dumps(out).startswith('{"error"')
