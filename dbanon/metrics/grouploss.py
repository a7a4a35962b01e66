"""A publish's loss figures in one pass over its rows (compiled), equal to
dbanon.metrics.loss.loss_report's bit for bit.

loss_report sorts the rows by group and reduces each column over the sorted rows, per
hierarchy level for a categorical column: for a million rows that is an argsort and a sorted
copy of every column and of every ancestor level, 0.5 s of a publish spent on a figure. Here
each group's extremes are gathered in place, a row at a time, into arrays the size of the
groups: per numeric column its least and greatest value, per categorical column (and level) whether
every row agrees with the group's first row (the LCA is the lowest level where they all do,
the node is the first row's ancestor there, as group_loss takes it). Each group's loss is then
added up column by column in group_loss's order, and the totals are summed over the same array
of present groups, so every figure is the same float. A value-set column (no hierarchy,
under Xu et al.'s cost) counts its group's distinct values over the rows taken group by group
(a counting sort).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from dbanon.algorithms.base import QIArrays
from dbanon.core.groupsort import by_group
from dbanon.metrics.loss import COSTS, LossReport, node_weights


@njit(cache=True, nogil=True)
def _firsts(gid: np.ndarray, g: int) -> np.ndarray:
    """int64[g]: each group's first row (-1: a group with no rows)."""
    first = np.full(g, -1, dtype=np.int64)
    for r in range(len(gid)):
        if first[gid[r]] < 0:
            first[gid[r]] = r
    return first


@njit(cache=True, nogil=True)
def _spread(values: np.ndarray, gid: np.ndarray, g: int) -> np.ndarray:
    """float64[g]: each group's greatest value minus its least (0 for a group with no rows;
    NaN for a group with a NaN, as numpy's reductions propagate it)."""
    lo = np.full(g, np.inf)
    hi = np.full(g, -np.inf)
    nan = np.zeros(g, dtype=np.bool_)
    for r in range(len(gid)):
        v = values[r]
        k = gid[r]
        if v != v:
            nan[k] = True
        if v < lo[k]:
            lo[k] = v
        if v > hi[k]:
            hi[k] = v
    out = np.zeros(g)
    for k in range(g):
        if nan[k]:
            out[k] = np.nan
        elif hi[k] >= lo[k]:
            out[k] = hi[k] - lo[k]
    return out


@njit(cache=True, nogil=True)
def _lca_nodes(
    anc: np.ndarray, codes: np.ndarray, gid: np.ndarray, first: np.ndarray
) -> np.ndarray:
    """int64[g]: each group's node as group_loss finds it: the first row's ancestor at the
    lowest level where every row's ancestor equals the first row's (the root's level if none)."""
    g = len(first)
    height = anc.shape[1] - 1
    differs = np.zeros((g, height), dtype=np.bool_)
    for r in range(len(gid)):
        k = gid[r]
        f = codes[first[k]]
        c = codes[r]
        if c != f:
            for lv in range(height):
                if anc[c, lv] != anc[f, lv]:
                    differs[k, lv] = True
    node = np.full(g, -1, dtype=np.int64)
    for k in range(g):
        if first[k] < 0:
            continue
        level = height
        for lv in range(height):
            if not differs[k, lv]:
                level = lv
                break
        node[k] = anc[codes[first[k]], level]
    return node


@njit(cache=True, nogil=True)
def _values_per_group(codes: np.ndarray, order: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """int64[g]: distinct codes in each group (rows taken group by group through `order`; a
    code is new to a group when the group last seen with it is another)."""
    seen = np.full(codes.max() + 1 if len(codes) else 1, -1, dtype=np.int64)
    out = np.zeros(len(sizes), dtype=np.int64)
    i = 0
    for k in range(len(sizes)):
        for _ in range(sizes[k]):
            c = codes[order[i]]
            i += 1
            if seen[c] != k:
                seen[c] = k
                out[k] += 1
    return out


def loss_of_groups(qi: QIArrays, gid: np.ndarray, sets: Sequence[bool] = ()) -> LossReport:
    """metrics.loss.loss_report of group ids >= 0 (any, with gaps), the same figures."""
    if len(qi.hierarchies) != qi.cat.shape[1]:
        raise ValueError("QIArrays needs a hierarchy per categorical column (use QIArrays.build)")
    gid = np.asarray(gid)
    sizes = np.bincount(gid) if len(gid) else np.zeros(0, dtype=np.int64)
    g = len(sizes)
    present = np.flatnonzero(sizes)
    first = _firsts(gid, g)
    spreads = [_spread(np.ascontiguousarray(qi.num[:, i]), gid, g) for i in range(qi.num.shape[1])]
    # a categorical column copied contiguous while it is read (not all at once: 8 bytes a row each)
    column = lambda j: np.ascontiguousarray(qi.cat[:, j])  # noqa: E731
    nodes = [_lca_nodes(h.ancestor_table(), column(j), gid, first)
             for j, h in enumerate(qi.hierarchies)]  # fmt: skip
    covered: dict[int, np.ndarray] = {}
    order = None  # rows by group, for value-set columns only
    total: dict[str, float] = {}
    for cost in COSTS:
        weights = node_weights(qi, cost)
        # group_loss's order: every numeric column, then every categorical one
        loss = np.zeros(len(present), dtype=np.float64)
        for spread in spreads:
            loss += spread[present]
        for j, h in enumerate(qi.hierarchies):
            if cost == "ncp" and j < len(sets) and sets[j]:
                if j not in covered:
                    order = by_group(gid, sizes) if order is None else order
                    covered[j] = _values_per_group(column(j), order, sizes)[present]
                loss += np.where(covered[j] > 1, covered[j] / len(h.leaves), 0.0)
            else:
                loss += weights[j, nodes[j][present]]
        total[cost] = float((loss * sizes[present]).sum())
    cells = len(gid) * qi.width
    shown = sizes[present]
    return LossReport(
        total_il_height=total["height"],
        ncp_height=total["height"] / cells if cells else 0.0,
        total_il_leaf=total["ncp"],
        ncp_leaf=total["ncp"] / cells if cells else 0.0,
        discernibility=int((shown.astype(np.int64) ** 2).sum()),
        classes=int(len(shown)),
        min_class_size=int(shown.min()) if len(shown) else 0,
        max_class_size=int(shown.max()) if len(shown) else 0,
        avg_class_size=float(shown.mean()) if len(shown) else 0.0,
    )
