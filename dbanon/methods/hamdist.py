"""Method `hamdist`: the Greedy_Hamdist baseline of the RFKA paper (Zhang et al.): one-hot
features (numeric QIs cut into `--bins` equal-width bins first), ranked by the share of pairs of
rows of different labels that each tells apart (their Hamming distance on it), then the same
forward search and live release as `rfka` (dbanon.methods.projection). The ranking needs only
each label's count of rows holding each feature: one GROUP BY in PostgreSQL, no row streamed
out (streaming a million rows' one-hot matrix took 2.8 GB and 17 s); and that GROUP BY is the
candidates' own scan, grouped by the label too (`onehot_candidates`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg

from dbanon.algorithms.featuresel import Feature, hamdist_from_counts
from dbanon.methods import projection, register
from dbanon.methods.base import Option
from dbanon.methods.projection import AS, BINS, REFRESH, Candidates, ProjectionMethod

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved


class Hamdist(ProjectionMethod):
    name = "hamdist"
    summary = (
        "Greedy_Hamdist (the RFKA paper's baseline): a k-anonymous projection onto one-hot "
        "features (equal-width bins for numbers) chosen greedily in the order of their Hamming "
        "distance between the `--sensitive` label's classes; a live view like rfka's"
    )
    score_name = "hamdist"
    options: ClassVar[tuple[Option, ...]] = (AS, BINS, REFRESH)

    def candidates(self, conn: psycopg.Connection, r: Resolved) -> Candidates:
        # the label's counts in the candidates' own scan: the ranking reads no row again
        return projection.onehot_candidates(conn, r.source.ident, r, r.options["bins"],
                                            r.sensitive[0].ident)  # fmt: skip

    def scores(
        self, conn: psycopg.Connection, r: Resolved, features: list[Feature]
    ) -> tuple[np.ndarray, dict[str, Any]]:
        found = self._candidates(conn, r)  # the run's own, which `features` are
        assert found.features is features and found.per_class is not None
        ones, sizes = found.per_class
        return hamdist_from_counts(ones, sizes), {"fit_rows": int(sizes.sum())}


register(Hamdist())
