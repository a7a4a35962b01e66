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


# --- a refresh that narrows one promise only is refused ------------------------------------------

# Fewer than 2k rows (k = 3): every release is one class, whatever the algorithm, and person 20
# (she persists; 10 and 30 leave, the rest join) is narrowed by the intersection alone.
# k: she was one of three a's; now beside b and c, she is the one plausible row (1 value left).
# l, p: her class showed {a, b}; now b, b, b, c: three rows hold b (k holds), b is the one
# plausible value of two promised.
ONE_CLASS = {
    "k": ([(10, "a"), (20, "a"), (30, "a")], [(22, "b"), (24, "c")], (1, 1)),
    "l": ([(10, "a"), (20, "b"), (30, "a")], [(22, "b"), (23, "b"), (24, "c")], (3, 1)),
}
NARROWED = {
    "k": "narrow 1 of 1 persisting rows to fewer than k=3 plausible rows (as few as 1)",
    "l": "narrow 1 persisting rows to fewer than 2 plausible sensitive values (as few as 1)",
}


@pytest.mark.parametrize(
    ("broken", "promise"),
    [("k", ("--algorithm", "mondrian")), ("k", ("--algorithm", "kmember")),
     ("l", ("--algorithm", "mondrian", "--l", "2")), ("l", ("--algorithm", "kmember", "--p", "2"))],
    ids=["k-mondrian", "k-kmember", "l-mondrian", "p-kmember"],
)  # fmt: skip
def test_a_refresh_that_narrows_k_or_l_alone_is_refused(
    conn: psycopg.Connection, dsn: str, broken: str, promise: tuple[str, ...]
) -> None:
    """The refusal names the one promise broken (exit 4, the release as it was, a refused
    run); forced, the attacker over the two released relations finds what it said."""
    first, joining, found = ONE_CLASS[broken]
    make_table(conn, "h", "w", [("id", "int PRIMARY KEY"), ("age", "int"), ("dx", "text")],
               [(a, a, dx) for a, dx in first])  # fmt: skip
    code, out = cli_json(dsn, "publish", "w", "--source", "h.w", "--key", "id", "--qi", "age",
                         "--sensitive", "dx", "--k", "3", *promise)  # fmt: skip
    assert code == 0, out
    releases = [conn.execute("SELECT age, dx FROM released.w").fetchall()]
    conn.execute("DELETE FROM h.w WHERE id IN (10, 30)")
    for a, dx in joining:
        conn.execute("INSERT INTO h.w VALUES (%s, %s, %s)", [a, a, dx])
    code, out = cli_json(dsn, "refresh", "w")
    assert code == 4, out
    assert NARROWED[broken] in out["error"], out
    other = NARROWED["l" if broken == "k" else "k"].split(" to ")[1].split(" (")[0]
    assert other not in out["error"], out
    assert sorted(conn.execute("SELECT age, dx FROM released.w").fetchall()) == sorted(releases[0])
    last = conn.execute("SELECT status FROM dbanon.run ORDER BY id DESC").fetchone()[0]
    assert last == "refused"
    code, out = cli_json(dsn, "refresh", "w", "--allow-composition")
    assert code == 0, out
    releases.append(conn.execute("SELECT age, dx FROM released.w").fetchall())
    values = set.intersection(*({dx for r, dx in rel if covers(r, 20)} for rel in releases))
    rows = sum(1 for r, dx in releases[-1] if covers(r, 20) and dx in values)
    assert (rows, len(values)) == found


# --- a sealed refresh holds back what the intersection would narrow ---------------------------

# k = 4, l = 2. Release 1: eight people aged 10 (values a..h: one class, nothing cuts equal ages)
# and eight aged 90. Then five of the 10s leave (d..h) and four join aged 10 (w, x, y, z). The
# three left (a, b, c, a block) and the joiners would make a class of 7 that keeps k and l and
# whose diff hides the leavers and the joiners, but a consumer who kept release 1 finds a, b, c
# among only 3 rows holding values of {a..h}: fewer than k. So the block waits; the joiners may
# come out alone. The refresh is never refused (sealed withholds, it does not jam).


@pytest.mark.parametrize("method", ["fulldomain", "mondrian", "mondrian-keep"])
def test_a_sealed_refresh_holds_back_a_block_the_intersection_would_narrow(
    conn: psycopg.Connection, dsn: str, method: str
) -> None:
    # "-keep": with a kept column sealed mends no group, so the block's fate rests on the
    # intersection guard alone.
    method, _, keep = method.partition("-")
    people = [(i, 10, dx, "ward") for i, dx in enumerate("abcdefgh", 1)]
    people += [(i, 90, dx, "ward") for i, dx in enumerate("abcdefgh", 9)]
    make_table(conn, "h", "w", [("id", "int PRIMARY KEY"), ("age", "int"), ("dx", "text"),
                                ("site", "text")], people)  # fmt: skip
    kept = ("--keep", "site") if keep else ()
    code, out = cli_json(dsn, "publish", "w", "--source", "h.w", "--key", "id", "--qi", "age",
                         "--sensitive", "dx", "--k", "4", "--l", "2", "--algorithm", method,
                         *kept, "--refresh-policy", "sealed")  # fmt: skip
    assert code == 0, out
    read = "SELECT age::text, dx FROM released.w"
    releases = [conn.execute(read).fetchall()]
    conn.execute("DELETE FROM h.w WHERE id BETWEEN 4 AND 8")
    conn.execute("INSERT INTO h.w VALUES (17, 10, 'w', 'ward'), (18, 10, 'x', 'ward'), "
                 "(19, 10, 'y', 'ward'), (20, 10, 'z', 'ward')")  # fmt: skip
    code, out = cli_json(dsn, "refresh", "w")
    assert code == 0, out
    releases.append(conn.execute(read).fetchall())
    assert sorted(dx for age, dx in releases[1] if covers(age, 10)) in ([], list("wxyz"))
    # The attacker: for each person in both releases (the 90s, and a, b, c if shown), the
    # values both of her classes showed, and the rows of the newest holding one of them.
    for age, dx in [(90, v) for v in "abcdefgh"] + [(10, v) for v in "abc"]:
        if not any(covers(a, age) and d == dx for a, d in releases[1]):
            continue  # not shown now: nothing to intersect
        values = set.intersection(*({d for a, d in rel if covers(a, age)} for rel in releases))
        rows = sum(1 for a, d in releases[1] if covers(a, age) and d in values)
        assert rows >= 4 and len(values) >= 2, (age, dx, rows, values)


# --- the measure, by hand ----------------------------------------------------------------------

# Eight people and their values; three releases' classes. By hand (k = 3, l = 2 promised):
# release 2, X = {1,3,5,7} shows a b c a, Y = {2,4,6,8} a b c b. People 1-4 had {a, b} (class
# A of release 1): 3 plausible rows (X: 1, 3, 7; Y: 2, 4, 8) and 2 values, exactly k and l.
# People 5-8 had {a, b, c}: 4 rows, 3 values. Release 3, P = {1,2,5,6} shows a a c c,
# Q = {3,4,7,8} b b a b: 1 and 2 keep {a} (2 rows, 1 value), 5 and 6 {a, c}, 3, 4, 7, 8 {a, b}
# (4 rows each, 2 values).
HAND_VALUES = dict(zip(range(1, 9), "aabbccab", strict=True))
HAND_RELEASES = [
    [[1, 2, 3, 4], [5, 6, 7, 8]],
    [[1, 3, 5, 7], [2, 4, 6, 8]],
    [[1, 2, 5, 6], [3, 4, 7, 8]],
]


def intersected(releases: list[list[list[int]]], values: dict[int, str], k: int, ell: int) -> tuple:
    """The attacker's figures over the released classes alone (who is in which class, and the
    values each class shows): for everybody in every release, the values every class of theirs
    showed and the rows of their newest class holding one of them. (persisting, fewest rows,
    fewest values, people below k rows, people below l values)."""
    shown = [{p: {values[q] for q in cls} for cls in rel for p in cls} for rel in releases]
    newest = {p: cls for cls in releases[-1] for p in cls}
    below_k = below_l = 0
    fewest_rows = fewest_values = None
    for p in set.intersection(*(set(s) for s in shown)):
        before = set.intersection(*(s[p] for s in shown[:-1]))
        rows = sum(1 for q in newest[p] if values[q] in before)
        left = len(before & shown[-1][p])
        below_k, below_l = below_k + (rows < k), below_l + (left < ell)
        fewest_rows = rows if fewest_rows is None else min(fewest_rows, rows)
        fewest_values = left if fewest_values is None else min(fewest_values, left)
    return len(newest), fewest_rows, fewest_values, below_k, below_l


@pytest.mark.parametrize(("k", "ell"), [(3, 2), (4, 3)])
def test_the_measure_by_hand_agrees_with_the_attacker(
    conn: psycopg.Connection, k: int, ell: int
) -> None:
    """dbanon's measure of each refresh (the map, then the new classes) against the hand
    figures above and the attacker's own count over the classes as released: at k = 3, l = 2
    release 2 sits exactly on both and nobody is below; at k = 4, l = 3 people 1-4 are below
    both. Release 3 narrows 1 and 2 to 2 rows and 1 value, everybody to at most 2 values."""
    make_table(conn, "h", "eight", [("id", "int"), ("dx", "text")], list(HAND_VALUES.items()))
    rid = 998
    hand = {
        (3, 2): [(8, 3, 2, 0, 0), (8, 2, 1, 2, 2)],
        (4, 3): [(8, 3, 2, 4, 4), (8, 2, 1, 2, 8)],
    }[(k, ell)]
    for n, figures in enumerate(_measured(conn, "h.eight", rid, HAND_RELEASES, k, ell)):
        attacker = intersected(HAND_RELEASES[: n + 2], HAND_VALUES, k, ell)
        assert figures == attacker == hand[n], (n, figures, attacker)


def _measured(conn: psycopg.Connection, table: str, rid: int, releases: list[list[list[int]]],
              k: int, ell: int) -> list[tuple]:  # fmt: skip
    """dbanon's measure of each release after the first (people by id into classes) of
    `table` (id, dx), each stored as the map before the next; the map dropped after."""
    from dbanon.db import catalog
    from dbanon.setlogic import composition

    source = catalog.relation(conn, table)
    cols = catalog.columns(conn, source)
    out = []
    with conn.transaction():
        for n, classes in enumerate(releases):
            conn.execute("DROP TABLE IF EXISTS pg_temp.st, pg_temp.dbanon_new_rows")
            conn.execute("CREATE TEMP TABLE st (key text, gid int4)")
            with conn.cursor().copy("COPY st FROM STDIN") as copy:
                for g, members in enumerate(classes):
                    for key in members:
                        copy.write_row((str(key), g))
            rows = composition.new_rows(conn, source, cols["id"], cols["dx"],
                                        psycopg.sql.Identifier("st"), [cols["dx"]])  # fmt: skip
            found = composition.measure(conn, rid, rows, k, ell)
            composition.store(conn, rid, rows)
            assert (found is None) == (n == 0)
            if found is not None:
                out.append((found.persisting, found.min_plausible_rows,
                            found.min_plausible_values, found.rows_below_k,
                            found.rows_below_l))  # fmt: skip
        for part in (None, "sets", "shown"):
            conn.execute(psycopg.sql.SQL("DROP TABLE {}").format(composition.table(rid, part)))
    return out


def random_releases(rng: random.Random, people: list[int], count: int) -> list[list[list[int]]]:
    """`count` releases of the people, each a random partition into classes of 1-6."""
    out = []
    for _ in range(count):
        order = rng.sample(people, len(people))
        classes, at = [], 0
        while at < len(order):
            size = rng.randint(1, 6)
            classes.append(order[at : at + size])
            at += size
        out.append(classes)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_the_measure_of_random_releases_agrees_with_the_attacker(
    conn: psycopg.Connection, seed: int
) -> None:
    """The same attacker's count over random partitions of random people into classes of 1-6,
    four releases in a row, values drawn from a few (NULL among them, a value of its own):
    dbanon's measure of each release after the first gives the attacker's figures."""
    rng = random.Random(seed)
    people = list(range(1, rng.randint(12, 40)))
    values = {p: rng.choice(["a", "b", "c", "d", None]) for p in people}
    releases = random_releases(rng, people, 4)
    make_table(conn, "h", f"random{seed}", [("id", "int"), ("dx", "text")],
               list(values.items()))  # fmt: skip
    k, ell = rng.randint(2, 4), rng.randint(1, 3)
    tags = {p: "NULL" if v is None else v for p, v in values.items()}  # as the attacker sees
    for n, figures in enumerate(_measured(conn, f"h.random{seed}", 990 + seed, releases, k, ell)):
        assert figures == intersected(releases[: n + 2], tags, k, ell), (n, figures)


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
