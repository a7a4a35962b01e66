"""k-anonymity and its sensitive-attribute extensions (alpha,k) and (p,k).

k-anonymity: every equivalence class over the QIs has at least k rows (Sweeney; thesis Def. 2.1).
(alpha,k)-anonymity (Wong, Li, Fu, Wang, KDD 2006): k-anonymous, and in every class the relative
frequency of a sensitive value is at most alpha. The paper states it for one chosen sensitive
value (e.g. "HIV") and generalises it to every value; `value=None` is the general form (the
default, as dbanon does not presume which value is the sensitive one), `value="HIV"` the
single-value form, matched on the value's text.
(p,k)-anonymity (the (theta,k) paper's baseline): k-anonymous, and every class holds at least p
distinct sensitive values.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from dbanon.models import sizes
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

# Discernibility, sum of n^2 over the classes: in bigint up to the largest n whose square fits
# (a numeric per class costs 15 % of the whole check), in numeric beyond it.
DM = sql.SQL(
    "coalesce(sum(n * n) FILTER (WHERE n <= 3037000499), 0)"
    " + coalesce(sum(n::numeric * n) FILTER (WHERE n > 3037000499), 0)"
)


@dataclass(frozen=True)
class KAnonymity(PrivacyModel):
    k: int

    @property
    def name(self) -> str:
        return f"k-anonymity (k={self.k})"

    def class_test(self, target: Target) -> ClassTest:
        return ClassTest(
            source=target.source(),
            per_class={"n": target.rows},
            failing=sql.SQL("n < {}").format(sql.Literal(self.k)),
        )

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        target = target.validate(conn, self)
        if target.split is None and target.count is None and target.worst == "failing":
            held = self._from_sizes(conn, target)
            if held is not None:
                return held
        test = self.class_test(target)
        classes, failing, figs, worst = class_summary(
            conn,
            target,
            test,
            worst=sql.SQL("n"),
            figures={
                "min_class_size": Figure(sql.SQL("min(n)"), "min", 0),
                "rows_in_small_classes": Figure(
                    sql.SQL("sum(n) FILTER (WHERE {})").format(test.failing), "sum", 0
                ),
                "dm": Figure(DM, "sum", 0),
            },
        )
        return CheckResult(
            self.name,
            holds=failing == 0,
            figures={
                "classes": classes,
                "min_class_size": int(figs["min_class_size"]),
                "rows_in_small_classes": int(figs["rows_in_small_classes"]),
                "dm": int(figs["dm"]),  # discernibility (2.4), from the same GROUP BY
            },
            worst_class=worst,
        )

    def floors(self) -> tuple[int, int]:
        return self.k, 0

    def class_holds(self, counts: Counts, overall: Counts | None = None) -> bool:
        return sum(positive(counts).values()) >= self.k

    def _from_sizes(self, conn: psycopg.Connection, target: Target) -> CheckResult | None:
        """The result from the histogram of class sizes (dbanon.models.sizes, which a publish
        shares with its figures and risk) when every class holds; None when one fails, for
        `check` to count again and name the worst class."""
        hist = sizes.histogram(conn, target.relation, target.qi)
        if any(f < self.k for f in hist):
            return None
        return CheckResult(
            self.name, holds=True,
            figures={"classes": sum(hist.values()), "min_class_size": min(hist, default=0),
                     "rows_in_small_classes": 0,
                     "dm": sum(f * f * c for f, c in hist.items())},
            worst_class=None,
        )  # fmt: skip


@dataclass(frozen=True)
class AlphaKAnonymity(PrivacyModel):
    alpha: float
    k: int
    value: str | None = None  # None: every sensitive value (the general form)
    needs_sensitive = True

    @property
    def name(self) -> str:
        of = "" if self.value is None else f", value={self.value!r}"
        return f"(alpha,k)-anonymity (alpha={self.alpha:g}, k={self.k}{of})"

    @property
    def _frequency_figure(self) -> str:
        return "max_frequency" if self.value is None else "max_value_frequency"

    def class_test(self, target: Target) -> ClassTest:
        if self.value is None:
            top = sql.SQL("max(n)")
        else:  # rows of the one value; 0 where the class lacks it
            top = sql.SQL("coalesce(sum(n) FILTER (WHERE s::text = {}), 0)").format(
                sql.Literal(self.value)
            )
        return ClassTest(
            source=target.cells(),
            per_class={
                "n": sql.SQL("sum(n)::bigint"),
                "f": sql.SQL("{}::float8 / sum(n)::float8").format(top),
            },
            failing=sql.SQL("(n < {k} OR f > {alpha})").format(
                k=sql.Literal(self.k), alpha=sql.Literal(self.alpha + TOLERANCE)
            ),
        )

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        target = target.validate(conn, self)
        test = self.class_test(target)
        classes, bad, figs, worst = class_summary(
            conn,
            target,
            test,
            worst=sql.SQL("{} DESC, f DESC, n").format(test.failing),
            figures={
                "min_class_size": Figure(sql.SQL("min(n)"), "min", 0),
                "max_frequency": Figure(sql.SQL("max(f)"), "max", 0),
            },
        )
        return CheckResult(
            self.name,
            holds=bad == 0,
            figures={
                "min_class_size": int(figs["min_class_size"]),
                self._frequency_figure: float(figs["max_frequency"]),
                "classes_failing_alpha_k": bad,
            },
            worst_class=worst,
        )

    def class_holds(self, counts: Counts, overall: Counts | None = None) -> bool:
        c = positive(counts)
        size = sum(c.values())
        if self.value is None:
            top = max(c.values(), default=0)
        else:
            top = sum(n for v, n in c.items() if v is not None and str(v) == self.value)
        return size >= self.k and (size == 0 or top / size <= self.alpha + TOLERANCE)


@dataclass(frozen=True)
class PKAnonymity(PrivacyModel):
    p: int
    k: int
    needs_sensitive = True

    @property
    def name(self) -> str:
        return f"(p,k)-anonymity (p={self.p}, k={self.k})"

    def class_test(self, target: Target) -> ClassTest:
        return ClassTest(
            source=target.cells(),
            per_class={"n": sql.SQL("sum(n)::bigint"), "d": sql.SQL("count(*)")},
            failing=sql.SQL("(n < {k} OR d < {p})").format(
                k=sql.Literal(self.k), p=sql.Literal(self.p)
            ),
        )

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        target = target.validate(conn, self)
        test = self.class_test(target)
        classes, bad, figs, worst = class_summary(
            conn,
            target,
            test,
            worst=sql.SQL("{} DESC, d, n").format(test.failing),
            figures={
                "min_class_size": Figure(sql.SQL("min(n)"), "min", 0),
                "min_distinct_sensitive": Figure(sql.SQL("min(d)"), "min", 0),
            },
        )
        return CheckResult(
            self.name,
            holds=bad == 0,
            figures={
                "min_class_size": int(figs["min_class_size"]),
                "min_distinct_sensitive": int(figs["min_distinct_sensitive"]),
                "classes_failing_p_k": bad,
            },
            worst_class=worst,
        )

    def floors(self) -> tuple[int, int]:
        return self.k, self.p

    def class_holds(self, counts: Counts, overall: Counts | None = None) -> bool:
        c = positive(counts)
        return sum(c.values()) >= self.k and len(c) >= self.p
