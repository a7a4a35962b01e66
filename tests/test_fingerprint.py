"""The source fingerprint (`refresh --due` skips a source whose fingerprint is its latest
success's): it follows every value and no order, by each value's hash where every column's
type has one, by the row's text where one has not."""

from __future__ import annotations

import psycopg
import pytest
from helpers import make_table
from psycopg import sql

from dbanon.db.catalog import Relation
from dbanon.lifecycle.resolve import fingerprint


@pytest.mark.parametrize("extra", [("note", "text"), ("doc", "json")])
def test_the_fingerprint_follows_values_not_order(
    conn: psycopg.Connection, extra: tuple[str, str]
) -> None:
    name, kind = extra
    rows = [(i, 20 + i % 7, f'{{"a": {i % 3}}}' if kind == "json" else f"n{i % 3}")
            for i in range(50)]  # fmt: skip
    make_table(conn, "src", "fp", [("id", "int"), ("age", "int"), extra], rows)
    rel = Relation("src", "fp")
    first = fingerprint(conn, rel)
    by_value = kind != "json"  # json has no hash function: the row's text is hashed
    assert (":r" in first) is by_value
    conn.execute("UPDATE src.fp SET age = age + 1 WHERE id = 7")
    changed = fingerprint(conn, rel)
    assert changed != first
    conn.execute("UPDATE src.fp SET age = age - 1 WHERE id = 7")  # back, in another place
    assert fingerprint(conn, rel) == first
    conn.execute("DELETE FROM src.fp WHERE id = 7")
    assert fingerprint(conn, rel).split(":")[0] == "49"
    conn.execute(sql.SQL("INSERT INTO src.fp SELECT id, age, {} FROM src.fp WHERE id = 8").format(
        sql.Identifier(name)))  # a row twice: counted twice
    again = fingerprint(conn, rel)
    assert again.split(":")[0] == "50" and again != first
    conn.rollback()
