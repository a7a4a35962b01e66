"""`dbanon check`: equivalence classes with GROUP BY, on any relation, with exit codes."""

from __future__ import annotations

import random
from collections import Counter

import psycopg
import verify
from helpers import cli, cli_json, make_table


def classes_in_memory(rows: list[tuple], qi: list[int]) -> Counter:
    return Counter(tuple(r[i] for i in qi) for r in rows)


def test_check_exit_codes_and_figures(conn: psycopg.Connection, dsn: str) -> None:
    rng = random.Random(7)
    rows = [(rng.randint(20, 24), rng.choice("ab"), rng.choice("xyz")) for _ in range(200)]
    make_table(conn, "s", "t", [("age", "int"), ("zip", "text"), ("dx", "text")], rows)
    classes = classes_in_memory(rows, [0, 1])
    smallest = min(classes.values())

    code, out = cli_json(dsn, "check", "s.t", "--qi", "age,zip", "--k", str(smallest))
    assert code == 0 and out["holds"] is True
    assert out["classes"] == len(classes) and out["min_class_size"] == smallest
    assert out["rows_in_small_classes"] == 0

    k = smallest + 1
    code, out = cli_json(dsn, "check", "s.t", "--qi", "age,zip", "--k", str(k))
    assert code == 1 and out["holds"] is False
    assert out["rows_in_small_classes"] == sum(n for n in classes.values() if n < k)

    distinct = {c: len({r[2] for r in rows if (r[0], r[1]) == c}) for c in classes}
    code, out = cli_json(
        dsn,
        "check",
        "s.t",
        "--qi",
        "age,zip",
        "--k",
        "1",
        "--sensitive",
        "dx",
        "--l",
        str(min(distinct.values())),
    )
    assert code == 0 and out["min_distinct_sensitive"] == min(distinct.values())
    code, _ = cli_json(dsn, "check", "s.t", "--qi", "age,zip", "--sensitive", "dx", "--l", "4")
    assert code == 1


def test_check_works_on_views_and_odd_identifiers(conn: psycopg.Connection, dsn: str) -> None:
    rows = [(i % 3, f"v{i % 2}") for i in range(12)]
    make_table(conn, "Odd Schema", 'Tä"ble', [("Zip Code", "int"), ("sëx", "text")], rows)
    conn.execute('CREATE VIEW "Odd Schema"."A View" AS SELECT * FROM "Odd Schema"."Tä""ble"')
    for rel in ('Odd Schema.Tä"ble', "Odd Schema.A View", '"Odd Schema"."A View"'):
        code, out = cli_json(dsn, "check", rel, "--qi", "Zip Code,sëx", "--k", "2")
        assert code == 0, rel
        assert out["classes"] == 6 and out["min_class_size"] == 2
    code, out = cli_json(dsn, "check", "Odd Schema.A View", "--qi", "Zip Code,sëx", "--k", "3")
    assert code == 1 and out["rows_in_small_classes"] == 12


def test_sql_function_agrees_with_check(conn: psycopg.Connection, dsn: str) -> None:
    """dbanon.k_anonymity() against class sizes counted by the independent verifier, and the
    CLI's figures on the same table; odd column names and a NULL class included."""
    rows = [(i % 5, i % 7 if i % 11 else None) for i in range(100)]
    make_table(conn, "s", "t", [("a", "int"), ('B "x"', "int")], rows)
    cls = verify.fetch(conn, "s.t", ["a", 'B "x"'])
    assert sorted(cls.sizes) == sorted(classes_in_memory(rows, [0, 1]).values())
    for k in (1, 2, 3, 4, 5):
        got = conn.execute(
            "SELECT * FROM dbanon.k_anonymity('s.t', ARRAY['a', 'B \"x\"'], %s)", [k]
        ).fetchone()
        assert got == verify.sql_k_anonymity(cls, k), k
        code, out = cli_json(dsn, "check", "s.t", "--qi", 'a,"B ""x"""', "--k", str(k))
        figures = (out["classes"], out["min_class_size"], out["rows_in_small_classes"])
        assert (code == 0, *figures) == got, k
    # the sweep of k crosses the smallest class: both verdicts are tested
    assert {verify.sql_k_anonymity(cls, k)[0] for k in (1, 2, 3, 4, 5)} == {True, False}


def test_check_errors(conn: psycopg.Connection, dsn: str) -> None:
    make_table(conn, "s", "t", [("a", "int")], [(1,), (2,)])
    for args, message in [
        (["check", "s.nope", "--qi", "a", "--k", "2"], "relation s.nope does not exist"),
        (["check", "s.t", "--qi", "a,b", "--k", "2"], "column b does not exist in s.t"),
        (["check", "s.t", "--qi", "a"], "name at least one model"),
        (["check", "s.t", "--qi", "a", "--l", "2"], "needs a sensitive attribute (--sensitive)"),
    ]:
        result = cli(dsn, *args)
        assert result.exit_code == 2, args
        assert message in result.stderr


def test_worst_class_is_named_on_request(conn: psycopg.Connection, dsn: str) -> None:
    """The check is one pass over the classes and names no class; `--worst` names the class
    furthest from holding (the smallest, ties by the QI values), or nearest to failing when the
    model holds. The text output says how to ask for it when a model fails."""
    rng = random.Random(11)
    rows = [(rng.randint(20, 26), rng.choice("abc")) for _ in range(120)]
    make_table(conn, "w", "t", [("age", "int"), ("zip", "text")], rows)
    classes = classes_in_memory(rows, [0, 1])
    smallest = min(classes.values())
    first = min(c for c, n in classes.items() if n == smallest)
    named = f"age={first[0]}, zip={first[1]}"
    base = ["check", "w.t", "--qi", "age,zip"]
    for k, code in ((smallest + 1, 1), (smallest, 0)):
        got, out = cli_json(dsn, *base, "--k", str(k))
        assert got == code and out["models"][0]["worst_class"] is None
        got, out = cli_json(dsn, *base, "--k", str(k), "--worst")
        assert got == code and out["models"][0]["worst_class"] == named
    text = cli(dsn, *base, "--k", str(smallest + 1)).output
    assert "--worst names the class" in text and "worst class\t-" in text
    assert f"worst class\t{named}" in cli(dsn, *base, "--k", "2", "--worst").output
