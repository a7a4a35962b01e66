"""Cross-bucket l-diversity: the l half of (k,l)-anonymity (thesis Def. 3.7, formula (3.22)).

A cross-bucket release has two relations: QIT (generalised QIs, bucket id) and ST (bucket id,
sensitive value, count). An attacker who links a person to the class of QIT rows with her
generalised QI values (her equivalence group as published) and reads the buckets those rows lie
in gets, for each sensitive value s,

    p(C, s) = sum over buckets b of  Num(C, b) * Num(s, b) / (|C| * |b|)          (3.22)

with Num(C, b) the class's rows in bucket b, Num(s, b) the rows of b with value s and |b| the
bucket's size. The model holds when p(C, s) <= 1/l for every class and value; (k,l)-anonymity is
this and k-anonymity of QIT (every class >= k rows, Theorem 3.1). A bucket whose QIT rows and ST
counts disagree in size fails its classes: ST would misstate the odds.

In SQL: one GROUP BY of QIT per (class, bucket), joined to ST on the bucket (never a product of
rows with rows), summed per (class, value): linear in the release's size. The class is what the
release alone shows; the source-aware measure, where every released box containing a person's
QI point matches her (§6.2 item 7), is the exposure metric recorded at publish
(dbanon.metrics.exposure: `exposure_max`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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

BUCKET_ID = "bucket_id"
COUNT = "count"


@dataclass(frozen=True)
class BucketTarget(Target):
    """A QIT (`relation`, its `qi` and `bucket` column) with the ST (`buckets`: bucket,
    the sensitive column, `count`) that publishes its sensitive values."""

    buckets: sql.Composable | None = None
    bucket: str = BUCKET_ID

    def source(self) -> sql.Composable:
        """QIT as the class models read it: its QIs (the sensitive column is in ST)."""
        return Target(self.relation, self.qi, None, self.count).source()

    def bucket_source(self) -> sql.Composable:
        """Per (class, bucket) of QIT: its rows n and the class's size; q1..qn are the QIs."""
        cols = sql.SQL(", ").join(
            sql.SQL("{} AS {}").format(sql.Identifier(c), a)
            for c, a in zip(self.qi, self.aliases, strict=True)
        )
        return sql.SQL(
            """SELECT {q}, b, n, sum(n) OVER (PARTITION BY {q}) AS size,
                      sum(n) OVER (PARTITION BY b) AS bsize
               FROM (SELECT {q}, b, count(*) AS n
                     FROM (SELECT {cols}, {bucket} AS b FROM {qit}) r GROUP BY {q}, b) cb"""
        ).format(
            q=self.alias_list, cols=cols, bucket=sql.Identifier(self.bucket), qit=self.relation
        )


@dataclass(frozen=True)
class CrossBucketLDiversity(PrivacyModel):
    l: float  # noqa: E741
    needs_sensitive = True

    @property
    def name(self) -> str:
        return f"cross-bucket l-diversity (l={self.l:g})"

    def class_test(self, target: Target) -> ClassTest:
        if not isinstance(target, BucketTarget) or target.buckets is None:
            raise DbanonError(
                f"{self.name} reads a QIT and its ST: name the ST (--buckets) with the QIT"
            )
        st = sql.SQL(
            """SELECT {b} AS b, {s} AS s, sum({c})::float8 AS c,
                      sum(sum({c})) OVER (PARTITION BY {b})::float8 AS ssize
               FROM {st} GROUP BY {b}, {s}"""
        ).format(
            b=sql.Identifier(target.bucket), s=sql.Identifier(target.sensitive or ""),
            c=sql.Identifier(COUNT), st=target.buckets,
        )  # fmt: skip
        source = sql.SQL(
            """(SELECT {q}, st.s,
                       sum(cb.n * st.c / (cb.size * st.ssize)) AS p,
                       bool_or(st.ssize IS DISTINCT FROM cb.bsize) AS bad
                FROM ({cb}) cb LEFT JOIN ({st}) st ON st.b = cb.b
                GROUP BY {q}, st.s) cells"""
        ).format(
            q=sql.SQL(", ").join(sql.SQL("cb.{}").format(a) for a in target.aliases),
            cb=target.bucket_source(), st=st,
        )  # fmt: skip
        return ClassTest(
            source=source,
            per_class={"p": sql.SQL("max(p)"), "bad": sql.SQL("bool_or(bad)")},
            failing=sql.SQL("p > {} OR bad").format(sql.Literal(1 / self.l + TOLERANCE)),
        )

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        if target.sensitive is None:
            raise DbanonError(f"{self.name} needs a sensitive attribute (--sensitive)")
        _, failing, figs, worst = class_summary(
            conn, target, self.class_test(target), worst=sql.SQL("bad DESC, p DESC"),
            figures={"p": Figure(sql.SQL("max(p)"), "max", 0),
                     "bad": Figure(sql.SQL("count(*) FILTER (WHERE bad)"), "sum", 0)},
        )  # fmt: skip
        figures: dict[str, Any] = {
            "max_disclosure": float(figs["p"]),
            "classes_above_1_over_l": failing,
        }
        if figs["bad"]:
            figures["classes_with_inconsistent_buckets"] = int(figs["bad"])
        return CheckResult(self.name, failing == 0, figures, worst)

    def class_holds(self, counts: Counts, overall: Counts | None = None) -> bool:
        """In memory a class's counts are its attacker's odds (value -> weight): none above
        1/l of the total."""
        ns = positive(counts).values()
        return not ns or max(ns) / sum(ns) <= 1 / self.l + TOLERANCE


def bucket_target(
    qit: sql.Composable, qi: Sequence[str], sensitive: str, st: sql.Composable
) -> BucketTarget:
    return BucketTarget(qit, list(qi), sensitive, None, st)
