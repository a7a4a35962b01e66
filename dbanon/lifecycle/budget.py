"""A privacy budget per source: what differentially private releases of it may spend together.

Sequential composition: a consumer who keeps r releases of one source, each (ε_i, δ_i)-DP,
holds what one (Σε_i, Σδ_i)-DP release would show, whatever the releases are and even if each
was chosen after seeing the last. So every run of a release whose method spends privacy
(`Method.privacy_cost`: a DP method's (ε, δ)) adds its cost to the source's ledger,
`dbanon.dp_spend`, and a run that would take the sum past the budget the DBA set (`dbanon
budget SOURCE --epsilon E [--delta D]`) is refused (exit 4) before anything is built; the
release in place stays. Runs are charged only when they succeed (a refused or failed run
released nothing), and the ledger outlives a dropped release: its consumers keep what they
read. A source without a budget is charged but never refused. The check locks the budget row
(FOR UPDATE) and a charge touches it, so two runs on one source cannot both take its last ε.
"""

from __future__ import annotations

from typing import Any

import psycopg

from dbanon.db import catalog
from dbanon.db.catalog import Relation
from dbanon.errors import DbanonError

# A sum of floats that meets the budget exactly is not an overspend.
SLACK = 1e-9


class OverBudget(DbanonError):
    """The run would spend more than its source's privacy budget: exit 4, as the intersection
    guard's refusals."""

    exit_code = 4


def status(conn: psycopg.Connection, source: Relation) -> dict[str, Any]:
    """The source's budget (None if unset), what its runs spent and what is left."""
    row = conn.execute(
        "SELECT epsilon, delta FROM dbanon.dp_budget WHERE source_schema = %s "
        "AND source_name = %s", [source.schema, source.name],
    ).fetchone()  # fmt: skip
    spent = conn.execute(
        "SELECT coalesce(sum(epsilon), 0), coalesce(sum(delta), 0), count(*) FROM dbanon.dp_spend "
        "WHERE source_schema = %s AND source_name = %s", [source.schema, source.name],
    ).fetchone()  # fmt: skip
    eps, delta = (None, None) if row is None else (row[0], row[1])
    return {
        "source": str(source),
        "epsilon": eps,
        "delta": delta,
        "spent_epsilon": float(spent[0]),
        "spent_delta": float(spent[1]),
        "runs": int(spent[2]),
        "left_epsilon": None if eps is None else max(eps - float(spent[0]), 0.0),
        "left_delta": None if delta is None else max(delta - float(spent[1]), 0.0),
    }


def set_budget(
    conn: psycopg.Connection, text: str, epsilon: float | None, delta: float | None
) -> dict[str, Any]:
    """Set (with epsilon) or show the budget of the source named `text`; the caller commits."""
    source = catalog.relation(conn, text)
    if epsilon is not None:
        if not 0 < epsilon < float("inf"):
            raise DbanonError(f"--epsilon must be a finite number above 0, got {epsilon!r}")
        if delta is not None and not 0 < delta < 1:
            raise DbanonError(f"--delta must be in (0, 1), got {delta!r}")
        conn.execute(
            "INSERT INTO dbanon.dp_budget (source_schema, source_name, epsilon, delta) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (source_schema, source_name) DO UPDATE "
            "SET epsilon = excluded.epsilon, delta = excluded.delta, set_at = now()",
            [source.schema, source.name, epsilon, delta],
        )
    elif delta is not None:
        raise DbanonError("--delta is set with --epsilon")
    return status(conn, source)


def charge(conn: psycopg.Connection, source: Relation, cost: tuple[float, float]) -> None:
    """Refuse (OverBudget) a run whose cost would take the source past its budget; locks the
    budget row until the run's transaction ends."""
    row = conn.execute(
        "SELECT epsilon, delta FROM dbanon.dp_budget WHERE source_schema = %s "
        "AND source_name = %s FOR UPDATE", [source.schema, source.name],
    ).fetchone()  # fmt: skip
    if row is None:
        return
    now = status(conn, source)
    eps, delta = cost
    if now["spent_epsilon"] + eps > row[0] + SLACK:
        raise OverBudget(
            f"source {source} has spent ε={now['spent_epsilon']:g} of its budget "
            f"{row[0]:g} over {now['runs']} run(s); this run would spend {eps:g} more: "
            "refused, the release in place is kept (raise the budget with dbanon budget)"
        )
    if row[1] is not None and now["spent_delta"] + delta > row[1] * (1 + SLACK):
        raise OverBudget(
            f"source {source} has spent δ={now['spent_delta']:g} of its budget {row[1]:g}; "
            f"this run would spend {delta:g} more: refused, the release in place is kept"
        )


def spend(
    conn: psycopg.Connection, source: Relation, release: str, run_id: int | None,
    cost: tuple[float, float],
) -> None:  # fmt: skip
    """Write the run's cost to the ledger, in the run's transaction, and touch the budget row:
    a concurrent run on the source that read the ledger before this commit then fails to lock
    it (a serialization failure) rather than spending on a stale sum."""
    conn.execute(
        "UPDATE dbanon.dp_budget SET epsilon = epsilon WHERE source_schema = %s "
        "AND source_name = %s", [source.schema, source.name],
    )  # fmt: skip
    conn.execute(
        "INSERT INTO dbanon.dp_spend (source_schema, source_name, release, run_id, epsilon, "
        "delta) VALUES (%s, %s, %s, %s, %s, %s)",
        [source.schema, source.name, release, run_id, cost[0], cost[1]],
    )
