"""The guard and the map of grouping releases, from arrays (dbanon.setlogic.grouped_map), give
the attacker's figures and the map dbanon.setlogic.composition's SQL gives, on the same
releases: random people in random classes over four releases, NULL values, rows withheld in
waiting blocks, (θ,k)'s categories, and maps written by one path and read by the other (a
release whose method changes)."""

from __future__ import annotations

import random

import numpy as np
import psycopg
import pytest
from helpers import make_table
from psycopg import sql
from test_composition import intersected, random_releases

from dbanon.db import catalog
from dbanon.db.stream import Coded, Keys
from dbanon.models.base import Spread
from dbanon.setlogic import composition, grouped_map
from dbanon.setlogic.grouped_map import Mapped, OldMap


def _arrays(conn: psycopg.Connection, table: str, rid: int, gid: dict[int, int],
            wait: dict[int, int]) -> Mapped:  # fmt: skip
    """This run's rows of `table` (id, dx) as a grouping build holds them: groups, tags,
    fingerprints, and what the map holds of each row (read here as the extract reads it)."""
    source = catalog.relation(conn, table)
    dx = [catalog.columns(conn, source)["dx"]]
    kind = composition.fingerprint_kind(conn, source, dx)  # as the SQL path makes it
    rows = conn.execute(sql.SQL(
        "SELECT id, coalesce('v:' || dx::text, 'n'), ('x' || right({}, 16))::bit(64)::int8 "
        "FROM {} s ORDER BY id").format(composition.fingerprint(dx, "s", kind),
                                        sql.SQL(table))).fetchall()  # fmt: skip
    ids = [r[0] for r in rows]
    fp = np.array([r[2] for r in rows], dtype=np.int64)
    old = None
    if composition.has_map(conn, rid):
        held = {k: (v, s) for k, v, s in conn.execute(sql.SQL(
            "SELECT key, vid, sid FROM {}").format(composition.table(rid))).fetchall()}  # fmt: skip
        at = [held.get(str(i)) for i in ids]
        old = OldMap(np.array([a is not None for a in at]),
                     np.array([-1 if a is None or a[0] is None else a[0] for a in at]),
                     np.array([-1 if a is None or a[1] is None else a[1] for a in at]))
    return Mapped(Keys.of([str(i) for i in ids]), np.array([gid.get(i, -1) for i in ids]),
                  np.array([wait.get(i, -1) for i in ids]), Coded.of([r[1] for r in rows]),
                  fp, old, kind)  # fmt: skip


def _staged(conn: psycopg.Connection, table: str, gid: dict[int, int],
            wait: dict[int, int]) -> composition.Rows:  # fmt: skip
    """The same rows staged for the SQL path: (key, gid, w), gid NULL for a row withheld."""
    source = catalog.relation(conn, table)
    cols = catalog.columns(conn, source)
    conn.execute("DROP TABLE IF EXISTS pg_temp.st, pg_temp.dbanon_new_rows")
    conn.execute("CREATE TEMP TABLE st (key text, gid int4, w int4)")
    ids = [r[0] for r in conn.execute(sql.SQL("SELECT id FROM {}").format(sql.SQL(table)))]
    with conn.cursor().copy("COPY st FROM STDIN") as copy:
        for i in ids:
            copy.write_row((str(i), gid.get(i), wait.get(i)))
    return composition.new_rows(conn, source, cols["id"], cols["dx"], sql.Identifier("st"),
                                [cols["dx"]])  # fmt: skip


def _map(conn: psycopg.Connection, rid: int) -> list[tuple]:
    """The map by key: group, plausible values and what its group showed, as sets."""
    return conn.execute(sql.SQL(
        """SELECT m.key, m.gid, m.fp,
                  (SELECT array_agg(x ORDER BY x COLLATE "C") FROM unnest(s.vals) x),
                  (SELECT array_agg(x ORDER BY x COLLATE "C") FROM unnest(h.shown) x)
           FROM {} m LEFT JOIN {} s USING (vid) LEFT JOIN {} h USING (sid) ORDER BY m.key"""
    ).format(*(composition.table(rid, p) for p in (None, "sets", "shown")))).fetchall()


def _figures(found: composition.Composition | None) -> tuple | None:
    return None if found is None else tuple(found.as_dict().values())


@pytest.mark.parametrize("seed", range(6))
def test_random_releases_measure_and_map_as_the_sql_does(
    conn: psycopg.Connection, seed: int
) -> None:
    """Four releases, each measured and stored by both paths (each under its own release
    id): the figures equal each other's and the attacker's, the maps equal row by row. A third
    release id is kept by the two paths in turn, each reading the map the other wrote (a
    release whose method changes): its figures are the attacker's too."""
    rng = random.Random(seed)
    people = list(range(1, rng.randint(12, 40)))
    values = {p: rng.choice(["a", "b", "c", "d", None]) for p in people}
    make_table(conn, "h", f"r{seed}", [("id", "int"), ("dx", "text")], list(values.items()))
    table = f"h.r{seed}"
    releases = random_releases(rng, people, 4)
    k, ell = rng.randint(2, 4), rng.randint(1, 3)
    tags = {p: "NULL" if v is None else v for p, v in values.items()}
    a, b, c = 900 + seed, 950 + seed, 980 + seed  # arrays, SQL, both in turn
    with conn.transaction():
        for n, classes in enumerate(releases):
            gid = {p: g for g, cls in enumerate(classes) for p in cls}
            arrays = _arrays(conn, table, a, gid, {})
            found = grouped_map.measure(conn, a, arrays, k, ell)
            staged = _staged(conn, table, gid, {})
            assert _figures(found) == _figures(composition.measure(conn, b, staged, k, ell)), n
            if n:
                assert _figures(found) == intersected(releases[: n + 1], tags, k, ell), n
            grouped_map.store(conn, a, arrays)
            composition.store(conn, b, staged)
            assert _map(conn, a) == _map(conn, b), n
            if (n + seed) % 2:
                mixed = _arrays(conn, table, c, gid, {})
                assert _figures(grouped_map.measure(conn, c, mixed, k, ell)) == _figures(found)
                grouped_map.store(conn, c, mixed)
            else:
                mixed = _staged(conn, table, gid, {})
                assert _figures(composition.measure(conn, c, mixed, k, ell)) == _figures(found)
                composition.store(conn, c, mixed)


@pytest.mark.parametrize("seed", range(4))
def test_withheld_rows_keep_their_sets_and_blocks(conn: psycopg.Connection, seed: int) -> None:
    """Rows withheld (some in waiting blocks) keep, in the map, the sets and shown values the
    map held of them, as the SQL keeps them; rows withheld that the map never held are not
    kept."""
    rng = random.Random(100 + seed)
    people = list(range(1, 30))
    values = {p: rng.choice(["a", "b", "c", None]) for p in people}
    make_table(conn, "h", f"w{seed}", [("id", "int"), ("dx", "text")], list(values.items()))
    table = f"h.w{seed}"
    a, b = 800 + seed, 850 + seed
    with conn.transaction():
        for n, classes in enumerate(random_releases(rng, people, 3)):
            gid = {p: g for g, cls in enumerate(classes) for p in cls}
            wait = {}
            if n:
                for p in rng.sample(people, 8):
                    del gid[p]
                    if rng.random() < 0.6:
                        wait[p] = rng.randint(0, 2)
            arrays, staged = _arrays(conn, table, a, gid, wait), _staged(conn, table, gid, wait)
            assert _figures(grouped_map.measure(conn, a, arrays, 2, 1)) == _figures(
                composition.measure(conn, b, staged, 2, 1))  # fmt: skip
            grouped_map.store(conn, a, arrays)
            composition.store(conn, b, staged)
            assert _map(conn, a) == _map(conn, b), n


def test_the_categories_a_class_still_fills_as_the_sql_counts_them(
    conn: psycopg.Connection,
) -> None:
    """(θ,k)'s spread over random releases: the fewest categories persisting rows' plausible
    values fill, and the rows below θ, as the SQL measure counts them."""
    rng = random.Random(7)
    people = list(range(1, 40))
    values = {p: rng.choice("abcdef") for p in people}
    make_table(conn, "h", "cats", [("id", "int"), ("dx", "text")], list(values.items()))
    spread = Spread(2, {"a": "X", "b": "X", "c": "Y", "d": "Y", "e": "Z"},
                    {"X": 2, "Y": 1, "Z": 1}, "θ=2 categories")  # fmt: skip
    seen = []
    with conn.transaction():
        for n, classes in enumerate(random_releases(rng, people, 5)):
            gid = {p: g for g, cls in enumerate(classes) for p in cls}
            arrays, staged = _arrays(conn, "h.cats", 700, gid, {}), _staged(conn, "h.cats", gid, {})
            found = grouped_map.measure(conn, 700, arrays, 2, 1, spread)
            assert _figures(found) == _figures(composition.measure(conn, 701, staged, 2, 1,
                                                                   spread)), n  # fmt: skip
            if found is not None:
                seen.append(found.rows_below_categories)
            grouped_map.store(conn, 700, arrays)
            composition.store(conn, 701, staged)
    assert any(seen)  # the releases narrow some people below θ: the count is exercised


@pytest.mark.parametrize("seed", range(4))
def test_found_by_table_or_search_as_a_binary_search_finds(seed: int) -> None:
    """`_found` answers by a table of places where the ids are dense, by a search where not
    (ids up to 10^12): both as np.searchsorted, negative ids and ids past the last never held."""
    rng = np.random.default_rng(seed)
    for top in (50, 200_000, 10**12):
        found = np.unique(rng.integers(0, top, 300))
        ids = np.r_[rng.integers(-3, top + 5, 2_000), found[:5], -1, top + 10**6]
        at = np.searchsorted(found, ids)
        held = (ids >= 0) & (at < len(found))
        held[held] = found[at[held]] == ids[held]
        ok, where = grouped_map._found(ids, found)
        assert np.array_equal(ok, held) and np.array_equal(where[ok], at[held])
    ok, _ = grouped_map._found(np.array([0, 4]), np.zeros(0, dtype=np.int64))
    assert not ok.any()


def test_elements_sorted_by_rank_within_each_set_whatever_order_they_came_in() -> None:
    """`_rank_sorted` leaves sets already in rank order as they are and sorts the others (a
    map written by the SQL path's collation), ties in their order."""
    rng = np.random.default_rng(7)
    rank = rng.permutation(40)
    owner = np.sort(rng.integers(0, 30, 500))
    elems = rng.integers(0, 40, 500)
    expected = elems[np.lexsort((rank[elems], owner))]
    assert np.array_equal(grouped_map._rank_sorted(owner, elems, rank), expected)
    assert np.array_equal(grouped_map._rank_sorted(owner, expected, rank), expected)
    inverse = np.argsort(rank)  # codes by rank: every set in order already
    ordered = inverse[np.sort(rng.integers(0, 40, 50))]
    assert np.array_equal(grouped_map._rank_sorted(np.zeros(50, np.int64), ordered, rank),
                          ordered)  # fmt: skip
