"""Cross-bucket generalisation (thesis Ch. 3, Algorithms 3.1-3.5), with the repairs of §6.2.

The table is partitioned twice: into equivalence groups of >= k rows (QIs generalised per group:
identity) and into buckets (sensitive values published per bucket: attributes). Rows are taken
in T_gens: sets of rows with pairwise distinct sensitive values, each cut into contiguous groups
(Algorithm 3.4) and dealt into k buckets by stride k (Algorithm 3.5), so that every group has
one row (two at most) in each of k buckets.

Arrays in, ids out: `x` holds the QIs as ordinal numbers scaled to [0, 1] per column (numeric
values; categorical ones by their leaf order in the hierarchy, so siblings are adjacent), `sa`
the sensitive value codes. The returned group and bucket ids are -1 for a suppressed row.

Decisions where the thesis is silent or broken (§6.2 items 1-5), each so that Property 3.2 and
thus (k,l) hold by construction:
- `cal_diversity(k, l)` = k * ceil(l / k): the smallest T_gen size that is a multiple of k and at
  least l (a T_gen of that size gives every row p(t, s) = 1 / |T_gen| <= 1 / l, (3.17)).
- `cal_sen_set` (Algorithm 3.2): S_set is the beta most frequent remaining values (ties: the
  value whose first row in lexicographic QI order comes first, so that QI-close values go
  together; this reproduces the thesis's Table 3.6); alpha, how many T_gens reuse S_set, is the
  largest alpha <= c_beta (the beta-th count) that keeps the remainder m-eligible (no value in
  more than 1/m of the remaining rows, the m-invariance rule the thesis cites), in closed form:
  m * max(c_1 - alpha, c_(beta+1)) <= n - alpha * beta, with m = diversity_num while the
  remainder is diversity_num-eligible (so that T_gens of that size can go on being taken: with
  m = l, a tight remainder strands rows) and m = l otherwise. If no alpha >= 1 exists, beta
  grows by k (line 9). The thesis's "last call" when fewer than 2 * diversity_num values are
  left (line 2) is not used: it breaks the toy example (6 values < 8 would make one T_gen of 6
  and strand 2 rows); eligibility decides instead. When no beta keeps the remainder eligible,
  the largest valid beta <= the number of distinct values left is taken with alpha = its least
  count.
- valid T_gen sizes: a multiple of k that is >= l (Case 1: p = 1/|T_gen|), or a size whose
  k * floor(beta / k) >= 2l (Case 2, groups of k..2k-1 rows: p <= 2 / (k * floor(beta / k)),
  (3.18)-(3.20)). Fewer than l distinct values left, or no valid size: the rows left are
  suppressed and counted (`suppressed_rows`); with an l-eligible input this is rare.
- `pick_tuples` (Algorithm 3.3): Mondrian's choice of attribute (widest scaled range among those
  not yet tried), the lower median, left half tried before the right; a split needs both halves
  non-empty. `select_tuples` takes for each value of S_set its row nearest (L1, scaled) to the
  region's median point, ties to the lower row number.
- T_gen order before Algorithm 3.4: a kd order (split at the median of the widest attribute,
  left half first, recursively), so that contiguous groups are QI-close (§6.2 item 4).
- Placement (issue 24): the thesis deals a T_gen's kd-ordered rows into buckets by stride k, so
  the row's QI rank inside its group names its bucket, and an attacker who knows a target's QIs
  and the rule reads p = 1/(bucket size) instead of 1/|T_gen|. With a generator (`rng`, drawn
  from the run's secret seed), each group keeps the stride's multiset of bucket labels (so
  every group has one row, two at most, in each of k buckets, and the bucket sizes are the
  stride's) but which member takes which label is a random permutation; bucket ids are a random
  permutation of 1..B (not the T_gen order) and rows enter in a random order (so "ties to the
  lower row number" is a random tie-break, not the source's order). Without `rng` the stride
  is the thesis's, deterministic (to reproduce its Table 3.6).
- Scale (issue 23): each T_gen narrows every row left to a small region, a pass over the table
  per T_gen, so the thesis's algorithm is O(n^2 / beta): 11 s for 45,000 rows, hours for a
  million. Above AUTO_ROWS rows (the thesis's own tables stay below) it runs in blocks of
  BLOCK_SIZE rows cut along the QIs (`in_blocks`), linear in n; T_gens are QI-local anyway.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from numba import njit

from dbanon.algorithms.blocks import cores, even_aim, partitioned
from dbanon.algorithms.mondrian import _select


def diversity_num(k: int, l: int) -> int:  # noqa: E741 - the thesis's name
    """cal_diversity: the smallest multiple of k that is at least l."""
    return k * -(-l // k)


def valid_size(beta: int, k: int, l: int) -> bool:  # noqa: E741
    """Whether a T_gen of beta distinct values keeps every p(t, s) <= 1/l (Property 3.2)."""
    return (beta % k == 0 and beta >= l) or k * (beta // k) >= 2 * l


def calculate_alpha(counts: np.ndarray, beta: int, l: int) -> int:  # noqa: E741
    """The largest alpha (0 if none) such that taking alpha rows of each of the beta most
    frequent values (counts sorted decreasingly) leaves an l-eligible remainder (here l is the
    m of m-eligibility)."""
    n = int(counts.sum())
    c1, cb = int(counts[0]), int(counts[beta - 1])
    c_next = int(counts[beta]) if beta < len(counts) else 0
    alpha = min(cb, (n - l * c_next) // beta)
    if beta > l:
        alpha = min(alpha, (n - l * c1) // (beta - l))
    elif l * c1 > n:
        return 0
    return max(int(alpha), 0)


def sen_set(
    counts: np.ndarray, first: np.ndarray, k: int, l: int  # noqa: E741
) -> tuple[np.ndarray, int] | None:
    """cal_sen_set: (codes of S_set, alpha), or None when what is left cannot form a T_gen."""
    present = np.flatnonzero(counts > 0)
    order = present[np.lexsort((first[present], -counts[present]))]
    c = counts[order]
    d = len(order)
    if d < l:
        return None
    beta = diversity_num(k, l)
    # Eligibility is kept for diversity_num when the remainder has it (so T_gens of that size
    # can go on being taken), else for l.
    m = beta if beta * int(c[0]) <= int(c.sum()) else l
    while beta <= d:
        alpha = calculate_alpha(c, beta, m)
        if alpha >= 1:
            return order[:beta], alpha
        beta += k
    for beta in range(d, l - 1, -1):
        if valid_size(beta, k, l):
            return order[:beta], int(c[beta - 1])
    return None


@njit(cache=True, nogil=True)
def _covers(rows: np.ndarray, sa: np.ndarray, need: np.ndarray, beta: int, seen: np.ndarray,
            stamp: int) -> bool:  # fmt: skip
    """Whether the rows hold every needed value (`seen` is a scratch array of stamps)."""
    found = 0
    for r in rows:
        v = sa[r]
        if need[v] and seen[v] != stamp:
            seen[v] = stamp
            found += 1
            if found == beta:
                return True
    return False


@njit(cache=True, nogil=True)
def _pick(x: np.ndarray, sa: np.ndarray, alive: np.ndarray, need: np.ndarray, beta: int,
          seen: np.ndarray, stamp: int, tmp: np.ndarray) -> tuple[np.ndarray, int]:  # fmt: skip
    """Algorithm 3.3: narrow the alive rows to a small QI region holding every needed value,
    then one row per needed value, nearest to the region's median point (`_narrow`)."""
    return _narrow(x, sa, alive.copy(), need, beta, seen, stamp, tmp)


@njit(cache=True, nogil=True)
def _narrow(x: np.ndarray, sa: np.ndarray, perm: np.ndarray, need: np.ndarray, beta: int,
            seen: np.ndarray, stamp: int, tmp: np.ndarray) -> tuple[np.ndarray, int]:  # fmt: skip
    """`_pick` from the region `perm` (rows holding every needed value), cut in place (as in
    dbanon.algorithms.mondrian): each attempt costs one pass over the region, no allocation.
    What it returns depends on the region's rows, not on their order in `perm`."""
    lo, hi = 0, len(perm)
    d = x.shape[1]
    tried = np.zeros(d, dtype=np.bool_)
    low = np.empty(d)
    high = np.empty(d)
    fresh = True  # the region changed: its spans are measured again (one pass, every QI)
    while True:
        if fresh:
            low[:] = np.inf
            high[:] = -np.inf
            for p in range(lo, hi):
                r = perm[p]
                for j in range(d):
                    v = x[r, j]
                    if v < low[j]:
                        low[j] = v
                    if v > high[j]:
                        high[j] = v
            fresh = False
        best, width = -1, 0.0
        for j in range(d):
            if not tried[j] and high[j] - low[j] > width:
                best, width = j, high[j] - low[j]
        if best < 0:
            break
        m = hi - lo
        for p in range(m):
            tmp[p] = x[perm[lo + p], best]
        med = _select(tmp[:m], (m - 1) // 2)
        cut = lo
        for p in range(lo, hi):
            if x[perm[p], best] <= med:
                perm[cut], perm[p] = perm[p], perm[cut]
                cut += 1
        if cut == hi:  # the median is the largest value: cut below it
            cut = lo
            for p in range(lo, hi):
                if x[perm[p], best] < med:
                    perm[cut], perm[p] = perm[p], perm[cut]
                    cut += 1
        moved = False
        if cut - lo >= beta and cut > lo:
            stamp += 1
            if _covers(perm[lo:cut], sa, need, beta, seen, stamp):
                hi = cut
                moved = True
        if not moved and hi - cut >= beta and cut < hi:
            stamp += 1
            if _covers(perm[cut:hi], sa, need, beta, seen, stamp):
                lo = cut
                moved = True
        if moved:
            tried[:] = False
            fresh = True
        else:
            tried[best] = True
    cur = perm[lo:hi]
    centre = np.empty(d)
    for j in range(d):
        for p in range(len(cur)):
            tmp[p] = x[cur[p], j]
        centre[j] = _select(tmp[: len(cur)], (len(cur) - 1) // 2)
    best_row = np.full(need.shape[0], -1, dtype=np.int64)
    best_dist = np.full(need.shape[0], np.inf)
    for r in cur:
        v = sa[r]
        if need[v]:
            dist = np.abs(x[r] - centre).sum()
            if dist < best_dist[v] or (dist == best_dist[v] and r < best_row[v]):
                best_dist[v] = dist
                best_row[v] = r
    out = np.empty(beta, dtype=np.int64)
    i = 0
    for v in range(need.shape[0]):
        if need[v]:
            out[i] = best_row[v]
            i += 1
    return out, stamp


@dataclass(frozen=True)
class Sorted:
    """The rows of a table sorted along each QI, kept as T_gens take rows away, so that the
    first cut of `_pick` (over every row left) costs no pass over them: per QI j, its rows in
    order (order[j], stable), their values (xs[j]), each row's place (pos[j]), a Fenwick tree
    of the places still alive (fen[j]) and the rows again grouped by sensitive value, each
    value's in order (byv[j]: value v at voff[v]..voff[v+1]); pointers to the first and last
    alive row of each QI (slo, shi) and of each value along it (vlo, vhi)."""

    order: np.ndarray
    xs: np.ndarray
    pos: np.ndarray
    fen: np.ndarray
    byv: np.ndarray
    voff: np.ndarray
    vlo: np.ndarray
    vhi: np.ndarray
    slo: np.ndarray
    shi: np.ndarray

    @classmethod
    def of(cls, x: np.ndarray, sa: np.ndarray, m: int) -> Sorted:
        n, d = x.shape
        order = np.empty((d, n), dtype=np.int64)
        byv = np.empty((d, n), dtype=np.int64)
        pos = np.empty((d, n), dtype=np.int64)
        for j in range(d):
            order[j] = np.argsort(x[:, j], kind="stable")
            byv[j] = order[j][np.argsort(sa[order[j]], kind="stable")]
            pos[j, order[j]] = np.arange(n)
        xs = np.ascontiguousarray(np.take_along_axis(x.T, order, axis=1))
        at = np.arange(n + 1)
        fen = np.tile(at & -at, (d, 1))  # every row alive: node i counts lowbit(i) places
        voff = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.bincount(sa, minlength=m), out=voff[1:])
        return cls(order, xs, pos, fen, byv, voff, np.tile(voff[:-1], (d, 1)),
                   np.tile(voff[1:] - 1, (d, 1)), np.zeros(d, dtype=np.int64),
                   np.full(d, n - 1, dtype=np.int64))  # fmt: skip


@njit(cache=True, nogil=True)
def _fen_prefix(fen: np.ndarray, j: int, i: int) -> int:
    """Alive places among the first i of QI j."""
    s = 0
    while i > 0:
        s += fen[j, i]
        i -= i & -i
    return s


@njit(cache=True, nogil=True)
def _fen_select(fen: np.ndarray, j: int, k: int) -> int:
    """The place of the (k + 1)-th alive row along QI j."""
    n = fen.shape[1] - 1
    step = 1
    while step * 2 <= n:
        step *= 2
    at, rem = 0, k + 1
    while step > 0:
        if at + step <= n and fen[j, at + step] < rem:
            at += step
            rem -= fen[j, at]
        step //= 2
    return at


@njit(cache=True, nogil=True)
def _remove(fen: np.ndarray, pos: np.ndarray, r: int) -> None:
    """Row r leaves every QI's tree."""
    n = fen.shape[1] - 1
    for j in range(fen.shape[0]):
        i = pos[j, r] + 1
        while i <= n:
            fen[j, i] -= 1
            i += i & -i


@njit(cache=True, nogil=True)
def _side(mask: np.ndarray, need: np.ndarray, byv: np.ndarray, voff: np.ndarray,
          vlo: np.ndarray, vhi: np.ndarray, x: np.ndarray, j: int, med: float, strict: bool,
          left: bool) -> bool:  # fmt: skip
    """Whether every needed value has an alive row on the side of the cut at `med` along QI
    j: below it (left: <= med, < med when `strict`) or above it (> med, >= med)."""
    for v in range(len(need)):
        if not need[v]:
            continue
        if left:
            p = vlo[j, v]
            while p < voff[v + 1] and not mask[byv[j, p]]:
                p += 1
            vlo[j, v] = p
            if p == voff[v + 1]:
                return False
            low = x[byv[j, p], j]
            if low > med or (strict and low == med):
                return False
        else:
            q = vhi[j, v]
            while q >= voff[v] and not mask[byv[j, q]]:
                q -= 1
            vhi[j, v] = q
            if q < voff[v]:
                return False
            high = x[byv[j, q], j]
            if high < med or (not strict and high == med):
                return False
    return True


@njit(cache=True, nogil=True)
def _pick_sorted(x: np.ndarray, sa: np.ndarray, alive: np.ndarray, mask: np.ndarray,
                 need: np.ndarray, beta: int, seen: np.ndarray, stamp: int, tmp: np.ndarray,
                 order: np.ndarray, xs: np.ndarray, fen: np.ndarray, byv: np.ndarray,
                 voff: np.ndarray, vlo: np.ndarray, vhi: np.ndarray, slo: np.ndarray,
                 shi: np.ndarray) -> tuple[np.ndarray, int]:  # fmt: skip
    """`_pick` over the alive rows, its first cut read off the sorted index (`Sorted`):
    spans from each QI's first and last alive row, the median from its tree, each half's size
    from the tree and whether it holds every needed value from each value's least and
    greatest alive row. Only the half the cut keeps is gathered and narrowed as `_pick` goes
    on. When no first cut is taken, `_pick` itself (it chooses among every alive row)."""
    m = len(alive)
    d = x.shape[1]
    low = np.empty(d)
    high = np.empty(d)
    for j in range(d):
        while not mask[order[j, slo[j]]]:
            slo[j] += 1
        while not mask[order[j, shi[j]]]:
            shi[j] -= 1
        low[j] = xs[j, slo[j]]
        high[j] = xs[j, shi[j]]
    tried = np.zeros(d, dtype=np.bool_)
    while True:
        best, width = -1, 0.0
        for j in range(d):
            if not tried[j] and high[j] - low[j] > width:
                best, width = j, high[j] - low[j]
        if best < 0:
            break
        med = xs[best, _fen_select(fen, best, (m - 1) // 2)]
        cut = _fen_prefix(fen, best, np.searchsorted(xs[best], med, side="right"))
        strict = cut == m  # the median is the largest value: cut below it
        if strict:
            cut = _fen_prefix(fen, best, np.searchsorted(xs[best], med, side="left"))
        left = cut >= beta and cut > 0 and _side(mask, need, byv, voff, vlo, vhi, x, best,
                                                 med, strict, True)  # fmt: skip
        right = not left and m - cut >= beta and cut < m and _side(
            mask, need, byv, voff, vlo, vhi, x, best, med, strict, False)  # fmt: skip
        if left or right:
            size = cut if left else m - cut
            perm = np.empty(size, dtype=np.int64)
            c = 0
            t = 0 if left else len(mask) - 1
            while c < size:  # the half's rows: the first (last) alive ones along the QI
                r = order[best, t]
                t += 1 if left else -1
                if mask[r]:
                    perm[c] = r
                    c += 1
            return _narrow(x, sa, perm, need, beta, seen, stamp, tmp)
        tried[best] = True
    return _pick(x, sa, alive, need, beta, seen, stamp, tmp)


def kd_order(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Rows in kd order: split at the median of the widest attribute, left half first."""
    return rows[_kd(np.ascontiguousarray(x[rows], dtype=np.float64))]


@njit(cache=True, nogil=True)
def _kd(pts: np.ndarray) -> np.ndarray:
    """The kd order of points (positions into `pts`): a segment of more than two points is
    sorted (stably) along its widest attribute (the first of the widest) and cut in halves,
    each ordered likewise; one whose points agree on every attribute stays as it is; two
    points go in lexicographic order (ties as they were). Each segment is ordered in place,
    so the order is the halves' concatenated, as a recursion would make it."""
    n, d = pts.shape
    perm = np.arange(n)
    stack = [(0, n)]
    while stack:
        lo, hi = stack.pop()
        if hi - lo == 2:
            a, b = perm[lo], perm[lo + 1]
            for j in range(d):
                if pts[b, j] < pts[a, j]:
                    perm[lo], perm[lo + 1] = b, a
                    break
                if pts[b, j] > pts[a, j]:
                    break
            continue
        if hi - lo < 2:
            continue
        best, width = 0, -1.0
        for j in range(d):
            low, high = np.inf, -np.inf
            for p in range(lo, hi):
                v = pts[perm[p], j]
                low, high = min(low, v), max(high, v)
            if high - low > width:
                best, width = j, high - low
        if width == 0:
            continue
        seg = perm[lo:hi].copy()
        perm[lo:hi] = seg[np.argsort(pts[seg, best], kind="mergesort")]
        half = (hi - lo) // 2
        stack.append((lo + half, hi))
        stack.append((lo, lo + half))
    return perm


@njit(cache=True, nogil=True)
def _take(x: np.ndarray, sa: np.ndarray, alive: np.ndarray, mask: np.ndarray,
          need: np.ndarray, beta: int, alpha: int, seen: np.ndarray, stamp: int,
          tmp: np.ndarray, out: np.ndarray, order: np.ndarray, xs: np.ndarray,
          pos: np.ndarray, fen: np.ndarray, byv: np.ndarray, voff: np.ndarray,
          vlo: np.ndarray, vhi: np.ndarray, slo: np.ndarray,
          shi: np.ndarray) -> int:  # fmt: skip
    """Algorithm 3.1's inner loop: alpha T_gens of the values in `need`, each picked
    (`_pick`) from the alive rows and put in kd order into out[t * beta : (t + 1) * beta];
    their rows leave `alive` (kept in order) and `mask`. Returns the stamp."""
    n_alive = len(alive)
    d = x.shape[1]
    pts = np.empty((beta, d))
    for t in range(alpha):
        rows, stamp = _pick_sorted(x, sa, alive[:n_alive], mask, need, beta, seen, stamp,
                                   tmp, order, xs, fen, byv, voff, vlo, vhi, slo, shi)
        for i in range(beta):
            pts[i] = x[rows[i]]
            _remove(fen, pos, rows[i])
        kd = _kd(pts)
        for i in range(beta):
            r = rows[kd[i]]
            out[t * beta + i] = r
            mask[r] = False
        m = 0
        for p in range(n_alive):
            if mask[alive[p]]:
                alive[m] = alive[p]
                m += 1
        n_alive = m
    return stamp


def group_sizes(size: int, k: int) -> list[int]:
    """Algorithm 3.4: contiguous groups of k rows, or of k + base (+1) rows when k does not
    divide the T_gen (per_remainder_num groups get the extra row)."""
    if size % k == 0:
        return [k] * (size // k)
    groups, rem = size // k, size % k
    base, extra = rem // groups, rem % groups
    return [k + base + 1] * extra + [k + base] * (groups - extra)


@dataclass(frozen=True)
class CBGResult:
    gid: np.ndarray  # int64 per row: its equivalence group (1..), -1 if suppressed
    bid: np.ndarray  # int64 per row: its bucket (1..), -1 if suppressed
    tgens: int
    suppressed: int
    uneven_tgens: int  # T_gens whose size k does not divide (groups of k..2k-1 rows)
    tgen: np.ndarray  # int64 per row: its T_gen (0..), -1 if suppressed (bucket ids hide it)


def cross_bucket(
    x: np.ndarray, sa: np.ndarray, k: int, l: int,  # noqa: E741
    rng: np.random.Generator | None = None, block_size: int | None = None,
) -> CBGResult:  # fmt: skip
    """Algorithm 3.1: T_gens of distinct sensitive values, grouped and bucketed. With `rng`,
    every choice the release does not reveal is drawn from it (see the module). With
    `block_size`, in blocks of about that many rows (`in_blocks`)."""
    if k < 2 or l < 2:
        raise ValueError(f"k and l must be at least 2, got k={k}, l={l}")
    if block_size is not None and len(sa) > block_size:
        return in_blocks(x, sa, k, l, block_size, rng)
    if rng is None:
        return _cross_bucket(x, sa, k, l, None)
    perm = rng.permutation(len(sa))
    res = _cross_bucket(np.asarray(x)[perm], np.asarray(sa)[perm], k, l, rng)
    gid = np.empty_like(res.gid)
    bid = np.empty_like(res.bid)
    tgen = np.empty_like(res.tgen)
    gid[perm] = res.gid
    tgen[perm] = res.tgen
    relabel = np.concatenate([[-1], rng.permutation(int(res.bid.max(initial=0))) + 1])
    bid[perm] = relabel[np.maximum(res.bid, 0)]
    return CBGResult(gid, bid, res.tgens, res.suppressed, res.uneven_tgens, tgen)


def _cross_bucket(
    x: np.ndarray, sa: np.ndarray, k: int, l: int,  # noqa: E741
    rng: np.random.Generator | None,
) -> CBGResult:  # fmt: skip
    n = len(sa)
    sa = np.ascontiguousarray(sa, dtype=np.int64)
    x = np.ascontiguousarray(x, dtype=np.float64)
    m = int(sa.max()) + 1 if n else 0
    gid = np.full(n, -1, dtype=np.int64)
    bid = np.full(n, -1, dtype=np.int64)
    tgen = np.full(n, -1, dtype=np.int64)
    alive_mask = np.ones(n, dtype=bool)
    lex = np.empty(n, dtype=np.int64)
    lex[np.lexsort(x.T[::-1])] = np.arange(n)
    seen = np.zeros(m, dtype=np.int64)
    tmp = np.empty(n)
    out = np.empty(n, dtype=np.int64)
    idx = Sorted.of(x, sa, m)
    stamp, tgens, groups, uneven = 0, 0, 0, 0
    while alive_mask.any():
        alive = np.flatnonzero(alive_mask)
        counts = np.bincount(sa[alive], minlength=m)
        first = np.full(m, n, dtype=np.int64)
        np.minimum.at(first, sa[alive], lex[alive])
        chosen = sen_set(counts, first, k, l)
        if chosen is None:
            break
        values, alpha = chosen
        need = np.zeros(m, dtype=np.bool_)
        need[values] = True
        beta = len(values)
        stamp = _take(x, sa, alive, alive_mask, need, beta, alpha, seen, stamp, tmp, out,
                      idx.order, idx.xs, idx.pos, idx.fen, idx.byv, idx.voff, idx.vlo, idx.vhi,
                      idx.slo, idx.shi)  # fmt: skip
        taken = out[: alpha * beta].reshape(alpha, beta)
        sizes = group_sizes(beta, k)
        within = np.repeat(np.arange(len(sizes)), sizes)  # each kd position's group
        nth = np.arange(alpha)[:, None]
        gid[taken] = groups + 1 + nth * len(sizes) + within
        labels = (tgens + nth) * k + np.arange(beta) % k + 1  # the stride (Algorithm 3.5)
        if rng is not None:  # who in a group takes which of its labels: secret
            labels = _permuted(rng, labels, sizes)
        bid[taken] = labels
        tgen[taken] = tgens + nth
        tgens += alpha
        groups += alpha * len(sizes)
        uneven += alpha * (beta % k != 0)
    return CBGResult(gid, bid, tgens, int(alive_mask.sum()), uneven, tgen)


def _permuted(rng: np.random.Generator, labels: np.ndarray, sizes: list[int]) -> np.ndarray:
    """Each group's labels (T_gens in rows, groups `sizes` long) permuted, group after group,
    as one rng.permutation per group draws them (rng.permuted draws a row's as a
    permutation of it does)."""
    if len(set(sizes)) == 1:
        return rng.permuted(labels.reshape(-1, sizes[0]), axis=1).reshape(labels.shape)
    labels = labels.copy()
    ends = np.cumsum(sizes).tolist()
    for row in labels:
        for start, end in zip([0, *ends[:-1]], ends, strict=True):
            row[start:end] = rng.permutation(row[start:end])
    return labels


# Measured on Adult (45,222 rows; k=5, l=4, six QIs): blocks of 8,000, 4,000 and 2,000 rows
# leave out 1,497, 1,503 and 1,620 rows at GCP 0.243, 0.243 and 0.232; on the bench's 1M rows
# (k=10, l=2) the cluster step takes 10.7, about 6.5 and 5.9 s, nothing left out. Again with
# seven QIs (five hierarchies, seed 7), 4,000 and 2,000 rows: at k=5, l=4 2,068 and 1,819 rows
# left out at GCP 0.244 and 0.230; at k=10, l=6 17,082 and 17,052 at 0.315 and 0.319; the 1M
# publish's cluster step 8.1-8.8 and 6.6 s at GCP 0.498 and 0.485 (1,000-row blocks: no
# faster, more blocks to cut). Hence 2,000.
BLOCK_SIZE = 2_000
AUTO_ROWS = 50_000  # above the thesis's tables (its 22,517-row experiment, Adult's 45,222)
TAIL = 0.05  # share of each block's T_gens, its last, pooled again with the rows it stranded


def block_size(n: int, size: int | None, exact: bool, k: int = 1, l: int = 1) -> int | None:  # noqa: E741
    """The block size for n rows under the method's options (None: the exact rule); by
    default BLOCK_SIZE, or twice the smallest T_gen where that is larger (`blocks` needs it)."""
    if not partitioned(n, size, exact, AUTO_ROWS):
        return None
    return size or max(BLOCK_SIZE, 2 * diversity_num(k, l))


def blocks(x: np.ndarray, sa: np.ndarray, k: int, l: int, size: int) -> list[np.ndarray]:  # noqa: E741
    """Row indices of each block, in kd order: a block of more than `size` rows is cut along
    its widest QI (`_halves`), each half as eligible as the table (no value in more than 1/m
    of its rows; m = diversity_num when the table allows it, else l: what sen_set keeps), so
    a block strands no more rows than the table would. A value a half holds too much of
    moves its rows nearest the cut across (`_rebalance`). Where that fails (a block with no
    slack: m times its commonest value's count is its size), the halves need only be
    l-eligible; a block that cannot be cut even so stays whole (then larger than `size`)."""
    least = diversity_num(k, l)
    if size < 2 * least:
        raise ValueError(f"block size {size} is too small for k={k}, l={l}: it needs at "
                         f"least 2 * k * ceil(l/k) = {2 * least}")  # fmt: skip
    m = least if least * int(np.bincount(sa).max(initial=0)) <= len(sa) else l
    done: list[np.ndarray] = []
    todo = [np.arange(len(sa), dtype=np.int64)]
    while todo:
        rows = todo.pop()
        cut = _halves(x, rows, size) if len(rows) > size else None
        halves = None
        for mm in () if cut is None else dict.fromkeys((m, l)):  # l: m is out of reach here
            halves = _rebalance(x[:, cut[0]], sa, cut[1], cut[2], mm)
            if halves is not None:
                break
        if halves is None or min(map(len, halves)) < least:
            done.append(rows)
        else:
            todo += [halves[1], halves[0]]  # the first half is cut (and numbered) first
    return done


def _halves(
    x: np.ndarray, rows: np.ndarray, size: int
) -> tuple[int, np.ndarray, np.ndarray] | None:
    """(QI, first half, second half): the rows cut along the widest QI at `blocks.even_aim`,
    so that blocks are of one size and cost the same per row at any table size. Equal values
    stay on one side, the boundary nearer the aim; None when the rows agree on every QI."""
    spans = np.array([np.ptp(x[rows, j]) for j in range(x.shape[1])])  # a QI at a time
    j = int(np.argmax(spans))
    if spans[j] <= 0:
        return None
    aim = even_aim(len(rows), size)
    col = x[rows, j]
    at = np.partition(col, int(aim))[int(aim)]
    below, upto = col < at, col <= at
    mask = below if below.sum() > 0 and aim - below.sum() < upto.sum() - aim else upto
    if mask.all():
        mask = below
    return j, rows[mask], rows[~mask]


def _rebalance(
    col: np.ndarray, sa: np.ndarray, a: np.ndarray, b: np.ndarray, m: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """Both halves m-eligible, moving the fewest rows of a value a half holds more than 1/m
    of (those nearest the cut along `col`: a lies below it) to the other half; None when
    that fails (a half left empty included)."""
    for _ in range(4):
        if not len(a) or not len(b):
            return None
        for first in (True, False):
            src = a if first else b
            counts = np.bincount(sa[src])
            v = int(counts.argmax())
            over = m * int(counts[v]) - len(src)
            if over > 0:
                break
        else:
            return a, b
        mine = src[sa[src] == v]
        nearest = np.argsort(col[mine], kind="stable")
        take = -(-over // (m - 1))  # count - take <= (size - take) / m
        go = mine[nearest[-take:]] if first else mine[nearest[:take]]
        rest = src[~np.isin(src, go)]
        a, b = (rest, np.concatenate([b, go])) if first else (np.concatenate([a, go]), rest)
    return None


def in_blocks(
    x: np.ndarray, sa: np.ndarray, k: int, l: int,  # noqa: E741
    size: int, rng: np.random.Generator | None = None, workers: int | None = None,
) -> CBGResult:  # fmt: skip
    """Algorithm 3.1 in blocks (`blocks`), on all cores. Why: a T_gen is taken by narrowing
    every row left to a small QI region (Algorithm 3.3), a pass over the table per T_gen,
    O(n^2 / beta) in all; in blocks of b rows it is O(n * b / beta). A T_gen's rows are
    QI-close anyway, so cutting the QI space first costs little. Each block is eligible as the
    table is, and Property 3.2 holds per T_gen, so (k,l) holds by construction as before.
    With `rng`, each block draws from its own generator seeded from it, and bucket ids are a
    permutation over all blocks (their order would show the cut); without, T_gens, groups and
    buckets are numbered block by block as the exact rule numbers them."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    sa = np.ascontiguousarray(sa, dtype=np.int64)
    parts = blocks(x, sa, k, l, size)
    seeds = rng.integers(0, 2**62, len(parts)) if rng is not None else [None] * len(parts)

    def one(b: int) -> CBGResult:
        local = None if seeds[b] is None else np.random.default_rng(int(seeds[b]))
        return cross_bucket(x[parts[b]], sa[parts[b]], k, l, local)

    order = sorted(range(len(parts)), key=lambda b: -len(parts[b]))  # largest first
    with ThreadPoolExecutor(max_workers=workers or cores()) as pool:
        done = dict(zip(order, pool.map(one, order), strict=True))
    n = len(sa)
    gid = np.full(n, -1, dtype=np.int64)
    bid = np.full(n, -1, dtype=np.int64)
    tgen = np.full(n, -1, dtype=np.int64)
    counts = [0, 0, 0]  # groups, buckets and T_gens numbered so far

    def number(rows: np.ndarray, res: CBGResult, keep: np.ndarray) -> None:
        """The kept rows' groups, buckets and T_gens, numbered on from those before."""
        if not keep.any():
            return
        for i, (out, ids) in enumerate(((gid, res.gid), (bid, res.bid), (tgen, res.tgen))):
            local = np.unique(ids[keep], return_inverse=True)[1].reshape(-1)
            out[rows[keep]] = local + counts[i] + (i < 2)
            counts[i] += int(local.max()) + 1

    for b, rows in enumerate(parts):
        res = done.pop(b)  # each block's ids go once numbered (memory, before the pool's run)
        # A block's last T_gens take what its rows have left, from all over the block: they
        # are dissolved with the rows it stranded, which then have more values to pair with.
        number(rows, res, (res.gid > 0) & (res.tgen < res.tgens - np.ceil(TAIL * res.tgens)))
    pool = np.flatnonzero(gid < 0)
    if len(pool) >= diversity_num(k, l):
        again = cross_bucket(x[pool], sa[pool], k, l, rng,
                             size if len(pool) < n // 2 else None)  # fmt: skip
        number(pool, again, again.gid > 0)
    if rng is not None:
        relabel = np.concatenate([[-1], rng.permutation(counts[1]) + 1])
        bid = relabel[np.maximum(bid, 0)]
    uneven = int((np.bincount(tgen[tgen >= 0]) % k != 0).sum())
    return CBGResult(gid, bid, counts[2], int((gid < 0).sum()), uneven, tgen)
