"""Noise across refreshes (issue 22 item 3), checked on the released tables by plain SQL and numpy.

The attacker keeps every release. An unchanged value must come back exactly as it was (nothing
to average away); a changed value must get fresh noise, so the difference of two releases is not
the true change; and the row ids and row order of one release must not point into another's.
"""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from helpers import cli_json, make_table

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
    rows = conn.execute(
        """SELECT m.key::int, row_number() OVER (ORDER BY r.dbanon_row), r.dbanon_row, r.x, r.y
           FROM released.n r JOIN dbanon.noise_map m ON m.row_id = r.dbanon_row
           JOIN dbanon.release l ON l.id = m.release_id AND l.name = 'n'"""
    ).fetchall()
    return {k: (pos, row, x, y) for k, pos, row, x, y in rows}


@pytest.mark.parametrize("method", ["noise", "ina"])
def test_refresh_keeps_unchanged_values_and_hides_exact_changes(
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
    # changed rows: no released difference equals the true change
    diffs = np.array([second[k][2] - first[k][2] for k in changed])
    assert not np.isclose(diffs, CHANGE, rtol=0, atol=1e-6).any(), diffs
    assert len(np.unique(np.round(diffs, 6))) == 50  # fresh noise each, not one shift
    if method == "noise":  # noise per value: the row's unchanged column keeps its noise
        assert all(first[k][3] == second[k][3] for k in changed)
    else:  # ina's noise size depends on the tuple: fresh noise in every column
        assert not any(first[k][3] == second[k][3] for k in changed)

    # row ids and order: fresh every run, unlinkable across releases
    assert not {v[1] for v in first.values()} & {v[1] for v in second.values()}
    a = np.array([first[k][0] for k in sorted(first)], dtype=np.float64)
    b = np.array([second[k][0] for k in sorted(first)], dtype=np.float64)
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.05  # positions are ranks: Spearman's rho
