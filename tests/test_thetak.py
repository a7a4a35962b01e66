"""(θ,k)-anonymity in the database: the check and the vulnerability metrics against hand and
plain-Python computations, `publish --algorithm thetak` checked independently, bad input."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import cli, cli_json, make_table, snapshot
from psycopg import sql

from dbanon.api import Database
from dbanon.metrics.vulnerability import vulnerability_in_memory

# A two-level sensitive hierarchy: 4 categories x 3 values.
DX = {
    "stomach": ["gastritis", "ulcer", "reflux"],
    "bone": ["fracture", "sprain", "arthritis"],
    "lung": ["flu", "asthma", "pneumonia"],
    "skin": ["eczema", "acne", "psoriasis"],
}
CATEGORY = {v: c for c, vs in DX.items() for v in vs}
QI = ["age", "zone", "sex"]
RULES = ("paper", "relaxed")


def hierarchy_csv(tmp_path: Path, name: str = "dx.csv", drop: str | None = None) -> Path:
    path = tmp_path / name
    path.write_text("".join(f"{v};{c};*\n" for v, c in CATEGORY.items() if v != drop))
    return path


@pytest.fixture
def ward(conn: psycopg.Connection, dsn: str, tmp_path: Path) -> psycopg.Connection:
    """400 patients; diseases skewed and tied to age (the young: lung and skin)."""
    rng = random.Random(11)
    rows = []
    for i in range(1, 401):
        age = rng.randint(10, 79)
        cats = ["lung", "skin", "stomach", "bone"] if age < 40 else ["bone", "stomach", "lung"]
        dx = rng.choice(DX[rng.choices(cats, weights=range(len(cats), 0, -1))[0]])
        rows.append((i, age, rng.choice("NSEW"), rng.choice("FM"), dx, rng.randint(0, 999)))
    make_table(
        conn, "h", "ward",
        [("id", "int PRIMARY KEY"), ("age", "int"), ("zone", "text"), ("sex", "text"),
         ("dx", "text"), ("cost", "numeric(6,1)")],
        rows,
    )  # fmt: skip
    assert cli(dsn, "hierarchy", "import", "dx", str(hierarchy_csv(tmp_path))).exit_code == 0
    return conn


def publish(dsn: str, name: str, *args: str) -> tuple[int, dict]:
    return cli_json(dsn, "publish", name, "--source", "h.ward", "--key", "id",
                    "--qi", ",".join(QI), "--algorithm", "thetak", *args)  # fmt: skip


def independent_check(
    conn: psycopg.Connection, relation: str, k: int, theta: int, category: Any,
    rule: str = "paper",
) -> dict[str, Any]:
    """(θ,k) and the vulnerabilities of a released table, in plain Python over its rows."""
    schema, name = relation.split(".")
    rows = conn.execute(
        sql.SQL("SELECT {}, {} FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, QI)),
            sql.Identifier("s"),
            sql.Identifier(schema, name),
        )
    ).fetchall()
    rows_of: dict = defaultdict(int)
    classes: dict = defaultdict(list)
    for *q, s in rows:
        rows_of[s] += 1
        classes[tuple(q)].append(s)
    # need_c = max(1, min(k // θ, Σ_v min(f_v, N_c) // N_c)), N = max(1, n // k),
    # N_c = min(N, ⌈θ N r_c / n⌉)
    big_n = max(1, len(rows) // k)
    per_cat: dict = defaultdict(int)
    for s, f in rows_of.items():
        per_cat[category(s)] += f
    share = {c: min(big_n, -(-theta * big_n * r // len(rows))) for c, r in per_cat.items()}
    supply: dict = defaultdict(int)
    for s, f in rows_of.items():
        supply[category(s)] += min(f, share[category(s)])
    need = {c: max(1, min(k // theta, x // share[c])) for c, x in supply.items()}
    if rule == "paper":  # min(k // θ, V_c), V_c the distinct values of c in the relation
        distinct: dict = defaultdict(int)
        for s in rows_of:
            distinct[category(s)] += 1
        need = {c: min(k // theta, x) for c, x in distinct.items()}
    failing = 0
    for values in classes.values():
        per: dict = defaultdict(set)
        for s in values:
            per[category(s)].add(s)
        diverse = sum(len(vs) >= need[c] for c, vs in per.items())
        failing += len(values) < k or diverse < theta
    keys = list(classes)
    gid = [keys.index(tuple(q)) for *q, _ in rows]
    vuln = vulnerability_in_memory(gid, [category(s) for *_, s in rows], [s for *_, s in rows])
    return {"failing": failing, "classes": len(classes), **vuln}


def released_as_s(conn: psycopg.Connection, relation: str, column: str) -> str:
    """A view of the released table with the sensitive column as `s` (for independent_check)."""
    conn.execute(
        sql.SQL("CREATE VIEW h.checked AS SELECT {}, {} AS s FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, QI)),
            sql.Identifier(column),
            sql.Identifier(*relation.split(".")),
        )
    )
    return "h.checked"


# --- the metrics and the check, by hand -----------------------------------------------------------


def test_vulnerabilities_and_check_equal_a_hand_computation(
    conn: psycopg.Connection, dsn: str, tmp_path: Path
) -> None:
    # Class a (5 rows): gastritis, ulcer, gastritis (stomach), fracture, sprain (bone).
    # Class b (3 rows): flu x 3 (lung).
    # similarity: a: 3 rows x 3/5 + 2 rows x 2/5 = 13/5; b: 3 x 3/3 = 3  -> (13/5 + 3) / 8 = 0.7
    # background: a: 3 x 1/2 + 2 x 1/2 = 5/2;      b: 3 x 1/1 = 3    -> (5/2 + 3) / 8 = 0.6875
    dx = ["gastritis", "ulcer", "gastritis", "fracture", "sprain", "flu", "flu", "flu"]
    zone = ["a"] * 5 + ["b"] * 3
    make_table(
        conn, "t", "toy", [("zone", "text"), ("dx", "text")], list(zip(zone, dx, strict=True))
    )
    assert cli(dsn, "hierarchy", "import", "dx", str(hierarchy_csv(tmp_path))).exit_code == 0
    base = ["check", "t.toy", "--qi", "zone", "--sensitive", "dx",
            "--sensitive-hierarchy", "dx=dx"]  # fmt: skip
    code, out = cli_json(dsn, *base, "--k", "2", "--theta", "2", "--worst")
    theta_k = out["models"][1]
    assert theta_k["similarity_vulnerability"] == pytest.approx(0.7)
    assert theta_k["background_vulnerability"] == pytest.approx(0.6875)
    # majority category: a's stomach holds 3 of 5, b's lung 3 of 3 -> every row: 8/8.
    assert vulnerability_in_memory(zone, [CATEGORY[d] for d in dx], dx) == pytest.approx(
        {"similarity_vulnerability": 0.7, "background_vulnerability": 0.6875,
         "majority_category_vulnerability": 1.0}
    )  # fmt: skip
    # A class c of 2 stomach, 2 bone, 1 lung has no majority: (5 + 3) of 13 rows.
    more = ["gastritis", "ulcer", "fracture", "sprain", "flu"]
    cats = [CATEGORY[d] for d in dx + more]
    assert vulnerability_in_memory(zone + ["c"] * 5, cats, dx + more)[
        "majority_category_vulnerability"] == pytest.approx(8 / 13)
    # k=2, θ=2: need = min(1, V_c) = 1; a shows 2 categories, b one: b fails.
    assert code == 1 and theta_k["holds"] is False
    assert theta_k["classes_failing_theta_k"] == 1 and theta_k["min_diverse_categories"] == 1
    assert theta_k["worst_class"] == "zone=b"
    # k=4, θ=2: need stomach 2, bone 2 (of 3 in the hierarchy, 2 in the table), lung 1;
    # a: 5 rows, stomach 2 values, bone 2 values -> holds; b: 3 rows -> fails on k.
    code, out = cli_json(dsn, *base, "--k", "4", "--theta", "2")
    assert out["models"][1]["classes_failing_theta_k"] == 1
    # Without class b the relation holds; the human form prints both figures.
    conn.execute("DELETE FROM t.toy WHERE zone = 'b'")
    result = cli(dsn, *base, "--k", "4", "--theta", "2")
    assert result.exit_code == 0
    assert "similarity vulnerability\t0.52" in result.stdout  # (3 x 3/5 + 2 x 2/5) / 5
    assert "background vulnerability\t0.5\n" in result.stdout
    # A third category present in the hierarchy but not the class does not count: θ=3 fails.
    assert cli(dsn, *base, "--k", "4", "--theta", "3").exit_code == 1


def test_sql_check_agrees_with_plain_python_on_random_tables(
    conn: psycopg.Connection, dsn: str, tmp_path: Path
) -> None:
    assert cli(dsn, "hierarchy", "import", "dx", str(hierarchy_csv(tmp_path))).exit_code == 0
    values = list(CATEGORY)
    for trial in range(4):
        rng = random.Random(trial)
        n = rng.randint(20, 120)
        rows = [(rng.randint(1, 3), rng.choice("xy"), rng.choice("FM"),
                 rng.choice(values[: rng.randint(4, 12)])) for _ in range(n)]  # fmt: skip
        table = f"r{trial}"
        columns = [("age", "int"), ("zone", "text"), ("sex", "text"), ("s", "text")]
        make_table(conn, "t", table, columns, rows)
        for (k, theta), rule in itertools.product(((2, 2), (4, 2), (6, 3)), RULES):
            want = independent_check(conn, f"t.{table}", k, theta, CATEGORY.get, rule)
            with Database(dsn) as db:
                _, got = db.check(f"t.{table}", QI, sensitive="s", k=k, theta=theta,
                                  sensitive_hierarchies={"s": "dx"}, theta_rule=rule)  # fmt: skip
            assert got.figures["classes_failing_theta_k"] == want["failing"], (trial, k, theta)
            assert got.holds is (want["failing"] == 0)
            for f in ("similarity_vulnerability", "background_vulnerability"):
                assert got.figures[f] == pytest.approx(want[f])


# --- publishing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("construction", ["greedy", "paper"])
def test_publish_thetak_passes_an_independent_check(
    ward: psycopg.Connection, dsn: str, construction: str
) -> None:
    code, out = publish(dsn, "w", "--sensitive", "dx", "--k", "6", "--theta", "3",
                        "--sensitive-hierarchy", "dx=dx", "--seed", "3",
                        "--construction", construction)  # fmt: skip
    assert code == 0, out
    assert out["rows"] == 400 and out["min_class_size"] >= 6
    # Plain GROUP BY: every class has >= 6 rows; no key column; dx released row for row.
    smallest = ward.execute(
        "SELECT min(n) FROM (SELECT count(*) AS n FROM released.w GROUP BY age, zone, sex) c"
    ).fetchone()[0]
    assert smallest >= 6
    cols = [r[0] for r in ward.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'released.w'::regclass AND attnum > 0"
    )]  # fmt: skip
    assert "id" not in cols and sorted(cols) == sorted([*QI, "dx"])
    assert ward.execute("SELECT array_agg(dx ORDER BY dx) FROM released.w").fetchone() == \
        ward.execute("SELECT array_agg(dx ORDER BY dx) FROM h.ward").fetchone()  # fmt: skip
    # (θ,k) in plain Python, categories from the test's own map, not the catalog.
    mine = independent_check(ward, released_as_s(ward, "released.w", "dx"), 6, 3, CATEGORY.get)
    assert mine["failing"] == 0
    # The run records the vulnerabilities (report: method_metrics), equal to the Python ones.
    code, rep = cli_json(dsn, "report", "w")
    metrics = rep["method_metrics"]
    for f in ("similarity_vulnerability", "background_vulnerability"):
        assert metrics[f] == pytest.approx(mine[f])
    assert rep["models"][1].startswith("(θ,k)-anonymity (θ=3, k=6")
    assert metrics["leftover_rows"] >= 0
    # The stored spec keeps the hierarchy in the model: refresh rebuilds the same release.
    spec = ward.execute("SELECT spec FROM dbanon.release WHERE name = 'w'").fetchone()[0]
    assert spec["models"][1] == {"name": "theta-k-anonymity", "theta": 3, "k": 6,
                                 "hierarchy": "dx", "level": None, "width": None,
                                 "rule": "paper"}  # fmt: skip
    ward.execute("DROP VIEW h.checked")  # it would block the swap
    before = ward.execute("SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) "
                          "FROM released.w t").fetchone()  # fmt: skip
    assert cli_json(dsn, "refresh", "w")[0] == 0
    assert ward.execute("SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) "
                        "FROM released.w t").fetchone() == before  # fmt: skip
    # The hierarchy is in use: it cannot be dropped from under the release.
    result = cli(dsn, "hierarchy", "drop", "dx")
    assert result.exit_code == 2 and "used by release(s) 'w'" in result.stderr


def test_publish_numeric_sensitive_with_interval_categories(
    ward: psycopg.Connection, dsn: str
) -> None:
    code, out = publish(dsn, "c", "--sensitive", "cost", "--k", "8", "--theta", "4",
                        "--category-width", "250", "--seed", "1",
                        "--leftovers", "nearest")  # fmt: skip
    assert code == 0, out
    mine = independent_check(
        ward, released_as_s(ward, "released.c", "cost"), 8, 4, lambda v: int(v // 250)
    )
    assert mine["failing"] == 0
    assert cli(dsn, "check", "released.c", "--qi", ",".join(QI), "--sensitive", "cost",
               "--k", "8", "--theta", "4", "--category-width", "250").exit_code == 0  # fmt: skip
    # Narrower intervals are other categories: the release need not hold for them.
    assert cli(dsn, "check", "released.c", "--qi", ",".join(QI), "--sensitive", "cost",
               "--k", "8", "--theta", "8", "--category-width", "10").exit_code == 1  # fmt: skip


# --- bad input ------------------------------------------------------------------------------------

BAD = [
    (["--theta", "1"], "--theta must be at least 2, got 1"),
    (["--theta", "7"], "--theta 7 is larger than --k 6"),
    (["--k", "500"], "k=500 is larger than the 400 rows of h.ward"),
    (["--sensitive-hierarchy", "zone=dx"], "--sensitive-hierarchy names zone, which is not"),
    (["--sensitive-hierarchy", "dx=nope"], "hierarchy 'nope' does not exist"),
    (["--category-level", "2"], "--category-level 2 is not a level of hierarchy 'dx'"),
    (
        ["--sensitive-hierarchy", "dx=dx2"],
        "values of sensitive column dx are not in hierarchy 'dx2': 'eczema'",
    ),  # fmt: skip
    (
        ["--theta", "5"],
        "holds values of 4 categories (hierarchy 'dx' below the root), fewer than --theta 5",
    ),  # fmt: skip
    (["--category-width", "5", "--sensitive-hierarchy", "dx=dx"], "not both"),
    (["--theta-rule", "loose"], "--theta-rule must be one of paper, relaxed, got 'loose'"),
]


def test_bad_input_one_line_exit_2_nothing_written(
    ward: psycopg.Connection, dsn: str, tmp_path: Path
) -> None:
    path = hierarchy_csv(tmp_path, "dx2.csv", drop="eczema")
    assert cli(dsn, "hierarchy", "import", "dx2", str(path)).exit_code == 0
    before = snapshot(ward)
    for change, message in BAD:
        opts = {"--sensitive": "dx", "--k": "6", "--theta": "3", "--sensitive-hierarchy": "dx=dx"}
        extra: list[str] = []
        for i in range(0, len(change), 2):
            if change[i] in opts:
                opts[change[i]] = change[i + 1]
            else:
                extra += change[i : i + 2]
        args = [x for kv in opts.items() for x in kv] + extra
        result = cli(dsn, "publish", "bad", "--source", "h.ward", "--key", "id", "--qi",
                     ",".join(QI), "--algorithm", "thetak", *args)  # fmt: skip
        assert result.exit_code == 2, (change, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (change, lines)
        assert snapshot(ward) == before, change


def test_check_refuses_what_it_cannot_read(ward: psycopg.Connection, dsn: str) -> None:
    qi = ["h.ward", "--qi", ",".join(QI)]
    cases = [
        (["--k", "6", "--theta", "3", "--sensitive", "dx"],
         "needs the sensitive column's categories: --sensitive-hierarchy COL=NAME, or"),
        (["--k", "6", "--sensitive", "dx", "--sensitive-hierarchy", "dx=dx"],
         "--sensitive-hierarchy is a parameter of (θ,k)-anonymity: give --theta"),
        (["--k", "6", "--theta", "3", "--sensitive", "dx", "--category-width", "5"],
         "--category-width needs a numeric sensitive column; dx of"),
        (["--theta", "3", "--sensitive", "dx", "--sensitive-hierarchy", "dx=dx"],
         "--theta needs --k"),
        (["--k", "6", "--sensitive", "dx", "--theta-rule", "relaxed"],
         "--theta-rule is a parameter of (θ,k)-anonymity: give --theta"),
        (["--k", "6", "--theta", "3", "--sensitive", "cost", "--category-width", "0"],
         "--category-width must be a positive number, got 0"),
    ]  # fmt: skip
    for args, message in cases:
        result = cli(dsn, "check", *qi, *args)
        assert result.exit_code == 2, (message, result.output)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    ward.execute("UPDATE h.ward SET dx = NULL WHERE id = 5")
    result = cli(dsn, "check", *qi, "--k", "6", "--sensitive", "dx", "--theta", "3",
                 "--sensitive-hierarchy", "dx=dx")  # fmt: skip
    assert result.exit_code == 2 and "has 1 NULL values" in result.stderr


@pytest.mark.parametrize("server_dsn", ["embedded"], indirect=True)
def test_thetak_in_blocks_keeps_the_whole_tables_property(
    ward: psycopg.Connection, dsn: str
) -> None:
    """`--block-size` cuts the table as partitioned k-member does (above 100,000 rows by
    default). The model judges a class by the whole table's need_c, so each block is clustered
    against those: the release passes the same independent (θ,k) check."""
    code, out = publish(dsn, "w", "--sensitive", "dx", "--k", "6", "--theta", "3",
                        "--sensitive-hierarchy", "dx=dx", "--seed", "3", "--block-size", "100")
    assert code == 0, out
    code, rep = cli_json(dsn, "report", "w")
    metrics = rep["method_metrics"]
    assert metrics["clustering"] == "partitioned" and metrics["blocks"] > 1, metrics
    mine = independent_check(ward, released_as_s(ward, "released.w", "dx"), 6, 3, CATEGORY.get)
    assert mine["failing"] == 0
