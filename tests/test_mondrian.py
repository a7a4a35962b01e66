"""Strict Mondrian: hand-derived partitions, and model, strictness and maximality on random tables.

The checkers below recompute everything from the raw values and the Hierarchy objects (ancestor
walks, Counter, math.log), not from the arrays the algorithm reads.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.mondrian import mondrian
from dbanon.core.hierarchy import Hierarchy

TREE = Hierarchy.from_rows(
    "t",
    [["a1", "A", "*"], ["a2", "A", "*"], ["b1", "B", "*"], ["b2", "B", "*"], ["b3", "B", "*"]],
)
# Random tables mix hierarchies of different heights and sizes (the tables are padded).
FLAT = Hierarchy.flat("f", ["p", "q", "r"])
DEEP = Hierarchy.from_rows("d", [[f"x{i}", f"Y{i // 2}", f"Z{i // 4}", "*"] for i in range(8)])


def parts_of(gid: np.ndarray) -> list[np.ndarray]:
    """Row indexes of each partition, after checking that ids are exactly 0..g-1."""
    assert gid.dtype == np.int32
    g = int(gid.max()) + 1
    assert sorted(set(gid.tolist())) == list(range(g))
    return [np.flatnonzero(gid == i) for i in range(g)]


def lca(h: Hierarchy, leaves: Sequence[int]) -> int:
    paths = [h.ancestors(leaf) for leaf in set(leaves)]
    return next(path[0] for path in zip(*paths, strict=True) if len(set(path)) == 1)


def is_ancestor(h: Hierarchy, a: int, b: int) -> bool:
    """Whether node a is b or above it."""
    return a in h.ancestors(b)


def l_diverse(values: Sequence[int], kind: str, l: int, c: float) -> bool:  # noqa: E741
    counts = sorted(Counter(values).values(), reverse=True)
    if kind == "distinct":
        return len(counts) >= l
    if kind == "entropy":
        n = sum(counts)
        return -sum(x / n * math.log(x / n) for x in counts) >= math.log(l) - 1e-9
    return counts[0] < c * sum(counts[l - 1 :])


def build(
    numeric: Sequence[Sequence[float]], cats: Sequence[Sequence[int]],
    trees: Sequence[Hierarchy] | None = None,
) -> QIArrays:
    return QIArrays.build(
        [np.asarray(col, dtype=float) for col in numeric],
        [(np.asarray(col), h) for col, h in zip(cats, trees or [TREE] * len(cats), strict=True)],
        n=len(numeric[0]) if numeric else len(cats[0]),
    )


def check_partition(
    qi: QIArrays, raw_num: np.ndarray, raw_cat: np.ndarray, gid: np.ndarray, k: int,
    sens: np.ndarray | None = None, kind: str = "distinct", l: int = 1, c: float = 1.0,  # noqa: E741
) -> None:
    """Model, coverage, strictness (any two parts are apart on some QI) and maximality."""
    trees = qi.hierarchies
    parts = parts_of(gid)
    assert len(gid) == qi.n

    def allowable(groups: Sequence[np.ndarray]) -> bool:
        return all(
            len(r) >= k and (sens is None or l_diverse(sens[r].tolist(), kind, l, c))
            for r in groups
        )

    boxes = []
    for rows in parts:
        assert len(rows) >= k
        if sens is not None:
            assert l_diverse(sens[rows].tolist(), kind, l, c)
        num_box = [(raw_num[rows, i].min(), raw_num[rows, i].max())
                   for i in range(raw_num.shape[1])]
        cat_box = [lca(h, raw_cat[rows, j].tolist()) for j, h in enumerate(trees)]
        boxes.append((num_box, cat_box))
        # Maximal: no QI has an allowable cut left.
        for i in range(raw_num.shape[1]):
            v = raw_num[rows, i]
            if v.min() < v.max():
                median = np.sort(v)[len(v) // 2 - 1]
                for left in (v <= median, v < median):
                    assert not allowable([rows[left], rows[~left]])
        for j, h in enumerate(trees):
            node = cat_box[j]
            if h.levels[node] > 0:
                child = [h.ancestors(x)[h.levels[node] - 1] for x in raw_cat[rows, j]]
                groups = [rows[np.asarray(child) == ch] for ch in set(child)]
                assert len(groups) >= 2
                assert not allowable(groups)
    for a in range(len(boxes)):
        for b in range(a + 1, len(boxes)):
            (na, ca), (nb, cb) = boxes[a], boxes[b]
            apart_num = any(x[1] < y[0] or y[1] < x[0] for x, y in zip(na, nb, strict=True))
            apart_cat = any(
                not is_ancestor(h, x, y) and not is_ancestor(h, y, x)
                for x, y, h in zip(ca, cb, trees, strict=True)
            )
            assert apart_num or apart_cat, f"parts {a} and {b} overlap on every QI"


# --- hand-derived examples -------------------------------------------------------------------


def test_eight_values_k2_give_four_pairs_in_order() -> None:
    values = [5, 2, 8, 1, 7, 3, 6, 4]
    gid = mondrian(build([values], []), 2)
    # 8 -> cut at 4 -> {1..4}, {5..8} -> cuts at 2 and 6; ids follow the cut tree left to right.
    assert gid.tolist() == [(v - 1) // 2 for v in values]


def test_odd_size_cuts_below_the_lower_median() -> None:
    gid = mondrian(build([[1, 2, 3, 4, 5, 6, 7]], []), 3)
    # 7 rows: lower median 3 -> {1,2,3} | {4,5,6,7}; neither half has 6 rows to cut again.
    assert gid.tolist() == [0, 0, 0, 1, 1, 1, 1]


def test_run_of_duplicates_at_the_median_cuts_below_it() -> None:
    # The lower median is 4 and "<= 4" takes every row; "< 4" leaves 3 | 5 and is allowed.
    gid = mondrian(build([[4, 1, 4, 2, 4, 3, 4, 4]], []), 3)
    assert gid.tolist() == [1, 0, 1, 0, 1, 0, 1, 1]
    # With k=4 neither cut is allowable: one class.
    assert mondrian(build([[4, 1, 4, 2, 4, 3, 4, 4]], []), 4).tolist() == [0] * 8


def test_the_more_balanced_of_the_two_cuts_wins() -> None:
    # 12 rows, lower median 6 (sorted position 5): "< 6" gives 5 | 7, "<= 6" gives 8 | 4; both
    # are allowable for k=4 and the first is nearer the middle. Neither side can then be cut
    # (the 8 | 4 cut would have gone on to cut the 8 into 4 | 4).
    values = [1, 2, 3, 4, 5, 6, 6, 6, 7, 8, 9, 10]
    assert mondrian(build([values], []), 4).tolist() == [0] * 5 + [1] * 7


def test_widest_normalised_span_is_cut_first() -> None:
    # Both columns span their whole domain at the root: the tie goes to x (first QI), cut x <= 3.
    # Left half: x spans 3/7, y spans 1 -> cut on y. Right half: y is constant -> cut on x.
    x = [0, 1, 2, 3, 4, 5, 6, 7]
    y = [0, 7, 0, 7, 3, 3, 3, 3]
    gid = mondrian(build([x, y], []), 2)
    assert gid.tolist() == [0, 1, 0, 1, 2, 2, 3, 3]


def test_categorical_cut_follows_the_hierarchy() -> None:
    a1, a2, b1, b2, b3 = (TREE.leaf(v) for v in ("a1", "a2", "b1", "b2", "b3"))
    codes = [a1] * 3 + [b1] * 3 + [a2] * 3 + [b2] * 3 + [b3]
    gid = mondrian(build([], [codes]), 3)
    # Root -> A (6 rows) | B (7 rows); A -> a1 | a2; B cannot cut: b3 has 1 row < k.
    assert gid.tolist() == [0] * 3 + [2] * 3 + [1] * 3 + [2] * 4
    # k=4: A's children have 3 rows each, so A stays whole.
    assert mondrian(build([], [codes]), 4).tolist() == [0] * 3 + [1] * 3 + [0] * 3 + [1] * 4


def test_categorical_cut_that_is_not_allowable_falls_to_the_next_qi() -> None:
    a1, b1, b3 = (TREE.leaf(v) for v in ("a1", "b1", "b3"))
    codes = [a1] * 4 + [b1] * 3 + [b3]  # the root cut would give A:4 | B:4, then B: b1 3 | b3 1
    x = [1, 2, 3, 4, 5, 6, 7, 8]
    gid = mondrian(build([x], [codes]), 2)
    # Root: x and the categorical both span 1; x is first -> x <= 4 (exactly the A | B cut).
    # {a1, x 1..4}: only x varies -> {1,2} {3,4}. {b1 b1 b1 b3, x 5..8}: the LCA B spans 1/2,
    # x spans 3/7, so the categorical is tried first, but b3 has 1 row < k -> x: {5,6} {7,8}.
    assert gid.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    gid = mondrian(build([x], [codes]), 3)
    # k=3: root x <= 4 -> {1..4} {5..8}; then no cut leaves 3 on both sides.
    assert gid.tolist() == [0] * 4 + [1] * 4


def test_l_diversity_blocks_a_cut_that_k_allows() -> None:
    x = [1, 2, 3, 4, 5, 6, 7, 8]
    sens = [0, 0, 0, 0, 1, 1, 1, 1]
    qi = build([x], [])
    assert mondrian(qi, 2).max() == 3
    # Every "x <= median" cut separates the two codes: distinct 2-diversity keeps one class.
    assert mondrian(qi, 2, sensitive=np.array(sens), l=2).tolist() == [0] * 8
    alternating = np.array([0, 1] * 4)
    assert mondrian(qi, 2, sensitive=alternating, l=2).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


# --- errors ----------------------------------------------------------------------------------


def test_fewer_rows_than_k() -> None:
    with pytest.raises(ValueError, match="3 rows, fewer than k=4"):
        mondrian(build([[1, 2, 3]], []), 4)


def test_table_that_is_not_l_eligible_names_the_dominant_value() -> None:
    qi = build([list(range(10))], [])
    skewed = np.array([7] * 8 + [3] * 2)
    # Two distinct values: distinct 2-diversity holds, entropy 2-diversity does not. The two
    # rows of code 3 are x = 8 and 9, so both median cuts (x <= 4, x < 4) leave a left part of
    # only 7s: no cut, one class.
    assert mondrian(qi, 2, sensitive=skewed, l=2).tolist() == [0] * 10
    with pytest.raises(ValueError, match=r"not entropy 2-diverse.*code 7 holds 80\.0% of the 10"):
        mondrian(qi, 2, sensitive=skewed, l=2, l_kind="entropy")
    with pytest.raises(ValueError, match=r"not distinct 3-diverse.*code 7 holds 80\.0%"):
        mondrian(qi, 2, sensitive=skewed, l=3)
    # (c, 2): 8 < c * 2 needs c > 4.
    with pytest.raises(ValueError, match=r"recursive 2-diverse as a whole \(c=4\.0\)"):
        mondrian(qi, 2, sensitive=skewed, l=2, l_kind="recursive", c=4.0)
    assert mondrian(qi, 2, sensitive=skewed, l=2, l_kind="recursive", c=4.5).tolist() == [0] * 10
    # With a 3 on each side of the cut x <= 4 (x = 2 and 7), both halves are distinct 2-diverse
    # and (4.5, 2)-diverse (4 < 4.5 * 1): one cut; the next cuts (x <= 2 | x < 2, on 5 rows)
    # leave a part without a 3. Each half's entropy (4:1, 0.50 < ln 2) forbids even the first.
    apart = np.array([7, 7, 3, 7, 7, 7, 7, 3, 7, 7])
    assert mondrian(qi, 2, sensitive=apart, l=2).tolist() == [0] * 5 + [1] * 5
    assert mondrian(qi, 2, sensitive=apart, l=2, l_kind="recursive", c=4.5).tolist() == (
        [0] * 5 + [1] * 5
    )
    with pytest.raises(ValueError, match="not entropy 2-diverse"):
        mondrian(qi, 2, sensitive=apart, l=2, l_kind="entropy")


def test_bad_arguments() -> None:
    qi = build([list(range(10))], [])
    with pytest.raises(ValueError, match="needs the sensitive column"):
        mondrian(qi, 2, l=2)
    with pytest.raises(ValueError, match="unknown l-diversity kind"):
        mondrian(qi, 2, sensitive=np.arange(10), l=2, l_kind="probabilistic")
    with pytest.raises(ValueError, match="shape"):
        mondrian(qi, 2, sensitive=np.arange(9), l=2)
    with pytest.raises(ValueError, match="k must be"):
        mondrian(qi, 0)


# --- random tables ---------------------------------------------------------------------------


@st.composite
def tables(draw: st.DrawFn, with_sensitive: bool = False):
    n = draw(st.integers(1, 60))
    p = draw(st.integers(0, 2))
    q = draw(st.integers(0 if p else 1, 2))
    spread = draw(st.integers(1, 12))  # few distinct values -> many duplicates at the median
    num = np.array(draw(st.lists(st.lists(st.integers(0, spread), min_size=p, max_size=p),
                                 min_size=n, max_size=n)), dtype=float).reshape(n, p)
    trees = draw(st.lists(st.sampled_from([TREE, FLAT, DEEP]), min_size=q, max_size=q))
    cat = np.array(
        [[draw(st.sampled_from(sorted(h.leaves.values()))) for h in trees] for _ in range(n)],
        dtype=np.int64,
    ).reshape(n, q)
    k = draw(st.integers(1, max(1, n // 2)))
    sens = None
    if with_sensitive:
        sens = np.array(draw(st.lists(st.integers(0, draw(st.integers(1, 5))), min_size=n,
                                      max_size=n)), dtype=np.int64)
    return num, cat, trees, k, sens


@settings(max_examples=150, deadline=None)
@given(tables())
def test_random_tables_k_anonymity(table) -> None:
    num, cat, trees, k, _ = table
    qi = build(list(num.T), list(cat.T), trees)
    gid = mondrian(qi, k)
    check_partition(qi, num, cat, gid, k)


@settings(max_examples=150, deadline=None)
@given(tables(with_sensitive=True), st.sampled_from(["distinct", "entropy", "recursive"]),
       st.integers(2, 4), st.sampled_from([0.5, 1.0, 2.0, 3.0]))
def test_random_tables_l_diversity(table, kind: str, l: int, c: float) -> None:  # noqa: E741
    num, cat, trees, k, sens = table
    qi = build(list(num.T), list(cat.T), trees)
    if not l_diverse(sens.tolist(), kind, l, c):
        with pytest.raises(ValueError, match="as a whole"):
            mondrian(qi, k, sensitive=sens, l=l, l_kind=kind, c=c)
        return
    gid = mondrian(qi, k, sensitive=sens, l=l, l_kind=kind, c=c)
    check_partition(qi, num, cat, gid, k, sens, kind, l, c)


@settings(max_examples=50, deadline=None)
@given(tables(), st.randoms(use_true_random=False))
def test_row_order_does_not_matter(table, rnd) -> None:
    num, cat, trees, k, _ = table
    perm = np.array(rnd.sample(range(len(num)), len(num)), dtype=np.int64)
    gid = mondrian(build(list(num.T), list(cat.T), trees), k)
    shuffled = mondrian(build(list(num[perm].T), list(cat[perm].T), trees), k)
    assert gid[perm].tolist() == shuffled.tolist()


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 400), st.integers(1, 30), st.randoms(use_true_random=False))
def test_distinct_values_give_classes_below_2k(n: int, k: int, rnd) -> None:
    """One QI of distinct values: every class of >= 2k rows has an allowable median cut."""
    if n < k:
        return
    values = rnd.sample(range(10 * n), n)
    sizes = np.bincount(mondrian(build([values], []), k))
    assert sizes.min() >= k
    assert sizes.max() < 2 * k


@settings(max_examples=120, deadline=None)
@given(tables(with_sensitive=True), st.integers(1, 3), st.sampled_from([1, 2, 3]))
def test_subtrees_grown_in_threads_give_the_one_call_ids(table, l: int, workers: int) -> None:  # noqa: E741
    """From THREADED_ROWS rows the root's parts grow on several threads (`_whole`): the ids
    must be those of the serial call, row for row (numbering runs in order, disjoint rows)."""
    from dbanon.algorithms import blocks
    from dbanon.algorithms import mondrian as module

    num, cat, trees, k, sens = table
    qi = build(list(num.T), list(cat.T), trees)
    if l > 1 and not l_diverse(sens.tolist(), "distinct", l, 1.0):
        return
    serial = mondrian(qi, k, sensitive=sens, l=l)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "THREADED_ROWS", 1)
        mp.setattr(blocks, "cores", lambda: workers)
        threaded = mondrian(qi, k, sensitive=sens, l=l)
    assert threaded.tolist() == serial.tolist()
