"""A refresh's split attempts in one call (persist.split_large with `many`; Mondrian's
`mondrian_many`): the roots of one compiled call are partitioned as calls on each root's rows
alone partition them, and split_large keeps the same splits (no database)."""

from __future__ import annotations

import numpy as np
import pytest

from dbanon.algorithms import persist
from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.mondrian import L_KINDS, mondrian, mondrian_many
from dbanon.core.hierarchy import Hierarchy


def _table(seed: int) -> tuple[QIArrays, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(300, 3000))
    tree = Hierarchy.from_rows("t", [[f"l{i}", f"m{i // 2}", "*"] for i in range(4)])
    qi = QIArrays.build([rng.integers(0, 20, n).astype(float), rng.random(n)],
                        [(rng.integers(0, 4, n).astype(np.int32), tree)], n)  # fmt: skip
    return qi, rng.integers(0, 6, n)


def _alone(qi: QIArrays, rows: np.ndarray, k: int, options: dict) -> np.ndarray:
    """A call on the root's rows alone; one part where it cannot partition them."""
    if options:
        options = {**options, "sensitive": options["sensitive"][rows]}
    try:
        return mondrian(persist.subset(qi, rows), k, **options)
    except ValueError:
        return np.zeros(len(rows), dtype=np.int32)


@pytest.mark.parametrize("seed", range(24))
def test_many_roots_are_cut_as_each_alone(seed: int) -> None:
    qi, sens = _table(seed)
    rng = np.random.default_rng(100 + seed)
    k, l = int(rng.integers(2, 6)), int(rng.integers(1, 4))  # noqa: E741
    options = {"sensitive": sens, "l": l, "l_kind": L_KINDS[seed % 4], "c": 2.0} if l > 1 else {}
    cut = rng.permutation(qi.n)[: qi.n * 3 // 4]
    roots = [np.sort(r) for r in np.array_split(cut, int(rng.integers(1, 12)))]
    got = mondrian_many(qi, k, roots, **options)
    parts = 0
    for rows, ids in zip(roots, got, strict=True):
        assert np.array_equal(ids, _alone(qi, rows, k, options))
        parts += int(ids.max()) + 1
    assert parts > len(roots)  # roots were cut: the comparison can fail


@pytest.mark.parametrize("seed", range(6))
def test_split_large_keeps_the_splits_one_call_a_group_keeps(seed: int) -> None:
    qi, sens = _table(seed)
    rng = np.random.default_rng(200 + seed)
    k = int(rng.integers(2, 5))
    gid = rng.integers(0, qi.n // (4 * k), qi.n)  # groups of about 4k rows: all tried

    def cluster(rows: np.ndarray) -> np.ndarray:
        return mondrian(persist.subset(qi, rows), k)

    def many(roots: list[np.ndarray]) -> list[np.ndarray]:
        return mondrian_many(qi, k, roots)

    def holds(rows: np.ndarray) -> bool:  # a promise some splits keep and others do not
        return len(np.unique(sens[rows])) >= 3

    one = persist.split_large(gid.copy(), cluster, holds, k)
    assert np.array_equal(persist.split_large(gid.copy(), cluster, holds, k, many=many), one)
    assert len(np.unique(gid)) < one.max() + 1  # some splits were kept
    assert (np.bincount(one) < 2 * k).sum() < len(np.unique(one))  # and some were not


@pytest.mark.parametrize("spread", [(1, 0), (3, 7), (2, -5)])
def test_split_large_numbers_any_ids_as_dense_parts(spread: tuple[int, int]) -> None:
    """An algorithm's ids need not be 0..p-1: parts numbered apart, shifted or negative (in
    any group of the one call) are the same parts, split and numbered as dense ones are."""
    qi, sens = _table(3)
    k = 3
    gid = np.random.default_rng(9).integers(0, qi.n // (4 * k), qi.n)
    scale, shift = spread

    def many(roots: list[np.ndarray]) -> list[np.ndarray]:
        out = mondrian_many(qi, k, roots)
        return [ids * scale + shift * (i % 3) for i, ids in enumerate(out)]

    def holds(rows: np.ndarray) -> bool:
        return len(np.unique(sens[rows])) >= 3

    def cluster(rows: np.ndarray) -> np.ndarray:
        return mondrian(persist.subset(qi, rows), k)

    one = persist.split_large(gid.copy(), cluster, holds, k)
    assert np.array_equal(persist.split_large(gid.copy(), cluster, holds, k, many=many), one)
    assert len(np.unique(gid)) < one.max() + 1  # some splits were kept


def test_split_large_tries_one_at_a_time_when_the_rows_together_fail() -> None:
    """`many` raising ValueError (the table as a whole not diverse) or returning None (no
    such call) leaves the attempts to `cluster`, one a group."""
    qi, sens = _table(0)
    gid = np.arange(qi.n) // 40
    calls: list[int] = []

    def cluster(rows: np.ndarray) -> np.ndarray:
        calls.append(len(rows))
        return mondrian(persist.subset(qi, rows), 4)

    def refuses(roots: list[np.ndarray]) -> list[np.ndarray]:
        raise ValueError("not diverse as a whole")

    want = persist.split_large(gid.copy(), cluster, lambda rows: True, 4)
    tried = len(calls)
    for many in (refuses, lambda roots: None):
        calls.clear()
        got = persist.split_large(gid.copy(), cluster, lambda rows: True, 4, many=many)
        assert np.array_equal(got, want) and len(calls) == tried > 0


@pytest.mark.parametrize("seed", range(16))
def test_kmember_many_clusters_each_root_as_alone(seed: int) -> None:
    """k-member of each root's rows in the secret order (ties.secret_order), as
    methods.kmember.KMember.cluster runs it: the same clusters from one compiled call."""
    from dbanon.algorithms.kmember import kmember, kmember_many
    from dbanon.algorithms.ties import restore, secret_order

    rng = np.random.default_rng(300 + seed)
    n = int(rng.integers(200, 2000))
    tree = Hierarchy.from_rows("t", [[f"l{i}", f"m{i // 2}", "*"] for i in range(4)])
    flat = Hierarchy.flat("r", ["a", "b", "c"])
    nums = [rng.integers(0, 6, n).astype(float), rng.random(n).round(1)][: seed % 3]
    cats = [(rng.integers(0, 4, n).astype(np.int32), tree),
            (rng.integers(0, 3, n).astype(np.int32), flat)][: 1 + seed % 2]  # fmt: skip
    qi = QIArrays.build(nums, cats, n)
    k = int(rng.integers(2, 6))
    options = {"seed": seed, "seeding": ("random", "furthest")[seed % 2],
               "cost": ("height", "ncp")[seed // 8]}  # fmt: skip
    cut = rng.permutation(n)[: n * 3 // 4]
    roots = [np.sort(r) for r in np.array_split(cut, int(rng.integers(1, 10)))]
    orders = [secret_order(seed, len(r)) for r in roots]
    got = kmember_many(qi, k, roots, orders, **options)
    for rows, order, ids in zip(roots, orders, got, strict=True):
        want = restore(order, kmember(persist.subset(qi, rows[order]), k, **options))
        assert np.array_equal(ids, want)
        assert int(ids.max()) + 1 == len(rows) // k  # clusters of k..2k-1: many of them
