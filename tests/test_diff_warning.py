"""`publish` and `refresh` say when a release granted to a role runs under a refresh policy that
leaves a single joiner's or leaver's value open to a consumer who diffs two releases (issue 31
item 4): one line on stderr, one entry of `warnings` with --json; nothing for a release nobody
is granted, nor for one refreshed under `sealed`, nor for one without a sensitive column."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from helpers import cli, cli_json, make_table
from psycopg import sql

PUBLISH = ("publish", "w", "--source", "h.ward", "--key", "id", "--qi", "age,region", "--k", "4")


@pytest.fixture
def ward(conn: psycopg.Connection) -> psycopg.Connection:
    rows = [(i, 20 + i % 50, "NSEW"[i % 4], ["flu", "gout", "asthma", "angina"][i % 4])
            for i in range(1, 121)]  # fmt: skip
    make_table(conn, "h", "ward",
               [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("dx", "text")],
               rows)  # fmt: skip
    return conn


@pytest.fixture
def role(conn: psycopg.Connection) -> Iterator[str]:
    name = f"reader_{uuid.uuid4().hex[:8]}"
    conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _diff_warnings(out: dict) -> list[str]:
    return [w for w in out.get("warnings", []) if "joiner" in w]


def test_a_granted_persist_release_warns_on_publish_and_refresh(
    ward: psycopg.Connection, dsn: str, role: str
) -> None:
    code, out = cli_json(dsn, *PUBLISH, "--sensitive", "dx", "--grant", role)
    assert code == 0, out
    (line,) = _diff_warnings(out)
    assert role in line and "persist" in line and "--refresh-policy sealed" in line
    # Human output: the same line once, on stderr, not among the figures on stdout.
    ward.execute("INSERT INTO h.ward VALUES (500, 33, 'N', 'flu')")
    human = cli(dsn, "refresh", "w")
    assert human.exit_code == 0, human.output
    assert human.stderr.count("warning: diff exposure:") == 1, human.stderr
    assert "joiner" not in human.stdout
    ward.execute("DELETE FROM h.ward WHERE id = 500")
    code, out = cli_json(dsn, "refresh", "w")
    assert code == 0 and len(_diff_warnings(out)) == 1, out


def test_no_warning_when_nobody_is_granted_or_the_policy_is_sealed(
    ward: psycopg.Connection, dsn: str, role: str
) -> None:
    code, out = cli_json(dsn, *PUBLISH, "--sensitive", "dx")
    assert code == 0 and out["warnings"] == [], out
    human = cli(dsn, "refresh", "w")
    assert human.exit_code == 0 and "warning" not in human.stderr, human.stderr
    # Granted later (`dbanon grant`): the next refresh warns.
    assert cli(dsn, "grant", "w", role).exit_code == 0
    code, out = cli_json(dsn, "refresh", "w")
    assert code == 0 and len(_diff_warnings(out)) == 1, out
    # Sealed: granted, and no warning.
    code, out = cli_json(dsn, *PUBLISH, "--sensitive", "dx", "--grant", role, "--replace",
                         "--refresh-policy", "sealed")  # fmt: skip
    assert code == 0 and out["warnings"] == [], out
    ward.execute("INSERT INTO h.ward VALUES (500, 33, 'N', 'flu')")
    human = cli(dsn, "refresh", "w")
    assert human.exit_code == 0 and "warning" not in human.stderr, human.stderr
    # Without a sensitive column a diff shows no value: no warning either.
    code, out = cli_json(dsn, "publish", "v", *PUBLISH[2:], "--grant", role)
    assert code == 0 and out["warnings"] == [], json.dumps(out)


def test_a_method_without_a_sealed_policy_says_so(
    ward: psycopg.Connection, dsn: str, role: str
) -> None:
    code, out = cli_json(dsn, "publish", "a", "--source", "h.ward", "--key", "id", "--qi",
                         "age,region", "--sensitive", "dx", "--l", "2", "--algorithm",
                         "anatomy", "--grant", role)  # fmt: skip
    assert code == 0, out
    (line,) = _diff_warnings(out)
    assert "anatomy has no sealed policy" in line


def test_refresh_due_warns_for_each_granted_persist_release(
    ward: psycopg.Connection, dsn: str, role: str
) -> None:
    """`refresh --due`, one outcome line per release on stdout, the warning on stderr."""
    assert cli(dsn, *PUBLISH, "--sensitive", "dx", "--grant", role).exit_code == 0
    assert cli(dsn, "schedule", "set", "w", "--every", "1 minute").exit_code == 0
    ward.execute("INSERT INTO h.ward VALUES (500, 33, 'N', 'flu')")
    code, out = cli_json(dsn, "refresh", "--due", "--now", "2999-01-01T00:00")
    (result,) = out["results"]
    assert code == 0 and result["outcome"] == "refreshed", out
    assert len(_diff_warnings(result)) == 1, result
    ward.execute("INSERT INTO h.ward VALUES (501, 34, 'S', 'gout')")
    human = cli(dsn, "refresh", "--due", "--now", "2999-02-01T00:00")
    assert human.exit_code == 0 and "w: refreshed" in human.stdout, human.output
    assert human.stderr.count("warning: diff exposure:") == 1, human.stderr
