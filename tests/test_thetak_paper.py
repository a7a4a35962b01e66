"""Issue 35: a default (θ,k) release holds the paper's class condition in every class, and
`check --theta` judges that condition (the relaxed one only when asked for by name).

The paper's condition: a class has >= k rows and at least θ categories c each showing
min(⌊k/θ⌋, V_c) distinct values, V_c the distinct values of c in the table. Checked here by
`paper_failing`, plain Python over one SELECT of the released rows with the categories read
from the shipped hierarchy file by the test itself: nothing from dbanon.
"""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from pathlib import Path

import psycopg
import pytest
from helpers import cli, cli_json
from psycopg import sql

HIERARCHIES = Path(__file__).resolve().parents[1] / "dbanon" / "data" / "hierarchies"
ADULT_QI = ["age", "education_num", "workclass", "marital_status", "race", "sex",
            "native_country"]  # fmt: skip
HOSPITAL_QI = ["age", "years_ill", "gender", "district", "allergy", "marital_status"]


def categories(name: str) -> dict[str, str]:
    """value -> category (the level below the root) from a shipped ARX hierarchy file."""
    with open(HIERARCHIES / f"{name}.csv", newline="") as f:
        return {row[0]: row[-2] for row in csv.reader(f, delimiter=";")}


def paper_failing(
    conn: psycopg.Connection,
    relation: str,
    qi: list[str],
    sensitive: str,
    category: dict[str, str],
    k: int,
    theta: int,
) -> tuple[int, int]:
    """(classes failing the paper's (θ,k) condition, classes) of a released relation."""
    rows = conn.execute(
        sql.SQL("SELECT {}, {}::text FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, qi)),
            sql.Identifier(sensitive),
            sql.Identifier(*relation.split(".")),
        )
    ).fetchall()
    classes: dict = defaultdict(list)
    for *q, s in rows:
        classes[tuple(q)].append(s)
    distinct = Counter(category[v] for v in {s for *_, s in rows})
    need = {c: min(k // theta, v) for c, v in distinct.items()}
    failing = 0
    for values in classes.values():
        shown = Counter(category[v] for v in set(values))
        good = sum(1 for c, d in shown.items() if d >= need[c])
        failing += len(values) < k or good < theta
    return failing, len(classes)


def check(
    dsn: str, relation: str, qi: list[str], hierarchy: str, *extra: str, sensitive: str = "disease"
) -> tuple[int, dict]:
    """`dbanon check --theta 3 --k 12` of a release, its (θ,k) result."""
    code, out = cli_json(dsn, "check", relation, "--qi", ",".join(qi), "--sensitive", sensitive,
                         "--sensitive-hierarchy", f"{sensitive}={hierarchy}", "--k", "12",
                         "--theta", "3", *extra)  # fmt: skip
    return code, out["models"][1]


@pytest.mark.parametrize("server_dsn", ["embedded"], indirect=True)
def test_default_release_of_the_hospital_table_holds_the_papers_condition(
    conn: psycopg.Connection, dsn: str
) -> None:
    code, out = cli_json(dsn, "demo", "--dataset", "hospital", "--k", "12")
    assert code == 0, out
    release = out["table"]
    assert out["rows"] == 30000
    disease = categories("disease")
    failing, classes = paper_failing(conn, release, HOSPITAL_QI, "disease", disease, 12, 3)
    assert classes > 1000 and failing == 0
    # check --theta judges the paper's condition, and agrees.
    code, got = check(dsn, release, HOSPITAL_QI, "demo_hospital_disease")
    assert code == 0 and got["holds"] and got["classes_failing_theta_k"] == 0
    assert got["model"].startswith("(θ,k)-anonymity")

    # The relaxed rule is an option with its own name; its release fails the paper's
    # condition, and check --theta says so (exit 1) with the independent count.
    code, out = cli_json(dsn, "publish", "relaxed", "--source", "demo.hospital", "--key", "id",
                         "--qi", ",".join(HOSPITAL_QI), "--sensitive", "disease",
                         "--algorithm", "thetak", "--k", "12", "--theta", "3",
                         "--theta-rule", "relaxed", "--seed", "1",
                         "--sensitive-hierarchy", "disease=demo_hospital_disease",
                         "--hierarchy", "district=demo_hospital_district")  # fmt: skip
    assert code == 0, out
    failing, classes = paper_failing(
        conn, "released.relaxed", HOSPITAL_QI, "disease", disease, 12, 3
    )
    assert failing > classes // 2
    code, got = check(dsn, "released.relaxed", HOSPITAL_QI, "demo_hospital_disease")
    assert code == 1 and not got["holds"] and got["classes_failing_theta_k"] == failing
    code, got = check(dsn, "released.relaxed", HOSPITAL_QI, "demo_hospital_disease",
                      "--theta-rule", "relaxed")  # fmt: skip
    assert code == 0 and got["holds"] and got["model"].startswith("relaxed (θ,k)-anonymity")
    # The release's own promise is the relaxed model, by name, in its stored spec.
    code, rep = cli_json(dsn, "report", "relaxed")
    assert rep["models"][1].startswith("relaxed (θ,k)-anonymity (θ=3, k=12")
    spec = conn.execute("SELECT spec FROM dbanon.release WHERE name = 'relaxed'").fetchone()[0]
    assert spec["models"][1]["rule"] == "relaxed"
    assert cli(dsn, "check", "--release", "relaxed").exit_code == 0
    # and `show` gives back the publish command that stores the same promise
    code, shown = cli_json(dsn, "show", "relaxed")
    assert code == 0 and "--theta-rule relaxed" in shown["command"]


@pytest.mark.parametrize("server_dsn", ["embedded"], indirect=True)
def test_default_release_of_adult_holds_the_papers_condition(
    conn: psycopg.Connection, dsn: str
) -> None:
    from dbanon.api import Database
    from dbanon.demo import hierarchy_name, prepare

    with Database(dsn) as db:
        prepare(db)
    hmap = ["--hierarchy", f"workclass={hierarchy_name('adult', 'workclass')}",
            "--hierarchy", f"marital_status={hierarchy_name('adult', 'marital-status')}",
            "--hierarchy", f"race={hierarchy_name('adult', 'race')}",
            "--hierarchy", f"sex={hierarchy_name('adult', 'sex')}",
            "--hierarchy", f"native_country={hierarchy_name('adult', 'native-country')}"]
    code, out = cli_json(dsn, "publish", "adult_theta", "--source", "demo.adult", "--key", "id",
                         "--qi", ",".join(ADULT_QI), "--sensitive", "occupation",
                         "--algorithm", "thetak", "--k", "12", "--theta", "3", *hmap,
                         "--sensitive-hierarchy",
                         f"occupation={hierarchy_name('adult', 'occupation')}")  # fmt: skip
    assert code == 0, out
    occupation = categories("occupation")
    failing, classes = paper_failing(conn, "released.adult_theta", ADULT_QI, "occupation",
                                     occupation, 12, 3)  # fmt: skip
    assert failing == 0, (failing, classes)
    # θ = 3 = the categories: every class needs every category, all the values of those with
    # V_c <= ⌊k/θ⌋ = 4, so the rarest such value's rows bound the classes; the release is
    # within 5 % of that bound (not collapsed by the construction).
    rows = Counter(r[0] for r in conn.execute("SELECT occupation FROM demo.adult"))
    distinct = Counter(occupation[v] for v in rows)
    bound = min(n for v, n in rows.items() if distinct[occupation[v]] <= 4)
    assert 0.95 * bound <= classes <= bound, (classes, bound)
    code, got = check(dsn, "released.adult_theta", ADULT_QI,
                      hierarchy_name("adult", "occupation"), sensitive="occupation")  # fmt: skip
    assert code == 0 and got["holds"] and got["classes_failing_theta_k"] == 0


def test_a_spec_without_a_rule_promises_the_papers_condition() -> None:
    """A model spec stored before the rule existed reads as the paper's condition; an unknown
    rule is one clear error."""
    from dbanon.errors import DbanonError
    from dbanon.models.specs import from_spec, to_spec

    old = {"name": "theta-k-anonymity", "theta": 3, "k": 12, "hierarchy": "dx", "level": None,
           "width": None}  # fmt: skip
    model = from_spec(old)
    assert to_spec(model) == {**old, "rule": "paper"}
    assert from_spec({**old, "rule": "relaxed"}).name.startswith("relaxed (θ,k)-anonymity")
    with pytest.raises(DbanonError, match="--theta-rule must be one of paper, relaxed, got 'x'"):
        from_spec({**old, "rule": "x"})
