"""LAG's two generalisations as pure code, against brute-force checks of what each promises:
LAG_2 (Xu et al.'s Top-down with re-balancing) leaves groups of k..2k-1 rows, assigns each row
as a plain re-reading of the rule does, and loses less than LAG_1; LAG_1 (Algorithm 5.2) stops
only where no median cut of any attribute leaves both sides k rows."""

from __future__ import annotations

import numpy as np
import pytest

from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.lag import generalise, leaf_order, median_cuts, ncp, qi_partition
from dbanon.core.hierarchy import Hierarchy

H = Hierarchy.from_rows("h", [[v, "ab" if v in "ab" else "cd", "*"] for v in "abcd"])


def _table(n: int, seed: int) -> tuple[QIArrays, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    age = rng.integers(20, 70, n)
    hours = rng.integers(10, 60, n)
    letters = np.array([H.leaves[v] for v in rng.choice(list("abcd"), n)], dtype=np.int32)
    qi = QIArrays.build([age, hours], [(letters, H)])
    fnum = rng.random((n, 2)) < 0.15
    fcat = rng.random((n, 1)) < 0.15
    return qi, fnum, fcat


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [2, 5])
def test_top_down_groups_hold_k_to_2k_minus_1_rows_of_one_pattern(seed: int, k: int) -> None:
    qi, fnum, fcat = _table(300, seed)
    gid, figures = generalise(qi, fnum, fcat, k, "ncp", seed)
    subset = qi_partition(np.hstack([fnum, fcat]))
    for g in np.unique(gid[gid >= 0]):
        rows = np.flatnonzero(gid == g)
        assert len(set(subset[rows].tolist())) == 1  # never mixes flag patterns
        shown = np.hstack([qi.num, qi.cat])[:, ~np.hstack([fnum, fcat])[rows[0]]]
        alike = len({tuple(shown[r]) for r in rows}) == 1  # nothing to split on
        assert k <= len(rows) and (len(rows) < 2 * k or alike), (g, len(rows))
    # Only subsets below k rows are suppressed, all of them.
    sizes = np.bincount(subset)
    assert figures["suppressed_rows"] == int(sizes[(sizes > 0) & (sizes < k)].sum())
    assert ((gid < 0) == (sizes[subset] < k)).all()


def test_top_down_split_is_the_rule_read_plainly() -> None:
    """One split by the numba loop against a plain Python reading of Xu et al.'s rule: each row
    in turn joins the group whose |G| x NCP(box) grows least (ties to u's group)."""
    from dbanon.algorithms.topdown import top_down_split

    qi, _, _ = _table(60, 7)
    rng = np.random.default_rng(1)
    order = rng.permutation(qi.n)
    u, v = 3, 41
    side = top_down_split(qi.num, qi.cat, qi.lca, qi.height, order, u, v, 5)

    def cost(rows: list[int]) -> float:
        span = qi.num[rows].max(axis=0) - qi.num[rows].min(axis=0)
        node = qi.cat[rows[0], 0]
        for r in rows[1:]:
            node = qi.lca[0, node, qi.cat[r, 0]]
        return len(rows) * (float(span.sum()) + float(qi.height[0, node]))

    groups: list[list[int]] = [[u], [v]]
    for w in order.tolist():
        if w in (u, v):
            continue
        grow = [cost(g + [w]) - cost(g) for g in groups]
        groups[0 if grow[0] <= grow[1] else 1].append(w)
    assert sorted(np.flatnonzero(side).tolist()) == sorted(groups[0])


@pytest.mark.parametrize("seed", range(3))
def test_median_cuts_stop_only_where_no_cut_is_possible(seed: int) -> None:
    k = 4
    qi, fnum, fcat = _table(250, seed)
    fnum[:] = False
    fcat[:] = False
    gid, _ = generalise(qi, fnum, fcat, k, "partition")
    x = np.hstack([qi.num, leaf_order(qi)])
    for g in np.unique(gid):
        rows = np.flatnonzero(gid == g)
        assert len(rows) >= k
        for a in range(x.shape[1]):  # Algorithm 5.2's condition, tried on every attribute
            left = x[rows, a] <= np.median(x[rows, a])
            assert not (k <= left.sum() <= len(rows) - k), (g, a)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [2, 3, 7])
def test_compiled_median_cuts_are_the_numpy_loop(seed: int, k: int) -> None:
    """The compiled loop (taken without NaN) gives the groups, numbered alike, of the numpy
    loop (taken where a column holds NaN): an all-NaN column is never cut, so adding one sends
    the same table down the numpy loop."""
    qi, _, _ = _table(400, seed)
    rng = np.random.default_rng(seed)
    ties = QIArrays.build([qi.num[:, 0] // 7, rng.integers(0, 3, qi.n)],
                          [(qi.cat[:, 0], H)])  # fmt: skip
    for table in (qi, ties):
        nan = QIArrays.build([*table.num.T, np.full(table.n, np.nan)], [(table.cat[:, 0], H)])
        compiled = median_cuts(table, k)
        assert compiled.max() > 3
        assert np.array_equal(compiled, median_cuts(nan, k))


def test_leaf_order_keeps_siblings_together() -> None:
    qi, _, _ = _table(40, 3)
    pos = leaf_order(qi)[:, 0]
    by_letter = {H.labels[c]: p for c, p in zip(qi.cat[:, 0].tolist(), pos.tolist(), strict=True)}
    assert max(by_letter["a"], by_letter["b"]) < min(by_letter["c"], by_letter["d"])


@pytest.mark.parametrize("k", [5, 10])
def test_lag_2_loses_less_than_lag_1(k: int) -> None:
    qi, fnum, fcat = _table(2000, 11)
    losses = {v: ncp(qi, fnum, fcat, generalise(qi, fnum, fcat, k, v, 0)[0])
              for v in ("partition", "ncp")}  # fmt: skip
    assert losses["ncp"] < losses["partition"]


def _line(values: list[float]) -> tuple[QIArrays, np.ndarray, np.ndarray]:
    n = len(values)
    qi = QIArrays.build([np.asarray(values, dtype=np.float64)], [])
    return qi, np.zeros((n, 1), dtype=bool), np.zeros((n, 0), dtype=bool)


def _sizes(gid: np.ndarray) -> list[int]:
    return sorted(np.bincount(np.unique(gid, return_inverse=True)[1].reshape(-1)).tolist())


@pytest.mark.parametrize("seed", range(5))
def test_thesis_lag_2_keeps_a_lopsided_set_whole_where_top_down_rebalances(seed: int) -> None:
    # Seven rows at 0 and one at 10, k = 3: the seeds are 0 and 10, and the nearer seed leaves
    # 10 alone. Algorithm 5.3 as written keeps the 8 rows as one group; Top-down gives the
    # lone row k-1 rows of the cluster and cuts.
    qi, fnum, fcat = _line([0, 0, 0, 0, 0, 0, 0, 10])
    thesis, _ = generalise(qi, fnum, fcat, 3, "ncp-thesis", seed)
    top_down, _ = generalise(qi, fnum, fcat, 3, "ncp", seed)
    assert _sizes(thesis) == [8]
    assert _sizes(top_down) == [3, 5]
    # Where the nearer seed leaves both sides k rows, the thesis's variant cuts too.
    qi, fnum, fcat = _line([0, 1, 2, 3, 50, 51, 52, 53])
    thesis, _ = generalise(qi, fnum, fcat, 3, "ncp-thesis", seed)
    assert _sizes(thesis) == [4, 4]
    assert set(thesis[:4].tolist()).isdisjoint(thesis[4:].tolist())


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [2, 5])
def test_thesis_lag_2_groups_hold_k_rows_and_never_borrow(seed: int, k: int) -> None:
    """Every class holds >= k rows of one flag pattern, only subsets below k are suppressed, and
    with nothing moved across a lopsided split some classes keep 2k rows or more."""
    qi, fnum, fcat = _table(300, seed)
    gid, _ = generalise(qi, fnum, fcat, k, "ncp-thesis", seed)
    subset = qi_partition(np.hstack([fnum, fcat]))
    sizes = np.bincount(subset)
    assert ((gid < 0) == (sizes[subset] < k)).all()
    big = 0
    for g in np.unique(gid[gid >= 0]):
        rows = np.flatnonzero(gid == g)
        assert len(set(subset[rows].tolist())) == 1 and len(rows) >= k
        big += len(rows) >= 2 * k
    # No re-balancing: some classes stay at 2k rows or more (Top-down leaves none, above).
    assert big > 0


@pytest.mark.parametrize("seed", range(3))
def test_select_and_middle_are_the_order_statistics_numpy_gives(seed: int) -> None:
    """The compiled cuts' selection (Mondrian's quickselect, in place) finds the value np.sort
    puts at kth, leaves no larger value before it nor smaller after it, and their median is
    np.median's, on runs of duplicates as on distinct values."""
    from dbanon.algorithms.mondrian import _select as select
    from dbanon.algorithms.topdown import middle

    rng = np.random.default_rng(seed)
    for t in range(400):
        n = int(rng.integers(1, 80))
        a = (rng.integers(0, int(rng.integers(1, 5)), n).astype(np.float64) if t % 2
             else rng.normal(size=n))  # fmt: skip
        kth = int(rng.integers(0, n))
        b = a.copy()
        v = select(b, kth)
        assert v == np.sort(a)[kth] == b[kth]
        assert (b[:kth] <= v).all() and (b[kth + 1:] >= v).all()
        assert np.array_equal(np.sort(b), np.sort(a))  # a permutation of the values
        assert middle(a.copy()) == np.median(a)


def test_group_extremes_are_numpys_per_group_max_and_min() -> None:
    """One compiled pass per column gives each group's max and min of its live rows (NaN
    winning, as np.maximum.at's), and which groups have any, for floats and integer codes."""
    from dbanon.algorithms.topdown import group_extremes

    rng = np.random.default_rng(5)
    n, groups = 2000, 150
    g = rng.integers(0, groups, n)
    live = rng.random(n) < 0.8
    floats = rng.normal(size=n)
    floats[rng.random(n) < 0.01] = np.nan
    for values in (floats, rng.integers(0, 40, n)):
        hi, lo, seen = group_extremes(values, live, g, groups)
        want_hi = np.full(groups, -np.inf)
        want_lo = np.full(groups, np.inf)
        with np.errstate(invalid="ignore"):  # NaN in, NaN out: what is compared
            np.maximum.at(want_hi, g[live], values[live].astype(np.float64))
            np.minimum.at(want_lo, g[live], values[live].astype(np.float64))
        want_seen = np.bincount(g[live], minlength=groups) > 0
        assert np.array_equal(seen, want_seen)
        assert np.array_equal(hi[seen].astype(np.float64), want_hi[seen], equal_nan=True)
        assert np.array_equal(lo[seen].astype(np.float64), want_lo[seen], equal_nan=True)
        assert hi.dtype == values.dtype
