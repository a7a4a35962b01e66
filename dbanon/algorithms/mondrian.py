"""Strict multidimensional Mondrian (LeFevre, DeWitt, Ramakrishnan, ICDE 2006).

Top-down kd-tree style partitioning: a partition is cut on the QI with the widest normalised span,
at the median for a numeric QI and into the children of the values' LCA for a categorical one. A
cut is made only if every part satisfies the model (at least k rows and, optionally, l-diversity);
a partition with no allowable cut on any QI becomes an equivalence class. It is the
"centre-point partitioning" baseline of the k-member paper and the Mondrian baseline of the
personalised-privacy thesis: fast (O(n log n)), but blind to the cost a cut causes.

The recursion runs in numba over one permutation of the row ids: a partition is a slice of it
and a cut reorders the slice in place (a stable counting sort by part), so each level of the tree
costs O(n x QIs) and nothing is allocated per row.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from dbanon.algorithms.base import QIArrays

L_KINDS = ("distinct", "entropy", "recursive", "frequency")
# Entropy of an exactly uniform spread over l values must count as log(l) despite rounding.
ENTROPY_TOLERANCE = 1e-9


@njit(cache=True)
def _diverse(hist: np.ndarray, kind: int, l: int, c: float) -> bool:  # noqa: E741
    """Whether a part with sensitive-code counts `hist` is l-diverse (kind 0: no l model)."""
    if kind == 0:
        return True
    if kind == 1:
        distinct = 0
        for v in hist:
            if v > 0:
                distinct += 1
        return distinct >= l
    if kind == 2:
        total = 0
        acc = 0.0
        for v in hist:
            if v > 0:
                total += v
                acc += v * np.log(v)
        return np.log(total) - acc / total >= np.log(l) - ENTROPY_TOLERANCE
    if kind == 4:  # frequency (the thesis's p <= 1/l): no value above 1/l of the part
        total = 0
        top = 0
        for v in hist:
            total += v
            top = max(top, v)
        return top * l <= total
    # Recursive (c, l): r_1 < c * (r_l + ... + r_m), counts in decreasing order.
    counts = hist.copy()
    counts.sort()
    return counts[-1] < c * counts[: max(len(counts) - l + 1, 0)].sum()


@njit(cache=True)
def _select(a: np.ndarray, kth: int) -> float:
    """The kth smallest value of `a`, which is reordered: Hoare's quickselect.

    Hand-written because numba's np.partition takes seconds to compile; the median-of-three
    pivot and the swapping of pivot-equal values keep runs of duplicates balanced.
    """
    lo, hi = 0, len(a) - 1
    while lo < hi:
        x, y, z = a[lo], a[(lo + hi) // 2], a[hi]
        pivot = max(min(x, y), min(max(x, y), z))
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        # Now a[lo..j] <= pivot <= a[i..hi], and everything strictly between equals pivot.
        if kth <= j:
            hi = j
        elif kth >= i:
            lo = i
        else:
            return a[kth]
    return a[kth]


@njit(cache=True)
def _cut_numeric(
    col: np.ndarray, idx: np.ndarray, lo: int, hi: int, vals: np.ndarray, lab: np.ndarray,
    sens: np.ndarray, total: np.ndarray, k: int, kind: int, l: int, c: float,  # noqa: E741
) -> int:
    """Label idx[lo:hi] 0/1 by a cut at the median; 2 if both sides satisfy the model, else 0.

    Strict partitioning cannot separate equal values, so a median value with many duplicates
    leaves two candidate cuts, just below and just above its run of rows (the reference code
    only tries "<= median" and gives up on the dimension when that leaves < k rows on the right,
    which on Adult with alphabetically coded categories, where White and United-States come
    last, almost never cuts race or native-country: NCP 32 % instead of 8 %).
    The more balanced allowable one is taken; when neither is, the caller tries the next
    dimension. For k alone no other cut can be allowable: every other value boundary lies
    beyond one of the two.
    """
    s = hi - lo
    for t in range(s):
        vals[t] = col[idx[lo + t]]
    median = _select(vals[:s], s // 2 - 1)  # the lower median, as the reference
    below = 0  # rows < median
    upto = 0  # rows <= median
    for t in range(lo, hi):
        v = col[idx[t]]
        if v < median:
            below += 1
        if v <= median:
            upto += 1
    for attempt in range(2):
        # First the cut nearer to s/2 ("<= median" on a tie), then the other.
        above_first = upto - s / 2 <= s / 2 - below
        inclusive = above_first if attempt == 0 else not above_first
        left = upto if inclusive else below
        if left < k or s - left < k:
            continue
        for t in range(lo, hi):
            v = col[idx[t]]
            lab[t] = 0 if (v <= median if inclusive else v < median) else 1
        if kind == 0:
            return 2
        hist = np.zeros_like(total)
        for t in range(lo, hi):
            if lab[t] == 0:
                hist[sens[idx[t]]] += 1
        if _diverse(hist, kind, l, c) and _diverse(total - hist, kind, l, c):
            return 2
    return 0


@njit(cache=True)
def _cut_categorical(
    codes: np.ndarray, anc: np.ndarray, level: int, idx: np.ndarray, lo: int, hi: int,
    lab: np.ndarray, slot: np.ndarray, kids: np.ndarray, sens: np.ndarray, n_sens: int, k: int,
    kind: int, l: int, c: float,  # noqa: E741
) -> int:
    """Label idx[lo:hi] by the child (at `level` - 1) of the LCA its leaf lies under.

    Returns the number of children met (parts ordered by child node id) if every part satisfies
    the model, else 0. `slot` (all -1 on entry and exit) maps node id to part number.
    """
    nk = 0
    for t in range(lo, hi):
        child = anc[codes[idx[t]], level - 1]
        lab[t] = child
        if slot[child] < 0:
            slot[child] = 0
            kids[nk] = child
            nk += 1
    kids[:nk].sort()
    for i in range(nk):
        slot[kids[i]] = i
    size = np.zeros(nk, np.int64)
    for t in range(lo, hi):
        lab[t] = slot[lab[t]]
        size[lab[t]] += 1
    for i in range(nk):
        slot[kids[i]] = -1
    if nk < 2 or size.min() < k:  # < 2 cannot happen below a true LCA; never loop on one part
        return 0
    if kind != 0:
        hist = np.zeros((nk, n_sens), np.int64)
        for t in range(lo, hi):
            hist[lab[t], sens[idx[t]]] += 1
        for i in range(nk):
            if not _diverse(hist[i], kind, l, c):
                return 0
    return nk


@njit(cache=True, nogil=True)
def _mondrian(
    num: np.ndarray, cat: np.ndarray, lca: np.ndarray, height: np.ndarray, anc: np.ndarray,
    levels: np.ndarray, sens: np.ndarray, n_sens: int, k: int, kind: int, l: int,  # noqa: E741
    c: float, idx: np.ndarray, roots: np.ndarray, first: np.ndarray,
) -> np.ndarray:
    """Partition ids in depth-first, left-to-right order of the cut tree of each root in
    turn: root r is the rows idx[roots[r]:roots[r + 1]] (reordered in place), partitioned as
    a call on those rows alone would (a cut reads only its partition's rows, and the
    l-diversity tests read counts, not which code is which); rows of no root get -1. Only
    idx[roots[0]:roots[-1]] is read or written, so calls on disjoint ranges can run at once.

    With a non-empty `first`: only the first root's own cut, its parts' bounds written to
    first[0..parts] (-1 after them); rows of an uncut root get id 0 and first stays -1."""
    p, q, n = num.shape[0], cat.shape[0], sens.shape[0]
    base = roots[0]
    m = roots[-1] - base
    ix = idx[base : base + m]  # the roots' rows: positions from here on are relative to base
    buf = np.empty(m, np.int64)
    lab = np.empty(m, np.int64)
    vals = np.empty(m, np.float64)
    gid = np.full(n, -1, np.int32)
    # Pending partitions are disjoint and hold >= k >= 1 rows each (or are roots): at most m.
    stack_lo = np.empty(m + len(roots), np.int64)
    stack_hi = np.empty(m + len(roots), np.int64)
    top = 0
    for r in range(len(roots) - 2, -1, -1):  # pushed in reverse: the first root comes first
        stack_lo[top], stack_hi[top] = roots[r] - base, roots[r + 1] - base
        top += 1
    spans = np.empty(p + q, np.float64)
    order = np.empty(p + q, np.int64)
    lca_node = np.empty(q, np.int64)
    slot = np.full(anc.shape[1], -1, np.int64)
    kids = np.empty(anc.shape[1], np.int64)
    total = np.zeros(n_sens, np.int64)
    g = 0
    while top > 0:
        top -= 1
        lo, hi = stack_lo[top], stack_hi[top]
        parts = 0
        if hi - lo >= 2 * k:  # otherwise no cut can leave k rows on both sides
            for j in range(p):
                lo_v, hi_v = np.inf, -np.inf
                for t in range(lo, hi):
                    v = num[j, ix[t]]
                    lo_v = min(lo_v, v)
                    hi_v = max(hi_v, v)
                spans[j] = hi_v - lo_v
            for j in range(q):
                a = cat[j, ix[lo]]
                for t in range(lo + 1, hi):
                    a = lca[j, a, cat[j, ix[t]]]
                lca_node[j] = a
                spans[p + j] = height[j, a]
            if kind != 0:
                total[:] = 0
                for t in range(lo, hi):
                    total[sens[ix[t]]] += 1
            # Widest first; a stable sort breaks ties by QI position (numeric QIs first).
            # Insertion sort: a handful of QIs, and np.argsort(kind="mergesort") compiles slowly.
            for i in range(p + q):
                order[i] = i
                b = i
                while b > 0 and spans[order[b - 1]] < spans[order[b]]:
                    order[b - 1], order[b] = order[b], order[b - 1]
                    b -= 1
            for dim in order:
                if spans[dim] <= 0.0:
                    break
                if dim < p:
                    parts = _cut_numeric(num[dim], ix, lo, hi, vals, lab, sens, total, k, kind,
                                         l, c)
                else:
                    j = dim - p
                    parts = _cut_categorical(cat[j], anc[j], levels[j, lca_node[j]], ix, lo, hi,
                                             lab, slot, kids, sens, n_sens, k, kind, l, c)
                if parts:
                    break
        if parts == 0:
            for t in range(lo, hi):
                gid[ix[t]] = g
            g += 1
            continue
        start = np.zeros(parts + 1, np.int64)
        for t in range(lo, hi):
            start[lab[t] + 1] += 1
        start = np.cumsum(start) + lo
        pos = start[:-1].copy()
        for t in range(lo, hi):
            buf[pos[lab[t]]] = ix[t]
            pos[lab[t]] += 1
        ix[lo:hi] = buf[lo:hi]
        if len(first):
            for part in range(parts + 1):
                first[part] = start[part] + base
            return gid
        for part in range(parts - 1, -1, -1):  # pushed in reverse: the first part comes first
            stack_lo[top], stack_hi[top] = start[part], start[part + 1]
            top += 1
    return gid


def _sensitive_codes(
    sensitive: np.ndarray, n: int, l: int, l_kind: str, c: float  # noqa: E741
) -> tuple[np.ndarray, int]:
    """Dense codes of the sensitive column, after checking that the whole table is l-diverse.

    Every kind here survives taking the union of parts (distinct values add up, entropy is
    concave, r_1 / (r_l + ... + r_m) of a union is at most the largest over its parts, and so is
    the largest value's share), so a
    table that fails as a whole has no l-diverse partition: say so instead of returning one class
    that breaks the model.
    """
    sens = np.asarray(sensitive)
    if sens.shape != (n,):
        raise ValueError(f"sensitive has shape {sens.shape}, expected ({n},)")
    values, codes, counts = np.unique(sens, return_inverse=True, return_counts=True)
    counts = counts.astype(np.int64)
    if not _diverse(counts, L_KINDS.index(l_kind) + 1, l, c):
        top = int(np.argmax(counts))
        raise ValueError(
            f"the table is not {l_kind} {l}-diverse as a whole"
            f"{f' (c={c})' if l_kind == 'recursive' else ''}, so no partition of it can be: "
            f"sensitive code {values[top].item()!r} holds {counts[top] / n:.1%} of the {n} rows "
            f"({len(values)} distinct values)"
        )
    return np.ascontiguousarray(codes.reshape(-1), dtype=np.int64), len(values)


def _hierarchy_tables(qi: QIArrays) -> tuple[np.ndarray, np.ndarray]:
    """Ancestor of every node at every level, and every node's level, padded like `qi.lca`."""
    q, m = qi.cat.shape[1], qi.lca.shape[1]
    if len(qi.hierarchies) != q:
        raise ValueError(f"QIArrays has {q} categorical columns but {len(qi.hierarchies)} "
                         "hierarchies; Mondrian cuts categorical values along their hierarchy")
    depth = max((h.height for h in qi.hierarchies), default=0) + 1
    anc = np.full((q, m, depth), -1, dtype=np.int32)
    levels = np.zeros((q, m), dtype=np.int32)
    for j, h in enumerate(qi.hierarchies):
        table = h.ancestor_table()
        anc[j, : table.shape[0], : table.shape[1]] = table
        levels[j, : len(h.levels)] = h.levels
    return anc, levels


def mondrian(
    qi: QIArrays,
    k: int,
    *,
    sensitive: np.ndarray | None = None,
    l: int = 1,  # noqa: E741 - the paper's name
    l_kind: str = "distinct",
    c: float = 1.0,
) -> np.ndarray:
    """int32[n] partition ids 0..g-1 of strict Mondrian with k-anonymity (and l-diversity).

    Every part has >= k rows; with `sensitive` (one code per row) and l > 1 every part is also
    l-diverse of kind `l_kind`: "distinct" (>= l distinct codes), "entropy" (entropy >= log l)
    "recursive" ((c, l): r_1 < c (r_l + ... + r_m)) or "frequency" (no code above 1/l of the
    part: the thesis's p <= 1/l, Anatomy's eligibility). Raises ValueError if the whole table
    already fails the model, since then no partition can satisfy it.
    """
    return _run(qi, k, sensitive, l, l_kind, c, None)


def mondrian_many(
    qi: QIArrays,
    k: int,
    roots: list[np.ndarray],
    *,
    sensitive: np.ndarray | None = None,
    l: int = 1,  # noqa: E741 - the paper's name
    l_kind: str = "distinct",
    c: float = 1.0,
) -> list[np.ndarray]:
    """`mondrian` of each root's rows (disjoint row indexes of qi, each in the order a call on
    subset(qi, rows) would see them), in one compiled call: per root, the partition ids that
    call gives (a refresh tries a split of each of its thousand largest groups). A root the
    model cannot partition is one part here, where that call raises ValueError; raises
    ValueError when the whole table fails the model."""
    return _run(qi, k, sensitive, l, l_kind, c, roots)


def _run(
    qi: QIArrays, k: int, sensitive: np.ndarray | None, l: int, l_kind: str,  # noqa: E741
    c: float, roots: list[np.ndarray] | None,
) -> np.ndarray | list[np.ndarray]:  # fmt: skip
    """`mondrian` (roots None: the whole table) or `mondrian_many`."""
    n = qi.n
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if l < 1:
        raise ValueError(f"l must be at least 1, got {l}")
    if l_kind not in L_KINDS:
        raise ValueError(f"unknown l-diversity kind {l_kind!r}; expected one of {L_KINDS}")
    if l_kind == "recursive" and not c > 0:
        raise ValueError(f"recursive (c, l)-diversity needs c > 0, got {c}")
    if n < k:
        raise ValueError(f"the table has {n} rows, fewer than k={k}: it cannot be {k}-anonymous")
    if np.isnan(qi.num).any():
        raise ValueError("numeric QI values contain NaN; Mondrian needs every value ordered")
    if l > 1:
        if sensitive is None:
            raise ValueError(f"l={l} needs the sensitive column's codes (sensitive=...)")
        sens, n_sens = _sensitive_codes(sensitive, n, l, l_kind, c)
        kind = L_KINDS.index(l_kind) + 1
    else:
        sens, n_sens, kind = np.zeros(n, dtype=np.int64), 1, 0
    anc, levels = _hierarchy_tables(qi)
    if roots is None:
        idx, bounds = np.arange(n, dtype=np.int64), np.array([0, n], dtype=np.int64)
    else:
        idx = np.concatenate([np.asarray(r, dtype=np.int64) for r in roots] or [np.zeros(0, int)])
        bounds = np.r_[0, np.cumsum([len(r) for r in roots])].astype(np.int64)
    args = (
        np.ascontiguousarray(qi.num.T, dtype=np.float64),
        np.ascontiguousarray(qi.cat.T, dtype=np.int32),
        np.ascontiguousarray(qi.lca, dtype=np.int32),
        np.ascontiguousarray(qi.height, dtype=np.float64),
        anc, levels, sens, int(n_sens), int(k), kind, int(l), float(c), idx,
    )  # fmt: skip
    if roots is None:
        return _whole(args, n, anc.shape[1] + 2)
    gid = _mondrian(*args, bounds, np.zeros(0, np.int64))
    return [gid[r] - gid[r].min() if len(r) else gid[r] for r in roots]  # ids from 0


# Rows from which a whole table's tree is grown on every core: below, threads cost more than
# they save.
THREADED_ROWS = 100_000


def _whole(args: tuple, n: int, most_parts: int, workers: int | None = None) -> np.ndarray:
    """The whole table's partition ids. From THREADED_ROWS rows, the root's cut is made first
    and its parts' subtrees grown in threads, the parts in order split into one contiguous run
    per core (the kernel releases the GIL and each call touches only its rows): the ids are
    those of one call, the first run's first (0.76 -> 0.5 s of a 1M-row publish on 2 cores)."""
    from dbanon.algorithms.blocks import cores

    whole = np.array([0, n], dtype=np.int64)
    workers = workers or cores()
    if n < THREADED_ROWS or workers < 2:
        return _mondrian(*args, whole, np.zeros(0, np.int64))
    first = np.full(most_parts, -1, np.int64)
    gid = _mondrian(*args, whole, first)
    starts = first[first >= 0]
    if len(starts) < 3:  # the root was not cut: one class
        return gid
    del gid  # every row's id is the threads' (memory: a publish's peak is near here)
    # the parts in order, in runs of about n / workers rows: each run ends at the boundary
    # between parts nearest its share
    inner = starts[1:-1]
    shares = np.arange(1, workers) * n / workers
    cuts = sorted({int(np.abs(inner - t).argmin()) + 1 for t in shares})
    runs = np.split(np.arange(len(starts) - 1), cuts)
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        parts = list(pool.map(
            lambda run: _mondrian(*args, starts[run[0] : run[-1] + 2], np.zeros(0, np.int64)),
            runs,
        ))  # fmt: skip
    out = parts[0]  # the first run's ids stand; each later run's follow the ones before
    offset = int(out.max(initial=-1)) + 1
    for part in parts[1:]:
        held = part >= 0
        out[held] = part[held] + offset
        offset += int(part.max(initial=-1)) + 1
    return out
