"""Partitioned k-member: Mondrian-style cuts into blocks, the exact greedy rule inside each block,
blocks clustered in parallel.

Why: the exact rule's cost grows as n^1.5-2 on mostly distinct rows (200 s for 1M rows), while
each cluster only ever takes rows near its seed. Cutting the QI space first, as Mondrian does,
keeps near rows together and bounds the work to n x block size.

Two things cost quality: each block ends its greedy run with a few loose clusters of the rows
left over, and clusters at a block's edge lose the neighbours across it; both grow with the
number of blocks. So after the blocks, one fix-up round dissolves the loosest 30 % of the
clusters and clusters their rows again (in blocks cut anew if they are many). On Adult's 30,162
rows in 8,000-row blocks: NCP 7.92 % by heights without the round, 7.57 % with it, 7.83 % for
the exact rule. On 100,000 census-like rows (`dbanon experiment kmember-scale`; exact 3.79 %):
4,000-row blocks 4.69 %, 16,000-row blocks (the default) 3.71 %; at 300,000 rows, exact 1.55 %,
16,000-row blocks 1.79 %.

Decisions, where the issue leaves them open:
- A block of more than `block_size` rows is cut in two along one QI at a value boundary (equal
  values stay on one side), leaving at least a quarter of its rows on each side where it can.
  Categorical QIs are cut first, leaves ordered depth-first so that subtrees are contiguous: the
  cut whose crossing costs most (what a cluster pays at least for holding rows of both sides,
  the cost of the LCA of the two leaves next to the cut: sex, the two branches of a tree's
  root, or two values of a QI without hierarchy, before two leaves of one branch), then the
  most balanced. The greedy rule itself rarely puts such rows together, so these cuts cost
  next to nothing (on 30,000 census-like rows made from Adult, one cut on any categorical QI
  moved NCP by -0.17..+0.14 pt, a median cut on a numeric one by +0.6..+0.8 pt). Only when no
  categorical cut remains is the block cut at the median of its widest numeric QI (normalised
  extent); failing balance, the most balanced cut of any QI is taken. A block whose rows agree
  on every QI, or that cannot be cut leaving k rows on both sides, stays whole (then it may
  exceed `block_size`).
- So no block ever holds fewer than k rows: the fix-up of small blocks is made unnecessary by
  construction (and asserted). Inside a block the exact rule's own step 4 places the last rows
  (fewer than k) into the block's clusters, so every cluster still has k..2k-1 rows; the fix-up
  round re-clusters whole clusters (each of at least k rows), so that stays true.
- Blocks run on all cores in threads: the greedy rule is compiled with the GIL released.
  Clusters are numbered block by block in cut order, whatever order threads finish in.
- Each block gets its own seed, drawn from `seed`: the result depends only on data, k, options
  and seed, not on the number of cores.
- The (p,k) variant is partitioned too: a cut is kept only if both sides also hold at least p
  distinct sensitive values (the exact rule needs them to start a cluster in each block); a
  block whose best cut fails that stays whole. The fix-up round pools whole clusters, each
  with p values already, so its blocks can always be clustered.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from threading import Lock

import numpy as np
from numba import njit

from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.forked import cores  # noqa: F401 - also this module's, for its users
from dbanon.algorithms.persist import subset
from dbanon.metrics.loss import node_weights

DEFAULT_BLOCK_SIZE = 16_000
# Tables up to this many rows get the exact rule unless a block size is asked for: it takes
# seconds at most there, and small tables keep the clusters they always had. (Measured, blocks
# are no worse above it: NCP 3.66 % vs 3.79 % at 100,000 census-like rows.)
AUTO_ROWS = 100_000
_BALANCE = 0.25  # a cut should leave at least this share of the block on its smaller side
REPOOL = 0.3  # share of clusters, the loosest, dissolved and clustered again by a fix-up round
ROUNDS = 1


def partitioned(n: int, block_size: int | None, exact: bool, auto: int = AUTO_ROWS) -> bool:
    """Whether a table of n rows is clustered in blocks: never with `exact`; with an explicit
    `block_size` whenever the table is larger than a block; else above `auto` rows."""
    if exact:
        return False
    if block_size is not None:
        return n > block_size
    return n > auto


def even_aim(m: int, size: int) -> float:
    """Where to cut m rows so that both sides split into blocks of nearly `size` rows: after
    the first half of the ceil(m / size) blocks. Halving instead leaves blocks of anywhere
    between half a block and a whole one, and a rule whose cost per row grows with its block
    then costs per row what the table's size happens to give."""
    parts = -(-m // size)
    return m * (parts // 2) / parts


def _depth_first_rank(qi: QIArrays) -> list[np.ndarray]:
    """Per categorical QI, each leaf's rank in a depth-first order of its hierarchy (leaves of
    a subtree are contiguous, so a cut by rank splits the tree near its top)."""
    ranks = []
    for h in qi.hierarchies:
        anc = h.ancestor_table()
        leaves = np.array(sorted(h.leaves.values()), dtype=np.int64)
        # Sort by the ancestor at every level, the root's first.
        order = np.lexsort([anc[leaves, lv] for lv in range(h.height + 1)])
        rank = np.zeros(len(h.labels), dtype=np.int64)
        rank[leaves[order]] = np.arange(len(leaves))
        ranks.append(rank)
    return ranks


def cut(
    qi: QIArrays,
    k: int,
    block_size: int,
    cost: str = "height",
    sensitive: np.ndarray | None = None,
    p: int = 1,
    fits: Callable[[np.ndarray], bool] | None = None,
    even: bool = False,
    rows: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Row indices of each block, in cut order (a block's halves replace it in place). With
    `sensitive` (int codes) and p > 1, both halves of every cut hold >= p distinct values;
    with `fits`, both halves fit it (the rows of a block can be clustered on their own).
    With `even`, a cut aims not at the middle but at `even_aim`, so that blocks are of one
    size at any table size. `rows` (a permutation of the rows, default their order) is the
    order each block lists its rows in: cutting qi in that order gives the same blocks as
    cutting a copy of qi reordered by it (cuts read values, not positions), without the
    copy."""
    if block_size < 2 * k:
        raise ValueError(f"block size {block_size} is too small for k={k}: it needs at least 2k")
    weights = node_weights(qi, cost)
    ranks = _depth_first_rank(qi)
    # Each row's rank per categorical QI, once, in the narrowest type: a cut then gathers one
    # small contiguous column per QI instead of a code from the (n, q) codes and its rank.
    ranked = [r[qi.cat[:, j]].astype(np.min_scalar_type(max(len(r) - 1, 0)))
              for j, r in enumerate(ranks)]  # fmt: skip
    leaf_of_rank = [
        np.argsort(r[: len(h.leaves)]) for r, h in zip(ranks, qi.hierarchies, strict=True)
    ]
    nn = qi.num.shape[1]

    def best_cut(rows: np.ndarray) -> np.ndarray | None:
        """Which rows of the block go to its first half (None: the block stays whole)."""
        m = len(rows)
        balanced = _BALANCE * m
        aim = even_aim(m, block_size) if even else m / 2
        best: tuple[float, float, int, int] | None = None  # (penalty, smaller side, QI, rank)
        fallback: tuple[float, np.ndarray] | None = None  # (smaller side, first half)
        for j in range(qi.cat.shape[1]):
            # Counting, not sorting: a cut falls between two ranks of the leaves present.
            rank = ranked[j][rows]
            counts = np.bincount(rank, minlength=len(leaf_of_rank[j]))
            present = np.flatnonzero(counts)
            if len(present) < 2:
                continue
            pos = np.cumsum(counts[present])[:-1]  # rows below each next present rank
            # What a cluster pays at least for holding rows of both sides: the cost of the
            # LCA of the two leaves next to the cut (depth-first order).
            leaf = leaf_of_rank[j]
            penalty = weights[j, qi.lca[j, leaf[present[:-1]], leaf[present[1:]]]]
            small = m / 2 - np.abs(pos - aim)  # the smaller side's rows when aim is m / 2
            valid = np.minimum(pos, m - pos) >= k
            if not valid.any():
                continue
            i = int(np.flatnonzero(valid)[np.argmax(small[valid])])
            if fallback is None or small[i] > fallback[0]:
                fallback = (float(small[i]), rank < present[i + 1])
            ok = valid & (small >= balanced) & (penalty > 0)
            if ok.any():
                # The dearest crossing, then the most balanced.
                i = int(np.flatnonzero(ok)[np.lexsort((-small[ok], -penalty[ok]))[0]])
                if best is None or (penalty[i], small[i]) > (best[0], best[1]):
                    best = (float(penalty[i]), float(small[i]), j, int(present[i + 1]))
        if best is not None:
            _, _, j, r = best
            return ranked[j][rows] < r
        extents = [float(np.ptp(qi.num[rows, i])) for i in range(nn)]
        for i in sorted(range(nn), key=lambda i: -extents[i]):
            if extents[i] <= 0:
                break
            # The boundary nearest the aim (the median unless `even`) is just below or just
            # above its run of equals.
            col = qi.num[rows, i]
            at = int(min(aim, m - 1))
            median = np.partition(col, at)[at]
            below = int((col < median).sum())
            upto = int((col <= median).sum())
            options = [(abs(p - aim), p) for p in (below, upto) if k <= p <= m - k]
            if not options:
                continue
            p = min(options)[1]
            mask = col < median if p == below else col <= median
            side = m / 2 - abs(p - aim)
            if side >= balanced:
                return mask
            if fallback is None or side > fallback[0]:
                fallback = (side, mask)
        return None if fallback is None else fallback[1]

    def keeps(rows: np.ndarray) -> bool:
        if fits is not None and not fits(rows):
            return False
        return sensitive is None or p <= 1 or len(np.unique(sensitive[rows])) >= p

    done: list[np.ndarray] = []
    todo = [np.arange(qi.n, dtype=np.int64) if rows is None else np.asarray(rows, np.int64)]
    while todo:
        rows = todo.pop()
        first = best_cut(rows) if len(rows) > block_size else None
        if first is not None and not (keeps(rows[first]) and keeps(rows[~first])):
            first = None
        if first is None:
            done.append(rows)
        else:
            todo += [rows[~first], rows[first]]  # the first half is cut (and numbered) first
    assert all(len(b) >= k for b in done) or qi.n < k
    return done


def kmember_blocks(
    qi: QIArrays,
    k: int,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    seed: int = 0,
    seeding: str = "random",
    cost: str = "height",
    repool: float = REPOOL,
    rounds: int = ROUNDS,
    workers: int | None = None,
    progress: Callable[[str], None] | None = None,
    sensitive: np.ndarray | None = None,
    p: int = 1,
) -> tuple[np.ndarray, dict[str, int]]:
    """int32[n] cluster ids of partitioned k-member (clusters of k..2k-1 rows; with p > 1
    and `sensitive`, the (p,k) rule's clusters), and figures for the run record: blocks
    clustered and the rows re-clustered by the fix-up rounds. `progress` hears how many
    blocks are clustered as each one ends."""
    if qi.n < k:
        raise ValueError(f"k-member clustering needs at least k={k} rows, the table has {qi.n}")
    rng = np.random.default_rng(seed)
    sens = None
    if sensitive is not None and p > 1:
        sens = np.unique(np.asarray(sensitive), return_inverse=True)[1].reshape(-1)
        if len(np.unique(sens)) < p:
            raise ValueError(
                f"(p,k)-anonymity with p={p} is impossible: the table has only "
                f"{len(np.unique(sens))} distinct sensitive values"
            )
    rule = _Rule(k, seeding, cost, workers, progress, p if sens is not None else 1)
    gid, blocks = _in_blocks(qi, sens, block_size, rng, rule)
    figures = {"blocks": blocks, "repooled_rows": 0}
    for _ in range(rounds):
        # Fix-up: the loosest clusters (the ends of each block's greedy run, and clusters cut
        # short at a block's edge) are dissolved and their rows clustered again together.
        loss = _group_loss(qi, gid, cost)
        worst = np.argsort(-loss, kind="stable")[: int(repool * len(loss))]
        if len(worst) < 2:
            break
        dissolved = np.zeros(len(loss), dtype=bool)
        dissolved[worst] = True
        pool = np.flatnonzero(dissolved[gid])
        part = subset(qi, pool)
        again, b = _in_blocks(part, None if sens is None else sens[pool], block_size, rng, rule)
        figures["blocks"] += b
        # Kept only if it lowers those rows' loss, so a round never makes the result worse.
        before = float((loss[worst] * np.bincount(gid)[worst]).sum())
        if float((_group_loss(part, again, cost) * np.bincount(again)).sum()) >= before:
            break
        keep = np.flatnonzero(~dissolved)
        renumber = np.full(len(loss), -1, dtype=np.int32)
        renumber[keep] = np.arange(len(keep), dtype=np.int32)
        gid = renumber[gid]
        gid[pool] = again + len(keep)
        figures["repooled_rows"] += len(pool)
    return gid, figures


def _group_loss(qi: QIArrays, gid: np.ndarray, cost: str) -> np.ndarray:
    """`group_loss` of dense group ids, the same figures to the bit, in one compiled pass over
    the rows: each group's extremes and its LCA per categorical QI (folded pairwise through
    qi.lca) kept per group, then summed in group_loss's order. No per-row temporaries (the
    NumPy form builds an ancestor table per categorical QI, and sorts the rows by group):
    0.02 s where it took 0.24 s at 1M rows."""
    g = int(gid.max()) + 1 if len(gid) else 0
    return _loss_kernel(np.ascontiguousarray(gid, dtype=np.int64), np.ascontiguousarray(qi.num),
                        np.ascontiguousarray(qi.cat, dtype=np.int64),
                        np.ascontiguousarray(qi.lca, dtype=np.int64),
                        np.ascontiguousarray(node_weights(qi, cost)), g)  # fmt: skip


@njit(cache=True, nogil=True)
def _loss_kernel(gid: np.ndarray, num: np.ndarray, cat: np.ndarray, lca: np.ndarray,
                 weights: np.ndarray, g: int) -> np.ndarray:  # fmt: skip
    nn, q = num.shape[1], cat.shape[1]
    lo = np.full((g, nn), np.inf)
    hi = np.full((g, nn), -np.inf)
    node = np.full((g, q), -1, np.int64)
    seen = np.zeros(g, np.bool_)
    for r in range(len(gid)):
        c = gid[r]
        seen[c] = True
        for i in range(nn):
            v = num[r, i]
            if v < lo[c, i]:
                lo[c, i] = v
            if v > hi[c, i]:
                hi[c, i] = v
        for j in range(q):
            leaf = cat[r, j]
            node[c, j] = leaf if node[c, j] < 0 else lca[j, node[c, j], leaf]
    loss = np.zeros(g)
    for c in range(g):
        if not seen[c]:
            continue  # no rows: 0, as group_loss has it
        for i in range(nn):
            loss[c] += hi[c, i] - lo[c, i]
        for j in range(q):
            loss[c] += weights[j, node[c, j]]
    return loss


@dataclass(frozen=True)
class _Rule:
    """How each block is clustered: the exact rule's parameters, and where progress goes."""

    k: int
    seeding: str
    cost: str
    workers: int | None
    progress: Callable[[str], None] | None
    p: int = 1


def _in_blocks(
    qi: QIArrays,
    sensitive: np.ndarray | None,
    block_size: int,
    rng: np.random.Generator,
    rule: _Rule,
) -> tuple[np.ndarray, int]:
    """Cluster ids (0..g-1, block by block in cut order) and the number of blocks."""
    from dbanon.algorithms.kmember import kmember

    k = rule.k
    blocks = (
        cut(qi, k, block_size, rule.cost, sensitive, rule.p)
        if qi.n > block_size
        else [np.arange(qi.n)]
    )
    seeds = rng.integers(0, 2**62, len(blocks))
    done = [0]
    lock = Lock()

    def one(b: int) -> np.ndarray:
        ids = kmember(
            subset(qi, blocks[b]), k, seed=int(seeds[b]), seeding=rule.seeding, cost=rule.cost,
            sensitive=None if sensitive is None else sensitive[blocks[b]], p=rule.p,
        )  # fmt: skip
        if rule.progress is not None:
            with lock:
                done[0] += 1
                rule.progress(f"k-member: {done[0]:,} of {len(blocks):,} blocks clustered")
        return ids

    # Largest blocks first, so that no thread is left with a big one at the end.
    order = sorted(range(len(blocks)), key=lambda b: -len(blocks[b]))
    with ThreadPoolExecutor(max_workers=rule.workers or cores()) as pool:
        results = dict(zip(order, pool.map(one, order), strict=True))
    gid = np.empty(qi.n, dtype=np.int32)
    offset = 0
    for b, rows in enumerate(blocks):
        gid[rows] = results[b] + offset
        offset += int(results[b].max()) + 1
    return gid, len(blocks)


def thetak_blocks(
    qi: QIArrays,
    category: np.ndarray,
    value: np.ndarray,
    k: int,
    theta: int,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    seed: int = 0,
    leftovers: str = "category",
    rule: str = "paper",
    order: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[str, int]]:
    """(θ,k) clustering (the greedy construction) in blocks cut as k-member's are; with
    `order`, the groups of the rows reordered by it (ties follow that order: the same groups,
    per row of qi, as clustering the reordered copies, which are never made). The model
    judges a class by the whole table's need_c (dbanon.models.thetak's `rule` over its value
    counts), so every block is clustered against those, not its own; a cut is kept only when
    both halves hold k rows and θ categories with need_c distinct values each (at least one
    class can then be built in each: dbanon.algorithms.thetak._greedy_construction's
    argument).

    The sensitive values are encoded once, here: each block gets the table's integer codes,
    which order its categories and values as the values themselves do (encode sorts them), so
    the block encodes them to the same codes at a fraction of the cost. Blocks run on all
    cores in threads (the greedy loop releases the GIL); each block's seed is drawn in cut
    order beforehand and its groups numbered in cut order, so the result does not depend on
    the threads."""
    from dbanon.algorithms.thetak import encode, needs, thetak_detail

    cats, catg, vcat, code = encode(category, value)
    need_arr = needs(catg, code, vcat, k, theta, rule)
    need = dict(enumerate(need_arr.tolist()))

    def fits(rows: np.ndarray) -> bool:
        if len(rows) < k:
            return False
        distinct = np.bincount(vcat[np.unique(code[rows])], minlength=len(cats))
        return int((distinct >= need_arr).sum()) >= theta

    blocks = cut(qi, k, block_size, fits=fits, even=True, rows=order)
    rng = np.random.default_rng(seed)
    seeds = [int(rng.integers(2**31)) for _ in blocks]

    def one(b: int) -> tuple[np.ndarray, int]:
        rows = blocks[b]
        return thetak_detail(subset(qi, rows), catg[rows], code[rows], k, theta, seed=seeds[b],
                             leftovers=leftovers, need=need)  # fmt: skip

    # Largest blocks first, so that no thread is left with a big one at the end.
    order = sorted(range(len(blocks)), key=lambda b: -len(blocks[b]))
    with ThreadPoolExecutor(max_workers=cores()) as pool:
        results = dict(zip(order, pool.map(one, order), strict=True))
    gid = np.full(qi.n, -1, dtype=np.int32)  # as the exact rule's (half the memory of int64)
    left, groups = 0, 0
    for b, rows in enumerate(blocks):
        g, placed = results[b]
        gid[rows] = g + groups
        groups += int(g.max()) + 1
        left += placed
    return gid, {"blocks": len(blocks), "leftover_rows": left}
