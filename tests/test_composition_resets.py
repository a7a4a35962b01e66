"""`publish --replace` does not reset the intersection guard (issue 22 item 2).

The map of who was grouped with whom belongs to the release's people, not its spec. Each way a
replace used to drop it (another unique key of the same table, a view over the same table as the
source, a method without groups and back, other QIs) is tried twice after churn: regrouping
from scratch is refused (exit 4, the release as it was, a `refused` run), and the default
persist policy publishes, measured against what consumers already hold. A replace whose people
cannot be told apart from the old ones is refused unless --allow-composition, which the run
records. Checks read the catalog's run records and the released table with plain SQL.
"""

from __future__ import annotations

import random

import psycopg
import pytest
from helpers import cli_json, make_table
from psycopg import sql

COLS = [("id", "int PRIMARY KEY"), ("code", "text UNIQUE NOT NULL"), ("age", "int"),
        ("region", "text"), ("dx", "text")]  # fmt: skip
DX = ["flu", "asthma", "diabetes", "cancer", "gout", "angina", "ulcer"]
REGIONS = ["N", "S", "E", "W"]
BASE = ("--sensitive", "dx", "--k", "5", "--l", "2")


def person(rng: random.Random, i: int) -> tuple:
    return (i, f"P{i:05d}", rng.randint(18, 90), rng.choice(REGIONS), rng.choice(DX))


def churn(conn: psycopg.Connection, rng: random.Random, start: int) -> None:
    """2 % QI moves, 10 % inserts. (No deletes: a leaver can jam mondrian's persist policy,
    refused by a plain refresh as well; helper E's side. tests/test_cbg_intersection.py
    deletes.)"""
    ids = [i for (i,) in conn.execute("SELECT id FROM h.ward ORDER BY id").fetchall()]
    for i in rng.sample(ids, len(ids) // 50):
        conn.execute("UPDATE h.ward SET age = %s WHERE id = %s", [rng.randint(18, 90), i])
    for i in range(start, start + len(ids) // 10):
        conn.execute("INSERT INTO h.ward VALUES (%s, %s, %s, %s, %s)", person(rng, i))
    conn.commit()


def publish(
    dsn: str, *args: str, qi: str = "age,region", models: tuple[str, ...] = BASE
) -> tuple[int, dict]:
    return cli_json(dsn, "publish", "w", "--target", "rel.w", "--qi", qi, *models, *args)


def last_run(conn: psycopg.Connection) -> tuple[str, dict]:
    return conn.execute("SELECT status, metrics FROM dbanon.run ORDER BY id DESC").fetchone()


def released(conn: psycopg.Connection) -> list[tuple]:
    return sorted(conn.execute("SELECT * FROM rel.w").fetchall())


def release_rows(conn: psycopg.Connection) -> list[dict]:
    cur = conn.execute("SELECT * FROM rel.w")
    names = [d.name for d in cur.description or []]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def covers(released: str, value: object) -> bool:
    if released == "*" or released == value:
        return True
    if isinstance(value, int):
        low, _, high = str(released).strip("[]").partition(",")  # `[30,39]` or `30`
        return low.isdigit() and int(low) <= value <= int(high or low)
    return value in str(released).strip("{}").split(",")  # a set of values


def people(conn: psycopg.Connection) -> dict[int, dict]:
    """The first 600 people as they are now (what the attacker knows of each)."""
    cur = conn.execute("SELECT id, age, region, dx FROM h.ward WHERE id <= 600")
    return {i: {"age": a, "region": g, "dx": d} for i, a, g, d in cur.fetchall()}


def fewest(releases: list[list[dict]], states: list[dict[int, dict]]) -> tuple[int, int]:
    """The attacker's own intersection (plain Python, released tables only): for each person,
    the values every release's classes covering her QIs (as they were then) hold, and the rows
    of the newest release's covering classes with such a value; the fewest of each."""
    rows_min = values_min = 10**9
    for i in states[-1]:
        values = None
        cands: list[dict] = []
        for rel, state in zip(releases, states, strict=True):
            p = state[i]
            cands = [r for r in rel
                     if all(covers(r[c], p[c]) for c in ("age", "region") if c in r)]  # fmt: skip
            held = {r["dx"] for r in cands}
            values = held if values is None else values & held
        assert values is not None and states[-1][i]["dx"] in values
        rows_min = min(rows_min, sum(1 for r in cands if r["dx"] in values))
        values_min = min(values_min, len(values))
    return rows_min, values_min


@pytest.fixture
def ward(conn: psycopg.Connection, dsn: str) -> random.Random:
    rng = random.Random(7)
    make_table(conn, "h", "ward", COLS, [person(rng, i) for i in range(1, 601)])
    conn.commit()
    code, out = publish(dsn, "--source", "h.ward", "--key", "id", "--algorithm", "mondrian")
    assert code == 0, out
    return rng


# Each reset path: the arguments of the replace (after any setup it needs).
PATHS = {
    "another unique key": ("--source", "h.ward", "--key", "code", "--algorithm", "mondrian"),
    "a view over the table": ("--source", "h.ward_v", "--key", "id", "--algorithm", "mondrian"),
    "a view renaming the key": ("--source", "h.ward_r", "--key", "pid",
                                "--algorithm", "mondrian"),  # fmt: skip
    "other QIs": ("--source", "h.ward", "--key", "id", "--algorithm", "mondrian"),
    "a method without groups and back": ("--source", "h.ward", "--key", "id",
                                         "--algorithm", "mondrian"),  # fmt: skip
}


@pytest.mark.parametrize("path", list(PATHS))
def test_a_replace_is_refused_or_measured(
    conn: psycopg.Connection, dsn: str, ward: random.Random, path: str
) -> None:
    conn.execute("CREATE VIEW h.ward_v AS SELECT * FROM h.ward")
    conn.execute("CREATE VIEW h.ward_r AS SELECT id AS pid, code, age, region, dx FROM h.ward")
    conn.commit()
    qi = "age" if path == "other QIs" else "age,region"
    if path == "a method without groups and back":
        code, out = publish(dsn, "--source", "h.ward", "--key", "id", "--algorithm", "anatomy",
                            "--replace", models=("--sensitive", "dx", "--l", "2"))  # fmt: skip
        assert code == 0, out
        assert last_run(conn)[1].get("composition") is None  # anatomy: no groups to measure
    then = people(conn)
    churn(conn, ward, 10_000)
    away = path == "a method without groups and back"  # rel.w is then anatomy's, named apart
    before = None if away else released(conn)
    runs = conn.execute("SELECT count(*) FROM dbanon.run").fetchone()[0]

    code, out = publish(dsn, *PATHS[path], "--replace", "--refresh-policy", "regroup", qi=qi)
    assert code == 4, out
    assert "a consumer who keeps the earlier releases could narrow" in out["error"]
    status, _ = last_run(conn)
    assert status == "refused"
    assert conn.execute("SELECT count(*) FROM dbanon.run").fetchone()[0] == runs + 1
    if not away:
        assert released(conn) == before

    first = None if away else release_rows(conn)
    code, out = publish(dsn, *PATHS[path], "--replace", qi=qi)
    assert code == 0, out
    if first is not None:  # the attacker holds both releases: nobody below k=5 rows, l=2 values
        rows_min, values_min = fewest([first, release_rows(conn)], [then, people(conn)])
        assert rows_min >= 5 and values_min >= 2, (rows_min, values_min)
    status, metrics = last_run(conn)
    composed = metrics["composition"]
    assert status == "succeeded" and composed["persisting"] == 600, composed
    assert composed["rows_below_k"] == 0 and composed["rows_below_l"] == 0, composed
    if path in ("another unique key", "a view over the table", "a view renaming the key"):
        by = "content" if path == "a view renaming the key" else "key"
        assert metrics["map_rekeyed"] == {"by": by, "kept": 600, "dropped": 0}
    if path == "another unique key":  # the map is keyed by the new key now
        rid = conn.execute("SELECT id FROM dbanon.release WHERE name = 'w'").fetchone()[0]
        keys = conn.execute(
            sql.SQL("SELECT count(*) FILTER (WHERE key LIKE 'P%%'), count(*) FROM {} "
                    "WHERE release_id = %s").format(
                sql.Identifier("dbanon", f"group_map_{rid}")),
            [rid],
        ).fetchone()  # fmt: skip
        assert keys[0] == keys[1] == 660


def test_people_nobody_can_tell_apart_are_refused_unless_allowed(
    conn: psycopg.Connection, dsn: str, ward: random.Random
) -> None:
    """The old source is gone and the new one lacks the old key: no way to find the people
    the earlier releases showed, so the run is refused; --allow-composition publishes and the
    run records that the measure started over."""
    conn.execute("CREATE TABLE h.moved AS SELECT id * 7 AS pid, age, region, dx FROM h.ward")
    conn.execute("DROP TABLE h.ward")
    conn.commit()
    args = ("--source", "h.moved", "--key", "pid", "--algorithm", "mondrian", "--replace")
    before = released(conn)
    code, out = publish(dsn, *args)
    assert code == 4 and "cannot tell which rows of" in out["error"], out
    assert released(conn) == before and last_run(conn)[0] == "refused"
    code, out = publish(dsn, *args, "--allow-composition")
    assert code == 0, out
    status, metrics = last_run(conn)
    assert status == "succeeded" and metrics["allow_composition"] is True
    assert metrics["map_rekeyed"] == {"by": "none", "kept": 0}


def test_cbg_away_to_mondrian_and_back_is_measured_against_its_units(
    conn: psycopg.Connection, dsn: str, ward: random.Random
) -> None:
    """cbg's map (each row's unit) read by mondrian as groups and back: every step measured;
    cbg regrouping from scratch on return is refused. (The same l as the fixture's: a replace
    that raises l is refused where consumers already hold fewer values, which is right.)"""
    cbg = ("--sensitive", "dx", "--k", "3", "--l", "2")
    base = ("--source", "h.ward", "--key", "id", "--replace")
    code, out = publish(dsn, *base, "--algorithm", "cbg", models=cbg)
    assert code == 0, out
    churn(conn, ward, 10_000)
    code, out = publish(dsn, *base, "--algorithm", "mondrian", models=cbg)
    assert code == 0, out
    status, metrics = last_run(conn)
    assert metrics["composition"]["persisting"] == 600, metrics
    assert metrics["composition"]["rows_below_k"] == 0, metrics
    churn(conn, ward, 20_000)
    code, out = publish(dsn, *base, "--algorithm", "cbg", "--refresh-policy", "regroup",
                        models=cbg)  # fmt: skip
    assert code == 4 and "could narrow" in out["error"], out
    code, out = publish(dsn, *base, "--algorithm", "cbg", models=cbg)
    assert code == 0, out
    status, metrics = last_run(conn)
    composed = metrics["composition"]
    assert status == "succeeded" and composed["persisting"] == 660, composed
    assert composed["rows_below_k"] == 0 and composed["rows_below_l"] == 0, composed
