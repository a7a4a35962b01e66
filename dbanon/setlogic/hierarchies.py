"""The hierarchies of full-domain generalisation, one per QI, as SQL: a stored hierarchy,
automatic numeric intervals and calendar periods, or flat; each level's value and its NCP.

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
Interval and calendar levels read as dbanon.core.generalise writes them (`--ranges text`: `30-39`,
`1.5-<2`, `2020-Q1`, `*`; `--ranges typed`: the range type of the column's type, as for every
method, '*' being the unbounded range '(,)').

"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

import psycopg
from psycopg import sql

from dbanon.core import generalise
from dbanon.core.hierarchy import Hierarchy
from dbanon.db.catalog import Column, Relation
from dbanon.errors import DbanonError, quote_ident

INTERVAL_LEVELS = 4  # interval levels of an automatic numeric hierarchy, between value and '*'


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
        raise DbanonError(f"column {quote_ident(col.name)} ({col.type}) is not numeric or date")
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
    """The released value of interval QI `ref` at a level (dbanon.core.generalise): intervals of
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
    last = w - 1 if h.base != "numeric" else w  # whole units: [lo, lo + w) ends at lo + w - 1
    if _whole_length(h, w):
        # The interval's length in bigint, only the division in numeric: the same integer
        # divided as before (scale 0 both ways), so the same quotient to the last bit, at a
        # fifth of the cost (numeric arithmetic per value: 0.3 s of a search of 90,000 zips).
        ncp = "((least({lo} + {last}, {hi}) - greatest({lo}, {low}))::numeric / {span})::float8"
        return sql.SQL(ncp).format(
            lo=_whole_bin_low(h, x, w), last=sql.Literal(int(last)), hi=sql.Literal(int(h.high)),
            low=sql.Literal(int(h.low)), span=sql.Literal(span),
        )  # fmt: skip
    lo = sql.SQL("{}::numeric").format(_whole_bin_low(h, x, w))  # numeric, as the division
    ncp = "((least({lo} + {last}, {hi}) - greatest({lo}, {low})) / {span})::float8"
    return sql.SQL(ncp).format(
        lo=lo,
        last=sql.Literal(last),
        hi=sql.Literal(h.high),
        low=sql.Literal(h.low),
        span=sql.Literal(span),
    )


def _whole_length(h: IntervalHierarchy, w: Decimal) -> bool:
    """Whether `_interval_ncp` can measure an interval in bigint: whole units, and the width
    and bounds whole numbers written without a fraction (a bound of 5.0 has scale 1, which the
    numeric subtraction keeps and the division's precision follows), far from bigint's ends."""
    bounds = (w, h.low, h.high)
    return (
        h.base != "numeric"
        and all(isinstance(b, Decimal) and b.is_finite() and b.as_tuple().exponent >= 0
                for b in bounds)
        and max(abs(h.low), abs(h.high)) + w < 2**62
    )  # fmt: skip


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
    (its content hash), which a replace never changes (dbanon.lifecycle.hierarchy_pins), so a live
    view generalises as it did when it was verified."""
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
                    f"the {kind} hierarchy of {quote_ident(col.name)} is for {h.base} values, not "
                    f"{col.type}"
                )
            return kind, h, h.height
    if h is not None:
        raise DbanonError(f"hierarchy of {quote_ident(col.name)} is a {type(h).__name__}, not a "
            "hierarchy")
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
