"""Messages a DBA reads at a glance (issue 34, "Messages and output"): every error one line
(one JSON object with --json), exit 2 for bad input; names quoted as SQL needs them."""

from __future__ import annotations

import json

import psycopg
import pytest
from helpers import cli, make_table, snapshot
from psycopg import sql

SOURCE = ("--source", "s.t", "--key", "id")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--qi", "a", "--k", "abc"), "'--k': 'abc' is not a valid integer"),
        (("--qi", "a", "--k", "5", "--algorithm", "arx"), "'--algorithm': 'arx' is not one of"),
        (("--qi", "Age,,Marital", "--k", "5"), "empty name (item 2) in the list 'Age,,Marital'"),
        (("--qi", "Age,Marital,", "--k", "5"), "empty name (item 3)"),
    ],
)
def test_usage_errors_are_one_line(dsn: str, args: tuple[str, ...], named: str) -> None:
    result = cli(dsn, "publish", "x", *SOURCE, *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], lines
    assert "publish --help'" in lines[0]  # where help is, on the same line
    assert result.stdout == ""
    result = cli(dsn, "--json", "publish", "x", *SOURCE, *args)
    assert result.exit_code == 2 and named in json.loads(result.stdout)["error"]


def test_unknown_command_is_one_line(dsn: str) -> None:
    result = cli(dsn, "publsh")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: No such command 'publsh'; see 'main --help'"]  # CliRunner's program name


@pytest.mark.parametrize("k", ["0", "1"])
def test_publish_k_under_two_says_the_same(dsn: str, k: str) -> None:
    result = cli(dsn, "publish", "x", *SOURCE, "--qi", "a", "--k", k)
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: --k must be at least 2, got {k}: a class of one row hides nobody")


def test_a_name_postgresql_would_truncate_is_refused(conn: psycopg.Connection, dsn: str) -> None:
    make_table(conn, "s", "t", [("id", "int PRIMARY KEY"), ("a", "int")],
               [(i, i % 7) for i in range(1, 41)])  # fmt: skip
    before = snapshot(conn)
    long = "quarterly_customer_balances_by_region_and_product_line_for_the_regulator_2026"
    assert len(long.encode()) > 63
    result = cli(dsn, "publish", long, *SOURCE, "--qi", "a", "--k", "2")
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "PostgreSQL keeps 63" in line, line
    assert snapshot(conn) == before
    assert conn.execute("SELECT count(*) FROM dbanon.release").fetchone()[0] == 0
    # A multi-byte name counts in bytes, as PostgreSQL does: 32 'é' are 64 bytes.
    result = cli(dsn, "publish", "r", *SOURCE, "--qi", "a", "--k", "2", "--target",
                 "released." + "é" * 32)  # fmt: skip
    assert result.exit_code == 2 and "is 64 bytes" in result.stderr, result.output
    assert cli(dsn, "publish", "r", *SOURCE, "--qi", "a", "--k", "2", "--target",
               "released." + "é" * 31).exit_code == 0  # fmt: skip


def test_the_publish_line_shows_suppression(conn: psycopg.Connection, dsn: str) -> None:
    """Issue 34: '11024 rows in 195 classes' hid 411 suppressed rows. Full-domain with a
    suppression budget leaves the rare values' rows out; the line says how many, counted
    here from the source and the release."""
    rows = [(i, 20 + i % 40, "rare" if i % 97 == 0 else "ABCD"[i % 4]) for i in range(1, 801)]
    make_table(conn, "s", "t", [("id", "int PRIMARY KEY"), ("age", "int"), ("zone", "text")],
               rows)  # fmt: skip
    result = cli(dsn, "publish", "fd", *SOURCE, "--qi", "age,zone", "--k", "10",
                 "--algorithm", "fulldomain", "--max-suppression", "0.05")  # fmt: skip
    assert result.exit_code == 0, result.output
    released = conn.execute("SELECT count(*) FROM released.fd").fetchone()[0]
    left_out = len(rows) - released
    assert left_out > 0
    assert f": {released} of {len(rows)} rows ({left_out} suppressed) in " in result.stdout
    # A release that leaves nothing out says so in fewer words.
    result = cli(dsn, "publish", "km", *SOURCE, "--qi", "age,zone", "--k", "10")
    assert result.exit_code == 0 and f": {len(rows)} rows in " in result.stdout, result.output


def test_flags_into_names_the_table_as_sql_needs_it(conn: psycopg.Connection, dsn: str) -> None:
    make_table(conn, "s", "t", [("id", "int PRIMARY KEY"), ("a", "int")],
               [(i, i % 7) for i in range(1, 41)])  # fmt: skip
    conn.execute('CREATE SCHEMA "Bank Data"')
    result = cli(dsn, "flags", "generate", "s.t", "--key", "id", "--columns", "a",
                 "--density", "0.5", "--into", "Bank Data.Consent Flags")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == 'flagged 20 values into "Bank Data"."Consent Flags"'
    assert conn.execute('SELECT count(*) FROM "Bank Data"."Consent Flags"').fetchone()[0] == 20


def test_a_refused_replace_leaves_the_healthy_release_as_it_was(
    conn: psycopg.Connection, dsn: str
) -> None:
    """Issue 34: `publish --replace` onto a user's table is bad input (exit 2, nothing
    changed); it was recorded as a failed run, and `releases` showed the healthy release as
    `failed`. A refresh whose stored spec no longer resolves still is a failed run."""
    make_table(conn, "s", "t", [("id", "int PRIMARY KEY"), ("a", "int")],
               [(i, i % 7) for i in range(1, 41)])  # fmt: skip
    assert cli(dsn, "publish", "r", *SOURCE, "--qi", "a", "--k", "2").exit_code == 0
    conn.execute("CREATE TABLE released.mine (x int)")
    before = snapshot(conn)
    runs = conn.execute("SELECT id, status FROM dbanon.run ORDER BY id").fetchall()
    result = cli(dsn, "publish", "r", *SOURCE, "--qi", "a", "--k", "3", "--replace",
                 "--target", "released.mine")  # fmt: skip
    assert result.exit_code == 2 and "is not a dbanon release" in result.stderr, result.output
    assert snapshot(conn) == before
    assert conn.execute("SELECT id, status FROM dbanon.run ORDER BY id").fetchall() == runs
    listed = json.loads(cli(dsn, "--json", "releases").stdout)["releases"]
    assert [(r["name"], r["last_status"], r["last_failure"]) for r in listed] == [
        ("r", "succeeded", None)]
    conn.execute("ALTER TABLE s.t RENAME COLUMN a TO b")
    assert cli(dsn, "refresh", "r").exit_code == 2
    listed = json.loads(cli(dsn, "--json", "releases").stdout)["releases"]
    assert listed[0]["last_status"] == "failed"


def test_a_server_pghost_chose_is_named_when_it_cannot_be_reached() -> None:
    """Issue 34: `PGHOST=db.invalid` said "failed to resolve host None"."""
    from click.testing import CliRunner

    from dbanon.cli import main

    result = CliRunner().invoke(main, ["releases"], env={"PGHOST": "db.invalid",
                                                         "DBANON_DSN": ""})  # fmt: skip
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "host None" not in line, line
    assert "'db.invalid'" in line and "chosen by libpq environment (PGHOST=db.invalid)" in line


def report_table(text: str) -> list[list[str]]:
    return [line.split("\t") for line in text.splitlines() if "\t" in line]


def test_report_figures_are_named_once_explained_and_rounded(
    conn: psycopg.Connection, dsn: str
) -> None:
    """Issue 34: `suppressed` and `suppressed rows` for one figure, `dm` and `discernibility`
    unexplained, `0.3333333333333333`, `l=3.0`."""
    rows = [(i, 20 + i % 40, "rare" if i % 97 == 0 else "ABCD"[i % 4], "xyzwv"[i % 5])
            for i in range(1, 801)]  # fmt: skip
    make_table(conn, "s", "t", [("id", "int PRIMARY KEY"), ("age", "int"), ("zone", "text"),
                                ("dx", "text")], rows)  # fmt: skip
    assert cli(dsn, "publish", "fd", *SOURCE, "--qi", "age,zone", "--sensitive", "dx", "--k",
               "10", "--l", "3", "--l-kind", "entropy", "--algorithm", "fulldomain",
               "--max-suppression", "0.05").exit_code == 0  # fmt: skip
    released = conn.execute("SELECT count(*) FROM released.fd").fetchone()[0]
    result = cli(dsn, "report", "fd")
    assert result.exit_code == 0, result.output
    table = report_table(result.stdout)
    labels = [cells[0] for cells in table]
    assert len(labels) == len(set(labels)), labels  # one name per figure
    assert not any("suppressed" in label and label != "suppressed rows" for label in labels)
    by = {cells[0]: cells[1:] for cells in table}
    assert by["suppressed rows"][0] == str(len(rows) - released)
    assert by["promises"][0] == "k-anonymity (k=10); entropy l-diversity (l=3)"
    assert "discernibility (DM)" in by and "dm" not in by and by["discernibility (DM)"][1]
    assert all(len(cells) == 3 for cells in table)  # label, value, what it means
    import re

    def significant(number: str) -> int:
        return len(number.replace(".", "").lstrip("-0"))

    values = [cells[1] for cells in table if cells[0] != "published at"]
    unrounded = [n for v in values for n in re.findall(r"-?\d*\.\d+", v) if significant(n) > 4]
    assert not unrounded, unrounded


def test_ranges_of_negative_numbers_read_unambiguously(
    conn: psycopg.Connection, dsn: str
) -> None:
    """Issue 34: `-466-639` and `-10000--1` could be read several ways. A released range is
    PostgreSQL's range literal: the bracket says which ends are in, the comma parts them, and
    the text casts to a range (read here by PostgreSQL itself, not by dbanon)."""
    rows = [(i, -500 + 7 * i, -10_000 + 37 * (i % 270)) for i in range(1, 161)]
    make_table(conn, "s", "t", [("id", "int PRIMARY KEY"), ("balance", "int"),
                                ("delta", "int")], rows)  # fmt: skip
    result = cli(dsn, "publish", "neg", *SOURCE, "--qi", "balance,delta", "--k", "4")
    assert result.exit_code == 0, result.output
    labels = conn.execute("SELECT balance, delta FROM released.neg").fetchall()
    assert any(b.startswith("[-") and ",-" in b for b, _ in labels)  # both ends negative
    for label in {v for pair in labels for v in pair}:
        assert label == "*" or label.lstrip("-").isdigit() or (
            label.startswith("[") and label.endswith("]") and label.count(",") == 1), label
    # PostgreSQL reads each label as a range; each holds as many source values as released
    # rows carry it (its class's own).
    for col in ("balance", "delta"):
        short = conn.execute(
            sql.SQL(
                """SELECT count(*) FROM (
                     SELECT r.n, (SELECT count(*) FROM s.t WHERE r.span::int4range @> t.{c})
                              AS held
                     FROM (SELECT count(*) AS n, CASE WHEN {c} LIKE '[%%' THEN {c}
                                  ELSE '[' || {c} || ',' || {c} || ']' END AS span
                           FROM released.neg WHERE {c} <> '*' GROUP BY {c}) r) x
                   WHERE held < n"""
            ).format(c=sql.Identifier(col))
        ).fetchone()[0]
        assert short == 0, col


def test_check_piped_is_tab_separated(conn: psycopg.Connection, dsn: str) -> None:
    """Issue 34: the README says output piped to another program is tab-separated; `check`
    printed indented `figure: value` lines."""
    make_table(conn, "s", "t", [("id", "int PRIMARY KEY"), ("a", "int"), ("b", "int")],
               [(i, i % 7, -i % 3) for i in range(1, 43)])  # fmt: skip
    result = cli(dsn, "check", "s.t", "--qi", "a,b", "--k", "2", "--risk")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "model\tfigure\tvalue"
    assert all(len(line.split("\t")) == 3 for line in lines), lines
    rows = {tuple(line.split("\t")[:2]): line.split("\t")[2] for line in lines[1:]}
    assert rows[("k-anonymity (k=2)", "holds")] == "yes"
    assert rows[("k-anonymity (k=2)", "min class size")] == "2"
    assert ("re-identification risk", "sample uniqueness") in rows


def test_releases_on_a_terminal_shows_whole_names(
    conn: psycopg.Connection, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: on a terminal `releases` cut the name column to fit 80 columns."""
    from rich.console import Console

    from dbanon.cli import common

    make_table(conn, "s", "t", [("id", "int PRIMARY KEY"), ("a", "int")],
               [(i, i % 7) for i in range(1, 41)])  # fmt: skip
    name = "quarterly_balances_by_region_for_the_regulator"
    assert cli(dsn, "publish", name, *SOURCE, "--qi", "a", "--k", "2").exit_code == 0
    monkeypatch.setattr(common.out, "_console", Console(force_terminal=True, width=80))
    result = cli(dsn, "releases")
    assert result.exit_code == 0, result.output
    assert name in result.stdout, result.stdout


def schemas(conn: psycopg.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace")}


def test_drop_takes_the_empty_schema_dbanon_created_and_no_other(
    conn: psycopg.Connection, dsn: str
) -> None:
    """Issue 34: `drop` left the empty schemas dbanon created. It drops one it created, empty,
    with the last release there; never a schema the DBA made, nor one holding anything else."""
    make_table(conn, "s", "t", [("id", "int PRIMARY KEY"), ("a", "int")],
               [(i, i % 7) for i in range(1, 41)])  # fmt: skip
    conn.execute("CREATE SCHEMA mine")
    args = (*SOURCE, "--qi", "a", "--k", "2")
    for name, target in (("r1", "Rel Out.r1"), ("r2", "Rel Out.r2"), ("m", "mine.m"),
                         ("x", "extra.x")):  # fmt: skip
        assert cli(dsn, "publish", name, *args, "--target", target).exit_code == 0
    assert {"Rel Out", "mine", "extra"} <= schemas(conn)
    assert cli(dsn, "drop", "r1", "--yes").exit_code == 0
    assert "Rel Out" in schemas(conn)  # r2 is still there
    result = cli(dsn, "drop", "r2", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == 'dropped release \'r2\': "Rel Out".r2, schema "Rel Out"'
    assert "Rel Out" not in schemas(conn)
    assert cli(dsn, "drop", "m", "--yes").exit_code == 0
    assert "mine" in schemas(conn)  # the DBA's
    conn.execute("CREATE TABLE extra.notes (x int)")  # something of someone else's inside
    assert cli(dsn, "drop", "x", "--yes").exit_code == 0
    assert "extra" in schemas(conn)
    assert conn.execute("SELECT count(*) FROM extra.notes").fetchone()[0] == 0


def sql_name(*parts: str) -> str:
    """An identifier as SQL needs it, written here without dbanon: bare when it is lower-case
    letters, digits and underscores (none of these names is a key word), else double-quoted
    with inner double quotes doubled; parts joined by dots."""
    import re

    return ".".join(
        p if re.fullmatch(r"[a-z_][a-z0-9_]*", p) else '"' + p.replace('"', '""') + '"'
        for p in parts
    )


def csv_item(name: str) -> str:
    """A name as one item of a --qi/--keep list (CSV quoting, which doubles `"` as SQL does)."""
    return '"' + name.replace('"', '""') + '"'


def test_every_message_names_objects_as_sql_needs_them(
    conn: psycopg.Connection, dsn: str, tmp_path
) -> None:
    """Issue 34: messages showed names as Python reprs ('Zip Code', 'Marital "Status"') or
    bare. Eight errors against a table whose schema, table and columns hold spaces, capitals,
    quotes and unicode each name the object as psql would take it; dbanon's own names (the
    release, the hierarchy) are single-quoted literals."""
    schema, table = "Bank Data", 'Café "Clients"'
    zip_, age, marital, account = "Zip Code", "Âge", 'Marital "Status"', 'Account "No"'
    rows = [(i, f"Z{i % 4}", 20 + i % 30, None if i == 7 else "MS"[i % 2], 1000 + i)
            for i in range(1, 61)]  # fmt: skip
    make_table(conn, schema, table, [("id", "int PRIMARY KEY"), (zip_, "text"), (age, "int"),
                                     (marital, "text"), (account, "int")], rows)  # fmt: skip
    source = ("--source", f"{schema}.{table}", "--key", "id")
    rel = sql_name(schema, table)

    def user_state() -> dict[str, object]:
        """The snapshot without dbanon's catalog, where a refused refresh records its run."""
        state = snapshot(conn)
        return {n: v for n, v in state["relations"].items() if not n.startswith("dbanon.")}

    def refused(args: tuple[str, ...], *names: str) -> str:
        before = user_state()
        result = cli(dsn, *args)
        assert result.exit_code in (2, 4), result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        for name in names:
            assert name in lines[0], (name, lines[0])
        assert user_state() == before
        return lines[0]

    # 1. a missing column
    refused(("publish", "r", *source, "--qi", f"{zip_},Post Code", "--k", "2"),
            f"column {sql_name('Post Code')} does not exist in {rel}")  # fmt: skip
    # 2. NULL in a quasi-identifier
    refused(("publish", "r", *source, "--qi", f"{zip_},{csv_item(marital)}", "--k", "2"),
            f"{sql_name(marital)} in 1 rows", rel)  # fmt: skip
    # 3. k larger than the table
    refused(("publish", "r", *source, "--qi", zip_, "--k", "500"), f"rows of {rel}")
    # 4. a hierarchy that does not cover a value
    hname = "zip's tree"
    path = tmp_path / "zip.csv"
    path.write_text("Z0;Z*;*\nZ1;Z*;*\nZ2;Z*;*\n")
    assert cli(dsn, "hierarchy", "import", hname, str(path)).exit_code == 0
    refused(("publish", "r", *source, "--qi", zip_, "--k", "2", "--hierarchy",
             f"{zip_}={hname}"),
            f"column {sql_name(zip_)} are not in hierarchy 'zip''s tree'")  # fmt: skip
    # 5. a column's type changed before a refresh
    name = "bank's release"
    assert cli(dsn, "publish", name, *source, "--qi", f"{zip_},{age}", "--k", "2").exit_code == 0
    conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE bigint").format(
        sql.Identifier(schema, table), sql.Identifier(age)))  # fmt: skip
    refused(("refresh", name), f"{sql_name(age)} was integer, is bigint now", rel,
            "release 'bank''s release'")  # fmt: skip
    # 6. a kept column that singles people out
    refused(("publish", "kept", *source, "--qi", zip_, "--k", "2", "--keep", csv_item(account)),
            f"--keep column {sql_name(account)} is unique", "release 'kept'")  # fmt: skip
    # and the target: the source's schema, or a relation dbanon did not create
    refused(("publish", "t", *source, "--qi", zip_, "--k", "2", "--target", f"{schema}.t"),
            f"not the source's ({sql_name(schema)})")  # fmt: skip
    make_table(conn, "Other Schema", "Mine", [("x", "int")], [])
    refused(("publish", "t", *source, "--qi", zip_, "--k", "2", "--target", "Other Schema.Mine"),
            f"{sql_name('Other Schema', 'Mine')} exists and is not a dbanon release")  # fmt: skip
