"""Regrouping a refreshed table so that rows that persist keep their groups.

A consumer who keeps two releases of the same source can intersect a person's classes in both.
If a refresh regroups from scratch, the two classes share few rows and the intersection can
single a person out; if every row that persists stays with the rows it was grouped with, the
intersection is its old group again. So a refresh under the `persist` policy:
1. keeps every persisting row in its previous group (deleted rows simply leave it); a row
   whose released columns changed since (the map's fingerprint) is placed again as a new row
   is, so an updated QI does not stretch its old group over the space between;
2. lets each group that no longer keeps its promise (below) take a few of the nearest new
   rows, when that makes it keep it; groups the other new rows among themselves with the
   method's own algorithm (when it can: there are at least k of them and they can satisfy
   the model on their own), and puts the rest in the nearest group;
3. merges every group that no longer keeps its promise into a near group, smallest first,
   until all keep it. A group keeps its promise when it satisfies the promised models (it may
   have lost rows, or a new row broke its l-diversity) and, for a consumer who kept every
   earlier release (`History`), still leaves each of its persisting rows k plausible rows and
   l plausible values (rows whose sensitive value every earlier class of that row held) and,
   under (θ,k), plausible values filling θ categories with need_c values each (`Spread`).
   Deletes, new values and updated sensitive values all shrink those counts; a merge only ever
   grows them, so merging ends. Of the few nearest groups (by the distance below) the nearest
   whose union keeps the promise is taken, else the nearest.
4. regroups every group of 2k rows or more with the method's algorithm, and keeps the split
   when each part keeps the promise, so merges of earlier refreshes come undone where the
   intersection allows.
Information loss still grows over refreshes; `--regroup` starts over (and dbanon's
composition check then says whether the intersection still keeps the promise).
A persisting row whose plausible values fewer than k rows of the whole table still hold cannot
be helped by any merge: the guard leaves it out (`History.fixable`) and the composition check
refuses the run, naming the override. One whose plausible values the whole table can no
longer fill to θ categories keeps its k rows and l values in the guard; the check refuses.

Pure arrays in, group ids out; the distance between groups is the k-member one (numeric ranges
normalised by the domain width, categorical LCA heights) between group centres, measured and
walked by dbanon.algorithms.nearest. When the promise is counts alone (`Counts`), the merges'
and the short groups' loops run compiled (`_merging`, `_filling`), as the Python loops do.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from numba import njit

from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.centres import centre, centres
from dbanon.algorithms.forked import forked_map
from dbanon.algorithms.nearest import (
    Near,
    block_rows,
    distance,
    moved_centre,
    nearest_alive,
    nearest_other,
    parts,
    walk,
)
from dbanon.core.groupsort import by_group, distinct, unique_inverse

Holds = Callable[[np.ndarray], bool]  # row indexes of a group -> whether it keeps the models
Cluster = Callable[[np.ndarray], np.ndarray]  # row indexes -> group ids of just those rows
# Cluster of each of many row sets in one call (None: the algorithm has no such call)
ClusterMany = Callable[[list[np.ndarray]], "list[np.ndarray] | None"]


Many = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Counts:
    """A promise that counts alone decide, for the compiled merge loop: at least `size` rows
    and `distinct` values (`codes[row]`: dense value codes, needed when distinct > 1) (the
    models' floors, dbanon.models.base.PrivacyModel.floors), and with a `guard` (History
    without a spread) its k plausible rows and l plausible values for every persisting row."""

    size: int
    distinct: int
    codes: np.ndarray
    guard: History | None = None


class Judge:
    """A Holds that also judges many groups in one pass (`many(order, bounds, groups)`: per
    group g of `groups`, whether its rows order[bounds[g]:bounds[g + 1]] hold), with the same
    answers as one call a group: a refresh judges every group that lost or changed a row,
    thousands of calls of a few microseconds of Python each. `counts`, when the promise is
    one (`Counts`): the same answers again, for loops that judge in compiled code."""

    def __init__(self, one: Holds, many: Many, counts: Counts | None = None) -> None:
        self.one, self.many, self.counts = one, many, counts

    def __call__(self, rows: np.ndarray) -> bool:
        return self.one(rows)


def each_holds(holds: Holds, order: np.ndarray, bounds: np.ndarray,
               groups: np.ndarray) -> np.ndarray:  # fmt: skip
    """Per group of `groups` (its rows order[bounds[g]:bounds[g + 1]]), whether it holds."""
    groups = np.asarray(groups, dtype=np.int64)
    if isinstance(holds, Judge):
        return np.asarray(holds.many(order, bounds, groups), dtype=bool)
    return np.array([holds(order[bounds[g] : bounds[g + 1]]) for g in groups.tolist()],
                    dtype=bool)  # fmt: skip


_CANDIDATES = 16  # nearest groups tried for a merge that restores the promise
_FIRST = 2  # found first: the nearest or the next one holds for most merges of a refresh


@dataclass(frozen=True)
class Spread:
    """A spread the promise asks of plausible values ((θ,k): dbanon.models.base.Spread) over
    History's value codes: at least `least` categories each holding `need[c]` of the values;
    `category[code]` is a value's category (-1, or a code past the end: none)."""

    category: np.ndarray
    need: np.ndarray
    least: int

    def met(self, codes: np.ndarray) -> int:
        """The categories that these distinct value codes fill to their need."""
        codes = codes[codes < len(self.category)]
        cats = self.category[codes]
        counts = np.bincount(cats[cats >= 0], minlength=len(self.need))
        return int(((counts > 0) & (counts >= self.need)).sum())


@dataclass(frozen=True)
class History:
    """What a consumer who kept every earlier release knows of the persisting rows.

    `tag[i]`: a code of row i's sensitive value now; `history[i]`: the id of row i's running
    intersection of values (-1 for a new row); `values[h]`: the sorted codes of history h's
    plausible values. The figures are dbanon.setlogic.composition's: k plausible rows (rows of the
    class whose value is plausible), `needed` plausible values (l, or p) and, with a
    `spread`, the categories those values must still fill ((θ,k))."""

    tag: np.ndarray
    history: np.ndarray
    values: list[np.ndarray]
    k: int
    needed: int
    codes: dict[str, int] | None = None  # tag -> code, for values of rows no longer here
    spread: Spread | None = None  # and the spread they must keep ((θ,k)'s categories)
    waived: frozenset[int] = frozenset()  # histories whose spread no grouping can keep
    # `values` as sets: a group is a few rows, where a set lookup is far cheaper than np.isin
    sets: list[frozenset[int]] = field(init=False, repr=False, compare=False)

    # `values` as one sorted array with offsets, for the compiled judgement without a spread
    flat: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sets", [frozenset(v.tolist()) for v in self.values])
        sizes = np.array([len(v) for v in self.values], dtype=np.int64)
        codes = (np.concatenate(self.values).astype(np.int64) if len(self.values)
                 else np.zeros(0, dtype=np.int64))  # fmt: skip
        object.__setattr__(self, "flat", (np.r_[0, np.cumsum(sizes)], codes))

    def _left(self, values: np.ndarray, h: int) -> bool:
        """Whether these distinct plausible value codes of history h keep the promise: l
        values, and the spread's categories (unless waived for h)."""
        return len(values) >= self.needed and (
            self.spread is None or h in self.waived
            or self.spread.met(values) >= self.spread.least
        )  # fmt: skip

    def _short(self, rows: np.ndarray, histories: np.ndarray) -> np.ndarray:
        """The histories (of those given) that the rows leave short of k rows, l values or
        the spread."""
        tags = self.tag[rows].tolist()
        present = set(tags)
        short = []
        for h in histories.tolist():
            plausible = self.sets[h]
            if sum(t in plausible for t in tags) < self.k:
                short.append(h)
                continue
            left = present & plausible
            if len(left) < self.needed or (
                self.spread is not None and not self._left(np.fromiter(left, np.int64), h)
            ):
                short.append(h)
        return np.array(short, dtype=np.int64)

    def _codes(self) -> int:
        """One more than the largest value code in use."""
        most = [int(v.max()) for v in self.values if len(v)]
        return max([*most, int(self.tag.max(initial=-1))]) + 1

    def fixable(self) -> History:
        """This history without what no merge can help, which the composition check reports:
        rows whose plausible values are held by fewer than k rows, or fewer than l values are
        left, in the whole table are left out; where only the spread cannot be kept (its
        categories' values have left the table), k rows and l values are still kept."""
        lost, spreadless = self._hopeless()
        if not len(lost) and not len(spreadless):
            return self
        history = np.where(np.isin(self.history, lost), -1, self.history)
        return replace(self, history=history, waived=frozenset(spreadless.tolist()))

    def _hopeless(self) -> tuple[np.ndarray, np.ndarray]:
        """The histories whose plausible values fewer than k rows, or fewer than l values,
        of the whole table still hold; and of the others, those the whole table's values
        cannot fill to the spread."""
        counts = np.bincount(self.tag[self.tag >= 0], minlength=1)
        counts = np.r_[counts, np.zeros(max(0, self._codes() - len(counts)), dtype=counts.dtype)]
        lost, spreadless = [], []
        for h, v in enumerate(self.values):
            if counts[v].sum() < self.k or (counts[v] > 0).sum() < self.needed:
                lost.append(h)
            elif not self._left(v[counts[v] > 0], h):
                spreadless.append(h)
        return np.array(lost, dtype=np.int64), np.array(spreadless, dtype=np.int64)

    def hopeless_rows(self) -> np.ndarray:
        """Per row, whether no group of this table can keep its promise (see `fixable`)."""
        lost, spreadless = self._hopeless()
        return (self.history >= 0) & np.isin(self.history, np.r_[lost, spreadless])

    def useful(self, rows: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """Which candidate rows hold a value some persisting row of the group may have."""
        offs, codes = self.flat  # compiled: called for every short group of a refresh
        return _useful(np.asarray(rows, dtype=np.int64), np.asarray(candidates, dtype=np.int64),
                       self.history, self.tag, offs, codes)  # fmt: skip

    def each(self, order: np.ndarray, bounds: np.ndarray, groups: np.ndarray) -> np.ndarray:
        """`holds` of many groups (`Judge.many`)."""
        if self.spread is None:
            offs, codes = self.flat
            return _keeps_each(np.asarray(order, dtype=np.int64), np.asarray(bounds, np.int64),
                               groups, self.history, self.tag, offs, codes, self.k,
                               self.needed)  # fmt: skip
        return each_holds(self.holds, order, bounds, groups)

    def holds(self, rows: np.ndarray) -> bool:
        """Whether every persisting row of the group keeps k plausible rows and l values."""
        if self.spread is None:  # compiled: the same judgement as `_short`
            offs, codes = self.flat
            return bool(_keeps(np.asarray(rows, dtype=np.int64), self.history, self.tag, offs,
                               codes, self.k, self.needed))  # fmt: skip
        known = sorted({h for h in self.history[rows].tolist() if h >= 0})  # a few rows: sets
        return not known or not len(self._short(rows, np.array(known, dtype=np.int64)))


@njit(cache=True)
def _useful(rows: np.ndarray, candidates: np.ndarray, history: np.ndarray, tag: np.ndarray,
            offs: np.ndarray, codes: np.ndarray) -> np.ndarray:  # fmt: skip
    """`History.useful`: per candidate, whether its tag is among the (sorted) codes of some
    history of the rows; every candidate when no row has a history."""
    hs = np.unique(history[rows])
    out = np.zeros(len(candidates), dtype=np.bool_)
    known = False
    for h in hs:
        if h < 0:
            continue
        known = True
        vals = codes[offs[h] : offs[h + 1]]
        for c in range(len(candidates)):
            if not out[c]:
                t = tag[candidates[c]]
                i = np.searchsorted(vals, t)
                out[c] = i < len(vals) and vals[i] == t
    if not known:
        out[:] = True
    return out


@njit(cache=True)
def _keeps(rows: np.ndarray, history: np.ndarray, tag: np.ndarray, offs: np.ndarray,
           codes: np.ndarray, k: int, needed: int) -> bool:  # fmt: skip
    """`History.holds` without a spread: for each history h of the rows, at least k rows
    whose value is among h's (sorted) codes, and at least `needed` of those codes present."""
    hs = np.unique(history[rows])
    present = np.unique(tag[rows])
    for h in hs:
        if h < 0:
            continue
        vals = codes[offs[h] : offs[h + 1]]
        n = 0
        for r in rows:
            i = np.searchsorted(vals, tag[r])
            if i < len(vals) and vals[i] == tag[r]:
                n += 1
        if n < k:
            return False
        left = 0
        for t in present:
            i = np.searchsorted(vals, t)
            if i < len(vals) and vals[i] == t:
                left += 1
        if left < needed:
            return False
    return True


@njit(cache=True)
def _keeps_each(order: np.ndarray, bounds: np.ndarray, groups: np.ndarray, history: np.ndarray,
                tag: np.ndarray, offs: np.ndarray, codes: np.ndarray, k: int,
                needed: int) -> np.ndarray:  # fmt: skip
    """`_keeps` of each group of `groups` (its rows order[bounds[g]:bounds[g + 1]])."""
    out = np.empty(len(groups), dtype=np.bool_)
    for i in range(len(groups)):
        g = groups[i]
        out[i] = _keeps(order[bounds[g] : bounds[g + 1]], history, tag, offs, codes, k, needed)
    return out


def subset(qi: QIArrays, rows: np.ndarray) -> QIArrays:
    return QIArrays(qi.num[rows], qi.cat[rows], qi.lca, qi.height, qi.hierarchies)


def persist_groups(
    qi: QIArrays, previous: np.ndarray, cluster: Cluster, holds: Holds, k: int = 2,
    history: History | None = None, replace_moved: bool = True,
    unchanged: np.ndarray | None = None, sizes: np.ndarray | None = None,
    many: ClusterMany | None = None,
) -> np.ndarray:  # fmt: skip
    """Group ids 0..g-1 of the rows: `previous` holds each row's previous group id (-1 for a
    new row); `cluster(rows)` groups some rows with the method's algorithm (ValueError when
    they cannot be grouped on their own), from those rows alone (`split_large` runs it in
    forked workers, or `many` of them in one call); with `history`, groups also keep the
    intersection promise for every persisting row a merge can help; with `replace_moved`
    (methods whose groups gather near rows) rows that moved far from their group are placed
    again, but not rows known `unchanged` since (their fingerprint): a refresh of an unchanged
    source keeps every group as it was and so releases the same rows. With `sizes` (each
    previous group's rows as released), a group that kept all its rows, unchanged, and took
    none is taken to hold as it held when released, without judging it again: the caller
    passes sizes only when its promise reads nothing but the group (no t-closeness, no (θ,k)
    need from the table). Raises ValueError when no grouping satisfies the models."""
    if history is not None:
        guard = history.fixable()
        models = holds

        def both(rows: np.ndarray) -> bool:
            return models(rows) and guard.holds(rows)

        def each(order: np.ndarray, bounds: np.ndarray, groups: np.ndarray) -> np.ndarray:
            return each_holds(models, order, bounds, groups) & guard.each(order, bounds, groups)

        counts = models.counts if isinstance(models, Judge) else None
        if counts is not None:  # the guard judged in compiled code too, without a spread
            counts = replace(counts, guard=guard) if guard.spread is None else None
        holds = Judge(both, each, counts) if isinstance(models, Judge) else both

    n = qi.n
    previous = np.asarray(previous, dtype=np.int64)
    gid = np.full(n, -1, dtype=np.int64)
    old = previous >= 0
    gid[old] = unique_inverse(previous[old])[1]
    suspect = old if unchanged is None else old & ~unchanged  # known unchanged rows stay
    if replace_moved and suspect.any():  # the guard (or class size) keeps a moved row's promise
        gid[moved(qi, gid, suspect)] = -1
        gid[gid >= 0] = unique_inverse(gid[gid >= 0])[1]
        old = gid >= 0
    groups = int(gid.max()) + 1 if old.any() else 0
    intact = _intact(gid, previous, groups, unchanged, sizes)
    held = _fill_short(qi, gid, groups, holds, guard if history is not None else None, k, intact)
    new = np.flatnonzero(gid < 0)
    if len(new) >= k:
        try:
            sub = np.asarray(cluster(new))
            gid[new] = sub + groups
            groups += int(sub.max()) + 1
        except ValueError:
            pass  # the new rows cannot form groups of their own: they join existing ones
    intact = np.r_[intact, np.zeros(groups - len(intact), dtype=bool)]
    held = np.r_[held, np.zeros(groups - len(held), dtype=bool)]
    left = np.flatnonzero(gid < 0)
    if len(left):
        if groups == 0:
            raise ValueError(f"{n} rows and no group to join")
        cnum, ccat = centres(qi, np.where(gid < 0, 0, gid), groups)
        step = block_rows(groups)
        for start in range(0, len(left), step):
            rows = left[start : start + step]
            gid[rows] = distance(qi, qi.num[rows], qi.cat[rows], cnum, ccat).argmin(axis=1)
        took = distinct(gid[left])
        intact[took] = held[took] = False  # they took rows: judged again
    # A group kept whole is released as it was: not split either (an unchanged source gives
    # the same release). Merging renumbers groups: intact ones are found again by their rows.
    whole = intact[gid] if len(intact) else np.zeros(len(gid), dtype=bool)
    merged = merge_failing(qi, gid, groups, holds, intact | held)
    keep = np.zeros(int(merged.max(initial=-1)) + 1, dtype=bool)
    keep[merged[whole]] = True
    keep[merged[~whole]] = False
    return split_large(merged, cluster, holds, k, keep, forked=True, many=many)


def split_large(
    gid: np.ndarray, cluster: Cluster, holds: Holds, k: int, keep: np.ndarray | None = None,
    forked: bool = False, many: ClusterMany | None = None,
) -> np.ndarray:  # fmt: skip
    """Regroup each group of 2k rows or more with the method's algorithm, and keep the split
    when every part keeps the promise (models and guard): merges of earlier refreshes are
    undone where the intersection allows it, so information loss need not only grow. With
    `forked`, the attempts run on every core: `cluster` and `holds` must then answer from
    the rows alone (a shared random generator would draw differently than in one process).
    With `many` (`cluster` of each group in one call), the attempts are made at once and
    every part judged in one pass; where it cannot (None, or ValueError: the rows together
    fail the model), one at a time."""
    sizes = np.bincount(gid)
    order = by_group(gid, sizes).astype(np.int64)  # rows as the algorithms take them
    bounds = np.r_[0, np.cumsum(sizes)]
    large = sizes >= 2 * k
    if keep is not None:
        large &= ~keep[: len(sizes)]

    def split(rows: np.ndarray) -> np.ndarray | None:
        """The algorithm's parts of a group's rows (0..p-1), when every part holds."""
        try:
            sub = _dense(np.asarray(cluster(rows)))
        except ValueError:
            return None
        parts = int(sub.max()) + 1
        if parts < 2 or not all(holds(rows[sub == p]) for p in range(parts)):
            return None
        return sub

    # Each group's split reads only its own rows, so the attempts may run on every core.
    groups = [order[bounds[g] : bounds[g + 1]] for g in np.flatnonzero(large).tolist()]
    splits = _split_many(groups, many, holds) if many is not None and groups else None
    if splits is None:
        splits = forked_map(split, groups) if forked else [split(rows) for rows in groups]
    taken = [i for i, sub in enumerate(splits) if sub is not None]
    if taken:  # part p > 0 of the i-th split group: a new id after those of the earlier ones
        rows = np.concatenate([groups[i] for i in taken])
        sub = np.concatenate([splits[i] for i in taken]).astype(np.int64)
        extra = np.array([int(splits[i].max()) for i in taken], dtype=np.int64)
        first = len(sizes) - 1 + np.cumsum(extra) - extra  # its part 1's id, less one
        new = np.repeat(first, [len(groups[i]) for i in taken]) + sub
        gid[rows[sub > 0]] = new[sub > 0]
    return unique_inverse(gid)[1].astype(np.int32)


def _split_many(
    groups: list[np.ndarray], many: ClusterMany, holds: Holds
) -> list[np.ndarray | None] | None:
    """`split_large`'s `split` of every group: the algorithm's parts by one `many` call and
    every part judged by one `each_holds`; None where `many` cannot make the attempts. The
    groups' parts are numbered across groups at once (group i's after group i-1's), not a
    group at a time: a refresh splits thousands of groups of a few rows."""
    try:
        subs = many(groups)
    except ValueError:
        return None
    if subs is None:
        return None
    sizes = np.array([len(g) for g in groups], dtype=np.int64)
    starts = np.cumsum(sizes) - sizes
    ids = np.concatenate([np.asarray(sub, dtype=np.int64) for sub in subs])
    owner = np.repeat(np.arange(len(groups), dtype=np.int64), sizes)
    low = np.minimum.reduceat(ids, starts)
    width = np.maximum.reduceat(ids, starts) - low + 1
    ids -= low[owner]
    ids += (np.cumsum(width) - width)[owner]  # disjoint ranges, in the groups' order
    part = unique_inverse(ids)[1]  # every part of every group, dense, in that order
    first = np.minimum.reduceat(part, starts)
    parts = np.maximum.reduceat(part, starts) - first + 1
    sub = part - first[owner]  # each group's own parts 0..p-1, as _dense numbers them
    tried = np.repeat(parts >= 2, parts)  # per part: whether its group split at all
    at = by_group(part)
    bounds = np.r_[0, np.cumsum(np.bincount(part))]
    ok = each_holds(holds, np.concatenate(groups)[at], bounds, np.flatnonzero(tried))
    failed = np.zeros(len(groups), dtype=bool)
    failed[np.repeat(np.arange(len(groups)), parts)[tried][~ok]] = True
    keep = (parts >= 2) & ~failed
    return [sub[starts[i] : starts[i] + sizes[i]] if keep[i] else None
            for i in range(len(groups))]  # fmt: skip


def _dense(ids: np.ndarray) -> np.ndarray:
    """Group ids renumbered 0..p-1 in order (as they come from most algorithms already)."""
    if ids.dtype.kind in "iu" and len(ids) and ids.min() >= 0 and np.bincount(ids).all():
        return ids
    return unique_inverse(ids)[1]


def _intact(
    gid: np.ndarray, previous: np.ndarray, groups: int, unchanged: np.ndarray | None,
    sizes: np.ndarray | None,
) -> np.ndarray:  # fmt: skip
    """Per group: whether it is its previous group whole, every row unchanged (see
    `persist_groups`); none without `unchanged` and `sizes`."""
    intact = np.zeros(groups, dtype=bool)
    if unchanged is None or sizes is None or not groups or not len(sizes):
        return intact
    placed = gid >= 0
    count = np.bincount(gid[placed], minlength=groups)
    steady = np.bincount(gid[placed], weights=unchanged[placed], minlength=groups)
    before = np.zeros(groups, dtype=np.int64)
    before[gid[placed]] = previous[placed]
    was = np.where(before < len(sizes), sizes[np.minimum(before, len(sizes) - 1)], -1)
    return (count > 0) & (steady == count) & (count == was)


def _fill_short(
    qi: QIArrays, gid: np.ndarray, groups: int, holds: Holds, guard: History | None, k: int,
    intact: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Let each persisting group that fails its promise (it lost rows, mostly) take up to k
    of the nearest loose rows (new or moved) nearer than any other group, those holding a
    value its persisting rows may have first, when that makes it hold: a short group gains a
    row or two, where merging it would generalise it with a whole other group. In place, on
    `gid`. Returns which groups were judged to hold (as they are now), so that none of them
    is judged again unless it changes."""
    held = np.zeros(groups, dtype=bool)
    loose = np.flatnonzero(gid < 0)
    if not len(loose) or not groups:
        return held
    placed = np.flatnonzero(gid >= 0)
    order = placed[by_group(gid[placed])]
    bounds = np.searchsorted(gid[order], np.arange(groups + 1))
    sizes = np.diff(bounds)
    judged = np.flatnonzero((sizes > 0) & ~intact[:groups])
    ok = each_holds(holds, order, bounds, judged)
    held[judged] = ok
    failing = judged[~ok]
    if not len(failing):
        return held
    failing = failing[np.lexsort((failing, sizes[failing]))]  # smallest first, then by id
    # Centres stay as they were while groups take rows (rows taken meanwhile are not free).
    cnum, ccat = centres(subset(qi, placed), gid[placed], groups)
    line = parts(cnum, ccat)
    rows_num = np.ascontiguousarray(qi.num[loose])
    rows_cat = np.ascontiguousarray(qi.cat[loose])
    rows_line = parts(rows_num, rows_cat)
    free = np.ones(len(loose), dtype=bool)
    # each failing group's nearest other group, in one compiled pass (the centres stay)
    others = nearest_other(failing, cnum, ccat, qi.lca, qi.height, *line)
    counts = holds.counts if isinstance(holds, Judge) else None
    if counts is not None and counts.guard is guard:  # the same loop compiled
        _filling(failing, others, cnum, ccat, rows_num, rows_cat,
                 qi.lca, qi.height, free, k, *rows_line, order.astype(np.int64),
                 bounds.astype(np.int64), loose.astype(np.int64), gid, intact, held,
                 *_judged_by(counts, len(gid)))  # fmt: skip
        return held
    members = [order[bounds[g] : bounds[g + 1]] for g in range(groups)]
    for g, other in zip(failing.tolist(), others.tolist(), strict=True):
        # the nearest free rows nearer than the nearest other group (a merge is cheaper)
        near, _ = walk(cnum[g], ccat[g], rows_num, rows_cat, qi.lca, qi.height, free, other,
                        4 * k, *rows_line)  # fmt: skip
        _take(g, gid, loose, free, near, members, holds, guard, k, intact, held)
    return held


def _take(
    g: int, gid: np.ndarray, loose: np.ndarray, free: np.ndarray, near: np.ndarray,
    members: list[np.ndarray], holds: Holds, guard: History | None, k: int, intact: np.ndarray,
    held: np.ndarray,
) -> None:  # fmt: skip
    """`_fill_short` for failing group g, given the nearest free loose rows (`near`, indexes
    into `loose`); a group made to hold is `held`."""
    if guard is not None and len(near) > 1:  # the useful ones first, each part in its order
        useful = guard.useful(members[g], loose[near])
        near = np.concatenate([near[useful], near[~useful]])
    rows, taken = members[g], []
    for c in near[:k].tolist():
        rows = np.append(rows, loose[c])
        taken.append(c)
        if holds(rows):
            gid[loose[taken]] = g
            free[taken] = False
            intact[g] = False
            held[g] = True
            break


def moved(qi: QIArrays, gid: np.ndarray, suspect: np.ndarray | None = None) -> np.ndarray:
    """Persisting rows (gid >= 0) whose QIs moved away from their group: a row's distance to
    its group's centre (without it) is over twice its distance to the nearest other centre,
    and over the group's own spread. Keeping such a row (a QI update, mostly) would stretch
    its group's generalisation over the space between; placed as a new row, the merges of
    the guard keep its intersection promise instead."""
    rows = np.flatnonzero(gid >= 0)
    groups = int(gid.max(initial=-1)) + 1
    if not len(rows) or groups < 2:
        return np.zeros(0, dtype=np.int64)
    g = gid[rows]
    sizes = np.bincount(g, minlength=groups)
    cnum, ccat = centres(subset(qi, rows), g, groups)
    own = np.abs(qi.num[rows] - cnum[g]).sum(axis=1)  # each row to its own group's centre
    for j in range(qi.cat.shape[1]):
        own += qi.height[j][qi.lca[j][qi.cat[rows, j], ccat[g, j]]]
    # Numeric centres without the row itself: the mean moves away from the row by d / (n - 1).
    alone = sizes[g] > 1
    own = np.where(alone, own * sizes[g] / np.maximum(sizes[g] - 1, 1), 0.0)
    spread = np.bincount(g, weights=own, minlength=groups) / np.maximum(sizes, 1)
    far = alone & (own > 2 * spread[g]) & (own > 0)
    if suspect is not None:  # only these rows may have moved (the others are unchanged)
        far &= suspect[rows]
    candidates = np.flatnonzero(far)
    out = []
    step = block_rows(groups)
    for start in range(0, len(candidates), step):
        c = candidates[start : start + step]
        d = distance(qi, qi.num[rows[c]], qi.cat[rows[c]], cnum, ccat)
        d[np.arange(len(c)), g[c]] = np.inf
        out.append(c[own[c] > 2 * d.min(axis=1)])
    return rows[np.concatenate(out)] if out else np.zeros(0, dtype=np.int64)


def merge_failing(
    qi: QIArrays, gid: np.ndarray, groups: int, holds: Holds, intact: np.ndarray | None = None
) -> np.ndarray:
    """Merge groups that fail their promise into a near group, smallest first: of the
    `_CANDIDATES` nearest, the nearest whose union holds, else the nearest. `intact` groups
    are known to hold (as released, `persist_groups`, or as judged since) and are not judged
    again."""
    order = by_group(gid, np.bincount(gid, minlength=groups)).astype(np.int64)
    bounds = np.searchsorted(gid[order], np.arange(groups + 1))
    present = np.flatnonzero(np.diff(bounds) > 0)
    judged = present if intact is None else present[~intact[present]]
    failed = judged[~each_holds(holds, order, bounds, judged)]
    cnum, ccat = centres(qi, gid, groups)
    alive = np.zeros(groups, dtype=bool)
    alive[present] = True
    near_of = Near(cnum, ccat, alive)
    counts = holds.counts if isinstance(holds, Judge) else None
    if counts is not None:  # the same loop compiled: a refresh's thousands of merges
        mask = np.zeros(groups, dtype=bool)
        mask[failed] = True
        if not _merge_counted(gid, order, bounds, mask, qi.num, qi.cat, qi.lca, qi.height,
                              cnum, near_of, counts):  # fmt: skip
            raise ValueError("the whole table does not satisfy the promised models")
        return unique_inverse(gid)[1].astype(np.int32)
    members = {g: order[bounds[g] : bounds[g + 1]] for g in present.tolist()}
    failing = set(failed.tolist())
    ccat = near_of.ccat  # the centres' values as the walks read them
    queue = [(len(members[g]), g) for g in failing]  # smallest first, then by id
    heapq.heapify(queue)
    first = _FIRST  # candidates asked for first: all of them after a merge that needed more
    while failing:
        if len(members) == 1:
            raise ValueError("the whole table does not satisfy the promised models")
        size, g = heapq.heappop(queue)
        if g not in failing or len(members[g]) != size:
            continue  # merged away, or grown since (queued again with its new size)
        near_of.gone(g)  # merged away below in any case
        into, ok, tried = _merge_into(g, members, holds, near_of, qi, first)
        first = _FIRST if tried <= _FIRST else _CANDIDATES
        rows = np.concatenate([members[into], members.pop(g)])
        members[into] = rows
        failing.discard(g)
        gid[rows] = into
        centre(rows, qi.num, qi.cat, cnum, ccat, into)
        near_of.moved(into)
        if ok:
            failing.discard(into)
        else:
            failing.add(into)
            heapq.heappush(queue, (len(rows), into))
    return unique_inverse(gid)[1].astype(np.int32)


def _merge_into(
    g: int, members: dict[int, np.ndarray], holds: Holds, near_of: Near, qi: QIArrays,
    first: int = _FIRST,
) -> tuple[int, bool, int]:
    """Of the `_CANDIDATES` groups nearest g, the nearest whose union with g holds (and True),
    else the nearest (and False); and how many were tried. The `first` nearest are found
    first and the rest only when none of them holds: the nearest m are the first m of any
    longer list (`walk`'s order), so the answer is the same, and the walk for a few is
    cheaper when one of them holds (most merges of a refresh), dearer when none does (a
    release whose k was raised: its caller then asks for all at once)."""
    tried: list[int] = []
    for m in sorted({first, _CANDIDATES}):
        near = near_of.nearest(g, min(m, len(members) - 1), qi.lca, qi.height)
        for i in range(len(tried), len(near)):
            h = near[i]
            if holds(np.concatenate([members[h], members[g]])):
                return h, True, i + 1
        tried = near
        if len(near) < m:
            break
    return tried[0], False, len(tried)


def _merge_counted(
    gid: np.ndarray, order: np.ndarray, bounds: np.ndarray, failing: np.ndarray,
    num: np.ndarray, cat: np.ndarray, lca: np.ndarray, height: np.ndarray, cnum: np.ndarray,
    near: Near, counts: Counts,
) -> bool:  # fmt: skip
    """`merge_failing`'s loop in one compiled call, judging by `counts`: the same merges in
    the same order (gid in place); False when one group is left and it still fails."""
    return _merging(
        gid, order.astype(np.int64), bounds.astype(np.int64), failing, num, cat, lca, height,
        cnum, near.cat, near.dim, near.order, near.pos, near.starts, near.part, near.reps,
        near.alive, near.inpart, *_judged_by(counts, len(gid)), _FIRST, _CANDIDATES,
    )  # fmt: skip


def _judged_by(counts: Counts, n: int) -> tuple:
    """`_counted`'s arguments after the rows, for a table of n rows."""
    guard = counts.guard
    codes = counts.codes if counts.distinct > 1 else np.zeros(n, dtype=np.int64)
    if guard is None:
        history, tag = np.full(n, -1, dtype=np.int64), np.zeros(n, np.int64)
        offs, vals, k, needed = np.zeros(1, np.int64), np.zeros(0, np.int64), 0, 0
    else:
        (offs, vals), k, needed = guard.flat, guard.k, guard.needed
        history, tag = guard.history, guard.tag
    return (max(counts.size, 1), counts.distinct, np.asarray(codes, dtype=np.int64),
            guard is not None, np.asarray(history, np.int64), np.asarray(tag, np.int64), offs,
            vals, k, needed)  # fmt: skip


@njit(cache=True)
def _filling(
    failing: np.ndarray, others: np.ndarray, cnum: np.ndarray, ccat: np.ndarray,
    rows_num: np.ndarray, rows_cat: np.ndarray, lca: np.ndarray, height: np.ndarray,
    free: np.ndarray, k: int, dim: int, rorder: np.ndarray, rstarts: np.ndarray,
    rreps: np.ndarray, order: np.ndarray, bounds: np.ndarray, loose: np.ndarray,
    gid: np.ndarray, intact: np.ndarray, held: np.ndarray, size: int, distinct: int,
    codes: np.ndarray, guarded: bool, history: np.ndarray, tag: np.ndarray, offs: np.ndarray,
    vals: np.ndarray, gk: int, needed: int,
) -> None:  # fmt: skip
    """`_fill_short`'s loop (`walk`, then `_take`) in one compiled call, judging by
    `_counted`: the same rows taken, in place."""
    most = 0
    for g in failing:
        most = max(most, bounds[g + 1] - bounds[g])
    buf = np.empty(most + k, np.int64)
    for i in range(len(failing)):
        g = failing[i]
        near, _ = walk(cnum[g], ccat[g], rows_num, rows_cat, lca, height, free, others[i],
                        4 * k, dim, rorder, rstarts, rreps)  # fmt: skip
        mine = order[bounds[g] : bounds[g + 1]]
        if guarded and len(near) > 1:  # the useful ones first, each part in its order
            useful = _useful(mine, loose[near], history, tag, offs, vals)
            near = np.concatenate((near[useful], near[~useful]))
        c = len(mine)
        buf[:c] = mine
        for t in range(min(k, len(near))):
            buf[c] = loose[near[t]]
            c += 1
            if _counted(buf[:c], size, distinct, codes, guarded, history, tag, offs, vals, gk,
                        needed):  # fmt: skip
                for u in range(t + 1):
                    gid[loose[near[u]]] = g
                    free[near[u]] = False
                intact[g] = False
                held[g] = True
                break


@njit(cache=True)
def _counted(rows: np.ndarray, size: int, distinct: int, codes: np.ndarray, guarded: bool,
             history: np.ndarray, tag: np.ndarray, offs: np.ndarray, vals: np.ndarray, k: int,
             needed: int) -> bool:  # fmt: skip
    """Whether the rows hold by `Counts`: rows, distinct values and the guard's `_keeps`."""
    if len(rows) < size:
        return False
    if distinct > 1 and len(np.unique(codes[rows])) < distinct:
        return False
    return not guarded or _keeps(rows, history, tag, offs, vals, k, needed)


@njit(cache=True)
def _gather(g: int, head: np.ndarray, nxt: np.ndarray, buf: np.ndarray, at: int) -> int:
    """Group g's rows, in order, into buf from `at` on; returns where they end."""
    r = head[g]
    while r >= 0:
        buf[at] = r
        at += 1
        r = nxt[r]
    return at


@njit(cache=True)
def _merging(
    gid: np.ndarray, order: np.ndarray, bounds: np.ndarray, failing: np.ndarray,
    num: np.ndarray, cat: np.ndarray, lca: np.ndarray, height: np.ndarray, cnum: np.ndarray,
    ncat: np.ndarray, dim: int, norder: np.ndarray, pos: np.ndarray, starts: np.ndarray,
    part: np.ndarray, reps: np.ndarray, alive: np.ndarray, inpart: np.ndarray, size: int,
    distinct: int, codes: np.ndarray, guarded: bool, history: np.ndarray, tag: np.ndarray,
    offs: np.ndarray, vals: np.ndarray, k: int, needed: int, first_few: int, candidates: int,
) -> bool:  # fmt: skip
    """`_merge_counted`: groups as linked lists of rows (a merge appends g's rows to its
    target's, the order `np.concatenate` gives), a heap of (size, id) as one integer."""
    groups, n = len(bounds) - 1, len(gid)
    head = np.full(groups, -1, np.int64)
    tail = np.full(groups, -1, np.int64)
    count = np.zeros(groups, np.int64)
    nxt = np.full(n, -1, np.int64)
    members, nfail = 0, 0
    queue = [np.int64(0)]
    queue.pop()
    for g in range(groups):
        lo, hi = bounds[g], bounds[g + 1]
        if hi > lo:
            head[g], tail[g], count[g] = order[lo], order[hi - 1], hi - lo
            for i in range(lo, hi - 1):
                nxt[order[i]] = order[i + 1]
            members += 1
            if failing[g]:
                queue.append((count[g] << 32) | g)
                nfail += 1
    heapq.heapify(queue)
    strays = np.empty(groups, np.int64)
    nstrays = 0
    buf = np.empty(n, np.int64)
    first = first_few
    while nfail > 0:
        if members == 1:
            return False
        key = heapq.heappop(queue)
        g = key & 0xFFFFFFFF
        if not failing[g] or count[g] != key >> 32:
            continue  # merged away, or grown since (queued again with its new size)
        alive[g] = inpart[g] = False  # merged away below in any case
        into, ok, tried, ntried = -1, False, np.zeros(0, np.int64), 0
        for step in range(2):  # the first few nearest, then (none held) all the candidates
            m = first if step == 0 else candidates
            if step == 1 and first >= candidates:
                break
            near, nstrays = nearest_alive(g, min(m, members - 1), cnum, ncat, lca, height,
                                           inpart, alive, dim, norder, starts, reps, strays,
                                           nstrays)  # fmt: skip
            for i in range(len(tried), len(near)):
                c = _gather(g, head, nxt, buf, _gather(near[i], head, nxt, buf, 0))
                if _counted(buf[:c], size, distinct, codes, guarded, history, tag, offs, vals,
                            k, needed):  # fmt: skip
                    into, ok, ntried = near[i], True, i + 1
                    break
            if ok:
                break
            tried = near
            if len(near) < m:
                break
        if not ok:
            into, ntried = tried[0], len(tried)
        first = first_few if ntried <= first_few else candidates
        nxt[tail[into]] = head[g]
        tail[into] = tail[g]
        count[into] += count[g]
        head[g], count[g] = -1, 0
        members -= 1
        failing[g] = False
        nfail -= 1
        c = _gather(into, head, nxt, buf, 0)
        for i in range(c):
            gid[buf[i]] = into
        centre(buf[:c], num, cat, cnum, ncat, into)
        nstrays = moved_centre(into, cnum, ncat, dim, norder, pos, starts, part, reps, inpart,
                               strays, nstrays)  # fmt: skip
        if ok and failing[into]:
            failing[into] = False
            nfail -= 1
        elif not ok:
            if not failing[into]:
                failing[into] = True
                nfail += 1
            heapq.heappush(queue, (count[into] << 32) | into)
    return True
