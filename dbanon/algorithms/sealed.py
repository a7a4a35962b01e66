"""Refresh by whole groups: two releases differ only by groups that appear or vanish whole.

A consumer who keeps two successive releases can diff them. If a refresh lets one new row join a
released group, or lets a group lose or change one row, the group's sensitive multiset moves by
exactly that person's value: a joiner's or leaver's value is read off the difference, and an
update shows the old value and the new. The `sealed` refresh policy holds rows back instead, as
in "hold new rows until they can form groups of their own" (m-invariance, Xiao & Tao 2007, pads
groups with counterfeit rows to the same end; dbanon never releases rows that do not exist):
1. a group of the latest release is kept, as it was, when every row it released is still in the
   source and unchanged (the map's fingerprint of its released columns): it is released again
   identically;
2. every other row is pending: new rows, changed rows, and the rest of a group that lost or
   changed a row (the group is retired whole; its remaining rows are a block). Pending rows are
   grouped among themselves by the method's own algorithm, and a new group is released only
   when it keeps the promised models, keeps for every row of it that earlier releases showed k
   plausible rows and l plausible values (persist.History: the intersection guard), and passes
   the diff check below;
3. pending rows that form no such group, and rows whose plausible values too few rows of the
   whole table still hold, wait (withheld) until a later refresh can group them; a block waits
   as a block. The method's algorithm knows nothing of blocks, so each block is first moved
   whole into the new group that took most of its rows (`gather`).
The diff check. An attacker who knows everyone's QIs knows which people a retired group G and a
new group G' share (the block R), and sees the values of both (multisets S and S'). The values
of G's missing people are S minus R's values, and R's values are some multiset M within both S
and S' (I: their common part, |M| = |R|). A value v is then plausible for a missing person when
some such M leaves a copy of v in S - M: when |I| > |R| or I holds fewer v than S; likewise for
G''s newcomers against S'. With several blocks in one group the values of all of them must fit
at once (a small transportation problem, solved as a max flow). A new group is released only
when each side keeps k plausible rows and l plausible values and each block lies in it whole.
So between any two releases each class changes by whole groups: a joiner's value is one of a
new group's values, a leaver's one of a retired group's (which the earlier release showed), and
a block comes back only where the values it lost stay hidden. The price is rows withheld
(`withheld_rows`), never a refused run: a sealed refresh does not jam.

Pure arrays in, group ids out (-1: withheld).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dbanon.algorithms.persist import Cluster, History

Holds = Callable[[np.ndarray], bool]
Shown = Callable[[list[int]], dict[int, np.ndarray]]  # group ids -> value codes they showed
_ROUNDS = 3  # times the rows left over are grouped again among themselves


def intact_groups(previous: np.ndarray, unchanged: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per row, whether its previous group is released again as it was: every row the group
    released is here, unchanged (`sizes`: each group's size as released)."""
    here = (previous >= 0) & unchanged
    counts = np.bincount(previous[here], minlength=len(sizes))
    whole = np.zeros(max(len(counts), 1), dtype=bool)  # a first run: no group, nothing whole
    whole[: len(sizes)] = (counts[: len(sizes)] == sizes) & (sizes > 0)
    return here & whole[np.where(here, previous, 0)]


def _feasible(origins: list[np.ndarray], sizes: list[int], shown: np.ndarray) -> bool:
    """Whether the blocks' values can be some M_i within their origins (M_i <= origins[i],
    |M_i| = sizes[i]) that together fit in the group's values (sum M_i <= shown): a
    transportation problem, solved as a max flow (source -> blocks -> values -> sink) by
    shortest augmenting paths; the graph is tiny (a few blocks, the values present)."""
    m, d = len(origins), len(shown)
    n = m + d + 2
    src, sink = m + d, m + d + 1
    cap = np.zeros((n, n), dtype=np.int64)
    cap[src, :m] = sizes
    for i, o in enumerate(origins):
        cap[i, m : m + d] = o
    cap[m : m + d, sink] = shown
    total = 0
    while True:
        prev = np.full(n, -1)
        prev[src] = src
        queue = [src]
        while queue and prev[sink] < 0:
            x = queue.pop(0)
            for y in np.flatnonzero((cap[x] > 0) & (prev < 0)).tolist():
                prev[y] = x
                queue.append(y)
        if prev[sink] < 0:
            return total == sum(sizes)
        push, y = np.iinfo(np.int64).max, sink
        while y != src:
            push, y = min(push, int(cap[prev[y], y])), int(prev[y])
        y = sink
        while y != src:
            cap[prev[y], y] -= push
            cap[y, prev[y]] += push
            y = int(prev[y])
        total += push


def plausible(
    origins: list[np.ndarray], sizes: list[int], shown: np.ndarray
) -> tuple[list[np.ndarray], np.ndarray]:
    """What an attacker who knows which people a new group shares with retired groups (its
    blocks: `sizes` rows of each, whose groups showed `origins`) cannot rule out: per block,
    the value counts of its group's missing people restricted to values some of them may have,
    and the same for the group's newcomers (values counts `shown`). A value v is plausible for
    a block's missing people when the blocks' values can fit with one copy of v left out of
    that block's, and for a newcomer when they fit with one copy of v left over."""
    gone = []
    for i, origin in enumerate(origins):
        ok = np.zeros_like(origin)
        for v in np.flatnonzero(origin > 0).tolist():
            less = [o.copy() for o in origins]
            less[i][v] -= 1
            if _feasible(less, sizes, shown):
                ok[v] = origin[v]
        gone.append(ok)
    came = np.zeros_like(shown)
    if sum(sizes) < shown.sum():
        for v in np.flatnonzero(shown > 0).tolist():
            room = shown.copy()
            room[v] -= 1
            if _feasible(origins, sizes, room):
                came[v] = shown[v]
    return gone, came


def diff_safe(counts: np.ndarray, k: int, needed: int) -> bool:
    return bool(counts.sum() >= k and (counts > 0).sum() >= needed)


def seal_groups(
    previous: np.ndarray, unchanged: np.ndarray, sizes: np.ndarray, cluster: Cluster,
    holds: Holds, k: int, needed: int, tags: np.ndarray, shown: Shown,
    history: History | None = None, regroups: bool = False,
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:  # fmt: skip
    """Group ids 0..g-1 of the rows (-1: withheld), the waiting block of each withheld row
    (-1: none; blocks numbered 0..), and the figures of the refresh. `previous`: each row's
    group in the map (-1: new or waiting alone, <= -2: waiting in a block); `tags`: value
    codes of the rows now; `shown(ids)`: the value codes those map groups showed.
    `regroups`: `cluster` groups the rows left over otherwise than before (full-domain's
    batches), so a round in which no group held is not the last."""
    n = len(previous)
    previous = np.asarray(previous, dtype=np.int64)
    gid = np.full(n, -1, dtype=np.int64)
    kept = intact_groups(previous, unchanged, sizes)
    gid[kept] = np.unique(previous[kept], return_inverse=True)[1].reshape(-1)
    groups = int(gid.max()) + 1 if kept.any() else 0
    # A block: the unchanged rows of a retired group (map id >= 0) or of a waiting one (<= -2).
    hopeless = history.hopeless_rows() if history is not None else np.zeros(n, dtype=bool)
    # A waiting row that changed is on its own now. A hopeless row stays in its block, which
    # then waits (were the block to come back without it, its value would be read against the
    # retired group's, unchecked).
    origin = np.where(unchanged & ~kept & (previous != -1), previous, -1)
    ids, sizes_now = np.unique(origin[origin != -1], return_counts=True)
    ids = ids.tolist()
    codes = int(tags.max(initial=0)) + 1
    before = shown(ids)
    codes = max([codes, *(int(v.max()) + 1 for v in before.values() if len(v))])
    count = {g: np.bincount(v, minlength=codes) for g, v in before.items()}
    block_size = dict(zip(ids, sizes_now.tolist(), strict=True))
    accept = _acceptance(holds, history, origin, count, block_size, tags, codes, k, needed)
    pool = np.flatnonzero(~kept & ~hopeless)
    made = 0
    for _ in range(_ROUNDS):
        if len(pool) < k:
            break
        try:
            sub = np.unique(np.asarray(cluster(pool)), return_inverse=True)[1].reshape(-1)
        except ValueError:
            break  # the pool cannot be grouped on its own: it waits
        gather(sub, origin[pool])
        left = []
        parts = int(sub.max()) + 1
        for part in range(parts):
            rows = pool[sub == part]
            if accept(rows):
                gid[rows] = groups
                groups += 1
                made += 1
            else:
                left.append(rows)
        if len(left) == parts and not regroups:
            break  # no group held: grouping the same rows again would not help
        pool = np.concatenate(left) if left else pool[:0]
    waiting = (gid < 0) & (origin != -1)
    block = np.full(n, -1, dtype=np.int64)
    block[waiting] = np.unique(origin[waiting], return_inverse=True)[1].reshape(-1)
    retired = np.setdiff1d(np.flatnonzero(sizes > 0), np.unique(previous[kept]))
    return gid, block, {
        "groups_kept": int(len(np.unique(previous[kept]))),
        "groups_retired": int(len(retired)),
        "groups_new": made,
        "withheld_rows": int((gid < 0).sum()),
        "blocks_waiting": int(block.max(initial=-1)) + 1,
        "persisting_rows": int((previous >= 0).sum()),
    }


def gather(part: np.ndarray, block: np.ndarray) -> None:
    """Put each block's rows in the one part that holds most of them (in place): a block comes
    back whole or not at all, and the method's algorithm knows nothing of blocks."""
    inblock = np.flatnonzero(block != -1)
    if not len(inblock):
        return
    pairs, counts = np.unique(np.stack([block[inblock], part[inblock]]), axis=1,
                              return_counts=True)  # fmt: skip
    best: dict[int, tuple[int, int]] = {}
    for (b, q), n in zip(pairs.T.tolist(), counts.tolist(), strict=True):
        if b not in best or n > best[b][1]:
            best[b] = (q, n)
    for b, (q, _) in best.items():
        part[block == b] = q


def _acceptance(
    holds: Holds, history: History | None, origin: np.ndarray, count: dict[int, np.ndarray],
    block_size: dict[int, int], tags: np.ndarray, codes: int, k: int, needed: int,
) -> Holds:  # fmt: skip
    """Whether a new group may be released: k rows, the models, the intersection guard, each
    block in it whole, and the diff check (module note)."""

    def accept(rows: np.ndarray) -> bool:
        if len(rows) < k or not holds(rows) or (history is not None and not history.holds(rows)):
            return False
        mine = np.unique(origin[rows])
        mine = mine[mine != -1].tolist()
        if not mine:
            return True  # only rows no release showed in a group (new or changed ones)
        sizes = [int((origin[rows] == g).sum()) for g in mine]
        if any(n != block_size[g] for g, n in zip(mine, sizes, strict=True)):
            return False  # a block comes back whole, in one group
        gone, came = plausible([count[g] for g in mine], sizes,
                               np.bincount(tags[rows], minlength=codes))  # fmt: skip
        missing = [g for g, n in zip(mine, sizes, strict=True) if count[g].sum() > n]
        return all(diff_safe(x, k, needed) for g, x in zip(mine, gone, strict=True)
                   if g in missing) and (sum(sizes) == len(rows) or diff_safe(came, k, needed))

    return accept
