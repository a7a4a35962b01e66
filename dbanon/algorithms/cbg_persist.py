"""Refreshing a cross-bucket (cbg) release so that intersecting its releases keeps (k,l).

A cbg release shows a person her class (QIT rows with her generalised QIs) and, through the
buckets those rows lie in, the sensitive values of those buckets (ST). A consumer who keeps
every release learns, for a person who persists, only the values every one of her classes'
buckets held. Regrouping from scratch at each refresh lets those sets shrink to a single value.

So a refresh keeps every persisting row in its *unit*: a set of rows that is cut into groups and
buckets as one T_gen is (kd order, contiguous groups of k..2k-1 rows, buckets dealt by stride k
with the members of each group taking its labels in an order drawn from `rng`: every group has
a row in every bucket of its unit), so a class holds every value of its unit.
Units start as the T_gens of `cross_bucket`; a refresh
1. keeps each persisting row in its unit (deleted rows leave it; its groups and buckets are
   dealt again within the unit, which changes nothing a consumer can intersect: every class of
   the unit still holds the unit's values);
2. makes new T_gens (units) of the new rows with `cross_bucket`, and puts the new rows it
   leaves over into the nearest unit;
3. merges every unit that fails into its nearest one, smallest first, until none fails: a unit
   fails when a group is below k, when (3.22) gives a value odds above 1/l, or when a row that
   earlier releases showed keeps fewer than l of its plausible values (of those the table
   still holds) or fewer than k plausible rows in its class.
Units never split, so loss only grows over refreshes; `--regroup` starts over (and the
composition measure then says whether the intersection keeps the promise).

Arrays in, ids out (x: QIs as ordinals scaled to [0, 1], sa: sensitive codes).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from dbanon.algorithms.cbg import cross_bucket, group_sizes, kd_order
from dbanon.models.base import TOLERANCE


@dataclass(frozen=True)
class Layout:
    gid: np.ndarray  # int64 per row: its group (1..), -1 if suppressed
    bid: np.ndarray  # int64 per row: its bucket (1..), -1 if suppressed
    unit: np.ndarray  # int64 per row: its unit (0..), -1 if suppressed; what the map keeps
    units: int
    merged: int  # units merged into another during this run
    suppressed: int


def deal(
    x: np.ndarray, rows: np.ndarray, k: int, rng: np.random.Generator | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A unit's rows (sorted indexes) cut into groups (contiguous in kd order, k..2k-1 rows;
    one group if fewer than k rows) and buckets (kd position modulo k), as `cross_bucket`
    cuts a T_gen; local ids, in the order of `rows`. With `rng`, as `cross_bucket` with one
    (issue 24): each group keeps the stride's bucket labels, but which member takes which is
    drawn from it, so a member's QI rank in her group does not name her bucket."""
    pos = np.empty(len(rows), dtype=np.int64)
    pos[np.searchsorted(rows, kd_order(x, rows))] = np.arange(len(rows))
    sizes = group_sizes(len(rows), k) if len(rows) >= k else [len(rows)]
    group_at = np.searchsorted(np.cumsum(sizes), np.arange(len(rows)), side="right")
    label = np.arange(len(rows)) % k  # by kd position
    if rng is not None:
        start = 0
        for size in sizes:
            label[start : start + size] = rng.permutation(label[start : start + size])
            start += size
    return group_at[pos], label[pos]


def odds(groups: np.ndarray, buckets: np.ndarray, sa: np.ndarray, k: int) -> float:
    """The largest p(C, s) of (3.22) over the unit's classes and values."""
    values, code = np.unique(sa, return_inverse=True)
    g = int(groups.max()) + 1
    per_cb = np.zeros((g, k))
    np.add.at(per_cb, (groups, buckets), 1)
    per_bs = np.zeros((k, len(values)))
    np.add.at(per_bs, (buckets, code), 1)
    csize = per_cb.sum(axis=1, keepdims=True)
    bsize = np.maximum(per_bs.sum(axis=1, keepdims=True), 1)
    return float(((per_cb / csize) @ (per_bs / bsize)).max())


def persist_units(
    x: np.ndarray,
    sa: np.ndarray,
    previous: np.ndarray,
    plausible: np.ndarray,
    sets: list[np.ndarray],
    k: int,
    l: int,  # noqa: E741 - the thesis's name
    values_needed: int,
    rng: np.random.Generator | None = None,
    block_size: int | None = None,
) -> Layout:
    """The refresh's layout. `previous` holds each row's unit in the last release (-1: new or
    left out then), `plausible` the index into `sets` of the sensitive codes earlier releases
    left plausible for the row (-1: none; codes of values the table no longer holds left out),
    `values_needed` the l (or p) the release promises. Units are numbered (and so their
    buckets, which the release shows) in an order drawn from `rng` (a secret draw when
    None): numbered as they came, new rows' units would come last and show who joined. New
    rows are cut into T_gens in blocks of `block_size` rows when given (cbg.in_blocks)."""
    n = len(sa)
    previous = np.asarray(previous, dtype=np.int64)
    unit = np.full(n, -1, dtype=np.int64)
    old = previous >= 0
    unit[old] = np.unique(previous[old], return_inverse=True)[1].reshape(-1)
    units = int(unit.max()) + 1 if old.any() else 0
    new = np.flatnonzero(~old)
    if len(new):
        fresh = cross_bucket(x[new], sa[new], k, l, block_size=block_size)
        placed = fresh.tgen >= 0
        unit[new[placed]] = units + fresh.tgen[placed]
        units = int(unit.max()) + 1 if (unit >= 0).any() else 0
    if units == 0:
        raise ValueError(f"{n} rows and no unit to form")
    centres = np.zeros((units, x.shape[1]))
    counts = np.bincount(unit[unit >= 0], minlength=units).astype(np.float64)
    for j in range(x.shape[1]):
        centres[:, j] = np.bincount(unit[unit >= 0], weights=x[unit >= 0, j], minlength=units)
    centres /= np.maximum(counts, 1)[:, None]
    left = np.flatnonzero(unit < 0)
    for start in range(0, len(left), 2048):  # bounded memory: block x units
        rows = left[start : start + 2048]
        unit[rows] = np.abs(x[rows, None, :] - centres[None, :, :]).sum(axis=2).argmin(axis=1)

    # what the table can still give: the values of a set it holds (sets hold present codes)
    need = np.array([min(values_needed, len(s)) for s in sets], dtype=np.int64)
    members = _members(unit, units)
    dealt: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # each unit's groups and buckets

    rng = rng or np.random.default_rng()

    def holds(u: int) -> bool:
        dealt[u] = deal(x, members[u], k, rng)
        return unit_holds(sa, members[u], dealt[u], plausible, sets, need, k, l)

    failing = {u for u in members if not holds(u)}
    alive = np.zeros(units, dtype=bool)
    alive[list(members)] = True
    centres = np.zeros((units, x.shape[1]))
    for u, rows in members.items():
        centres[u] = x[rows].mean(axis=0)
    queue = [(len(members[u]), u) for u in failing]  # smallest failing unit first
    heapq.heapify(queue)
    merged = 0
    while queue and int(alive.sum()) > 1:
        size, u = heapq.heappop(queue)
        if u not in failing or len(members[u]) != size:
            continue  # stale: merged away, or grown (queued again then)
        alive[u] = False
        d = np.abs(centres - centres[u]).sum(axis=1)
        d[~alive] = np.inf
        into = int(d.argmin())
        rows = np.sort(np.concatenate([members[into], members.pop(u)]))
        members[into] = rows
        dealt.pop(u, None)
        failing.discard(u)
        merged += 1
        centres[into] = x[rows].mean(axis=0)
        if holds(into):
            failing.discard(into)
        else:
            failing.add(into)
            heapq.heappush(queue, (len(rows), into))
    order = rng.permutation(np.array(sorted(members)))
    return layout(members, dealt, order, n, k, merged)


def _members(unit: np.ndarray, units: int) -> dict[int, np.ndarray]:
    order = np.argsort(unit, kind="stable")
    bounds = np.searchsorted(unit[order], np.arange(units + 1))
    return {
        u: np.sort(order[bounds[u] : bounds[u + 1]])
        for u in range(units)
        if bounds[u + 1] > bounds[u]
    }


def unit_holds(
    sa: np.ndarray,
    rows: np.ndarray,
    layout: tuple[np.ndarray, np.ndarray],
    plausible: np.ndarray,
    sets: list[np.ndarray],
    need: np.ndarray,
    k: int,
    l: int,  # noqa: E741
) -> bool:
    """Whether a unit, dealt into groups and buckets, keeps (k,l) and every earlier promise."""
    if len(rows) < k:
        return False
    groups, buckets = layout
    if odds(groups, buckets, sa[rows], k) > 1 / l + TOLERANCE:
        return False
    held = np.unique(sa[rows])
    bucket_vals = [set(sa[rows[buckets == b]].tolist()) for b in range(k)]
    for idx in np.unique(plausible[rows]):
        if idx < 0:
            continue
        values = sets[idx]
        if np.isin(values, held).sum() < need[idx]:
            return False
        wanted = set(values.tolist())
        ok = np.array([bool(bucket_vals[b] & wanted) for b in range(k)])
        at = rows[plausible[rows] == idx]
        mine = np.unique(groups[np.isin(rows, at)])
        for g in mine.tolist():
            if int(ok[buckets[groups == g]].sum()) < k:
                return False
    return True


def layout(
    members: dict[int, np.ndarray],
    dealt: dict[int, tuple[np.ndarray, np.ndarray]],
    order: np.ndarray,
    n: int,
    k: int,
    merged: int,
) -> Layout:
    gid = np.full(n, -1, dtype=np.int64)
    bid = np.full(n, -1, dtype=np.int64)
    unit = np.full(n, -1, dtype=np.int64)
    groups = 0
    for i, u in enumerate(order.tolist()):
        rows = members[u]
        g, b = dealt[u]
        gid[rows] = groups + g + 1
        groups += int(g.max()) + 1
        bid[rows] = i * k + b + 1
        unit[rows] = i
    return Layout(gid, bid, unit, len(members), merged, int((gid < 0).sum()))
