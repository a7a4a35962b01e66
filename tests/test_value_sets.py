"""Value-set labels (a categorical QI without a hierarchy released as the values present) read
back as the same set, by dbanon's metrics and by PostgreSQL's own text[] parser."""

from __future__ import annotations

import psycopg
from hypothesis import given, settings
from hypothesis import strategies as st

from dbanon.core.generalise import read_value_set, value_set

VALUES = st.lists(st.text(max_size=6), min_size=1, max_size=5, unique=True)


@given(VALUES)
def test_a_value_set_reads_back_as_itself(values: list[str]) -> None:
    assert read_value_set(value_set(values)) == sorted(values)


def test_postgresql_reads_the_same_set(conn: psycopg.Connection) -> None:
    for values in (["13021", "13045"], ["a b", "c,d", 'x"y', "back\\s", "NULL", "", "{}"]):
        text = value_set(values)
        got = conn.execute("SELECT %s::text[]", (text,)).fetchone()[0]
        assert got == sorted(values) == read_value_set(text)


@settings(max_examples=20)
@given(st.text(max_size=8))
def test_plain_values_are_not_sets(text: str) -> None:
    if not (text.startswith("{") and text.endswith("}")):
        assert read_value_set(text) is None
