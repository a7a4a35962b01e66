"""Bad input: a one-line error naming the culprit, exit code 2, the database unchanged."""

from __future__ import annotations

import json

import psycopg
import pytest
from helpers import cli, make_table, snapshot
from psycopg import sql

BASE = {
    "name": "r",
    "--source": "src.people",
    "--key": "id",
    "--qi": "age,city",
    "--sensitive": "dx",
    "--k": "2",
}


def publish_args(**changes: str | None) -> list[str]:
    opts = {**BASE, **changes}
    args = ["publish", opts.pop("name")]  # type: ignore[list-item]
    for key, value in opts.items():
        if value is not None:
            args += [key, value]
    return args


@pytest.fixture
def people(conn: psycopg.Connection, dsn: str, tmp_path) -> psycopg.Connection:  # noqa: ANN001
    rows = [(i, 20 + i % 7, ["Oslo", "Bergen", "Tromsø"][i % 3], f"d{i % 4}") for i in range(1, 31)]
    make_table(
        conn,
        "src",
        "people",
        [("id", "int"), ("age", "int"), ("city", "text"), ("dx", "text")],
        rows,
    )
    conn.execute("CREATE TABLE src.dupkey AS SELECT * FROM src.people")
    conn.execute("INSERT INTO src.dupkey SELECT * FROM src.people WHERE id <= 3")
    conn.execute("CREATE TABLE src.nulls AS SELECT * FROM src.people")
    conn.execute("UPDATE src.nulls SET age = NULL WHERE id IN (4, 5, 6)")
    conn.execute("UPDATE src.nulls SET city = NULL WHERE id IN (4, 5, 6)")
    conn.execute("CREATE TABLE src.nullkey AS SELECT * FROM src.people")
    conn.execute("UPDATE src.nullkey SET id = NULL WHERE id = 7")
    # Unique indexes that do not make the key unique: partial, or over more columns.
    conn.execute("CREATE UNIQUE INDEX ON src.dupkey (id) WHERE id > 3")
    conn.execute("CREATE TABLE src.dupkey2 AS SELECT *, row_number() OVER () AS n FROM src.dupkey")
    conn.execute("CREATE UNIQUE INDEX ON src.dupkey2 (id, n)")
    # A unique key that may hold NULLs.
    conn.execute("CREATE UNIQUE INDEX ON src.nullkey (id)")
    path = tmp_path / "city.csv"
    path.write_text("Oslo;Norway;*\nBergen;Norway;*\n")  # no Tromsø
    assert cli(dsn, "hierarchy", "import", "city", str(path)).exit_code == 0
    return conn


CASES = [
    ({"--source": "src.missing"}, "relation src.missing does not exist"),
    ({"--qi": "age,town"}, "column town does not exist in src.people"),
    ({"--key": "ident"}, "column ident does not exist in src.people"),
    ({"--sensitive": "diagnosis"}, "column diagnosis does not exist in src.people"),
    ({"--source": "src.dupkey"}, "key column id of src.dupkey is not unique: 3 duplicate"),
    ({"--source": "src.dupkey2"}, "key column id of src.dupkey2 is not unique: 3 duplicate"),
    ({"--source": "src.nullkey"}, "key column id of src.nullkey has 1 NULL values"),
    (
        {"--source": "src.nulls"},
        "quasi-identifiers of src.nulls are NULL: age in 3 rows, city in 3 rows",
    ),
    ({"--k": "1"}, "k must be at least 2, got 1"),
    ({"--k": "31"}, "k=31 is larger than the 30 rows of src.people"),
    ({"--hierarchy": "city=city"}, "values of column city are not in hierarchy 'city': 'Tromsø'"),
    ({"--hierarchy": "city=nope"}, "hierarchy 'nope' does not exist"),
    ({"--hierarchy": "dx=city"}, "hierarchy given for dx, which is not a quasi-identifier"),
    ({"--hierarchy": "city"}, "--hierarchy takes COLUMN=HIERARCHY, got 'city'"),
    ({"--qi": "age,id"}, "column id is named twice"),
    ({"--target": "src.out"}, "the release must go to its own schema, not the source's (src)"),
    ({"--target": "src2.people_copy", "--grant": "no such role"}, 'role "no such role" does not'),
]


@pytest.mark.parametrize(("changes", "message"), CASES, ids=[m[:30] for _, m in CASES])
def test_bad_publish_input(
    people: psycopg.Connection, dsn: str, changes: dict, message: str
) -> None:
    before = snapshot(people)
    result = cli(dsn, *publish_args(**changes))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1
    assert snapshot(people) == before


def test_target_that_is_not_a_release_is_not_overwritten(
    people: psycopg.Connection, dsn: str
) -> None:
    people.execute("CREATE SCHEMA out; CREATE TABLE out.precious AS SELECT 1 AS x")
    before = snapshot(people)
    result = cli(dsn, *publish_args(**{"--target": "out.precious"}))
    assert result.exit_code == 2 and "exists and is not a dbanon release" in result.stderr
    assert snapshot(people) == before


def test_catalog_missing_is_explained(conn: psycopg.Connection, dsn: str) -> None:
    conn.execute("DROP SCHEMA dbanon CASCADE")
    result = cli(dsn, *publish_args())
    assert result.exit_code == 2 and "run `dbanon init`" in result.stderr


def test_unreachable_server() -> None:
    result = cli(
        "postgresql://nobody@/nodb?host=/nonexistent", "check", "t", "--qi", "a", "--k", "2"
    )
    assert result.exit_code == 2 and result.stderr.startswith("error: cannot connect to PostgreSQL")


# --- values no algorithm can measure, keys no view can keep, files that are not UTF-8 -------------


def refused(
    conn: psycopg.Connection, dsn: str, args: list[str], message: str, volatile: tuple = ()
) -> None:
    """`args` fail with one line naming the culprit, exit 2, and change nothing; with --json,
    exactly one JSON object on stdout and nothing on stderr. The rows of `volatile` views
    (random()) differ at every read: only that they still exist is compared."""

    def state() -> dict:
        now = snapshot(conn)
        for name in volatile:
            now["relations"][name] = now["relations"][name][0]
        return now

    before = state()
    result = cli(dsn, *args)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert state() == before
    as_json = cli(dsn, "--json", *args)
    assert as_json.exit_code == 2 and as_json.stderr == "", as_json.stderr
    assert as_json.stdout.count("\n") == 1, as_json.stdout
    error = json.loads(as_json.stdout)
    assert error["exit"] == 2 and message in error["error"], error
    assert state() == before


@pytest.fixture
def values(conn: psycopg.Connection) -> psycopg.Connection:
    """src.vals: one column of every type that can hold a value that is no number or no point
    in time (and a domain over one), all finite; a test puts one such value in."""
    conn.execute("CREATE DOMAIN public.score AS float8")
    rows = [
        (i, 20 + i % 7, i * 1.5, i * 0.5, i * 2.5, i * 0.25, f"2000-01-{1 + i % 28:02d}",
         f"2000-01-01 {i % 24:02d}:00", f"2000-01-01 {i % 24:02d}:00+00",
         ["Oslo", "Bergen", "Tromsø"][i % 3], f"d{i % 4}")
        for i in range(1, 31)
    ]  # fmt: skip
    make_table(
        conn, "src", "vals",
        [("id", "int"), ("age", "int"), ("x", "float8"), ("r", "float4"), ("n", "numeric"),
         ("sc", "public.score"), ("d", "date"), ("ts", "timestamp"), ("tz", "timestamptz"),
         ("city", "text"), ("dx", "text")],
        rows,
    )  # fmt: skip
    return conn


# (column, value put in row 3, publish arguments after --source src.vals --key id, message)
HOLDS = "of src.vals holds"
BEYOND = "a value beyond double precision"  # numeric that float8 cannot hold
NOT_FINITE = [
    ("x", "Infinity", "--qi x --algorithm noise", f"column x {HOLDS} Infinity"),
    ("x", "NaN", "--qi x,age --algorithm ina --sample 10", f"column x {HOLDS} NaN"),
    ("n", "NaN", "--qi n --algorithm noise", f"column n {HOLDS} NaN"),
    ("n", "-Infinity", "--qi n,age --algorithm ina --sample 10", f"column n {HOLDS} -Infinity"),
    ("x", "Infinity", "--qi x,age --k 2 --algorithm fulldomain", f"column x {HOLDS} Infinity"),
    ("r", "-Infinity", "--qi r,city --k 2 --algorithm mondrian", f"column r {HOLDS} -Infinity"),
    ("sc", "NaN", "--qi sc,city --k 2", f"column sc {HOLDS} NaN"),
    ("n", "1e400", "--qi n,age --k 2 --algorithm fulldomain", f"column n {HOLDS} {BEYOND}"),
    ("n", "-1e-400", "--qi n,city --k 2", f"column n {HOLDS} {BEYOND}"),
    ("d", "infinity", "--qi d,age --k 2", f"column d {HOLDS} infinity"),
    ("ts", "-infinity", "--qi ts,age --k 2 --algorithm fulldomain", f"column ts {HOLDS} -infinity"),
    ("tz", "infinity", "--qi tz,city --k 2 --algorithm mondrian", f"column tz {HOLDS} infinity"),
    ("x", "Infinity", "--qi x,age --sensitive dx --k 2 --algorithm rfka", f" x {HOLDS} Infinity"),
    ("d", "infinity", "--qi d,age --sensitive dx --k 2 --l 2 --algorithm lag", f"{HOLDS} infinity"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("column", "value", "args", "message"), NOT_FINITE,
    ids=[f"{c}={v}-{a.split()[-1]}" for c, v, a, _ in NOT_FINITE],
)  # fmt: skip
def test_values_that_are_no_number_are_refused(
    values: psycopg.Connection, dsn: str, column: str, value: str, args: str, message: str
) -> None:
    """Infinity, NaN, infinite dates in a QI the method measures (issue 31, item 5): before,
    a traceback (noise, ina, fulldomain, rfka), a 'NaN' refusal of a date with a warning
    (kmember), or a release (lag)."""
    values.execute(
        sql.SQL("UPDATE src.vals SET {} = %s WHERE id = 3").format(sql.Identifier(column)),
        [value],
    )
    publish = ["publish", "r", "--source", "src.vals", "--key", "id", *args.split()]
    refused(values, dsn, publish, f"{message} (1 row); --algorithm ")


def test_every_culprit_is_named(values: psycopg.Connection, dsn: str) -> None:
    values.execute("UPDATE src.vals SET x = 'NaN', d = '-infinity' WHERE id IN (3, 4)")
    values.execute("UPDATE src.vals SET x = 'Infinity' WHERE id = 5")
    args = ["publish", "r", "--source", "src.vals", "--key", "id", "--qi", "x,d,age", "--k", "2"]
    refused(values, dsn, args, "column x of src.vals holds Infinity (1 row) and NaN (2 rows), "
            "column d holds -infinity (2 rows); --algorithm kmember needs finite")  # fmt: skip


def test_values_released_as_they_are_need_not_be_numbers(
    values: psycopg.Connection, dsn: str
) -> None:
    """Anatomy releases its QIs as they are and measures none: Infinity is no reason to refuse."""
    values.execute("UPDATE src.vals SET x = 'Infinity', d = 'infinity' WHERE id = 3")
    result = cli(dsn, "publish", "r", "--source", "src.vals", "--key", "id", "--qi", "x,d",
                 "--sensitive", "dx", "--l", "2", "--algorithm", "anatomy")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert values.execute(
        "SELECT count(*) FROM released.r_qit WHERE x = 'Infinity' AND d = 'infinity'"
    ).fetchone()[0] == 1  # fmt: skip


@pytest.fixture
def views(people: psycopg.Connection) -> psycopg.Connection:
    """Views over src.people whose key is computed, and views that pass its key through."""
    for name, select in {
        "random_key": "SELECT (random() * 1e9)::int8 AS id, age, city, dx FROM src.people",
        "numbered": "SELECT row_number() OVER () AS id, age, city, dx FROM src.people",
        "shifted": "SELECT id + 0 AS id, age, city, dx FROM src.people",
        "over_random": "SELECT * FROM src.random_key",
        "row_ids": "SELECT ctid AS id, age, city, dx FROM src.people",
        "passed": "SELECT id, age, city, dx FROM src.people WHERE id > 0",
        "renamed": 'SELECT p.id AS "Pid", p.age, p.city, p.dx FROM src.people p',
        "over_passed": 'SELECT s."Pid", s.age, s.city, q.dx FROM (SELECT * FROM src.renamed) s '
                       'JOIN src.people q ON q.id = s."Pid"',
        "grouped": "SELECT id, max(age) AS age, max(city) AS city, max(dx) AS dx "
                   "FROM src.people GROUP BY id",
    }.items():  # fmt: skip
        people.execute(sql.SQL("CREATE VIEW {} AS " + select).format(sql.Identifier("src", name)))
    people.execute("CREATE MATERIALIZED VIEW src.stored AS SELECT * FROM src.random_key")
    return people


COMPUTED = [
    ("random_key", "of view src.random_key is computed by the view, not a column of a table"),
    ("numbered", "of view src.numbered is computed by the view"),
    ("shifted", "of view src.shifted is computed by the view"),
    ("over_random", "of src.over_random is computed by view src.random_key"),
    ("row_ids", "of view src.row_ids is computed by the view"),
]


@pytest.mark.parametrize(("view", "message"), COMPUTED, ids=[v for v, _ in COMPUTED])
def test_a_key_a_view_computes_is_refused(
    views: psycopg.Connection, dsn: str, view: str, message: str
) -> None:
    """Before, a view keyed on random() published 0 rows with exit 0 (issue 31, item 5)."""
    args = ["publish", "r", "--source", f"src.{view}", "--key", "id", "--qi", "age,city"]
    refused(views, dsn, [*args, "--k", "2"], f"key column id {message}",
            volatile=("src.random_key", "src.over_random"))  # fmt: skip


@pytest.mark.parametrize(
    ("view", "key"),
    [("passed", "id"), ("renamed", "Pid"), ("over_passed", "Pid"), ("grouped", "id"),
     ("stored", "id")],
)  # fmt: skip
def test_a_key_passed_through_is_accepted(
    views: psycopg.Connection, dsn: str, view: str, key: str
) -> None:
    """A table's key passed through views (renamed, in a subquery, a join, a GROUP BY) and a
    materialised view's stored column are keys: every source row is released."""
    result = cli(dsn, "publish", "r", "--source", f"src.{view}", "--key", key,
                 "--qi", "age,city", "--k", "2")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert views.execute("SELECT count(*) FROM released.r").fetchone()[0] == 30


@pytest.mark.parametrize(
    ("content", "where"),
    [(b"Oslo;Norge;*\nTroms\xf8;Norge;*\n", "is not UTF-8: byte 0xf8 on line 2"),
     ("Oslo;Norge;*\n".encode("utf-16"), "is not UTF-8: byte 0xff on line 1"),
     ("Oslo;*\nBergen;*\n".encode("utf-16-le"), "holds a NUL byte on line 1")],
    ids=["latin-1", "utf-16", "utf-16-le"],
)  # fmt: skip
def test_hierarchy_file_that_is_not_utf8(
    conn: psycopg.Connection, dsn: str, tmp_path, content: bytes, where: str  # noqa: ANN001
) -> None:
    """Before, a UnicodeDecodeError traceback, exit 1 (issue 31, item 5)."""
    path = tmp_path / "city.csv"
    path.write_bytes(content)
    args = ["hierarchy", "import", "city", str(path)]
    refused(conn, dsn, args, f"hierarchy file {str(path)!r} {where}")


def test_spec_file_that_is_not_utf8(conn: psycopg.Connection, dsn: str, tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "releases.toml"
    path.write_bytes(b'[releases.r]\nsource = "src.caf\xe9"\n')
    refused(conn, dsn, ["apply", str(path)], f"{path}:2: not UTF-8 (byte 0xe9)")


@pytest.mark.parametrize("change", ["value", "key"])
def test_a_refresh_meeting_bad_input_keeps_the_release(
    people: psycopg.Connection, dsn: str, change: str
) -> None:
    """A source that gains an Infinity, or a view redefined to compute its key, after the
    release was published: the refresh is one line, exit 2, and the release stays as it was;
    only the run's record (failed, with that line) is new."""
    people.execute("ALTER TABLE src.people ADD COLUMN score float8")
    people.execute("UPDATE src.people SET score = id * 1.5")
    people.execute("CREATE VIEW src.live AS SELECT id, age, city, dx, score FROM src.people")
    args = ["--source", "src.live", "--key", "id", "--qi", "age,score", "--k", "2"]
    assert cli(dsn, "publish", "r", *args).exit_code == 0
    if change == "value":
        people.execute("UPDATE src.people SET score = 'Infinity' WHERE id = 7")
        message = "column score of src.live holds Infinity (1 row)"
    else:
        people.execute("CREATE OR REPLACE VIEW src.live AS "
                      "SELECT id * 10 AS id, age, city, dx, score FROM src.people")  # fmt: skip
        message = "key column id of view src.live is computed by the view"
    before = snapshot(people)
    result = cli(dsn, "refresh", "r")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    after = snapshot(people)
    run = "dbanon.run"
    assert {k: v for k, v in after["relations"].items() if k != run} == {
        k: v for k, v in before["relations"].items() if k != run
    }  # fmt: skip
    status, error = people.execute(
        "SELECT status, error FROM dbanon.run ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert status == "failed" and message in error


def test_a_key_is_followed_through_odd_names(people: psycopg.Connection, dsn: str) -> None:
    """Names with spaces, quotes, brackets, backslashes, a leading colon and unicode are read
    from the view's rule as PostgreSQL escapes them."""
    people.execute('CREATE SCHEMA "Sch ema"')
    people.execute('CREATE TABLE "Sch ema"."Tä""ble" AS '
                   'SELECT id AS ":Key (1)", age, city FROM src.people')  # fmt: skip
    people.execute('CREATE VIEW "Sch ema"."V {x}" AS SELECT ":Key (1)" AS "K ey\\ }", age, city '
                   'FROM "Sch ema"."Tä""ble"')  # fmt: skip
    people.execute('CREATE VIEW "Sch ema"."W" AS SELECT "K ey\\ }" || \'\' AS "K ey\\ }", age, '
                   'city FROM "Sch ema"."V {x}"')  # fmt: skip
    key = "K ey\\ }"
    args = ["--key", key, "--qi", "age,city", "--k", "2"]
    result = cli(dsn, "publish", "r", "--source", "Sch ema.V {x}", *args)
    assert result.exit_code == 0, result.stderr
    assert people.execute("SELECT count(*) FROM released.r").fetchone()[0] == 30
    refused(people, dsn, ["publish", "w", "--source", "Sch ema.W", *args],
            'key column "K ey\\ }" of view "Sch ema"."W" is computed by the view')  # fmt: skip


def test_node_tree_reads_escapes_and_datums() -> None:
    """pg_node_tree as PostgreSQL 18 writes a view's target list (copied from pg_rewrite): an
    escaped name, a Datum's bytes, empty fields."""
    from dbanon.db.source import node_tree

    text = (
        r"({QUERY :targetList ({TARGETENTRY :expr {VAR :varno 1 :varattno 1 :varnullingrels (b)} "
        r":resno 1 :resname a\ \(b\)\ \{c\}\\ :resorigtbl 16575 :resorigcol 1 :resjunk false} "
        r"{TARGETENTRY :expr {CONST :consttype 23 :constvalue 4 [ 5 0 0 0 0 0 0 0 ]} :resno 2 "
        r":resname \5 :resorigtbl 0 :resorigcol 0 :resjunk false}) :cteList <>})"
    )
    first, second = node_tree(text)[0]["targetList"]
    assert first["resname"] == "a (b) {c}\\" and first["resorigtbl"] == "16575"
    assert first["expr"] == {"": "VAR", "varno": "1", "varattno": "1", "varnullingrels": ["b"]}
    assert second["expr"]["constvalue"] == ["4", "[", "5", *["0"] * 7, "]"]
    assert (second["resname"], second["resorigtbl"], second["resorigcol"]) == ("5", "0", "0")
