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

# Each extra column's type, a value of it, and the fingerprint's kind over (int, int, it):
# every column a common type's (c), one whose type has a hash function only the record hash
# looks up (r), one without any (json: the row's text, no mark).
EXTRA = {"text": (lambda i: f"n{i % 3}", "c"), "varchar(8)": (lambda i: f"v{i % 3}", "c"),
         "inet": (lambda i: f"10.0.0.{i % 3}", "r"),
         "json": (lambda i: f'{{"a": {i % 3}}}', "")}  # fmt: skip


@pytest.mark.parametrize("kind", list(EXTRA))
def test_the_fingerprint_follows_values_not_order(conn: psycopg.Connection, kind: str) -> None:
    name = "extra"
    value, mark = EXTRA[kind]
    rows = [(i, 20 + i % 7, value(i)) for i in range(50)]
    make_table(conn, "src", "fp", [("id", "int"), ("age", "int"), (name, kind)], rows)
    rel = Relation("src", "fp")
    first = fingerprint(conn, rel)
    digest = first.split(":")[1]
    assert digest[: len(mark)] == mark and digest[len(mark) :].lstrip("-").isdigit()
    conn.execute("UPDATE src.fp SET extra = NULL WHERE id = 3")  # NULL is a value of its own
    assert fingerprint(conn, rel) != first
    conn.execute(sql.SQL("UPDATE src.fp SET extra = {} WHERE id = 3").format(sql.Literal(value(3))))
    assert fingerprint(conn, rel) == first
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
