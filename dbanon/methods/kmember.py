"""Method `kmember`: greedy k-member clustering (Byun et al. 2007), with the (p,k) variant, and a
partitioned mode for large tables (dbanon.algorithms.blocks)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg

from dbanon.algorithms.base import QIArrays
from dbanon.errors import DbanonError
from dbanon.methods import register
from dbanon.methods.base import Option
from dbanon.methods.grouped import GROUP_POLICY, RANGES, GroupingMethod, codes

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved


BLOCK_SIZE = Option(
    "block_size", int, None,
    "Cluster in blocks of at most this many rows, cut along the QIs (default: 16000-row blocks "
    "above 100,000 rows).", low=2,
)  # fmt: skip
EXACT = Option("exact", bool, False, "Always run the exact greedy rule on the whole table.")


def validate_blocks(r: Resolved, least: int | None = None, rule: str = "2k") -> None:
    """--block-size and --exact (k-member's, (θ,k)'s and cbg's): not both, and blocks of at
    least `least` rows (named `rule`; 2k unless given)."""
    size = r.options.get("block_size")
    if size is not None and r.options.get("exact"):
        raise DbanonError("--block-size and --exact contradict each other: give one")
    least = 2 * (r.k or 1) if least is None else least
    if size is not None and size < least:
        raise DbanonError(f"--block-size must be at least {rule} = {least}, got {size}")


class KMember(GroupingMethod):
    name = "kmember"
    summary = (
        "greedy k-member clustering (Byun et al. 2007; Wang & Ma 2011): clusters of k..2k-1 "
        "rows, in Python (numba) over COPY streams; above 100,000 rows in blocks cut along "
        "the QIs, on all cores; with `--p` the (p,k) baseline of the (θ,k) paper"
    )
    promises = ("k-anonymity", "p-k-anonymity")
    attacker = (
        "knows everybody's QIs and who is in the table: finds at least k rows for anyone "
        "(with `--p`, at least p sensitive values among them)"
    )
    requires = ("k-anonymity", "p-k-anonymity")
    coded_sensitive = True  # its models count values
    randomised = True
    options: ClassVar[tuple[Option, ...]] = (
        RANGES,
        GROUP_POLICY,
        Option(
            "seeding", str, "random", "How each cluster's first record is picked.",
            ("random", "furthest"),
        ),
        Option(
            "cost", str, "height",
            "What a categorical value's generalisation costs when clustering: the LCA's height "
            "(the k-member paper) or its share of the leaves (NCP, Xu et al.).",
            ("height", "ncp"),
        ),
        BLOCK_SIZE,
        EXACT,
    )  # fmt: skip

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:
        super().validate(conn, r)
        validate_blocks(r)

    def cluster(
        self, r: Resolved, qi: QIArrays, sensitive: np.ndarray | None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        from dbanon.algorithms.blocks import DEFAULT_BLOCK_SIZE, kmember_blocks, partitioned
        from dbanon.algorithms.kmember import kmember
        from dbanon.algorithms.ties import restore, secret_order

        pk = r.model("p-k-anonymity")
        p = pk.p if pk is not None else 1  # type: ignore[attr-defined]
        size = r.options.get("block_size")
        common = {"seed": r.seed, "seeding": r.options["seeding"], "cost": r.options["cost"]}
        codes_ = None if sensitive is None or p == 1 else codes(sensitive)[0]
        # Ties go to the lowest row: rows in an order drawn from the seed, not the source's.
        order = secret_order(r.seed, qi.n)
        codes_ = None if codes_ is None else codes_[order]
        with in_order(qi, order):
            if partitioned(qi.n, size, bool(r.options.get("exact"))):
                size = size or DEFAULT_BLOCK_SIZE
                gid, figures = kmember_blocks(
                    qi, r.k, block_size=size, progress=r.say, sensitive=codes_, p=p,  # type: ignore[arg-type]
                    **common,  # type: ignore[arg-type]
                )
                return restore(order, gid), {"clustering": "partitioned", "block_size": size,
                                             **figures}
            gid = kmember(
                qi,
                r.k,  # type: ignore[arg-type]
                sensitive=codes_,
                p=p,
                **common,  # type: ignore[arg-type]
            )
        return restore(order, gid), {"clustering": "exact"}

    def cluster_many(
        self, r: Resolved, qi: QIArrays, sensitive: np.ndarray | None, roots: list[np.ndarray]
    ) -> list[np.ndarray] | None:
        """`cluster` of each root's rows, ties from the same secret orders, in one call;
        None for (p,k) or a root large enough to be clustered in blocks."""
        from dbanon.algorithms.blocks import partitioned
        from dbanon.algorithms.kmember import kmember_many
        from dbanon.algorithms.ties import secret_order

        pk = r.model("p-k-anonymity")
        size, exact = r.options.get("block_size"), bool(r.options.get("exact"))
        if (pk is not None and pk.p > 1) or any(  # type: ignore[attr-defined]
            partitioned(len(rows), size, exact) for rows in roots
        ):
            return None
        return kmember_many(qi, r.k, roots, [secret_order(r.seed, len(rows)) for rows in roots],  # type: ignore[arg-type]
                            seed=r.seed, seeding=r.options["seeding"],
                            cost=r.options["cost"])  # fmt: skip


@contextmanager
def in_order(qi: QIArrays, order: np.ndarray) -> Iterator[None]:
    """qi's rows put in `order` in place, a column at a time, and back when done: what
    subset(qi, order) would copy, without a second copy of the QI arrays held beside the
    caller's while the rows are clustered (36 MB at 1M rows of the bench's 7 QIs)."""
    for a in (qi.num, qi.cat):
        for j in range(a.shape[1]):
            a[:, j] = a[order, j]
    try:
        yield
    finally:
        for a in (qi.num, qi.cat):
            for j in range(a.shape[1]):
                a[order, j] = a[:, j].copy()


register(KMember())
