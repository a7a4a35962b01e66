"""The regrouping's nearest-neighbour walk against brute force (no database).

nearest.walk visits points outwards along one numeric QI and stops where that QI's
difference alone passes the m-th distance found: it must give exactly the m nearest free
points below the bound, nearest first, ties by position, as sorting every distance does."""

from __future__ import annotations

import numpy as np
import pytest

from dbanon.algorithms import nearest, persist
from dbanon.algorithms.base import QIArrays
from dbanon.core.hierarchy import Hierarchy


def _brute(qi: QIArrays, q: int, points: np.ndarray, free: np.ndarray, bound: float,
           m: int) -> list[int]:  # fmt: skip
    """Every distance by numpy, sorted by (distance, position)."""
    d = np.abs(qi.num[q] - qi.num[points]).sum(axis=1) if qi.num.shape[1] else np.zeros(
        len(points))  # fmt: skip
    for b in range(qi.cat.shape[1]):
        d = d + qi.height[b][qi.lca[b][qi.cat[q, b], qi.cat[points, b]]]
    keep = np.flatnonzero(free & (d < bound))
    return keep[np.lexsort((keep, d[keep]))][:m].tolist()


@pytest.mark.parametrize("seed", range(12))
def test_the_walk_finds_what_sorting_every_distance_finds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    numeric = int(rng.integers(0, 3))
    coarse = seed % 2 == 0  # few distinct values: many ties
    nums = [rng.integers(0, 4, n).astype(float) if coarse else rng.random(n)
            for _ in range(numeric)]  # fmt: skip
    h = Hierarchy.flat("r", ["a", "b", "c"])
    tree = Hierarchy.from_rows("t", [[f"l{i}", f"m{i // 2}", "*"] for i in range(4)])
    cats = [(rng.integers(0, 3, n).astype(np.int32), h),
            (rng.integers(0, 4, n).astype(np.int32), tree)]  # fmt: skip
    qi = QIArrays.build(nums, cats[: 2 if seed % 3 == 2 else 1])
    # one part on a line, and parts by categorical values (skipped whole when too far)
    dim, order, _ = nearest.line(qi.num)
    lines = [(dim, order, *nearest.whole(n)), nearest.parts(qi.num, qi.cat)]
    for _ in range(20):
        q = int(rng.integers(0, n))
        free = rng.random(n) < 0.7
        bound = np.inf if rng.random() < 0.5 else float(rng.random() * 2)
        m = int(rng.integers(1, 20))
        for line in lines:
            got, _ = nearest.walk(qi.num[q], qi.cat[q], qi.num, qi.cat, qi.lca, qi.height,
                                   free, bound, m, *line)  # fmt: skip
            assert got.tolist() == _brute(qi, q, np.arange(n), free, bound, m)


@pytest.mark.parametrize("seed", range(20))
def test_parts_give_ties_across_parts_to_the_lower_position(seed: int) -> None:
    """Few rows, few values: the m-th distance is often a part's own cost, and the rows tied
    at it in another part may come first by position."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    nums = [rng.integers(0, 2, n).astype(float)] if seed % 2 else []
    h = Hierarchy.flat("r", [f"v{i}" for i in range(int(rng.integers(2, 6)))])
    qi = QIArrays.build(nums, [(rng.integers(0, len(h.leaves), n).astype(np.int32), h)], n)
    line = nearest.parts(qi.num, qi.cat)
    for _ in range(30):
        q, m = int(rng.integers(0, n)), int(rng.integers(1, n + 1))
        free = rng.random(n) < 0.8
        got, _ = nearest.walk(qi.num[q], qi.cat[q], qi.num, qi.cat, qi.lca, qi.height, free,
                               np.inf, m, *line)  # fmt: skip
        assert got.tolist() == _brute(qi, q, np.arange(n), free, np.inf, m)


def test_a_moved_centre_finds_its_place_on_the_line_again() -> None:
    rng = np.random.default_rng(3)
    cnum = rng.random((200, 2))
    dim, order, pos = nearest.line(cnum)
    for _ in range(300):
        g = int(rng.integers(0, 200))
        cnum[g] = rng.random(2)
        nearest.moved_on_line(cnum, dim, order, pos, g, 0, len(order))
        assert (np.diff(cnum[order, dim]) >= 0).all()
        assert (pos[order] == np.arange(200)).all()


@pytest.mark.parametrize("seed", range(12))
def test_merging_centres_walked_in_parts_give_the_nearest_of_all(seed: int) -> None:
    """merge_failing's centres move and change their values as groups merge: walked in parts
    (a centre whose categorical values change leaves its part for the strays), the nearest
    found are those sorting every alive centre's distance finds."""
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(2, 300))
    coarse = seed % 2 == 0
    nums = [rng.integers(0, 4, n).astype(float) if coarse else rng.random(n)
            for _ in range(int(rng.integers(0, 3)))]  # fmt: skip
    h = Hierarchy.flat("r", ["a", "b", "c"])
    tree = Hierarchy.from_rows("t", [[f"l{i}", f"m{i // 2}", "*"] for i in range(4)])
    cats = [(rng.integers(0, 3, n).astype(np.int32), h),
            (rng.integers(0, 4, n).astype(np.int32), tree)]  # fmt: skip
    qi = QIArrays.build(nums, cats[: 1 + seed % 2])
    cnum, ccat = qi.num.copy(), qi.cat.astype(np.int64)
    near = nearest.Near(cnum, ccat, np.ones(n, dtype=bool))
    cnum, ccat = near.cnum, near.ccat
    for _ in range(min(n - 1, 60)):
        g = int(rng.choice(np.flatnonzero(near.alive)))
        near.gone(g)
        m = int(rng.integers(1, 17))
        got = near.nearest(g, m, qi.lca, qi.height)
        ref = QIArrays(cnum, ccat, qi.lca, qi.height, qi.hierarchies)
        assert got == _brute(ref, g, np.arange(n), near.alive, np.inf, m)
        into = got[0] if got else g
        if got:  # the merged centre moves, and now and then takes other values
            if cnum.shape[1]:
                cnum[into] = (cnum[into] + cnum[g]) / 2 if coarse else rng.random(cnum.shape[1])
            if rng.random() < 0.3:
                ccat[into] = ccat[g]
            near.moved(into)


def test_a_merged_groups_centre_is_numpys_mean_and_commonest_leaf() -> None:
    """merge_failing's compiled centre: the rows' mean (to the bit, as NumPy sums them) and
    each categorical QI's commonest leaf, the smallest of a tie (np.bincount's argmax)."""
    from dbanon.algorithms.centres import centre

    rng = np.random.default_rng(3)
    for _ in range(500):
        num = rng.random((300, 3)) * rng.choice([1.0, 1e3])
        cat = rng.integers(0, int(rng.integers(1, 12)), (300, 4))
        rows = rng.choice(300, int(rng.integers(1, 40)), replace=False).astype(np.int64)
        cnum, ccat = np.zeros((3, 3)), np.zeros((3, 4), dtype=np.int64)
        centre(rows, num, cat, cnum, ccat, 1)
        assert cnum[1].tolist() == num[rows].mean(axis=0).tolist()
        assert ccat[1].tolist() == [int(np.bincount(cat[rows, j]).argmax()) for j in range(4)]
        assert not cnum[[0, 2]].any() and not ccat[[0, 2]].any()  # the other groups untouched


@pytest.mark.parametrize("seed", range(8))
def test_merges_asking_for_few_candidates_first_merge_as_asking_for_all(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """merge_failing finds the 2 nearest groups first and the others only when neither union
    holds: the groups it makes are those of walking for every candidate at once."""
    rng = np.random.default_rng(200 + seed)
    n, k = int(rng.integers(200, 2000)), int(rng.integers(2, 8))
    qi = QIArrays.build([rng.random(n).round(1 + seed % 2) for _ in range(2)], [], n)
    gid = np.unique(rng.integers(0, n // (k + 1), n), return_inverse=True)[1].reshape(-1)
    bad = rng.random(n) < 0.3  # unions with many 'bad' rows fail: later candidates are tried

    def holds(rows: np.ndarray) -> bool:
        return len(rows) >= k and int(bad[rows].sum()) * 3 < len(rows) + 2

    groups = int(gid.max()) + 1
    lazy = persist.merge_failing(qi, gid.copy(), groups, holds)
    monkeypatch.setattr(persist, "_FIRST", persist._CANDIDATES)
    assert (persist.merge_failing(qi, gid.copy(), groups, holds) == lazy).all()
