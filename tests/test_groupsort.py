"""dbanon.core.groupsort: the counting sort by group id and the sorted distinct values, each
against numpy's own answer."""

from __future__ import annotations

import numpy as np
import pytest

from dbanon.core.groupsort import by_group, distinct, distinct_each, unique_inverse


@pytest.mark.parametrize("seed", range(4))
def test_by_group_is_the_stable_argsort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    gid = rng.integers(0, rng.integers(1, 50), rng.integers(0, 2000)).astype(np.int32)
    assert np.array_equal(by_group(gid), np.argsort(gid, kind="stable"))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("high", [1, 7, 10**4, 2**31 - 1])
def test_distinct_is_np_unique(dtype: type, high: int) -> None:
    rng = np.random.default_rng(high)
    for n in (0, 1, 2, 5000):
        values = rng.integers(-high, high, n, endpoint=True).astype(dtype)
        got = distinct(values)
        assert got.dtype == values.dtype and np.array_equal(got, np.unique(values))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.float64])
def test_unique_inverse_is_numpys(dtype: type) -> None:
    """Ranked by a bincount (small non-negative integers) or by np.unique (anything else),
    the distinct values and each value's rank are np.unique's, dtypes included."""
    rng = np.random.default_rng(0)
    cases = [rng.integers(0, 50, 1000), rng.integers(0, 3, 10), np.array([7]),
             rng.integers(0, 10**9, 500)]  # fmt: skip
    if np.dtype(dtype).kind != "u":
        cases.append(rng.integers(-5, 5, 300))
    for values in cases:
        v = values.astype(dtype)
        uniq, inverse = unique_inverse(v)
        want_uniq, want_inverse = np.unique(v, return_inverse=True)
        assert uniq.dtype == want_uniq.dtype and np.array_equal(uniq, want_uniq)
        assert np.array_equal(inverse, want_inverse.reshape(-1))
        assert np.array_equal(uniq[inverse], v)


@pytest.mark.parametrize("seed", range(4))
def test_distinct_each_counts_each_groups_values(seed: int) -> None:
    """Groups in any order, some judged twice, some empty: each one's own distinct codes."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    gid = rng.integers(0, int(rng.integers(1, 80)), n)
    codes = rng.integers(0, int(rng.integers(1, 12)), n).astype(np.int32)
    order = np.argsort(gid, kind="stable")
    bounds = np.searchsorted(gid[order], np.arange(int(gid.max()) + 3))  # two empty at the end
    groups = rng.integers(0, len(bounds) - 1, 40)
    want = [len(np.unique(codes[gid == g])) for g in groups]
    assert distinct_each(order, bounds, groups, codes).tolist() == want
