"""Anatomy in SQL: l-diversity of the published QIT/ST, checked in Python from the fetched tables.

The checks here never reuse the build's SQL: they recount groups, values and multisets from what
a consumer would read, so a wrong window, modulo or join in the build shows up as a failure.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest
from helpers import cli_json, make_table, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from dbanon.db import catalog
from dbanon.db.catalog import Relation
from dbanon.errors import DbanonError, ModelViolation
from dbanon.lifecycle.resolve import fingerprint
from dbanon.setlogic.anatomy import AnatomyResult, build_anatomy, check_eligible, verify_anatomy

COLUMNS = [("id", "int"), ("age", "int"), ("zip", "text"), ("dx", "text")]
QIT = sql.Identifier("rel", "qit")
ST = sql.Identifier("rel", "st")


def build(
    conn: psycopg.Connection,
    source: Relation,
    qi: Sequence[str],
    sensitive: str,
    l: int,  # noqa: E741
    qit: sql.Identifier = QIT,
    st_: sql.Identifier = ST,
    seed: int = 0,
) -> tuple[AnatomyResult, list[tuple], list[tuple]]:
    """Build into qit/st and fetch both tables in their stored order."""
    cols = catalog.columns(conn, source)
    conn.execute("CREATE SCHEMA IF NOT EXISTS rel")
    result = build_anatomy(
        conn, source, [cols[c] for c in qi], cols[sensitive], l, qit, st_, seed=seed
    )
    qit_rows = conn.execute(sql.SQL("SELECT * FROM {}").format(qit)).fetchall()
    st_rows = conn.execute(sql.SQL("SELECT * FROM {}").format(st_)).fetchall()
    return result, qit_rows, st_rows


def assert_anatomy(
    source_rows: Sequence[tuple],
    qit_rows: list[tuple],
    st_rows: list[tuple],
    l: int,  # noqa: E741
) -> None:
    """Anatomy's promise, recomputed in Python. source_rows are (qi..., sensitive) tuples."""
    groups: dict[int, Counter] = defaultdict(Counter)
    for gid, value, count in st_rows:
        assert count > 0
        groups[gid][value] += count
    for gid, values in groups.items():
        size = sum(values.values())
        assert len(values) >= l, f"group {gid} has {len(values)} distinct values"
        assert max(values.values()) * l <= size, f"group {gid}: confidence above 1/{l}"
    qit_sizes = Counter(row[-1] for row in qit_rows)
    assert qit_sizes == {g: sum(v.values()) for g, v in groups.items()}
    # Nothing lost, nothing invented: the two halves of the source, each as a multiset.
    assert Counter(row[:-1] for row in qit_rows) == Counter(r[:-1] for r in source_rows)
    published = Counter()
    for values in groups.values():
        published.update(values)
    assert published == Counter(r[-1] for r in source_rows)
    # As many groups as any l-diverse bucketization can have.
    assert len(groups) == len(source_rows) // l


# --- the dealing rule, through the SQL build, exhaustively on small tables ---------------------


def partitions(n: int, most: int) -> Iterator[list[int]]:
    """Every multiset of positive value counts summing to n, none above `most`."""
    if n == 0:
        yield []
        return
    for first in range(min(n, most), 0, -1):
        for rest in partitions(n - first, first):
            yield [first, *rest]


def test_every_eligible_table_of_up_to_9_rows_gets_distinct_values_per_group(
    conn: psycopg.Connection,
) -> None:
    """The dealing rule of the module docstring, through the SQL build: every l-eligible
    value-count vector of 2..9 rows, l = 2..6, gets floor(n/l) groups of >= l rows whose values
    are pairwise distinct (so confidence 1/|group| <= 1/l), nothing lost or invented."""
    conn.execute("CREATE SCHEMA rel")
    make_table(conn, "s", "t", COLUMNS, [])
    checked = 0
    for n in range(2, 10):
        for l in range(2, min(6, n) + 1):  # noqa: E741
            for counts in partitions(n, n // l):  # exactly the l-eligible tables
                rows = [(20 + i % 3, "z", f"v{v}") for i, v in
                        enumerate(v for v, c in enumerate(counts) for _ in range(c))]  # fmt: skip
                with conn.transaction(force_rollback=True):
                    conn.execute("TRUNCATE s.t")
                    with conn.cursor().copy("COPY s.t FROM STDIN") as copy:
                        for i, r in enumerate(rows):
                            copy.write_row((i, *r))
                    _, qit_rows, st_rows = build(conn, Relation("s", "t"), ["age", "zip"], "dx", l)
                assert_anatomy(rows, qit_rows, st_rows, l)
                per_group = Counter(g for g, _, _ in st_rows)
                sizes = Counter(r[-1] for r in qit_rows)
                assert all(per_group[g] == sizes[g] for g in sizes), (counts, l)  # all distinct
                checked += 1
    assert checked == 107


# --- the SQL build -------------------------------------------------------------------------------


# Hand-picked worst cases: values at the n/l bound, residues, a single group.
WORST_CASES = [
    ([3, 3, 3, 1], 3),  # n = 10: g = 3, the residual row joins a group without its value
    ([5, 5, 1], 2),  # two values at the n/l bound
    ([2, 2, 2, 1], 3),  # n = 7: g = 2, groups of 4 and 3
    ([1, 1, 1, 1, 1], 3),  # g = 1: one group with every row
    ([4, 4, 4, 4], 4),  # n = 16, every value at the bound, no residue
    ([6, 6, 6, 1, 1, 1, 1], 3),  # n = 22: g = 7, a residue of 1
]


def test_sql_build_on_worst_cases_and_every_eligible_table_of_12_rows(
    conn: psycopg.Connection,
) -> None:
    """The same for every 3- or 4-eligible value-count vector of 12 rows, and the worst cases;
    rows shuffled, QIs random."""
    cases = WORST_CASES + [(c, l) for l in (3, 4) for c in partitions(12, 12 // l)]  # noqa: E741
    assert len(cases) > 40
    rng = random.Random(5)
    for number, (counts, l) in enumerate(cases):  # noqa: E741
        rows = [
            (rng.randint(20, 30), rng.choice("ab"), f"v{v}")
            for v, c in enumerate(counts)
            for _ in range(c)
        ]
        rng.shuffle(rows)
        make_table(conn, "p", f"t{number}", COLUMNS, [(i, *r) for i, r in enumerate(rows)])
        qit, st_ = sql.Identifier("rel", f"q{number}"), sql.Identifier("rel", f"s{number}")
        result, qit_rows, st_rows = build(
            conn, Relation("p", f"t{number}"), ["age", "zip"], "dx", l, qit, st_
        )
        assert_anatomy(rows, qit_rows, st_rows, l)
        assert result == AnatomyResult(
            groups=len(rows) // l, rows=len(rows), residual_rows=len(rows) % l
        )
        verify_anatomy(conn, qit, st_, l)


@st.composite
def eligible_tables(draw: st.DrawFn) -> tuple[int, str, list[tuple[Any, ...]]]:
    """(l, SQL type of the sensitive column, rows (age, zip, value)) of an l-eligible table."""
    l = draw(st.integers(2, 5))  # noqa: E741
    counts = draw(st.lists(st.integers(1, 8), min_size=1, max_size=10))
    top = max(counts)
    while len(counts) < l or top * l > sum(counts):  # pad with new values until eligible
        counts.append(top)
    kind = draw(st.sampled_from(["text", "int"]))
    labels = ["flu", "it's", "Ünïcode", "", "a b", "HIV", "x,y", "1", "10", "2"]
    rows = []
    for value, count in enumerate(counts):
        sa = (labels[value] if value < len(labels) else f"v{value}") if kind == "text" else value
        for _ in range(count):
            rows.append((draw(st.integers(17, 22)), draw(st.sampled_from(["a", "b", "c"])), sa))
    return l, kind, draw(st.permutations(rows))


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=eligible_tables(), seed=st.integers(-(2**40), 2**40))
def test_published_tables_are_l_diverse(
    conn: psycopg.Connection, case: tuple[int, str, list[tuple]], seed: int
) -> None:
    l, kind, rows = case  # noqa: E741
    conn.execute("DROP SCHEMA IF EXISTS s CASCADE; DROP SCHEMA IF EXISTS rel CASCADE")
    columns = [("id", "int"), ("age", "int"), ("zip", "text"), ("dx", kind)]
    make_table(conn, "s", "t", columns, [(i, *r) for i, r in enumerate(rows)])
    result, qit_rows, st_rows = build(conn, Relation("s", "t"), ["age", "zip"], "dx", l, seed=seed)
    assert_anatomy(rows, qit_rows, st_rows, l)
    assert (result.rows, result.groups) == (len(rows), len(rows) // l)
    verify_anatomy(conn, QIT, ST, l)
    # No row key in either table: exactly the promised columns.
    qit_cols = conn.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(QIT)).description
    st_cols = conn.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(ST)).description
    assert [c.name for c in qit_cols] == ["age", "zip", "group_id"]
    assert [c.name for c in st_cols] == ["group_id", "dx", "count"]


def test_order_is_reproducible_and_says_nothing_about_the_source(
    conn: psycopg.Connection,
) -> None:
    """Same content + seed -> same tables, whatever the physical order; QIT rows come in
    group_id order, each group's rows in an order drawn from the seed: never in source order,
    nor in the deal's (which follows the SA values)."""
    rng = random.Random(3)
    rows = [
        (i, 1000 - i, rng.choice("abc"), rng.choice(["flu", "hiv", "cold", "gout"]))
        for i in range(300)
    ]
    make_table(conn, "s", "t", COLUMNS, rows)
    shuffled = rows[:]
    rng.shuffle(shuffled)
    make_table(conn, "s", "copy", COLUMNS, shuffled)
    l = 3  # noqa: E741
    _, qit1, st1 = build(conn, Relation("s", "t"), ["age", "zip"], "dx", l, seed=42)
    _, qit2, st2 = build(
        conn,
        Relation("s", "copy"),
        ["age", "zip"],
        "dx",
        l,
        sql.Identifier("rel", "qit2"),
        sql.Identifier("rel", "st2"),
        seed=42,
    )
    _, qit3, st3 = build(
        conn,
        Relation("s", "t"),
        ["age", "zip"],
        "dx",
        l,
        sql.Identifier("rel", "qit3"),
        sql.Identifier("rel", "st3"),
        seed=43,
    )
    assert qit1 == qit2 and st1 == st2
    assert qit1 != qit3  # another seed deals the rows of each value to other groups
    # ST depends only on the value counts, up to the group ids (a permutation from the seed).
    def contents(st: list) -> list:
        groups = {r[0] for r in st}
        return sorted(tuple(sorted((v, c) for g2, v, c in st if g2 == g)) for g in groups)

    assert contents(st1) == contents(st3)
    dx = {age: value for _, age, _, value in rows}  # ages are distinct: a row's SA value
    for qit_rows in (qit1, qit3):
        assert [r[2] for r in qit_rows] == sorted(r[2] for r in qit_rows)
        assert [r[0] for r in qit_rows] != [r[1] for r in rows]  # ages, source order
        by_group: dict[int, list[str]] = defaultdict(list)
        for age, _, gid in qit_rows:
            by_group[gid].append(dx[age])
        # the deal's order within a group is its SA values' order: not what is written
        assert any(values != sorted(values) for values in by_group.values())
        assert any(values != sorted(values, reverse=True) for values in by_group.values())


@pytest.mark.parametrize(("l", "seed"), [(2, 0), (3, 42), (4, 2**31 + 5)])
def test_same_deal_as_the_textbook_statement(
    conn: psycopg.Connection, l: int, seed: int  # noqa: E741
) -> None:
    """The build deals over the streamed rows what `row_number() OVER (ORDER BY sa, random())`
    modulo floor(n/l) deals in SQL: which values each group holds depends on the value counts
    alone, whatever the draws, so the ST must be the statement's (ids aside), and the QIT
    must hold every row once, in groups of the ST's sizes. Reproducible: built twice with the
    seed, the same tables."""
    rng = random.Random(seed)
    rows = [
        (i, rng.randrange(6), rng.choice(["a", "b", "C", "ä"]), "xyzzw"[i % 5])
        for i in range(240)
    ]  # few distinct rows: many exact ties; 'z' in 2/5 of the rows (2-eligible only)
    if l > 2:
        rows = [(i, a, z, "xyzw"[i % 4]) for i, a, z, _ in rows]  # each value in 1/4
    make_table(conn, "s", "t", COLUMNS, rows)
    _, qit_rows, st_rows = build(conn, Relation("s", "t"), ["age", "zip"], "dx", l, seed=seed)
    dealt = conn.execute(
        sql.SQL(
            """SELECT s, ((row_number() OVER (ORDER BY s COLLATE "C", random()) - 1)
                          % greatest(count(*) OVER () / {l}, 1) + 1)::int AS g
               FROM (SELECT dx AS s FROM s.t) AS d"""
        ).format(l=sql.Literal(l))
    ).fetchall()
    groups = len(rows) // l
    assert sorted({r[-1] for r in qit_rows}) == list(range(1, groups + 1))

    def contents(st: list[tuple]) -> list[tuple]:
        per: dict[int, list] = defaultdict(list)
        for g, v, n in st:
            per[g].append((v, n))
        return sorted(tuple(sorted(values)) for values in per.values())

    cells = Counter((g, v) for v, g in dealt)
    assert contents(st_rows) == contents([(g, v, n) for (g, v), n in cells.items()])
    sizes = Counter()
    for g, _, n in st_rows:
        sizes[g] += n
    assert Counter(r[-1] for r in qit_rows) == sizes
    assert Counter(r[:-1] for r in qit_rows) == Counter((a, z) for _, a, z, _ in rows)
    again = build(conn, Relation("s", "t"), ["age", "zip"], "dx", l, sql.Identifier("rel", "q2"),
                  sql.Identifier("rel", "s2"), seed=seed)  # fmt: skip
    assert (again[1], again[2]) == (qit_rows, st_rows)


@pytest.mark.parametrize(("n", "l"), [(7, 2), (30, 3), (31, 4), (3, 3)])
def test_a_validated_build_counts_as_the_recount(dsn: str, n: int, l: int) -> None:  # noqa: E741
    """With `eligible` (a publish checked this snapshot) the build takes rows and groups from
    the deal instead of recounting them: the same figures as the recount."""
    rows = [(i, i % 5, "z", f"v{i % (l + 1)}") for i in range(n)]  # l-eligible
    with psycopg.connect(dsn) as c:
        make_table(c, "s", "t", COLUMNS, rows)
        c.execute("CREATE SCHEMA IF NOT EXISTS rel")
        cols = catalog.columns(c, Relation("s", "t"))
        args = (c, Relation("s", "t"), [cols["age"]], cols["dx"], l)
        recounted = build_anatomy(*args, QIT, ST, seed=5)
        told = build_anatomy(
            *args, sql.Identifier("rel", "qit2"), sql.Identifier("rel", "st2"), 5, eligible=True
        )
        assert told == recounted == AnatomyResult(n // l, n, n - (n // l) * l)
        c.rollback()


def test_build_never_commits(dsn: str) -> None:
    rows = [(i, i % 5, "z", f"v{i % 4}") for i in range(20)]
    with psycopg.connect(dsn, autocommit=True) as setup:
        make_table(setup, "s", "t", COLUMNS, rows)
        setup.execute("CREATE SCHEMA rel")
    with psycopg.connect(dsn) as conn:
        cols = catalog.columns(conn, Relation("s", "t"))
        build_anatomy(conn, Relation("s", "t"), [cols["age"]], cols["dx"], 2, QIT, ST)
        with psycopg.connect(dsn, autocommit=True) as other:  # not visible before commit
            assert other.execute("SELECT to_regclass('rel.qit')").fetchone()[0] is None
        conn.rollback()
        assert conn.execute("SELECT to_regclass('rel.qit'), to_regclass('rel.st')").fetchone() == (
            None,
            None,
        )
        # The staging table is gone too: only the two published tables are created.
        build_anatomy(conn, Relation("s", "t"), [cols["age"]], cols["dx"], 2, QIT, ST)
        temp = conn.execute(
            "SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()"
        ).fetchone()[0]
        assert temp == 0
        conn.rollback()


def test_odd_identifiers(conn: psycopg.Connection) -> None:
    schema, table = 'Séma "x"', "My Täble"
    columns = [("ID", "int"), ("Age Band", "int"), ('ZIP"code', "text"), ("Diagnose ü", "text")]
    rows = [(i, 20 + i % 4, f"z{i % 3}", ["Flu", "it's", "Grippe ü"][i % 3]) for i in range(30)]
    make_table(conn, schema, table, columns, rows)
    conn.execute('CREATE SCHEMA "Rel eased"')
    qit, st_ = sql.Identifier("Rel eased", 'QIT "1"'), sql.Identifier("Rel eased", "st.x")
    _, qit_rows, st_rows = build(
        conn, Relation(schema, table), ["Age Band", 'ZIP"code'], "Diagnose ü", 3, qit, st_
    )
    assert_anatomy([r[1:] for r in rows], qit_rows, st_rows, 3)
    verify_anatomy(conn, qit, st_, 3)
    st_cols = [c.name for c in conn.execute(sql.SQL("SELECT * FROM {}").format(st_)).description]
    assert st_cols == ["group_id", "Diagnose ü", "count"]


def test_values_of_any_type_are_released_as_they_are(conn: psycopg.Connection) -> None:
    """The QIT holds each QI value as the source has it (streamed and written in binary): the
    same types (typmods, domains, enums, arrays, jsonb, numerics of any scale, timestamptz,
    bytea, NULL), the same values; a type without a binary form (aclitem) as it is too, and a
    sensitive column of any type in the ST."""
    conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
    conn.execute("CREATE DOMAIN small_int AS int CHECK (VALUE < 1000)")
    cols = [("id", "int"), ("n", "numeric(12,4)"), ("v", "varchar(7)"), ("j", "jsonb"),
            ("a", "int[]"), ("t", "timestamptz"), ("b", "bytea"), ("m", "mood"),
            ("d", "small_int"), ("acl", "aclitem"), ("dx", "numeric")]  # fmt: skip
    rng = random.Random(7)
    rows = [(i, None if i % 9 == 0 else f"{rng.randint(-10**6, 10**6)}.{i % 7}",
             rng.choice(["a", "", "ü z", None]), '{"k": [1, "x"]}' if i % 2 else "null",
             "{1,NULL,3}" if i % 3 else "{}", f"2024-0{1 + i % 9}-01 12:00:00+02",
             "\\x00ff" if i % 4 else None, ["sad", "ok", "happy"][i % 3], i % 5,
             "postgres=r/postgres", f"{i % 6}.{'0' * (1 + i % 3)}")
            for i in range(60)]  # fmt: skip
    make_table(conn, "s", "t", cols, rows)
    conn.execute("CREATE SCHEMA IF NOT EXISTS rel")
    names = [c for c, _ in cols[1:-1]]
    source = Relation("s", "t")
    found = catalog.columns(conn, source)
    build_anatomy(conn, source, [found[c] for c in names], found["dx"], 3, QIT, ST, seed=9)
    verify_anatomy(conn, QIT, ST, 3)

    def types(rel: str, columns: list[str]) -> list[str]:
        return [conn.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                             "WHERE attrelid = %s::regclass AND attname = %s",
                             [rel, c]).fetchone()[0] for c in columns]  # fmt: skip

    assert types("rel.qit", names) == types("s.t", names)
    assert types("rel.st", ["dx"]) == types("s.t", ["dx"])
    listed = sql.SQL(", ").join(map(sql.Identifier, names))
    for a, b in (("s.t", "rel.qit"), ("rel.qit", "s.t")):  # the same rows, as multisets
        left, right = (sql.Identifier(*x.split(".")) for x in (a, b))
        assert conn.execute(sql.SQL("SELECT count(*) FROM (SELECT {c}::text FROM {l} EXCEPT ALL "
                                    "SELECT {c}::text FROM {r}) x").format(
            c=sql.SQL("ROW({})").format(listed), l=left, r=right)).fetchone() == (0,)  # fmt: skip
    shown = Counter(v for (v,) in conn.execute("SELECT dx::text FROM rel.st, "
                                               "generate_series(1, count)"))  # fmt: skip
    assert shown == Counter(v for (v,) in conn.execute("SELECT dx::text FROM s.t"))


# --- bad input: a one-line error, and the database as it was -------------------------------------


def flu_table(conn: psycopg.Connection) -> Relation:
    rows = [(i, 20 + i % 50, "z", "flu" if i < 412 else f"other{i % 100}") for i in range(1000)]
    make_table(
        conn,
        "s",
        "t",
        [("id", "int"), ("age", "int"), ("zip", "text"), ("diagnosis", "text")],
        rows,
    )
    conn.execute("CREATE SCHEMA rel")
    return Relation("s", "t")


def test_not_eligible_names_the_value_and_creates_nothing(conn: psycopg.Connection) -> None:
    source = flu_table(conn)
    cols = catalog.columns(conn, source)
    before = snapshot(conn)
    with pytest.raises(DbanonError) as err:
        build_anatomy(conn, source, [cols["age"]], cols["diagnosis"], 3, QIT, ST)
    assert str(err.value) == (
        "not 3-eligible: diagnosis = 'flu' is 41.2 % of 1,000 rows "
        "(at most 33.3 % allowed; 412 rows, limit 333)"
    )
    assert snapshot(conn) == before
    check_eligible(conn, source, cols["diagnosis"], 2)  # 41.2 % <= 50 %: 2-eligible
    _, qit_rows, st_rows = build(conn, source, ["age"], "diagnosis", 2)
    src = conn.execute("SELECT age, diagnosis FROM s.t").fetchall()
    assert_anatomy(src, qit_rows, st_rows, 2)


BAD_INPUT = [
    ("", ["age"], "dx", 1, "l must be at least 2, got 1"),
    (
        "",
        ["age"],
        "dx",
        5,
        "not 5-eligible: dx has only 4 distinct values in s.t, fewer than l = 5",
    ),
    (
        "UPDATE s.t SET dx = NULL WHERE id < 3",
        ["age"],
        "dx",
        2,
        "sensitive column dx of s.t is NULL in 3 of 40 rows; fill or filter them first",
    ),
    ("DELETE FROM s.t", ["age"], "dx", 2, "s.t has no rows: there is nothing to publish"),
    ("", ["age", "dx"], "dx", 2, "column dx is both a quasi-identifier and sensitive"),
    ("", ["age", "age"], "dx", 2, "quasi-identifier age is named twice"),
    (
        "ALTER TABLE s.t RENAME zip TO group_id",
        ["age", "group_id"],
        "dx",
        2,
        "column group_id of s.t clashes with the group_id column",
    ),
    (
        "ALTER TABLE s.t RENAME dx TO count",
        ["age"],
        "count",
        2,
        "column count of s.t clashes with the count column",
    ),
    ("CREATE TABLE rel.st ()", ["age"], "dx", 2, "rel.st already exists"),
]


def test_bad_input(conn: psycopg.Connection) -> None:
    make_table(conn, "s", "t", COLUMNS, [(i, i % 7, "z", f"v{i % 4}") for i in range(40)])
    conn.execute("CREATE SCHEMA rel")
    for setup, qi, sensitive, l, message in BAD_INPUT:  # noqa: E741
        with conn.transaction(force_rollback=True):  # each case from the same starting point
            if setup:
                conn.execute(setup)
            cols = catalog.columns(conn, Relation("s", "t"))
            before = snapshot(conn)
            with pytest.raises(DbanonError) as err:
                build_anatomy(
                    conn, Relation("s", "t"), [cols[c] for c in qi], cols[sensitive], l, QIT, ST
                )
            assert str(err.value).startswith(message), (str(err.value), message)
            assert "\n" not in str(err.value)
            assert snapshot(conn) == before


# --- the independent check catches broken tables -------------------------------------------------


TAMPERING = [
    (None, 4, "are not 4-diverse"),
    # a group's two values made one: that value is now 2 of its 3 rows
    (
        """UPDATE rel.st SET dx = (SELECT min(dx) FROM rel.st WHERE group_id = 1)
            WHERE group_id = 1 AND dx = (SELECT max(dx) FROM rel.st WHERE group_id = 1)""",
        3,
        "are not 3-diverse",
    ),
    # three distinct values, but one of them in 3 of 5 rows: confidence 60 % > 1/3
    (
        """UPDATE rel.st SET count = 3 WHERE group_id = 1
            AND dx = (SELECT min(dx) FROM rel.st WHERE group_id = 1)""",
        3,
        "are not 3-diverse: 1 of 10 groups fail; group 1 has 5 rows with 3 distinct values, "
        r"the most frequent in 3 \(60.0 % > 33.3 %\)",
    ),
    # one row moved to another group in QIT: the sizes no longer match ST
    (
        """UPDATE rel.qit SET group_id = 2 WHERE ctid =
            (SELECT min(ctid) FROM rel.qit WHERE group_id = 1)""",
        3,
        "disagree on 2 groups",
    ),
    # every count of a group raised: still 3-diverse on paper, but ST misstates its size
    ("UPDATE rel.st SET count = count + 1 WHERE group_id = 1", 3, "disagree on 1 groups"),
    ("UPDATE rel.st SET count = 0 WHERE group_id = 1", 3, "3 ST rows have a NULL"),
    ("INSERT INTO rel.qit (age, zip, group_id) VALUES (1, 'z', NULL)", 3, "disagree on 1"),
]


def test_verify_catches_broken_tables(conn: psycopg.Connection) -> None:
    rows = [(i, i % 9, "z", f"v{i % 5}") for i in range(30)]
    make_table(conn, "s", "t", COLUMNS, rows)
    build(conn, Relation("s", "t"), ["age", "zip"], "dx", 3)
    seen = verify_anatomy(conn, QIT, ST, 3)  # what it read of QIT: the release's figures
    assert (seen.rows, seen.groups, seen.smallest, seen.largest) == (30, 10, 3, 3)
    for tamper, l, message in TAMPERING:  # noqa: E741
        with conn.transaction(force_rollback=True):
            if tamper:
                conn.execute(tamper)
            with pytest.raises(ModelViolation, match=message):
                verify_anatomy(conn, QIT, ST, l)
    verify_anatomy(conn, QIT, ST, 3)  # every tampering was rolled back


@pytest.mark.parametrize(
    ("age_type", "ages"),
    [
        ("int", [0, 1, 2, 3]),  # equal bytes, equal values: DM from the streamed codes
        ("numeric", ["1.0", "1.00", "2", "2.0"]),  # equal numbers, other bytes: DM in SQL
        ("real", ["0", "-0", "1.5", "2"]),
    ],
)
def test_a_publish_records_the_releases_own_figures(
    dsn: str, conn: psycopg.Connection, age_type: str, ages: list[Any]
) -> None:
    """DM counted by the build or on the source beside it, the class figures taken from the
    QIT/ST check and the fingerprint from the run's snapshot: each equal to the same figure
    counted on what was released (or on the source) after the run."""
    rows = [(i, ages[i % 4], f"z{i % 3}", f"v{i % 5}") for i in range(41)]  # unequal QI points
    make_table(conn, "s", "t", [("id", "int"), ("age", age_type), ("zip", "text"),
                                ("dx", "text")], rows)  # fmt: skip
    code, out = cli_json(dsn, "publish", "a", "--source", "s.t", "--key", "id", "--qi",
                         "age,zip", "--sensitive", "dx", "--algorithm", "anatomy", "--l", "3",
                         "--target", "rel.a")  # fmt: skip
    assert code == 0, out
    code, report = cli_json(dsn, "report", "a")
    dm, classes, largest, smallest = conn.execute(
        "SELECT sum(n * n), count(*), max(n), min(n) FROM (SELECT count(*) AS n FROM rel.a_qit "
        "GROUP BY age, zip) c"
    ).fetchone()
    assert report["method_metrics"]["dm"] == dm != 41
    qit = conn.execute(
        "SELECT count(*), max(n), min(n) FROM (SELECT count(*) AS n FROM rel.a_qit "
        "GROUP BY group_id) g"
    ).fetchone()
    seen = report["released_classes"]
    assert (report["classes"], seen["max_size"], seen["min_size"]) == qit
    assert report["source_fingerprint"] == fingerprint(conn, Relation("s", "t"))


def test_equal_as_bytes_names_the_types_whose_bytes_are_their_equality(
    conn: psycopg.Connection,
) -> None:
    """Integers, dates and text under a deterministic collation: equal bytes, equal values.
    Not numeric (1.0 = 1.00), floats (0 = -0), bpchar (trailing blanks), a domain, or text
    under a collation that is not deterministic."""
    from dbanon.db.rows import equal_as_bytes

    conn.execute("DROP SCHEMA IF EXISTS s CASCADE")
    conn.execute("CREATE SCHEMA s")
    conn.execute("CREATE DOMAIN s.d AS int")
    try:  # a server built without ICU has no collation that is not deterministic
        with conn.transaction():
            conn.execute("CREATE COLLATION s.ci (provider = icu, locale = 'und-u-ks-level2', "
                         "deterministic = false)")  # fmt: skip
        nondeterministic = True
    except psycopg.errors.FeatureNotSupported:
        nondeterministic = False
    conn.execute(
        "CREATE TABLE s.t (i int, b bigint, d date, ts timestamptz, t text, v varchar(9), "
        "n numeric, f float8, c char(3), dom s.d"
        + (", ci text COLLATE s.ci" if nondeterministic else "") + ")"
    )
    rel = Relation("s", "t")
    cols = catalog.columns(conn, rel)
    assert equal_as_bytes(conn, rel, [cols[n] for n in ("i", "b", "d", "ts", "t", "v")])
    for bad in ("n", "f", "c", "dom", *(["ci"] if nondeterministic else [])):
        assert not equal_as_bytes(conn, rel, [cols["i"], cols[bad]]), bad


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(rows=st.lists(st.tuples(st.sampled_from([None, 0, 1, 2**40]),
                               st.sampled_from([None, "", "a", "A", "b"]),
                               st.integers(0, 3000)), max_size=60))  # fmt: skip
def test_dm_of_codes_is_the_group_bys(conn: psycopg.Connection, rows: list[tuple]) -> None:
    """DM from per-column codes (NULL one value) equals a GROUP BY's, also when the codes'
    mixed radix must be renumbered (many wide columns)."""
    import numpy as np

    from dbanon.metrics.exposure import discernibility, discernibility_of_codes

    conn.execute("DROP SCHEMA IF EXISTS s CASCADE")
    make_table(conn, "s", "t", [("x", "bigint"), ("y", "text"), ("z", "int")], rows)
    codes = []
    for j in range(3):
        seen: dict[Any, int] = {}
        codes.append(np.array([seen.setdefault(r[j], len(seen)) for r in rows], dtype=np.int32))
    wide = [np.array([r[2] for r in rows], dtype=np.int64) * 1_000_000 for _ in range(4)]
    got = discernibility_of_codes(codes + wide)
    assert got == discernibility(conn, sql.Identifier("s", "t"), ["x", "y", "z"])
