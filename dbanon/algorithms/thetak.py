"""(θ,k)-anonymity clustering (Cheng, Liu et al. 2019): arrays in, group ids out.

Why one module of about 870 lines: both constructions serve one model and share their input
preparation (categories, need_c, segments), the proof below and the tests against one naive
implementation; each is a single compiled loop that cannot be cut without passing dozens of
arrays between numba functions. What they share with k-member (the candidate index, bounds,
the heap) already lives in dbanon.algorithms.kmember.

Two constructions (thetak_detail's `construction`):
- "greedy" (the default): k-member's loss-greedy growth under the property dbanon.models.thetak
  checks, with need_c by its `rule`: the paper's min(⌊k/θ⌋, V_c) by default, or the relaxed
  need_c capped by what the relation's classes can hold; see _greedy_construction;
- "paper": the paper's algorithm as written, below (always the paper's need_c).

The paper's algorithm (spec theta-k.md), with g = ⌊k/θ⌋, the categories' rows hashed into one
bucket each, and need_c = min(g, V_c), V_c the distinct values of category c in the table:
1. while at least k rows remain and at least θ buckets are eligible (below):
2. take the θ eligible buckets with the most rows (ties: the lower category code);
3. seed a class with a random row r of the first (the first remaining one of that bucket in
   default_rng(seed).permutation(n));
4. from each of the θ buckets, first the seed's own, take the rows nearest r (record distance of
   the k-member paper: sum of |Δ| / domain width + H(LCA) / H(T); ties to the lower row index)
   whose values are not yet in the class until the class holds need_c distinct values of the
   bucket's category, then the nearest rows of the bucket whatever their value until the group
   has g rows (or the bucket is empty);
5. top the class up to k rows with the rows nearest r from its θ buckets, values new to the
   class first, then from any other bucket (the paper's text breaks off at this step);
6. every row left joins the class whose information loss grows least (k-member's leftover
   rule), in permutation order; with `leftovers="category"` (the default) only classes whose θ
   categories include the row's are candidates, while any exists.
7. the lifecycle generalises every class (ranges, LCA labels).

Decided where the paper is silent:
- A bucket is eligible while its remaining rows hold at least need_c distinct values. One that
  cannot supply them is skipped (its rows wait; if it never recovers they end as leftovers), and
  the construction stops when fewer than θ buckets are eligible: a class is never built with
  fewer distinct values per category than the model promises. The cap V_c keeps a category that
  has fewer than g values in the whole table usable at all; without it no class could be built.
- This is the paper's own stopping rule read as its section 2.1 states it ("repeat until no new
  class satisfying (θ,k) can be created"), and it is not what leaves most of Adult over: the
  condition itself bounds the classes. Every class needs θ categories with need_c values; with
  θ = the number of categories (Adult's occupation: 3) every class needs every category, so a
  category with V_c <= g needs all its values in every class, and a value of f rows caps the
  classes at f: k >= 21 on Adult (g >= 7 = V_Other) needs the 9-row Armed-Forces in every class,
  so no grouping of Adult has more than 9 paper-faithful classes; at k = 12 Tech-support
  (912 rows, one of Technical's 4 values) caps them at 912. Both constructions reach these
  bounds (docs/methods/thetak.md measures them, dbanon.experiments.thetak.class_bound).
- Leftovers prefer classes that already show their category: a leftover placed in a class
  without its category would be the only row of that category there, exactly the row the
  background-knowledge attack reveals. `leftovers="nearest"` is the paper's plain rule.

Proof that every class has |e| >= k and at least θ categories c with at least need_c =
min(g, V_c) distinct values in e (which implies dbanon.models.thetak's property, whose need_c
is never larger):
- A class is started only when θ buckets are eligible, i.e. bucket c's remaining rows hold
  >= need_c distinct values. For the seed's bucket, the seed holds one value and the other rows
  hold >= need_c - 1 values besides it; so step 4 always finds a row with a value new to the
  class until it holds need_c values of c (rows of other categories cannot hold values of c).
  The θ buckets are distinct categories, so after step 4 the class holds >= need_c distinct
  values in each of θ categories.
- Step 5 runs only while |e| < k and step 1 required >= k remaining rows, of which |e| are in
  e, so a row to add always exists; after it |e| >= k.
- Steps 5 and 6 only add rows to classes: a class's size and its distinct values per category
  never decrease, so both conditions still hold at the end.
- Every row ends in exactly one class: rows are removed from their bucket when placed, and the
  leftover step places every row left. At least one class exists, since initially every
  non-empty bucket is eligible (its V_c distinct values >= need_c), and the method refuses
  inputs with fewer than θ non-empty categories or fewer than k rows.
Hence every class of the output satisfies the property (tests check it on random tables).

Speed, without changing a single choice (tests compare with a naive implementation):
- The distance is (sum of numeric gaps) + (sum of categorical LCA heights), so rows sharing
  their category and categorical QI values (a segment of at most _CHUNK rows, numeric values
  sorted) share the categorical part, and a segment's numeric bounding box bounds the rest.
- Per class and bucket, segments are scanned in order of that lower bound and the scan stops
  once the next bound exceeds T, the largest distance any pick of this class from the bucket
  can have: the (values the group and the top-up may take)-th nearest value, and the (rows they
  may take)-th nearest row. Every row left unscanned is farther than T, so picks are exact.
- Rows are swap-removed within their segment; positional arrays keep a scan in memory order.
A class costs O(segments of its θ buckets + rows scanned), leftovers O(classes) each: 0.2-0.5 s
for 30,000 hospital rows (k=12, θ=3), growing about as n^1.6 (bench thetak).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numba import njit

from dbanon.algorithms.base import CONSTRUCTIONS, LEFTOVERS, QIArrays
from dbanon.algorithms.kmember import (
    _FIRST_PICK,
    _absorb,
    _bracket_with,
    _growth,
    _index,
    _less,
    _push,
    _select,
    _sift_down,
    _take,
    points,
)
from dbanon.metrics.loss import node_weights

_SCARCE_SCAN = 4  # scarce rows set aside per class (x k) before the greedy takes them anyway
_CHUNK = 64  # rows per segment at most (tuning only: any value gives the same groups)


@njit(cache=True)
def _before(d1: float, r1: int, d2: float, r2: int) -> bool:
    """Key order: distance, then row index."""
    return d1 < d2 or (d1 == d2 and r1 < r2)


@njit(cache=True)
def _remove(
    u: int,
    rseg: np.ndarray,
    sstart: np.ndarray,
    ssize: np.ndarray,
    bpos: np.ndarray,
    prow: np.ndarray,
    pnum: np.ndarray,
    pval: np.ndarray,
    pd: np.ndarray,
) -> None:
    """Take row u out of its segment: the segment's last live row moves into its position."""
    s = rseg[u]
    a = bpos[u]
    last = sstart[s] + ssize[s] - 1
    w = prow[last]
    prow[a] = w
    pnum[a] = pnum[last]
    pval[a] = pval[last]
    pd[a] = pd[last]
    bpos[w] = a
    ssize[s] -= 1


@njit(cache=True)
def _kth(x: np.ndarray, count: int, kth: int) -> float:
    """The kth smallest (1-based) of x[:count]; -inf for kth < 1, inf when count < kth."""
    if kth < 1:
        return -np.inf
    if count < kth:
        return np.inf
    return np.sort(x[:count])[kth - 1]


@njit(cache=True)
def _cluster(
    num: np.ndarray,
    cat: np.ndarray,
    lca: np.ndarray,
    hcost: np.ndarray,
    height: np.ndarray,
    catg: np.ndarray,
    val: np.ndarray,
    vstart: np.ndarray,
    perm: np.ndarray,
    segments: tuple[np.ndarray, ...],
    k: int,
    theta: int,
    by_category: bool,
) -> tuple[np.ndarray, int, int]:
    """Steps 1-6 of the module docstring; returns (group ids, classes, leftover rows)."""
    order, sstart, scat, blo, bhi, bseg = segments
    n = num.shape[0]
    nn, nq = num.shape[1], cat.shape[1]
    m = vstart.shape[0] - 1
    nval = vstart[m]
    nseg = sstart.shape[0] - 1
    g = k // theta
    gid = np.full(n, -1, np.int32)
    removed = np.zeros(n, np.bool_)

    # Positional arrays (row id, numeric QIs, value, distance to the seed), rows ordered by
    # (category, categorical QIs, numeric QIs) and cut into segments: the live rows of segment s
    # sit at sstart[s]..sstart[s] + ssize[s] - 1, bpos[r] is row r's position; the segments of
    # bucket c are bseg[c]..bseg[c + 1] - 1. bperm keeps each bucket's rows in permutation
    # order, for the seeds.
    prow = order.copy()
    pnum = num[order].copy()
    pval = val[order].copy()
    pd = np.zeros(n)
    bpos = np.empty(n, np.int64)
    rseg = np.empty(n, np.int64)
    for s in range(nseg):
        for a in range(sstart[s], sstart[s + 1]):
            bpos[prow[a]] = a
            rseg[prow[a]] = s
    ssize = sstart[1:] - sstart[:-1]
    bstart = np.zeros(m + 1, np.int64)
    for r in range(n):
        bstart[catg[r] + 1] += 1
    for c in range(m):
        bstart[c + 1] += bstart[c]
    bsize = bstart[1:] - bstart[:-1]
    bperm = np.empty(n, np.int64)
    fill = bstart[:-1].copy()
    for t in range(n):
        r = perm[t]
        bperm[fill[catg[r]]] = r
        fill[catg[r]] += 1
    ptr = bstart[:-1].copy()
    vcnt = np.zeros(nval, np.int64)
    for r in range(n):
        vcnt[val[r]] += 1
    avail = np.zeros(m, np.int64)  # distinct values with rows left, per category
    for c in range(m):
        for v in range(vstart[c], vstart[c + 1]):
            if vcnt[v] > 0:
                avail[c] += 1
    need = np.minimum(avail, g)

    ccap = n // k + 1
    c_hi = np.empty((ccap, nn))
    c_lo = np.empty((ccap, nn))
    c_state = np.empty((ccap, nq), np.int64)
    c_size = np.zeros(ccap, np.int64)
    c_cats = np.empty((ccap, theta), np.int64)
    ncl = 0
    val_in = np.full(nval, -1, np.int64)  # the class that last took a row of the value
    bestr = np.full(nval, -1, np.int64)  # per value, its nearest scanned row
    vbest = np.empty(nval)
    scratch = np.empty(nval)
    top = np.empty(theta, np.int64)
    catd = np.zeros(nseg)  # per segment, its categorical distance to the seed
    slb = np.empty(nseg)
    sidx = np.empty(nseg, np.int64)
    scanned = np.empty((theta, nseg), np.int64)  # per bucket of the class, segments scanned
    nscanned = np.zeros(theta, np.int64)
    heap = np.empty(n)  # max-heap of the smallest row distances of a bucket's scan
    remaining = n

    while remaining >= k:
        # Step 2: the θ eligible buckets with the most rows, ties to the lower category.
        nh = 0
        for c in range(m):
            if bsize[c] == 0 or avail[c] < need[c]:
                continue
            if nh == theta and bsize[c] <= bsize[top[theta - 1]]:
                continue
            j = nh if nh < theta else theta - 1
            while j > 0 and bsize[top[j - 1]] < bsize[c]:
                top[j] = top[j - 1]
                j -= 1
            top[j] = c
            if nh < theta:
                nh += 1
        if nh < theta:
            break
        # Rows the top-up will need beyond θ full groups (short buckets included).
        extra = k - theta * g
        for t in range(theta):
            extra += g - min(g, bsize[top[t]])
        # Step 3: the seed, the first remaining row of the first bucket in permutation order.
        c1 = top[0]
        while removed[bperm[ptr[c1]]]:
            ptr[c1] += 1
        seed = bperm[ptr[c1]]
        cl = ncl
        ncl += 1
        hi, lo, state = c_hi[cl], c_lo[cl], c_state[cl]
        for i in range(nn):
            hi[i] = num[seed, i]
            lo[i] = num[seed, i]
        for j in range(nq):
            state[j] = cat[seed, j]
        size = 0
        for t in range(theta + 1):
            # t < θ: the group of bucket top[t]; t = θ: step 5, the top-up to k rows.
            c = top[t] if t < theta else -1
            if t < theta:
                # Scan the bucket's segments in order of their lower bound (numeric bounding
                # box + exact categorical distance), computing the distance of their rows,
                # until the next bound exceeds T. T covers every pick this class can make from
                # the bucket: the values its group and the top-up may take (per value its
                # nearest row) and the rows they may take (nearest first), so rows left
                # unscanned are farther than anything picked and the picks are exact.
                for v in range(vstart[c], vstart[c + 1]):
                    bestr[v] = -1
                want_values = need[c] - (1 if t == 0 else 0) + extra
                want_rows = g + extra
                ns = 0
                for s in range(bseg[c], bseg[c + 1]):
                    if ssize[s] == 0:
                        continue
                    dc = 0.0
                    for j in range(nq):
                        dc += hcost[j, cat[seed, j], scat[s, j]]
                    catd[s] = dc
                    dn = 0.0
                    for i in range(nn):
                        x = num[seed, i]
                        if x < blo[s, i]:
                            dn += blo[s, i] - x
                        elif x > bhi[s, i]:
                            dn += x - bhi[s, i]
                    slb[ns] = dn + dc
                    sidx[ns] = s
                    ns += 1
                rank = np.argsort(slb[:ns])
                bound = np.inf
                found = 0
                hn = 0
                nscanned[t] = 0
                for x in range(ns):
                    if slb[rank[x]] > bound:
                        break
                    s = sidx[rank[x]]
                    scanned[t, nscanned[t]] = s
                    nscanned[t] += 1
                    for a in range(sstart[s], sstart[s] + ssize[s]):
                        dn = 0.0
                        for i in range(nn):
                            dn += abs(pnum[a, i] - num[seed, i])
                        d = dn + catd[s]
                        pd[a] = d
                        w = prow[a]
                        v = pval[a]
                        if (
                            w != seed
                            and v != val[seed]
                            and (bestr[v] < 0 or _before(d, w, vbest[v], bestr[v]))
                        ):
                            if bestr[v] < 0:
                                found += 1
                            bestr[v] = w
                            vbest[v] = d
                        # the want_rows smallest distances, in a max-heap
                        if hn < want_rows or d < heap[0]:
                            if hn < want_rows:
                                pos = hn
                                hn += 1
                                while pos > 0 and heap[(pos - 1) >> 1] < d:
                                    heap[pos] = heap[(pos - 1) >> 1]
                                    pos = (pos - 1) >> 1
                                heap[pos] = d
                            else:
                                pos = 0
                                while True:
                                    ch = 2 * pos + 1
                                    if ch >= hn:
                                        break
                                    if ch + 1 < hn and heap[ch + 1] > heap[ch]:
                                        ch += 1
                                    if heap[ch] <= d:
                                        break
                                    heap[pos] = heap[ch]
                                    pos = ch
                                heap[pos] = d
                    if hn < want_rows:
                        continue
                    cnt = 0
                    for v in range(vstart[c], vstart[c + 1]):
                        if bestr[v] >= 0:
                            scratch[cnt] = vbest[v]
                            cnt += 1
                    tv = _kth(scratch, cnt, want_values)
                    bound = max(tv, heap[0])
            got = 0
            while (got < g) if t < theta else (size < k):
                u = -1
                if t == 0 and got == 0:
                    u = seed
                elif t < theta and got < need[c]:
                    # Step 4: the nearest row of a value new to the class.
                    for v in range(vstart[c], vstart[c + 1]):
                        w = bestr[v]
                        if (
                            w >= 0
                            and val_in[v] != cl
                            and (u < 0 or _before(vbest[v], w, pd[bpos[u]], u))
                        ):
                            u = w
                    if u < 0:
                        raise RuntimeError("thetak: an eligible bucket ran out of values")
                else:
                    # The rest of a group: its bucket's nearest rows, values new to the class
                    # first; the top-up: the same over the class's θ buckets, else any bucket.
                    fresh = False
                    for y in range(theta):
                        if t < theta and y != t:
                            continue
                        for z in range(nscanned[y]):
                            s = scanned[y, z]
                            for a in range(sstart[s], sstart[s] + ssize[s]):
                                w = prow[a]
                                new = val_in[pval[a]] != cl
                                if (
                                    u < 0
                                    or (new and not fresh)
                                    or (new == fresh and _before(pd[a], w, pd[bpos[u]], u))
                                ):
                                    u, fresh = w, new
                    if u < 0 and t < theta:
                        break  # the bucket is empty: the top-up completes the class
                    if u < 0:
                        for b in range(m):
                            mine = False
                            for y in range(theta):
                                mine = mine or top[y] == b
                            if mine:
                                continue
                            for s in range(bseg[b], bseg[b + 1]):
                                for a in range(sstart[s], sstart[s] + ssize[s]):
                                    dn = 0.0
                                    for i in range(nn):
                                        dn += abs(pnum[a, i] - num[seed, i])
                                    dc = 0.0
                                    for j in range(nq):
                                        dc += hcost[j, cat[seed, j], scat[s, j]]
                                    pd[a] = dn + dc
                                    if u < 0 or _before(pd[a], prow[a], pd[bpos[u]], u):
                                        u = prow[a]
                # Take row u into class cl.
                gid[u] = cl
                removed[u] = True
                val_in[val[u]] = cl
                _absorb(u, num, cat, lca, hi, lo, state)
                _remove(u, rseg, sstart, ssize, bpos, prow, pnum, pval, pd)
                bsize[catg[u]] -= 1
                vcnt[val[u]] -= 1
                if vcnt[val[u]] == 0:
                    avail[catg[u]] -= 1
                size += 1
                remaining -= 1
                got += 1
        for t in range(theta):
            c_cats[cl, t] = top[t]
        c_size[cl] = size

    # Step 6: leftovers, in permutation order, to the class of least information-loss growth.
    holds = np.zeros((m, max(ncl, 1)), np.bool_)  # category c is one of class cl's θ
    shown = np.zeros(m, np.int64)
    for cl in range(ncl):
        for t in range(theta):
            holds[c_cats[cl, t], cl] = True
            shown[c_cats[cl, t]] += 1
    left = 0
    for t in range(n):
        r = perm[t]
        if removed[r]:
            continue
        left += 1
        restrict = by_category and shown[catg[r]] > 0
        best, best_d = -1, 0.0
        for cl in range(ncl):
            if restrict and not holds[catg[r], cl]:
                continue
            d = _growth(r, num, cat, hcost, height, c_hi[cl], c_lo[cl], c_state[cl], c_size[cl])
            if best < 0 or d < best_d:
                best, best_d = cl, d
        gid[r] = best
        removed[r] = True
        _absorb(r, num, cat, lca, c_hi[best], c_lo[best], c_state[best])
        c_size[best] += 1
    return gid, ncl, left


# ---------------------------------------------------------------------------------------------
# The default construction: loss-greedy, k-member style (see thetak_detail's docstring).


@njit(cache=True)
def _bracket(hi: np.ndarray, lo: np.ndarray, state: np.ndarray, height: np.ndarray) -> float:
    """B(c) of the class (hi, lo, state), summed in _growth's order (the same figure)."""
    s = 0.0
    for i in range(hi.shape[0]):
        s += hi[i] - lo[i]
    for j in range(state.shape[0]):
        s += height[j, state[j]]
    return s


@njit(cache=True)
def _deficit(
    need: np.ndarray, have: np.ndarray, eligible: np.ndarray, theta: int
) -> tuple[int, int]:
    """(sum of the θ smallest d_c, the θ-th smallest d_c), d_c = need_c - have_c (>= 0) over the
    eligible categories: the fewest rows that complete the class's diversity."""
    m = need.shape[0]
    d = np.empty(m, np.int64)
    cnt = 0
    for c in range(m):
        if eligible[c]:
            d[cnt] = max(need[c] - have[c], 0)
            cnt += 1
    ds = np.sort(d[:cnt])
    return int(ds[:theta].sum()), int(ds[theta - 1])


@njit(cache=True, nogil=True)  # nogil: thetak_blocks runs blocks in threads
def _greedy_thetak(
    unum: np.ndarray,
    ucat: np.ndarray,
    lca: np.ndarray,
    height: np.ndarray,
    usens: np.ndarray,
    vcat: np.ndarray,
    need: np.ndarray,
    start: np.ndarray,
    members: np.ndarray,
    point_of: np.ndarray,
    grp: np.ndarray,
    groups: tuple[np.ndarray, ...],
    perm: np.ndarray,
    k: int,
    theta: int,
    by_category: bool,
    first_pick: int,
) -> tuple[np.ndarray, int, int]:
    """k-member's greedy loop (dbanon.algorithms.kmember._greedy) with (θ,k) admissibility;
    returns (group ids, classes, leftover rows)."""
    n = members.shape[0]
    npts = unum.shape[0]
    nn, nq = unum.shape[1], ucat.shape[1]
    m = need.shape[0]
    nval = vcat.shape[0]
    gstart = groups[0]
    hcost = groups[5]
    ngroups = gstart.shape[0] - 1
    gid = np.full(n, -1, np.int32)
    removed = np.zeros(n, np.bool_)
    nxt, low, cnt, gpts, where, gact, agroups, gwhere = _index(start, members, gstart)
    nag = ngroups
    remaining = n
    vleft = np.zeros(nval, np.int64)  # rows left per value
    for u in range(npts):
        vleft[usens[u]] += cnt[u]
    avail = np.zeros(m, np.int64)  # values with rows left, per category
    for v in range(nval):
        if vleft[v] > 0:
            avail[vcat[v]] += 1
    in_cluster = np.full(nval, -1, np.int64)
    have = np.zeros(m, np.int64)  # distinct values per category in the growing class
    eligible = np.zeros(m, np.bool_)

    ccap = n // k + 1
    c_hi = np.empty((ccap, nn))
    c_lo = np.empty((ccap, nn))
    c_state = np.empty((ccap, nq), np.int64)
    c_size = np.zeros(ccap, np.int64)
    c_has = np.zeros((ccap, m), np.bool_)  # class holds a row of the category
    ncl = np.int64(0)

    sel = np.full(npts, -1, np.int64)
    ver = np.zeros(npts, np.int64)
    gver = 0
    kb = np.empty(npts)
    ki = np.empty(npts, np.int64)
    tb = np.empty(npts)
    ti = np.empty(npts, np.int64)
    side_b = np.empty(npts)
    side_i = np.empty(npts, np.int64)
    scarce_b = np.empty(npts)
    scarce_i = np.empty(npts, np.int64)
    perm_ptr = 0

    while remaining >= k:
        ne = 0
        for c in range(m):
            eligible[c] = avail[c] >= need[c]
            if eligible[c]:
                ne += 1
            have[c] = 0
        if ne < theta:
            break
        while removed[perm[perm_ptr]]:
            perm_ptr += 1
        r = perm[perm_ptr]
        c = ncl
        ncl += 1
        hi = c_hi[c]
        lo = c_lo[c]
        state = c_state[c]
        u = point_of[r]
        seed_point = u
        for i in range(nn):
            hi[i] = unum[u, i]
            lo[i] = unum[u, i]
        for j in range(nq):
            state[j] = ucat[u, j]
        size = 0
        deficit, dth = _deficit(need, have, eligible, theta)
        hsize = np.int64(0)
        nside = 0
        nscarce = 0
        spend = False
        cap = np.int64(0)
        rb, ri = np.inf, n
        cur = 0.0
        while True:
            gid[r] = c
            removed[r] = True
            size += 1
            remaining -= 1
            v = usens[u]
            vleft[v] -= 1
            if vleft[v] == 0:
                avail[vcat[v]] -= 1
            c_has[c, vcat[v]] = True
            if in_cluster[v] != c:
                in_cluster[v] = c
                have[vcat[v]] += 1
                deficit, dth = _deficit(need, have, eligible, theta)
            nag = _take(r, u, removed, members, nxt, low, cnt, grp, gstart, gact, gpts, where,
                        agroups, gwhere, nag)  # fmt: skip
            _absorb(u, unum, ucat, lca, hi, lo, state)
            gver += 1
            if size > 1 and cnt[u] > 0:
                hsize = _push(kb, ki, hsize, cur, low[u], False)
            if deficit == 0 and nside > 0:
                for s in range(nside):
                    hsize = _push(kb, ki, hsize, side_b[s], side_i[s], False)
                nside = 0
            if size >= k and deficit == 0:
                break
            # Only rows that shrink the deficit while the slots left just cover it.
            restricted = k - size <= deficit
            while True:
                if hsize == 0 or not _less(kb[0], ki[0], rb, ri):
                    cap = min(max(2 * cap, first_pick, 1), npts)
                    mm, rb, ri = _select(
                        c, hi, lo, state, grp[seed_point], cap, tb, ti, sel, low, unum, gpts,
                        gact, agroups, nag, groups, n,
                    )  # fmt: skip
                    if mm == 0 and hsize == 0:
                        if restricted or nscarce == 0:
                            raise RuntimeError("thetak: no candidate left (internal error)")
                        for s in range(nscarce):
                            hsize = _push(kb, ki, hsize, scarce_b[s], scarce_i[s], False)
                        nscarce = 0
                        spend = True
                    for x in range(mm):
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
                wv = usens[w]
                wc = vcat[wv]
                d = need[wc] - have[wc]
                if not (eligible[wc] and in_cluster[wv] != c and 0 < d <= dth):
                    # A row that does not shrink the deficit: not while the slots are tight;
                    # and when every class needs every eligible category (exactly θ), not if
                    # its value is scarce (no more rows left than classes still to build),
                    # for the first _SCARCE_SCAN * k of them or until nothing else is left:
                    # later classes need those rows.
                    if restricted:
                        side_b[nside] = b
                        side_i[nside] = i
                        nside += 1
                        continue
                    if not spend and ne == theta and vleft[wv] <= remaining // k:
                        scarce_b[nscarce] = b
                        scarce_i[nscarce] = i
                        nscarce += 1
                        if nscarce < _SCARCE_SCAN * k:
                            continue
                        # Looked far enough: the nearest of them after all (bounds the scan).
                        for s in range(nscarce):
                            hsize = _push(kb, ki, hsize, scarce_b[s], scarce_i[s], False)
                        nscarce = 0
                        spend = True
                        continue
                if ver[w] != gver:
                    b = _bracket_with(w, unum, ucat, hcost, hi, lo, state)
                    ver[w] = gver
                    hsize = _push(kb, ki, hsize, b, i, False)
                    continue
                break
            r, u, cur = i, w, b
        c_size[c] = size

    # Leftovers, in permutation order, to the class of least IL growth (ties to the lower
    # class); with by_category only classes already holding the row's category, while one
    # exists. Classes are tried in order of their bracket B(c) as the leftovers start: a
    # class's growth is at least its bracket (growth = B(c) + (|c| + 1)(B(c + u) - B(c)), and
    # B(c + u) >= B(c)), and brackets only grow, so once the next class's bracket exceeds the
    # best growth found by more than rounding, no class left can win or tie.
    c_old = np.empty(ncl)
    for c in range(ncl):
        c_old[c] = _bracket(c_hi[c], c_lo[c], c_state[c], height)
    corder = np.argsort(c_old[:ncl])
    ckey = c_old[corder]
    widest = 0.0  # no bracket is larger
    for i in range(nn):
        widest += unum[:, i].max() - unum[:, i].min()
    for j in range(nq):
        widest += height[j].max()
    slack = 1e-15 * (n + 2) * widest  # more than the rounding of any growth computed here
    shown = np.zeros(m, np.bool_)  # some class holds the category (leftovers do not count)
    for c in range(ncl):
        for y in range(m):
            shown[y] = shown[y] or c_has[c, y]
    left = 0
    for t in range(n):
        r = perm[t]
        if removed[r]:
            continue
        left += 1
        u = point_of[r]
        rc = vcat[usens[u]]
        restrict = by_category and shown[rc]
        best, best_d = -1, 0.0
        for x in range(ncl):
            if best >= 0 and ckey[x] - slack > best_d:
                break
            c = corder[x]
            if restrict and not c_has[c, rc]:
                continue
            size = c_size[c]
            bw = _bracket_with(u, unum, ucat, hcost, c_hi[c], c_lo[c], c_state[c])
            d = (size + 1) * bw - size * c_old[c]
            if best < 0 or d < best_d or (d == best_d and c < best):
                best, best_d = c, d
        gid[r] = best
        removed[r] = True
        _absorb(u, unum, ucat, lca, c_hi[best], c_lo[best], c_state[best])
        c_size[best] += 1
        c_old[best] = _bracket(c_hi[best], c_lo[best], c_state[best], height)
    return gid, ncl, left


def _segments(num: np.ndarray, cat: np.ndarray, catg: np.ndarray, m: int) -> tuple[np.ndarray, ...]:
    """Rows sorted by (category, categorical QIs, numeric QIs) and cut into segments that share
    their category and categorical values, at most _CHUNK rows each (tight numeric boxes):
    (order, segment starts, categorical values, numeric box low and high, first segment of
    each category)."""
    n = len(catg)
    combo = (np.unique(cat, axis=0, return_inverse=True)[1].reshape(-1) if cat.shape[1]
             else np.zeros(n, np.int64))  # fmt: skip
    keys = [num[:, i] for i in range(num.shape[1] - 1, -1, -1)]
    order = np.lexsort([*keys, combo, catg]).astype(np.int64)
    c_sorted, combo_sorted = catg[order], combo[order]
    new = np.r_[True, (c_sorted[1:] != c_sorted[:-1]) | (combo_sorted[1:] != combo_sorted[:-1])]
    run_start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    new |= (np.arange(n) - run_start) % _CHUNK == 0
    first = np.flatnonzero(new)
    sstart = np.r_[first, n].astype(np.int64)
    snum = num[order]
    blo = np.minimum.reduceat(snum, first, axis=0) if num.shape[1] else snum[first]
    bhi = np.maximum.reduceat(snum, first, axis=0) if num.shape[1] else snum[first]
    scat = np.ascontiguousarray(cat[order[first]])
    bseg = np.searchsorted(c_sorted[first], np.arange(m + 1)).astype(np.int64)
    return order, sstart, scat, np.ascontiguousarray(blo), np.ascontiguousarray(bhi), bseg


def thetak_detail(
    qi: QIArrays,
    category: np.ndarray,
    value: np.ndarray,
    k: int,
    theta: int,
    *,
    seed: int = 0,
    leftovers: str = "category",
    construction: str = "greedy",
    need: Mapping[Any, int] | None = None,
    rule: str = "paper",
) -> tuple[np.ndarray, int]:
    """(group ids 0..g-1 in creation order, number of rows placed by the leftover step).

    `category` and `value` give each row's sensitive category and value (any comparable
    codes; a value is identified together with its category). `construction` "paper" is the
    paper's algorithm (module docstring), which always holds the paper's need_c; "greedy"
    (the default) is k-member's loss-greedy growth under the (θ,k) property of
    dbanon.models.thetak with need_c read by `rule` ("paper", the default, or "relaxed"; see
    _greedy_construction). Raises ValueError for input that has no (θ,k)-anonymous grouping by
    the construction. `need` (greedy only): need_c per category taken as given, not from these
    rows' counts: a block of a larger table (dbanon.algorithms.blocks) keeps the whole table's
    property.
    """
    n = qi.n
    if theta < 2:
        raise ValueError(f"θ must be at least 2, got {theta}")
    if theta > k:
        raise ValueError(f"θ={theta} is larger than k={k}")
    if n < k:
        raise ValueError(f"(θ,k)-anonymity needs at least k={k} rows, the table has {n}")
    if leftovers not in LEFTOVERS:
        raise ValueError(f"leftovers must be one of {', '.join(LEFTOVERS)}, got {leftovers!r}")
    from dbanon.models.thetak import NEED_RULES

    if rule not in NEED_RULES:
        raise ValueError(f"rule must be one of {', '.join(NEED_RULES)}, got {rule!r}")
    if construction not in CONSTRUCTIONS:
        raise ValueError(
            f"construction must be one of {', '.join(CONSTRUCTIONS)}, got {construction!r}"
        )
    category = np.asarray(category).reshape(-1)
    value = np.asarray(value).reshape(-1)
    if len(category) != n or len(value) != n:
        raise ValueError(f"category and value need {n} entries, got {len(category)}, {len(value)}")
    cats, catg, vcat, code = encode(category, value)
    if len(cats) < theta:
        raise ValueError(
            f"the sensitive values fall into {len(cats)} categories, fewer than θ={theta}"
        )
    vstart = np.searchsorted(vcat, np.arange(len(cats) + 1)).astype(np.int64)
    num = np.ascontiguousarray(qi.num, dtype=np.float64) + 0.0
    if np.isnan(num).any():
        raise ValueError("numeric quasi-identifiers contain NaN; remove or impute them first")
    perm = np.random.default_rng(seed).permutation(n).astype(np.int64)
    if construction == "greedy":
        given = None if need is None else np.array([need[c] for c in cats.tolist()], np.int64)
        gid, ncl, left = _greedy_construction(
            qi, num, catg, code, vcat, perm, int(k), int(theta), leftovers == "category", given,
            rule,
        )  # fmt: skip
    else:
        qcat = np.ascontiguousarray(qi.cat, dtype=np.int64)
        lca = np.ascontiguousarray(qi.lca, dtype=np.int64)
        height = np.ascontiguousarray(qi.height, dtype=np.float64)
        q = qcat.shape[1]
        hcost = np.ascontiguousarray(height[np.arange(q)[:, None, None], lca])
        gid, ncl, left = _cluster(
            num, qcat, lca, hcost, height, catg, code, vstart, perm,
            _segments(num, qcat, catg, len(cats)), int(k), int(theta), leftovers == "category",
        )  # fmt: skip
    if ncl == 0:  # unreachable after the checks above (see the proofs); kept as a guard
        raise ValueError("no (θ,k)-anonymous class could be built")
    return gid, int(left)


def encode(
    category: np.ndarray, value: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(the categories, each row's category code, each value code's category code, each row's
    value code). A value is identified together with its category, and value codes are
    contiguous per category: codes follow the sorted (category, value) pairs. Integer codes
    in give the same codes out (ranks keep their order), so a caller may encode once."""
    cats, catg = _ranks(category)
    vals, vrank = _ranks(value)
    pair = catg * max(len(vals), 1) + vrank  # sorts as the (category, value) pairs do
    present, code = _ranks(pair)
    return cats, catg, present // max(len(vals), 1), code


def _ranks(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(a, return_inverse=True) (the distinct values sorted, each row's index into
    them, int64), without sorting the rows: an object array (text values) is looked up once
    per row and only its distinct values sorted; small non-negative integers are counted."""
    a = np.asarray(a).reshape(-1)
    if a.dtype == object:
        index: dict[Any, int] = {}
        first = np.fromiter((index.setdefault(v, len(index)) for v in a.tolist()), np.int64,
                            len(a))  # fmt: skip
        distinct = np.empty(len(index), dtype=object)
        for i, v in enumerate(index):
            distinct[i] = v
        order = np.argsort(distinct, kind="stable")
        rank = np.empty(len(index), np.int64)
        rank[order] = np.arange(len(index))
        return distinct[order], rank[first]
    if a.dtype.kind in "iu" and len(a) and a.min() >= 0 and a.max() <= 4 * len(a):
        seen = np.zeros(int(a.max()) + 1, np.bool_)
        seen[a] = True
        rank = np.cumsum(seen, dtype=np.int64) - 1
        return np.flatnonzero(seen).astype(a.dtype), rank[a]
    got, inverse = np.unique(a, return_inverse=True)
    return got, inverse.reshape(-1).astype(np.int64)


def needs(
    catg: np.ndarray, code: np.ndarray, vcat: np.ndarray, k: int, theta: int, rule: str = "paper"
) -> np.ndarray:
    """need_c of dbanon.models.thetak's `rule` per category code, from the rows' value codes."""
    from dbanon.models.thetak import theta_k_needs

    f = np.bincount(code, minlength=len(vcat))
    got = theta_k_needs({(int(vcat[v]), v): int(f[v]) for v in range(len(vcat))}, k, theta, rule)
    return np.array([got.get(c, 1) for c in range(int(catg.max()) + 1)], np.int64)


def _greedy_construction(
    qi: QIArrays,
    num: np.ndarray,
    catg: np.ndarray,
    code: np.ndarray,
    vcat: np.ndarray,
    perm: np.ndarray,
    k: int,
    theta: int,
    by_category: bool,
    given: np.ndarray | None = None,
    rule: str = "paper",
) -> tuple[np.ndarray, int, int]:
    """The default construction: k-member's greedy rule under the (θ,k) property.

    need_c as dbanon.models.thetak's `rule` defines it (so the release satisfies exactly the
    checked property: by default the paper's min(⌊k/θ⌋, V_c)). While at least k rows
    remain and at least θ categories still hold need_c distinct values among their rows
    (eligible):
    1. seed a class with the first remaining row of the permutation;
    2. grow it by the remaining row of least information-loss growth (k-member's rule, ties to
       the lower row), restricted, while the slots left to k do not exceed the deficit (the
       fewest rows that give θ eligible categories need_c distinct values each), to rows that
       shrink the deficit; stop at >= k rows with no deficit.
    Rows left join the class of least loss growth (with `leftovers="category"`, among the
    classes already holding their category, while one exists).

    Why every class holds: a category eligible at the class's start stays reachable (taking a
    row of a value new to the class raises the class's count and lowers the values left
    outside it by one each), so while the deficit is positive a row that shrinks it exists;
    a class therefore ends with >= k rows and θ categories at need_c values, and leftovers
    only add rows. At least one class is built: initially every category with rows is
    eligible (every rule's need_c <= V_c), and the callers refuse fewer than θ categories.
    """
    n = len(catg)
    cat = np.ascontiguousarray(qi.cat, dtype=np.int64)
    need = needs(catg, code, vcat, k, theta, rule) if given is None else given
    # Collapse rows identical in QI and sensitive value into points (as k-member does):
    # categorical columns first, so points sharing them are contiguous.
    key = np.hstack([cat.astype(np.float64), num, code.reshape(n, 1).astype(np.float64)])
    first, point_of = points(key)
    members = np.argsort(point_of, kind="stable").astype(np.int64)
    start = np.zeros(len(first) + 1, np.int64)
    np.cumsum(np.bincount(point_of, minlength=len(first)), out=start[1:])
    unum, ucat = np.ascontiguousarray(num[first]), np.ascontiguousarray(cat[first])
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
    height = np.ascontiguousarray(node_weights(qi, "height"))
    q = cat.shape[1]
    hcost = np.ascontiguousarray(height[np.arange(q)[:, None, None], lca])
    groups = (gstart, np.ascontiguousarray(ucat[gfirst]), np.ascontiguousarray(gmin),
              np.ascontiguousarray(gmax), gminrow, hcost)  # fmt: skip
    return _greedy_thetak(
        unum, ucat, lca, height, code[first].astype(np.int64), vcat, need, start, members,
        point_of, grp, groups, perm, k, theta, by_category, _FIRST_PICK * k,
    )  # fmt: skip


def thetak(
    qi: QIArrays,
    category: np.ndarray,
    value: np.ndarray,
    k: int,
    theta: int,
    *,
    seed: int = 0,
    leftovers: str = "category",
    construction: str = "greedy",
    rule: str = "paper",
) -> np.ndarray:
    """int32[n] group ids of the (θ,k) construction (see thetak_detail)."""
    return thetak_detail(
        qi, category, value, k, theta, seed=seed, leftovers=leftovers, construction=construction,
        rule=rule,
    )[0]
