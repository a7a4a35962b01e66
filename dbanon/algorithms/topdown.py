"""LAG's numba loops, apart so that importing dbanon.algorithms.lag does not load numba:
LAG_2's Top-down split (Xu et al., KDD'06), LAG_1's median cuts, and the values each class
holds (what its rows' buckets hold)."""

from __future__ import annotations

import numpy as np
from numba import njit

from dbanon.algorithms.mondrian import _select  # Mondrian's quickselect: the same kernel


@njit(cache=True)
def _box_cost(lo: np.ndarray, hi: np.ndarray, node: np.ndarray, height: np.ndarray) -> float:
    c = 0.0
    for i in range(len(lo)):
        c += hi[i] - lo[i]
    for j in range(len(node)):
        c += height[j, node[j]]
    return c


@njit(cache=True)
def top_down_split(
    num: np.ndarray, cat: np.ndarray, lca: np.ndarray, height: np.ndarray, order: np.ndarray,
    u: int, v: int, k: int,
) -> np.ndarray:  # fmt: skip
    """Xu et al.'s split: side (True: u's group) of every row, re-balanced so both keep >= k."""
    n, p, q = num.shape[0], num.shape[1], cat.shape[1]
    side = np.zeros(n, dtype=np.bool_)
    lo = np.empty((2, p))
    hi = np.empty((2, p))
    node = np.empty((2, q), dtype=np.int64)
    size = np.zeros(2, dtype=np.int64)
    for g, seed in ((0, u), (1, v)):
        lo[g] = num[seed]
        hi[g] = num[seed]
        for j in range(q):
            node[g, j] = cat[seed, j]
        size[g] = 1
    side[u] = True
    nlo = np.empty(p)
    nhi = np.empty(p)
    nnode = np.empty(q, dtype=np.int64)
    for w in order:
        if w in (u, v):
            continue
        best, grow = 0, np.inf
        for g in range(2):
            for i in range(p):
                nlo[i] = min(lo[g, i], num[w, i])
                nhi[i] = max(hi[g, i], num[w, i])
            for j in range(q):
                nnode[j] = lca[j, node[g, j], cat[w, j]]
            d = (size[g] + 1) * _box_cost(nlo, nhi, nnode, height) - size[g] * _box_cost(
                lo[g], hi[g], node[g], height)
            if d < grow:
                best, grow = g, d
        for i in range(p):
            lo[best, i] = min(lo[best, i], num[w, i])
            hi[best, i] = max(hi[best, i], num[w, i])
        for j in range(q):
            node[best, j] = lca[j, node[best, j], cat[w, j]]
        size[best] += 1
        side[w] = best == 0
    return side


@njit(cache=True)
def _part(a: np.ndarray, left_of: np.ndarray, lo: int, hi: int, nl: int, spare: np.ndarray
          ) -> None:  # fmt: skip
    """a[lo:hi] parted in place by left_of: its left rows from lo, then its right ones from nl,
    each in order (`spare` holds the right ones meanwhile); no branch on the side."""
    at, nr = lo, 0
    for i in range(lo, hi):
        v = a[i]
        a[at] = v
        spare[nr] = v
        s = left_of[i]
        at += s
        nr += 1 - s
    a[nl:hi] = spare[:nr]


@njit(cache=True)
def middle(a: np.ndarray) -> float:
    """The median of `a` (no NaN, reordered in place): the middle order statistic, or the mean
    of the two middle ones, as np.median gives it. (numba's np.partition copies, and took 5x
    numpy's time: most of a 10M-row LAG run's cuts.)"""
    m = len(a)
    upper = _select(a, m // 2)
    if m % 2:
        return upper
    lower = a[0]
    for i in range(1, m // 2):  # below m // 2 only values <= upper: the largest is the other
        lower = max(lower, a[i])
    return (lower + upper) / 2


@njit(cache=True, fastmath=True)
def _spread(values: np.ndarray) -> float:
    """max - min of values without NaN (fastmath: the reductions run in vector registers,
    which NaN's ordering rules would forbid; without NaN the figures are the same)."""
    mx, mn = values[0], values[0]
    for v in values:
        mx = max(mx, v)
        mn = min(mn, v)
    return mx - mn


@njit(cache=True)
def median_cut_groups(x: np.ndarray, k: int) -> np.ndarray:
    """LAG_1's median cuts (dbanon.algorithms.lag.median_cuts, whose loop this is) over the
    rows of `x`, given column by column (float64 (d, n), C order, no NaN; it is overwritten):
    group ids 0..g-1 in the order the sets are popped. A set is one segment of every column
    and of a buffer of row numbers, all parted in place alike (left, then right, each in
    order), so every pass reads memory in order: the rows of a set stay together, where
    reading x[rows[i], a] jumped across the whole table (20 s of a 10M-row LAG run)."""
    d, n = x.shape
    gid = np.zeros(n, dtype=np.int64)
    rows = np.arange(n)
    spare = np.empty(n, dtype=np.int64)
    values = np.empty(n)  # a column's right part while it is parted
    left_of = np.empty(n, dtype=np.uint8)  # a set's rows: 1 left of the cut tried, else 0
    # The sets on the stack are disjoint, each of k rows or more: n // k of them at most.
    stack = np.empty((n // max(k, 1) + 2, 2), dtype=np.int64)
    stack[0, 0], stack[0, 1] = 0, n
    top, next_id = 1, 0
    spread = np.empty(d)
    order = np.empty(d, dtype=np.int64)
    while top:
        top -= 1
        lo, hi = stack[top, 0], stack[top, 1]
        m = hi - lo
        cut_at = -1
        median = 0.0
        left = 0
        if m >= 2 * k:
            for a in range(d):
                spread[a] = _spread(x[a, lo:hi])
            for a in range(d):  # widest first, ties by column (a stable sort of -spread)
                j = a
                while j > 0 and spread[order[j - 1]] < spread[a]:
                    order[j] = order[j - 1]
                    j -= 1
                order[j] = a
            for t in range(d):
                a = order[t]
                if spread[a] <= 0:
                    break
                part = values[:m]
                part[:] = x[a, lo:hi]
                median = middle(part)
                col = x[a]
                left = 0
                for i in range(lo, hi):  # each row's side, kept for the parting below
                    s = col[i] <= median
                    left_of[i] = s
                    left += s
                if k <= left <= m - k:
                    cut_at = a
                    break
        if cut_at < 0:
            for i in range(lo, hi):
                gid[rows[i]] = next_id
            next_id += 1
            continue
        nl = lo + left  # the loops below take each row's side from left_of: no branch
        _part(rows, left_of, lo, hi, nl, spare)
        for a in range(d):
            _part(x[a], left_of, lo, hi, nl, values)
        stack[top, 0], stack[top, 1] = nl, hi  # the right part, popped after the left
        stack[top + 1, 0], stack[top + 1, 1] = lo, nl
        top += 2
    return gid


@njit(cache=True)
def _csr(owner: np.ndarray, item: np.ndarray, owners: int) -> tuple[np.ndarray, np.ndarray]:
    """Each owner's items (with repeats), one after another: (starts, items)."""
    starts = np.zeros(owners + 1, dtype=np.int64)
    for i in range(len(owner)):
        starts[owner[i] + 1] += 1
    for o in range(owners):
        starts[o + 1] += starts[o]
    at = starts[:-1].copy()
    items = np.empty(len(owner), dtype=np.int64)
    for i in range(len(owner)):
        items[at[owner[i]]] = item[i]
        at[owner[i]] += 1
    return starts, items


@njit(cache=True)
def class_value_pairs(
    g: np.ndarray, b: np.ndarray, c: np.ndarray, groups: int, nb: int, nc: int
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (group, value) pairs of rows in group g[i] and bucket b[i] holding value
    c[i] (dbanon.algorithms.lag_persist.class_values, whose rows these are): every value of
    every bucket a group's rows lie in, in (group, value) order; linear, but for each group's
    values sorted."""
    bstart, bvals = _csr(b, c, nb)
    gstart, gbs = _csr(g, b, groups)
    seen_b = np.full(nb, -1, dtype=np.int64)
    seen_c = np.full(nc, -1, dtype=np.int64)
    total = 0
    for write in (False, True):
        if write:
            out_g = np.empty(total, dtype=np.int64)
            out_c = np.empty(total, dtype=np.int64)
            seen_b[:] = -1
            seen_c[:] = -1
        p = 0
        for grp in range(groups):
            first = p
            for j in range(gstart[grp], gstart[grp + 1]):
                bb = gbs[j]
                if seen_b[bb] == grp:
                    continue
                seen_b[bb] = grp
                for t in range(bstart[bb], bstart[bb + 1]):
                    v = bvals[t]
                    if seen_c[v] == grp:
                        continue
                    seen_c[v] = grp
                    if write:
                        out_g[p] = grp
                        out_c[p] = v
                    p += 1
            if write:
                out_c[first:p] = np.sort(out_c[first:p])
        total = p
    return out_g, out_c


@njit(cache=True)
def group_extremes(values: np.ndarray, live: np.ndarray, g: np.ndarray, groups: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Per group (ids 0..groups-1) the greatest and least of its live rows' values, and
    whether it has any: one pass over the rows in their order, no sort. A NaN wins, as in
    np.maximum and np.minimum."""
    hi = np.zeros(groups, dtype=values.dtype)
    lo = np.zeros(groups, dtype=values.dtype)
    seen = np.zeros(groups, dtype=np.bool_)
    for r in range(len(values)):
        if live[r]:
            x, v = g[r], values[r]
            if not seen[x]:
                hi[x], lo[x], seen[x] = v, v, True
            else:
                if v > hi[x] or v != v:
                    hi[x] = v
                if v < lo[x] or v != v:
                    lo[x] = v
    return hi, lo, seen
