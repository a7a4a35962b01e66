"""Real PostgreSQL servers for the tests: the embedded one and, where installed, Debian's 15.

Every test that touches a database gets a fresh database cloned from a template that already has
the catalog installed, on each server (the `dsn` fixture is parametrised by server).

Hypothesis keeps the examples it found (failing ones first) in tests/.hypothesis (git-ignored),
so a failure seen once is replayed by the next run; with CI=true in the environment it is
derandomised instead (the same examples every run, no database). `HYPOTHESIS_PROFILE` or
`--hypothesis-profile` picks a profile by name ("dev" or "ci").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from psycopg import sql

from dbanon.db import catalog, server

PG15_BIN = Path("/usr/lib/postgresql/15/bin")
TEMPLATE = "dbanon_test_template"

settings.register_profile(
    "dev",
    database=DirectoryBasedExampleDatabase(Path(__file__).parent / ".hypothesis" / "examples"),
    print_blob=True,
)
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    print_blob=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE")
    or ("ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev")
)


def _as_postgres(cmd: list[str]) -> list[str]:
    """Debian's postgres refuses to run as root: run it as the postgres system user then."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@pytest.fixture(scope="session")
def embedded_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("dbanon-home")
    old = os.environ.get("DBANON_HOME")
    os.environ["DBANON_HOME"] = str(home)
    try:
        yield server.start()
    finally:
        server.stop()
        if old is None:
            os.environ.pop("DBANON_HOME", None)
        else:
            os.environ["DBANON_HOME"] = old


@pytest.fixture(scope="session")
def pg15_dsn() -> Iterator[str]:
    if not (PG15_BIN / "postgres").exists() or shutil.which("runuser") is None:
        pytest.skip("Debian's PostgreSQL 15 is not installed")
    base = Path(tempfile.mkdtemp(prefix="dbanon-pg15-"))
    data = base / "data"
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    base.chmod(0o755)
    subprocess.run(
        _as_postgres(
            [
                str(PG15_BIN / "initdb"),
                "-D",
                str(data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            ]
        ),
        check=True,
        capture_output=True,
    )
    opts = f"-k {base} -h '' -c fsync=off -c full_page_writes=off"
    subprocess.run(
        _as_postgres(
            [
                str(PG15_BIN / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                opts,
                "-l",
                str(base / "log"),
                "-w",
                "start",
            ]
        ),
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://postgres@/postgres?host={base}"
    finally:
        subprocess.run(
            _as_postgres([str(PG15_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(base, ignore_errors=True)


def _with_database(dsn: str, name: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, dbname=name)


def _make_template(admin_dsn: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [TEMPLATE]).fetchone():
            return
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    catalog.init(_with_database(admin_dsn, TEMPLATE))


@pytest.fixture(scope="session", params=["embedded", "pg15"])
def server_dsn(request: pytest.FixtureRequest) -> str:
    """An admin DSN on each real server."""
    dsn = request.getfixturevalue(f"{request.param}_dsn")
    _make_template(dsn)
    return dsn


@pytest.fixture
def dsn(server_dsn: str) -> Iterator[str]:
    """A fresh database with the catalog installed, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(TEMPLATE)
            )
        )
    try:
        yield _with_database(server_dsn, name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c
