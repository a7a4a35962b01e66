"""Misclassification of a clustering of a perturbed table against the original's.

Both tables are clustered by the same algorithm; clusters are matched by the Hungarian method
on the contingency table (the matching that agrees on the most rows), and Mc is the share of
rows whose two clusters are not matched. The clusterers: k-means, Chameleon
(dbanon.metrics.chameleon, Karypis et al. 1999) and, as an older stand-in for it, Ward
agglomerative clustering on a k-nearest-neighbour graph.
"""

from __future__ import annotations

import numpy as np

ALGORITHMS = ("kmeans", "chameleon", "agglomerative")
NEIGHBOURS = 10  # the graph of the agglomerative stand-in


def cluster(x: np.ndarray, k: int, algorithm: str = "kmeans", seed: int = 0) -> np.ndarray:
    """Cluster labels 0..k-1 of the rows of x (columns scaled to unit variance first)."""
    from sklearn.cluster import AgglomerativeClustering, KMeans
    from sklearn.neighbors import kneighbors_graph

    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if not 1 <= k <= len(x):
        raise ValueError(f"cannot make {k} clusters of {len(x)} rows")
    std = x.std(0)
    z = (x - x.mean(0)) / np.where(std > 0, std, 1.0)
    if algorithm == "kmeans":
        return KMeans(n_clusters=k, n_init=4, random_state=seed).fit_predict(z)
    if algorithm == "chameleon":
        from dbanon.metrics.chameleon import chameleon

        return chameleon(z, k)
    graph = kneighbors_graph(z, min(NEIGHBOURS, len(z) - 1), include_self=False)
    return AgglomerativeClustering(n_clusters=k, linkage="ward", connectivity=graph).fit_predict(z)


def misclassification(a: np.ndarray, b: np.ndarray) -> float:
    """Share of rows whose cluster in `a` is not matched with their cluster in `b`, clusters
    matched one to one by the Hungarian method (scipy's linear_sum_assignment)."""
    from scipy.optimize import linear_sum_assignment

    if len(a) != len(b):
        raise ValueError(f"{len(a)} labels against {len(b)}")
    if len(a) == 0:
        return 0.0
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    table = np.zeros((ia.max() + 1, ib.max() + 1), dtype=np.int64)
    np.add.at(table, (ia, ib), 1)
    rows, cols = linear_sum_assignment(table, maximize=True)
    return float(len(a) - table[rows, cols].sum()) / len(a)
