"""Readable releases: the text and typed forms of ranges, round interval widths, calendar levels.

Every check here reads released rows with plain SQL and parses the text form itself: a released
value must hold its source row's value (rows are matched by a marker column that is unique per
row), the text and the typed form must be the same interval, a column type must get the same
range type from every method, automatic interval widths must be round, and the k promise must
hold (GROUP BY in the test).
"""

from __future__ import annotations

import itertools
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from helpers import cli_json, make_table
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.range import Range

from dbanon.db import catalog
from dbanon.db.catalog import Relation
from dbanon.errors import DbanonError
from dbanon.models import KAnonymity
from dbanon.setlogic.fulldomain import release_select
from dbanon.setlogic.hierarchies import CalendarHierarchy, IntervalHierarchy, _widths
from dbanon.setlogic.lattice import search

ZONE = "America/New_York"  # the database's TimeZone: a timestamptz's days are New York days
SCHEMA, TABLE = "Src Schema", "Pe ople"
SRC = Relation(SCHEMA, TABLE)
KEY, MARK = "ID", "Mar ker"
AGE, BIG, WEIGHT, DAY, TS, TZ = "Age Ω", "Big N", "wéight", "Visit Day", "seen at", "Seen TZ"
COLUMNS = [
    (KEY, "integer"),
    (AGE, "integer"),
    (BIG, "bigint"),
    (WEIGHT, "numeric(7,2)"),
    (DAY, "date"),
    (TS, "timestamp"),
    (TZ, "timestamptz"),
    (MARK, "text"),
]
QI = [AGE, BIG, WEIGHT, DAY, TS, TZ]
TYPE_OF = dict(COLUMNS)
RANGE_TYPE = {
    "integer": "int4range",
    "bigint": "int8range",
    "numeric(7,2)": "numrange",
    "date": "daterange",
    "timestamp": "tsrange",
    "timestamptz": "tstzrange",
}
K = 3
NY = ZoneInfo(ZONE)


def people() -> list[tuple]:
    """40 groups of 3 rows: within a group every QI differs, yet shares its level-1 interval or
    period, so the least-loss full-domain node is level 1 for every QI. The timestamptz values
    are evenings in New York (past midnight UTC): UTC days would split the groups."""
    rows = []
    for g, j in itertools.product(range(40), range(3)):
        rows.append(
            (
                3 * g + j,
                5 * g + j,  # 0..197: widths 5, 10, 50, 100
                10**6 * g + 1000 * j - 5 * 10**6,  # negative too: widths 5e5, 1e6, 5e6, 1e7
                Decimal(5 * g) / 2 + Decimal(j) / 100,  # 0..97.52: widths 1, 5, 10, 50
                date(2000 + g // 12, g % 12 + 1, 3 + 7 * j),
                datetime(2021, 1, 1) + timedelta(days=3 * g, hours=1 + 5 * j),
                datetime(2020, 3, 1, 19 + 2 * j, tzinfo=NY) + timedelta(days=g),  # across DST
                f"row {3 * g + j}",
            )
        )
    return rows


@pytest.fixture
def source(conn: psycopg.Connection) -> list[tuple]:
    rows = people()
    make_table(conn, SCHEMA, TABLE, COLUMNS, rows)
    db = conn.execute("SELECT current_database()").fetchone()[0]
    conn.execute(sql.SQL("ALTER DATABASE {} SET timezone = {}").format(
        sql.Identifier(db), sql.Literal(ZONE)
    ))  # fmt: skip
    conn.execute(sql.SQL("SET timezone = {}").format(sql.Literal(ZONE)))
    return rows


# --- the test's own reading of the text form ----------------------------------------------------

NUM = r"-?\d+(?:\.\d+)?"


def _ts(text: str, coltype: str) -> datetime:
    t = datetime.fromisoformat(text)
    assert (t.tzinfo is not None) == (coltype == "timestamptz"), text
    return t


def _period(text: str, coltype: str) -> tuple[Any, Any] | None:
    """[start, end) of a calendar label, in the column's type (New York time for timestamptz)."""
    months = None
    if m := re.fullmatch(r"(\d{4})-(\d\d)", text):
        y, mo, months = int(m[1]), int(m[2]), 1
    elif m := re.fullmatch(r"(\d{4})-Q([1-4])", text):
        y, mo, months = int(m[1]), 3 * int(m[2]) - 2, 3
    elif m := re.fullmatch(r"(\d{4})", text):
        y, mo, months = int(m[1]), 1, 12
    elif m := re.fullmatch(r"(\d{3}0)s", text):
        y, mo, months = int(m[1]), 1, 120
    elif coltype != "date" and (m := re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)", text)):
        start = datetime(int(m[1]), int(m[2]), int(m[3]))
        end = start + timedelta(days=1)
    else:
        return None
    if months is not None:
        index = y * 12 + mo - 1 + months
        start, end = datetime(y, mo, 1), datetime(index // 12, index % 12 + 1, 1)
    if coltype == "date":
        return start.date(), end.date()
    if coltype == "timestamptz":
        return start.replace(tzinfo=NY), end.replace(tzinfo=NY)
    return start, end


def parse(text: str, coltype: str) -> tuple[Any, Any, bool, bool]:
    """(lower, upper, lower included, upper included) of a released text value; None for an
    unbounded end. Fails on text that is not one of the documented forms: a value, a range
    literal `[lo,hi]` or `[lo,hi)` (issue 34: negatives read unambiguously), a period, `*`."""
    if text == "*":
        return None, None, False, False
    numeric = coltype in ("integer", "bigint") or coltype.startswith("numeric")
    if not numeric and (p := _period(text, coltype)) is not None:
        return p[0], p[1], True, False
    m = re.fullmatch(r"\[([^,\[\]()]+),([^,\[\]()]+)([\])])", text)
    lo, hi, closed = (m[1], m[2], m[3] == "]") if m else (text, text, True)
    if coltype in ("integer", "bigint"):
        assert re.fullmatch(r"-?\d+", lo) and re.fullmatch(r"-?\d+", hi), text
        return int(lo), int(hi), True, closed
    if coltype.startswith("numeric"):
        assert re.fullmatch(NUM, lo) and re.fullmatch(NUM, hi), text
        return Decimal(lo), Decimal(hi), True, closed
    if coltype == "date":
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", lo) and re.fullmatch(r"\d{4}-\d\d-\d\d", hi), text
        return date.fromisoformat(lo), date.fromisoformat(hi), True, closed
    return _ts(lo, coltype), _ts(hi, coltype), True, closed


def holds(bounds: tuple[Any, Any, bool, bool], value: Any) -> bool:
    lo, hi, lo_inc, hi_inc = bounds
    above = lo is None or (lo <= value if lo_inc else lo < value)
    below = hi is None or (value <= hi if hi_inc else value < hi)
    return above and below


def canonical(bounds: tuple[Any, Any, bool, bool], coltype: str) -> tuple[Any, Any, bool, bool]:
    """Closed ends of discrete types as PostgreSQL keeps them: [lo, hi] is [lo, hi + 1)."""
    lo, hi, lo_inc, hi_inc = bounds
    step = {"integer": 1, "bigint": 1, "date": timedelta(days=1)}.get(coltype)
    if step is not None and hi is not None and hi_inc:
        return lo, hi + step, lo_inc, False
    return bounds


def as_bounds(r: Range) -> tuple[Any, Any, bool, bool]:
    return r.lower, r.upper, r.lower_inc, r.upper_inc


def round_width(w: Decimal) -> bool:
    return w > 0 and w.normalize().as_tuple().digits in ((1,), (5,))


# --- helpers over released relations --------------------------------------------------------------


def publish(dsn: str, name: str, method: str, form: str, *extra: str) -> dict[str, Any]:
    code, out = cli_json(
        dsn, "publish", name, "--source", f"{SCHEMA}.{TABLE}", "--key", KEY,
        "--qi", ",".join(QI), "--sensitive", MARK,
        "--k", str(K), "--algorithm", method, "--ranges", form, *extra,
    )  # fmt: skip
    assert code == 0, out
    return out


def column_types(conn: psycopg.Connection, schema: str, name: str) -> dict[str, str]:
    rows = conn.execute(
        """SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
           WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped""",
        [sql.Identifier(schema, name).as_string(conn)],
    ).fetchall()
    return dict(rows)


def pairs(conn: psycopg.Connection, rel: sql.Composable, col: str) -> list[tuple[Any, Any]]:
    """(released value, source value) of every released row, matched by the marker."""
    return conn.execute(
        sql.SQL("SELECT r.{c}, s.{c} FROM {rel} r JOIN {src} s ON s.{m} = r.{m}").format(
            c=sql.Identifier(col), rel=rel, src=SRC.ident, m=sql.Identifier(MARK)
        )
    ).fetchall()


def smallest_class(conn: psycopg.Connection, rel: sql.Composable) -> int:
    return conn.execute(
        sql.SQL("SELECT min(n) FROM (SELECT count(*) AS n FROM {} r GROUP BY {}) c").format(
            rel, sql.SQL(", ").join(map(sql.Identifier, QI))
        )
    ).fetchone()[0]


def check_release(
    conn: psycopg.Connection, rel: sql.Composable, form: str, rows: int
) -> dict[str, list]:
    """Every source row is released (no suppression needed here) in classes of at least K, and
    each released value holds the row's value; returns the parsed values per QI."""
    assert conn.execute(sql.SQL("SELECT count(*) FROM {} r").format(rel)).fetchone()[0] == rows
    assert smallest_class(conn, rel) >= K
    parsed: dict[str, list] = {}
    for col in QI:
        got = pairs(conn, rel, col)
        assert len(got) == rows
        parsed[col] = []
        for released, value in got:
            if form == "typed":
                assert isinstance(released, Range), (col, released)
                bounds = as_bounds(released)
            else:
                assert isinstance(released, str), (col, released)
                bounds = parse(released, TYPE_OF[col])
            assert holds(bounds, value), (col, released, value)
            parsed[col].append(bounds)
    if form == "typed":  # and independently of psycopg: the range operator in SQL
        for col in QI:
            outside = conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM {rel} r JOIN {src} s ON s.{m} = r.{m} "
                    "WHERE NOT r.{c} @> s.{c}"
                ).format(c=sql.Identifier(col), rel=rel, src=SRC.ident, m=sql.Identifier(MARK))
            ).fetchone()[0]
            assert outside == 0, col
    return parsed


# --- unit tests of the width rule ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "low", "high", "widths"),
    [
        ("integer", 17, 90, ("5", "10", "50", "100")),  # Adult's age
        ("integer", 1, 16, ("5", "10", "50")),  # Adult's education-num: no more merges above
        ("integer", -5, 3, ("5",)),  # wider ones still cut at 0: they merge nothing
        ("integer", 0, 197, ("5", "10", "50", "100")),
        ("integer", -5 * 10**6, 34 * 10**6 + 2000, ("500000", "1000000", "5000000", "10000000")),
        ("numeric", "0.01", "0.3", ("0.005", "0.01", "0.05", "0.1")),
        ("numeric", "0", "97.52", ("1", "5", "10", "50")),
        ("numeric", "40", "120", ("1", "5", "10", "50")),
        ("date", 0, 4000, ("50", "100", "500", "1000")),
        ("integer", 7, 7, ()),
    ],
)
def test_widths_are_round(base: str, low: Any, high: Any, widths: tuple[str, ...]) -> None:
    assert _widths(base, Decimal(low), Decimal(high), 4) == tuple(map(Decimal, widths))


@settings(max_examples=300, deadline=None)
@given(
    low=st.decimals(-(10**7), 10**7, places=3, allow_nan=False),
    span=st.decimals("0.001", 10**6, places=3, allow_nan=False),
    base=st.sampled_from(["integer", "numeric"]),
    levels=st.integers(1, 5),
)
def test_width_rule(low: Decimal, span: Decimal, base: str, levels: int) -> None:
    """Round, nested, at most `levels`; numeric: `levels` widths, the widest splitting [low, high]
    into 2 to 6 intervals; integers: never width 1 (the value itself), every level merging values
    or intervals of the one below, and fewer than `levels` only when no wider width could."""
    if base == "integer":
        low, span = low.to_integral_value(), max(span.to_integral_value(), Decimal(1))
    high = low + span
    widths = _widths(base, low, high, levels)
    assert len(widths) <= levels

    def cells(w: Decimal) -> int:
        down = "ROUND_FLOOR"
        return int((high / w).to_integral_value(down)) - int((low / w).to_integral_value(down)) + 1

    assert all(round_width(w) for w in widths)
    assert all(b > a and b % a == 0 for a, b in itertools.pairwise(widths))  # they nest
    if base == "numeric":
        assert len(widths) == levels
        assert widths[-1] >= span / 5 and 2 <= cells(widths[-1]) <= 6
        return
    assert all(w >= 2 and w == int(w) for w in widths)
    counts = [int(span) + 1] + [cells(w) for w in widths]
    assert all(b < a for a, b in itertools.pairwise(counts))  # each level merges
    if len(widths) < levels:  # no wider round width would merge anything more
        last = widths[-1] if widths else Decimal(1)
        wider = [m * Decimal(10) ** e for e in range(12) for m in (1, 5)]
        assert all(cells(w) == counts[-1] for w in wider if w > last)


# --- full-domain levels, one by one -------------------------------------------------------------


def test_every_level_reads_as_its_interval(conn: psycopg.Connection, source: list[tuple]) -> None:
    """Each level of each automatic hierarchy (integer, bigint, numeric, date, timestamp,
    timestamptz), in text and typed form: the text is one of the documented forms, the same
    interval as the typed range, holds the value, lies in the next level's value, and interval
    widths are round and aligned at 0."""
    cols = [catalog.columns(conn, SRC)[c] for c in QI]
    found = search(conn, SRC, cols, {}, [KAnonymity(K)])
    assert found.levels == dict.fromkeys(QI, 1)  # the groups of the data, nothing coarser
    hs = found.hierarchies
    assert [type(hs[c]) for c in QI] == [IntervalHierarchy] * 3 + [CalendarHierarchy] * 3
    assert [hs[c].height for c in QI] == [5, 5, 5, 5, 6, 6]
    assert hs[TZ].zone == ZONE
    values = {r[0]: r for r in source}
    index = {c: i + 1 for i, c in enumerate(QI)}
    previous: dict[str, dict[int, tuple]] = {}
    for level in range(7):
        levels = {c: min(level, hs[c].height) for c in QI}
        read = {}
        for form in ("text", "typed"):
            # The key as a pass-through column, to pair text and typed rows (a test only trick).
            query = release_select(SRC, cols, hs, levels, [KEY], [KAnonymity(1)], ranges=form)
            read[form] = {r[-1]: r[:-1] for r in conn.execute(query)}
            assert len(read[form]) == len(source)
        for key, texts in read["text"].items():
            for j, col in enumerate(QI):
                coltype, lv = TYPE_OF[col], levels[col]
                text, typed = texts[j], read["typed"][key][j]
                bounds = parse(text, coltype)
                assert holds(bounds, values[key][index[col]]), (col, lv, text)
                assert canonical(bounds, coltype) == as_bounds(typed), (col, lv, text, typed)
                if lv == hs[col].height:
                    assert text == "*" and typed.lower_inf and typed.upper_inf
                elif lv == 0:
                    assert not text.startswith("["), text
                elif isinstance(hs[col], IntervalHierarchy):
                    lo, hi = typed.lower, typed.upper
                    width = Decimal(hi - lo)
                    assert width == hs[col].widths[lv - 1] and round_width(width)
                    assert Decimal(lo) % width == 0, (col, text)  # aligned at 0
                    end = ")" if coltype.startswith("numeric") else "]"
                    assert re.fullmatch(rf"\[{NUM},{NUM}{re.escape(end)}", text), text
                else:
                    unit = hs[col].units[lv - 1]
                    forms = {
                        "day": r"\d{4}-\d\d-\d\d",
                        "month": r"\d{4}-\d\d",
                        "quarter": r"\d{4}-Q[1-4]",
                        "year": r"\d{4}",
                        "decade": r"\d{3}0s",
                    }
                    assert re.fullmatch(forms[unit], text), (col, unit, text)
                if key in previous:  # levels nest: this value lies within the next one's
                    lo, hi, _, _ = canonical(previous[key][j], coltype)
                    up_lo, up_hi, _, _ = canonical(bounds, coltype)
                    assert up_lo is None or (lo is not None and up_lo <= lo), (col, lv)
                    assert up_hi is None or (hi is not None and hi <= up_hi), (col, lv)
            previous[key] = tuple(parse(t, TYPE_OF[c]) for t, c in zip(texts, QI, strict=True))


def test_calendar_periods_are_the_zones(conn: psycopg.Connection, source: list[tuple]) -> None:
    """A timestamptz's periods are those of the zone fixed when the hierarchy was made, however
    the reader's TimeZone is set; a date's are its own, whatever the TimeZone."""
    cols = [catalog.columns(conn, SRC)[c] for c in (DAY, TZ)]
    hs = search(conn, SRC, cols, {}, [KAnonymity(1)]).hierarchies
    evening = datetime(2020, 12, 31, 21, tzinfo=NY)  # already 2021 in UTC and Tokyo
    conn.execute(
        sql.SQL("UPDATE {} SET {} = %s, {} = %s WHERE {} = 0").format(
            SRC.ident, sql.Identifier(TZ), sql.Identifier(DAY), sql.Identifier(KEY)
        ),
        [evening, date(2020, 12, 31)],
    )
    seen = set()
    for reader in ("UTC", "Asia/Tokyo", ZONE):
        conn.execute(sql.SQL("SET timezone = {}").format(sql.Literal(reader)))
        for level, unit in ((1, "day"), (4, "year"), (5, "decade")):
            query = release_select(SRC, cols, hs, {DAY: 0, TZ: level}, [KEY], [KAnonymity(1)])
            got = {r[-1]: r[:-1] for r in conn.execute(query)}
            seen.add((level, got[0]))
            assert got[0][0] == "2020-12-31"
            assert got[0][1] == {"day": "2020-12-31", "year": "2020", "decade": "2020s"}[unit]
        levels = {DAY: 3, TZ: 4}
        query = release_select(SRC, cols, hs, levels, [KEY], [KAnonymity(1)], ranges="typed")
        day, year = {r[-1]: r[:-1] for r in conn.execute(query)}[0]
        assert day == Range(date(2020, 1, 1), date(2021, 1, 1), "[)")
        assert year == Range(datetime(2020, 1, 1, tzinfo=NY), datetime(2021, 1, 1, tzinfo=NY), "[)")
    assert len(seen) == 3  # the same text, whoever reads


# --- published releases, every method ------------------------------------------------------------


def test_releases_read_the_same_across_methods(
    conn: psycopg.Connection, dsn: str, source: list[tuple]
) -> None:
    """fulldomain (table and view), kmember and mondrian, in text and typed form: the k promise,
    every row's value in its released value, one range type per column type, round widths."""
    types: dict[str, set[str]] = {c: set() for c in QI}
    for method, extra in (
        ("fulldomain", ()), ("fulldomain", ("--as", "view")), ("kmember", ()), ("mondrian", ()),
    ):  # fmt: skip
        for form in ("text", "typed"):
            name = f"{method}_{extra[-1] if extra else 'table'}_{form}"
            out = publish(dsn, name, method, form, *extra)
            assert out["min_class_size"] >= K
            rel = sql.Identifier("released", name)
            found = column_types(conn, "released", name)
            for col in QI:
                if form == "typed":
                    assert found[col] == RANGE_TYPE[TYPE_OF[col]], (name, col, found[col])
                    types[col].add(found[col])
                else:
                    assert found[col] == "text", (name, col)
            parsed = check_release(conn, rel, form, len(source))
            if method == "fulldomain":  # level 1 everywhere: the narrowest interval or period
                for col in (AGE, BIG, WEIGHT):
                    widths = {
                        Decimal(hi - lo) + (1 if hi_inc else 0) for lo, hi, _, hi_inc in parsed[col]
                    }
                    assert len(widths) == 1 and round_width(widths.pop()), (name, col)
                    assert all(Decimal(lo) % (Decimal(hi - lo) + (1 if inc else 0)) == 0
                               for lo, hi, _, inc in parsed[col])  # fmt: skip
                months = {hi - lo for lo, hi, _, _ in parsed[DAY]}
                assert months <= {timedelta(days=d) for d in (28, 29, 30, 31)}, months
                assert {hi - lo for lo, hi, _, _ in parsed[TS]} == {timedelta(days=1)}
                days = {hi.astimezone(UTC) - lo.astimezone(UTC) for lo, hi, _, _ in parsed[TZ]}
                assert days == {timedelta(hours=23), timedelta(hours=24)}  # 23 h at DST
    assert all(len(t) == 1 for t in types.values()), types


def test_view_generalises_values_inserted_later(
    conn: psycopg.Connection, dsn: str, source: list[tuple]
) -> None:
    """A live full-domain view releases rows inserted after it was published, far outside the
    range its hierarchies were made from, in intervals and periods that hold them."""
    publish(dsn, "live", "fulldomain", "text", "--as", "view")
    late = (10_000, 10**12, Decimal("99999.99"), date(2150, 6, 15), datetime(2150, 6, 15, 12),
            datetime(2150, 6, 15, 23, tzinfo=NY))  # fmt: skip
    insert = sql.SQL("INSERT INTO {} VALUES ({})").format(
        SRC.ident, sql.SQL(", ").join(sql.Placeholder() * len(COLUMNS))
    )
    rel = sql.Identifier("released", "live")
    marked = sql.SQL("SELECT {} FROM {} WHERE {} LIKE 'late %'").format(
        sql.SQL(", ").join(map(sql.Identifier, QI)), rel, sql.Identifier(MARK)
    )
    for i in range(K):
        conn.execute(insert, [1000 + i, *late, f"late {i}"])
        shown = conn.execute(marked).fetchall()
        assert len(shown) == (K if i == K - 1 else 0)  # a class of K, shown only once whole
    for row in shown:
        for col, text, value in zip(QI, row, late, strict=True):
            assert text != "*" and holds(parse(text, TYPE_OF[col]), value), (col, text)
    assert row[QI.index(TZ)] == "2150-06-15"  # a New York day (UTC: the 16th)
    assert smallest_class(conn, rel) >= K
    check_release(conn, sql.SQL("(SELECT * FROM {} WHERE {} NOT LIKE 'late %')").format(
        rel, sql.Identifier(MARK)
    ), "text", len(source))  # fmt: skip


def test_ranges_option_is_checked(conn: psycopg.Connection, dsn: str, source: list[tuple]) -> None:
    code, out = cli_json(
        dsn, "publish", "bad", "--source", f"{SCHEMA}.{TABLE}", "--key", KEY, "--qi", AGE,
        "--k", "3", "--algorithm", "fulldomain", "--ranges", "pretty",
    )  # fmt: skip
    assert code == 2 and "--ranges" in out["error"] and "pretty" in out["error"]
    cols = [catalog.columns(conn, SRC)[AGE]]
    with pytest.raises(DbanonError, match="ranges must be one of"):
        release_select(SRC, cols, {}, {AGE: 0}, [], [KAnonymity(1)], ranges="pretty")
