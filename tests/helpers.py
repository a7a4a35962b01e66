"""Shared test helpers: tables from Python rows, the CLI in-process, database snapshots."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from click.testing import CliRunner, Result
from psycopg import sql

from dbanon.cli import main


def make_table(
    conn: psycopg.Connection,
    schema: str,
    table: str,
    columns: Sequence[tuple[str, str]],
    rows: Sequence[Sequence[Any]],
) -> None:
    """CREATE schema.table (columns as (name, type)) and COPY the rows in."""
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    conn.execute(
        sql.SQL("CREATE TABLE {} ({})").format(
            sql.Identifier(schema, table),
            sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in columns
            ),
        )
    )
    with (
        conn.cursor() as cur,
        cur.copy(
            sql.SQL("COPY {} ({}) FROM STDIN").format(
                sql.Identifier(schema, table),
                sql.SQL(", ").join(sql.Identifier(n) for n, _ in columns),
            )
        ) as copy,
    ):
        for row in rows:
            copy.write_row(row)


def cli(dsn: str, *args: str) -> Result:
    """Run `dbanon --dsn DSN ARGS...` in-process."""
    return CliRunner().invoke(main, ["--dsn", dsn, *args], catch_exceptions=False)


def cli_json(dsn: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = cli(dsn, "--json", *args)
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else {}


def snapshot(conn: psycopg.Connection) -> dict[str, Any]:
    """Every user schema, relation (with a digest of its rows) and function in the database."""
    rels = conn.execute(
        """SELECT n.nspname, c.relname, c.relkind FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
             AND n.nspname NOT LIKE 'pg_temp%%' AND n.nspname NOT LIKE 'pg_toast_temp%%'
           ORDER BY 1, 2"""
    ).fetchall()
    state: dict[str, Any] = {
        "schemas": conn.execute(
            "SELECT array_agg(nspname ORDER BY nspname) FROM pg_namespace"
        ).fetchone()[0],
        "functions": conn.execute(
            "SELECT array_agg(oid::regprocedure::text ORDER BY 1) FROM pg_proc "
            "WHERE pronamespace NOT IN ('pg_catalog'::regnamespace, "
            "'information_schema'::regnamespace)"
        ).fetchone()[0],
        "relations": {},
    }
    for schema, name, kind in rels:
        ident = sql.Identifier(schema, name)
        if kind in ("r", "v", "m"):
            digest = conn.execute(
                sql.SQL(
                    "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), "
                    "'')) FROM {} t"
                ).format(ident)
            ).fetchone()
        else:
            digest = None
        state["relations"][f"{schema}.{name}"] = (kind, digest)
    return state


def stored_kind(conn: psycopg.Connection, relation: str) -> str | None:
    """The relkind of what a released view reads in the private store (r: a materialised
    release, v: a live view), None when it reads nothing there."""
    row = conn.execute(
        """SELECT DISTINCT c.relkind FROM pg_rewrite rw
           JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = rw.oid
           JOIN pg_class c ON c.oid = d.refobjid JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE rw.ev_class = %s::regclass AND n.nspname = 'dbanon_store'""",
        [relation],
    ).fetchone()
    return row[0] if row else None


def stray_builds(conn: psycopg.Connection) -> list[str]:
    """Build relations that no released view reads: what a failed or killed run left behind."""
    return [r for (r,) in conn.execute(
        """SELECT n.nspname || '.' || c.relname FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE c.relname LIKE 'dbanon\\_build%%' AND c.relkind IN ('r', 'v', 'm')
             AND NOT EXISTS (
                 SELECT FROM pg_depend d JOIN pg_rewrite rw ON rw.oid = d.objid
                 WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = c.oid
                   AND rw.ev_class <> c.oid)
           ORDER BY 1"""
    )]  # fmt: skip


def noise_map(conn: psycopg.Connection, release: str) -> sql.Identifier:
    """The private row map (row_id -> key) of perturbation release `release`."""
    rid = conn.execute("SELECT id FROM dbanon.release WHERE name = %s", [release]).fetchone()[0]
    return sql.Identifier("dbanon", f"noise_map_{rid}")
