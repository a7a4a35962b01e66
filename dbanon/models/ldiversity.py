"""Distinct l-diversity: every equivalence class holds at least l distinct sensitive values."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from dbanon.models.base import CheckResult, PrivacyModel, Target


@dataclass(frozen=True)
class DistinctLDiversity(PrivacyModel):
    l: int  # noqa: E741 - the paper's name
    needs_sensitive = True

    @property
    def name(self) -> str:
        return f"distinct l-diversity (l={self.l})"

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        query = sql.SQL(
            """SELECT coalesce(min(d), 0), count(*) FILTER (WHERE d < {l}),
                      (array_agg(label ORDER BY d))[1]
               FROM (SELECT count(DISTINCT {s}) AS d, {label} AS label
                     FROM {rel} GROUP BY {qi}) classes"""
        ).format(
            l=sql.Literal(self.l),
            s=sql.Identifier(target.sensitive),
            label=target.class_label,
            rel=target.relation,
            qi=target.qi_list,
        )
        fewest, failing, worst = conn.execute(query).fetchone()
        return CheckResult(
            self.name,
            holds=int(failing) == 0,
            figures={"min_distinct_sensitive": int(fewest), "classes_below_l": int(failing)},
            worst_class=worst,
        )
