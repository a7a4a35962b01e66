"""Exposure (3.21)/(3.22), DM (2.4) and query bounds equal hand computations on the thesis's
toy releases of Table 3.2: the 2-anonymous generalisation (Table 3.3), the 4-diverse Anatomy
(Table 3.5) and the CBG release (Table 3.6), written here by hand as their relations."""

from __future__ import annotations

import psycopg
import pytest
from helpers import cli_json, make_table
from psycopg import sql

from dbanon.metrics import queries
from dbanon.metrics.boxes import attributes, source_points
from dbanon.metrics.exposure import discernibility, exposure
from dbanon.metrics.queries import Predicate, Query

# Table 3.2 with a salary beside the disease (10, 20, ..., 80), so sums can be bounded.
SOURCE = [
    (101, 16, "F", 43307, "Flu", 10),
    (102, 22, "M", 43302, "Dyspepsia", 20),
    (103, 24, "F", 43306, "Hepatitis", 30),
    (104, 26, "M", 43307, "Bronchitis", 40),
    (105, 29, "M", 43309, "Bronchitis", 50),
    (106, 31, "F", 43312, "Pneumonia", 60),
    (107, 34, "F", 43312, "Gastritis", 70),
    (108, 35, "M", 43309, "Dyspepsia", 80),
]
QI = ["age", "gender", "zip"]
COLS = [("age", "text"), ("gender", "text"), ("zip", "text")]
GENERALISED = [  # Table 3.3: G1 {101-103}, G2 {104, 105}, G3 {106-108}
    ("16-24", "*", "43302-43307", "Flu", 10), ("16-24", "*", "43302-43307", "Dyspepsia", 20),
    ("16-24", "*", "43302-43307", "Hepatitis", 30), ("26-29", "M", "43307-43309", "Bronchitis", 40),
    ("26-29", "M", "43307-43309", "Bronchitis", 50), ("31-35", "*", "43309-43312", "Pneumonia", 60),
    ("31-35", "*", "43309-43312", "Gastritis", 70), ("31-35", "*", "43309-43312", "Dyspepsia", 80),
]  # fmt: skip
CBG_QIT = [  # Table 3.6
    ("16-24", "F", "43306-43307", 1), ("22-26", "M", "43302-43307", 1),
    ("16-24", "F", "43306-43307", 2), ("22-26", "M", "43302-43307", 2),
    ("29-35", "M", "43309", 3), ("31-34", "F", "43312", 3),
    ("31-34", "F", "43312", 4), ("29-35", "M", "43309", 4),
]  # fmt: skip
CBG_BUCKETS = {1: (101, 102), 2: (103, 104), 3: (105, 106), 4: (107, 108)}
ANATOMY_GROUPS = {1: (101, 102, 103, 104), 2: (105, 106, 107, 108)}  # Table 3.5


@pytest.fixture
def toy(conn: psycopg.Connection) -> psycopg.Connection:
    by_id = {r[0]: r for r in SOURCE}
    make_table(conn, "s", "t", [("id", "int PRIMARY KEY"), ("age", "int"), ("gender", "text"),
                                ("zip", "int"), ("disease", "text"), ("salary", "int")],
               SOURCE)  # fmt: skip
    make_table(conn, "h", "gen", [*COLS, ("disease", "text"), ("salary", "int")], GENERALISED)
    make_table(conn, "h", "cbg_qit", [*COLS, ("bucket_id", "int")], CBG_QIT)
    for sa, kind in (("disease", "text"), ("salary", "int")):
        col = 4 if sa == "disease" else 5
        make_table(conn, "h", f"cbg_st_{sa}", [("bucket_id", "int"), (sa, kind), ("count", "int")],
                   [(b, by_id[i][col], 1) for b, ids in CBG_BUCKETS.items() for i in ids])
        make_table(conn, "h", f"ana_st_{sa}", [("group_id", "int"), (sa, kind), ("count", "int")],
                   [(g, by_id[i][col], 1) for g, ids in ANATOMY_GROUPS.items() for i in ids])
    make_table(conn, "h", "ana_qit", [("age", "int"), ("gender", "text"), ("zip", "int"),
                                      ("group_id", "int")],
               [(*by_id[i][1:4], g) for g, ids in ANATOMY_GROUPS.items() for i in ids])
    conn.commit()
    return conn


def load(conn: psycopg.Connection, shape: str, rels: list[str], sensitive: str):  # noqa: ANN201
    attrs = attributes(conn, sql.Identifier("s", "t"), QI, [True, False, True])
    pub = queries.Published(shape, [sql.Identifier("h", r) for r in rels], QI, sensitive)
    return attrs, queries.load(conn, pub, attrs), source_points(conn, sql.Identifier("s", "t"),
                                                                attrs, sensitive)  # fmt: skip


RELEASES = {
    "generalised": ["gen"],
    "anatomy": ["ana_qit", "ana_st_{}"],
    "cbg": ["cbg_qit", "cbg_st_{}"],
}


def release(conn: psycopg.Connection, shape: str, sensitive: str):  # noqa: ANN201
    return load(conn, shape, [r.format(sensitive) for r in RELEASES[shape]], sensitive)


@pytest.mark.parametrize(
    ("shape", "mean", "worst"),
    [
        # 101-103 and 106-108 meet only their group of 3 (1/3 each); 104 and 105 only G2, whose
        # two rows are both Bronchitis (1): (6/3 + 2) / 8.
        ("generalised", 0.5, 1.0),
        # every point is one QIT row, in a group of 4 distinct diseases.
        ("anatomy", 0.25, 0.25),
        # every row meets only its class, 2 rows in 2 buckets of 2: 1 * 1 / (2 * 2).
        ("cbg", 0.25, 0.25),
    ],
)
def test_exposure_by_hand(toy: psycopg.Connection, shape: str, mean: float, worst: float) -> None:
    _, rel, src = release(toy, shape, "disease")
    out = exposure(rel, src)
    assert out["exposure"] == pytest.approx(mean)
    assert out["exposure_max"] == pytest.approx(worst)
    assert out["exposure_unmatched_rows"] == 0


def test_overlapping_boxes_change_the_odds(toy: psycopg.Connection) -> None:
    """A released box that also covers another group's point: (3.21) over both. G2 widened
    to (26-31, *, 43307-43312) covers 106 (31, F, 43312): its matches are G3 (3 rows) and G2
    (2 rows), Pneumonia once in 5."""
    toy.execute("UPDATE h.gen SET age = '26-31', gender = '*', zip = '43307-43312' "
                "WHERE disease = 'Bronchitis'")  # fmt: skip
    _, rel, src = release(toy, "generalised", "disease")
    out = exposure(rel, src)
    # 101-103: 1/3 each; 104: G2 only -> 1; 105 (29): G2 only -> 1; 106 (31): G2 + G3 -> 1/5;
    # 107, 108: G3 only -> 1/3.
    assert out["exposure"] == pytest.approx((3 / 3 + 1 + 1 + 1 / 5 + 2 / 3) / 8)


def test_dm_by_hand(toy: psycopg.Connection) -> None:
    assert discernibility(toy, sql.Identifier("h", "gen"), QI) == 9 + 4 + 9
    assert discernibility(toy, sql.Identifier("h", "cbg_qit"), QI) == 4 * 4
    assert discernibility(toy, sql.Identifier("h", "ana_qit"), QI) == 8  # every point alone


AGE_LE_24 = Query((Predicate(0, "<=", (24.0,)),))  # actual 10 + 20 + 30 = 60
AGE_GE_28 = Query((Predicate(0, ">=", (28.0,)),))  # actual 50 + 60 + 70 + 80 = 260
FEMALE_ZIP = Query((Predicate(1, "in", ("F",)), Predicate(2, "!=", (43312.0,))))  # 101, 103: 40


@pytest.mark.parametrize(
    ("shape", "query", "bounds"),
    [
        # G1 lies inside age <= 24: its rows for sure, nothing else can.
        ("generalised", AGE_LE_24, (60, 60)),
        # G3 surely (31-35), G2 (26-29) may: 210 .. 210 + 40 + 50.
        ("generalised", AGE_GE_28, (210, 300)),
        # G1 (gender *) may, G3 (zip to 43312) may: nothing sure; upper 10+20+30 + 60+70+80.
        ("generalised", FEMALE_ZIP, (0, 270)),
        # Anatomy: 3 rows of group 1 (10, 20, 30, 40): 3 smallest .. 3 largest.
        ("anatomy", AGE_LE_24, (60, 90)),
        ("anatomy", AGE_GE_28, (260, 260)),
        # 101 and 103 in group 1: 10 + 20 .. 30 + 40.
        ("anatomy", FEMALE_ZIP, (30, 70)),
        # CBG: (16-24, F) sure in buckets 1 and 2, (22-26, M) may: bucket 1 {10, 20}: 10 .. 30,
        # bucket 2 {30, 40}: 30 .. 70.
        ("cbg", AGE_LE_24, (40, 100)),
        # (29-35, M) may (29 < 28 is false: 29-35 is inside >= 28: sure), (31-34, F) sure:
        # buckets 3 and 4 wholly: 50 + 60 + 70 + 80.
        ("cbg", AGE_GE_28, (260, 260)),
        # (16-24, F, 43306-43307) sure in buckets 1, 2; (31-34, F, 43312) never:
        # bucket 1 one of {10, 20}, bucket 2 one of {30, 40}: 40 .. 60.
        ("cbg", FEMALE_ZIP, (40, 60)),
    ],
)
def test_query_bounds_by_hand(
    toy: psycopg.Connection, shape: str, query: Query, bounds: tuple[int, int]
) -> None:
    attrs, rel, src = release(toy, shape, "salary")
    assert queries.Answers.of(rel, "salary").bounds(query, attrs) == bounds
    exact = queries.Answers.of(src, "salary").bounds(query, attrs)
    assert exact[0] == exact[1] == {AGE_LE_24: 60, AGE_GE_28: 260, FEMALE_ZIP: 40}[query]


def test_query_error_is_the_mean_relative_width(toy: psycopg.Connection) -> None:
    attrs, rel, src = release(toy, "cbg", "salary")
    w = queries.Workload([AGE_LE_24, AGE_GE_28, FEMALE_ZIP], [60.0, 260.0, 40.0], 0)
    out = queries.query_error(rel, attrs, w, "salary")
    assert out["query_error"] == pytest.approx((60 / 60 + 0 + 20 / 40) / 3)


def test_workload_is_seeded_and_never_zero(toy: psycopg.Connection) -> None:
    attrs, _, src = release(toy, "cbg", "salary")
    a = queries.workload(attrs, src, "salary", 30, seed=5)
    b = queries.workload(attrs, src, "salary", 30, seed=5)
    c = queries.workload(attrs, src, "salary", 30, seed=6)
    assert a.queries == b.queries and a.queries != c.queries
    assert (a.actual > 0).all() and a.redrawn > 0  # 3 predicates on 8 rows: zeros happen
    for q in a.queries:
        assert len({p.attr for p in q.predicates}) == 3  # every QI once (fewer than 4 QIs)


def test_evaluate_any_release(conn: psycopg.Connection, dsn: str, toy: psycopg.Connection) -> None:
    """`dbanon evaluate` on a CBG, an Anatomy and a Mondrian release of the same source:
    query error against the source, DM of the release, exposure as its run recorded it."""
    base = ["--source", "s.t", "--key", "id", "--qi", ",".join(QI), "--sensitive", "salary"]
    for name, args in [("c", ["--algorithm", "cbg", "--k", "2", "--l", "4"]),
                       ("a", ["--algorithm", "anatomy", "--l", "4", "--seed", "1"]),
                       ("m", ["--algorithm", "mondrian", "--k", "2"])]:  # fmt: skip
        code, out = cli_json(dsn, "publish", name, *base, *args)
        assert code == 0, out
        code, ev = cli_json(dsn, "evaluate", name, "--queries", "20", "--seed", "3")
        assert code == 0, ev
        assert ev["queries"] == 20 and ev["query_error"] >= 0
        assert ev["exposure"] is not None and 0 < ev["exposure"] <= 1
    code, ev = cli_json(dsn, "evaluate", "c", "--queries", "20")
    assert ev["dm"] == 16 and ev["exposure"] == pytest.approx(0.25) and ev["shape"] == "cbg"
    code, ev = cli_json(dsn, "evaluate", "a", "--queries", "20")
    assert ev["exposure"] == pytest.approx(0.25) and ev["dm"] == 8  # 2 groups of 4 values
    code, ev = cli_json(dsn, "evaluate", "nope")
    assert code == 2


def test_thesis_bounds_by_hand() -> None:
    """(4.15)-(4.19) on one bucket of three rows, worked by hand: ages [20, 40], [20, 40] and
    50 over the domain {20, 30, 40, 50}, salaries 10, 20, 30; query age >= 30. Pro_t is 2/3,
    2/3 and 1, so Num_b = 7/3: the bounds are the 2 smallest (10 + 20) and the 3 largest
    (60) salaries. The sure/maybe bounds are 1 sure row (10) and 3 possible ones (60)."""
    import numpy as np

    from dbanon.metrics.boxes import Attribute, Bucketed
    from dbanon.metrics.queries import Answers, Predicate, Query, share

    attrs = [Attribute("age", True, np.array([20.0, 30.0, 40.0, 50.0]))]
    b = Bucketed(
        lo=np.array([[20.0], [20.0], [50.0]]), hi=np.array([[40.0], [40.0], [50.0]]), cats=[],
        bucket=np.zeros(3, dtype=np.int64), values=np.array(["10", "20", "30"], dtype=object),
        offsets=np.array([0, 3]),
    )  # fmt: skip
    q = Query((Predicate(0, ">=", (30.0,)),))
    assert share(q.predicates[0], attrs, b).tolist() == [2 / 3, 2 / 3, 1.0]
    answers = Answers.of(b, "salary")
    assert answers.thesis_bounds(q, attrs) == (30.0, 60.0)
    assert answers.bounds(q, attrs) == (10.0, 60.0)
    ne = Query((Predicate(0, "!=", (20.0,)),))
    assert share(ne.predicates[0], attrs, b).tolist() == [2 / 3, 2 / 3, 1.0]
