"""The array form of a table's quasi-identifiers that every algorithm works on.

Numeric QIs are divided by their domain width, so a group's normalised range is max - min of the
column; categorical QIs are leaf node ids in their hierarchy, with the LCA of any two nodes and the
normalised height of every node precomputed, so the k-member cost is a few table lookups per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dbanon.core.hierarchy import Hierarchy

# (θ,k)'s ways of placing rows left over (dbanon.algorithms.thetak), here so that the method's
# options can name them without importing the numba-compiled module.
LEFTOVERS = ("category", "nearest")
# (θ,k)'s constructions: loss-greedy under the checked property (default), the paper's own.
CONSTRUCTIONS = ("greedy", "paper")


@dataclass(frozen=True)
class QIArrays:
    """Quasi-identifiers of n rows: p numeric columns and q categorical ones."""

    num: np.ndarray  # float64 (n, p): value / domain width (width 0 counts as 1)
    cat: np.ndarray  # int32 (n, q): leaf node id in the column's hierarchy
    lca: np.ndarray  # int32 (q, M, M): lowest common ancestor of two nodes (padded with 0)
    height: np.ndarray  # float64 (q, M): height of the node's subtree / height of the tree
    hierarchies: tuple[Hierarchy, ...] = ()

    @property
    def n(self) -> int:
        return int(self.num.shape[0] if self.num.shape[1] else self.cat.shape[0])

    @property
    def width(self) -> int:
        """Number of QI attributes."""
        return int(self.num.shape[1] + self.cat.shape[1])

    @classmethod
    def build(
        cls,
        numeric: Sequence[np.ndarray],
        categorical: Sequence[tuple[np.ndarray, Hierarchy]],
        n: int | None = None,
    ) -> QIArrays:
        """Normalise numeric columns and tabulate hierarchies.

        `numeric` holds raw value arrays; `categorical` holds (leaf node ids, hierarchy) pairs.
        """
        if n is None:
            n = len(numeric[0]) if numeric else len(categorical[0][0])
        num = np.empty((n, len(numeric)), dtype=np.float64)
        for i, col in enumerate(numeric):
            col = np.asarray(col, dtype=np.float64)
            span = float(col.max() - col.min()) if n else 0.0
            num[:, i] = col / (span if span > 0 else 1.0)
        hs = tuple(h for _, h in categorical)
        m = max((len(h.labels) for h in hs), default=1)
        cat = np.empty((n, len(categorical)), dtype=np.int32)
        lca = np.zeros((len(hs), m, m), dtype=np.int32)
        height = np.zeros((len(hs), m), dtype=np.float64)
        for j, (codes, h) in enumerate(categorical):
            cat[:, j] = codes
            size = len(h.labels)
            lca[j, :size, :size] = h.lca_table()
            height[j, :size] = np.asarray(h.levels, dtype=np.float64) / h.height
        return cls(num, cat, lca, height, hs)
