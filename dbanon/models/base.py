"""What every privacy model check shares: the equivalence classes of a relation in SQL."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql


@dataclass(frozen=True)
class CheckResult:
    model: str  # e.g. "k-anonymity (k=10)"
    holds: bool
    figures: dict[str, Any] = field(default_factory=dict)
    worst_class: str | None = None  # the QI values of the class furthest from holding


@dataclass(frozen=True)
class Target:
    """A relation and the columns a check reads."""

    relation: sql.Composable
    qi: Sequence[str]
    sensitive: str | None = None

    @property
    def qi_list(self) -> sql.Composable:
        return sql.SQL(", ").join(map(sql.Identifier, self.qi))

    @property
    def class_label(self) -> sql.Composable:
        """The QI values of a class as one text, to name the worst class in a report."""
        return sql.SQL("concat_ws(', ', {})").format(
            sql.SQL(", ").join(
                sql.SQL("{} || '=' || coalesce({}::text, 'NULL')").format(
                    sql.Literal(c), sql.Identifier(c)
                )
                for c in self.qi
            )
        )


class PrivacyModel(ABC):
    """A privacy criterion checked over the equivalence classes (GROUP BY the QIs)."""

    needs_sensitive = False

    @property
    @abstractmethod
    def name(self) -> str: ...

    @abstractmethod
    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult: ...


def audit(
    conn: psycopg.Connection, target: Target, models: Sequence[PrivacyModel]
) -> list[CheckResult]:
    """Run every model's check on the same relation."""
    return [m.check(conn, target) for m in models]
