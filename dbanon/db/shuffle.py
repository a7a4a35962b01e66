"""The order a table release's rows are written in: a secret permutation that the server can
sort in parallel.

`ORDER BY random()` shuffles, but random() is parallel restricted, so the whole sort runs in
the leader (1M census rows: 0.8 s of a 1.9 s CREATE TABLE AS). A keyed hash of each row's
place (its table and ctid) under a fresh 63-bit secret is as unpredictable to anyone without
the secret, and parallel safe: workers sort their shares and the leader merges them (1.35 s for
the same statement). The secret is drawn for the statement and kept nowhere; the places are the
source's, which a consumer cannot read. Only relations with places (tables, materialised views,
partitioned tables: the table's oid tells partitions apart); any other source keeps random(),
and so does a view release, whose definition is readable (a secret in it would not be one).
"""

from __future__ import annotations

import secrets

from psycopg import sql

from dbanon.db.catalog import Relation

_PLACED = ("r", "m", "p")


def shuffle_key(rel: Relation, alias: str) -> sql.Composable:
    """An ORDER BY key shuffling the rows of `rel` (read as `alias`) in a secret order."""
    if rel.kind not in _PLACED:
        return sql.SQL("random()")
    place = sql.SQL("{a}.tableoid::text || ' ' || {a}.ctid::text").format(a=sql.Identifier(alias))
    return sql.SQL("hashtextextended({}, {})").format(place, sql.Literal(secrets.randbits(63)))
