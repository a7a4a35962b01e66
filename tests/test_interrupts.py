"""SIGINT and SIGTERM at each phase of a publish and a refresh (issue 19, item 8): one line,
exit 130 or 143, no traceback, and the database as promised: before the swap commits the
previous release is intact and the run is recorded failed ("interrupted by SIGINT"); after it,
the new release is in place, recorded succeeded, and the line says so.

A real subprocess is signalled while DBANON_PHASES holds it at a named phase (the progress
messages' first words: validating, streaming, clustering, materialising, verifying, swapping,
recording; and committed, just after the swap's commit). Checks read the catalog and the released
relation with plain SQL.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.conftest import TEMPLATE, _make_template
from tests.helpers import cli_json, make_table

DBANON = str(Path(sys.executable).parent / "dbanon")
ROWS = 2000
BEFORE_COMMIT = ["validating", "streaming", "clustering", "materialising", "verifying",
                 "swapping", "recording"]  # fmt: skip
CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


@pytest.fixture
def db(embedded_dsn: str) -> Iterator[str]:
    """A fresh catalogued database on the embedded server, with a 3,000-row source."""
    _make_template(embedded_dsn)
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(embedded_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(TEMPLATE)
            )
        )
    dsn = psycopg.conninfo.make_conninfo(embedded_dsn, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_table(
            conn, "s", "t", [("id", "int"), ("age", "int"), ("zip", "text")],
            [(i, 20 + i % 50, f"z{i % 37}") for i in range(ROWS)],
        )  # fmt: skip
    try:
        yield dsn
    finally:
        with psycopg.connect(embedded_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


PUBLISH = ["publish", "r", "--source", "s.t", "--key", "id", "--qi", "age,zip", "--k", "5",
           "--algorithm", "kmember"]  # fmt: skip


def signalled(dsn: str, args: list[str], at: str, sig: int, pause: float = 20.0,
              after: float = 0.0, also: str = "") -> tuple[int, list[str]]:  # fmt: skip
    """Run `dbanon ARGS`, send `sig` once it reaches phase `at` (plus `after` seconds); return
    its exit code and its stderr lines (the test hook's own marker taken out). `also`: more
    phases to mark (NAME:0,...)."""
    phases = f"{at}:{pause}" + (f",{also}" if also else "")
    env = {**os.environ, "DBANON_DSN": dsn, "DBANON_PHASES": phases}
    proc = subprocess.Popen(
        [DBANON, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    marker = f"dbanon: phase {at}"
    deadline = time.monotonic() + 90
    seen = []
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 1.0)
        if ready:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line.rstrip("\n"))
            if line.startswith(marker):
                break
    assert seen and seen[-1] == marker, f"never reached phase {at}: {seen}"
    time.sleep(after)
    proc.send_signal(sig)
    _, rest = proc.communicate(timeout=90)
    lines = [x for x in seen[:-1] + rest.splitlines() if x.strip()]
    return proc.returncode, lines


def digest(dsn: str) -> tuple[int, str]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT count(*), md5(string_agg(t::text, '|' ORDER BY t::text)) FROM released.r t"
        ).fetchone()


def latest_run(dsn: str) -> tuple[str, str | None]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT u.status, u.error FROM dbanon.run u JOIN dbanon.release r "
            "ON r.id = u.release_id WHERE r.name = 'r' ORDER BY u.id DESC LIMIT 1"
        ).fetchone()


def relations(dsn: str) -> list[str]:
    """Every relation in the released schema: a cut build must leave none behind."""
    with psycopg.connect(dsn) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'released' ORDER BY 1"
            )
        ]


def churn(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO s.t SELECT i, 20 + i %% 50, 'z' || (i %% 37) "
            "FROM generate_series(%s::int, %s::int) i",
            [ROWS, ROWS + 199],
        )


CASES = [
    ("validating", signal.SIGINT),
    ("clustering", signal.SIGTERM),
    ("verifying", signal.SIGINT),
    ("swapping", signal.SIGTERM),
    ("recording", signal.SIGINT),
]
SLOW_CASES = [
    (p, s) for p in BEFORE_COMMIT for s in (signal.SIGINT, signal.SIGTERM) if (p, s) not in CASES
]


def _refresh_cut(db: str, at: str, sig: int, again: bool = False) -> None:
    assert cli_json(db, "publish", *PUBLISH[1:])[0] == 0
    churn(db)
    before, rels = digest(db), relations(db)
    code, lines = signalled(db, ["refresh", "r"], at, sig)
    assert code == CODES[sig], lines
    assert lines == ["interrupted; the previous release is kept"], lines
    assert digest(db) == before and relations(db) == rels
    assert latest_run(db) == ("failed", f"interrupted by {signal.Signals(sig).name}")
    if again:
        code, out = cli_json(db, "refresh", "r")  # the lock went with the process
        assert code == 0, out
        assert digest(db)[0] == ROWS + 200


@pytest.mark.parametrize(("at", "sig"), CASES, ids=[f"{p}-{s.name}" for p, s in CASES])
def test_refresh_cut_before_the_swap_keeps_the_release(db: str, at: str, sig: int) -> None:
    _refresh_cut(db, at, sig, again=at == "swapping")


@pytest.mark.slow
@pytest.mark.parametrize(("at", "sig"), SLOW_CASES, ids=[f"{p}-{s.name}" for p, s in SLOW_CASES])
def test_refresh_cut_at_every_other_phase(db: str, at: str, sig: int) -> None:
    _refresh_cut(db, at, sig)


@pytest.mark.parametrize(
    "sig",
    [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
    ids=["INT", "TERM"],
)
def test_refresh_cut_after_the_commit_says_it_published(db: str, sig: int) -> None:
    assert cli_json(db, "publish", *PUBLISH[1:])[0] == 0
    churn(db)
    code, lines = signalled(db, ["refresh", "r"], "committed", sig, pause=1)
    assert code == CODES[sig]
    assert lines[-1] == "interrupted after publishing 'r'" and len(lines) == 1, lines
    assert latest_run(db) == ("succeeded", None)
    assert digest(db)[0] == ROWS + 200


FIRST = [("streaming", signal.SIGINT)]
FIRST_SLOW = [("validating", signal.SIGTERM), ("clustering", signal.SIGINT),
              ("verifying", signal.SIGTERM), ("swapping", signal.SIGTERM),
              ("recording", signal.SIGINT)]  # fmt: skip


@pytest.mark.parametrize(
    ("at", "sig"),
    [*FIRST, *(pytest.param(*c, marks=pytest.mark.slow) for c in FIRST_SLOW)],
    ids=[f"{p}-{s.name}" for p, s in FIRST + FIRST_SLOW],
)
def test_first_publish_cut_leaves_nothing(db: str, at: str, sig: int) -> None:
    code, lines = signalled(db, PUBLISH, at, sig)
    # Issue 34: it said "the previous release is kept", of a release that had none.
    assert code == CODES[sig] and lines == [
        "interrupted; nothing was published ('r' had no release before)"], lines
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM dbanon.release").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM dbanon.run").fetchone()[0] == 0
    assert relations(db) == []


@pytest.mark.slow
def test_first_publish_cut_after_the_commit_says_it_published(db: str) -> None:
    code, lines = signalled(db, PUBLISH, "committed", signal.SIGTERM, pause=1)
    assert code == 143 and lines == ["interrupted after publishing 'r'"], lines
    assert latest_run(db) == ("succeeded", None) and digest(db)[0] == ROWS


def test_signal_inside_numba_clustering_is_one_line(db: str) -> None:
    """Signalled while k-member's compiled loop runs (40,000 distinct rows: about a second of
    numba), not at a pause; the run is known to be inside it when no later phase was marked."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE s.big AS SELECT i AS id, i % 97 AS age, i * 7919 % 100003 AS zip "
            "FROM generate_series(1, 40000) i"
        )
    args = ["publish", "r", "--source", "s.big", *PUBLISH[4:]]
    code, lines = signalled(db, args, "clustering", signal.SIGINT, pause=0, after=0.15,
                            also="materialising:0")  # fmt: skip
    if "dbanon: phase materialising" in lines:
        pytest.skip("the clustering finished before the signal")
    # 'r' is published here for the first time: nothing was (issue 34's first-publish line)
    assert code == 130 and lines == ["interrupted; nothing was published ('r' had no release "
                                     "before)"], lines
    assert relations(db) == []


def test_due_refresh_stops_after_the_release_it_published(db: str) -> None:
    """`refresh --due`: a signal after the first release's commit is held, reported, and stops
    the second release at its first phase."""
    for name in ("a", "b"):
        assert cli_json(db, "publish", name, *PUBLISH[2:])[0] == 0
        assert cli_json(db, "schedule", name, "--every", "1 hour")[0] == 0
    churn(db)
    with psycopg.connect(db) as conn:
        conn.execute("UPDATE dbanon.run SET started_at = started_at - interval '2 hours'")
    code, lines = signalled(db, ["refresh", "--due"], "committed", signal.SIGTERM, pause=1)
    assert code == 143 and lines == ["interrupted after publishing 'a'"], lines
    with psycopg.connect(db) as conn:
        status = dict(
            conn.execute(
                "SELECT r.name, (SELECT u.status || coalesce(': ' || u.error, '') "
                "FROM dbanon.run u WHERE u.release_id = r.id ORDER BY u.id DESC LIMIT 1) "
                "FROM dbanon.release r"
            ).fetchall()
        )
    assert status == {"a": "succeeded", "b": "failed: interrupted by SIGTERM"}


def test_an_interrupted_check_says_only_that(db: str) -> None:
    """An audit makes no release: its interrupt is one line that claims nothing about one."""
    with psycopg.connect(db, autocommit=True) as conn:  # about 10 s to read: 5 ms a row
        conn.execute("CREATE VIEW s.slow AS SELECT * FROM s.t WHERE pg_sleep(0.005)::text = ''")
    env = {**os.environ, "DBANON_DSN": db}
    args = [DBANON, "check", "s.slow", "--qi", "age,zip", "--k", "5"]
    pipe = subprocess.PIPE
    proc = subprocess.Popen(args, env=env, stdout=pipe, stderr=pipe, text=True)
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.splitlines() == ["interrupted"], err
