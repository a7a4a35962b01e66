"""`dbanon bench swap`: how long readers of a release wait while it is refreshed.

A refresh swaps its new relations in under an exclusive lock on the previous ones: every query
of the release that arrives meanwhile waits until the run commits. The lifecycle does all it
can before that lock (build, checks, metrics, source fingerprint, group map), so readers should
wait only for the drop, the renames and the commit.

The bench publishes a grouping release (Mondrian, k=5, with a sensitive column: its private
group map is rewritten at every run, the worst case) of a generated table of N rows (schema
dbanon_bench_swap, made once per size), then refreshes it R times while a reader process runs
`SELECT count(*) FROM` a one-row sample of the release in a loop on its own connection, with no
other transaction open. Figures: per refresh, its seconds, how long it held the lock (from
"swapping" to the refresh's return: the drops, renames, the record and the commit) and the
longest single reader query that overlapped it; the reader's median query time with no
refresh running, for scale.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from typing import Any

import psycopg
from psycopg import sql

SCHEMA = "dbanon_bench_swap"
RELEASE = "dbanon_bench_swap"
TARGET = f"{SCHEMA}_out.{RELEASE}"


def _source(conn: psycopg.Connection, rows: int) -> str:
    """The generated table of `rows` rows (made once, kept): 4 QIs and a diagnosis."""
    name = f"people_{rows}"
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(SCHEMA)))
    conn.execute(
        sql.SQL(
            """CREATE TABLE IF NOT EXISTS {} AS
               SELECT g AS id, 18 + (hashint4(g) & 65535) % 73 AS age,
                      (hashint4(g + 1) & 65535) % 2 AS sex,
                      10000 + (hashint4(g + 2) & 65535) % 900 AS zip,
                      (hashint4(g + 3) & 65535) % 16 AS education,
                      (hashint4(g + 6) & 65535) % 14 AS dx
               FROM generate_series(1, {}) g"""
        ).format(sql.Identifier(SCHEMA, name), sql.Literal(rows))
    )
    conn.execute(
        sql.SQL("ALTER TABLE {} DROP CONSTRAINT IF EXISTS {}").format(
            sql.Identifier(SCHEMA, name), sql.Identifier(f"{name}_pkey")
        )
    )
    conn.execute(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY (id)").format(
            sql.Identifier(SCHEMA, name), sql.Identifier(f"{name}_pkey")
        )
    )
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(SCHEMA, name)))
    conn.commit()
    return f"{SCHEMA}.{name}"


def _reader(dsn: str, ready: Any, stop: Any, out: Any) -> None:
    """Query the release in a loop; report (started, seconds) of every query."""
    samples = []
    with psycopg.connect(dsn, autocommit=True) as c:
        query = sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {} LIMIT 1) s").format(
            sql.Identifier(*TARGET.split("."))
        )
        while not stop.is_set():
            started = time.time()
            c.execute(query).fetchone()
            samples.append((started, time.time() - started))
            ready.set()
            time.sleep(0.002)
    out.put(samples)


def bench_swap(dsn: str, rows: int = 200_000, refreshes: int = 10) -> dict[str, Any]:
    """Publish, then refresh `refreshes` times with a reader running; the figures above."""
    from dbanon.api import Database
    from dbanon.lifecycle.declare import release_spec

    with Database(dsn) as db:
        source = _source(db.conn, rows)
        spec = release_spec(
            RELEASE, source, "id", ["age", "sex", "zip", "education"], sensitive=["dx"],
            method="mondrian", k=5, target=TARGET,
        )  # fmt: skip
        db.publish(spec, replace=True)
        ctx = mp.get_context("spawn")
        ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        reader = ctx.Process(target=_reader, args=(dsn, ready, stop, out))
        reader.start()
        if not ready.wait(timeout=120):
            raise RuntimeError("the reader process did not start")
        time.sleep(2.0)  # the reader's baseline, nothing refreshing
        runs = []
        for _ in range(refreshes):
            swapping: list[float] = []
            recording: list[float] = []

            def say(msg: str, swapping: list[float] = swapping,
                    recording: list[float] = recording) -> None:  # fmt: skip
                if msg.startswith("swapping"):
                    swapping.append(time.time())
                elif msg.startswith("recording"):
                    recording.append(time.time())

            started = time.time()
            result = db.refresh(RELEASE, say)
            ended = time.time()
            runs.append({"started": started, "ended": ended, "swap_at": swapping[0],
                         "record_at": recording[0], "timings": result.timings})  # fmt: skip
            time.sleep(0.5)
        stop.set()
        samples = out.get(timeout=60)
        reader.join(timeout=60)
        version = db.conn.execute("SHOW server_version").fetchone()[0]
    first = runs[0]["started"]
    baseline = [s for at, s in samples if at + s < first - 0.1]
    per_run = []
    for r in runs:
        overlapping = [s for at, s in samples if at < r["ended"] and at + s > r["started"]]
        per_run.append({
            "refresh_seconds": round(r["ended"] - r["started"], 3),
            "lock_held_seconds": round(r["ended"] - r["swap_at"], 4),
            "longest_reader_wait_seconds": round(max(overlapping, default=0.0), 4),
            "reader_queries": len(overlapping),
            "swap_seconds": r["timings"].get("swap"),  # the drops, renames, grants
            "record_and_commit_seconds": round(r["ended"] - r["record_at"], 4),
        })  # fmt: skip
    return {
        "bench": "swap",
        "rows": rows,
        "refreshes": refreshes,
        "method": "mondrian k=5, sensitive dx (group map rewritten each run)",
        "server_version": version,
        "reader_baseline_median_seconds": round(statistics.median(baseline), 5)
        if baseline
        else None,
        "longest_reader_wait_seconds": max(p["longest_reader_wait_seconds"] for p in per_run),
        "longest_lock_held_seconds": max(p["lock_held_seconds"] for p in per_run),
        "median_refresh_seconds": statistics.median(p["refresh_seconds"] for p in per_run),
        "runs": per_run,
    }
