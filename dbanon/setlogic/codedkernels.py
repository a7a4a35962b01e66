"""The compiled (numba) loops of a k-only lattice search (dbanon.setlogic.coded): a node's class
key per row, and its classes counted in one pass. Kept apart so that importing the search (as
the release's SQL does) does not load numba."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def node_keys(rep: np.ndarray, cols: np.ndarray, flat: np.ndarray, offs: np.ndarray,
              cards: np.ndarray) -> np.ndarray:  # fmt: skip
    """Each row's class at a node as one int64: the mixed-radix number of its codes, column
    cols[j]'s level-0 code looked up in flat[offs[j]:] (a label's code at the node's level, of
    cards[j] labels). The caller has checked that the product of cards fits."""
    n = rep.shape[0]
    out = np.zeros(n, np.int64)
    for r in range(n):
        key = np.int64(0)
        for j in range(len(cols)):
            key = key * cards[j] + flat[offs[j] + rep[r, cols[j]]]
        out[r] = key
    return out


@njit(cache=True)
def classes(key: np.ndarray, w: np.ndarray, space: int, k: int
            ) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """(rows in classes under k, classes, each row's class, each class's rows, each class's
    first row) of rows of class `key` (in [0, space)) and weight `w`: a class is found by
    indexing an array when the key space is small, else through an open-addressing table (one
    pass, where np.unique sorts the keys)."""
    n = len(key)
    inverse = np.empty(n, np.int32)
    sizes = np.zeros(n + 1, np.int64)
    first = np.empty(n + 1, np.int32)
    d = 0
    if space <= 4 * n + (1 << 16):
        slot_of = np.full(space, -1, np.int32)
        for r in range(n):
            c = slot_of[key[r]]
            if c < 0:
                c = d
                slot_of[key[r]] = c
                first[c] = r
                d += 1
            inverse[r] = c
            sizes[c] += w[r]
    else:
        bits = 4
        while (1 << bits) < 2 * n:
            bits += 1
        mask = (1 << bits) - 1
        keys = np.empty(1 << bits, np.int64)
        ids = np.full(1 << bits, -1, np.int32)
        for r in range(n):
            x = key[r]
            slot = np.int64((np.uint64(x) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits))
            while True:
                c = ids[slot]
                if c < 0:
                    c = d
                    ids[slot] = c
                    keys[slot] = x
                    first[c] = r
                    d += 1
                    break
                if keys[slot] == x:
                    break
                slot = (slot + 1) & mask
            inverse[r] = c
            sizes[c] += w[r]
    small = 0
    for r in range(n):
        if sizes[inverse[r]] < k:
            small += w[r]
    return small, d, inverse, sizes[:d].copy(), first[:d].copy()
