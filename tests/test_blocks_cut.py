"""The compiled cut (dbanon.algorithms.blocks.cut) against the NumPy form it replaced, kept
here as the reference: the same blocks, rows in the same order, on random tables with distinct
and duplicated values, numeric-only and categorical-only QIs, even and halving aims, a row
order, the (p,k) rule's distinct values and (θ,k)'s categories."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from dbanon.algorithms import blocks as bl
from dbanon.algorithms.base import QIArrays
from dbanon.core.hierarchy import Hierarchy
from dbanon.metrics.loss import node_weights

TREE = Hierarchy.from_rows("tree", [[f"l{i}", f"m{i // 3}", f"t{i // 6}", "*"] for i in range(12)])
SEX = Hierarchy.flat("sex", ["F", "M"])


def reference_cut(
    qi: QIArrays, k: int, block_size: int, cost: str = "height",
    sensitive: np.ndarray | None = None, p: int = 1,
    fits: Callable[[np.ndarray], bool] | None = None, even: bool = False,
    rows: np.ndarray | None = None,
) -> list[np.ndarray]:  # fmt: skip
    """blocks.cut as it was written in NumPy (commit 05d73ce)."""
    weights = node_weights(qi, cost)
    ranks = bl._depth_first_rank(qi)
    ranked = [r[qi.cat[:, j]] for j, r in enumerate(ranks)]
    leaf_of_rank = [np.argsort(r[: len(h.leaves)])
                    for r, h in zip(ranks, qi.hierarchies, strict=True)]  # fmt: skip
    nn = qi.num.shape[1]

    def best_cut(rows: np.ndarray) -> np.ndarray | None:
        m = len(rows)
        balanced = 0.25 * m
        aim = bl.even_aim(m, block_size) if even else m / 2
        best = None
        fallback = None
        for j in range(qi.cat.shape[1]):
            rank = ranked[j][rows]
            counts = np.bincount(rank, minlength=len(leaf_of_rank[j]))
            present = np.flatnonzero(counts)
            if len(present) < 2:
                continue
            pos = np.cumsum(counts[present])[:-1]
            leaf = leaf_of_rank[j]
            penalty = weights[j, qi.lca[j, leaf[present[:-1]], leaf[present[1:]]]]
            small = m / 2 - np.abs(pos - aim)
            valid = np.minimum(pos, m - pos) >= k
            if not valid.any():
                continue
            i = int(np.flatnonzero(valid)[np.argmax(small[valid])])
            if fallback is None or small[i] > fallback[0]:
                fallback = (float(small[i]), rank < present[i + 1])
            ok = valid & (small >= balanced) & (penalty > 0)
            if ok.any():
                i = int(np.flatnonzero(ok)[np.lexsort((-small[ok], -penalty[ok]))[0]])
                if best is None or (penalty[i], small[i]) > (best[0], best[1]):
                    best = (float(penalty[i]), float(small[i]), j, int(present[i + 1]))
        if best is not None:
            _, _, j, r = best
            return ranked[j][rows] < r
        extents = [float(np.ptp(qi.num[rows, i])) for i in range(nn)]
        for i in sorted(range(nn), key=lambda i: -extents[i]):
            if extents[i] <= 0:
                break
            col = qi.num[rows, i]
            at = int(min(aim, m - 1))
            median = np.partition(col, at)[at]
            below = int((col < median).sum())
            upto = int((col <= median).sum())
            options = [(abs(p - aim), p) for p in (below, upto) if k <= p <= m - k]
            if not options:
                continue
            p_ = min(options)[1]
            mask = col < median if p_ == below else col <= median
            side = m / 2 - abs(p_ - aim)
            if side >= balanced:
                return mask
            if fallback is None or side > fallback[0]:
                fallback = (side, mask)
        return None if fallback is None else fallback[1]

    def keeps(rows: np.ndarray) -> bool:
        if fits is not None and not fits(rows):
            return False
        return sensitive is None or p <= 1 or len(np.unique(sensitive[rows])) >= p

    done: list[np.ndarray] = []
    todo = [np.arange(qi.n, dtype=np.int64) if rows is None else np.asarray(rows, np.int64)]
    while todo:
        rows = todo.pop()
        first = best_cut(rows) if len(rows) > block_size else None
        if first is not None and not (keeps(rows[first]) and keeps(rows[~first])):
            first = None
        if first is None:
            done.append(rows)
        else:
            todo += [rows[~first], rows[first]]
    return done


def table(n: int, rng: np.random.Generator, shape: str) -> QIArrays:
    if shape == "skewed":  # few values, most rows on one: cuts off balance, ties in reach
        lopsided = np.where(rng.random(n) < 0.8, 5, rng.integers(0, 12, n)).astype(np.int32)
        numeric = [np.where(rng.random(n) < 0.5, 1.0, rng.integers(0, 3, n).astype(float))]
        return QIArrays.build(numeric, [(lopsided, TREE), (np.zeros(n, np.int32), SEX)], n)
    numeric, categorical = [], []
    if shape != "categorical":
        numeric = [rng.normal(40, 12, n).round(1 if shape == "numeric" else 0),
                   rng.integers(0, 5, n).astype(float)]  # fmt: skip
    if shape != "numeric":
        categorical = [(rng.integers(0, 12, n).astype(np.int32), TREE),
                       (rng.integers(0, 2, n).astype(np.int32), SEX)]  # fmt: skip
    return QIArrays.build(numeric, categorical, n)


def same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("shape", ["mixed", "numeric", "categorical", "skewed"])
@pytest.mark.parametrize("even", [False, True])
def test_compiled_cut_is_the_numpy_cut(shape: str, even: bool) -> None:
    for trial in range(6):
        rng = np.random.default_rng(trial)
        n, k = int(rng.integers(200, 3000)), int(rng.integers(2, 12))
        size = int(rng.integers(2 * k, 400))
        qi = table(n, rng, shape)
        order = rng.permutation(n) if trial % 2 else None
        for cost in ("height", "ncp"):
            same(bl.cut(qi, k, size, cost, even=even, rows=order),
                 reference_cut(qi, k, size, cost, even=even, rows=order))  # fmt: skip


def test_compiled_cut_keeps_what_the_rules_need() -> None:
    for trial in range(6):
        rng = np.random.default_rng(50 + trial)
        n, k = int(rng.integers(300, 2000)), int(rng.integers(2, 8))
        qi = table(n, rng, "mixed")
        # (p,k): skewed values leave some cuts refused
        sens = np.where(rng.random(n) < 0.7, 0, rng.integers(1, 6, n))
        p = int(rng.integers(2, 4))
        same(bl.cut(qi, k, 60, sensitive=sens, p=p),
             reference_cut(qi, k, 60, sensitive=sens, p=p))  # fmt: skip
        # (θ,k): value codes grouped in categories, each needing some distinct values
        code = rng.integers(0, 9, n)
        category = np.array([0, 0, 0, 1, 1, 2, 2, 2, 3])
        need = rng.integers(1, 3, 4)
        theta = int(rng.integers(1, 4))

        def fits(
            rows: np.ndarray, code=code, category=category, need=need, theta=theta, k=k
        ) -> bool:
            if len(rows) < k:
                return False
            distinct = np.bincount(category[np.unique(code[rows])], minlength=4)
            return int((distinct >= need).sum()) >= theta

        keep = bl.Keep(code, category, need, theta, k)
        order = rng.permutation(n)
        same(bl.cut(qi, k, 80, keep=keep, even=True, rows=order),
             reference_cut(qi, k, 80, fits=fits, even=True, rows=order))  # fmt: skip


def test_compiled_cut_breaks_ties_as_the_numpy_cut() -> None:
    # Leaves l0, l1, l2 of 50, 300, 50 rows: the two cuts are equally off balance (50 rows on
    # the smaller side); the first in depth-first order is taken. Equal numeric runs likewise.
    leaf = np.repeat(np.array([0, 1, 2], np.int32), [50, 300, 50])
    value = np.repeat(np.array([1.0, 2.0, 3.0]), [50, 300, 50])
    n = len(leaf)
    for qi in (
        QIArrays.build([], [(leaf, TREE), (np.zeros(n, np.int32), SEX)], n),
        QIArrays.build([value], [], n),
    ):
        for even in (False, True):
            got = bl.cut(qi, 10, 360, even=even)  # one cut, its halves then small enough
            same(got, reference_cut(qi, 10, 360, even=even))
            assert [len(b) for b in got] == [50, 350]
