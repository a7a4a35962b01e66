"""A perturbed release holds what the reference path gives: every value recomputed here from the
source with the numpy and hashlib code (dbanon.algorithms.ina: prf_uniform, nearest_two,
ina_sizes, perturb) and the kept state, row by row through the private map, equals the released
one bit for bit, at publish and after a refresh that keeps the state. The build computes the
same with compiled code (dbanon.algorithms.prf, inakernels) from one COPY of the source."""

from __future__ import annotations

import json

import numpy as np
import psycopg
import pytest
from helpers import cli_json, make_table, noise_map
from psycopg import sql

from dbanon.algorithms.ina import ina_sizes, nearest_two, perturb, prf_uniform

KEYS = ["", "é", "漢字-🙂", "x" * 200, "tab\there", "'q'", "a b"]


@pytest.fixture
def people(conn: psycopg.Connection) -> psycopg.Connection:
    rng = np.random.default_rng(4)
    rows = []
    for i in range(3000):
        key = f"{KEYS[i % len(KEYS)]}{i}"
        x = -0.0 if i == 7 else float(rng.normal() * 50)
        rows.append((key, int(rng.integers(18, 90)), x, int(rng.integers(0, 2**40)),
                     f"dx{i % 5}", None if i % 9 == 0 else f"n{i % 4}"))  # fmt: skip
    make_table(conn, "h", "people", [("k", "text PRIMARY KEY"), ("age", "integer"),
               ("x", "float8"), ("big", "bigint"), ("dx", "text"), ("note", "text")],
               rows)  # fmt: skip
    conn.commit()
    return conn


CASES = {
    "noise": ("--algorithm", "noise", "--columns", "age,x,big", "--size", "0.05"),
    "noise-shaped": ("--algorithm", "noise", "--columns", "age,x,big", "--size", "0.1",
                     "--integral", "--clamp"),  # fmt: skip
    "ina": ("--algorithm", "ina", "--columns", "age,x", "--sample", "300", "--beta", "6"),
    "ina-paper": ("--algorithm", "ina", "--columns", "age,x,big", "--bound", "paper",
                  "--noise-floor", "0.01"),  # fmt: skip
}


def expected(conn: psycopg.Connection, name: str, cols: list[str], spec: dict) -> dict:
    """Key -> the values the reference path releases, from the source and the kept state."""
    rid = conn.execute("SELECT id FROM dbanon.release WHERE name = %s", [name]).fetchone()[0]
    secret, state = conn.execute(
        "SELECT secret, state FROM dbanon.noise_state WHERE release_id = %s", [rid]).fetchone()
    rows = conn.execute(sql.SQL("SELECT k, {} FROM h.people ORDER BY k").format(
        sql.SQL(", ").join(sql.SQL("{}::float8").format(sql.Identifier(c)) for c in cols))
    ).fetchall()  # fmt: skip
    keys = [r[0] for r in rows]
    x = np.array([r[1:] for r in rows], dtype=np.float64)
    alpha, extra = np.array(state["alpha"]), state["extra"]
    floor = np.array(extra["floor"])
    u = prf_uniform(bytes(secret), keys, x, extra["keyed"])
    if spec["method"] == "ina":
        _, r1, r2 = nearest_two(x, np.array(extra["refs"]), alpha)
        sizes = ina_sizes(r1, r2, x.shape[1], spec["options"].get("bound", "strict"))
    else:
        sizes = np.full(len(x), spec["options"]["size"])
    out = perturb(x, u, sizes, alpha, floor)
    if spec["options"].get("clamp"):
        out = np.clip(out, x.min(0), x.max(0))
    if spec["options"].get("integral"):  # integer columns: whole numbers of their type
        whole = [spec["columns"][c] in ("integer", "bigint") for c in cols]
        out[:, whole] = np.rint(out[:, whole])
    return {k: tuple(v) for k, v in zip(keys, out.tolist(), strict=True)}


def released(conn: psycopg.Connection, name: str, cols: list[str]) -> dict:
    return {r[0]: tuple(r[1:]) for r in conn.execute(sql.SQL(
        "SELECT m.key, {} FROM released.{} r JOIN {} m ON m.row_id = r.dbanon_row").format(
        sql.SQL(", ").join(sql.SQL("r.{}::float8").format(sql.Identifier(c)) for c in cols),
        sql.Identifier(name), noise_map(conn, name))).fetchall()}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_released_values_are_the_reference_paths(
    people: psycopg.Connection, dsn: str, case: str
) -> None:
    args = CASES[case]
    name = case.replace("-", "_")
    cols = args[args.index("--columns") + 1].split(",")
    code, out = cli_json(dsn, "publish", name, "--source", "h.people", "--key", "k",
                         "--sensitive", "dx", "--keep", "note", *args, "--seed", "5")  # fmt: skip
    assert code == 0, out
    spec = json.loads(people.execute("SELECT spec::text FROM dbanon.release WHERE name = %s",
                                     [name]).fetchone()[0])  # fmt: skip
    want = expected(people, name, cols, spec)
    got = released(people, name, cols)
    assert got.keys() == want.keys()
    assert [k for k in want if np.array(got[k]).tobytes() != np.array(want[k]).tobytes()] == []
    # the declared columns only, in the source's order; a refresh after changes keeps the noise
    assert [c for (c,) in people.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "ORDER BY attnum", [f"released.{name}"])] == ["dbanon_row", *[
            c for c in ("age", "x", "big", "dx", "note") if c in cols or c in ("dx", "note")]]
    people.execute("UPDATE h.people SET age = age + 1 WHERE k LIKE 'é%'")
    people.execute("DELETE FROM h.people WHERE k LIKE 'a b%'")
    people.commit()
    code, out = cli_json(dsn, "refresh", name)
    assert code == 0, out
    want, got = expected(people, name, cols, spec), released(people, name, cols)
    assert got.keys() == want.keys()
    assert [k for k in want if np.array(got[k]).tobytes() != np.array(want[k]).tobytes()] == []
