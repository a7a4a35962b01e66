"""t-closeness (Li, Li, Venkatasubramanian, ICDE 2007): every class's sensitive distribution is
within Earth Mover's Distance t of the whole relation's.

Two ground distances, as in the paper:
- equal (categorical values): every two distinct values are at distance 1, and
  EMD(P, Q) = 1/2 sum_i |p_i - q_i| (total variation);
- ordered (numeric values): the m distinct values of the relation in order, value i and j at
  distance |i - j| / (m - 1), and EMD(P, Q) = 1/(m - 1) sum_i |sum_{j<=i} (p_j - q_j)|.
`ground="auto"` takes ordered for a numeric column (pg_type.typcategory 'N') and equal otherwise;
"ordered" can be forced for other types, and then orders values as PostgreSQL does (collation
for text). NULL is a value of its own, placed last in the order (PostgreSQL's NULLS LAST).

The SQL form never crosses classes with the value domain (classes x m rows). For the equal
ground, values absent from a class contribute q_i each, so per class
EMD = 1/2 (1 + sum over the class's values of (|p_i - q_i| - q_i)). For the ordered ground the
class's cumulative distribution F is a step function that each of its values lifts from all
its positions on; the effect of one lift on sum_{i >= a} |F_i - G_i| depends only on where the
non-decreasing G crosses the old and the new level, which width_bucket finds by binary search
in the array of G (float8, so a true binary search), and on prefix sums of G. So every cell
costs O(log m), whatever the number m of distinct values.

The whole is the relation the test reads; a live view, whose whole is what it shows after
suppression, re-tests against that (dbanon.models.suppression).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import psycopg
from psycopg import sql

from dbanon.errors import DbanonError
from dbanon.models.base import (
    TOLERANCE,
    CheckResult,
    ClassTest,
    Counts,
    Figure,
    PrivacyModel,
    Target,
    class_summary,
    positive,
)

GROUNDS = ("auto", "equal", "ordered")


def _order_key(v: Hashable) -> tuple[bool, Hashable]:
    return (v is None, v if v is not None else 0)


def is_numeric(values: Iterable[Hashable]) -> bool:
    """Whether values are all numbers (NULL aside): the in-memory rule for ground="auto"."""
    vals = [v for v in values if v is not None]
    return bool(vals) and all(
        isinstance(v, int | float | Decimal | Fraction) and not isinstance(v, bool) for v in vals
    )


def emd_equal(counts: Counts, overall: Counts) -> float:
    """EMD with equal ground distance: half the L1 distance of the two distributions."""
    p, q = positive(counts), positive(overall)
    np_, nq = sum(p.values()), sum(q.values())
    return 0.5 * sum(abs(p.get(v, 0) / np_ - q.get(v, 0) / nq) for v in set(p) | set(q))


def emd_ordered(counts: Counts, overall: Counts) -> float:
    """EMD with ordered ground distance over the relation's distinct values (NULL last)."""
    p, q = positive(counts), positive(overall)
    order = sorted(set(p) | set(q), key=_order_key)
    if len(order) < 2:
        return 0.0
    np_, nq = sum(p.values()), sum(q.values())
    total, run = 0.0, 0.0
    for v in order:
        run += p.get(v, 0) / np_ - q.get(v, 0) / nq
        total += abs(run)
    return total / (len(order) - 1)


@dataclass(frozen=True)
class TCloseness(PrivacyModel):
    t: float
    ground: str = "auto"  # "auto", "equal" or "ordered"
    needs_sensitive = True
    needs_overall = True

    def __post_init__(self) -> None:
        if self.ground not in GROUNDS:
            raise DbanonError(
                f"t-closeness ground must be one of {', '.join(GROUNDS)}, got {self.ground!r}"
            )

    @property
    def name(self) -> str:
        return f"t-closeness (t={self.t:g})"

    def resolve_ground(self, conn: psycopg.Connection, target: Target) -> str:
        if self.ground != "auto":
            return self.ground
        assert target.sensitive is not None
        return "ordered" if target.type_category(conn, target.sensitive) == "N" else "equal"

    def class_test(self, target: Target, ground: str | None = None) -> ClassTest:
        """EMD of each class from the distribution of the whole of `target`. `ground` is the
        resolved ground ("equal" or "ordered"); without it, "auto" is decided in SQL from the
        sensitive column's type category, as `resolve_ground` decides it, so that a view can
        carry the test without a connection to look the type up."""
        ground = ground or self.ground
        q = target.alias_list
        # Arrays over the domain in value order, built once and read by scalar subqueries (so
        # passed by reference, never copied into rows): qv[i] = q_i, g[i] = G_i = q_1 + ... + q_i,
        # gg[i + 1] = G_1 + ... + G_i (gg[1] = 0).
        qv, g, gg, m, typ = (
            sql.SQL(f"(SELECT {c} FROM dbanon_dist)") for c in ("qv", "g", "gg", "m", "typ")
        )
        equal_term = sql.SQL("abs(n / size - {qv}[rk]) - {qv}[rk]").format(qv=qv)
        equal_emd = sql.SQL("0.5 * (1 + sum(term))")
        # A cell at position a lifts F from p0 to p1 for every position from a on, so it adds
        # H(a, p1) - H(a, p0), where H(a, p) = sum_{i >= a} |p - G_i|
        #   = p (2e - a + 1 - m) - 2 GG_e + GG_{a-1} + GG_m,  e = max(a - 1, #{i: G_i <= p})
        # (the GG_{a-1} + GG_m cancel in the difference); the sum over the class plus
        # H(1, 0) = GG_m is sum_i |F_i - G_i|.
        ordered_term = sql.SQL(
            """p1 * (2 * e1 - rk + 1 - {m}) - 2 * {gg}[e1 + 1]
               - p0 * (2 * e0 - rk + 1 - {m}) + 2 * {gg}[e0 + 1]"""
        ).format(m=m, gg=gg)
        ordered_emd = sql.SQL(
            "CASE WHEN {m} > 1 THEN ({gg}[{m} + 1] + sum(term)) / ({m} - 1) ELSE 0 END"
        ).format(m=m, gg=gg)
        if ground == "equal":
            term, emd = equal_term, equal_emd
        elif ground == "ordered":
            term, emd = ordered_term, ordered_emd
        else:  # per row only the branch taken is evaluated
            ordered = sql.SQL(
                "coalesce((SELECT t.typcategory = 'N' FROM pg_type t WHERE t.oid = {typ}), false)"
            ).format(typ=typ)
            term, emd = (
                sql.SQL("CASE WHEN {} THEN {} ELSE {} END").format(ordered, o, e)
                for o, e in ((ordered_term, equal_term), (ordered_emd, equal_emd))
            )
        # The cells (one per class and value) are read twice: grouped by value for the domain, a
        # small aggregate in value order (ORDER BY s, NULLS LAST), and sorted by value for each
        # cell's position, then by class and value for the class's cumulative distribution.
        ctes = sql.SQL(
            """dbanon_tc_cells AS MATERIALIZED (SELECT {q}, s, n::float8 AS n FROM {cells}),
               dbanon_dist AS MATERIALIZED (
                 SELECT count(*) AS m, array_agg(qn / total ORDER BY s) AS qv,
                        array_agg(cq / total ORDER BY s) AS g,
                        array[0::float8] || array_agg(ccq ORDER BY s) AS gg,
                        min(pg_typeof(s)::oid) AS typ
                 FROM (SELECT s, qn, cq, total, sum(cq / total) OVER (ORDER BY s) AS ccq
                       FROM (SELECT s, qn, sum(qn) OVER (ORDER BY s) AS cq,
                                    sum(qn) OVER () AS total
                             FROM (SELECT s, sum(n) AS qn FROM dbanon_tc_cells GROUP BY s) v
                            ) d1
                      ) d2),
               dbanon_terms AS (
                 SELECT {q}, rk, n, sum(n) OVER w AS cum, sum(n) OVER (PARTITION BY {q}) AS size
                 FROM (SELECT {q}, s, n, dense_rank() OVER (ORDER BY s) AS rk
                       FROM dbanon_tc_cells) ranked
                 WINDOW w AS (PARTITION BY {q} ORDER BY s))"""
        ).format(q=q, cells=target.cells())
        contrib = sql.SQL(
            """(SELECT {q}, {term} AS term
                FROM dbanon_terms,
                     LATERAL (SELECT cum / size AS p1, (cum - n) / size AS p0) x,
                     LATERAL (SELECT greatest(rk - 1, width_bucket(p1, {g})) AS e1,
                                     greatest(rk - 1, width_bucket(p0, {g})) AS e0) y
               ) dbanon_contrib"""
        ).format(q=q, term=term, g=g)
        return ClassTest(
            source=contrib,
            per_class={"emd": emd},
            failing=sql.SQL("emd > {}").format(sql.Literal(self.t + TOLERANCE)),
            ctes=[ctes],
        )

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        target = target.validate(conn, self)
        ground = self.resolve_ground(conn, target)
        classes, failing, figs, worst = class_summary(
            conn,
            target,
            self.class_test(target, ground),
            worst=sql.SQL("emd DESC"),
            figures={"max_emd": Figure(sql.SQL("max(emd)"), "max", 0)},
        )
        return CheckResult(
            self.name,
            holds=failing == 0,
            figures={
                "emd_ground": ground,
                "max_emd": round(max(float(figs["max_emd"]), 0.0), 12),  # no 1e-16 noise
                "classes_above_t": failing,
            },
            worst_class=worst,
        )

    def class_emd(self, counts: Counts, overall: Counts) -> float:
        ordered = self.ground == "ordered" or (self.ground == "auto" and is_numeric(overall))
        return (emd_ordered if ordered else emd_equal)(counts, overall)

    def class_holds(self, counts: Counts, overall: Counts | None = None) -> bool:
        if overall is None:
            raise ValueError("t-closeness compares a class with the whole relation: pass overall")
        return self.class_emd(counts, overall) <= self.t + TOLERANCE
