"""Noise across refreshes (issues 22 item 3, 31 item 2), checked on the released tables by plain
SQL and numpy.

The attacker keeps every release. An unchanged value must come back exactly as it was (nothing
to average away); the row ids and row order of one release must not point into another's. With
`noise` a row keeps its noise when its value changes, so a known change narrows nothing (checked
by the independent attacker of tests/noiseattack.py) and the difference of two releases is the
true change; with `ina` a changed tuple gets fresh noise.
"""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from helpers import cli_json, make_table, noise_map
from noiseattack import attack, figures, read
from noiserefresh import (
    CHANGES,
    COLUMNS,
    PER_CHANGE,
    Run,
    change_age,
    publish,
    rows_by_key,
    scenario,
    support,
)
from psycopg import sql

ROWS = 5_000
CHANGE = 7.0


@pytest.fixture
def people(conn: psycopg.Connection) -> psycopg.Connection:
    rng = np.random.default_rng(22)
    rows = [
        (i, round(float(rng.normal(40, 12)), 2), round(float(rng.uniform(0, 100)), 2), f"j{i % 9}")
        for i in range(1, ROWS + 1)
    ]
    make_table(conn, "hr", "people",
               [("id", "int PRIMARY KEY"), ("x", "float8"), ("y", "float8"), ("job", "text")],
               rows)  # fmt: skip
    return conn


def released(conn: psycopg.Connection) -> dict[int, tuple[int, int, float, float]]:
    """Source id -> (position in the table's order, dbanon_row, x', y'), through the private
    map (the test's only way to pair rows; a consumer has none)."""
    rows = conn.execute(sql.SQL(
        """SELECT m.key::int, row_number() OVER (ORDER BY r.dbanon_row), r.dbanon_row, r.x, r.y
           FROM released.n r JOIN {} m ON m.row_id = r.dbanon_row""").format(
        noise_map(conn, "n")),
    ).fetchall()  # fmt: skip
    return {k: (pos, row, x, y) for k, pos, row, x, y in rows}


@pytest.mark.parametrize("method", ["noise", "ina"])
def test_refresh_keeps_unchanged_values_and_what_a_change_shows(
    people: psycopg.Connection, dsn: str, method: str
) -> None:
    code, out = cli_json(dsn, "publish", "n", "--source", "hr.people", "--key", "id",
                         "--columns", "x,y", "--algorithm", method, "--keep", "job")  # fmt: skip
    assert code == 0, out
    first = released(people)
    changed = [int(i) for i in np.random.default_rng(5).choice(ROWS, 50, replace=False) + 1]
    people.execute("UPDATE hr.people SET x = x + %s WHERE id = ANY(%s)", [CHANGE, changed])
    code, out = cli_json(dsn, "refresh", "n")
    assert code == 0 and out["rows"] == ROWS, out
    second = released(people)
    assert len(first) == len(second) == ROWS

    moved = set(changed)
    same = [k for k in first if k not in moved]
    # unchanged rows: the very same released values (x and y), nothing to average away
    assert all(first[k][2:] == second[k][2:] for k in same)
    diffs = np.array([second[k][2] - first[k][2] for k in changed])
    if method == "noise":  # noise per row (issue 31): a changed row keeps its noise, so the
        # difference of two releases is the true change (docs/noise.md: the design's cost)
        assert np.isclose(diffs, CHANGE, rtol=0, atol=1e-6).all(), diffs
        assert all(first[k][3] == second[k][3] for k in changed)  # and its other column too
    else:  # ina's noise size depends on the tuple: fresh noise in every column, so no released
        # difference equals the true change, each is its own
        assert not np.isclose(diffs, CHANGE, rtol=0, atol=1e-6).any(), diffs
        assert len(np.unique(np.round(diffs, 6))) == 50
        assert not any(first[k][3] == second[k][3] for k in changed)

    # row ids and order: fresh every run, unlinkable across releases
    assert not {v[1] for v in first.values()} & {v[1] for v in second.values()}
    a = np.array([first[k][0] for k in sorted(first)], dtype=np.float64)
    b = np.array([second[k][0] for k in sorted(first)], dtype=np.float64)
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.05  # positions are ranks: Spearman's rho


# --- issue 31 item 2: a known change narrows no one's candidates ------------------------------


def _run(dsn: str) -> Run:
    return lambda *args: cli_json(dsn, *args)


@pytest.mark.parametrize("floor", [(), ("--noise-floor", "0")], ids=["default-floor", "floor-0"])
def test_a_known_change_narrows_no_ones_candidates(
    conn: psycopg.Connection, dsn: str, floor: tuple[str, ...]
) -> None:
    """The independent attacker (tests/noiseattack.py) links the two releases by the unchanged
    columns, shifts each changed person's age back by her known change (+1, +7) and finds every
    integer the first release left for her still left: no one narrowed (before issue 31, with
    noise keyed on the value, two releases pinned a third of them to one age)."""
    results = scenario(conn, _run(dsn), ("--algorithm", "noise", *floor), rows=1_000, seed=31)
    assert len(results) == PER_CHANGE * len(CHANGES)
    assert all(r["linked"] for r in results)  # the attack's premise holds: rows are linked
    narrowed = [r for r in results if r["two"] < r["one"]]
    assert not narrowed, (len(narrowed), narrowed[:3], figures(results))


def test_no_one_narrowed_over_many_refreshes_with_joiners_and_leavers(
    conn: psycopg.Connection, dsn: str
) -> None:
    """Four releases: the same people change again and again (+1, +7, +1), others leave, new
    ones join and change, one leaver comes back with the same key and an older age. For every
    pair of releases the attacker holds, shifting back each person's known total change leaves
    her every candidate the earlier release left."""
    run = _run(dsn)
    options = ("--algorithm", "noise")
    name = publish(conn, run, options, 600, 7)
    lo, hi, far = support(conn, run, name, options)
    people = sql.Identifier(name, "people")
    relation = f"released.{name}"
    ages: list[dict[int, int]] = []  # per release: key -> true age
    releases: list[tuple[list[tuple], dict[int, int]]] = []

    def keep() -> None:
        ages.append(dict(conn.execute(sql.SQL("SELECT id, age FROM {}").format(people))))
        releases.append((read(conn, relation, COLUMNS), rows_by_key(conn, name, relation)))

    keep()
    leaver = conn.execute(sql.SQL("SELECT id, age + 3, hours, job FROM {} WHERE id = 110")
                          .format(people)).fetchone()  # fmt: skip
    movers = list(range(1, 41))
    for step, change in enumerate((1, 7, 1), start=1):
        change_age(conn, name, change, movers)
        conn.execute(sql.SQL("DELETE FROM {} WHERE id BETWEEN %s AND %s").format(people),
                     [100 + 10 * step, 104 + 10 * step])  # fmt: skip
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, 40, 50, 'j1'), (%s, 41, 20, 'j2')")
                     .format(people), [1000 + step, 2000 + step])  # fmt: skip
        if step >= 2:  # the joiners of earlier refreshes change too
            change_age(conn, name, 7, list(range(1001, 1000 + step)))
        if step == 3:  # a leaver of the first refresh comes back, three years older
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(people), leaver)
        code, out = run("refresh", name)
        assert code == 0, out
        keep()

    checked = 0
    for i in range(len(releases)):
        for j in range(i + 1, len(releases)):
            (first, at_i), (second, _) = releases[i], releases[j]
            both = [k for k in ages[i] if k in ages[j] and ages[j][k] != ages[i][k]]
            assert (110 in both) == ((i, j) == (0, 3))  # the leaver who came back, attacked
            targets = {at_i[k]: float(ages[j][k] - ages[i][k]) for k in both}
            results = attack(first, second, targets, 0, lo, hi, {1: far})
            narrowed = [r for r in results if r["two"] < r["one"]]
            assert not narrowed, (i, j, narrowed[:3])
            checked += len(results)
    assert checked > 200  # movers over six pairs, the joiners and the leaver who came back


def test_a_release_kept_from_before_the_keying_keeps_its_own(
    people: psycopg.Connection, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A noise state kept without its keying (drawn, keyed on the value, before issue 31) is
    refreshed with the keying it was drawn with: unchanged rows keep their released values (no
    second draw of everyone), changed values get fresh noise as they did."""
    from dbanon.methods import methods

    with monkeypatch.context() as m:  # a release published before: noise keyed on the value
        m.setattr(methods()["noise"], "keyed", "value")
        code, out = cli_json(dsn, "publish", "n", "--source", "hr.people", "--key", "id",
                             "--columns", "x,y", "--algorithm", "noise")  # fmt: skip
    assert code == 0, out
    people.execute("UPDATE dbanon.noise_state SET state = state #- '{extra,keyed}'")
    first = released(people)
    changed = list(range(1, 51))
    people.execute("UPDATE hr.people SET x = x + %s WHERE id = ANY(%s)", [CHANGE, changed])
    code, out = cli_json(dsn, "refresh", "n")
    assert code == 0, out
    second = released(people)
    assert all(first[k][2:] == second[k][2:] for k in first if k > 50)
    diffs = np.array([second[k][2] - first[k][2] for k in changed])
    assert not np.isclose(diffs, CHANGE, rtol=0, atol=1e-6).any(), diffs
