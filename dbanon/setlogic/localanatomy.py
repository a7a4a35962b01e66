"""The relations of a local anatomy (LA) or LAG release, and their independent checks, in SQL.

Release shape (thesis Def. 4.4 and Table 4.4; Def. 5.3 and Table 5.4):
- `NAME(row_id, [group_id,] qi...)`: one row per released person under a fresh pseudonymous
  `row_id` (a random permutation per run: never the key, not in key order; rows in random
  order). Unflagged values as they are (LA) or generalised over the row's group (LAG: numeric
  `lo-hi`, categorical the LCA or '*'); flagged cells NULL. A column of `--sensitive` (every
  value flagged) has no column here: it would be NULL throughout;
- per attribute with flagged values, `NAME_<attr>_idt(row_id, bucket_id)` (which bucket holds
  the row's value) and `NAME_<attr>_st(bucket_id, <attr>)` (the bucket's values, one row per
  value, in value order: not aligned to the IDT rows). Bucket ids are local to the attribute.

Checks read only these relations (never the source nor the build's own figures):
- per attribute under l (Corollary 4.1): every bucket has >= l values, each value at most once,
  so p(t, s) <= 1/l whatever the attacker knows;
- per attribute under t: every bucket's value shares within t of the attribute's flagged values
  (equal ground distance: half the L1 distance);
- per attribute, IDT and ST agree: the same buckets with the same sizes, every IDT row id once
  and present in NAME, NAME's cell NULL exactly for the IDT rows (a QI attribute);
- LAG: k-anonymity of NAME over its QI columns, NULL a value of its own: rows of one group share
  their flag pattern and generalised values, so classes are the groups inside QI-partition
  subsets (the k-anonymity model's own check, dbanon.models).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from dbanon.algorithms.localanatomy import Principle
from dbanon.db.settings import local_settings, work_mem_at_least
from dbanon.models.base import CheckResult

# Plans of the checks that group and join by sorting, not hashing: a release's buckets are
# about half as many as its rows (l = 2), so hash tables of millions of entries outgrow the
# caches, where a sort of integers is cheap (and, of a relation written in that order, a pass).
_SORTED = {"enable_hashagg": "off", "enable_hashjoin": "off"}
# work_mem of the l check (if the session's is lower): its sort of the ST's (bucket, value)
# spills at 10M rows under dbanon's 256MB, and inside a publish, right after the release's
# gigabyte was written, the spill costs double: 13.9 s there against 7.3 s in memory.
L_CHECK_WORK_MEM = "1GB"

ROW_ID = "row_id"
GROUP_ID = "group_id"
BUCKET_ID = "bucket_id"
IDENT_LIMIT = 63  # PostgreSQL's identifier length (bytes)


@dataclass(frozen=True)
class Attribute:
    """One bucketised attribute of a release: its column, principle and relations."""

    column: str
    principle: Principle
    in_main: bool  # a QI column of NAME (semi-sensitive) rather than a --sensitive one

    def idt(self, target: str) -> str:
        return f"{target}_{self.column}_idt"

    def st(self, target: str) -> str:
        return f"{target}_{self.column}_st"


def check_attribute(
    conn: psycopg.Connection, attr: Attribute, main: sql.Identifier, idt: sql.Identifier,
    st: sql.Identifier, label: str,
) -> CheckResult:  # fmt: skip
    """The principle of one attribute's buckets, and IDT/ST/NAME agreeing (see the module)."""
    v = sql.Identifier(attr.column)
    b, rid = sql.Identifier(BUCKET_ID), sql.Identifier(ROW_ID)
    if attr.principle.kind == "l":
        ell = int(attr.principle.value)
        # The ST's buckets counted once: for the principle and against the IDT's sizes. Its
        # count(DISTINCT) sorts them; the IDT's sizes are then counted in bucket order too
        # (it is written in that order) and merged with them (`_SORTED`), where the planner
        # hashes them and joins by hash: 0.92-0.97 -> 0.71 s at 1M rows, 12.5-14.6 -> 8.4-8.6 s
        # at 10M.
        memory = work_mem_at_least(conn, L_CHECK_WORK_MEM)
        with local_settings(conn, **_SORTED, work_mem=memory):
            buckets, failing, worst, size, distinct, mismatched = conn.execute(
                sql.SQL(
                    """WITH g AS (SELECT {b} AS b, count(*) AS n, count(DISTINCT {v}) AS d,
                                         count({v}) AS nn FROM {st} GROUP BY {b}),
                       i AS (SELECT {b} AS b, count(*) AS n FROM {idt} GROUP BY {b}),
                       bad AS (SELECT * FROM g WHERE b IS NULL OR n < {l} OR d < n OR nn < n)
                       SELECT (SELECT count(*) FROM g), (SELECT count(*) FROM bad), w.b, w.n, w.d,
                              (SELECT count(*) FROM i FULL JOIN g USING (b)
                               WHERE i.n IS DISTINCT FROM g.n)
                       FROM (SELECT 1) one LEFT JOIN (SELECT * FROM bad ORDER BY d, n LIMIT 1) w
                       ON true"""
                ).format(b=b, v=v, st=st, idt=idt, l=sql.Literal(ell))
            ).fetchone()
        figures = {"buckets": buckets, "failing_buckets": failing}
        if failing:
            return CheckResult(
                label, False, figures,
                f"{attr.column} bucket {worst}: {size} values, {distinct} distinct",
            )  # fmt: skip
    else:
        buckets, failing, worst, dist = conn.execute(
            sql.SQL(
                """WITH c AS (SELECT {b} AS b, {v}::text AS v, count(*)::float8 AS n FROM {st}
                              GROUP BY 1, 2),
                   bs AS (SELECT b, sum(n) AS n FROM c GROUP BY b),
                   whole AS (SELECT v, sum(n) / (SELECT sum(n) FROM c) AS p FROM c GROUP BY v),
                   cells AS (SELECT bs.b, whole.v, whole.p,
                                    coalesce(c.n, 0) / bs.n AS q
                             FROM bs CROSS JOIN whole LEFT JOIN c ON c.b = bs.b AND c.v = whole.v),
                   d AS (SELECT b, 0.5 * sum(abs(q - p)) AS emd FROM cells GROUP BY b)
                   SELECT (SELECT count(*) FROM d),
                          (SELECT count(*) FROM d WHERE emd > {t} + 1e-9 OR b IS NULL),
                          w.b, w.emd
                   FROM (SELECT 1) one LEFT JOIN (SELECT * FROM d ORDER BY emd DESC LIMIT 1) w
                   ON true"""
            ).format(b=b, v=v, st=st, t=sql.Literal(attr.principle.value))
        ).fetchone()
        figures = {"buckets": buckets, "failing_buckets": failing, "max_emd": dist}
        if failing:
            return CheckResult(label, False, figures, f"{attr.column} bucket {worst}: EMD {dist}")
        mismatched = conn.execute(
            sql.SQL(
                """WITH i AS (SELECT {b} AS b, count(*) AS n FROM {idt} GROUP BY {b}),
                        s AS (SELECT {b} AS b, count(*) AS n FROM {st} GROUP BY {b})
                   SELECT count(*) FROM i FULL JOIN s USING (b) WHERE i.n IS DISTINCT FROM s.n"""
            ).format(b=b, idt=idt, st=st)
        ).fetchone()[0]
    # IDT and ST: same buckets, same sizes; row ids once each and released in NAME; NAME's
    # cell NULL exactly where the row is in the IDT (a QI attribute). NAME and the IDT are
    # joined once for both: IDT rows no NAME row matches are those not released, and the
    # NAME rows among the join's are NAME LEFT JOIN IDT's.
    joined = (
        sql.SQL(
            """SELECT count(*) FILTER (WHERE m.shown IS NULL),
                      count(*) FILTER (WHERE m.shown AND (x.here IS NULL) = (m.v IS NULL))
               FROM (SELECT {rid} AS r, {v} AS v, true AS shown FROM {main}) m
               FULL JOIN (SELECT {rid} AS r, true AS here FROM {idt}) x ON x.r = m.r"""
        )
        if attr.in_main
        else sql.SQL(
            """SELECT count(*), 0 FROM {idt} x
               WHERE NOT EXISTS (SELECT 1 FROM {main} m WHERE m.{rid} = x.{rid})"""
        )
    ).format(main=main, idt=idt, rid=rid, v=v)
    # Sorted, not hashed (`_SORTED`): 0.46 -> 0.33 s at 1M rows, 6.7 -> 3.4 s at 10M.
    with local_settings(conn, **_SORTED):
        twice = conn.execute(sql.SQL(
            "SELECT count(*) FROM (SELECT 1 FROM {idt} GROUP BY {rid} HAVING count(*) > 1) t"
        ).format(idt=idt, rid=rid)).fetchone()[0]  # fmt: skip
    missing, leaks = conn.execute(joined).fetchone()
    if mismatched or twice or missing:
        return CheckResult(
            label, False, figures,
            f"{attr.column}: {mismatched} buckets differ in size between IDT and ST, "
            f"{twice} row ids twice, {missing} row ids not released",
        )  # fmt: skip
    if leaks:
        return CheckResult(
            label, False, figures,
            f"{attr.column}: {leaks} rows of the release show a flagged value or hide an "
            "unflagged one",
        )  # fmt: skip
    return CheckResult(label, True, figures)
