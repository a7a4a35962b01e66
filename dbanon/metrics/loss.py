"""Information loss of a grouping, as the k-member paper defines it.

IL(e) = |e| * (sum_i (max - min)_i / |N_i| + sum_j H(LCA_j(e)) / H(T_j)); Total-IL sums IL over
groups, and NCP (GCP) divides it by rows x QI attributes so that 0 is no loss and 1 is full loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dbanon.algorithms.base import QIArrays


def group_loss(qi: QIArrays, gid: np.ndarray) -> np.ndarray:
    """Per-group loss per row (the bracket of IL(e)), indexed by group id 0..g-1 (no gaps)."""
    if len(qi.hierarchies) != qi.cat.shape[1]:
        raise ValueError("QIArrays needs a hierarchy per categorical column (use QIArrays.build)")
    gid = np.asarray(gid)
    g = int(gid.max()) + 1 if len(gid) else 0
    loss = np.zeros(g, dtype=np.float64)
    for i in range(qi.num.shape[1]):
        col = qi.num[:, i]
        hi = np.full(g, -np.inf)
        lo = np.full(g, np.inf)
        np.maximum.at(hi, gid, col)
        np.minimum.at(lo, gid, col)
        loss += hi - lo
    for j, h in enumerate(qi.hierarchies):
        # Balanced trees: the LCA of a group is at the lowest level where its ancestors agree.
        anc = h.ancestor_table()[qi.cat[:, j]]
        level = np.full(g, h.height, dtype=np.int64)
        for lv in range(h.height - 1, -1, -1):
            hi = np.full(g, -1)
            lo = np.full(g, np.iinfo(np.int32).max)
            np.maximum.at(hi, gid, anc[:, lv])
            np.minimum.at(lo, gid, anc[:, lv])
            level = np.where(hi == lo, lv, level)
        loss += level / h.height
    return loss


@dataclass(frozen=True)
class LossReport:
    total_il: float
    ncp: float  # Total-IL / (rows x attributes), in [0, 1]
    discernibility: int  # sum of squared class sizes
    classes: int
    min_class_size: int
    max_class_size: int
    avg_class_size: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "total_il": self.total_il,
            "gcp": self.ncp,
            "discernibility": self.discernibility,
            "classes": self.classes,
            "min_class_size": self.min_class_size,
            "max_class_size": self.max_class_size,
            "avg_class_size": self.avg_class_size,
        }


def loss_report(qi: QIArrays, gid: np.ndarray) -> LossReport:
    """Total-IL, NCP and class-size statistics of a grouping of the rows of `qi`."""
    gid = np.unique(np.asarray(gid), return_inverse=True)[1].reshape(-1)  # any labels, no gaps
    sizes = np.bincount(gid)
    sizes = sizes[sizes > 0]
    per_row = group_loss(qi, gid)
    total = float((per_row * np.bincount(gid, minlength=len(per_row))).sum())
    return LossReport(
        total_il=total,
        ncp=total / (len(gid) * qi.width) if len(gid) and qi.width else 0.0,
        discernibility=int((sizes.astype(np.int64) ** 2).sum()),
        classes=int(len(sizes)),
        min_class_size=int(sizes.min()) if len(sizes) else 0,
        max_class_size=int(sizes.max()) if len(sizes) else 0,
        avg_class_size=float(sizes.mean()) if len(sizes) else 0.0,
    )
