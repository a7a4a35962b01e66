"""The intersection guard and the private map of a grouping release, from the run's arrays.

A grouping method (k-member, Mondrian, (θ,k)) holds every row's key, group, tagged sensitive
value and fingerprint once it has grouped its rows, and its extract read what the latest map
holds of each row in the same scan. So the measure of what intersecting the releases leaves a
persisting row, and the new map, are computed here in numpy, and each table of the map is
written with one binary COPY: no staging of the run's rows, no join of them with the source or
the old map, no GROUP BY of a million rows. The figures and the map's layout are those of
dbanon.setlogic.composition, whose docstring defines them and whose SQL measures the other
methods:
- a class's values are its rows' tags; a persisting row's plausible values are the values of
  its set in the map (its `vid`) that its new class holds, its plausible rows the rows of the
  class whose value is one of them; a row without a set (new, or no sensitive column) keeps
  its whole class;
- each distinct set is written once (sets: `vid`, `vals`), each group's values with repeats
  once (shown: `sid`, the group), and a row the release withholds that the map held keeps its
  old set and what its group showed, under new ids, in its waiting block.
Elements are written sorted by their text (code points): a set's elements are compared as a
set everywhere (containment, membership), never by their order.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
import psycopg
from numba import njit
from psycopg import sql

from dbanon.core.groupsort import distinct
from dbanon.db.rows import NULL_INT, TEXTS, Dictionary, Field, copy_rows
from dbanon.db.stream import Coded, Keys, copy_columns
from dbanon.models.base import Spread
from dbanon.setlogic import composition
from dbanon.setlogic.composition import Composition


@dataclass(frozen=True)
class OldMap:
    """What the latest map holds of each of this run's rows, as the extract read it."""

    mapped: np.ndarray  # bool: the row is in the map
    vid: np.ndarray  # int: its set of plausible values (-1: none)
    sid: np.ndarray  # int: what its group showed (-1: none)


@dataclass(frozen=True)
class Mapped:
    """This run's rows, in the order of its arrays: what the guard and the map need."""

    measured: ClassVar[bool] = False  # the guard measures them (composition.Rows.measured)

    keys: Keys
    gid: np.ndarray  # int: the row's group in this release; -1: withheld
    wait: np.ndarray | None  # int: a withheld row's waiting block (-1: none)
    tags: Coded | None  # each row's tagged sensitive value; None without a sensitive column
    fp: np.ndarray  # int64 per row: its fingerprint (composition.fingerprint)
    old: OldMap | None  # None: the release has no map yet
    fp_kind: str = "md5"  # how `fp` was made (composition.RECORD, MD5)
    # the classes and pairs, computed once for the measure and the store (by release id)
    runs: dict = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Sets:
    """Sets of value codes: set s holds elems[offs[s]:offs[s + 1]]."""

    offs: np.ndarray  # int64, one more than the sets
    elems: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.offs) - 1

    def sizes(self) -> np.ndarray:
        return np.diff(self.offs)

    def then(self, other: Sets) -> Sets:
        """These sets, then `other`'s, as one."""
        return Sets(np.r_[self.offs, self.offs[-1] + other.offs[1:]],
                    np.r_[self.elems, other.elems])  # fmt: skip

    def take(self, which: np.ndarray) -> Sets:
        """Sets which[0], which[1], ... of these."""
        which = np.asarray(which, dtype=np.int64)
        lens = self.offs[which + 1] - self.offs[which]
        offs = np.zeros(len(which) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        at = np.repeat(self.offs[which] - offs[:-1], lens) + np.arange(offs[-1])
        return Sets(offs, self.elems[at])

    def owner(self) -> np.ndarray:
        """The set each element belongs to."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.sizes())




_NO_SETS = Sets(np.zeros(1, np.int64), np.zeros(0, np.int64))


def _aligned(wanted: np.ndarray, found: np.ndarray, sets: Sets) -> tuple[np.ndarray, Sets]:
    """For each id wanted, whether `found` (sorted, with `sets`) holds it, and its set (empty
    where it does not: a set the map lost keeps no value, as composition's LEFT JOIN reads
    it)."""
    ok, at = _found(wanted, found)
    return ok, sets.then(Sets(np.zeros(2, np.int64), _NO_SETS.elems)).take(
        np.where(ok, at, len(sets)))

class Codes:
    """Tag codes: this run's (in the order of its Coded values), then tags that only earlier
    releases hold, numbered as they are met."""

    def __init__(self, tags: Coded) -> None:
        self.tags: list[str] = [str(t) for t in tags.values]
        self.index = {t: i for i, t in enumerate(self.tags)}

    def of(self, tags: Coded) -> np.ndarray:
        """The codes of another column of tags."""
        at = np.array([self._code(str(t)) for t in tags.values], dtype=np.int64)
        return at[tags.codes] if len(at) else np.zeros(len(tags.codes), dtype=np.int64)

    def _code(self, tag: str) -> int:
        if tag not in self.index:
            self.index[tag] = len(self.tags)
            self.tags.append(tag)
        return self.index[tag]

    def rank(self) -> np.ndarray:
        """Each code's place when the tags are sorted by their text."""
        return text_rank(self.tags)


def text_rank(tags: list[str]) -> np.ndarray:
    """Each tag's place when the tags are sorted by their text (code points)."""
    order = np.array(sorted(range(len(tags)), key=tags.__getitem__), np.int64)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


def read_sets(conn: psycopg.Connection, rel: sql.Composable, ids: np.ndarray,
              codes: Codes) -> tuple[np.ndarray, Sets]:  # fmt: skip
    """Sets of a map's table `rel` ((id, text[]): its sets, or what its groups showed) by id,
    as codes: the ids asked for that it holds, sorted, and their sets (elements as stored,
    repeats kept). One COPY of their elements: no Python object per element."""
    ids = distinct(np.asarray(ids, dtype=np.int64))
    none = np.zeros(0, np.int64)
    if not len(ids):
        return none, Sets(np.zeros(1, np.int64), none)
    got, ords, tags = copy_columns(
        conn,
        sql.SQL(
            "SELECT s.id::float8, e.o::float8, e.t FROM {} AS s (id, vals) "
            "LEFT JOIN LATERAL unnest(s.vals) WITH ORDINALITY AS e (t, o) ON true "
            "WHERE s.id = ANY({})"
        ).format(rel, sql.Literal(ids.tolist())),
        ["float8", "float8", "text"],
    )
    assert isinstance(tags, Coded)
    sid, at = np.asarray(got, dtype=np.int64), np.asarray(ords)
    order = np.lexsort((at, sid))
    sid, at, elems = sid[order], at[order], codes.of(tags)[order]
    found = distinct(sid)
    real = ~np.isnan(at)  # an empty set reads as one row without an element
    offs = np.zeros(len(found) + 1, dtype=np.int64)
    np.cumsum(np.bincount(np.searchsorted(found, sid[real]), minlength=len(found)), out=offs[1:])
    return found, Sets(offs, elems[real])


@njit(cache=True)
def set_ids(offs: np.ndarray, elems: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(id of each set, the first set of each id): equal sets (same elements in the same
    order) share an id. Sets are hashed, and sets with one hash compared element by
    element, so no two different sets ever share an id."""
    n = len(offs) - 1
    h = np.empty(n, np.uint64)
    for i in range(n):
        x = np.uint64(14695981039346656037)
        for e in range(offs[i], offs[i + 1]):
            x = (x ^ np.uint64(elems[e] + 1)) * np.uint64(1099511628211)
        h[i] = (x ^ np.uint64(offs[i + 1] - offs[i])) * np.uint64(1099511628211)
    order = np.argsort(h, kind="mergesort")
    ids = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    count = 0
    i = 0
    while i < n:
        j = i
        while j < n and h[order[j]] == h[order[i]]:
            j += 1
        base = count
        for a in range(i, j):
            s = order[a]
            found = -1
            for c in range(base, count):
                t = first[c]
                ln = offs[s + 1] - offs[s]
                if ln != offs[t + 1] - offs[t]:
                    continue
                same = True
                for e in range(ln):
                    if elems[offs[s] + e] != elems[offs[t] + e]:
                        same = False
                        break
                if same:
                    found = c
                    break
            if found < 0:
                first[count] = s
                found = count
                count += 1
            ids[s] = found
        i = j
    return ids, first[:count]


@dataclass(frozen=True)
class _Run:
    """The run's classes and (class, old set) pairs, computed once for measure and store."""

    codes: Codes | None  # None without a sensitive column
    released: np.ndarray  # the rows released (gid >= 0)
    pair_gid: np.ndarray  # per pair of (class, old set): its class
    pair_old: np.ndarray  # its old set (-1: none)
    members: np.ndarray  # its rows that the map held
    pair_of_row: np.ndarray  # per released row, its pair
    class_size: np.ndarray  # per pair, the rows of its class
    kept: Sets | None  # per pair: the values its rows keep, by rank (None: no sensitive)
    plausible: np.ndarray  # per pair: rows of its class holding one of them
    shown: Sets | None  # per group id: its rows' values with repeats, by rank


def _distinct_pairs(a: np.ndarray, b: np.ndarray, width: int, places: bool = True
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:  # fmt: skip
    """(keys a * width + b, sorted and distinct; how many rows hold each; with `places`, each
    row's key's place): counted in one bincount where the keys are few enough, else by a
    sort."""
    key = a.astype(np.int64) * width + b
    space = (int(a.max()) + 1) * width if len(a) else 0
    if space <= max(2 * len(a), 1 << 20):
        counts = np.bincount(key, minlength=space)
        keys = np.flatnonzero(counts)
        if not places:
            return keys, counts[keys], None
        place = np.cumsum(counts > 0, dtype=np.int64) - 1
        return keys, counts[keys], place[key].astype(np.int32)
    if not places:
        keys, counts = np.unique(key, return_counts=True)
        return keys, counts, None
    keys, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    return keys, counts, inverse.reshape(-1).astype(np.int32)


def _run(conn: psycopg.Connection, release_id: int, rows: Mapped) -> _Run:
    if release_id not in rows.runs:
        rows.runs[release_id] = _classes(conn, release_id, rows)
    return rows.runs[release_id]


def _classes(conn: psycopg.Connection, release_id: int, rows: Mapped) -> _Run:
    gid = np.asarray(rows.gid)
    released = np.flatnonzero(gid >= 0).astype(np.int32)
    g = gid[released].astype(np.int32)
    sizes = np.bincount(g) if len(g) else np.zeros(0, np.int64)
    old = rows.old
    mapped = old.mapped[released] if old is not None else np.zeros(len(g), dtype=bool)
    vid = (np.asarray(old.vid)[released].astype(np.int32) if old is not None and rows.tags
           is not None else np.full(len(g), -1, dtype=np.int32))  # fmt: skip
    span = int(vid.max()) + 2 if len(vid) else 1
    pkeys, _, places = _distinct_pairs(g, vid + 1, span)
    assert places is not None
    pair_of_row = places
    del vid
    pair_gid, pair_old = pkeys // span, pkeys % span - 1
    members = np.bincount(pair_of_row, weights=mapped, minlength=len(pkeys)).astype(np.int64)
    del mapped
    class_size = sizes[pair_gid].astype(np.int64)
    if rows.tags is None:
        return _Run(None, released, pair_gid, pair_old, members, pair_of_row, class_size,
                    None, class_size, None)  # fmt: skip
    codes = Codes(rows.tags)
    with_old = pair_old >= 0
    wanted = distinct(pair_old[with_old])
    _, old_sets = _aligned(wanted, *read_sets(conn, composition.sets_of(conn, release_id),
                                              wanted, codes))  # fmt: skip
    rank = codes.rank()
    width = len(codes.tags)
    # Each class's values (distinct, by rank) with their rows, and its values with repeats.
    ckeys, ccount, _ = _distinct_pairs(g, rank[np.asarray(rows.tags.codes)[released]], width,
                                       places=False)  # fmt: skip
    del g
    cls_gid = ckeys // width
    cls_code = np.argsort(rank)[ckeys % width]
    cls_offs = np.searchsorted(cls_gid, np.arange(len(sizes) + 1))
    classes = Sets(cls_offs.astype(np.int64), cls_code)
    shown = Sets(np.r_[0, np.cumsum(sizes)].astype(np.int64),
                 np.repeat(cls_code.astype(np.int32), ccount))  # fmt: skip
    # A pair without an old set keeps its class's values, all its rows plausible; one with a
    # set keeps the set's values its class holds, the rows of the class holding them.
    own = np.flatnonzero(~with_old)
    narrowed, plausible = _narrowed(np.flatnonzero(with_old), pair_gid, pair_old, wanted,
                                    old_sets, ckeys, ccount, rank, width)  # fmt: skip
    kept_of_own = classes.take(pair_gid[own])
    lens = np.zeros(len(pkeys), dtype=np.int64)
    lens[own] = kept_of_own.sizes()
    lens[with_old] = narrowed.sizes()
    offs = np.zeros(len(pkeys) + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    elems = np.empty(offs[-1], dtype=np.int64)
    for which, part in ((own, kept_of_own), (np.flatnonzero(with_old), narrowed)):
        elems[np.repeat(offs[which] - part.offs[:-1], part.sizes()) + np.arange(
            len(part.elems))] = part.elems  # fmt: skip
    plausible_all = class_size.copy()
    plausible_all[with_old] = plausible
    return _Run(codes, released, pair_gid, pair_old, members, pair_of_row, class_size,
                Sets(offs, elems), plausible_all, shown)  # fmt: skip


def _narrowed(pairs: np.ndarray, pair_gid: np.ndarray, pair_old: np.ndarray,
              wanted: np.ndarray, old_sets: Sets, ckeys: np.ndarray, ccount: np.ndarray,
              rank: np.ndarray, width: int) -> tuple[Sets, np.ndarray]:  # fmt: skip
    """For these pairs (with an old set each): the values of the set their class holds, by
    rank, and how many rows of the class hold one of them."""
    cand = old_sets.take(np.searchsorted(wanted, pair_old[pairs]))
    owner = cand.owner()
    ckey = pair_gid[pairs][owner] * width + rank[cand.elems]
    held, at = _found(ckey, ckeys)
    kept_owner, kept_code = owner[held], cand.elems[held]  # owners ascending, as in `cand`
    offs = np.zeros(len(pairs) + 1, dtype=np.int64)
    np.cumsum(np.bincount(kept_owner, minlength=len(pairs)), out=offs[1:])
    # Rows of the class per kept value, summed per pair in integers (the owners are runs).
    rows = np.zeros(len(kept_owner) + 1, dtype=np.int64)
    np.cumsum(ccount[at[held]], out=rows[1:])
    plausible = rows[offs[1:]] - rows[offs[:-1]]
    return Sets(offs, _rank_sorted(kept_owner, kept_code, rank)), plausible


def _rank_sorted(owner: np.ndarray, elems: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """`elems` sorted by rank within each run of `owner` (ascending), ties kept in order. A map
    writes its sets' elements by rank already, so the sort is skipped where none is out of
    place (a map written by another collation's ORDER BY is not)."""
    r = rank[elems]
    if not ((r[1:] < r[:-1]) & (owner[1:] == owner[:-1])).any():
        return elems
    return elems[np.lexsort((r, owner))]


def measure(conn: psycopg.Connection, release_id: int, rows: Mapped, k: int,
            values_needed: int, spread: Spread | None = None) -> Composition | None:  # fmt: skip
    """composition.measure's figures for these rows (None on a first run)."""
    if rows.old is None:
        return None
    run = _run(conn, release_id, rows)
    return _figures(run, k, values_needed, spread)


def _figures(run: _Run, k: int, values_needed: int, spread: Spread | None) -> Composition:
    judged = run.members > 0
    members, pr = run.members[judged], run.plausible[judged]
    with_old = run.pair_old[judged] >= 0
    pv = run.kept.sizes()[judged] if run.kept is not None else np.zeros(len(pr), np.int64)
    out = Composition(
        int(members.sum()),
        int(pr.min()) if len(pr) else None,
        int(pv[with_old].min()) if with_old.any() else None,
        int(members[pr < k].sum()),
        int(members[with_old & (pv < values_needed)].sum()),
    )
    if spread is None:
        return out
    fewest, below = _categories(run, spread)
    return replace(out, min_plausible_categories=fewest, rows_below_categories=below)


def _categories(run: _Run, spread: Spread) -> tuple[int | None, int]:
    """composition._categories: per pair with an old set, the categories its kept values fill
    to their need; the fewest, and the rows of pairs below the spread's least."""
    assert run.codes is not None and run.kept is not None
    cats = sorted(set(spread.category.values()), key=str)
    index = {c: i for i, c in enumerate(cats)}
    need = np.array([spread.need[c] for c in cats], dtype=np.int64)
    values = [composition.value_of(t) for t in run.codes.tags]
    category = np.array([index[spread.category[v]] if v in spread.category else -1
                         for v in values], dtype=np.int64)  # fmt: skip
    pairs = np.flatnonzero(run.pair_old >= 0)
    if not len(pairs):
        return None, 0
    kept = run.kept.take(pairs)
    owner, cat = kept.owner(), category[kept.elems]
    ok = cat >= 0
    width = len(cats) + 1
    counts = np.bincount(owner[ok] * width + cat[ok], minlength=len(pairs) * width)
    counts = counts.reshape(len(pairs), width)[:, : len(cats)]
    filled = ((counts > 0) & (counts >= need)).sum(axis=1)
    members = run.members[pairs]
    return int(filled.min()), int(members[filled < spread.least].sum())


def released_tags(conn: psycopg.Connection, rows: Mapped) -> dict[str, int]:
    """composition.released_tags for these rows: the release's rows per tagged value."""
    if rows.tags is None:
        return {}
    tag = np.asarray(rows.tags.codes)[np.asarray(rows.gid) >= 0]
    n = np.bincount(tag, minlength=len(rows.tags.values))
    return {str(t): int(c) for t, c in zip(rows.tags.values, n.tolist(), strict=True) if c}


def store(conn: psycopg.Connection, release_id: int, rows: Mapped) -> None:
    """Replace the release's map by this run's, as composition.store lays it out: fresh tables
    written by COPY, then swapped in for the old ones."""
    kept = prepare(conn, release_id, rows)
    del rows.runs[release_id]  # the map is replaced: its figures are the measure's no more
    put(conn, kept)


def put(conn: psycopg.Connection, kept: Prepared) -> None:
    """`kept` written into fresh tables on `conn` and swapped in for the release's map."""
    fresh = composition.fresh_tables(conn, kept.release_id)
    write(conn, kept, fresh)
    composition.swap_in(conn, kept.release_id, fresh)


@dataclass
class Prepared:
    """What a map's rows are written from (`write`), the old map's values they keep read
    already: so that another backend can write them while the run's own goes on."""

    release_id: int
    rows: Mapped
    run: _Run
    held: np.ndarray  # rows left out that the map held
    held_vid: np.ndarray
    held_sid: np.ndarray
    set_id: np.ndarray | None  # per pair (then per held row, after them)
    set_rows: Sets | None
    held_shown: tuple[np.ndarray, Sets] | None


def prepare(conn: psycopg.Connection, release_id: int, rows: Mapped) -> Prepared:
    """Everything `write` needs that reads the database (the old map's sets and shown values
    of the rows it keeps), on the run's connection."""
    run = _run(conn, release_id, rows)
    gid = np.asarray(rows.gid, dtype=np.int64)
    old = rows.old
    held = (np.flatnonzero((gid < 0) & old.mapped) if old is not None
            else np.zeros(0, dtype=np.int64))  # fmt: skip
    codes = run.codes
    # The sets: each pair's kept values, and the old set of each row held back, once each.
    set_id = None  # per pair (then per held row, after them)
    held_vid = np.full(len(held), _NULL32, dtype=np.int32)
    held_sid = np.full(len(held), _NULL32, dtype=np.int32)
    set_rows: Sets | None = None
    held_shown: tuple[np.ndarray, Sets] | None = None
    if codes is not None and run.kept is not None and run.shown is not None:
        assert old is not None or not len(held)
        rank = codes.rank()
        old_vid = np.asarray(old.vid, dtype=np.int64)[held] if len(held) else held
        wanted = distinct(old_vid[old_vid >= 0])
        ids, sets = read_sets(conn, composition.sets_of(conn, release_id), wanted, codes)
        every = run.kept.then(_by_rank(sets, rank))
        set_id, first = set_ids(every.offs, every.elems)
        set_rows = every.take(first)
        has, at = _found(old_vid, ids)
        held_vid[has] = set_id[len(run.kept) + at[has]]
        old_sid = np.asarray(old.sid, dtype=np.int64)[held] if len(held) else held
        sids, shown = read_sets(conn, composition.shown_in(conn, release_id),
                                old_sid[old_sid >= 0], codes)  # fmt: skip
        base = len(run.shown)  # after every group id of this release
        has, at = _found(old_sid, sids)
        held_sid[has] = base + at[has]
        held_shown = (base + np.arange(len(sids)), _by_rank(shown, rank))
    return Prepared(release_id, rows, run, held, held_vid, held_sid, set_id, set_rows,
                    held_shown)  # fmt: skip


def write(conn: psycopg.Connection, kept: Prepared, fresh: dict[str | None, sql.Identifier]
          ) -> None:  # fmt: skip
    """The map's rows, sets and shown values into the `fresh` tables, by COPY: reads nothing,
    so any backend of the server may do it."""
    rows, run, held = kept.rows, kept.run, kept.held
    gid = np.asarray(rows.gid, dtype=np.int64)
    command = sql.SQL("COPY {} (release_id, key, gid, vid, sid, fp) FROM STDIN (FORMAT BINARY)"
                      ).format(fresh[None])  # fmt: skip
    keys = Dictionary.of_keys(rows.keys)
    fp, fp_kind = np.asarray(rows.fp), composition.fp_field(rows.fp_kind)
    # The released rows, each field read through the row's number or its pair: no array of
    # the map's rows is made.
    copy_rows(conn, command, [
        Field.constant(kept.release_id), Field.entries(keys, run.released),
        Field.int4(gid, run.released),
        Field.constant(NULL_INT) if kept.set_id is None else Field.int4(kept.set_id,
                                                                         run.pair_of_row),
        Field.int4(gid, run.released), Field(fp_kind, fp, run.released),
    ], np.arange(len(run.released)))  # fmt: skip
    if len(held):  # rows left out that the map held: in their waiting block (or -1)
        wait = np.asarray(rows.wait, dtype=np.int64)[held] if rows.wait is not None else (
            np.full(len(held), -1, dtype=np.int64))  # fmt: skip
        copy_rows(conn, command, [
            Field.constant(kept.release_id), Field.entries(keys, held),
            Field.int4(np.where(wait >= 0, -2 - wait, -1)), _int4(kept.held_vid),
            _int4(kept.held_sid), Field(fp_kind, fp, held),
        ], np.arange(len(held)))  # fmt: skip
    codes = run.codes
    if codes is not None and kept.set_rows is not None and run.shown is not None:
        tags = Dictionary.of(codes.tags)
        copy_sets(conn, fresh["sets"], np.arange(len(kept.set_rows)), kept.set_rows, tags)
        present = np.flatnonzero(run.shown.sizes() > 0)
        copy_sets(conn, fresh["shown"], present, run.shown.take(present), tags)
        if kept.held_shown is not None and len(kept.held_shown[0]):
            copy_sets(conn, fresh["shown"], kept.held_shown[0], kept.held_shown[1], tags)


_NULL32 = np.iinfo(np.int32).min  # an id the map leaves NULL, in an int32 array


def _int4(values: np.ndarray) -> Field:
    """An int4 field of int32 ids, NULL where _NULL32."""
    return Field.int4(values, null=_NULL32)


def _found(ids: np.ndarray, found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per id, whether `found` (sorted, distinct) holds it, and where (read where it does):
    through a table of each id's place where the ids span little more than those asked (a
    million ids: 0.09 s, a binary search 0.22 s); else by that search."""
    top = int(found[-1]) + 1 if len(found) else 0
    if len(found) and found[0] >= 0 and top <= max(2 * len(ids), 1 << 16):
        place = np.full(top + 1, -1, dtype=np.int64)  # place[top]: not found
        place[found] = np.arange(len(found))
        at = place[np.clip(ids, -1, top)]  # -1 reads place[top] too
        return at >= 0, at
    at = np.searchsorted(found, ids)
    ok = (ids >= 0) & (at < len(found))
    ok[ok] = found[at[ok]] == ids[ok]
    return ok, at


def _by_rank(sets: Sets, rank: np.ndarray) -> Sets:
    """The same sets, each one's elements sorted by their text."""
    return Sets(sets.offs, _rank_sorted(sets.owner(), sets.elems, rank))


def copy_sets(conn: psycopg.Connection, table: sql.Identifier, ids: np.ndarray, sets: Sets,
               tags: Dictionary) -> None:  # fmt: skip
    """Rows (id, text[]) of a map's sets or shown values."""
    copy_rows(
        conn, sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(table),
        [Field.int4(np.asarray(ids, dtype=np.int64)),
         Field(TEXTS, dictionary=tags, elements=(sets.offs, sets.elems))],
        np.arange(len(sets)),
    )  # fmt: skip
