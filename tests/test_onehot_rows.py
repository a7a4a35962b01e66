"""The labelled one-hot candidates read row by row (dbanon.methods.onehot_rows) against the
GROUPING SETS query they replace: the same candidates in the same order, the same smallest
classes, the same rows per label class, and the search's codes equal to what `codes_query`
reads, on tables with what SQL decides and the rows alone would not tell: a key's order under
its collation, labels equal in their type but not in their text, NULLs, a constant numeric
QI, a view, an empty table."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import psycopg
import pytest
from helpers import make_table
from psycopg import sql

from dbanon.algorithms.featuresel import codes_query
from dbanon.db.catalog import CATEGORICAL, NUMERIC, Column, Relation
from dbanon.db.stream import fetch_arrays
from dbanon.methods import onehot_rows
from dbanon.methods.projection import onehot_candidates

WORDS = ["b", "B", "a", "A", "_x", "Z", "é", "e", "ab", "a b", "10", "9"]


def _resolved(source: Relation, qi: list[Column], label: Column, rows: int) -> SimpleNamespace:
    return SimpleNamespace(qi=qi, sensitive=[label], source=source, rows=rows,
                           is_categorical=lambda c: c.kind == CATEGORICAL)  # fmt: skip


def _both(conn: psycopg.Connection, r: SimpleNamespace, bins: int):  # noqa: ANN202
    label = r.sensitive[0].ident
    streamed = onehot_candidates(conn, r.source.ident, r, bins, label)
    grouped = onehot_candidates(conn, r.source.ident, r, bins, label, stream=False)
    return streamed, grouped


def _same(streamed, grouped) -> None:  # noqa: ANN001
    assert [(f.name, f.value) for f in streamed.features] == [
        (f.name, f.value) for f in grouped.features]  # fmt: skip
    assert streamed.smallest == grouped.smallest
    assert np.array_equal(streamed.per_class[0], grouped.per_class[0])
    assert np.array_equal(streamed.per_class[1], grouped.per_class[1])


@pytest.mark.parametrize("seed", range(6))
def test_streamed_candidates_and_codes_are_the_grouping_sets(
    conn: psycopg.Connection, seed: int
) -> None:
    rng = random.Random(seed)
    n = rng.choice([1, 30, 400, 2000])
    labels = ["1.0", "1.00", "2", "2.50", "2.5", "-0", "0", None]
    rows = [(i, rng.randrange(-5, 60), rng.choice(WORDS), rng.choice(WORDS),
             rng.choice(WORDS[:4]), 7, rng.choice(labels)) for i in range(n)]  # fmt: skip
    make_table(conn, "s", "oh", [("id", "int"), ("a", "int"), ("b", "text"),
                                 ("c", 'text COLLATE "C"'), ("d", "varchar(5)"), ("e", "int"),
                                 ("y", "numeric")], rows)  # fmt: skip
    qi = [Column("a", "integer", NUMERIC, True), Column("b", "text", CATEGORICAL, True),
          Column("c", "text", CATEGORICAL, True), Column("d", "character varying(5)",
          CATEGORICAL, True), Column("e", "integer", NUMERIC, True)]  # fmt: skip
    rng.shuffle(qi)
    r = _resolved(Relation("s", "oh"), qi, Column("y", "numeric", NUMERIC, False), n)
    streamed, grouped = _both(conn, r, rng.choice([2, 3, 5]))
    _same(streamed, grouped)
    # numeric labels equal in value are one class: 1.0/1.00, 2.5/2.50, -0/0, and NULL
    assert len(streamed.per_class[1]) == len({None if v is None else float(v)
                                              for *_, v in rows})  # fmt: skip
    ranked = list(streamed.features)
    rng.shuffle(ranked)
    ranked = ranked[: rng.randrange(1, len(ranked) + 1)]
    query = codes_query(r.source.ident, ranked)
    assert query is not None and streamed.rows is not None
    want = fetch_arrays(conn, query)
    got = streamed.rows.search_codes([c.name for c in qi], ranked)
    assert len(got) == len(want)
    # the rows come in another order (parts of pages): compare each row's codes as a set
    assert sorted(zip(*[g.tolist() for g in got], strict=True)) == sorted(
        zip(*[w.tolist() for w in want], strict=True))  # fmt: skip
    assert streamed.rows.codes is None  # taken by the search
    with pytest.raises(RuntimeError):
        streamed.rows.search_codes([c.name for c in qi], ranked)


def test_nulls_a_view_and_an_empty_table(conn: psycopg.Connection) -> None:
    """NULL QIs (a publish refuses them; the counts do not rely on it) and a NULL label, read
    through a view (one stream, no parts), and the same table empty."""
    rng = random.Random(3)
    rows = [(None if rng.random() < 0.2 else rng.randrange(40),
             None if rng.random() < 0.2 else rng.choice(WORDS),
             None if rng.random() < 0.3 else rng.choice(["no", "yes", "maybe"]))
            for _ in range(300)]  # fmt: skip
    make_table(conn, "s", "nv", [("a", "int"), ("b", "text"), ("y", "text")], rows)
    conn.execute("CREATE VIEW s.nvv AS SELECT * FROM s.nv")
    conn.execute("CREATE TABLE s.nve (LIKE s.nv)")
    qi = [Column("a", "integer", NUMERIC, True), Column("b", "text", CATEGORICAL, True)]
    label = Column("y", "text", CATEGORICAL, True)
    for source, n in ((Relation("s", "nvv", "v"), 300), (Relation("s", "nve"), 0)):
        # an empty table's numeric QI has no range to bin (a publish refuses no rows anyway)
        streamed, grouped = _both(conn, _resolved(source, qi if n else qi[1:], label, n), 4)
        _same(streamed, grouped)
        assert streamed.rows is not None


def test_a_nondeterministic_collation_is_left_to_sql(conn: psycopg.Connection) -> None:
    """Texts equal under a case-insensitive collation may be one value to SQL but are two
    byte strings to the stream: the candidates come from the GROUPING SETS query."""
    try:
        with conn.transaction():
            conn.execute("CREATE COLLATION s_ci (provider = icu, locale = 'und-u-ks-level2', "
                         "deterministic = false)")  # fmt: skip
    except psycopg.Error:
        pytest.skip("this server has no ICU collations")
    rows = [(i, w, "yes" if i % 3 else "no") for i, w in enumerate(["a", "A", "b", "B"] * 20)]
    make_table(conn, "s", "ci", [("id", "int"), ("b", "text COLLATE s_ci"), ("y", "text")], rows)
    qi = [Column("b", "text", CATEGORICAL, True)]
    r = _resolved(Relation("s", "ci"), qi, Column("y", "text", CATEGORICAL, True), len(rows))
    assert onehot_rows.read(conn, r, [sql.SQL("{}::text").format(qi[0].ident)], [False],
                            r.sensitive[0]) is None  # fmt: skip
    streamed, grouped = _both(conn, r, 2)
    _same(streamed, grouped)
    assert streamed.rows is None


@pytest.mark.parametrize("head", [3, 10_000])
def test_bins_check_counts_every_row_unless_the_head_shows_enough(
    conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch, head: int
) -> None:
    """`--bins` up to the most distinct values of a numeric QI passes, one more is refused with
    that count; read from the table's first `head` rows or, when those show too few, from all:
    a head of 3 rows (one value of `a`, then its others) must not refuse what the whole allows."""
    from dbanon.errors import DbanonError
    from dbanon.methods import projection

    monkeypatch.setattr(projection, "_BINS_HEAD", head)
    rows = [(i, 1 if i < 5 else i, i % 3) for i in range(40)]  # a: 36 distinct, b: 3
    make_table(conn, "s", "bins", [("id", "int"), ("a", "int"), ("b", "int")], rows)
    qi = [Column("a", "integer", NUMERIC, True), Column("b", "integer", NUMERIC, True)]
    r = _resolved(Relation("s", "bins"), qi, qi[1], len(rows))
    for bins in (2, 4, 36):
        projection._check_bins(conn, r, bins)
    with pytest.raises(DbanonError, match=r"--bins 37 .*\(at most 36, of a\)"):
        projection._check_bins(conn, r, 37)
