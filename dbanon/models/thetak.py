"""(θ,k)-anonymity (Cheng, Liu et al. 2019), defined as a checkable property.

The paper describes a construction (split every class into θ groups of semantically similar
sensitive values, the groups mutually dissimilar): each of the θ groups takes ⌊k/θ⌋ rows of one
category with distinct values. dbanon checks the class condition that construction promises,
by default exactly as the paper has it (`rule="paper"`):

    V_c the distinct values of category c in the relation,
        need_c = min(⌊k/θ⌋, V_c)
    A class e is (θ,k)-anonymous when |e| >= k and at least θ categories c each hold at least
    need_c distinct values in e.

The cap V_c is the only one the paper's construction allows itself: a category with fewer
than ⌊k/θ⌋ values in the whole table could not fill a group at all. So an attacker who learns
a row's class sees at least θ categories (similarity attack), and one who also knows the row's
category among those θ still faces ⌊k/θ⌋ values, or all the category has (background
knowledge). The price is in the data: every class must then hold a value of every category
with V_c <= ⌊k/θ⌋ (and, with θ = the number of categories, all of them), so a value of f rows
caps the number of classes at f (Adult at k >= 21: Armed-Forces, 9 rows, 9 classes; measured
in docs/methods/thetak.md).

`rule="relaxed"` is a weaker property with its own name ("relaxed (θ,k)-anonymity"), for
releases that would rather keep classes small than hold the paper's condition:

    n rows, N = max(1, ⌊n/k⌋) the most classes of k rows, r_c the rows of category c, f_v the
    rows of value v, N_c = min(N, ⌈θ N r_c / n⌉) (c's proportional share of the θ N slots),
        need_c = max(1, min(⌊k/θ⌋, ⌊Σ_{v in c} min(f_v, N_c) / N_c⌋)),
    the same class condition with this need_c.

"As diverse as the relation allows when cut into classes of k rows": a value of f_v rows can
sit in at most min(f_v, N_c) of c's classes, so a rare value counts for as many classes as it
has rows. It is never above the paper's need_c, so a paper-faithful grouping passes it too;
the converse fails (a relaxed release of Adult fails the paper's condition in most classes).

Both properties only get easier as rows join a class, so a construction's leftover step cannot
break them; the proof that dbanon.algorithms.thetak's output satisfies the rule it was given is
in that module. θ must be in [2, k]: θ = 1 adds nothing to k-anonymity and θ > k leaves no room
for θ groups in a class of k.

Rows without a category (NULL, a value the hierarchy lacks) are an error, not a silent
verdict. In memory, `class_holds` reads counts keyed by (category, value) pairs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

import psycopg
from psycopg import sql

from dbanon.errors import DbanonError
from dbanon.models import sizes
from dbanon.models.base import (
    CheckResult,
    ClassTest,
    Counts,
    Figure,
    PrivacyModel,
    Spread,
    Target,
    class_summary,
    positive,
)
from dbanon.models.categories import BoundCategories, Categories


@dataclass(frozen=True)
class ThetaKAnonymity(PrivacyModel):
    theta: int
    k: int
    hierarchy: str | None = None  # stored hierarchy of the sensitive values
    level: int | None = None  # its category level (None: just below the root)
    width: float | None = None  # or: numeric intervals of this width
    rule: str = "paper"  # how need_c is read: a key of NEED_RULES
    needs_sensitive = True
    needs_overall = True
    spreads = True
    counts_sizes = True  # unweighted: `check` leaves the class sizes it counted

    def __post_init__(self) -> None:
        self.categories  # noqa: B018 - validates hierarchy/level/width together
        if self.rule not in NEED_RULES:
            raise DbanonError(
                f"--theta-rule must be one of {', '.join(NEED_RULES)}, got {self.rule!r}"
            )

    @property
    def categories(self) -> Categories:
        return Categories(self.hierarchy, self.level, self.width)

    @property
    def group(self) -> int:
        """⌊k/θ⌋: the distinct values each of the θ categories shows, at most."""
        return self.k // self.theta

    @property
    def name(self) -> str:
        prefix = NEED_RULES[self.rule].prefix
        return f"{prefix}(θ,k)-anonymity (θ={self.theta}, k={self.k}, {self.categories.describe()})"

    def class_test(self, target: Target) -> ClassTest:
        """Per class: its rows `n` and `good`, the categories holding at least need_c distinct
        values; need_c from the whole relation the target reads. A cell (a class's rows of one
        category) counts its distinct values as the (class, category, value) groups below it
        with a value: two hashed GROUP BYs, where count(DISTINCT) sorts every row."""
        src = self.categories.source(target)
        q = target.alias_list
        cells = sql.SQL(
            "(SELECT {q}, cat, count(v) AS d, sum(n)::bigint AS n"
            " FROM (SELECT {q}, cat, v, {rows} AS n FROM {src} GROUP BY {q}, cat, v) cv"
            " GROUP BY {q}, cat)"
        ).format(q=q, rows=target.rows, src=src)
        need = NEED_RULES[self.rule].sql(self.k, self.theta, target.rows, src)
        return ClassTest(
            source=sql.SQL(
                "(SELECT cells.*, need.need FROM {} cells JOIN {} need USING (cat)) x"
            ).format(cells, need),
            per_class={
                "n": sql.SQL("sum(n)::bigint"),
                "good": sql.SQL("count(*) FILTER (WHERE d >= need)"),
            },
            failing=self.failing,
        )

    @property
    def failing(self) -> sql.Composable:
        """A class's failure, over its `n` and `good`."""
        return sql.SQL("(n < {k} OR good < {theta})").format(
            k=sql.Literal(self.k), theta=sql.Literal(self.theta)
        )

    def check(self, conn: psycopg.Connection, target: Target) -> CheckResult:
        """The verdict and, from the same pass over the classes, the release's similarity and
        background-knowledge vulnerabilities (dbanon.metrics.vulnerability): over value
        bitmasks (`masked_test`) where the relation's values are few, else over cells."""
        from dbanon.metrics.vulnerability import PER_CLASS, TOTALS, from_totals

        target = target.validate(conn, self)
        bound = self.categories.bind(conn)
        test = self.class_test(target)
        masked = None
        if conn.info.server_version >= 140000:  # bit_count
            masked = masked_test(conn, self, bound, target)  # which validates as it reads
        else:
            bound.validate(conn, target)
        counted = masked or replace(test, per_class={**test.per_class, **PER_CLASS})
        # Unweighted, n is each class's rows: the class sizes a publish's figures and risk read
        # (dbanon.models.sizes) come from this pass instead of a GROUP BY of their own
        # (0.7 s of a 1M-row release)
        each = {"sizes": Figure(sql.SQL("array_agg(n)"), "concat", [])} if (
            target.count is None) else {}  # fmt: skip
        classes, bad, figs, worst = class_summary(
            conn,
            target,
            counted,
            worst=sql.SQL("{} DESC, good, n").format(test.failing),
            figures={
                "min_class_size": Figure(sql.SQL("min(n)"), "min", 0),
                "min_categories": Figure(sql.SQL("min(good)"), "min", 0),
                **{name: Figure(expr, "sum", 0) for name, expr in TOTALS.items()},
                **each,
            },
        )
        if each:
            sizes.remember(conn, target.relation, target.qi, sizes.of_sizes(figs["sizes"]))
        return CheckResult(
            self.name,
            holds=bad == 0,
            figures={
                "min_class_size": int(figs["min_class_size"]),
                "min_diverse_categories": int(figs["min_categories"]),
                "classes_failing_theta_k": bad,
                **from_totals(figs),
            },
            worst_class=worst,
        )

    def class_holds(self, counts: Counts, overall: Counts | None = None) -> bool:
        if overall is None:
            raise ValueError(f"{self.name} needs the whole relation's counts (overall)")
        c = positive(counts)
        if sum(c.values()) < self.k:
            return False
        need = self.needs(positive(overall))
        here: dict = defaultdict(set)
        for cat, value in c:
            here[cat].add(value)
        diverse = sum(len(vals) >= need[cat] for cat, vals in here.items())
        return diverse >= self.theta

    def spread(self, conn: psycopg.Connection, values: Counts) -> Spread:
        """θ categories each holding need_c values, need_c from the release's rows as the
        check computes it: what a persisting person's plausible values must still span when
        a consumer intersects every release (dbanon.setlogic.composition)."""
        given = [v for v, n in values.items() if n > 0]
        cats = self.categories.bind(conn).of(given)  # type: ignore[arg-type]
        category = dict(zip(given, cats, strict=True))
        need = self.needs(Counter({(category[v], v): int(values[v]) for v in given}))
        return Spread(self.theta, category, need, f"θ={self.theta} categories with their values")

    def needs(self, overall: Counts) -> dict:
        """need_c per category, from the whole relation's rows per (category, value)."""
        return theta_k_needs(overall, self.k, self.theta, self.rule)


# The masked test: values as bits of int8 words (63 a word: no sign bit), at most this many.
MASK_BITS = 63
MAX_MASK_VALUES = 4 * MASK_BITS
MAX_MASK_CATEGORIES = 64


def masked_test(
    conn: psycopg.Connection, model: ThetaKAnonymity, bound: BoundCategories, target: Target
) -> ClassTest | None:
    """The (θ,k) test and the vulnerabilities' per-class sums in one GROUP BY of the rows, or
    None where the relation has too many values or categories for it; refuses rows without a
    category as BoundCategories.validate does, from the same read. Needs bit_count (14+).

    The cell form groups the rows by (class, category, value), then by (class, category), then
    by class: three hash aggregates over the QIs (2.1 s of a 1M-row release where the plain
    GROUP BY takes 0.7 s). Here one query first reads the relation's values, categories and
    need_c (the model's own SQL, over the (category, value) counts); then every row joins its
    value's number and category, and a class's aggregates are its rows (per category) and, per
    word, the bit_or of its values' bits: a category's distinct values in the class are the
    set bits of its values' range (bit_count). Values are equal exactly when the cell form's
    GROUP BY finds them equal: the join compares them as that GROUP BY does (the value's type,
    its collation), with one number per value the relation's own GROUP BY found."""
    bound.readable(conn, target)
    need = NEED_RULES[model.rule].sql(
        model.k, model.theta, sql.SQL("sum(f)::bigint"), sql.SQL("cv")
    )
    nulls, missing, domain = conn.execute(
        sql.SQL(
            "WITH cv AS MATERIALIZED (SELECT cat, v, {rows} AS f, count(*) AS r FROM {src}"
            " GROUP BY cat, v)"
            " SELECT {summary}, (SELECT json_agg(json_build_array(cat, v, need))"
            " FROM (SELECT cv.cat::text, cv.v::text, need.need FROM cv LEFT JOIN {need} need"
            " USING (cat) WHERE cv.cat IS NOT NULL LIMIT {limit}) d) FROM cv"
        ).format(
            rows=target.rows,
            src=bound.source(target),
            summary=bound.summary,
            need=need,
            limit=sql.Literal(MAX_MASK_VALUES + 1),
        )
    ).fetchone()
    bound.refuse(conn, target, nulls, missing)
    domain = domain or []
    cats = list(dict.fromkeys(c for c, _, _ in domain))
    if len(domain) > MAX_MASK_VALUES or len(cats) > MAX_MASK_CATEGORIES:
        return None
    values = sql.SQL(", ").join(
        sql.SQL("({}::{}, {}, {}, {}::int8)").format(
            sql.Literal(v), sql.SQL(bound.value_type), sql.Literal(cats.index(c)),
            sql.Literal(i // MASK_BITS), sql.Literal(1 << (i % MASK_BITS)))
        for i, (c, v, _) in enumerate(domain)
    )  # fmt: skip
    source = sql.SQL(
        "(SELECT src.*, d.cid, d.word, d.bit FROM {src} JOIN (VALUES {values})"
        " d(v, cid, word, bit) ON d.v = {v}) x"
    ).format(src=target.source(), values=values, v=bound.value_expr(sql.SQL("src.s")))
    words = -(-len(domain) // MASK_BITS)
    weight = sql.SQL("1") if target.count is None else sql.SQL("w")
    plus = sql.SQL(" + ")
    distinct, rows, good = [], [], []
    for c, name in enumerate(cats):
        ids = [i for i, (cat, _, _) in enumerate(domain) if cat == name]
        bits = [sum(1 << (i % MASK_BITS) for i in ids if i // MASK_BITS == j)
                for j in range(words)]  # fmt: skip
        d = sql.SQL("({})").format(plus.join(
            sql.SQL("bit_count((coalesce(bit_or(bit) FILTER (WHERE word = {}), 0) & {}::int8)"
                    "::bit(64))").format(sql.Literal(j), sql.Literal(m))
            for j, m in enumerate(bits) if m))  # fmt: skip
        distinct.append(d)
        rows.append(sql.SQL("coalesce(sum({}) FILTER (WHERE cid = {}), 0)::float8").format(
            weight, sql.Literal(c)))  # fmt: skip
        needed = domain[ids[0]][2]
        if needed is not None:  # a category of no rows needs nothing and is never counted
            good.append(sql.SQL("({} >= {})::int").format(d, sql.Literal(int(needed))))
    return ClassTest(
        source=source,
        per_class={
            "n": target.rows,
            "good": plus.join(good) if good else sql.SQL("0"),
            "similarity_sum": plus.join(sql.SQL("{0} * {0}").format(n) for n in rows),
            "background_sum": plus.join(
                sql.SQL("coalesce({} / nullif({}, 0), 0)").format(n, d)
                for n, d in zip(rows, distinct, strict=True)
            ),
        },
        failing=model.failing,
    )


def theta_k_needs(overall: Counts, k: int, theta: int, rule: str = "paper") -> dict:
    """need_c per category from rows per (category, value), by `rule` (module docstring)."""
    return NEED_RULES[rule].needs(overall, k, theta)


def paper_needs(overall: Counts, k: int, theta: int) -> dict:
    """The paper's need_c = min(⌊k/θ⌋, V_c), V_c the category's distinct values."""
    values: Counter = Counter(cat for (cat, _), f in overall.items() if f > 0)
    return {c: min(k // theta, v) for c, v in values.items()}


def _paper_sql(k: int, theta: int, rows: sql.Composable, src: sql.Composable) -> sql.Composable:
    return sql.SQL(
        """(SELECT cat, least({g}, count(*)) AS need
           FROM (SELECT cat, v FROM {src} GROUP BY cat, v HAVING {rows} > 0) x GROUP BY cat)"""
    ).format(g=sql.Literal(k // theta), rows=rows, src=src)


def relaxed_needs(overall: Counts, k: int, theta: int) -> dict:
    """The relaxed need_c, capped by what the relation's classes of k rows can hold."""
    n = sum(int(f) for f in overall.values() if f > 0)
    big_n = max(1, n // k)
    rows: dict = defaultdict(int)
    for (cat, _), f in overall.items():
        if f > 0:
            rows[cat] += int(f)
    share = {c: min(big_n, -(-theta * big_n * r // n)) for c, r in rows.items()}
    supply: dict = defaultdict(int)
    for (cat, _), f in overall.items():
        if f > 0:
            supply[cat] += min(int(f), share[cat])
    return {c: max(1, min(k // theta, s // share[c])) for c, s in supply.items()}


def _relaxed_sql(k: int, theta: int, rows: sql.Composable, src: sql.Composable) -> sql.Composable:
    # N and N_c over the whole relation (module docstring); per category the capped diversity.
    return sql.SQL(
        """(SELECT cat, greatest(1, least({g}, floor(sum(least(f, nc)) / max(nc)))) AS need
           FROM (SELECT f.*, least(t.big_n, ceil({theta} * t.big_n * f.rc / t.n)) AS nc
                 FROM (SELECT cat, v, {rows} AS f, sum({rows}) OVER (PARTITION BY cat) AS rc
                       FROM {src} GROUP BY cat, v HAVING {rows} > 0) f,
                      (SELECT {rows} AS n, greatest(1, floor({rows} / {k})) AS big_n
                       FROM {src}) t) x
           GROUP BY cat)"""
    ).format(
        g=sql.Literal(k // theta), theta=sql.Literal(theta), k=sql.Literal(k), rows=rows, src=src
    )


@dataclass(frozen=True)
class NeedRule:
    """One reading of need_c: in memory (rows per (category, value) in) and as SQL (a relation
    of (cat, need) over the target's categorised rows)."""

    needs: Callable[[Counts, int, int], dict]
    sql: Callable[[int, int, sql.Composable, sql.Composable], sql.Composable]
    prefix: str  # before the model's name
    summary: str


NEED_RULES: dict[str, NeedRule] = {
    "paper": NeedRule(paper_needs, _paper_sql, "",
                      "the paper's: min(⌊k/θ⌋, V_c) distinct values, V_c those of the category"),
    "relaxed": NeedRule(relaxed_needs, _relaxed_sql, "relaxed ",
                        "min(⌊k/θ⌋, what the relation's classes of k rows can hold of the "
                        "category), never above the paper's"),
}  # fmt: skip
