"""Bad input: a one-line error naming the culprit, exit code 2, the database unchanged."""

from __future__ import annotations

import json

import psycopg
import pytest
from helpers import cli, make_table, snapshot

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
    ({"--source": "src.missing"}, "relation 'src.missing' does not exist"),
    ({"--qi": "age,town"}, "column 'town' does not exist in src.people"),
    ({"--key": "ident"}, "column 'ident' does not exist in src.people"),
    ({"--sensitive": "diagnosis"}, "column 'diagnosis' does not exist in src.people"),
    ({"--source": "src.dupkey"}, "key column 'id' of src.dupkey is not unique: 3 duplicate"),
    ({"--source": "src.dupkey2"}, "key column 'id' of src.dupkey2 is not unique: 3 duplicate"),
    ({"--source": "src.nullkey"}, "key column 'id' of src.nullkey has 1 NULL values"),
    (
        {"--source": "src.nulls"},
        "quasi-identifiers of src.nulls are NULL: 'age' in 3 rows, 'city' in 3 rows",
    ),
    ({"--k": "1"}, "k must be at least 2, got 1"),
    ({"--k": "31"}, "k=31 is larger than the 30 rows of src.people"),
    ({"--hierarchy": "city=city"}, "values of column 'city' are not in hierarchy 'city': 'Tromsø'"),
    ({"--hierarchy": "city=nope"}, "hierarchy 'nope' does not exist"),
    ({"--hierarchy": "dx=city"}, "hierarchy given for 'dx', which is not a quasi-identifier"),
    ({"--hierarchy": "city"}, "--hierarchy takes COLUMN=HIERARCHY, got 'city'"),
    ({"--qi": "age,id"}, "column 'id' is named twice"),
    ({"--target": "src.out"}, "the release must go to its own schema, not the source's ('src')"),
    ({"--target": "src2.people_copy", "--grant": "no such role"}, "role 'no such role' does not"),
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


@pytest.mark.parametrize(
    ("content", "where"),
    [(b"Oslo;Norge;*\nTroms\xf8;Norge;*\n", "byte 0xf8 on line 2"),
     ("Oslo;Norge;*\n".encode("utf-16"), "byte 0xff on line 1")],
    ids=["latin-1", "utf-16"],
)  # fmt: skip
def test_hierarchy_file_that_is_not_utf8(
    conn: psycopg.Connection, dsn: str, tmp_path, content: bytes, where: str  # noqa: ANN001
) -> None:
    """Before, a UnicodeDecodeError traceback, exit 1 (issue 31, item 5)."""
    path = tmp_path / "city.csv"
    path.write_bytes(content)
    args = ["hierarchy", "import", "city", str(path)]
    refused(conn, dsn, args, f"hierarchy file {str(path)!r} is not UTF-8: {where}")


def test_spec_file_that_is_not_utf8(conn: psycopg.Connection, dsn: str, tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "releases.toml"
    path.write_bytes(b'[releases.r]\nsource = "src.caf\xe9"\n')
    refused(conn, dsn, ["apply", str(path)], f"{path}:2: not UTF-8 (byte 0xe9)")
