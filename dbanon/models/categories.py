"""Semantic categories of a sensitive attribute: what (θ,k)-anonymity mixes in every class and
what the similarity and background-knowledge attacks exploit.

A row's category is one of:
- the label of its sensitive value at one level of a stored hierarchy (ARX format, joined
  through dbanon.hierarchy_map; values matched as text), by default the level just below the
  root. Two values are "similar" when they share that label (the paper's semantic tree);
- for a numeric column, the interval [i·w, (i+1)·w) holding the value (`width` w): a one-level
  interval hierarchy, as the paper builds for numeric attributes. It needs nothing stored and
  covers whatever values a refresh brings in.

A row's value is compared as text under a hierarchy and as float8 under intervals, in SQL and
in memory alike. The algorithm receives the same text or float8 that the SQL check reads, and
Python floats and PostgreSQL float8 divide and floor alike (IEEE 754), so the algorithm and the
check always agree on a row's category and on which values are distinct.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from dbanon.core.hierarchy import Hierarchy
from dbanon.db import catalog
from dbanon.errors import DbanonError, offenders, quote_ident, quote_name
from dbanon.models.base import Target


def named_hierarchy(given: Mapping[str, str] | None, sensitive: Sequence[str]) -> str | None:
    """The hierarchy `--sensitive-hierarchy COL=NAME` names, COL being the sensitive column."""
    if not given:
        return None
    for column in given:
        if column not in sensitive:
            raise DbanonError(
                f"--sensitive-hierarchy names {quote_ident(column)}, which is not a sensitive "
                "column (--sensitive)"
            )
    if len(given) > 1:
        raise DbanonError("--sensitive-hierarchy: (θ,k)-anonymity reads one sensitive column")
    return next(iter(given.values()))


@dataclass(frozen=True)
class Categories:
    """How categories are read: a stored hierarchy and level, or interval width (not both)."""

    hierarchy: str | None = None
    level: int | None = None  # None: the level just below the root
    width: float | None = None

    def __post_init__(self) -> None:
        if self.hierarchy is None and self.width is None:
            raise DbanonError(
                "(θ,k)-anonymity needs the sensitive column's categories: "
                "--sensitive-hierarchy COL=NAME, or --category-width W for a numeric column"
            )
        if self.hierarchy is not None and self.width is not None:
            raise DbanonError(
                "--sensitive-hierarchy and --category-width both give categories: "
                "give one, not both"
            )
        if self.width is not None and self.level is not None:
            raise DbanonError("--category-level applies to --sensitive-hierarchy, not intervals")
        if self.width is not None and not (math.isfinite(self.width) and self.width > 0):
            raise DbanonError(f"--category-width must be a positive number, got {self.width}")
        if self.level is not None and (isinstance(self.level, bool) or self.level < 1):
            raise DbanonError(f"--category-level must be at least 1, got {self.level}")

    def describe(self) -> str:
        if self.width is not None:
            return f"intervals of width {self.width:g}"
        level = "below the root" if self.level is None else f"level {self.level}"
        return f"hierarchy {quote_name(self.hierarchy)} {level}"

    def source(self, target: Target) -> sql.Composable:
        """As BoundCategories.source, without loading the hierarchy: the default level (just
        below the root) is looked up in SQL, so a view or a check can use it as it is."""
        if self.hierarchy is None:
            return BoundCategories(self, None, 1).source(target)
        level: sql.Composable = (
            sql.Literal(self.level)
            if self.level is not None
            else sql.SQL(
                "(SELECT height - 1 FROM dbanon.hierarchy WHERE name = {} AND retired_at IS NULL)"
            ).format(sql.Literal(self.hierarchy))
        )
        return sql.SQL(
            """(SELECT src.*, src.s::text AS v, hm.label AS cat FROM {src} LEFT JOIN (
                   SELECT m.value, m.label FROM dbanon.hierarchy_map m
                   JOIN dbanon.hierarchy h ON h.id = m.hierarchy_id
                   WHERE h.name = {name} AND h.retired_at IS NULL AND m.level = {level}) hm
               ON hm.value = src.s::text) c"""
        ).format(src=target.source(), name=sql.Literal(self.hierarchy), level=level)

    def bind(self, conn: psycopg.Connection) -> BoundCategories:
        """Load the hierarchy and resolve the level; a one-line error when they do not exist."""
        if self.hierarchy is None:
            return BoundCategories(self, None, 1)
        h = catalog.load_hierarchy(conn, self.hierarchy)
        level = h.height - 1 if self.level is None else self.level
        if h.height < 2:
            raise DbanonError(
                f"hierarchy {quote_name(h.name)} has no level between its values and its root "
                "(height 1): it has no categories"
            )
        if not 1 <= level < h.height:
            raise DbanonError(
                f"--category-level {level} is not a level of hierarchy {quote_name(h.name)} "
                f"between its values and its root (1..{h.height - 1})"
            )
        return BoundCategories(self, h, level)


@dataclass(frozen=True)
class BoundCategories:
    """Categories with their hierarchy loaded: SQL and in-memory forms of the same mapping."""

    spec: Categories
    hierarchy: Hierarchy | None
    level: int

    @property
    def value_type(self) -> str:
        """The type a value is compared (and streamed) as."""
        return "text" if self.hierarchy is not None else "float8"

    def value_expr(self, column: sql.Composable) -> sql.Composable:
        return sql.SQL("{}::{}").format(column, sql.SQL(self.value_type))

    def source(self, target: Target) -> sql.Composable:
        """The target's aliased rows (q1..qn, s, w) with the row's value `v` and category
        `cat`; `cat` is NULL for a value the hierarchy lacks (validate() refuses those)."""
        v = self.value_expr(sql.SQL("src.s"))
        if self.hierarchy is None:
            return sql.SQL("(SELECT src.*, {v} AS v, floor({v} / {w}) AS cat FROM {src}) c").format(
                v=v,
                w=sql.Literal(float(self.spec.width)),
                src=target.source(),  # type: ignore[arg-type]
            )
        return sql.SQL(
            """(SELECT src.*, {v} AS v, hm.label AS cat FROM {src} LEFT JOIN (
                   SELECT m.value, m.label FROM dbanon.hierarchy_map m
                   JOIN dbanon.hierarchy h ON h.id = m.hierarchy_id
                   WHERE h.name = {name} AND h.version = {version} AND m.level = {level}) hm
               ON hm.value = {v}) c"""
        ).format(
            v=v,
            src=target.source(),
            name=sql.Literal(self.hierarchy.name),
            version=sql.Literal(self.hierarchy.version),
            level=sql.Literal(self.level),
        )

    def validate(self, conn: psycopg.Connection, target: Target) -> int:
        """Refuse rows without a category (NULL, a value the hierarchy lacks, NaN or infinite
        under intervals), naming them; returns the number of non-empty categories."""
        self.readable(conn, target)
        # One hashed GROUP BY first (a few groups: the categories and the offending values),
        # then the counts over those groups: count(DISTINCT) over the rows would sort them all.
        nulls, missing, categories = conn.execute(
            sql.SQL(
                """SELECT coalesce(sum(n) FILTER (WHERE s_null), 0),
                          array_agg(DISTINCT v::text) FILTER (WHERE NOT s_null AND bad),
                          count(DISTINCT cat)
                   FROM (SELECT s IS NULL AS s_null, {bad} AS bad,
                                CASE WHEN {bad} THEN v END AS v, cat, count(*) AS n
                         FROM {src} GROUP BY 1, 2, 3, 4) x"""
            ).format(bad=self.bad, src=self.source(target))
        ).fetchone()
        self.refuse(conn, target, nulls, missing)
        return int(categories)

    def readable(self, conn: psycopg.Connection, target: Target) -> None:
        """Refuse intervals of a column that is not numeric."""
        assert target.sensitive is not None
        column = target.sensitive
        if self.hierarchy is None and target.type_category(conn, column) != "N":
            raise DbanonError(
                f"--category-width needs a numeric sensitive column; {quote_ident(column)} of "
                f"{target.describe(conn)} is not"
            )

    @property
    def bad(self) -> sql.Composable:
        """True of a value (not NULL) without a category."""
        return sql.SQL(
            "cat IS NULL"
            if self.hierarchy is not None
            else "(v = 'NaN'::float8 OR v IN ('Infinity'::float8, '-Infinity'::float8))"
        )

    @property
    def summary(self) -> sql.Composable:
        """Over `cv`, rows (cat, v, r: the value's rows): the rows without a value and the
        values without a category (text), as `refuse` reads them."""
        return sql.SQL(
            "coalesce(sum(r) FILTER (WHERE v IS NULL), 0), "
            "array_agg(DISTINCT v::text) FILTER (WHERE v IS NOT NULL AND {bad})"
        ).format(bad=self.bad)

    def refuse(
        self, conn: psycopg.Connection, target: Target, nulls: int, missing: list[str] | None
    ) -> None:
        """The one-line error for rows without a category, from `summary`'s figures."""
        assert target.sensitive is not None
        column = target.sensitive
        if nulls:
            raise DbanonError(
                f"sensitive column {quote_ident(column)} of {target.describe(conn)} has {nulls} "
                "NULL values; (θ,k)-anonymity needs a category for every row"
            )
        if missing:
            if self.hierarchy is None:
                raise DbanonError(
                    f"sensitive column {quote_ident(column)} of {target.describe(conn)} holds "
                    f"values in no interval: {offenders(sorted(missing))}"
                )
            raise DbanonError(
                f"values of sensitive column {quote_ident(column)} are not in hierarchy "
                f"{quote_name(self.hierarchy.name)}: {offenders(sorted(missing))}"
            )

    # --- in memory ------------------------------------------------------------------------------

    def of(self, values: Sequence[Hashable]) -> list[Hashable]:
        """The category of each value (text under a hierarchy, float under intervals), as the
        SQL form computes it; a value without one is an error naming it."""
        if self.hierarchy is None:
            w = float(self.spec.width)  # type: ignore[arg-type]
            return [math.floor(float(v) / w) for v in values]  # type: ignore[arg-type]
        h = self.hierarchy
        label = {v: h.labels[h.ancestors(leaf)[self.level]] for v, leaf in h.leaves.items()}
        missing = sorted({str(v) for v in values if v not in label})
        if missing:
            raise DbanonError(
                f"values are not in hierarchy {quote_name(h.name)}: {offenders(missing)}"
            )
        return [label[v] for v in values]  # type: ignore[index]
