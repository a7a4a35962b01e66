"""The histogram of a relation's class sizes (size -> number of classes) for a grouping.

A publish reports its release's classes (rows, classes, smallest, largest) and its prosecutor
risk; both are functions of this one histogram, which costs a GROUP BY of the whole release.
Inside `shared(conn)` (a publish's figures step, where the release no longer changes) it is
counted once per relation and grouping and read by both; outside, every call counts afresh,
as a check of a live table must.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    import numpy as np

_SHARED: dict[int, dict[tuple[str, ...], dict[int, int]]] = {}


@contextmanager
def shared(conn: psycopg.Connection) -> Iterator[None]:
    """Count each histogram once on `conn` until the block ends."""
    _SHARED[id(conn)] = {}
    try:
        yield
    finally:
        _SHARED.pop(id(conn), None)


def histogram(
    conn: psycopg.Connection, relation: sql.Composable, by: Sequence[str], count: str | None = None
) -> dict[int, int]:
    """Size -> classes of `relation` grouped by the columns `by` (NULLs group together, as in
    GROUP BY); with `count`, a class's size is the sum of that column (rows it stands for)."""
    memo = _SHARED.get(id(conn))
    key = (relation.as_string(conn), *by, count or "")
    if memo is not None and key in memo:
        return memo[key]
    rows = sql.SQL("count(*)") if count is None else sql.SQL("sum({})::bigint").format(
        sql.Identifier(count))  # fmt: skip
    hist = {int(n): int(c) for n, c in conn.execute(
        sql.SQL("SELECT n, count(*) FROM (SELECT {} AS n FROM {} GROUP BY {}) c GROUP BY n").format(
            rows, relation, sql.SQL(", ").join(map(sql.Identifier, by)))
    ).fetchall() if n is not None}  # fmt: skip
    if memo is not None:
        memo[key] = hist
    return hist


def remember(
    conn: psycopg.Connection, relation: sql.Composable, by: Sequence[str], hist: dict[int, int]
) -> None:
    """Inside `shared(conn)`: take `hist` as the histogram of `relation` by `by` unless it was
    counted already. For a histogram the build counted from the rows it wrote, handed to the
    figures once the checks (which count their own) are done."""
    memo = _SHARED.get(id(conn))
    if memo is not None:
        memo.setdefault((relation.as_string(conn), *by, ""), dict(hist))


def histogram_of_keys(key: np.ndarray) -> dict[int, int]:
    """Size -> classes of rows grouped by equal keys (one per row): what `histogram` counts,
    for keys that are equal exactly when the rows' values are. (numpy imported here: `dbanon
    check` imports this module and starts without it.)"""
    import numpy as np

    counts = np.unique(key, return_counts=True)[1]
    sizes, classes = np.unique(counts, return_counts=True)
    return {int(n): int(c) for n, c in zip(sizes.tolist(), classes.tolist(), strict=True)}


def of_sizes(sizes: Sequence[int]) -> dict[int, int]:
    """Size -> classes of classes of these sizes (each class's rows, as a check counted them)."""
    return dict(Counter(int(n) for n in sizes))


def figures(hist: dict[int, int]) -> dict[str, int]:
    """rows, classes, min_class_size and max_class_size of a histogram."""
    return {
        "rows": sum(n * c for n, c in hist.items()), "classes": sum(hist.values()),
        "min_class_size": min(hist, default=0), "max_class_size": max(hist, default=0),
    }  # fmt: skip
