"""INA's distances to the reference points compiled: `nearest_two` and `moved` of
dbanon.algorithms.ina, equal to them bit for bit, one pass per row instead of a numpy pass per
reference point (1.4 s of a million-row publish at ten points; the experiment keeps the
reference code).

Equality needs the same floating-point operations in the same order: each distance is
sqrt(sum_i ((x_i - q_i) / alpha_i)^2) with the sum taken as numpy's reduction over a row takes it
(pairwise: eight running sums from the ninth term on, combined as a tree, the rest added one by
one); tested against the numpy functions for 1 to 40 columns. Rows holding a NaN or an infinity,
and more than 128 columns (numpy's sum then splits the row), go to the numpy code.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dbanon.algorithms import ina

_BLOCK = 128  # numpy's pairwise block: up to it, one unrolled pass


@njit(cache=True, inline="always")
def _pairwise(a: np.ndarray, n: int) -> float:
    """numpy's pairwise_sum of a[:n] for n <= 128, from the reduction's 0."""
    if n < 8:
        s = 0.0
        for i in range(n):
            s += a[i]
        return 0.0 + s
    r0, r1, r2, r3 = a[0], a[1], a[2], a[3]
    r4, r5, r6, r7 = a[4], a[5], a[6], a[7]
    i = 8
    while i < n - (n % 8):
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    s = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        s += a[i]
        i += 1
    return 0.0 + s


@njit(cache=True, nogil=True)
def _nearest(x: np.ndarray, refs: np.ndarray, alpha: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Per row: the first nearest reference point (as np.argmin), the smallest distance and
    the second smallest (equal to it on a tie)."""
    n, m = x.shape
    first = np.empty(n, np.int64)
    r1 = np.empty(n)
    r2 = np.empty(n)
    sq = np.empty(m)
    for i in range(n):
        a, b, at = np.inf, np.inf, -1
        for j in range(len(refs)):
            for c in range(m):
                diff = (x[i, c] - refs[j, c]) / alpha[c]
                sq[c] = diff * diff
            d = np.sqrt(_pairwise(sq, m))
            if d < a:
                a, b, at = d, a, j
            elif d < b:
                b = d
        first[i], r1[i], r2[i] = max(at, 0), a, b
    return first, r1, r2


def _compiled(x: np.ndarray, refs: np.ndarray, alpha: np.ndarray) -> bool:
    """Whether the compiled distances equal numpy's for these rows: every value, point and
    scale finite (no NaN to order), scales not 0, at most 128 columns."""
    return (x.shape[1] <= _BLOCK and len(refs) > 0 and bool(np.isfinite(x).all())
            and bool(np.isfinite(refs).all()) and bool(np.isfinite(alpha).all())
            and bool((alpha != 0).all()))  # fmt: skip


def nearest_two(x: np.ndarray, refs: np.ndarray, alpha: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """r1 <= r2 of dbanon.algorithms.ina.nearest_two: each row's two smallest distances."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    refs = np.ascontiguousarray(refs, dtype=np.float64)
    alpha = np.ascontiguousarray(alpha, dtype=np.float64)
    if len(refs) < 2:
        raise ValueError("INA needs at least two reference points")
    if not _compiled(x, refs, alpha):
        _, r1, r2 = ina.nearest_two(x, refs, alpha)
        return r1, r2
    _, r1, r2 = _nearest(x, refs, alpha)
    return r1, r2


def nearest(x: np.ndarray, refs: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Each row's nearest reference point, as np.argmin of ina.normalised_distances."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    refs = np.ascontiguousarray(refs, dtype=np.float64)
    alpha = np.ascontiguousarray(alpha, dtype=np.float64)
    if not _compiled(x, refs, alpha):
        return np.argmin(ina.normalised_distances(x, refs, alpha), axis=1)
    return _nearest(x, refs, alpha)[0]


def moved(x: np.ndarray, perturbed: np.ndarray, refs: np.ndarray, alpha: np.ndarray) -> int:
    """dbanon.algorithms.ina.moved: tuples whose nearest reference point the noise changed."""
    if not len(x):
        return 0
    return int((nearest(x, refs, alpha) != nearest(perturbed, refs, alpha)).sum())
