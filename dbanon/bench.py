"""Benchmarks on UCI Adult, in memory: the algorithms alone, as the papers time them."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from dbanon.algorithms.base import QIArrays
from dbanon.data import (
    ADULT_COLUMNS,
    ADULT_HIERARCHIES,
    ADULT_TRAIN_ROWS,
    adult_rows,
    hierarchy_file,
)
from dbanon.hierarchy import Hierarchy
from dbanon.metrics.loss import loss_report

# The setting of the peer implementations' figures: 8 QIs, two numeric.
BENCH_NUMERIC = ["age", "education_num"]
BENCH_CATEGORICAL = ["workclass", "marital_status", "occupation", "race", "sex", "native_country"]


def adult_arrays(
    rows: int = ADULT_TRAIN_ROWS,
    numeric: list[str] | None = None,
    categorical: list[str] | None = None,
) -> QIArrays:
    """Adult's first `rows` rows (training set first) encoded for the algorithms."""
    data = adult_rows(rows)
    numeric = BENCH_NUMERIC if numeric is None else numeric
    categorical = BENCH_CATEGORICAL if categorical is None else categorical
    idx = {c: i for i, c in enumerate(ADULT_COLUMNS)}
    nums = [np.array([float(r[idx[c]]) for r in data]) for c in numeric]
    cats = []
    for c in categorical:
        h = Hierarchy.from_csv(ADULT_HIERARCHIES[c], hierarchy_file(ADULT_HIERARCHIES[c]))
        cats.append((np.array([h.leaves[r[idx[c]]] for r in data], dtype=np.int32), h))
    return QIArrays.build(nums, cats, n=len(data))


def bench_kmember(rows: int = ADULT_TRAIN_ROWS, k: int = 10, seed: int = 0) -> dict[str, Any]:
    from dbanon.algorithms.kmember import kmember

    qi = adult_arrays(rows)
    kmember(QIArrays.build([qi.num[:50, 0]], [], n=50), 2)  # compile (or load the cache) first
    started = time.perf_counter()
    gid = kmember(qi, k, seed=seed)
    seconds = time.perf_counter() - started
    report = loss_report(qi, gid)
    return {
        "algorithm": "kmember",
        "rows": qi.n,
        "k": k,
        "seconds": round(seconds, 3),
        "gcp": report.ncp,
        "total_il": report.total_il,
        "classes": report.classes,
    }
