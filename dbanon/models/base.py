"""What every privacy model check shares: the equivalence classes of a relation in SQL.

A check reads the relation through one subquery that renames the columns it needs to fixed
aliases (q1..qn for the QIs, s for the sensitive attribute, w for the row weight), so that no
user column name can clash with the names the check itself uses, whatever the names are.

Two conventions hold for every model, in SQL and in memory alike:
- NULL is a sensitive value of its own. GROUP BY already treats NULL QIs as one class; a class
  whose sensitive values are all NULL discloses "not recorded" as surely as a homogeneous class
  discloses its value, and counting NULL keeps a class's value counts summing to its size.
- With a weight column (`Target.count`) each row stands for `count` rows, so Anatomy's sensitive
  table (group id, value, count) can be checked as it is published. The weights must be positive
  whole numbers; anything else is an error naming the column, not a silently wrong verdict.

Each model states its criterion once, as a `ClassTest` (per-class aggregates and the condition
that fails a class). `check` counts the failing classes with it; `passing_classes` selects the
others, which is how a live view suppresses every class that breaks a promised model
(`dbanon.models.suppression`). A condition that comes out NULL fails the class in both.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg import sql

from dbanon.db import catalog
from dbanon.errors import DbanonError, quote_ident

if TYPE_CHECKING:
    from dbanon.models.split import Split

# One class in memory: sensitive value -> number of rows (entries <= 0 are ignored). Models that
# read only class sizes accept any single key, e.g. {None: size}.
Counts = Mapping[Hashable, int]

# Comparisons of computed reals (entropy, EMD, frequency) with their thresholds: a class with
# exactly l equally frequent values must count as having entropy log(l) despite rounding.
TOLERANCE = 1e-9


@dataclass(frozen=True)
class CheckResult:
    model: str  # e.g. "k-anonymity (k=10)"
    holds: bool
    figures: dict[str, Any] = field(default_factory=dict)
    worst_class: str | None = None  # the QI values of the class furthest from holding


@dataclass(frozen=True)
class Target:
    """A relation and the columns a check reads; `count` names an optional row-weight column."""

    relation: sql.Composable
    qi: Sequence[str]
    sensitive: str | None = None
    count: str | None = None
    # When a check names its worst class: "failing" (only when it fails: one more pass over the
    # classes then), "always" (also the class nearest to failing when it holds) or "never".
    worst: Literal["failing", "always", "never"] = field(default="failing", kw_only=True)
    # Backends that count the classes in parts at once (`dbanon.models.split`), or one query.
    split: Split | None = field(default=None, kw_only=True, compare=False)
    # `count` is int2 or int4, known from the catalog (`validate`): summed as it is, since
    # PostgreSQL sums those into a bigint, where a bigint's sum goes through numeric (Anatomy's
    # l check of a 1M-row ST: 0.82 -> 0.69 s). Any other type is cast to bigint row by row.
    count_int: bool = field(default=False, kw_only=True)

    @property
    def qi_list(self) -> sql.Composable:
        return sql.SQL(", ").join(map(sql.Identifier, self.qi))

    @property
    def class_label(self) -> sql.Composable:
        """The QI values of a class as one text, to name the worst class in a report."""
        return _label(self.qi, [sql.Identifier(c) for c in self.qi])

    # --- the aliased form the checks use -------------------------------------------------------

    @property
    def aliases(self) -> list[sql.Identifier]:
        return [sql.Identifier(f"q{i}") for i in range(1, len(self.qi) + 1)]

    @property
    def alias_list(self) -> sql.Composable:
        return sql.SQL(", ").join(self.aliases)

    @property
    def alias_label(self) -> sql.Composable:
        """`class_label` over the aliased columns q1..qn."""
        return _label(self.qi, self.aliases)

    def source(self) -> sql.Composable:
        """The relation with its columns renamed to q1..qn, s and w (1 when unweighted)."""
        if not self.qi:
            raise DbanonError("name at least one quasi-identifier column")
        cols = [
            sql.SQL("{} AS {}").format(sql.Identifier(c), a)
            for c, a in zip(self.qi, self.aliases, strict=True)
        ]
        if self.sensitive is not None:
            cols.append(sql.SQL("{} AS s").format(sql.Identifier(self.sensitive)))
        if self.count is not None:
            cast = "{}" if self.count_int else "{}::bigint"
            cols.append(sql.SQL(cast + " AS w").format(sql.Identifier(self.count)))
        return sql.SQL("(SELECT {} FROM {}) src").format(sql.SQL(", ").join(cols), self.relation)

    @property
    def rows(self) -> sql.Composable:
        """The number of rows an aggregate over `source()` stands for."""
        return sql.SQL("sum(w)::bigint" if self.count is not None else "count(*)")

    def cells(self, *, rank: bool = False) -> sql.Composable:
        """Per class and sensitive value, its rows `n`; with `rank`, also its place `pos` in the
        class by decreasing count (1 = most frequent; ties in any order, as only sums of counts
        by place are read)."""
        pos = sql.SQL("")
        if rank:
            pos = sql.SQL(", row_number() OVER (PARTITION BY {q} ORDER BY {n} DESC) AS pos").format(
                q=self.alias_list, n=self.rows
            )
        return sql.SQL("(SELECT {q}, s, {n} AS n{pos} FROM {src} GROUP BY {q}, s) cells").format(
            q=self.alias_list, n=self.rows, pos=pos, src=self.source()
        )

    def describe(self, conn: psycopg.Connection) -> str:
        """The relation as SQL text, for error messages."""
        return catalog.shown(conn, self.relation)

    def type_category(self, conn: psycopg.Connection, column: str) -> str:
        """pg_type.typcategory of a column of the relation ('N' numeric, 'S' string, ...)."""
        return self._type(conn, column)[1]

    def _type(self, conn: psycopg.Connection, column: str) -> tuple[int, str]:
        """A column's type oid and pg_type.typcategory."""
        cur = conn.execute(  # never prepared: a column's type may change between two calls
            sql.SQL("SELECT {} FROM {} LIMIT 0").format(sql.Identifier(column), self.relation),
            prepare=False,
        )
        oid = cur.description[0].type_code
        category = conn.execute("SELECT typcategory FROM pg_type WHERE oid = %s", [oid])
        return oid, category.fetchone()[0]

    def validate(self, conn: psycopg.Connection, model: PrivacyModel) -> Target:
        """Clear errors for what the model cannot read: no sensitive column, bad weights. The
        target to check: this one, knowing whether its count column is int2/int4."""
        if model.needs_sensitive and self.sensitive is None:
            raise DbanonError(f"{model.name} needs a sensitive attribute (--sensitive)")
        if self.count is None:
            return self
        oid, category = self._type(conn, self.count)
        if category != "N":
            raise DbanonError(
                f"count column {quote_ident(self.count)} of {self.describe(conn)} must be numeric"
            )
        w = sql.Identifier(self.count)
        bad = conn.execute(
            sql.SQL(
                "SELECT count(*), min({w}::text) FROM {rel} WHERE {w} IS NULL OR {w} < 1"
                + ("" if oid in _INTEGERS else " OR {w} <> trunc({w}::numeric)")
            ).format(w=w, rel=self.relation)
        ).fetchone()
        if bad[0]:
            raise DbanonError(
                f"count column {quote_ident(self.count)} of {self.describe(conn)} must hold "
                f"positive whole numbers; {bad[0]} row(s) do not, e.g. {bad[1] or 'NULL'}"
            )
        return replace(self, count_int=oid in _SUMMED_AS_BIGINT)


_SUMMED_AS_BIGINT = (21, 23)  # int2, int4: PostgreSQL's sum of them is a bigint
_INTEGERS = (*_SUMMED_AS_BIGINT, 20)  # and int8: whole numbers, no fraction to look for


def _label(names: Sequence[str], exprs: Sequence[sql.Composable]) -> sql.Composable:
    return sql.SQL("concat_ws(', ', {})").format(
        sql.SQL(", ").join(
            sql.SQL("{} || '=' || coalesce({}::text, 'NULL')").format(sql.Literal(n), e)
            for n, e in zip(names, exprs, strict=True)
        )
    )


class PrivacyModel(ABC):
    """A privacy criterion checked over the equivalence classes (GROUP BY the QIs).

    Each model has two independent forms: `check`, one SQL query over a relation, and
    `class_holds`, the same criterion over one class's sensitive-value counts in memory, which
    algorithms use to test candidate partitions and tests use to cross-check the SQL.
    """

    needs_sensitive = False
    needs_overall = False  # class_holds reads the whole relation's counts (t-closeness)
    spreads = False  # `spread` promises something over time ((θ,k))
    # Its check's pass over the classes leaves their sizes for the others (dbanon.models.sizes):
    # a publish runs it first
    counts_sizes = False

    @property
    @abstractmethod
    def name(self) -> str: ...

    @abstractmethod
    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult: ...

    @abstractmethod
    def class_test(self, target: Target) -> ClassTest:
        """The model's criterion per class of `target`, in SQL (needs no connection)."""

    def passing_classes(self, target: Target) -> sql.Composable:
        """A SELECT of q1..qn, one row per class of `target` that satisfies the model on its own
        (t-closeness: against the whole of `target`)."""
        return self.class_test(target).passing(target)

    def floors(self) -> tuple[int, int] | None:
        """(rows, distinct sensitive values) when a class satisfies the model exactly when it
        has at least that many of each, so that many classes can be judged by counting (see
        `class_holds`); None when the model reads more of a class."""
        return None

    def class_holds(self, counts: Counts, overall: Counts | None = None) -> bool:
        """Whether one class (sensitive value -> rows) satisfies the model; `overall` is the
        whole relation's counts, needed only where `needs_overall`."""
        raise NotImplementedError(f"{self.name} has no in-memory form")

    def holds_in_memory(self, classes: Sequence[Counts]) -> bool:
        """Whether a partition, given as each class's sensitive-value counts, satisfies it."""
        overall = merge(classes) if self.needs_overall else None
        return all(self.class_holds(c, overall) for c in classes)

    def spread(self, conn: psycopg.Connection, values: Counts) -> Spread | None:
        """What a consumer who intersects every release must still find spread over a
        persisting person's plausible values, beyond how many there are (l, p: counted by
        dbanon.setlogic.composition on their own); `values` is the release's rows per sensitive
        value (as text, None for NULL). None: the model promises nothing more over time."""
        return None


@dataclass(frozen=True)
class Spread:
    """A promise on the spread of a set of sensitive values: at least `least` categories
    each hold at least their `need` of its distinct values ((θ,k): θ categories, need_c
    values each). It is what a single release's class shows; over time the intersection
    guard holds a persisting person's plausible values to it, so the promise survives a
    consumer who keeps every release. `category` maps each value of the release (text, None
    for NULL) to its category; a value it lacks counts for no category."""

    least: int
    category: Mapping[str | None, Hashable]
    need: Mapping[Hashable, int]
    what: str  # the promise in a sentence's words, e.g. "θ=2 categories with their values"


def audit(
    conn: psycopg.Connection, target: Target, models: Sequence[PrivacyModel]
) -> list[CheckResult]:
    """Run every model's check on the same relation."""
    return [m.check(conn, target) for m in models]


# --- shared SQL --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassTest:
    """A model's criterion over the classes of a target, in SQL: the `per_class` aggregates
    (name -> expression) over `source` grouped by q1..qn, and `failing`, a condition on those
    names that is true of a class breaking the model. `ctes` are WITH items that `source` or
    the aggregates read (t-closeness: the whole relation's distribution). One definition serves
    both the check (count the failing classes) and the filters (keep the others)."""

    source: sql.Composable
    per_class: Mapping[str, sql.Composable]
    failing: sql.Composable
    ctes: Sequence[sql.Composable] = ()

    def with_(self, *more: sql.Composable) -> sql.Composable:
        """`WITH ...` over the test's own CTEs and `more`, or nothing."""
        items = [*self.ctes, *more]
        return sql.SQL("WITH {} ").format(sql.SQL(", ").join(items)) if items else sql.SQL("")

    def classes(self, target: Target, where: sql.Composable | None = None) -> sql.Composable:
        """SELECT q1..qn and the per-class columns (without the WITH); `where`, a condition on
        q1..qn, keeps the classes whose QI values satisfy it."""
        return sql.SQL("SELECT {q}, {cols} FROM {source}{where} GROUP BY {q}").format(
            q=target.alias_list,
            cols=sql.SQL(", ").join(
                sql.SQL("{} AS {}").format(e, sql.Identifier(n)) for n, e in self.per_class.items()
            ),
            source=self.source,
            where=sql.SQL("") if where is None else sql.SQL(" WHERE {}").format(where),
        )

    def passing(self, target: Target) -> sql.Composable:
        """SELECT q1..qn of the classes that do not fail (a NULL verdict fails: fail closed)."""
        return sql.SQL(
            "{with_}SELECT {q} FROM ({classes}) dbanon_classes WHERE ({failing}) IS FALSE"
        ).format(
            with_=self.with_(),
            q=target.alias_list,
            classes=self.classes(target),
            failing=self.failing,
        )


@dataclass(frozen=True)
class Figure:
    """An aggregate over the classes (their per-class columns), e.g. min(n). `combine` makes
    it from the same figure of disjoint sets of classes ("sum", "min", "max" or, of arrays,
    "concat"; None where it cannot be, and then the classes are counted in one query);
    `default` is its value over no classes (an aggregate's NULL)."""

    expr: sql.Composable
    combine: Literal["sum", "min", "max", "concat"] | None = None
    default: Any = None


COMBINE = {"sum": sum, "min": min, "max": max,
           "concat": lambda parts: [x for p in parts for x in p]}  # fmt: skip


def class_summary(
    conn: psycopg.Connection,
    target: Target,
    test: ClassTest,
    *,
    worst: sql.Composable,
    figures: Mapping[str, Figure],
) -> tuple[int, int, dict[str, Any], str | None]:
    """The classes of `test` (GROUP BY q1..qn): the number of classes, of failing classes, the
    `figures` over all classes and, as `target.worst` asks, the label of the first class by
    `worst` (ties broken by the QI values, so reports are reproducible). Counting is one pass,
    as cheap as the bare GROUP BY, or with `target.split` one pass over each part of the
    classes, the parts on their own backends at once; naming the worst class needs every
    class twice (a top-1 over them), so it is paid only when asked for or, by default, when
    the check fails."""
    if target.worst not in ("failing", "always", "never"):
        raise ValueError(f"worst must be failing, always or never, not {target.worst!r}")
    counts = sql.SQL("count(*), count(*) FILTER (WHERE ({failing}) IS NOT FALSE), {figs}").format(
        failing=test.failing, figs=sql.SQL(", ").join(f.expr for f in figures.values())
    )

    def first(classes: sql.Composable) -> sql.Composable:
        return sql.SQL("(SELECT {label} FROM {classes} ORDER BY {worst}, {q} LIMIT 1)").format(
            label=target.alias_label, classes=classes, worst=worst, q=target.alias_list
        )

    def counted(where: sql.Composable | None) -> sql.Composable:
        return sql.SQL("{}SELECT {} FROM ({}) dbanon_classes").format(
            test.with_(), counts, test.classes(target, where)
        )

    label = None
    if target.worst == "always":  # one query: the classes kept once and read twice
        cte = sql.SQL("classes AS MATERIALIZED ({})").format(test.classes(target))
        query = sql.SQL("{with_}SELECT {counts}, {first} FROM classes").format(
            with_=test.with_(cte), counts=counts, first=first(sql.SQL("classes"))
        )
        *row, label = conn.execute(query).fetchone()
    elif target.split is not None and all(f.combine for f in figures.values()):
        parts = target.split.run(counted)
        row = [sum(p[0] for p in parts), sum(p[1] for p in parts)]
        for i, f in enumerate(figures.values(), start=2):
            values = [p[i] for p in parts if p[i] is not None]
            row.append(COMBINE[f.combine](values) if values else None)  # type: ignore[index]
    else:
        row = conn.execute(counted(None)).fetchone()
    if target.worst == "failing" and row[1]:
        classes = sql.SQL("({}) dbanon_classes").format(test.classes(target))
        query = sql.SQL("{}SELECT {}").format(test.with_(), first(classes))
        label = conn.execute(query).fetchone()[0]
    values = {
        name: f.default if v is None else v
        for (name, f), v in zip(figures.items(), row[2:], strict=True)
    }
    return int(row[0]), int(row[1]), values, label


# --- shared in-memory helpers -------------------------------------------------------------------


def positive(counts: Counts) -> dict[Hashable, int]:
    """The counts that stand for rows (a Counter may hold zeros after subtraction)."""
    return {v: int(n) for v, n in counts.items() if n > 0}


def merge(classes: Sequence[Counts]) -> Counter:
    """The whole relation's sensitive-value counts from its classes'."""
    total: Counter = Counter()
    for c in classes:
        total.update(positive(c))
    return total


def entropy(counts: Counts) -> float:
    """-sum p log p (natural log) of a class's sensitive values; 0 for an empty class."""
    ns = list(positive(counts).values())
    size = sum(ns)
    return -sum(n / size * math.log(n / size) for n in ns) if size else 0.0
