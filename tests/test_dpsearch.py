"""SafePub's private search (dbanon.algorithms.dpsearch): a valid exponential mechanism.

The expected distributions are computed here from the definitions, not from the module: the
exponential mechanism draws g with probability exp(ε u(g) / (2 Δu)) / Σ exp(...), and u is
SafePub's granularity, recomputed below on tiny tables by counting classes by hand. A draw with
twice the ε (or half the sensitivity) moves the frequencies far outside the tolerance.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest

from dbanon.algorithms import dpsearch
from dbanon.algorithms.dpsearch import Axis

DRAWS = 20_000


def expected(scores: list[float], epsilon: float, sensitivity: float) -> list[float]:
    top = max(scores)  # exp(a - top) / Σ exp(b - top) is the same ratio, and finite
    w = [math.exp(epsilon * (s - top) / (2 * sensitivity)) for s in scores]
    return [x / sum(w) for x in w]


@pytest.mark.parametrize(("scores", "epsilon", "sensitivity"),
                         [([0.0, -2.0, -4.0], 1.0, 1.0), ([-10.0, -40.0, -25.0, -10.0], 0.5, 9.0),
                          ([-1e6, -1e6 - 10.0], 2.0, 10.0)])  # fmt: skip
def test_choose_draws_the_exponential_mechanism(
    scores: list[float], epsilon: float, sensitivity: float
) -> None:
    rng = np.random.default_rng(7)
    got = Counter(dpsearch.choose(scores, epsilon, sensitivity, rng) for _ in range(DRAWS))
    want = expected(scores, epsilon, sensitivity)
    doubled = expected(scores, 2 * epsilon, sensitivity)
    for i, p in enumerate(want):
        assert abs(got[i] / DRAWS - p) < 4 * math.sqrt(p * (1 - p) / DRAWS) + 1e-3, (i, got, want)
    # the tolerance tells the mechanism from one spending twice the ε
    assert max(abs(a - b) for a, b in zip(want, doubled, strict=True)) > 0.05


# A tiny lattice: two QIs, each with a two-level tree over four leaves {0,1 -> A; 2,3 -> B; root}.
TREE = {0: "a0", 1: "a1", 2: "b0", 3: "b1"}
PARENT = {0: 4, 1: 4, 2: 5, 3: 5}  # leaves 0..3, inner nodes 4 (A), 5 (B), root 6
SHARE = {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0, 4: 0.5, 5: 0.5, 6: 1.0}


def node_at(leaf: int, level: int) -> int:
    return [leaf, PARENT[leaf], 6][level]


def axes() -> list[Axis]:
    gen = np.array([[node_at(v, lv) for v in range(4)] for lv in range(3)], dtype=np.int64)
    cost = [np.array([SHARE[i] for i in range(7)])] * 3
    return [Axis("x", gen, cost), Axis("y", gen, cost)]


def granularity(rows: list[tuple[int, int]], total: int, node: tuple[int, int], k: int) -> float:
    """-(Σ over released rows of the mean leaf share + rows not released), by hand."""
    classes = Counter((node_at(x, node[0]), node_at(y, node[1])) for x, y in rows)
    loss = float(total - len(rows))  # not sampled
    for (gx, gy), n in classes.items():
        loss += n * (SHARE[gx] + SHARE[gy]) / 2 if n >= k else n
    return -loss


SAMPLE = [(0, 0)] * 3 + [(1, 0)] * 2 + [(2, 3)] * 4 + [(3, 3)] + [(0, 2)] * 2 + [(0, 1)] * 2


def _codes(rows: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    tuples = Counter(rows)
    codes = np.array(list(tuples), dtype=np.int64).reshape(-1, 2)
    return codes, np.array(list(tuples.values()), dtype=np.float64)


def test_score_is_safepubs_granularity() -> None:
    codes, weights = _codes(SAMPLE)
    for node in itertools.product(range(3), repeat=2):
        for k in (2, 3, 5):
            assert dpsearch.score(node, axes(), codes, weights, 20, k) == pytest.approx(
                granularity(SAMPLE, 20, node, k)
            ), (node, k)


def test_sensitivity_bounds_one_added_row() -> None:
    """|u(D) - u(D + r)| <= k - 1 at every node, for every row r added (sampled or not)."""
    for k in (2, 3, 4):
        worst = 0.0
        for extra, sampled in itertools.product(itertools.product(range(4), repeat=2),
                                                (True, False)):  # fmt: skip
            bigger = [*SAMPLE, extra] if sampled else SAMPLE
            for node in itertools.product(range(3), repeat=2):
                a = granularity(SAMPLE, 20, node, k)
                b = granularity(bigger, 21, node, k)
                worst = max(worst, abs(a - b))
        assert worst <= dpsearch.sensitivity(k) + 1e-9
        assert worst == pytest.approx(k - 1)  # reached: the bound is the sensitivity, not loose


def test_search_output_has_the_composed_distribution() -> None:
    """One step, then the private choice between the top and the pivot: the output's exact
    distribution is Σ_pivot P(pivot) · P(output | {top, pivot}), each an exponential mechanism
    with ε / 2."""
    codes, weights = _codes(SAMPLE)
    k, eps, total = 3, 2.0, 20
    du = k - 1

    def u(node: tuple[int, int]) -> float:
        return granularity(SAMPLE, total, node, k)

    top = (2, 2)
    first = [(1, 2), (2, 1)]  # the top's predecessors, in the order the walk adds them
    p_first = expected([u(g) for g in first], eps / 2, du)
    want: Counter[tuple[int, int]] = Counter()
    for g, p in zip(first, p_first, strict=True):
        last = expected([u(top), u(g)], eps / 2, du)
        want[top] += p * last[0]
        want[g] += p * last[1]
    rng = np.random.default_rng(11)
    runs = 6000
    got = Counter(dpsearch.search(axes(), codes, weights, total, k, eps, 1, rng).node
                  for _ in range(runs))  # fmt: skip
    for node, p in want.items():
        assert abs(got[node] / runs - p) < 4 * math.sqrt(p * (1 - p) / runs) + 2e-3, (got, want)
    assert set(got) <= set(want)
    # neither draw is a coin toss here: spending twice the ε would move the output
    doubled = Counter()
    for g, p in zip(first, expected([u(g) for g in first], eps, du), strict=True):
        last = expected([u(top), u(g)], eps, du)
        doubled[top] += p * last[0]
        doubled[g] += p * last[1]
    assert max(abs(want[g] - doubled[g]) for g in want) > 0.05
