"""Issue 22 item 2: a diff of successive releases pins nobody who joined or left.

tests/diffattack.py (independent of dbanon) compares each pair of releases class by class. Under
the `sealed` refresh policy a single joiner waits (the release does not change), a single
leaver retires her group whole (its other rows wait), and rows that waited come back only in new
groups whose values hide the missing ones; under `persist` the same diff shows the joiner's row,
so the attacker can fail."""

from __future__ import annotations

import random
from collections.abc import Callable

import diffattack
import psycopg
import pytest
from churn import COLUMNS, churn, person
from helpers import cli_json, make_table

QI = ["age", "region", "income"]
K, ELL = 4, 2
embedded = pytest.mark.parametrize("server_dsn", ["embedded"], indirect=True)


def _publish(dsn: str, method: str, ell: int, *extra: str) -> None:
    models = ("--l", str(ell)) if ell > 1 else ()
    code, out = cli_json(dsn, "publish", "rel", "--source", "s.people", "--key", "id", "--qi",
                         ",".join(QI), "--sensitive", "dx", "--k", str(K), *models,
                         "--algorithm", method, *extra)  # fmt: skip
    assert code == 0, out


def _refresh(dsn: str) -> dict:
    code, out = cli_json(dsn, "refresh", "rel")
    assert code == 0, out
    return out


def _read(conn: psycopg.Connection) -> diffattack.Release:
    return diffattack.read(conn, "released.rel", QI, "dx")


def _join_then_leave(
    conn: psycopg.Connection, dsn: str, read: Callable[[psycopg.Connection], diffattack.Release]
) -> tuple[list[diffattack.Release], list[tuple]]:
    """One joiner, who waits (the release does not change), then one leaver whose value differs
    from the joiner's: her group's other rows and the joiner could form a group, but it would
    show the leaver's value by its absence, so her group goes whole and all wait. The three
    releases, and the leaver's QI point."""
    releases = [read(conn)]
    joiner = person(random.Random(9), 1000)
    conn.execute("INSERT INTO s.people VALUES (%s, %s, %s, %s, %s)", joiner)
    _refresh(dsn)
    releases.append(read(conn))
    assert releases[1] == releases[0]  # the joiner waits: nothing to diff
    leaver = conn.execute("SELECT min(id) FROM s.people WHERE dx <> %s", [joiner[4]]).fetchone()
    leaver_at = conn.execute("SELECT age, region, income FROM s.people WHERE id = %s",
                             leaver).fetchall()  # fmt: skip
    conn.execute("DELETE FROM s.people WHERE id = %s", leaver)
    _refresh(dsn)
    releases.append(read(conn))
    assert releases[2] != releases[1]  # the leaver's group went, whole
    return releases, leaver_at


def _people(n: int, seed: int = 5) -> list[tuple]:
    rng = random.Random(seed)
    return [person(rng, i) for i in range(1, n + 1)]


@embedded
@pytest.mark.parametrize(("method", "ell"), [("kmember", 1), ("mondrian", ELL),
                                             ("fulldomain", ELL)])
@pytest.mark.parametrize("seed", [5, 6, 7])
def test_single_joiner_and_leaver_show_nothing(
    conn: psycopg.Connection, dsn: str, method: str, ell: int, seed: int
) -> None:
    """k-member promises k (a change must keep k rows), Mondrian and full-domain k and l."""
    make_table(conn, "s", "people", COLUMNS, _people(400, seed))
    _publish(dsn, method, ell, "--refresh-policy", "sealed")
    releases, leaver_at = _join_then_leave(conn, dsn, _read)
    shown = conn.execute("SELECT count(*) FROM released.rel").fetchone()[0]
    assert shown <= 400 - K, shown  # its other rows wait, and so does the joiner
    rng = random.Random(11)
    conn.execute("INSERT INTO s.people VALUES (%s, %s, %s, %s, %s)", person(rng, 1001))
    _refresh(dsn)
    releases.append(_read(conn))
    left = conn.execute("SELECT age, region, income FROM s.people WHERE id IN (3, 250)").fetchall()
    conn.execute("DELETE FROM s.people WHERE id IN (3, 250)")  # then a batch of churn
    came: dict[tuple[int, int], list[tuple]] = {}
    for step in range(4, 7):  # batches of inserts: full-domain's batches are whole classes
        rows = [person(rng, i) for i in range(1000 * step, 1000 * step + 40)]
        conn.cursor().executemany("INSERT INTO s.people VALUES (%s, %s, %s, %s, %s)", rows)
        came[(step - 1, step)] = [p[1:4] for p in rows]
        _refresh(dsn)
        releases.append(_read(conn))
    gone = {(1, 2): leaver_at, (0, 2): leaver_at, (3, 4): left}
    pairs = [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4), (4, 5), (5, 6)]  # one step apart, and (0, 2)
    for i, j in pairs:
        found = diffattack.attributable(releases[i], releases[j], K, ell, gone.get((i, j), []),
                                        came.get((i, j), []))  # fmt: skip
        assert not found, (i, j, found[:5])
    shown = conn.execute("SELECT count(*) FROM released.rel").fetchone()[0]
    assert shown >= 400, shown  # the batches let waiting rows come back


@embedded
@pytest.mark.parametrize("method", ["mondrian", "mondrian-keep", "cbg"])
def test_newcomers_too_few_to_hide_wait(conn: psycopg.Connection, dsn: str, method: str) -> None:
    """By hand, k = 4. Release 1: eight people aged 10 (values a..h, one class: nothing cuts
    equal ages) and eight aged 90. Then e, f, g, h leave and three join aged 10 (x, y, z):
    the class's other four rows and the joiners are one new group of 7. Its leavers hide (4
    values went), but an attacker who knows three people joined reads their values off what
    it gained: x, y, z, 3 rows < k. So they wait, with the block: release 2 shows the class of
    90s alone, and the diff pins nobody. (cbg's seeded grouping may instead part the block from
    the joiners: a..d come back alone, the joiners wait.) cbg is read by its units (QIT and
    ST)."""
    # "-keep": with a kept column sealed mends no group (a newcomer's kept cells would tell her
    # from the leaver), so only the diff check stands between the joiners and the attacker.
    method, _, keep = method.partition("-")
    people = [(i, 10, dx, "ward") for i, dx in enumerate("abcdefgh", 1)]
    people += [(i, 90, dx, "ward") for i, dx in enumerate("abcdefgh", 9)]
    make_table(conn, "s", "few", [("id", "int PRIMARY KEY"), ("age", "int"), ("dx", "text"),
                                  ("site", "text")], people)  # fmt: skip
    models = ("--l", str(ELL)) if method == "cbg" else ()
    kept = ("--keep", "site") if keep else ()
    code, out = cli_json(dsn, "publish", "rel", "--source", "s.few", "--key", "id", "--qi",
                         "age", "--sensitive", "dx", "--k", str(K), *models, *kept,
                         "--algorithm", method, "--refresh-policy", "sealed")  # fmt: skip
    assert code == 0, out

    def read() -> diffattack.Release:
        if method == "cbg":
            return diffattack.read_units(conn, "released.rel_qit", "released.rel_st", ["age"],
                                         "dx")  # fmt: skip
        return diffattack.read(conn, "released.rel", ["age"], "dx")

    before = read()
    assert len(before) == 2 and sum(sum(c.values()) for c in before.values()) == 16, before
    conn.execute("DELETE FROM s.few WHERE id BETWEEN 5 AND 8")
    conn.execute("INSERT INTO s.few VALUES (17, 10, 'x', 'ward'), (18, 10, 'y', 'ward'), "
                 "(19, 10, 'z', 'ward')")
    _refresh(dsn)
    after = read()
    ell = ELL if method == "cbg" else 1
    found = diffattack.attributable(before, after, K, ell, left=[(10,)] * 4, joined=[(10,)] * 3)
    assert not found, found
    # The joiners wait: none of x, y, z is shown. Whether the class's four other rows wait
    # with them (one new group of 7) or come back alone (a..d: the leavers' four values went,
    # which the diff check above judged) is the method's seeded grouping's choice (cbg's
    # differs by seed); the class of 90s is shown as it was.
    old = next(key for key in before if "90" in str(key))
    assert after.get(old) == before[old], after
    rest = sorted(v[0] for key, c in after.items() if key != old for v in c.elements())
    assert rest in ([], [*"abcd"]), after


def _read_units(conn: psycopg.Connection) -> diffattack.Release:
    return diffattack.read_units(conn, "released.rel_qit", "released.rel_st", QI, "dx")


@embedded
@pytest.mark.parametrize(("seed", "blocks"), [(5, ()), (6, ()), (7, ()),
                                              (5, ("--block-size", "60"))])  # fmt: skip
def test_cbg_units_show_no_single_joiner_or_leaver(
    conn: psycopg.Connection, dsn: str, seed: int, blocks: tuple[str, ...]
) -> None:
    """cbg under sealed, read as the attacker reads QIT and ST: by units (classes and buckets
    that share rows), each unit's box and its buckets' value counts. One joiner waits; one
    leaver retires her unit; then batches of inserts: no diff pins anyone, and waiting rows
    come back. The same with T_gens taken in blocks."""
    make_table(conn, "s", "people", COLUMNS, _people(400, seed))
    _publish(dsn, "cbg", ELL, "--refresh-policy", "sealed", *blocks)
    releases, leaver_at = _join_then_leave(conn, dsn, _read_units)
    rng = random.Random(11)
    came: dict[tuple[int, int], list[tuple]] = {}
    for step in range(3, 6):
        rows = [person(rng, i) for i in range(1000 * step, 1000 * step + 40)]
        conn.cursor().executemany("INSERT INTO s.people VALUES (%s, %s, %s, %s, %s)", rows)
        came[(step - 1, step)] = [p[1:4] for p in rows]
        _refresh(dsn)
        releases.append(_read_units(conn))
    gone = {(1, 2): leaver_at, (0, 2): leaver_at}
    for i, j in [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4), (4, 5)]:
        found = diffattack.attributable(releases[i], releases[j], K, ELL, gone.get((i, j), []),
                                        came.get((i, j), []))  # fmt: skip
        assert not found, (i, j, found[:5])
    shown = conn.execute("SELECT sum(count) FROM released.rel_st").fetchone()[0]
    assert shown >= 400, shown  # the batches let waiting rows come back


@embedded
def test_the_unit_diff_finds_a_joiner_under_persist(conn: psycopg.Connection, dsn: str) -> None:
    """The control: cbg's default persist puts a joiner into a unit, whose ST counts move."""
    make_table(conn, "s", "people", COLUMNS, _people(400))
    _publish(dsn, "cbg", ELL)
    before = _read_units(conn)
    joiner = person(random.Random(9), 1000)
    conn.execute("INSERT INTO s.people VALUES (%s, %s, %s, %s, %s)", joiner)
    _refresh(dsn)
    found = diffattack.attributable(before, _read_units(conn), K, ELL, joined=[joiner[1:4]])
    assert found, found


@embedded
@pytest.mark.parametrize(("method", "policy"), [("kmember", "persist"), ("fulldomain", "search")])
def test_the_diff_finds_a_joiner_under_persist(
    conn: psycopg.Connection, dsn: str, method: str, policy: str
) -> None:
    """The attacker can fail: `persist` lets one joiner into a released group, and a
    full-domain refresh that searches again (the node stays) into a released class."""
    make_table(conn, "s", "people", COLUMNS, _people(400))
    _publish(dsn, method, 1, "--refresh-policy", policy)
    before = _read(conn)
    joiner = person(random.Random(9), 1000)
    conn.execute("INSERT INTO s.people VALUES (%s, %s, %s, %s, %s)", joiner)
    _refresh(dsn)
    found = diffattack.attributable(before, _read(conn), K, 1, joined=[joiner[1:4]])
    assert found and ("gained" in found[0] or "grew into" in found[0]), found


@embedded
def test_a_live_view_shows_a_joiner_and_cannot_be_sealed(
    conn: psycopg.Connection, dsn: str
) -> None:
    """As the README says: a live view cannot hold rows back (sealed is refused for it, one
    line, exit 2), and it shows a joiner on its next read, no refresh needed."""
    make_table(conn, "s", "people", COLUMNS, _people(400))
    code, out = cli_json(dsn, "publish", "rel", "--source", "s.people", "--key", "id", "--qi",
                         ",".join(QI), "--sensitive", "dx", "--k", str(K), "--algorithm",
                         "fulldomain", "--as", "view", "--refresh-policy", "sealed")  # fmt: skip
    assert code == 2 and "live view" in out["error"] and "\n" not in out["error"], out
    _publish(dsn, "fulldomain", 1, "--as", "view")
    before = _read(conn)
    twin = conn.execute("SELECT age, region, income FROM s.people WHERE id = 1").fetchone()
    joiner = (1000, *twin, "lupus")  # in person 1's class, which the view shows
    conn.execute("INSERT INTO s.people VALUES (%s, %s, %s, %s, %s)", joiner)
    found = diffattack.attributable(before, _read(conn), K, 1, joined=[joiner[1:4]])
    assert found and "lupus" in found[0], found


def _points(conn: psycopg.Connection) -> dict[int, tuple]:
    return {r[0]: r[1:] for r in conn.execute("SELECT id, age, region, income FROM s.people")}


@embedded
@pytest.mark.parametrize(("method", "ell"), [("kmember", 1), ("mondrian", ELL)])
def test_sealed_under_churn_releases_most_rows_and_shows_nothing(
    conn: psycopg.Connection, dsn: str, method: str, ell: int
) -> None:
    """Issue 31 item 4: 3 % deletes and 5 % inserts before each of six refreshes. A block comes
    back at once with newcomers holding its leavers' values (m-invariance's signatures, real
    rows in the leavers' places). No pair of releases one step apart pins anyone, and few rows
    wait (the sealed refresh before withheld over a third of them here)."""
    make_table(conn, "s", "people", COLUMNS, _people(600, 8))
    _publish(dsn, method, ell, "--refresh-policy", "sealed")
    releases, rng, next_id, shown_rows = [_read(conn)], random.Random(12), 5000, []
    left: list[list[tuple]] = []
    joined: list[list[tuple]] = []
    for _ in range(6):
        before = _points(conn)
        next_id = churn(conn, rng, "s.people", next_id, updates=0)
        after = _points(conn)
        left.append([p for i, p in before.items() if i not in after])
        joined.append([p for i, p in after.items() if i not in before])
        out = _refresh(dsn)
        shown_rows.append(out["rows"])
        releases.append(_read(conn))
    # The attacker knows the refresh keeps signatures (blocks come back only with every value
    # their group showed). k only: a mended group has new cells, which the judge reads as its
    # rows leaving and coming, and asks of them a value share under 1/l that distinct
    # l-diversity does not promise of the group itself (the sealed code before fails it too).
    for i in range(6):
        found = diffattack.attributable(releases[i], releases[i + 1], K, 1, left[i], joined[i],
                                        signatures=True)  # fmt: skip
        assert not found, (i, found[:5])
    total = conn.execute("SELECT count(*) FROM s.people").fetchone()[0]
    shown = conn.execute("SELECT count(*) FROM released.rel").fetchone()[0]
    assert shown >= 0.8 * total, (shown, total, shown_rows)


@embedded
@pytest.mark.parametrize(("method", "ell"), [("kmember", 1), ("mondrian", ELL)])
def test_a_group_whose_person_moved_comes_back_with_its_values(
    conn: psycopg.Connection, dsn: str, method: str, ell: int
) -> None:
    """A QI update alone no longer retires a group: the mover's group is released with the
    same values, its cells drawn around where its people are now, so nothing waits and the
    diff shows no value; a value update still retires the group (its other rows wait)."""
    make_table(conn, "s", "people", COLUMNS, _people(400, 6))
    _publish(dsn, method, ell, "--refresh-policy", "sealed")
    before = _read(conn)
    rng = random.Random(3)  # eight people move anywhere (the sealed code before: 37 rows wait)
    for i in range(7, 400, 50):
        conn.execute("UPDATE s.people SET age = %s, region = %s, income = %s WHERE id = %s",
                     [*person(rng, i)[1:4], i])  # fmt: skip
    out = _refresh(dsn)
    after = _read(conn)
    assert out["rows"] == 400  # nobody waits
    assert sorted(map(sorted, before.values())) == sorted(map(sorted, after.values()))
    assert before != after  # the movers' classes have other cells now
    # k only: the judge reads a class with new cells as new rows, and asks them for a value
    # share under 1/l, which distinct l-diversity does not promise of a group (moved or not)
    assert not diffattack.attributable(before, after, K, 1)
    value = conn.execute("SELECT dx FROM s.people WHERE id = 7").fetchone()[0]
    other = "lupus" if value != "lupus" else "flu"
    conn.execute("UPDATE s.people SET dx = %s WHERE id = 7", [other])
    out = _refresh(dsn)
    assert out["rows"] < 400  # a changed value: her group is retired whole and waits
    assert not diffattack.attributable(after, _read(conn), K, 1)
