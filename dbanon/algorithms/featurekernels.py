"""The forward search's test of one-hot candidates compiled (dbanon.algorithms.featuresel):
each source column's indicators as one int32 code per row (which of them holds: its 1-based
position, 0 for none, -1 for a NULL key - `grouping`'s number), the classes of the kept features
as one class id per row. Judging a candidate is one pass over two arrays, not a GROUP BY of the
source; the counts are split_small's, so the decisions are the SQL's."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def judge(cls: np.ndarray, sizes: np.ndarray, codes: np.ndarray, at: int, k: int,
          t: np.ndarray, z: np.ndarray) -> tuple[int, int]:  # fmt: skip
    """(classes below k, rows of the smallest of them) once the indicator `codes == at` splits
    each class into its rows where it is true, false and NULL (code -1); `t`, `z` are zeroed
    scratch arrays of one entry per class, zeroed again on return."""
    for i in range(len(cls)):
        v = codes[i]
        if v == at:
            t[cls[i]] += 1
        elif v == -1:
            z[cls[i]] += 1
    below = 0
    smallest = 0
    for c in range(len(sizes)):
        for p in (t[c], sizes[c] - t[c] - z[c], z[c]):
            if 1 <= p < k:
                below += 1
                if smallest == 0 or p < smallest:
                    smallest = p
        t[c] = 0
        z[c] = 0
    return below, smallest


@njit(cache=True)
def refine(cls: np.ndarray, classes: int, codes: np.ndarray, at: int
           ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The classes once the indicator `codes == at` is kept: each class split by its value
    (true, false, NULL), renumbered densely; (class per row, rows per class)."""
    new = np.full(3 * classes, -1, np.int64)
    out = np.empty(len(cls), np.int32)
    sizes = np.zeros(3 * classes + 1, np.int64)
    used = 0
    for i in range(len(cls)):
        v = codes[i]
        s = 1 if v == at else (2 if v == -1 else 0)
        j = 3 * np.int64(cls[i]) + s
        if new[j] < 0:
            new[j] = used
            used += 1
        out[i] = new[j]
        sizes[new[j]] += 1
    return out, sizes[:used]
