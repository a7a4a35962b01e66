"""`schedule install`: the job it prints reaches the server the installing command reached, with
no password in the crontab or the units (issue 19, item 3).

The cron line is run as cron would: the part after the five time fields, cron's `\\%` undone,
through `sh -c` with an almost empty environment. Success is read from the database: the release
the job must refresh has a new run.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dbanon.cli import main
from tests.conftest import PG15_BIN, TEMPLATE, _as_postgres
from tests.helpers import cli_json, make_table

PASSWORD = "s3cr%t:pa\\ss"


def _runs(dsn: str, name: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT count(*) FROM dbanon.run u JOIN dbanon.release r ON r.id = u.release_id "
            "WHERE r.name = %s",
            [name],
        ).fetchone()[0]


def _scheduled_release(dsn: str, name: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_table(
            conn, "s", name, [("id", "int"), ("age", "int"), ("zip", "text")],
            [(i, 20 + i % 30, f"z{i % 7}") for i in range(200)],
        )  # fmt: skip
    code, out = cli_json(
        dsn, "publish", name, "--source", f"s.{name}", "--key", "id", "--qi", "age,zip",
        "--k", "5", "--algorithm", "mondrian",
    )  # fmt: skip
    assert code == 0, out
    assert cli_json(dsn, "schedule", name, "--every", "1 hour")[0] == 0
    with psycopg.connect(dsn) as conn:  # due: its latest run is two hours old
        conn.execute(
            "UPDATE dbanon.run SET started_at = started_at - interval '2 hours' WHERE release_id "
            "= (SELECT id FROM dbanon.release WHERE name = %s)",
            [name],
        )


def _run_cron_line(line: str, home: Path) -> subprocess.CompletedProcess[str]:
    """Run a crontab line's command the way cron does: /bin/sh -c, `\\%` unescaped (an unescaped
    % would end the command), in cron's bare environment."""
    command = line.split(None, 5)[5].rstrip("\n")
    assert "%" not in command.replace("\\%", ""), "an unescaped % would cut the command"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "SHELL": "/bin/sh", "LANG": "C.UTF-8"}
    return subprocess.run(
        ["/bin/sh", "-c", command.replace("\\%", "%")], env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def _entry(dsn: str, password: str) -> str:
    """The passfile line libpq matches for `dsn`, worked out here from the server's own answer
    (a socket in libpq's default directory is `localhost`; /var/run/postgresql on this build)."""
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace(":", "\\:")

    with psycopg.connect(dsn) as conn:
        host = conn.info.host
        if host in ("", "/var/run/postgresql", "/run/postgresql"):
            host = "localhost"
        fields = [host, str(conn.info.port), conn.info.dbname, conn.info.user, password]
    return ":".join(esc(f) for f in fields) + "\n"


def _no_password_in(paths: list[Path], password: str) -> None:
    for path in paths:
        assert password not in path.read_text(), f"the password is in {path}"


@pytest.fixture
def percent_dsn(server_dsn: str) -> Iterator[str]:
    """A database whose name has a % (cron would cut the line there), on each server, reached
    with a DSN that carries a password (trust servers ignore it; the passfile test needs one)."""
    name = f"t%{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(TEMPLATE)
            )
        )
    try:
        yield make_conninfo(server_dsn, dbname=name, password=PASSWORD)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_cron_line_for_a_dsn_reaches_it_without_the_password(
    percent_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    _scheduled_release(percent_dsn, "cronned")
    before = _runs(percent_dsn, "cronned")
    code, out = cli_json(percent_dsn, "schedule", "install", "--cron", "--save-password")
    assert code == 0, out
    line = out["cron"]
    assert PASSWORD not in line and "\\%" in line
    passfile = Path(out["secrets"][0])
    assert stat.S_IMODE(passfile.stat().st_mode) == 0o600
    assert passfile.read_text() == _entry(percent_dsn, PASSWORD)
    done = _run_cron_line(line, tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr)
    log = (tmp_path / "dbanon-refresh.log").read_text()
    assert '"release": "cronned"' in log, log
    assert _runs(percent_dsn, "cronned") == before + 1  # the job reached this very database


def test_cron_line_for_the_embedded_server_carries_its_home(
    embedded_dsn: str, tmp_path: Path
) -> None:
    """No DSN: the job must reach the embedded server of this DBANON_HOME (the session's), not
    the default one of the user cron runs as."""
    env = {k: v for k, v in os.environ.items() if k != "DBANON_DSN" and not k.startswith("PG")}
    db = conninfo_to_dict(embedded_dsn)["dbname"]
    assert db == "dbanon"
    from dbanon.db import catalog

    catalog.init(embedded_dsn)
    name = f"home_{uuid.uuid4().hex[:8]}"
    _scheduled_release(embedded_dsn, name)
    try:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "dbanon"), "--json", "schedule", "install",
             "--cron"], env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        line = json.loads(done.stdout)["cron"]
        assert f"DBANON_HOME={os.environ['DBANON_HOME']}" in line
        before = _runs(embedded_dsn, name)
        ran = _run_cron_line(line, tmp_path)
        assert ran.returncode == 0, (ran.stdout, ran.stderr)
        assert _runs(embedded_dsn, name) == before + 1
    finally:
        assert cli_json(embedded_dsn, "drop", name, "--yes")[0] == 0
        with psycopg.connect(embedded_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier("s", name)))


def test_systemd_units_name_the_user_and_keep_the_password_out(
    percent_dsn: str, tmp_path: Path
) -> None:
    out_dir = tmp_path / "units"
    code, out = cli_json(percent_dsn, "schedule", "install", "--systemd", "--write", str(out_dir))
    assert code == 0, out
    service = (out_dir / "dbanon-refresh.service").read_text()
    assert f"User={pwd.getpwuid(os.geteuid()).pw_name}" in service
    dbname = conninfo_to_dict(percent_dsn)["dbname"]
    assert f"dbname={dbname.replace('%', '%%')}" in service  # a specifier otherwise
    _no_password_in(
        [out_dir / "dbanon-refresh.service", out_dir / "dbanon-refresh.timer"], PASSWORD
    )
    passfile = Path(out["secrets"][0])
    assert passfile.parent == out_dir and stat.S_IMODE(passfile.stat().st_mode) == 0o600
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    for unit in ("dbanon-refresh.service", "dbanon-refresh.timer"):
        done = subprocess.run(
            [analyze, "verify", str(out_dir / unit)], capture_output=True, text=True
        )
        assert done.returncode == 0 and "error" not in done.stderr.lower(), done.stderr


def test_install_without_a_kind_is_one_line(percent_dsn: str) -> None:
    code, out = cli_json(percent_dsn, "schedule", "install")
    assert code == 2 and out["error"] == "give --cron or --systemd"


@pytest.fixture
def password_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL 15 that asks for a password (scram), for the passfile to be needed."""
    if not (PG15_BIN / "postgres").exists() or shutil.which("runuser") is None:
        pytest.skip("Debian's PostgreSQL 15 is not installed")
    base = Path(tempfile.mkdtemp(prefix="dbanon-pw-"))
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    base.chmod(0o755)
    pwfile = base / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        shutil.chown(pwfile, "postgres", "postgres")
    initdb = [
        str(PG15_BIN / "initdb"), "-D", str(base / "data"), "-A", "scram-sha-256", "-U",
        "postgres", f"--pwfile={pwfile}", "--encoding=UTF8", "--locale=C.UTF-8",
    ]  # fmt: skip
    subprocess.run(_as_postgres(initdb), check=True, capture_output=True)
    opts = f"-k {base} -h '' -c fsync=off"
    subprocess.run(
        _as_postgres([str(PG15_BIN / "pg_ctl"), "-D", str(base / "data"), "-o", opts, "-l",
                      str(base / "log"), "-w", "start"]), check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield make_conninfo(host=str(base), user="postgres", dbname="postgres", password=PASSWORD)
    finally:
        subprocess.run(
            _as_postgres([str(PG15_BIN / "pg_ctl"), "-D", str(base / "data"), "-m", "immediate",
                          "stop"]), capture_output=True,
        )  # fmt: skip
        shutil.rmtree(base, ignore_errors=True)


def test_the_passfile_logs_the_job_in(
    password_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dbanon.db import catalog

    catalog.init(password_server)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("PGPASSWORD", raising=False)
    _scheduled_release(password_server, "guarded")
    code, out = cli_json(password_server, "schedule", "install", "--cron", "--save-password")
    assert code == 0 and PASSWORD not in out["cron"]
    ran = _run_cron_line(out["cron"], tmp_path)
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    assert _runs(password_server, "guarded") == 2
    (Path(out["secrets"][0])).unlink()  # without the passfile, the job cannot log in
    ran = _run_cron_line(out["cron"], tmp_path)
    assert "password" in (tmp_path / "dbanon-refresh.log").read_text().lower()
    assert _runs(password_server, "guarded") == 2


def test_cron_line_for_libpq_variables_carries_them_but_not_pgpassword(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No DSN, PGHOST & co. set: the job gets the same PG* variables, and PGPASSWORD's value
    goes into the passfile that PGPASSFILE names."""
    params = conninfo_to_dict(dsn)
    monkeypatch.delenv("DBANON_DSN", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for var, key in (("PGHOST", "host"), ("PGPORT", "port"), ("PGDATABASE", "dbname"),
                     ("PGUSER", "user")):  # fmt: skip
        if key in params:
            monkeypatch.setenv(var, params[key])
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    _scheduled_release(dsn, "fromenv")
    before = _runs(dsn, "fromenv")
    result = CliRunner().invoke(
        main, ["--json", "schedule", "install", "--cron", "--save-password"]
    )
    out = json.loads(result.stdout)
    assert result.exit_code == 0 and out["server"].startswith("libpq environment (PGHOST")
    line = out["cron"]
    assert PASSWORD not in line and "PGPASSWORD" not in line and "PGPASSFILE=" in line
    assert f"PGDATABASE={params['dbname']}" in line
    ran = _run_cron_line(line, tmp_path)
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    assert _runs(dsn, "fromenv") == before + 1


# -- issue 34: one passfile line per server, written on install only, after a connection check ----


def test_two_servers_keep_their_own_passfile_lines(
    percent_dsn: str, server_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before issue 34 the second install replaced the file with `*:*:*:*:` + its password."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    other = make_conninfo(server_dsn, password="other:pw")  # another database
    for dsn in (percent_dsn, other, percent_dsn):  # the first again: replaced, not doubled
        code, out = cli_json(dsn, "schedule", "install", "--cron", "--save-password")
        assert code == 0, out
    text = Path(out["secrets"][0]).read_text()
    assert sorted(text.splitlines(keepends=True)) == sorted(
        [_entry(other, "other:pw"), _entry(percent_dsn, PASSWORD)])


def test_printing_writes_no_secret(
    percent_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before issue 34 printing the cron line (or the units) wrote the passfile."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for kind in ("--cron", "--systemd"):
        result = CliRunner().invoke(main, ["--dsn", percent_dsn, "schedule", "install", kind])
        assert result.exit_code == 0, result.output
        assert "--save-password" in result.stderr
    assert not (tmp_path / "config").exists()
    code, out = cli_json(percent_dsn, "schedule", "install", "--cron")
    assert out["secrets"] == [] and out["password"]["needed"] and not out["password"]["saved"]


def test_a_server_that_cannot_be_reached_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before issue 34 a DSN that cannot connect still printed a line, exit 0."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    gone = make_conninfo(host=str(tmp_path / "nosocket"), dbname="x", password="pw")
    result = CliRunner().invoke(main, ["--dsn", gone, "schedule", "install", "--cron",
                                       "--save-password"])  # fmt: skip
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "--dsn" in result.stderr
    assert not (tmp_path / "config").exists()


def test_the_shorthand_is_in_the_help_and_the_docs() -> None:
    """`dbanon schedule NAME --every` (the README's) was in neither before issue 34."""
    result = CliRunner().invoke(main, ["schedule", "--help"])
    assert "schedule NAME --every" in " ".join(result.output.split())
    docs = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    assert "schedule NAME --every" in " ".join(docs.split())


def test_each_user_logs_in_with_its_own_line(
    password_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two installs on a server that asks for passwords, two users: both jobs log in."""
    from dbanon.db import catalog

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("PGPASSWORD", raising=False)
    with psycopg.connect(password_server, autocommit=True) as conn:
        conn.execute("CREATE ROLE other LOGIN PASSWORD 'other:pw'")
        conn.execute("CREATE DATABASE other OWNER other")
    other = make_conninfo(password_server, user="other", dbname="other", password="other:pw")
    lines = {}
    for dsn, name in ((password_server, "first"), (other, "second")):
        catalog.init(dsn)
        _scheduled_release(dsn, name)
        code, out = cli_json(dsn, "schedule", "install", "--cron", "--save-password")
        assert code == 0, out
        lines[name] = out["cron"]
    for dsn, name in ((password_server, "first"), (other, "second")):
        ran = _run_cron_line(lines[name], tmp_path)
        assert ran.returncode == 0, (ran.stdout, ran.stderr)
        assert _runs(dsn, name) == 2, (tmp_path / "dbanon-refresh.log").read_text()
