"""The catalog: Alembic migrations, hierarchies stored and used by the SQL functions."""

from __future__ import annotations

import psycopg
import pytest
from alembic import command
from helpers import cli, cli_json, snapshot

from dbanon.data import hierarchy_file
from dbanon.db import catalog
from dbanon.hierarchy import Hierarchy


def test_init_is_idempotent_and_downgrade_removes_everything(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA keep_me; CREATE TABLE keep_me.t (x int)")
        first = cli(dsn, "init")
        assert first.exit_code == 0 and "0005" in first.stdout
        before = snapshot(conn)
        assert cli(dsn, "init").exit_code == 0
        assert snapshot(conn) == before
        command.downgrade(catalog.alembic_config(dsn), "base")
        after = snapshot(conn)
    assert "dbanon" not in after["schemas"]
    assert not [f for f in after["functions"] or [] if f.startswith("dbanon.")]
    assert "keep_me.t" in after["relations"]
    assert not [r for r in after["relations"] if r.startswith("dbanon.")]


def test_hierarchy_import_feeds_the_sql_lca(dsn: str) -> None:
    path = hierarchy_file("native-country")
    code, out = cli_json(dsn, "hierarchy", "import", "country", str(path))
    assert code == 0 and out["leaves"] == 41 and out["height"] == 2
    h = Hierarchy.from_csv("country", path)
    with psycopg.connect(dsn) as conn:
        for values in (["England", "France"], ["England", "Cambodia"], ["Peru"], ["Peru", "Peru"]):
            got = conn.execute("SELECT dbanon.lca('country', %s)", [values]).fetchone()[0]
            assert got == h.lca(values)
        assert conn.execute("SELECT dbanon.lca('country', ARRAY['Atlantis'])").fetchone()[0] is None
        assert sorted(catalog.load_hierarchy(conn, "country").rows()) == sorted(h.rows())
    code, listing = cli_json(dsn, "hierarchy", "list")
    assert [(x["name"], x["leaves"]) for x in listing["hierarchies"]] == [("country", 41)]


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
