"""A table-shaped release read as boxes and buckets: what query error and exposure work on.

Every release that publishes rows (a generalised table, Anatomy's QIT/ST, a CBG QIT/ST, ...)
reads the same way to an attacker or an analyst: each released row stands for a box of possible
QI points (a numeric interval per numeric QI, a set of values per categorical QI) and lies in a
bucket whose sensitive values are known as a multiset, not which row holds which.
- a generalised table: each row is its own bucket (its sensitive value is published with it);
- Anatomy: boxes are points (the QIs are published as they are), buckets are its groups;
- CBG: boxes are the groups' generalised QIs, buckets are its buckets.
The source reads the same way with point boxes and one-row buckets, which is how exact answers
are computed by the same code.

Released values are parsed from their text form, as any consumer reads them: a number, `a-b`,
`a-<b` (half-open), `*`, a typed range `[a,b)`; a categorical value, `*`, or a label of the
column's hierarchy (standing for every leaf under it). Intervals are snapped to the source's
active domain (the values the column takes), so an integer range `[36,38)` is {36, 37} and
predicates drawn from that domain are decided exactly.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql

from dbanon.core import generalise
from dbanon.core.hierarchy import Hierarchy
from dbanon.errors import DbanonError, quote_ident

WHOLE = "*"
_NUMBER = r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_TEXT_RANGE = re.compile(rf"^({_NUMBER})(?:-(<)?({_NUMBER}))?$")
_TYPED_RANGE = re.compile(r"^([\[(])([^,]*),([^,]*)([\])])$")


@dataclass(frozen=True)
class Attribute:
    """A QI as the metrics see it: its name, whether numeric, and its domain in the source
    (sorted distinct values: numbers for a numeric QI, text for a categorical one)."""

    name: str
    numeric: bool
    domain: np.ndarray
    hierarchy: Hierarchy | None = None

    def index(self) -> dict[str, int]:
        return {v: i for i, v in enumerate(self.domain.tolist())}


@dataclass
class Bucketed:
    """n released rows: their boxes, buckets and the buckets' sensitive multisets."""

    lo: np.ndarray  # float64 (n, numeric QIs): the box's smallest domain value
    hi: np.ndarray  # float64 (n, numeric QIs): its largest
    cats: list[np.ndarray]  # per categorical QI: bool (n, |domain|) values the box may hold
    bucket: np.ndarray  # int64 (n,): bucket index 0..B-1
    values: np.ndarray  # object: every bucket's sensitive values as text, bucket after bucket
    offsets: np.ndarray  # int64 (B + 1,): bucket b's values are values[offsets[b]:offsets[b+1]]

    @property
    def n(self) -> int:
        return int(self.bucket.shape[0])

    @property
    def buckets(self) -> int:
        return int(self.offsets.shape[0] - 1)

    def box_keys(self) -> np.ndarray:
        """One integer per row; rows with equal boxes get equal keys (classes of the release)."""
        if self.n == 0:
            return np.zeros(0, dtype=np.int64)
        # Each row's box as bytes (bounds as float64, +0.0 folding -0.0 into 0.0; category
        # masks as bits), compared as one opaque item: np.unique over rows of a wide float
        # table sorted column by column and cost most of a small publish's exposure.
        bounds = [np.ascontiguousarray(b.reshape(self.n, -1) + 0.0).view(np.uint8)
                  for b in (self.lo, self.hi)]  # fmt: skip
        masks = [np.packbits(c.reshape(self.n, -1).astype(bool), axis=1) for c in self.cats]
        table = np.ascontiguousarray(np.concatenate([*bounds, *masks], axis=1))
        rows = table.view(np.dtype((np.void, table.shape[1]))).reshape(-1)
        return np.unique(rows, return_inverse=True)[1].reshape(-1).astype(np.int64)


def attributes(
    conn: psycopg.Connection,
    source: sql.Composable,
    qi: list[str],
    numeric: list[bool],
    hierarchies: dict[str, Hierarchy] | None = None,
) -> list[Attribute]:
    """The QIs' domains as the source holds them."""
    out = []
    for name, is_num in zip(qi, numeric, strict=True):
        col = sql.Identifier(name)
        cast = sql.SQL("{}::float8" if is_num else "{}::text").format(col)
        vals = [r[0] for r in conn.execute(
            sql.SQL("SELECT DISTINCT {} FROM {} WHERE {} IS NOT NULL ORDER BY 1").format(
                cast, source, col)).fetchall()]  # fmt: skip
        domain = np.asarray(vals, dtype=np.float64 if is_num else object)
        out.append(Attribute(name, is_num, domain, (hierarchies or {}).get(name)))
    return out


def numeric_bounds(text: str, attr: Attribute) -> tuple[float, float]:
    """The smallest and largest domain value a released numeric value may stand for."""
    t = text.strip()
    lo, hi, lo_open, hi_open = -math.inf, math.inf, False, False
    if t not in (WHOLE, "(,)"):
        m = _TEXT_RANGE.match(t)
        if m:
            lo = float(m.group(1))
            hi = float(m.group(3)) if m.group(3) is not None else lo
            hi_open = m.group(2) is not None
        else:
            m = _TYPED_RANGE.match(t)
            if not m:
                raise DbanonError(
                    f"cannot read {text!r} of column {quote_ident(attr.name)} as a number or range"
                )
            lo = float(m.group(2)) if m.group(2) else -math.inf
            hi = float(m.group(3)) if m.group(3) else math.inf
            lo_open, hi_open = m.group(1) == "(", m.group(4) == ")"
    d = attr.domain
    i = int(np.searchsorted(d, lo, side="right" if lo_open else "left"))
    j = int(np.searchsorted(d, hi, side="left" if hi_open else "right")) - 1
    if i > j:  # no source value inside: an empty box (nothing can match it)
        return math.inf, -math.inf
    return float(d[i]), float(d[j])


def category_mask(text: str, attr: Attribute) -> np.ndarray:
    """Which domain values a released categorical value may stand for."""
    d = attr.domain.tolist()
    if text == WHOLE:
        return np.ones(len(d), dtype=bool)
    mask = np.array([v == text for v in d], dtype=bool)
    members = None if mask.any() else generalise.read_value_set(text)
    if members is not None:  # a column without a hierarchy, released as the values present
        return np.isin(np.asarray(d, dtype=object), members)
    h = attr.hierarchy
    if h is not None and text in h.labels:
        for i, v in enumerate(d):
            if v in h.leaves and any(h.labels[a] == text for a in h.ancestors(h.leaves[v])):
                mask[i] = True
    if not mask.any() and (h is None or text not in h.labels):
        raise DbanonError(
            f"released value {text!r} of column {quote_ident(attr.name)} is neither a source "
            "value, '*' nor a label of its hierarchy"
        )
    return mask


def read_boxes(texts: list[list[str]], attrs: list[Attribute]) -> tuple:
    """(lo, hi, cats) of rows given as released text per QI (one list per column)."""
    n = len(texts[0]) if texts else 0
    nums = [a for a in attrs if a.numeric]
    lo = np.empty((n, len(nums)))
    hi = np.empty((n, len(nums)))
    cats = []
    j = 0
    for col, attr in zip(texts, attrs, strict=True):
        if attr.numeric:
            memo: dict[str, tuple[float, float]] = {}
            pairs = [memo[v] if v in memo else memo.setdefault(v, numeric_bounds(v, attr))
                     for v in col]  # fmt: skip
            arr = np.asarray(pairs, dtype=np.float64).reshape(n, 2)
            lo[:, j], hi[:, j] = arr[:, 0], arr[:, 1]
            j += 1
        else:
            labels, inverse = np.unique(np.asarray(col, dtype=object), return_inverse=True)
            table = np.stack([category_mask(str(v), attr) for v in labels.tolist()]) if n else (
                np.zeros((0, len(attr.domain)), dtype=bool))  # fmt: skip
            cats.append(table[inverse.reshape(-1)])
    return lo, hi, cats


def bucketed(
    texts: list[list[str]],
    attrs: list[Attribute],
    bucket_of_row: np.ndarray,
    bucket_values: dict[int, list[str]] | None = None,
    row_values: np.ndarray | None = None,
) -> Bucketed:
    """Boxes from released text, with buckets either per row (`row_values`: each row its own
    bucket holding its value) or given (`bucket_of_row` ids and each id's values)."""
    lo, hi, cats = read_boxes(texts, attrs)
    if row_values is not None:
        n = len(row_values)
        order = np.arange(n)
        return Bucketed(lo, hi, cats, order, np.asarray(row_values, dtype=object),
                        np.arange(n + 1))  # fmt: skip
    assert bucket_values is not None
    ids = sorted(bucket_values)
    index = {b: i for i, b in enumerate(ids)}
    try:
        bucket = np.fromiter((index[b] for b in bucket_of_row.tolist()), np.int64,
                             len(bucket_of_row))  # fmt: skip
    except KeyError as e:
        raise DbanonError(f"released rows name bucket {e.args[0]}, which holds no values") from None
    sizes = np.array([len(bucket_values[b]) for b in ids], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    values = np.asarray([v for b in ids for v in bucket_values[b]], dtype=object)
    return Bucketed(lo, hi, cats, bucket, values, offsets)


def fetch_text(
    conn: psycopg.Connection, rel: sql.Composable, columns: list[str]
) -> list[list[str]]:
    """Columns of a relation as text, one list per column (NULL as '*': nothing known)."""
    rows = conn.execute(
        sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(sql.SQL("coalesce({}::text, '*')").format(sql.Identifier(c))
                               for c in columns), rel)  # fmt: skip
    ).fetchall()
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in columns]


def source_points(
    conn: psycopg.Connection, source: sql.Composable, attrs: list[Attribute], sensitive: str
) -> Bucketed:
    """The source as point boxes, each row its own bucket (for exact answers and attackers)."""
    cols = [a.name for a in attrs]
    texts = fetch_text(conn, source, [*cols, sensitive])
    sens = texts.pop()
    return bucketed(texts, attrs, np.zeros(0), row_values=np.asarray(sens, dtype=object))
