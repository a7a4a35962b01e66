"""Full-domain generalisation, searched and released as SQL.

Full-domain generalisation maps every value of a quasi-identifier (QI) to the same level of its
hierarchy; a *node* of the lattice is one level per QI. This module finds the node of least loss
whose generalised table satisfies the privacy models, and writes the SELECT that releases it.

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
  (`_Coded`): each QI's distinct values and their map are made in SQL as above, the source's
  rows are fetched once as level-0 codes (one array value per QI), equal rows grouped, and a
  node's classes are a bincount or np.unique of one mixed-radix key per row, rolled up from
  the smallest table of a failing descendant as in SQL. At a million mostly distinct rows a
  node costs tens of milliseconds there against about a second as a GROUP BY.
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

Release (`release_select`): one SELECT that generalises the live source and suppresses, at every
read, each class that breaks any promised model, so that a VIEW keeps every promise (not only k)
whatever is inserted, updated or deleted later; t-closeness is kept against the distribution of
the rows the view shows (dbanon.models.suppression).

Loss (`FullDomainResult.loss`) is NCP, in [0, 1]: the mean over rows and QIs of the normalised
size of the released value: (leaves under the label - 1) / (leaves in the hierarchy - 1) for a
hierarchy, (interval or period length within [min, max]) / (max - min) for a numeric interval or
a calendar period, 0 for a value kept as is, 1 for '*' and for every QI of a suppressed row.

Hierarchies of the lattice, per QI:
- a stored `Hierarchy` (categorical or not: Adult's age has one) — labels from the catalog's
  `dbanon.hierarchy_map`, the table search and release both read, so they cannot disagree;
- numeric QIs (integer, numeric, real, double precision) without one — an `IntervalHierarchy`:
  level 0 the value itself, then up to `INTERVAL_LEVELS` levels of half-open intervals aligned
  at 0, then '*'. Their widths are round: the chain 1, 5, 10, 50, 100, ... (1 and 5 times a
  power of ten). A width must divide the next one for intervals aligned at 0 to nest (each
  interval lies in one interval of the next level), as a hierarchy must; the 1-2-5 series does
  not nest (2 does not divide 5), and of its two nesting halves, 1-2-10-20 and 1-5-10-50, the
  second gives the bands people use: 5- and 10-year age groups, amounts in 5s, 10s and 50s.
  The widest level is the narrowest width of the chain >= (max - min) / 5, so it splits the
  current values into 2 to 6 intervals (each step of the chain is at most x5); below it come
  the next narrower widths. For integers width 1 is the value itself, and a level that merges
  no two values or intervals of the one below is a copy of it: such levels are left out and
  wider ones tried above instead, while any could still merge (age 17-90: 5, 10, 50, 100;
  -5..3: 5 only, wider intervals cut it at 0 as 5 does). Aligned at 0, any value has an
  interval, including values inserted after the release was made;
- date and timestamp QIs (with or without time zone) without one — a `CalendarHierarchy`: the
  value, (for timestamps) its day, month, quarter, year, decade, then '*'. A level is a function
  of the value alone, so later values generalise too; a timestamptz's periods are those of the
  time zone of the session that made the hierarchy (fixed in the SQL, so a live view's classes
  do not depend on its reader's TimeZone);
- any other QI without one — flat: the value (as text), then '*'.
Interval and calendar levels read as dbanon.generalise writes them (`--ranges text`: `30-39`,
`1.5-<2`, `2020-Q1`, `*`; `--ranges typed`: the range type of the column's type, as for every
method, '*' being the unbounded range '(,)').
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

from dbanon import generalise
from dbanon.db.catalog import Column, Relation
from dbanon.db.settings import local_settings, work_mem_at_least
from dbanon.errors import DbanonError
from dbanon.hierarchy import Hierarchy
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

INTERVAL_LEVELS = 4  # interval levels of an automatic numeric hierarchy, between value and '*'
MAX_LATTICE = 2_000_000  # nodes; beyond this the lattice bookkeeping itself gets too big
PROGRESS_EVERY = 0.25  # seconds between progress messages of a search
SEARCH_WORK_MEM = "128MB"  # work_mem of a search's own queries (if the session's is lower)
# work_mem of the release's statement (if the session's is lower): its two sorts of the whole
# source (classes, then the shuffle) run in memory at 1M rows instead of merging on disk.
RELEASE_WORK_MEM = "256MB"
EPOCH = sql.SQL("DATE '1970-01-01'")
# The widest automatic interval is the narrowest round width >= (max - min) / TOP_SPLIT.
TOP_SPLIT = 5

_INTEGER_TYPES = ("smallint", "integer", "bigint")
_NUMERIC_TYPES = ("numeric", "real", "double precision")
_TIMESTAMP_TYPES = ("timestamp without time zone", "timestamp with time zone")
# Calendar levels between the value and '*', narrowest first (generalise.PERIODS).
CALENDAR_UNITS = {
    "date": ("month", "quarter", "year", "decade"),
    "timestamp": ("day", "month", "quarter", "year", "decade"),
}


@dataclass(frozen=True)
class IntervalHierarchy:
    """The automatic hierarchy of a numeric QI: nested round intervals aligned at 0.

    `base` is 'integer', 'numeric' or 'date'; widths are in the column's unit (days for dates:
    automatic date hierarchies are calendar ones, a day-interval one can still be given).
    `low`/`high` are the column's min and max when the hierarchy was made, for NCP only: they do
    not change where a value falls, so a release stays the same function of its source.
    """

    column: str
    base: str
    widths: tuple[Decimal, ...]
    low: Decimal
    high: Decimal

    @property
    def height(self) -> int:
        return len(self.widths) + 1

    @property
    def name(self) -> str:
        return f"intervals of {self.column}"

    def describe(self) -> list[str]:
        """Human-readable levels, for reports."""
        return ["value", *(f"width {w}" for w in self.widths), "*"]


@dataclass(frozen=True)
class CalendarHierarchy:
    """The automatic hierarchy of a date or timestamp QI: its calendar periods.

    `base` is 'date' or 'timestamp' (with or without time zone). `low`/`high`, for NCP only,
    are the column's min and max in days since 1970-01-01 (dates) or epoch seconds; `zone` is
    the time zone whose periods a timestamptz falls into.
    """

    column: str
    base: str
    low: Decimal
    high: Decimal
    zone: str = "UTC"

    @property
    def units(self) -> tuple[str, ...]:
        return CALENDAR_UNITS[self.base]

    @property
    def height(self) -> int:
        return len(self.units) + 1

    @property
    def name(self) -> str:
        return f"calendar of {self.column}"

    def describe(self) -> list[str]:
        return ["value", *self.units, "*"]


AnyHierarchy = Hierarchy | IntervalHierarchy | CalendarHierarchy


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


# --- per-QI generalisation ----------------------------------------------------------------------


def interval_base(col: Column) -> str | None:
    """'integer', 'numeric' or 'date' if the column can have an interval hierarchy."""
    if col.type in _INTEGER_TYPES:
        return "integer"
    if col.type.startswith(_NUMERIC_TYPES):
        return "numeric"
    if col.type == "date":
        return "date"
    return None


def calendar_base(col: Column) -> str | None:
    """'date' or 'timestamp' if the column gets an automatic calendar hierarchy."""
    if col.type == "date":
        return "date"
    if generalise.base_type(col) in _TIMESTAMP_TYPES:
        return "timestamp"
    return None


def _as_number(base: str, ref: sql.Composable) -> sql.Composable:
    """The value of an interval QI as the number its intervals are cut on."""
    if base == "date":
        return sql.SQL("({} - {})").format(ref, EPOCH)
    if base == "numeric":
        return sql.SQL("{}::numeric").format(ref)
    return sql.SQL("{}::bigint").format(ref)


def round_width(n: int) -> Decimal:
    """The n-th width of the chain ..., 0.5, 1, 5, 10, 50, ...: 1 at n = 0, 5 at n = 1."""
    return (5 if n % 2 else 1) * Decimal(10) ** (n // 2)


def _cells(low: Decimal, high: Decimal, w: Decimal) -> int:
    """How many intervals of width w aligned at 0 [low, high] meets."""
    down = "ROUND_FLOOR"
    return int((high / w).to_integral_value(down) - (low / w).to_integral_value(down)) + 1


def _widths(base: str, low: Decimal, high: Decimal, levels: int) -> tuple[Decimal, ...]:
    """Interval widths, narrowest first, from the chain 1, 5, 10, 50, ... (see the module doc):
    `levels` of them, the widest the narrowest one >= (high - low) / TOP_SPLIT. For whole units
    (integers, days), only widths that merge values or intervals of the level below, wider ones
    tried instead while any could."""
    span = high - low
    if span <= 0 or levels <= 0:
        return ()
    top = 2 * math.floor(math.log10(span / TOP_SPLIT)) - 2  # a chain index below the widest
    while round_width(top) < span / TOP_SPLIT:
        top += 1
    if base == "numeric":
        return tuple(round_width(n) for n in range(top - levels + 1, top + 1))
    # Width 1 is the value itself (chain index 0), a level that merges nothing a copy of the
    # one below; beyond `reach` intervals cut [low, high] only at 0, as the last one did.
    widths: list[Decimal] = []
    cells, reach = span + 1, max(abs(low), abs(high))
    n = max(top - levels + 1, 1)
    while len(widths) < levels and cells > 1:
        w = round_width(n)
        if _cells(low, high, w) < cells:
            widths.append(w)
            cells = _cells(low, high, w)
        if w > reach:
            break
        n += 1
    return tuple(widths)


def interval_hierarchy(
    conn: psycopg.Connection, source: Relation, col: Column, levels: int = INTERVAL_LEVELS
) -> IntervalHierarchy:
    """The automatic hierarchy of a numeric or date QI, from its current min and max."""
    base = interval_base(col)
    if base is None:
        raise DbanonError(f"column {col.name!r} ({col.type}) is not numeric or date")
    x = _as_number(base, col.ident)
    low, high = conn.execute(
        sql.SQL("SELECT min({x})::numeric, max({x})::numeric FROM {src}").format(
            x=x, src=source.ident
        )
    ).fetchone()
    low, high = low or Decimal(0), high or Decimal(0)
    return IntervalHierarchy(col.name, base, _widths(base, low, high, levels), low, high)


def _bin_low(x: sql.Composable, width: Decimal) -> sql.Composable:
    """Lower end of the interval of `width` holding x: floor(x / width) * width."""
    return sql.SQL("(floor({x}::numeric / {w}) * {w})").format(x=x, w=sql.Literal(width))


def _int_bin_low(x: sql.Composable, width: Decimal) -> sql.Composable:
    """`_bin_low` of a bigint x and a whole width, in bigint arithmetic: the release computes
    it per row, where numeric division costs about a second per million rows. PostgreSQL's
    integer division truncates towards 0 and % takes the dividend's sign, so a negative
    remainder means the floor is one lower."""
    w = sql.Literal(int(width))
    return sql.SQL("(({x} / {w} - ({x} % {w} < 0)::int) * {w})").format(x=x, w=w)


def _whole_bin_low(h: IntervalHierarchy, x: sql.Composable, w: Decimal) -> sql.Composable:
    """`_bin_low` of a number x of an interval QI: in bigint arithmetic for whole units and
    a whole width (`_int_bin_low`), numeric otherwise."""
    if h.base != "numeric" and w == w.to_integral_value():
        return _int_bin_low(sql.SQL("{}::bigint").format(x), w)
    return _bin_low(x, w)


def _interval_value(
    h: IntervalHierarchy, col: Column, ref: sql.Composable, level: int, form: str
) -> sql.Composable:
    """The released value of interval QI `ref` at a level (dbanon.generalise): intervals of
    whole units as the closed range of their values ([30, 40) is 30-39), numeric ones half-open
    (1.5-<2)."""
    if level >= h.height:
        return generalise.whole(col, form)
    if level == 0:
        return generalise.value(col, ref, form)
    w = h.widths[level - 1]
    if h.base == "numeric":
        lo = _bin_low(_as_number(h.base, ref), w)
        hi = sql.SQL("({} + {})").format(lo, sql.Literal(w))
        return generalise.half_open_range(col, lo, hi, form)
    lo = _whole_bin_low(h, _as_number(h.base, ref), w)
    whole = w == w.to_integral_value()
    hi = sql.SQL("({} + {})").format(lo, sql.Literal(int(w) - 1 if whole else w - 1))
    if h.base == "date":
        lo = sql.SQL("({} + {}::integer)").format(EPOCH, lo)
        hi = sql.SQL("({} + {}::integer)").format(EPOCH, hi)
    else:
        lo, hi = sql.SQL("{}::bigint").format(lo), sql.SQL("{}::bigint").format(hi)
    return generalise.closed_range(col, lo, hi, form)


def _interval_ncp(h: IntervalHierarchy, x: sql.Composable, level: int) -> sql.Composable:
    """NCP of number x's interval: its width within [low, high] over high - low."""
    span = h.high - h.low
    if span <= 0:
        return sql.SQL("0::float8")
    w = h.widths[level - 1]
    lo = sql.SQL("{}::numeric").format(_whole_bin_low(h, x, w))  # numeric, as the division
    last = w - 1 if h.base != "numeric" else w  # whole units: [lo, lo + w) ends at lo + w - 1
    ncp = "((least({lo} + {last}, {hi}) - greatest({lo}, {low})) / {span})::float8"
    return sql.SQL(ncp).format(
        lo=lo,
        last=sql.Literal(last),
        hi=sql.Literal(h.high),
        low=sql.Literal(h.low),
        span=sql.Literal(span),
    )


def _measure(col: Column, x: sql.Composable) -> sql.Composable:
    """A date or timestamp as the number a calendar QI's NCP is measured in: days since
    1970-01-01 for dates, epoch seconds (of the instant, for timestamptz) for timestamps."""
    if calendar_base(col) == "date":
        return sql.SQL("({} - {})::numeric").format(x, EPOCH)
    return sql.SQL("extract(epoch FROM {})::numeric").format(x)


def _period_start(
    h: CalendarHierarchy, col: Column, ref: sql.Composable, level: int
) -> sql.Composable:
    """The start of the period of `ref` at a level, as a local timestamp."""
    return generalise.period_start(h.units[level - 1], generalise.local_time(col, ref, h.zone))


def _calendar_value(
    h: CalendarHierarchy, col: Column, ref: sql.Composable, level: int, form: str
) -> sql.Composable:
    """The released value of calendar QI `ref` at a level: the value, its period, or '*'."""
    if level >= h.height:
        return generalise.whole(col, form)
    if level == 0:
        return generalise.value(col, ref, form)
    return generalise.period(col, ref, h.units[level - 1], form, h.zone)


def _calendar_code(
    h: CalendarHierarchy, col: Column, ref: sql.Composable, level: int
) -> sql.Composable:
    """A number per period (the epoch of its start), for the lattice's GROUP BY."""
    return sql.SQL("extract(epoch FROM {})::bigint").format(_period_start(h, col, ref, level))


def _calendar_ncp(
    h: CalendarHierarchy, col: Column, ref: sql.Composable, level: int
) -> sql.Composable:
    """NCP of a calendar QI's period: its length within [low, high] over high - low (for
    dates, in whole days as for integer intervals: a period ends at its last day)."""
    span = h.high - h.low
    if span <= 0:
        return sql.SQL("0::float8")
    start = _period_start(h, col, ref, level)
    end = generalise.period_end(h.units[level - 1], start)
    lo = _measure(col, generalise.from_local(col, start, h.zone))
    hi = _measure(col, generalise.from_local(col, end, h.zone))
    last = sql.SQL("({} - 1)").format(hi) if h.base == "date" else hi
    ncp = "((least({last}, {high}) - greatest({lo}, {low})) / {span})::float8"
    return sql.SQL(ncp).format(
        last=last,
        high=sql.Literal(h.high),
        lo=lo,
        low=sql.Literal(h.low),
        span=sql.Literal(span),
    )


def _stored_map(h: Hierarchy, level: int) -> sql.Composable:
    """(value, label) of a stored hierarchy at one level, from the catalog: this version of it
    (its content hash), which a replace never changes (dbanon.hierarchy_pins), so a live view
    generalises as it did when it was verified."""
    return sql.SQL(
        "(SELECT m.value, m.label FROM dbanon.hierarchy_map m "
        "JOIN dbanon.hierarchy h ON h.id = m.hierarchy_id "
        "WHERE h.name = {name} AND h.version = {version} AND m.level = {level})"
    ).format(name=sql.Literal(h.name), version=sql.Literal(h.version), level=sql.Literal(level))


def _effective(
    col: Column, hierarchies: Mapping[str, AnyHierarchy]
) -> tuple[str, AnyHierarchy | None, int]:
    """(kind, hierarchy, height) of a QI: 'stored', 'interval', 'calendar' or 'flat'."""
    h = hierarchies.get(col.name)
    if isinstance(h, Hierarchy):
        return "stored", h, h.height
    for kind, cls, base in (
        ("interval", IntervalHierarchy, interval_base(col)),
        ("calendar", CalendarHierarchy, calendar_base(col)),
    ):
        if isinstance(h, cls):
            if h.base != base:
                raise DbanonError(
                    f"the {kind} hierarchy of {col.name!r} is for {h.base} values, not {col.type}"
                )
            return kind, h, h.height
    if h is not None:
        raise DbanonError(f"hierarchy of {col.name!r} is a {type(h).__name__}, not a hierarchy")
    if calendar_base(col) is not None:
        return "calendar", None, -1  # its range (for NCP) and time zone come from search()
    if interval_base(col) is not None:
        return "interval", None, -1  # made from the data by search()
    return "flat", None, 1


def _unmade(kind: str, col: Column) -> AnyHierarchy:
    """The automatic hierarchy of a QI at level 0, where its widths and range do not matter."""
    zero = Decimal(0)
    if kind == "calendar":
        return CalendarHierarchy(col.name, calendar_base(col) or "date", zero, zero)
    return IntervalHierarchy(col.name, interval_base(col) or "numeric", (), zero, zero)


# --- the release ----------------------------------------------------------------------------


def release_select(
    source: Relation,
    qi: list[Column],
    hierarchies: Mapping[str, AnyHierarchy],
    levels: Mapping[str, int],
    sensitive: list[str],
    models: Sequence[PrivacyModel],
    *,
    shuffle: bool = True,
    ranges: str = generalise.DEFAULT_FORM,
) -> sql.Composable:
    """A SELECT of the source generalised to `levels`, every class that breaks a model left out.

    It reads the source live, so a VIEW of it keeps every promise as the source changes: the
    classes are formed and judged at every read, and rows of a class that breaks any model
    (smaller than the largest k of the models, not l-diverse, too far from the distribution of
    the rows shown, ...) are never shown; see dbanon.models.suppression for how t-closeness is
    kept against the distribution of what remains. Models that read a sensitive column read the
    first of `sensitive`. The row key is not selected; rows come out in random order
    (`shuffle`), so neither the source order nor the class order leaks. Values a stored
    hierarchy does not cover (inserted since) are released as its root.
    Output columns: the QIs, then the sensitive columns. Interval and calendar QIs read as
    `ranges` says (dbanon.generalise: 'text', or 'typed' ranges), the others as text.

    Shape: the source is read once. Classes smaller than the largest k go by a window count
    over the generalised QIs (k-anonymity alone needs no more); its sort is the statement's
    main cost, so it sorts by the cheapest key that names each released value (an interval of
    whole units by its bigint low end, not its label), led by a hash of those keys, and
    leaves out QIs released as a constant. A hash GROUP BY joined back would avoid the sort,
    but the planner misjudges a join on several generalised keys badly (a merge join, several
    times slower at 1M rows without statistics on the expressions). With other models, the
    rows
    left are kept in a MATERIALIZED CTE, each numbered with its class (dense_rank over the same
    sort, in which NULLs are peers, so matching rows to classes by number is NULL-safe); the
    models judge the classes from that CTE (`kept_classes`), and rows are selected by number.
    """
    if ranges not in generalise.RANGE_FORMS:
        raise DbanonError(f"ranges must be one of {', '.join(generalise.RANGE_FORMS)}")
    joins: list[sql.Composable] = []
    gen: list[sql.Composable] = []
    part: list[sql.Composable | None] = []  # per QI, its class key (None: a constant)
    for i, col in enumerate(qi):
        kind, h, height = _effective(col, hierarchies)
        if col.name not in levels:
            raise DbanonError(f"no level given for quasi-identifier {col.name!r}")
        level = levels[col.name]
        ref = sql.SQL("s.{}").format(col.ident)
        if kind in ("interval", "calendar") and h is None:
            if level > 0:
                raise DbanonError(
                    f"level {level} of {col.name!r} needs its {kind} hierarchy: pass "
                    "FullDomainResult.hierarchies to release_select"
                )
            h = _unmade(kind, col)
        if not 0 <= level <= (h.height if h is not None else height):
            raise DbanonError(f"level {level} of {col.name!r} is outside its hierarchy")
        if isinstance(h, IntervalHierarchy):
            gen.append(_interval_value(h, col, ref, level, ranges))
            if level >= h.height:
                part.append(None)
            elif level > 0 and h.base != "numeric" and h.widths[level - 1] % 1 == 0:
                # an interval of whole units is named by its low end, a bigint (its released
                # value is a function of it): a cheaper sort key than the label
                part.append(_whole_bin_low(h, _as_number(h.base, ref), h.widths[level - 1]))
            else:
                part.append(gen[-1])
            continue
        if isinstance(h, CalendarHierarchy):
            gen.append(_calendar_value(h, col, ref, level, ranges))
            part.append(None if level >= h.height else gen[-1])
            continue
        if level == 0:
            gen.append(sql.SQL("{}::text").format(ref))
        elif isinstance(h, Hierarchy) and level < h.height:
            alias = sql.Identifier(f"dbanon_h{i}")
            joins.append(
                sql.SQL("LEFT JOIN {map} {a} ON {a}.value = {ref}::text").format(
                    map=_stored_map(h, level), a=alias, ref=ref
                )
            )
            gen.append(
                sql.SQL("coalesce({}.label, {})").format(alias, sql.Literal(h.labels[h.root]))
            )
        else:
            root = h.labels[h.root] if isinstance(h, Hierarchy) else "*"
            gen.append(sql.SQL("{}::text").format(sql.Literal(root)))
            part.append(None)
            continue
        part.append(gen[-1])
    needs = [m for m in models if m.needs_sensitive]
    if needs and not sensitive:
        raise DbanonError(f"{needs[0].name} needs a sensitive column")
    names = [c.name for c in qi] + list(sensitive)
    size, cls = (_fresh(n, names) for n in ("dbanon_class_size", "dbanon_class"))
    # Any k-anonymity is implied by the largest k, which a window count enforces row by row.
    others = [m for m in models if not isinstance(m, KAnonymity)]
    # The classes: partitions by each QI's released value, or a cheaper key naming it; a
    # QI released as a constant ('*') splits nothing and is left out of the sort.
    keys = [p for p in part if p is not None]
    if len(keys) > 1:
        # Led by a hash of them all (a function of the keys, so the partitions are the same):
        # rows then compare by one integer, where the generalised keys tie across classes
        # and each tie reads several columns (2x faster at 1M rows).
        keys.insert(
            0,
            sql.SQL("hashtext(concat_ws({}, {}))").format(
                sql.Literal("\x1f"), sql.SQL(", ").join(keys)
            ),
        )
    gen_list = sql.SQL(", ").join(keys)
    window = sql.SQL("PARTITION BY {}").format(gen_list) if keys else sql.SQL("")
    sized = sql.SQL(
        "SELECT {cols}, count(*) OVER ({window}) AS {size}{number} FROM {src} s {joins}"
    ).format(
        window=window,
        cols=sql.SQL(", ").join(
            [sql.SQL("{} AS {}").format(g, c.ident) for g, c in zip(gen, qi, strict=True)]
            + [sql.SQL("s.{}").format(sql.Identifier(n)) for n in sensitive]
        ),
        size=sql.Identifier(size),
        # the same sort as the count's partitions: no second sort
        number=sql.SQL(", dense_rank() OVER ({}) AS {}").format(
            sql.SQL("ORDER BY {}").format(gen_list) if keys else sql.SQL(""),
            sql.Identifier(cls),
        )
        if others
        else sql.SQL(""),
        src=source.ident,
        joins=sql.SQL(" ").join(joins),
    )
    out = sql.SQL(", ").join(map(sql.Identifier, names))
    order = sql.SQL(" ORDER BY random()") if shuffle else sql.SQL("")
    large = sql.SQL("({sized}) dbanon_classes WHERE {size} >= {k}").format(
        sized=sized, size=sql.Identifier(size), k=sql.Literal(_k_of(models))
    )
    if not others:
        return sql.SQL("SELECT {out} FROM {large}{order}").format(out=out, large=large, order=order)
    rows = sql.Identifier("dbanon_rows")
    target = Target(rows, [cls], sensitive[0] if needs else None)
    return sql.SQL(
        """WITH {rows} AS MATERIALIZED (SELECT {out}, {cls} FROM {large})
           SELECT {out} FROM {rows} WHERE {cls} IN ({kept}){order}"""
    ).format(
        rows=rows,
        out=out,
        cls=sql.Identifier(cls),
        large=large,
        kept=kept_classes(target, others),
        order=order,
    )


def _fresh(name: str, taken: Sequence[str]) -> str:
    """`name`, with underscores appended until it is not one of `taken`."""
    while name in taken:
        name += "_"
    return name


# --- the search ---------------------------------------------------------------------------------

# Temp tables of a search (one search at a time per session), all dropped before it returns.
_PREFIX = "dbanon_fd_"
# A node counted from a class table of at least ROLLUP_MIN_ROWS rows gets its own class table
# when it has at most 1/ROLLUP_GAIN as many classes: a table its ancestors roll up from.
ROLLUP_MIN_ROWS, ROLLUP_GAIN = 1000, 4
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


@dataclass
class _QI:
    col: Column
    kind: str  # 'stored', 'interval', 'calendar' or 'flat'
    h: AnyHierarchy | None  # None: flat, or an automatic hierarchy still to be made from the data
    height: int


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
            f"hierarchy {h.name!r} of column {col.name!r} is not stored in the catalog "
            "(import it with `dbanon hierarchy import`)"
        )
    if (row[0], row[1], row[2]) != (h.height, len(h.leaves), h.version):
        raise DbanonError(f"hierarchy {h.name!r} in the catalog differs from the one given")


# Rows of the source fetched at once by a k-only search (`_Coded.fetch`): the server builds
# each part's columns as arrays, so this bounds what it sends and the client holds at once.
PART_ROWS = 2_000_000


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
        looks: list[list[np.ndarray]] = []
        cards: list[list[int]] = []
        ncps: list[list[np.ndarray]] = []
        values: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # direct QI -> (v, c0) by v
        # A QI fetched as a number per row: integer and date intervals as themselves, text
        # as hashtext() of it, when no two of its distinct values share a hash (then a hash
        # names one value, as the value does: every row's value is in the map).
        number: dict[int, Callable[[sql.Composable], sql.Composable]] = {}
        for i, q in enumerate(qis):
            if isinstance(q.h, IntervalHierarchy) and q.h.base != "numeric":
                number[i] = partial(sql.SQL("{}::int8").format)
            elif q.kind in ("flat", "stored"):
                number[i] = partial(sql.SQL("hashtext({})").format)  # int4
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
                    values[i] = (v, c0[order])
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
            looks.append(look)
            cards.append(card)
            ncps.append(ncp)
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
                if i in direct:
                    v, c0 = values[i]
                    pos = np.searchsorted(v, out[i])
                    if got and (pos.max() >= len(v) or not np.array_equal(v[pos], out[i])):
                        raise DbanonError(f"a value of {qis[i].col.name!r} is missing from its map")
                    block[:, i] = c0[pos]
                else:
                    block[:, i] = out[i]
                out[i] = np.empty(0)  # freed as soon as copied
            rows += got
        if rows != total:
            raise DbanonError("the source changed while the search read it")
        weights = np.ones(rows, dtype=np.int64)
        coded = cls(qis, codes, weights, looks, cards, ncps, with_ncp)
        # Equal rows as one, weighted (the frequency set, grouped here rather than in SQL).
        key, _ = coded._key(np.zeros(d, dtype=np.int64), codes)
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        if len(first) < len(key):
            sizes = np.bincount(inverse.reshape(-1), weights=weights).astype(np.int64)
            coded.tables = [(coded.tables[0][0], codes[first], sizes)]
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

    def count(self, node: np.ndarray, k: int, budget: int) -> tuple[int, float]:
        """Rows in classes smaller than k at `node` and the sum of their NCP (0 unless asked),
        counted from the smallest table of a descendant; see _Lattice.count."""
        _, rep, w = min(
            (t for t in self.tables if np.all(t[0] <= node)), key=lambda t: len(t[2])
        )
        key, space = self._key(node, rep)
        if space <= 4 * len(key) + (1 << 16):
            per_key = np.bincount(key, weights=w, minlength=space)
            size = per_key[key]
            classes = int(np.count_nonzero(per_key))
            inverse = None
        else:
            distinct, inverse = np.unique(key, return_inverse=True)
            inverse = inverse.reshape(-1)
            per_class = np.bincount(inverse, weights=w)
            size = per_class[inverse]
            classes = len(distinct)
        small_rows = size < k
        small = int(w[small_rows].sum())
        ncp = 0.0
        if small and self.with_ncp:
            row_ncp = np.zeros(len(rep))
            for i, lv in enumerate(map(int, node)):
                if lv >= self.heights[i]:
                    row_ncp += 1.0
                elif lv > 0:
                    row_ncp += self.ncps[i][lv][rep[:, i]]
            ncp = float((w * row_ncp)[small_rows].sum())
        rows = len(key)
        if small > budget and rows >= ROLLUP_MIN_ROWS and classes * ROLLUP_GAIN <= rows:
            if inverse is None:
                _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
            else:
                _, first = np.unique(key, return_index=True)
            sizes = np.bincount(inverse.reshape(-1), weights=w).astype(np.int64)
            self.tables.append((node.copy(), rep[first], sizes))
        return small, ncp


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
                    f"quasi-identifier {q.col.name!r} of {source} is NULL in {nulls} rows; "
                    "fill or filter them first"
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
                        f"value {missing[0]!r} of column {q.col.name!r} is not in hierarchy "
                        f"{q.h.name!r}"
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
        raise DbanonError(f"quasi-identifier {twice[0]!r} is named twice")
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


# --- benchmark ----------------------------------------------------------------------------------

BENCH_QI = [
    "age",
    "education",
    "marital_status",
    "native_country",
    "occupation",
    "race",
    "income",
    "sex",
    "workclass",
]
BENCH_SENSITIVE = "income"  # with --l: the sensitive attribute, the other 8 columns the QIs


def bench(
    conn: psycopg.Connection,
    rows: int = 30162,
    k: int = 5,
    l: int = 0,  # noqa: E741 - the paper's name
    max_suppression: float = 0.0,
) -> dict[str, Any]:
    """Search Adult's first `rows` rows for k-anonymity with ARX's 9 QIs and hierarchies
    (ARX's Flash: 27-33 ms in memory); with `l`, distinct l-diversity of income too, the
    other 8 QIs (6,480 nodes; ARX's Adult l-diversity setting), every class failing either
    model suppressed within `max_suppression`. Needs demo.adult and the hierarchies (`dbanon
    demo`, i.e. dbanon.demo.run_demo); `seconds` times `search` alone."""
    from dbanon.data import ADULT_HIERARCHIES
    from dbanon.db import catalog
    from dbanon.demo import hierarchy_name
    from dbanon.models import DistinctLDiversity

    qis = [c for c in BENCH_QI if not l or c != BENCH_SENSITIVE]
    models: list[PrivacyModel] = [KAnonymity(k)] + ([DistinctLDiversity(l)] if l else [])
    table = sql.Identifier("dbanon_bench_adult")
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    conn.execute(
        sql.SQL("CREATE TEMP TABLE {} AS SELECT {} FROM demo.adult ORDER BY id LIMIT {}").format(
            table, sql.SQL(", ").join(map(sql.Identifier, BENCH_QI)), sql.Literal(rows)
        )
    )
    conn.execute(sql.SQL("ANALYZE {}").format(table))
    try:
        source = Relation("pg_temp", "dbanon_bench_adult")
        cols = catalog.columns(conn, source)
        qi = [cols[c] for c in qis]
        hierarchies = {
            c: catalog.load_hierarchy(conn, hierarchy_name("adult", ADULT_HIERARCHIES[c]))
            for c in qis
        }
        sensitive = BENCH_SENSITIVE if l else None
        result = search(conn, source, qi, hierarchies, models, sensitive, max_suppression)
    finally:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    return {
        "algorithm": "fulldomain",
        "rows": rows,
        "k": k,
        "l": l or None,
        "max_suppression": max_suppression,
        "qi": qis,
        "sensitive": sensitive,
        "server": conn.info.parameter_status("server_version"),
        **result.summary(),
    }
