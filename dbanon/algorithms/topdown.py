"""The numba loop of LAG_2's Top-down split (Xu et al., KDD'06), apart so that importing
dbanon.algorithms.lag does not load numba."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _box_cost(lo: np.ndarray, hi: np.ndarray, node: np.ndarray, height: np.ndarray) -> float:
    c = 0.0
    for i in range(len(lo)):
        c += hi[i] - lo[i]
    for j in range(len(node)):
        c += height[j, node[j]]
    return c


@njit(cache=True)
def top_down_split(
    num: np.ndarray, cat: np.ndarray, lca: np.ndarray, height: np.ndarray, order: np.ndarray,
    u: int, v: int, k: int,
) -> np.ndarray:  # fmt: skip
    """Xu et al.'s split: side (True: u's group) of every row, re-balanced so both keep >= k."""
    n, p, q = num.shape[0], num.shape[1], cat.shape[1]
    side = np.zeros(n, dtype=np.bool_)
    lo = np.empty((2, p))
    hi = np.empty((2, p))
    node = np.empty((2, q), dtype=np.int64)
    size = np.zeros(2, dtype=np.int64)
    for g, seed in ((0, u), (1, v)):
        lo[g] = num[seed]
        hi[g] = num[seed]
        for j in range(q):
            node[g, j] = cat[seed, j]
        size[g] = 1
    side[u] = True
    nlo = np.empty(p)
    nhi = np.empty(p)
    nnode = np.empty(q, dtype=np.int64)
    for w in order:
        if w in (u, v):
            continue
        best, grow = 0, np.inf
        for g in range(2):
            for i in range(p):
                nlo[i] = min(lo[g, i], num[w, i])
                nhi[i] = max(hi[g, i], num[w, i])
            for j in range(q):
                nnode[j] = lca[j, node[g, j], cat[w, j]]
            d = (size[g] + 1) * _box_cost(nlo, nhi, nnode, height) - size[g] * _box_cost(
                lo[g], hi[g], node[g], height)
            if d < grow:
                best, grow = g, d
        for i in range(p):
            lo[best, i] = min(lo[best, i], num[w, i])
            hi[best, i] = max(hi[best, i], num[w, i])
        for j in range(q):
            node[best, j] = lca[j, node[best, j], cat[w, j]]
        size[best] += 1
        side[w] = best == 0
    return side
