"""What a consumer learns by intersecting the releases of one source, measured at each run.

A consumer may keep every release. For a person whose row persists, the class they fall in in
each release narrows them down: in the newest release, only the rows of their class whose
sensitive value appears in every earlier class of theirs are still plausible, and only the
sensitive values common to all those classes are plausible values. dbanon keeps, per source
row, its group in the latest release and that running intersection of values (a catalog
table per release, dbanon.group_map_<release id>, never granted), and at every run of a
grouping release measures for each persisting row:
- plausible rows: rows of its new class whose value is among its plausible values so far;
- plausible values: its plausible values so far that its new class also holds.
A run is refused when some persisting row would keep fewer plausible rows than the promised k
or fewer plausible values than the promised l (or p), unless composition is allowed. A model
may promise more of the values than their number (`PrivacyModel.spread`): (θ,k) promises θ
categories each showing need_c distinct values, so a persisting row's plausible values must
still fill θ categories to their need_c (plausible categories), need_c taken from this run's
release as its check takes it. Values are tagged ('v:' || value, 'n' for NULL) so NULL is a
value of its own, as in the models.

A release whose sensitive values are published per bucket apart from the classes (cbg: QIT and
ST) shows a row's bucket, not its value: there a class holds the values of every bucket its
rows lie in, and a row of the class is plausible when its bucket holds a plausible value. Its
map also keeps rows the release left out (suppressed, gid -1) with what earlier releases
showed of them, so a row suppressed once is measured again when it comes back.

The map belongs to the release, not to its spec: it survives a `--replace` that changes the
method (a method without groups leaves it as consumers last saw it), the QIs or the source and
key (`rekey` carries it to the new key, docs/composition.md says how people are matched).

Why one module: the map's layout (its rows, sets and shown values, and the columns a run's
rows carry of it) is read and written here only; the measure, the store and the readers of a
refresh (`Prior`, `Previous`) change together whenever that layout does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, ClassVar

import psycopg
from psycopg import sql

from dbanon.db.catalog import Column, Relation
from dbanon.db.rows import HEX8, RHEX8
from dbanon.db.settings import analyze_stage

if TYPE_CHECKING:
    import numpy as np

    from dbanon.db.stream import Keys
    from dbanon.models.base import PrivacyModel, Spread

COLUMNS = sql.SQL(
    "(release_id integer NOT NULL, key text NOT NULL, gid integer NOT NULL, vid integer, "
    "sid integer, fp text)"
)
# A map row points at its plausible values (vid: one row per distinct set, sorted) and at what
# its group showed (sid: one row per group), so each set is written once, not once per row.
SETS = sql.SQL("(vid integer NOT NULL, vals text[] NOT NULL)")
SHOWN = sql.SQL("(sid integer NOT NULL, shown text[])")
# What a release without a map reads as its map, its sets and its shown values: no rows.
NO_MAP = sql.SQL(
    "(SELECT NULL::integer AS release_id, NULL::text AS key, NULL::integer AS gid, "
    "NULL::integer AS vid, NULL::integer AS sid, NULL::text AS fp WHERE false)"
)
NO_SETS = sql.SQL("(SELECT NULL::integer AS vid, NULL::text[] AS vals WHERE false)")
NO_SHOWN = sql.SQL("(SELECT NULL::integer AS sid, NULL::text[] AS shown WHERE false)")
PRIVATE = (
    "Private: each source row of a grouping release, its group in the latest release and the "
    "sensitive values every release so far left plausible for it (tagged v:<value>, n for "
    "NULL), a fingerprint of its released columns and the values its group showed. Never "
    "granted: it links released groups back to source keys."
)


@dataclass(frozen=True)
class Composition:
    persisting: int  # rows in both the previous releases and this one
    min_plausible_rows: int | None
    min_plausible_values: int | None  # None without a sensitive column
    rows_below_k: int
    rows_below_l: int
    # With a promised spread ((θ,k)): the fewest categories that hold their need among a
    # persisting row's plausible values, and the rows left below the promised number.
    min_plausible_categories: int | None = None
    rows_below_categories: int | None = None

    def as_dict(self) -> dict[str, int | None]:
        """The figures the run records (the spread's only where one was promised)."""
        out = asdict(self)
        if self.rows_below_categories is None:
            del out["min_plausible_categories"], out["rows_below_categories"]
        return out


def tag(col: Column | None, ref: str = "s") -> sql.Composable:
    if col is None:
        return sql.SQL("NULL::text")
    return sql.SQL("coalesce('v:' || {}.{}::text, 'n')").format(sql.Identifier(ref), col.ident)


# How a map row's fingerprint of its released columns was made, told by its text: `r` and the
# 16 hex digits of hash_record_extended (the columns' own hash functions, as hash partitioning
# uses them: no text output of the row, half the cost of the md5 of ROW()::text), or hex digits
# of that md5 (the first 16 since revision 0011's whole 32 were cut), where a column has no hash
# function (json, point) or the server none of records (PostgreSQL 13).
RECORD, MD5 = "record", "md5"


def _row(cols: list[Column], ref: str) -> sql.Composable:
    return sql.SQL("ROW({})").format(
        sql.SQL(", ").join(sql.SQL("{}.{}").format(sql.Identifier(ref), c.ident) for c in cols))


def fingerprint(cols: list[Column], ref: str = "s", kind: str = MD5) -> sql.Composable:
    """The fingerprint of a row's released columns (QIs, sensitive, kept) as `kind` makes it
    (RECORD, MD5): a map row whose fingerprint is unchanged shows the same in the next release
    (dbanon.algorithms.sealed). 64 bits, so that a run holds it as one int8 per row."""
    if kind == RECORD:
        return sql.SQL("'r' || lpad(to_hex(hash_record_extended({}, 0)), 16, '0')").format(
            _row(cols, ref))  # fmt: skip
    return sql.SQL("left(md5({}::text), 16)").format(_row(cols, ref))


def fingerprint_bits(cols: list[Column], ref: str = "s", kind: str = MD5) -> sql.Composable:
    """`fingerprint`'s 64 bits as an int8, as a run holds them: a RECORD one is the hash
    itself (its text is only how the map stores it), an MD5 one its 16 hex digits read."""
    if kind == RECORD:
        return sql.SQL("hash_record_extended({}, 0)").format(_row(cols, ref))
    return sql.SQL("('x' || {})::bit(64)::int8").format(fingerprint(cols, ref, MD5))


def fp_field(kind: str) -> int:
    """The field kind (dbanon.db.rows) that writes a fingerprint's 64 bits as the map's text of
    `kind`: `fingerprint`'s text from `fingerprint_bits`."""
    return RHEX8 if kind == RECORD else HEX8


def fingerprint_kind(conn: psycopg.Connection, source: Relation, cols: list[Column]) -> str:
    """RECORD when the server hashes records and every column has a hash function (asked of
    one row of NULLs of their types: the lookup fails for a type without one), else MD5."""
    if conn.info.server_version < 140000:
        return MD5
    try:
        with conn.transaction():
            conn.execute(sql.SQL(
                "SELECT hash_record_extended({}, 0) FROM (SELECT) d LEFT JOIN {} s ON false"
            ).format(_row(cols, "s"), source.ident)).fetchall()  # fmt: skip
    except psycopg.errors.UndefinedFunction:
        return MD5
    return RECORD


def same_fp(stored: sql.Composable, cols: list[Column], kind: str,
            ref: str = "s") -> sql.Composable:  # fmt: skip
    """Whether a map row's fingerprint (`stored`, of either kind) is that of the row now."""
    md5 = sql.SQL("left({}, 16) = {}").format(stored, fingerprint(cols, ref, MD5))
    if kind != RECORD:
        return md5  # an `r` fingerprint is never a prefix of an md5's hex digits
    return sql.SQL("CASE WHEN left({s}, 1) = 'r' THEN {s} = {rec} ELSE {md5} END").format(
        s=stored, rec=fingerprint(cols, ref, RECORD), md5=md5)  # fmt: skip


NEW = sql.Identifier("dbanon_new_rows")  # this run's rows, read by measure and store


@dataclass(frozen=True)
class Rows:
    """This run's rows for the map: (key, gid, t, fp), and with `buckets` also b (the row's
    bucket) and u (what the map keeps as its group: the unit its next run persists); gid NULL
    for a source row the release left out (withheld). (A method that judges its rows itself,
    LAG, keeps its map from its arrays: dbanon.setlogic.measured_map.)"""

    measured: ClassVar[bool] = False  # measured here, not by the method

    ident: sql.Identifier
    buckets: bool = False
    old: bool = False  # the rows carry the map's (mapped, old, old_sid) already: `with_old`


OLD = ("mapped", "old", "old_sid")  # a row's entry in the latest map: in it, its set, its shown


def with_old(conn: psycopg.Connection, release_id: int, rows: Rows) -> sql.Composable:
    """The rows with what the latest map holds of each (columns OLD: whether it is in the map,
    its set of plausible values and what its group showed): the rows as they are when their
    staging joined the map once, else joined here."""
    if rows.old:
        return rows.ident
    return sql.SQL(
        "(SELECT n.*, m.key IS NOT NULL AS mapped, m.vid AS old, m.sid AS old_sid "
        "FROM {} n LEFT JOIN {} m ON m.key = n.key)"
    ).format(rows.ident, map_of(conn, release_id))


def columns_of(conn: psycopg.Connection, rel: sql.Composable) -> list[str]:
    """The column names of a relation (or subquery), read from a query of no rows."""
    cur = conn.execute(sql.SQL("SELECT * FROM {} AS r LIMIT 0").format(rel))
    return [d.name for d in cur.description or []]


def new_rows(
    conn: psycopg.Connection,
    source: Relation,
    key: Column,
    sensitive: Column | None,
    stage: sql.Composable,
    released: list[Column],
) -> Rows:
    """The new release's rows with their tagged sensitive value and the fingerprint of their
    `released` columns, joined once for the run. A stage with a bucket column `b` (and `u`,
    the unit kept in the map) is read with every source row, released or not (see the
    module's note); a plain stage names the rows it withheld with gid NULL, and (column w)
    the block a withheld remainder of a retired group belongs to (dbanon.algorithms.sealed)."""
    columns = columns_of(conn, stage)
    if {"key", "gid", "w", "t", "fp"} <= set(columns) and isinstance(stage, sql.Identifier):
        # joined with the source already, as the release was built (and with the map); with
        # b and u, every source row in the bucket form (cbg)
        return Rows(stage, buckets={"b", "u"} <= set(columns), old=set(OLD) <= set(columns))
    w = sql.SQL("st.w") if "w" in columns else sql.SQL("NULL::int4")
    fp = fingerprint(released, kind=fingerprint_kind(conn, source, released))
    if "b" not in columns:
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE {new} ON COMMIT DROP AS "
                "SELECT st.key, st.gid, {w} AS w, {t} AS t, {fp} AS fp "
                "FROM {stage} st JOIN {src} s ON s.{key}::text = st.key"
            ).format(new=NEW, w=w, t=tag(sensitive), fp=fp, stage=stage, src=source.ident,
                     key=key.ident)  # fmt: skip
        )
        analyze_stage(conn, NEW)
        return Rows(NEW)
    conn.execute(
        sql.SQL(
            "CREATE TEMP TABLE {new} ON COMMIT DROP AS "
            "SELECT s.{key}::text AS key, st.gid, st.b, coalesce(st.u, st.gid) AS u, {w} AS w, "
            "{t} AS t, {fp} AS fp FROM {src} s LEFT JOIN {stage} st ON st.key = s.{key}::text"
        ).format(new=NEW, w=w, t=tag(sensitive), fp=fp, stage=stage, src=source.ident,
                 key=key.ident)  # fmt: skip
    )
    analyze_stage(conn, NEW)
    return Rows(NEW, buckets=True)


def has_map(conn: psycopg.Connection, release_id: int | None) -> bool:
    """Whether the release has a map (an earlier grouping run of it was recorded)."""
    return release_id is not None and bool(conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", [f"dbanon.{table_name(release_id)}"]
    ).fetchone()[0])  # fmt: skip


def map_of(conn: psycopg.Connection, release_id: int) -> sql.Composable:
    """The release's map to read: its own table, or no rows when it has none yet."""
    return table(release_id) if has_map(conn, release_id) else NO_MAP


def sets_of(conn: psycopg.Connection, release_id: int) -> sql.Composable:
    """The map's sets of plausible values (vid, vals), or no rows without a map."""
    return table(release_id, "sets") if has_map(conn, release_id) else NO_SETS


def shown_in(conn: psycopg.Connection, release_id: int) -> sql.Composable:
    """What the map's groups showed (sid, shown), or no rows without a map."""
    return table(release_id, "shown") if has_map(conn, release_id) else NO_SHOWN


def measure(
    conn: psycopg.Connection, release_id: int, rows: Rows, k: int, values_needed: int,
    spread: Spread | None = None,
) -> Composition | None:  # fmt: skip
    """The intersection figures of this run against all earlier ones (None on a first run);
    with a `spread`, also how many of its categories every persisting row's plausible values
    still fill."""
    if not has_map(conn, release_id):
        return None
    found = _measure(conn, release_id, rows, k, values_needed)
    if spread is None:
        return found
    fewest, below = _categories(conn, release_id, rows, spread)
    return replace(found, min_plausible_categories=fewest, rows_below_categories=below)


def _measure(
    conn: psycopg.Connection, release_id: int, rows: Rows, k: int, values_needed: int
) -> Composition:
    if rows.buckets:
        return _figures(conn.execute(
            sql.SQL(_MEASURE_BUCKETS).format(
                rows=rows.ident, joined=with_old(conn, release_id, rows),
                sets=sets_of(conn, release_id),
            ),
            {"k": k, "l": values_needed},
        ).fetchone())  # fmt: skip
    # Each (class, old set) of persisting rows: its plausible rows are the rows of the class
    # whose value is in the set (those of `shown` in the narrowed set: the class's values are
    # all in `shown`), its plausible values the narrowed set; rows with no set (a new one, or
    # none kept without a sensitive column) keep the whole class.
    _prepare(conn, release_id, rows)
    row = conn.execute(
        sql.SQL(
            """SELECT coalesce(sum(members), 0), min(pr), min(pv),
                      coalesce(sum(members) FILTER (WHERE pr < %(k)s), 0),
                      coalesce(sum(members) FILTER (WHERE pv < %(l)s), 0)
               FROM (SELECT p.members,
                            CASE WHEN p.old = -1 THEN cardinality(u.shown)
                                 -- the set kept every value of the class (its subset):
                                 WHEN cardinality(p.vals) = cardinality(u.vals)
                                      THEN cardinality(u.shown)
                                 ELSE (SELECT count(*) FROM unnest(u.shown) x
                                       WHERE x = ANY (p.vals)) END AS pr,
                            CASE WHEN p.old <> -1 THEN coalesce(cardinality(p.vals), 0)
                                 END AS pv
                     FROM {pairs} p JOIN {units} u ON u.u = p.gid
                     WHERE p.members > 0 OFFSET 0) judged"""  # OFFSET 0: each pr counted once
        ).format(pairs=_PAIRS, units=_UNITS),
        {"k": k, "l": values_needed},
    ).fetchone()
    return _figures(row)


SPREAD = sql.Identifier("dbanon_value_spread")  # (t, cat, need): a Spread over tags


def tag_of(value: str | None) -> str:
    """A value (as text, None for NULL) as `tag` writes it."""
    return "n" if value is None else "v:" + value


def value_of(t: str) -> str | None:
    """The value (as text, None for NULL) a tag stands for."""
    return None if t == "n" else t.removeprefix("v:")


def spread_of(
    conn: psycopg.Connection, models: Sequence[PrivacyModel],
    tags: Callable[[], Mapping[str, int]],
) -> Spread | None:  # fmt: skip
    """The spread the promised models require of plausible values over time (at most one
    model promises one: (θ,k)); `tags()` gives the release's rows per tagged value, read
    only when a model spreads."""
    spreading = [m for m in models if m.spreads]
    if not spreading:
        return None
    values = {value_of(t): n for t, n in tags().items()}
    found = [s for m in spreading if (s := m.spread(conn, values)) is not None]
    if len(found) > 1:
        raise ValueError("at most one promised model may constrain how values spread")
    return found[0] if found else None


def released_tags(conn: psycopg.Connection, rows: Rows) -> dict[str, int]:
    """The release's rows per tagged sensitive value (what `spread_of` reads)."""
    return dict(conn.execute(
        sql.SQL("SELECT t, count(*) FROM {} WHERE gid IS NOT NULL AND t IS NOT NULL "
                "GROUP BY t").format(rows.ident)
    ).fetchall())  # fmt: skip


def _categories(
    conn: psycopg.Connection, release_id: int, rows: Rows, spread: Spread
) -> tuple[int | None, int]:
    """The fewest categories of `spread` that a persisting row's plausible values (its map
    values among its new class's) fill to their need, and the rows left below its least."""
    conn.execute(
        sql.SQL("CREATE TEMP TABLE {} (t text PRIMARY KEY, cat text, need int4) "
                "ON COMMIT DROP").format(SPREAD)
    )  # fmt: skip
    with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} FROM STDIN").format(SPREAD)) as copy:
        for v, c in spread.category.items():  # one per distinct value
            copy.write_row((tag_of(v), str(c), int(spread.need[c])))
    conn.execute(sql.SQL("ANALYZE {}").format(SPREAD))
    # A class's values: its rows' (or, with buckets, its rows' buckets') values.
    held = sql.SQL(
        "SELECT DISTINCT n.gid, bv.t FROM {rows} n JOIN "
        "(SELECT DISTINCT b, t FROM {rows} WHERE gid IS NOT NULL) bv USING (b) "
        "WHERE n.gid IS NOT NULL"
        if rows.buckets
        else "SELECT DISTINCT gid, t FROM {rows} WHERE gid IS NOT NULL"
    ).format(rows=rows.ident)
    fewest, below = conn.execute(
        sql.SQL(
            """WITH held AS ({held}),
               pairs AS (SELECT gid, old, count(*) AS members FROM {joined} n
                         WHERE gid IS NOT NULL AND old IS NOT NULL GROUP BY gid, old),
               cats AS (SELECT p.gid, p.old, sp.cat, count(*) AS n, min(sp.need) AS need
                        FROM pairs p JOIN {sets} os ON os.vid = p.old
                        CROSS JOIN LATERAL unnest(os.vals) v
                        JOIN held h ON h.gid = p.gid AND h.t = v
                        JOIN {spread} sp ON sp.t = v GROUP BY p.gid, p.old, sp.cat),
               filled AS (SELECT gid, old, count(*) FILTER (WHERE n >= need) AS cats
                          FROM cats GROUP BY gid, old),
               judged AS (SELECT p.members, coalesce(f.cats, 0) AS cats FROM pairs p
                          LEFT JOIN filled f ON f.gid = p.gid AND f.old = p.old)
               SELECT min(cats), coalesce(sum(members) FILTER (WHERE cats < %(least)s), 0)
               FROM judged"""
        ).format(held=held, joined=with_old(conn, release_id, rows),
                 sets=sets_of(conn, release_id), spread=SPREAD),
        {"least": spread.least},
    ).fetchone()
    conn.execute(sql.SQL("DROP TABLE {}").format(SPREAD))
    return (None if fewest is None else int(fewest)), int(below)


def _figures(row: tuple) -> Composition:
    return Composition(
        int(row[0]),
        None if row[1] is None else int(row[1]),
        None if row[2] is None else int(row[2]),
        int(row[3]),
        int(row[4]),
    )


# The measure of a release that publishes values per bucket: a class holds the values of its
# rows' buckets; a row of it is plausible when its bucket holds a plausible value.
_MEASURE_BUCKETS = """
    WITH new AS (SELECT key, gid, b FROM {rows} WHERE gid IS NOT NULL),
    bv AS (SELECT DISTINCT b, t FROM {rows} WHERE gid IS NOT NULL),
    gb AS (SELECT gid, b, count(*) AS n FROM new GROUP BY gid, b),
    cv AS (SELECT DISTINCT gb.gid, bv.t FROM gb JOIN bv USING (b)),
    sizes AS (SELECT gid, sum(n) AS n FROM gb GROUP BY gid),
    kept AS (SELECT gid, old FROM {joined} n WHERE gid IS NOT NULL AND mapped),
    pairs AS (SELECT gid, old, count(*) AS members FROM kept GROUP BY gid, old),
    vals_left AS (
        SELECT p.gid, p.old, count(cv.t) AS values_left
        FROM pairs p JOIN {sets} os ON os.vid = p.old CROSS JOIN LATERAL unnest(os.vals) v
        LEFT JOIN cv ON cv.gid = p.gid AND cv.t = v
        WHERE p.old IS NOT NULL GROUP BY p.gid, p.old),
    rows_left AS (
        SELECT p.gid, p.old, sum(gb.n) AS plausible_rows
        FROM pairs p JOIN {sets} os ON os.vid = p.old JOIN gb ON gb.gid = p.gid
        WHERE EXISTS (SELECT 1 FROM bv WHERE bv.b = gb.b AND bv.t = ANY (os.vals))
        GROUP BY p.gid, p.old),
    judged AS (
        SELECT p.members,
               coalesce(r.plausible_rows, CASE WHEN p.old IS NULL THEN s.n END, 0)
                   AS plausible_rows,
               CASE WHEN p.old IS NOT NULL THEN coalesce(v.values_left, 0) END
                   AS plausible_values
        FROM pairs p JOIN sizes s USING (gid)
        LEFT JOIN vals_left v ON v.gid = p.gid AND v.old = p.old
        LEFT JOIN rows_left r ON r.gid = p.gid AND r.old = p.old)
    SELECT coalesce(sum(members), 0), min(plausible_rows), min(plausible_values),
           coalesce(sum(members) FILTER (WHERE plausible_rows < %(k)s), 0),
           coalesce(sum(members) FILTER (WHERE plausible_values < %(l)s), 0)
    FROM judged"""

def table_name(release_id: int) -> str:
    """The release's map: a table of its own in schema dbanon (revision 0010), so that no lock
    on a map is shared by two releases' runs (a partitioned parent was: runs deadlocked)."""
    return f"group_map_{release_id}"


def part_name(release_id: int, part: str | None = None) -> str:
    """The map's rows' table, or its `sets` (plausible values) or `shown` (what groups showed)."""
    name = table_name(release_id)
    return f"{name}_{part}" if part else name


def table(release_id: int, part: str | None = None) -> sql.Identifier:
    return sql.Identifier("dbanon", part_name(release_id, part))


def _fresh(release_id: int) -> dict[str | None, sql.Identifier]:
    """The tables a new map is written into before it is swapped in."""
    return {p: sql.Identifier("dbanon", part_name(release_id, p) + "_next") for p in _PARTS}


_PARTS = (None, "sets", "shown")
_CLS = sql.Identifier("dbanon_map_classes")  # (gid, vals): each released class's values
_UNITS = sql.Identifier("dbanon_map_units")  # (u, shown): what each unit the map keeps showed
_PAIRS = sql.Identifier("dbanon_map_pairs")  # (gid, old, vals): a class and a set it narrows
_HELD = sql.Identifier("dbanon_map_held")  # (key, w, vid, sid, fp): rows left out, mapped before


def store(conn: psycopg.Connection, release_id: int, rows: Rows) -> None:
    """Replace the release's map by this run's groups and running value intersections.

    A map row holds its key, group and fingerprint and points at its plausible values and at
    what its group showed, each set written once (not once per row, which made the map of a
    million rows 650 MB and its writing the dearest step of a publish). The new map is written
    into fresh tables and swapped in for the old ones; the key is not indexed: every reader
    joins the whole map by hash."""
    fresh = fresh_tables(conn, release_id)
    _store_grouped(conn, release_id, rows, fresh)
    swap_in(conn, release_id, fresh)  # after every read of the old map above


def fresh_tables(conn: psycopg.Connection, release_id: int) -> dict[str | None, sql.Identifier]:
    """The empty tables a new map is written into (its rows, sets and shown values), to be
    swapped in for the old ones once written (`swap_in`)."""
    fresh = _fresh(release_id)
    drop_fresh(conn, release_id)  # a run killed after writing them beside (dbanon.setlogic.beside)
    conn.execute(sql.SQL("CREATE TABLE {} {}").format(fresh[None], COLUMNS))
    conn.execute(sql.SQL("CREATE TABLE {} {}").format(fresh["sets"], SETS))
    conn.execute(sql.SQL("CREATE TABLE {} {}").format(fresh["shown"], SHOWN))
    return fresh


def _prepare(conn: psycopg.Connection, release_id: int, rows: Rows) -> None:
    """What the measure and the store of a grouping release both read of this run's rows,
    once (temp tables, made here unless made already for these rows, dropped by the store):
    - units (u, shown[, vals]): what each unit the map keeps showed, with repeats (without
      buckets also its distinct values);
    - classes (gid, vals): each released class's values (with buckets: its rows' buckets');
    - held (key, w, vid, sid, fp): rows left out that the latest map holds;
    - pairs (gid, old, members, vals): each class and old set (-1: none) of its rows, the
      persisting rows among them and the set they keep (NULL without a sensitive column)."""
    ident = rows.ident.as_string(conn)
    if _made_for(conn, _PAIRS) == ident:
        return
    staged = rows.buckets and _made_for(conn, _CLS) == _made_for(conn, _UNITS) == ident
    if staged:  # units and classes made by the method from its arrays (`stage_units`)
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}, {}").format(_PAIRS, _HELD))
    else:
        _unprepare(conn)  # made for other rows
    mapped = has_map(conn, release_id)
    old_sets = table(release_id, "sets") if mapped else NO_SETS
    unit = sql.SQL("coalesce(u, gid)" if rows.buckets else "gid")
    # A class's values: its rows' buckets' values; without buckets, its rows' values, found
    # beside what its unit showed (`units` below; 1.6 s for a million rows, where a window
    # marking each value's first row took 2.0 s).
    values = (
        "SELECT g.gid, array_agg(DISTINCT bv.t ORDER BY bv.t) AS vals FROM "
        "(SELECT DISTINCT gid, b FROM {rows} WHERE gid IS NOT NULL) g JOIN "
        "(SELECT DISTINCT b, t FROM {rows} WHERE gid IS NOT NULL) bv USING (b) GROUP BY g.gid"
        if rows.buckets
        else "SELECT u AS gid, vals FROM {units}"
    )
    sensitive = conn.execute(
        sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE t IS NOT NULL)").format(rows.ident)
    ).fetchone()[0]
    if not staged:
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE {units} ON COMMIT DROP AS SELECT {unit} AS u, "
                "array_agg(t ORDER BY t) AS shown FROM {rows} WHERE gid IS NOT NULL GROUP BY 1"
                if rows.buckets else
                "CREATE TEMP TABLE {units} ON COMMIT DROP AS SELECT gid AS u, "
                "array_agg(t ORDER BY t) AS shown, array_agg(DISTINCT t ORDER BY t) AS vals "
                "FROM {rows} WHERE gid IS NOT NULL GROUP BY gid"
            ).format(units=_UNITS, unit=unit, rows=rows.ident)  # fmt: skip
        )
    joined = _joined(conn, release_id, rows, mapped)
    conn.execute(
        sql.SQL(
            "CREATE TEMP TABLE {held} ON COMMIT DROP AS SELECT n.key, n.w, n.old AS vid, "
            "n.old_sid AS sid, n.fp FROM {joined} n WHERE n.gid IS NULL AND n.mapped"
        ).format(held=_HELD, joined=joined)
    )
    pairs = (  # a first run: no row persists, every class keeps its own values
        "SELECT c.gid, -1 AS old, 0::int8 AS members, CASE WHEN {sensitive} THEN c.vals END "
        "AS vals FROM {cls} c"
        if not mapped
        else "SELECT p.gid, coalesce(p.old, -1) AS old, p.members, CASE WHEN NOT {sensitive} "
        "THEN NULL WHEN p.old IS NULL THEN c.vals "
        # both sorted and distinct: the smaller, when the other holds it (a class kept whole)
        "WHEN os.vals @> c.vals THEN c.vals WHEN c.vals @> os.vals THEN os.vals "
        "ELSE ARRAY(SELECT v FROM unnest(c.vals) v WHERE v = ANY (os.vals) ORDER BY 1) END "
        "AS vals "
        "FROM (SELECT n.gid, n.old, count(*) FILTER (WHERE n.mapped) AS members "
        "FROM {joined} n WHERE n.gid IS NOT NULL GROUP BY n.gid, n.old) p "
        "JOIN {cls} c USING (gid) LEFT JOIN {old_sets} os ON os.vid = p.old"
    )
    conn.execute(
        sql.SQL(
            ("" if staged else "CREATE TEMP TABLE {cls} ON COMMIT DROP AS " + values + ";")
            + "CREATE TEMP TABLE {pairs} ON COMMIT DROP AS " + pairs + ";"
            "COMMENT ON TABLE {pairs} IS {made}"
        ).format(cls=_CLS, rows=rows.ident, units=_UNITS, pairs=_PAIRS, joined=joined,
                 old_sets=old_sets, sensitive=sql.Literal(bool(sensitive)),
                 made=sql.Literal(rows.ident.as_string(conn)))  # fmt: skip
    )


def _joined(conn: psycopg.Connection, release_id: int, rows: Rows,
            mapped: bool) -> sql.Composable:  # fmt: skip
    """The rows with what the latest map holds of each (`with_old`); on a first run, none."""
    return with_old(conn, release_id, rows) if mapped else sql.SQL(
        "(SELECT n.*, false AS mapped, NULL::int4 AS old, NULL::int4 AS old_sid FROM {} n)"
    ).format(rows.ident)  # fmt: skip


def _unprepare(conn: psycopg.Connection) -> None:
    """Drop what `_prepare` made, if anything: a run's rows are about to be staged anew."""
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}, {}, {}, {}").format(_CLS, _UNITS, _PAIRS, _HELD))


def _made_for(conn: psycopg.Connection, table: sql.Identifier) -> str | None:
    """The rows (their relation's name) a temporary table of `_prepare`'s was made for."""
    return conn.execute(
        "SELECT obj_description(to_regclass(%s), 'pg_class')",
        ["pg_temp." + table.as_string(conn)],
    ).fetchone()[0]


def stage_units(
    conn: psycopg.Connection, rows: sql.Identifier,
    write: Callable[[sql.Identifier, sql.Identifier], None],
) -> None:  # fmt: skip
    """The units and classes `_prepare` reads of a bucket-form run (`rows`), written by the
    method from its arrays instead of aggregated here: `write(units, classes)` fills the
    empty tables (u, shown) and (gid, vals), each array sorted as ORDER BY t sorts it (cbg:
    1M rows, 3.7 s of the two aggregates here)."""
    _unprepare(conn)
    conn.execute(sql.SQL(
        "CREATE TEMP TABLE {} (u int4, shown text[]) ON COMMIT DROP;"
        "CREATE TEMP TABLE {} (gid int4, vals text[]) ON COMMIT DROP"
    ).format(_UNITS, _CLS))  # fmt: skip
    write(_UNITS, _CLS)
    made = sql.Literal(rows.as_string(conn))
    for table in (_UNITS, _CLS):
        conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(table, made))


def _store_grouped(
    conn: psycopg.Connection, release_id: int, rows: Rows, fresh: dict[str | None, sql.Identifier]
) -> None:
    """Each released class's values (with buckets: its rows' buckets' values) narrow the sets
    its persisting rows had, once per (class, old set); each unit kept (the group; with
    buckets the unit `u`) stores the values it showed, with repeats; a row left out keeps
    its old set and what its group showed, in its waiting block (w) if it has one."""
    _prepare(conn, release_id, rows)
    mapped = has_map(conn, release_id)
    _, old_sets, old_shown = (table(release_id, p) for p in _PARTS) if mapped else (
        NO_MAP, NO_SETS, NO_SHOWN)  # fmt: skip
    conn.execute(
        sql.SQL(
            "INSERT INTO {sets} SELECT (dense_rank() OVER (ORDER BY vals) - 1)::int4, vals "
            "FROM (SELECT vals FROM {pairs} WHERE vals IS NOT NULL UNION SELECT os.vals "
            "FROM {old_sets} os WHERE os.vid IN (SELECT vid FROM {held})) d;"
            "INSERT INTO {shown} SELECT u, shown FROM {units};"
            "INSERT INTO {shown} SELECT b.n + (dense_rank() OVER (ORDER BY h.sid))::int4 - 1, "
            "h.shown FROM {old_shown} h CROSS JOIN (SELECT coalesce(max(u), -1) + 1 AS n "
            "FROM {units}) b WHERE h.sid IN (SELECT sid FROM {held})"
        ).format(pairs=_PAIRS, old_sets=old_sets, sets=fresh["sets"], held=_HELD,
                 shown=fresh["shown"], units=_UNITS, old_shown=old_shown)  # fmt: skip
    )
    joined = _joined(conn, release_id, rows, mapped)
    unit = sql.SQL("coalesce(u, gid)" if rows.buckets else "gid")
    conn.execute(
        sql.SQL(
            """INSERT INTO {fresh} (release_id, key, gid, vid, sid, fp)
               WITH pv AS (SELECT p.gid, p.old, s.vid FROM {pairs} p
                           JOIN {sets} s ON s.vals = p.vals),
               base AS (SELECT coalesce(max(u), -1) + 1 AS n FROM {units}),
               held_sid AS (SELECT sid, (SELECT n FROM base)
                                        + (dense_rank() OVER (ORDER BY sid))::int4 - 1 AS new
                            FROM (SELECT DISTINCT sid FROM {held} WHERE sid IS NOT NULL) d),
               held_vid AS (SELECT os.vid, s.vid AS new FROM {old_sets} os
                            JOIN {sets} s ON s.vals = os.vals
                            WHERE os.vid IN (SELECT vid FROM {held}))
               SELECT %(rid)s, n.key, {unit}, pv.vid, {unit}, n.fp
               FROM {joined} n LEFT JOIN pv ON pv.gid = n.gid AND pv.old = coalesce(n.old, -1)
               WHERE n.gid IS NOT NULL
               UNION ALL
               SELECT %(rid)s, h.key, CASE WHEN h.w IS NULL THEN -1 ELSE -2 - h.w END,
                      hv.new, hs.new, h.fp
               FROM {held} h LEFT JOIN held_vid hv ON hv.vid = h.vid
               LEFT JOIN held_sid hs ON hs.sid = h.sid"""
        ).format(fresh=fresh[None], pairs=_PAIRS, sets=fresh["sets"], units=_UNITS, held=_HELD,
                 old_sets=old_sets, unit=sql.SQL("n.") + unit if not rows.buckets
                 else sql.SQL("coalesce(n.u, n.gid)"), joined=joined),  # fmt: skip
        {"rid": release_id},
    )
    _unprepare(conn)


def _stage_keys(conn: psycopg.Connection, keys: Keys) -> sql.Identifier:
    """A temp table of this run's keys with each one's position in `keys` (as gid), analysed,
    for joining to the map; dropped by the caller (or at commit)."""
    import numpy as np

    from dbanon.db.stream import copy_in_ids

    rows = sql.Identifier("dbanon_refresh_rows")
    conn.execute(
        sql.SQL("CREATE TEMP TABLE {} (key text, gid int4) ON COMMIT DROP").format(rows)
    )
    copy_in_ids(conn, rows, keys, np.arange(len(keys)))
    analyze_stage(conn, rows)
    return rows


@dataclass(frozen=True)
class Previous:
    """What the latest release showed of this run's rows, by key: each row's group in it (-1
    for a new or withheld row), whether the row is unchanged since (its fingerprint), and the
    size of every group as released (counting rows the source has lost since)."""

    gid: np.ndarray
    unchanged: np.ndarray
    sizes: np.ndarray
    unknown: np.ndarray  # mapped before the map kept fingerprints (revision 0011)


@dataclass(frozen=True)
class Prior:
    """What a grouping method's extract reads for the map beside the source's columns, in the
    same scan: each row's fingerprint (of `kind`, its 64 bits as an int8; with `legacy`, its md5
    kind too, to compare with a map written before), and with a sensitive column its tag now.
    What the latest map holds of each row is read apart (`read_map`) and matched by key in the
    run's arrays: a join of the map in the scan cost more than both. `wrap` turns the
    extract's query into one that adds them, in the order `kinds` gives."""

    release_id: int | None
    mapped: bool  # the release has a map
    key: Column
    released: list[Column]
    sensitive: Column | None
    kind: str = MD5
    legacy: bool = False  # the map holds fingerprints of the md5 kind, this run makes RECORD

    def kinds(self) -> list[str]:
        return ["int8", *(["int8"] if self.legacy else []),
                *(["text"] if self.sensitive else [])]  # fmt: skip

    def wrap(self, query: sql.Composable, width: int) -> sql.Composable:
        """`query` (the extract's `width` columns named c0.. with `columns()` after them) with
        what the map needs added after its own."""
        cols = [sql.SQL("x.{}").format(sql.Identifier(f"c{i}")) for i in range(width)]
        cols.append(sql.SQL("x.dbanon_fp"))
        if self.legacy:
            cols.append(sql.SQL("x.dbanon_md5"))
        if self.sensitive:
            cols.append(sql.SQL("x.dbanon_tag"))
        return sql.SQL("SELECT {} FROM ({}) x").format(sql.SQL(", ").join(cols), query)

    def columns(self) -> list[sql.Composable]:
        """What the extract's own SELECT over `s` adds for `wrap` (fingerprints, tag)."""
        out = [sql.SQL("{} AS dbanon_fp").format(
            fingerprint_bits(self.released, kind=self.kind))]
        if self.legacy:
            out.append(sql.SQL("{} AS dbanon_md5").format(
                fingerprint_bits(self.released, kind=MD5)))
        if self.sensitive:
            out.append(sql.SQL("{} AS dbanon_tag").format(tag(self.sensitive)))
        return out


def prior(
    conn: psycopg.Connection, source: Relation, release_id: int | None, key: Column,
    released: list[Column], sensitive: Column | None,
) -> Prior:  # fmt: skip
    """The Prior of a release (`mapped` when it has a map). Whether that map holds md5
    fingerprints where this run makes record ones (`legacy`) is told by the map as it is read
    (`MapRows.legacy`), not by a scan of it first: the extract then reads the source again,
    once, for a map written by an older dbanon."""
    mapped = has_map(conn, release_id)
    return Prior(release_id, mapped, key, released, sensitive,
                 fingerprint_kind(conn, source, released))  # fmt: skip


@dataclass(frozen=True)
class MapRows:
    """The latest map of a release as arrays, one entry per map row: its key, group, set of
    plausible values (-1: none), what its group showed (-1: none) and fingerprint (its 64 bits;
    `has_fp` False for a row mapped before the map kept fingerprints, `record` True for one of
    the RECORD kind)."""

    keys: Keys
    gid: np.ndarray
    vid: np.ndarray
    sid: np.ndarray
    fp: np.ndarray
    has_fp: np.ndarray
    record: np.ndarray

    def legacy(self, kind: str) -> bool:
        """Whether some fingerprint is of the md5 kind where this run makes `kind` ones."""
        return kind == RECORD and bool((self.has_fp & ~self.record).any())


def read_map(conn: psycopg.Connection, release_id: int) -> MapRows:
    """The release's map, by one binary COPY."""
    import numpy as np

    from dbanon.db.copykernels import hex_fingerprints
    from dbanon.db.stream import copy_columns

    # the fingerprints' text is read client-side (compiled): converting it to bits on the
    # server took twice as long as the rest of the read
    keys, gid, vid, sid, fps = copy_columns(
        conn,
        sql.SQL("SELECT key, gid, coalesce(vid, -1), coalesce(sid, -1), fp FROM {}").format(
            table(release_id)),
        ["key", "int4", "int4", "int4", "key"],
    )  # fmt: skip
    fp, has_fp, record = hex_fingerprints(fps.blob, fps.lens)  # type: ignore[union-attr]
    as_int = (np.asarray(v).astype(np.int64) for v in (gid, vid, sid))
    return MapRows(keys, *as_int, fp, has_fp, record)  # type: ignore[arg-type]


def previous_of(conn: psycopg.Connection, release_id: int, gid: np.ndarray,
                state: np.ndarray, sizes: np.ndarray | None = None) -> Previous:  # fmt: skip
    """`Previous` from each row's map group and fingerprint state (`Prior`'s columns), with
    the size of every group as released (`sizes`, when the caller counted the map's rows
    already: read_map's)."""
    import numpy as np

    if sizes is None:
        counts = conn.execute(
            sql.SQL("SELECT gid, count(*) FROM {} WHERE gid >= 0 GROUP BY gid").format(
                map_of(conn, release_id)
            )
        ).fetchall()
        sizes = np.zeros(max((g for g, _ in counts), default=-1) + 1, dtype=np.int64)
        for g, n in counts:
            sizes[g] = n
    state = np.asarray(state)
    return Previous(np.asarray(gid, dtype=np.int64), state > 0, sizes, state < 0)


def previous_release(
    conn: psycopg.Connection, release_id: int | None, keys: Keys, source: Relation, key: Column,
    released: list[Column],
) -> Previous | None:  # fmt: skip
    """`Previous` for the rows in `keys` order; None without a map. Keys go in and groups
    come back by binary COPY (no Python object per row). A refresh that extracts its rows
    itself reads the same in its extract's scan (`Prior`)."""
    import numpy as np

    from dbanon.db.stream import copy_columns

    if not has_map(conn, release_id):
        return None
    assert release_id is not None
    rows = _stage_keys(conn, keys)
    at, old, same = copy_columns(
        conn,
        sql.SQL(
            "SELECT t.gid::float8, m.gid::float8, "
            "CASE WHEN m.fp IS NULL THEN -1 WHEN {same} THEN 1 ELSE 0 END::float8 "
            "FROM {rows} t "
            "JOIN {map} m ON m.release_id = {rid} AND m.key = t.key "
            "JOIN {src} s ON s.{key}::text = t.key"
        ).format(same=same_fp(sql.SQL("m.fp"), released, fingerprint_kind(conn, source, released)),
                 rows=rows, map=map_of(conn, release_id),
                 rid=sql.Literal(release_id), src=source.ident, key=key.ident),  # fmt: skip
        ["float8", "float8", "float8"],
    )
    conn.execute(sql.SQL("DROP TABLE {}").format(rows))
    at = np.asarray(at, dtype=np.int64)
    gid, state = np.full(len(keys), -1, dtype=np.int64), np.zeros(len(keys))
    gid[at], state[at] = np.asarray(old, dtype=np.int64), np.asarray(same)
    return previous_of(conn, release_id, gid, state)


def previous_cells(
    conn: psycopg.Connection, release_id: int | None, keys: Keys, source: Relation, key: Column,
    released: list[Column],
) -> tuple[np.ndarray, np.ndarray, list[list[str] | None], list[list[str] | None]] | None:
    """Per row in `keys` order: its group in the map (-1: none or left out), whether its
    released columns are unchanged since, its plausible values and what the release showed
    of it (tags; None where the map has none); None without a map. Rows of one class share
    their values: each distinct list is one object."""
    import numpy as np

    if not has_map(conn, release_id):
        return None
    rows = _stage_keys(conn, keys)
    n = len(keys)
    gid, same = np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=bool)
    vals: list[list[str] | None] = [None] * n
    shown: list[list[str] | None] = [None] * n
    sets = dict(conn.execute(sql.SQL("SELECT vid, vals FROM {}").format(
        table(release_id, "sets"))).fetchall())  # fmt: skip
    groups = dict(conn.execute(sql.SQL("SELECT sid, shown FROM {}").format(
        table(release_id, "shown"))).fetchall())  # fmt: skip
    with conn.cursor() as cur:
        cur.execute(
            sql.SQL(
                "SELECT t.gid, m.gid, coalesce({same}, false), m.vid, m.sid "
                "FROM {rows} t JOIN {map} m ON m.key = t.key "
                "JOIN {src} s ON s.{key}::text = t.key"
            ).format(same=same_fp(sql.SQL("m.fp"), released,
                                  fingerprint_kind(conn, source, released)),
                     rows=rows, map=table(release_id),
                     src=source.ident, key=key.ident)  # fmt: skip
        )
        for at, g, unchanged, v, sh in cur:
            gid[at], same[at] = g, unchanged
            shown[at] = None if sh is None else groups[sh]
            vals[at] = None if v is None else sets[v]
    conn.execute(sql.SQL("DROP TABLE {}").format(rows))
    return gid, same, vals, shown


def sealing(
    conn: psycopg.Connection, release_id: int | None, keys: Keys, source: Relation, key: Column,
    released: list[Column],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """What a sealed refresh starts from (dbanon.algorithms.sealed): each row's group in the map,
    whether it is unchanged since, and the groups' sizes; on a first run no row has a group."""
    import numpy as np

    before = previous_release(conn, release_id, keys, source, key, released)
    if before is None:
        n = len(keys)
        return np.full(n, -1), np.zeros(n, dtype=bool), np.zeros(0, dtype=np.int64)
    return before.gid, before.unchanged, before.sizes


def shown_of(conn: psycopg.Connection, release_id: int, gids: list[int]) -> dict[int, list[str]]:
    """The tagged values (with repeats) each of these map groups showed when last released:
    a retired group's, or a waiting block's (dbanon.algorithms.sealed)."""
    if not gids:
        return {}
    return {
        int(g): list(shown or [])
        for g, shown in conn.execute(
            sql.SQL(
                "SELECT DISTINCT ON (m.gid) m.gid, h.shown FROM {} m LEFT JOIN {} h USING (sid) "
                "WHERE m.gid = ANY(%s) ORDER BY m.gid"
            ).format(map_of(conn, release_id), shown_in(conn, release_id)),
            [gids],
        )
    }


def previous_state(
    conn: psycopg.Connection, release_id: int | None, keys: Keys
) -> tuple[np.ndarray, np.ndarray, list[list[str] | None]] | None:
    """Per row (by its key): its group in the map (-1 for none or a row left out), the index
    of its plausible values in the returned list (-1 for none), and that list of distinct
    tagged value sets (few: rows of one class share theirs); None without a map."""
    import numpy as np

    from dbanon.db.stream import copy_columns

    if not has_map(conn, release_id):
        return None
    rows = _stage_keys(conn, keys)
    at, old, vid = copy_columns(
        conn,
        sql.SQL(
            "SELECT t.gid::float8, m.gid::float8, coalesce(m.vid, -1)::float8 "
            "FROM {rows} t JOIN {map} m ON m.key = t.key"
        ).format(rows=rows, map=table(release_id)),
        ["float8", "float8", "float8"],
    )
    conn.execute(sql.SQL("DROP TABLE {}").format(rows))
    at, vid = np.asarray(at, dtype=np.int64), np.asarray(vid, dtype=np.int64)
    used = np.unique(vid[vid >= 0])
    found = conn.execute(
        sql.SQL("SELECT vid, vals FROM {} WHERE vid = ANY(%s) ORDER BY vals").format(
            table(release_id, "sets")
        ),
        [used.tolist()],
    ).fetchall()
    sets = [v for _, v in found]
    rank = np.full(int(used.max()) + 2 if len(used) else 1, -1, dtype=np.int64)
    for i, (v, _) in enumerate(found):
        rank[v] = i
    groups = np.full(len(keys), -1, dtype=np.int64)
    groups[at] = np.asarray(old, dtype=np.int64)
    vidx = np.full(len(keys), -1, dtype=np.int64)
    vidx[at] = rank[vid]  # -1 (no set) reads rank's last entry, -1
    return groups, vidx, sets


@dataclass(frozen=True)
class Rekeyed:
    """How a redefined release's map found its people in the new source."""

    by: str  # "key" (the old key column's values) or "content" (the shared columns' values)
    kept: int  # map entries carried to the new key
    dropped: int  # entries of people the new source no longer holds (or could not be told)

    def as_dict(self) -> dict[str, int | str]:
        return asdict(self)


def _unique_in(conn: psycopg.Connection, rel: Relation, col: sql.Composable) -> bool:
    """Whether an expression over a relation's rows is never NULL and never repeated."""
    total, distinct = conn.execute(
        sql.SQL("SELECT count(*), count(DISTINCT {c}) FROM {r}").format(c=col, r=rel.ident)
    ).fetchone()
    return bool(total == distinct)


def translation(
    conn: psycopg.Connection,
    old_source: Relation | None,
    old_key: str,
    source: Relation,
    key: Column,
    columns: dict[str, Column],
    old_columns: dict[str, Column] | None,
) -> tuple[str, sql.Composable] | None:
    """How to tell, in `source`, the people a map keyed by `old_key` of `old_source` names:
    ("key", query of (old, new) key texts) when the new source still has the old key column
    with unique values; else ("content", ...) matching the rows of the old and new source on
    every column they share by name (rows alike in all of them are interchangeable: paired in
    key order); None when neither can be done."""
    if old_key in columns:
        old = sql.Identifier(old_key)
        if _unique_in(conn, source, old):
            return "key", sql.SQL("SELECT {o}::text AS old, {n}::text AS new FROM {s}").format(
                o=old, n=key.ident, s=source.ident
            )
    if old_source is None or old_columns is None or old_key not in old_columns:
        return None
    shared = sorted(set(columns) & set(old_columns))
    if not shared:
        return None
    row = sql.SQL("md5(ROW({})::text)").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in shared)
    )
    return "content", sql.SQL(
        """SELECT o.old, n.new FROM
           (SELECT {row} AS f, row_number() OVER (PARTITION BY {row} ORDER BY {ok}::text) AS i,
                   {ok}::text AS old FROM {os}) o
           JOIN (SELECT {row} AS f,
                        row_number() OVER (PARTITION BY {row} ORDER BY {nk}::text) AS i,
                        {nk}::text AS new FROM {ns}) n USING (f, i)"""
    ).format(
        row=row, ok=sql.Identifier(old_key), os=old_source.ident, nk=key.ident, ns=source.ident
    )


def rekey(
    conn: psycopg.Connection, release_id: int, how: tuple[str, sql.Composable]
) -> Rekeyed | None:
    """Carry the release's map to the new key through `how` (see `translation`); None
    without a map. Entries nobody in the new source matches are dropped (people gone)."""
    if not has_map(conn, release_id):
        return None
    by, pairs = how
    before = conn.execute(
        sql.SQL("SELECT count(*) FROM {}").format(table(release_id))
    ).fetchone()[0]
    fresh = _fresh(release_id)
    conn.execute(
        sql.SQL("CREATE TABLE {} AS SELECT * FROM {}; CREATE TABLE {} AS SELECT * FROM {}").format(
            fresh["sets"], table(release_id, "sets"), fresh["shown"], table(release_id, "shown")
        )
    )
    conn.execute(sql.SQL("CREATE TABLE {} {}").format(fresh[None], COLUMNS))
    kept = conn.execute(
        sql.SQL(
            "INSERT INTO {fresh} SELECT m.release_id, p.new, m.gid, m.vid, m.sid, m.fp "
            "FROM {part} m JOIN ({pairs}) p ON p.old = m.key"
        ).format(fresh=fresh[None], part=table(release_id), pairs=pairs)
    ).rowcount
    swap_in(conn, release_id, fresh)
    return Rekeyed(by, int(kept), int(before) - int(kept))


def swap_in(
    conn: psycopg.Connection, release_id: int, fresh: dict[str | None, sql.Identifier],
    analyzed: bool = False,
) -> None:  # fmt: skip
    """The fresh tables become the release's map (the old ones dropped), analysed for the
    joins of the next run (unless their writer did)."""
    forget(conn, release_id)
    for part in _PARTS:
        conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(
            fresh[part], sql.Identifier(part_name(release_id, part))))  # fmt: skip
        conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(
            table(release_id, part), sql.Literal(PRIVATE)))  # fmt: skip
        if not analyzed:
            analyze_stage(conn, table(release_id, part))


def drop_fresh(conn: psycopg.Connection, release_id: int) -> None:
    """Drop the fresh tables of the release's next map, if a run left them (`fresh_tables`)."""
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}, {}, {}").format(
        *_fresh(release_id).values()))  # fmt: skip


def forget(conn: psycopg.Connection, release_id: int) -> None:
    """Drop the release's map, if it has one."""
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}, {}, {}").format(
        *(table(release_id, p) for p in _PARTS)))  # fmt: skip


def values_needed(models: list) -> int:
    """The plausible values a release promises: its l (rounded up) or p, else 1."""
    needed = 1
    for m in models:
        for attr in ("l", "p"):
            v = getattr(m, attr, None)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                needed = max(needed, math.ceil(v))
    return needed
