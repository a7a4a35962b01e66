"""l-diversity: every equivalence class is "well represented" in the sensitive attribute.

Machanavajjhala et al. give three instantiations, all here; the personalised-privacy thesis
(Def. 2.2) uses a fourth, the frequency form, which is also Anatomy's l-eligibility:
- distinct: at least l distinct sensitive values in every class;
- entropy: -sum p log p >= log l in every class (so exp(entropy) is the class's "effective l");
- recursive (c,l): r1 < c (r_l + ... + r_m), r_i the i-th largest value count of the class, i.e.
  the most frequent value must not dominate the tail left after removing the l-1 most frequent;
- frequency: no value has a relative frequency above 1/l in any class.
NULL counts as a value (see base).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import psycopg
from psycopg import sql

from dbanon.models.base import (
    TOLERANCE,
    CheckResult,
    ClassTest,
    Counts,
    Figure,
    PrivacyModel,
    Target,
    class_summary,
    entropy,
    positive,
)


@dataclass(frozen=True)
class DistinctLDiversity(PrivacyModel):
    l: int  # noqa: E741 - the paper's name
    needs_sensitive = True

    @property
    def name(self) -> str:
        return f"distinct l-diversity (l={self.l:g})"

    def class_test(self, target: Target) -> ClassTest:
        return ClassTest(
            source=target.cells(),
            per_class={"d": sql.SQL("count(*)")},
            failing=sql.SQL("d < {}").format(sql.Literal(self.l)),
        )

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        target = target.validate(conn, self)
        classes, failing, figs, worst = class_summary(
            conn,
            target,
            self.class_test(target),
            worst=sql.SQL("d"),
            figures={"min_distinct_sensitive": Figure(sql.SQL("min(d)"), "min", 0)},
        )
        return CheckResult(
            self.name,
            holds=failing == 0,
            figures={
                "min_distinct_sensitive": int(figs["min_distinct_sensitive"]),
                "classes_below_l": failing,
            },
            worst_class=worst,
        )

    def floors(self) -> tuple[int, int]:
        return 0, self.l

    def class_holds(self, counts: Counts, overall: Counts | None = None) -> bool:
        return len(positive(counts)) >= self.l


@dataclass(frozen=True)
class EntropyLDiversity(PrivacyModel):
    l: float  # noqa: E741 - a real number >= 1 makes sense here: exp(entropy) >= l
    needs_sensitive = True

    @property
    def name(self) -> str:
        return f"entropy l-diversity (l={self.l:g})"

    def class_test(self, target: Target) -> ClassTest:
        # -sum (n/N) ln(n/N) = ln N - sum(n ln n) / N, in one pass over the class's cells.
        h = sql.SQL("ln(sum(n)::float8) - sum(n::float8 * ln(n::float8)) / sum(n)::float8")
        return ClassTest(
            source=target.cells(),
            per_class={"h": h},
            failing=sql.SQL("h < {}").format(sql.Literal(math.log(self.l) - TOLERANCE)),
        )

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        target = target.validate(conn, self)
        classes, failing, figs, worst = class_summary(
            conn,
            target,
            self.class_test(target),
            worst=sql.SQL("h"),
            figures={"min_entropy": Figure(sql.SQL("min(h)"), "min")},
        )
        low = float(figs["min_entropy"]) if figs["min_entropy"] is not None else 0.0
        low = max(low, 0.0)  # a one-value class computes as -0.0 or -1e-16
        return CheckResult(
            self.name,
            holds=failing == 0,
            figures={
                # rounded to 12 places: exactly uniform classes report ln(l) and l, no noise
                "min_entropy": round(low, 12),
                "min_entropy_l": round(math.exp(low), 12),
                "classes_below_entropy_l": failing,
            },
            worst_class=worst,
        )

    def class_holds(self, counts: Counts, overall: Counts | None = None) -> bool:
        return entropy(counts) >= math.log(self.l) - TOLERANCE


@dataclass(frozen=True)
class RecursiveCLDiversity(PrivacyModel):
    c: float
    l: int  # noqa: E741
    needs_sensitive = True

    @property
    def name(self) -> str:
        return f"recursive (c,l)-diversity (c={self.c:g}, l={self.l:g})"

    def class_test(self, target: Target) -> ClassTest:
        # pos numbers a class's values by decreasing count; ties are numbered in any order, which
        # changes no sum over pos >= l because tied counts are equal.
        tail = sql.SQL("coalesce(sum(n) FILTER (WHERE pos >= {}), 0)::float8").format(
            sql.Literal(self.l)
        )
        return ClassTest(
            source=target.cells(rank=True),
            per_class={
                "r1": sql.SQL("max(n)::float8"),
                "tail": tail,
                "d": sql.SQL("count(*)"),
            },
            failing=sql.SQL("NOT (r1 < {}::float8 * tail)").format(sql.Literal(float(self.c))),
        )

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        target = target.validate(conn, self)
        classes, failing, figs, worst = class_summary(
            conn,
            target,
            self.class_test(target),
            # the largest r1 / tail; classes with no tail at all (fewer than l values) first
            worst=sql.SQL("tail = 0 DESC, r1 / nullif(tail, 0) DESC"),
            figures={
                "ratio": Figure(  # NULL when some class has no tail: not made from parts
                    sql.SQL(
                        "CASE WHEN bool_or(tail = 0) THEN NULL ELSE max(r1 / nullif(tail, 0)) END"
                    )
                ),
                "min_distinct_sensitive": Figure(sql.SQL("min(d)"), "min", 0),
            },
        )
        ratio = figs["ratio"]
        return CheckResult(
            self.name,
            holds=failing == 0,
            figures={
                # holds iff this is below c; None when some class has fewer than l values
                "max_r1_to_tail_ratio": None if ratio is None else float(ratio),
                "min_distinct_sensitive": int(figs["min_distinct_sensitive"]),
                "classes_failing_recursive": failing,
            },
            worst_class=worst,
        )

    def class_holds(self, counts: Counts, overall: Counts | None = None) -> bool:
        ns = sorted(positive(counts).values(), reverse=True)
        if not ns:
            return False
        return float(ns[0]) < float(self.c) * float(sum(ns[self.l - 1 :]))


@dataclass(frozen=True)
class FrequencyLDiversity(PrivacyModel):
    l: float  # noqa: E741
    needs_sensitive = True

    @property
    def name(self) -> str:
        return f"frequency l-diversity (l={self.l:g})"

    def class_test(self, target: Target) -> ClassTest:
        return ClassTest(
            source=target.cells(),
            per_class={"f": sql.SQL("max(n)::float8 / sum(n)::float8")},
            failing=sql.SQL("f > {}").format(sql.Literal(1 / self.l + TOLERANCE)),
        )

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        target = target.validate(conn, self)
        classes, failing, figs, worst = class_summary(
            conn,
            target,
            self.class_test(target),
            worst=sql.SQL("f DESC"),
            figures={"max_frequency": Figure(sql.SQL("max(f)"), "max", 0)},
        )
        return CheckResult(
            self.name,
            holds=failing == 0,
            figures={
                "max_frequency": float(figs["max_frequency"]),
                "classes_above_1_over_l": failing,
            },
            worst_class=worst,
        )

    def class_holds(self, counts: Counts, overall: Counts | None = None) -> bool:
        ns = positive(counts).values()
        return not ns or max(ns) / sum(ns) <= 1 / self.l + TOLERANCE
