"""Publishing releases end to end, checked independently on the released table."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from datetime import date, timedelta

import numpy as np
import psycopg
import pytest
import verify
from helpers import cli, cli_json, make_table, snapshot
from psycopg.types.range import Range

from dbanon.core.hierarchy import Hierarchy
from dbanon.methods import grouped
from dbanon.methods.kmember import KMember

ZIP_ROWS = [
    ["10115", "101**", "1****", "*"],
    ["10117", "101**", "1****", "*"],
    ["10243", "102**", "1****", "*"],
    ["10245", "102**", "1****", "*"],
    ["20095", "200**", "2****", "*"],
    ["20097", "200**", "2****", "*"],
]
COLUMNS = [
    ("Patient ID", "integer PRIMARY KEY"),
    ("age", "integer"),
    ("zip", "text"),
    ("sex", "text"),
    ("born", "date"),
    ("diagnosis", "text"),
    ("token", "text"),  # unique per row, released unchanged: links a released row to its own
]


def patients(n: int, seed: int = 1) -> list[tuple]:
    rng = random.Random(seed)
    return [
        (
            i,
            rng.randint(18, 90),
            rng.choice(ZIP_ROWS)[0],
            rng.choice(["F", "M"]),
            date(1950, 1, 1) + timedelta(days=rng.randint(0, 20000)),
            rng.choice(["flu", "asthma", "diabetes", "cancer"]),
            f"t{i}",
        )
        for i in range(1, n + 1)
    ]


@pytest.fixture
def hospital(conn: psycopg.Connection, dsn: str, tmp_path) -> list[tuple]:  # noqa: ANN001
    rows = patients(300)
    make_table(conn, "clinic", "patients", COLUMNS, rows)
    path = tmp_path / "zip.csv"
    path.write_text("\n".join(";".join(r) for r in ZIP_ROWS) + "\n")
    assert cli(dsn, "hierarchy", "import", "zip", str(path)).exit_code == 0
    return rows


PUBLISH = [
    "publish", "patients_k5", "--source", "clinic.patients", "--key", "Patient ID",
    "--qi", "age,zip,sex,born", "--sensitive", "diagnosis,token", "--k", "5",
    "--hierarchy", "zip=zip", "--ranges", "typed", "--seed", "7",
]  # fmt: skip
QI = ["age", "zip", "sex", "born"]


def released(conn: psycopg.Connection, table: str = "released.patients_k5") -> list[tuple]:
    schema, name = table.split(".")
    return conn.execute(
        psycopg.sql.SQL("SELECT age, zip, sex, born, diagnosis, token FROM {}").format(
            psycopg.sql.Identifier(schema, name)
        )
    ).fetchall()


def rank_correlation(xs: list[float], ys: list[float]) -> float:
    """Spearman's rho of two lists of distinct values."""
    n = len(xs)
    rx = {x: i for i, x in enumerate(sorted(xs))}
    ry = {y: i for i, y in enumerate(sorted(ys))}
    d2 = sum((rx[x] - ry[y]) ** 2 for x, y in zip(xs, ys, strict=True))
    return 1 - 6 * d2 / (n * (n * n - 1))


def test_publish_is_k_anonymous_truthful_and_keyless(
    conn: psycopg.Connection, dsn: str, hospital: list[tuple]
) -> None:
    code, out = cli_json(dsn, *PUBLISH)
    assert code == 0, out
    assert out["table"] == "released.patients_k5" and out["rows"] == 300
    assert out["min_class_size"] >= 5

    cols = [
        r[0]
        for r in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = 'released' AND table_name = 'patients_k5'"
        ).fetchall()
    ]
    assert "Patient ID" not in cols
    assert sorted(cols) == ["age", "born", "diagnosis", "sex", "token", "zip"]

    # Independent check: GROUP BY the released QIs, the classes counted in Python.
    cls = verify.verify(conn, "released.patients_k5", QI, [{"name": "k-anonymity", "k": 5}])
    assert min(cls.sizes) == out["min_class_size"] and len(cls.classes) == out["classes"]

    # Truthful: each released row (found by its token) generalises its own source row, and the
    # sensitive values are released unchanged.
    rows = released(conn)
    assert sorted(r[5] for r in rows) == sorted(r[6] for r in hospital)
    source = {r[6]: r for r in hospital}
    h = Hierarchy.from_rows("zip", ZIP_ROWS)
    for a, zl, sl, b, dx, token in rows:
        _, age, z, sex, born, dx_, _ = source[token]
        assert dx == dx_, token
        assert isinstance(a, Range) and isinstance(b, Range)
        assert a.lower <= age < a.upper and b.lower <= born < b.upper, token
        assert zl in [h.labels[x] for x in h.ancestors(h.leaf(z))], token
        assert sl in (sex, "*"), token
    # Rows in random order: where a row is released says nothing about its key (the rank
    # correlation of position and key is near 0; 0.25 is 4 standard deviations for 300 rows).
    keys = [float(source[r[5]][0]) for r in rows]
    rho = rank_correlation([float(i) for i in range(len(rows))], keys)
    assert abs(rho) < 0.25, rho


def test_report_and_gcp_recomputed_from_the_release(
    conn: psycopg.Connection, dsn: str, hospital: list[tuple]
) -> None:
    _, out = cli_json(dsn, *PUBLISH)
    code, rep = cli_json(dsn, "report", "patients_k5")
    assert code == 0
    assert rep["classes"] == out["classes"] and rep["gcp"] == pytest.approx(out["gcp"])
    # NCP from the released table alone: range widths over domain widths, label level / height.
    rows = released(conn)
    ages = [r[1] for r in hospital]
    borns = [r[4] for r in hospital]
    h = Hierarchy.from_rows("zip", ZIP_ROWS)
    level = {h.labels[i]: h.levels[i] for i in range(len(h.labels))}
    total = 0.0
    for a, z, s, b, _, _ in rows:
        total += (a.upper - 1 - a.lower) / (max(ages) - min(ages))
        total += (b.upper - timedelta(days=1) - b.lower).days / (max(borns) - min(borns)).days
        total += level[z] / h.height + (1.0 if s == "*" else 0.0)
    assert rep["gcp"] == pytest.approx(total / (len(rows) * 4))
    # Discernibility counts the algorithm's groups; classes of the release can only merge them.
    merged = sum(n * n for n in Counter(r[:4] for r in rows).values())
    assert 5 * len(rows) <= rep["method_metrics"]["discernibility"] <= merged
    assert cli(dsn, "report", "nope").exit_code == 2


def test_refresh_follows_the_source(conn: psycopg.Connection, dsn: str, hospital) -> None:  # noqa: ANN001
    assert cli_json(dsn, *PUBLISH)[0] == 0
    conn.execute(
        'INSERT INTO clinic.patients SELECT "Patient ID" + 1000, age, zip, sex, born, diagnosis '
        'FROM clinic.patients WHERE "Patient ID" <= 50'
    )
    code, out = cli_json(dsn, "refresh", "patients_k5")
    assert code == 0 and out["rows"] == 350
    assert conn.execute("SELECT count(*) FROM released.patients_k5").fetchone()[0] == 350
    runs = conn.execute(
        "SELECT count(*), count(DISTINCT source_fingerprint) FROM dbanon.run"
    ).fetchone()
    assert runs == (2, 2)


def test_failed_check_keeps_the_previous_release(
    conn: psycopg.Connection,
    dsn: str,
    hospital,
    monkeypatch: pytest.MonkeyPatch,  # noqa: ANN001
) -> None:
    assert cli_json(dsn, *PUBLISH)[0] == 0
    before = snapshot(conn)
    # An algorithm that breaks its promise: every row its own group.
    # An algorithm that breaks its promise: every row its own group, regrouped or persisting.
    monkeypatch.setattr(KMember, "cluster", lambda self, r, qi, *_: np.arange(qi.n, dtype=np.int32))
    monkeypatch.setattr(
        grouped, "persist_groups", lambda qi, *_, **__: np.arange(qi.n, dtype=np.int32)
    )
    result = cli(dsn, *PUBLISH, "--replace")
    assert result.exit_code == 2
    assert "failed its check of k-anonymity (k=5)" in result.stderr
    runs = "dbanon.run"
    assert {k: v for k, v in snapshot(conn)["relations"].items() if k != runs} == {
        k: v for k, v in before["relations"].items() if k != runs
    }
    # Failed runs are logged against the existing release, and change nothing else.
    assert cli(dsn, "refresh", "patients_k5").exit_code == 2
    after = conn.execute("SELECT status, error FROM dbanon.run ORDER BY id").fetchall()
    assert [a[0] for a in after] == ["succeeded", "failed", "failed"]
    assert "failed its check of k-anonymity (k=5)" in after[-1][1]
    assert len(released(conn)) == 300


def test_consumer_reads_release_but_not_source(
    conn: psycopg.Connection, dsn: str, hospital
) -> None:  # noqa: ANN001, E501
    role = f"Reader {uuid.uuid4().hex[:8]}"
    conn.execute(psycopg.sql.SQL("CREATE ROLE {}").format(psycopg.sql.Identifier(role)))
    try:
        assert cli_json(dsn, *PUBLISH, "--grant", role)[0] == 0
        conn.execute(psycopg.sql.SQL("SET ROLE {}").format(psycopg.sql.Identifier(role)))
        assert conn.execute("SELECT count(*) FROM released.patients_k5").fetchone()[0] == 300
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT count(*) FROM clinic.patients")
        conn.execute("RESET ROLE")
        # Re-publishing re-applies the grant to the new table.
        assert cli_json(dsn, *PUBLISH, "--grant", role, "--replace")[0] == 0
        conn.execute(psycopg.sql.SQL("SET ROLE {}").format(psycopg.sql.Identifier(role)))
        assert conn.execute("SELECT count(*) FROM released.patients_k5").fetchone()[0] == 300
    finally:
        conn.execute("RESET ROLE")
        conn.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(psycopg.sql.Identifier(role)))
        conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


def test_odd_identifiers_publish(conn: psycopg.Connection, dsn: str) -> None:
    rng = random.Random(3)
    rows = [
        (i, rng.randint(1, 9), rng.choice(["a'b", 'c"d', "é f"]), rng.choice("xy"))
        for i in range(60)
    ]
    make_table(
        conn,
        "Süß Schema",
        'My "Table"',
        [("Row Id", "int PRIMARY KEY"), ("Äge", "int"), ("Wei'rd", "text"), ("S x", "text")],
        rows,
    )
    code, out = cli_json(
        dsn,
        "publish",
        "odd one",
        "--source",
        'Süß Schema.My "Table"',
        "--key",
        "Row Id",
        "--qi",
        "Äge,Wei'rd",
        "--sensitive",
        "S x",
        "--k",
        "4",
        "--target",
        'Out Schema.Rel "1"',
        "--seed",
        "2",
    )
    assert code == 0, out
    assert out["table"] == '"Out Schema"."Rel ""1"""'  # as SQL needs it
    cls = verify.verify(
        conn, ("Out Schema", 'Rel "1"'), ["Äge", "Wei'rd"], [{"name": "k-anonymity", "k": 4}]
    )
    assert sum(cls.sizes) == 60 and min(cls.sizes) == out["min_class_size"]
    code, chk = cli_json(dsn, "check", 'Out Schema.Rel "1"', "--qi", "Äge,Wei'rd", "--k", "4")
    assert code == 0 and chk["min_class_size"] == min(cls.sizes)


def test_report_reads_for_people(
    conn: psycopg.Connection, dsn: str, hospital, monkeypatch: pytest.MonkeyPatch  # noqa: ANN001
) -> None:
    """`report` without --json: the figures of the JSON form, labelled; then a failed refresh
    and a released table dropped by hand show up as such."""
    assert cli_json(dsn, *PUBLISH)[0] == 0
    _, data = cli_json(dsn, "report", "patients_k5")
    result = cli(dsn, "report", "patients_k5")
    assert result.exit_code == 0, result.stderr
    table: dict[str, str] = {}  # label -> value: piped, the table is tab-separated lines
    for line in result.stdout.splitlines():
        cells = line.split("\t")
        if len(cells) >= 2:  # label, value, what it means
            table[cells[0]] = cells[1]
    smallest = min(verify.fetch(conn, "released.patients_k5", QI).sizes)
    assert table["method"] == "kmember"
    assert table["promises"] == "k-anonymity (k=5)"
    assert table["objects"] == "released.patients_k5"
    assert table["rows"] == table["source rows"] == "300"
    assert table["released classes"].startswith(
        f"{data['classes']} (rows with equal released QIs; smallest {smallest}, largest "
    )
    assert table["NCP (GCP)"] == f"{data['gcp']:.2%}"
    assert table["run time"] == f"{data['seconds']:.2f} s"
    assert "dm" not in data["method_metrics"]  # two sensitive columns: no exposure, no DM
    assert table["discernibility of groups"] == str(data["method_metrics"]["discernibility"])
    assert "latest run failed" not in result.stdout
    # token (a sensitive column unique per row, released row by row) is the only warning
    warnings = [w for w in result.stdout.splitlines() if w.startswith("warning")]
    assert len(warnings) == 1 and 'sensitive column token' in warnings[0], result.stdout

    monkeypatch.setattr(KMember, "cluster", lambda self, r, qi, *_: np.arange(qi.n, dtype=np.int32))
    monkeypatch.setattr(
        grouped, "persist_groups", lambda qi, *_, **__: np.arange(qi.n, dtype=np.int32)
    )
    assert cli(dsn, "refresh", "patients_k5").exit_code == 2
    conn.execute("DROP VIEW released.patients_k5")
    result = cli(dsn, "report", "patients_k5")
    assert result.exit_code == 0
    assert "latest run failed at " in result.stdout
    assert "failed its check of k-anonymity (k=5)" in result.stdout
    assert "warning: released relation released.patients_k5 is missing" in result.stdout
