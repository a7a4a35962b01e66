"""A view release's checks read a copy of its rows at publish (dbanon.methods.base.snapshot_view).
Where the search left nothing out (fulldomain's node with no suppression, a projection found
k-anonymous), the copy is made from the source without the view's class count and shuffle: the
figures the run records must still be what an independent count of the view itself finds, with
and without suppression at the node."""

from __future__ import annotations

import random

import psycopg
import pytest
from helpers import cli_json, make_table
from psycopg import sql

QI = ["age", "region", "sex"]
K = 4


@pytest.fixture
def people(conn: psycopg.Connection) -> None:
    rng = random.Random(11)
    rows = [(i, rng.randint(18, 80), rng.choice("NSEW"), rng.choice("FM"),
             rng.choice(["yes", "no"])) for i in range(1, 401)]  # fmt: skip
    rows += [(1000 + i, 99, "Q", "X", "no") for i in range(2)]  # a class too small at any node
    make_table(conn, "s", "people", [("id", "int PRIMARY KEY"), ("age", "int"),
               ("region", "text"), ("sex", "text"), ("buy", "text")], rows)  # fmt: skip


def _view(conn: psycopg.Connection, columns: list[str]) -> dict[str, int]:
    """Rows, classes and the smallest class of released.p, grouped by `columns`."""
    n, classes, smallest = conn.execute(
        sql.SQL("SELECT coalesce(sum(n), 0), count(*), min(n) FROM "
                "(SELECT count(*) AS n FROM released.p GROUP BY {}) c").format(
            sql.SQL(", ").join(map(sql.Identifier, columns)))
    ).fetchone()  # fmt: skip
    return {"rows": int(n), "classes": int(classes), "min_class_size": int(smallest)}


def _released(conn: psycopg.Connection) -> list[str]:
    return [c for (c,) in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'released.p'::regclass "
        "AND attnum > 0 AND NOT attisdropped ORDER BY attnum")]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "extra", "left_out"),
    [
        ("fulldomain", ["--max-suppression", "0"], False),
        ("fulldomain", ["--max-suppression", "0.05"], True),
        ("hamdist", ["--bins", "3"], False),
        ("rfka", ["--trees", "20", "--seed", "1", "--features", "onehot"], False),
    ],
)
def test_the_recorded_figures_are_the_views(
    conn: psycopg.Connection, dsn: str, people: None, method: str, extra: list[str],
    left_out: bool,
) -> None:  # fmt: skip
    code, out = cli_json(
        dsn, "publish", "p", "--source", "s.people", "--key", "id", "--qi", ",".join(QI),
        "--sensitive", "buy", "--k", str(K), "--algorithm", method, "--target", "released.p",
        "--as", "view", *extra,
    )  # fmt: skip
    assert code == 0, out
    columns = [c for c in _released(conn) if c != "buy"]
    seen = _view(conn, columns)
    assert seen["min_class_size"] >= K
    assert {k: out[k] for k in seen} == seen
    # with suppression at the node the view leaves the small class out (and the copy too)
    assert (seen["rows"] < 402) == left_out
