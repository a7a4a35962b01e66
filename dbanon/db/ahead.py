"""Work done a few items ahead in threads, its results taken in order.

A loop whose step is compiled code or NumPy (which release the GIL) followed by I/O or sums
that must keep their order: the next items' work runs in threads while this thread uses the
current one's result (copy_rows packs the next chunk while one is sent; ina/noise perturb the
next batches while one is summed). At most `depth` results wait, so memory stays bounded.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def ahead(fn: Callable[[T], R], items: Sequence[T], depth: int = 1,
          name: str = "dbanon-ahead") -> Iterator[R]:  # fmt: skip
    """fn(x) for each x of `items`, in order, `depth` of them computed ahead in threads."""
    with ThreadPoolExecutor(depth, name) as pool:
        coming = deque(pool.submit(fn, x) for x in items[:depth])
        for i in range(len(items)):
            done = coming.popleft().result()
            if i + depth < len(items):
                coming.append(pool.submit(fn, items[i + depth]))
            yield done
