"""Output that scripts and people can use: piped output is never wrapped or cut, names come out
as SQL needs them, and an unknown column suggests the closest one (issue 21, item 2)."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
from helpers import cli, make_table

LONG = "a_release_name_long_enough_that_a_table_of_eighty_columns_would_cut_it_" + "x" * 30


def _dbanon(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command, its stdout a pipe (as in `dbanon ... | cat`)."""
    env = {**os.environ, "DBANON_DSN": dsn, "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-m", "dbanon", *args], capture_output=True, text=True, env=env,
        timeout=300, check=False,
    )  # fmt: skip


def _people(conn: psycopg.Connection) -> None:
    rows = [(i, 20 + i % 7, "abcd"[i % 4], "xyz"[i % 3]) for i in range(60)]
    cols = [("id", "int"), ("Age", "int"), ("zip", "text"), ("diagnosis", "text")]
    make_table(conn, "src", "people", cols, rows)


def test_releases_piped_prints_whole_lines(conn: psycopg.Connection, dsn: str) -> None:
    _people(conn)
    target = "rel.KM 5"
    result = cli(dsn, "publish", LONG, "--source", "src.people", "--key", "id",
                 "--qi", "Age,zip", "--k", "5", "--target", target)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert 'rel."KM 5"' in result.output  # pasteable into SQL
    done = _dbanon(dsn, "releases")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split("\t")[:3] == ["name", "method", "promises"]
    row = next(line.split("\t") for line in lines[1:] if line.startswith(LONG))
    assert row[0] == LONG and row[1] == "kmember"
    assert row[3] == 'rel."KM 5"' and row[-1] == "60"
    assert len(lines) == 2  # no cell wrapped onto a line of its own


def test_demo_piped_prints_a_pasteable_check_command(dsn: str) -> None:
    done = _dbanon(dsn, "demo")
    assert done.returncode == 0, done.stderr
    tip = [line for line in done.stdout.splitlines() if line.startswith("try: ")]
    assert len(tip) == 1
    command = tip[0].removeprefix("try: ").split()
    assert command[:3] == ["dbanon", "check", "released.adult_k10"]
    assert command[-2:] == ["--k", "10"]  # the whole command on one line
    check = _dbanon(dsn, *command[1:])
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_unknown_column_suggests_the_closest(conn: psycopg.Connection, dsn: str) -> None:
    _people(conn)
    result = cli(dsn, "check", "src.people", "--qi", "age,zip", "--k", "2")
    assert result.exit_code == 2
    assert 'did you mean "Age"?' in result.output
    result = cli(dsn, "check", "src.people", "--qi", "Age,zpi", "--k", "2")
    assert "did you mean zip?" in result.output


def test_the_process_ends_with_its_code_its_output_and_its_exit_handlers(dsn: str) -> None:
    """`dbanon.cli.run` ends the process itself (no interpreter teardown): the exit code, all
    of stdout and the atexit handlers (the bench's peak file, tempfile's clean-up) survive."""
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('handler ran', file=sys.stderr))\n"
        "sys.argv = ['dbanon', '--json', 'publish', 'x', '--source', 'no_such.table_here',"
        " '--key', 'id', '--qi', 'a', '--k', '2']\n"
        "from dbanon.cli import run\n"
        "run()\n"
        "print('not reached')\n"
    )
    env = {**os.environ, "DBANON_DSN": dsn}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert '"error"' in done.stdout and "no_such" in done.stdout
    assert "not reached" not in done.stdout
    assert done.stderr.strip().endswith("handler ran")
    listed = _dbanon(dsn, "--json", "methods")  # a long output, piped: every byte of it
    assert listed.returncode == 0 and listed.stdout.rstrip().endswith("}"), listed.stderr
