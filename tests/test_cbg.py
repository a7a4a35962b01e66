"""Method `cbg`: the thesis's toy example (Table 3.2 -> Table 3.6), the (k,l) check, bad input
and random tables, each release proven by the independent verifier (tests/verify_cbg.py)."""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction

import psycopg
import pytest
import verify_cbg
from helpers import cli, cli_json, make_table, snapshot
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

# Table 3.2 of the thesis: ID, age, gender, zip, disease.
TABLE_3_2 = [
    (101, 16, "F", 43307, "Flu"),
    (102, 22, "M", 43302, "Dyspepsia"),
    (103, 24, "F", 43306, "Hepatitis"),
    (104, 26, "M", 43307, "Bronchitis"),
    (105, 29, "M", 43309, "Bronchitis"),
    (106, 31, "F", 43312, "Pneumonia"),
    (107, 34, "F", 43312, "Gastritis"),
    (108, 35, "M", 43309, "Dyspepsia"),
]
COLUMNS = [("id", "int PRIMARY KEY"), ("age", "int"), ("gender", "text"), ("zip", "int"),
           ("disease", "text")]  # fmt: skip
QI = ["age", "gender", "zip"]
# Table 3.6: the released QIs of each row and its bucket (the thesis numbers them alike).
TABLE_3_6_QIT = Counter([
    ("[16,24]", "F", "[43306,43307]", 1), ("[22,26]", "M", "[43302,43307]", 1),
    ("[16,24]", "F", "[43306,43307]", 2), ("[22,26]", "M", "[43302,43307]", 2),
    ("[29,35]", "M", "43309", 3), ("[31,34]", "F", "43312", 3),
    ("[31,34]", "F", "43312", 4), ("[29,35]", "M", "43309", 4),
])  # fmt: skip
TABLE_3_6_ST = {
    (1, "Dyspepsia", 1), (1, "Flu", 1), (2, "Bronchitis", 1), (2, "Hepatitis", 1),
    (3, "Bronchitis", 1), (3, "Pneumonia", 1), (4, "Dyspepsia", 1), (4, "Gastritis", 1),
}  # fmt: skip


def publish(dsn: str, name: str, *args: str, source: str = "t.patients") -> tuple[int, dict]:
    return cli_json(dsn, "publish", name, "--source", source, "--key", "id", "--qi",
                    ",".join(QI), "--sensitive", "disease", "--algorithm", "cbg",
                    *args)  # fmt: skip


@pytest.fixture
def toy(conn: psycopg.Connection) -> None:
    make_table(conn, "t", "patients", COLUMNS, TABLE_3_2)
    conn.commit()


def test_table_3_2_publishes_as_table_3_6(
    conn: psycopg.Connection, dsn: str, toy: None
) -> None:
    """k=2, l=4: groups of 2 rows, each in 2 buckets of 2 distinct diseases (Table 3.6 up to
    the secret placement: which member of a group takes which of its buckets, and the bucket
    ids, are drawn from the run's seed, issue 24); Helen (F, 31, 43312) finds each of 4
    diseases with probability 1/4."""
    code, out = publish(dsn, "toy", "--k", "2", "--l", "4")
    assert code == 0, out
    qit = list(conn.execute("SELECT age, gender, zip, bucket_id FROM released.toy_qit"))
    assert Counter(q[:3] for q in qit) == Counter(q[:3] for q in TABLE_3_6_QIT.elements())
    st = set(conn.execute("SELECT bucket_id, disease, count FROM released.toy_st"))
    assert sorted(b for b, _, _ in st) == [1, 1, 2, 2, 3, 3, 4, 4]

    def per_class(rows: object, table: set) -> set:
        """Each class's (generalised QIs) diseases over the buckets it meets."""
        out: dict = {}
        for *q, b in rows:  # type: ignore[attr-defined]
            out.setdefault(tuple(q), set()).update(d for bb, d, _ in table if bb == b)
        return {(q, frozenset(d)) for q, d in out.items()}

    assert per_class(qit, st) == per_class(TABLE_3_6_QIT.elements(), TABLE_3_6_ST)
    cb = verify_cbg.fetch(conn, "released.toy_qit", "released.toy_st", QI, "disease")
    assert verify_cbg.problems(cb, 2, 4) == []
    for in_buckets in cb.classes.values():  # Table 3.6's properties
        assert sorted(in_buckets.values()) == [1, 1]
    assert all(sorted(c.values()) == [1, 1] for c in cb.buckets.values())
    helen = verify_cbg.attacker(cb, (31, "F", 43312))
    assert helen == dict.fromkeys(["Bronchitis", "Pneumonia", "Dyspepsia", "Gastritis"],
                                  Fraction(1, 4))  # fmt: skip
    # Every source row meets only its own class here: exposure (3.22) is 1/4 for each.
    code, report = cli_json(dsn, "report", "toy")
    metrics = report["method_metrics"]
    assert metrics["exposure"] == pytest.approx(0.25)
    assert metrics["exposure_max"] == pytest.approx(0.25)
    assert metrics["dm"] == 16 and metrics["suppressed_rows"] == 0
    assert [d.name for d in conn.execute("SELECT * FROM released.toy_qit").description] == [
        *QI, "bucket_id"
    ]
    assert [d.name for d in conn.execute("SELECT * FROM released.toy_st").description] == [
        "bucket_id", "disease", "count"
    ]


def test_check_reads_qit_with_st(conn: psycopg.Connection, dsn: str, toy: None) -> None:
    """`dbanon check QIT --buckets ST`: holds at l=4, fails at l=5 and when ST is changed."""
    assert publish(dsn, "toy", "--k", "2", "--l", "4")[0] == 0
    base = ["check", "released.toy_qit", "--qi", ",".join(QI), "--sensitive", "disease",
            "--l-kind", "cross-bucket", "--buckets", "released.toy_st", "--k", "2"]  # fmt: skip
    code, out = cli_json(dsn, *base, "--l", "4")
    assert code == 0 and out["max_disclosure"] == pytest.approx(0.25), out
    code, out = cli_json(dsn, *base, "--l", "5")
    assert code == 1 and out["classes_above_1_over_l"] == 4, out
    conn.execute("UPDATE released.toy_st SET disease = 'Flu' WHERE bucket_id = 1")
    conn.commit()  # bucket 1 (whichever it is: ids are secret) now holds only Flu, so a class
    # with a row in it gets Flu with at least 1/2
    code, out = cli_json(dsn, *base, "--l", "4")
    assert code == 1 and out["max_disclosure"] >= 0.5 - 1e-9, out


def test_check_reads_an_st_that_repeats_a_value_as_one_summing_it(
    conn: psycopg.Connection, dsn: str, toy: None
) -> None:
    """(3.22) is linear in each ST count: a (bucket, value) written as two rows whose counts
    add up reads as the one row, whatever the check sums first; a count moved to another
    value of the bucket changes the odds."""
    assert publish(dsn, "toy", "--k", "2", "--l", "4")[0] == 0
    base = ["check", "released.toy_qit", "--qi", ",".join(QI), "--sensitive", "disease",
            "--l-kind", "cross-bucket", "--buckets", "released.toy_st", "--k", "2", "--l", "4"]
    code, before = cli_json(dsn, *base)
    conn.execute("UPDATE released.toy_st SET count = count + 1 WHERE bucket_id = 1")
    conn.execute("INSERT INTO released.toy_st SELECT bucket_id, disease, -1 FROM "
                 "released.toy_st WHERE bucket_id = 1")  # fmt: skip
    conn.commit()
    code_after, after = cli_json(dsn, *base)
    assert code == code_after == 0 and after["max_disclosure"] == pytest.approx(
        before["max_disclosure"]) and "classes_with_inconsistent_buckets" not in after, after
    low, high = conn.execute("SELECT min(disease), max(disease) FROM released.toy_st "
                             "WHERE bucket_id = 1").fetchone()  # fmt: skip
    assert low != high
    conn.execute("UPDATE released.toy_st SET count = count + 1 WHERE bucket_id = 1 AND "
                 "disease = %s AND count > 0", [low])  # fmt: skip
    conn.execute("UPDATE released.toy_st SET count = count - 1 WHERE bucket_id = 1 AND "
                 "disease = %s AND count > 0", [high])  # fmt: skip
    conn.commit()  # the bucket's size is as before, one value's count moved to another
    code, moved = cli_json(dsn, *base)
    assert moved["max_disclosure"] > before["max_disclosure"] + 1e-9, moved


def test_check_finds_buckets_whose_st_disagrees(conn: psycopg.Connection, dsn: str,
                                                toy: None) -> None:  # fmt: skip
    """A bucket whose ST counts differ from its QIT rows, or a QIT row with no bucket id,
    makes its classes inconsistent: the check fails and counts them."""
    assert publish(dsn, "toy", "--k", "2", "--l", "4")[0] == 0
    base = ["check", "released.toy_qit", "--qi", ",".join(QI), "--sensitive", "disease",
            "--l-kind", "cross-bucket", "--buckets", "released.toy_st", "--k", "2", "--l", "4"]
    conn.execute("UPDATE released.toy_st SET count = count + 1 WHERE bucket_id = 1")
    conn.commit()
    code, out = cli_json(dsn, *base)
    assert code == 1 and out["classes_with_inconsistent_buckets"] >= 1, out
    conn.execute("UPDATE released.toy_st SET count = count - 1 WHERE bucket_id = 1")
    conn.execute("UPDATE released.toy_qit SET bucket_id = NULL WHERE bucket_id = 2")
    conn.commit()
    code, out = cli_json(dsn, *base)
    assert code == 1 and out["classes_with_inconsistent_buckets"] >= 1, out


def test_a_broken_build_is_refused(
    conn: psycopg.Connection, dsn: str, toy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build whose ST breaks the l half is refused by the gate; the release stays as it was."""
    from psycopg import sql

    from dbanon.methods.cbg import CrossBucket

    assert publish(dsn, "toy", "--k", "2", "--l", "4")[0] == 0
    before = snapshot(conn)
    real = CrossBucket.build

    def broken(self: CrossBucket, conn_: psycopg.Connection, r, ctx):  # noqa: ANN001, ANN202
        metrics = real(self, conn_, r, ctx)
        st = r.stored(ctx.built[1])
        conn_.execute(sql.SQL("UPDATE {} SET disease = 'Flu' WHERE bucket_id = 1").format(st))
        return metrics

    monkeypatch.setattr(CrossBucket, "build", broken)
    result = cli(dsn, "publish", "toy", "--source", "t.patients", "--key", "id", "--qi",
                 ",".join(QI), "--sensitive", "disease", "--algorithm", "cbg", "--k", "2",
                 "--l", "4", "--replace")  # fmt: skip
    assert result.exit_code == 2
    assert "failed its check of cross-bucket l-diversity (l=4)" in result.stderr
    after = snapshot(conn)
    assert {k: v for k, v in after["relations"].items() if k != "dbanon.run"} == {
        k: v for k, v in before["relations"].items() if k != "dbanon.run"
    }


def test_the_gate_counts_every_box_containing_a_person(
    conn: psycopg.Connection, dsn: str, toy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(3.22) with the source, as §6.2 item 7 reads it: when overlapping boxes give a person
    odds above 1/l (here reported by the containment join), the release is refused although
    every class holds, and the earlier release stays; a measured release records the check."""
    from dbanon.metrics import exposure

    assert publish(dsn, "toy", "--k", "2", "--l", "4")[0] == 0
    assert cli_json(dsn, "report", "toy")[1]["method_metrics"]["exposure_checked"] is True
    before = snapshot(conn)
    real = exposure.at_publish
    monkeypatch.setattr(exposure, "at_publish",
                        lambda *a: {**real(*a), "exposure_max": 0.5})  # fmt: skip
    code, out = publish(dsn, "toy", "--k", "2", "--l", "4", "--replace")
    assert code == 2 and "every box containing a person" in out["error"], out
    after = snapshot(conn)
    assert {k: v for k, v in after["relations"].items() if k != "dbanon.run"} == {
        k: v for k, v in before["relations"].items() if k != "dbanon.run"
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--k", "2", "--l", "7"), "not 7-eligible: disease has only 6 distinct values"),
        (("--k", "2", "--l", "5"), "not 5-eligible: disease = 'Bronchitis' is 25.0 % of 8 rows"),
        (("--k", "2", "--l", "1"), "--l must be at least 2, got 1.0"),
        (("--k", "2", "--l", "2.5"), "--l must be a whole number, got 2.5"),
        (("--k", "1", "--l", "2"), "k must be at least 2, got 1"),
        (("--l", "2"), "--algorithm cbg needs both --k and --l"),
        (("--k", "2"), "needs --l"),
        (("--k", "7", "--l", "3"), "needs at least k*ceil(l/k) = 7 distinct values"),
        (("--k", "2", "--l", "4", "--block-size", "7"),
         "--block-size must be at least 2 * k * ceil(l/k) = 8, got 7"),
        (("--k", "2", "--l", "4", "--block-size", "8", "--exact"), "contradict each other"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    conn: psycopg.Connection, dsn: str, toy: None, args: tuple[str, ...], message: str
) -> None:
    before = snapshot(conn)
    result = cli(dsn, "publish", "bad", "--source", "t.patients", "--key", "id", "--qi",
                 ",".join(QI), "--sensitive", "disease", "--algorithm", "cbg", *args)  # fmt: skip
    assert result.exit_code == 2, result.stdout
    assert message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    after = snapshot(conn)
    assert {k: v for k, v in after["relations"].items() if k != "dbanon.run"} == {
        k: v for k, v in before["relations"].items() if k != "dbanon.run"
    }


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[tuple], int, int]:
    """A random l-eligible table, k and l."""
    k = draw(st.integers(2, 4))
    ell = draw(st.integers(2, 5))
    seed = draw(st.integers(0, 10**6))
    rng = random.Random(seed)
    least = k * -(-ell // k)  # fewer distinct values than k*ceil(l/k) are refused
    values = [f"d{i}" for i in range(draw(st.integers(least, 12)))]
    sa = values * draw(st.integers(2, 6)) + draw(st.lists(st.sampled_from(values), max_size=8))
    assume(max(Counter(sa).values()) * ell <= len(sa))  # l-eligible (else refused: tested apart)
    n = len(sa)
    rng.shuffle(sa)
    rows = [(i, rng.randint(18, 90), rng.choice("FM"), rng.randint(100, 130), sa[i])
            for i in range(n)]  # fmt: skip
    return rows, k, ell


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(data=tables())
def test_random_tables_are_kl_anonymous(
    conn: psycopg.Connection, dsn: str, data: tuple[list[tuple], int, int]
) -> None:
    """Every release passes the independent (k,l) check; every row is released or counted."""
    rows, k, ell = data
    conn.execute("DROP SCHEMA IF EXISTS r CASCADE")
    conn.execute("DROP SCHEMA IF EXISTS rel CASCADE")
    conn.execute("DELETE FROM dbanon.release")
    make_table(conn, "r", "patients", COLUMNS, rows)
    conn.commit()
    code, out = publish(dsn, "rand", "--k", str(k), "--l", str(ell), "--target", "rel.rand",
                        source="r.patients")  # fmt: skip
    assert code == 0, out
    cb = verify_cbg.fetch(conn, "rel.rand_qit", "rel.rand_st", QI, "disease")
    assert verify_cbg.problems(cb, k, ell) == []
    code, report = cli_json(dsn, "report", "rand")
    released = sum(sum(c.values()) for c in cb.buckets.values())
    assert released + report["method_metrics"]["suppressed_rows"] == len(rows)
    assert released == len(cb.rows)
    source = Counter(r[4] for r in rows)
    assert all(source[v] >= n for c in cb.buckets.values() for v, n in c.items())


def test_blocks_keep_kl_and_place_nearly_every_row(conn: psycopg.Connection, dsn: str) -> None:
    """Above 50,000 rows (or with --block-size) T_gens are taken in blocks cut along the QIs
    (dbanon.algorithms.cbg.in_blocks): the release passes the same independent (k,l) check,
    and the stranded rows pooled again leave few rows out."""
    rng = random.Random(5)
    values = [f"d{i}" for i in range(9)]
    rows = [(i, rng.randint(18, 90), rng.choice("FM"), rng.randint(100, 300),
             values[min(int(rng.expovariate(0.35)), 8)]) for i in range(3000)]  # fmt: skip
    assert max(Counter(r[4] for r in rows).values()) * 3 <= len(rows)  # 3-eligible
    make_table(conn, "b", "patients", COLUMNS, rows)
    conn.commit()
    code, out = publish(dsn, "blk", "--k", "3", "--l", "3", "--block-size", "400",
                        "--target", "rel.blk", source="b.patients")  # fmt: skip
    assert code == 0, out
    code, report = cli_json(dsn, "report", "blk")
    metrics = report["method_metrics"]
    assert metrics["clustering"] == "partitioned" and metrics["block_size"] == 400, metrics
    cb = verify_cbg.fetch(conn, "rel.blk_qit", "rel.blk_st", QI, "disease")
    assert verify_cbg.problems(cb, 3, 3) == []
    released = sum(sum(c.values()) for c in cb.buckets.values())
    assert released + metrics["suppressed_rows"] == len(rows)
    assert metrics["suppressed_rows"] <= 0.02 * len(rows), metrics


def test_the_release_is_written_in_bucket_order_drawn_from_the_seed(
    conn: psycopg.Connection, dsn: str
) -> None:
    """The QIT and ST are written from the run's arrays (dbanon.methods.cbg_rows): QIT rows by
    bucket id, the rows of a bucket in an order drawn from the seed (the same seed, the same
    tables row for row), ST rows by (bucket id, value); a float QI as typed ranges that hold
    the source's values, an integer sensitive column kept as integer; every release passes
    the independent check."""
    rng = random.Random(11)
    rows = [(i, round(rng.uniform(18, 90), 1), rng.choice("FM"), rng.randint(100, 300),
             rng.randrange(7)) for i in range(600)]  # fmt: skip
    make_table(conn, "o", "patients", [("id", "int PRIMARY KEY"), ("age", "float8"),
                                       ("gender", "text"), ("zip", "int"), ("disease", "int")],
               rows)  # fmt: skip
    conn.commit()
    tables = {}
    for name in ("o1", "o2"):
        code, out = publish(dsn, name, "--k", "2", "--l", "4", "--seed", "4", "--ranges",
                            "typed", "--target", f"rel.{name}", source="o.patients")  # fmt: skip
        assert code == 0, out
        cb = verify_cbg.fetch(conn, f"rel.{name}_qit", f"rel.{name}_st", QI, "disease")
        assert verify_cbg.problems(cb, 2, 4) == []
        qit = conn.execute(
            f"SELECT age::text, gender, zip::text, bucket_id FROM rel.{name}_qit").fetchall()
        st = conn.execute(f"SELECT bucket_id, disease, count FROM rel.{name}_st").fetchall()
        tables[name] = (qit, st)
        buckets = [b for *_, b in qit]
        assert buckets == sorted(buckets)
        assert st == sorted(st)  # (bucket, value) order: the values are integers here
        assert conn.execute(
            f"SELECT pg_typeof(disease)::text FROM rel.{name}_st LIMIT 1"
        ).fetchone()[0] == "integer"
        ages = conn.execute(f"SELECT age FROM rel.{name}_qit LIMIT 1").fetchone()[0]
        assert ages.lower <= ages.upper  # a typed range
    assert tables["o1"] == tables["o2"]
    # Not the source's order inside a bucket: some bucket's rows are not sorted by their QIs.
    qit = tables["o1"][0]
    per_bucket: dict[int, list] = {}
    for *labels, b in qit:
        per_bucket.setdefault(b, []).append(tuple(labels))
    assert any(v != sorted(v) for v in per_bucket.values())


@st.composite
def bucket_releases(draw: st.DrawFn) -> tuple[list[tuple], list[tuple]]:
    """A QIT (two QIs from small alphabets, buckets of several rows shared by classes) and an
    ST whose counts add up to each bucket's rows, some (bucket, value) written as two rows."""
    n = draw(st.integers(1, 40))
    qit = [(draw(st.sampled_from("ab")), draw(st.sampled_from("xyz")), draw(st.integers(1, 6)))
           for _ in range(n)]  # fmt: skip
    sizes = Counter(b for *_, b in qit)
    stt = []
    for b, size in sorted(sizes.items()):
        values = draw(st.lists(st.sampled_from("PQRS"), min_size=size, max_size=size))
        for v, c in sorted(Counter(values).items()):
            split = draw(st.integers(0, c - 1)) if c > 1 and draw(st.booleans()) else 0
            stt += [(b, v, c - split)] + ([(b, v, split)] if split else [])
    return qit, stt


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(release=bucket_releases(), ell=st.sampled_from([2, 3]))
def test_the_check_computes_3_22_as_fractions_do(
    conn: psycopg.Connection, dsn: str, release: tuple[list[tuple], list[tuple]], ell: int
) -> None:
    """`dbanon check --l-kind cross-bucket` on any QIT and ST that agree: the worst odds and
    the classes above 1/l are (3.22) computed in fractions (tests/verify_cbg.py)."""
    qit, stt = release
    conn.execute("DROP SCHEMA IF EXISTS x CASCADE")
    make_table(conn, "x", "qit", [("g", "text"), ("z", "text"), ("bucket_id", "int")], qit)
    make_table(conn, "x", "st", [("bucket_id", "int"), ("d", "text"), ("count", "int")], stt)
    conn.commit()
    code, out = cli_json(dsn, "check", "x.qit", "--qi", "g,z", "--sensitive", "d", "--l-kind",
                         "cross-bucket", "--buckets", "x.st", "--l", str(ell))  # fmt: skip
    cb = verify_cbg.fetch(conn, "x.qit", "x.st", ["g", "z"], "d")
    worst = {c: max(verify_cbg.odds(cb, in_buckets).values()) for c, in_buckets in
             cb.classes.items()}  # fmt: skip
    above = sum(1 for p in worst.values() if p * ell > 1)
    assert out["max_disclosure"] == pytest.approx(float(max(worst.values()))), out
    assert out["classes_above_1_over_l"] == above and code == (1 if above else 0), out
    assert "classes_with_inconsistent_buckets" not in out, out
