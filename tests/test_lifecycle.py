"""The method plug-in interface and the release workflow a DBA goes through.

Each workflow test here names the rough edge it covers; every one of them failed on the
version before the method registry (2707bd9).
"""

from __future__ import annotations

import json
import random
import re
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from helpers import cli, cli_json, make_table, snapshot
from psycopg import sql

from dbanon import methods
from dbanon.api import Database
from dbanon.cli import main
from dbanon.errors import DbanonError
from dbanon.lifecycle.declare import release_spec
from dbanon.methods.base import BuildContext, Method, Resolved

DX = ["flu", "asthma", "diabetes", "cancer", "gout", "angina"]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def ward(conn: psycopg.Connection) -> psycopg.Connection:
    rng = random.Random(5)
    rows = [
        (i, rng.randint(20, 79), rng.choice(["N", "S", "E", "W"]), rng.choice("FM"),
         rng.choice(DX))
        for i in range(1, 301)
    ]  # fmt: skip
    make_table(
        conn, "h", "ward",
        [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("sex", "text"),
         ("dx", "text")],
        rows,
    )  # fmt: skip
    return conn


def publish(dsn: str, name: str, *args: str) -> tuple[int, dict]:
    return cli_json(dsn, "publish", name, "--source", "h.ward", "--key", "id",
                    "--qi", "age,region,sex", *args)  # fmt: skip


def class_sizes(conn: psycopg.Connection, relation: str, qi: str = "age, region, sex") -> list:
    schema, name = relation.split(".")
    return [
        r[0]
        for r in conn.execute(
            sql.SQL("SELECT count(*) FROM {} GROUP BY {}").format(
                sql.Identifier(schema, name), sql.SQL(qi)
            )
        ).fetchall()
    ]


def but_runs(state: dict) -> dict:
    """A snapshot without the run trail, which a failed run of a release rightly adds to."""
    return {**state, "relations": {k: v for k, v in state["relations"].items()
                                   if k != "dbanon.run"}}  # fmt: skip


# --- the plug-in interface ----------------------------------------------------------------------


class OneClass(Method):
    """A toy method: every QI generalised to '*', so the release is one class of all rows."""

    name = "toy_oneclass"
    summary = "every quasi-identifier replaced by '*'"
    promises = ("k-anonymity", "distinct-l-diversity")
    requires = ("k-anonymity",)
    broken = False

    def build(self, conn: psycopg.Connection, r: Resolved, ctx: BuildContext) -> dict[str, Any]:
        built = ctx.made(r.objects[0])
        star = [sql.SQL("'*'::text AS {}").format(c.ident) for c in r.qi]
        keep = [c.ident for c in r.sensitive]
        limit = sql.SQL(" LIMIT 1") if self.broken else sql.SQL("")
        conn.execute(
            sql.SQL("CREATE TABLE {} AS SELECT {} FROM {}{}").format(
                r.stored(built), sql.SQL(", ").join(star + keep), r.source.ident, limit
            )
        )
        return {"gcp": 1.0, "toy": True}


@pytest.fixture
def toy() -> Any:
    method = methods.register(OneClass())
    yield method
    methods.unregister(method.name)


def test_a_registered_method_publishes_through_the_lifecycle(
    ward: psycopg.Connection, dsn: str, toy: OneClass
) -> None:
    spec = release_spec(
        "toy", "h.ward", "id", ["age", "region"], sensitive=["dx"], method=toy.name, k=5, l=3
    )
    with Database(dsn) as db:
        result = db.publish(spec)
        assert result.rows == 300 and result.classes == 1 and result.metrics["toy"] is True
        assert db.report("toy")["method"] == toy.name
    assert ward.execute("SELECT count(DISTINCT (age, region)) FROM released.toy").fetchone()[0] == 1
    # A build that breaks its promise is refused by the lifecycle's gate, previous kept.
    toy.broken = True
    before = snapshot(ward)
    with Database(dsn) as db, pytest.raises(DbanonError, match="failed its check of k"):
        db.publish(spec, replace=True)
    assert but_runs(snapshot(ward)) == but_runs(before)
    last = ward.execute("SELECT status, error FROM dbanon.run ORDER BY id DESC").fetchone()
    assert last[0] == "failed" and "failed its check of k-anonymity" in last[1]
    # A model the method does not promise is refused before anything is written.
    bad = release_spec("toy2", "h.ward", "id", ["age"], method=toy.name, k=5, t=0.3)
    with Database(dsn) as db, pytest.raises(DbanonError, match="cannot promise --t"):
        db.publish(bad)


def test_the_lifecycle_names_no_method() -> None:
    for path in (ROOT / "dbanon" / "lifecycle").glob("*.py"):
        text = path.read_text()
        for name in methods.methods():
            assert not re.search(rf"\b{name}\b", text), (path.name, name)


def test_methods_lists_every_method_and_the_readme_agrees() -> None:
    out = CliRunner().invoke(main, ["methods", "--json"])
    listed = {m["name"]: m for m in json.loads(out.stdout)["methods"]}
    assert set(listed) == set(methods.methods())
    for m in listed.values():
        assert m["summary"] and (m["promises"] or m["name"] in ("ina", "noise"))
    assert {o["flag"] for o in listed["kmember"]["options"]} >= {"--seed", "--seeding"}
    # The README's method table is the registry's, as `dbanon methods --markdown` prints it.
    table = CliRunner().invoke(main, ["methods", "--markdown"]).stdout.strip()
    assert len(table.splitlines()) == 2 + len(listed)
    assert table in (ROOT / "README.md").read_text()
    # publish --help lists each method's options with the methods that take them.
    helptext = CliRunner().invoke(main, ["publish", "--help"]).stdout
    assert "--seeding" in helptext and "--max-suppression" in helptext


# --- item 4: the workflow -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--algorithm", "fulldomain", "--k", "5"],
        ["--algorithm", "anatomy", "--sensitive", "dx", "--l", "3"],
        ["--algorithm", "mondrian", "--k", "5"],
        ["--k", "5"],
    ],
    ids=["fulldomain", "anatomy", "mondrian", "kmember"],
)
def test_report_has_one_shape_for_every_method(
    ward: psycopg.Connection, dsn: str, args: list[str]
) -> None:
    code, out = publish(dsn, "r", *args)
    assert code == 0, out
    code, rep = cli_json(dsn, "report", "r")
    assert code == 0, rep
    for key in (
        "release",
        "method",
        "models",
        "objects",
        "rows",
        "classes",
        "min_class_size",
        "gcp",
        "seconds",
        "published_at",
        "method_metrics",
        "last_failure",
        "warnings",
    ):
        assert key in rep, key  # fmt: skip
    assert rep["rows"] == 300 and rep["last_failure"] is None and rep["warnings"] == []
    assert cli(dsn, "report", "r").exit_code == 0  # the human form too
    # A failed refresh newer than the success shows; a missing object is warned about.
    ward.execute("UPDATE h.ward SET age = NULL WHERE id = 1")
    assert cli(dsn, "refresh", "r").exit_code == 2
    ward.execute(
        sql.SQL("DROP VIEW {} CASCADE").format(sql.Identifier(*rep["objects"][-1].split(".")))
    )
    code, rep = cli_json(dsn, "report", "r")
    assert code == 0 and "NULL" in rep["last_failure"]["error"]
    assert rep["warnings"] == [f"released relation {rep['objects'][-1]} is missing"]
    human = cli(dsn, "report", "r")
    assert human.exit_code == 0 and "latest run failed" in human.stdout


def test_json_after_the_subcommand_and_json_errors(ward: psycopg.Connection, dsn: str) -> None:
    result = CliRunner().invoke(main, ["--dsn", dsn, "check", "h.ward", "--qi", "age", "--k",
                                       "2", "--json"])  # fmt: skip
    assert json.loads(result.stdout)["holds"] in (True, False)
    result = CliRunner().invoke(main, ["--dsn", dsn, "check", "h.nope", "--qi", "age", "--k",
                                       "2", "--json"])  # fmt: skip
    assert result.exit_code == 2
    assert json.loads(result.stdout) == {"error": "relation h.nope does not exist", "exit": 2}
    result = CliRunner().invoke(main, ["--dsn", dsn, "--json", "check", "h.ward"])  # no --qi
    assert result.exit_code == 2 and "--qi" in json.loads(result.stdout)["error"]


def test_publish_of_an_existing_name_needs_replace(ward: psycopg.Connection, dsn: str) -> None:
    assert publish(dsn, "rel", "--k", "5")[0] == 0
    before = snapshot(ward)
    make_table(
        ward,
        "h2",
        "other",
        [("id", "int"), ("age", "int"), ("region", "text"), ("sex", "text")],
        [(1, 30, "N", "F"), (2, 31, "N", "F")],
    )
    before = snapshot(ward)
    code, out = cli_json(dsn, "publish", "rel", "--source", "h2.other", "--key", "id",
                         "--qi", "age", "--k", "2")  # fmt: skip
    assert code == 2 and "release 'rel' exists" in out["error"] and "refresh" in out["error"]
    assert snapshot(ward) == before
    code, out = cli_json(dsn, "publish", "rel", "--source", "h2.other", "--key", "id",
                         "--qi", "age", "--k", "2", "--replace")  # fmt: skip
    assert code == 0 and out["rows"] == 2


def test_replace_keeps_grants_unless_revoked(ward: psycopg.Connection, dsn: str) -> None:
    roles = [f"reader_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for role in roles:
        ward.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
    try:
        assert publish(dsn, "g", "--k", "5", "--grant", roles[0], "--grant", roles[1])[0] == 0
        code, out = publish(dsn, "g", "--k", "6", "--replace")
        assert code == 0 and sorted(out["grants"]["kept"]) == sorted(roles)
        human = cli(dsn, "publish", "g", "--source", "h.ward", "--key", "id", "--qi", "age",
                    "--k", "6", "--replace", "--revoke", roles[1])  # fmt: skip
        assert human.exit_code == 0 and f"grants revoked: {roles[1]}" in human.stdout
        can = [
            ward.execute("SELECT has_table_privilege(%s, 'released.g', 'SELECT')", [r]).fetchone()[
                0
            ]
            for r in roles
        ]
        assert can == [True, False]
    finally:
        for role in roles:
            ward.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            ward.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_target_is_parsed_as_the_source_is(ward: psycopg.Connection, dsn: str) -> None:
    code, out = publish(dsn, "q", "--k", "5", "--target", '"Out.Schema"."My ""T"""')
    assert code == 0, out
    assert out["table"] == '"Out.Schema"."My ""T"""'  # as SQL needs it
    released = sql.Identifier("Out.Schema", 'My "T"')
    assert ward.execute(sql.SQL("SELECT count(*) FROM {}").format(released)).fetchone()[0] == 300
    before = snapshot(ward)
    code, out = publish(dsn, "q2", "--k", "5", "--target", "a.b.c")
    assert code == 2 and "'a.b.c' is not SCHEMA.NAME" in out["error"]
    assert snapshot(ward) == before


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (["--algorithm", "anatomy", "--sensitive", "dx", "--l", "3"], ["--k", "5"]),
        (["--k", "5"], ["--algorithm", "fulldomain", "--k", "5"]),
        (["--algorithm", "fulldomain", "--k", "5"], ["--algorithm", "mondrian", "--k", "5"]),
    ],
    ids=["anatomy-kmember", "kmember-fulldomain", "fulldomain-mondrian"],
)
def test_two_releases_on_one_target_get_one_message(
    ward: psycopg.Connection, dsn: str, first: list[str], second: list[str]
) -> None:
    assert publish(dsn, "one", "--target", "released.t", *first)[0] == 0
    before = snapshot(ward)
    code, out = publish(dsn, "two", "--target", "released.t", *second)
    assert code == 2 and re.fullmatch(
        r"released\.t\S* is the target of release 'one'", out["error"]
    )
    assert snapshot(ward) == before


def test_refresh_never_drops_a_relation_it_did_not_publish(
    ward: psycopg.Connection, dsn: str
) -> None:
    assert publish(dsn, "mine", "--k", "5")[0] == 0
    ward.execute("DROP VIEW released.mine")
    ward.execute("CREATE TABLE released.mine AS SELECT 42 AS precious")
    before = snapshot(ward)
    code, out = cli_json(dsn, "refresh", "mine")
    assert code == 2 and "dbanon will not drop it" in out["error"]
    assert ward.execute("SELECT precious FROM released.mine").fetchone()[0] == 42
    after = snapshot(ward)["relations"]
    changed = [r for r in after if after[r] != before["relations"].get(r)]
    assert changed == ["dbanon.run"]  # the failed run, logged


def test_a_byte_order_mark_is_not_part_of_the_first_leaf(
    ward: psycopg.Connection, dsn: str, tmp_path: Path
) -> None:
    path = tmp_path / "region.csv"
    path.write_text("N;north;*\nS;south;*\nE;east;*\nW;west;*\n", encoding="utf-8-sig")
    assert cli(dsn, "hierarchy", "import", "region", str(path)).exit_code == 0
    code, shown = cli_json(dsn, "hierarchy", "show", "region")
    assert code == 0 and ["N", "north", "*"] in shown["rows"]
    assert publish(dsn, "h", "--k", "5", "--hierarchy", "region=region")[0] == 0


def test_anatomy_summary_names_the_objects_it_created(ward: psycopg.Connection, dsn: str) -> None:
    code, out = publish(dsn, "ana", "--algorithm", "anatomy", "--sensitive", "dx", "--l", "3")
    assert code == 0
    assert out["objects"] == ["released.ana_qit", "released.ana_st"]
    for obj in [out["table"], *out["objects"]]:
        schema, name = obj.split(".")
        assert ward.execute("SELECT to_regclass(%s)", [obj]).fetchone()[0] is not None, name


def test_mondrian_names_the_value_that_breaks_l(ward: psycopg.Connection, dsn: str) -> None:
    ward.execute("UPDATE h.ward SET dx = 'flu' WHERE id % 10 <> 0")
    code, out = publish(dsn, "m", "--algorithm", "mondrian", "--k", "5", "--sensitive", "dx",
                        "--l", "3", "--l-kind", "entropy")  # fmt: skip
    assert code == 2 and "dx = 'flu' holds 9" in out["error"] and "code" not in out["error"]
    ward.execute("UPDATE h.ward SET dx = 'gout' WHERE id % 10 = 0")
    code, out = publish(dsn, "m", "--algorithm", "mondrian", "--k", "5", "--sensitive", "dx",
                        "--l", "3")  # fmt: skip
    assert code == 2 and "only 2 distinct values of dx" in out["error"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--algorithm", "mondrian", "--k", "5", "--seeding", "furthest"],
         "--seeding does not apply to --algorithm mondrian (an option of kmember)"),
        (["--algorithm", "fulldomain", "--k", "5", "--seed", "3"],
         "--seed does not apply to --algorithm fulldomain"),
        (["--algorithm", "mondrian", "--k", "5", "--sensitive", "dx", "--l", "1"],
         "--l 1 promises nothing"),
        (["--algorithm", "mondrian", "--k", "5", "--sensitive", "dx", "--l", "2.5"],
         "--l must be a whole number, got 2.5"),
        (["--algorithm", "anatomy", "--sensitive", "dx", "--l", "2.5"],
         "--algorithm anatomy needs a whole --l, got 2.5"),
        (["--k", "5", "--ranges", "fancy"], "Invalid value for '--ranges'"),
    ],
)  # fmt: skip
def test_options_a_method_ignores_are_refused(
    ward: psycopg.Connection, dsn: str, args: list[str], message: str
) -> None:
    before = snapshot(ward)
    code, out = publish(dsn, "x", *args)
    assert code == 2 and message in out["error"], out
    assert snapshot(ward) == before


def test_entropy_l_may_be_fractional(ward: psycopg.Connection, dsn: str) -> None:
    code, out = publish(dsn, "e", "--algorithm", "mondrian", "--k", "5", "--sensitive", "dx",
                        "--l", "2.5", "--l-kind", "entropy")  # fmt: skip
    assert code == 0, out


def test_every_offender_is_named(ward: psycopg.Connection, dsn: str, tmp_path: Path) -> None:
    ward.execute("UPDATE h.ward SET age = NULL, sex = NULL WHERE id <= 2")
    code, out = publish(dsn, "n", "--k", "5")
    assert code == 2 and "age in 2 rows, sex in 2 rows" in out["error"]
    ward.execute("UPDATE h.ward SET age = 30, sex = 'F' WHERE id <= 2")
    ward.execute("UPDATE h.ward SET region = 'R' || id WHERE id <= 7")
    path = tmp_path / "region.csv"
    path.write_text("N;north;*\nS;south;*\nE;east;*\nW;west;*\n")
    assert cli(dsn, "hierarchy", "import", "region", str(path)).exit_code == 0
    code, out = publish(dsn, "n", "--k", "5", "--hierarchy", "region=region")
    assert code == 2
    assert "'R1', 'R2', 'R3', 'R4', 'R5', ... (7 in all)" in out["error"], out


# --- item 6: catalog commands -------------------------------------------------------------------


def test_releases_and_drop(ward: psycopg.Connection, dsn: str) -> None:
    assert publish(dsn, "a", "--k", "5")[0] == 0
    assert publish(dsn, "b", "--algorithm", "anatomy", "--sensitive", "dx", "--l", "2")[0] == 0
    code, out = cli_json(dsn, "releases")
    listed = {r["name"]: r for r in out["releases"]}
    assert listed["a"]["method"] == "kmember" and listed["a"]["last_status"] == "succeeded"
    assert listed["b"]["objects"] == ["released.b_qit", "released.b_st"]
    assert listed["a"]["rows"] == 300 and listed["a"]["models"] == ["k-anonymity (k=5)"]
    # drop asks; with no one to ask it needs --yes, and changes nothing without it
    before = snapshot(ward)
    code, out = cli_json(dsn, "drop", "b")
    assert code == 2 and "--yes" in out["error"] and snapshot(ward) == before
    code, out = cli_json(dsn, "drop", "b", "--yes")
    assert code == 0 and out["dropped"] == ["released.b_qit", "released.b_st"]
    assert ward.execute("SELECT to_regclass('released.b_qit')").fetchone()[0] is None
    assert [r["name"] for r in cli_json(dsn, "releases")[1]["releases"]] == ["a"]
    assert ward.execute("SELECT count(*) FROM released.a").fetchone()[0] == 300


def test_hierarchy_show_and_drop(ward: psycopg.Connection, dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "region.csv"
    path.write_text("N;north;*\nS;south;*\nE;east;*\nW;west;*\n")
    assert cli(dsn, "hierarchy", "import", "region", str(path)).exit_code == 0
    shown = cli(dsn, "hierarchy", "show", "region")
    assert shown.exit_code == 0 and sorted(shown.stdout.split()) == sorted(path.read_text().split())
    assert publish(dsn, "uses", "--k", "5", "--hierarchy", "region=region")[0] == 0
    code, out = cli_json(dsn, "hierarchy", "drop", "region")
    assert code == 2 and "used by release(s) 'uses'" in out["error"]
    assert cli_json(dsn, "drop", "uses", "--yes")[0] == 0
    assert cli_json(dsn, "hierarchy", "drop", "region")[0] == 0
    assert cli_json(dsn, "hierarchy", "show", "region")[0] == 2
