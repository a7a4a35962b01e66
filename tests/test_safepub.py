"""Method `safepub` on Adult (issue 36, item 1): checked on the written relation, independently.

The checks import nothing from dbanon: the classes are counted by tests/verify.py; the SDGS
threshold comes from the scipy re-implementation in test_sdgs; the sample is recomputed in SQL
from its definition (a row is drawn when the first 56 bits of SHA-256(secret || key) fall below
β·2^56, the secret SHA-256 of "dbanon-safepub:SEED" when a seed is given) and generalised with
the shipped ARX hierarchy files read as CSV, so the test knows exactly which rows the release
may hold: the sampled rows, generalised, in classes of at least k.
"""

from __future__ import annotations

import csv
import hashlib
import math
from collections import Counter
from pathlib import Path

import psycopg
import pytest
import verify
from helpers import cli_json, make_table, snapshot
from psycopg import sql
from test_sdgs import reference_k

from dbanon.api import Database
from dbanon.demo import prepare

HIERARCHIES = Path(__file__).parents[1] / "dbanon" / "data" / "hierarchies"
QI = ["age", "education_num", "workclass", "marital_status", "race", "sex", "native_country"]
FILES = {"age": "age", "workclass": "workclass", "marital_status": "marital-status",
         "race": "race", "sex": "sex", "native_country": "native-country"}  # fmt: skip
LEVELS = {"age": 2, "workclass": 1, "marital_status": 1, "race": 1, "native_country": 1}
SEED = 20261128


def hierarchy_args() -> list[str]:
    out: list[str] = []
    for col, name in FILES.items():
        out += ["--hierarchy", f"{col}=demo_adult_{name}"]
    return out


def publish(dsn: str, name: str, *extra: str) -> tuple[int, dict]:
    return cli_json(
        dsn, "publish", name, "--source", "demo.adult", "--key", "id", "--qi", ",".join(QI),
        "--sensitive", "occupation", *hierarchy_args(), "--algorithm", "safepub", *extra,
    )  # fmt: skip


@pytest.fixture
def adult(conn: psycopg.Connection, dsn: str) -> psycopg.Connection:
    prepare(Database(dsn))
    return conn


def generalise(col: str, value: str, level: int) -> str:
    """`value` at `level` of the shipped ARX hierarchy file (level 0: itself)."""
    if level == 0:
        return value
    with (HIERARCHIES / f"{FILES[col]}.csv").open(newline="") as f:
        rows = {row[0]: row for row in csv.reader(f, delimiter=";")}
    return rows[value][level]


def sampled(conn: psycopg.Connection, beta: float, seed: int) -> list[tuple]:
    """The rows the definition draws: QIs and occupation, as text."""
    secret = hashlib.sha256(f"dbanon-safepub:{seed}".encode()).digest()
    below = round(beta * 2**56)
    return conn.execute(
        sql.SQL(
            "SELECT {cols} FROM demo.adult WHERE ('x' || encode(substring(sha256(%s || "
            "convert_to(id::text, 'UTF8')) FROM 1 FOR 7), 'hex'))::bit(56)::bigint < %s"
        ).format(cols=sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c))
                                         for c in [*QI, "occupation"])),  # fmt: skip
        [secret, below],
    ).fetchall()


def test_adult_at_epsilon_1_delta_1e5(adult: psycopg.Connection, dsn: str) -> None:
    """The acceptance: every released class has at least k rows, k is at least the SDGS
    threshold for (1, 1e-5), the release holds no more rows than the sample (exactly its rows
    in classes of k or more), and `dp` is reported."""
    levels = ",".join(f"{c}={n}" for c, n in LEVELS.items())
    code, out = publish(dsn, "dp", "--epsilon", "1", "--delta", "1e-5", "--levels", levels,
                        "--seed", str(SEED))  # fmt: skip
    assert code == 0, out
    beta, k_min = reference_k(1.0, 1e-5)
    dp = out["dp"]
    assert dp["epsilon"] == 1 and dp["delta"] == 1e-5 and dp["search_epsilon"] == 0
    assert dp["beta"] == pytest.approx(beta, rel=1e-12)
    assert dp["k"] >= k_min
    k = dp["k"]
    table = out["table"]
    columns = [r[0] for r in adult.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'released' "
        "AND table_name = 'dp' ORDER BY ordinal_position").fetchall()]  # fmt: skip
    assert sorted(columns) == sorted([*QI, "occupation"])  # no key, nothing undeclared
    classes = verify.verify(adult, table, QI, [{"name": "k-anonymity", "k": k}], "occupation")
    assert min(classes.sizes) >= k

    sample = sampled(adult, beta, SEED)
    total = adult.execute("SELECT count(*) FROM demo.adult").fetchone()[0]
    # β is the one used: the sample's size within 5 standard deviations of βN
    assert abs(len(sample) - beta * total) < 5 * math.sqrt(total * beta * (1 - beta))
    generalised = Counter(
        tuple(generalise(c, v, LEVELS.get(c, 0)) for c, v in zip(QI, row, strict=False))
        + (row[-1],)
        for row in sample
    )
    by_class = Counter()
    for row, n in generalised.items():
        by_class[row[:-1]] += n
    expected = Counter({row: n for row, n in generalised.items() if by_class[row[:-1]] >= k})
    released = Counter(
        tuple(r)
        for r in adult.execute(
            sql.SQL("SELECT {} FROM {}").format(
                sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c))
                                   for c in [*QI, "occupation"]),
                sql.SQL(table),
            )
        ).fetchall()
    )  # fmt: skip
    assert out["rows"] == sum(released.values()) <= len(sample)
    assert released == expected


def test_every_run_draws_a_fresh_secret_sample(adult: psycopg.Connection, dsn: str) -> None:
    """Without --seed two runs draw different samples; neither is the seeded one's."""
    sizes = []
    for name in ("a", "b"):
        code, out = publish(dsn, name, "--levels", "age=4,workclass=2,marital_status=2,"
                            "race=1,native_country=2", "--epsilon", "0.5")  # fmt: skip
        assert code == 0, out
        sizes.append(sorted(adult.execute(
            sql.SQL("SELECT education_num::text || occupation FROM {}").format(
                sql.SQL(out["table"]))).fetchall()))  # fmt: skip
    assert sizes[0] != sizes[1]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--levels", "agee=1"], "not a quasi-identifier"),
        (["--levels", "education_num=2"], "no stored hierarchy"),
        (["--levels", "age=9"], "outside its hierarchy"),
        (["--levels", "age=x"], "whole number"),
        (["--epsilon", "0"], "--epsilon"),
        (["--epsilon", "4"], "--epsilon"),
        (["--delta", "1"], "--delta"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    adult: psycopg.Connection, dsn: str, args: list[str], says: str
) -> None:
    before = snapshot(adult)
    code, out = publish(dsn, "bad", *args)
    assert code == 2 and says in out["error"] and "\n" not in out["error"], out
    assert snapshot(adult) == before


def test_k_above_the_table_is_refused(conn: psycopg.Connection, dsn: str) -> None:
    make_table(conn, "s", "t", [("id", "int PRIMARY KEY"), ("a", "text")],
               [(i, "x") for i in range(40)])  # fmt: skip
    conn.commit()
    before = snapshot(conn)
    code, out = cli_json(dsn, "publish", "t", "--source", "s.t", "--key", "id", "--qi", "a",
                         "--algorithm", "safepub", "--epsilon", "1", "--levels", "a=0")  # fmt: skip
    assert code == 2 and "k=61" in out["error"] and "40 rows" in out["error"], out
    assert snapshot(conn) == before


def ledger(conn: psycopg.Connection) -> float:
    """What the source has spent, summed from the catalog's ledger by hand."""
    conn.rollback()
    row = conn.execute("SELECT coalesce(sum(epsilon), 0) FROM dbanon.dp_spend WHERE "
                       "source_schema = 'demo' AND source_name = 'adult'").fetchone()  # fmt: skip
    return float(row[0])


def test_a_budget_refuses_the_refresh_that_would_overspend(
    adult: psycopg.Connection, dsn: str
) -> None:
    """Sequential composition: every run spends its ε; the run that would take the source past
    its budget exits 4, the release in place and the ledger unchanged, the run logged refused.
    Two releases of one source share its budget; meeting it exactly is allowed."""
    levels = "age=4,workclass=2,marital_status=2,race=1,native_country=2"
    code, out = cli_json(dsn, "budget", "demo.adult", "--epsilon", "2.5")
    assert code == 0 and out["epsilon"] == 2.5 and out["left_epsilon"] == 2.5, out
    code, out = publish(dsn, "dp", "--epsilon", "1", "--levels", levels)
    assert code == 0 and out["budget"]["left_epsilon"] == 1.5, out
    code, out = cli_json(dsn, "refresh", "dp")
    assert code == 0, out
    assert ledger(adult) == 2.0
    before = snapshot(adult)
    code, out = cli_json(dsn, "refresh", "dp")
    assert code == 4 and "budget" in out["error"], out
    after = snapshot(adult)
    assert {k: v for k, v in after["relations"].items() if k != "dbanon.run"} == {
        k: v for k, v in before["relations"].items() if k != "dbanon.run"
    }
    assert ledger(adult) == 2.0
    status = adult.execute("SELECT status FROM dbanon.run ORDER BY id DESC LIMIT 1").fetchone()
    assert status[0] == "refused"
    code, out = cli_json(dsn, "report", "dp")
    assert out["budget"]["spent_epsilon"] == 2.0 and out["budget"]["left_epsilon"] == 0.5, out
    # another release of the same source: 0.5 meets the budget exactly, then nothing more
    code, out = publish(dsn, "dp2", "--epsilon", "0.5", "--levels", levels)
    assert code == 0 and out["budget"]["left_epsilon"] == 0, out
    code, out = publish(dsn, "dp3", "--epsilon", "0.01", "--levels", levels)
    assert code == 4, out
    assert ledger(adult) == 2.5
    # a source without a budget is charged, never refused; a larger budget lets runs on again
    code, out = cli_json(dsn, "budget", "demo.adult", "--epsilon", "3")
    assert code == 0 and out["left_epsilon"] == 0.5 and out["runs"] == 3, out
    code, out = cli_json(dsn, "refresh", "dp2")
    assert code == 0 and out["budget"]["left_epsilon"] == 0, out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nosuch.table", "--epsilon", "1"], "does not exist"),
        (["demo.adult", "--epsilon", "-1"], "--epsilon"),
        (["demo.adult", "--epsilon", "inf"], "--epsilon"),
        (["demo.adult", "--epsilon", "1", "--delta", "2"], "--delta"),
        (["demo.adult", "--delta", "1e-5"], "--delta"),
    ],
)
def test_budget_bad_input_is_one_line_exit_2(
    adult: psycopg.Connection, dsn: str, args: list[str], says: str
) -> None:
    before = snapshot(adult)
    code, out = cli_json(dsn, "budget", *args)
    assert code == 2 and says in out["error"] and "\n" not in out["error"], out
    assert snapshot(adult) == before


def test_odd_identifiers(conn: psycopg.Connection, dsn: str) -> None:
    """Quotes, spaces, capitals and unicode in every name: composed as identifiers throughout."""
    rows = [(f"k'{i}", ["Nord", "Süd"][i % 2], 20 + i % 7, f"d{i % 3}") for i in range(400)]
    make_table(conn, 'Odd "S"', "T ab", [("Key 'x'", "text PRIMARY KEY"), ("Rég ion", "text"),
                                          ("AGE", "int"), ("dx", "text")], rows)  # fmt: skip
    conn.commit()
    code, out = cli_json(dsn, "publish", "odd", "--source", '"Odd ""S"""."T ab"', "--key",
                         "Key 'x'", "--qi", "Rég ion,AGE", "--sensitive", "dx", "--algorithm",
                         "safepub", "--epsilon", "0.5", "--delta", "1e-3", "--levels", "AGE=1",
                         "--seed", "5")  # fmt: skip
    assert code == 0, out
    cls = verify.verify(conn, out["table"], ["Rég ion", "AGE"],
                        [{"name": "k-anonymity", "k": out["dp"]["k"]}], "dx")  # fmt: skip
    assert 0 < sum(cls.sizes) < len(rows)
    assert {k[1] for k in cls.classes} == {"*"}


def test_private_search_release_meets_k_and_reports_its_share(
    adult: psycopg.Connection, dsn: str
) -> None:
    """Without --levels SafePub's search chooses the scheme: the SDGS parameters come from
    ε_anon = ε - ε_search (its default 0.1 ε, or --search-epsilon), every class of the written
    table has k rows, each QI sits at one level of its hierarchy, and the budget is charged the
    whole ε."""
    code, out = publish(dsn, "dps", "--epsilon", "1", "--seed", str(SEED))
    assert code == 0, out
    dp = out["dp"]
    assert dp["epsilon"] == 1 and dp["search_epsilon"] == pytest.approx(0.1)
    beta, k_min = reference_k(0.9, 1e-5)
    assert dp["beta"] == pytest.approx(beta, rel=1e-12) and dp["k"] == k_min
    classes = verify.verify(adult, out["table"], QI, [{"name": "k-anonymity", "k": k_min}],
                            "occupation")  # fmt: skip
    assert min(classes.sizes) >= k_min
    # full-domain: each QI's released values all at one level of its hierarchy file
    for j, col in enumerate(QI):
        if col not in FILES:
            continue
        with (HIERARCHIES / f"{FILES[col]}.csv").open(newline="") as f:
            rows = list(csv.reader(f, delimiter=";"))
        seen = {c[j] for c in classes.classes}
        assert any(seen <= {r[lv] for r in rows} for lv in range(len(rows[0]))), (col, seen)
    assert ledger(adult) == pytest.approx(1.0)

    code, out = publish(dsn, "dps2", "--epsilon", "1", "--search-epsilon", "0.3", "--seed", "2")
    assert code == 0 and out["dp"]["search_epsilon"] == pytest.approx(0.3), out
    assert out["dp"]["k"] == reference_k(0.7, 1e-5)[1]
    assert ledger(adult) == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--epsilon", "1", "--search-epsilon", "1"], "below --epsilon"),
        (["--levels", "age=1", "--search-epsilon", "0.1"], "--levels"),
        (["--search-epsilon", "0"], "--search-epsilon"),
        (["--search-steps", "0"], "--search-steps"),
    ],
)
def test_search_bad_input_is_one_line_exit_2(
    adult: psycopg.Connection, dsn: str, args: list[str], says: str
) -> None:
    before = snapshot(adult)
    code, out = publish(dsn, "bad", *args)
    assert code == 2 and says in out["error"] and "\n" not in out["error"], out
    assert snapshot(adult) == before
