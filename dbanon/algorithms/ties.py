"""Tie-breaks from the run's secret seed (issue 24 item 2).

Greedy algorithms break ties by the lowest row index, and rows come out of the source in its
physical order (usually its key or insertion order): a tie then follows the source's order.
Running the algorithm on the rows in an order drawn from the seed makes every "lowest row" tie
a draw from the seed, without touching the algorithm (whose reference tests stay exact)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

STREAM = 24  # a stream of its own: the algorithm's own draws from the same seed stay unchanged


KEPT = 4096  # orders of up to this many rows are kept: a refresh asks for them by thousands


def secret_order(seed: int | None, n: int) -> np.ndarray:
    """A permutation of 0..n-1 drawn from the seed: run the algorithm on rows[order]."""
    return _kept(int(seed or 0), n) if n <= KEPT else _drawn(int(seed or 0), n)


def _drawn(seed: int, n: int) -> np.ndarray:
    order = np.random.default_rng([seed, STREAM]).permutation(n)
    return order.astype(np.int32) if n < 2**31 else order  # held through a whole clustering


@lru_cache(maxsize=256)
def _kept(seed: int, n: int) -> np.ndarray:
    order = _drawn(seed, n)
    order.flags.writeable = False  # shared by every caller
    return order


def restore(order: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Per-row results of the algorithm run on rows[order], back in the source's row order."""
    out = np.empty_like(ids)
    out[order] = ids
    return out
