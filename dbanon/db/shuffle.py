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

On PostgreSQL 14 and later the place is hashed as it is (`hashtidextended`, under the secret
XOR the table's oid): its text took most of the key's cost, 0.23 of 0.25 s of a serial scan of
1M rows, and the census release's CREATE TABLE AS went from 2.1 to 1.8 s. Earlier servers, and
a caller without a connection to ask, hash the place's text.
"""

from __future__ import annotations

import secrets

import psycopg
from psycopg import sql

from dbanon.db.catalog import Relation

_PLACED = ("r", "m", "p")


def shuffle_key(
    rel: Relation, alias: str, conn: psycopg.Connection | None = None
) -> sql.Composable:
    """An ORDER BY key shuffling the rows of `rel` (read as `alias`) in a secret order."""
    if rel.kind not in _PLACED:
        return sql.SQL("random()")
    a, secret = sql.Identifier(alias), sql.Literal(secrets.randbits(63))
    if conn is not None and conn.info.server_version >= 140000:
        return sql.SQL("hashtidextended({a}.ctid, {s} # {a}.tableoid::int8)").format(a=a, s=secret)
    place = sql.SQL("{a}.tableoid::text || ' ' || {a}.ctid::text").format(a=a)
    return sql.SQL("hashtextextended({}, {})").format(place, secret)
