"""Query answering error (thesis §3.5, after Zhang, Koudas, Srivastava, Yu, ICDE'07).

A seeded workload of `SELECT SUM(sa) FROM T WHERE pred(A1) AND ... AND pred(A4)` queries is
answered on a release with a lower and an upper bound, and exactly on the source; a query's
error is (upper - lower) / actual, the release's the mean over the workload.

The workload (the decisions the thesis leaves open, §6.2 items 8-9):
- each query picks min(4, #QI) *distinct* QIs uniformly at random;
- a categorical QI gets `A IN (v1..vm)`, m uniform in 1..max(1, ⌊|D|/2⌋), the values drawn
  without replacement from the column's active domain D (the values the source holds);
- a numeric QI gets one operator drawn uniformly from >, <, =, >=, <=, != (the thesis prints
  an "or" of all six, a tautology), v drawn uniformly from the active domain;
- a query whose exact answer is 0 has no relative error: it is drawn again (counted as
  `redrawn`); numpy's default_rng(seed) makes the workload a function of the seed and the
  source's domains alone, so every release of one source meets the same queries.

Bounds on a release read as boxes and buckets (dbanon.metrics.boxes): a row *surely* satisfies
a query when its box lies inside every predicate and *may* when its box meets every predicate.
In each bucket with c_lo sure and c_hi possible rows, the answer is at least the sum of its c_lo
smallest sensitive values and at most the sum of its c_hi largest (sensitive values must be
non-negative, as a salary is). For a generalised table (each row its own bucket) that is the
sum over sure rows against the sum over possible ones; for Anatomy (point boxes) the thesis's
bounds of [54]; for CBG both at once. The exact answer is the same computation on the source.

Beside these sure/maybe bounds (`query_error`), the thesis's own bounds (4.15)-(4.19)
(`query_error_thesis`): each row's probability Pro_t of satisfying the query is the product over
the predicates of the share of its cell that satisfies them — 1 or 0 for an exact value
(4.15, 4.16), and for a generalised value the share of the active-domain values it covers,
read as uniform (the thesis's Num_b/|b| of (4.17) for a bucketised value; it leaves generalised
values open, §6.2 item 8); per bucket Num_b = sum of Pro_t (4.18, 4.19), and the bounds are the
sums of the ceil(Num_b) largest and the floor(Num_b) smallest sensitive values of the bucket.

Release shapes register how their relations read as boxes (REGISTRY): a new shape registers a
loader and every metric here works on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.errors import DbanonError, quote_ident
from dbanon.metrics.boxes import Attribute, Bucketed, bucketed, fetch_text

OPS = (">", "<", "=", ">=", "<=", "!=")
WIDTH = 4  # predicates per query (the thesis's A1..A4)
MAX_REDRAWS = 100  # per query, before the workload gives up on a source of zeros


@dataclass(frozen=True)
class Published:
    """A release's relations and columns, as the metrics read them."""

    shape: str  # e.g. "generalised", "anatomy", "cbg"
    relations: list[sql.Composable]
    qi: list[str]
    sensitive: str


Loader = Callable[[psycopg.Connection, Published, list[Attribute]], Bucketed]
REGISTRY: dict[str, Loader] = {}


def register(shape: str, loader: Loader) -> Loader:
    """How a release shape's relations read as boxes and buckets (replaces one of that name)."""
    REGISTRY[shape] = loader
    return loader


def load(conn: psycopg.Connection, rel: Published, attrs: list[Attribute]) -> Bucketed:
    loader = REGISTRY.get(rel.shape)
    if loader is None:
        raise DbanonError(
            f"no query answerer for releases of shape {rel.shape!r} "
            f"(known: {', '.join(sorted(REGISTRY))})"
        )
    return loader(conn, rel, attrs)


def generalised(conn: psycopg.Connection, rel: Published, attrs: list[Attribute]) -> Bucketed:
    """One table: generalised QIs and the sensitive value of every row."""
    texts = fetch_text(conn, rel.relations[0], [*rel.qi, rel.sensitive])
    sens = texts.pop()
    return bucketed(texts, attrs, np.zeros(0), row_values=np.asarray(sens, dtype=object))


def bucketised(bucket_column: str) -> Loader:
    """Two tables: QIT (QIs, bucket) and ST (bucket, sensitive value, count)."""

    def loader(conn: psycopg.Connection, rel: Published, attrs: list[Attribute]) -> Bucketed:
        qit, st = rel.relations[0], rel.relations[1]
        texts = fetch_text(conn, qit, [*rel.qi, bucket_column])
        ids = np.asarray([int(b) for b in texts.pop()], dtype=np.int64)
        values: dict[int, list[str]] = {}
        for b, v, c in conn.execute(
            sql.SQL("SELECT {b}, {s}::text, {c} FROM {st} ORDER BY 1, 2").format(
                b=sql.Identifier(bucket_column), s=sql.Identifier(rel.sensitive),
                c=sql.Identifier("count"), st=st)  # fmt: skip
        ):
            values.setdefault(int(b), []).extend([v] * int(c))
        return bucketed(texts, attrs, ids, values)

    return loader


register("generalised", generalised)
register("anatomy", bucketised("group_id"))
register("cbg", bucketised("bucket_id"))


# --- the workload -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Predicate:
    attr: int  # index into the attributes
    op: str  # one of OPS, or "in" for a categorical QI
    values: tuple[Any, ...]

    def describe(self, attrs: list[Attribute]) -> str:
        a = attrs[self.attr]
        if self.op == "in":
            return f"{a.name} IN ({', '.join(repr(v) for v in self.values)})"
        return f"{a.name} {self.op} {self.values[0]:g}"


@dataclass(frozen=True)
class Query:
    predicates: tuple[Predicate, ...]

    def describe(self, attrs: list[Attribute], sensitive: str) -> str:
        where = " AND ".join(p.describe(attrs) for p in self.predicates)
        return f"SELECT SUM({sensitive}) WHERE {where}"


def draw(attrs: list[Attribute], rng: np.random.Generator) -> Query:
    chosen = sorted(rng.choice(len(attrs), min(WIDTH, len(attrs)), replace=False).tolist())
    preds = []
    for i in chosen:
        d = attrs[i].domain
        if attrs[i].numeric:
            op = OPS[int(rng.integers(len(OPS)))]
            preds.append(Predicate(i, op, (float(d[int(rng.integers(len(d)))]),)))
        else:
            m = int(rng.integers(1, max(1, len(d) // 2) + 1))
            picked = rng.choice(len(d), m, replace=False)
            preds.append(Predicate(i, "in", tuple(str(d[j]) for j in sorted(picked.tolist()))))
    return Query(tuple(preds))


def decide(p: Predicate, attrs: list[Attribute], b: Bucketed) -> tuple[np.ndarray, np.ndarray]:
    """(surely, maybe): rows whose box lies inside the predicate, and rows whose box meets it."""
    a = attrs[p.attr]
    if a.numeric:
        j = sum(1 for x in attrs[: p.attr] if x.numeric)
        lo, hi, v = b.lo[:, j], b.hi[:, j], p.values[0]
        point = (lo == v) & (hi == v)
        sure, maybe = {
            ">": (lo > v, hi > v),
            "<": (hi < v, lo < v),
            ">=": (lo >= v, hi >= v),
            "<=": (hi <= v, lo <= v),
            "=": (point, (lo <= v) & (v <= hi)),
            "!=": ((v < lo) | (v > hi), ~point),
        }[p.op]
        maybe = maybe & (lo <= hi)  # an empty box meets nothing
    else:
        j = sum(1 for x in attrs[: p.attr] if not x.numeric)
        index = a.index()
        inside = np.zeros(len(a.domain), dtype=bool)
        inside[[index[v] for v in p.values]] = True
        m = b.cats[j]
        maybe = m[:, inside].any(axis=1)
        sure = ~m[:, ~inside].any(axis=1)
    return sure & maybe, maybe


def share(p: Predicate, attrs: list[Attribute], b: Bucketed) -> np.ndarray:
    """Each row's probability of satisfying `p`: the share of the active-domain values its cell
    covers that satisfy it (1 or 0 for a point)."""
    a = attrs[p.attr]
    if not a.numeric:
        j = sum(1 for x in attrs[: p.attr] if not x.numeric)
        index = a.index()
        inside = np.zeros(len(a.domain), dtype=bool)
        inside[[index[v] for v in p.values]] = True
        m = b.cats[j]
        covered = m.sum(axis=1)
        return np.where(covered > 0, (m & inside).sum(axis=1) / np.maximum(covered, 1), 0.0)
    j = sum(1 for x in attrs[: p.attr] if x.numeric)
    d = np.asarray(a.domain, dtype=np.float64)
    left = np.searchsorted(d, b.lo[:, j], "left")
    right = np.searchsorted(d, b.hi[:, j], "right")
    v = p.values[0]
    below, upto = np.searchsorted(d, v, "left"), np.searchsorted(d, v, "right")
    equal = np.maximum(0, np.minimum(right, upto) - np.maximum(left, below))
    total = np.maximum(0, right - left)
    satisfying = {
        ">": right - np.maximum(left, upto),
        "<": np.minimum(right, below) - left,
        ">=": right - np.maximum(left, below),
        "<=": np.minimum(right, upto) - left,
        "=": equal,
        "!=": total - equal,
    }[p.op]
    return np.where(total > 0, np.clip(satisfying, 0, None) / np.maximum(total, 1), 0.0)


@dataclass
class Answers:
    """A release's buckets with their sensitive values sorted and summed, to bound sums fast."""

    b: Bucketed
    cum: np.ndarray  # prefix sums of each bucket's sorted values, bucket after bucket

    @classmethod
    def of(cls, b: Bucketed, sensitive: str) -> Answers:
        try:
            v = np.asarray([float(x) for x in b.values.tolist()], dtype=np.float64)
        except (TypeError, ValueError):
            raise DbanonError(
                f"query error sums the sensitive column; {quote_ident(sensitive)} is not numeric"
            ) from None
        if (v < 0).any():
            raise DbanonError(f"query error needs a non-negative {quote_ident(sensitive)} (a "
                "salary)")
        owner = np.repeat(np.arange(b.buckets), np.diff(b.offsets))
        v = v[np.lexsort((v, owner))]
        return cls(b, np.concatenate([[0.0], np.cumsum(v)]))

    def bounds(self, q: Query, attrs: list[Attribute]) -> tuple[float, float]:
        sure = np.ones(self.b.n, dtype=bool)
        maybe = np.ones(self.b.n, dtype=bool)
        for p in q.predicates:
            s, m = decide(p, attrs, self.b)
            sure &= s
            maybe &= m
        size = np.diff(self.b.offsets)
        c_lo = np.minimum(np.bincount(self.b.bucket[sure], minlength=self.b.buckets), size)
        c_hi = np.minimum(np.bincount(self.b.bucket[maybe], minlength=self.b.buckets), size)
        start, end = self.b.offsets[:-1], self.b.offsets[1:]
        lower = float((self.cum[start + c_lo] - self.cum[start]).sum())
        upper = float((self.cum[end] - self.cum[end - c_hi]).sum())
        return lower, upper

    def thesis_bounds(self, q: Query, attrs: list[Attribute]) -> tuple[float, float]:
        """The thesis's bounds (4.15)-(4.19): Num_b = sum of Pro_t over the bucket's rows."""
        pro = np.ones(self.b.n)
        for p in q.predicates:
            pro *= share(p, attrs, self.b)
        num = np.bincount(self.b.bucket, weights=pro, minlength=self.b.buckets)
        size = np.diff(self.b.offsets)
        c_lo = np.minimum(np.floor(num + 1e-9).astype(np.int64), size)
        c_hi = np.minimum(np.ceil(num - 1e-9).astype(np.int64), size)
        start, end = self.b.offsets[:-1], self.b.offsets[1:]
        lower = float((self.cum[start + c_lo] - self.cum[start]).sum())
        upper = float((self.cum[end] - self.cum[end - c_hi]).sum())
        return lower, upper


@dataclass(frozen=True)
class Workload:
    queries: list[Query]
    actual: np.ndarray  # exact answers on the source
    redrawn: int


def workload(
    attrs: list[Attribute], source: Bucketed, sensitive: str, n: int, seed: int
) -> Workload:
    """n queries with a non-zero exact answer on the source (zeros are drawn again)."""
    if n < 1:
        raise DbanonError(f"--queries must be at least 1, got {n}")
    rng = np.random.default_rng(seed)
    exact = Answers.of(source, sensitive)
    queries, actual, redrawn = [], [], 0
    while len(queries) < n:
        for _ in range(MAX_REDRAWS):
            q = draw(attrs, rng)
            answer = exact.bounds(q, attrs)[0]
            if answer > 0:
                break
            redrawn += 1
        else:
            raise DbanonError(f"{MAX_REDRAWS} queries in a row sum to 0 on the source")
        queries.append(q)
        actual.append(answer)
    return Workload(queries, np.asarray(actual), redrawn)


def query_error(
    release: Bucketed, attrs: list[Attribute], w: Workload, sensitive: str
) -> dict[str, Any]:
    """Mean of (upper - lower) / actual over the workload, with its spread: with the sure/maybe
    bounds (`query_error`) and with the thesis's (4.15)-(4.19) (`query_error_thesis`)."""
    answers = Answers.of(release, sensitive)
    errors = np.empty(len(w.queries))
    thesis = np.empty(len(w.queries))
    for i, q in enumerate(w.queries):
        lower, upper = answers.bounds(q, attrs)
        errors[i] = (upper - lower) / w.actual[i]
        lower, upper = answers.thesis_bounds(q, attrs)
        thesis[i] = (upper - lower) / w.actual[i]
    return {
        "query_error": float(errors.mean()),
        "query_error_median": float(np.median(errors)),
        "query_error_thesis": float(thesis.mean()),
        "query_error_thesis_median": float(np.median(thesis)),
        "queries": len(w.queries),
        "queries_redrawn": w.redrawn,
    }
