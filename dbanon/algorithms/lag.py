"""Local anatomy generalisation (thesis ch. 5, Algorithms 5.1-5.3): k-anonymous groups inside each
QI-partition subset, on that subset's unflagged attributes only.

Pure code. The QI partition (Def. 5.2) puts rows with the same set of unflagged attributes
together: a published row shows which of its cells are flagged (NULL, and its row id in that
attribute's IDT), so groups may never mix patterns. Each subset is then split:

- `partition` (LAG_1, Algorithm 5.2 as written): binary median cuts. The attributes are tried
  in order of widest normalised spread (the kd-tree rule); a set is cut at the median of the
  first attribute where both sides t <= median and t > median keep >= k rows (Def. 5.9).
  Categorical values are cut along their hierarchy's leaf order (siblings adjacent, so a cut
  keeps subtrees together); a set no attribute can cut becomes a group.
- `ncp` (LAG_2, the default LAG_2): Xu et al.'s Top-down (KDD'06), which Algorithm 5.3
  abridges. A set of >= 2k rows gets two seeds farthest apart in NCP distance (three rounds of
  "farthest from the other"); every other row, in a seeded order, joins the group whose
  certainty penalty (|G| x NCP of G's box) grows least by it; then the group left below k
  takes from the other the rows that add least to its penalty until it holds k (Xu et al.'s
  re-balancing).
- `ncp-thesis` (LAG_2, Algorithm 5.3 as written): the same seeds; every row goes to the seed
  nearer in NCP distance (ties by the seed); if either side holds fewer than k rows the whole
  set becomes one group. No re-balancing, so a lopsided split ends the recursion there.
  NCP of a box: sum over the subset's attributes of its range / domain width (numeric) and the
  normalised height of its LCA (categorical), all weights 1.

Subsets with fewer than k rows (§6.2 item 14) cannot be k-anonymous by any generalisation inside
them, and merging them into another subset would publish rows with a flag pattern that is not
theirs (which their IDT rows contradict): they are suppressed, counted, and their rows left out
of the release altogether (main relation and buckets).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dbanon.algorithms.base import QIArrays
from dbanon.core.groupsort import unique_inverse
from dbanon.core.hierarchy import Hierarchy


def qi_partition(flagged: np.ndarray) -> np.ndarray:
    """Subset id per row: rows with the same flagged attributes (bool (n, d)) share one."""
    out = np.zeros(flagged.shape[0], dtype=np.int64)
    for j in range(flagged.shape[1]):  # a column at a time: no (n, d) int64 copy
        out |= flagged[:, j].astype(np.int64) << j
    return out


def columns(qi: QIArrays, rows: np.ndarray, keep_num: np.ndarray, keep_cat: np.ndarray) -> QIArrays:
    """Some rows and some columns of `qi`."""
    return QIArrays(
        np.ascontiguousarray(qi.num[np.ix_(rows, keep_num)]),
        np.ascontiguousarray(qi.cat[np.ix_(rows, keep_cat)]),
        qi.lca[keep_cat],
        qi.height[keep_cat],
        tuple(qi.hierarchies[j] for j in keep_cat),
    )


def _distance(qi: QIArrays, u: int) -> np.ndarray:
    d = np.abs(qi.num - qi.num[u]).sum(axis=1)
    for j in range(qi.cat.shape[1]):
        d += qi.height[j, qi.lca[j, qi.cat[:, j], qi.cat[u, j]]]
    return d


def positions(h: Hierarchy) -> np.ndarray:
    """Each of a hierarchy's codes at its place along the leaves (siblings adjacent), in
    [0, 1]; a flat hierarchy orders its values by label."""
    table = h.ancestor_table()
    leaves = sorted(h.leaves.values(), key=lambda x, t=table, h=h: (
        tuple(int(a) for a in t[x, h.height - 1:0:-1]), h.labels[x]))  # fmt: skip
    pos = np.zeros(table.shape[0], dtype=np.float64)
    pos[leaves] = np.arange(len(leaves)) / max(len(leaves) - 1, 1)
    return pos


def leaf_order(qi: QIArrays) -> np.ndarray:
    """Categorical codes as positions along each hierarchy's leaves, float (n, q)."""
    out = np.zeros(qi.cat.shape, dtype=np.float64)
    for j, h in enumerate(qi.hierarchies):
        out[:, j] = positions(h)[qi.cat[:, j]]
    return out


def matrix(qi: QIArrays, rows: np.ndarray, keep_num: np.ndarray, keep_cat: np.ndarray
           ) -> np.ndarray:  # fmt: skip
    """Some rows' values of some columns, column by column (float64 (w, m)): numbers as they
    are, categories at their `positions`. Taken straight from the whole table's arrays, with
    no copy of the subset's own QIArrays (30 MiB of a 1M-row run's peak)."""
    x = np.empty((len(keep_num) + len(keep_cat), len(rows)), dtype=np.float64)
    for i, j in enumerate(keep_num.tolist()):
        np.take(qi.num[:, j], rows, out=x[i])
    for i, j in enumerate(keep_cat.tolist(), start=len(keep_num)):
        np.take(positions(qi.hierarchies[j]), qi.cat[:, j][rows], out=x[i])
    return x


def median_cuts(qi: QIArrays, k: int) -> np.ndarray:
    """LAG_1 on one subset (Algorithm 5.2): group ids 0..g-1."""
    every = np.arange(qi.n)
    return cuts(matrix(qi, every, np.arange(qi.num.shape[1]), np.arange(qi.cat.shape[1])), k)


def cuts(x: np.ndarray, k: int) -> np.ndarray:
    """`median_cuts` of the rows of x, given column by column (float64 (w, n), overwritten)."""
    n = x.shape[1]
    gid = np.zeros(n, dtype=np.int64)
    if x.shape[0] == 0 or n < 2 * k:
        return gid
    if not np.isnan(x).any():  # the loop below, compiled (NaN: numpy's own median and sort)
        from dbanon.algorithms.topdown import median_cut_groups  # numba: when built

        return median_cut_groups(x, k)
    x = x.T  # rows, as the loop reads them
    stack, next_id = [np.arange(n)], 0
    while stack:
        idx = stack.pop()
        part = x[idx]
        cut = None
        if len(idx) >= 2 * k:
            spread = part.max(axis=0) - part.min(axis=0)
            for a in np.argsort(-spread, kind="stable"):
                if spread[a] <= 0:
                    break
                left = part[:, a] <= np.median(part[:, a])
                if k <= left.sum() <= len(idx) - k:
                    cut = left
                    break
        if cut is None:
            gid[idx] = next_id
            next_id += 1
        else:
            stack += [idx[~cut], idx[cut]]
    return gid


def _rebalance(qi: QIArrays, side: np.ndarray, k: int, seeds: tuple[int, int]) -> np.ndarray:
    """The group below k takes, from the other, the rows that add least to its penalty (its
    seed's box widened by the row: the smallest NCP distance to the small group's box)."""
    small = side if side.sum() < k else ~side
    need = k - int(small.sum())
    if need <= 0:
        return side
    members = np.flatnonzero(small)
    others = np.flatnonzero(~small & ~np.isin(np.arange(len(side)), seeds))
    lo, hi = qi.num[members].min(axis=0), qi.num[members].max(axis=0)
    cost = (np.maximum(hi, qi.num[others]) - np.minimum(lo, qi.num[others])).sum(axis=1)
    for j in range(qi.cat.shape[1]):
        anc = qi.cat[members[0], j]
        for m in members[1:]:
            anc = qi.lca[j, anc, qi.cat[m, j]]
        cost += qi.height[j, qi.lca[j, anc, qi.cat[others, j]]]
    moved = others[np.argsort(cost, kind="stable")[:need]]
    side = side.copy()
    side[moved] = bool(side[members[0]])
    return side


def _top_down(part: QIArrays, u: int, v: int, k: int, rng: np.random.Generator
              ) -> np.ndarray | None:  # fmt: skip
    """Xu et al.'s split with re-balancing: both sides always keep >= k."""
    from dbanon.algorithms.topdown import top_down_split  # numba: when built

    side = top_down_split(
        np.ascontiguousarray(part.num), np.ascontiguousarray(part.cat), part.lca, part.height,
        rng.permutation(part.n), u, v, k,
    )  # fmt: skip
    return _rebalance(part, side, k, (u, v))


def _as_written(part: QIArrays, u: int, v: int, k: int, rng: np.random.Generator
                ) -> np.ndarray | None:  # fmt: skip
    """Algorithm 5.3 lines 14-20: each row to the nearer seed in NCP distance (a tie to a
    seeded coin); None (the set stays one group) when either side is below k."""
    du, dv = _distance(part, u), _distance(part, v)
    side = (du < dv) | ((du == dv) & (rng.random(part.n) < 0.5))
    side[u], side[v] = True, False
    return side if k <= int(side.sum()) <= part.n - k else None


Split = Callable[[QIArrays, int, int, int, np.random.Generator], "np.ndarray | None"]


def ncp_split(qi: QIArrays, k: int, rng: np.random.Generator, rounds: int = 3,
              split: Split = _top_down) -> np.ndarray:  # fmt: skip
    """LAG_2 on one subset: group ids 0..g-1. Sets of >= 2k rows get two far seeds and are cut
    by `split` (Top-down with re-balancing, or Algorithm 5.3 as written); a set `split` gives
    up on (None) stays one group."""
    n = qi.n
    gid = np.zeros(n, dtype=np.int64)
    if qi.width == 0:
        return gid
    stack = [np.arange(n)]
    next_id = 0
    while stack:
        idx = stack.pop()
        done = len(idx) < 2 * k
        if not done:
            part = QIArrays(qi.num[idx], qi.cat[idx], qi.lca, qi.height, qi.hierarchies)
            u = int(rng.integers(len(idx)))
            v = u
            for _ in range(rounds):
                v = int(_distance(part, u).argmax())
                u, v = v, u
            side = None if u == v else split(part, u, v, k, rng)  # u == v: all alike
            if side is None:
                done = True
            else:
                stack.append(idx[~side])
                stack.append(idx[side])
        if done:
            gid[idx] = next_id
            next_id += 1
    return gid


# The generalisations by name (LAG_1, LAG_2 as Top-down, LAG_2 as Algorithm 5.3 is written):
# the table's QIs, a subset's rows and unflagged columns (numeric, categorical), k and the run's
# generator in, the subset's group ids 0..g-1 out.
SPLITS: dict[str, Callable[[QIArrays, np.ndarray, np.ndarray, np.ndarray, int,
                            np.random.Generator], np.ndarray]] = {
    "partition": lambda qi, rows, kn, kc, k, rng: cuts(matrix(qi, rows, kn, kc), k),
    "ncp": lambda qi, rows, kn, kc, k, rng: ncp_split(columns(qi, rows, kn, kc), k, rng),
    "ncp-thesis": lambda qi, rows, kn, kc, k, rng: ncp_split(columns(qi, rows, kn, kc), k, rng,
                                                            split=_as_written),
}  # fmt: skip
VARIANTS = tuple(SPLITS)


def generalise(
    qi: QIArrays, flagged_num: np.ndarray, flagged_cat: np.ndarray, k: int, variant: str,
    seed: int = 0,
) -> tuple[np.ndarray, dict[str, int]]:  # fmt: skip
    """Group id per row (-1: suppressed with its subset of < k rows) and figures: subsets,
    suppressed_subsets, suppressed_rows."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown LAG variant {variant!r}; expected one of {VARIANTS}")
    n = qi.n
    subset = qi_partition(np.hstack([flagged_num, flagged_cat]))
    gid = np.full(n, -1, dtype=np.int64)
    rng = np.random.default_rng(seed)
    next_id, suppressed, suppressed_rows = 0, 0, 0
    patterns = np.unique(subset)
    for s in patterns:
        rows = np.flatnonzero(subset == s)
        if len(rows) < k:
            suppressed += 1
            suppressed_rows += len(rows)
            continue
        keep_num = np.flatnonzero(~flagged_num[rows[0]])
        keep_cat = np.flatnonzero(~flagged_cat[rows[0]])
        if len(keep_num) + len(keep_cat) == 0:
            local = np.zeros(len(rows), dtype=np.int64)
        else:
            local = SPLITS[variant](qi, rows, keep_num, keep_cat, k, rng)
        gid[rows] = local + next_id
        next_id += int(local.max()) + 1
    # Group ids: a permutation drawn from the seed, not the order of the subsets and cuts (which
    # follows the QI space), so a group id tells nothing the generalised values do not.
    relabel = np.concatenate([[-1], rng.permutation(next_id)])
    gid = relabel[gid + 1]
    figures = {"subsets": int(len(patterns)), "suppressed_subsets": suppressed,
               "suppressed_rows": suppressed_rows}  # fmt: skip
    return gid, figures


def ncp(qi: QIArrays, flagged_num: np.ndarray, flagged_cat: np.ndarray, gid: np.ndarray) -> float:
    """NCP (5.12-5.13) of a LAG release, weights 1, in [0, 1]: per released row and QI cell the
    normalised size of its generalisation (numeric: range / domain width; categorical: height
    of the group's LCA / tree height), flagged cells 0 (they are bucketised, not generalised),
    divided by rows x QI attributes. Suppressed rows (gid -1) count as fully generalised.
    Each group's extremes are found in one compiled pass over the rows (`group_extremes`)."""
    from dbanon.algorithms.topdown import group_extremes  # numba: when built

    n = qi.n
    if n == 0 or qi.width == 0:
        return 0.0
    total = float((gid < 0).sum() * qi.width)
    kept = gid >= 0
    g = unique_inverse(gid[kept])[1]
    groups = int(g.max()) + 1 if len(g) else 0
    for i in range(qi.num.shape[1]):
        live = ~flagged_num[kept, i]
        hi, lo, seen = group_extremes(qi.num[kept, i], live, g, groups)
        span = np.where(seen, hi - lo, 0.0)
        total += float(span[g[live]].sum())
    for j, h in enumerate(qi.hierarchies):
        anc = h.ancestor_table()[qi.cat[kept, j]]
        live = ~flagged_cat[kept, j]
        level = np.full(groups, h.height, dtype=np.int64)
        for lv in range(h.height - 1, -1, -1):
            hi, lo, seen = group_extremes(np.ascontiguousarray(anc[:, lv]), live, g, groups)
            level = np.where(seen & (hi == lo), lv, level)
        total += float((level[g[live]] / h.height).sum())
    return total / (n * qi.width)


def discernibility(gid: np.ndarray) -> int:
    """DM (2.4): sum of squared group sizes; a suppressed row costs the table's size."""
    kept = gid[gid >= 0]
    sizes = np.bincount(unique_inverse(kept)[1]) if len(kept) else []
    return int((np.asarray(sizes, dtype=np.int64) ** 2).sum() + (gid < 0).sum() * len(gid))
