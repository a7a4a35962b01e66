"""A k-only full-domain search counted in numpy (dbanon.setlogic.lattice): each QI's
generalisation map made in SQL from its distinct values, every row coded by its values' places
in the maps (`_Coded.streamed`: the rows read once, the distinct values theirs; `_Coded.fetch`:
the maps first, then the rows as level-0 codes in parts of the source's pages), equal rows
grouped, and a node's classes a bincount or np.unique of one mixed-radix key per row, rolled up
from the smallest table of a failing descendant."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.core.groupsort import distinct
from dbanon.db.catalog import Column, Relation
from dbanon.errors import DbanonError, quote_ident
from dbanon.setlogic.hierarchies import (
    AnyHierarchy,
    IntervalHierarchy,
    _as_number,
)

# Temp tables of a search (one search at a time per session), all dropped before it returns.
_PREFIX = "dbanon_fd_"


# A node counted from a class table of at least ROLLUP_MIN_ROWS rows gets its own class table
# when it has at most 1/ROLLUP_GAIN as many classes: a table its ancestors roll up from.
ROLLUP_MIN_ROWS, ROLLUP_GAIN = 1000, 4


@dataclass
class _QI:
    col: Column
    kind: str  # 'stored', 'interval', 'calendar' or 'flat'
    h: AnyHierarchy | None  # None: flat, or an automatic hierarchy still to be made from the data
    height: int


# Rows of the source fetched at once by a k-only search (`_Coded.fetch`): the server builds
# each part's columns as arrays, so this bounds what it sends and the client holds at once.
PART_ROWS = 250_000


def _tid_ranges(conn: psycopg.Connection, source: Relation, rows: int) -> list[sql.Composable]:
    """Conditions that split a table's rows into parts of about PART_ROWS rows by page (ctid
    ranges, each row in exactly one: also for a partitioned table, whose partitions share
    the page numbers); one condition, TRUE, for a view or a small table."""
    pages = 0
    if source.kind in ("r", "m", "p") and rows > PART_ROWS:
        # A partitioned table's own size is 0: its largest partition's pages count.
        size = sql.SQL(
            "SELECT coalesce(max(pg_relation_size(relid)), 0) FROM pg_partition_tree({})"
            if source.kind == "p"
            else "SELECT pg_relation_size({})"
        ).format(source.regclass)
        block = conn.execute("SELECT current_setting('block_size')::int").fetchone()[0]
        pages = int(conn.execute(size).fetchone()[0] or 0) // block
    step = -(-pages * PART_ROWS // max(rows, 1))  # pages per part (ceil)
    if pages <= step or step <= 0:
        return [sql.SQL("TRUE")]
    bounds = list(range(0, pages, step))
    parts = []
    for j, low in enumerate(bounds):
        lo = sql.SQL("ctid >= {}::tid").format(sql.Literal(f"({low},0)"))
        if j + 1 == len(bounds):  # open-ended: whatever the relation holds past its size
            parts.append(lo)
        else:
            hi = sql.SQL("ctid < {}::tid").format(sql.Literal(f"({bounds[j + 1]},0)"))
            parts.append(sql.SQL("{} AND {}").format(lo, hi))
    return parts


def _look_up(v: np.ndarray, c0: np.ndarray, x: np.ndarray) -> np.ndarray | None:
    """The code c0[j] of each x where v[j] == x (v sorted, distinct), or None when an x is not
    in v: by an array over v's range where it is small (integers: ages, zip codes), else by a
    binary search."""
    if not len(x):
        return c0[:0]
    if not len(v):
        return None
    span = int(v[-1]) - int(v[0]) + 1
    if span <= 4 * len(x) + (1 << 16):
        table = np.full(span, -1, dtype=np.int64)
        table[v.astype(np.int64) - int(v[0])] = c0
        at = x.astype(np.int64) - int(v[0])
        if int(at.min()) < 0 or int(at.max()) >= span:
            return None
        out = table[at]
        return None if bool((out < 0).any()) else out
    pos = np.searchsorted(v, x)
    if pos.max() >= len(v) or not np.array_equal(v[pos], x):
        return None
    return c0[pos]


def _found(
    q: _QI, values: tuple[np.ndarray, np.ndarray] | None, x: np.ndarray
) -> np.ndarray:
    """`x` coded by `_look_up` in `values` (or codes already, -1 for none), or the one-line
    error for a value its map lacks."""
    out = x if values is None else _look_up(*values, x)
    if out is None or (len(out) and int(out.min()) < 0):
        raise DbanonError(f"a value of {quote_ident(q.col.name)} is missing from its map")
    return out


def _whole_interval(q: _QI) -> bool:
    """An interval QI of whole numbers (integers, days): read as its number, looked up."""
    return isinstance(q.h, IntervalHierarchy) and q.h.base != "numeric"


@dataclass
class _Maps:
    """Each QI's map read from its temp table: per level a lookup from a level-0 code to the
    level's code (`looks`), the level's number of codes (`cards`) and NCP (`ncps`); and for a
    QI read as a number, its distinct numbers sorted with their level-0 codes (`values`)."""

    looks: list[list[np.ndarray]]
    cards: list[list[int]]
    ncps: list[list[np.ndarray]]
    values: dict[int, tuple[np.ndarray, np.ndarray]]

    @classmethod
    def read(
        cls, conn: psycopg.Connection, qis: list[_QI],
        number: Mapping[int, Callable[[sql.Composable], sql.Composable]],
    ) -> _Maps:  # fmt: skip
        """Each map as one array value per column (`fetch_arrays`); `number(v)` of a QI is
        fetched beside its codes, and kept in `values` when it names one value (no two of its
        distinct values share it: a hash may collide)."""
        from dbanon.db.stream import fetch_arrays

        out = cls([], [], [], {})
        for i, q in enumerate(qis):
            cols: list[sql.Composable] = [sql.SQL("array_agg(c0::int8)")]
            for level in range(1, q.height):
                cols.append(sql.SQL("array_agg({}::int8)").format(sql.Identifier(f"c{level}")))
                cols.append(sql.SQL("array_agg({}::float8)").format(sql.Identifier(f"r{level}")))
            if i in number:
                cols.append(sql.SQL("array_agg({})").format(number[i](sql.SQL("v"))))
            m = fetch_arrays(
                conn,
                sql.SQL("SELECT {} FROM {}").format(
                    sql.SQL(", ").join(cols), sql.Identifier(f"{_PREFIX}m{i}")
                ),
            )
            c0 = m[0]
            if i in number:
                order = np.argsort(m[-1], kind="stable")
                v = m[-1][order]
                if len(v) < 2 or np.all(v[1:] != v[:-1]):
                    out.values[i] = (v, c0[order])
            size = int(c0.max(initial=0)) + 1
            look, card, ncp = [np.arange(size, dtype=np.int64)], [size], [np.zeros(size)]
            for level in range(1, q.height):
                labels, dense = np.unique(m[2 * level - 1], return_inverse=True)
                lk = np.zeros(size, dtype=np.int64)
                lk[c0] = dense.reshape(-1)
                nc = np.zeros(size)
                nc[c0] = m[2 * level]
                look.append(lk)
                card.append(len(labels))
                ncp.append(nc)
            out.looks.append(look)
            out.cards.append(card)
            out.ncps.append(ncp)
        return out


class _Coded:
    """The frequency set of a k-only search in numpy: each distinct QI combination as one row
    of level-0 codes with its weight (rows of the source), and per QI and level a lookup from
    a level-0 code to the code (and NCP) of its label at that level.

    A node's classes are then one key per row (the mixed-radix number of its codes at the
    node's levels), summed by weight with bincount, or over np.unique's inverse where the key
    space is large: tens of milliseconds for a million rows, where a GROUP BY over the same
    rows in SQL takes about a second. Hierarchies nest (a label has one parent at each level
    above), so the classes of an ancestor are unions of a node's classes, and a class is
    represented by any one of its rows: the table of a failing node with far fewer classes
    is kept (one representative row per class, weighted by its size) and its ancestors are
    counted from it (Flash's roll-up, as the SQL side does)."""

    def __init__(
        self,
        qis: list[_QI],
        codes: np.ndarray,
        weights: np.ndarray,
        looks: list[list[np.ndarray]],
        cards: list[list[int]],
        ncps: list[list[np.ndarray]],
        with_ncp: bool,
    ) -> None:
        self.heights = [q.height for q in qis]
        self.looks, self.cards, self.ncps, self.with_ncp = looks, cards, ncps, with_ncp
        # (node, representative level-0 codes per class, weights): roll-up sources
        self.tables: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = [
            (np.zeros(len(qis), dtype=np.int64), codes, weights)
        ]

    @classmethod
    def fetch(
        cls,
        conn: psycopg.Connection,
        qis: list[_QI],
        parts: list[sql.Composable],
        joins: list[sql.Composable],
        with_ncp: bool,
        total: int,
    ) -> _Coded:
        """Fetch each row's level-0 codes, and each QI's map (one row per distinct value) as
        lookups: each column as one array value (`fetch_arrays`). Every row weighs 1 (`parts` read
        the source); equal rows are grouped below. Integer and date interval QIs come as their
        numbers, text QIs as hashtext() of their value (when their distinct values' hashes
        differ), coded here by a binary search in their map, which saves a join of every row
        to it in SQL; the others (and text whose hashes collide) through a hash join. The rows
        come in `parts` (ranges of the source's pages, `_tid_ranges`), so that what the server
        sends at once stays bounded however large the source (`total` rows in all)."""
        from dbanon.db.stream import fetch_arrays

        d = len(qis)
        # A QI fetched as a number per row: integer and date intervals as themselves, text
        # as hashtext() of it, when no two of its distinct values share a hash (then a hash
        # names one value, as the value does: every row's value is in the map).
        number: dict[int, Callable[[sql.Composable], sql.Composable]] = {}
        for i, q in enumerate(qis):
            if _whole_interval(q):
                number[i] = partial(sql.SQL("{}::int8").format)
            elif q.kind in ("flat", "stored"):
                number[i] = partial(sql.SQL("hashtext({})").format)  # int4
        maps = _Maps.read(conn, qis, number)
        values = maps.values
        direct = set(values)
        for i, (v, _) in values.items():
            if v.dtype == np.int64 and len(v) and v[0] >= -(2**31) and v[-1] < 2**31:
                number[i] = partial(sql.SQL("{}::int4").format)  # every value fits: half the bytes
        agg = [
            sql.SQL("array_agg({})").format(
                number[i](sql.SQL("fs.{}").format(sql.Identifier(f"q{i}")))
            )
            if i in direct
            else sql.SQL("array_agg({}.c0)").format(sql.Identifier(f"m{i}"))
            for i in range(d)
        ]
        codes = np.zeros((total, d), dtype=np.int32)
        rows = 0
        for part in parts:
            out = fetch_arrays(
                conn,
                sql.SQL("SELECT {} FROM {} {}").format(
                    sql.SQL(", ").join(agg),
                    part,
                    sql.SQL(" ").join(j for i, j in enumerate(joins) if i not in direct),
                ),
            )
            got = len(out[0])
            if rows + got > total:
                raise DbanonError("the source changed while the search read it")
            block = codes[rows : rows + got]
            for i in range(d):
                block[:, i] = _found(qis[i], values[i], out[i]) if i in direct else out[i]
                out[i] = np.empty(0)  # freed as soon as copied
            rows += got
        if rows != total:
            raise DbanonError("the source changed while the search read it")
        return cls.grouped(qis, codes, maps, with_ncp)

    @classmethod
    def streamed(
        cls, conn: psycopg.Connection, qis: list[_QI], source: Relation, total: int,
        with_ncp: bool, value_map: Callable[[int, list[Any], bool], None],
    ) -> _Coded | None:  # fmt: skip
        """The source's rows read once (one binary COPY; in parts on several backends where
        the source is large), where every QI is text (flat or a stored hierarchy's) or an
        interval of whole numbers (integers, days); None, reading nothing, otherwise. Where
        the fetch reads the source three times (every QI's distinct values in one GROUPING
        SETS, 1.1 s at a million rows; each map from them; the rows as level-0 codes, 1.5 s),
        this reads it once (0.7 s): each QI's distinct values are the stream's, so its map is
        made from them (`value_map(i, values, is_text)`, or the stored hierarchy's, made
        already), and each row's code is its value's in the map: a binary search for numbers,
        the stream's own code of a text (its bytes, as the map's "C" collation compares them)
        looked up once per distinct text."""
        from dbanon.db.parts import copy_parts, where
        from dbanon.db.stream import Coded, fetch_arrays

        exprs: list[sql.Composable] = []
        kinds: list[str] = []
        for q in qis:
            if _whole_interval(q):
                assert isinstance(q.h, IntervalHierarchy)
                exprs.append(sql.SQL("{}::int8").format(_as_number(q.h.base, q.col.ident)))
                kinds.append("int8")  # NULL, read as 0, is refused by the search's stats
            elif q.kind in ("flat", "stored"):
                exprs.append(sql.SQL('{}::text COLLATE "C"').format(q.col.ident))
                kinds.append("text")
            else:
                return None
        # In parts of the source's pages on several backends where it is large (db/parts):
        # the same rows in the same order; text codes are names, looked up below. The search
        # runs in a savepoint: the parts read the run's snapshot, exported as it began.
        columns: list[Any] = copy_parts(
            conn, lambda w: sql.SQL("SELECT {} FROM {} s{}").format(
                sql.SQL(", ").join(exprs), source.ident, where(w)),
            source, "s", kinds, total, export=False,
        )  # fmt: skip
        d = len(qis)
        for i, (q, col) in enumerate(zip(qis, columns, strict=True)):
            if q.kind != "stored":
                text = isinstance(col, Coded)
                value_map(i, col.values if text else distinct(col).tolist(), text)
        number = {i: partial(sql.SQL("{}::int8").format)
                  for i, q in enumerate(qis) if _whole_interval(q)}  # fmt: skip
        maps = _Maps.read(conn, qis, number)
        codes = np.zeros((total, d), dtype=np.int32)
        for i, col in enumerate(columns):
            if len(col.codes if isinstance(col, Coded) else col) != total:
                raise DbanonError("the source changed while the search read it")
            if isinstance(col, Coded):
                (lut,) = fetch_arrays(conn, sql.SQL(
                    "SELECT array_agg(coalesce(m.c0, -1) ORDER BY u.o) FROM unnest(%s::text[]) "
                    'WITH ORDINALITY AS u(t, o) LEFT JOIN {} m ON m.v = u.t COLLATE "C"'
                ).format(sql.Identifier(f"{_PREFIX}m{i}")), [col.values])  # fmt: skip
                codes[:, i] = _found(qis[i], None, lut[col.codes])
            else:
                codes[:, i] = _found(qis[i], maps.values[i], col)
            columns[i] = None  # freed as soon as coded
        return cls.grouped(qis, codes, maps, with_ncp)

    @classmethod
    def grouped(
        cls, qis: list[_QI], codes: np.ndarray, maps: _Maps, with_ncp: bool
    ) -> _Coded:
        """The search's counting over every row's level-0 codes: equal rows as one, weighted
        (the frequency set, grouped here rather than in SQL), in the order of their key
        (np.unique's), so that sums over it add up in one order."""
        from dbanon.setlogic import codedkernels

        rows, d = codes.shape
        weights = np.ones(rows, dtype=np.int64)
        coded = cls(qis, codes, weights, maps.looks, maps.cards, maps.ncps, with_ncp)
        key, space = coded._node_key(np.zeros(d, dtype=np.int64), codes)
        found = codedkernels.classes(key, weights, space, 1)
        distinct, sizes, first = found[1], found[3], found[4]
        del found  # each row's class: not needed (a few MiB at the peak of the search)
        if distinct < rows:
            by_key = np.argsort(key[first], kind="stable")
            del key
            coded.tables = [(coded.tables[0][0], codes[first[by_key]], sizes[by_key])]
        return coded

    def losses(self, total: int) -> list[np.ndarray]:
        """Per QI, the mean NCP of the rows at each level (as _Lattice._losses in SQL)."""
        _, codes, w = self.tables[0]
        out = []
        for i, height in enumerate(self.heights):
            per = [0.0]
            per += [
                float(np.dot(w, self.ncps[i][lv][codes[:, i]])) / max(total, 1)
                for lv in range(1, height)
            ]
            per.append(1.0)
            out.append(np.maximum.accumulate(np.array(per)))  # no rounding wobble
        return out

    def _key(self, node: np.ndarray, rep: np.ndarray) -> tuple[np.ndarray, int]:
        """Each row's class at `node` as one int64 (mixed radix over the node's codes below
        the top, re-numbered densely before the radix could overflow), and the key space."""
        key: np.ndarray | None = None
        space = 1
        for i, lv in enumerate(map(int, node)):
            if lv >= self.heights[i]:
                continue
            col = self.looks[i][lv][rep[:, i]]
            card = self.cards[i][lv]
            if key is None:
                key, space = col, card
                continue
            if space * card >= 1 << 62:
                distinct, inverse = np.unique(key, return_inverse=True)
                key, space = inverse.reshape(-1).astype(np.int64), len(distinct)
            key = key * card + col
            space *= card
        if key is None:
            return np.zeros(len(rep), dtype=np.int64), 1
        return key, space

    def _node_key(self, node: np.ndarray, rep: np.ndarray) -> tuple[np.ndarray, int]:
        """`_key`, in one compiled pass over the rows when the key space fits in an int64."""
        from dbanon.setlogic import codedkernels

        cols = [i for i, lv in enumerate(map(int, node)) if lv < self.heights[i]]
        cards = [self.cards[i][int(node[i])] for i in cols]
        if not cols or math.prod(cards) >= 1 << 62:
            return self._key(node, rep)
        looks = [self.looks[i][int(node[i])] for i in cols]
        offs = np.cumsum([0] + [len(x) for x in looks[:-1]]).astype(np.int64)
        key = codedkernels.node_keys(np.ascontiguousarray(rep), np.array(cols, dtype=np.int64),
                                     np.concatenate(looks).astype(np.int64), offs,
                                     np.array(cards, dtype=np.int64))  # fmt: skip
        return key, math.prod(cards)

    def count(self, node: np.ndarray, k: int, budget: int) -> tuple[int, float]:
        """Rows in classes smaller than k at `node` and the sum of their NCP (0 unless asked),
        counted from the smallest table of a descendant; see _Lattice.count."""
        from dbanon.setlogic import codedkernels

        _, rep, w = min(
            (t for t in self.tables if np.all(t[0] <= node)), key=lambda t: len(t[2])
        )
        key, space = self._node_key(node, rep)
        small, classes, inverse, sizes, first = codedkernels.classes(
            key, np.ascontiguousarray(w, dtype=np.int64), space, k)  # fmt: skip
        small = int(small)
        ncp = 0.0
        if small and self.with_ncp:
            row_ncp = np.zeros(len(rep))
            for i, lv in enumerate(map(int, node)):
                if lv >= self.heights[i]:
                    row_ncp += 1.0
                elif lv > 0:
                    row_ncp += self.ncps[i][lv][rep[:, i]]
            ncp = float((w * row_ncp)[sizes[inverse] < k].sum())
        rows = len(key)
        if small > budget and rows >= ROLLUP_MIN_ROWS and classes * ROLLUP_GAIN <= rows:
            # one row per class in the order of its key (np.unique's): sums over the table
            # then add up in the same order whichever way it was counted
            by_key = np.argsort(key[first], kind="stable")
            self.tables.append((node.copy(), rep[first[by_key]], sizes[by_key]))
        return small, ncp
