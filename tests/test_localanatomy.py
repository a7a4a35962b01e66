"""Local anatomy (thesis ch. 4) end to end: the toy Table 4.1 gives a release with the
properties of Table 4.4, every release passes the independent checks (tests/verify_local.py),
the row id is no key, and bad input is refused in one line with nothing written."""

from __future__ import annotations

import random
from typing import Any

import psycopg
import pytest
import verify_local
from helpers import cli, cli_json, make_table, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from test_publish import rank_correlation

# Table 4.1 (Mark 1001 ... Tina 1008): (id, name, age, gender, occupation, disease) and flags.
T41 = [
    (1001, "Mark", 26, "Male", "Lawyer", "Pneumonia"),
    (1002, "Dave", 35, "Male", "Police", "Dyspepsia"),
    (1003, "Ella", 16, "Female", "Student", "Flu"),
    (1004, "Daphne", 24, "Female", "Guider", "Bronchitis"),
    (1005, "Sarah", 31, "Female", "Lawyer", "Hepatitis"),
    (1006, "Neil", 22, "Male", "Typist", "Dyspepsia"),
    (1007, "Dean", 29, "Male", "Guard", "Bronchitis"),
    (1008, "Tina", 34, "Female", "Scientist", "Gastritis"),
]
T41_FLAGS = {"age": {1004, 1005, 1007, 1008}, "occupation": {1001, 1002, 1007, 1008}}
QI = ["age", "gender", "occupation"]


def load_t41(conn: psycopg.Connection) -> list[dict[str, Any]]:
    make_table(
        conn, "toy", "t41",
        [("id", "int PRIMARY KEY"), ("name", "text"), ("age", "int"), ("gender", "text"),
         ("occupation", "text"), ("disease", "text")],
        T41,
    )  # fmt: skip
    make_table(conn, "toy", "t41_flags", [("id", "int"), ("column_name", "text")],
               [(i, c) for c, ids in T41_FLAGS.items() for i in sorted(ids)])  # fmt: skip
    conn.commit()
    cols = ["id", "name", "age", "gender", "occupation", "disease"]
    return [dict(zip(cols, r, strict=True)) for r in T41]


def la_args(name: str, *extra: str) -> list[str]:
    return ["publish", name, "--source", "toy.t41", "--key", "id", "--qi", ",".join(QI),
            "--sensitive", "disease", "--algorithm", "localanatomy", "--flags", "toy.t41_flags",
            *extra]  # fmt: skip


def flagged_t41() -> dict[str, set]:
    return {**T41_FLAGS, "disease": {r[0] for r in T41}}


@pytest.mark.parametrize("heuristic", [False, True])
def test_table_4_1_gives_table_4_4(conn: psycopg.Connection, dsn: str, heuristic: bool) -> None:
    """l=4: one age bucket {24, 29, 31, 34} (Daphne, Sarah, Dean, Tina), one occupation bucket
    {Guard, Lawyer, Police, Scientist} (Mark, Dave, Dean, Tina), two disease buckets of four
    distinct values; every other cell raw."""
    source = load_t41(conn)
    extra = ("--heuristic",) if heuristic else ()
    code, out = cli_json(dsn, *la_args("t44", "--l", "4", "--seed", "7", *extra))
    assert code == 0, out
    assert out["objects"] == ["released.t44", "released.t44_age_idt", "released.t44_age_st",
                              "released.t44_occupation_idt", "released.t44_occupation_st",
                              "released.t44_disease_idt", "released.t44_disease_st"]  # fmt: skip
    verify_local.verify_release(
        conn, "released", "t44", QI, dict.fromkeys(["age", "occupation", "disease"], ("l", 4)),
        source, flagged_t41(),
    )  # fmt: skip
    age = verify_local.buckets(conn, "released", "t44_age_st", "age")
    assert list(map(sorted, age.values())) == [[24, 29, 31, 34]]
    occ = verify_local.buckets(conn, "released", "t44_occupation_st", "occupation")
    assert list(map(sorted, occ.values())) == [["Guard", "Lawyer", "Police", "Scientist"]]
    dis = verify_local.buckets(conn, "released", "t44_disease_st", "disease")
    assert sorted(sum(c.values()) for c in dis.values()) == [4, 4]
    # Raw cells: Table 4.4 shows every unflagged value as it is, in its row.
    cols, main = verify_local.rows(conn, "released", "t44")
    assert cols == ["row_id", *QI]
    shown = sorted((tuple(r[1:]) for r in main), key=repr)
    expected = sorted(
        (tuple(None if r[0] in T41_FLAGS.get(c, ()) else r[2 + i] for i, c in enumerate(QI))
         for r in T41), key=repr,
    )  # fmt: skip
    assert shown == expected


def test_row_id_is_not_the_key(conn: psycopg.Connection, dsn: str) -> None:
    """A fresh random row id per release: not the key, not in key order (rank correlation near
    0 on 300 linkable rows), different between two releases of the same source, and the rows
    not stored in row id order. Ages are unique, so an unflagged age links a row id to its key."""
    rng = random.Random(5)
    n = 400
    ages = rng.sample(range(1000, 5000), n)
    make_table(conn, "s", "people", [("id", "int PRIMARY KEY"), ("age", "int"), ("dx", "text")],
               [(i, ages[i - 1], f"d{i % 9}") for i in range(1, n + 1)])  # fmt: skip
    make_table(conn, "s", "flags", [("id", "int"), ("column_name", "text")],
               [(i, "age") for i in range(1, n + 1, 4)])  # fmt: skip
    conn.commit()
    key_of = {a: i for i, a in enumerate(ages, start=1)}
    linked = {}
    for name in ("r1", "r2"):  # the same --seed: the same buckets, yet fresh row ids
        code, out = cli_json(dsn, "publish", name, "--source", "s.people", "--key", "id", "--qi",
                             "age", "--sensitive", "dx", "--algorithm", "localanatomy", "--l",
                             "5", "--flags", "s.flags", "--seed", "4")  # fmt: skip
        assert code == 0, out
        got = conn.execute(
            psycopg.sql.SQL("SELECT row_id, age FROM {}").format(
                psycopg.sql.Identifier("released", name)
            )
        ).fetchall()
        assert [r for r, _ in got] != sorted(r for r, _ in got), "rows stored in row_id order"
        linked[name] = {key_of[a]: rid for rid, a in got if a is not None}
    pairs = sorted(linked["r1"].items())
    assert len(pairs) == 300
    assert sum(rid == key for key, rid in pairs) < 10, "row_id is the key"
    rho = rank_correlation([k for k, _ in pairs], [r for _, r in pairs])
    assert abs(rho) < 0.2, rho
    same = sum(linked["r2"][key] == rid for key, rid in pairs)
    assert same < 10, "row ids repeat between releases"
    # Each IDT is stored in (bucket, row id) order: its bucket sizes come sorted for the l
    # check's merge, and within a bucket the order is the row ids' (a fresh permutation); each
    # ST in (bucket, value) order (a text column's values: dx; a number's: age).
    for attr in ("age", "dx"):
        stored = conn.execute(psycopg.sql.SQL("SELECT bucket_id, row_id FROM {}").format(
            psycopg.sql.Identifier("released", f"r1_{attr}_idt"))).fetchall()  # fmt: skip
        assert len(stored) >= 100 and stored == sorted(stored), attr
        # and each ST in (bucket, value) order
        stored = conn.execute(psycopg.sql.SQL("SELECT bucket_id, {} FROM {}").format(
            psycopg.sql.Identifier(attr), psycopg.sql.Identifier("released", f"r1_{attr}_st")
        )).fetchall()  # fmt: skip
        assert len(stored) >= 100 and stored == sorted(stored), attr


def fresh_tables(
    conn: psycopg.Connection, columns: list[tuple[str, str]], rows: list[tuple],
    flags: dict[str, set],
) -> None:  # fmt: skip
    """p.t (the rows) and p.f (their flags), with no release left from an earlier example."""
    conn.execute("DROP SCHEMA IF EXISTS p CASCADE")
    conn.execute("DROP SCHEMA IF EXISTS released CASCADE")
    conn.execute("DELETE FROM dbanon.release")
    make_table(conn, "p", "t", columns, rows)
    make_table(conn, "p", "f", [("id", "int"), ("column_name", "text")],
               [(i, c) for c, ids in flags.items() for i in ids])  # fmt: skip
    conn.commit()


@given(
    n=st.integers(12, 60), density=st.floats(0.1, 0.6), l_=st.integers(2, 4),
    heuristic=st.booleans(), seed=st.integers(0, 10**6),
)  # fmt: skip
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_random_tables_and_flags(
    dsn: str, n: int, density: float, l_: int, heuristic: bool, seed: int
) -> None:
    """Random tables with random flags: every release passes the independent checks, or is
    refused in one line (exit 2) naming an attribute that cannot be l-eligible."""
    rng = random.Random(seed)
    rows = [(i, rng.randint(1, 12), rng.choice("abcdef"), f"v{rng.randint(0, 7)}")
            for i in range(1, n + 1)]  # fmt: skip
    flags = {c: {r[0] for r in rows if rng.random() < density} for c in ("a", "b")}
    with psycopg.connect(dsn) as conn:
        fresh_tables(conn, [("id", "int"), ("a", "int"), ("b", "text"), ("s", "text")], rows,
                     flags)  # fmt: skip
        extra = ["--heuristic"] if heuristic else []
        result = cli(dsn, "publish", "r", "--source", "p.t", "--key", "id", "--qi", "a,b",
                     "--sensitive", "s", "--algorithm", "localanatomy", "--l", str(l_), "--flags",
                     "p.f", "--seed", str(seed), *extra)  # fmt: skip
        if result.exit_code == 2:
            assert "cannot publish" in result.stderr and "eligible" in result.stderr or (
                "fewer than l" in result.stderr), result.stderr
            assert len(result.stderr.strip().splitlines()) == 1
            return
        assert result.exit_code == 0, result.stderr
        source = [dict(zip(["id", "a", "b", "s"], r, strict=True)) for r in rows]
        attrs = {c: ("l", l_) for c in ("a", "b") if flags[c]}
        verify_local.verify_release(conn, "released", "r", ["a", "b"], {**attrs, "s": ("l", l_)},
                                    source, {**flags, "s": {r[0] for r in rows}})  # fmt: skip


def test_t_principle_for_a_binary_attribute(conn: psycopg.Connection, dsn: str) -> None:
    """--principle gender=t:0.2: gender's buckets keep the shares within 0.2 (independent EMD),
    the other attributes stay l-diverse."""
    rng = random.Random(3)
    rows = [(i, rng.randint(20, 70), rng.choice(["F", "M", "M"]), f"d{i % 7}")
            for i in range(1, 201)]  # fmt: skip
    make_table(conn, "s", "p", [("id", "int"), ("age", "int"), ("gender", "text"),
                                ("dx", "text")], rows)  # fmt: skip
    flags = {"gender": {r[0] for r in rows if r[0] % 3 == 0},
             "age": {r[0] for r in rows if r[0] % 5 == 0}}  # fmt: skip
    make_table(conn, "s", "f", [("id", "int"), ("column_name", "text")],
               [(i, c) for c, ids in flags.items() for i in ids])  # fmt: skip
    conn.commit()
    code, out = cli_json(dsn, "publish", "r", "--source", "s.p", "--key", "id", "--qi",
                         "age,gender", "--sensitive", "dx", "--algorithm", "localanatomy", "--l",
                         "5", "--flags", "s.f", "--principle", "gender=t:0.2")  # fmt: skip
    assert code == 0, out
    source = [dict(zip(["id", "age", "gender", "dx"], r, strict=True)) for r in rows]
    verify_local.verify_release(
        conn, "released", "r", ["age", "gender"],
        {"age": ("l", 5), "gender": ("t", 0.2), "dx": ("l", 5)}, source,
        {**flags, "dx": {r[0] for r in rows}},
    )  # fmt: skip
    sizes = [sum(c.values()) for c in
             verify_local.buckets(conn, "released", "r_gender_st", "gender").values()]
    assert len(sizes) > 5, sizes  # buckets, not one pile


@pytest.mark.parametrize(
    ("flags_rows", "extra", "message"),
    [
        ([(1001, "age"), (999, "age"), (998, "gender")], (),
         "names 2 keys that toy.t41 lacks, in 2 flag rows: '998', '999'"),
        ([(1001, "age"), (1002, "salary"), (1003, "name")], (),
         "names 2 columns that are not quasi-identifiers (--qi) of toy.t41 in 2 rows: "
         "'name', 'salary'"),
        ([(i, "gender") for i in (1001, 1002, 1006, 1007, 1003)], (),
         "value 'Male' is flagged in 4 of 5 rows"),
        ([(1001, "age")], ("--l", "1"), "l must be above 1"),
    ],
)
def test_bad_input_is_refused_in_one_line(
    conn: psycopg.Connection, dsn: str, flags_rows: list[tuple[int, str]], extra: tuple[str, ...],
    message: str,
) -> None:  # fmt: skip
    load_t41(conn)
    make_table(conn, "toy", "bad_flags", [("id", "int"), ("column_name", "text")], flags_rows)
    conn.commit()
    args = la_args("bad", *(extra or ("--l", "2")))
    args[args.index("toy.t41_flags")] = "toy.bad_flags"
    refused_in_one_line(conn, dsn, args, message)


def refused_in_one_line(
    conn: psycopg.Connection, dsn: str, args: list[str], message: str
) -> None:
    """`dbanon ARGS` exits 2 with one line holding `message`; nothing but the run trail
    changed."""
    before = snapshot(conn)
    result = cli(dsn, *args)
    assert result.exit_code == 2, result.stdout
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    after = snapshot(conn)
    assert {k: v for k, v in after["relations"].items() if k != "dbanon.run"} == {
        k: v for k, v in before["relations"].items() if k != "dbanon.run"
    }


def test_dbanon_check_release_reruns_the_per_attribute_checks(
    conn: psycopg.Connection, dsn: str
) -> None:
    """`dbanon check NAME --release` runs the checks the publish ran on the relations as they
    are now: a value made to repeat inside an age bucket is caught, naming the attribute."""
    load_t41(conn)
    code, out = cli_json(dsn, *la_args("t44", "--l", "4"))
    assert code == 0, out
    code, checked = cli_json(dsn, "check", "t44", "--release")
    assert code == 0 and checked["holds"], checked
    assert len(checked["models"]) == 3  # age, occupation, disease
    conn.execute("UPDATE released.t44_age_st SET age = (SELECT min(age) FROM released.t44_age_st)")
    conn.commit()
    code, checked = cli_json(dsn, "check", "t44", "--release")
    assert code == 1 and not checked["holds"]
    failing = [m for m in checked["models"] if not m["holds"]]
    assert len(failing) == 1 and failing[0]["worst_class"].startswith("age bucket"), failing
    result = cli(dsn, "check", "released.t44")
    assert result.exit_code == 2 and "--qi" in result.stderr


def test_release_checks_catch_a_shown_flagged_value_and_an_unreleased_row_id(
    conn: psycopg.Connection, dsn: str
) -> None:
    """NAME showing a flagged age again, then NAME losing a row the age IDT names (and the
    disease IDT, which holds every row), then an age IDT row moved to a bucket the ST lacks,
    then an age IDT row given another row's id: each is caught by `dbanon check --release`,
    naming what is wrong."""
    load_t41(conn)
    code, out = cli_json(dsn, *la_args("t46", "--l", "4"))
    assert code == 0, out
    flagged = "(SELECT min(row_id) FROM released.t46_age_idt)"
    for change, found, attrs in (
        (f"UPDATE released.t46 SET age = 30 WHERE row_id = {flagged}", "show a flagged value",
         {"age"}),
        (f"DELETE FROM released.t46 WHERE row_id = {flagged}", "1 row ids not released",
         {"age", "disease"}),
        ("UPDATE released.t46_age_idt SET bucket_id = 99 WHERE row_id = (SELECT max(row_id) "
         "FROM released.t46_age_idt)", "2 buckets differ in size", {"age"}),
        ("UPDATE released.t46_age_idt SET row_id = (SELECT min(row_id) FROM "
         "released.t46_age_idt) WHERE row_id = (SELECT max(row_id) FROM released.t46_age_idt)",
         "1 row ids twice", {"age"}),
    ):  # fmt: skip
        conn.execute(change)
        conn.commit()
        code, checked = cli_json(dsn, "check", "t46", "--release")
        failing = {m["worst_class"].partition(":")[0]: m["worst_class"]
                   for m in checked["models"] if not m["holds"]}  # fmt: skip
        assert code == 1 and set(failing) >= attrs, checked
        assert all(found in failing[a] for a in attrs), failing


def test_refresh_follows_changed_consent(conn: psycopg.Connection, dsn: str) -> None:
    """The flags relation is read at every run: once nobody flags occupation any more and
    gender is flagged instead, a refresh publishes gender's IDT/ST and drops occupation's."""
    source = load_t41(conn)
    code, out = cli_json(dsn, *la_args("t44", "--l", "2", "--seed", "1"))
    assert code == 0, out
    conn.execute("DELETE FROM toy.t41_flags WHERE column_name = 'occupation'")
    conn.execute("INSERT INTO toy.t41_flags VALUES (1001, 'gender'), (1003, 'gender'), "
                 "(1006, 'gender'), (1008, 'gender')")  # fmt: skip
    conn.commit()
    code, out = cli_json(dsn, "refresh", "t44")
    assert code == 0, out
    names = {r[0] for r in conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = 'released'::regnamespace "
        "AND relkind = 'v'")}  # fmt: skip
    assert names == {"t44", "t44_age_idt", "t44_age_st", "t44_gender_idt", "t44_gender_st",
                     "t44_disease_idt", "t44_disease_st"}  # fmt: skip
    flagged = {"age": T41_FLAGS["age"], "gender": {1001, 1003, 1006, 1008},
               "disease": {r[0] for r in T41}}  # fmt: skip
    verify_local.verify_release(conn, "released", "t44", QI,
                                dict.fromkeys(flagged, ("l", 2)), source, flagged)  # fmt: skip


@pytest.mark.parametrize("a_type", ["int", "numeric"])
def test_released_classes_are_the_group_bys(
    conn: psycopg.Connection, dsn: str, a_type: str
) -> None:
    """The classes a publish reports (NAME over its QIs, flagged cells NULL) are those a
    GROUP BY of NAME counts: from the build's codes (integers and text), or counted in SQL
    (numeric: equal numbers, other bytes)."""
    rows = [(i, i % 3 + 1, "ab"[i // 3 % 2], f"v{i % 8}") for i in range(1, 61)]
    flags = {"a": {i for i in range(1, 61) if i % 4 == 0},  # each value as often flagged
             "b": {i for i in range(1, 61) if i % 5 == 0}}  # fmt: skip
    fresh_tables(conn, [("id", "int"), ("a", a_type), ("b", "text"), ("s", "text")], rows,
                 flags)  # fmt: skip
    code, out = cli_json(dsn, "publish", "r", "--source", "p.t", "--key", "id", "--qi", "a,b",
                         "--sensitive", "s", "--algorithm", "localanatomy", "--l", "2",
                         "--flags", "p.f", "--seed", "1")  # fmt: skip
    assert code == 0, out
    schema, table = out["table"].split(".")
    got = conn.execute(sql.SQL(
        "SELECT count(*), min(n), max(n), sum(n) FROM (SELECT count(*) AS n FROM {} "
        "GROUP BY a, b) c").format(sql.Identifier(schema, table))
    ).fetchone()  # fmt: skip
    code, report = cli_json(dsn, "report", "r")
    seen = report["released_classes"]
    assert (out["classes"], out["min_class_size"], seen["max_size"], out["rows"]) == got
    assert got[0] < got[3]  # classes of more than one row: the counting is tested


def test_data_makes_each_rows_place_in_the_value_order_on_every_read() -> None:
    """A column streamed as values is held as its codes and each value's place (bytes'
    order, NULL last); every read gives the rows' places, a fresh array each time."""
    import numpy as np

    from dbanon.db.stream import Values
    from dbanon.methods.localanatomy import Data, value_order

    raw = b"pearapple"
    v = Values(np.array([0, 1, 2, 1, 0], np.int32), np.array([0, 4, 9], np.int64),
               np.array([4, 5, -1], np.int32), np.frombuffer(raw, np.uint8))  # fmt: skip
    places, names = value_order(v)
    assert names == ["apple", "pear", None]
    data = Data()
    data.hold("n", np.array([1.5, 2.0, 0.0, 3.0, 1.0]))
    data.place("fruit", places, v.codes)
    assert list(data) == ["n", "fruit"] and len(data) == 2
    assert data["fruit"].tolist() == [1, 0, 2, 0, 1]
    first = data["fruit"]
    first[:] = 9  # a reader's own copy: the next read is untouched
    assert data["fruit"].tolist() == [1, 0, 2, 0, 1]
    assert data["n"].tolist() == [1.5, 2.0, 0.0, 3.0, 1.0]
