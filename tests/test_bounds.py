"""Numbers out of range and columns nothing can be made of: one line, exit 2, nothing written.

Every numeric option of every registered method declares a range (dbanon.methods.base.Option),
checked before anything runs: a value just outside it, nan and inf are refused naming the flag.
The escapes found by the fault review (issue 22 item 9) are replayed through the CLI, each
checked to leave the database as it was.
"""

from __future__ import annotations

import math

import psycopg
import pytest
from helpers import cli, make_table, snapshot

from dbanon.errors import DbanonError
from dbanon.methods import methods
from dbanon.methods.base import Option


def numeric_options() -> list[object]:
    out = []
    for name, method in methods().items():
        for o in method.all_options():
            if o.type in (int, float):
                out.append(pytest.param(o, id=f"{name}-{o.name}"))
    return out


def outside(o: Option) -> list[object]:
    """Values just outside the option's range (and, for a float, nan and both infinities)."""
    values: list[object] = []
    if o.low is not None:
        values.append(o.low if o.low_open else o.low - (1 if o.type is int else 1e-9))
    if o.high is not None:
        values.append(o.high if o.high_open else o.high + 1)
    if o.type is float:
        values += [math.nan, math.inf, -math.inf]
    return values


@pytest.mark.parametrize("option", numeric_options())
def test_every_numeric_option_has_a_range_that_is_checked(option: Option) -> None:
    assert option.low is not None or option.high is not None, f"{option.flag} has no range"
    for value in outside(option):
        with pytest.raises(DbanonError) as e:
            option.coerce(value)
        assert option.flag in str(e.value) and "\n" not in str(e.value)
    if option.default is not None:  # the default is inside its own range
        assert option.coerce(option.default) == option.default


@pytest.fixture
def t(conn: psycopg.Connection) -> psycopg.Connection:
    rows = [
        (i, 20 + i % 37, "NSEW"[i % 4], "FM"[i % 2], ["flu", "gout", "asthma", "angina"][i % 4],
         1 + i % 9, None, "x", None if i % 10 == 0 else "abc"[i % 3])
        for i in range(1, 201)
    ]  # fmt: skip
    make_table(
        conn, "g", "t",
        [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("sex", "text"),
         ("dx", "text"), ("sev", "int"), ("nul", "text"), ("one", "text"), ("part", "text")],
        rows,
    )  # fmt: skip
    conn.commit()
    return conn


SRC = ("--source", "g.t", "--key", "id")
ESCAPES = [
    (("--qi", "age,sev", "--algorithm", "noise", "--size", "nan"), "--size must be a finite"),
    (("--qi", "age,sev", "--algorithm", "noise", "--size", "inf"), "--size must be a finite"),
    (("--qi", "age,sev", "--algorithm", "noise", "--size", "0"), "--size must be in (0, 1]"),
    (("--qi", "age,sev", "--algorithm", "ina", "--beta", "nan"), "--beta must be a finite"),
    (("--qi", "age,sev", "--algorithm", "ina", "--beta", "inf"), "--beta must be a finite"),
    (("--qi", "age,region", "--sensitive", "dx", "--k", "3", "--algorithm", "rfka",
      "--features", "onehot", "--bins", "1000000000"), "--bins 1000000000 is more than"),
    (("--qi", "age,region", "--sensitive", "dx", "--k", "3", "--algorithm", "hamdist",
      "--bins", "38"), "(at most 37, of age)"),
    (("--qi", "age,region", "--sensitive", "dx", "--k", "3", "--algorithm", "rfka",
      "--trees", "1000000000"), "--trees must be in [1, 10000]"),
    (("--qi", "age,region", "--k", "3", "--algorithm", "kmember", "--seed", "-1"),
     "--seed must be in [0, 9223372036854775807]"),
    (("--qi", "age,region", "--k", "3", "--algorithm", "fulldomain", "--max-suppression",
      "nan"), "--max-suppression must be a finite number in [0, 1)"),
    (("--qi", "age,region", "--sensitive", "nul", "--l", "2", "--algorithm", "localanatomy"),
     "sensitive column nul of g.t is NULL in 200 of 200 rows"),
    (("--qi", "age,region", "--sensitive", "nul", "--k", "3", "--l", "2", "--algorithm", "lag"),
     "sensitive column nul of g.t is NULL in 200 of 200 rows"),
    (("--qi", "age,region", "--sensitive", "part", "--k", "3", "--l", "2", "--algorithm",
      "lag"), "sensitive column part of g.t is NULL in 20 of 200 rows"),
    (("--qi", "age,region", "--sensitive", "one", "--l", "2", "--algorithm", "localanatomy"),
     "attribute one is not 2-eligible"),
    (("--qi", "age,region", "--sensitive", "one", "--k", "3", "--l", "2", "--algorithm", "lag"),
     "attribute one is not 2-eligible"),
    (("--qi", "age,region,sex", "--sensitive", "dx", "--l", "2", "--algorithm", "localanatomy",
      "--principle", "dx=t:0.2,dx=t:0.3"), "--principle names dx twice"),
    (("--qi", "age,region,sex", "--sensitive", "dx", "--l", "2", "--algorithm", "localanatomy",
      "--principle", "dx=l:inf"), "'inf' is not finite"),
    (("--qi", "age,region,sex", "--sensitive", "dx", "--l", "2", "--algorithm", "localanatomy",
      "--principle", "dx=l:nan"), "'nan' is not finite"),
    (("--qi", "age,region", "--k", "2", "--wait", "nan"), "not a finite number of seconds"),
    (("--qi", "age,region", "--sensitive", "dx", "--k", "2", "--l", "nan"), "--l must be a"),
]  # fmt: skip


def test_bad_input_escapes_are_one_line_exit_2_nothing_written(
    t: psycopg.Connection, dsn: str
) -> None:
    """Each escape in turn (one database: they all leave it as it was)."""
    before = snapshot(t)
    for args, message in ESCAPES:
        result = cli(dsn, "publish", "r", *SRC, *args)
        assert result.exit_code == 2, (args, result.stdout, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        if "Usage:" not in result.stderr:  # click's own usage errors come with two usage lines
            assert len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
        assert "Traceback" not in result.stderr
        t.rollback()
        assert snapshot(t) == before, args


def test_an_all_null_or_single_valued_sensitive_column_is_one_line(
    t: psycopg.Connection, dsn: str
) -> None:
    """Per registered method (its first gate publish naming a sensitive column), such a column
    is refused in one line (exit 2, nothing written) or published; never a traceback."""
    from test_gate import CASES

    before = snapshot(t)
    for method in methods():
        case = CASES.get(method)
        variants = [a for vs in (case.promises.values() if case else []) for a in vs]
        args = next((a for a in variants if "--sensitive" in a), None)
        if args is None:
            continue
        for column in ("nul", "one"):
            a = list(args)
            a[a.index("--sensitive") + 1] = column
            result = cli(dsn, "publish", "r", *SRC, "--qi", "age,region,sex",
                         "--algorithm", method, *a)  # fmt: skip
            assert result.exit_code in (0, 2), (method, column, result.stderr)
            if result.exit_code == 2:
                assert len(result.stderr.strip().splitlines()) == 1, (method, result.stderr)
                t.rollback()
                assert snapshot(t) == before, (method, column)
            else:  # published: dropped again, and what stays (the schema) is the new "before"
                assert cli(dsn, "drop", "r", "--yes").exit_code == 0
                t.rollback()
                before = snapshot(t)


def test_an_option_out_of_range_on_replace_logs_no_run(t: psycopg.Connection, dsn: str) -> None:
    """Options are checked before a run of an existing release is logged: nothing is written."""
    args = ("publish", "r", *SRC, "--qi", "age,sev", "--algorithm", "noise", "--seed", "1")
    assert cli(dsn, *args).exit_code == 0
    before = snapshot(t)
    for bad in (("--size", "nan"), ("--size", "-1"), ("--seed", "-5")):
        result = cli(dsn, *args[:-2], *bad, "--replace")
        assert result.exit_code == 2 and bad[0] in result.stderr, result.stderr
    t.rollback()
    assert snapshot(t) == before
