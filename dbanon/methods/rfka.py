"""Method `rfka` (Huang & Zhu): a k-anonymous projection whose columns are chosen greedily in the
order of random-forest importance, so a classifier of the label keeps the columns that matter.

Importance is the paper's: a forest of `--trees` trees (1000) fitted on the QIs (or on their
one-hot indicators, `--features onehot`, as the paper's experiment does) with the `--sensitive`
column as the class label, each feature scored by the mean drop of a tree's accuracy on its
out-of-bag rows when the feature is permuted. The rows leave PostgreSQL by binary COPY, all of
them or `--sample` drawn at random (a big table's forest is fitted on a sample; the search and
the release always read the whole source). A process that ranks the same rows with the same
trees and seed again (the paper's experiment, one publish per k) reuses the forest's importances:
the forest is seeded, so they are the ones it would fit; `seconds_forest` is the fit's own time,
`forest_reused` says it was reused. The rest is the projection flow (dbanon.methods.projection).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg

from dbanon.algorithms.featuresel import DEFAULT_JOBS, Feature, oob_permutation_importance
from dbanon.errors import DbanonError
from dbanon.methods import register
from dbanon.methods.base import Option
from dbanon.methods.projection import (
    AS,
    BINS,
    REFRESH,
    Candidates,
    ProjectionMethod,
    design_matrix,
    onehot_candidates,
    plain_features,
)

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved

TREES = 1000  # the paper's n_estimators
MAX_TREES = 10_000  # ten times the paper's: a forest is held in memory whole


class RFKA(ProjectionMethod):
    name = "rfka"
    summary = (
        "RFKA (Huang & Zhu): releases the true values of a subset of the QIs whose projection "
        "is k-anonymous, chosen greedily in the order of random-forest (OOB permutation) "
        "importance for the `--sensitive` label, each step one GROUP BY ... HAVING count(*) < k "
        "in PostgreSQL; a live view that suppresses classes falling under k"
    )
    randomised = True
    score_name = "importance"
    options: ClassVar[tuple[Option, ...]] = (
        AS,
        Option("trees", int, TREES, "Trees of the random forest (the paper: 1000).",
               low=1, high=MAX_TREES),
        Option("sample", int, 0, "Rows drawn to fit the forest (0: all of them).", low=0),
        Option(
            "features", str, "plain",
            "The QI columns themselves (plain) or one-hot indicators of their values and "
            "equal-width bins (onehot, the paper's experiment).",
            ("plain", "onehot"),
        ),
        BINS,
        REFRESH,
    )  # fmt: skip

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:
        from dbanon.algorithms import warmup

        warmup.preload("sklearn.ensemble")  # while validate and the sample wait on the server
        if r.options["trees"] < 1:
            raise DbanonError(f"--trees must be at least 1, got {r.options['trees']}")
        if r.options["sample"] < 0 or 0 < r.options["sample"] < 10:
            raise DbanonError(
                f"--sample must be 0 (all rows) or at least 10, got {r.options['sample']}"
            )
        super().validate(conn, r)

    def compiled(self, options: Mapping[str, Any]) -> bool:
        """The plain features' forest and search call no compiled kernel (the one-hot
        candidates' codes do)."""
        return (options.get("features") or "plain") != "plain"

    def candidates(self, conn: psycopg.Connection, r: Resolved) -> Candidates:
        if r.options["features"] == "onehot":
            return onehot_candidates(conn, r.source.ident, r, r.options["bins"])
        return Candidates(plain_features(r), None)

    def scores(
        self, conn: psycopg.Connection, r: Resolved, features: list[Feature]
    ) -> tuple[np.ndarray, dict[str, Any]]:
        seed = r.seed or 0
        x, y = design_matrix(conn, r, features, r.options["sample"], seed)
        trees = r.options["trees"]
        importance, seconds, reused = _importance(x, y, trees, seed)
        return importance, {"fit_rows": len(y), "trees": trees,
                            "seconds_forest": round(seconds, 4),
                            "forest_reused": reused}  # fmt: skip


# The last forests' importances by (rows, trees, seed): the same rows and seed give the same
# forest (it is seeded), so a process publishing the same source again at another k (the paper's
# experiment) fits it once. Each entry keeps the seconds its fit took.
_FORESTS: dict[tuple[str, int, int], tuple[np.ndarray, float]] = {}
_KEEP = 8


def _importance(x: np.ndarray, y: np.ndarray, trees: int, seed: int) -> tuple[np.ndarray, float,
                                                                                 bool]:  # fmt: skip
    """(importance, the seconds its forest took to fit, whether it was fitted before)."""
    digest = hashlib.sha256(np.ascontiguousarray(x).tobytes())
    digest.update(np.ascontiguousarray(y).tobytes())
    digest.update(repr(x.shape).encode())
    key = (digest.hexdigest(), trees, seed)
    if key in _FORESTS:
        importance, seconds = _FORESTS[key]
        return importance.copy(), seconds, True
    started = time.perf_counter()
    importance = oob_permutation_importance(x, y, trees, seed, DEFAULT_JOBS)
    seconds = time.perf_counter() - started
    while len(_FORESTS) >= _KEEP:
        _FORESTS.pop(next(iter(_FORESTS)))
    _FORESTS[key] = (importance.copy(), seconds)
    return importance, seconds, False


register(RFKA())
