"""SafePub's private search of the full-domain lattice: arrays in, a node out.

Bild, Kuhn & Prasser (PoPETs 2018), as ARX implements it (org.deidentifier.arx.algorithm
.DataDependentEDDPAlgorithm, read for the definition, not copied): the walk starts at the top
node (every QI at its root) and keeps a set of candidates; each step adds the predecessors of the
current node (one QI one level lower) that were never candidates, removes the current node, and
draws the next from all candidates with the exponential mechanism, P(g) ∝ exp(ε_step · u(g) /
(2 Δu)). Every score is that of the (k,β)-SDGS release the node would give on the sample.

The utility is SafePub's granularity (its "Loss" score, Section 5.2): each of the source's n rows
costs the mean over the QIs of its released value's share of the hierarchy's leaves (Xu et al.'s
NCP with leaf counts, dbanon.metrics.loss.leaf_share: 0 for a value as it is, 1 for the root), a
row not sampled or in a suppressed class costs 1; u(g) = -(that sum). Its sensitivity is k - 1
(k >= 2): adding one row changes the sum by at most 1 (the row itself: not sampled, suppressed
or released) unless it lifts a class of k - 1 sampled rows to k, which releases them, changing
the sum by k·s - (k - 1) for a share s in [0, 1], at most k - 1 in size.

The output: ARX keeps the best pivot by its score, which is not itself a private choice. dbanon
draws the node released from the visited pivots with the exponential mechanism too, so the
search spends ε_search in steps + 1 equal draws (sequential composition), each with
ε_search / (steps + 1). All draws come from the caller's generator (seeded from the run's
secret).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Axis:
    """One QI of the lattice: gen[level, value] its class id at each level (values are the ids
    the sample's tuples use), cost[level][class id] the leaf share of that class."""

    name: str
    gen: np.ndarray  # int64[height + 1, values]
    cost: list[np.ndarray]  # per level: float64[classes at that level]

    @property
    def height(self) -> int:
        return self.gen.shape[0] - 1


@dataclass(frozen=True)
class SearchResult:
    node: tuple[int, ...]  # the level of each QI
    pivots: list[tuple[int, ...]]  # the nodes the walk drew, in order (the top first)
    scores: dict[tuple[int, ...], float]  # u(g) of every node scored
    epsilon_per_draw: float
    sensitivity: float


def probabilities(scores: Sequence[float], epsilon: float, sensitivity: float) -> np.ndarray:
    """The exponential mechanism's distribution: exp(ε u / (2 Δu)), normalised (shifted by the
    largest exponent, which changes nothing but keeps exp finite)."""
    x = 0.5 * epsilon * np.asarray(scores, dtype=np.float64) / sensitivity
    w = np.exp(x - x.max())
    return w / w.sum()


def choose(scores: Sequence[float], epsilon: float, sensitivity: float,
           rng: np.random.Generator) -> int:  # fmt: skip
    """One draw of the exponential mechanism: an index into `scores`."""
    p = probabilities(scores, epsilon, sensitivity)
    return int(rng.choice(len(p), p=p))


def sensitivity(k: int) -> float:
    """Δu of the granularity score for classes below k suppressed (see the module note)."""
    return float(max(1, k - 1))


def score(node: Sequence[int], axes: Sequence[Axis], codes: np.ndarray, weights: np.ndarray,
          rows: int, k: int) -> float:  # fmt: skip
    """u(node): minus the granularity loss of the SDGS release at `node`. codes[t, j] is the
    value id of the sample's distinct tuple t in QI j, weights[t] its rows; `rows` the source's
    (rows not sampled cost 1 each)."""
    if len(weights) == 0:
        return -float(rows)
    keys = np.column_stack([a.gen[lv][codes[:, j]] for j, (a, lv) in enumerate(zip(axes, node,
                                                                                   strict=True))])
    radix = [int(a.gen.max(initial=0)) + 1 for a in axes]
    if math.prod(radix) < 2**62:  # one int64 per tuple: np.unique on a vector, not on rows
        packed = np.zeros(len(keys), dtype=np.int64)
        for j, size in enumerate(radix):
            packed = packed * size + keys[:, j]
        _, inverse = np.unique(packed, return_inverse=True)
    else:
        _, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    sizes = np.bincount(inverse, weights=weights)
    shown = sizes[inverse] >= k
    per_row = np.mean([a.cost[lv][keys[:, j]] for j, (a, lv) in enumerate(zip(axes, node,
                                                                              strict=True))],
                      axis=0)  # fmt: skip
    released = float(weights[shown].sum())
    loss = float((weights[shown] * per_row[shown]).sum()) + (rows - released)
    return -loss


def predecessors(node: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The nodes one level lower in one QI."""
    return [node[:j] + (lv - 1,) + node[j + 1:] for j, lv in enumerate(node) if lv > 0]


def search(axes: Sequence[Axis], codes: np.ndarray, weights: np.ndarray, rows: int, k: int,
           epsilon: float, steps: int, rng: np.random.Generator) -> SearchResult:  # fmt: skip
    """SafePub's walk with `steps` draws, then the private choice among the pivots."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    per_draw = epsilon / (steps + 1)
    du = sensitivity(k)
    scores: dict[tuple[int, ...], float] = {}

    def u(g: tuple[int, ...]) -> float:
        if g not in scores:
            scores[g] = score(g, axes, codes, weights, rows, k)
        return scores[g]

    pivot = tuple(a.height for a in axes)
    pivots = [pivot]
    seen = {pivot}
    candidates: list[tuple[int, ...]] = []
    for _ in range(steps):
        for g in predecessors(pivot):
            if g not in seen:
                seen.add(g)
                candidates.append(g)
        if not candidates:
            break
        pivot = candidates.pop(choose([u(g) for g in candidates], per_draw, du, rng))
        pivots.append(pivot)
    final = pivots[choose([u(g) for g in pivots], per_draw, du, rng)]
    return SearchResult(final, pivots, scores, per_draw, du)
