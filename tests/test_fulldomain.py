"""Full-domain generalisation: the search against an exhaustive search, the release SQL checked by
independent GROUP BYs, live views, odd identifiers, bad input.

The exhaustive search below is independent of the module's SQL: it generalises the raw rows in
Python (Hierarchy.generalize, floor division for intervals), forms classes with a Counter and
computes NCP from leaf counts and interval widths.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import psycopg
import pytest
from helpers import make_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.range import Range

from dbanon.core.hierarchy import Hierarchy
from dbanon.db import catalog
from dbanon.db.catalog import Column, Relation
from dbanon.errors import DbanonError
from dbanon.models import (
    AlphaKAnonymity,
    DistinctLDiversity,
    EntropyLDiversity,
    KAnonymity,
    PKAnonymity,
    PrivacyModel,
    RecursiveCLDiversity,
)
from dbanon.setlogic import coded
from dbanon.setlogic import lattice as lat
from dbanon.setlogic.fulldomain import release_select
from dbanon.setlogic.hierarchies import (
    CalendarHierarchy,
    IntervalHierarchy,
    _effective,
    _widths,
    interval_hierarchy,
)
from dbanon.setlogic.lattice import _QI, FullDomainResult, _Lattice, search

SCHEMA, TABLE = 'Odd "Schéma"', "Pa tients Ω"
SRC = Relation(SCHEMA, TABLE)
AGE, ZIP, SEX, DX = "Age Ω", "Zip Code", "Sex", 'Diagnosis "✓"'
ZIP_H = Hierarchy.from_rows(
    'zip "codes" ü',
    [
        [z, z[:3] + "**", z[:1] + "****", "*"]
        for z in ["10115", "10117", "10243", "10245", "20095", "20097", "20144", "30001"]
    ],
)
COLUMNS = [("ID", "integer"), (AGE, "integer"), (ZIP, "text"), (SEX, "text"), (DX, "text")]
EPOCH = date(1970, 1, 1)


def patients(n: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    zips = list(ZIP_H.leaves)
    return [
        (
            i,
            rng.randint(18, 80),
            rng.choice(zips[:4] if rng.random() < 0.7 else zips),
            rng.choice(["F", "M"]),
            rng.choice(["flu", "asthma", "diabetes", "cancer"]),
        )
        for i in range(n)
    ]


def setup(conn: psycopg.Connection, rows: Sequence[tuple], columns: Sequence = COLUMNS) -> None:
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    make_table(conn, SCHEMA, TABLE, columns, rows)
    catalog.store_hierarchy(conn, ZIP_H, replace=True)


def qi_columns(conn: psycopg.Connection, names: Sequence[str]) -> list[Column]:
    cols = catalog.columns(conn, SRC)
    return [cols[n] for n in names]


# --- the independent reference ------------------------------------------------------------------


def as_number(value: Any) -> Decimal:
    """Days since 1970-01-01 of a date, epoch seconds of a timestamp, a number as it is."""
    if isinstance(value, datetime):
        utc = ZoneInfo("UTC") if value.tzinfo else None
        since = value - datetime(1970, 1, 1, tzinfo=utc)
        return Decimal(since.days * 86400 + since.seconds) + Decimal(since.microseconds) / 10**6
    return Decimal((value - EPOCH).days) if isinstance(value, date) else Decimal(value)


def calendar_period(h: CalendarHierarchy, value: Any, level: int) -> tuple[datetime, datetime]:
    """[start, end) of the calendar period of a date or timestamp, as local timestamps."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        value = value.astimezone(ZoneInfo(h.zone)).replace(tzinfo=None)
    elif not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    unit = h.units[level - 1]
    if unit == "day":
        start = datetime(value.year, value.month, value.day)
        return start, start + timedelta(days=1)
    months = {"month": 1, "quarter": 3, "year": 12, "decade": 120}[unit]
    index = (value.year * 12 + value.month - 1) // months * months
    end = index + months
    return datetime(index // 12, index % 12 + 1, 1), datetime(end // 12, end % 12 + 1, 1)


def generalise(h: Any, value: Any, level: int) -> Any:
    """The released value, in the form psycopg returns it (typed ranges)."""
    if isinstance(h, CalendarHierarchy):
        if level == h.height:
            return Range(None, None, "()")
        if level == 0:
            if h.base == "date":
                return Range(value, value + timedelta(days=1), "[)")
            return Range(value, value, "[]")
        start, end = calendar_period(h, value, level)
        if h.base == "date":
            return Range(start.date(), end.date(), "[)")
        if value.tzinfo is not None:
            zone = ZoneInfo(h.zone)
            start, end = start.replace(tzinfo=zone), end.replace(tzinfo=zone)
        return Range(start, end, "[)")
    if isinstance(h, IntervalHierarchy):
        if level == h.height:
            return Range(None, None, "()")
        x = as_number(value)
        if level == 0:
            lo, hi = x, x + (0 if h.base == "numeric" else 1)
        else:
            w = h.widths[level - 1]
            lo = (x / w).to_integral_value(rounding="ROUND_FLOOR") * w
            hi = lo + w
        if h.base == "date":
            return Range(EPOCH + timedelta(days=int(lo)), EPOCH + timedelta(days=int(hi)), "[)")
        if h.base == "integer":
            return Range(int(lo), int(hi), "[)")
        return Range(lo, hi, "[]" if level == 0 else "[)")
    if h is None:  # flat
        return str(value) if level == 0 else "*"
    return h.generalize(str(value), level)


def ncp(h: Any, value: Any, level: int) -> float:
    top = 1 if h is None else h.height
    if level == 0:
        return 0.0
    if level == top:
        return 1.0
    if isinstance(h, IntervalHierarchy | CalendarHierarchy):
        if h.high == h.low:
            return 0.0
        released = generalise(h, value, level)
        lo, hi = as_number(released.lower), as_number(released.upper)
        whole = h.base in ("integer", "date")  # whole units: [lo, hi) ends at hi - 1
        last = hi - (1 if whole else 0)
        return float((min(last, h.high) - max(lo, h.low)) / (h.high - h.low))
    assert isinstance(h, Hierarchy)
    label = h.generalize(str(value), level)
    leaves = sum(1 for leaf in h.leaves if h.generalize(leaf, level) == label)
    return (leaves - 1) / (len(h.leaves) - 1)


def exhaustive(
    rows: Sequence[Sequence[Any]],
    hs: Sequence[Any],
    k: int,
    budget: int,
    sensitive: Sequence[Any] | None = None,
    judge: Callable[[Counter], bool] | None = None,
) -> tuple[float, set[tuple[int, ...]], dict[tuple[int, ...], int]]:
    """(least loss, the nodes that reach it, suppressed rows per satisfying node). Classes
    under k are suppressed, then those whose sensitive-value counts `judge` rejects."""
    d, n = len(hs), len(rows)
    best, argbest, suppressed = math.inf, set(), {}
    heights = [1 if h is None else h.height for h in hs]
    for node in itertools.product(*(range(t + 1) for t in heights)):
        keys = [
            tuple(
                repr(generalise(h, row[i], lv))
                for i, (h, lv) in enumerate(zip(hs, node, strict=True))
            )
            for row in rows
        ]
        sizes = Counter(keys)
        kept = [j for j in range(n) if sizes[keys[j]] >= k]
        if sensitive is not None and judge is not None:
            classes: dict[tuple, Counter] = {}
            for j in kept:
                classes.setdefault(keys[j], Counter())[sensitive[j]] += 1
            kept = [j for j in kept if judge(classes[keys[j]])]
        if n - len(kept) > budget:
            continue
        suppressed[node] = n - len(kept)
        loss = sum(
            ncp(h, rows[j][i], lv)
            for j in kept
            for i, (h, lv) in enumerate(zip(hs, node, strict=True))
        )
        loss = (loss + (n - len(kept)) * d) / (n * d)
        if loss < best - 1e-9:
            best, argbest = loss, {node}
        elif abs(loss - best) <= 1e-9:
            argbest.add(node)
    return best, argbest, suppressed


def released_classes(
    conn: psycopg.Connection, query: sql.Composable, qi: Sequence[str]
) -> list[int]:
    """Class sizes of a released relation, by an independent GROUP BY."""
    rows = conn.execute(
        sql.SQL("SELECT count(*) FROM ({}) r GROUP BY {}").format(
            query, sql.SQL(", ").join(map(sql.Identifier, qi))
        )
    ).fetchall()
    return [r[0] for r in rows]


def check_optimal(
    conn: psycopg.Connection,
    rows: Sequence[tuple],
    qi: Sequence[str],
    k: int,
    max_suppression: float,
    models: list[PrivacyModel] | None = None,
    sensitive: str | None = None,
    judge: Callable[[Counter], bool] | None = None,
) -> FullDomainResult:
    """Search, then compare with the exhaustive search and check the release by GROUP BY."""
    cols = qi_columns(conn, qi)
    hierarchies = {ZIP: ZIP_H} if ZIP in qi else {}
    result = search(
        conn, SRC, cols, hierarchies, models or [KAnonymity(k)], sensitive, max_suppression
    )
    index = {name: i for i, (name, _) in enumerate(COLUMNS)}
    qi_rows = [[row[index[c]] for c in qi] for row in rows]
    hs = [result.hierarchies.get(c) for c in qi]
    for j, (c, h) in enumerate(zip(cols, hs, strict=True)):
        assert (h is None) == (c.kind == catalog.CATEGORICAL and c.name not in hierarchies)
        if isinstance(h, IntervalHierarchy):  # NCP is relative to the column's range
            values = [as_number(r[j]) for r in qi_rows]
            assert (h.low, h.high) == (min(values), max(values))
    budget = math.floor(max_suppression * len(rows))
    sens = [row[index[sensitive]] for row in rows] if sensitive else None
    best, argbest, suppressed = exhaustive(qi_rows, hs, k, budget, sens, judge)
    node = tuple(result.levels[c] for c in qi)
    assert result.nodes == math.prod((1 if h is None else h.height) + 1 for h in hs)
    assert result.loss == pytest.approx(best, abs=1e-9)
    assert node in argbest
    assert result.suppressed == suppressed[node] <= budget
    assert result.nodes_checked <= result.nodes

    query = release_select(
        SRC,
        cols,
        result.hierarchies,
        result.levels,
        [sensitive] if sensitive else [],
        models or [KAnonymity(k)],
        ranges="typed",
    )
    sizes = released_classes(conn, query, qi)
    assert min(sizes, default=k) >= k
    assert sum(sizes) == len(rows) - result.suppressed
    # The released values are the reference's generalisations, class for class; a class
    # is kept when it has k rows and (with a judge) its sensitive values pass.
    keys = [
        tuple(generalise(h, v, result.levels[c]) for h, v, c in zip(hs, row, qi, strict=True))
        for row in qi_rows
    ]
    values: dict[tuple, Counter] = {}
    for j, key in enumerate(keys):
        values.setdefault(key, Counter())[sens[j] if sens else None] += 1
    expected = Counter(
        {
            key: c.total()
            for key, c in values.items()
            if c.total() >= k and (judge is None or sens is None or judge(c))
        }
    )
    got = Counter(
        tuple(r)
        for r in conn.execute(
            sql.SQL("SELECT {} FROM ({}) r").format(
                sql.SQL(", ").join(map(sql.Identifier, qi)), query
            )
        )
    )
    assert got == expected
    return result


# --- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "max_suppression"), [(2, 0.0), (4, 0.0), (4, 0.05), (6, 0.2)])
def test_optimal_against_exhaustive_search(
    conn: psycopg.Connection, k: int, max_suppression: float
) -> None:
    rows = patients(240, seed=k)
    setup(conn, rows)
    result = check_optimal(conn, rows, [AGE, ZIP, SEX], k, max_suppression)
    assert result.nodes_checked < result.nodes / 2  # pruning did prune


@pytest.mark.parametrize(
    ("read", "part_rows"), [("streamed", None), ("fetched", None), ("fetched", 700)],
    ids=["streamed", "one-part", "page-ranges"],
)  # fmt: skip
def test_numpy_counts_of_every_node_match_the_reference(
    conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch, read: str, part_rows: int | None
) -> None:
    """A k-only search counts nodes in numpy, rolling up from the tables of failing nodes: on
    a frequency set big enough for roll-ups, every node's rows under k and their NCP equal an
    independent count in Python, whatever tables they were counted from; whether the rows
    are read once (`_streamed`) or fetched as codes after the maps (the path of QIs that
    cannot be streamed), also in parts by page ranges (as a large table is), each row in
    exactly one."""
    if read == "fetched":
        monkeypatch.setattr(_Lattice, "_streamed", lambda self, source: False)
    if part_rows is not None:
        monkeypatch.setattr(coded, "PART_ROWS", part_rows)
    rows = patients(6000, seed=11)
    setup(conn, rows)
    qi = [AGE, ZIP, SEX, DX]
    cols = qi_columns(conn, qi)
    qis = [_QI(c, *_effective(c, {ZIP: ZIP_H})) for c in cols]
    k, lattice = 4, _Lattice(conn, qis, 4, with_ncp=True)
    index = {name: i for i, (name, _) in enumerate(COLUMNS)}
    if part_rows is not None:
        assert len(lat._tid_ranges(conn, SRC, len(rows))) >= 6
    with conn.transaction():
        lattice.build(SRC)
        assert lattice.coded is not None
        hs = [q.h for q in qis]
        nodes = sorted(
            itertools.product(*(range(q.height + 1) for q in qis)), key=lambda n: (sum(n), n)
        )
        for node in nodes:
            at = list(zip(qi, hs, node, strict=True))
            keys = [tuple(repr(generalise(h, r[index[c]], lv)) for c, h, lv in at) for r in rows]
            sizes = Counter(keys)
            small = [j for j in range(len(rows)) if sizes[keys[j]] < k]
            loss = sum(
                ncp(h, rows[j][index[c]], lv) for j in small for c, h, lv in at
            )
            got = lattice.count(np.array(node, dtype=np.int64))
            assert got[0] == len(small), node
            assert got[1] == pytest.approx(loss, abs=1e-6), node
        assert len(lattice.coded.tables) > 1  # some nodes were counted from a roll-up
        lattice.drop()


def test_suppression_limit_is_respected(conn: psycopg.Connection) -> None:
    """Three outliers, each a class of its own at every low node: the budget decides whether
    they are suppressed (whole classes, never more rows than allowed) or generalised away."""
    rows = patients(200, seed=2)
    rows += [(900, 79, "30001", "M", "flu"), (901, 18, "20144", "F", "flu")]
    rows += [(902, 80, "20097", "M", "flu")]
    setup(conn, rows)
    cols = qi_columns(conn, [AGE, ZIP, SEX])
    losses = []
    for max_suppression in (0.0, 0.005, 0.01, 0.02, 0.1):
        budget = math.floor(max_suppression * len(rows))
        result = search(conn, SRC, cols, {ZIP: ZIP_H}, [KAnonymity(4)], None, max_suppression)
        assert result.suppressed <= budget
        query = release_select(SRC, cols, result.hierarchies, result.levels, [DX], [KAnonymity(4)])
        sizes = released_classes(conn, query, [AGE, ZIP, SEX])
        assert min(sizes) >= 4 and sum(sizes) == len(rows) - result.suppressed
        losses.append(result.loss)
    assert losses == sorted(losses, reverse=True)  # a larger budget never costs more
    assert losses[-1] < losses[0]


def test_other_models_checked_on_the_release(conn: psycopg.Connection) -> None:
    rows = patients(160, seed=7)
    setup(conn, rows)
    models: list[PrivacyModel] = [KAnonymity(3), DistinctLDiversity(3)]
    check_optimal(conn, rows, [AGE, ZIP, SEX], 3, 0.05, models, DX, lambda c: len(c) >= 3)
    with pytest.raises(DbanonError, match="needs a sensitive column"):
        search(conn, SRC, qi_columns(conn, [AGE]), {}, models)


def skewed(n: int, seed: int) -> list[tuple]:
    """Patients whose diagnosis is mostly 'flu': many classes fail l-diversity-like models."""
    rng = random.Random(seed)
    return [
        (*row[:4], "flu" if rng.random() < 0.75 else rng.choice(["asthma", "cancer"]))
        for row in patients(n, seed)
    ]


def entropy_at_least(l: float) -> Callable[[Counter], bool]:  # noqa: E741
    def judge(c: Counter) -> bool:
        size = c.total()
        return -sum(v / size * math.log(v / size) for v in c.values()) >= math.log(l) - 1e-9

    return judge


def recursive(c_: float, l: int) -> Callable[[Counter], bool]:  # noqa: E741
    def judge(c: Counter) -> bool:
        ns = sorted(c.values(), reverse=True)
        return ns[0] < c_ * sum(ns[l - 1 :])

    return judge


# (models, independent judge of a class's sensitive counts); k = 3 in all
SUPPRESSION_CASES = {
    "distinct-l": ([KAnonymity(3), DistinctLDiversity(2)], lambda c: len(c) >= 2),
    "entropy-l": ([KAnonymity(3), EntropyLDiversity(1.6)], entropy_at_least(1.6)),
    "recursive": ([KAnonymity(3), RecursiveCLDiversity(2.0, 2)], recursive(2.0, 2)),
    "alpha-k": ([AlphaKAnonymity(0.7, 3)], lambda c: max(c.values()) / c.total() <= 0.7),
    "p-k": ([PKAnonymity(2, 3)], lambda c: len(c) >= 2),
}


@pytest.mark.parametrize("case", sorted(SUPPRESSION_CASES))
@pytest.mark.parametrize(("seed", "max_suppression"), [(1, 0.05), (2, 0.15), (3, 0.3)])
def test_suppression_of_classes_failing_any_model_is_optimal(
    conn: psycopg.Connection, case: str, seed: int, max_suppression: float
) -> None:
    """Under a suppression limit, every class failing any model is suppressed (not only those
    under k) and counted against the limit; the search returns the exhaustive optimum of that
    (an enumeration of every node in pure Python), and the release leaves out exactly those
    classes."""
    models, judge = SUPPRESSION_CASES[case]
    rows = skewed(150, seed)
    setup(conn, rows)
    try:
        result = check_optimal(conn, rows, [AGE, ZIP, SEX], 3, max_suppression, models, DX, judge)
    except DbanonError as e:  # then no node is within the limit, by the reference too
        assert "satisfies" in str(e)
        hs = [interval_hierarchy(conn, SRC, qi_columns(conn, [AGE])[0]), ZIP_H, None]
        qi_rows = [row[1:4] for row in rows]
        budget = math.floor(max_suppression * len(rows))
        sens = [row[4] for row in rows]
        assert exhaustive(qi_rows, hs, 3, budget, sens, judge)[0] == math.inf
        return
    assert result.model_checks >= 1


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 40),
            st.sampled_from(sorted(ZIP_H.leaves)),
            st.sampled_from(["F", "M", "X"]),
            st.sampled_from(["a", "b"]),
        ),
        min_size=6,
        max_size=40,
    ),
    k=st.integers(2, 4),
    max_suppression=st.sampled_from([0.0, 0.1, 0.3]),
)
def test_pruning_never_skips_the_optimum(
    conn: psycopg.Connection, rows: list[tuple], k: int, max_suppression: float
) -> None:
    table = [(i, *r) for i, r in enumerate(rows)]
    setup(conn, table)
    check_optimal(conn, table, [AGE, ZIP, SEX], k, max_suppression)


def test_numeric_and_date_intervals(conn: psycopg.Connection) -> None:
    """Interval hierarchies of integer and numeric QIs, a date's calendar, searched and
    released."""
    rng = random.Random(3)
    columns = [
        ("ID", "integer"),
        ("Wéight kg", "numeric(5,1)"),
        ("Visit day", "date"),
        ("Small Int", "smallint"),
    ]
    rows = [
        (
            i,
            Decimal(rng.randint(400, 1200)) / 10,
            date(2001, 1, 1) + timedelta(rng.randint(0, 3000)),
            rng.randint(-50, 50),
        )
        for i in range(150)
    ]
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    make_table(conn, SCHEMA, TABLE, columns, rows)
    qi = ["Wéight kg", "Visit day", "Small Int"]
    cols = qi_columns(conn, qi)
    result = search(conn, SRC, cols, {}, [KAnonymity(3)], max_suppression=0.1)
    hs = [result.hierarchies[c] for c in qi]
    assert [(type(h), h.base) for h in hs] == [
        (IntervalHierarchy, "numeric"), (CalendarHierarchy, "date"), (IntervalHierarchy, "integer")
    ]  # fmt: skip
    best, argbest, suppressed = exhaustive([r[1:] for r in rows], hs, 3, 15)
    node = tuple(result.levels[c] for c in qi)
    assert node in argbest and result.loss == pytest.approx(best, abs=1e-9)
    assert result.suppressed == suppressed[node]
    query = release_select(
        SRC, cols, result.hierarchies, result.levels, [], [KAnonymity(3)], ranges="typed"
    )
    got = Counter(tuple(r) for r in conn.execute(query))
    expected = Counter(
        tuple(generalise(h, v, lv) for h, v, lv in zip(hs, r[1:], node, strict=True)) for r in rows
    )
    assert got == Counter({key: n for key, n in expected.items() if n >= 3})


@pytest.mark.parametrize(
    ("base", "low", "high"),
    [("integer", 17, 90), ("integer", -5, 3), ("numeric", "0.01", "0.3"), ("date", 0, 4000)],
)
def test_interval_widths_nest_and_cover_the_range(base: str, low: Any, high: Any) -> None:
    low, high = Decimal(low), Decimal(high)
    widths = _widths(base, low, high, 4)
    assert widths, "a range this wide gets interval levels"
    for a, b in itertools.pairwise(widths):
        assert b > a and b % a == 0  # aligned at 0: each interval lies in one of the next
    for w in widths:  # round: 1 or 5 times a power of ten
        assert w.normalize().as_tuple().digits in ((1,), (5,))
    # The narrowest round width >= a fifth of the span: 2 to 6 intervals at the top level.
    top = next(w for w in widths if w >= (high - low) / 5)
    below = top / (2 if top.normalize().as_tuple().digits == (1,) else 5)  # the chain's previous
    assert below < (high - low) / 5
    if base == "numeric":
        assert top == widths[-1] and len(widths) == 4
    else:
        assert all(w >= 2 and w == int(w) for w in widths)
    assert _widths(base, low, low, 4) == ()


def test_interval_values_contain_the_value(conn: psycopg.Connection) -> None:
    """Every released interval holds its value and has its level's width, including for
    values far outside the range the hierarchy was made from."""
    rel = Relation("s", "t")
    make_table(conn, "s", "t", [("n", "integer"), ("x", "numeric"), ("d", "date")], [])
    cols = list(catalog.columns(conn, rel).values())
    hs = {
        "n": IntervalHierarchy("n", "integer", (Decimal(2), Decimal(4)), Decimal(0), Decimal(40)),
        "x": IntervalHierarchy("x", "numeric", (Decimal("0.25"),), Decimal(0), Decimal(1)),
        "d": IntervalHierarchy("d", "date", (Decimal(8), Decimal(16)), Decimal(0), Decimal(99)),
    }
    values = [(-7, Decimal("-0.3"), date(1969, 12, 25)), (10**6, Decimal("7.75"), date(2100, 1, 1))]
    for row in values:
        conn.execute("TRUNCATE s.t")
        conn.execute("INSERT INTO s.t VALUES (%s, %s, %s)", row)
        for level in range(3):
            levels = {c: min(level, hs[c].height) for c in hs}
            got = conn.execute(
                release_select(rel, cols, hs, levels, [], [KAnonymity(1)], ranges="typed")
            ).fetchone()
            for value, released, c in zip(row, got, hs, strict=True):
                assert value in released, (c, level)
                lv = levels[c]
                if 0 < lv < hs[c].height:
                    width = as_number(released.upper) - as_number(released.lower)
                    assert width == hs[c].widths[lv - 1]
            assert got == tuple(
                generalise(hs[c], v, levels[c]) for c, v in zip(hs, row, strict=True)
            )


def test_view_stays_k_anonymous_as_the_source_changes(conn: psycopg.Connection) -> None:
    rows = patients(200, seed=11)
    setup(conn, rows)
    qi = [AGE, ZIP, SEX]
    cols = qi_columns(conn, qi)
    k = 4
    result = search(conn, SRC, cols, {ZIP: ZIP_H}, [KAnonymity(k)], max_suppression=0.05)
    release = sql.Identifier("Rel ease", "Pa tients Ω")
    conn.execute('CREATE SCHEMA "Rel ease"')
    conn.execute(
        sql.SQL("CREATE VIEW {} AS {}").format(
            release,
            release_select(SRC, cols, result.hierarchies, result.levels, [DX], [KAnonymity(k)]),
        )
    )
    cols_out = [
        d.name
        for d in conn.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(release)).description
    ]
    assert cols_out == [*qi, DX]  # no row key

    def classes() -> list[int]:
        return released_classes(conn, sql.SQL("SELECT * FROM {}").format(release), qi)

    before = sum(classes())
    assert before == len(rows) - result.suppressed
    # k - 1 rows of a class the source does not have yet, with a marker diagnosis.
    hs = [result.hierarchies.get(c) for c in qi]

    def key(row: Sequence[Any]) -> tuple:
        return tuple(
            repr(generalise(h, v, result.levels[c])) for h, v, c in zip(hs, row, qi, strict=True)
        )

    present = {key(r[1:4]) for r in rows}
    candidates = itertools.product([50, 10_000], sorted(ZIP_H.leaves), ["F", "M", "Ω-new"])
    new_age, new_zip, new_sex = next(c for c in candidates if key(c) not in present)
    insert = sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s)").format(SRC.ident)
    for i in range(k - 1):
        conn.execute(insert, [1000 + i, new_age, new_zip, new_sex, "marker"])
    sizes = classes()
    assert min(sizes) >= k
    assert (
        conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE {} = 'marker'").format(
                release, sql.Identifier(DX)
            )
        ).fetchone()[0]
        == 0
    )
    assert sum(sizes) == before
    # The k-th row makes the class big enough: all k rows appear, and only then.
    conn.execute(insert, [2000, new_age, new_zip, new_sex, "marker"])
    assert (
        conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE {} = 'marker'").format(
                release, sql.Identifier(DX)
            )
        ).fetchone()[0]
        == k
    )
    assert min(classes()) >= k
    # A value the hierarchy does not cover is released as its root, still in classes >= k.
    conn.execute(insert, [3000, 50, "99999", "F", "flu"])
    assert min(classes()) >= k


def test_bad_input_names_the_culprit_and_leaves_no_tables(
    conn: psycopg.Connection, dsn: str
) -> None:
    rows = patients(30, seed=5)
    setup(conn, rows)
    cols = qi_columns(conn, [AGE, ZIP, SEX])
    hs = {ZIP: ZIP_H}

    def temp_tables(c: psycopg.Connection = conn) -> int:
        return c.execute(
            "SELECT count(*) FROM pg_class WHERE relname LIKE 'dbanon\\_fd\\_%' "
            "AND relpersistence = 't'"
        ).fetchone()[0]

    with pytest.raises(DbanonError, match="larger than the 30 rows"):
        search(conn, SRC, cols, hs, [KAnonymity(31)])
    assert temp_tables() == 0
    conn.execute(
        sql.SQL("UPDATE {} SET {} = '77777' WHERE {} = 3").format(
            SRC.ident, sql.Identifier(ZIP), sql.Identifier("ID")
        )
    )
    with pytest.raises(DbanonError, match="'77777' of column \"Zip Code\" is not in hierarchy"):
        search(conn, SRC, cols, hs, [KAnonymity(2)])
    assert temp_tables() == 0
    conn.execute(
        sql.SQL("UPDATE {} SET {} = NULL WHERE {} = 4").format(
            SRC.ident, sql.Identifier(AGE), sql.Identifier("ID")
        )
    )
    with pytest.raises(DbanonError, match='"Age Ω" .* is NULL in 1 rows'):
        search(conn, SRC, cols, hs, [KAnonymity(2)])
    assert temp_tables() == 0
    other = Hierarchy.from_rows("not stored", [["F", "*"], ["M", "*"]])
    with pytest.raises(DbanonError, match="'not stored' of column \"Sex\" is not stored"):
        search(conn, SRC, cols, {SEX: other}, [KAnonymity(2)])
    with pytest.raises(DbanonError, match="max_suppression"):
        search(conn, SRC, cols, hs, [KAnonymity(2)], max_suppression=1.5)
    with pytest.raises(DbanonError, match="needs its interval hierarchy"):
        release_select(SRC, cols, hs, {AGE: 1, ZIP: 0, SEX: 0}, [], [KAnonymity(2)])
    # In the caller's transaction: nothing committed, temp tables gone, transaction usable.
    with psycopg.connect(dsn) as tx:
        tx.execute("CREATE TABLE uncommitted (x int)")
        with pytest.raises(DbanonError, match="is NULL in 1 rows"):
            search(tx, SRC, qi_columns(tx, [AGE, ZIP, SEX]), hs, [KAnonymity(2)])
        assert tx.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert temp_tables(tx) == 0
        conn.execute(
            sql.SQL("UPDATE {} SET {} = 30, {} = '10115' WHERE {} IN (3, 4)").format(
                SRC.ident, sql.Identifier(AGE), sql.Identifier(ZIP), sql.Identifier("ID")
            )
        )
        tx.execute("SET LOCAL jit = on")  # the search turns JIT off for itself only
        assert search(tx, SRC, qi_columns(tx, [AGE, ZIP, SEX]), hs, [KAnonymity(2)]).nodes
        assert temp_tables(tx) == 0
        assert tx.execute("SELECT current_setting('jit')").fetchone()[0] == "on"
        tx.rollback()
    assert conn.execute("SELECT to_regclass('uncommitted')").fetchone()[0] is None


def test_interval_hierarchy_from_the_live_table(conn: psycopg.Connection) -> None:
    setup(conn, [(i, 17 + i % 74, "10115", "F", "flu") for i in range(100)])
    h = interval_hierarchy(conn, SRC, qi_columns(conn, [AGE])[0])
    assert (h.low, h.high, h.base) == (17, 90, "integer")
    assert h.widths == (5, 10, 50, 100)
    with pytest.raises(DbanonError, match="is not numeric or date"):
        interval_hierarchy(conn, SRC, qi_columns(conn, [SEX])[0])


@pytest.mark.parametrize("max_suppression", [0.0, 0.05])
def test_node_loss_is_the_searchs_loss(conn: psycopg.Connection, max_suppression: float) -> None:
    """A sealed refresh keeps its node and reports the node's NCP with `node_loss`: over the
    rows the search kept (every other row costing 1) it must equal the search's own loss, a
    stored hierarchy, an automatic interval one and a flat QI together."""
    from dbanon.setlogic.fulldomain import node_loss

    rows = patients(300, seed=4) + [(900, 79, "30001", "M", "flu"), (901, 18, "20144", "F", "flu")]
    setup(conn, rows)
    cols = qi_columns(conn, [AGE, ZIP, SEX])
    result = search(conn, SRC, cols, {ZIP: ZIP_H}, [KAnonymity(5)], None, max_suppression)
    kept = release_select(SRC, cols, result.hierarchies, result.levels, ["ID"], [KAnonymity(5)])
    ident = sql.Identifier("ID")
    conn.execute(sql.SQL("CREATE TEMP TABLE shown AS SELECT s.* FROM {} s WHERE s.{} IN "
                         "(SELECT {} FROM ({}) k)").format(SRC.ident, ident, ident, kept))
    loss = node_loss(conn, Relation("pg_temp", "shown"), SRC, cols, result.hierarchies,
                     result.levels)  # fmt: skip
    assert result.levels[AGE] > 0 or result.levels[ZIP] > 0  # something was generalised
    assert loss == pytest.approx(result.loss, abs=1e-9), (loss, result.loss, result.levels)


def test_a_judged_release_is_the_judging_one(conn: psycopg.Connection) -> None:
    """A table build whose search suppressed nothing releases every row without judging the
    classes again (`judged`): the same rows as the release that judges them, also where equal
    numbers are written differently (1.0, 1.00: one class to the search and to the release)."""
    models = [KAnonymity(5)]

    def rows(judged: bool, cols: list[Column], found: FullDomainResult) -> Counter:
        query = release_select(SRC, cols, found.hierarchies, found.levels, [DX], models,
                               shuffle=False, judged=judged)  # fmt: skip
        return Counter(tuple(r) for r in conn.execute(query))

    setup(conn, patients(300, 5))
    cols = qi_columns(conn, [AGE, ZIP, SEX])
    found = search(conn, SRC, cols, {ZIP: ZIP_H}, models)
    assert found.suppressed == 0
    assert rows(True, cols, found) == rows(False, cols, found)

    conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(SCHEMA)))
    values = ["1.0", "1.00", "1.000", "1", "1.0000", "2", "2", "2", "2", "2"]
    make_table(conn, SCHEMA, TABLE, [("ID", "integer"), ("W", "numeric"), (DX, "text")],
               [(i, Decimal(v), "flu") for i, v in enumerate(values)])  # fmt: skip
    cols = qi_columns(conn, ["W"])
    found = search(conn, SRC, cols, {}, models)
    assert found.levels == {"W": 0} and found.suppressed == 0
    released = rows(True, cols, found)
    assert released == rows(False, cols, found)
    assert sorted(Counter(r[0] for r in released.elements()).values()) == [5, 5]


@pytest.mark.parametrize(
    ("base", "low", "high", "widths"),
    [
        ("integer", Decimal(10000), Decimal(99999), (Decimal(1000), Decimal(5000), Decimal(50000))),
        ("integer", Decimal(-73), Decimal(91), (Decimal(7), Decimal(30))),
        ("integer", Decimal(17), Decimal(90), (Decimal(5), Decimal(10), Decimal(50))),
        ("date", Decimal(-400), Decimal(19000), (Decimal(1), Decimal(365))),
        ("integer", Decimal("10.0"), Decimal("99.0"), (Decimal(10),)),  # scale 1: numeric way
        ("integer", Decimal(0), Decimal(2**62), (Decimal(10),)),  # near bigint's end: numeric
    ],
)
def test_interval_ncp_in_bigint_is_the_numeric_one_bit_for_bit(
    conn: psycopg.Connection, base: str, low: Decimal, high: Decimal, widths: tuple[Decimal, ...]
) -> None:
    """The search's NCP of a whole-unit interval, its length measured in bigint, equals (as a
    float8, exactly) what the all-numeric formula gives, for every value around the range and
    every level; where the bounds have a fraction or near bigint's end, the numeric formula."""
    from dbanon.setlogic.hierarchies import IntervalHierarchy, _interval_ncp, _whole_bin_low

    h = IntervalHierarchy("x", base, widths, low, high)
    span = high - low
    step = max(int(span) // 5000, 1)
    start, stop = int(low) - int(widths[-1]), min(int(high) + int(widths[-1]), 2**62)
    for level in range(1, len(widths) + 1):
        w = widths[level - 1]
        x = sql.SQL("v")
        lo = sql.SQL("{}::numeric").format(_whole_bin_low(h, x, w))
        numeric = sql.SQL(
            "((least({lo} + {last}, {hi}) - greatest({lo}, {low})) / {span})::float8"
        ).format(lo=lo, last=sql.Literal(w - 1), hi=sql.Literal(high), low=sql.Literal(low),
                 span=sql.Literal(span))  # fmt: skip
        row = conn.execute(
            sql.SQL(
                "SELECT count(*), count(*) FILTER (WHERE {new} IS DISTINCT FROM {old}) "
                "FROM generate_series({a}::int8, {b}::int8, {s}::int8) v"
            ).format(new=_interval_ncp(h, x, level), old=numeric, a=sql.Literal(start),
                     b=sql.Literal(stop), s=sql.Literal(step))  # fmt: skip
        ).fetchone()
        assert row[0] > 100 and row[1] == 0, (level, row)
    whole = _interval_ncp(h, sql.SQL("v"), 1).as_string(conn)
    assert ("::numeric /" in whole) == (low.as_tuple().exponent >= 0 and high < 2**61)
