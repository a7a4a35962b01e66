"""How a generalised numeric or date value reads in a release: text for people, or a typed range.

One module for every method, so a column reads the same whichever method published it.

`--ranges text` (the default) releases readable text: analysts read released values, and a text
column groups, sorts and exports as it reads.
- a value as itself: `60`, `2.5`, `-466`, `1990-01-01`;
- a range as PostgreSQL writes a range literal (issue 34): closed `[30,39]` (k-member and
  Mondrian groups; integer and day intervals of full-domain), half-open `[1.5,2)` (full-domain's
  intervals of a continuous column: from 1.5 to under 2, so adjacent intervals visibly do not
  overlap), dates and times alike (`[1990-01-01,1990-06-30]`). The bracket says which ends are
  in, the comma separates the ends, so a negative end reads as one (`[-466,-10]`,
  `[-10000,-1]`: the dash form read `-466--10`), numbers and dates read the same way, and the
  text casts to the column's range type as it is (`label::numrange`, `::daterange`). It is
  what PostgreSQL prints for a range (matter of taste, PostgreSQL's convention); `--ranges
  typed` releases the range itself. A CSV export quotes it (it holds a comma);
- a calendar period (full-domain's calendar levels): `2020-03-14`, `2020-03`, `2020-Q1`,
  `2020`, `2020s` (the decade 2020-2029);
- the whole domain: `*`.
- a categorical group: with a hierarchy, the label of the lowest common ancestor of its values;
  without one, the value if the group has one, else the set of values present, as PostgreSQL's
  text[] literal (`{13021,13045}`, so `label::text[]` reads it back and `'13021' = ANY(...)`
  tests it), or `*` when the group holds every value of the column. A set claims exactly what
  is there; a shared prefix (`130**`) would claim values the group lacks, and is a hierarchy's
  job. Its loss is (values covered - 1) / (values of the column - 1), 0 for one value, 1 for
  `*` (`set_loss`). Both are computed per group from leaf codes in numpy
  (`group_labels`), once per group, never per row, and without reading the catalog.
`--ranges typed` releases PostgreSQL ranges for consumers who compute with them (`@>`,
`lower()`, `&&`): the same intervals, the whole domain being the unbounded range `(,)`. A column
type always maps to the same range type (RANGE_TYPES), whichever method published it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from psycopg import sql

from dbanon.core.groupsort import by_group
from dbanon.core.hierarchy import Hierarchy
from dbanon.db.catalog import Column
from dbanon.errors import DbanonError

RANGE_FORMS = ("text", "typed")
DEFAULT_FORM = "text"
WHOLE = "*"  # the text form of the whole domain

# Range type of a column type (format_type() without its modifiers); other numerics: numrange.
RANGE_TYPES = {
    "smallint": "int4range",
    "integer": "int4range",
    "bigint": "int8range",
    "date": "daterange",
    "timestamp without time zone": "tsrange",
    "timestamp with time zone": "tstzrange",
}
# The element type of each range type: bounds are cast to it (an integer interval's ends are
# computed as bigint, a k-member group's min of a smallint is a smallint).
_ELEMENT_TYPES = {
    "int4range": "integer",
    "int8range": "bigint",
    "numrange": "numeric",
    "daterange": "date",
    "tsrange": "timestamp",
    "tstzrange": "timestamptz",
}
_MODIFIERS = re.compile(r"\(\d+(?:,\d+)?\)")

# Calendar periods, narrowest first: (length, to_char format of the text form).
PERIODS = {
    "day": ("1 day", "YYYY-MM-DD"),
    "month": ("1 month", "YYYY-MM"),
    "quarter": ("3 months", 'YYYY-"Q"Q'),
    "year": ("1 year", "YYYY"),
    "decade": ("10 years", 'YYYY"s"'),
}


def base_type(col: Column) -> str:
    """The column's type without its modifiers: `timestamp(3) without time zone` is a timestamp
    without time zone, `numeric(5,1)` a numeric."""
    return _MODIFIERS.sub("", col.type)


def range_type(col: Column) -> str:
    return RANGE_TYPES.get(base_type(col), "numrange")


def element_type(col: Column) -> str:
    """The type of the bounds of the column's range type (numeric, date...)."""
    return _ELEMENT_TYPES[range_type(col)]


def _check_form(form: str) -> None:
    if form not in RANGE_FORMS:
        raise DbanonError(f"ranges must be one of {', '.join(RANGE_FORMS)}, got {form!r}")


def _text(col: Column, x: sql.Composable) -> sql.Composable:
    """A value as text; numerics without trailing zeros (2.50 -> 2.5)."""
    if range_type(col) == "numrange":
        return sql.SQL("trim_scale({}::numeric)::text").format(x)
    return sql.SQL("{}::text").format(x)


def _typed(col: Column, low: sql.Composable, high: sql.Composable, bounds: str) -> sql.Composable:
    rt = range_type(col)
    return sql.SQL("{rt}({lo}::{e}, {hi}::{e}, {b})").format(
        rt=sql.SQL(rt), lo=low, hi=high, e=sql.SQL(_ELEMENT_TYPES[rt]), b=sql.Literal(bounds)
    )


def value(col: Column, x: sql.Composable, form: str) -> sql.Composable:
    """A value released as itself: its text, or the range holding only it."""
    _check_form(form)
    return _typed(col, x, x, "[]") if form == "typed" else _text(col, x)


def whole(col: Column, form: str) -> sql.Composable:
    """The whole domain: '*', or the unbounded range of the column's range type."""
    _check_form(form)
    if form == "typed":
        return sql.SQL("{}::{}").format(sql.Literal("(,)"), sql.SQL(range_type(col)))
    return sql.SQL("{}::text").format(sql.Literal(WHOLE))


def closed_range(
    col: Column, low: sql.Composable, high: sql.Composable, form: str
) -> sql.Composable:
    """The released value of [low, high] (both included) of a numeric or date QI."""
    _check_form(form)
    if form == "typed":
        return _typed(col, low, high, "[]")
    return sql.SQL(
        "CASE WHEN {lo} = {hi} THEN {l} ELSE '[' || {l} || ',' || {h} || ']' END"
    ).format(lo=low, hi=high, l=_text(col, low), h=_text(col, high))


def half_open_range(
    col: Column, low: sql.Composable, high: sql.Composable, form: str
) -> sql.Composable:
    """The released value of [low, high) of a continuous QI: `[1.5,2)`, or the range."""
    _check_form(form)
    if form == "typed":
        return _typed(col, low, high, "[)")
    return sql.SQL("'[' || {} || ',' || {} || ')'").format(_text(col, low), _text(col, high))


def local_time(col: Column, x: sql.Composable, zone: str) -> sql.Composable:
    """A date or timestamp as the `timestamp` its calendar periods are cut on: a timestamptz
    in `zone` (fixed when the release is made, so the periods do not depend on the reader's
    TimeZone), a date at its midnight (never via timestamptz, whose periods would)."""
    rt = range_type(col)
    if rt == "tstzrange":
        return sql.SQL("({} AT TIME ZONE {})").format(x, sql.Literal(zone))
    if rt == "daterange":
        return sql.SQL("{}::timestamp").format(x)
    return x


def period_start(unit: str, t: sql.Composable) -> sql.Composable:
    """The start of the calendar period (PERIODS) holding local timestamp t."""
    if unit not in PERIODS:
        raise DbanonError(f"unknown calendar period {unit!r}")
    return sql.SQL("date_trunc({}, {})").format(sql.Literal(unit), t)


def period_end(unit: str, start: sql.Composable) -> sql.Composable:
    """The end (excluded) of the period that begins at `start`."""
    return sql.SQL("({} + {}::interval)").format(start, sql.Literal(PERIODS[unit][0]))


def from_local(col: Column, t: sql.Composable, zone: str) -> sql.Composable:
    """A local timestamp back in the column's type (the inverse of local_time)."""
    rt = range_type(col)
    if rt == "tstzrange":
        return sql.SQL("({} AT TIME ZONE {})").format(t, sql.Literal(zone))
    if rt == "daterange":
        return sql.SQL("{}::date").format(t)
    return t


def period(col: Column, x: sql.Composable, unit: str, form: str, zone: str) -> sql.Composable:
    """The calendar period of date or timestamp x: `2020-Q1`, or the range covering it."""
    _check_form(form)
    start = period_start(unit, local_time(col, x, zone))
    if form == "typed":
        end = period_end(unit, start)
        return _typed(col, from_local(col, start, zone), from_local(col, end, zone), "[)")
    return sql.SQL("to_char({}, {})").format(start, sql.Literal(PERIODS[unit][1]))


# --- categorical groups ---------------------------------------------------------------------

_PLAIN_ELEMENT = re.compile(r'[^\s{}",\\]+')


def value_set(values: Sequence[str]) -> str:
    """A set of values as PostgreSQL's text[] literal, sorted: `{13021,13045}`. Elements that
    would not read back as themselves (commas, braces, quotes, blanks, NULL) are quoted."""

    return "{" + ",".join(_element(v) for v in sorted(values)) + "}"


_SET_ELEMENT = re.compile(r'"((?:[^"\\]|\\.)*)"|([^,]*)')


def read_value_set(text: str) -> list[str] | None:
    """The values of a `value_set` label (None when `text` is not one): what a consumer's
    tools (and the metrics) read a value-set cell as."""
    if len(text) < 2 or text[0] != "{" or text[-1] != "}":
        return None
    body, out, i = text[1:-1], [], 0
    while i <= len(body) and body:
        m = _SET_ELEMENT.match(body, i)
        assert m is not None  # the pattern matches the empty string too
        quoted, plain = m.group(1), m.group(2)
        out.append(re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else plain)
        i = m.end() + 1  # past the comma
    return out


def _element(v: str) -> str:
    """One element of a text[] literal, quoted where it would not read back as itself."""
    if _PLAIN_ELEMENT.fullmatch(v) and v.upper() != "NULL":
        return v
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class GroupIndex:
    """Rows sorted by group, once for every column labelled: the row order that sorts them,
    where each group starts in it, and the group ids present (sorted)."""

    order: np.ndarray
    starts: np.ndarray
    present: np.ndarray

    @classmethod
    def of(cls, gid: np.ndarray) -> GroupIndex:
        gid = np.asarray(gid)
        order = by_group(gid) if len(gid) and gid.min() >= 0 else (
            np.argsort(gid, kind="stable").astype(np.int32))  # fmt: skip
        sg = gid[order]
        starts = np.flatnonzero(np.r_[True, sg[1:] != sg[:-1]]) if len(sg) else (
            np.zeros(0, dtype=np.int64))  # fmt: skip
        return cls(order, starts, sg[starts])


def group_labels(
    h: Hierarchy, codes: np.ndarray, index: GroupIndex, as_set: bool
) -> tuple[np.ndarray, list[str], np.ndarray | None]:
    """(label id of each group of `index`, the labels, and with `as_set` the values each group
    covers): the label of the lowest common ancestor of the group's leaves in `h` (ids:
    hierarchy nodes, labels: h.labels), or with `as_set` (a column without a hierarchy, `h`
    its flat one) the value, the set of values present, or `*` for all of them (ids into the
    distinct labels made, each made once)."""
    order, starts = index.order, index.starts
    leaves = np.asarray(codes)[order]
    if not as_set:
        # Balanced trees: the LCA of a group is at the lowest level where its ancestors agree
        # (one level's ancestors of every row at a time: no table of rows x levels).
        table = h.ancestor_table()
        nodes = np.zeros(len(starts), dtype=np.int64)  # every group agrees at the root
        found = np.zeros(len(starts), dtype=bool)
        for lv in range(h.height + 1):
            col = table[leaves, lv]
            agree = ~found & (np.maximum.reduceat(col, starts) == np.minimum.reduceat(col, starts)
                              ) if len(starts) else found  # fmt: skip
            nodes[agree] = col[starts[agree]]
            found |= agree
        return nodes, list(h.labels), None
    top = int(leaves.max()) + 1 if len(leaves) else 0
    if top <= 64:  # each group's values as the bits of one integer: a label per distinct set
        bits = np.left_shift(np.uint64(1), np.arange(top, dtype=np.uint64))  # one per value
        masks = np.bitwise_or.reduceat(bits[leaves], starts) if len(starts) else (
            np.zeros(0, np.uint64))  # fmt: skip
        distinct, ids = np.unique(masks, return_inverse=True)
        sets = [[v for v in range(top) if int(m) >> v & 1] for m in distinct.tolist()]
        covered = np.array([len(x) for x in sets], dtype=np.int64)[ids.reshape(-1)]
        return ids.reshape(-1).astype(np.int64), [_set_label(h, x) for x in sets], covered
    # Distinct (group, leaf) pairs, sorted: each group's values are one run of them.
    pairs = np.repeat(np.arange(len(starts), dtype=np.int64), np.diff(np.r_[starts, len(leaves)]))
    width = int(leaves.max()) + 1 if len(leaves) else 1
    pairs *= width
    pairs += leaves
    pairs.sort()
    pairs = pairs[np.r_[True, pairs[1:] != pairs[:-1]]] if len(pairs) else pairs
    owner, value = pairs // width, (pairs % width).tolist()
    bounds = np.r_[0, np.flatnonzero(np.diff(owner)) + 1, len(pairs)].tolist()
    made: dict[str, int] = {}
    ids = np.empty(len(starts), dtype=np.int64)
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        ids[i] = made.setdefault(_set_label(h, value[a:b]), len(made))
    return ids, list(made), np.diff(np.asarray(bounds, dtype=np.int64))


def _set_label(h: Hierarchy, values: list[int]) -> str:
    """The released label of a group of these distinct leaves of a flat hierarchy: the value,
    `*` for all of them, else their set (value_set's form, elements in the order of their
    text)."""
    names = h.labels
    if len(values) == 1:
        return names[values[0]]
    if len(values) == len(h.leaves):
        return WHOLE
    return "{" + ",".join(_element(names[v]) for v in sorted(values, key=names.__getitem__)) + "}"


def set_loss(covered: np.ndarray, index: GroupIndex, rows: int, domain: int) -> float:
    """Mean over rows of (values in the row's group - 1) / (domain - 1): the loss of a column
    released as value sets (0 when the column has one value), from each group's values."""
    if not rows or domain <= 1:
        return 0.0
    sizes = np.diff(np.r_[index.starts, rows])
    return float(((covered - 1) / (domain - 1) * sizes).sum() / rows)


def values_per_group(codes: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """int64[g]: distinct codes in each group, for rows sorted by group (`starts`: where each
    group begins). One int64 key per row, sorted in place: groups keep their ranges (the group
    is the key's major part), and a group's distinct codes are the places its keys change."""
    n, g = len(codes), len(starts)
    if not n:
        return np.zeros(g, dtype=np.int64)
    width = int(codes.max()) + 1
    key = np.repeat(np.arange(g, dtype=np.int64) * width, np.diff(np.r_[starts, n]))
    key += codes
    key.sort()
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    del key
    return np.add.reduceat(new, starts, dtype=np.int64)
