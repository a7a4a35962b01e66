"""No object a consumer builds over a release can stop its refresh.

Every role has TEMP, and a consumer with a schema of its own can build views, materialised views
and functions over what it is granted. When the release was a table in the release schema, the
refresh dropped it, and any such object made the refresh fail ("cannot drop table ... because
other objects depend on it") for as long as it lived. Here a consumer holds all four over every
method's release (an idle session keeps its temporary view), the source changes, and the refresh
must succeed with every reader seeing the new release through what it built.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from helpers import cli_json, snapshot
from psycopg import sql

from dbanon.bench import scale as bench_scale

ROWS = 1500


@pytest.fixture
def census(conn: psycopg.Connection, dsn: str) -> Iterator[tuple[str, str]]:
    """The bench's census table (small), its flags, and a consumer role with a schema of its
    own (as a DBA gives an analyst a sandbox)."""
    src = bench_scale.make_table(conn, ROWS)
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(bench_scale.OUT)))
    conn.commit()
    flags = bench_scale.prepare(conn, dsn, ROWS, src)
    role = f"analyst_{uuid.uuid4().hex[:8]}"
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    conn.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
        sql.Identifier(role), sql.Identifier(role)))  # fmt: skip
    conn.commit()
    yield role, flags
    conn.rollback()
    conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def state(conn: psycopg.Connection) -> dict:
    """The database but the run trail (a refused run is recorded, as it should be)."""
    snap = snapshot(conn)
    snap["relations"].pop("dbanon.run", None)
    return snap


def as_role(dsn: str, role: str) -> psycopg.Connection:
    c = psycopg.connect(dsn, autocommit=True)
    c.execute(sql.SQL("SET SESSION AUTHORIZATION {}").format(sql.Identifier(role)))
    return c


def publish(dsn: str, method: str, name: str, flags: str, role: str, *more: str) -> dict:
    setup = bench_scale.SETUPS[method]
    args = ["publish", name, "--source", f"{bench_scale.SCHEMA}.census_{ROWS}", "--key", "id"]
    if method not in ("ina", "noise"):
        args += ["--qi", ",".join(bench_scale.QI)]
    args += [*setup.args(5, 2, flags), "--target", f"{bench_scale.OUT}.{name}", "--grant", role]
    code, out = cli_json(dsn, *args, *more)
    assert code == 0, out
    return out


def build_over(consumer: psycopg.Connection, role: str, objects: list[str]) -> list[str]:
    """The consumer's temporary view, view, materialised view and two functions (one over the
    row type, one reading the release in its body) over each released object; returns the
    relations it reads them through."""
    mine = []
    for i, obj in enumerate(objects):
        schema, name = obj.split(".")
        rel = sql.Identifier(schema.strip('"'), name.strip('"'))
        own = sql.Identifier(role, f"v{i}")
        consumer.execute(sql.SQL("CREATE TEMP VIEW {} AS SELECT * FROM {}").format(
            sql.Identifier(f"tv{i}"), rel))  # fmt: skip
        consumer.execute(sql.SQL("CREATE VIEW {} AS SELECT * FROM {}").format(own, rel))
        consumer.execute(sql.SQL("CREATE MATERIALIZED VIEW {} AS SELECT * FROM {}").format(
            sql.Identifier(role, f"mv{i}"), rel))  # fmt: skip
        consumer.execute(sql.SQL(
            "CREATE FUNCTION {}() RETURNS SETOF {} LANGUAGE sql BEGIN ATOMIC SELECT * FROM {}; END"
        ).format(sql.Identifier(role, f"f{i}"), rel, rel))  # fmt: skip
        consumer.execute(sql.SQL(
            "CREATE FUNCTION {}() RETURNS bigint LANGUAGE plpgsql AS "
            "$$BEGIN RETURN (SELECT count(*) FROM {}); END$$"
        ).format(sql.Identifier(role, f"g{i}"), rel))  # fmt: skip
        mine.append((f"tv{i}", own, sql.Identifier(role, f"f{i}"), sql.Identifier(role, f"g{i}")))
    return mine


def counts(c: psycopg.Connection, objects: list[str], mine: list) -> list[tuple[int, ...]]:
    """Rows of each released object as read directly and through each consumer object."""
    out = []
    for obj, (tv, own, f, g) in zip(objects, mine, strict=True):
        schema, name = obj.split(".")
        rel = sql.Identifier(schema.strip('"'), name.strip('"'))
        out.append(tuple(
            c.execute(q).fetchone()[0] for q in (
                sql.SQL("SELECT count(*) FROM {}").format(rel),
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(tv)),
                sql.SQL("SELECT count(*) FROM {}").format(own),
                sql.SQL("SELECT count(*) FROM {}()").format(f),
                sql.SQL("SELECT {}()").format(g),
            )
        ))  # fmt: skip
    return out


@pytest.mark.parametrize(
    "method", ["mondrian", "kmember", "fulldomain", "fulldomain_view", "anatomy", "thetak",
               "cbg", "localanatomy", "lag", "ina", "noise", "rfka", "hamdist_view"],
)  # fmt: skip
def test_a_consumers_objects_never_stop_a_refresh(
    conn: psycopg.Connection, dsn: str, census: tuple[str, str], method: str
) -> None:
    role, flags = census
    live = ("--grant-live",) if method.endswith("_view") else ()  # granted knowingly
    out = publish(dsn, method, f"c_{method}", flags, role, *live)
    objects = out["objects"]
    with as_role(dsn, role) as consumer:  # idle, holding its temporary views
        mine = build_over(consumer, role, objects)
        before = counts(consumer, objects, mine)
        assert all(len(set(c)) == 1 for c in before), before
        conn.execute(sql.SQL("DELETE FROM {} WHERE id % 10 = 3").format(
            bench_scale.table(ROWS)))  # fmt: skip
        conn.commit()
        code, out = cli_json(dsn, "refresh", f"c_{method}")
        assert code == 0, out
        after = counts(consumer, objects, mine)
        # readers see the new release through everything they built, and it is a new one
        assert all(len(set(c)) == 1 for c in after), after
        assert after != before
        # their materialised views are theirs to refresh, and they still can
        for i in range(len(objects)):
            consumer.execute(sql.SQL("REFRESH MATERIALIZED VIEW {}").format(
                sql.Identifier(role, f"mv{i}")))  # fmt: skip
        # the relations behind the release are out of the consumer's reach
        hidden = conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'dbanon_store' "
            "AND has_table_privilege(%s, c.oid, 'SELECT')", [role]
        ).fetchone()[0]  # fmt: skip
        assert hidden == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            consumer.execute("CREATE TEMP VIEW peek AS SELECT * FROM dbanon_store.x")
    conn.commit()


def test_a_refresh_leaves_no_relation_behind(
    conn: psycopg.Connection, dsn: str, census: tuple[str, str]
) -> None:
    """Each refresh drops the relation the view read before: the store holds one per object."""
    role, flags = census
    out = publish(dsn, "anatomy", "c_store", flags, role)
    for _ in range(3):
        assert cli_json(dsn, "refresh", "c_store")[0] == 0
    stored = conn.execute(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'dbanon_store' AND c.relkind IN ('r', 'v')"
    ).fetchone()[0]
    assert stored == len(out["objects"])


def test_other_columns_with_a_consumers_view_name_it_and_keep_the_release(
    conn: psycopg.Connection, dsn: str, census: tuple[str, str]
) -> None:
    """PostgreSQL cannot re-point a view at other columns: the run names what stops it and the
    previous release stays whole."""
    role, flags = census
    out = publish(dsn, "mondrian", "c_cols", flags, role)
    with as_role(dsn, role) as consumer:
        consumer.execute(sql.SQL("CREATE VIEW {} AS SELECT * FROM {}.c_cols").format(
            sql.Identifier(role, "mine"), sql.Identifier(bench_scale.OUT)))  # fmt: skip
        before = state(conn)
        code, err = cli_json(
            dsn, "publish", "c_cols", "--replace", "--source",
            f"{bench_scale.SCHEMA}.census_{ROWS}", "--key", "id", "--qi", "age,sex",
            "--algorithm", "mondrian", "--k", "5", "--target", f"{bench_scale.OUT}.c_cols",
            "--allow-composition",
        )  # fmt: skip
        assert code != 0
        assert f"view {role}.mine (owner {role})" in err["error"], err
        assert state(conn) == before
        code, dropped = cli_json(dsn, "drop", "c_cols", "--yes")
        assert code != 0 and f"view {role}.mine (owner {role})" in dropped["error"]
        assert state(conn) == before
        consumer.execute(sql.SQL("DROP VIEW {}").format(sql.Identifier(role, "mine")))
    assert out["objects"]
    assert cli_json(dsn, "drop", "c_cols", "--yes")[0] == 0
    assert conn.execute(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'dbanon_store'"
    ).fetchone()[0] == 0


def test_a_release_published_as_a_table_becomes_a_view_at_its_refresh(
    conn: psycopg.Connection, dsn: str, census: tuple[str, str]
) -> None:
    """A release made before the store (a table in the release schema) is replaced by a view at
    its first refresh, and from then on a consumer's objects no longer stop it."""
    role, flags = census
    publish(dsn, "mondrian", "c_old", flags, role)
    out_schema = sql.Identifier(bench_scale.OUT)
    # as the release was before revision 0012: its table in the release schema, commented
    (stored,) = conn.execute(
        "SELECT c.relname FROM pg_rewrite rw JOIN pg_depend d ON d.objid = rw.oid "
        "JOIN pg_class c ON c.oid = d.refobjid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE rw.ev_class = %s::regclass AND n.nspname = 'dbanon_store' LIMIT 1",
        [f"{bench_scale.OUT}.c_old"],
    ).fetchone()
    comment = conn.execute(
        "SELECT obj_description(%s::regclass, 'pg_class')", [f"{bench_scale.OUT}.c_old"]
    ).fetchone()[0]
    conn.execute(sql.SQL("DROP VIEW {}.c_old").format(out_schema))
    conn.execute(sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(
        sql.Identifier("dbanon_store", stored), out_schema))  # fmt: skip
    conn.execute(sql.SQL("ALTER TABLE {} RENAME TO c_old").format(
        sql.Identifier(bench_scale.OUT, stored)))  # fmt: skip
    conn.execute(sql.SQL("COMMENT ON TABLE {}.c_old IS {}").format(
        out_schema, sql.Literal(comment)))  # fmt: skip
    conn.execute(sql.SQL("GRANT SELECT ON {}.c_old TO {}").format(
        out_schema, sql.Identifier(role)))  # fmt: skip
    conn.commit()
    assert cli_json(dsn, "refresh", "c_old")[0] == 0
    kind = conn.execute(
        "SELECT relkind FROM pg_class WHERE oid = %s::regclass", [f"{bench_scale.OUT}.c_old"]
    ).fetchone()[0]
    assert kind == "v"
    with as_role(dsn, role) as consumer:
        consumer.execute("CREATE TEMP VIEW tv AS SELECT * FROM dbanon_bench_scale_out.c_old")
        assert cli_json(dsn, "refresh", "c_old")[0] == 0
        assert consumer.execute("SELECT count(*) FROM tv").fetchone()[0] == ROWS


def test_downgrade_puts_each_release_back_as_a_table_and_upgrade_takes_it_on(
    conn: psycopg.Connection, dsn: str, census: tuple[str, str]
) -> None:
    """Revision 0012's downgrade moves each release's relation to its view's place (rows,
    comment, grants), as earlier revisions kept it; after the upgrade a refresh makes it a view
    again."""
    from alembic import command

    from dbanon.db import catalog

    role, flags = census
    publish(dsn, "anatomy", "c_mig", flags, role)
    rel = f"{bench_scale.OUT}.c_mig_qit"
    digest = "SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) FROM {} t"
    before = conn.execute(sql.SQL(digest).format(sql.SQL(rel))).fetchone()[0]
    conn.commit()
    command.downgrade(catalog.alembic_config(dsn), "0011")
    kind, note, readable = conn.execute(
        "SELECT relkind, obj_description(oid, 'pg_class'), "
        "has_table_privilege(%s, oid, 'SELECT') FROM pg_class WHERE oid = %s::regclass",
        [role, rel],
    ).fetchone()
    assert kind == "r" and note.startswith("dbanon release 'c_mig':") and readable
    assert conn.execute(sql.SQL(digest).format(sql.SQL(rel))).fetchone()[0] == before
    assert conn.execute("SELECT to_regnamespace('dbanon_store')").fetchone()[0] is None
    conn.commit()
    command.upgrade(catalog.alembic_config(dsn), "head")
    assert cli_json(dsn, "refresh", "c_mig")[0] == 0
    kind = conn.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", [rel])
    assert kind.fetchone()[0] == "v"
