"""The class-size histogram a publish's figures and its risk share (dbanon.metrics.sizes):
counted by its GROUP BY, weighted by a count column, and inside `shared` counted once."""

from __future__ import annotations

import psycopg
from helpers import make_table
from psycopg import sql

from dbanon.models import sizes

ROWS = [("a", 1, 2), ("a", 1, 3), ("a", 2, 1), ("b", 1, 1), ("b", 1, 1), ("b", 1, 1),
        (None, 1, 4)]  # fmt: skip
REL = sql.Identifier("z", "t")


def test_the_histogram_counts_classes_by_size(conn: psycopg.Connection) -> None:
    make_table(conn, "z", "t", [("q", "text"), ("r", "int"), ("w", "int")], ROWS)
    # classes (q, r): (a,1) 2 rows, (a,2) 1, (b,1) 3, (NULL,1) 1 -> sizes 1: 2 classes, 2: 1, 3: 1
    assert sizes.histogram(conn, REL, ["q", "r"]) == {1: 2, 2: 1, 3: 1}
    assert sizes.figures(sizes.histogram(conn, REL, ["q", "r"])) == {
        "rows": 7, "classes": 4, "min_class_size": 1, "max_class_size": 3}  # fmt: skip
    # weighted: (a,1) 5, (a,2) 1, (b,1) 3, (NULL,1) 4
    assert sizes.histogram(conn, REL, ["q", "r"], "w") == {5: 1, 1: 1, 3: 1, 4: 1}
    assert sizes.figures({}) == {"rows": 0, "classes": 0, "min_class_size": 0,
                                 "max_class_size": 0}  # fmt: skip


def test_inside_shared_a_histogram_is_counted_once(conn: psycopg.Connection) -> None:
    make_table(conn, "z", "t", [("q", "text"), ("r", "int"), ("w", "int")], ROWS)
    with sizes.shared(conn):
        before = sizes.histogram(conn, REL, ["q"])
        conn.execute("INSERT INTO z.t VALUES ('c', 1, 1)")
        assert sizes.histogram(conn, REL, ["q"]) == before  # not counted again
        assert sizes.histogram(conn, REL, ["q", "r"]) != sizes.histogram(conn, REL, ["q"])
    # outside, every call counts the table as it is now
    assert sizes.histogram(conn, REL, ["q"]) == {**before, 1: before.get(1, 0) + 1}


def test_k_anonymity_from_the_histogram_is_the_counted_result(conn: psycopg.Connection) -> None:
    """A holding k-anonymity check reads the histogram; its figures are those of the check that
    counts the classes itself (worst="always" takes that path), and a failing one still names
    its worst class."""
    import random

    from dbanon.models.base import Target
    from dbanon.models.kanonymity import KAnonymity

    rng = random.Random(5)
    rows = [(rng.choice("ab"), rng.randint(1, 4), 1) for _ in range(400)]
    make_table(conn, "z", "t", [("q", "text"), ("r", "int"), ("w", "int")], rows)
    for k in (2, 10, 40):
        fast = KAnonymity(k).check(conn, Target(REL, ["q", "r"]))
        counted = KAnonymity(k).check(conn, Target(REL, ["q", "r"], worst="always"))
        assert fast.holds == counted.holds and fast.figures == counted.figures, k
        if not fast.holds:
            assert fast.worst_class == counted.worst_class is not None


def test_the_histogram_of_keys_is_the_group_bys(conn: psycopg.Connection) -> None:
    """From one key per row, equal where the values are (NULL one value): the GROUP BY's."""
    import numpy as np

    make_table(conn, "z", "t", [("q", "text"), ("r", "int"), ("w", "int")], ROWS)
    for by in (["q"], ["q", "r"], ["q", "r", "w"]):
        seen: dict = {}
        keys = np.array([seen.setdefault(tuple(row[j] for j in range(len(by))), len(seen))
                         for row in ROWS])  # fmt: skip
        assert sizes.histogram_of_keys(keys * 2**40) == sizes.histogram(conn, REL, by)
    assert sizes.histogram_of_keys(np.zeros(0, dtype=np.int64)) == {}


def test_a_remembered_histogram_is_read_unless_counted_first(conn: psycopg.Connection) -> None:
    make_table(conn, "z", "t", [("q", "text"), ("r", "int"), ("w", "int")], ROWS)
    counted = sizes.histogram(conn, REL, ["q"])
    with sizes.shared(conn):
        sizes.remember(conn, REL, ["q", "r"], {7: 1})  # what a build counted
        assert sizes.histogram(conn, REL, ["q", "r"]) == {7: 1}
        assert sizes.histogram(conn, REL, ["q"]) == counted
        sizes.remember(conn, REL, ["q"], {7: 1})  # counted already: kept as counted
        assert sizes.histogram(conn, REL, ["q"]) == counted
    sizes.remember(conn, REL, ["q", "r"], {7: 1})  # outside: nothing is remembered
    assert sizes.histogram(conn, REL, ["q", "r"]) == {1: 2, 2: 1, 3: 1}
