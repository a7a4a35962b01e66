"""The pure bucketisation of local anatomy (dbanon.algorithms.localanatomy) and LAG's
generalisation (dbanon.algorithms.lag), checked by plain counting."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.lag import generalise
from dbanon.algorithms.localanatomy import Principle, bucketise
from dbanon.core.hierarchy import Hierarchy


def eligible_multiset(draw: st.DrawFn) -> tuple[list[int], int]:
    ell = draw(st.integers(2, 6))
    counts = draw(st.lists(st.integers(1, 6), min_size=ell, max_size=25))
    values = [v for v, c in enumerate(counts) for _ in range(c)]
    if max(counts) * ell > len(values):
        values += list(range(100, 100 + max(counts) * ell - len(values)))
    return values, ell


@given(st.composite(eligible_multiset)(), st.booleans(), st.integers(0, 99))
@settings(max_examples=150, deadline=None)
def test_buckets_have_l_distinct_values(case: tuple[list[int], int], heuristic: bool,
                                        seed: int) -> None:  # fmt: skip
    """Every l-eligible multiset: buckets of >= l values, each value at most once (Cor. 4.1);
    with the heuristic, buckets of different median parts hold disjoint value ranges."""
    values, ell = case
    ids = bucketise(np.asarray(values, dtype=np.float64), Principle("l", ell), heuristic,
                    np.random.default_rng(seed))  # fmt: skip
    buckets: dict[int, list[int]] = {}
    for b, v in zip(ids.tolist(), values, strict=True):
        buckets.setdefault(b, []).append(v)
    assert min(ids) == 1
    for vals in buckets.values():
        assert len(vals) >= ell and max(Counter(vals).values()) == 1, (ell, vals)


@given(st.lists(st.sampled_from(["F", "M", "M"]), min_size=4, max_size=80),
       st.floats(0.05, 0.5), st.integers(0, 99))  # fmt: skip
@settings(max_examples=100, deadline=None)
def test_t_buckets_stay_within_t(values: list[str], t: float, seed: int) -> None:
    ids = bucketise(np.asarray(values, dtype=object), Principle("t", t), False,
                    np.random.default_rng(seed))  # fmt: skip
    whole = Counter(values)
    for b in set(ids.tolist()):
        inside = Counter(v for v, i in zip(values, ids.tolist(), strict=True) if i == b)
        n = sum(inside.values())
        emd = sum(abs(inside[v] / n - whole[v] / len(values)) for v in whole) / 2
        assert emd <= t + 1e-9


def test_ineligible_names_the_value() -> None:
    with pytest.raises(ValueError, match=r"value 26 is flagged in 3 of 4 rows"):
        bucketise(np.array([26.0, 26.0, 26.0, 30.0]), Principle("l", 2), False,
                  np.random.default_rng(0))  # fmt: skip


@given(st.integers(10, 120), st.integers(2, 5), st.sampled_from(["partition", "ncp"]),
       st.integers(0, 99))  # fmt: skip
@settings(max_examples=60, deadline=None)
def test_lag_groups_share_a_pattern_and_have_k_rows(n: int, k: int, variant: str,
                                                    seed: int) -> None:  # fmt: skip
    """Every group >= k rows, inside one QI-partition subset; only subsets < k suppressed."""
    rng = np.random.default_rng(seed)
    ages = rng.integers(18, 80, n).astype(np.float64)
    cats = rng.integers(0, 4, n)
    h = Hierarchy.flat("c", ["a", "b", "c", "d"])
    leaf = np.array([h.leaves[x] for x in "abcd"], dtype=np.int32)[cats]
    qi = QIArrays.build([ages], [(leaf, h)], n=n)
    fnum = rng.random((n, 1)) < 0.3
    fcat = rng.random((n, 1)) < 0.3
    gid, figs = generalise(qi, fnum, fcat, k, variant, seed)
    pattern = fnum[:, 0] * 1 + fcat[:, 0] * 2
    sizes = Counter(pattern.tolist())
    for p, size in sizes.items():
        assert (gid[pattern == p] < 0).all() == (size < k)
    assert figs["suppressed_rows"] == sum(s for s in sizes.values() if s < k)
    for g in set(gid[gid >= 0].tolist()):
        members = gid == g
        assert members.sum() >= k and len(set(pattern[members].tolist())) == 1
