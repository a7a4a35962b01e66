"""The noise-refresh attack's scenario (issue 31 item 2) and the command that writes its figures.

A table of people (id, age and hours as integers, job), a noise release of age and hours with
job kept, then a refresh after some people's age rose by a known amount (+1 at a birthday, +7):
tests.noiseattack counts what both releases leave of each changed person's true age. The
scenario drives dbanon through its command line only (a `run` callable: in-process in the
tests, `python -m dbanon` here); the attacker reads the released tables with plain SQL. The
private row map names each target's row in the first release (the attacker's own
identification of its targets, given to it).

    python tests/noiserefresh.py [--dsn DSN] [--out docs/noise/attack.json] [--label TEXT]

runs the scenario for each configuration in CONFIGS (the embedded server when no DSN is given)
and writes the figures that docs/noise.md's table is generated from.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import noise_map  # noqa: E402
from noiseattack import attack, figures, read  # noqa: E402

Run = Callable[..., tuple[int, dict[str, Any]]]  # (*args) -> (exit code, JSON output)
COLUMNS = ("age", "hours", "job")  # as the attacker reads a release: the noisy age first
CHANGES = (1.0, 7.0)  # known changes of age
PER_CHANGE = 60  # changed people per known change
CONFIGS: dict[str, tuple[str, ...]] = {
    "noise (defaults)": ("--algorithm", "noise"),
    "noise --noise-floor 0": ("--algorithm", "noise", "--noise-floor", "0"),
    "ina (defaults)": ("--algorithm", "ina"),
}


def make_people(conn: psycopg.Connection, schema: str, rows: int, seed: int) -> None:
    """SCHEMA.people: id, age 18..90, hours 1..99 (integers), job j0..j8."""
    rng = np.random.default_rng(seed)
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    table = sql.Identifier(schema, "people")
    conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, age int, hours int, job text)")
                 .format(table))  # fmt: skip
    with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} FROM STDIN").format(table)) as copy:
        for i in range(rows):
            copy.write_row((i + 1, int(rng.integers(18, 91)), int(rng.integers(1, 100)),
                            f"j{i % 9}"))  # fmt: skip


def rows_by_key(conn: psycopg.Connection, name: str, relation: str) -> dict[int, int]:
    """Source key -> index of its row in `read(relation)`'s order, through the private map."""
    schema, rel = relation.split(".")
    got = conn.execute(
        sql.SQL(
            "SELECT m.key::int, r.dbanon_row FROM {} r JOIN {} m ON m.row_id = r.dbanon_row"
        ).format(sql.Identifier(schema, rel), noise_map(conn, name)),
    ).fetchall()
    order = [r for (r,) in conn.execute(
        sql.SQL("SELECT dbanon_row FROM {}").format(sql.Identifier(schema, rel)))]  # fmt: skip
    at = {row: i for i, row in enumerate(order)}
    return {key: at[row] for key, row in got}


def _largest_moves(
    conn: psycopg.Connection, name: str, source: str, relation: str
) -> tuple[float, float]:
    """The largest |released - true| of age and of hours, through the private map."""
    return conn.execute(
        sql.SQL(
            "SELECT max(abs(r.age - s.age)), max(abs(r.hours - s.hours)) FROM {} r "
            "JOIN {} m ON m.row_id = r.dbanon_row JOIN {} s ON s.id::text = m.key"
        ).format(sql.Identifier(*relation.split(".")), noise_map(conn, name),
                 sql.Identifier(*source.split("."))),  # fmt: skip
    ).fetchone()


def publish(
    conn: psycopg.Connection, run: Run, options: tuple[str, ...], rows: int, seed: int
) -> str:
    """A fresh people table and its release (both named by the returned NAME)."""
    name = f"n31_{uuid.uuid4().hex[:8]}"
    make_people(conn, name, rows, seed)
    code, out = run("publish", name, "--source", f"{name}.people", "--key", "id",
                    "--columns", "age,hours", "--keep", "job", "--seed", str(seed),
                    *options)  # fmt: skip
    assert code == 0, out
    return name


def support(
    conn: psycopg.Connection, run: Run, name: str, options: tuple[str, ...]
) -> tuple[float, float, float]:
    """What the attacker knows of the noise: the least and largest move of age (the floor and
    the size times the column's range), and the largest move of hours."""
    code, report = run("report", name)
    assert code == 0, report
    scale, hours = conn.execute(  # the attacker knows the columns' ranges and the options
        sql.SQL("SELECT max(age) - min(age), max(hours) - min(hours) FROM {}")
        .format(sql.Identifier(name, "people"))
    ).fetchone()  # fmt: skip
    given = dict(zip(options[::2], options[1::2], strict=False))
    lo = report["method_metrics"]["noise_floor"]["age"] * scale
    if given["--algorithm"] == "noise":
        size = float(given.get("--size", 0.05))
        return lo, size * scale, size * hours
    # ina's size is the tuple's own: the attacker is given the largest move of each column
    return lo, *_largest_moves(conn, name, f"{name}.people", f"released.{name}")


def change_age(conn: psycopg.Connection, name: str, change: float, keys: list[int]) -> None:
    conn.execute(sql.SQL("UPDATE {} SET age = age + %s WHERE id = ANY(%s)").format(
        sql.Identifier(name, "people")), [int(change), keys])  # fmt: skip


def scenario(
    conn: psycopg.Connection,
    run: Run,
    options: tuple[str, ...],
    rows: int = 1_000,
    seed: int = 31,
) -> list[dict[str, Any]]:
    """Publish, change PER_CHANGE people's age by each of CHANGES, refresh, attack: one result
    per changed person (tests.noiseattack.attack). Leaves its schema and release behind."""
    name = publish(conn, run, options, rows, seed)
    relation = f"released.{name}"
    lo, hi, far = support(conn, run, name, options)
    first = read(conn, relation, COLUMNS)
    where = rows_by_key(conn, name, relation)
    picked = np.random.default_rng(seed + 1).choice(rows, PER_CHANGE * len(CHANGES),
                                                    replace=False) + 1  # fmt: skip
    targets: dict[int, float] = {}
    for j, change in enumerate(CHANGES):
        keys = [int(k) for k in picked[j * PER_CHANGE : (j + 1) * PER_CHANGE]]
        change_age(conn, name, change, keys)
        targets |= {where[k]: change for k in keys}
    code, out = run("refresh", name)
    assert code == 0, out
    second = read(conn, relation, COLUMNS)
    return attack(first, second, targets, 0, lo, hi, {1: far})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", help="PostgreSQL to run on (default: dbanon's embedded one)")
    parser.add_argument("--out", default="docs/noise/attack.json")
    parser.add_argument("--rows", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--label", default="", help="Which code ran (kept in the file).")
    args = parser.parse_args()
    dsn = args.dsn
    if dsn is None:
        from dbanon.db import server  # the driver runs the product; the attacker never imports it

        dsn = server.start()

    def run(*argv: str) -> tuple[int, dict[str, Any]]:
        done = subprocess.run([sys.executable, "-m", "dbanon", "--dsn", dsn, "--json", *argv],
                              capture_output=True, text=True)  # fmt: skip
        return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}

    subprocess.run([sys.executable, "-m", "dbanon", "--dsn", dsn, "init"], check=True,
                   capture_output=True)  # fmt: skip
    data: dict[str, Any] = {"code": args.label, "rows": args.rows, "seed": args.seed,
                            "columns": ["age", "hours"], "changed_per_change": PER_CHANGE,
                            "configs": {}}  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        for label, options in CONFIGS.items():
            results = scenario(conn, run, options, args.rows, args.seed)
            data["configs"][label] = {"options": list(options), "changes": figures(results)}
            print(label, json.dumps(data["configs"][label]["changes"]), file=sys.stderr)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
