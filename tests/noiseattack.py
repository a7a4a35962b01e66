"""An attacker on noise releases over refreshes (issue 31 item 2), independent of dbanon: plain
SQL reads of the released tables and numpy, nothing imported from the package.

The attacker knows the algorithm and its documented support: a value x is released as x + n,
the magnitude |n| in [lo, hi] (for `noise`: floor * scale to size * scale), either sign. It
keeps every release, knows which released row of the first release is its target and by how
much the target's value changed before the second (+1 at a birthday, +7). It links the target to
the second release by the columns that did not change (released values equal), shifts the
second release's value back by the known change, and counts the integers x (the column is an
integer) that both releases leave: x with |y1 - x| and |y2 - d - x| both in [lo, hi]. One
release alone leaves the integers whose distance to y is in [lo, hi]; a person is narrowed when
two releases leave fewer than that, pinned when they leave one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

SLACK = 1e-7  # the attacker keeps a candidate within float rounding of the support's edge


def read(conn: psycopg.Connection, relation: str, columns: Sequence[str]) -> list[tuple]:
    """Every released row of RELATION as a tuple of COLUMNS (plain SQL, as a consumer reads)."""
    schema, name = relation.split(".")
    return conn.execute(
        sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(sql.Identifier(c) for c in columns), sql.Identifier(schema, name)
        )
    ).fetchall()


def candidates(y: float, lo: float, hi: float) -> set[int]:
    """The integers x a released y leaves: lo <= |y - x| <= hi (closed, with SLACK)."""
    first, last = math.ceil(y - hi - SLACK), math.floor(y + hi + SLACK)
    return {x for x in range(first, last + 1) if lo - SLACK <= abs(y - x) <= hi + SLACK}


def partners(
    second: list[tuple], target: tuple, column: int, noisy: dict[int, float]
) -> list[tuple]:
    """Rows of the second release that may be the target: equal in every other column (an
    unchanged value that keeps its noise links the rows); if none is, every row whose kept
    columns are equal and whose other noisy columns (j -> the noise's largest magnitude) lie
    within twice that of the target's, so that the same true value may lie under both."""
    others = [j for j in range(len(target)) if j != column]
    same = [r for r in second if all(r[j] == target[j] for j in others)]
    if same:
        return same
    return [r for r in second if all(
        abs(r[j] - target[j]) <= 2 * noisy[j] + SLACK if j in noisy else r[j] == target[j]
        for j in others)]  # fmt: skip


def attack(
    first: list[tuple],
    second: list[tuple],
    targets: dict[int, float],
    column: int,
    lo: float,
    hi: float,
    noisy: dict[int, float] | None = None,
) -> list[dict[str, Any]]:
    """Per target (index of its row in FIRST -> its known change): the candidates the first
    release leaves and those both leave: the union, over the rows it may be in the second
    release (`partners`), of what that row, shifted back by the change, and the first leave."""
    out = []
    for i, change in targets.items():
        row = first[i]
        one_first = candidates(row[column], lo, hi)
        found = partners(second, row, column, noisy or {})
        both: set[int] = set()
        for p in found:  # a candidate any partner leaves together with the first release
            both |= one_first & candidates(p[column] - change, lo, hi)
        one = len(one_first)
        out.append({"change": change, "linked": len(found) == 1, "partners": len(found),
                    "one": one, "two": len(both)})  # fmt: skip
    return out


def figures(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per known change: changed people, linked, min/median candidates after one release and
    after two, how many two releases narrowed below one, and how many they pinned to one."""
    out: dict[str, dict[str, Any]] = {}
    for change in sorted({r["change"] for r in results}):
        rs = [r for r in results if r["change"] == change]
        one = np.array([r["one"] for r in rs])
        two = np.array([r["two"] for r in rs])
        out[f"{change:+g}"] = {
            "changed": len(rs),
            "linked": sum(r["linked"] for r in rs),
            "one_min": int(one.min()),
            "one_median": float(np.median(one)),
            "two_min": int(two.min()),
            "two_median": float(np.median(two)),
            "narrowed": int((two < one).sum()),
            "pinned": int((two <= 1).sum()),
        }
    return out
