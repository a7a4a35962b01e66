"""Method `mondrian`: strict multidimensional Mondrian (median cuts; categorical cuts along the
hierarchy), for k-anonymity and l-diversity; the "centre-point partitioning" baseline."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from dbanon.algorithms.base import QIArrays
from dbanon.errors import quote_ident
from dbanon.methods import register
from dbanon.methods.grouped import GroupingMethod, codes
from dbanon.models.specs import kind_of

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved
    from dbanon.models.base import PrivacyModel

_L_KINDS = {  # model kind -> Mondrian's name for it
    "distinct-l-diversity": "distinct",
    "entropy-l-diversity": "entropy",
    "recursive-l-diversity": "recursive",
    "frequency-l-diversity": "frequency",
}


class Mondrian(GroupingMethod):
    name = "mondrian"
    summary = (
        "strict multidimensional Mondrian (median cuts; categorical cuts along the hierarchy); "
        'the "centre-point partitioning" baseline'
    )
    promises = ("k-anonymity", *_L_KINDS)
    attacker = (
        "knows everybody's QIs and who is in the table: finds at least k rows for anyone, and "
        "their sensitive value no more surely than the promised l-diversity lets"
    )
    requires = ("k-anonymity",)
    coded_sensitive = True  # its models count values

    def cluster(self, r: Resolved, qi: QIArrays, sensitive: np.ndarray | None) -> np.ndarray:
        from dbanon.algorithms.mondrian import mondrian

        model = _diversity(r)
        if model is None:
            return mondrian(qi, r.k)  # type: ignore[arg-type]
        assert sensitive is not None
        # Every l-diversity here survives unions, so a table that fails as a whole has no
        # l-diverse partition: say which value (or how few values) stands in the way.
        coded, values = codes(sensitive)
        counts = Counter({values[c]: int(n) for c, n in enumerate(np.bincount(coded)) if n})
        if not model.class_holds(counts):
            column = r.sensitive[0].name
            top, top_rows = counts.most_common(1)[0]
            why = (
                f"it has only {len(counts)} distinct values of {quote_ident(column)}"
                if len(counts) < model.l  # type: ignore[attr-defined]
                else f"{quote_ident(column)} = {top!r} holds {top_rows / len(coded):.1%} of "
                    "the rows"
            )
            raise ValueError(
                f"the table is not {model.name} as a whole, so no partition of it can be: {why}"
            )
        return mondrian(qi, r.k, **_options(model, sensitive))  # type: ignore[arg-type]

    def cluster_many(
        self, r: Resolved, qi: QIArrays, sensitive: np.ndarray | None, roots: list[np.ndarray]
    ) -> list[np.ndarray]:
        from dbanon.algorithms.mondrian import mondrian_many

        model = _diversity(r)
        if model is None:
            return mondrian_many(qi, r.k, roots)  # type: ignore[arg-type]
        return mondrian_many(qi, r.k, roots, **_options(model, sensitive))  # type: ignore[arg-type]


def _diversity(r: Resolved) -> PrivacyModel | None:
    """The promised l-diversity Mondrian cuts by, if any."""
    return next((m for m in r.models if kind_of(m).name in _L_KINDS), None)


def _options(model: PrivacyModel, sensitive: np.ndarray | None) -> dict[str, Any]:
    """Mondrian's arguments for an l-diversity model."""
    assert sensitive is not None
    return {
        "sensitive": codes(sensitive)[0],
        "l": int(np.ceil(model.l)),  # type: ignore[attr-defined]
        "l_kind": _L_KINDS[kind_of(model).name],
        "c": getattr(model, "c", 1.0),
    }


register(Mondrian())
