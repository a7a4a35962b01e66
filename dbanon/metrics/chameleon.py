"""Chameleon (Karypis, Han & Kumar, "Chameleon: hierarchical clustering using dynamic
modeling", IEEE Computer 32(8), 1999): the clusterer of the INA paper's Table 3.

1. A k-nearest-neighbour graph of the points (symmetric; an edge's weight is its similarity,
   1 / (1 + d / s) with s the median neighbour distance).
2. Phase I: the graph is partitioned by METIS (pymetis; the paper used hMETIS) into many small
   sub-clusters of about `min_size` points, each then split into its connected components, so
   no sub-cluster straddles two regions the graph does not join.
3. Phase II: sub-clusters are merged, best pair first, by relative interconnectivity times
   relative closeness to the power alpha (the paper's second merging scheme):
   RI(i, j) = |EC(i, j)| / ((|EC_i| + |EC_j|) / 2),
   RC(i, j) = mean EC(i, j) / (|i| / (|i| + |j|) mean EC_i + |j| / (|i| + |j|) mean EC_j),
   where EC(i, j) are the edges between i and j and EC_i those cut by a min-cut bisection of
   i (METIS again). Merging stops at the wanted number of clusters; sub-clusters the graph does
   not connect to any other are merged last, into the nearest cluster by centroid.

Why not the `chameleon-cluster` package (0.1.2, assessed 2026-11): it is alpha (one month old,
one author), needs Python >= 3.11 where dbanon supports 3.10, and scores every pair with
per-edge Python loops; its partitioner, pymetis, is the sound part and is used here directly.
Everything here is arrays and sparse matrices; the merge loop is over sub-clusters only.
"""

from __future__ import annotations

import numpy as np

NEIGHBOURS = 10
MIN_SIZE = 0.025  # Phase I sub-cluster size, a share of the points (the paper's 1-5 %)
ALPHA = 2.0  # the paper's exponent on relative closeness
_SCALE = 1000  # METIS takes integer edge weights: similarities scaled and rounded


def knn_graph(x: np.ndarray, neighbours: int = NEIGHBOURS):  # noqa: ANN201 - scipy csr_matrix
    """The symmetric k-nearest-neighbour graph, weighted by similarity."""
    from scipy.sparse import csr_matrix
    from sklearn.neighbors import NearestNeighbors

    n = len(x)
    kk = min(neighbours, n - 1)
    dist, idx = NearestNeighbors(n_neighbors=kk + 1).fit(x).kneighbors(x)
    dist, idx = dist[:, 1:], idx[:, 1:]
    s = float(np.median(dist)) or 1.0
    w = 1.0 / (1.0 + dist / s)
    g = csr_matrix((w.ravel(), (np.repeat(np.arange(n), kk), idx.ravel())), shape=(n, n))
    return g.maximum(g.T).tocsr()


def _metis(g, parts: int) -> np.ndarray:  # noqa: ANN001 - csr_matrix
    """METIS k-way partition of a weighted graph (labels 0..parts-1)."""
    import pymetis

    if parts <= 1 or g.shape[0] <= parts:
        return np.zeros(g.shape[0], dtype=np.int64) if parts <= 1 else np.arange(g.shape[0])
    weights = np.maximum(1, np.rint(g.data * _SCALE)).astype(np.int64)
    graph = pymetis.CSRAdjacency(adj_starts=g.indptr.tolist(), adjacent=g.indices.tolist())
    _, member = pymetis.part_graph(parts, adjacency=graph, eweights=weights.tolist())
    return np.asarray(member, dtype=np.int64)


def _components_within(g, labels: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """Split every part into its connected components (edges between parts cut)."""
    from scipy.sparse.csgraph import connected_components

    coo = g.tocoo()
    keep = labels[coo.row] == labels[coo.col]
    from scipy.sparse import csr_matrix

    inner = csr_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=g.shape)
    return connected_components(inner, directed=False)[1].astype(np.int64)


def _bisector(g, members: np.ndarray) -> tuple[float, float]:  # noqa: ANN001
    """|EC_C| and mean EC_C: the weight and mean weight of the edges a min-cut bisection of
    the sub-graph induced by `members` cuts (0, 0 for a cluster that cannot be cut)."""
    if len(members) < 2:
        return 0.0, 0.0
    sub = g[members][:, members].tocsr()
    if sub.nnz == 0:
        return 0.0, 0.0
    side = _metis(sub, 2)
    coo = sub.tocoo()
    cut = side[coo.row] != side[coo.col]
    if not cut.any():
        return 0.0, 0.0
    w = coo.data[cut]
    return float(w.sum()) / 2.0, float(w.mean())


def chameleon(
    x: np.ndarray,
    k: int,
    neighbours: int = NEIGHBOURS,
    min_size: float = MIN_SIZE,
    alpha: float = ALPHA,
) -> np.ndarray:
    """Cluster labels 0..k-1 of the rows of x."""
    from scipy.sparse import csr_matrix

    n = len(x)
    if not 1 <= k <= n:
        raise ValueError(f"cannot make {k} clusters of {n} rows")
    if k == n:
        return np.arange(n)
    g = knn_graph(x, neighbours)
    size = max(2, int(min_size * n) if min_size < 1 else int(min_size))
    labels = _components_within(g, _metis(g, max(k, n // size)))
    m = int(labels.max()) + 1
    ind = csr_matrix((np.ones(n), (np.arange(n), labels)), shape=(n, m))
    between = (ind.T @ g @ ind).toarray()  # weight of the edges between sub-clusters
    count = (ind.T @ (g > 0).astype(np.float64) @ ind).toarray()  # and their number
    np.fill_diagonal(between, 0.0)
    np.fill_diagonal(count, 0.0)
    members = [np.flatnonzero(labels == c) for c in range(m)]
    sizes = np.array([len(c) for c in members], dtype=np.float64)
    ec = np.array([_bisector(g, c) for c in members])  # (|EC_C|, mean EC_C) per sub-cluster
    alive = np.ones(m, dtype=bool)
    clusters = m
    while clusters > k:
        live = np.outer(alive, alive) & (count > 0)
        if not live.any():
            break
        with np.errstate(divide="ignore", invalid="ignore"):
            ri = between / ((ec[:, 0][:, None] + ec[:, 0][None, :]) / 2.0)
            share = sizes[:, None] / (sizes[:, None] + sizes[None, :])
            rc = (between / count) / (share * ec[:, 1][:, None] + share.T * ec[:, 1][None, :])
            score = ri * rc**alpha
        # A sub-cluster that cannot be cut (a point or two) goes first, to its heaviest link.
        score = np.where(np.isfinite(score), score, 1e12 + between)
        score = np.where(live, score, -np.inf)
        i, j = np.unravel_index(int(np.argmax(score)), score.shape)
        i, j = (int(i), int(j)) if i < j else (int(j), int(i))
        members[i] = np.concatenate([members[i], members[j]])
        sizes[i] += sizes[j]
        between[i] += between[j]
        between[:, i] += between[:, j]
        count[i] += count[j]
        count[:, i] += count[:, j]
        between[i, i] = count[i, i] = 0.0
        between[j] = between[:, j] = count[j] = count[:, j] = 0.0
        alive[j] = False
        ec[i] = _bisector(g, members[i])
        clusters -= 1
    out = np.empty(n, dtype=np.int64)
    live_ids = np.flatnonzero(alive)
    for new, c in enumerate(live_ids):
        out[members[c]] = new
    if clusters > k:  # parts the graph leaves unconnected: nearest centroid, smallest first
        out = _merge_by_centroid(x, out, k)
    return np.unique(out, return_inverse=True)[1].reshape(-1)


def _merge_by_centroid(x: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    labels = labels.copy()
    while True:
        ids, sizes = np.unique(labels, return_counts=True)
        if len(ids) <= k:
            return labels
        small = ids[int(np.argmin(sizes))]
        centres = np.array([x[labels == c].mean(0) for c in ids])
        own = centres[ids == small][0]
        d = np.linalg.norm(centres - own, axis=1)
        d[ids == small] = np.inf
        labels[labels == small] = ids[int(np.argmin(d))]
