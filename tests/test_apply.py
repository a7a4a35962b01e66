"""Releases as code: `dbanon export` writes the catalog's specs as TOML and `dbanon apply` makes the
catalog match a file (publish, republish, grant/revoke, schedule, drop only with --prune), once:
applying the same file again changes nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import tomllib
from conftest import TEMPLATE
from helpers import cli, cli_json, make_table, snapshot
from psycopg import sql
from psycopg.conninfo import make_conninfo
from verify import verify


def _patients(conn: psycopg.Connection) -> None:
    rows = [(i, 20 + i % 47, "NSEW"[i % 4], ["flu", "gout", "asthma", "angina"][i % 4])
            for i in range(1, 201)]  # fmt: skip
    make_table(conn, "ap", "patients",
               [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("dx", "text")],
               rows)  # fmt: skip


@pytest.fixture
def clinic(conn: psycopg.Connection) -> psycopg.Connection:
    _patients(conn)
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
    assert "[releases.a]" in text and "[releases.b]" in text
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

    code, out = cli_json(dsn, "apply", str(f), "--prune", "--yes")
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
    code, out = cli_json(dsn, "apply", str(f), "--prune", "--yes")
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


# -- issue 34: releases as code a DBA can trust ---------------------------------------------------

GOOD = """
[releases.good]
source = "ap.patients"
key = "id"
qi = ["age", "region"]
models = [{name = "k-anonymity", k = 4}]
target = "rel_ap.good"
"""
BAD = """
[releases.bad]
source = "ap.patients"
key = "id"
qi = ["age", "nosuch"]
models = [{name = "k-anonymity", k = 4}]
target = "rel_ap.bad"
"""

REGION = """
[hierarchies.region]
rows = [["E", "EW", "*"], ["N", "NS", "*"], ["S", "NS", "*"], ["W", "EW", "*"]]
"""


def catalog_rows(conn: psycopg.Connection) -> list[tuple]:
    """Every release, run and schedule the catalog holds (a failed run counts too)."""
    return conn.execute(
        """SELECT r.name, r.spec::text,
                  (SELECT count(*) FROM dbanon.run u WHERE u.release_id = r.id),
                  (SELECT s.every::text || coalesce(s.cron, '') FROM dbanon.schedule s
                   WHERE s.release_id = r.id)
           FROM dbanon.release r ORDER BY r.name"""
    ).fetchall()


def test_a_file_with_one_bad_release_changes_nothing(
    clinic: psycopg.Connection, dsn: str, tmp_path: Path
) -> None:
    """Before issue 34 the good release was published, then exit 2 without naming 'bad'."""
    publish(dsn, "old")
    f = tmp_path / "r.toml"
    f.write_text(cli(dsn, "export", "old").stdout.replace("k = 4", "k = 5") + BAD
                 + GOOD + 'hierarchies = {region = "region"}\n' + REGION)  # fmt: skip
    state, cat = snapshot(clinic), catalog_rows(clinic)
    result = cli(dsn, "apply", str(f))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "'bad'" in lines[0] and "nosuch" in lines[0], lines
    assert f"{f}:{f.read_text().splitlines().index('[releases.bad]') + 1}:" in lines[0]
    assert snapshot(clinic) == state and catalog_rows(clinic) == cat  # nothing changed
    code, out = cli_json(dsn, "apply", str(f))
    assert code == 2 and [e["release"] for e in out["invalid"]] == ["bad"], out
    assert snapshot(clinic) == state and catalog_rows(clinic) == cat


def test_a_plan_checks_the_file_against_the_database(
    clinic: psycopg.Connection, dsn: str, tmp_path: Path
) -> None:
    """Before issue 34 `apply --plan` planned the bad release and exited 0."""
    f = tmp_path / "r.toml"
    f.write_text(GOOD + BAD)
    result = cli(dsn, "apply", str(f), "--plan")
    assert result.exit_code == 2 and "nosuch" in result.stderr and "'bad'" in result.stderr
    f.write_text(GOOD.replace("k = 4", "k = 400") + BAD)  # every failing release is named
    code, out = cli_json(dsn, "apply", str(f), "--plan")
    assert code == 2 and [(e["release"], e["line"]) for e in out["invalid"]] == [
        ("good", "2"), ("bad", "9")], out
    assert "400" in out["invalid"][0]["error"] and "(and 1 more failing: 'bad')" in out["error"]
    f.write_text(GOOD + BAD.replace('"nosuch"', '"region"').replace('"rel_ap.bad"',
                                                                    '"rel_ap.good"'))
    result = cli(dsn, "apply", str(f), "--plan")  # two releases of the file, one target
    assert result.exit_code == 2 and "rel_ap.good" in result.stderr, result.stderr
    f.write_text(GOOD + BAD.replace('"nosuch"', '"region"'))
    assert cli(dsn, "apply", str(f), "--plan").exit_code == 0


def test_a_change_failing_after_validation_says_what_was_applied(
    clinic: psycopg.Connection, dsn: str, tmp_path: Path
) -> None:
    """A run of 'old' holds its lock: the republish fails after 'good' was published. Before
    issue 34: exit 3, as if nothing had changed, and no word of 'good'."""
    publish(dsn, "old")
    f = tmp_path / "r.toml"
    f.write_text(cli(dsn, "export", "old").stdout.replace("k = 4", "k = 5") + GOOD)
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT FROM dbanon.release WHERE name = 'old' FOR NO KEY UPDATE")
        code, out = cli_json(dsn, "apply", str(f))
    assert code == 5, out
    assert [(c["release"], c["action"]) for c in out["applied"]] == [("good", "publish")]
    assert (out["failed"]["release"], out["failed"]["action"], out["failed"]["exit"]) == (
        "old", "republish", 3)
    assert out["not_applied"] == [] and "republish old failed" in out["error"]
    assert "applied before it: publish good" in out["error"]
    assert clinic.execute("SELECT to_regclass('rel_ap.good') IS NOT NULL").fetchone()[0]
    code, out = cli_json(dsn, "apply", str(f))  # the lock gone, the rest applies
    assert code == 0 and [(c["release"], c["action"]) for c in out["applied"]] == [
        ("old", "republish")], out


def test_prune_asks_for_yes(clinic: psycopg.Connection, dsn: str, tmp_path: Path) -> None:
    """Before issue 34, `--prune` with stdin not a terminal dropped without --yes."""
    publish(dsn, "a")
    publish(dsn, "b")
    f = tmp_path / "r.toml"
    f.write_text(cli(dsn, "export", "a").stdout)
    state = snapshot(clinic)
    result = cli(dsn, "apply", str(f), "--prune")  # CliRunner's stdin is not a terminal
    assert result.exit_code == 2 and "--yes" in result.stderr and '"b"' not in result.stderr
    assert "b" in result.stderr and snapshot(clinic) == state
    assert cli_json(dsn, "apply", str(f), "--prune", "--plan")[0] == 0  # a plan drops nothing
    code, out = cli_json(dsn, "apply", str(f), "--prune", "--yes")
    assert code == 0 and [(c["release"], c["action"]) for c in out["changes"]] == [("b", "drop")]
    assert clinic.execute("SELECT to_regclass('rel_ap.b') IS NULL").fetchone()[0]


def test_plans_are_sorted_and_show_old_and_new_values(
    clinic: psycopg.Connection, dsn: str, tmp_path: Path, role: str
) -> None:
    """Before issue 34: file order (set order for drops), "changed: models" without values,
    and "`dbanon apply FILE` would the above" without --prune."""
    for name in ("m", "c", "x"):
        publish(dsn, name)
    assert cli(dsn, "schedule", "c", "--every", "6 hours").exit_code == 0
    exported = cli(dsn, "export", "c", "m").stdout
    f = tmp_path / "r.toml"
    f.write_text(GOOD.replace("good", "z") + exported.replace("k = 4", "k = 9", 1)
                 .replace('every = "6 hours"', 'cron = "0 3 * * *"')
                 .replace("grants = []", f'grants = ["{role}"]') + GOOD.replace("good", "a"))
    plans = [cli(dsn, "apply", str(f), "--plan", "--prune").stdout for _ in range(2)]
    assert plans[0] == plans[1]
    lines = plans[0].splitlines()
    assert [ln.split()[:2] for ln in lines[:-1]] == [
        ["publish", "a"], ["republish", "c"], ["schedule", "c"], ["grant", "m"],
        ["drop", "x"], ["publish", "z"]], lines
    assert 'models: [{name = "k-anonymity", k = 4}] -> [{name = "k-anonymity", k = 9}]' in lines[1]
    assert "every '6 hours' -> cron '0 3 * * *'" in lines[2]
    assert lines[-1] == (f"(plan: nothing changed; `dbanon apply {f} --prune` would make the "
                         "changes above)")  # fmt: skip
    code, out = cli_json(dsn, "apply", str(f), "--plan", "--prune")
    changed = out["changes"][1]["data"]["changed"]["models"]
    assert changed["old"][0]["k"] == 4 and changed["new"][0]["k"] == 9


@pytest.fixture
def fresh_dsn(server_dsn: str) -> Iterator[str]:
    """A second database on the same server: the catalog and the sources, nothing else."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(TEMPLATE)))  # fmt: skip
    try:
        dsn = make_conninfo(server_dsn, dbname=name)
        with psycopg.connect(dsn, autocommit=True) as conn:
            _patients(conn)
        yield dsn
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_export_round_trips_onto_a_fresh_database(
    clinic: psycopg.Connection, dsn: str, role: str, fresh_dsn: str, tmp_path: Path
) -> None:
    """Before issue 34 the file named the hierarchy only (the fresh database has none) and
    wrote '6 hours' as "6:00:00"."""
    h = tmp_path / "region.csv"
    h.write_text("N;NS;*\nS;NS;*\nE;EW;*\nW;EW;*\n")
    assert cli(dsn, "hierarchy", "import", "region", str(h)).exit_code == 0
    publish(dsn, "a", "--hierarchy", "region=region", "--grant", role)
    publish(dsn, "b", "--algorithm", "mondrian", "--sensitive", "dx", "--l", "2")
    assert cli(dsn, "schedule", "a", "--every", "6 hours").exit_code == 0
    assert cli(dsn, "schedule", "b", "--every", "1 day 90 minutes").exit_code == 0
    first = tmp_path / "one.toml"
    assert cli(dsn, "export", "--output", str(first)).exit_code == 0
    text = first.read_text()
    data = tomllib.loads(text)
    assert data["releases"]["a"]["schedule"] == {"every": "6 hours"}
    assert data["releases"]["b"]["schedule"] == {"every": "1 day 1 hour 30 minutes"}
    assert data["hierarchies"]["region"]["rows"] == sorted(
        [["N", "NS", "*"], ["S", "NS", "*"], ["E", "EW", "*"], ["W", "EW", "*"]])

    code, out = cli_json(fresh_dsn, "apply", str(first))
    assert code == 0, out
    assert {(c.get("release"), c.get("hierarchy"), c["action"]) for c in out["changes"]} >= {
        (None, "region", "import"), ("a", None, "publish"), ("b", None, "publish")}
    again = cli(fresh_dsn, "export").stdout
    assert again == text
    with psycopg.connect(fresh_dsn) as fresh:  # released on the fresh database, as promised
        verify(fresh, ("rel_ap", "a"), ["age", "region"], [{"name": "k-anonymity", "k": 4}])
        assert fresh.execute("SELECT count(*) FROM rel_ap.b").fetchone()[0] == 200
    assert cli_json(fresh_dsn, "apply", str(first))[1]["changes"] == []


def test_a_stored_hierarchy_with_other_content_is_not_replaced(
    clinic: psycopg.Connection, dsn: str, tmp_path: Path
) -> None:
    h = tmp_path / "region.csv"
    h.write_text("N;NS;*\nS;NS;*\nE;EW;*\nW;EW;*\n")
    assert cli(dsn, "hierarchy", "import", "region", str(h)).exit_code == 0
    f = tmp_path / "r.toml"
    f.write_text(GOOD + 'hierarchies = {region = "region"}\n' + REGION)
    assert cli_json(dsn, "apply", str(f), "--plan")[1]["changes"] == [
        {"release": "good", "action": "publish", "detail": "kmember", "data": {},
         "hierarchy": None}]  # the same content: nothing to import
    f.write_text(f.read_text().replace('["W", "EW", "*"]', '["W", "NS", "*"]'))
    state = snapshot(clinic)
    result = cli(dsn, "apply", str(f))
    line = f.read_text().splitlines().index("[hierarchies.region]") + 1
    assert result.exit_code == 2 and f"{f}:{line}: hierarchy 'region'" in result.stderr
    assert "--replace" in result.stderr and snapshot(clinic) == state
