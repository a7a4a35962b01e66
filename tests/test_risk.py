"""Re-identification risk (`check --risk`, `report`): hand-worked figures, ARX's own figures for
Adult, and the risk of kmember and mondrian releases measured again by plain SQL here.

Expected figures are computed in this file from their definitions (El Emam's, as ARX's
RiskModelSampleSummary; Zayatz 1991 with exact binomials), never by dbanon's code."""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction
from math import comb

import psycopg
import pytest
from helpers import cli, cli_json, make_table, snapshot

COLUMNS = [("zip", "text"), ("age", "int"), ("sex", "text"), ("dx", "text")]
# Sample classes (zip, age, sex) of sizes 1, 2, 3, 4: 10 rows, 4 classes.
SAMPLE = {("1300", 30, "F"): 1, ("1300", 30, "M"): 2, ("1400", 40, "F"): 3, ("1400", 50, "M"): 4}
# The population holds the sample's classes with sizes 2, 2, 6, 8 and one class of its own (5).
POPULATION = {("1300", 30, "F"): 2, ("1300", 30, "M"): 2, ("1400", 40, "F"): 6,
              ("1400", 50, "M"): 8, ("1500", 60, "F"): 5}  # fmt: skip


def rows_of(classes: dict[tuple, int]) -> list[tuple]:
    rows = [(*c, f"d{i}") for c, f in classes.items() for i in range(f)]
    random.Random(3).shuffle(rows)
    return rows


@pytest.fixture
def hand(conn: psycopg.Connection) -> None:
    make_table(conn, "s", "sample", COLUMNS, rows_of(SAMPLE))
    make_table(conn, "s", "population", COLUMNS, rows_of(POPULATION))
    conn.commit()


def zayatz(hist: dict[int, int], n: int, big_n: int) -> Fraction:
    """Zayatz's population-uniques estimate, exactly: hypergeometric P(X=1) from binomials."""
    u = sum(hist.values())

    def p1(size: int) -> Fraction:
        return Fraction(size * comb(big_n - size, n - 1), comb(big_n, n))

    total = sum(Fraction(c, u) * p1(s) for s, c in hist.items())
    conditional = Fraction(hist.get(1, 0), u) * p1(1) / total
    return hist.get(1, 0) * conditional / Fraction(n, big_n)


def test_prosecutor_risk_of_a_hand_worked_table(hand: None, dsn: str) -> None:
    # 1/f per record: 1, 1/2, 1/3, 1/4; average = classes / rows = 4/10.
    code, out = cli_json(dsn, "check", "s.sample", "--qi", "zip,age,sex", "--risk")
    assert code == 0, out
    risk = out["risk"]
    assert risk["records"] == 10 and risk["classes"] == 4
    p = risk["prosecutor"]
    assert p["highest"] == 1.0 and p["lowest"] == 0.25 and p["average"] == pytest.approx(0.4)
    assert p["records_at_risk"] == 1.0  # default threshold 0.2: every class is smaller than 5
    assert risk["sample_uniqueness"] == pytest.approx(0.1)
    assert "journalist" not in risk and "population_uniqueness" not in risk
    # above 0.3: classes of 1, 2 and 3 rows (6 records); above 0.5: the unique (1 record);
    # above 1/3 exactly: 1/3 is not above it, so classes of 1 and 2 (3 records).
    for threshold, share in (("0.3", 0.6), ("0.5", 0.1), (str(1 / 3), 0.3), ("1", 0.0)):
        _, out = cli_json(dsn, "check", "s.sample", "--qi", "zip,age,sex",
                          "--risk-threshold", threshold)  # fmt: skip
        assert out["risk"]["prosecutor"]["records_at_risk"] == pytest.approx(share), threshold
    # Fewer QIs, larger classes: (zip) -> 1300: 3, 1400: 7.
    _, out = cli_json(dsn, "check", "s.sample", "--qi", "zip", "--risk")
    p = out["risk"]["prosecutor"]
    assert (p["highest"], p["lowest"], p["average"]) == pytest.approx((1 / 3, 1 / 7, 0.2))
    human = cli(dsn, "check", "s.sample", "--qi", "zip,age,sex", "--risk")
    assert human.exit_code == 0
    assert "prosecutor risk\thighest 1, average 0.4, records at risk 100.00%" in human.stdout


def test_journalist_marketer_and_uniqueness_with_a_population(hand: None, dsn: str) -> None:
    code, out = cli_json(dsn, "check", "s.sample", "--qi", "zip,age,sex", "--risk",
                         "--population", "s.population", "--risk-threshold", "0.3")  # fmt: skip
    assert code == 0, out
    risk = out["risk"]
    j = risk["journalist"]
    # F_j of the sample's classes: 2, 2, 6, 8 (the population's own class does not count).
    assert j["highest"] == 0.5 and j["lowest"] == 0.125
    assert j["records_at_risk"] == pytest.approx(0.3)  # 1/F > 0.3: F = 2, 2 -> f = 1 + 2
    # sum f/F / n = (1/2 + 2/2 + 3/6 + 4/8) / 10 = 0.25 > classes / sum F = 4/18
    assert j["average"] == pytest.approx(0.25)
    assert risk["marketer"]["average"] == pytest.approx(0.25)
    assert risk["prosecutor"]["records_at_risk"] == pytest.approx(0.6)
    pu = risk["population_uniqueness"]
    assert pu["model"].startswith("Zayatz") and pu["population"] == 23
    assert pu["sampling_fraction"] == pytest.approx(10 / 23)
    expected = zayatz({1: 1, 2: 1, 3: 1, 4: 1}, 10, 23)
    assert pu["uniques"] == pytest.approx(float(expected), rel=1e-9)
    assert pu["estimate"] == pytest.approx(float(expected / 23), rel=1e-9)
    # A population size alone gives the estimate, not the journalist risk.
    _, out = cli_json(dsn, "check", "s.sample", "--qi", "zip,age,sex",
                      "--population-size", "1000")  # fmt: skip
    assert "journalist" not in out["risk"]
    expected = zayatz({1: 1, 2: 1, 3: 1, 4: 1}, 10, 1000)
    assert out["risk"]["population_uniqueness"]["uniques"] == pytest.approx(float(expected))
    human = cli(dsn, "check", "s.sample", "--qi", "zip,age,sex", "--population", "s.population")
    assert "journalist risk\thighest 0.5, average 0.25" in human.stdout
    assert "marketer risk\taverage 0.25" in human.stdout


def test_risk_with_models_and_bad_input(hand: None, conn: psycopg.Connection, dsn: str) -> None:
    code, out = cli_json(dsn, "check", "s.sample", "--qi", "zip,age,sex", "--k", "2", "--risk")
    assert code == 1 and out["holds"] is False and out["risk"]["prosecutor"]["highest"] == 1.0
    before = snapshot(conn)
    conn.commit()
    # The population must contain the sample: here it is the other way round.
    bad = [
        (["s.population", "--qi", "zip,age,sex", "--population", "s.sample"],
         "does not contain the sample"),
        (["s.sample", "--qi", "zip,age,sex", "--risk-threshold", "0"], "--risk-threshold"),
        (["s.sample", "--qi", "zip,age,sex", "--risk-threshold", "1.5"], "--risk-threshold"),
        (["s.sample", "--qi", "zip,nope", "--risk"], "column nope does not exist"),
        (["s.sample", "--qi", "zip", "--population", "s.nowhere"], "s.nowhere"),
        (["s.sample", "--qi", "zip", "--population-size", "5"], "smaller than"),
        (["s.sample", "--risk"], "--qi"),
        (["s.sample", "--qi", "zip", "--population", "s.population", "--population-size", "50"],
         "not both"),
        (["--release", "s.sample", "--risk"], "report"),
    ]  # fmt: skip
    for args, message in bad:
        result = cli(dsn, "check", *args)
        assert result.exit_code == 2, (args, result.stdout)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, args
    assert snapshot(conn) == before


def test_odd_identifiers_and_nulls(conn: psycopg.Connection, dsn: str) -> None:
    # NULL is a QI value of its own (as GROUP BY): classes (NULL, a): 2, (1, a): 1, (1, NULL): 3
    rows = [(None, "a"), (None, "a"), (1, "a"), (1, None), (1, None), (1, None)]
    make_table(conn, "Odd Schema", 'Pö"p', [("Zip Code", "int"), ("sëx", "text")], rows)
    make_table(conn, "Odd Schema", "Sample", [("Zip Code", "int"), ("sëx", "text")], rows[1:])
    conn.commit()
    _, out = cli_json(dsn, "check", "Odd Schema.Sample", "--qi", "Zip Code,sëx",
                      "--population", 'Odd Schema.Pö"p')  # fmt: skip
    risk = out["risk"]
    assert risk["classes"] == 3 and risk["prosecutor"]["highest"] == 1.0
    # sample f: (NULL, a) 1, (1, a) 1, (1, NULL) 3; population F: 2, 1, 3
    assert risk["journalist"]["highest"] == 1.0 and risk["journalist"]["lowest"] == pytest.approx(
        1 / 3
    )
    assert risk["marketer"]["average"] == pytest.approx((1 / 2 + 1 + 1) / 5)


def test_journalist_average_takes_the_larger_estimate(conn: psycopg.Connection, dsn: str) -> None:
    # f = (4, 1), F = (4, 2): classes / sum F = 2/6 is above sum(f/F) / n = (1 + 1/2) / 5.
    sample = {("a",): 4, ("b",): 1}
    population = {("a",): 4, ("b",): 2, ("c",): 7}
    make_table(conn, "j", "sample", [("q", "text"), ("dx", "text")], rows_of(sample))
    make_table(conn, "j", "population", [("q", "text"), ("dx", "text")], rows_of(population))
    conn.commit()
    _, out = cli_json(dsn, "check", "j.sample", "--qi", "q", "--population", "j.population")
    risk = out["risk"]
    assert risk["journalist"]["average"] == pytest.approx(1 / 3)
    assert risk["marketer"]["average"] == pytest.approx(0.3)
    assert risk["population_uniqueness"]["population"] == 13
    assert risk["population_uniqueness"]["uniques"] == pytest.approx(
        float(zayatz({4: 1, 1: 1}, 5, 13))
    )


ADULT_QI = ["sex", "age", "race", "marital_status", "education", "native_country", "workclass",
            "occupation", "income"]  # fmt: skip


def test_figures_arx_documents_for_adult(conn: psycopg.Connection, dsn: str) -> None:
    """ARX's TestRiskMetrics on its data/adult.csv (UCI Adult's 30,162 complete training rows,
    the nine attributes with hierarchies as QIs): average prosecutor risk 0.6465751607983555
    and highest 1.0 before anonymisation (testAverageRisk2, testHighestIndividualRisk2);
    Zayatz's population uniqueness 0.3207402393466189 at sampling fraction 0.1, 0.3577099234829125
    at 0.2 and 0.5142895033485844 at 1 (testDecisionRule2, where Dankar's rule picks Zayatz;
    ARX compares four significant digits)."""
    from dbanon.data import ADULT_COLUMNS, ADULT_TRAIN_ROWS, adult_rows

    idx = [ADULT_COLUMNS.index(c) for c in ADULT_QI]
    rows = [[r[i] for i in idx] for r in adult_rows(ADULT_TRAIN_ROWS)]
    make_table(conn, "a", "adult", [(c, "text") for c in ADULT_QI], rows)
    conn.commit()
    n = ADULT_TRAIN_ROWS
    for fraction, expected in ((0.1, 0.3207402393466189), (0.2, 0.3577099234829125),
                               (1.0, 0.5142895033485844)):  # fmt: skip
        code, out = cli_json(dsn, "check", "a.adult", "--qi", ",".join(ADULT_QI),
                             "--population-size", repr(n / fraction))  # fmt: skip
        assert code == 0, out
        risk = out["risk"]
        assert risk["prosecutor"]["average"] == pytest.approx(0.6465751607983555, abs=1e-15)
        assert risk["prosecutor"]["highest"] == 1.0
        assert int(risk["population_uniqueness"]["estimate"] * 1e4) == int(expected * 1e4)
        assert risk["population_uniqueness"]["estimate"] == pytest.approx(expected, rel=1e-9)
    assert risk["sample_uniqueness"] == pytest.approx(0.5142895033485844)


def released_classes(conn: psycopg.Connection, table: str, qi: list[str]) -> Counter:
    schema, name = table.split(".")
    cols = psycopg.sql.SQL(", ").join(map(psycopg.sql.Identifier, qi))
    rows = conn.execute(
        psycopg.sql.SQL("SELECT {} FROM {}").format(cols, psycopg.sql.Identifier(schema, name))
    ).fetchall()
    return Counter(rows)


GROUPING = {
    "kmember": ["--seed", "5"], "mondrian": [], "rfka": [], "fulldomain": [],
    "cbg": ["--l", "2"], "lag": ["--l", "2"],
}  # fmt: skip


@pytest.mark.parametrize("algorithm", list(GROUPING))
def test_report_shows_risk_of_grouping_releases(
    conn: psycopg.Connection, dsn: str, algorithm: str
) -> None:
    rng = random.Random(11)
    rows = [(i, rng.randint(20, 70), rng.choice("FM"), rng.randint(10, 30), rng.choice("wxyz"))
            for i in range(120)]  # fmt: skip
    cols = [("id", "int"), ("age", "int"), ("sex", "text"), ("zip", "int"), ("dx", "text")]
    make_table(conn, "s", "people", cols, rows)
    conn.commit()
    name = f"people_{algorithm}"
    result = cli(dsn, "publish", name, "--source", "s.people", "--key", "id",
                 "--qi", "age,sex,zip", "--sensitive", "dx", "--k", "4",
                 "--algorithm", algorithm, *GROUPING[algorithm])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    code, report = cli_json(dsn, "report", name)
    assert code == 0
    risk = report["risk"]
    # Measured again here: the released table's classes over its QIs, as released (rfka
    # releases a subset of them: every column but the label).
    qi = ["age", "sex", "zip"]
    if algorithm == "rfka":
        schema, table = report["table"].split(".")
        qi = [c for (c,) in conn.execute(
            "SELECT column_name::text FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s AND column_name <> 'dx'", [schema, table])]  # fmt: skip
    assert sorted(risk["qi"]) == sorted(qi)
    sizes = list(released_classes(conn, report["table"], qi).values())
    n = sum(sizes)
    assert risk["records"] == n == report["rows"] and risk["classes"] == len(sizes)
    p = risk["prosecutor"]
    assert p["highest"] == pytest.approx(1 / min(sizes)) and p["highest"] <= 1 / 4
    assert p["lowest"] == pytest.approx(1 / max(sizes))
    assert p["average"] == pytest.approx(len(sizes) / n)
    assert p["records_at_risk"] == pytest.approx(sum(f for f in sizes if 1 / f > 0.2) / n)
    assert risk["sample_uniqueness"] == 0
    human = cli(dsn, "report", name)
    assert human.exit_code == 0 and "prosecutor risk" in human.stdout
    assert f"average {len(sizes) / n:.4g}" in human.stdout
