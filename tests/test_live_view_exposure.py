"""What a consumer granted a live view sees of the rows it hides, and what stops it.

A live view runs its query over the source at every read, as its owner; PostgreSQL lets anyone
who may read the view EXPLAIN ANALYZE it, plan and row counts of every node included, and shows
every role the row and change counts of every table (pg_stat_user_tables). So granting a live
view is opt-in (--grant-live), and docs/live-views.md gives the role setup that hides the plan:
a SECURITY DEFINER function over the view (never inlined: EXPLAIN shows one Function Scan).
The findings are checked here with plain SQL as the consumer, importing nothing of dbanon."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from helpers import cli_json, make_table, snapshot
from psycopg import sql

DX = ["flu", "asthma", "diabetes", "cancer"]


@pytest.fixture
def consumer(conn: psycopg.Connection) -> Iterator[str]:
    rng = random.Random(3)
    rows = [(i, rng.randint(20, 79), rng.choice("NSEW"), rng.choice(DX)) for i in range(1, 201)]
    rows.append((999, 99, "Z", "rare"))  # a class of one: every release hides it
    make_table(
        conn, "h", "ward",
        [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("dx", "text")], rows,
    )  # fmt: skip
    role = f"consumer_{uuid.uuid4().hex[:8]}"
    conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    yield role
    conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def publish_view(dsn: str, role: str, *extra: str) -> tuple[int, dict]:
    return cli_json(dsn, "publish", "live", "--source", "h.ward", "--key", "id",
                    "--qi", "age,region", "--algorithm", "fulldomain", "--k", "4",
                    "--max-suppression", "0.1", "--as", "view", "--grant", role,
                    *extra)  # fmt: skip


def as_consumer(dsn: str, role: str) -> psycopg.Connection:
    c = psycopg.connect(dsn, autocommit=True)
    c.execute(sql.SQL("SET SESSION AUTHORIZATION {}").format(sql.Identifier(role)))
    return c


def scanned(plan: dict[str, Any], relation: str) -> list[float]:
    """Actual rows of every scan of `relation` in an EXPLAIN (ANALYZE, FORMAT JSON) plan."""
    out = [plan["Actual Rows"]] if plan.get("Relation Name") == relation else []
    for child in plan.get("Plans", []):
        out += scanned(child, relation)
    return out


def explain(c: psycopg.Connection, query: str) -> dict[str, Any]:
    return c.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}").fetchone()[0][0]["Plan"]


def test_granting_a_live_view_is_opt_in(
    conn: psycopg.Connection, dsn: str, consumer: str
) -> None:
    before = snapshot(conn)
    code, out = publish_view(dsn, consumer)
    assert code == 2 and "--grant-live" in out["error"] and "EXPLAIN" in out["error"], out
    assert snapshot(conn) == before  # refused before anything was made
    code, out = cli_json(dsn, "publish", "live", "--source", "h.ward", "--key", "id",
                         "--qi", "age,region", "--algorithm", "fulldomain", "--k", "4",
                         "--max-suppression", "0.1", "--as", "view")  # fmt: skip
    assert code == 0, out
    code, out = cli_json(dsn, "grant", "live", consumer)
    assert code == 2 and "--grant-live" in out["error"], out
    granted = "SELECT has_table_privilege(%s, 'released.live', 'SELECT')"
    assert not conn.execute(granted, [consumer]).fetchone()[0]
    assert cli_json(dsn, "grant", "live", consumer, "--grant-live")[0] == 0
    assert conn.execute(granted, [consumer]).fetchone()[0]
    # A refresh keeps the grants it has: nothing new to opt into.
    assert cli_json(dsn, "refresh", "live")[0] == 0
    # A materialised release is granted as before.
    code, out = cli_json(dsn, "publish", "mat", "--source", "h.ward", "--key", "id",
                         "--qi", "age,region", "--algorithm", "fulldomain", "--k", "4",
                         "--max-suppression", "0.1", "--grant", consumer)  # fmt: skip
    assert code == 0, out


def test_what_a_consumer_of_a_live_view_sees_of_hidden_rows(
    conn: psycopg.Connection, dsn: str, consumer: str
) -> None:
    code, out = publish_view(dsn, consumer, "--grant-live")
    assert code == 0, out
    conn.execute("ANALYZE h.ward")
    with as_consumer(dsn, consumer) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT count(*) FROM h.ward")
        shown = c.execute("SELECT count(*) FROM released.live").fetchone()[0]
        assert shown < 201  # the class of one (at least) is suppressed
        # The plan counts the source rows behind the view: the suppressed ones too (a scan of
        # the whole source; the view may read it more than once, as it does to count classes).
        plan = explain(c, "SELECT * FROM released.live")
        assert plan["Actual Rows"] == shown and max(scanned(plan, "ward")) == 201
        # A filter on the consumer's guess (here, the hidden region Z) is evaluated with the
        # suppression, in one filter: the plan shows no row of Z, and the whole source again.
        query = "SELECT * FROM released.live WHERE region = 'Z'"
        assert c.execute(query).fetchall() == []
        plan = explain(c, query)
        assert plan["Actual Rows"] == 0 and sorted(scanned(plan, "ward")) == [0, 201]
        # Statistics of every table, the source's included: its row and change counts.
        seen = c.execute(
            "SELECT n_live_tup FROM pg_stat_user_tables WHERE schemaname = 'h' "
            "AND relname = 'ward'"
        ).fetchone()
        assert seen is not None
        assert c.execute(
            "SELECT c.reltuples FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'h' AND c.relname = 'ward'"
        ).fetchone()[0] == 201  # fmt: skip


WRAPPER = """
CREATE SCHEMA {shared};
CREATE FUNCTION {shared}.live_rows() RETURNS TABLE (age text, region text)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$ SELECT age, region FROM released.live $$;
REVOKE ALL ON FUNCTION {shared}.live_rows() FROM PUBLIC;
CREATE VIEW {shared}.live AS SELECT * FROM {shared}.live_rows();
GRANT USAGE ON SCHEMA {shared} TO {role};
GRANT EXECUTE ON FUNCTION {shared}.live_rows() TO {role};
GRANT SELECT ON {shared}.live TO {role};
"""


def test_the_documented_role_setup_hides_the_plan(
    conn: psycopg.Connection, dsn: str, consumer: str
) -> None:
    """docs/live-views.md: the view itself is not granted; a SECURITY DEFINER function that
    reads it is, through a view of its own. Refreshes go on under it."""
    code, out = cli_json(dsn, "publish", "live", "--source", "h.ward", "--key", "id",
                         "--qi", "age,region", "--algorithm", "fulldomain", "--k", "4",
                         "--max-suppression", "0.1", "--as", "view")  # fmt: skip
    assert code == 0, out
    conn.execute(sql.SQL(WRAPPER).format(shared=sql.Identifier("shared"),
                                         role=sql.Identifier(consumer)))  # fmt: skip
    assert cli_json(dsn, "refresh", "live")[0] == 0  # the wrapper does not pin the view
    with as_consumer(dsn, consumer) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT count(*) FROM released.live")
        shown = c.execute("SELECT count(*) FROM shared.live").fetchone()[0]
        assert shown < 201
        for query in ("SELECT * FROM shared.live WHERE region = 'Z'", "SELECT * FROM shared.live"):
            plan = explain(c, query)
            assert scanned(plan, "ward") == []
            assert plan["Node Type"] == "Function Scan" and not plan.get("Plans"), plan
            assert plan["Actual Rows"] == (0 if "WHERE" in query else shown)
        # What it removes by the consumer's own filter is what the consumer can count anyway.
        assert explain(c, "SELECT * FROM shared.live WHERE region = 'Z'")[
            "Rows Removed by Filter"
        ] == shown  # fmt: skip
