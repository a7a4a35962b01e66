"""COPY streaming between PostgreSQL and numpy: QI columns out, group ids back in.

The binary COPY protocol avoids text parsing on both sides; psycopg converts each field by the
types set here, so every column is cast in SQL to float8 or text first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import psycopg
from psycopg import sql


def copy_out(
    conn: psycopg.Connection, query: sql.Composable, types: Sequence[str]
) -> list[list[object]]:
    """Columns of a query's result (one list per column), streamed with binary COPY."""
    cols: list[list[object]] = [[] for _ in types]
    appends = [c.append for c in cols]
    with (
        conn.cursor() as cur,
        cur.copy(sql.SQL("COPY ({}) TO STDOUT (FORMAT BINARY)").format(query)) as copy,
    ):
        copy.set_types(list(types))
        for row in copy.rows():
            for append, value in zip(appends, row, strict=True):
                append(value)
    return cols


def copy_in_ids(
    conn: psycopg.Connection, table: sql.Identifier, keys: Sequence[str], ids: np.ndarray
) -> None:
    """Write (key text, gid int4) pairs into a staging table with binary COPY."""
    with (
        conn.cursor() as cur,
        cur.copy(sql.SQL("COPY {} (key, gid) FROM STDIN (FORMAT BINARY)").format(table)) as copy,
    ):
        copy.set_types(["text", "int4"])
        for key, gid in zip(keys, ids.tolist(), strict=True):
            copy.write_row((key, gid))
