"""`report` says what it counts: released classes and the method's own groups, apart.

Released classes are rows with equal released quasi-identifiers: here counted by an independent
GROUP BY over the released relation (plain SQL), for every registered method, published as the
gate tests publish it (tests/test_gate.py CASES, OWN_CHECKS). An Anatomy QIT shows its QIs as
they are: the class an adversary narrows a person down to is the QIT group, counted so.
Internal groups are what a grouping method formed: unless the method blanks cells row by row
(LAG), each released class is a union of them, so the release has no more classes than groups
and its largest class is at least the largest group.
"""

from __future__ import annotations

import psycopg
import pytest
from helpers import cli, cli_json, make_table
from psycopg import sql
from test_gate import CASES, OWN_CHECKS, publish_args, sensitive_of, ward  # noqa: F401

from dbanon.methods import methods

# Methods whose released relation does not group rows by its QI columns as shown.
CLASS_KEY = {"anatomy": ("group_id",)}
# Methods that blank some cells of a row (LAG's flagged cells): a group can then be released as
# several classes, and a class need not be a union of groups.
MASKS_CELLS = {"lag"}


def cases() -> list[object]:
    out = []
    for name in methods():
        case = CASES.get(name)
        if name in OWN_CHECKS:
            args: tuple[str, ...] | None = OWN_CHECKS[name]
        elif case is not None and case.promises:
            args = next(iter(case.promises.values()))[0]
        else:
            args = None
        out.append(pytest.param(name, args, id=name))
    return out


def columns(conn: psycopg.Connection, relation: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum", [relation]
    ).fetchall()]  # fmt: skip


def group_by(conn: psycopg.Connection, relation: str, cols: list[str]) -> dict[str, float]:
    """Count, min, max and average size of the classes of `relation` over `cols`."""
    n, count, smallest, largest = conn.execute(
        sql.SQL(
            "SELECT sum(n), count(*), min(n), max(n) FROM (SELECT count(*) AS n FROM {} "
            "GROUP BY {}) c"
        ).format(
            sql.Identifier(*relation.split(".")),
            sql.SQL(", ").join(sql.Identifier(c) for c in cols),
        )
    ).fetchone()
    return {"count": count, "min_size": smallest, "max_size": largest, "avg_size": int(n) / count}


@pytest.mark.parametrize(("method", "args"), cases())
def test_released_classes_are_a_group_by_over_the_release(
    conn: psycopg.Connection, dsn: str, ward: list[tuple], method: str,  # noqa: F811
    args: tuple[str, ...] | None,
) -> None:  # fmt: skip
    assert args is not None, f"method {method} has no publish arguments in test_gate.CASES"
    publish = publish_args(method, "r", args)
    if method in OWN_CHECKS:  # perturbing methods: numeric columns, as test_gate publishes them
        publish[publish.index("--qi") + 1] = "age,severity"
    code, out = cli_json(dsn, *publish)
    assert code == 0, out
    code, rep = cli_json(dsn, "report", "r")
    assert code == 0, rep
    released, groups = rep["released_classes"], rep["internal_groups"]
    human = cli(dsn, "report", "r").stdout
    if method in OWN_CHECKS:  # perturbed values: no classes to count
        assert released is None and rep["classes"] is None, rep
        return

    first = out["objects"][0]
    shown = columns(conn, first)
    qi = publish[publish.index("--qi") + 1].split(",")
    cols = list(CLASS_KEY.get(method, [c for c in qi if c in shown]))
    if not cols:  # a projection shows features of its own (one-hot columns): all but sensitive
        cols = [c for c in shown if c != sensitive_of(args)]
    truth = group_by(conn, first, cols)
    assert released["count"] == truth["count"] == rep["classes"], (released, truth)
    assert released["min_size"] == truth["min_size"] == rep["min_class_size"]
    assert released["max_size"] == truth["max_size"]
    assert released["avg_size"] == pytest.approx(truth["avg_size"], abs=1e-4)
    assert f"{truth['count']} (rows with equal released QIs" in human
    assert f"largest {truth['max_size']}" in human
    # No figure about groups goes by the name of classes among the method's own metrics.
    assert not {"max_class_size", "avg_class_size"} & set(rep["method_metrics"])
    if groups is not None and groups["max_size"] is not None:
        assert groups["min_size"] <= groups["avg_size"] <= groups["max_size"]
        if method not in MASKS_CELLS:  # each class a union of whole groups
            assert released["count"] <= groups["count"]
            assert released["max_size"] >= groups["max_size"]
        assert "(the method's own groups" in human


def test_groups_released_alike_are_one_class(conn: psycopg.Connection, dsn: str) -> None:
    """k-member forms groups of k among 40 identical people; released alike, they are one class
    of 40 (the figure a reader of the release sees), beside 10 internal groups of 4."""
    make_table(conn, "h", "twins", [("id", "int PRIMARY KEY"), ("age", "int"), ("zip", "text")],
               [(i, 30, "1234") for i in range(1, 41)])  # fmt: skip
    code, out = cli_json(dsn, "publish", "t", "--source", "h.twins", "--key", "id",
                         "--qi", "age,zip", "--k", "4", "--algorithm", "kmember")  # fmt: skip
    assert code == 0, out
    code, rep = cli_json(dsn, "report", "t")
    truth = group_by(conn, "released.t", ["age", "zip"])
    assert truth == {"count": 1, "min_size": 40, "max_size": 40, "avg_size": 40.0}
    assert rep["released_classes"] == truth
    assert rep["internal_groups"] == {"count": 10, "min_size": 4, "max_size": 4, "avg_size": 4.0}
    human = cli(dsn, "report", "t").stdout
    assert "1 (rows with equal released QIs; smallest 40, largest 40, average 40.0)" in human
    assert "10 (the method's own groups; smallest 4, largest 4, average 4.0)" in human

    # A run recorded before the two were told apart: its largest and average size were the
    # groups', and are shown as such, never as the classes'.
    conn.execute(
        """UPDATE dbanon.run SET metrics = metrics - 'released_classes' - 'groups'
               - 'min_group_size' - 'max_group_size' - 'avg_group_size'
               || '{"max_class_size": 4, "avg_class_size": 4.0}'::jsonb"""
    )
    code, rep = cli_json(dsn, "report", "t")
    assert rep["released_classes"] == {"count": 1, "min_size": 40, "max_size": None,
                                       "avg_size": 40.0}  # fmt: skip
    assert rep["internal_groups"] == {"count": None, "min_size": None, "max_size": 4,
                                      "avg_size": 4.0}  # fmt: skip
    assert not {"max_class_size", "avg_class_size"} & set(rep["method_metrics"])
