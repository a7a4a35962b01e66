"""Nearest groups and rows for the regrouping of a refresh (dbanon.algorithms.persist).

The distance is the k-member one: numeric QIs' absolute differences (normalised values), then
categorical QIs' LCA heights, summed in that order. `distance` measures blocks of points against
every group centre; `walk` finds the m nearest free points of one query without measuring them
all: points come in parts by their categorical values (a far combination is skipped whole),
each part sorted on one numeric QI, visited outwards from the query's place on it until that
QI's difference alone passes the m-th distance found. `Near` keeps the centres of merging
groups walkable as they move. Every answer is the one sorting every distance gives, ties by
position (tests/test_persist_walk.py)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from dbanon.algorithms.base import QIArrays

_CELLS = 1 << 20  # distances per block of rows x groups (8 MB of float64): bounded memory


def block_rows(groups: int) -> int:
    """Rows per block when each row's distance to every group is computed."""
    return max(16, _CELLS // max(groups, 1))


def distance(
    qi: QIArrays, num: np.ndarray, cat: np.ndarray, cnum: np.ndarray, ccat: np.ndarray
) -> np.ndarray:
    """(len(num), len(cnum)) distances between points and group centres: numeric QIs' absolute
    differences, then categorical QIs' LCA heights, summed in that order (compiled: a block's
    memory is its distances alone). A block of `_PARALLEL` cells or more is split over the
    cores; a smaller one (a merge's one group against every centre) is not worth a parallel
    region, which stalls when another process holds a core."""
    args = (
        np.ascontiguousarray(num, dtype=np.float64), np.ascontiguousarray(cat, dtype=np.int32),
        np.ascontiguousarray(cnum, dtype=np.float64), np.ascontiguousarray(ccat, dtype=np.int32),
        qi.lca, qi.height,
    )  # fmt: skip
    if len(num) * len(cnum) >= _PARALLEL:
        return _distances_parallel(*args)
    return _distances(*args)


_PARALLEL = 1 << 22  # cells (about 20 ms of work) from which a block is split over the cores


@njit(cache=True)
def _row(out: np.ndarray, i: int, num: np.ndarray, cat: np.ndarray, cnum: np.ndarray,  # fmt: skip
         ccat: np.ndarray, lca: np.ndarray, height: np.ndarray, lo: int, hi: int) -> None:
    """Row i's distances to centres lo..hi. With fewer nodes than centres, the row's height
    to every node is looked up first: then a centre costs one lookup per categorical QI, not
    two dependent ones."""
    q, nodes = cat.shape[1], lca.shape[1]
    first = nodes < hi - lo
    rowh = np.empty((q, nodes if first else 1))
    if first:
        for b in range(q):
            for m in range(nodes):
                rowh[b, m] = height[b, lca[b, cat[i, b], m]]
    for j in range(lo, hi):
        d = 0.0
        for a in range(num.shape[1]):
            d += abs(num[i, a] - cnum[j, a])
        for b in range(q):
            d += rowh[b, ccat[j, b]] if first else height[b, lca[b, cat[i, b], ccat[j, b]]]
        out[i, j] = d


@njit(cache=True)
def _distances(num: np.ndarray, cat: np.ndarray, cnum: np.ndarray, ccat: np.ndarray,
               lca: np.ndarray, height: np.ndarray) -> np.ndarray:  # fmt: skip
    out = np.empty((num.shape[0], cnum.shape[0]))
    for i in range(num.shape[0]):
        _row(out, i, num, cat, cnum, ccat, lca, height, 0, cnum.shape[0])
    return out


@njit(cache=True, parallel=True)
def _distances_parallel(num: np.ndarray, cat: np.ndarray, cnum: np.ndarray, ccat: np.ndarray,
                        lca: np.ndarray, height: np.ndarray) -> np.ndarray:  # fmt: skip
    """`_distances` with the rows in parallel (a few rows: each row's centres in parts); the
    same sums in the same order."""
    out = np.empty((num.shape[0], cnum.shape[0]))
    n, g = num.shape[0], cnum.shape[0]
    if n >= 16:
        for i in prange(n):
            _row(out, i, num, cat, cnum, ccat, lca, height, 0, g)
    else:
        for i in range(n):
            for p in prange(16):
                _row(out, i, num, cat, cnum, ccat, lca, height, p * g // 16, (p + 1) * g // 16)
    return out


@njit(cache=True)
def _before(x: float, i: int, y: float, j: int) -> bool:
    """(x, i) comes before (y, j): the nearer first, NaN last, ties by position."""
    if x != x:
        return y != y and i < j
    return y != y or x < y or (x == y and i < j)


@njit(cache=True)
def _insert(best_d: np.ndarray, best_i: np.ndarray, count: int, x: float, j: int) -> int:
    """Keep the len(best_d) first (distance, position) pairs seen, in `_before`'s order;
    returns how many are kept."""
    m = len(best_d)
    if count == m and not _before(x, j, best_d[m - 1], best_i[m - 1]):
        return count
    p = count if count < m else m - 1
    while p > 0 and _before(x, j, best_d[p - 1], best_i[p - 1]):
        best_d[p], best_i[p] = best_d[p - 1], best_i[p - 1]
        p -= 1
    best_d[p], best_i[p] = x, j
    return min(count + 1, m)


def line(cnum: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """The numeric QI whose centres spread widest, the centres sorted on it and each one's
    place; dim -1 (no line: every centre in its place) without a numeric QI or with a NaN
    centre."""
    if not cnum.shape[1] or np.isnan(cnum).any():
        return -1, np.arange(len(cnum)), np.arange(len(cnum))
    dim = int(np.argmax(cnum.max(axis=0) - cnum.min(axis=0)))
    order = np.argsort(cnum[:, dim], kind="stable")
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order))
    return dim, order, pos


_PARTS = 64  # at most this many parts by categorical values; more are walked as one


def whole(n: int) -> tuple[np.ndarray, np.ndarray]:
    """n rows as one part, of no categorical cost (see `walk`)."""
    return np.array([0, n], dtype=np.int64), np.full(1, -1, dtype=np.int64)


def parts(num: np.ndarray, cat: np.ndarray) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Rows that do not move, for `walk`: split by their categorical values when they hold
    few combinations (a far combination is skipped whole), each part sorted on the line's
    QI (`line`). Returns dim, order, starts, reps."""
    dim, order, _ = line(num)
    n = len(num)
    if not cat.shape[1] or not n:
        return (dim, order, *whole(n))
    combos, part = np.unique(cat, axis=0, return_inverse=True)
    if len(combos) > _PARTS:
        return (dim, order, *whole(n))
    part = part.reshape(-1)
    order = order[np.argsort(part[order], kind="stable")]  # by part, then on the line
    starts = np.r_[0, np.cumsum(np.bincount(part, minlength=len(combos)))].astype(np.int64)
    return dim, order, starts, order[starts[:-1]].astype(np.int64)


@njit(cache=True)
def moved_on_line(cnum: np.ndarray, dim: int, order: np.ndarray, pos: np.ndarray,
                   g: int, lo: int, hi: int) -> None:  # fmt: skip
    """Centre g moved: its place on the line of its part (order[lo:hi]), found again (in
    place)."""
    p = pos[g]
    x = cnum[g, dim]
    while p > lo and cnum[order[p - 1], dim] > x:
        order[p] = order[p - 1]
        pos[order[p]] = p
        p -= 1
    while p < hi - 1 and cnum[order[p + 1], dim] < x:
        order[p] = order[p + 1]
        pos[order[p]] = p
        p += 1
    order[p] = g
    pos[g] = p


@njit(cache=True)
def walk(qnum: np.ndarray, qcat: np.ndarray, num: np.ndarray, cat: np.ndarray,
          lca: np.ndarray, height: np.ndarray, free: np.ndarray, bound: float, m: int,
          dim: int, order: np.ndarray, starts: np.ndarray,
          reps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The m free rows nearest the point (qnum, qcat) at a distance below `bound`, nearest
    first, ties by position, and their distances (`distance`'s sum, term by term). The rows
    come in parts (`parts`: order[starts[p]:starts[p + 1]]); a part whose rows all hold the
    categorical values of row reps[p] (-1: not so) costs the query those values' heights at
    least, and is skipped when that alone is too far. In a part, with a line (rows sorted on
    numeric QI `dim`) rows are visited outwards from the point's place on it, and the walk ends
    where the part's cost and that QI's difference exceed the m-th distance found or reach
    the bound; without one (dim -1), every row of the part is visited."""
    best_d, best_i = np.empty(m), np.empty(m, dtype=np.int64)
    count = 0
    for p in range(len(starts) - 1):
        base = 0.0  # the part's categorical heights: a lower bound of its rows' distances
        if reps[p] >= 0:
            for b in range(cat.shape[1]):
                base += height[b, lca[b, qcat[b], cat[reps[p], b]]]
            base *= 1.0 - 1e-12  # rounding: never above a distance summed in another order
        if base >= bound or (count == m and base > best_d[m - 1]):
            continue
        first, end = starts[p], starts[p + 1]
        if dim < 0:
            left, right, x = first - 1, first, 0.0
        else:
            x = qnum[dim]
            lo, hi = first, end  # the point's place on the part's line
            while lo < hi:
                mid = (lo + hi) // 2
                if num[order[mid], dim] < x:
                    lo = mid + 1
                else:
                    hi = mid
            left, right = lo - 1, lo
        while left >= first or right < end:
            if dim < 0:
                j = order[right]
                right += 1
            else:
                low_left = x - num[order[left], dim] if left >= first else np.inf
                low_right = num[order[right], dim] - x if right < end else np.inf
                if low_left <= low_right:
                    low, j = low_left, order[left]
                    left -= 1
                else:
                    low, j = low_right, order[right]
                    right += 1
                low += base
                if low >= bound or (count == m and low > best_d[m - 1]):
                    break
            if not free[j]:
                continue
            d = 0.0
            for a in range(num.shape[1]):
                d += abs(qnum[a] - num[j, a])
            for b in range(cat.shape[1]):
                d += height[b, lca[b, qcat[b], cat[j, b]]]
            if d < bound:
                count = _insert(best_d, best_i, count, d, j)
    return best_i[:count], best_d[:count]


@njit(cache=True)
def nearest_other(gs: np.ndarray, cnum: np.ndarray, ccat: np.ndarray, lca: np.ndarray,
                   height: np.ndarray, dim: int, order: np.ndarray, starts: np.ndarray,
                   reps: np.ndarray) -> np.ndarray:  # fmt: skip
    """Per group of `gs`: the distance from its centre to the nearest other centre (`walk`
    with the group itself left out; inf when it is the only one)."""
    others = np.ones(len(cnum), dtype=np.bool_)
    out = np.full(len(gs), np.inf)
    for i in range(len(gs)):
        g = gs[i]
        others[g] = False
        _, d = walk(cnum[g], ccat[g], cnum, ccat, lca, height, others, np.inf, 1, dim, order,
                     starts, reps)  # fmt: skip
        others[g] = True
        if len(d):
            out[i] = d[0]
    return out


class Near:
    """The centres of `merge_failing` as they merge, for `walk`: in parts by their
    categorical values (`parts`: a far combination is skipped whole), each part kept sorted on
    the line as its centres move. A centre whose categorical values change leaves its part for
    a few strays, walked one by one; the nearest of both, ties by position, are the nearest
    of all, as one walk over every centre would find them."""

    def __init__(self, cnum: np.ndarray, ccat: np.ndarray, alive: np.ndarray) -> None:
        groups = len(cnum)
        self.dim, self.order, self.starts, reps = parts(cnum, ccat)
        self.pos = np.empty(groups, dtype=np.int64)
        self.pos[self.order] = np.arange(groups)
        self.part = np.repeat(np.arange(len(self.starts) - 1), np.diff(self.starts))[
            self.pos]  # fmt: skip
        # each part's categorical values after the centres, fixed while the centres change
        self.cat = np.vstack([ccat, ccat[np.maximum(reps, 0)]]) if groups else ccat
        self.reps = np.where(reps >= 0, groups + np.arange(len(reps)), -1).astype(np.int64)
        self.cnum, self.ccat = cnum, self.cat[:groups]  # a view: merges update both
        self.alive = alive
        self.inpart = alive.copy()  # alive and still in its part
        self.strays = np.empty(groups, dtype=np.int64)  # the first `nstrays` of them
        self.nstrays = 0

    def gone(self, g: int) -> None:
        self.alive[g] = self.inpart[g] = False

    def moved(self, g: int) -> None:
        """Centre g changed: its place on its part's line, or a stray's."""
        self.nstrays = moved_centre(g, self.cnum, self.cat, self.dim, self.order, self.pos,
                                    self.starts, self.part, self.reps, self.inpart, self.strays,
                                    self.nstrays)  # fmt: skip

    def nearest(self, g: int, m: int, lca: np.ndarray, height: np.ndarray) -> list[int]:
        """The m alive centres nearest centre g (not g itself), nearest first."""
        near, self.nstrays = nearest_alive(g, m, self.cnum, self.cat, lca, height, self.inpart,
                                           self.alive, self.dim, self.order, self.starts,
                                           self.reps, self.strays, self.nstrays)  # fmt: skip
        return near.tolist()


@njit(cache=True)
def moved_centre(g: int, cnum: np.ndarray, ncat: np.ndarray, dim: int, order: np.ndarray,
                 pos: np.ndarray, starts: np.ndarray, part: np.ndarray, reps: np.ndarray,
                 inpart: np.ndarray, strays: np.ndarray, nstrays: int) -> int:  # fmt: skip
    """`Near.moved` over arrays (the compiled merges call it too); returns the strays' count."""
    if not inpart[g]:
        return nstrays
    p = part[g]
    rep = reps[p]
    if rep >= 0 and (ncat[g] != ncat[rep]).any():
        inpart[g] = False
        strays[nstrays] = g
        return nstrays + 1
    if dim >= 0:
        moved_on_line(cnum, dim, order, pos, g, starts[p], starts[p + 1])
    return nstrays


@njit(cache=True)
def first_pairs(ids: np.ndarray, dists: np.ndarray, m: int) -> np.ndarray:
    """The m first of (distance, position) pairs in `walk`'s order (`_insert`)."""
    best_d, best_i = np.empty(m), np.empty(m, dtype=np.int64)
    count = 0
    for a in range(len(ids)):
        count = _insert(best_d, best_i, count, dists[a], ids[a])
    return best_i[:count]


@njit(cache=True)
def nearest_alive(g: int, m: int, cnum: np.ndarray, ncat: np.ndarray, lca: np.ndarray,
                   height: np.ndarray, inpart: np.ndarray, alive: np.ndarray, dim: int,
                   order: np.ndarray, starts: np.ndarray, reps: np.ndarray, strays: np.ndarray,
                   nstrays: int) -> tuple[np.ndarray, int]:  # fmt: skip
    """`Near.nearest` over arrays: the m alive centres nearest g, and the strays still alive
    (kept at the front of `strays`)."""
    i, d = walk(cnum[g], ncat[g], cnum, ncat, lca, height, inpart, np.inf, m, dim, order,
                 starts, reps)  # fmt: skip
    s = 0
    for t in range(nstrays):
        if alive[strays[t]]:
            strays[s] = strays[t]
            s += 1
    if s == 0:
        return i, 0
    si, sd = walk(cnum[g], ncat[g], cnum, ncat, lca, height, alive, np.inf, m, -1,
                   strays[:s].copy(), np.array([0, s], dtype=np.int64),
                   np.full(1, -1, dtype=np.int64))  # fmt: skip
    return first_pairs(np.concatenate((i, si)), np.concatenate((d, sd)), m), s
