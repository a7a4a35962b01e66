"""The lattice search of full-domain generalisation (dbanon.setlogic.fulldomain).

The numpy counting of a k-only search is dbanon.setlogic.coded; the release SQL
(dbanon.setlogic.fulldomain) and the automatic hierarchies (dbanon.setlogic.hierarchies) are
modules of their own.

Search (`search`): PostgreSQL computes, Python only walks the lattice.
- The source is read once: its frequency set (GROUP BY the QIs) becomes a temp table, which is
  joined once to each QI's generalisation map to give `g`: one integer code column per QI and
  level (the top level, a constant, needs none). A node's equivalence classes are then
  `GROUP BY` its code columns over `g` (about 20 k rows for Adult rather than 30 k source rows,
  integers rather than text), and one query returns how many rows sit in classes smaller than k.
  A node whose classes are far fewer than the rows it was counted from keeps them as a temp
  class table, and nodes above it roll up from that instead (Flash's roll-up, in SQL). All of
  it runs in one transaction (a savepoint in the caller's), with JIT off for its hundreds of
  short queries, and its temp tables are dropped before it returns.
- With k alone (no model reads a sensitive value), the nodes are counted in numpy instead
  (`_Coded`): the source's rows are read once (one binary COPY of the QIs: text, and interval
  QIs of whole numbers as their numbers), each QI's map made in SQL from the distinct values
  read, each row coded by its value's place in the map; equal rows are grouped, and a node's
  classes are a bincount or np.unique of one mixed-radix key per row, rolled up from the
  smallest table of a failing descendant as in SQL. At a million mostly distinct rows a node
  costs tens of milliseconds there against about a second as a GROUP BY. (A QI of another
  kind, numeric or calendar, has its distinct values and map made in SQL over the source and
  the rows fetched as level-0 codes after them.)
- Pruning by monotonicity: if a node satisfies k-anonymity with at most B rows in small classes,
  so does every ancestor (a class of the ancestor is a union of classes of the node, so a small
  class of the ancestor is made of small classes only); if it fails, so does every descendant.
  A check's verdict is propagated to its whole up- or down-set at once (numpy over the lattice).
- Optimality: nodes are visited in increasing order of their generalisation loss, which is
  separable (a sum over QIs of a per-level loss computed once in SQL) and monotone; with no
  suppression that loss is the node's loss, so the first node that satisfies every model is the
  optimum. With suppression the separable loss is a lower bound (suppressed rows cost 1 per QI,
  the most a value can), so the walk continues until that bound reaches the best loss found;
  rows suppressed at a checked node are suppressed at all its descendants, which tightens the
  bound below it.
  A node of unknown status is resolved by binary search along a chain from it to the top of the
  lattice (raising first the QI whose next level costs least): the highest failing node found
  settles the node and its whole down-set, which prunes far more than checking the node itself.
  For Adult (9 QIs, 12,960 nodes, k=5) about a hundred checks settle the lattice.
- Suppression counts every model (as ARX does): at a node, the classes smaller than k and then
  those failing any other model (`kept_classes`, the release's own filter) are suppressed, and
  their rows count against the limit. For that the frequency set keeps the sensitive value (one
  row per class and value, weighted by its rows, which changes no model's verdict), and the
  models judge a node's classes from it in one query (`_Lattice.suppressed`).
  Distinct l-diversity and (p,k)-anonymity are monotone under generalisation *with*
  suppression, as k is (a class that passes still passes merged with any other class, so rows
  suppressed at a node are suppressed at its descendants): with them, that count replaces the
  k count in the walk, and its statuses and bounds prune as k's do. Entropy and recursive
  l-diversity, (alpha,k) and t-closeness are not (a passing class may absorb a failing one and
  fail; t-closeness judges against what is left): the walk prunes on k alone and judges each
  node it reaches, in loss order, with every model; the bounds stay valid, since suppressing
  more rows only adds loss. Either way the optimum is exhaustive (tests/test_fulldomain.py
  enumerates every node). At the node found, the release suppresses exactly what was counted.

Loss (`FullDomainResult.loss`) is NCP, in [0, 1]: the mean over rows and QIs of the normalised
size of the released value: (leaves under the label - 1) / (leaves in the hierarchy - 1) for a
hierarchy, (interval or period length within [min, max]) / (max - min) for a numeric interval or
a calendar period, 0 for a value kept as is, 1 for '*' and for every QI of a suppressed row.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.core.hierarchy import Hierarchy
from dbanon.db.catalog import Column, Relation
from dbanon.db.settings import local_settings, work_mem_at_least
from dbanon.errors import DbanonError, quote_ident, quote_name
from dbanon.models import (
    AlphaKAnonymity,
    DistinctLDiversity,
    EntropyLDiversity,
    FrequencyLDiversity,
    KAnonymity,
    PKAnonymity,
    PrivacyModel,
    RecursiveCLDiversity,
    kept_classes,
)
from dbanon.models.base import Target
from dbanon.setlogic.coded import _PREFIX, _QI, ROLLUP_GAIN, ROLLUP_MIN_ROWS, _Coded, _tid_ranges
from dbanon.setlogic.hierarchies import (
    INTERVAL_LEVELS,
    AnyHierarchy,
    CalendarHierarchy,
    IntervalHierarchy,
    _as_number,
    _calendar_code,
    _calendar_ncp,
    _effective,
    _interval_ncp,
    _measure,
    _whole_bin_low,
    _widths,
    calendar_base,
    interval_base,
)

MAX_LATTICE = 2_000_000  # nodes; beyond this the lattice bookkeeping itself gets too big


PROGRESS_EVERY = 0.25  # seconds between progress messages of a search


SEARCH_WORK_MEM = "128MB"  # work_mem of a search's own queries (if the session's is lower)


@dataclass(frozen=True)
class FullDomainResult:
    levels: dict[str, int]  # chosen level per QI column
    loss: float  # NCP of the chosen node, suppressed rows counting 1 (see the module doc)
    suppressed: int  # rows of the classes failing any model at that node, left out of it
    nodes: int  # lattice size
    nodes_checked: int  # nodes counted by the walk (k, or every model when all are monotone)
    seconds: float
    # The hierarchies the levels refer to, automatic interval ones included: pass these to
    # release_select, which cannot rebuild interval widths without the data.
    hierarchies: dict[str, AnyHierarchy] = field(default_factory=dict, repr=False)
    model_checks: int = 0  # nodes judged by every model (with models beyond k)
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "levels": self.levels,
            "loss": self.loss,
            "suppressed": self.suppressed,
            "nodes": self.nodes,
            "nodes_checked": self.nodes_checked,
            "model_checks": self.model_checks,
            "seconds": self.seconds,
            "timings": self.timings,
        }






# Models under which a class that passes still passes merged with any other class, so that the
# rows suppressed at a node are suppressed at every descendant: the walk may prune on them.
# (Entropy and recursive l-diversity, (alpha,k) and t-closeness are not: a passing class can
# absorb a failing one and fail.)
MONOTONE_UNDER_SUPPRESSION = (KAnonymity, DistinctLDiversity, PKAnonymity)


def _relaxed(m: PrivacyModel) -> PrivacyModel | None:
    """A model monotone under suppression that every class passing `m` passes, or None: the
    walk prunes on it for models that are not monotone. A class with entropy >= log l, or
    recursive (c,l)-diversity, or no value above a share 1/l (frequency l) or alpha ((alpha,k)
    of every value) has at least that many distinct values."""
    if isinstance(m, MONOTONE_UNDER_SUPPRESSION):
        return m
    bound: float | None = None
    if isinstance(m, EntropyLDiversity | RecursiveCLDiversity | FrequencyLDiversity):
        bound = float(m.l)
    elif isinstance(m, AlphaKAnonymity) and m.value is None and m.alpha > 0:
        bound = 1 / float(m.alpha)
    if bound is None or bound < 2:
        return None
    return DistinctLDiversity(math.ceil(bound - 1e-9))




def _k_of(models: Sequence[PrivacyModel]) -> int:
    """The class size below which classes are suppressed: the largest k among the models
    (k-anonymity, (α,k), (p,k), ... all call it k), 1 when none has one."""
    ks = [getattr(m, "k", None) for m in models]
    return max([k for k in ks if isinstance(k, int) and not isinstance(k, bool)] or [1])


def _check_stored(conn: psycopg.Connection, h: Hierarchy, col: Column) -> None:
    """Search and release read the catalog's copy of a hierarchy: it must be the one given."""
    row = conn.execute(
        """SELECT h.height, count(*) FILTER (WHERE m.level = 0), h.version
           FROM dbanon.hierarchy h
           LEFT JOIN dbanon.hierarchy_map m ON m.hierarchy_id = h.id
           WHERE h.name = %s AND h.retired_at IS NULL
           GROUP BY h.id""",
        [h.name],
    ).fetchone()
    if row is None:
        raise DbanonError(
            f"hierarchy {quote_name(h.name)} of column {quote_ident(col.name)} is not stored in "
            "the catalog (import it with `dbanon hierarchy import`)"
        )
    if (row[0], row[1], row[2]) != (h.height, len(h.leaves), h.version):
        raise DbanonError(f"hierarchy {quote_name(h.name)} in the catalog differs from the one "
            "given")








class _Lattice:
    """The database side of a search: the source's frequency set as integer codes, and the
    class tables of nodes, each counted by rolling up the smallest table below it."""

    def __init__(
        self,
        conn: psycopg.Connection,
        qis: list[_QI],
        k: int,
        with_ncp: bool,
        sensitive: str | None = None,
        models: Sequence[PrivacyModel] = (),
    ) -> None:
        self.conn, self.qis, self.k, self.with_ncp = conn, qis, k, with_ncp
        # With models beyond k, the frequency set keeps the sensitive value as column s, so
        # that a node's classes can be judged by those models on it (`suppressed`).
        self.sensitive, self.models = sensitive, list(models)
        self.judged = 0  # nodes judged by every model (`suppressed`)
        self.budget = 0  # rows that may be suppressed, set once the row count is known
        self.tables: list[str] = []  # every temp table made, to drop
        self.classes: list[tuple[np.ndarray, sql.Identifier, int]] = []  # (node, table, rows)
        self.total = 0
        self.losses: list[np.ndarray] = []  # per QI, the mean NCP of the rows at each level
        # k alone (no sensitive value): the frequency set is counted in numpy (`_Coded`).
        self.coded: _Coded | None = None

    def _temp(self, stem: str) -> sql.Identifier:
        name = f"{_PREFIX}{stem}"
        self.tables.append(name)
        return sql.Identifier(name)

    def drop(self) -> None:
        """Drop the temp tables (on errors, rolling the search's savepoint back does it)."""
        if self.tables:
            self.conn.execute(
                sql.SQL("DROP TABLE {}").format(
                    sql.SQL(", ").join(map(sql.Identifier, self.tables))
                )
            )
        self.tables = []

    @staticmethod
    def code(i: int, level: int) -> sql.Identifier:
        return sql.Identifier(f"c{i}_{level}")

    @staticmethod
    def ncp(i: int, level: int) -> sql.Identifier:
        return sql.Identifier(f"r{i}_{level}")

    def columns(self, node: np.ndarray) -> list[sql.Identifier]:
        """Columns a class table of `node` keeps: codes (and NCP) of the levels at or above
        the node's, below the top, which are what the node's ancestors group by."""
        cols = []
        for i, q in enumerate(self.qis):
            cols += [self.code(i, lv) for lv in range(int(node[i]), q.height)]
            if self.with_ncp:
                cols += [self.ncp(i, lv) for lv in range(max(int(node[i]), 1), q.height)]
        return cols

    # -- building -----------------------------------------------------------------------------

    def build(self, source: Relation) -> None:
        """Read the source once (GROUP BY the QIs), then code every level of every QI."""
        conn, qis = self.conn, self.qis
        qcol = [sql.Identifier(f"q{i}") for i in range(len(qis))]
        fs_cols = []
        for q, name in zip(qis, qcol, strict=True):
            if q.kind == "interval":
                base = q.h.base if isinstance(q.h, IntervalHierarchy) else interval_base(q.col)
                expr = _as_number(base or "numeric", q.col.ident)
            elif q.kind == "calendar":  # the value itself: its periods are cut in SQL
                expr = q.col.ident
            else:  # text, as release_select shows it: classes are equal text, in both;
                # byte order ("C") makes the sorts and joins on it cheap
                expr = sql.SQL('{}::text COLLATE "C"').format(q.col.ident)
            fs_cols.append(sql.SQL("{} AS {}").format(expr, name))
        group = list(qcol)
        if self.sensitive is not None:
            fs_cols.append(sql.SQL("{} AS s").format(sql.Identifier(self.sensitive)))
            group.append(sql.Identifier("s"))
        fs: sql.Composable
        if self.sensitive is None:
            # k alone: no frequency set table. The few passes below read the source itself
            # (each row weighing 1), and numpy groups equal rows once they are coded
            # (`_Coded.fetch`): for mostly distinct rows the table would be as big as the
            # source, and writing it cost more than the passes it saves.
            fs = sql.SQL("(SELECT {cols}, 1 AS n FROM {src}) fs").format(
                cols=sql.SQL(", ").join(fs_cols), src=source.ident
            )
        else:
            table = self._temp("fs")
            conn.execute(
                sql.SQL(
                    "CREATE TEMP TABLE {fs} AS SELECT {cols}, count(*)::int AS n FROM {src} "
                    "GROUP BY {q}"
                ).format(
                    fs=table,
                    cols=sql.SQL(", ").join(fs_cols),
                    src=source.ident,
                    q=sql.SQL(", ").join(group),
                )
            )
            # Statistics (a sample: cheap) for the joins to the maps below; see _analyze.
            conn.execute(sql.SQL("ANALYZE {}").format(table))
            fs = sql.SQL("{} fs").format(table)
        self._stats(source, fs, qcol)
        if self.sensitive is None and self._streamed(source):
            return

        # Each QI's map: per distinct value, its code and NCP at each level below the top
        # (stored hierarchies: from the catalog, in _stats). Computed once per distinct value,
        # not per row of the frequency set, which for mostly distinct rows is the source's size.
        mapped = [i for i, q in enumerate(qis) if not isinstance(q.h, Hierarchy)]
        distinct: sql.Composable = fs
        if len(mapped) > 1:
            # Every such QI's distinct values in one pass over the frequency set (hashed
            # grouping sets), rather than one pass each; QIs are not NULL (_stats), so a
            # column is NULL exactly in the rows of the other QIs' sets.
            distinct = self._temp("dv")
            conn.execute(
                sql.SQL(
                    "CREATE TEMP TABLE {dv} AS SELECT {q} FROM {fs} GROUP BY GROUPING SETS ({sets})"
                ).format(
                    dv=distinct,
                    q=sql.SQL(", ").join(qcol[i] for i in mapped),
                    fs=fs,
                    sets=sql.SQL(", ").join(sql.SQL("({})").format(qcol[i]) for i in mapped),
                )
            )
        for i in mapped:
            self._value_map(i, qis[i], distinct, qcol[i])
        # g: the frequency set with a code per QI and level below the top (and its NCP).
        codes: list[sql.Composable] = []
        ncps: list[sql.Composable] = []
        joins: list[sql.Composable] = []
        for i, q in enumerate(qis):
            m = sql.Identifier(f"m{i}")
            joins.append(
                sql.SQL("JOIN {t} {m} ON {m}.v = fs.{q}").format(
                    t=sql.Identifier(f"{_PREFIX}m{i}"), m=m, q=qcol[i]
                )
            )
            codes.append(sql.SQL("{}.c0 AS {}").format(m, self.code(i, 0)))
            for level in range(1, q.height):
                c, r = self.code(i, level), self.ncp(i, level)
                codes.append(sql.SQL("{}.{} AS {}").format(m, sql.Identifier(f"c{level}"), c))
                ncps.append(sql.SQL("{}.{} AS {}").format(m, sql.Identifier(f"r{level}"), r))
        if self.sensitive is None:
            # k alone: the level-0 codes and weights go to numpy, where each node is counted
            # (`_Coded`); the higher levels are looked up from each QI's map there.
            parts = [
                sql.SQL("(SELECT {cols}, 1 AS n FROM {src} WHERE {tids}) fs").format(
                    cols=sql.SQL(", ").join(fs_cols), src=source.ident, tids=tids
                )
                for tids in _tid_ranges(conn, source, self.total)
            ]
            self.coded = _Coded.fetch(self.conn, qis, parts, joins, self.with_ncp, self.total)
            self.losses = self.coded.losses(self.total)
            return
        g = self._temp("g")
        # n first and NCP only when suppression needs it: narrow rows make GROUP BY faster.
        cur = conn.execute(
            sql.SQL("CREATE TEMP TABLE {g} AS SELECT fs.n, {sel} FROM {fs} {joins}").format(
                g=g,
                sel=sql.SQL(", ").join(
                    codes
                    + (ncps if self.with_ncp else [])
                    + ([sql.SQL("fs.s")] if self.sensitive is not None else [])
                ),
                fs=fs,
                joins=sql.SQL(" ").join(joins),
            )
        )
        self._losses(fs, qcol)
        self.classes.append((np.zeros(len(qis), dtype=np.int64), g, cur.rowcount))

    def _streamed(self, source: Relation) -> bool:
        """k alone: `_Coded.streamed` (the source's rows read once) where every QI can be
        streamed; False, reading nothing, otherwise."""
        self.coded = _Coded.streamed(self.conn, self.qis, source, self.total, self.with_ncp,
                                     self._map_of)  # fmt: skip
        if self.coded is None:
            return False
        self.losses = self.coded.losses(self.total)
        return True

    def _map_of(self, i: int, values: list[Any], text: bool) -> None:
        """`_value_map` of QI i from its distinct values (text: compared as "C" does)."""
        dv = self._temp(f"dv{i}")
        unnest = sql.SQL('unnest(%s::text[]) COLLATE "C"' if text else "unnest(%s::int8[])")
        self.conn.execute(
            sql.SQL("CREATE TEMP TABLE {} AS SELECT {} AS v").format(dv, unnest), [values]
        )
        self._value_map(i, self.qis[i], dv, sql.Identifier("v"))

    def _value_map(self, i: int, q: _QI, fs: sql.Composable, name: sql.Identifier) -> None:
        """The map of an interval, calendar or flat QI (as _store_map makes a stored
        hierarchy's): per distinct value v, its code c<level> (numbering the value itself at
        level 0) and NCP r<level> at each level below the top."""
        v = sql.SQL("v")
        cols: list[sql.Composable] = [sql.SQL("dense_rank() OVER (ORDER BY v)::int AS c0")]
        for level in range(1, q.height):
            c, r = sql.Identifier(f"c{level}"), sql.Identifier(f"r{level}")
            if isinstance(q.h, IntervalHierarchy):
                w = q.h.widths[level - 1]
                # a number per interval: floor(v / w), or its low end in bigint arithmetic
                code: sql.Composable = (
                    _whole_bin_low(q.h, v, w)
                    if q.h.base != "numeric" and w == w.to_integral_value()
                    else sql.SQL("floor(v::numeric / {})::bigint").format(sql.Literal(w))
                )
                ncp = _interval_ncp(q.h, v, level)
            elif isinstance(q.h, CalendarHierarchy):
                code = _calendar_code(q.h, q.col, v, level)
                ncp = _calendar_ncp(q.h, q.col, v, level)
            else:  # flat: no level between the value and the top
                continue
            cols.append(sql.SQL("{} AS {}, {} AS {}").format(code, c, ncp, r))
        self.conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE {t} AS SELECT v, {cols} "
                "FROM (SELECT DISTINCT {q} AS v FROM {fs} WHERE {q} IS NOT NULL) d"
            ).format(t=self._temp(f"m{i}"), cols=sql.SQL(", ").join(cols), q=name, fs=fs)
        )
        self._analyze(i)

    def _analyze(self, i: int) -> None:
        """ANALYZE a QI's map (small, so cheap): without statistics the planner takes each
        join of the frequency set to a map for a blow-up (billions of rows at 1M) and sorts
        for a merge join where a hash join does."""
        self.conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(f"{_PREFIX}m{i}")))

    def _stats(self, source: Relation, fs: sql.Composable, qcol: list[sql.Identifier]) -> None:
        """Row count, NULL QIs (an error), interval and calendar hierarchies, coverage."""
        conn = self.conn
        stats: list[sql.Composable] = [sql.SQL("coalesce(sum(n), 0)::bigint")]
        for q, name in zip(self.qis, qcol, strict=True):
            stats.append(
                sql.SQL("coalesce(sum(n) FILTER (WHERE {} IS NULL), 0)::bigint").format(name)
            )
            if q.kind == "interval":
                stats.append(sql.SQL("min({0})::numeric, max({0})::numeric").format(name))
            elif q.kind == "calendar":
                x = _measure(q.col, name)
                stats.append(sql.SQL("min({0}), max({0})").format(x))
            else:
                stats.append(sql.SQL("NULL, NULL"))
        # A timestamptz falls into the calendar periods of the session's time zone.
        stats.append(sql.SQL("current_setting('TimeZone')"))
        row = conn.execute(
            sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(stats), fs)
        ).fetchone()
        self.total = int(row[0])
        for i, q in enumerate(self.qis):
            nulls, low, high = row[1 + 3 * i : 4 + 3 * i]
            if nulls:
                raise DbanonError(
                    f"quasi-identifier {quote_ident(q.col.name)} of {source} is NULL in {nulls} "
                    "rows; fill or filter them first"
                )
            if q.kind == "interval" and q.h is None:
                base = interval_base(q.col) or "numeric"
                low = Decimal(0) if low is None else low
                high = Decimal(0) if high is None else high
                q.h = IntervalHierarchy(
                    q.col.name, base, _widths(base, low, high, INTERVAL_LEVELS), low, high
                )
                q.height = q.h.height
            if q.kind == "calendar" and q.h is None:
                zero = Decimal(0)
                base = calendar_base(q.col) or "date"
                q.h = CalendarHierarchy(q.col.name, base, low or zero, high or zero, row[-1])
                q.height = q.h.height
            if isinstance(q.h, Hierarchy):
                self._store_map(i, q.h)
                missing = conn.execute(
                    sql.SQL("SELECT {q} FROM {fs} EXCEPT SELECT v FROM {m} LIMIT 1").format(
                        q=qcol[i], fs=fs, m=sql.Identifier(f"{_PREFIX}m{i}")
                    )
                ).fetchone()
                if missing:
                    raise DbanonError(
                        f"value {missing[0]!r} of column {quote_ident(q.col.name)} is not in "
                        f"hierarchy {quote_name(q.h.name)}"
                    )

    def _store_map(self, i: int, h: Hierarchy) -> None:
        """A stored hierarchy's leaves with their code (numbering a level's labels) and NCP
        (leaves under the label) at each level below the top."""
        cols: list[sql.Composable] = [sql.SQL("max(code) FILTER (WHERE level = 0) AS c0")]
        for level in range(1, h.height):
            cols.append(
                sql.SQL(
                    "max(code) FILTER (WHERE level = {l}) AS {c}, "
                    "max(ncp) FILTER (WHERE level = {l}) AS {r}"
                ).format(
                    l=sql.Literal(level),
                    c=sql.Identifier(f"c{level}"),
                    r=sql.Identifier(f"r{level}"),
                )
            )
        self.conn.execute(
            sql.SQL(
                """CREATE TEMP TABLE {t} AS
                   SELECT value COLLATE "C" AS v, {cols} FROM (
                       SELECT m.value, m.level,
                              dense_rank() OVER (PARTITION BY m.level ORDER BY m.label)::int
                                  AS code,
                              (count(*) OVER (PARTITION BY m.level, m.label) - 1)::float8 / {d}
                                  AS ncp
                       FROM dbanon.hierarchy_map m
                       JOIN dbanon.hierarchy h ON h.id = m.hierarchy_id
                       WHERE h.name = {name} AND h.version = {version}
                         AND m.level < {top}) x
                   GROUP BY value"""
            ).format(
                t=self._temp(f"m{i}"),
                cols=sql.SQL(", ").join(cols),
                d=sql.Literal(max(len(h.leaves) - 1, 1)),
                name=sql.Literal(h.name),
                version=sql.Literal(h.version),
                top=sql.Literal(h.height),
            )
        )
        self._analyze(i)

    def _losses(self, fs: sql.Composable, qcol: list[sql.Identifier]) -> None:
        """The loss of each QI at each level: the mean NCP of its rows (0 at 0, 1 at the top),
        summed over the QI's distinct values with their row counts."""
        for i, q in enumerate(self.qis):
            per = [0.0]
            if q.height > 1:
                sums = [
                    sql.SQL("sum(x.n * m.{})").format(sql.Identifier(f"r{level}"))
                    for level in range(1, q.height)
                ]
                row = self.conn.execute(
                    sql.SQL(
                        "SELECT {sums} FROM (SELECT {q} AS v, sum(n) AS n FROM {fs} GROUP BY 1) x "
                        "JOIN {m} m ON m.v = x.v"
                    ).format(
                        sums=sql.SQL(", ").join(sums),
                        q=qcol[i],
                        fs=fs,
                        m=sql.Identifier(f"{_PREFIX}m{i}"),
                    )
                ).fetchone()
                per += [float(x or 0) / max(self.total, 1) for x in row]
            per.append(1.0)
            self.losses.append(np.maximum.accumulate(np.array(per)))  # no rounding wobble

    # -- counting -----------------------------------------------------------------------------

    def _from(
        self, node: np.ndarray
    ) -> tuple[np.ndarray, sql.Identifier, int, list[sql.Identifier], sql.Composable]:
        """(base node, class table, its rows, the node's key columns, a row's NCP at the node)
        for counting `node`: the smallest class table of a descendant, rolled up."""
        below = [c for c in self.classes if np.all(c[0] <= node)]
        base, table, rows = min(below, key=lambda c: c[2])
        keys = [self.code(i, int(lv)) for i, lv in enumerate(node) if lv < self.qis[i].height]
        row_ncp: sql.Composable = sql.SQL("0")
        if self.with_ncp:
            terms: list[sql.Composable] = [
                self.ncp(i, int(lv)) for i, lv in enumerate(node) if 0 < lv < self.qis[i].height
            ]
            tops = sum(1 for i, lv in enumerate(node) if lv == self.qis[i].height)
            row_ncp = sql.SQL(" + ").join([*terms, sql.Literal(float(tops))])
        return base, table, rows, keys, row_ncp

    def count(self, node: np.ndarray) -> tuple[int, float]:
        """Rows in classes smaller than k at `node` (and the sum of their NCP, if asked).

        Rolls up from the smallest class table of a descendant. When the node fails and has far
        fewer classes than that table has rows, its own class table is kept too: the walk
        climbs after a failure, and the nodes it checks next then roll up from it."""
        if self.coded is not None:
            return self.coded.count(node, self.k, self.budget)
        base, table, rows, keys, row_ncp = self._from(node)
        if np.array_equal(base, node) and self.sensitive is None:
            classes: sql.Composable = sql.SQL("SELECT n, n * ({r}) AS ls FROM {t}").format(
                r=row_ncp, t=table
            )
        else:
            group = (
                sql.SQL(" GROUP BY {}").format(sql.SQL(", ").join(keys)) if keys else sql.SQL("")
            )
            classes = sql.SQL("SELECT sum(n) AS n, sum(n * ({r})) AS ls FROM {t}{g}").format(
                r=row_ncp, t=table, g=group
            )
        small, ncp, count = self.conn.execute(
            sql.SQL(
                "SELECT coalesce(sum(n) FILTER (WHERE n < {k}), 0), "
                "coalesce(sum(ls) FILTER (WHERE n < {k}), 0), count(*) FROM ({classes}) c"
            ).format(k=sql.Literal(self.k), classes=classes)
        ).fetchone()
        self._rollup(node, small, table, rows, count)
        return int(small), float(ncp)

    def _rollup(
        self, node: np.ndarray, small: int, table: sql.Identifier, rows: int, count: int
    ) -> None:
        """Keep the class table of a failing node with far fewer classes (`count`) than the
        table it was counted from has rows: the walk climbs after a failure, and the nodes it
        checks next roll up from it."""
        if small > self.budget and rows >= ROLLUP_MIN_ROWS and count * ROLLUP_GAIN <= rows:
            keep = self.columns(node)
            if self.sensitive is not None:
                keep.append(sql.Identifier("s"))
            new = self._temp(f"n{len(self.tables)}")
            cur = self.conn.execute(
                sql.SQL(
                    "CREATE TEMP TABLE {new} AS SELECT sum(n)::int AS n, {keep} FROM {t} "
                    "GROUP BY {keep}"
                ).format(new=new, keep=sql.SQL(", ").join(keep), t=table)
            )
            if cur.rowcount * ROLLUP_GAIN <= rows:
                self.classes.append((node.copy(), new, int(cur.rowcount)))

    def suppressed(
        self, node: np.ndarray, models: Sequence[PrivacyModel] | None = None
    ) -> tuple[int, float]:
        """Rows suppressed at `node` when every class failing any model is (the release's own
        filter, `release_select`: classes under k first, then `kept_classes` of the other
        models over the rest), and the sum of their NCP, counted on the frequency set: each
        (class, sensitive value) cell is one weighted row, which changes no model's verdict."""
        self.judged += 1
        _, table, rows, keys, row_ncp = self._from(node)
        keys = keys or [sql.SQL("0")]  # the top node: one class
        names = [f"x{j}" for j in range(len(keys))]
        xs = [sql.Identifier(x) for x in names]
        x_list = sql.SQL(", ").join(xs)
        cells, big = sql.Identifier(f"{_PREFIX}cells"), sql.Identifier(f"{_PREFIX}big")
        target = Target(big, names, "s", count="n")
        kept, total, lost, count = self.conn.execute(
            sql.SQL(
                """WITH {cells} AS MATERIALIZED (
                       SELECT *, sum(n) OVER (PARTITION BY {xs}) AS size FROM (
                           SELECT {keys}, s, sum(n)::bigint AS n, sum(n * ({r}))::float8 AS ls
                           FROM {t} GROUP BY {group}, s) c),
                     {big} AS MATERIALIZED (SELECT {xs}, s, n FROM {cells} WHERE size >= {k}),
                     {keep} AS MATERIALIZED ({kept})
                   SELECT coalesce(sum(n) FILTER (WHERE kept), 0),
                          coalesce(sum(n), 0),
                          coalesce(sum(ls) FILTER (WHERE NOT kept), 0), count(*)
                   FROM (SELECT n, ls, size >= {k} AND ({xs}) IN (SELECT {qs} FROM {keep})
                         AS kept FROM {cells}) c"""
            ).format(
                cells=cells,
                xs=x_list,
                keys=sql.SQL(", ").join(
                    sql.SQL("{} AS {}").format(e, x) for e, x in zip(keys, xs, strict=True)
                ),
                r=row_ncp,
                t=table,
                group=sql.SQL(", ").join(sql.Literal(j + 1) for j in range(len(keys))),
                big=big,
                k=sql.Literal(self.k),
                keep=sql.Identifier(f"{_PREFIX}keep"),
                kept=kept_classes(target, self.models if models is None else models),
                qs=target.alias_list,
            )
        ).fetchone()
        self._rollup(node, int(total - kept), table, rows, int(count))
        return int(total - kept), float(lost)


def search(
    conn: psycopg.Connection,
    source: Relation,
    qi: list[Column],
    hierarchies: Mapping[str, AnyHierarchy],
    models: list[PrivacyModel],
    sensitive: str | None = None,
    max_suppression: float = 0.0,
    progress: Callable[[str], None] | None = None,
) -> FullDomainResult:
    """The full-domain generalisation of least loss that satisfies every model.

    Classes smaller than k (the largest k of the models), and then those failing any other
    model, are suppressed, at most max_suppression x rows of them. Runs in a transaction of
    its own, or a savepoint in the caller's; commits nothing the caller did not, and leaves no
    temp table behind. `progress` hears how many lattice nodes have been checked, a few times
    a second. Raises
    DbanonError naming the culprit on bad input, or when no node satisfies the models.
    """
    started = time.perf_counter()
    if not qi:
        raise DbanonError("at least one quasi-identifier is needed")
    names = [c.name for c in qi]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DbanonError(f"quasi-identifier {quote_ident(twice[0])} is named twice")
    if not 0.0 <= max_suppression <= 1.0:
        raise DbanonError(f"max_suppression must be within [0, 1], got {max_suppression}")
    for m in models:
        if m.needs_sensitive and not sensitive:
            raise DbanonError(f"{m.name} needs a sensitive column")
    k = _k_of(models)
    qis = []
    for col in qi:
        kind, h, height = _effective(col, hierarchies)
        if isinstance(h, Hierarchy):
            _check_stored(conn, h, col)
        qis.append(_QI(col, kind, h, height))
    others = [m for m in models if not isinstance(m, KAnonymity)]
    lattice = _Lattice(
        conn,
        qis,
        k,
        with_ncp=max_suppression > 0,
        sensitive=sensitive if others else None,
        models=others,
    )
    timings: dict[str, float] = {}
    # One transaction (a savepoint inside the caller's): the temp tables then cost no commit
    # each, and any error takes them away and leaves the caller's transaction usable.
    outermost = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with conn.transaction():
        if outermost and lattice.sensitive is None:
            # The k-only search reads the source in a few passes (no frequency set table):
            # one snapshot for all of them. (In a caller's transaction, its isolation holds;
            # a publish's is REPEATABLE READ.)
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        # Hundreds of short queries: JIT compiling each (the estimates over fresh temp tables
        # are wild) would cost far more than running it. The frequency set of mostly distinct
        # rows is as big as the source: its GROUP BYs hash in memory rather than spill (at
        # least SEARCH_WORK_MEM). Both restored at the end.
        with local_settings(
            conn, jit="off", work_mem=work_mem_at_least(conn, SEARCH_WORK_MEM)
        ):
            lattice.build(source)
            timings["build"] = round(time.perf_counter() - started, 4)
            total = lattice.total
            if k > total:
                raise DbanonError(f"k={k} is larger than the {total} rows of {source}")
            budget = lattice.budget = math.floor(max_suppression * total + 1e-9)
            eff = {q.col.name: q.h for q in qis if q.h is not None}
            # The walk counts on the models (or relaxations of them) that are monotone under
            # suppression, and judges nodes with every model only when some are not.
            relaxed = [r for r in map(_relaxed, others) if r is not None]
            count = partial(lattice.suppressed, models=relaxed) if relaxed else lattice.count
            exact = all(isinstance(m, MONOTONE_UNDER_SUPPRESSION) for m in others)
            walk = _Walk(lattice, budget, count, None if exact else lattice.suppressed, progress)
            best = walk.run()
            timings["walk"] = round(time.perf_counter() - started - timings["build"], 4)
            lattice.drop()
    if best is None:
        raise DbanonError(
            f"no full-domain generalisation of {source} satisfies "
            f"{', '.join(m.name for m in models)} with at most {budget} suppressed rows"
        )
    node, loss, suppressed = best
    return FullDomainResult(
        levels={q.col.name: int(lv) for q, lv in zip(qis, node, strict=True)},
        loss=round(max(0.0, min(1.0, loss)), 12),
        suppressed=suppressed,
        nodes=walk.size,
        nodes_checked=len(walk.counted),
        seconds=round(time.perf_counter() - started, 4),
        hierarchies=eff,
        model_checks=lattice.judged,
        timings=timings,
    )


Count = Callable[[np.ndarray], tuple[int, float]]  # a node -> rows suppressed, their NCP


class _Walk:
    """The lattice walk: nodes in increasing separable loss, statuses settled by binary search
    on chains and propagated over up- and down-sets.

    `count` gives the rows a node suppresses under criteria that are monotone under
    generalisation with suppression (a class that passes still passes merged with any other,
    so the rows suppressed at a node are suppressed at each of its descendants, and a node
    within the budget has every ancestor within it): k-anonymity, and with it distinct
    l-diversity and (p,k)-anonymity. `judge`, if given, counts the rows every model suppresses,
    for models that are not monotone; it runs on nodes `count` accepts, in loss order."""

    def __init__(
        self,
        lattice: _Lattice,
        budget: int,
        count: Count,
        judge: Count | None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.lattice, self.budget, self.count, self.judge = lattice, budget, count, judge
        self.progress, self.told = progress, time.perf_counter()
        heights = np.array([q.height for q in lattice.qis], dtype=np.int64)
        self.heights, d = heights, len(heights)
        self.size = int(np.prod(heights + 1))
        if self.size > MAX_LATTICE:
            raise DbanonError(
                f"the lattice has {self.size} nodes (more than {MAX_LATTICE}): use fewer "
                "quasi-identifiers or hierarchies with fewer levels"
            )
        # node index -> levels (int8: the lattice, not a level, is what can be big)
        self.grid = np.indices(tuple(heights + 1), dtype=np.int8).reshape(d, -1).T
        self.sep = sum(lattice.losses[i][self.grid[:, i]] for i in range(d)) / d
        self.status = np.zeros(self.size, dtype=np.int8)  # +1 within the budget, -1 over it
        self.penalty = np.zeros(self.size)  # a lower bound of each node's suppression loss
        self.counted: dict[int, tuple[int, float]] = {}

    def tell(self) -> None:
        """Nodes checked so far, to `progress`, at most every PROGRESS_EVERY seconds."""
        now = time.perf_counter()
        if self.progress is not None and now - self.told >= PROGRESS_EVERY:
            self.told = now
            judged = self.lattice.judged if self.judge is not None else 0
            self.progress(
                f"searching the lattice: {len(self.counted) + judged:,} of {self.size:,} "
                "nodes checked"
            )

    def evaluate(self, idx: int) -> None:
        self.tell()
        node = self.grid[idx]
        small, small_ncp = self.counted[idx] = self.count(node)
        below = np.all(self.grid <= node, axis=1)
        if small <= self.budget:
            self.status[np.all(self.grid >= node, axis=1)] = 1
        else:
            self.status[below] = -1
        if small:
            # Rows suppressed here are suppressed at every descendant too, where each costs at
            # least as much (1 per QI instead of a smaller NCP): a bound on their loss.
            d = len(node)
            penalty = (small * d - small_ncp) / (self.lattice.total * d)
            self.penalty[below] = np.maximum(self.penalty[below], penalty)

    def resolve(self, idx: int) -> None:
        """Binary search the chain from idx to the top that raises the cheapest QI first: the
        highest failing node it finds settles idx and a large down-set with it."""
        losses, heights = self.lattice.losses, self.heights
        node, path = self.grid[idx].copy(), [idx]
        while True:
            steps = [
                (losses[i][node[i] + 1] - losses[i][node[i]], i)
                for i in range(len(node))
                if node[i] < heights[i]
            ]
            if not steps:
                break
            node[min(steps)[1]] += 1
            path.append(int(np.ravel_multi_index(tuple(node), tuple(heights + 1))))
        lo, hi = 0, len(path)  # the first satisfying position on the path is in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if self.status[path[mid]] == 0:
                self.evaluate(path[mid])
            if self.status[path[mid]] > 0:
                hi = mid
            else:
                lo = mid + 1

    def run(self) -> tuple[np.ndarray, float, int] | None:
        """(node, loss, suppressed rows) of the optimum, or None.

        Exhaustive: a node is skipped only when a lower bound of its loss reaches the best
        loss found, or when it is known to suppress more than the budget."""
        total, d = self.lattice.total, len(self.heights)
        order = np.lexsort((np.arange(self.size), self.grid.sum(axis=1), np.round(self.sep, 12)))
        best: tuple[np.ndarray, float, int] | None = None
        best_loss = math.inf
        for idx in map(int, order):
            if self.sep[idx] >= best_loss:
                break  # a lower bound of this node's loss and of every later node's
            if self.sep[idx] + self.penalty[idx] >= best_loss:
                continue
            if self.status[idx] == 0:
                self.resolve(idx)
            if self.status[idx] < 0:
                continue
            if self.judge is not None:  # every model, counted afresh (they are not monotone)
                self.tell()
                small, small_ncp = self.judge(self.grid[idx])
                if small > self.budget:
                    continue
            else:
                if self.budget > 0 and idx not in self.counted:
                    self.evaluate(idx)
                small, small_ncp = self.counted.get(idx, (0, 0.0))
            loss = float((self.sep[idx] * total * d - small_ncp + small * d) / (total * d))
            if loss >= best_loss:
                continue
            best, best_loss = (self.grid[idx], loss, small), loss
            if self.budget == 0:
                break  # no suppression: loss is the order's key, the first node is the optimum
        return best
