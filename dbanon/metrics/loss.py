"""Information loss of a grouping, under both conventions in use, each under its own name.

- Height-based, the k-member paper's (Byun et al.; Wang & Ma): IL(e) = |e| * (sum_i (max - min)_i
  / |N_i| + sum_j H(LCA_j(e)) / H(T_j)). `total_il_height` sums IL over groups; `ncp_height`
  divides it by rows x QI attributes (0 no loss, 1 full loss).
- Leaf-count-based, Xu et al. 2006 ("NCP") and the peer implementations: a categorical value
  generalised to a node covering c leaves of the domain's |A| costs c / |A| (0 for a leaf itself);
  numeric ranges cost as above. `total_il_leaf` and `ncp_leaf` are its sum and its mean. A
  column without a hierarchy, released as the set of c values its group holds, costs c / |A|
  here (Xu et al.'s NCP of a set); under heights its LCA is the flat hierarchy's root (1).

Both share the numeric part; they differ only in what a categorical LCA costs, so one table of
node weights (`node_weights`) selects the convention, for the metrics and for k-member's cost
alike. (Full-domain generalisation reports ARX's (c - 1) / (|A| - 1) instead; see fulldomain.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dbanon.algorithms.base import QIArrays
from dbanon.core.generalise import values_per_group
from dbanon.core.hierarchy import Hierarchy

COSTS = ("height", "ncp")  # the k-member cost names: the paper's, and Xu et al.'s leaf counts


def leaf_share(h: Hierarchy) -> np.ndarray:
    """float64[m]: Xu et al.'s NCP of each node, leaves under it / leaves of the tree (0 for a
    leaf: a value left as it is loses nothing)."""
    anc = h.ancestor_table()
    count = np.zeros(len(h.labels), dtype=np.float64)
    for leaf in h.leaves.values():
        count[anc[leaf][anc[leaf] >= 0]] += 1
    share = count / len(h.leaves)
    share[np.asarray(h.levels) == 0] = 0.0
    return share


def node_weights(qi: QIArrays, cost: str) -> np.ndarray:
    """float64[q, M]: what a categorical node costs under `cost` ("height": qi.height, the
    paper's normalised height; "ncp": leaf share), indexed like qi.height."""
    if cost == "height":
        return np.asarray(qi.height, dtype=np.float64)
    if cost != "ncp":
        raise ValueError(f"cost must be one of {', '.join(COSTS)}, got {cost!r}")
    if len(qi.hierarchies) != qi.cat.shape[1]:
        raise ValueError("QIArrays needs a hierarchy per categorical column (use QIArrays.build)")
    out = np.zeros_like(np.asarray(qi.height, dtype=np.float64))
    for j, h in enumerate(qi.hierarchies):
        out[j, : len(h.labels)] = leaf_share(h)
    return out


def group_loss(
    qi: QIArrays, gid: np.ndarray, cost: str = "height", sets: Sequence[bool] = ()
) -> np.ndarray:
    """Per-group loss per row (the bracket of IL(e)) under `cost`, indexed by group id 0..g-1
    (no gaps). `sets[j]`: categorical column j is released as the set of values its group
    holds (no hierarchy); under "ncp" such a set of c >= 2 of the column's |A| values costs
    c / |A|, as Xu et al. define NCP for a generalised set (under "height" its LCA is the flat
    hierarchy's root, as before)."""
    if len(qi.hierarchies) != qi.cat.shape[1]:
        raise ValueError("QIArrays needs a hierarchy per categorical column (use QIArrays.build)")
    weights = node_weights(qi, cost)
    gid = np.asarray(gid)
    g = int(gid.max()) + 1 if len(gid) else 0
    loss = np.zeros(g, dtype=np.float64)
    if not len(gid):
        return loss
    # Rows sorted by group, so each group's extremes are one reduceat (ufunc.at is slow).
    order = np.argsort(gid, kind="stable")
    sg = gid[order]
    starts = np.flatnonzero(np.r_[True, sg[1:] != sg[:-1]])
    present = sg[starts]
    for i in range(qi.num.shape[1]):
        col = qi.num[order, i]
        loss[present] += np.maximum.reduceat(col, starts) - np.minimum.reduceat(col, starts)
    for j, h in enumerate(qi.hierarchies):
        if cost == "ncp" and j < len(sets) and sets[j]:
            covered = values_per_group(qi.cat[order, j], starts)
            loss[present] += np.where(covered > 1, covered / len(h.leaves), 0.0)
            continue
        # Balanced trees: the LCA of a group is at the lowest level where its ancestors agree.
        anc = h.ancestor_table()[qi.cat[order, j]]
        level = np.full(len(starts), h.height, dtype=np.int64)
        for lv in range(h.height - 1, -1, -1):
            col = anc[:, lv]
            agree = np.maximum.reduceat(col, starts) == np.minimum.reduceat(col, starts)
            level = np.where(agree, lv, level)
        loss[present] += weights[j, anc[starts, level]]
    return loss


@dataclass(frozen=True)
class LossReport:
    total_il_height: float  # the k-member paper's Total-IL (heights)
    ncp_height: float  # total_il_height / (rows x attributes), in [0, 1]
    total_il_leaf: float  # the same sum with Xu et al.'s leaf-count cost
    ncp_leaf: float  # total_il_leaf / (rows x attributes), in [0, 1]: peers' "NCP"
    discernibility: int  # sum of squared class sizes
    classes: int
    min_class_size: int
    max_class_size: int
    avg_class_size: float

    def as_dict(self) -> dict[str, float | int]:
        """The run's figures. `gcp` is the release's common loss figure (release.py): for
        grouping methods it is ncp_height, as it always was. The sizes are those of the groups
        the algorithm formed, named as groups: two groups can be released with equal QIs, and
        the release's classes (equal released QIs) are counted on the release itself."""
        return {
            "total_il_height": self.total_il_height,
            "ncp_height": self.ncp_height,
            "total_il_leaf": self.total_il_leaf,
            "ncp_leaf": self.ncp_leaf,
            "gcp": self.ncp_height,
            "discernibility": self.discernibility,
            "groups": self.classes,
            "min_group_size": self.min_class_size,
            "max_group_size": self.max_class_size,
            "avg_group_size": self.avg_class_size,
        }


def group_sizes(gid: np.ndarray) -> dict[str, float | int]:
    """The run figures of a method's own groups (any labels): how many, smallest, largest,
    average size; named as groups, never as the release's classes (see LossReport.as_dict)."""
    sizes = np.bincount(np.unique(np.asarray(gid), return_inverse=True)[1].reshape(-1))
    if not len(sizes):
        return {"groups": 0, "min_group_size": 0, "max_group_size": 0, "avg_group_size": 0.0}
    return {"groups": int(len(sizes)), "min_group_size": int(sizes.min()),
            "max_group_size": int(sizes.max()), "avg_group_size": float(sizes.mean())}  # fmt: skip


def loss_report(qi: QIArrays, gid: np.ndarray, sets: Sequence[bool] = ()) -> LossReport:
    """Both losses and the class-size statistics of a grouping of the rows of `qi` (`sets`:
    which categorical columns are released as value sets, see group_loss)."""
    gid = np.unique(np.asarray(gid), return_inverse=True)[1].reshape(-1)  # any labels, no gaps
    sizes = np.bincount(gid)
    sizes = sizes[sizes > 0]
    cells = len(gid) * qi.width
    total = {
        cost: float((group_loss(qi, gid, cost, sets) * np.bincount(gid)).sum())
        for cost in COSTS
    }
    return LossReport(
        total_il_height=total["height"],
        ncp_height=total["height"] / cells if cells else 0.0,
        total_il_leaf=total["ncp"],
        ncp_leaf=total["ncp"] / cells if cells else 0.0,
        discernibility=int((sizes.astype(np.int64) ** 2).sum()),
        classes=int(len(sizes)),
        min_class_size=int(sizes.min()) if len(sizes) else 0,
        max_class_size=int(sizes.max()) if len(sizes) else 0,
        avg_class_size=float(sizes.mean()) if len(sizes) else 0.0,
    )
