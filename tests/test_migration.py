"""A catalog written by the previous version (spec version 1) upgrades, and its releases refresh.

tests/data/catalog_v1.json holds the dbanon.release rows that dbanon 2707bd9 wrote when it
published one release with each of its four methods on the table `src.ward` made below.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic import command
from helpers import cli, cli_json
from psycopg import sql

from dbanon.core.hierarchy import Hierarchy
from dbanon.db import catalog

V1 = json.loads((Path(__file__).parent / "data" / "catalog_v1.json").read_text())["releases"]
WARD = """CREATE SCHEMA src;
CREATE TABLE src.ward (id int PRIMARY KEY, age int, region text, born date, dx text);
INSERT INTO src.ward SELECT i, 20 + i % 50, (ARRAY['north','south','east','west'])[1 + i % 4],
    DATE '1950-01-01' + (i * 37) % 20000,
    (ARRAY['flu','asthma','diabetes','cancer','gout'])[1 + (i * 7) % 5]
FROM generate_series(1, 400) i"""


def store_v1(conn: psycopg.Connection, h: Hierarchy) -> None:
    """A hierarchy written as the version-1 code wrote it (revision 0001's tables)."""
    hid = conn.execute(
        "INSERT INTO dbanon.hierarchy (name, height) VALUES (%s, %s) RETURNING id",
        [h.name, h.height],
    ).fetchone()[0]
    for node in sorted(range(len(h.labels)), key=lambda i: -h.levels[i]):
        parent = h.parents[node]
        conn.execute(
            "INSERT INTO dbanon.hierarchy_node VALUES (%s, %s, %s, %s, %s)",
            [hid, node, h.labels[node], h.levels[node], None if parent < 0 else parent],
        )
    for value, leaf in h.leaves.items():
        for anc in h.ancestors(leaf):
            conn.execute(
                "INSERT INTO dbanon.hierarchy_map VALUES (%s, %s, %s, %s)",
                [hid, value, h.levels[anc], h.labels[anc]],
            )


@pytest.fixture
def v1_dsn(server_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A database whose catalog is at revision 0001 and holds the four version-1 releases, each
    with a stand-in relation carrying the comment version 1 gave its objects."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = psycopg.conninfo.make_conninfo(server_dsn, dbname=name)
    command.upgrade(catalog.alembic_config(dsn), "0001")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(WARD)
        rows = [[r, r[0].upper(), "*"] for r in ("north", "south", "east", "west")]
        store_v1(conn, Hierarchy.from_rows("region", rows))
        for rel in V1:
            spec, schema = rel["spec"], rel["target_schema"]
            conn.execute(
                "INSERT INTO dbanon.release (name, spec, target_schema, target_name, objects) "
                "VALUES (%s, %s, %s, %s, %s)",
                [spec["name"], json.dumps(spec), schema, rel["target_name"], rel["objects"]],
            )
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            for obj in rel["objects"]:
                ident = sql.Identifier(schema, obj)
                conn.execute(sql.SQL("CREATE TABLE {} (x int)").format(ident))
                comment = f"dbanon release {spec['name']!r}: {spec['algorithm']}; (version 1)"
                conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(ident, comment))
    try:
        yield dsn
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_version_1_specs_are_migrated_and_refresh(v1_dsn: str) -> None:
    # Before `init`, this dbanon refuses the old catalog with one clear line.
    code, out = cli_json(v1_dsn, "refresh", "v1_kmember")
    assert code == 2 and "catalog is at revision 0001" in out["error"] and "init" in out["error"]
    assert cli(v1_dsn, "init").exit_code == 0
    with psycopg.connect(v1_dsn, autocommit=True) as conn:
        specs = dict(conn.execute("SELECT name, spec FROM dbanon.release").fetchall())
    assert {s["version"] for s in specs.values()} == {2}
    assert specs["v1_kmember"]["models"] == [
        {"name": "k-anonymity", "k": 5},
        {"name": "p-k-anonymity", "p": 2, "k": 5},
    ]
    assert specs["v1_kmember"]["options"] == {"ranges": "typed", "seeding": "furthest", "seed": 7}
    assert specs["v1_mondrian"]["models"][1] == {"name": "entropy-l-diversity", "l": 2.0}
    assert specs["v1_fulldomain"]["options"] == {
        "ranges": "typed",
        "as": "view",
        "max_suppression": 0.01,
    }
    assert specs["v1_fulldomain"]["models"][1]["name"] == "t-closeness"
    # Anatomy promised frequency l-diversity whatever its --l-kind said.
    assert specs["v1_anatomy"]["models"] == [{"name": "frequency-l-diversity", "l": 3.0}]

    for name in specs:
        code, out = cli_json(v1_dsn, "refresh", name)
        assert code == 0, (name, out)
    with psycopg.connect(v1_dsn, autocommit=True) as conn:
        sizes = conn.execute(
            "SELECT min(n) FROM (SELECT count(*) n FROM released.v1_kmember "
            "GROUP BY age, region, born) c"
        ).fetchone()[0]
        assert sizes >= 5
        # The (p,k) promise, counted here: at least 2 distinct dx per class.
        assert (
            conn.execute(
                "SELECT min(d) FROM (SELECT count(DISTINCT dx) d FROM released.v1_kmember "
                "GROUP BY age, region, born) c"
            ).fetchone()[0]
            >= 2
        )
        kind = conn.execute(
            "SELECT relkind FROM pg_class WHERE oid = 'released.v1_fulldomain'::regclass"
        ).fetchone()[0]
        assert kind == "v"
        groups = conn.execute("SELECT group_id, dx, count FROM rel2.ana_st").fetchall()
        per_group: dict[int, Counter] = {}
        for g, dx, n in groups:
            per_group.setdefault(g, Counter())[dx] += n
        assert all(max(c.values()) * 3 <= sum(c.values()) for c in per_group.values())
        # The version-1 typed ranges are kept for existing consumers.
        assert (
            conn.execute(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'released.v1_mondrian'::regclass AND attname = 'age'"
            ).fetchone()[0]
            == "int4range"
        )
    for name in specs:
        code, rep = cli_json(v1_dsn, "report", name)
        assert code == 0 and rep["method"] == specs[name]["method"] and rep["rows"], rep


def test_the_code_reads_the_head_revision() -> None:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(catalog.alembic_config("postgresql://")).get_current_head()
    assert head == catalog.REVISION


def test_downgrade_restores_version_1_specs(v1_dsn: str) -> None:
    with psycopg.connect(v1_dsn, autocommit=True) as conn:
        before = dict(conn.execute("SELECT name, spec FROM dbanon.release").fetchall())
    command.upgrade(catalog.alembic_config(v1_dsn), "0002")
    command.downgrade(catalog.alembic_config(v1_dsn), "0001")
    with psycopg.connect(v1_dsn, autocommit=True) as conn:
        after = dict(conn.execute("SELECT name, spec FROM dbanon.release").fetchall())
    for name, old in before.items():
        # l_kind of Anatomy comes back as what it promised; everything else as it was.
        expected = {**old, "l_kind": "frequency"} if old["algorithm"] == "anatomy" else old
        assert after[name] == expected, name


def test_theta_k_releases_from_before_the_paper_default_keep_the_relaxed_promise(
    dsn: str,
) -> None:
    """Revision 0013: a stored (θ,k) model without a rule was verified under the relaxed
    condition, and says so after the upgrade; one that names its rule keeps it."""
    cfg = catalog.alembic_config(dsn)
    command.downgrade(cfg, "0012")
    old = {"name": "theta-k-anonymity", "k": 12, "theta": 3, "hierarchy": "occ"}
    named = {**old, "rule": "paper"}
    spec = {"name": "tk", "version": 2, "models": [{"name": "k-anonymity", "k": 12}, old, named]}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO dbanon.release (name, spec, target_schema, target_name, objects) "
            "VALUES ('tk', %s, 'released', 'tk', '{tk}')", [json.dumps(spec)]
        )
        command.upgrade(cfg, "head")
        models = conn.execute("SELECT spec -> 'models' FROM dbanon.release").fetchone()[0]
        assert models == [spec["models"][0], {**old, "rule": "relaxed"}, named]
        command.downgrade(cfg, "0012")
        models = conn.execute("SELECT spec -> 'models' FROM dbanon.release").fetchone()[0]
        assert models == spec["models"]
        conn.execute("DELETE FROM dbanon.release")
        command.upgrade(cfg, "head")


def test_every_sql_file_is_frozen_and_read_by_a_revision() -> None:
    """sql/NNNN_name.sql is what revision NNNN installs: never edited once shipped (its hash is
    in sql/FROZEN), read by the revisions that install it, and no file is left unread."""
    import hashlib

    root = Path(__file__).resolve().parent.parent
    frozen = dict(
        reversed(line.split()) for line in (root / "sql" / "FROZEN").read_text().splitlines()
    )
    files = sorted(p.name for p in (root / "sql").glob("*.sql"))
    assert files and sorted(frozen) == files
    for name in files:
        digest = hashlib.sha256((root / "sql" / name).read_bytes()).hexdigest()
        assert digest == frozen[name], f"sql/{name} changed: add a new file and a new revision"
    migrations = "".join(p.read_text() for p in (root / "migrations" / "versions").glob("*.py"))
    for name in files:
        assert f'"{name}"' in migrations, f"sql/{name} is read by no revision"
        assert (root / "migrations" / "versions").glob(f"{name[:4]}_*.py"), name


def test_noise_maps_move_to_a_table_per_release_and_back(dsn: str) -> None:
    """Revision 0016: each release's rows of the shared dbanon.noise_map become
    dbanon.noise_map_<id>, row for row; the downgrade puts them back."""
    cfg = catalog.alembic_config(dsn)
    command.downgrade(cfg, "0015")
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [conn.execute(
            "INSERT INTO dbanon.release (name, spec, target_schema, target_name, objects) "
            "VALUES (%s, '{}', 'released', %s, ARRAY[%s]) RETURNING id", [n, n, n]
        ).fetchone()[0] for n in ("a", "b")]  # fmt: skip
        rows = [(ids[0], 10 * i + 7, f"k{i}") for i in range(50)]
        rows += [(ids[1], -(2**62) + i, f"é{i}") for i in range(30)]
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO dbanon.noise_map VALUES (%s, %s, %s)", rows)
        command.upgrade(cfg, "head")
        assert conn.execute("SELECT to_regclass('dbanon.noise_map')").fetchone()[0] is None
        for rid in ids:
            got = conn.execute(sql.SQL("SELECT row_id, key FROM {} ORDER BY row_id").format(
                sql.Identifier("dbanon", f"noise_map_{rid}"))).fetchall()  # fmt: skip
            assert got == sorted((r, k) for i, r, k in rows if i == rid)
        command.downgrade(cfg, "0015")
        back = conn.execute("SELECT * FROM dbanon.noise_map ORDER BY 1, 2").fetchall()
        assert back == sorted(rows)
        assert conn.execute("SELECT count(*) FROM pg_class WHERE relname ~ '^noise_map_[0-9]+$'"
                            ).fetchone()[0] == 0  # fmt: skip
        conn.execute("DELETE FROM dbanon.release")
        command.upgrade(cfg, "head")
