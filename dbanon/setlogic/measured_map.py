"""The private map of a release whose method judges each row itself (LAG), from the run's arrays.

LAG shows a person her group and, per flagged attribute, the bucket of each of its rows; it
judges every person an earlier release showed (dbanon.algorithms.lag_persist.Judge: her
plausible rows and values now). So its map is composition's "measured" form, and the run holds
all of it as arrays once it has laid its release out:
- a map row per released row and per person judged (released or left out): key, group (-1:
  left out), set of plausible values (`vid`), what the release showed of her (`sid`; NULL when
  left out) and the fingerprint of her released columns;
- a set (`sets`: vid, vals) is a judged person's plausible values, else her group's: the values
  of the buckets its rows lie in, every attribute's, each tagged `attribute SEP value`; an empty
  one is no set (vid NULL); equal sets are kept once;
- what a row showed (`shown`: sid, shown) is its bucket in each attribute that has one, tagged
  `attribute SEP bucket id`, in the attributes' order; equal ones are kept once.
Sets' elements are written sorted by their text (code points), as dbanon.setlogic.grouped_map
writes them: they are compared as sets everywhere. The guard's figures are the method's own
judgement of the persisting released rows. Every table is written with one binary COPY (on a
second backend while the run checks its release: dbanon.setlogic.beside), where the map was
staged, joined and aggregated in SQL (1M rows: 9 s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import psycopg
from psycopg import sql

from dbanon.core.groupsort import distinct
from dbanon.db import copykernels as kernels
from dbanon.db.rows import Dictionary, Field, copy_rows
from dbanon.db.stream import Keys
from dbanon.models.base import Spread
from dbanon.setlogic import composition
from dbanon.setlogic.composition import Composition
from dbanon.setlogic.grouped_map import Sets, copy_sets, set_ids, text_rank

SEP = "\x1f"  # between an attribute's name and a value or bucket in the map's tags
_NULL32 = np.iinfo(np.int32).min  # an id the map leaves NULL


@dataclass(frozen=True)
class Judged:
    """A run's map rows and sets (see the module's docstring), and its judged figures."""

    measured: ClassVar[bool] = True  # the guard reads the method's judgement

    keys: Keys
    rows: np.ndarray  # the map's rows, as positions in `keys`
    gid: np.ndarray  # int32 per map row (-1: left out)
    vid: np.ndarray  # int32 per map row (_NULL32: none)
    sid: np.ndarray  # int32 per map row (_NULL32: left out)
    fp: np.ndarray  # int64 per row of `keys`
    fp_kind: str
    sets: Sets  # by vid, elements index `set_tags`
    set_tags: list[str]
    shown: Sets  # by sid, elements index `shown_tags`
    shown_tags: Dictionary
    pr: np.ndarray  # per persisting released row: its plausible rows
    pv: np.ndarray  # and fewest plausible values (-1: none counted)
    first: bool  # the release has no map yet: nothing to measure


def judged(
    keys: Keys, gid: np.ndarray, buckets: dict[str, np.ndarray], codes: dict[str, np.ndarray],
    tags: dict[str, list[str]], known: dict[int, tuple[dict[str, frozenset[int]], int, int]],
    fp: np.ndarray, fp_kind: str, first: bool,
) -> Judged:  # fmt: skip
    """The map of a run: per row of `keys` its group (`gid`, -1: left out), per attribute its
    bucket (0: none) and its flagged value's code (-1: none; `tags[a][code]` its tag), and per
    person judged (`known`: row -> her plausible values by attribute, rows, fewest values)."""
    from dbanon.algorithms.lag_persist import class_values

    gid = np.asarray(gid, dtype=np.int64)
    attrs = list(buckets)
    # The vocabulary of values, each tag once (equal tags of two codes are one element).
    index: dict[str, int] = {}
    code_of = {}
    for a in attrs:
        code_of[a] = np.array([index.setdefault(f"{a}{SEP}{t}", len(index)) for t in tags[a]],
                              dtype=np.int64)  # fmt: skip
    set_tags = list(index)
    rank = text_rank(set_tags)
    groups = int(gid.max(initial=-1)) + 1
    # Each group's values: the values of its rows' buckets, every attribute's, as one key
    # (group, rank) a pair (memory: one int64 per pair, not a group's and a value's).
    width = max(len(rank), 1)
    keys_of = []
    for a in attrs:
        g, c = class_values(gid, buckets[a], codes[a])
        keys_of.append(g * width + rank[code_of[a][c]])
        del g, c
    g_sets = _from_keys(np.concatenate([np.zeros(0, np.int64), *keys_of]), width, groups, rank)
    del keys_of
    # Each judged person's plausible values, once per distinct object (rows of a class share).
    judged_rows = np.fromiter(known, dtype=np.int64, count=len(known))
    which = np.empty(len(known), dtype=np.int64)
    ids: dict[int, int] = {}
    j_owner: list[int] = []
    j_elems: list[int] = []
    pr = np.empty(len(known), dtype=np.int64)
    pv = np.empty(len(known), dtype=np.int64)
    for i, (plausible, rows_now, fewest) in enumerate(known.values()):
        if id(plausible) not in ids:
            ids[id(plausible)] = len(ids)
            for a, cs in plausible.items():
                if a in code_of:
                    for c in cs:
                        j_owner.append(ids[id(plausible)])
                        j_elems.append(int(code_of[a][c]))
        which[i], pr[i], pv[i] = ids[id(plausible)], rows_now, fewest
    j_sets = _from_keys(np.asarray(j_owner, dtype=np.int64) * width + rank[np.asarray(
        j_elems, dtype=np.int64)], width, len(ids), rank)  # fmt: skip
    # Equal sets (a group's and a person's alike) kept once; an empty one is none.
    every = g_sets.then(j_sets)
    del g_sets, j_sets
    real = np.flatnonzero(every.sizes() > 0)
    set_id = np.full(len(every), _NULL32, dtype=np.int64)
    kept = every.take(real)
    del every
    found, firsts = set_ids(kept.offs, kept.elems)
    set_id[real] = found
    sets = kept.take(firsts)
    del kept, found, firsts
    # The map's rows: every released row, and every person judged; a person's set, else her
    # group's.
    released = gid >= 0
    in_map = released.copy()
    in_map[judged_rows] = True
    rows = np.flatnonzero(in_map)
    del in_map
    vid = set_id.astype(np.int32)[np.maximum(gid, 0)]  # a row left out: its own, if judged
    vid[judged_rows] = set_id[groups + which]
    del set_id
    sid, shown, shown_tags = _shown(gid, buckets)
    persisting = released[judged_rows]
    pr, pv = pr[persisting], pv[persisting]
    return Judged(keys, rows, gid[rows].astype(np.int32), vid[rows], sid[rows], np.asarray(fp),
                  fp_kind, sets, set_tags, shown, shown_tags, pr, pv, first)


def _from_keys(key: np.ndarray, width: int, count: int, rank: np.ndarray) -> Sets:
    """`count` sets from keys set * width + element rank (repeats allowed), each set's
    distinct elements by rank."""
    key = distinct(key) if len(key) else key.astype(np.int64)
    offs = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.bincount(key // width, minlength=count), out=offs[1:])
    return Sets(offs, np.argsort(rank)[key % width])


def _shown(gid: np.ndarray, buckets: dict[str, np.ndarray]
           ) -> tuple[np.ndarray, Sets, Dictionary]:  # fmt: skip
    """Per row its shown id (_NULL32: left out), each distinct shown (its buckets as tags, in
    the attributes' order; id 0: no bucket), and the tags. The rows with a bucket are sorted
    once by their buckets (int32), each run of equal ones a shown."""
    released = gid >= 0
    some = np.zeros(len(gid), dtype=bool)
    for b in buckets.values():
        some |= b > 0
    rows = np.flatnonzero(some & released)
    del some
    cols = [np.asarray(b[rows], dtype=np.int32) for b in buckets.values()]
    order = np.lexsort(cols[::-1]) if cols else np.zeros(0, dtype=np.int64)
    new = np.zeros(len(rows), dtype=bool)
    new[:1] = True
    starts = []
    for i, c in enumerate(cols):
        cols[i] = c = c[order]  # sorted: one column at a time
        new[1:] |= c[1:] != c[:-1]
    for c in cols:
        starts.append(c[new])  # each shown's bucket in this attribute (0: none)
    del cols
    sid = np.full(len(gid), _NULL32, dtype=np.int32)
    sid[released] = 0
    sid[rows[order]] = np.cumsum(new, dtype=np.int32)  # ids from 1
    del order, rows, new
    count = len(starts[0]) if starts else 0
    sizes = np.zeros(count + 1, dtype=np.int64)
    for mine in starts:
        sizes[1:] += mine > 0
    offs = np.zeros(count + 2, dtype=np.int64)
    np.cumsum(sizes, out=offs[1:])
    elems = np.empty(int(offs[-1]), dtype=np.int64)
    fill = offs[1:-1].copy()  # where each shown's next element goes
    tags: list[Dictionary] = []
    base = 0
    for a, mine in zip(buckets, starts, strict=True):
        has = np.flatnonzero(mine > 0)
        present = distinct(mine[has].astype(np.int64))
        elems[fill[has]] = base + np.searchsorted(present, mine[has])
        fill[has] += 1
        prefix = np.frombuffer(f"{a}{SEP}".encode(), dtype=np.uint8)
        tags.append(Dictionary(*kernels.prefixed_int_texts(prefix, present)))
        base += len(present)
    return sid, Sets(offs, elems), _joined(tags)


def _joined(parts: list[Dictionary]) -> Dictionary:
    """Dictionaries one after another, as one."""
    if not parts:
        return Dictionary(np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.uint8))
    lens = np.concatenate([d.lens for d in parts])
    starts = np.zeros(len(lens), dtype=np.int64)
    np.cumsum(np.maximum(lens[:-1], 0), out=starts[1:])
    return Dictionary(starts, lens, np.concatenate([d.data[: int(np.maximum(d.lens, 0).sum())]
                                                   for d in parts]))  # fmt: skip


def measure(conn: psycopg.Connection, release_id: int, rows: Judged, k: int,
            values_needed: int, spread: Spread | None = None) -> Composition | None:  # fmt: skip
    """The method's judgement of the persisting rows (None on a first run)."""
    if rows.first:
        return None
    counted = rows.pv >= 0
    return Composition(
        len(rows.pr),
        int(rows.pr.min()) if len(rows.pr) else None,
        int(rows.pv[counted].min()) if counted.any() else None,
        int((rows.pr < k).sum()),
        int((counted & (rows.pv < values_needed)).sum()),
    )


def released_tags(conn: psycopg.Connection, rows: Judged) -> dict[str, int]:
    raise ValueError("a method that measures its own rows promises no spread of values")


def prepare(conn: psycopg.Connection, release_id: int, rows: Judged) -> tuple[int, Judged]:
    """What `write` needs: the map reads nothing of the old one (the method judged it)."""
    return release_id, rows


def write(conn: psycopg.Connection, kept: tuple[int, Judged],
          fresh: dict[str | None, sql.Identifier]) -> None:  # fmt: skip
    """The map's rows, sets and shown values into the `fresh` tables, by COPY."""
    release_id, rows = kept
    copy_rows(conn, sql.SQL(
        "COPY {} (release_id, key, gid, vid, sid, fp) FROM STDIN (FORMAT BINARY)"
    ).format(fresh[None]), [
        Field.constant(release_id), Field.entries(Dictionary.of_keys(rows.keys), rows.rows),
        Field.int4(rows.gid), Field.int4(rows.vid, null=_NULL32),
        Field.int4(rows.sid, null=_NULL32),
        Field(composition.fp_field(rows.fp_kind), rows.fp, rows.rows),
    ], np.arange(len(rows.rows)))  # fmt: skip
    copy_sets(conn, fresh["sets"], np.arange(len(rows.sets)), rows.sets,
               Dictionary.of(rows.set_tags))  # fmt: skip
    copy_sets(conn, fresh["shown"], np.arange(len(rows.shown)), rows.shown, rows.shown_tags)


def put(conn: psycopg.Connection, kept: tuple[int, Judged]) -> None:
    """`kept` written into fresh tables on `conn` and swapped in for the release's map."""
    fresh = composition.fresh_tables(conn, kept[0])
    write(conn, kept, fresh)
    composition.swap_in(conn, kept[0], fresh)


def store(conn: psycopg.Connection, release_id: int, rows: Judged) -> None:
    """Replace the release's map by this run's."""
    put(conn, prepare(conn, release_id, rows))


__all__ = ["SEP", "Judged", "judged", "measure", "prepare", "put", "store", "write"]
