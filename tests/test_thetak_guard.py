"""The intersection guard keeps (θ,k)'s promise over time (issue 31 item 3).

A (θ,k) class shows θ categories of the sensitive hierarchy, each with need_c distinct values.
A consumer who keeps every release intersects a persisting person's classes: her plausible
values are the values every one of them held. The guard must keep those spanning θ categories
with need_c values each (and k plausible rows), merging groups where that restores it and
refusing the run (exit 4) where nothing can. Before, it enforced only k: 2,000 rows under the
soak's churn left people one category after the first refresh.

The check is churn.Attacker's (imports nothing from dbanon) on the released relations only,
with need_c written out again from the model's definition (churn.theta_k_needs).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import numpy as np
import psycopg
import pytest
import verify
from churn import Attacker, fewest_categories, theta_k_needs
from helpers import cli, cli_json, make_table

from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.persist import History, Spread, persist_groups
from dbanon.api import Database
from dbanon.bench import soak as bench_soak
from dbanon.core.hierarchy import Hierarchy
from dbanon.db import catalog
from dbanon.lifecycle.publish import PublishResult
from dbanon.models.base import Spread as Promised
from dbanon.setlogic import composition

K, THETA = 5, 2
QI = ["age", "region", "income"]
CATEGORY = bench_soak.CATEGORY


class Guarded:
    """Checks each release of a churning (θ,k) release as it appears: its model by a GROUP
    BY of the released relation, and the consumer who kept every release."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.attacker = Attacker(bench_soak.DX, bench_soak.REGIONS)
        self.seen: list[tuple[int, int, int, int]] = []  # alive, rows, values, categories

    def __call__(self, method: str, step: int, result: PublishResult, source: str) -> None:
        people = self.conn.execute(f"SELECT * FROM {source}").fetchall()  # noqa: S608
        released = self.conn.execute(
            f"SELECT age, region, income, dx FROM {result.table}"  # noqa: S608
        ).fetchall()
        verify.verify(self.conn, result.table, QI, [
            {"name": "k-anonymity", "k": K},
            {"name": "theta-k-anonymity", "theta": THETA, "k": K, "categories": CATEGORY},
        ], sensitive="dx")  # fmt: skip
        alive, rows, values = self.attacker.observe(people, released)
        need = theta_k_needs([r[3] for r in released], CATEGORY, K, THETA)
        cats = fewest_categories(self.attacker, CATEGORY, need)
        self.seen.append((alive, rows, values, cats))
        assert rows >= K, (step, self.seen)
        assert cats >= THETA, (step, self.seen)


def soak(dsn: str, rows: int, refreshes: int, seed: int = 19) -> dict[str, Any]:
    check = Guarded(dsn)
    with Database(dsn) as db:
        data = bench_soak.soak(db, ["thetak"], rows=rows, refreshes=refreshes, k=K, seed=seed,
                               on_release=check)  # fmt: skip
    check.conn.close()
    runs = data["methods"]["thetak"]["runs"]
    assert not [r for r in runs if "error" in r], runs
    assert len(check.seen) == refreshes + 1
    assert check.seen[-1][0] > rows * 0.97**refreshes * 0.9  # people present in every release
    for r in runs[1:]:  # and dbanon's own measure agrees: nobody below
        c = r["composition"]
        assert c["rows_below_k"] == 0 and c["rows_below_categories"] == 0, c
        assert c["min_plausible_categories"] >= THETA, c
    return data


@pytest.mark.parametrize("server_dsn", ["embedded"], indirect=True)
def test_a_thetak_release_keeps_theta_categories_under_churn(dsn: str) -> None:
    soak(dsn, rows=2_000, refreshes=4)


@pytest.mark.slow
@pytest.mark.parametrize("server_dsn", ["embedded"], indirect=True)
def test_fifteen_refreshes_keep_theta_categories(dsn: str) -> None:
    soak(dsn, rows=20_000, refreshes=15)


# --- a refresh nothing can repair is refused ------------------------------------------------


def _people(rng: random.Random, n: int) -> list[tuple]:
    return [(i, rng.randint(18, 90), rng.choice(bench_soak.REGIONS),
             rng.randint(10, 200) * 500, rng.choice(bench_soak.DX)) for i in range(n)]  # fmt: skip


def _released(conn: psycopg.Connection) -> list[tuple]:
    return conn.execute("SELECT age, region, income, dx FROM released.ward").fetchall()


def test_a_refresh_that_would_leave_one_category_is_refused(
    conn: psycopg.Connection, dsn: str, tmp_path: Any
) -> None:
    """Every metabolic diagnosis leaves the table: a person whose classes all showed two
    respiratory and two metabolic values and no third category keeps one category, whatever
    the grouping. Refused (exit 4, one JSON line naming the release and the shortfall; one
    line on stderr without --json), the previous release kept; forced with
    --allow-composition, the attacker finds her."""
    path = tmp_path / "dx.csv"
    path.write_text("".join(f"{v};{c};*\n" for v, c in CATEGORY.items()))
    assert cli(dsn, "hierarchy", "import", "dx", str(path)).exit_code == 0
    cols = [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("income", "int"),
            ("dx", "text")]  # fmt: skip
    make_table(conn, "h", "ward", cols, _people(random.Random(7), 400))
    code, out = cli_json(dsn, "publish", "ward", "--source", "h.ward", "--key", "id",
                         "--qi", ",".join(QI), "--sensitive", "dx", "--k", str(K),
                         "--theta", str(THETA), "--sensitive-hierarchy", "dx=dx",
                         "--algorithm", "thetak")  # fmt: skip
    assert code == 0, out
    attacker = Attacker(bench_soak.DX, bench_soak.REGIONS)
    people = conn.execute("SELECT * FROM h.ward").fetchall()
    attacker.observe(people, _released(conn))
    before = sorted(_released(conn))
    conn.execute("DELETE FROM h.ward WHERE dx IN ('diabetes', 'gout')")
    result = cli(dsn, "--json", "refresh", "ward")
    assert result.exit_code == 4, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["exit"] == 4, result.stdout
    error = json.loads(lines[0])["error"]
    assert "release 'ward'" in error and "fewer than θ=2 categories" in error, error
    assert re.search(r"categories with their values \(as few as [01]\)", error), error
    assert "--allow-composition" in error, error
    assert "plausible rows" not in error, error  # the guard still kept their k rows
    result = cli(dsn, "refresh", "ward")
    assert result.exit_code == 4 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert sorted(_released(conn)) == before
    status = conn.execute("SELECT status FROM dbanon.run ORDER BY id DESC LIMIT 1").fetchone()
    assert status[0] == "refused"
    code, out = cli_json(dsn, "refresh", "ward", "--allow-composition")
    assert code == 0, out
    released = _released(conn)
    attacker.observe(conn.execute("SELECT * FROM h.ward").fetchall(), released)
    need = theta_k_needs([r[3] for r in released], CATEGORY, K, THETA)
    assert fewest_categories(attacker, CATEGORY, need) < THETA


# --- the parts, hand-worked -----------------------------------------------------------------


def _arrays(ages: list[float]) -> QIArrays:
    flat = Hierarchy.flat("r", ["x"])
    return QIArrays.build(
        [np.asarray(ages, dtype=float) / 100], [(np.zeros(len(ages), dtype=np.int32), flat)]
    )


def test_a_group_left_one_category_merges_with_the_group_that_restores_it() -> None:
    """Values a, b (category X) and c, d (Y), two of each needed, θ = 2. Group 0's persisting
    rows had {a, b, c, d} in every class; it lost its d. Group 1 is nearer and brings a, b, c
    again (k rows and three values: enough for k and l); group 2 brings d. Without the spread
    the nearest group would do; with it only group 2 restores Y."""
    qi = _arrays([10, 11, 12, 13, 14, 15, 16, 17, 18, 40, 41, 42, 43, 44])
    previous = np.array([0] * 4 + [1] * 5 + [2] * 5)
    tag = np.array([0, 1, 2, 2, 0, 1, 2, 0, 1, 3, 3, 0, 1, 2])  # a=0, b=1, c=2, d=3
    history = np.array([0] * 4 + [-1] * 10)
    values = [np.array([0, 1, 2, 3])]
    spread = Spread(np.array([0, 0, 1, 1]), np.array([2, 2]), THETA)

    def run(guard: History) -> np.ndarray:
        return persist_groups(qi, previous, lambda rows: np.zeros(len(rows), dtype=np.int32),
                              lambda rows: len(rows) >= 5, 5, guard)  # fmt: skip

    gid = run(History(tag, history, values, k=5, needed=1))
    assert gid[0] == gid[4] != gid[9]
    gid = run(History(tag, history, values, k=5, needed=1, spread=spread))
    assert gid[0] == gid[9] != gid[4]


def test_rows_whose_values_left_the_table_are_beyond_repair() -> None:
    """No row holds d any more: group 0's persisting rows cannot fill Y again, so the guard
    leaves their spread to the composition check (which refuses the run) but still keeps
    their k plausible rows: a group of theirs holding a, b and c keeps them, one without
    enough of those values does not."""
    tag = np.array([0, 1, 2, 2, 0, 1, 2, 0, 1, 2, 4, 4, 4, 4, 4])  # e=4: another category
    history = np.array([0] * 4 + [-1] * 11)
    spread = Spread(np.array([0, 0, 1, 1, 2]), np.array([2, 2, 1]), THETA)
    guard = History(tag, history, [np.array([0, 1, 2, 3])], k=5, needed=1, spread=spread)
    assert guard.hopeless_rows().tolist() == [True] * 4 + [False] * 11
    assert History(tag, history, guard.values, k=5, needed=1).hopeless_rows().sum() == 0
    fixable = guard.fixable()
    assert fixable.waived == {0} and (fixable.history == history).all()
    assert fixable.holds(np.arange(5)) and not fixable.holds(np.r_[0:4, 10:15])


def test_the_measure_counts_the_categories_a_class_still_fills(conn: psycopg.Connection) -> None:
    """Six people with values a, b, c, a, b, d; a, b in category X (need 2), c, d in Y
    (need 1), θ = 2. Release 1: one class. Release 2: {1,2,3} shows {a,b,c}, {4,5,6}
    {a,b,d}: everyone keeps X and Y. Release 3: {1,2,4} shows {a,b}, {3,5,6} {b,c,d}: people
    1, 2, 4 keep {a,b} (X only), 3 keeps {b,c} and 5, 6 keep {b,d} (one X value: Y only)."""
    make_table(conn, "h", "t", [("id", "int"), ("dx", "text")],
               list(zip(range(1, 7), "abcabd", strict=True)))  # fmt: skip
    rid = 999
    source = catalog.relation(conn, "h.t")
    cols = catalog.columns(conn, source)
    spread = Promised(THETA, {"a": "X", "b": "X", "c": "Y", "d": "Y"}, {"X": 2, "Y": 1},
                      "θ=2 categories")  # fmt: skip

    def run(classes: list[list[int]]) -> composition.Composition | None:
        conn.execute("DROP TABLE IF EXISTS pg_temp.st, pg_temp.dbanon_new_rows")
        conn.execute("CREATE TEMP TABLE st (key text, gid int4)")
        for g, people in enumerate(classes):
            for key in people:
                conn.execute("INSERT INTO st VALUES (%s, %s)", [str(key), g])
        rows = composition.new_rows(conn, source, cols["id"], cols["dx"],
                                    psycopg.sql.Identifier("st"), [cols["dx"]])  # fmt: skip
        found = composition.measure(conn, rid, rows, 3, 1, spread)
        composition.store(conn, rid, rows)
        return found

    with conn.transaction():
        assert run([[1, 2, 3, 4, 5, 6]]) is None
        second = run([[1, 2, 3], [4, 5, 6]])
        assert second is not None
        assert (second.min_plausible_categories, second.rows_below_categories) == (2, 0)
        third = run([[1, 2, 4], [3, 5, 6]])
        assert third is not None
        assert (third.min_plausible_categories, third.rows_below_categories) == (1, 6)
        assert third.as_dict()["rows_below_categories"] == 6
        assert "rows_below_categories" not in composition.measure(
            conn, rid, composition.Rows(psycopg.sql.Identifier("dbanon_new_rows")), 3, 1
        ).as_dict()
