"""No deadlock between runs of the lifecycle, tested with real processes (never threads).

Before revision 0010, two refreshes of different grouping releases deadlocked every time: each
read the partitioned group map (AccessShare on its parent) and then dropped its own partition
(AccessExclusive on that parent). Overlapping `refresh --due` runs met the same way, and `drop`
took no run lock at all. Every run here must end, and end with a truthful row."""

from __future__ import annotations

import json
import multiprocessing as mp
import random
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from helpers import cli_json, make_table
from psycopg import sql

from dbanon.api import Database

DX = ["flu", "asthma", "diabetes", "cancer", "gout", "angina"]
NAMES = ("a", "b", "c", "d")
ROUNDS = 2  # of two overlapping `refresh --due`


def _person(rng: random.Random, i: int) -> tuple:
    return (i, rng.randint(20, 79), rng.choice(["N", "S", "E", "W"]), rng.choice(DX))


@pytest.fixture
def wards(conn: psycopg.Connection, dsn: str) -> psycopg.Connection:
    """Four tiny grouping releases (mondrian: each keeps a group map) of one source, granted
    to one role in one schema, so their runs share everything they can share."""
    rng = random.Random(22)
    make_table(
        conn, "h", "ward",
        [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("dx", "text")],
        [_person(rng, i) for i in range(1, 81)],
    )  # fmt: skip
    role = f"reader_{uuid.uuid4().hex[:8]}"
    conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    for name in NAMES:
        code, out = cli_json(dsn, "publish", name, "--source", "h.ward", "--key", "id",
                             "--qi", "age,region", "--sensitive", "dx", "--k", "4",
                             "--algorithm", "mondrian", "--grant", role)  # fmt: skip
        assert code == 0, out
    yield conn
    conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def runs_of(conn: psycopg.Connection) -> dict[str, list[str]]:
    rows = conn.execute(
        "SELECT r.name, u.status FROM dbanon.run u JOIN dbanon.release r ON r.id = u.release_id "
        "ORDER BY u.id"
    ).fetchall()
    out: dict[str, list[str]] = {}
    for name, status in rows:
        out.setdefault(name, []).append(status)
    return out


def _refresh_loop(dsn: str, name: str, times: int, barrier: mp.synchronize.Barrier) -> None:
    with Database(dsn) as db:
        for _ in range(times):
            barrier.wait(timeout=120)
            db.refresh(name)  # no --wait: nothing but its own release may hold it up


@pytest.mark.parametrize("times", [pytest.param(20, marks=pytest.mark.slow), 5])  # 5: for CI
def test_20_concurrent_pairs_of_refreshes_of_different_releases(
    wards: psycopg.Connection, dsn: str, times: int
) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_refresh_loop, args=(dsn, n, times, barrier)) for n in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
    assert [p.exitcode for p in procs] == [0, 0]
    trail = runs_of(wards)
    assert trail["a"] == ["succeeded"] * (1 + times)
    assert trail["b"] == ["succeeded"] * (1 + times)


def _due(dsn: str, now: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dbanon", "--dsn", dsn, "--json", "refresh", "--due", "--now",
         now],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_two_overlapping_refresh_due_on_changed_sources(
    wards: psycopg.Connection, dsn: str
) -> None:
    for name in NAMES:
        assert cli_json(dsn, "schedule", "set", name, "--every", "1 minute")[0] == 0
    rng = random.Random(5)
    next_id = 81
    when = datetime.now(timezone.utc)
    for _ in range(ROUNDS):
        rows = [_person(rng, i) for i in range(next_id, next_id + 8)]  # joiners: a change
        next_id += 8
        with wards.transaction():
            wards.cursor().executemany("INSERT INTO h.ward VALUES (%s, %s, %s, %s)", rows)
        when += timedelta(hours=1)
        procs = [_due(dsn, when.isoformat()) for _ in range(2)]
        outs = [p.communicate(timeout=600) for p in procs]
        for p, (stdout, stderr) in zip(procs, outs, strict=True):
            assert p.returncode == 0, (stdout, stderr)
        outcomes: dict[str, list[str]] = {}
        for stdout, _ in outs:
            for r in json.loads(stdout)["results"]:
                outcomes.setdefault(r["release"], []).append(r["outcome"])
        for name in NAMES:  # one refreshed it; the other found it busy, or done and skipped
            assert sorted(outcomes[name]) in (["busy", "refreshed"], ["refreshed", "skipped"],
                                              ["not due", "refreshed"]), outcomes  # fmt: skip
    trail = runs_of(wards)
    for name in NAMES:
        assert set(trail[name]) <= {"succeeded", "skipped"}, trail
        assert trail[name].count("succeeded") == 1 + ROUNDS, trail


PAUSED_REFRESH = """
import sys, time
from dbanon.api import Database
def say(msg):
    if msg.startswith("verifying"):
        print("at", msg, flush=True)
        time.sleep(float(sys.argv[3]))
with Database(sys.argv[1]) as db:
    db.refresh(sys.argv[2], say)
print("done", flush=True)
"""


def test_drop_during_a_refresh_waits_for_it_or_says_busy(
    wards: psycopg.Connection, dsn: str
) -> None:
    rid = wards.execute("SELECT id FROM dbanon.release WHERE name = 'a'").fetchone()[0]
    refresh = subprocess.Popen(
        [sys.executable, "-c", PAUSED_REFRESH, dsn, "a", "3"], stdout=subprocess.PIPE, text=True
    )
    assert refresh.stdout.readline().startswith("at verifying")
    code, out = cli_json(dsn, "drop", "a", "--yes")  # the run holds the release: exit 3
    assert code == 3 and "being published, refreshed or changed" in out["error"], out
    assert runs_of(wards)["a"] == ["succeeded", "running"]
    started = time.monotonic()
    code, out = cli_json(dsn, "drop", "a", "--yes", "--wait", "60")
    assert code == 0, out
    assert time.monotonic() - started > 0.5  # it waited for the refresh to commit
    assert refresh.wait(timeout=60) == 0
    assert out["dropped"] == ["released.a"]
    gone = wards.execute(
        "SELECT to_regclass('released.a'), to_regclass(%s), "
        "(SELECT count(*) FROM dbanon.run WHERE release_id = %s)",
        [f"dbanon.group_map_{rid}", rid],
    ).fetchone()
    assert gone == (None, None, 0)
    # The other releases and their maps are untouched.
    assert sorted(runs_of(wards)) == ["b", "c", "d"]


def _drop_or_refresh(dsn: str, name: str, drop: bool, barrier: mp.synchronize.Barrier) -> None:
    from dbanon.lifecycle.runs import Busy

    with Database(dsn) as db:
        barrier.wait(timeout=120)
        try:
            db.drop(name, wait=60) if drop else db.refresh(name, wait=60)
        except Busy:
            raise
        except Exception as e:  # a refresh that came second finds the release gone
            if drop or "does not exist" not in str(e):
                raise


def test_drops_racing_refreshes_of_other_releases_and_their_own(
    wards: psycopg.Connection, dsn: str
) -> None:
    """A drop of one release while another is refreshed, and while its own refresh starts."""
    ctx = mp.get_context("spawn")
    for drop_name, refresh_name in (("c", "b"), ("d", "d")):
        barrier = ctx.Barrier(2)
        procs = [
            ctx.Process(target=_drop_or_refresh, args=(dsn, drop_name, True, barrier)),
            ctx.Process(target=_drop_or_refresh, args=(dsn, refresh_name, False, barrier)),
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=300)
        assert [p.exitcode for p in procs] == [0, 0]
    trail = runs_of(wards)
    assert sorted(trail) == ["a", "b"]
    assert trail["b"] == ["succeeded", "succeeded"]
    assert "running" not in sum(trail.values(), [])
