"""`dbanon grant/revoke NAME ROLE...` change who reads a release at once, without a rebuild;
`dbanon show NAME` prints the stored spec as `publish` arguments that store it again."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from helpers import cli, cli_json, make_table, snapshot
from psycopg import sql


@pytest.fixture
def ward(conn: psycopg.Connection) -> psycopg.Connection:
    rows = [(i, 20 + i % 50, "NSEW"[i % 4], ["flu", "gout", "asthma", "angina"][i % 4])
            for i in range(1, 121)]  # fmt: skip
    make_table(conn, "h", "ward",
               [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("dx", "text")],
               rows)  # fmt: skip
    return conn


@pytest.fixture
def roles(conn: psycopg.Connection) -> Iterator[list[str]]:
    names = [f"reader_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for role in names:
        conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    try:
        yield names
    finally:
        for role in names:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def reads(dsn: str, role: str, relation: str) -> bool:
    """Whether `role` can read `relation`, tried as that role (SET ROLE, a fresh session)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
        try:
            schema, name = relation.split(".")
            c.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, name)))
            return True
        except psycopg.errors.InsufficientPrivilege:
            return False


def state(conn: psycopg.Connection, name: str) -> tuple:
    """What a rebuild would change: the released relation's oid and the number of runs."""
    return conn.execute(
        """SELECT c.oid, (SELECT count(*) FROM dbanon.run u JOIN dbanon.release r
                          ON r.id = u.release_id WHERE r.name = %s)
           FROM pg_class c WHERE c.oid = 'released.g'::regclass""",
        [name],
    ).fetchone()


def test_grant_and_revoke_change_privileges_without_a_rebuild(
    ward: psycopg.Connection, dsn: str, roles: list[str]
) -> None:
    a, b = roles
    code, out = cli_json(dsn, "publish", "g", "--source", "h.ward", "--key", "id",
                         "--qi", "age,region", "--k", "4")  # fmt: skip
    assert code == 0, out
    before = state(ward, "g")
    assert not reads(dsn, a, "released.g") and not reads(dsn, b, "released.g")

    code, out = cli_json(dsn, "grant", "g", a, b)
    assert code == 0 and out["grants"] == [a, b], out
    assert reads(dsn, a, "released.g") and reads(dsn, b, "released.g")
    assert state(ward, "g") == before  # no rebuild, no run
    code, shown = cli_json(dsn, "show", "g")
    assert shown["spec"]["grants"] == [a, b]

    code, out = cli_json(dsn, "revoke", "g", b)
    assert code == 0 and out["grants"] == [a], out
    assert reads(dsn, a, "released.g") and not reads(dsn, b, "released.g")
    assert state(ward, "g") == before
    # USAGE on the schema went with the last release granted to b there
    assert not ward.execute(
        "SELECT has_schema_privilege(%s, 'released', 'USAGE')", [b]
    ).fetchone()[0]

    # the stored spec is what a refresh applies
    code, out = cli_json(dsn, "refresh", "g")
    assert code == 0, out
    assert reads(dsn, a, "released.g") and not reads(dsn, b, "released.g")


def test_grant_and_revoke_refuse_bad_input_and_change_nothing(
    ward: psycopg.Connection, dsn: str, roles: list[str]
) -> None:
    a, _ = roles
    assert cli(dsn, "publish", "g", "--source", "h.ward", "--key", "id", "--qi", "age",
               "--k", "4", "--grant", a).exit_code == 0  # fmt: skip
    before = snapshot(ward)
    for args, message in [
        (("grant", "g", "nobody_" + uuid.uuid4().hex[:6]), "does not exist"),
        (("grant", "missing", a), "release 'missing' does not exist"),
        (("revoke", "g", "nobody_" + uuid.uuid4().hex[:6]), "does not exist"),
        (("grant", "g", "public"), "PUBLIC is not a role"),
        (("grant", "g", a, "PUBLIC"), "PUBLIC is not a role"),
    ]:
        result = cli(dsn, *args)
        assert result.exit_code == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert snapshot(ward) == before
    assert reads(dsn, a, "released.g")


def test_show_prints_publish_arguments_that_store_the_same_spec(
    ward: psycopg.Connection, dsn: str, roles: list[str], tmp_path
) -> None:  # noqa: ANN001
    path = tmp_path / "region.csv"
    path.write_text("N;north;*\nS;south;*\nE;east;*\nW;west;*\n")
    assert cli(dsn, "hierarchy", "import", "region", str(path)).exit_code == 0
    code, out = cli_json(dsn, "publish", "g", "--source", "h.ward", "--key", "id",
                         "--qi", "age,region", "--sensitive", "dx", "--k", "4", "--p", "2",
                         "--algorithm", "kmember", "--seed", "7", "--cost", "ncp",
                         "--hierarchy", "region=region", "--grant", roles[0])  # fmt: skip
    assert code == 0, out
    code, shown = cli_json(dsn, "show", "g")
    assert code == 0
    args = shown["publish"]
    assert args[:2] == ["publish", "g"] and "--seed" in args and "--cost" in args
    human = cli(dsn, "show", "g")
    assert human.stdout.startswith("dbanon publish g ")
    assert json.loads(human.stdout.split("\n", 1)[1]) == shown["spec"]

    args[1] = "copy"  # the same arguments under another name store the same spec
    code, out = cli_json(dsn, *args)
    assert code == 0, out
    specs = dict(ward.execute("SELECT name, spec FROM dbanon.release").fetchall())
    assert {k: v for k, v in specs["copy"].items() if k != "name"} == {
        k: v for k, v in specs["g"].items() if k != "name"
    }



def test_grant_reaches_every_relation_of_a_release(
    ward: psycopg.Connection, dsn: str, roles: list[str]
) -> None:
    """A live view (read through its owner's rights) and a two-relation Anatomy release."""
    a, _ = roles
    for name, extra in (("gv", ("--algorithm", "fulldomain", "--k", "4", "--as", "view")),
                        ("ga", ("--algorithm", "anatomy", "--sensitive", "dx", "--l", "2"))):
        code, out = cli_json(dsn, "publish", name, "--source", "h.ward", "--key", "id",
                             "--qi", "age,region", *extra)  # fmt: skip
        assert code == 0, out
        assert not any(reads(dsn, a, o) for o in out["objects"])
        live = ["--grant-live"] if name == "gv" else []  # a live view: opt-in
        assert cli_json(dsn, "grant", name, a, *live)[0] == 0
        assert all(reads(dsn, a, o) for o in out["objects"]), out["objects"]
    assert cli_json(dsn, "revoke", "gv", a)[0] == 0
    # still USAGE on the schema: release ga there is granted to the role
    assert ward.execute("SELECT has_schema_privilege(%s, 'released', 'USAGE')", [a]).fetchone()[0]
    assert reads(dsn, a, "released.ga_qit") and not reads(dsn, a, "released.gv")


@pytest.fixture
def team(conn: psycopg.Connection) -> Iterator[str]:
    """A role whose name SQL must quote (a capital, a space)."""
    role = f"Data Team {uuid.uuid4().hex[:6]}"
    conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    try:
        yield role
    finally:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_revoke_says_what_it_revoked_and_a_second_is_no_error(
    ward: psycopg.Connection, dsn: str, roles: list[str], team: str
) -> None:
    """Issue 34: as SQL's REVOKE, revoking what is not granted changes nothing and is no
    error; the line says what was revoked (not only who is left), role names quoted as SQL
    needs them."""
    a, _ = roles
    quoted = '"' + team + '"'
    assert cli(dsn, "publish", "g", "--source", "h.ward", "--key", "id", "--qi", "age",
               "--k", "4").exit_code == 0  # fmt: skip
    result = cli(dsn, "grant", "g", a, team)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        f"release 'g' granted to {a}, {quoted} (now granted to {a}, {quoted})")
    assert reads(dsn, team, "released.g")
    result = cli(dsn, "revoke", "g", team)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"release 'g' revoked from {quoted} (now granted to {a})"
    assert not reads(dsn, team, "released.g")
    before = snapshot(ward)
    result = cli(dsn, "revoke", "g", team)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        f"release 'g' not granted to {quoted}: nothing to do (now granted to {a})")
    code, out = cli_json(dsn, "revoke", "g", team)
    assert code == 0 and out["revoked"] == [] and out["not_granted"] == [team], out
    assert snapshot(ward) == before and reads(dsn, a, "released.g")
