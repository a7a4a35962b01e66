"""The environment (issue 19, item 9): libpq variables that point elsewhere do not move dbanon's
embedded server or misdirect its clients; libpq's environment picks the server when it names one
(after --dsn and DBANON_DSN); `uninstall` removes every release and then the catalog; `alembic
downgrade base` refuses while releases exist.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from dbanon.cli import main
from dbanon.db import server
from tests.helpers import cli_json, make_table, snapshot

ROOT = Path(__file__).resolve().parents[1]
WRONG = {  # what a DBA's shell may export for some other server
    "PGPORT": "1",
    "PGUSER": "someone_else",
    "PGDATABASE": "elsewhere",
    "PGOPTIONS": "-c search_path=nowhere",
    "PGCONNECT_TIMEOUT": "2",
}
# Commands that take minutes (benchmarks, experiments, the demo) or need a method's own data.
NOT_RUN = {"bench", "experiment", "demo", "flags generate", "docs"}  # docs: files, no database


def _commands(group: click.Group, prefix: str = "") -> set[str]:
    out = set()
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        full = f"{prefix}{name}"
        if full in NOT_RUN:
            continue
        out |= _commands(cmd, f"{full} ") if isinstance(cmd, click.Group) else {full}
    return out


@pytest.fixture
def wrong_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A DBANON_HOME of its own (a new embedded server) under misleading PG* variables."""
    home = tmp_path / "home"
    monkeypatch.setenv("DBANON_HOME", str(home))
    for var in ("DBANON_DSN", "PGHOST", "PGHOSTADDR", "PGSERVICE"):
        monkeypatch.delenv(var, raising=False)
    for var, value in WRONG.items():
        monkeypatch.setenv(var, value)
    try:
        yield home
    finally:
        server.stop()


def run(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["--json", *args], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else {}


def test_every_command_works_against_the_embedded_server_under_a_wrong_pgport(
    wrong_env: Path, tmp_path: Path
) -> None:
    done: set[str] = set()

    def ok(*args: str) -> dict:
        code, out = run(*args)
        assert code == 0, (args, out)
        words = [a for a in args if not a.startswith("-")]
        done.add(" ".join(words[:2]) if " ".join(words[:2]) in commands else words[0])
        return out

    commands = _commands(main)
    url = ok("server", "url")
    assert (
        url["source"].startswith("embedded server") and conninfo_to_dict(url["dsn"])["port"] != "1"
    )
    with psycopg.connect(url["dsn"], autocommit=True) as conn:
        assert conn.execute("SHOW port").fetchone()[0] == "5432"  # not PGPORT's
        make_table(
            conn, "s", "t", [("id", "int"), ("age", "int"), ("zip", "text"), ("dx", "int")],
            [(i, 20 + i % 40, f"z{i % 9}", i % 4) for i in range(400)],
        )  # fmt: skip
        conn.execute("CREATE ROLE reader_env")
    hfile = tmp_path / "zip.csv"
    hfile.write_text("".join(f"z{i};z*;*\n" for i in range(9)))
    ok("init")
    ok("methods")
    ok("hierarchy", "import", "zips", str(hfile))
    ok("hierarchy", "list")
    ok("hierarchy", "show", "zips")
    ok("check", "s.t", "--qi", "age,zip", "--k", "1")
    ok("publish", "r", "--source", "s.t", "--key", "id", "--qi", "age,zip", "--sensitive", "dx",
       "--k", "5", "--algorithm", "mondrian")  # fmt: skip
    ok("refresh", "r")
    ok("releases")
    ok("report", "r")
    ok("show", "r")
    ok("grant", "r", "reader_env")
    ok("revoke", "r", "reader_env")
    ok("evaluate", "r", "--queries", "20")
    ok("budget", "s.t", "--epsilon", "2")
    ok("publish", "p", "--source", "s.t", "--key", "id", "--columns", "age,dx",
       "--algorithm", "ina", "--sample", "100")  # fmt: skip
    ok("compare", "s.t", "p", "--columns", "age,dx", "--clusters", "2")
    spec = tmp_path / "releases.toml"
    ok("export", "r", "--output", str(spec))
    ok("apply", str(spec), "--plan")
    ok("apply", str(spec))
    ok("schedule", "set", "r", "--every", "1 hour")
    ok("schedule", "list")
    ok("refresh", "--due")
    ok("schedule", "install", "--cron")
    ok("schedule", "clear", "r")
    ok("drop", "p", "--yes")
    ok("hierarchy", "drop", "zips")
    ok("uninstall", "--yes")
    ok("server", "status")
    ok("server", "stop")
    assert done >= commands, f"not run under the wrong PGPORT: {sorted(commands - done)}"


def test_libpq_environment_picks_the_server_after_dsn_and_dbanon_dsn(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PGHOST/PGPORT/PGDATABASE/PGUSER as psql reads them, when no DSN is given; DBANON_DSN and
    --dsn still win. The embedded server stays the last resort."""
    params = conninfo_to_dict(dsn)
    monkeypatch.delenv("DBANON_DSN", raising=False)
    monkeypatch.setenv("PGHOST", params["host"])
    monkeypatch.setenv("PGPORT", params.get("port", "5432"))
    monkeypatch.setenv("PGDATABASE", params["dbname"])
    monkeypatch.setenv("PGUSER", params["user"])
    code, out = run("server", "url")
    assert code == 0 and out["source"].startswith("libpq environment (PGHOST=")
    assert conninfo_to_dict(out["dsn"])["dbname"] == params["dbname"]
    assert out["precedence"].startswith("--dsn, then DBANON_DSN, then libpq")
    assert run("init")[0] == 0  # the catalog of this very database
    assert run("releases") == (0, {"releases": []})
    monkeypatch.setenv("DBANON_DSN", "host=/nonexistent dbname=x")
    code, out = run("server", "url")
    assert out["source"] == "DBANON_DSN" and out["dsn"] == "host=/nonexistent dbname=x"
    code, out = cli_json(dsn, "server", "url")
    assert out["source"] == "--dsn"


def test_a_service_file_picks_the_server(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    params = conninfo_to_dict(dsn)
    services = tmp_path / "pg_service.conf"
    services.write_text(
        "[dbanon_here]\n"
        + "".join(f"{k}={params[k]}\n" for k in ("host", "port", "dbname", "user") if k in params)
    )
    monkeypatch.delenv("DBANON_DSN", raising=False)
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    monkeypatch.setenv("PGSERVICE", "dbanon_here")
    code, out = run("server", "url")
    assert code == 0 and out["source"] == "libpq environment (PGSERVICE=dbanon_here)"
    assert run("releases") == (0, {"releases": []})


@pytest.fixture
def bare(server_dsn: str) -> Iterator[str]:
    """A database without the catalog (cloned from template0), dropped after the test."""
    name = f"bare_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        yield psycopg.conninfo.make_conninfo(server_dsn, dbname=name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_uninstall_leaves_the_database_as_before_init(bare: str) -> None:
    with psycopg.connect(bare, autocommit=True) as conn:
        make_table(
            conn, "s", "t", [("id", "int"), ("age", "int"), ("zip", "text")],
            [(i, 20 + i % 40, f"z{i % 9}") for i in range(300)],
        )  # fmt: skip
        conn.execute("CREATE SCHEMA released")  # the DBA's: dbanon must leave it
        before = snapshot(conn)
    assert cli_json(bare, "init")[0] == 0
    for name, method in (("a", "mondrian"), ("b", "kmember")):
        code, out = cli_json(bare, "publish", name, "--source", "s.t", "--key", "id", "--qi",
                             "age,zip", "--k", "5", "--algorithm", method)  # fmt: skip
        assert code == 0, out
    assert cli_json(bare, "uninstall")[0] == 2  # nobody to ask: --yes needed, nothing dropped
    code, out = cli_json(bare, "uninstall", "--yes")
    assert code == 0, out
    assert out["releases"] == {"a": ["released.a"], "b": ["released.b"]}
    assert out["schemas_left"] == ["released"]
    with psycopg.connect(bare) as conn:
        after = snapshot(conn)
    # (PostgreSQL keeps the namespaces of temporary tables once made: they are not dbanon's)
    after["schemas"] = [s for s in after["schemas"] if not s.startswith(("pg_temp", "pg_toast_"))]
    assert after == before
    code, out = cli_json(bare, "uninstall", "--yes")
    assert code == 2 and "no dbanon catalog" in out["error"]


def test_uninstall_refuses_when_a_release_name_was_taken_over(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_table(conn, "s", "t", [("id", "int"), ("age", "int")],
                   [(i, 20 + i % 40) for i in range(100)])  # fmt: skip
    for name in ("a", "b"):
        code, out = cli_json(dsn, "publish", name, "--source", "s.t", "--key", "id", "--qi",
                             "age", "--k", "5", "--algorithm", "mondrian")  # fmt: skip
        assert code == 0, out
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP VIEW released.b")
        conn.execute("CREATE TABLE released.b (x int)")  # someone else's now
        before = snapshot(conn)
    code, out = cli_json(dsn, "uninstall", "--yes")
    assert code == 2 and "released.b is not the relation release 'b' published" in out["error"]
    with psycopg.connect(dsn) as conn:
        assert snapshot(conn) == before


def test_alembic_downgrade_base_refuses_while_releases_exist(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_table(conn, "s", "t", [("id", "int"), ("age", "int")],
                   [(i, 20 + i % 40) for i in range(100)])  # fmt: skip
    assert cli_json(dsn, "publish", "kept", "--source", "s.t", "--key", "id", "--qi", "age",
                    "--k", "5", "--algorithm", "mondrian")[0] == 0  # fmt: skip
    with psycopg.connect(dsn) as conn:
        before = snapshot(conn)
    env = {**os.environ, "DBANON_DSN": dsn}
    alembic = [sys.executable, "-m", "alembic", "downgrade", "base"]
    done = subprocess.run(alembic, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "1 release(s) exist ('kept'): `dbanon uninstall` drops them" in said
    assert "Traceback" not in said
    with psycopg.connect(dsn) as conn:
        assert snapshot(conn) == before
    assert cli_json(dsn, "drop", "kept", "--yes")[0] == 0
    done = subprocess.run(alembic, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT to_regnamespace('dbanon')").fetchone()[0] is None
