"""A table release's secret row order (dbanon.db.shuffle): a fresh permutation at every
statement, unrelated to the source's order, that the server may sort in parallel."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from psycopg import sql

from dbanon.db.catalog import Relation
from dbanon.db.shuffle import shuffle_key

SOURCE = Relation("public", "src")


# the key with a connection to ask (a place hashed as it is from PostgreSQL 14), and without
ASKED = pytest.mark.parametrize("asked", [True, False], ids=["asked", "text"])


def _order(conn: psycopg.Connection, rel: Relation = SOURCE, asked: bool = True) -> list[int]:
    return [r[0] for r in conn.execute(sql.SQL("SELECT id FROM {} s ORDER BY {}").format(
        rel.ident, shuffle_key(rel, "s", conn if asked else None))).fetchall()]  # fmt: skip


@ASKED
def test_every_statement_shuffles_the_rows_afresh(conn: psycopg.Connection, asked: bool) -> None:
    conn.execute("CREATE TABLE public.src AS SELECT g AS id FROM generate_series(1, 5000) g")
    first, second = _order(conn, asked=asked), _order(conn, asked=asked)
    assert sorted(first) == sorted(second) == list(range(1, 5001))  # every row, once
    assert first != second
    for order in (first, second):  # nothing of the source's order is left
        assert abs(np.corrcoef(order, range(5000))[0, 1]) < 0.1


@ASKED
def test_partitions_rows_at_the_same_places_are_shuffled_together(
    conn: psycopg.Connection, asked: bool
) -> None:
    """Each partition has its own ctids (0,1), (0,2)...: the table's oid in the key keeps two
    rows at the same place apart, so the partitions interleave."""
    conn.execute("CREATE TABLE public.p (id int, half int) PARTITION BY LIST (half)")
    for half in (0, 1):
        conn.execute(sql.SQL("CREATE TABLE {} PARTITION OF public.p FOR VALUES IN ({})").format(
            sql.Identifier("public", f"p{half}"), sql.Literal(half)))  # fmt: skip
    conn.execute("INSERT INTO public.p SELECT g, g % 2 FROM generate_series(1, 4000) g")
    parted = Relation("public", "p", "p")
    order = _order(conn, parted, asked)
    assert sorted(order) == list(range(1, 4001))
    halves = np.array(order) % 2
    assert abs(np.corrcoef(halves, range(4000))[0, 1]) < 0.1
    pairs = halves[:-1] != halves[1:]  # the same place in both halves is not next in line
    assert 0.4 < pairs.mean() < 0.6


@ASKED
def test_the_sort_may_run_in_parallel_workers(conn: psycopg.Connection, asked: bool) -> None:
    conn.execute("CREATE TABLE public.src AS SELECT g AS id FROM generate_series(1, 50000) g")
    conn.execute("ANALYZE public.src")
    for name in ("parallel_setup_cost", "parallel_tuple_cost", "min_parallel_table_scan_size"):
        conn.execute(sql.SQL("SET {} = 0").format(sql.Identifier(name)))
    conn.execute("SET max_parallel_workers_per_gather = 2")
    plan = "\n".join(r[0] for r in conn.execute(sql.SQL(
        "EXPLAIN SELECT id FROM public.src s ORDER BY {}").format(
            shuffle_key(SOURCE, "s", conn if asked else None))).fetchall())  # fmt: skip
    assert "Gather Merge" in plan, plan
    random_plan = "\n".join(r[0] for r in conn.execute(
        "EXPLAIN SELECT id FROM public.src s ORDER BY random()").fetchall())  # fmt: skip
    assert "Gather Merge" not in random_plan  # random() sorts in the leader alone


def test_a_view_has_no_places_and_keeps_random(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE public.src AS SELECT g AS id FROM generate_series(1, 100) g")
    conn.execute("CREATE VIEW public.v AS SELECT id FROM public.src")
    view = Relation("public", "v", "v")
    assert shuffle_key(view, "s", conn).as_string(conn) == "random()"
    assert sorted(_order(conn, view)) == list(range(1, 101))
