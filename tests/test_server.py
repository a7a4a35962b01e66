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
    finally:
        assert run(tmp_path, "server", "stop").stdout.strip() == "stopped"
    assert json.loads(run(tmp_path, "--json", "server", "status").stdout)["running"] is False
    assert run(tmp_path, "server", "stop").stdout.strip() == "not running"
