"""Noise that keeps a column's shape (issue 34): `--integral` releases integer columns as whole
numbers of their own type, `--clamp` keeps values within the source's range, and `--size` is
bounded. Checked on the released table by plain SQL, the rows paired through the private map
(the test's only way to pair them; a consumer has none)."""

from __future__ import annotations

import random

import psycopg
import pytest
from helpers import cli, cli_json, make_table, noise_map, snapshot
from psycopg import sql

ROWS = 2_000
CHANGED = range(1, 41)
SHAPED = ("--source", "ops.calls", "--key", "id", "--columns", "seconds,queue,score",
          "--algorithm", "noise", "--size", "0.2", "--integral", "--clamp")  # fmt: skip


@pytest.fixture
def calls(conn: psycopg.Connection) -> psycopg.Connection:
    """Call durations (bigint seconds, many near 0), queue positions (smallint) and a score."""
    rng = random.Random(34)
    rows = [(i, int(rng.expovariate(1 / 120)), rng.randint(1, 50), round(rng.uniform(0, 1), 3))
            for i in range(1, ROWS + 1)]  # fmt: skip
    cols = [("id", "int PRIMARY KEY"), ("seconds", "bigint"), ("queue", "smallint"),
            ("score", "float8")]  # fmt: skip
    make_table(conn, "ops", "calls", cols, rows)
    return conn


def released(conn: psycopg.Connection) -> dict[int, tuple[float, float, float]]:
    rows = conn.execute(sql.SQL(
        """SELECT m.key::int, r.seconds, r.queue, r.score FROM released.c r
           JOIN {} m ON m.row_id = r.dbanon_row""").format(noise_map(conn, "c")),
    ).fetchall()
    return {k: (s, q, x) for k, s, q, x in rows}


def types(conn: psycopg.Connection, rel: str) -> dict[str, str]:
    return dict(conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped", [rel]).fetchall())


def test_integral_and_clamped_noise_keeps_types_range_and_per_row_noise(
    calls: psycopg.Connection, dsn: str
) -> None:
    low, high = calls.execute("SELECT min(seconds), max(seconds) FROM ops.calls").fetchone()
    code, out = cli_json(dsn, "publish", "c", *SHAPED)
    assert code == 0, out
    assert types(calls, "released.c") == {"dbanon_row": "bigint", "seconds": "bigint",
                                          "queue": "smallint", "score": "double precision"}
    lo, hi, qlo, qhi, at_bounds = calls.execute(
        "SELECT min(seconds), max(seconds), min(queue), max(queue), "
        "count(*) FILTER (WHERE seconds IN (%s, %s)) FROM released.c", [low, high]).fetchone()
    # Clamped: no negative duration, nothing past the source's bounds. The bound a value was
    # clamped to shows exactly: 0 (many calls are that short) and both ends of the queue (40
    # rows per position); whether some noisy duration passes the longest one depends on the
    # secret, so that bound is only never exceeded.
    assert lo == low and hi <= high and (qlo, qhi) == (1, 50)
    clamped = cli_json(dsn, "report", "c")[1]["method_metrics"]["clamped"]
    assert 0 < clamped["seconds"] <= at_bounds  # what the release shows at its bounds
    # A row keeps its noise: an unchanged row comes back as it was, a changed one moves by its
    # change exactly (whole numbers, away from the bounds), whatever the rounding.
    first = released(calls)
    moved = {k for (k,) in calls.execute(
        "SELECT id FROM ops.calls WHERE id = ANY(%s) AND queue < 20", [list(CHANGED)])}
    calls.execute("UPDATE ops.calls SET queue = queue + 3 WHERE id = ANY(%s)", [list(moved)])
    code, out = cli_json(dsn, "refresh", "c")
    assert code == 0, out
    second = released(calls)
    assert all(second[k] == first[k] for k in first if k not in moved)
    inside = [k for k in moved if first[k][1] > 1 and second[k][1] < 50]
    assert inside and all(second[k][1] - first[k][1] == 3 for k in inside)


def test_size_is_bounded(calls: psycopg.Connection, dsn: str) -> None:
    before = snapshot(calls)
    result = cli(dsn, "publish", "c", "--source", "ops.calls", "--key", "id", "--columns",
                 "seconds,queue", "--algorithm", "noise", "--size", "1e30")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--size must be in (0, 1], got" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert snapshot(calls) == before
