"""An audit's classes counted in parts, on several backends at once.

A class is the rows that share every QI value, so rows parted by the value of one QI part the
classes too: each backend GROUPs BY its own share, and the whole's counts are the sums (the
minima, the maxima) of the parts' (`dbanon.models.base.Figure`). PostgreSQL's own parallel
aggregate cannot do this: its workers each hash the classes they meet and the leader hashes
them all again, which on QI combinations that are nearly all distinct costs more than it saves,
so the planner runs the GROUP BY on one core. On the 1M-row census table (7 QIs, 999,995
classes) two backends count the classes in 0.45 s where one takes 0.75 s, their hash tables
together the size of the one.

- The parts are ranges of the QI with the most distinct values (pg_stats), cut at its
  quantiles in a sample of the table's pages: parts of about equal size, which the planner
  estimates from its histogram as it estimates the whole, so it picks the same plan. Equal
  values compare equal under the type's ordering, so a class never straddles two ranges; NULL
  goes with the last.
- The backends import one snapshot (`pg_export_snapshot`): the parts add up to one state of
  the table, as a single query's would.
- Only tables (a view may read differently on each backend: in another random order, with
  other noise; a temporary table is one session's) of at least MIN_ROWS rows (below that the
  connections cost what they save), and no more backends than the server lets one query use
  (1 + max_parallel_workers_per_gather, so 0 turns this off) nor than this machine's cores
  (the embedded server's cores; a remote server's are unknown, and this machine's stand in).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from dbanon.db.catalog import Relation

MIN_ROWS = 250_000
SAMPLE_ROWS = 30_000  # about how many rows the cuts are read from
SPLIT_KINDS = ("r", "m", "p")  # tables, materialised views, partitioned tables


@dataclass(frozen=True)
class Split:
    """Disjoint conditions on the aliased QIs that cover every row, each with the backend that
    counts its classes."""

    parts: Sequence[tuple[psycopg.Connection, sql.Composable]]

    def run(self, query: Callable[[sql.Composable], sql.Composable]) -> list[tuple[Any, ...]]:
        """The one row of `query(condition)` for every part, the parts run at once."""

        def one(conn: psycopg.Connection, where: sql.Composable) -> Callable[[], Any]:
            return lambda: conn.execute(query(where)).fetchone()

        try:
            results = at_once([one(c, w) for c, w in self.parts])
        except BaseException:  # an interrupt while they run: the parts' queries stop too
            for c, _ in self.parts:
                with suppress(Exception):
                    c.cancel_safe()
            raise
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results


def at_once(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """Each call's result or the exception it raised, the calls run in threads at once (psycopg
    waits for the server without holding the GIL). Daemon threads, not a ThreadPoolExecutor:
    leaving an executor waits for its threads, so an interrupt would wait for every part's
    query to end before `Split.run` could cancel them."""
    results: list[Any] = [None] * len(calls)

    def one(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as e:  # handed to the caller's thread
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def ranges(alias: sql.Composable, bounds: Sequence[str]) -> list[sql.Composable]:
    """Conditions parting the values of `alias` at `bounds` (ascending, distinct, as the
    type's text): below the first, between each two, from the last on or NULL."""
    lits = [sql.Literal(b) for b in bounds]  # untyped: read as the column's type
    conds = [sql.SQL("{} < {}").format(alias, lits[0])]
    conds += [
        sql.SQL("{a} >= {lo} AND {a} < {hi}").format(a=alias, lo=lo, hi=hi)
        for lo, hi in zip(lits, lits[1:], strict=False)
    ]
    conds.append(sql.SQL("({a} >= {lo} OR {a} IS NULL)").format(a=alias, lo=lits[-1]))
    return conds


def plan(
    conn: psycopg.Connection, rel: Relation, qi: Sequence[str]
) -> tuple[int, list[str]] | None:
    """Which QI (its index in `qi`) to part the classes by and where, or None to count them in
    one query."""
    if rel.kind not in SPLIT_KINDS:
        return None
    regclass = sql.Identifier(rel.schema, rel.name).as_string(conn)
    row = conn.execute(  # a temporary table is this session's alone: other backends lack it
        "SELECT current_setting('max_parallel_workers_per_gather')::int + 1, reltuples "
        "FROM pg_class WHERE oid = %s::regclass AND relpersistence <> 't'",
        [regclass],
    ).fetchone()
    if row is None:
        return None
    parts, rows = min(row[0], os.cpu_count() or 1), row[1]
    if parts < 2 or rows < MIN_ROWS:
        return None
    # the orderable column (pg_stats has its correlation) with the most distinct values, not
    # an array (percentile_disc has no array of arrays); n_distinct < 0 is a fraction of rows
    best = conn.execute(
        "SELECT s.attname FROM pg_stats s "
        "JOIN pg_attribute a ON a.attrelid = %(rel)s::regclass AND a.attname = s.attname "
        "JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE s.schemaname = %(s)s AND s.tablename = %(t)s AND s.attname = ANY(%(qi)s) "
        "AND s.correlation IS NOT NULL AND t.typcategory <> 'A' "
        "AND CASE WHEN n_distinct < 0 THEN -n_distinct * %(n)s ELSE n_distinct END >= %(least)s "
        "ORDER BY CASE WHEN n_distinct < 0 THEN -n_distinct * %(n)s ELSE n_distinct END DESC, "
        "s.attname LIMIT 1",
        {"rel": regclass, "s": rel.schema, "t": rel.name, "qi": list(qi), "n": rows,
         "least": 10 * parts},
    ).fetchone()  # fmt: skip
    if best is None:
        return None
    column = sql.Identifier(best[0])
    try:
        with conn.transaction():  # a savepoint: a type this cannot cut leaves one query
            # its quantiles in a sample of pages (the histogram leaves out the common values)
            cuts = conn.execute(
                sql.SQL(
                    "SELECT (percentile_disc(%s::float8[]) WITHIN GROUP (ORDER BY {c}))::text[] "
                    "FROM {rel} TABLESAMPLE SYSTEM (%s) WHERE {c} IS NOT NULL"
                ).format(c=column, rel=rel.ident),
                [[i / parts for i in range(1, parts)], min(100.0, 100.0 * SAMPLE_ROWS / rows)],
            ).fetchone()[0]
            if not cuts:
                return None
            cuts = list(dict.fromkeys(cuts))
            # each cut read back as the column's type, as the parts will read it
            conn.execute(
                sql.SQL("SELECT FROM {rel} WHERE {conds} LIMIT 0").format(
                    rel=rel.ident,
                    conds=sql.SQL(" AND ").join(ranges(column, cuts)),
                )
            )
    except psycopg.Error:
        return None
    return qi.index(best[0]), cuts


@contextmanager
def backends(
    conn: psycopg.Connection, dsn: str, rel: Relation, qi: Sequence[str]
) -> Iterator[Split | None]:
    """A Split of `rel`'s classes over new backends that share `conn`'s snapshot, or None when
    one query is the better choice (`plan`); the backends close on exit."""
    from dbanon.db.connection import connect

    chosen = plan(conn, rel, qi)
    if chosen is None:
        yield None
        return
    column, bounds = chosen
    snapshot = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
    share = sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot))

    def open_one() -> psycopg.Connection:
        c = connect(dsn)
        try:
            c.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            c.read_only = True
            c.execute(share)
        except BaseException:
            c.close()
            raise
        return c

    conds = ranges(sql.Identifier(f"q{column + 1}"), bounds)
    opened = at_once([open_one] * len(conds))
    try:
        failed = [e for e in opened if isinstance(e, BaseException)]
        for e in failed:
            if not isinstance(e, Exception):
                raise e  # an interrupt
        # a server that refuses more connections still gets its check, in one query
        yield None if failed else Split(list(zip(opened, conds, strict=True)))
    finally:
        for c in opened:
            if isinstance(c, psycopg.Connection):
                c.close()
