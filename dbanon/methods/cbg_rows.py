"""The relations of a cbg run, written from the run's arrays: the QIT, the ST and the rows the
map reads (dbanon.methods.cbg's ROWS), each with one binary COPY.

The extract streamed every row's key, QIs, fingerprint and tagged sensitive value once
(dbanon.methods.grouped_rows.extract_rows); the algorithm gave each row its group, bucket and
unit. Everything the release and the map are made of is then in the arrays, so nothing is
joined back to the source: the QIT's labels are each group's, made once per group in numpy
(`label_groups`, as the grouping methods make theirs: [min, max] of a number, the hierarchy's
lowest common ancestor of a category, or without a hierarchy the value the group agrees on,
else '*'), the ST's counts one counting sort of the rows by (bucket, value). At a million rows
the SQL this replaces (the source joined with a staged copy of the ids, then a GROUP BY of the
groups joined back and sorted) took 7.2 s of the server.

What the map keeps of each unit and class (composition's units and classes: what each unit
showed, each class's values, the values of its rows' buckets) is made from the same arrays
(`stage_units`), each array in the order the database sorts its text: the aggregates it spares
took 3.7 s of a million-row publish.

Order, which the release does not otherwise reveal: QIT rows by bucket id, the rows of one
bucket in an order drawn from the run's seed; ST rows by (bucket id, the value's text in byte
order). Both follow the published content and the seed, never the source's order; neither
holds the row key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import psycopg
from psycopg import sql

from dbanon.core.groupsort import by_group, distinct
from dbanon.db.rows import NULL_INT, TEXTS, Dictionary, Field, copy_rows
from dbanon.db.settings import analyze_stage
from dbanon.methods.grouped_rows import Extracted, retype, secret_order, untagged
from dbanon.models.crossbucket import BUCKET_ID, COUNT
from dbanon.setlogic import composition

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved

_NONE = np.iinfo(np.int32).min  # an id array's entry for a row the relation shows no id for


def _ids(values: np.ndarray, kept: np.ndarray) -> Field:
    """An int4 field: the id of each kept row, NULL for the others."""
    return Field.int4(np.where(kept, values, _NONE).astype(np.int64), null=_NONE)


def stage_rows(
    conn: psycopg.Connection, rows: sql.Identifier, ex: Extracted, gid: np.ndarray,
    bid: np.ndarray, unit: np.ndarray, waiting: np.ndarray | None,
) -> None:  # fmt: skip
    """ROWS (key, gid, b, u, w, t, fp): every source row with the group, bucket and unit the
    map keeps (NULL for a row not released), its waiting block under `sealed` (-1: none), its
    tagged sensitive value and its fingerprint as the map stores it."""
    assert ex.tags is not None
    kept = gid > 0
    conn.execute(sql.SQL(
        "CREATE TEMP TABLE {} (key text, gid int4, b int4, u int4, w int4, t text, fp text) "
        "ON COMMIT DROP").format(rows))  # fmt: skip
    fields = [
        Field.entries(Dictionary.of_keys(ex.keys)),
        _ids(gid, kept), _ids(bid, kept), _ids(unit, kept),
        Field.constant(NULL_INT) if waiting is None else Field.int4(waiting, null=-1),
        Field.entries(Dictionary.of(ex.tags.values), np.asarray(ex.tags.codes)),
        Field(composition.fp_field(ex.fp_kind), np.asarray(ex.fp)),
    ]  # fmt: skip
    copy_rows(conn, sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(rows), fields,
              np.arange(len(gid), dtype=np.int64))  # fmt: skip
    analyze_stage(conn, rows)


def write_qit(
    conn: psycopg.Connection, r: Resolved, target: sql.Identifier, labels: list[Field],
    bid: np.ndarray, kept: np.ndarray,
) -> None:  # fmt: skip
    """The QIT: each kept row's group labels (`label_groups`) and its bucket id, by bucket,
    the rows of a bucket in an order drawn from the run's seed."""
    cols = [sql.SQL("{} text").format(c.ident) for c in r.qi]
    cols.append(sql.SQL("{} int4").format(sql.Identifier(BUCKET_ID)))
    conn.execute(sql.SQL("CREATE TABLE {} ({})").format(target, sql.SQL(", ").join(cols)))
    shuffled = kept[secret_order(r, len(kept))]
    order = shuffled[by_group(bid[shuffled])]  # a stable sort by bucket id
    del shuffled
    copy_rows(conn, sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(target),
              [*labels, Field.int4(bid)], order)  # fmt: skip
    retype(conn, r, target, r.options.get("ranges") == "typed", set())


def write_st(
    conn: psycopg.Connection, r: Resolved, target: sql.Identifier, ex: Extracted,
    bid: np.ndarray, kept: np.ndarray,
) -> None:  # fmt: skip
    """The ST: per bucket, each sensitive value its kept rows hold and how many, in (bucket
    id, value) order; the value of the column's own type, as the source holds it."""
    tags = ex.tags
    assert tags is not None
    sa, raw = r.sensitive[0], ex.shown[0]
    textual = sa.name in ex.textual
    conn.execute(sql.SQL(
        "CREATE TABLE {t} AS SELECT NULL::int4 AS {b}, {v} AS {sa}, NULL::int4 AS {c} "
        "FROM {src} s WITH NO DATA"
    ).format(t=target, b=sql.Identifier(BUCKET_ID), sa=sa.ident, c=sql.Identifier(COUNT),
             v=sql.SQL("s.{}::text" if textual else "s.{}").format(sa.ident),
             src=r.source.ident))  # fmt: skip
    texts = tags.values
    rank = np.empty(len(texts), dtype=np.int64)  # each tag's place in its text's byte order
    rank[sorted(range(len(texts)), key=lambda i: texts[i].encode())] = np.arange(len(texts))
    value = rank[np.asarray(tags.codes)[kept]]
    by_value = by_group(value)
    cells = by_value[by_group(bid[kept][by_value])]  # kept rows, by (bucket, value), stably
    del by_value
    cell = bid[kept][cells].astype(np.int64) * max(len(texts), 1) + value[cells]
    starts = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]]) if len(cell) else cell
    first = kept[cells[starts]]  # a row of each (bucket, value), in that order
    count = np.zeros(len(bid), dtype=np.int64)
    count[first] = np.diff(np.r_[starts, len(cells)])
    del cell, cells, value
    shown = (Field.entries(Dictionary.of(untagged(tags).values), np.asarray(tags.codes))
             if raw is None else Field.entries(Dictionary.of_keys(raw)))  # fmt: skip
    copy_rows(conn, sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(target),
              [Field.int4(bid), shown, Field.int4(count)], first)  # fmt: skip
    retype(conn, r, target, False, ex.textual)


def stage_units(
    conn: psycopg.Connection, rows: sql.Identifier, ex: Extracted, gid: np.ndarray,
    bid: np.ndarray, unit: np.ndarray,
) -> None:  # fmt: skip
    """The units (u, shown: its rows' tags, with repeats) and classes (gid, vals: the distinct
    tags of every bucket its rows are in) of the released rows, as composition reads them for
    the map of `rows` (dbanon.setlogic.composition.stage_units); tags sorted as the database
    sorts their text."""
    tags = ex.tags
    assert tags is not None
    texts = [str(t) for t in tags.values]
    (by_text,) = conn.execute("SELECT array_agg(t ORDER BY t) FROM unnest(%s::text[]) t",
                              [texts]).fetchone()  # fmt: skip
    place = {t: i for i, t in enumerate(by_text or [])}
    rank = np.array([place[t] for t in texts], dtype=np.int64)
    code_at = np.argsort(rank)  # the tag code of each rank
    kept = np.flatnonzero(gid > 0)
    ranks = rank[np.asarray(tags.codes)[kept]]
    width = max(len(texts), 1)

    def sets(owner: np.ndarray, elems: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sorted (owner, rank) pairs as one id per owner and its elements' tag codes."""
        starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]]) if len(owner) else owner
        return owner[starts], np.r_[starts, len(owner)].astype(np.int64), code_at[elems]

    units = unit[kept].astype(np.int64)
    order = np.lexsort((ranks, units))
    u_ids, u_offs, u_elems = sets(units[order], ranks[order])
    del units, order
    b = bid[kept].astype(np.int64)
    bucket_ranks = distinct(b * width + ranks)  # each bucket's distinct tags, by rank
    of_bucket, its_rank = bucket_ranks // width, bucket_ranks % width
    del bucket_ranks, ranks
    span = int(b.max(initial=0)) + 1
    pairs = distinct(gid[kept].astype(np.int64) * span + b)  # (class, bucket), distinct
    del b
    per_bucket = np.bincount(of_bucket, minlength=span)  # its distinct tags, from `first`
    starts = np.zeros(span, dtype=np.int64)
    np.cumsum(per_bucket[:-1], out=starts[1:])
    first, count = starts[pairs % span], per_bucket[pairs % span]
    del per_bucket, starts
    each = np.repeat(np.arange(len(pairs)), count)
    at = first[each] + np.arange(len(each)) - np.repeat(np.cumsum(count) - count, count)
    cells = distinct((pairs // span)[each] * width + its_rank[at])  # (class, tag), distinct
    del pairs, first, count, each, at
    c_ids, c_offs, c_elems = sets(cells // width, cells % width)
    del cells
    words = Dictionary.of(texts)

    def write(units_table: sql.Identifier, classes_table: sql.Identifier) -> None:
        for table, ids, offs, elems in ((units_table, u_ids, u_offs, u_elems),
                                        (classes_table, c_ids, c_offs, c_elems)):  # fmt: skip
            copy_rows(conn, sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(table), [
                Field.int4(ids), Field(TEXTS, dictionary=words, elements=(offs, elems)),
            ], np.arange(len(ids)))  # fmt: skip

    composition.stage_units(conn, rows, write)
