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

In SQL: QIT's classes numbered by one hash aggregate over the QIs, then rows per (class id,
bucket), joined to ST on the bucket (never a product of rows with rows), summed per (class id,
value): linear in the release's size, and no sort of QIT by its QIs (a window over the class
needed two, 40 % of the check at 300,000 rows). The class is what the
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

from dbanon.db.settings import local_settings
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

    def classes_cte(self) -> sql.Composable:
        """WITH item CLASSES: per class of QIT (q1..qn are its QIs), an id, its size and its
        rows' buckets. One hash aggregate over the QIs; what follows counts by the id."""
        cols = sql.SQL(", ").join(
            sql.SQL("{} AS {}").format(sql.Identifier(c), a)
            for c, a in zip(self.qi, self.aliases, strict=True)
        )
        return sql.SQL(
            """{classes} AS MATERIALIZED (
                   SELECT row_number() OVER () AS id, c.*
                   FROM (SELECT {q}, count(*) AS size, array_agg(b) AS bs
                         FROM (SELECT {cols}, {bucket} AS b FROM {qit}) r GROUP BY {q}) c)"""
        ).format(
            classes=CLASSES, q=self.alias_list, cols=cols, bucket=sql.Identifier(self.bucket),
            qit=self.relation,
        )  # fmt: skip


CLASSES = sql.Identifier("dbanon_bucket_classes")


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
        # Sorts nothing: classes are numbered once (`classes_cte`), then every step is a hash
        # aggregate or hash join on integers (class id, bucket) and the sensitive value. Per
        # (class, bucket) its rows n; per (class, value) p, summed over the ST's rows as they
        # are (p is linear in each count: an ST repeating a (bucket, value) reads the same as
        # one summing it, without a GROUP BY of the ST's rows, 0.6-1.0 s of 8.2-8.8 at 1M); per
        # class its worst value. A bucket's QIT rows (bz) and its ST counts (sz) must agree; a NULL
        # bucket id names no ST bucket: its class is inconsistent.
        source = sql.SQL(
            """(SELECT {q}, w.p, w.bad FROM {classes} c JOIN (
                   SELECT id, max(p) AS p, bool_or(bad) AS bad FROM (
                       SELECT cb.id, sum(cb.n * st.c / (cb.size * sz.ssize)) AS p,
                              bool_or(cb.b IS NULL OR sz.ssize IS DISTINCT FROM bz.bsize) AS bad
                       FROM (SELECT c.id, u.b, count(*) AS n, min(c.size) AS size
                             FROM {classes} c CROSS JOIN LATERAL unnest(c.bs) AS u (b)
                             GROUP BY c.id, u.b) cb
                       LEFT JOIN (SELECT {bucket} AS b, count(*) AS bsize FROM {qit} GROUP BY 1) bz
                       ON bz.b = cb.b
                       LEFT JOIN (SELECT {bucket} AS b, sum({c})::float8 AS ssize FROM {st}
                                  GROUP BY 1) sz
                       ON sz.b = cb.b
                       LEFT JOIN (SELECT {bucket} AS b, {s} AS s, {c}::float8 AS c FROM {st}) st
                       ON st.b = cb.b
                       GROUP BY cb.id, st.s) cells
                   GROUP BY id) w ON w.id = c.id) worst"""
        ).format(
            q=sql.SQL(", ").join(sql.SQL("c.{}").format(a) for a in target.aliases),
            classes=CLASSES, st=target.buckets, bucket=sql.Identifier(target.bucket),
            s=sql.Identifier(target.sensitive or ""), c=sql.Identifier(COUNT),
            qit=target.relation,
        )  # fmt: skip
        return ClassTest(
            source=source,
            per_class={"p": sql.SQL("max(p)"), "bad": sql.SQL("bool_or(bad)")},
            failing=sql.SQL("p > {} OR bad").format(sql.Literal(1 / self.l + TOLERANCE)),
            ctes=(target.classes_cte(),),
        )

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        if target.sensitive is None:
            raise DbanonError(f"{self.name} needs a sensitive attribute (--sensitive)")
        # The planner takes the unnested buckets for a few thousand groups and sorts a
        # million rows to merge and group them; hashing them is what it should do (1M-row
        # release: 8.0-8.6 -> 7.0-7.2 s of server CPU).
        with local_settings(conn, enable_sort="off"):
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
