"""The demo: Adult in, a k=10 k-member release out, checked independently."""

from __future__ import annotations

from pathlib import Path

import psycopg
from helpers import cli, cli_json

QI = ["age", "education_num", "workclass", "marital_status", "race", "sex", "native_country"]


# Everything the catalog holds of one hierarchy, row by row and byte by byte (ids, times too).
HIERARCHY_ROWS = """
    SELECT md5(concat_ws('|',
        (SELECT string_agg(h::text, ',') FROM dbanon.hierarchy h WHERE name = %(n)s),
        (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM dbanon.hierarchy_node x
         JOIN dbanon.hierarchy h ON h.id = x.hierarchy_id WHERE h.name = %(n)s),
        (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM dbanon.hierarchy_map x
         JOIN dbanon.hierarchy h ON h.id = x.hierarchy_id WHERE h.name = %(n)s)))"""


def own_hierarchy(tmp_path: Path, dsn: str, name: str) -> None:
    """A DBA's own hierarchy of Adult's education values, unlike the ARX one the demo ships."""
    from dbanon.data import hierarchy_file

    values = [line.split(";")[0] for line in hierarchy_file("education").read_text().split("\n")]
    path = tmp_path / "mine.csv"
    path.write_text("".join(f"{v};school;*\n" for v in values if v))
    result = cli(dsn, "hierarchy", "import", name, str(path), "--replace")
    assert result.exit_code == 0, result.output


def test_demo_publishes_a_10_anonymous_adult(
    conn: psycopg.Connection, dsn: str, tmp_path: Path
) -> None:
    # The DBA imported an `education` hierarchy of their own before anybody ran the demo.
    assert cli(dsn, "init").exit_code == 0
    own_hierarchy(tmp_path, dsn, "education")
    before = conn.execute(HIERARCHY_ROWS, {"n": "education"}).fetchone()[0]
    conn.commit()
    code, out = cli_json(dsn, "demo")
    assert code == 0, out
    # ... and it is byte-identical after it: the demo imported its own under its own names.
    assert conn.execute(HIERARCHY_ROWS, {"n": "education"}).fetchone()[0] == before
    names = {r[0] for r in conn.execute("SELECT name FROM dbanon.hierarchy")}
    assert "demo_adult_education" in names and "demo_adult_native-country" in names
    assert names - {"education"} == {n for n in names if n.startswith("demo_adult_")}
    assert out["rows"] == 45222 and out["min_class_size"] >= 10
    assert out["table"] == "released.adult_k10"
    assert set(out) >= {"release", "table", "rows", "classes", "min_class_size", "gcp", "seconds"}
    assert conn.execute("SELECT count(*) FROM demo.adult").fetchone()[0] == 45222

    # Independent check in SQL: no class under 10, no key column, every row released.
    smallest, rows = conn.execute(
        "SELECT min(n), sum(n) FROM (SELECT count(*) AS n FROM released.adult_k10 "
        "GROUP BY age, education_num, workclass, marital_status, race, sex, native_country) c"
    ).fetchone()
    assert smallest >= 10 and rows == 45222
    cols = {
        r[0]
        for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'released.adult_k10'::regclass "
            "AND attnum > 0"
        )
    }
    assert "id" not in cols and cols == {*QI, "occupation"}
    # The sensitive column is released unchanged, row for row.
    assert (
        conn.execute(
            "SELECT array_agg(occupation ORDER BY occupation) FROM released.adult_k10"
        ).fetchone()
        == conn.execute(
            "SELECT array_agg(occupation ORDER BY occupation) FROM demo.adult"
        ).fetchone()
    )

    assert cli(dsn, "check", "released.adult_k10", "--qi", ",".join(QI), "--k", "10").exit_code == 0
    assert cli(dsn, "check", "demo.adult", "--qi", ",".join(QI), "--k", "10").exit_code == 1


def test_demo_replaces_no_hierarchy_even_under_its_own_names(
    conn: psycopg.Connection, dsn: str, tmp_path: Path
) -> None:
    """A hierarchy named as the demo's but holding something else is refused, not replaced."""
    assert cli(dsn, "init").exit_code == 0
    own_hierarchy(tmp_path, dsn, "demo_adult_education")
    before = conn.execute(HIERARCHY_ROWS, {"n": "demo_adult_education"}).fetchone()[0]
    conn.commit()
    result = cli(dsn, "demo")
    assert result.exit_code == 2
    assert "'demo_adult_education' exists and is not the demo's" in result.stderr
    assert conn.execute(HIERARCHY_ROWS, {"n": "demo_adult_education"}).fetchone()[0] == before
    assert conn.execute("SELECT to_regclass('demo.adult')").fetchone()[0] is None
