"""A query over one table streamed out with COPY in parts, on several backends at once.

A run's extract is one COPY of the source: one backend reads every page, evaluates every
expression (casts to text, the rows' fingerprints) and sends every row, on one core (1.1 s of
the server for the 1M-row census table, as psql receives it). Parted by page ranges (`ctid`
conditions: TID range scans), the same query runs on as many backends as `check`'s split may
use (dbanon.models.split: 1 + max_parallel_workers_per_gather, no more than this machine's
cores), each streaming its own pages: 0.5 s on two. The client's parsing shares those cores,
so on this 2-core machine a publish's extract gains less: 1.51 -> 1.34 s (mondrian, 1M rows).

- The backends import the run's snapshot (dbanon.db.aside.on_snapshot): the parts add up to
  the rows the run's own statement would read, in its order (pages ascending; a scan of the
  whole never joins another's in this run, see Aside). The first part runs on the run's own
  connection; each other's rows are appended after it, their text and values renumbered into
  the first's dictionaries (codes are names, never an order: dbanon.db.stream).
- Only ordinary tables and materialised views that other sessions see (not a view: its rows
  may differ per backend; not a temporary table), of at least MIN_ROWS rows, read in a
  REPEATABLE READ (or SERIALIZABLE) transaction, not autocommit: its snapshot is the one
  exported. Where a backend cannot be had, or its part fails (a lock not granted at once),
  that part runs on the run's connection after the first: the same rows, later.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

import psycopg
from psycopg import sql

from dbanon.db.aside import exported, on_snapshot
from dbanon.db.catalog import Relation
from dbanon.db.stream import receive

# Below it the connections cost what they save: at 271,332 rows a k-member publish's extract
# took 0.27-0.29 s either way, its refresh's (beside the map's read) 0.357 s in parts against
# 0.324 s in one; at 1M, mondrian's 1.51 against 1.34 s.
MIN_ROWS = 500_000
_KINDS = ("r", "m")  # page ranges of a table or materialised view (not a partitioned parent's)
_SNAPSHOT_LEVELS = (psycopg.IsolationLevel.REPEATABLE_READ, psycopg.IsolationLevel.SERIALIZABLE)

Where = sql.Composable | None  # a condition on the source's alias, None: every row
Result = list[Any]  # one column per kind, as copy_columns gives them


def where(cond: Where) -> sql.Composable:
    """` WHERE cond`, or nothing for None: what a `query(where)` appends to its FROM."""
    return sql.SQL("") if cond is None else sql.SQL(" WHERE {}").format(cond)


def page_ranges(
    conn: psycopg.Connection, rel: Relation, alias: str, rows: int
) -> list[sql.Composable] | None:
    """Conditions on `alias`.ctid parting `rel`'s pages evenly (the last open-ended), or None
    when one stream is the better choice."""
    if (rel.kind not in _KINDS or rows < MIN_ROWS or conn.autocommit
            or conn.isolation_level not in _SNAPSHOT_LEVELS):  # fmt: skip
        return None  # autocommit: the exported snapshot would end with its statement
    found = conn.execute(  # a temporary table is this session's alone
        "SELECT current_setting('max_parallel_workers_per_gather')::int + 1, "
        "pg_relation_size(oid) / current_setting('block_size')::int "
        "FROM pg_class WHERE oid = %s::regclass AND relpersistence <> 't'",
        [rel.ident.as_string(conn)],
    ).fetchone()
    if found is None:
        return None
    parts = min(found[0], os.cpu_count() or 1)
    pages = int(found[1])
    if parts < 2 or pages < 2 * parts:
        return None
    ctid = sql.SQL("{}.ctid").format(sql.Identifier(alias))
    at = [sql.Literal(f"({pages * i // parts},0)") for i in range(1, parts)]
    conds = [sql.SQL("{} < {}::tid").format(ctid, at[0])]
    conds += [sql.SQL("{c} >= {lo}::tid AND {c} < {hi}::tid").format(c=ctid, lo=lo, hi=hi)
              for lo, hi in zip(at, at[1:], strict=False)]  # fmt: skip
    conds.append(sql.SQL("{} >= {}::tid").format(ctid, at[-1]))
    return conds


def copy_parts(
    conn: psycopg.Connection,
    query: Callable[[Where], sql.Composable],
    rel: Relation,
    alias: str,
    kinds: Sequence[str],
    rows: int,
    progress: Callable[[int], None] | None = None,
    *,
    export: bool = True,
) -> Result:
    """What copy_columns(conn, query(None), kinds, rows, progress) gives (the same rows in
    the same order), streamed in parts of `rel`'s pages at once where `page_ranges` allows.
    `query(where)` adds `where`, a condition on `alias` (the source's alias), to its rows.
    `export=False`: inside a savepoint, where PostgreSQL exports no snapshot; the parts then
    read the one the run's Aside exported (dbanon.db.aside.exported), or are not made."""
    conds = page_ranges(conn, rel, alias, rows)  # a query: the run's transaction is open
    sides: list[psycopg.Connection | None] = []
    if conds is not None:
        snapshot = (conn.execute("SELECT pg_export_snapshot()").fetchone()[0] if export
                    else exported(conn))  # fmt: skip
        sides = [on_snapshot(conn, snapshot) for _ in conds[1:]] if snapshot else []
    if conds is None or not any(sides):
        for s in sides:
            if s is not None:
                s.close()
        return [c.result() for c in receive(conn, query(None), kinds, rows, progress)]
    seen = [0] * len(conds)
    lock = threading.Lock()

    def counted(i: int) -> Callable[[int], None] | None:
        if progress is None:
            return None

        def say(n: int) -> None:
            with lock:
                seen[i] = n
                progress(sum(seen))

        return say

    share = rows // len(conds) + 1
    out: list[Any] = [None] * len(conds)

    def part(i: int, side: psycopg.Connection) -> None:
        try:
            out[i] = receive(side, query(conds[i]), kinds, share, counted(i))
        except BaseException as e:  # handed to the run's thread
            out[i] = e

    threads = [threading.Thread(target=part, args=(i + 1, s), daemon=True)
               for i, s in enumerate(sides) if s is not None]  # fmt: skip
    try:
        for t in threads:
            t.start()
        first = receive(conn, query(conds[0]), kinds, rows, counted(0))
        for t in threads:
            t.join()
    except BaseException:  # an interrupt or the first part's error: the others stop too
        for s in sides:
            if s is not None:
                with suppress(Exception):
                    s.cancel_safe()
        for t in threads:
            t.join()
        raise
    finally:
        for s in sides:
            if s is not None:
                s.close()
    for i in range(1, len(conds)):
        if not isinstance(out[i], list):  # no backend, or its part failed: run it here
            if out[i] is not None and not isinstance(out[i], psycopg.Error):
                raise out[i]
            out[i] = receive(conn, query(conds[i]), kinds, share, counted(i))
        for mine, theirs in zip(first, out[i], strict=True):
            mine.extend(theirs)
        out[i] = None  # its arrays go as soon as they are appended
    return [c.result() for c in first]


__all__ = ["copy_parts", "page_ranges", "where"]
