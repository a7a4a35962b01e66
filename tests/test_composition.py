"""Intersecting releases of one source keeps the promise under the sealed and persist policies.

The cross-release check here is the attacker's own, on the released relations only: for a person
whose QI values it knows, their candidate classes in each release are the classes whose released
values cover theirs; their plausible sensitive values are those every release's candidates hold,
and their plausible rows in the newest release are its candidate rows holding such a value.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import psycopg
import pytest
from helpers import cli_json, make_table

from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.persist import persist_groups
from dbanon.core.hierarchy import Hierarchy

K, L = 5, 2
DX = ["flu", "asthma", "diabetes", "cancer", "gout", "angina", "ulcer"]
REGIONS = ["N", "S", "E", "W"]


def person(rng: random.Random, i: int) -> tuple:
    return (i, rng.randint(18, 90), rng.choice(REGIONS), rng.choice(DX))


def covers(released: str, value: object) -> bool:
    if released == "*":
        return True
    if released.startswith("{") and released.endswith("}"):  # a group's set of values
        return str(value) in {v.strip('"') for v in released[1:-1].split(",")}
    if isinstance(value, int):
        low, _, high = released.strip("[]").partition(",")  # `[30,39]` or `30`
        return int(low) <= value <= int(high or low)
    return released == value


def release_rows(conn: psycopg.Connection) -> list[tuple]:
    return conn.execute("SELECT age, region, dx FROM released.ward").fetchall()


def attacker_view(releases: list[list[tuple]], people: dict[int, tuple]) -> tuple[int, int]:
    """The fewest plausible rows and values over every person present in every release."""
    fewest_rows = fewest_values = 10**9
    for age, region, _dx in people.values():
        values = None
        for rows in releases:
            cands = [r for r in rows if covers(r[0], age) and covers(r[1], region)]
            held = {r[2] for r in cands}
            values = held if values is None else values & held
        newest = [r for r in releases[-1] if covers(r[0], age) and covers(r[1], region)]
        fewest_rows = min(fewest_rows, sum(1 for r in newest if r[2] in values))
        fewest_values = min(fewest_values, len(values))
    return fewest_rows, fewest_values


def _released(conn: psycopg.Connection, name: str) -> set[int]:
    """The people a release shows (sealed withholds some): from its private map, to choose
    the attacker's targets among people present in every release."""
    rid = conn.execute("SELECT id FROM dbanon.release WHERE name = %s", [name]).fetchone()[0]
    return {int(k) for (k,) in conn.execute(
        f"SELECT key FROM dbanon.group_map_{rid} WHERE gid >= 0"  # noqa: S608 - an int
    )}  # fmt: skip


@pytest.mark.parametrize("policy", ["sealed", "persist"])
def test_three_refreshes_keep_k_and_l_across_all_releases(
    conn: psycopg.Connection, dsn: str, policy: str
) -> None:
    rng = random.Random(3)
    rows = [person(rng, i) for i in range(1, 601)]
    cols = [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("dx", "text")]
    make_table(conn, "h", "ward", cols, rows)
    code, out = cli_json(dsn, "publish", "ward", "--source", "h.ward", "--key", "id",
                         "--qi", "age,region", "--sensitive", "dx", "--k", str(K),
                         "--l", str(L), "--algorithm", "mondrian",
                         "--refresh-policy", policy)  # fmt: skip
    assert code == 0, out
    releases = [release_rows(conn)]
    present = [_released(conn, "ward")]
    next_id = 601
    for _ in range(3):
        ids = [r[0] for r in conn.execute("SELECT id FROM h.ward").fetchall()]
        gone = rng.sample(ids, len(ids) * 5 // 100)
        conn.execute("DELETE FROM h.ward WHERE id = ANY(%s)", [gone])
        for _ in range(len(ids) // 10):
            conn.execute("INSERT INTO h.ward VALUES (%s, %s, %s, %s)", person(rng, next_id))
            next_id += 1
        code, out = cli_json(dsn, "refresh", "ward")
        assert code == 0, out
        releases.append(release_rows(conn))
        present.append(_released(conn, "ward"))
    persisting = set.intersection(*present)
    people = {
        i: r for i, *r in conn.execute("SELECT id, age, region, dx FROM h.ward").fetchall()
        if i in persisting
    }  # fmt: skip
    assert len(people) > (400 if policy == "persist" else 100)  # sealed withholds rows
    fewest_rows, fewest_values = attacker_view(releases, people)
    assert fewest_rows >= K and fewest_values >= L, (fewest_rows, fewest_values)
    # dbanon's own measure agrees that nothing fell below, and was recorded with each run.
    measured = conn.execute(
        "SELECT metrics -> 'composition' FROM dbanon.run WHERE metrics ? 'composition' ORDER BY id"
    ).fetchall()
    assert len(measured) == 3
    assert all(m[0]["rows_below_k"] == 0 and m[0]["rows_below_l"] == 0 for m in measured)

    # Regrouping from scratch would let the intersection single rows out: refused, with the
    # measured figure, and the release as it was.
    before = release_rows(conn)
    code, out = cli_json(dsn, "refresh", "ward", "--regroup")
    assert code == 4 and "a consumer who keeps the earlier releases could narrow" in out["error"]
    assert "as few as" in out["error"]
    assert sorted(release_rows(conn)) == sorted(before)
    last = conn.execute("SELECT status FROM dbanon.run ORDER BY id DESC").fetchone()[0]
    assert last == "refused"
    code, out = cli_json(dsn, "refresh", "ward", "--regroup", "--allow-composition")
    assert code == 0, out


def test_the_group_map_is_never_granted(conn: psycopg.Connection, dsn: str) -> None:
    conn.execute("CREATE ROLE dbanon_test_reader")
    try:
        rows = [person(random.Random(1), i) for i in range(1, 101)]
        make_table(conn, "h", "ward", [("id", "int PRIMARY KEY"), ("age", "int"),
                                       ("region", "text"), ("dx", "text")], rows)  # fmt: skip
        code, _ = cli_json(dsn, "publish", "g", "--source", "h.ward", "--key", "id",
                           "--qi", "age,region", "--k", "5", "--grant",
                           "dbanon_test_reader")  # fmt: skip
        assert code == 0
        rid = conn.execute("SELECT id FROM dbanon.release WHERE name = 'g'").fetchone()[0]
        conn.commit()
        conn.execute("SET ROLE dbanon_test_reader")
        for table in (f"dbanon.group_map_{rid}",):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"SELECT * FROM {table}")  # noqa: S608 - a test's own names
            conn.rollback()
    finally:
        conn.execute("RESET ROLE")
        conn.execute("DROP OWNED BY dbanon_test_reader")
        conn.execute("DROP ROLE dbanon_test_reader")


def test_each_release_keeps_its_map_in_a_table_of_its_own(
    conn: psycopg.Connection, dsn: str
) -> None:
    """A refresh replaces the release's map table (it holds the rows now present, once each)
    and leaves another release's alone; dropping a release drops its table."""
    rng = random.Random(5)
    rows = [person(rng, i) for i in range(1, 201)]
    cols = [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("dx", "text")]
    make_table(conn, "h", "ward", cols, rows)
    for name in ("a", "b"):
        code, out = cli_json(dsn, "publish", name, "--source", "h.ward", "--key", "id",
                             "--qi", "age,region", "--sensitive", "dx", "--k", "5",
                             "--algorithm", "mondrian", "--target", f"released.{name}",
                             )  # fmt: skip
        assert code == 0, out

    def partitions() -> dict[str, int]:
        names = conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'dbanon' AND c.relname ~ '^group_map_[0-9]+$' AND c.relkind = 'r'"
        ).fetchall()
        return {
            n: conn.execute(f"SELECT count(*) FROM dbanon.{n}").fetchone()[0]  # noqa: S608
            for (n,) in names
        }

    ids = dict(conn.execute("SELECT name, id FROM dbanon.release").fetchall())
    assert partitions() == {f"group_map_{ids['a']}": 200, f"group_map_{ids['b']}": 200}
    conn.execute("DELETE FROM h.ward WHERE id <= 20")
    conn.commit()
    code, out = cli_json(dsn, "refresh", "a", "--allow-composition")  # the map, not the measure
    assert code == 0, out
    assert partitions() == {f"group_map_{ids['a']}": 180, f"group_map_{ids['b']}": 200}
    keys = conn.execute(f"SELECT key FROM dbanon.group_map_{ids['a']}")  # noqa: S608
    assert sorted(int(k) for (k,) in keys) == list(range(21, 201))
    code, out = cli_json(dsn, "drop", "a", "--yes")
    assert code == 0, out
    assert partitions() == {f"group_map_{ids['b']}": 200}


# --- the regrouping itself, in memory ------------------------------------------------------------


def _qi(ages: list[int]) -> QIArrays:
    flat = Hierarchy.flat("r", ["x"])
    return QIArrays.build(
        [np.asarray(ages, dtype=float)], [(np.zeros(len(ages), dtype=np.int32), flat)]
    )


def test_persisting_rows_keep_their_groups_and_small_groups_merge() -> None:
    ages = list(range(30))
    previous = np.array([0] * 10 + [1] * 10 + [2] * 10)
    previous[[10, 11, 12, 13, 14, 15, 16]] = -1  # group 1 lost 7 of its rows: 3 left, new rows
    qi = _qi(ages)

    def cluster(rows: np.ndarray) -> np.ndarray:
        return np.zeros(len(rows), dtype=np.int32)  # the new rows form one group

    gid = persist_groups(qi, previous, cluster, lambda rows: len(rows) >= 5, k=5)
    groups = Counter(gid.tolist())
    assert min(groups.values()) >= 5
    # Rows that were together stay together.
    for old in (0, 2):
        assert len(set(gid[previous == old].tolist())) == 1
    assert len(set(gid[[17, 18, 19]].tolist())) == 1  # group 1's survivors, merged as one
    # The survivors took the two nearest new rows (nearer than any other group) rather than
    # merging with a whole group; the other new rows form a group of their own.
    assert gid[17] == gid[16] == gid[15] and gid[17] not in (gid[0], gid[20], gid[10])
    assert len(set(gid[10:15].tolist())) == 1


def test_new_rows_that_cannot_group_alone_join_the_nearest_group() -> None:
    qi = _qi([1, 2, 3, 4, 5, 50, 51, 52, 53, 54, 4, 52])
    previous = np.array([0] * 5 + [1] * 5 + [-1, -1])

    def cluster(_rows: np.ndarray) -> np.ndarray:
        raise ValueError("too few")

    gid = persist_groups(qi, previous, cluster, lambda rows: len(rows) >= 5, k=5)
    assert gid[10] == gid[0] and gid[11] == gid[5]
