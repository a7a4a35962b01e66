"""A grouping release written from arrays (dbanon.methods.grouped_rows) shows each group's true
bounds and every released column as the source holds it.

A group's bounds are its least and greatest values even where a float8 cannot tell its values
apart (numerics of 20 digits, bigints beyond 2^53: the algorithm reads them as float8); a
released column of a type without a binary form (aclitem) is released as the source holds it;
and the rows come in an order that is not the source's. Each check reads the released relation
with plain SQL."""

from __future__ import annotations

import json
from decimal import Decimal

import psycopg
import pytest
from helpers import cli_json, make_table
from psycopg import sql


@pytest.mark.parametrize("method", ["mondrian", "kmember"])
def test_bounds_are_exact_beyond_float8(conn: psycopg.Connection, dsn: str, method: str) -> None:
    """40 numerics a step of 1e-10 apart around 1.2e9 (one float8 for them all) and 40 bigints
    around 2^53 in one group of 40: the release shows [least,greatest] of each exactly."""
    base, big = "1234567890.0123456789", 2**53 + 1
    rows = [(i, f"{base[:-2]}{(89 + 37 * i) % 100:02d}", big + (17 * i) % 40, "x")
            for i in range(40)]  # fmt: skip
    make_table(conn, "src", "exact", [("id", "int"), ("n", "numeric"), ("b", "bigint"),
                                      ("s", "text")], rows)  # fmt: skip
    conn.commit()
    code, out = cli_json(dsn, "publish", f"ex_{method}", "--source", "src.exact", "--key", "id",
                         "--qi", "n,b", "--k", "40", "--algorithm", method,
                         "--target", f"rel.ex_{method}")  # fmt: skip
    assert code == 0, out
    got = conn.execute(sql.SQL("SELECT DISTINCT n, b FROM {}").format(
        sql.Identifier("rel", f"ex_{method}"))).fetchall()  # fmt: skip
    values = sorted(Decimal(r[1]) for r in rows)
    low, high = (format(v.normalize(), "f") for v in (values[0], values[-1]))
    assert got == [(f"[{low},{high}]", f"[{big},{big + 39}]")], got


def test_a_column_without_a_binary_form_is_released_as_it_is(
    conn: psycopg.Connection, dsn: str
) -> None:
    """A --keep column of type aclitem (no binary send or receive) comes out as the source
    holds it, in a column of its type; the sensitive column as it is too."""
    make_table(conn, "src", "acl", [("id", "int"), ("age", "int"), ("dx", "text"),
                                    ("acl", "aclitem")],
               [(i, 20 + i % 30, "abc"[i % 3], ["=r", "=rw", "=arwd"][i % 3] + "/postgres")
                for i in range(60)])  # fmt: skip
    conn.commit()
    code, out = cli_json(dsn, "publish", "acl", "--source", "src.acl", "--key", "id", "--qi",
                         "age", "--sensitive", "dx", "--keep", "acl", "--allow-identifying",
                         "acl", "--k", "3", "--algorithm", "mondrian", "--target", "rel.acl")
    assert code == 0, out
    kinds = dict(conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = 'rel.acl'::regclass AND attnum > 0").fetchall())  # fmt: skip
    assert kinds["acl"] == "aclitem" and kinds["dx"] == "text"
    released = conn.execute("SELECT dx, acl::text FROM rel.acl ORDER BY 2, 1").fetchall()
    source = conn.execute("SELECT dx, acl::text FROM src.acl ORDER BY 2, 1").fetchall()
    assert released == source


def test_rows_are_not_in_the_source_order(conn: psycopg.Connection, dsn: str) -> None:
    """2,000 rows, each its own marker (kept): the release's physical order is a permutation
    far from the source's (a rank correlation near 0)."""
    make_table(conn, "src", "order", [("id", "int"), ("age", "int"), ("mark", "int")],
               [(i, i // 10, i) for i in range(2000)])  # fmt: skip
    conn.commit()
    code, out = cli_json(dsn, "publish", "ord", "--source", "src.order", "--key", "id", "--qi",
                         "age", "--keep", "mark", "--allow-identifying", "mark", "--k", "5",
                         "--algorithm", "mondrian", "--target", "rel.ord")  # fmt: skip
    assert code == 0, out
    marks = [r[0] for r in conn.execute("SELECT mark FROM rel.ord")]
    assert sorted(marks) == list(range(2000))
    n = len(marks)
    mean = (n - 1) / 2
    cov = sum((i - mean) * (m - mean) for i, m in enumerate(marks)) / n
    assert abs(cov / ((n * n - 1) / 12)) < 0.1


@pytest.mark.parametrize("values", [20, 100])  # a set's values as bits of one integer, or not
def test_value_sets_are_the_values_their_rows_hold(
    conn: psycopg.Connection, dsn: str, values: int
) -> None:
    """A categorical QI without a hierarchy is released per group as its value, `*` or the
    set of its values: the rows showing a label hold exactly the values it names (rows matched
    by a kept marker), quoting and all."""
    odd = ["a,b", 'q"t', "x y", "{z}", "NULL", "é"]
    rows = [(i, (odd + [f"v{j:03d}" for j in range(values)])[(i * 7919) % (values + 6)], i)
            for i in range(600)]  # fmt: skip
    make_table(conn, "src", f"sets{values}", [("id", "int"), ("code", "text"),
                                               ("mark", "int")], rows)  # fmt: skip
    conn.commit()
    name = f"sets{values}"
    code, out = cli_json(dsn, "publish", name, "--source", f"src.{name}", "--key", "id",
                         "--qi", "code", "--keep", "mark", "--allow-identifying", "mark",
                         "--k", "4", "--algorithm", "mondrian", "--target", f"rel.{name}")
    assert code == 0, out
    value_of = {i: v for i, v, _ in rows}
    shown: dict[str, set[str]] = {}
    for label, mark in conn.execute(sql.SQL("SELECT code, mark FROM {}").format(
            sql.Identifier("rel", name))):  # fmt: skip
        shown.setdefault(label, set()).add(value_of[mark])
    domain = {v for _, v, _ in rows}
    for label, held in shown.items():
        if label == "*":
            assert held <= domain
        elif label.startswith("{") and held != {label}:  # a set, as text[] reads it
            named = conn.execute("SELECT %s::text[]", [label]).fetchone()[0]
            assert set(named) == held and len(named) > 1, (label, held)
        else:  # one value (a value may look like a set: "{z}" alone is itself)
            assert held == {label}, (label, held)


def _changed(conn: psycopg.Connection, name: str) -> int:
    return int(conn.execute(
        "SELECT r.metrics -> 'changed_rows' FROM dbanon.run r JOIN dbanon.release x "
        "ON x.id = r.release_id WHERE x.name = %s ORDER BY r.id DESC LIMIT 1", [name],
    ).fetchone()[0])  # fmt: skip


@pytest.mark.parametrize("kept", ["jsonb", "tsvector"])  # a hash for every column, or not
def test_a_refresh_tells_the_rows_that_changed(
    conn: psycopg.Connection, dsn: str, kept: str
) -> None:
    """The map's fingerprints tell a refresh which rows changed: of whichever kind the release's
    columns allow (a tsvector has no hash function: the md5 of the row's text), and of a map
    written with md5 fingerprints before (as earlier releases were): the rows updated, each
    told."""
    make_table(conn, "src", f"fp_{kept}", [("id", "int"), ("age", "int"), ("dx", "text"),
                                          ("doc", kept)],
               [(i, 20 + i % 40, "abc"[i % 3], json.dumps({"i": i % 5}) if kept == "jsonb"
                 else f"w{i % 5}") for i in range(400)])  # fmt: skip
    conn.commit()
    name = f"fp_{kept}"
    code, out = cli_json(dsn, "publish", name, "--source", f"src.{name}", "--key", "id", "--qi",
                         "age", "--sensitive", "dx", "--keep", "doc", "--k", "5", "--algorithm",
                         "mondrian", "--target", f"rel.{name}")  # fmt: skip
    assert code == 0, out
    rid = conn.execute("SELECT id FROM dbanon.release WHERE name = %s", [name]).fetchone()[0]
    table = sql.Identifier("dbanon", f"group_map_{rid}")
    kinds = conn.execute(sql.SQL("SELECT DISTINCT left(fp, 1) = 'r' FROM {}").format(
        table)).fetchall()  # fmt: skip
    assert kinds == [(kept == "jsonb" and conn.info.server_version >= 140000,)]
    for step in range(2):
        if step:  # the map as a release before 64-bit and record fingerprints wrote it
            conn.execute(sql.SQL(
                "UPDATE {} m SET fp = md5(ROW(s.age, s.dx, s.doc)::text) FROM {} s "
                "WHERE s.id::text = m.key").format(table, sql.Identifier("src", name)))
        updated = conn.execute(sql.SQL("UPDATE {} SET age = age + 1 WHERE id % 57 = {}").format(
            sql.Identifier("src", name), sql.Literal(step))).rowcount  # fmt: skip
        conn.commit()
        code, out = cli_json(dsn, "refresh", name)
        assert code == 0, out
        assert _changed(conn, name) == updated > 0


@pytest.mark.parametrize("seed", range(6))
def test_loss_of_groups_is_loss_report(seed: int) -> None:
    """The publish's loss figures, gathered in one compiled pass (metrics.grouploss), equal
    metrics.loss.loss_report's exactly: both costs, hierarchies and value sets, numeric columns
    or none (with a NaN), ids with gaps, groups of one row."""
    import numpy as np

    from dbanon.algorithms.base import QIArrays
    from dbanon.core.hierarchy import Hierarchy
    from dbanon.metrics.grouploss import loss_of_groups
    from dbanon.metrics.loss import loss_report

    rng = np.random.default_rng(seed)
    tree = Hierarchy.from_rows("tree", [[f"l{i}", f"m{i // 3}", f"t{i // 6}", "*"]
                                        for i in range(12)])  # fmt: skip
    flat = Hierarchy.flat("v", [f"v{i}" for i in range(9)])
    n = 3000
    numeric = [rng.normal(40, 12, n), rng.integers(0, 5, n).astype(float)][: seed % 3]
    if seed == 5:
        numeric[0][7] = np.nan
    categorical = [(rng.integers(0, 12, n).astype(np.int32), tree),
                   (np.array([flat.leaves[f"v{c}"] for c in rng.integers(0, 9, n)],
                             dtype=np.int32), flat)]  # fmt: skip
    qi = QIArrays.build(numeric, categorical, n)
    gid = rng.integers(0, 400, n) * 3  # gaps, uneven groups
    gid[:5] = 1201 + np.arange(5)  # groups of one row
    for sets in ([False, True], [True, True], [False, False]):
        whole = loss_report(qi, gid, sets)
        assert repr(loss_of_groups(qi, gid, sets)) == repr(whole)  # repr: NaN equals NaN


@pytest.mark.parametrize(("rows", "groups"), [(0, 1), (1, 1), (1000, 7), (50_000, 20_000)])
def test_rows_by_group_is_a_stable_argsort(rows: int, groups: int) -> None:
    """dbanon.core.groupsort.by_group (the counting sort behind the release's labels and the
    loss figures) orders rows exactly as numpy's stable argsort of their group ids."""
    import numpy as np

    from dbanon.core.groupsort import by_group

    gid = np.random.default_rng(rows).integers(0, groups, rows).astype(np.int32) * 3  # gaps
    assert by_group(gid).tolist() == np.argsort(gid, kind="stable").tolist()
