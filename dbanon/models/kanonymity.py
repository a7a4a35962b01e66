"""k-anonymity: every equivalence class over the QIs has at least k rows."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from dbanon.models.base import CheckResult, PrivacyModel, Target


@dataclass(frozen=True)
class KAnonymity(PrivacyModel):
    k: int

    @property
    def name(self) -> str:
        return f"k-anonymity (k={self.k})"

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        query = sql.SQL(
            """SELECT count(*), coalesce(min(n), 0), coalesce(sum(n) FILTER (WHERE n < {k}), 0),
                      (array_agg(label ORDER BY n))[1]
               FROM (SELECT count(*) AS n, {label} AS label FROM {rel} GROUP BY {qi}) classes"""
        ).format(
            k=sql.Literal(self.k), label=target.class_label, rel=target.relation, qi=target.qi_list
        )
        classes, smallest, small_rows, worst = conn.execute(query).fetchone()
        return CheckResult(
            self.name,
            holds=int(small_rows) == 0,
            figures={
                "classes": int(classes),
                "min_class_size": int(smallest),
                "rows_in_small_classes": int(small_rows),
            },
            worst_class=worst,
        )
