"""The demo: Adult in, a k=10 k-member release out, checked independently."""

from __future__ import annotations

import psycopg
from helpers import cli, cli_json

QI = ["age", "education_num", "workclass", "marital_status", "race", "sex", "native_country"]


def test_demo_publishes_a_10_anonymous_adult(conn: psycopg.Connection, dsn: str) -> None:
    code, out = cli_json(dsn, "demo")
    assert code == 0, out
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
