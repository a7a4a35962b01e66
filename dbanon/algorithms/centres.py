"""A group's centre, what the regrouping of a refresh measures distances to: the mean of each
numeric QI (normalised values) and the commonest leaf of each categorical QI, the smallest of a
tie. `centres` for every group at once, `centre` for one group whose rows just changed (a merge).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dbanon.algorithms.base import QIArrays


def centres(qi: QIArrays, gid: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean normalised numeric values and the most frequent leaf of each categorical QI."""
    sizes = np.maximum(np.bincount(gid, minlength=groups), 1).astype(np.float64)
    num = np.zeros((groups, qi.num.shape[1]))
    for i in range(qi.num.shape[1]):
        num[:, i] = np.bincount(gid, weights=qi.num[:, i], minlength=groups) / sizes
    cat = np.zeros((groups, qi.cat.shape[1]), dtype=np.int64)
    for j in range(qi.cat.shape[1]):
        width = int(qi.cat[:, j].max(initial=0)) + 1  # one bincount: np.add.at is 10x slower
        counts = np.bincount(gid.astype(np.int64) * width + qi.cat[:, j],
                             minlength=groups * width)  # fmt: skip
        cat[:, j] = counts.reshape(groups, width).argmax(axis=1)
    return num, cat


@njit(cache=True)
def centre(rows: np.ndarray, num: np.ndarray, cat: np.ndarray, cnum: np.ndarray,
           ccat: np.ndarray, g: int) -> None:  # fmt: skip
    """Group g's centre from its rows, in place: each numeric QI's mean (the rows summed in
    order, as NumPy's mean over them), each categorical QI's commonest leaf (the smallest of
    a tie), counted over the rows' sorted codes: a merge's few rows, not a count per leaf."""
    r = len(rows)
    for i in range(num.shape[1]):
        total = 0.0
        for a in range(r):
            total += num[rows[a], i]
        cnum[g, i] = total / r
    codes = np.empty(r, np.int64)
    for j in range(cat.shape[1]):
        for a in range(r):
            codes[a] = cat[rows[a], j]
        codes.sort()
        best, most, run = codes[0], 0, 0
        for a in range(r):
            run = run + 1 if a > 0 and codes[a] == codes[a - 1] else 1
            if run > most:  # a later value must outnumber, not tie: the smallest wins a tie
                best, most = codes[a], run
        ccat[g, j] = best
