"""Released columns are declared, never implied; none of them singles people out (issue 24).

Every method releases its QIs, its sensitive columns and its `--keep` columns, nothing else; a
kept column unique for more than half of the released rows (alone, or all kept columns
together) is refused by the gate, on publish and on refresh, unless `--allow-identifying`; a
sensitive column released row by row and unique for most rows publishes with a warning.
The shares are measured here independently, in Python over the released rows.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence

import psycopg
import pytest
from click.testing import CliRunner
from helpers import cli, cli_json, make_table, snapshot

from dbanon.cli import main
from dbanon.core.spec import ReleaseSpec

ROWS = 240
CITIES = ["Lyon", "Nantes", "Lille", "Metz"]


@pytest.fixture
def crm(conn: psycopg.Connection) -> psycopg.Connection:
    """Customers: numeric QIs, an e-mail (unique), a city and a plan (a few values each), and
    a phone number that is unique only together with the city."""
    rng = random.Random(7)
    rows = [
        (i, rng.randint(18, 80), round(rng.uniform(1000, 9000), 2), f"user{i}@example.org",
         CITIES[i % 4], rng.choice(["free", "pro"]), f"06{((i - 1) // 4):04d}", rng.choice("FM"))
        for i in range(1, ROWS + 1)
    ]  # fmt: skip
    make_table(
        conn, "crm", "customers",
        [("id", "int PRIMARY KEY"), ("age", "int"), ("income", "float8"), ("email", "text"),
         ("city", "text"), ("plan", "text"), ("phone", "text"), ("sex", "text")],
        rows,
    )  # fmt: skip
    return conn


def columns(conn: psycopg.Connection, rel: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum", [rel]).fetchall()]  # fmt: skip


def unique_share(conn: psycopg.Connection, rel: str, cols: Sequence[str]) -> float:
    """Independently: the share of released rows whose values of `cols` no other row has."""
    rows = conn.execute(f"SELECT {', '.join(cols)} FROM {rel}").fetchall()  # test's own names
    counts = Counter(rows)
    return sum(1 for r in rows if counts[r] == 1) / len(rows)


NOISE = ("--source", "crm.customers", "--key", "id", "--columns", "age,income",
         "--algorithm", "noise", "--size", "0.1", "--seed", "2")  # fmt: skip


def test_noise_releases_only_declared_columns_even_after_a_column_is_added(
    crm: psycopg.Connection, dsn: str
) -> None:
    code, out = cli_json(dsn, "publish", "n", *NOISE, "--keep", "city,plan")
    assert code == 0, out
    assert columns(crm, "released.n") == ["dbanon_row", "age", "income", "city", "plan"]
    assert out["warnings"] == []
    # A column added to the source later is not released by a refresh either.
    crm.execute("ALTER TABLE crm.customers ADD COLUMN ssn text")
    crm.execute("UPDATE crm.customers SET ssn = 'ssn-' || id, age = age + 1 WHERE id < 5")
    code, out = cli_json(dsn, "refresh", "n")
    assert code == 0, out
    assert columns(crm, "released.n") == ["dbanon_row", "age", "income", "city", "plan"]
    assert crm.execute("SELECT count(*) FROM released.n").fetchone()[0] == ROWS
    # The kept columns are the source's, unchanged (as multisets).
    for col in ("city", "plan"):
        released = Counter(r[0] for r in crm.execute(f"SELECT {col} FROM released.n"))
        assert released == Counter(r[0] for r in crm.execute(f"SELECT {col} FROM crm.customers"))


def test_keep_email_is_refused_naming_it_and_its_share_database_unchanged(
    crm: psycopg.Connection, dsn: str
) -> None:
    before = snapshot(crm)
    result = cli(dsn, "publish", "n", *NOISE, "--keep", "city,email")
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1
    assert 'column email is unique for 100.0 % of rows' in line, line
    assert "--allow-identifying email" in line
    assert snapshot(crm) == before
    assert json.loads(cli(dsn, "--json", "releases").stdout)["releases"] == []
    # The DBA who means it says so; the share is recorded with the run.
    code, out = cli_json(dsn, "publish", "n", *NOISE, "--keep", "city,email",
                         "--allow-identifying", "email")  # fmt: skip
    assert code == 0, out
    assert unique_share(crm, "released.n", ["email"]) == 1.0
    shares = cli_json(dsn, "report", "n")[1]["method_metrics"]["unique_share"]
    assert shares["email"] == 1.0 and shares["city"] == unique_share(crm, "released.n", ["city"])


def test_kept_columns_together_and_a_settable_share(crm: psycopg.Connection, dsn: str) -> None:
    # phone alone: every value is shared by the 4 cities' rows; with city it is unique.
    assert unique_share(crm, "crm.customers", ["phone"]) == 0.0
    assert unique_share(crm, "crm.customers", ["city", "phone"]) == 1.0
    before = snapshot(crm)
    result = cli(dsn, "publish", "n", *NOISE, "--keep", "city,phone")
    assert result.exit_code == 2
    assert 'city, phone together are unique for 100.0 % of rows' in result.stderr
    assert snapshot(crm) == before
    code, out = cli_json(dsn, "publish", "n", *NOISE, "--keep", "city,phone,plan",
                         "--allow-identifying", "plan", "--allow-identifying", "phone,plan",
                         )  # fmt: skip
    assert code == 0, out
    stored = crm.execute("SELECT spec FROM dbanon.release WHERE name = 'n'").fetchone()[0]
    assert stored["allow_identifying"] == ["plan", "phone"]
    # A share the DBA sets: 0 refuses any unique row at all.
    result = cli(dsn, "publish", "m", *NOISE, "--keep", "phone", "--max-unique-share", "0")
    assert result.exit_code == 0, result.output  # shared by 4 rows each: unique for none
    crm.execute("UPDATE crm.customers SET phone = phone || id WHERE id <= 12")
    result = cli(dsn, "refresh", "m")  # 12 of 240 rows unique now: above a share of 0
    assert result.exit_code == 2 and 'column phone is unique for 5.0 % of rows' in result.stderr


def test_refresh_applies_the_check_and_keeps_the_previous_release(
    crm: psycopg.Connection, dsn: str
) -> None:
    # k=20: each class holds every city several times (at k=4 the city beside the QIs would
    # single half the rows out, and the gate refuses the first publish).
    args = ("--source", "crm.customers", "--key", "id", "--qi", "age,sex", "--k", "20",
            "--keep", "city")  # fmt: skip
    code, out = cli_json(dsn, "publish", "k", *args)
    assert code == 0, out
    assert columns(crm, "released.k") == ["age", "sex", "city"]
    digest = "SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) FROM released.k t"
    first = crm.execute(digest).fetchone()[0]
    crm.execute("UPDATE crm.customers SET city = email")  # the kept column turned identifying
    result = cli(dsn, "refresh", "k")
    assert result.exit_code == 2 and 'column city is unique for 100.0 % of rows' in result.stderr
    assert crm.execute(digest).fetchone()[0] == first
    report = cli_json(dsn, "report", "k")[1]
    assert 'column city' in report["last_failure"]["error"]


def test_kmember_sensitive_email_publishes_with_a_warning_report_shows_it(
    crm: psycopg.Connection, dsn: str
) -> None:
    code, out = cli_json(dsn, "publish", "e", "--source", "crm.customers", "--key", "id",
                         "--qi", "age,sex", "--k", "5", "--sensitive", "email")  # fmt: skip
    assert code == 0, out
    assert unique_share(crm, "released.e", ["email"]) == 1.0  # released row by row
    assert len(out["warnings"]) == 1
    assert 'sensitive column email' in out["warnings"][0]
    assert "unique for 100.0 % of rows" in out["warnings"][0]
    report = cli_json(dsn, "report", "e")[1]
    assert report["warnings"] == out["warnings"]
    human = cli(dsn, "report", "e")
    assert 'warning: sensitive column email' in human.stdout
    human = cli(dsn, "refresh", "e")  # the refresh measures again, and says so
    assert human.exit_code == 0 and 'warning: sensitive column email' in human.stdout
    # Not every sensitive column: a plan of two values is no cause for a warning.
    code, out = cli_json(dsn, "publish", "p", "--source", "crm.customers", "--key", "id",
                         "--qi", "age,sex", "--k", "5", "--sensitive", "plan")  # fmt: skip
    assert code == 0 and out["warnings"] == []


@pytest.mark.parametrize("algorithm",
                         ["mondrian", "kmember", "hamdist", "hamdist-view", "noise"])
def test_build_counted_sensitive_share_is_the_releases(
    crm: psycopg.Connection, dsn: str, algorithm: str
) -> None:
    """A build counts its sensitive column's unique share from what it read (a grouping build
    from the values it streamed where they compare as bytes, else by SQL; a projection from
    its candidates' label classes, when every row is released): no GROUP BY of the release,
    and the figure is still the released rows' own, NULL one value among the others, an empty
    text another, numeric 1.0 and 1.00 one value."""
    crm.execute("ALTER TABLE crm.customers ADD COLUMN note text, ADD COLUMN amount numeric")
    crm.execute("""UPDATE crm.customers SET
                       note = CASE WHEN id % 5 = 0 THEN NULL WHEN id % 7 = 0 THEN ''
                                   WHEN id % 3 = 0 THEN 'n' || id ELSE city END,
                       amount = CASE WHEN id % 4 = 0 THEN 1.0 WHEN id % 4 = 1 THEN 1.00
                                     ELSE id END""")  # fmt: skip
    crm.commit()
    for col in ("note", "amount"):
        name = f"{algorithm}_{col}"
        method, _, view = algorithm.partition("-")
        shape = (["--columns", "age,income", "--size", "0.1", "--seed", "2"]
                 if method == "noise" else ["--qi", "age,sex", "--k", "5"])  # fmt: skip
        if method == "hamdist":
            shape += ["--as", "view" if view else "table"]
        code, out = cli_json(dsn, "publish", name.replace("-", "_"), "--source",
                             "crm.customers", "--key", "id", "--sensitive", col,
                             "--algorithm", method, *shape)  # fmt: skip
        name = name.replace("-", "_")
        assert code == 0, out
        shares = cli_json(dsn, "report", name)[1]["method_metrics"]["unique_share"]
        want = unique_share(crm, f"released.{name}", [col])
        assert 0 < want < 1 and shares[col] == pytest.approx(want, abs=1e-6), (col, shares)


def test_bucketising_methods_need_no_warning_and_take_no_keep(
    crm: psycopg.Connection, dsn: str
) -> None:
    args = ("--source", "crm.customers", "--key", "id", "--qi", "age,sex", "--algorithm",
            "anatomy", "--sensitive", "email", "--l", "3", "--seed", "1")  # fmt: skip
    code, out = cli_json(dsn, "publish", "a", *args)
    assert code == 0, out
    assert out["warnings"] == []
    before = snapshot(crm)
    result = cli(dsn, "publish", "b", *args, "--keep", "city")
    assert result.exit_code == 2 and "--keep does not apply to --algorithm anatomy" in result.stderr
    assert snapshot(crm) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--keep", "id"), "--keep: id is the row key"),
        (("--keep", "age"), "--keep: age is already a QI or sensitive column"),
        (("--keep", "nope"), "column nope does not exist in crm.customers"),
        (("--keep", "city", "--allow-identifying", "plan"), "--allow-identifying plan: it is not"),
        (("--keep", "city,plan,city"), "--keep names column city twice"),
    ],
)
def test_bad_keep_is_one_line_exit_2(
    crm: psycopg.Connection, dsn: str, args: tuple[str, ...], message: str
) -> None:
    before = snapshot(crm)
    result = cli(dsn, "publish", "x", "--source", "crm.customers", "--key", "id", "--qi",
                 "age,sex", "--k", "4", *args)  # fmt: skip
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert snapshot(crm) == before


def test_projection_keep_is_the_common_one_and_old_specs_load(
    crm: psycopg.Connection, dsn: str
) -> None:
    code, out = cli_json(dsn, "publish", "h", "--source", "crm.customers", "--key", "id",
                         "--qi", "age,sex", "--k", "4", "--sensitive", "plan",
                         "--algorithm", "hamdist", "--keep", "city")  # fmt: skip
    assert code == 0, out
    assert "city" in columns(crm, "released.h") and "email" not in columns(crm, "released.h")
    # The release is a live view: `check --release` measures its kept column as it is now.
    code, checked = cli_json(dsn, "check", "h", "--release")
    assert code == 0 and checked["keep_unique_share"] == {"city": 0.0}, checked
    crm.execute("UPDATE crm.customers SET city = email WHERE id <= 200")
    code, checked = cli_json(dsn, "check", "h", "--release")
    kept = [m for m in checked["models"] if m["model"] == "kept columns single out no rows"]
    assert code == 1 and not kept[0]["holds"], checked
    assert 'column city is unique for' in kept[0]["worst_class"]
    crm.execute("UPDATE crm.customers SET city = 'Lyon' WHERE id <= 200")
    # A spec stored when --keep was the projection methods' own option loads as the common one.
    stored = crm.execute("SELECT spec FROM dbanon.release WHERE name = 'h'").fetchone()[0]
    assert stored["keep"] == ["city"] and "keep" not in stored["options"]
    old = {k: v for k, v in stored.items()
           if k not in ("keep", "allow_identifying", "max_unique_share")}  # fmt: skip
    old["options"] = {**stored["options"], "keep": "city"}
    spec = ReleaseSpec.from_dict(old)
    assert spec.keep == ["city"] and "keep" not in spec.options and spec.max_unique_share == 0.5
    crm.execute("UPDATE dbanon.release SET spec = %s::jsonb WHERE name = 'h'", [json.dumps(old)])
    code, out = cli_json(dsn, "refresh", "h")
    assert code == 0, out
    assert "city" in columns(crm, "released.h")


def test_docs_table_of_releases_is_the_registrys() -> None:
    """docs/releases.md carries the table generated from the methods, and every method says
    what it releases and against whom."""
    from pathlib import Path

    from dbanon.methods import methods, releases_table

    assert all(m.releases and m.attacker for m in methods().values())
    doc = (Path(__file__).parent.parent / "docs" / "releases.md").read_text()
    assert releases_table() in doc
    shown = CliRunner().invoke(main, ["methods", "--releases"]).stdout.strip()
    assert shown == releases_table() and len(shown.splitlines()) == 2 + len(methods())


ADULT_ROWS = 3000
ADULT = [("id", "int PRIMARY KEY"), ("age", "int"), ("marital_status", "text"),
         ("race", "text"), ("sex", "text"), ("education_num", "int"), ("capital_gain", "int"),
         ("hours_per_week", "int")]  # fmt: skip
HARMLESS = ["hours_per_week", "education_num", "capital_gain"]


@pytest.fixture
def adult(conn: psycopg.Connection) -> psycopg.Connection:
    """The first rows of UCI Adult: k-member's QIs and three columns harmless one by one."""
    from dbanon.data import ADULT_COLUMNS, adult_rows

    at = {c: ADULT_COLUMNS.index(c) for c, _ in ADULT[1:]}
    rows = [(i, *(r[at[c]] for c, _ in ADULT[1:]))
            for i, r in enumerate(adult_rows(ADULT_ROWS), 1)]  # fmt: skip
    make_table(conn, "held", "adult", ADULT, rows)
    return conn


def test_kept_columns_are_judged_with_the_released_qis(adult: psycopg.Connection, dsn: str) -> None:
    """Issue 34: three kept columns, each harmless alone, beside k-member's generalised QIs
    single most released rows out; refused naming them, unless the DBA allows them, and the
    risk `report` shows counts what a consumer reads (QIs and kept columns)."""
    src = "held.adult"
    for c in HARMLESS:  # harmless alone, and even all three together
        assert unique_share(adult, src, [c]) < 0.05
    assert unique_share(adult, src, HARMLESS) < 0.5
    args = ("--source", src, "--key", "id", "--qi", "age,marital_status,race,sex", "--k", "5",
            "--keep", ",".join(HARMLESS))  # fmt: skip
    before = snapshot(adult)
    result = cli(dsn, "publish", "km", *args)
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert f"--keep columns {', '.join(HARMLESS)} " in line and "--allow-identifying" in line
    assert snapshot(adult) == before
    code, out = cli_json(dsn, "publish", "km", *args, "--allow-identifying", ",".join(HARMLESS))
    assert code == 0, out
    qis = ["age", "marital_status", "race", "sex"]
    assert unique_share(adult, "released.km", qis) == 0.0  # k-anonymous on its QIs
    read = unique_share(adult, "released.km", [*qis, *HARMLESS])
    assert read > 0.5  # what a consumer reads singles most rows out
    risk = cli_json(dsn, "report", "km")[1]["risk"]
    assert risk["sample_uniqueness"] == pytest.approx(read, abs=1e-6)
    assert sorted(risk["qi"]) == sorted([*qis, *HARMLESS])
