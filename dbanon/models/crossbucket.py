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

In SQL, one pass over each relation: every QIT row is joined with its bucket's ST rows on the
bucket id (never a product of rows with rows), each ST row carrying its share of its bucket,
c(b, s) / |b| (a window over the ST by bucket), and each QIT row its bucket's QIT size (a window
over the QIT by bucket); one hash aggregate per (class, value) then sums the shares, p(C, s) * |C|
(the rows of a class in bucket b each add c(b, s) / |b|: Num(C, b) of them), and counts the
class's rows once (on its bucket's first ST row). Both windows read their relation in bucket
order, which is how dbanon writes QIT and ST (its sorts find them sorted), and the join is a
merge of the two. At a million rows of a million one-row buckets it takes 3.5 s where numbering
the classes first (a hash aggregate of QIT by its QIs, then rows per (class, bucket), then hash
joins with per-bucket aggregates of both relations) took 6.1 s. The class is what the release
alone shows; the source-aware measure, where every released box containing a person's QI point
matches her (§6.2 item 7), is the exposure metric recorded at publish
(dbanon.metrics.exposure: `exposure_max`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from dbanon.db.settings import local_settings, work_mem_at_least
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
CHECK_WORK_MEM = "1GB"


@dataclass(frozen=True)
class BucketTarget(Target):
    """A QIT (`relation`, its `qi` and `bucket` column) with the ST (`buckets`: bucket,
    the sensitive column, `count`) that publishes its sensitive values."""

    buckets: sql.Composable | None = None
    bucket: str = BUCKET_ID

    def source(self) -> sql.Composable:
        """QIT as the class models read it: its QIs (the sensitive column is in ST)."""
        return Target(self.relation, self.qi, None, self.count).source()


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
        # Per (class, value): the shares summed (p * |C|), the class's rows counted once (on
        # its bucket's first ST row, or as it is when no ST row has its bucket) and whether a
        # row's bucket is missing from ST or sized differently there (a NULL bucket id names
        # none): its class is inconsistent. An ST repeating a (bucket, value) reads the same
        # as one summing it (the share is linear in each count).
        q = sql.SQL(", ").join(
            sql.SQL("{} AS {}").format(sql.Identifier(c), a)
            for c, a in zip(target.qi, target.aliases, strict=True)
        )
        source = sql.SQL(
            """(SELECT {r_aliases}, st.s, sum(st.f) AS p,
                       count(*) FILTER (WHERE st.first OR st.b IS NULL) AS n,
                       bool_or(st.b IS NULL OR st.size <> r.size) AS bad
                FROM (SELECT {q}, {bucket} AS b, count(*) OVER (PARTITION BY {bucket}) AS size
                      FROM {qit}) r
                LEFT JOIN (SELECT {bucket} AS b, {s} AS s, {c}::float8 / sum({c}) OVER w AS f,
                                  sum({c}) OVER w AS size, row_number() OVER w = 1 AS first
                           FROM {st} WINDOW w AS (PARTITION BY {bucket})) st ON st.b = r.b
                GROUP BY {r_aliases}, st.s) cells"""
        ).format(
            q=q, r_aliases=sql.SQL(", ").join(sql.SQL("r.{}").format(a) for a in target.aliases),
            st=target.buckets, bucket=sql.Identifier(target.bucket),
            s=sql.Identifier(target.sensitive or ""), c=sql.Identifier(COUNT), qit=target.relation,
        )  # fmt: skip
        return ClassTest(
            source=source,
            per_class={"p": sql.SQL("max(p) / sum(n)"), "bad": sql.SQL("bool_or(bad)")},
            failing=sql.SQL("p > {} OR bad").format(sql.Literal(1 / self.l + TOLERANCE)),
        )

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        if target.sensitive is None:
            raise DbanonError(f"{self.name} needs a sensitive attribute (--sensitive)")
        # Its hash of (class, value) cells holds about a row per QIT row (155 MB at a million
        # one-row buckets): with less it spills and runs in batches.
        with local_settings(conn, work_mem=work_mem_at_least(conn, CHECK_WORK_MEM)):
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
