"""`dbanon server`: the embedded PostgreSQL, started, reused and stopped from the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DBANON_DSN"}
    env["DBANON_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "dbanon", *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=120,
    )


def test_embedded_server_lifecycle(tmp_path: Path) -> None:
    assert json.loads(run(tmp_path, "--json", "server", "status").stdout)["running"] is False
    url = run(tmp_path, "server", "url")
    assert url.returncode == 0 and str(tmp_path) in url.stdout
    status = json.loads(run(tmp_path, "--json", "server", "status").stdout)
    assert status["running"] is True and status["data_dir"].startswith(str(tmp_path))
    try:
        assert run(tmp_path, "server", "url").stdout == url.stdout  # reused, not restarted
        assert run(tmp_path, "init").returncode == 0
        import psycopg

        with psycopg.connect(url.stdout.strip()) as conn:
            assert conn.execute("SELECT current_database()").fetchone()[0] == "dbanon"
            # dbanon's settings reach a new cluster before its first start, and once only
            assert conn.execute("SHOW wal_level").fetchone()[0] == "minimal"
        conf = (Path(status["data_dir"]) / "postgresql.conf").read_text()
        assert conf.count("wal_level = 'minimal'") == 1
    finally:
        assert run(tmp_path, "server", "stop").stdout.strip() == "stopped"
    assert json.loads(run(tmp_path, "--json", "server", "status").stdout)["running"] is False
    assert run(tmp_path, "server", "stop").stdout.strip() == "not running"


def test_embedded_server_as_an_ordinary_user(tmp_path: Path) -> None:
    """As root the server runs postgres as a system user; as anyone else, as that user."""
    import shutil
    import sysconfig

    import dbanon

    system_python = Path("/usr/bin/python3")
    site = sysconfig.get_paths()["purelib"]
    project = str(Path(dbanon.__file__).resolve().parent.parent)
    if os.geteuid() != 0 or not shutil.which("runuser") or not system_python.exists():
        import pytest

        pytest.skip("needs root, runuser and a system python3 to switch to user nobody")
    probe = subprocess.run(
        ["runuser", "-u", "nobody", "--", str(system_python), "-c",
         "import sys; print(sys.version_info[:2])"],
        capture_output=True, text=True,
    )  # fmt: skip
    readable = subprocess.run(["runuser", "-u", "nobody", "--", "test", "-r", site]).returncode
    if probe.stdout.strip() != str(sys.version_info[:2]) or readable != 0:
        import pytest

        pytest.skip("the system python3 or this environment is not usable by user nobody")
    home = tmp_path / "nobody"
    home.mkdir()
    shutil.chown(home, "nobody")
    tmp_path.chmod(0o755)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "DBANON_HOME": str(home),
           "PYTHONPATH": f"{site}:{project}"}  # fmt: skip

    def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["runuser", "-u", "nobody", "--", "env", *(f"{k}={v}" for k, v in env.items()),
             str(system_python), "-m", "dbanon", *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    url = as_nobody("server", "url")
    assert url.returncode == 0, url.stderr
    try:
        status = json.loads(as_nobody("--json", "server", "status").stdout)
        owner = subprocess.run(["ps", "-o", "user=", "-p", str(status["pid"])],
                               capture_output=True, text=True).stdout.strip()  # fmt: skip
        assert status["running"] and owner == "nobody"
    finally:
        assert as_nobody("server", "stop").stdout.strip() == "stopped"


def test_data_directory_by_user(monkeypatch) -> None:  # noqa: ANN001
    from dbanon.db import server

    monkeypatch.setenv("DBANON_HOME", "/somewhere")
    assert server.data_dir() == Path("/somewhere/pgdata")
    monkeypatch.delenv("DBANON_HOME")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert server.data_dir() == Path("/var/lib/dbanon/pgdata")  # never below /root
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_DATA_HOME", "/home/ann/.local/share")
    assert server.data_dir() == Path("/home/ann/.local/share/dbanon/pgdata")
