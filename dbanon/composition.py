"""What a consumer learns by intersecting the releases of one source, measured at each run.

A consumer may keep every release. For a person whose row persists, the class they fall in in
each release narrows them down: in the newest release, only the rows of their class whose
sensitive value appears in every earlier class of theirs are still plausible, and only the
sensitive values common to all those classes are plausible values. dbanon keeps, per source
row, its group in the latest release and that running intersection of values (a catalog table
per release, dbanon.group_map_<id>, never granted: no lock on it is shared by two releases'
runs, revision 0010), and at every run of a grouping release measures for each
persisting row:
- plausible rows: rows of its new class whose value is among its plausible values so far;
- plausible values: its plausible values so far that its new class also holds.
A run is refused when some persisting row would keep fewer plausible rows than the promised k
or fewer plausible values than the promised l (or p), unless composition is allowed. Values
are tagged ('v:' || value, 'n' for NULL) so NULL is a value of its own, as in the models.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from dbanon.db.catalog import Column, Relation

if TYPE_CHECKING:
    import numpy as np

    from dbanon.db.stream import Keys

COLUMNS = sql.SQL(
    "(release_id integer NOT NULL, key text NOT NULL, gid integer NOT NULL, vals text[])"
)
PRIVATE = (
    "Private: each source row of a grouping release, its group in the latest release and the "
    "sensitive values every release so far left plausible for it (tagged v:<value>, n for "
    "NULL). Never granted: it links released groups back to source keys."
)


@dataclass(frozen=True)
class Composition:
    persisting: int  # rows in both the previous releases and this one
    min_plausible_rows: int | None
    min_plausible_values: int | None  # None without a sensitive column
    rows_below_k: int
    rows_below_l: int

    def as_dict(self) -> dict[str, int | None]:
        return asdict(self)


def tag(col: Column | None, ref: str = "s") -> sql.Composable:
    if col is None:
        return sql.SQL("NULL::text")
    return sql.SQL("coalesce('v:' || {}.{}::text, 'n')").format(sql.Identifier(ref), col.ident)


NEW = sql.Identifier("dbanon_new_rows")  # this run's (key, gid, t), read by measure and store


def new_rows(
    conn: psycopg.Connection,
    source: Relation,
    key: Column,
    sensitive: Column | None,
    stage: sql.Composable,
) -> sql.Identifier:
    """The new release's rows with their tagged sensitive value, joined once for the run."""
    conn.execute(
        sql.SQL(
            "CREATE TEMP TABLE {new} ON COMMIT DROP AS "
            "SELECT st.key, st.gid, {t} AS t FROM {stage} st JOIN {src} s ON s.{key}::text = st.key"
        ).format(new=NEW, t=tag(sensitive), stage=stage, src=source.ident, key=key.ident)
    )
    conn.execute(sql.SQL("ANALYZE {}").format(NEW))
    return NEW


def has_map(conn: psycopg.Connection, release_id: int | None) -> bool:
    """Whether the release has a map (an earlier grouping run of it was recorded)."""
    return release_id is not None and bool(conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", [f"dbanon.{table_name(release_id)}"]
    ).fetchone()[0])  # fmt: skip


def measure(
    conn: psycopg.Connection, release_id: int, rows: sql.Identifier, k: int, values_needed: int
) -> Composition | None:
    """The intersection figures of this run against all earlier ones (None on a first run)."""
    if not has_map(conn, release_id):
        return None
    row = conn.execute(
        sql.SQL(
            """WITH new AS (SELECT key, gid, t FROM {rows}),
               cells AS (SELECT gid, t, count(*) AS n FROM new GROUP BY gid, t),
               sizes AS (SELECT gid, sum(n) AS n FROM cells GROUP BY gid),
               kept AS (SELECT n.gid, m.vals AS old FROM new n
                        JOIN {map} m ON m.key = n.key),
               pairs AS (SELECT gid, old, count(*) AS members FROM kept GROUP BY gid, old),
               matched AS (  -- per pair, the new class's rows and values among the old values
                   SELECT p.gid, p.old, sum(c.n) AS plausible_rows, count(c.n) AS values_left
                   FROM pairs p CROSS JOIN LATERAL unnest(p.old) v
                   LEFT JOIN cells c ON c.gid = p.gid AND c.t = v
                   WHERE p.old IS NOT NULL GROUP BY p.gid, p.old),
               judged AS (
                   SELECT p.members,
                          coalesce(m.plausible_rows, CASE WHEN p.old IS NULL THEN s.n END, 0)
                              AS plausible_rows,
                          CASE WHEN p.old IS NOT NULL THEN coalesce(m.values_left, 0) END
                              AS plausible_values
                   FROM pairs p JOIN sizes s USING (gid)
                   LEFT JOIN matched m ON m.gid = p.gid AND m.old = p.old)
               SELECT coalesce(sum(members), 0), min(plausible_rows), min(plausible_values),
                      coalesce(sum(members) FILTER (WHERE plausible_rows < %(k)s), 0),
                      coalesce(sum(members) FILTER (WHERE plausible_values < %(l)s), 0)
               FROM judged"""
        ).format(rows=rows, map=table(release_id)),
        {"k": k, "l": values_needed},
    ).fetchone()
    return Composition(
        int(row[0]),
        None if row[1] is None else int(row[1]),
        None if row[2] is None else int(row[2]),
        int(row[3]),
        int(row[4]),
    )


def table_name(release_id: int) -> str:
    """The release's map: a table of its own in schema dbanon (revision 0010)."""
    return f"group_map_{release_id}"


def table(release_id: int) -> sql.Identifier:
    return sql.Identifier("dbanon", table_name(release_id))


def store(conn: psycopg.Connection, release_id: int, rows: sql.Identifier) -> None:
    """Replace the release's map by this run's groups and running value intersections.

    The new map is written into a fresh table, its key indexed once by a sort, and renamed in
    for the old one: far cheaper than deleting and inserting rows of an indexed table (about
    3 s rather than 15 s per million rows). Only the release's own tables are locked."""
    name = table_name(release_id)
    fresh = sql.Identifier("dbanon", name + "_next")
    old = has_map(conn, release_id)
    conn.execute(sql.SQL("CREATE TABLE {} {}").format(fresh, COLUMNS))
    conn.execute(
        sql.SQL(
            """INSERT INTO {fresh}
               WITH new AS (SELECT key, gid, t FROM {rows}),
               cls AS (SELECT gid, array_agg(DISTINCT t) AS vals FROM new GROUP BY gid)
               SELECT %(rid)s, n.key, n.gid,
                      CASE WHEN n.t IS NULL THEN NULL
                           WHEN m.vals IS NULL THEN c.vals
                           ELSE ARRAY(SELECT unnest(m.vals) INTERSECT SELECT unnest(c.vals))
                      END
               FROM new n JOIN cls c USING (gid)
               LEFT JOIN {map} m ON m.key = n.key"""
        ).format(
            fresh=fresh, rows=rows,
            map=table(release_id) if old else sql.SQL("(SELECT NULL::text AS key, "
                                                       "NULL::text[] AS vals LIMIT 0)"),
        ),
        {"rid": release_id},
    )  # fmt: skip
    forget(conn, release_id)  # after the read of the old map above; frees its names
    conn.execute(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY (release_id, key)").format(
            fresh, sql.Identifier(f"{name}_pkey")
        )
    )
    conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(fresh, sql.Identifier(name)))
    conn.execute(
        sql.SQL("COMMENT ON TABLE {} IS {}").format(table(release_id), sql.Literal(PRIVATE))
    )


def previous_groups(
    conn: psycopg.Connection, release_id: int | None, keys: Keys
) -> np.ndarray | None:
    """Each row's group in the release's latest run (-1 for a new row), by the row's key;
    None without a map. The keys go in and the groups come back by binary COPY and meet in
    a join, so no Python object is made per row (a refresh of ten million rows stays within
    the memory of a first publish)."""
    import numpy as np

    from dbanon.db.stream import copy_columns, copy_in_ids

    if not has_map(conn, release_id):
        return None
    rows = sql.Identifier("dbanon_refresh_rows")
    conn.execute(
        sql.SQL("CREATE TEMP TABLE {} (key text, gid int4) ON COMMIT DROP").format(rows)
    )  # gid: the row's position in `keys`
    copy_in_ids(conn, rows, keys, np.arange(len(keys)))
    conn.execute(sql.SQL("ANALYZE {}").format(rows))
    at, old = copy_columns(
        conn,
        sql.SQL(
            "SELECT t.gid::float8, m.gid::float8 FROM {rows} t JOIN {map} m ON m.key = t.key"
        ).format(rows=rows, map=table(release_id)),
        ["float8", "float8"],
    )
    conn.execute(sql.SQL("DROP TABLE {}").format(rows))
    previous = np.full(len(keys), -1, dtype=np.int64)
    previous[np.asarray(at, dtype=np.int64)] = np.asarray(old, dtype=np.int64)
    return previous


def forget(conn: psycopg.Connection, release_id: int) -> None:
    """Drop the release's map, if it has one."""
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table(release_id)))


def values_needed(models: list) -> int:
    """The plausible values a release promises: its l (rounded up) or p, else 1."""
    needed = 1
    for m in models:
        for attr in ("l", "p"):
            v = getattr(m, attr, None)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                needed = max(needed, math.ceil(v))
    return needed
