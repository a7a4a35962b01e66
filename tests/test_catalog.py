"""The catalog: Alembic migrations, hierarchies stored and used by the SQL functions."""

from __future__ import annotations

import random
from pathlib import Path

import psycopg
import pytest
from alembic import command
from helpers import cli, cli_json, make_table, snapshot

from dbanon.core.hierarchy import Hierarchy
from dbanon.data import hierarchy_file
from dbanon.db import catalog


def test_init_is_idempotent_and_downgrade_removes_everything(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA keep_me; CREATE TABLE keep_me.t (x int)")
        first = cli(dsn, "init")
        assert first.exit_code == 0 and catalog.REVISION in first.stdout
        before = snapshot(conn)
        assert cli(dsn, "init").exit_code == 0
        assert snapshot(conn) == before
        command.downgrade(catalog.alembic_config(dsn), "base")
        after = snapshot(conn)
    assert "dbanon" not in after["schemas"]
    assert not [f for f in after["functions"] or [] if f.startswith("dbanon.")]
    assert "keep_me.t" in after["relations"]
    assert not [r for r in after["relations"] if r.startswith("dbanon.")]


def lca_from_rows(path: Path, values: list[str]) -> str | None:
    """The lowest common ancestor read off the ARX file itself: the first column (level) where
    every value's line has the same label; None if a value is not a leaf."""
    lines = {row[0]: row for row in (x.split(";") for x in path.read_text().splitlines() if x)}
    if any(v not in lines for v in values):
        return None
    for level in range(len(lines[values[0]])):
        labels = {lines[v][level] for v in values}
        if len(labels) == 1:
            return labels.pop()
    raise AssertionError("a hierarchy has one root")


@pytest.mark.parametrize("name", ["native-country", "education"])
def test_hierarchy_import_feeds_the_sql_lca(dsn: str, name: str) -> None:
    path = hierarchy_file(name)
    leaves = [x.split(";")[0] for x in path.read_text().splitlines() if x]
    height = path.read_text().splitlines()[0].count(";")
    code, out = cli_json(dsn, "hierarchy", "import", "h", str(path))
    assert code == 0 and out["leaves"] == len(leaves) and out["height"] == height
    rng = random.Random(5)
    cases = [[v] for v in leaves[:5]] + [[leaves[0], leaves[0]], [leaves[0], "Atlantis"]]
    cases += [rng.sample(leaves, rng.randint(2, 4)) for _ in range(40)]
    with psycopg.connect(dsn) as conn:
        got = [conn.execute("SELECT dbanon.lca('h', %s)", [vals]).fetchone()[0] for vals in cases]
        want = [lca_from_rows(path, vals) for vals in cases]
        assert got == want
        assert len(set(want)) > 3  # leaves, inner labels and the root among the answers
        assert conn.execute("SELECT dbanon.lca('h', ARRAY['Atlantis'])").fetchone()[0] is None
        assert conn.execute("SELECT dbanon.lca('nope', %s)", [leaves[:2]]).fetchone()[0] is None
        h = Hierarchy.from_csv("h", path)
        assert sorted(catalog.load_hierarchy(conn, "h").rows()) == sorted(h.rows())
    code, listing = cli_json(dsn, "hierarchy", "list")
    assert [(x["name"], x["leaves"]) for x in listing["hierarchies"]] == [("h", len(leaves))]


def test_revision_0006_drops_the_unused_generalize(dsn: str) -> None:
    """dbanon.generalize() is gone at head; downgrading to 0005 brings it back as it was (a
    leaf's label at a level), upgrading removes it again and leaves the catalog as it was."""
    path = hierarchy_file("education")
    assert cli(dsn, "hierarchy", "import", "edu", str(path)).exit_code == 0
    signature = "dbanon.generalize(text,text,integer)"
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regprocedure(%s)", [signature]).fetchone()[0] is None
        before = snapshot(conn)
        command.downgrade(catalog.alembic_config(dsn), "0005")
        assert conn.execute("SELECT to_regprocedure(%s)", [signature]).fetchone()[0] is not None
        line = path.read_text().splitlines()[0].split(";")
        for level, label in enumerate(line):
            got = conn.execute("SELECT dbanon.generalize('edu', %s, %s)", [line[0], level])
            assert got.fetchone()[0] == label
        assert conn.execute("SELECT dbanon.generalize('edu', 'x', 1)").fetchone()[0] is None
        command.upgrade(catalog.alembic_config(dsn), "head")
        assert snapshot(conn) == before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("a;A;*\nb;*\n", "ragged"),
        ("a;A;*\na;A;*\n", "appears twice"),
        ("a;A;X;*\nb;A;Y;*\n", "two parents"),
    ],
)
def test_malformed_hierarchy_file_changes_nothing(
    dsn: str, tmp_path: object, content: str, message: str
) -> None:
    path = tmp_path / "bad.csv"  # type: ignore[operator]
    path.write_text(content)
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = snapshot(conn)
        result = cli(dsn, "hierarchy", "import", "bad", str(path))
        assert result.exit_code == 2
        assert message in result.stderr and result.stderr.count("\n") == 1
        assert snapshot(conn) == before


def test_hierarchy_name_taken(dsn: str) -> None:
    path = str(hierarchy_file("sex"))
    assert cli(dsn, "hierarchy", "import", "sex", path).exit_code == 0
    again = cli(dsn, "hierarchy", "import", "sex", path)
    assert again.exit_code == 2 and "already exists" in again.stderr
    assert cli(dsn, "hierarchy", "import", "sex", path, "--replace").exit_code == 0


def test_revisions_0007_and_0010_keep_every_map_row_for_row(dsn: str) -> None:
    """Each release's private map survives every shape it had: one table (0006), a partition
    of its own (0007), a table of its own (0010), and back down again."""
    rows = [(i, random.Random(i).randint(20, 60), "ab"[i % 2]) for i in range(1, 61)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_table(conn, "m", "t", [("id", "int PRIMARY KEY"), ("age", "int"), ("s", "text")],
                   rows)  # fmt: skip
        for name in ("one", "two"):
            code, out = cli_json(dsn, "publish", name, "--source", "m.t", "--key", "id",
                                 "--qi", "age", "--sensitive", "s", "--k", "4",
                                 "--algorithm", "mondrian", "--target", f"mo.{name}")  # fmt: skip
            assert code == 0, out
        ids = [r for (r,) in conn.execute("SELECT id FROM dbanon.release ORDER BY id")]
        sets = " UNION ALL ".join(  # revision 0015: each row points at its set of values
            f"SELECT m.release_id, m.key, m.gid, s.vals FROM dbanon.group_map_{i} m "
            f"LEFT JOIN dbanon.group_map_{i}_sets s USING (vid)" for i in ids
        )
        tables = " UNION ALL ".join(
            f"SELECT release_id, key, gid, vals FROM dbanon.group_map_{i}" for i in ids
        )
        query = "SELECT release_id, key, gid, vals FROM dbanon.group_map ORDER BY 1, 2"
        before = conn.execute(f"{sets} ORDER BY 1, 2").fetchall()  # noqa: S608
        assert len(before) == 120 and all(v for *_, v in before)
        kind = "SELECT relkind FROM pg_class WHERE oid = to_regclass('dbanon.group_map')"
        assert conn.execute(kind).fetchone() is None
        shown = " UNION ALL ".join(
            f"SELECT m.key, h.shown FROM dbanon.group_map_{i} m "
            f"JOIN dbanon.group_map_{i}_shown h USING (sid)" for i in ids
        )
        showed = conn.execute(f"{shown} ORDER BY 1").fetchall()  # noqa: S608
        assert len(showed) == 120
        command.downgrade(catalog.alembic_config(dsn), "0014")  # each row's values inline again
        assert conn.execute(f"{tables} ORDER BY 1, 2").fetchall() == before  # noqa: S608
        inline = " UNION ALL ".join(f"SELECT key, shown FROM dbanon.group_map_{i}" for i in ids)
        assert conn.execute(f"{inline} ORDER BY 1").fetchall() == showed  # noqa: S608
        command.upgrade(catalog.alembic_config(dsn), "head")  # and pointed at once each again
        assert conn.execute(f"{sets} ORDER BY 1, 2").fetchall() == before  # noqa: S608
        assert conn.execute(f"{shown} ORDER BY 1").fetchall() == showed  # noqa: S608
        command.downgrade(catalog.alembic_config(dsn), "0009")
        assert conn.execute(kind).fetchone()[0] == "p"
        assert conn.execute(query).fetchall() == before
        command.downgrade(catalog.alembic_config(dsn), "0006")
        assert conn.execute(kind).fetchone()[0] == "r"
        assert conn.execute(query).fetchall() == before
        command.upgrade(catalog.alembic_config(dsn), "0009")
        assert conn.execute(kind).fetchone()[0] == "p"
        assert conn.execute(query).fetchall() == before
        command.upgrade(catalog.alembic_config(dsn), "head")
        assert conn.execute(kind).fetchone() is None
        assert conn.execute(f"{sets} ORDER BY 1, 2").fetchall() == before  # noqa: S608
