"""Releases as code: `dbanon export` writes the catalog's specs as TOML and `dbanon apply` makes the
catalog match a file (publish, republish, grant/revoke, schedule, drop only with --prune), once:
applying the same file again changes nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from helpers import cli, cli_json, make_table, snapshot
from psycopg import sql
from verify import verify


@pytest.fixture
def clinic(conn: psycopg.Connection) -> psycopg.Connection:
    rows = [(i, 20 + i % 47, "NSEW"[i % 4], ["flu", "gout", "asthma", "angina"][i % 4])
            for i in range(1, 201)]  # fmt: skip
    make_table(conn, "ap", "patients",
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


def runs(conn: psycopg.Connection) -> dict[str, int]:
    return dict(conn.execute(
        """SELECT r.name, count(u.*) FROM dbanon.release r
           LEFT JOIN dbanon.run u ON u.release_id = r.id GROUP BY r.name"""
    ).fetchall())  # fmt: skip


def publish(dsn: str, name: str, *extra: str) -> None:
    code, out = cli_json(dsn, "publish", name, "--source", "ap.patients", "--key", "id",
                         "--qi", "age,region", "--k", "4", "--target", f"rel_ap.{name}",
                         *extra)  # fmt: skip
    assert code == 0, out


def test_export_then_plan_reports_no_change(clinic: psycopg.Connection, dsn: str,
                                            tmp_path: Path) -> None:
    publish(dsn, "a")
    publish(dsn, "b", "--algorithm", "mondrian", "--sensitive", "dx", "--l", "2")
    assert cli(dsn, "schedule", "b", "--every", "6 hours").exit_code == 0
    f = tmp_path / "releases.toml"
    assert cli(dsn, "export", "--output", str(f)).exit_code == 0
    text = f.read_text()
    assert "[releases.a]" in text and "[releases.b]" in text and "6:00:00" in text
    code, out = cli_json(dsn, "apply", str(f), "--plan")
    assert code == 0 and out["changes"] == [], out
    code, out = cli_json(dsn, "apply", str(f))
    assert code == 0 and out["changes"] == [], out


def test_apply_adds_regrants_drops_and_is_idempotent(
    clinic: psycopg.Connection, dsn: str, tmp_path: Path, role: str
) -> None:
    publish(dsn, "keep_me")
    publish(dsn, "old")
    before = runs(clinic)
    f = tmp_path / "r.toml"
    f.write_text(cli(dsn, "export", "keep_me").stdout + f"""
[releases.new]
source = "ap.patients"
key = "id"
qi = ["age", "region"]
models = [{{name = "k-anonymity", k = 5}}]
target = "rel_ap.new"
grants = ["{role}"]
schedule = {{cron = "0 3 * * *"}}
""")
    text = f.read_text().replace('grants = []', f'grants = ["{role}"]', 1)
    f.write_text(text)

    code, plan = cli_json(dsn, "apply", str(f), "--plan", "--prune")
    assert code == 0, plan
    got = {(c["release"], c["action"]) for c in plan["changes"]}
    assert got == {("new", "publish"), ("new", "schedule"), ("keep_me", "grant"), ("old", "drop")}
    assert runs(clinic) == before  # a plan changes nothing

    code, out = cli_json(dsn, "apply", str(f), "--prune")
    assert code == 0, out
    after = runs(clinic)
    assert set(after) == {"keep_me", "new"} and after["keep_me"] == before["keep_me"]
    verify(clinic, ("rel_ap", "new"), ["age", "region"], [{"name": "k-anonymity", "k": 5}])
    with psycopg.connect(dsn, autocommit=True) as c:  # the grant took, as the role sees it
        c.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
        assert c.execute("SELECT count(*) FROM rel_ap.keep_me").fetchone()[0] == 200
    assert clinic.execute(
        "SELECT to_regclass('rel_ap.old') IS NULL").fetchone()[0]  # fmt: skip

    state = snapshot(clinic)
    code, out = cli_json(dsn, "apply", str(f), "--prune")
    assert code == 0 and out["changes"] == [], out
    assert snapshot(clinic) == state and runs(clinic) == after


def test_a_changed_spec_is_republished_and_a_handwritten_file_settles(
    clinic: psycopg.Connection, dsn: str, tmp_path: Path
) -> None:
    f = tmp_path / "r.toml"
    f.write_text('[releases.w]\nsource = "ap.patients"\nkey = "id"\nqi = ["age", "region"]\n'
                 'models = [{name = "k-anonymity", k = 4}]\ntarget = "rel_ap.w"\n')  # fmt: skip
    assert cli_json(dsn, "apply", str(f))[0] == 0
    assert cli_json(dsn, "apply", str(f))[1]["changes"] == []  # defaults filled: no drift
    f.write_text(f.read_text().replace("k = 4", "k = 9"))
    code, out = cli_json(dsn, "apply", str(f))
    assert [(c["release"], c["action"]) for c in out["changes"]] == [("w", "republish")]
    assert "models" in out["changes"][0]["detail"]
    verify(clinic, ("rel_ap", "w"), ["age", "region"], [{"name": "k-anonymity", "k": 9}])


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ('[releases.x]\nsource = "ap.patients"\nkey = "id"\nqi = ["age"]\nkk = 3\n',
         ":5: unknown key 'kk'"),
        ('[releases.x]\nsource = "ap.patients"\nqi = ["age"]\n', ":1: release 'x' needs 'key'"),
        ('[releases.x]\nsource = "ap.patients"\nkey = "id"\nqi = ["age"\n', ":4: Unclosed array"),
        ('[releases.x]\nsource = "ap.patients"\nkey = "id\nqi = ["age"]\n', ":3: "),
        ('[releases.x]\nsource = "ap.patients"\nkey = "id"\nqi = ["age"]\n'
         'method = "nosuch"\n', "unknown method 'nosuch'"),
        ('[releases.x]\nsource = "ap.patients"\nkey = "id"\nqi = ["age"]\n'
         'schedule = {hourly = true}\n', ":5: schedule of 'x'"),
    ],
)
def test_an_invalid_file_is_one_line_naming_file_line_and_key(
    clinic: psycopg.Connection, dsn: str, tmp_path: Path, body: str, where: str
) -> None:
    publish(dsn, "a")
    f = tmp_path / "bad.toml"
    f.write_text(body)
    state = snapshot(clinic)
    result = cli(dsn, "apply", str(f), "--prune")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(f) in lines[0] and where in lines[0], lines
    assert snapshot(clinic) == state
