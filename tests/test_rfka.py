"""RFKA and Greedy_Hamdist: k-anonymous projections released as live views.

Guarantees are proven by the independent verifier (tests/verify.py: one GROUP BY of the
released relation, counted in Python) on the view as published and after inserts that break k;
the greedy search by a brute-force run of the same rule in pure Python; "one query per step, no
table copy" by the OID counter (every relation, temp or not, takes OIDs).
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter

import numpy as np
import psycopg
import pytest
import verify
from helpers import cli, cli_json, make_table, snapshot, stored_kind
from psycopg import sql

from dbanon.algorithms.featuresel import (
    Feature,
    codes_query,
    forward_search,
    hamdist_counts,
    hamdist_from_counts,
    hamdist_scores,
    indicator,
    oob_permutation_importance,
)
from dbanon.db.stream import fetch_arrays

K = 5
QI = ["age", "region", "sex", "job"]
ROWS = 240


@pytest.fixture
def people(conn: psycopg.Connection) -> list[tuple]:
    """A label driven by region (and a little by sex); age is unique enough never to pass k."""
    rng = random.Random(5)
    rows = []
    for i in range(1, ROWS + 1):
        region, sex = rng.choice("NSEW"), rng.choice("FM")
        p = (0.85 if region in "NE" else 0.15) + (0.1 if sex == "F" else -0.1)
        buy = "yes" if rng.random() < p else "no"
        rows.append((i, rng.randint(18, 90), region, sex, rng.choice(["a", "b", "c"]), buy,
                     f"note {i}"))  # fmt: skip
    make_table(
        conn, "s", "people",
        [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("sex", "text"),
         ("job", "text"), ("buy", "text"), ("note", "text")],
        rows,
    )  # fmt: skip
    return rows


def publish(dsn: str, method: str, *extra: str) -> tuple[int, dict]:
    return cli_json(
        dsn, "publish", "p", "--source", "s.people", "--key", "id", "--qi", ",".join(QI),
        "--sensitive", "buy", "--k", str(K), "--algorithm", method,
        *(("--trees", "60", "--seed", "1") if method == "rfka" else ()), *extra,
    )  # fmt: skip


def released_qi(conn: psycopg.Connection, extra: set[str]) -> list[str]:
    cols = conn.execute(
        """SELECT attname FROM pg_attribute WHERE attrelid = 'released.p'::regclass
           AND attnum > 0 AND NOT attisdropped ORDER BY attnum"""
    ).fetchall()
    return [c for (c,) in cols if c not in extra]


def check_k(conn: psycopg.Connection, qi: list[str]) -> verify.Classes:
    return verify.verify(conn, "released.p", qi, [{"name": "k-anonymity", "k": K}], "buy")


@pytest.mark.parametrize("method", ["rfka", "hamdist"])
def test_a_live_projection_stays_k_anonymous(
    conn: psycopg.Connection, dsn: str, people: list[tuple], method: str
) -> None:
    # note is unique per row: kept only because the test says it means it (issue 24)
    code, out = publish(dsn, method, "--keep", "note", "--allow-identifying", "note")
    assert code == 0, out
    assert stored_kind(conn, "released.p") == "v"  # a live view behind the release's view
    qi = released_qi(conn, {"buy", "note"})
    assert qi and "id" not in qi
    cls = check_k(conn, qi)
    assert sum(cls.sizes) == ROWS  # the search chose a subset: nothing suppressed at publish
    code, rep = cli_json(dsn, "report", "p")
    m = rep["method_metrics"]
    assert sorted(m["chosen_features"]) == sorted(qi), (m, qi)
    assert len(m["chosen"]) + len(m["dropped"]) == m["features"]
    if method == "rfka":
        assert "region" in qi and "age" not in qi  # the label's column kept, a unique one not
        assert any(d.startswith("age (importance") and "classes below k=5" in d
                   for d in m["dropped"]), m["dropped"]  # fmt: skip
    # Inserts that break k: the view hides their class at once, and shows the rest.
    conn.execute(
        "INSERT INTO s.people VALUES (1001, 50, 'Z', 'F', 'a', 'yes', 'x'), "
        "(1002, 51, 'Z', 'F', 'a', 'no', 'y')"
    )
    after = check_k(conn, qi)
    shown = conn.execute("SELECT count(*) FROM released.p WHERE note IN ('x', 'y')").fetchone()[0]
    if any(c == "region" or c.startswith("region=") for c in qi):  # 'Z' is a class of 2 < k
        assert shown == 0 and sum(after.sizes) == ROWS
    else:
        assert sum(after.sizes) == ROWS + shown
    # refresh keeps the chosen features (the release's columns stay) and k still holds
    code, out = cli_json(dsn, "refresh", "p")
    assert code == 0, out
    assert released_qi(conn, {"buy", "note"}) == qi
    check_k(conn, qi)
    code, rep = cli_json(dsn, "report", "p")
    assert rep["method_metrics"]["subset_changed"] is False
    # --refresh-policy search re-runs the selection on the source as it is now
    code, out = publish(dsn, method, "--keep", "note", "--allow-identifying", "note",
                        "--refresh-policy", "search", "--replace")  # fmt: skip
    assert code == 0, out
    qi2 = released_qi(conn, {"buy", "note"})
    check_k(conn, qi2)
    code, rep = cli_json(dsn, "report", "p")
    assert rep["method_metrics"]["subset_changed"] == (sorted(qi2) != sorted(qi))
    if method == "rfka":  # region now has a class of 2 ('Z'): dropped, the subset changed
        assert "region" not in qi2 and rep["method_metrics"]["subset_changed"] is True


def test_rfka_as_table_and_the_report(conn: psycopg.Connection, dsn: str, people: list) -> None:
    code, out = publish(dsn, "rfka", "--as", "table", "--features", "onehot")
    assert code == 0, out
    assert stored_kind(conn, "released.p") == "r"  # a table behind the release's view
    qi = released_qi(conn, {"buy"})
    assert all("=" in c for c in qi), qi
    check_k(conn, qi)
    human = cli(dsn, "report", "p")
    assert human.exit_code == 0 and "chosen" in human.stdout and "dropped" in human.stdout


# --- the search ---------------------------------------------------------------------------------


def brute_force(rows: list[tuple], ranked: list[int], k: int) -> list[int]:
    """The same rule in pure Python: keep a column if the projection stays k-anonymous."""
    chosen: list[int] = []
    for j in ranked:
        sizes = Counter(tuple(r[c] for c in [*chosen, j]) for r in rows)
        if min(sizes.values()) >= k:
            chosen.append(j)
    return chosen


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_greedy_choice_equals_brute_force(conn: psycopg.Connection, seed: int) -> None:
    rng = random.Random(seed)
    width = [2, 3, 2, 5, 4, 2]
    rows = [tuple(rng.randrange(w) for w in width) for _ in range(60)]
    cols = [f"c{i}" for i in range(len(width))]
    make_table(conn, "s", "small", [(c, "int") for c in cols], rows)
    ranked = list(range(len(width)))
    rng.shuffle(ranked)
    for k in (2, 3, 4):
        features = [Feature(cols[j], sql.Identifier(cols[j]), cols[j]) for j in ranked]
        found = forward_search(conn, sql.Identifier("s", "small"), features, k)
        expected = brute_force(rows, ranked, k)
        assert [f.name for f in found.chosen] == [cols[j] for j in expected]
        # and it is maximal: adding any column it left out breaks k (every subset tried)
        for j in set(range(len(width))) - set(expected):
            sizes = Counter(tuple(r[c] for c in [*expected, j]) for r in rows)
            assert min(sizes.values()) < k
        for f, below, smallest in found.dropped:
            j = cols.index(f.name)
            sizes = Counter(
                tuple(r[c] for c in [*expected[: _before(expected, ranked, j)], j]) for r in rows
            )
            assert below == sum(1 for n in sizes.values() if n < k)
            assert smallest == min(sizes.values())


@pytest.mark.parametrize("mixed", [True, False])
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_batched_tests_of_binary_features_equal_one_query_each(
    conn: psycopg.Connection, seed: int, mixed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One-hot features are judged many to a query (`split_small`) and the kept ones grouped by
    one number per column (`grouping`); what the search keeps and drops, with each drop's
    classes below k and smallest class, is what one query per feature grouped by every kept
    boolean finds: indicators that are NULL on NULL values and indicators of NULL, a plain
    feature among them, batches cut short by a kept feature and by the batch limit, and an
    empty table. Not `mixed` (only indicators), the batches are judged in compiled code over
    the streamed codes (`_Compiled`)."""
    from dataclasses import replace

    from dbanon.algorithms import featuresel

    monkeypatch.setattr(featuresel, "BATCH", 5)
    monkeypatch.setattr(featuresel, "FIRST_BATCH", 2)
    rng = random.Random(seed)
    width = [2, 3, 4, 6]
    n = rng.choice([0, 50, 150, 400])
    rows = [
        tuple(None if rng.random() < 0.08 else rng.randrange(w) for w in width)
        for _ in range(n)
    ]
    cols = [f"c{i}" for i in range(len(width))]
    make_table(conn, "s", "bin", [(c, "int") for c in cols], rows)
    # c0..c2 as bins are (`c = v`, NULL on NULL), c3 as categories are (IS NOT DISTINCT FROM,
    # NULL a value of its own)
    features = [
        indicator(f"{c}={v}", c, sql.Identifier(c), v, nullable=True)
        for c, w in zip(cols[:3], width, strict=False)
        for v in range(w)
    ] + [
        indicator(f"c3={v}", "c3", sql.SQL("c3::text"), v, nullable=False)
        for v in [*map(str, range(width[3])), None]
    ]
    rng.shuffle(features)
    if mixed:
        features.insert(rng.randrange(len(features)), Feature("c2", sql.Identifier("c2"), "c2"))
    source = sql.Identifier("s", "bin")
    for k in (2, 3, 6):
        query = codes_query(source, features)
        codes = None if query is None else fetch_arrays(conn, query)
        assert (codes is None) == mixed
        batched = forward_search(conn, source, features, k, codes)
        # the reference: one query per feature, grouped by each kept indicator's own boolean
        plain = [replace(f, binary=False, key=None) for f in features]
        single = forward_search(conn, source, plain, k)
        assert [f.name for f in batched.chosen] == [f.name for f in single.chosen], k
        assert [(f.name, b, s) for f, b, s in batched.dropped] == [
            (f.name, b, s) for f, b, s in single.dropped
        ], k
        assert single.queries == len(features)
        assert batched.queries <= single.queries


@pytest.mark.parametrize("n", [0, 40, 300])
def test_onehot_candidates_count_each_smallest_class_as_one_query_per_feature(
    conn: psycopg.Connection, n: int
) -> None:
    """The one-hot candidates found by one GROUPING SETS scan, with each one's smallest class
    alone taken from its key's counts (`indicator_smallest`), are what one SELECT DISTINCT per
    column (in its order) and one GROUP BY per feature find: bins of a numeric QI with NULLs,
    categories with NULL a value of its own, a constant numeric QI, an empty table."""
    from types import SimpleNamespace

    from dbanon.algorithms.featuresel import smallest_class
    from dbanon.db.catalog import CATEGORICAL, NUMERIC, Column
    from dbanon.methods.projection import onehot_candidates

    rng = random.Random(n)
    rows = [(None if rng.random() < 0.1 else rng.randrange(40),
             None if rng.random() < 0.1 else rng.choice(["x", "y", "B", "a"]), 7)
            for _ in range(n)]  # fmt: skip
    make_table(conn, "s", "oc", [("a", "int"), ("b", "text"), ("c", "int")], rows)
    qi = [Column("a", "integer", NUMERIC, False), Column("b", "text", CATEGORICAL, False),
          Column("c", "integer", NUMERIC, False)]  # fmt: skip
    r = SimpleNamespace(qi=qi if n else qi[1:2], is_categorical=lambda c: c.kind == CATEGORICAL)
    source = sql.Identifier("s", "oc")
    found = onehot_candidates(conn, source, r, 4)  # type: ignore[arg-type]
    features, smallest = found.features, found.smallest
    assert smallest == smallest_class(conn, source, features)
    values = [
        v for (v,) in conn.execute(sql.SQL("SELECT DISTINCT b FROM {} ORDER BY 1").format(source))
    ]
    assert [f.value for f in features if f.column == "b"] == values
    if n:
        assert {f.value for f in features if f.column == "a"} <= {1, 2, 3, 4}
        assert [f.name for f in features if f.column == "c"] == ["c=7"]


def test_a_tables_sample_is_drawn_as_a_views(conn: psycopg.Connection) -> None:
    """rfka's sample of a table is drawn over its rows' ctids, then read by ctid: the same
    rows in the same order as `ORDER BY random() LIMIT n` of every row (a view over the same
    table, which has no ctid, draws so) under the same seed; a sample of all rows is all."""
    from types import SimpleNamespace

    from dbanon.db.catalog import CATEGORICAL, NUMERIC, Column, Relation
    from dbanon.methods.projection import design_matrix, plain_features

    rng = random.Random(3)
    rows = [(rng.randrange(90), rng.choice(["x", "y", "z"]), rng.choice("abcd"))
            for _ in range(3000)]  # fmt: skip
    make_table(conn, "s", "drawn", [("age", "int"), ("c", "text"), ("label", "text")], rows)
    conn.execute("DELETE FROM s.drawn WHERE age % 7 = 0")  # ctids with gaps
    conn.execute("CREATE VIEW s.drawn_v AS SELECT * FROM s.drawn")
    qi = [Column("age", "integer", NUMERIC, False), Column("c", "text", CATEGORICAL, False)]
    label = [Column("label", "text", CATEGORICAL, False)]
    got = {}
    for kind, name in (("r", "drawn"), ("v", "drawn_v")):
        r = SimpleNamespace(qi=qi, sensitive=label, rows=len(rows),
                            source=Relation("s", name, kind),
                            is_categorical=lambda c: c.kind == CATEGORICAL)  # fmt: skip
        got[kind] = [design_matrix(conn, r, plain_features(r), n, 11)  # type: ignore[arg-type]
                     for n in (500, 2000)]  # fmt: skip
    for (x, y), (xv, yv) in zip(got["r"], got["v"], strict=True):
        assert len(x) in (500, 2000) and np.array_equal(x, xv) and np.array_equal(y, yv)
    first = [a for (a,) in conn.execute("SELECT age FROM s.drawn LIMIT 500")]
    assert got["r"][0][0][:, 0].tolist() != first  # a draw, not the table's first rows


@pytest.mark.parametrize("n", [0, 40, 300])
def test_onehot_candidates_counted_by_label_are_hamdist_counts(
    conn: psycopg.Connection, n: int
) -> None:
    """hamdist's candidates grouped by the label too: the same features and smallest classes,
    and per label class (NULL a class of its own, first) the rows holding each feature and its
    rows, as `hamdist_counts` counts them in a scan of its own."""
    from types import SimpleNamespace

    from dbanon.db.catalog import CATEGORICAL, NUMERIC, Column, Relation
    from dbanon.methods.projection import onehot_candidates

    rng = random.Random(n + 1)
    rows = [(None if rng.random() < 0.1 else rng.randrange(40),
             None if rng.random() < 0.1 else rng.choice(["x", "y", "B", "a"]),
             None if rng.random() < 0.2 else rng.choice(["no", "yes", "maybe"]))
            for _ in range(n)]  # fmt: skip
    make_table(conn, "s", "ocl", [("a", "int"), ("b", "text"), ("y", "text")], rows)
    qi = [Column("a", "integer", NUMERIC, False), Column("b", "text", CATEGORICAL, False)]
    r = SimpleNamespace(qi=qi if n else qi[1:], is_categorical=lambda c: c.kind == CATEGORICAL,
                        source=Relation("s", "ocl"), rows=n,
                        sensitive=[Column("y", "text", CATEGORICAL, False)])  # fmt: skip
    source = sql.Identifier("s", "ocl")
    plain = onehot_candidates(conn, source, r, 4)  # type: ignore[arg-type]
    for stream in (True, False):  # rows streamed and counted, or one GROUPING SETS query
        found = onehot_candidates(conn, source, r, 4, sql.Identifier("y"),  # type: ignore[arg-type]
                                  stream=stream)  # fmt: skip
        assert [f.name for f in found.features] == [f.name for f in plain.features]
        assert found.smallest == plain.smallest and plain.per_class is None
        ones, sizes = hamdist_counts(conn, source, found.features, sql.Identifier("y"))
        assert found.per_class is not None
        assert np.array_equal(found.per_class[0], ones)
        assert np.array_equal(found.per_class[1], sizes)
        assert sizes.sum() == n and (not n or len(sizes) == 4)
        assert (found.rows is not None) == stream


def _before(chosen: list[int], ranked: list[int], j: int) -> int:
    """How many chosen columns were tried before column j."""
    return sum(1 for c in chosen if ranked.index(c) < ranked.index(j))


def test_the_search_makes_no_table_per_step(conn: psycopg.Connection) -> None:
    """Every relation created (temp or not, dropped or not) takes new OIDs: a search of 20
    steps that copied the table per step would take 20 or more."""
    rng = random.Random(7)
    cols = [f"c{i}" for i in range(20)]
    make_table(conn, "s", "wide", [(c, "int") for c in cols],
               [tuple(rng.randrange(3) for _ in cols) for _ in range(500)])  # fmt: skip

    def next_oid() -> int:
        conn.execute("CREATE TEMP SEQUENCE dbanon_probe")
        oid = conn.execute("SELECT 'dbanon_probe'::regclass::oid::int").fetchone()[0]
        conn.execute("DROP SEQUENCE dbanon_probe")
        return oid

    features = [Feature(c, sql.Identifier(c), c) for c in cols]
    before = next_oid()
    found = forward_search(conn, sql.Identifier("s", "wide"), features, 3)
    after = next_oid()
    assert found.queries == 20
    assert after - before < 10, (before, after)  # the probe itself takes a few


def test_the_rankings() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    x = np.column_stack([y ^ (rng.random(400) < 0.05), rng.integers(0, 2, 400), 1 - y])
    ham = hamdist_scores(x, y)
    assert ham[0] > 0.9 and ham[2] == 1.0 and ham[1] < 0.6
    imp = oob_permutation_importance(x[:, :2].astype(float), y, trees=30, seed=0)
    assert imp[0] > 0.3 > imp[1]


def test_hamdist_counted_in_the_database_equals_the_arrays(
    conn: psycopg.Connection, people: list[tuple]
) -> None:
    """hamdist's ranking counts each label's rows holding each feature in one GROUP BY; the
    scores equal those of the one-hot matrix built here in Python from the same rows, NULL
    labels a class of their own, over more features than one query takes."""
    conn.execute("UPDATE s.people SET buy = NULL WHERE id % 7 = 0")
    rows = conn.execute("SELECT age, region, job, buy FROM s.people ORDER BY id").fetchall()
    tests = [(f"age>={a}", sql.SQL("(age >= {})").format(a), lambda r, a=a: r[0] >= a)
             for a in range(18, 91)]  # fmt: skip
    tests += [(f"{c}={v}", sql.SQL("({} = {})").format(sql.Identifier(c), v),
               lambda r, i=i, v=v: r[i] == v)
              for i, c in ((1, "region"), (2, "job")) for v in "NSEWabc"]  # fmt: skip
    features = [Feature(name, expr, "x") for name, expr, _ in tests] * 15  # > 1,000 features
    ones, sizes = hamdist_counts(conn, sql.Identifier("s", "people"), features,
                                 sql.Identifier("buy"))  # fmt: skip
    assert len(sizes) == 3 and sizes.sum() == len(rows) and ones.shape == (3, len(features))
    b = np.array([[test(r) for _, _, test in tests] for r in rows], dtype=float)
    y = np.unique(np.array([r[3] or "" for r in rows]), return_inverse=True)[1]
    expected = np.tile(hamdist_scores(b, y), 15)
    assert np.allclose(hamdist_from_counts(ones, sizes), expected)


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        ("UPDATE s.people SET buy = 'yes'", (), "has one value ('yes')"),
        ("UPDATE s.people SET buy = NULL", (), "has one value (None)"),
        # one row labelled apart: two values, so the failure is the later check's
        ("UPDATE s.people SET region = id::text, sex = id::text, job = id::text, buy = CASE "
         "WHEN id = (SELECT max(id) FROM s.people) THEN 'no' ELSE 'yes' END",
         ("--qi", "region,sex,job"), "not even one column: the least bad"),
        (None, ("--k", "999"), "larger than the"),
        ("UPDATE s.people SET region = id::text, sex = id::text, job = id::text",
         ("--qi", "region,sex,job"), "not even one column: the least bad"),
        (None, ("--sensitive", "buy,note"), "exactly one --sensitive"),
        (None, ("--keep", "id"), "row key"),
    ],
    ids=["one-label", "null-label", "one-row-apart", "k-above-rows", "no-column", "two-labels",
         "keep-key"],
)  # fmt: skip
@pytest.mark.parametrize("method", ["rfka", "hamdist"])
def test_bad_input_is_one_line_and_writes_nothing(
    conn: psycopg.Connection, dsn: str, people: list, method: str, setup: str | None,
    args: tuple[str, ...], message: str,
) -> None:  # fmt: skip
    if setup:
        conn.execute(setup)
    before = snapshot(conn)
    base = ["publish", "p", "--source", "s.people", "--key", "id", "--algorithm", method]
    flags = {"--qi": ",".join(QI), "--k": str(K), "--sensitive": "buy"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        flags[flag] = value
    result = cli(dsn, *base, *itertools.chain.from_iterable(flags.items()))
    assert result.exit_code == 2, result.stdout
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    after = snapshot(conn)
    runs = "dbanon.run"
    assert {k: v for k, v in after["relations"].items() if k != runs} == {
        k: v for k, v in before["relations"].items() if k != runs
    }
    if "least bad" in message:
        assert "has a smallest class of 1 rows" in result.stderr, result.stderr



def test_a_forest_of_the_same_rows_and_seed_is_fitted_once() -> None:
    """The experiment publishes the same rows at every k: the second ranking reuses the first
    forest's importances (equal to a fresh fit's, as the forest is seeded) and its fit time."""
    from dbanon.algorithms.featuresel import oob_permutation_importance
    from dbanon.methods.rfka import _importance

    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, size=(120, 4)).astype(np.float64)
    y = (x[:, 0] + rng.integers(0, 2, 120) > 1).astype(np.int64)
    first, seconds, reused = _importance(x, y, 15, 7)
    again, seconds_again, reused_again = _importance(x, y, 15, 7)
    assert not reused and reused_again and seconds_again == seconds
    assert np.array_equal(first, again)
    assert np.array_equal(first, oob_permutation_importance(x, y, 15, 7))
    other, _, reused_other = _importance(x, y, 15, 8)  # another seed: another forest
    assert not reused_other
    y2 = y.copy()
    y2[0] = 1 - y2[0]
    assert not _importance(x, y2, 15, 7)[2]  # other rows: fitted afresh


# A fresh process publishes, then names every kernel of dbanon's modules compiled or loaded.
_PROBE = """
import json, sys
from click.testing import CliRunner
from numba.core.dispatcher import Dispatcher
from dbanon.cli import main
result = CliRunner().invoke(main, sys.argv[1:], catch_exceptions=False)
assert result.exit_code == 0, result.output
print(json.dumps(sorted(
    f"{m.__name__}.{n}" for m in list(sys.modules.values())
    if getattr(m, "__name__", "").startswith("dbanon")
    for n, v in vars(m).items() if isinstance(v, Dispatcher) and v.overloads
)))
"""


@pytest.mark.parametrize("features", ["plain", "onehot"])
def test_numba_is_set_up_only_for_the_features_whose_build_calls_kernels(
    dsn: str, people: list, features: str
) -> None:
    """rfka on plain features calls no compiled kernel, so its publish does not set numba's
    target up (42 MB of resident set at 1M rows); the one-hot candidates' codes do."""
    import subprocess
    import sys

    args = ["--dsn", dsn, "--json", "publish", "p", "--source", "s.people", "--key", "id",
            "--qi", ",".join(QI), "--sensitive", "buy", "--k", str(K), "--algorithm", "rfka",
            "--trees", "20", "--seed", "1", "--features", features]  # fmt: skip
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True,
                          text=True, check=True)  # fmt: skip
    compiled = json.loads(done.stdout.strip().splitlines()[-1])
    if features == "plain":
        assert compiled == []
    else:
        assert "dbanon.algorithms.warmup._one" in compiled and len(compiled) > 1, compiled
