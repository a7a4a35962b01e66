"""Refresh by whole groups: two releases differ only by groups that appear or vanish whole.

A consumer who keeps two successive releases can diff them. If a refresh lets one new row join a
released group, or lets a group lose or change one row, the group's sensitive multiset moves by
exactly that person's value: a joiner's or leaver's value is read off the difference, and an
update shows the old value and the new. The `sealed` refresh policy never lets that happen:
1. a group of the latest release is kept, as it was, when every row it released is still in the
   source and unchanged (the map's fingerprint of its released columns): it is released again
   identically. With `moved` (k-member, Mondrian) a row whose QIs alone changed still counts:
   its group is kept when it shows exactly the values it showed, cells drawn around where its
   people are now (the values, all a diff could read, do not move);
2. every other row is pending: new rows, changed rows, and the rest of a group that lost or
   changed a row (the group is retired whole; its remaining rows are a block). With `repair`
   (k-member, Mondrian) a block first comes back with newcomers holding exactly the values its
   group lost, so the group shows the values it showed (m-invariance's signatures, Xiao & Tao
   2007, with real rows in the leavers' places rather than counterfeit ones: `Repair`), and
   newcomers left over form groups of their own. The other pending rows are grouped among
   themselves by the method's own algorithm, and a new group is released only when it keeps
   the promised models, keeps for every row of it that earlier releases showed k plausible rows
   and l plausible values (persist.History: the intersection guard), and passes the diff check
   below (with `repair`, also `_signature_kept`);
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

from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.centres import centres
from dbanon.algorithms.nearest import distance
from dbanon.algorithms.persist import Cluster, History, subset
from dbanon.core.groupsort import distinct

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


def same_values(
    previous: np.ndarray, kept: np.ndarray, tags: np.ndarray, shown: Shown
) -> np.ndarray:
    """Per row, whether its group's values now are the very values it showed last (with
    repeats): a group whose rows moved (QI updates) but whose values did not is released again
    with the same values, its cells drawn around where its people are now."""
    ids = distinct(previous[kept])
    before = shown(ids.tolist())
    order = np.flatnonzero(kept)
    order = order[np.lexsort((tags[order], previous[order]))]
    cuts = np.flatnonzero(np.diff(previous[order])) + 1
    ok = np.zeros(int(ids.max()) + 1, dtype=bool)
    for part in np.split(order, cuts):
        g = int(previous[part[0]])
        ok[g] = np.array_equal(tags[part], np.sort(before.get(g, np.zeros(0, np.int64))))
    return kept & ok[np.where(kept, previous, 0)]


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
    history: History | None = None, regroups: bool = False, repair: Repair | None = None,
    moved: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:  # fmt: skip
    """Group ids 0..g-1 of the rows (-1: withheld), the waiting block of each withheld row
    (-1: none; blocks numbered 0..), and the figures of the refresh. `previous`: each row's
    group in the map (-1: new or waiting alone, <= -2: waiting in a block); `tags`: value
    codes of the rows now; `shown(ids)`: the value codes those map groups showed.
    `regroups`: `cluster` groups the rows left over otherwise than before (full-domain's
    batches), so a round in which no group held is not the last. `repair`: first bring blocks
    back with newcomers holding their missing values (`Repair`). `moved`: rows whose QIs alone
    may have changed (not `unchanged`, a value their classes always showed): they keep their
    group when it shows exactly the values it showed (`same_values`), and stay in its block
    otherwise. A value that did change stays unread there: the block comes back only in a
    group showing every value its group showed (`_signature_kept`, which `moved` needs), so
    what the release shows is what it would show had the value not changed, and the diff
    check and the intersection guard judge it as such."""
    n = len(previous)
    previous = np.asarray(previous, dtype=np.int64)
    gid = np.full(n, -1, dtype=np.int64)
    if moved is None:
        kept = intact_groups(previous, unchanged, sizes)
    else:  # rows may have moved: the values must not have
        kept = intact_groups(previous, unchanged | moved, sizes)
        kept &= same_values(previous, kept, tags, shown) if kept.any() else kept
    gid[kept] = np.unique(previous[kept], return_inverse=True)[1].reshape(-1)
    groups = int(gid.max()) + 1 if kept.any() else 0
    # A block: the unchanged rows of a retired group (map id >= 0) or of a waiting one (<= -2).
    hopeless = history.hopeless_rows() if history is not None else np.zeros(n, dtype=bool)
    # A waiting row that changed is on its own now. A hopeless row stays in its block, which
    # then waits (were the block to come back without it, its value would be read against the
    # retired group's, unchecked).
    same = unchanged if moved is None else unchanged | moved
    origin = np.where(same & ~kept & (previous != -1), previous, -1)
    ids, sizes_now = np.unique(origin[origin != -1], return_counts=True)
    ids = ids.tolist()
    codes = int(tags.max(initial=0)) + 1
    before = shown(ids)
    codes = max([codes, *(int(v.max()) + 1 for v in before.values() if len(v))])
    count = {g: np.bincount(v, minlength=codes) for g, v in before.items()}
    block_size = dict(zip(ids, sizes_now.tolist(), strict=True))
    accept = _acceptance(holds, history, origin, count, block_size, tags, codes, k, needed,
                         keeps_signature=repair is not None)  # fmt: skip
    pool = np.flatnonzero(~kept & ~hopeless)
    made = repaired = 0
    if repair is not None:
        taken = repair.mend(origin, count, block_size, tags, codes, pool, accept)
        for rows in taken:
            gid[rows] = groups
            groups += 1
        repaired = len(taken)
        made += repaired
        if taken:
            pool = np.setdiff1d(pool, np.concatenate(taken))

    def round_(pool: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
        """The pool grouped by the method, blocks gathered: (groups accepted, parts left);
        None when the pool cannot be grouped on its own."""
        try:
            sub = np.unique(np.asarray(cluster(pool)), return_inverse=True)[1].reshape(-1)
        except ValueError:
            return None
        gather(sub, origin[pool])
        taken: list[np.ndarray] = [], []
        for part in range(int(sub.max()) + 1):
            rows = pool[sub == part]
            taken[0 if accept(rows) else 1].append(rows)
        return taken

    if repair is not None:  # newcomers left over group among themselves before blocks join
        never = history.history[pool] < 0 if history is not None else True
        fresh = pool[(origin[pool] == -1) & never]
        if len(fresh) >= k and (done := round_(fresh)) is not None:
            for rows in done[0]:
                gid[rows] = groups
                groups += 1
            made += len(done[0])
            if done[0]:
                pool = np.setdiff1d(pool, np.concatenate(done[0]))
    for _ in range(_ROUNDS):
        if len(pool) < k or (done := round_(pool)) is None:
            break  # the pool cannot be grouped on its own: it waits
        for rows in done[0]:
            gid[rows] = groups
            groups += 1
        made += len(done[0])
        if not done[0] and not regroups:
            break  # no group held: grouping the same rows again would not help
        pool = np.concatenate(done[1]) if done[1] else pool[:0]
    waiting = (gid < 0) & (origin != -1)
    block = np.full(n, -1, dtype=np.int64)
    block[waiting] = np.unique(origin[waiting], return_inverse=True)[1].reshape(-1)
    kept_ids = distinct(previous[kept])
    retired = np.setdiff1d(np.flatnonzero(sizes > 0), kept_ids, assume_unique=True)
    return gid, block, {
        "groups_kept": int(len(kept_ids)),
        "groups_retired": int(len(retired)),
        "groups_new": made,
        "groups_repaired": repaired,
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


def _signature_kept(origins: list[np.ndarray], shown: np.ndarray, gone: int, k: int,
                    needed: int) -> bool:  # fmt: skip
    """Whether a group that brings blocks back shows every value their groups showed (with
    repeats), so that a diff of each retired group against it loses nothing: what the leavers
    held is still all there. The diff check alone lets a block come back alone when its group
    kept k rows holding the leavers' possible values, though fewer than k rows vanish from it
    (a consumer reads the leavers' values off those few). What the group shows beyond a
    retired group's values came with newcomers: hidden among them and the `gone` leavers, no
    value more likely than 1/l."""
    for origin in origins:
        extra = shown - origin
        if (extra < 0).any():
            return False
        if needed > 1 and extra.any() and extra.max() * needed > extra.sum() + gone:
            return False
    return True


def _acceptance(
    holds: Holds, history: History | None, origin: np.ndarray, count: dict[int, np.ndarray],
    block_size: dict[int, int], tags: np.ndarray, codes: int, k: int, needed: int,
    keeps_signature: bool = False,
) -> Holds:  # fmt: skip
    """Whether a new group may be released: k rows, the models, the intersection guard, each
    block in it whole, and the diff check (module note); with `keeps_signature`, also
    `_signature_kept`."""

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
        shown_now = np.bincount(tags[rows], minlength=codes)
        gone, came = plausible([count[g] for g in mine], sizes, shown_now)
        missing = [g for g, n in zip(mine, sizes, strict=True) if count[g].sum() > n]
        if keeps_signature and not _signature_kept([count[g] for g in mine], shown_now,
                                                   sum(count[g].sum() - n for g, n in zip(
                                                       mine, sizes, strict=True)), k, needed):
            return False  # fmt: skip
        return all(diff_safe(x, k, needed) for g, x in zip(mine, gone, strict=True)
                   if g in missing) and (sum(sizes) == len(rows) or diff_safe(came, k, needed))

    return accept


class Repair:
    """Bring a block back at once, its group's values unchanged: m-invariance's way (Xiao &
    Tao 2007) of keeping every persisting row's group signature, with real newcomers in the
    leavers' places rather than counterfeit rows.

    A block (the unchanged rows of a retired or waiting group G) misses the values of G's
    people who left or changed: M, G's values as last released minus the block's. Newcomers
    (new or changed rows, in no block) holding exactly M, one per value, join the block; the
    group then shows G's values again, so the leavers' values stay what G showed (any of them,
    k rows and l values) and the newcomers' values are G's values too. Such a group passes the
    diff check (module note) and is still judged by it, the models and the intersection guard.
    The newcomer taken for a value is drawn, with the run's secret generator, from the
    `choices` holders of it nearest the block's centre (QI distance, dbanon.algorithms.persist),
    and blocks are mended in a secret order. What a consumer can tell: that a newcomer took a
    leaver's place in G, so the two hold the same value, one of G's (the concession
    m-invariance makes); not which value, nor which leaver when several left.
    """

    def __init__(self, qi: QIArrays, rng: np.random.Generator, choices: int = 3) -> None:
        self.qi, self.rng, self.choices = qi, rng, choices

    def mend(
        self, origin: np.ndarray, count: dict[int, np.ndarray], block_size: dict[int, int],
        tags: np.ndarray, codes: int, pool: np.ndarray, accept: Holds,
    ) -> list[np.ndarray]:  # fmt: skip
        """The groups made: each a whole block and the newcomers in its leavers' places. Work
        per block is its own rows and the newcomers holding its missing values (indexed once),
        never a pass over the table."""
        if not block_size:
            return []
        newcomers = pool[origin[pool] == -1]
        free = np.zeros(len(origin), dtype=bool)
        free[newcomers] = True
        inpool = np.zeros(len(origin), dtype=bool)
        inpool[pool] = True
        by_value = np.argsort(tags[newcomers], kind="stable")
        value_cuts = np.searchsorted(tags[newcomers][by_value], np.arange(codes + 1))
        holders_of = [newcomers[by_value[value_cuts[v] : value_cuts[v + 1]]] for v in range(codes)]
        inblock = np.flatnonzero(origin != -1)
        inblock = inblock[np.argsort(origin[inblock], kind="stable")]
        ids, starts = np.unique(origin[inblock], return_index=True)
        rows_of = dict(zip(ids.tolist(), np.split(inblock, starts[1:]), strict=True))
        blocks = sorted(block_size)
        out = []
        for g in (blocks[i] for i in self.rng.permutation(len(blocks))):
            rows = rows_of.get(g, inblock[:0])
            if len(rows) != block_size[g] or not inpool[rows].all():
                continue  # a row of it cannot be placed now: the block waits whole
            missing = count[g] - np.bincount(tags[rows], minlength=codes)
            if (missing < 0).any() or not missing.any():
                continue  # not G's rows as released (cannot be mended to its values)
            cnum, ccat = centres(subset(self.qi, rows), np.zeros(len(rows), dtype=np.int64), 1)
            picked: list[int] = []
            for v in np.repeat(np.arange(codes), missing).tolist():
                holders = holders_of[v][free[holders_of[v]]]
                holders = holders[~np.isin(holders, picked)]
                if not len(holders):
                    break
                d = distance(self.qi, self.qi.num[holders], self.qi.cat[holders], cnum, ccat)
                near = holders[np.argsort(d[:, 0], kind="stable")[: self.choices]]
                picked.append(int(near[self.rng.integers(len(near))]))
            else:
                group = np.concatenate([rows, np.asarray(picked, dtype=np.int64)])
                if accept(group):
                    free[picked] = False
                    inpool[group] = False
                    out.append(group)
        return out
