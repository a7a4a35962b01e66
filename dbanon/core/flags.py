"""Personalised privacy consent as data: which of their own values each person marked sensitive.

A flags relation holds one row per flagged value: the source's row key (a column of the same
name as the release's `--key`) and `column_name`, the column whose value in that row its owner
marked sensitive. The DBA keeps it as any other table (a consent form writes to it); a release
reads it at every run, so a refresh follows changed consent. A column named in `--sensitive` is
flagged in every row without rows in the relation.

`generate` is the seeded stand-in for consent used by the experiments and the demo: it marks a
given share of the rows of each semi-sensitive column, the rows drawn by a hash of (seed, column,
key), so the same seed gives the same flags whatever the physical order of the source.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import psycopg
from psycopg import sql

from dbanon.db import catalog
from dbanon.db.catalog import Column, Relation
from dbanon.errors import SHOWN_OFFENDERS, DbanonError, offenders, quote_ident

COLUMN = "column_name"


def relation_of(conn: psycopg.Connection, name: str, key: Column) -> Relation:
    """The flags relation named by `--flags`, with its two columns checked."""
    rel = catalog.relation(conn, name)
    cols = catalog.columns(conn, rel)
    missing = [c for c in (key.name, COLUMN) if c not in cols]
    if missing:
        raise DbanonError(
            f"flags relation {rel} needs columns {quote_ident(key.name)} (the source key) and "
            f"{quote_ident(COLUMN)}; it lacks {offenders(missing)}"
        )
    return rel


# Key types whose values are equal exactly when their texts are: a flag's key of the source
# key's own such type is compared as it is (a hash join of numbers: a first publish's check of
# a million-row source's flags took 0.44 s by text, 0.17 s so), any other as text (a flag's key
# may be typed otherwise than the source's).
_EQUAL_AS_TEXT = ("smallint", "integer", "bigint")


def key_form(conn: psycopg.Connection, flags: Relation, key: Column
             ) -> Callable[[sql.Composable], sql.Composable]:  # fmt: skip
    """How a key, the source's or a flag's, is compared: as it is where both columns are of
    one integer type, else as its text."""
    theirs = catalog.columns(conn, flags).get(key.name)
    if theirs is not None and theirs.type == key.type and key.type in _EQUAL_AS_TEXT:
        return lambda e: e
    return lambda e: sql.SQL("{}::text").format(e)


def _named(conn: psycopg.Connection, flags: Relation, key: Column) -> sql.Composable:
    """The condition that flag row f names source row s."""
    form = key_form(conn, flags, key)
    return sql.SQL("{} = {}").format(form(sql.SQL("s.{}").format(key.ident)),
                                     form(sql.SQL("f.{}").format(sql.Identifier(key.name))))


def _live(conn: psycopg.Connection, flags: Relation, source: Relation, key: Column
          ) -> sql.Composable:  # fmt: skip
    """The flag rows whose key the source still has."""
    return sql.SQL("SELECT f.* FROM {f} f WHERE EXISTS (SELECT 1 FROM {src} s WHERE {named})"
                   ).format(f=flags.ident, src=source.ident, named=_named(conn, flags, key))


def stale(conn: psycopg.Connection, flags: Relation, source: Relation, key: Column) -> int:
    """How many flag rows name a key the source no longer has (ignored by a refresh)."""
    return int(
        conn.execute(
            sql.SQL("SELECT count(*) FROM {f} f WHERE NOT EXISTS "
                    "(SELECT 1 FROM {src} s WHERE {named})"
                    ).format(f=flags.ident, src=source.ident, named=_named(conn, flags, key))
        ).fetchone()[0]
    )  # fmt: skip


def validate(
    conn: psycopg.Connection, flags: Relation, source: Relation, key: Column, qi: list[Column],
    refresh: bool = False,
) -> dict[str, int]:  # fmt: skip
    """Flagged values per QI column; a one-line error for a NULL, or a flag naming a column
    that is not a quasi-identifier or a value twice (how many, and which). A flag naming a key
    the source lacks is an error at a first publish (the relation likely keys another table),
    and ignored by a refresh (`refresh`): its row was deleted since, and consent kept with the
    data need not be cleaned first; `stale` counts those for the run record."""
    k, c = sql.Identifier(key.name), sql.Identifier(COLUMN)
    nulls = conn.execute(
        sql.SQL("SELECT count(*) FROM {f} WHERE {k} IS NULL OR {c} IS NULL").format(
            f=flags.ident, k=k, c=c
        )
    ).fetchone()[0]
    if nulls:
        raise DbanonError(f"flags relation {flags} has {nulls} rows with a NULL key or column")
    if not refresh:
        unknown, rows, sample = conn.execute(
            sql.SQL(
                """SELECT count(DISTINCT f.{k}), count(*),
                          (array_agg(DISTINCT f.{k}::text ORDER BY f.{k}::text))[1:{n}]
                   FROM {f} f
                   WHERE NOT EXISTS (SELECT 1 FROM {src} s WHERE {named})"""
            ).format(
                f=flags.ident, k=k, src=source.ident, named=_named(conn, flags, key),
                n=sql.Literal(SHOWN_OFFENDERS),
            )
        ).fetchone()
        if unknown:
            listed = ", ".join(repr(v) for v in sample)
            more = f", ... ({unknown} in all)" if unknown > len(sample) else ""
            raise DbanonError(
                f"flags relation {flags} names {unknown} keys that {source} lacks, in {rows} "
                f"flag rows: {listed}{more}"
            )
    # A first publish refused any flag of a key the source lacks (above): every flag is live.
    live = _live(conn, flags, source, key) if refresh else sql.SQL("SELECT * FROM {}").format(
        flags.ident)  # fmt: skip
    per_column = dict(
        conn.execute(
            sql.SQL("SELECT {c}::text, count(*) FROM ({live}) f GROUP BY 1 ORDER BY 1").format(
                c=c, live=live
            )
        ).fetchall()
    )
    names = {q.name for q in qi}
    unknown_cols = sorted(col for col in per_column if col not in names)
    if unknown_cols:
        rows = sum(per_column[col] for col in unknown_cols)
        raise DbanonError(
            f"flags relation {flags} names {len(unknown_cols)} columns that are not "
            f"quasi-identifiers (--qi) of {source} in {rows} rows: {offenders(unknown_cols)}"
        )
    twice = conn.execute(
        sql.SQL(
            "SELECT count(*) FROM "
            "(SELECT 1 FROM ({live}) f GROUP BY {k}, {c} HAVING count(*) > 1) d"
        ).format(live=live, k=k, c=c)
    ).fetchone()[0]
    if twice:
        raise DbanonError(f"flags relation {flags} flags {twice} values more than once")
    return {col: int(n) for col, n in per_column.items()}


def masks(
    conn: psycopg.Connection, flags: Relation | None, key: Column, keys: list[str],
    columns: list[str],
) -> dict[str, np.ndarray]:  # fmt: skip
    """Per column, a boolean mask over `keys` (the source keys as text, in extraction order):
    which values are flagged."""
    out = {c: np.zeros(len(keys), dtype=bool) for c in columns}
    if flags is None:
        return out
    where = {k: i for i, k in enumerate(keys)}
    rows = conn.execute(
        sql.SQL("SELECT {k}::text, {c}::text FROM {f}").format(
            k=sql.Identifier(key.name), c=sql.Identifier(COLUMN), f=flags.ident
        )
    ).fetchall()
    for k, col in rows:
        if col in out and k in where:
            out[col][where[k]] = True
    return out


def generate(
    conn: psycopg.Connection, source: Relation, key: Column, columns: list[str], density: float,
    into: str, seed: int = 0,
) -> int:  # fmt: skip
    """CREATE TABLE `into` (key, column_name) flagging round(density x rows) values of each
    column, drawn by md5(seed, column, key); returns the number of flags written."""
    if not 0 < density < 1:
        raise DbanonError(f"--density must be in (0, 1), got {density}")
    cols = catalog.columns(conn, source)
    catalog.require_columns(cols, source, columns)
    schema, name = catalog.parse_target(into)
    target = sql.Identifier(schema or "public", name)
    if catalog.find_relation(conn, f"{schema or 'public'}.{name}") is not None:
        raise DbanonError(f"{schema or 'public'}.{name} already exists")
    conn.execute(
        sql.SQL("CREATE TABLE {t} AS SELECT {k}, NULL::text AS {c} FROM {src} LIMIT 0").format(
            t=target, k=key.ident, c=sql.Identifier(COLUMN), src=source.ident
        )
    )
    rows = catalog.count_rows(conn, source)
    for col in columns:
        conn.execute(
            sql.SQL(
                """INSERT INTO {t} SELECT {k}, {col} FROM {src}
                   ORDER BY md5({seed} || '/' || {col} || '/' || {k}::text) LIMIT {n}"""
            ).format(
                t=target, k=key.ident, col=sql.Literal(col), src=source.ident,
                seed=sql.Literal(str(seed)), n=sql.Literal(round(density * rows)),
            )
        )  # fmt: skip
    return round(density * rows) * len(columns)


def draw(n: int, columns: list[str], density: float, seed: int = 0) -> dict[str, np.ndarray]:
    """The in-memory twin of `generate` for the experiments: per column a mask flagging
    round(density x n) of n rows, drawn by numpy's default_rng((seed, column number))."""
    if not 0 < density < 1:
        raise DbanonError(f"--density must be in (0, 1), got {density}")
    out = {}
    for i, col in enumerate(columns):
        mask = np.zeros(n, dtype=bool)
        mask[np.random.default_rng([seed, i]).choice(n, round(density * n), replace=False)] = True
        out[col] = mask
    return out
