"""Method `kmember`: greedy k-member clustering (Byun et al. 2007), with the (p,k) variant."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from dbanon.algorithms.base import QIArrays
from dbanon.methods import register
from dbanon.methods.base import Option
from dbanon.methods.grouped import POLICY, RANGES, GroupingMethod, codes

if TYPE_CHECKING:
    from dbanon.release import Resolved


class KMember(GroupingMethod):
    name = "kmember"
    summary = (
        "greedy k-member clustering (Byun et al. 2007; Wang & Ma 2011): clusters of k..2k-1 "
        "rows, in Python (numba) over COPY streams; with `--p` the (p,k) baseline of the "
        "(θ,k) paper"
    )
    promises = ("k-anonymity", "p-k-anonymity")
    requires = ("k-anonymity", "p-k-anonymity")
    randomised = True
    options: ClassVar[tuple[Option, ...]] = (
        RANGES,
        POLICY,
        Option(
            "seeding", str, "random", "How each cluster's first record is picked.",
            ("random", "furthest"),
        ),
    )  # fmt: skip

    def cluster(self, r: Resolved, qi: QIArrays, sensitive: np.ndarray | None) -> np.ndarray:
        from dbanon.algorithms.kmember import kmember

        pk = r.model("p-k-anonymity")
        return kmember(
            qi,
            r.k,  # type: ignore[arg-type]
            seed=r.seed,  # type: ignore[arg-type]
            seeding=r.options["seeding"],
            sensitive=None if sensitive is None else codes(sensitive)[0],
            p=pk.p if pk is not None else 1,  # type: ignore[attr-defined]
        )


register(KMember())
