"""Every algorithm's release keeps the model it promises: proved by the independent verifier
(tests/verify.py), with `dbanon check` as a second opinion."""

from __future__ import annotations

import random
from collections import Counter

import psycopg
import pytest
import verify
from helpers import cli, cli_json, make_table, snapshot

from dbanon.api import Database
from dbanon.demo import DEMO_QI, load_adult

DX = ["flu", "asthma", "diabetes", "cancer", "gout", "angina"]
QI = ["age", "region", "sex"]


@pytest.fixture
def ward(conn: psycopg.Connection) -> psycopg.Connection:
    rng = random.Random(11)
    rows = [
        (i, rng.randint(20, 79), rng.choice(["N", "S", "E", "W"]), rng.choice("FM"),
         rng.choice(DX), rng.randint(1, 9))
        for i in range(1, 401)
    ]  # fmt: skip
    make_table(
        conn, "h", "ward",
        [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("sex", "text"),
         ("dx", "text"), ("severity", "int")],
        rows,
    )  # fmt: skip
    return conn


def publish(dsn: str, name: str, *args: str) -> dict:
    code, out = cli_json(dsn, "publish", name, "--source", "h.ward", "--key", "id",
                         "--qi", "age,region,sex", *args)  # fmt: skip
    assert code == 0, out
    return out


def check(dsn: str, relation: str, *args: str, qi: str = "age,region,sex") -> tuple[int, dict]:
    return cli_json(dsn, "check", relation, "--qi", qi, *args)


@pytest.mark.parametrize(
    ("kind", "extra"),
    [("distinct", []), ("entropy", []), ("recursive", ["--c", "3"])],
)
def test_mondrian_l_diverse_release(
    ward: psycopg.Connection, dsn: str, kind: str, extra: list[str]
) -> None:
    args = ["--sensitive", "dx", "--l", "3", "--l-kind", kind, *extra]
    out = publish(dsn, f"m_{kind}", "--algorithm", "mondrian", "--k", "4", *args)
    model = {"name": f"{kind}-l-diversity", "l": 3, **({"c": 3} if extra else {})}
    cls = verify.verify(ward, out["table"], QI, [{"name": "k-anonymity", "k": 4}, model], "dx")
    assert cls.overall == Counter(r[0] for r in ward.execute("SELECT dx FROM h.ward"))
    code, res = check(dsn, out["table"], "--k", "4", *args)
    assert code == 0, res
    # The checks can fail: the same release does not promise a much larger l.
    assert not verify.holds(cls, {"name": "distinct-l-diversity", "l": 6})
    code, _ = check(dsn, out["table"], "--sensitive", "dx", "--l", "6")
    assert code == 1


def test_kmember_pk_release(ward: psycopg.Connection, dsn: str) -> None:
    out = publish(dsn, "pk", "--k", "5", "--sensitive", "dx", "--p", "3", "--seed", "4")
    pk = {"name": "p-k-anonymity", "p": 3, "k": 5}
    cls = verify.verify(ward, out["table"], QI, [{"name": "k-anonymity", "k": 5}, pk], "dx")
    assert sum(cls.sizes) == 400
    code, res = check(dsn, out["table"], "--k", "5", "--sensitive", "dx", "--p", "3")
    assert code == 0 and res["holds"], res
    plain = publish(dsn, "plain", "--k", "5", "--sensitive", "dx", "--seed", "1")
    # plain k-member does not give 3 distinct values everywhere: --p did the work
    assert not verify.holds(verify.fetch(ward, plain["table"], QI, "dx"), pk)
    code, _ = check(dsn, plain["table"], "--k", "5", "--sensitive", "dx", "--p", "3")
    assert code == 1


def test_fulldomain_t_closeness_and_alpha_k(ward: psycopg.Connection, dsn: str) -> None:
    out = publish(dsn, "tc", "--algorithm", "fulldomain", "--k", "5",
                  "--sensitive", "severity", "--t", "0.3")  # fmt: skip
    k5 = {"name": "k-anonymity", "k": 5}
    t = {"name": "t-closeness", "t": 0.3, "ground": "ordered"}  # severity is numeric
    cls = verify.verify(ward, out["table"], QI, [k5, t], "severity")
    assert len(cls.classes) > 1  # not the trivial release of one class
    code, res = check(dsn, out["table"], "--k", "5", "--sensitive", "severity", "--t", "0.3")
    assert code == 0, res
    # The source itself is not 0.3-close (whatever its k): the release did the work.
    assert not verify.holds(verify.fetch(ward, "h.ward", QI, "severity"), t)
    code, res = check(dsn, "h.ward", "--sensitive", "severity", "--t", "0.3")
    assert code == 1 and res["classes_above_t"] > 0

    out = publish(dsn, "ak", "--algorithm", "fulldomain", "--k", "5",
                  "--sensitive", "dx", "--alpha", "0.5")  # fmt: skip
    alpha = {"name": "alpha-k-anonymity", "alpha": 0.5, "k": 5}
    cls = verify.verify(ward, out["table"], QI, [k5, alpha], "dx")
    assert len(cls.classes) > 1
    assert not verify.holds(verify.fetch(ward, "h.ward", QI, "dx"), alpha)
    code, res = check(dsn, out["table"], "--k", "5", "--sensitive", "dx", "--alpha", "0.5")
    assert code == 0, res


def test_anatomy_release_and_refusal(ward: psycopg.Connection, dsn: str) -> None:
    out = publish(dsn, "anat", "--algorithm", "anatomy", "--sensitive", "dx", "--l", "4",
                  "--seed", "8")  # fmt: skip
    assert out["objects"] == ["released.anat_qit", "released.anat_st"]
    freq = [{"name": "frequency-l-diversity", "l": 4}]
    st = verify.verify(ward, "released.anat_st", ["group_id"], freq, "dx", count="count")
    qit = verify.fetch(ward, "released.anat_qit", ["group_id"])
    # QIT and ST agree on every group's size; nothing lost or invented on either side
    assert {g: sum(c.values()) for g, c in qit.classes.items()} == {
        g: sum(c.values()) for g, c in st.classes.items()
    }
    assert st.overall == Counter(r[0] for r in ward.execute("SELECT dx FROM h.ward"))
    assert Counter(ward.execute("SELECT age, region, sex FROM released.anat_qit")) == Counter(
        ward.execute("SELECT age, region, sex FROM h.ward")
    )
    assert out["min_class_size"] == min(qit.sizes) >= 4
    code, res = check(dsn, "released.anat_st", "--sensitive", "dx", "--count", "count",
                      "--l", "4", "--l-kind", "frequency", qi="group_id")  # fmt: skip
    assert code == 0, res
    code, _ = check(dsn, "released.anat_st", "--sensitive", "dx", "--count", "count",
                    "--l", "5", "--l-kind", "frequency", qi="group_id")  # fmt: skip
    assert code == 1
    # The consumer joins the two by group id; no row key anywhere.
    cols = {
        r[0]
        for r in ward.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'released'"
        )
    }
    assert "id" not in cols and "group_id" in cols

    ward.execute("UPDATE h.ward SET dx = 'flu' WHERE id <= 150")
    before = snapshot(ward)
    result = cli(
        dsn,
        "publish",
        "anat2",
        "--source",
        "h.ward",
        "--key",
        "id",
        "--qi",
        "age,region,sex",
        "--algorithm",
        "anatomy",
        "--sensitive",
        "dx",
        "--l",
        "4",
    )
    assert result.exit_code == 2
    assert "not 4-eligible: dx = 'flu' is" in result.stderr and "% of 400 rows" in result.stderr
    assert snapshot(ward) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--algorithm", "kmember", "--k", "3", "--sensitive", "dx", "--t", "0.2"],
         "--algorithm kmember cannot promise --t (t-closeness); use --algorithm fulldomain"),
        (["--algorithm", "mondrian", "--sensitive", "dx", "--l", "2"],
         "--algorithm mondrian needs --k"),
        (["--algorithm", "anatomy", "--sensitive", "dx", "--l", "2", "--k", "3"],
         "--algorithm anatomy cannot promise --k"),
        (["--algorithm", "kmember", "--k", "3", "--as", "view"],
         "--as does not apply to --algorithm kmember (an option of fulldomain, rfka, hamdist)"),
        (["--algorithm", "mondrian", "--k", "3", "--l", "2"], "needs exactly one --sensitive"),
        (["--algorithm", "fulldomain", "--k", "3", "--sensitive", "dx", "--t", "2"],
         "--t must be in (0, 1], got 2"),
    ],
)  # fmt: skip
def test_promise_mismatch_is_refused(
    ward: psycopg.Connection, dsn: str, args: list[str], message: str
) -> None:
    before = snapshot(ward)
    result = cli(dsn, "publish", "x", "--source", "h.ward", "--key", "id", "--qi", "age,region",
                 *args)  # fmt: skip
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert snapshot(ward) == before


def test_live_fulldomain_view_on_adult_stays_k_anonymous(
    conn: psycopg.Connection, dsn: str
) -> None:
    with Database(dsn) as db:
        load_adult(db)
    qi = ",".join(DEMO_QI)
    code, out = cli_json(dsn, "publish", "adult_view", "--source", "demo.adult", "--key", "id",
                         "--qi", qi, "--sensitive", "occupation", "--k", "10",
                         "--algorithm", "fulldomain", "--as", "view",
                         "--max-suppression", "0.02")  # fmt: skip
    assert code == 0, out
    view = out["table"]
    assert (
        conn.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", [view]).fetchone()[0]
        == "v"
    )
    k10 = [{"name": "k-anonymity", "k": 10}]
    verify.verify(conn, view, DEMO_QI, k10)
    assert check(dsn, view, "--k", "10", qi=qi)[0] == 0
    levels = cli_json(dsn, "report", "adult_view")[1]["method_metrics"]["levels"]
    # A categorical QI the optimum keeps as is: a new value in it makes a class of its own.
    kept = [c for c in ("workclass", "marital_status", "race", "sex") if levels[c] == 0]
    assert kept, levels
    column = psycopg.sql.Identifier(kept[0])

    def insert(n: int) -> None:
        conn.execute(
            psycopg.sql.SQL(
                "INSERT INTO demo.adult (age, workclass, fnlwgt, education, education_num, "
                "marital_status, occupation, relationship, race, sex, capital_gain, "
                "capital_loss, hours_per_week, native_country, income) "
                "SELECT age, workclass, fnlwgt, education, education_num, marital_status, "
                "'Astronaut', relationship, race, sex, capital_gain, capital_loss, "
                "hours_per_week, native_country, income FROM demo.adult, generate_series(1, %s) "
                "WHERE id = 1"
            ),
            [n],
        )
        conn.execute(
            psycopg.sql.SQL(
                "UPDATE demo.adult SET {} = 'Atlantis' WHERE occupation = 'Astronaut'"
            ).format(column)
        )

    visible = "SELECT count(*) FROM released.adult_view WHERE occupation = 'Astronaut'"
    insert(3)  # a class of 3 < k: the view must hide it
    assert conn.execute(visible).fetchone()[0] == 0
    verify.verify(conn, view, DEMO_QI, k10)
    code, res = check(dsn, view, "--k", "10", qi=qi)
    assert code == 0, res
    insert(7)  # now 10 = k: the class may be shown, and the view is still 10-anonymous
    assert conn.execute(visible).fetchone()[0] == 10
    verify.verify(conn, view, DEMO_QI, k10)
    assert check(dsn, view, "--k", "10", qi=qi)[0] == 0
