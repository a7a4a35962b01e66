"""Greedy k-member clustering (Byun et al. 2007; Wang & Ma 2011): exact greedy rule, made fast.

Why one module of about 600 lines: one rule, one compiled loop, and the numba helpers that it
and (θ,k)'s loop (dbanon.algorithms.thetak) share: the candidate index, the bounds, the heap.

The rule (spec kmember.md): while at least k records remain, seed a cluster with one record and
grow it by the remaining record r minimising IL(c + r), ties to the lowest row index, until it has
k members; then each leftover record joins the cluster whose IL grows least. Since |c + r| is the
same for every candidate, growth minimises the bracket
B(c + r) = sum_numeric (max - min) + sum_categorical height(LCA), summed in that column order.

Speed, without changing a single choice (tests compare with a naive implementation):
- Identical rows are collapsed into points with a sorted member list: members of a point cost the
  same, so the pick is the point minimising (cost, its lowest remaining row).
- B(c + r) never decreases while c grows (ranges only widen, LCAs only rise, IEEE rounding is
  monotone), so bounds computed once stay valid lower bounds. Per cluster, one pass keeps the 2k
  cheapest candidates in a heap plus a bound on all the others; the heap is lazy (pop, recompute
  if stale, accept a fresh top) and is refilled only if its top reaches the others' bound.
- Points sharing their categorical values form a group: the categorical costs are looked up once
  per group, and a group whose numeric bounding box cannot beat the candidates kept is skipped.
- No prange: a cluster's pass takes about 0.1 ms, too little to pay for handing work to threads,
  and one parallel region per cluster stalls badly when another process holds a core.

Randomness: one permutation of the rows from np.random.default_rng(seed). A "random remaining
record" is the first remaining row in that permutation (uniform among the remaining rows, as the
permutation is independent of the data), and leftovers are placed in permutation order.

(p,k) variant (the baseline of the (theta,k) paper), where the spec leaves things open:
- clusters are started while at least k records AND at least p distinct sensitive values remain,
  so every started cluster can be completed;
- while a cluster has fewer than p distinct values only records with a value new to it are
  candidates (the cheapest of those); it grows until it has >= k members and >= p values, so
  max(k, p) members before leftovers are placed;
- leftovers (more than k-1 of them when sensitive values are skewed) join the cluster of least IL
  increase as in plain k-member, so the 2k-1 size bound only holds for plain k-member.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dbanon.algorithms.base import QIArrays
from dbanon.metrics.loss import node_weights

_SEEDINGS = ("random", "furthest")
# Tuning only (any positive values give the same clusters; the tests shrink them to stress the
# code paths): points per group, and candidates kept per cluster (x k; refills double it).
_CHUNK = 128
_FIRST_PICK = 2


@njit(cache=True)
def _growth(
    u: int,
    unum: np.ndarray,
    ucat: np.ndarray,
    hcost: np.ndarray,
    height: np.ndarray,
    hi: np.ndarray,
    lo: np.ndarray,
    state: np.ndarray,
    size: int,
) -> float:
    """IL(c + u) - IL(c): how much a cluster of `size` rows loses by taking point u."""
    old = 0.0
    for i in range(unum.shape[1]):
        old += hi[i] - lo[i]
    for j in range(ucat.shape[1]):
        old += height[j, state[j]]
    return (size + 1) * _bracket_with(u, unum, ucat, hcost, hi, lo, state) - size * old


@njit(cache=True)
def _bracket_with(
    u: int,
    unum: np.ndarray,
    ucat: np.ndarray,
    hcost: np.ndarray,
    hi: np.ndarray,
    lo: np.ndarray,
    state: np.ndarray,
) -> float:
    """B(c + point u): the cluster (hi, lo, state) widened by the point's values."""
    s = 0.0
    for i in range(unum.shape[1]):
        x = unum[u, i]
        h = hi[i] if hi[i] > x else x
        lw = lo[i] if lo[i] < x else x
        s += h - lw
    for j in range(ucat.shape[1]):
        s += hcost[j, state[j], ucat[u, j]]
    return s


@njit(cache=True)
def _absorb(
    u: int,
    unum: np.ndarray,
    ucat: np.ndarray,
    lca: np.ndarray,
    hi: np.ndarray,
    lo: np.ndarray,
    state: np.ndarray,
) -> None:
    """Widen the cluster (hi, lo, state) in place by point u's values."""
    for i in range(unum.shape[1]):
        x = unum[u, i]
        if x > hi[i]:
            hi[i] = x
        if x < lo[i]:
            lo[i] = x
    for j in range(ucat.shape[1]):
        state[j] = lca[j, state[j], ucat[u, j]]


@njit(cache=True)
def _index(start: np.ndarray, members: np.ndarray, gstart: np.ndarray) -> tuple[np.ndarray, ...]:
    """The candidate index that _take keeps, with every row live: per point the position in
    `members` of its lowest remaining row (nxt), that row (low) and its rows left (cnt); the
    live points of group g, gpts[gstart[g]:gstart[g] + gact[g]], with where[u] = u's position;
    the live groups, agroups[:nag], with gwhere[g] = g's position."""
    npts = start.shape[0] - 1
    ngroups = gstart.shape[0] - 1
    nxt = start[:-1].copy()
    low = np.empty(npts, np.int64)
    for u in range(npts):
        low[u] = members[nxt[u]]
    cnt = start[1:] - start[:-1]
    gpts = np.arange(npts)
    where = np.arange(npts)
    gact = gstart[1:] - gstart[:-1]
    agroups = np.arange(ngroups)
    gwhere = np.arange(ngroups)
    return nxt, low, cnt, gpts, where, gact, agroups, gwhere


@njit(cache=True)
def _take(
    r: int,
    u: int,
    removed: np.ndarray,
    members: np.ndarray,
    nxt: np.ndarray,
    low: np.ndarray,
    cnt: np.ndarray,
    grp: np.ndarray,
    gstart: np.ndarray,
    gact: np.ndarray,
    gpts: np.ndarray,
    where: np.ndarray,
    agroups: np.ndarray,
    gwhere: np.ndarray,
    nag: int,
) -> int:
    """Row r (already marked removed) of point u leaves the candidate index: the point leaves
    its group's live points when it has no row left (the group leaves the live groups when it
    has no point left), else its lowest remaining row moves on. Returns the live groups' count.
    Shared by k-member's and (θ,k)'s greedy loops, which keep the same index."""
    cnt[u] -= 1
    if cnt[u] == 0:
        g = grp[u]
        gact[g] -= 1
        last = gpts[gstart[g] + gact[g]]
        gpts[where[u]] = last
        where[last] = where[u]
        if gact[g] == 0:
            nag -= 1
            lastg = agroups[nag]
            agroups[gwhere[g]] = lastg
            gwhere[lastg] = gwhere[g]
    elif r == low[u]:
        nxt[u] += 1
        while removed[members[nxt[u]]]:
            nxt[u] += 1
        low[u] = members[nxt[u]]
    return nag


@njit(cache=True)
def _less(b1: float, i1: int, b2: float, i2: int) -> bool:
    """Key order: cost, then row index (the tie-break of the greedy rule)."""
    return b1 < b2 or (b1 == b2 and i1 < i2)


@njit(cache=True)
def _sift_down(kb: np.ndarray, ki: np.ndarray, size: int, pos: int, top_is_max: bool) -> None:
    """Restore the heap order below `pos` (a min-heap of keys, or a max-heap)."""
    b, i = kb[pos], ki[pos]
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        right = child + 1
        if right < size and (
            _less(kb[child], ki[child], kb[right], ki[right])
            if top_is_max
            else _less(kb[right], ki[right], kb[child], ki[child])
        ):
            child = right
        if _less(b, i, kb[child], ki[child]) if top_is_max else _less(kb[child], ki[child], b, i):
            kb[pos], ki[pos] = kb[child], ki[child]
            pos = child
        else:
            break
    kb[pos], ki[pos] = b, i


@njit(cache=True)
def _push(kb: np.ndarray, ki: np.ndarray, size: int, b: float, i: int, top_is_max: bool) -> int:
    """Add key (b, i) to the heap of `size` keys; returns the new size."""
    pos = size
    while pos > 0:
        parent = (pos - 1) >> 1
        pb, pi = kb[parent], ki[parent]
        if _less(pb, pi, b, i) if top_is_max else _less(b, i, pb, pi):
            kb[pos], ki[pos] = kb[parent], ki[parent]
            pos = parent
        else:
            break
    kb[pos], ki[pos] = b, i
    return size + 1


@njit(cache=True)
def _select(
    c: int,
    hi: np.ndarray,
    lo: np.ndarray,
    state: np.ndarray,
    first: int,
    cap: int,
    tb: np.ndarray,
    ti: np.ndarray,
    sel: np.ndarray,
    low: np.ndarray,
    unum: np.ndarray,
    gpts: np.ndarray,
    gact: np.ndarray,
    agroups: np.ndarray,
    nag: int,
    groups: tuple[np.ndarray, ...],
    big: int,
) -> tuple[int, float, int]:
    """The `cap` smallest keys (B(c + u), lowest row) of remaining points not yet selected for c.

    They are left in tb/ti (a max-heap); returns their number and a key below every point left
    out, which bounds them for the rest of the cluster's growth (costs only grow). Points come
    in groups sharing their categorical values, so the categorical part is looked up once per
    group, and a group whose lower bound (from its numeric bounding box) cannot beat the worst
    kept key is skipped whole. Group `first` (the seed's) is scanned first to prune sooner.
    """
    gstart, gcat, gmin, gmax, gminrow, hcost = groups
    m = np.int64(0)
    rb, ri = np.inf, big
    nn, nq = unum.shape[1], gcat.shape[1]
    catc = np.empty(nq)
    for t in range(-1, nag):
        g = first if t < 0 else agroups[t]
        if t >= 0 and g == first:
            continue
        # Lower bound of every point of g, summed in the same order as the exact cost.
        s = 0.0
        for x in range(nn):
            h = hi[x] if hi[x] > gmin[g, x] else gmin[g, x]
            lw = lo[x] if lo[x] < gmax[g, x] else gmax[g, x]
            s += h - lw
        for j in range(nq):
            catc[j] = hcost[j, state[j], gcat[g, j]]
            s += catc[j]
        if m == cap and not _less(s, gminrow[g], tb[0], ti[0]):
            if _less(s, gminrow[g], rb, ri):
                rb, ri = s, gminrow[g]
            continue
        for a in range(gstart[g], gstart[g] + gact[g]):
            u = gpts[a]
            if sel[u] == c:
                continue
            b = 0.0
            for x in range(nn):
                v = unum[u, x]
                h = hi[x] if hi[x] > v else v
                lw = lo[x] if lo[x] < v else v
                b += h - lw
            for j in range(nq):
                b += catc[j]
            i = low[u]
            if m < cap:
                m = _push(tb, ti, m, b, i, True)
            elif _less(b, i, tb[0], ti[0]):
                if _less(tb[0], ti[0], rb, ri):
                    rb, ri = tb[0], ti[0]
                tb[0], ti[0] = b, i
                _sift_down(tb, ti, m, 0, True)
            elif _less(b, i, rb, ri):
                rb, ri = b, i
    return m, rb, ri


@njit(cache=True)
def _furthest(
    ref: int,
    unum: np.ndarray,
    ucat: np.ndarray,
    low: np.ndarray,
    gpts: np.ndarray,
    gact: np.ndarray,
    agroups: np.ndarray,
    nag: int,
    groups: tuple[np.ndarray, ...],
    big: int,
) -> int:
    """The remaining row furthest (record distance, ties to the lowest row) from point ref.

    Groups whose distance upper bound cannot beat the best so far are skipped.
    """
    gstart, gcat, gmin, gmax, gminrow, hcost = groups
    nn, nq = unum.shape[1], gcat.shape[1]
    catc = np.empty(nq)
    best_i, best_d = big, -1.0
    for t in range(nag):
        g = agroups[t]
        s = 0.0
        for x in range(nn):
            d1 = abs(unum[ref, x] - gmin[g, x])
            d2 = abs(unum[ref, x] - gmax[g, x])
            s += d1 if d1 > d2 else d2
        for j in range(nq):
            catc[j] = hcost[j, ucat[ref, j], gcat[g, j]]
            s += catc[j]
        if s < best_d or (s == best_d and gminrow[g] >= best_i):
            continue
        for a in range(gstart[g], gstart[g] + gact[g]):
            u = gpts[a]
            d = 0.0
            for x in range(nn):
                d += abs(unum[ref, x] - unum[u, x])
            for j in range(nq):
                d += catc[j]
            if d > best_d or (d == best_d and low[u] < best_i):
                best_i, best_d = low[u], d
    return best_i


@njit(cache=True, nogil=True)  # nogil: partitioned k-member runs blocks in threads
def _greedy(
    unum: np.ndarray,
    ucat: np.ndarray,
    lca: np.ndarray,
    height: np.ndarray,
    usens: np.ndarray,
    nsens: int,
    start: np.ndarray,
    members: np.ndarray,
    point_of: np.ndarray,
    grp: np.ndarray,
    groups: tuple[np.ndarray, ...],
    perm: np.ndarray,
    k: int,
    p: int,
    furthest: bool,
    first_pick: int,
) -> np.ndarray:
    """Steps 3-4 of the spec on collapsed points; returns int32[n] cluster ids."""
    n = members.shape[0]
    npts = unum.shape[0]
    nn, nq = unum.shape[1], ucat.shape[1]
    gstart = groups[0]
    hcost = groups[5]
    ngroups = gstart.shape[0] - 1
    gid = np.full(n, -1, np.int32)
    removed = np.zeros(n, np.bool_)
    nxt, low, cnt, gpts, where, gact, agroups, gwhere = _index(start, members, gstart)
    nag = ngroups
    remaining = n
    sens_left = np.zeros(nsens, np.int64)
    for u in range(npts):
        sens_left[usens[u]] += cnt[u]
    distinct_left = 0
    for v in range(nsens):
        if sens_left[v] > 0:
            distinct_left += 1
    in_cluster = np.full(nsens, -1, np.int64)

    # Per-cluster generalisation state, kept for the leftover step.
    ccap = n // k + 1
    c_hi = np.empty((ccap, nn))
    c_lo = np.empty((ccap, nn))
    c_state = np.empty((ccap, nq), np.int64)
    c_size = np.zeros(ccap, np.int64)
    ncl = np.int64(0)

    sel = np.full(npts, -1, np.int64)  # cluster for which the point was last selected
    ver = np.zeros(npts, np.int64)  # state version its heap bound was computed at
    gver = 0
    kb = np.empty(npts)  # min-heap of (bound, row) candidates of the growing cluster
    ki = np.empty(npts, np.int64)
    tb = np.empty(npts)
    ti = np.empty(npts, np.int64)
    side_b = np.empty(npts)  # (p,k): candidates set aside while their value is in the cluster
    side_i = np.empty(npts, np.int64)
    perm_ptr = 0
    prev_seed = np.int64(-1)  # np.int64: a literal would make numba compile callees twice

    while remaining >= k and distinct_left >= p:
        # 3a: the seed record.
        if furthest and prev_seed >= 0:
            r = _furthest(prev_seed, unum, ucat, low, gpts, gact, agroups, nag, groups, n)
        else:
            while removed[perm[perm_ptr]]:
                perm_ptr += 1
            r = perm[perm_ptr]
        c = ncl
        ncl += 1
        hi = c_hi[c]
        lo = c_lo[c]
        state = c_state[c]
        u = point_of[r]
        prev_seed = seed_point = u
        for i in range(nn):
            hi[i] = unum[u, i]
            lo[i] = unum[u, i]
        for j in range(nq):
            state[j] = ucat[u, j]
        size = 0
        distinct = 0
        hsize = np.int64(0)
        nside = 0
        cap = np.int64(0)
        rb, ri = np.inf, n  # smallest key of the unselected points (none selected yet)
        cur = 0.0
        while True:
            # Move row r (point u, cost cur) into cluster c.
            gid[r] = c
            removed[r] = True
            size += 1
            remaining -= 1
            v = usens[u]
            sens_left[v] -= 1
            if sens_left[v] == 0:
                distinct_left -= 1
            if in_cluster[v] != c:
                in_cluster[v] = c
                distinct += 1
            nag = _take(r, u, removed, members, nxt, low, cnt, grp, gstart, gact, gpts, where,
                        agroups, gwhere, nag)  # fmt: skip
            _absorb(u, unum, ucat, lca, hi, lo, state)
            gver += 1
            if size > 1 and cnt[u] > 0:
                # Same point again: the cost just paid is a (stale) lower bound.
                hsize = _push(kb, ki, hsize, cur, low[u], False)
            if distinct == p and nside > 0:
                for s in range(nside):
                    hsize = _push(kb, ki, hsize, side_b[s], side_i[s], False)
                nside = 0
            if size >= k and distinct >= p:
                break
            # 3b: the cheapest candidate by (B(c + r), row index), lazily.
            restricted = distinct < p
            while True:
                if hsize == 0 or not _less(kb[0], ki[0], rb, ri):
                    # Unselected points may beat the heap: select more (fresh bounds).
                    cap = min(max(2 * cap, first_pick, 1), npts)
                    m, rb, ri = _select(
                        c,
                        hi,
                        lo,
                        state,
                        grp[seed_point],
                        cap,
                        tb,
                        ti,
                        sel,
                        low,
                        unum,
                        gpts,
                        gact,
                        agroups,
                        nag,
                        groups,
                        n,
                    )
                    if m == 0 and hsize == 0:
                        raise RuntimeError("k-member: no candidate left (internal error)")
                    for x in range(m):
                        w = point_of[ti[x]]
                        sel[w] = c
                        ver[w] = gver
                        hsize = _push(kb, ki, hsize, tb[x], ti[x], False)
                    continue
                b, i = kb[0], ki[0]
                hsize -= 1
                if hsize > 0:
                    kb[0], ki[0] = kb[hsize], ki[hsize]
                    _sift_down(kb, ki, hsize, 0, False)
                w = point_of[i]
                if restricted and in_cluster[usens[w]] == c:
                    side_b[nside] = b
                    side_i[nside] = i
                    nside += 1
                    continue
                if ver[w] != gver:
                    b = _bracket_with(w, unum, ucat, hcost, hi, lo, state)
                    ver[w] = gver
                    hsize = _push(kb, ki, hsize, b, i, False)
                    continue
                break
            r, u, cur = i, w, b
        c_size[c] = size

    # 4: leftovers, in permutation order, to the cluster of least IL increase.
    for t in range(n):
        r = perm[t]
        if removed[r]:
            continue
        u = point_of[r]
        best, best_d = -1, 0.0
        for c in range(ncl):
            d = _growth(u, unum, ucat, hcost, height, c_hi[c], c_lo[c], c_state[c], c_size[c])
            if best < 0 or d < best_d:
                best, best_d = c, d
        gid[r] = best
        removed[r] = True
        _absorb(u, unum, ucat, lca, c_hi[best], c_lo[best], c_state[best])
        c_size[best] += 1
    return gid


def points(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Identical rows of `key` (n >= 1 rows of float64, no NaN) collapsed: each point's first
    row and each row's point (int64), points in the rows' lexicographic order, as
    np.unique(key, axis=0, return_index=True, return_inverse=True) numbers them. A stable
    lexsort of the columns: np.unique sorts the rows as one structured value, five times
    slower (1.4 s against 0.3 s per million rows in 16,000-row blocks), most of a partitioned
    run's time outside its greedy loops."""
    order = np.lexsort(key.T[::-1])
    ordered = key[order]
    new = np.r_[True, (ordered[1:] != ordered[:-1]).any(axis=1)]
    point_of = np.empty(len(key), np.int64)
    point_of[order] = np.cumsum(new) - 1
    return order[new], point_of


def kmember(
    qi: QIArrays,
    k: int,
    *,
    seed: int = 0,
    seeding: str = "random",
    sensitive: np.ndarray | None = None,
    p: int = 1,
    cost: str = "height",
) -> np.ndarray:
    """int32[n] cluster ids 0..g-1 (in creation order) of the greedy k-member clustering.

    Every cluster has k..2k-1 members. With `sensitive` (one code per row, any dtype) and p > 1,
    every cluster instead has >= k members and >= p distinct sensitive values ((p,k)-anonymity).
    The result depends only on the data, k, p, `seeding` ("random", or "furthest": Byun et al.'s
    seed furthest from the previous one) and `seed`. `cost` is what a categorical LCA costs in
    IL: "height" (the paper's H(LCA) / H(T)) or "ncp" (Xu et al.'s leaf share, the peer
    implementations' rule); both only grow as a cluster grows, so the pruning holds for both.
    Raises ValueError when it cannot be done.
    """
    n = qi.n
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if n < k:
        raise ValueError(f"k-member clustering needs at least k={k} rows, the table has {n}")
    if seeding not in _SEEDINGS:
        raise ValueError(f"seeding must be one of {', '.join(_SEEDINGS)}, got {seeding!r}")
    if p < 1:
        raise ValueError(f"p must be at least 1, got {p}")
    num = np.ascontiguousarray(qi.num, dtype=np.float64) + 0.0  # -0.0 -> 0.0
    cat = np.ascontiguousarray(qi.cat, dtype=np.int64)
    if np.isnan(num).any():
        raise ValueError("numeric quasi-identifiers contain NaN; remove or impute them first")
    if p > 1:
        if sensitive is None:
            raise ValueError(f"p={p} needs the sensitive attribute's codes (sensitive=...)")
        sensitive = np.asarray(sensitive).reshape(-1)
        if len(sensitive) != n:
            raise ValueError(f"sensitive has {len(sensitive)} values for {n} rows")
        _, sens = np.unique(sensitive, return_inverse=True)
        nsens = int(sens.max()) + 1
        if nsens < p:
            raise ValueError(
                f"(p,k)-anonymity with p={p} is impossible: the table has only {nsens} distinct "
                "sensitive values"
            )
    else:
        p, sens, nsens = 1, np.zeros(n, np.int64), 1
    # Collapse identical rows (QI and, for (p,k), sensitive value) into points. np.unique sorts
    # rows lexicographically, categorical columns first, so points sharing their categorical
    # values (a group) are contiguous.
    q = cat.shape[1]
    key = np.hstack([cat.astype(np.float64), num, sens.reshape(n, 1).astype(np.float64)])
    first, point_of = points(key)
    members = np.argsort(point_of, kind="stable").astype(np.int64)
    start = np.zeros(len(first) + 1, np.int64)
    np.cumsum(np.bincount(point_of, minlength=len(first)), out=start[1:])
    unum, ucat = num[first], cat[first]
    # Groups: runs of points with the same categorical values, cut into chunks of _CHUNK
    # points (sorted by the numeric columns) so that their bounding boxes stay tight.
    new_group = np.r_[True, (ucat[1:] != ucat[:-1]).any(axis=1)]
    run_start = np.maximum.accumulate(np.where(new_group, np.arange(len(first)), 0))
    new_group |= (np.arange(len(first)) - run_start) % _CHUNK == 0
    gfirst = np.flatnonzero(new_group)
    gstart = np.r_[gfirst, len(first)].astype(np.int64)
    grp = (np.cumsum(new_group) - 1).astype(np.int64)
    gmin = np.minimum.reduceat(unum, gfirst, axis=0) if unum.shape[1] else unum[gfirst]
    gmax = np.maximum.reduceat(unum, gfirst, axis=0) if unum.shape[1] else unum[gfirst]
    gminrow = np.minimum.reduceat(members[start[:-1]], gfirst).astype(np.int64)
    lca = np.ascontiguousarray(qi.lca, dtype=np.int64)
    height = np.ascontiguousarray(node_weights(qi, cost))
    hcost = np.ascontiguousarray(height[np.arange(q)[:, None, None], lca])
    groups = (gstart, np.ascontiguousarray(ucat[gfirst]), gmin, gmax, gminrow, hcost)
    perm = np.random.default_rng(seed).permutation(n).astype(np.int64)
    return _greedy(
        unum,
        ucat,
        lca,
        height,
        sens[first].astype(np.int64),
        nsens,
        start,
        members,
        point_of,
        grp,
        groups,
        perm,
        int(k),
        int(p),
        seeding == "furthest",
        _FIRST_PICK * int(k),
    )


def kmember_many(
    qi: QIArrays, k: int, roots: list[np.ndarray], orders: list[np.ndarray], *, seed: int = 0,
    seeding: str = "random", cost: str = "height",
) -> list[np.ndarray]:
    """`kmember` of many row sets in one compiled call (a refresh tries to split a thousand
    groups; a call each is mostly set-up): per root, the ids kmember(subset(qi,
    rows[order]), k, ...) gives, put back in the root's order (`ties.restore`). Plain
    k-member only (p = 1); roots of at least k rows."""
    if seeding not in _SEEDINGS:
        raise ValueError(f"seeding must be one of {', '.join(_SEEDINGS)}, got {seeding!r}")
    num = np.ascontiguousarray(qi.num, dtype=np.float64)
    if np.isnan(num).any():
        raise ValueError("numeric quasi-identifiers contain NaN; remove or impute them first")
    if any(len(r) < k for r in roots):
        raise ValueError(f"k-member clustering needs at least k={k} rows in every set")
    sizes = np.array([len(r) for r in roots], dtype=np.int64)
    bounds = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    perms = {n: np.random.default_rng(seed).permutation(n) for n in set(sizes.tolist())}
    lca = np.ascontiguousarray(qi.lca, dtype=np.int64)
    height = np.ascontiguousarray(node_weights(qi, cost))
    q = qi.cat.shape[1]
    hcost = np.ascontiguousarray(height[np.arange(q)[:, None, None], lca])
    out = _greedy_many(
        num, np.ascontiguousarray(qi.cat, dtype=np.int64), lca, height, hcost,
        np.concatenate([np.asarray(r, np.int64) for r in roots] or [np.zeros(0, np.int64)]),
        np.concatenate([np.asarray(o, np.int64) for o in orders] or [np.zeros(0, np.int64)]),
        np.concatenate([perms[n] for n in sizes.tolist()] or [np.zeros(0, int)]).astype(
            np.int64),
        bounds, int(k), seeding == "furthest", _FIRST_PICK * int(k),
    )  # fmt: skip
    return [out[bounds[i] : bounds[i + 1]] for i in range(len(roots))]


@njit(cache=True)
def _greedy_many(
    num: np.ndarray, cat: np.ndarray, lca: np.ndarray, height: np.ndarray, hcost: np.ndarray,
    idx: np.ndarray, orders: np.ndarray, perms: np.ndarray, bounds: np.ndarray, k: int,
    furthest: bool, first_pick: int,
) -> np.ndarray:  # fmt: skip
    """`kmember_many`: per root, `kmember`'s set-up (points by a stable sort on each column
    from the last, as np.lexsort; groups of points) and `_greedy`, compiled."""
    out = np.zeros(len(idx), np.int32)
    m, q = num.shape[1], cat.shape[1]
    for r in range(len(bounds) - 1):
        lo, hi = bounds[r], bounds[r + 1]
        n = hi - lo
        rows = idx[lo:hi][orders[lo:hi]]
        rnum = np.empty((n, m))
        rcat = np.empty((n, q), np.int64)
        for i in range(n):
            for j in range(m):
                rnum[i, j] = num[rows[i], j] + 0.0  # -0.0 -> 0.0
            for j in range(q):
                rcat[i, j] = cat[rows[i], j]
        # points: identical rows, in the rows' lexicographic order (categorical columns first)
        o = np.arange(n)
        for j in range(m - 1, -1, -1):
            o = o[np.argsort(rnum[o, j], kind="mergesort")]
        for j in range(q - 1, -1, -1):
            o = o[np.argsort(rcat[o, j], kind="mergesort")]
        point_of = np.empty(n, np.int64)
        npts = 0
        for i in range(n):
            new = i == 0
            for j in range(q):
                new = new or rcat[o[i], j] != rcat[o[i - 1], j]
            for j in range(m):
                new = new or rnum[o[i], j] != rnum[o[i - 1], j]
            if new:
                npts += 1
            point_of[o[i]] = npts - 1
        first = np.empty(npts, np.int64)
        start = np.zeros(npts + 1, np.int64)
        for i in range(n - 1, -1, -1):  # each point's lowest row
            first[point_of[i]] = i
            start[point_of[i] + 1] += 1
        for u in range(npts):
            start[u + 1] += start[u]
        members = np.argsort(point_of, kind="mergesort")
        unum, ucat = rnum[first], rcat[first]
        # groups: runs of points with the same categorical values, in chunks of _CHUNK
        grp = np.empty(npts, np.int64)
        gfirst = np.empty(npts, np.int64)
        ngroups, run = 0, 0
        for u in range(npts):
            new = u == 0
            for j in range(q):
                new = new or ucat[u, j] != ucat[u - 1, j]
            run = u if new else run
            if new or (u - run) % _CHUNK == 0:
                gfirst[ngroups] = u
                ngroups += 1
            grp[u] = ngroups - 1
        gstart = np.empty(ngroups + 1, np.int64)
        gstart[:ngroups] = gfirst[:ngroups]
        gstart[ngroups] = npts
        gmin = np.empty((ngroups, m))
        gmax = np.empty((ngroups, m))
        gminrow = np.empty(ngroups, np.int64)
        for g in range(ngroups):
            a, b = gstart[g], gstart[g + 1]
            for j in range(m):
                gmin[g, j] = unum[a:b, j].min()
                gmax[g, j] = unum[a:b, j].max()
            gminrow[g] = members[start[a:b]].min()
        groups = (gstart, np.ascontiguousarray(ucat[gstart[:ngroups]]), gmin, gmax, gminrow,
                  hcost)  # fmt: skip
        gid = _greedy(unum, ucat, lca, height, np.zeros(npts, np.int64), 1, start, members,
                      point_of, grp, groups, perms[lo:hi], k, 1, furthest, first_pick)  # fmt: skip
        for i in range(n):  # back in the root's order (ties.restore)
            out[lo + orders[lo + i]] = gid[i]
    return out
