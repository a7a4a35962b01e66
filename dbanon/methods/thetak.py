"""Method `thetak`: (θ,k)-anonymity clustering (Cheng, Liu et al. 2019), generalised like the
other grouping methods; its run records the similarity and background-knowledge
vulnerability of the release (dbanon.metrics.vulnerability). `--construction greedy` (the
default) or `paper`: see dbanon.algorithms.thetak and docs/methods/thetak.md. The class
condition is the model's (`--theta-rule`): the paper's by default, the relaxed one by name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms.base import CONSTRUCTIONS, LEFTOVERS, QIArrays
from dbanon.db.stream import Coded
from dbanon.errors import DbanonError, quote_ident
from dbanon.methods import register
from dbanon.methods.base import Built, Option
from dbanon.methods.grouped import GROUP_POLICY, RANGES, GroupingMethod
from dbanon.methods.grouped_rows import objects
from dbanon.methods.kmember import EXACT, validate_blocks
from dbanon.metrics.vulnerability import FIGURES
from dbanon.models.base import Target
from dbanon.models.thetak import ThetaKAnonymity

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved


def _model(r: Resolved) -> ThetaKAnonymity:
    model = r.model("theta-k-anonymity")
    assert isinstance(model, ThetaKAnonymity)  # `requires` makes the lifecycle ensure it
    return model


# The greedy construction's cost per row grows with its block (it scans the block's remaining
# rows for each row it adds under the deficit), and smaller blocks cut along the QIs lost no
# quality where measured: 1M census-like rows, k=10, θ=3: 2,000-row blocks GCP 0.1830 in 11.4 s,
# 16,000-row blocks 0.1869 in 17.1 s (k=5: 0.0744 both, 12.9 s against 18.8 s; k=30: 0.2438
# against 0.2443); Adult (45,222 rows, k=5, θ=2, forced blocks): 0.1145 against 0.1183, and
# 0.1258 for the exact rule. At least 20 classes a block for a large k.
BLOCK_ROWS = 2_000


class ThetaK(GroupingMethod):
    compact = False  # classes mix categories: a row far from its class's centre is normal
    name = "thetak"
    summary = (
        "(θ,k)-anonymity (Cheng, Liu et al. 2019): every class mixes θ categories of the "
        "sensitive hierarchy, min(⌊k/θ⌋, the category's values) distinct values of each as "
        "the paper has it (--theta-rule relaxed: fewer where the relation's classes cannot "
        "hold them), grown by least information loss; records similarity and "
        "background-knowledge vulnerability"
    )
    promises = ("k-anonymity", "theta-k-anonymity")
    attacker = (
        "knows everybody's QIs and some categories of sensitive values (background knowledge): "
        "at least k rows and θ categories in each class leave the value uncertain"
    )
    requires = ("theta-k-anonymity",)
    randomised = True
    options: ClassVar[tuple[Option, ...]] = (
        RANGES,
        GROUP_POLICY,
        Option(
            "leftovers", str, "category",
            "Where rows left after the last class go: the nearest class showing their "
            "category (category) or the nearest class (nearest, the paper's rule).",
            LEFTOVERS,
        ),
        Option(
            "construction", str, "greedy",
            "How classes are built: k-member's loss-greedy growth under the checked (θ,k) "
            "property (greedy), or the paper's algorithm as written (paper: ⌊k/θ⌋ values "
            "from each of the θ largest buckets, capped by the values a category has).",
            CONSTRUCTIONS,
        ),
        Option(
            "block_size", int, None,
            "Cluster in blocks of at most this many rows, cut along the QIs (default: blocks of "
            f"{BLOCK_ROWS:,} rows, or 20k rows where that is more, above 100,000 rows).", low=2,
        ),
        EXACT,
    )  # fmt: skip

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:
        validate_blocks(r)
        model = _model(r)
        cats = model.categories.bind(conn)
        column = r.sensitive[0].name
        found = cats.validate(conn, Target(r.source.ident, [c.name for c in r.qi], column))
        if found < model.theta:
            raise DbanonError(
                f"column {quote_ident(column)} of {r.source} holds values of {found} categories "
                f"({model.categories.describe()}), fewer than --theta {model.theta}"
            )

    def sensitive_stream(self, r: Resolved) -> tuple[sql.Composable, str]:
        cats = _model(r).categories
        kind = "text" if cats.hierarchy is not None else "float8"
        return sql.SQL("{}::{}").format(r.sensitive[0].ident, sql.SQL(kind)), kind

    def encode_sensitive(
        self, conn: psycopg.Connection, r: Resolved, values: Coded | np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each row's category and value. Text comes coded: each distinct value's category is
        looked up once, and rows get integer ranks that order categories and values as the
        values themselves do (what dbanon.algorithms.thetak.encode makes of them in any case):
        no Python object per row."""
        cats = _model(r).categories.bind(conn)
        if not isinstance(values, Coded):
            shown = objects(values)
            return np.asarray(cats.of(shown.tolist()), dtype=object), shown
        of = cats.of(values.values)  # raises for a value outside the hierarchy, NULL too
        return _ranked(of)[values.codes], _ranked(values.values)[values.codes]

    def cluster(
        self, r: Resolved, qi: QIArrays, sensitive: Any
    ) -> tuple[np.ndarray, dict[str, Any]]:
        from dbanon.algorithms.blocks import partitioned, thetak_blocks
        from dbanon.algorithms.persist import subset
        from dbanon.algorithms.thetak import thetak_detail
        from dbanon.algorithms.ties import restore, secret_order

        model = _model(r)
        category, value = sensitive
        # Ties to the lower row index: rows in an order drawn from the seed, not the source's.
        order = secret_order(r.seed, qi.n)
        size = r.options.get("block_size")
        if r.options["construction"] == "greedy" and partitioned(
            qi.n, size, bool(r.options.get("exact"))
        ):
            size = size or max(BLOCK_ROWS, 20 * model.k)
            # The blocks list the rows in that order (no reordered copy of the arrays).
            gid, figures = thetak_blocks(
                qi, category, value, model.k, model.theta, block_size=size,
                seed=r.seed or 0,  # type: ignore[arg-type]
                leftovers=r.options["leftovers"], rule=model.rule, order=order,
            )  # fmt: skip
            return gid, {**figures, "clustering": "partitioned", "block_size": size}
        gid, leftovers = thetak_detail(
            subset(qi, order), np.asarray(category)[order], np.asarray(value)[order], model.k,
            model.theta, seed=r.seed,  # type: ignore[arg-type]
            leftovers=r.options["leftovers"],
            construction=r.options["construction"], rule=model.rule,
        )  # fmt: skip
        return restore(order, gid), {"leftover_rows": leftovers, "clustering": "exact"}

    def figures(
        self, conn: psycopg.Connection, r: Resolved, built: list[Built], checked: dict[str, Any]
    ) -> dict[str, Any]:
        """The common figures, and the vulnerabilities the (θ,k) check measured."""
        return {**super().figures(conn, r, built, checked),
                **{f: checked[f] for f in FIGURES if f in checked}}  # fmt: skip


def _ranked(distinct: list[Any]) -> np.ndarray:
    """Each entry's rank among the distinct entries, in their sort order (equal ones alike)."""
    order = sorted(set(distinct))
    rank = {v: i for i, v in enumerate(order)}
    return np.array([rank[v] for v in distinct], dtype=np.int64)


register(ThetaK())
