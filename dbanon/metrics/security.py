"""Data security of a perturbed release (Wang, Zheng & Liao 2008), accumulated batch by batch.

SEC_j = Var(A_j - A'_j) / Var(A_j), mSec = min_j SEC_j. Both variances are merged per batch
with Chan's parallel formula (count, mean, sum of squared deviations), so a stream of any length
is measured in one pass with O(m) memory and without the cancellation of sum-of-squares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class _Moments:
    n: int = 0
    mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    m2: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def add(self, batch: np.ndarray) -> None:
        k = len(batch)
        if k == 0:
            return
        mean = batch.mean(0)
        m2 = ((batch - mean) ** 2).sum(0)
        if self.n == 0:
            self.n, self.mean, self.m2 = k, mean, m2
            return
        n = self.n + k
        delta = mean - self.mean
        self.m2 = self.m2 + m2 + delta * delta * (self.n * k / n)
        self.mean = self.mean + delta * (k / n)
        self.n = n

    def variance(self) -> np.ndarray:
        return self.m2 / self.n


class Security:
    """SEC_j and mSec of the (original, perturbed) batches seen so far."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        self._x = _Moments()
        self._e = _Moments()

    def add(self, original: np.ndarray, perturbed: np.ndarray) -> None:
        self._x.add(original)
        self._e.add(perturbed - original)

    def sec(self) -> dict[str, float]:
        ratio = self._e.variance() / self._x.variance()
        return {c: float(v) for c, v in zip(self.columns, ratio, strict=True)}

    def figures(self) -> dict[str, object]:
        """For the run record: `sec` per column and `msec`, the smallest."""
        sec = self.sec()
        return {"sec": sec, "msec": min(sec.values())}


def security(original: np.ndarray, perturbed: np.ndarray) -> np.ndarray:
    """SEC_j of whole arrays at once (the experiment's form)."""
    return (perturbed - original).var(0) / original.var(0)
