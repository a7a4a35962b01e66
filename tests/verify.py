"""An independent verifier of released relations: one plain GROUP BY, then pure-Python counts.

Release tests prove a guarantee with this, never with dbanon's own checks (dbanon.models) alone:
a bug in a check that every publish runs would otherwise be invisible to the tests that should
catch it. Nothing here imports dbanon. Every model is its textbook definition, computed with
exact fractions where it does arithmetic (entropy, a logarithm, within 1e-9):

- k-anonymity: every class has at least k rows;
- distinct l-diversity: at least l distinct sensitive values per class;
- entropy l-diversity: -sum p ln p >= ln l per class;
- recursive (c,l)-diversity: r1 < c (r_l + ... + r_m), r_i the i-th largest value count;
- frequency l-diversity: no value above 1/l of its class;
- t-closeness: Earth Mover's Distance from the whole relation's distribution at most t; equal
  ground (half the L1 distance) or ordered ground (cumulative differences over the m distinct
  values in order, divided by m - 1);
- (alpha,k)-anonymity: k-anonymous and no value (or the one named value) above share alpha;
- (p,k)-anonymity: k-anonymous and at least p distinct values per class;
- (theta,k)-anonymity: k-anonymous and at least theta categories c each showing need_c
  distinct values in the class; the paper's need_c (rule "paper", the default) is
  min(floor(k/theta), V_c), V_c the distinct values of c in the whole relation; rule "relaxed"
  has need_c = max(1, min(floor(k/theta), floor(sum over the values v of c of
  min(f_v, N_c) / N_c))), f_v the rows of v, N = max(1, floor(n/k)) and
  N_c = min(N, ceil(theta N r_c / n)), r_c the rows of category c, in the whole relation;
  a value's category is floor(value / width) (`width`), or what the
  model's `categories` mapping (value -> category, from the hierarchy file) says.

Models are named as a release spec stores them (`{"name": "k-anonymity", "k": 5}`), so a test
can pass a release's own promise list. NULL is a value of its own, as in dbanon.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

import psycopg
from psycopg import sql

Key = tuple[Any, ...]
EPS = Fraction(1, 10**9)  # real thresholds are met within 1e-9, as dbanon documents


@dataclass
class Classes:
    """A relation's equivalence classes: QI values -> Counter of sensitive values (rows each
    stands for, with a weight column), and the sensitive domain in PostgreSQL's order."""

    classes: dict[Key, Counter] = field(default_factory=dict)
    domain: list[Any] = field(default_factory=list)

    @property
    def overall(self) -> Counter:
        total: Counter = Counter()
        for c in self.classes.values():
            total.update(c)
        return total

    @property
    def sizes(self) -> list[int]:
        return [sum(c.values()) for c in self.classes.values()]

    def replaced(self, key: Key, counts: Counter) -> Classes:
        """The same classes with one of them changed (to try a change before making it); the
        domain keeps the values that still occur, in its order."""
        changed = Classes({**self.classes, key: +counts}, self.domain)
        whole = changed.overall
        changed.domain = [v for v in self.domain if whole[v] > 0]
        return changed


def ident(relation: str | tuple[str, str] | sql.Composable) -> sql.Composable:
    """`schema.name` (split at the first dot, names taken literally) or (schema, name)."""
    if isinstance(relation, sql.Composable):
        return relation
    if isinstance(relation, str):
        schema, _, name = relation.partition(".")
        return sql.Identifier(schema, name)
    return sql.Identifier(*relation)


def fetch(
    conn: psycopg.Connection,
    relation: str | tuple[str, str] | sql.Composable,
    qi: Sequence[str],
    sensitive: str | None = None,
    count: str | None = None,
) -> Classes:
    """The classes of a relation by one GROUP BY of its QIs (and sensitive column)."""
    rel = ident(relation)
    cols = [sql.Identifier(c) for c in qi]
    if sensitive is not None:
        cols.append(sql.Identifier(sensitive))
    n = sql.SQL("sum({})").format(sql.Identifier(count)) if count else sql.SQL("count(*)")
    rows = conn.execute(
        sql.SQL("SELECT {cols}, {n} FROM {rel} GROUP BY {cols}").format(
            cols=sql.SQL(", ").join(cols), n=n, rel=rel
        )
    ).fetchall()
    out = Classes()
    for row in rows:
        key = tuple(row[: len(qi)])
        value = row[len(qi)] if sensitive is not None else None
        out.classes.setdefault(key, Counter())[value] += int(row[-1])
    if sensitive is not None:
        s = sql.Identifier(sensitive)
        out.domain = [
            r[0]
            for r in conn.execute(
                sql.SQL("SELECT {s} FROM {rel} GROUP BY {s} ORDER BY {s}").format(s=s, rel=rel)
            )
        ]
    return out


# --- the definitions ------------------------------------------------------------------------------


def _share(n: int, size: int) -> Fraction:
    return Fraction(n, size)


def entropy(c: Counter) -> float:
    size = sum(c.values())
    return -sum(n / size * math.log(n / size) for n in c.values() if n)


def tail(c: Counter, ell: int) -> int:
    """r_l + ... + r_m, r_i the i-th largest count."""
    return sum(sorted(c.values(), reverse=True)[ell - 1 :])


def is_numeric(values: Iterable[Hashable]) -> bool:
    vals = [v for v in values if v is not None]
    return bool(vals) and all(
        isinstance(v, int | float | Decimal) and not isinstance(v, bool) for v in vals
    )


def emd(c: Counter, whole: Counter, ordered: bool, domain: Sequence[Any]) -> Fraction:
    """Earth Mover's Distance of a class from the whole relation (see the module docstring)."""
    n, total = sum(c.values()), sum(whole.values())
    diffs = [_share(c.get(v, 0), n) - _share(whole.get(v, 0), total) for v in domain]
    if not ordered:
        return sum(map(abs, diffs), Fraction(0)) / 2
    if len(domain) < 2:
        return Fraction(0)
    run, acc = Fraction(0), Fraction(0)
    for d in diffs:
        run += d
        acc += abs(run)
    return acc / (len(domain) - 1)


def _frequency(c: Counter, value: str | None) -> Fraction:
    size = sum(c.values())
    if value is None:
        return _share(max(c.values()), size)
    return _share(sum(n for v, n in c.items() if v is not None and str(v) == value), size)


def _class_rule(model: Mapping[str, Any], cls: Classes) -> Callable[[Counter], bool]:
    """Whether one class satisfies `model`."""
    name = model["name"]
    if name == "k-anonymity":
        return lambda c: sum(c.values()) >= model["k"]
    if name == "distinct-l-diversity":
        return lambda c: len(c) >= model["l"]
    if name == "entropy-l-diversity":
        return lambda c: entropy(c) >= math.log(model["l"]) - 1e-9
    if name == "recursive-l-diversity":
        return lambda c: max(c.values()) < Fraction(model["c"]) * tail(c, model["l"])
    if name == "frequency-l-diversity":
        return lambda c: _frequency(c, None) <= 1 / Fraction(model["l"]) + EPS
    if name == "alpha-k-anonymity":
        return lambda c: (
            sum(c.values()) >= model["k"]
            and _frequency(c, model.get("value")) <= Fraction(model["alpha"]) + EPS
        )
    if name == "p-k-anonymity":
        return lambda c: sum(c.values()) >= model["k"] and len(c) >= model["p"]
    if name == "theta-k-anonymity":
        return _theta_k_rule(model, cls)
    if name == "t-closeness":
        ground = model.get("ground", "auto")
        ordered = ground == "ordered" or (ground == "auto" and is_numeric(cls.domain))
        whole = cls.overall
        limit = Fraction(model["t"]) + EPS
        return lambda c: emd(c, whole, ordered, cls.domain) <= limit
    raise AssertionError(f"the verifier does not know model {name!r}: add its definition")


def _theta_k_rule(model: Mapping[str, Any], cls: Classes) -> Callable[[Counter], bool]:
    if model.get("width") is not None:
        width = float(model["width"])

        def category(v: Any) -> Any:
            return math.floor(float(v) / width)
    else:
        mapping = model.get("categories")
        assert mapping is not None, "give the verifier the (theta,k) categories of the values"

        def category(v: Any) -> Any:
            return mapping[str(v)]

    def distinct_per_category(values: Iterable[Any]) -> Counter:
        return Counter(category(v) for v in set(values))

    theta, k = model["theta"], model["k"]
    if model.get("rule", "paper") == "paper":
        # the paper's need_c = min(k // theta, V_c), V_c the distinct values of c
        values = Counter(category(v) for v, n in cls.overall.items() if n > 0)
        need = {c: min(k // theta, x) for c, x in values.items()}
    else:
        need = _relaxed_need(cls, category, theta, k)

    def rule(c: Counter) -> bool:
        shown = distinct_per_category(v for v, n in c.items() if n > 0)
        good = sum(1 for cat, n in shown.items() if n >= need[cat])
        return sum(c.values()) >= k and good >= theta

    return rule


def _relaxed_need(cls: Classes, category: Callable[[Any], Any], theta: int, k: int) -> dict:
    """The relaxed (theta,k) need_c of every category."""
    # need_c = max(1, min(k // theta, sum over c's values of min(rows, N_c) // N_c)), N the
    # most classes of k rows the relation holds, N_c = min(N, ceil(theta N r_c / n)) the
    # category's share of them: a value of f rows can show in min(f, N_c) of those classes.
    total = sum(n for n in cls.overall.values() if n > 0)
    big_n = max(1, total // k)
    per_cat: Counter = Counter()
    for v, n in cls.overall.items():
        if n > 0:
            per_cat[category(v)] += n
    share = {c: min(big_n, -(-theta * big_n * r // total)) for c, r in per_cat.items()}
    supply: Counter = Counter()
    for v, n in cls.overall.items():
        if n > 0:
            supply[category(v)] += min(n, share[category(v)])
    return {c: max(1, min(k // theta, s // share[c])) for c, s in supply.items()}


def failing(cls: Classes, model: Mapping[str, Any]) -> list[Key]:
    """The classes that break `model` (a spec dict), by its definition."""
    rule = _class_rule(model, cls)
    return sorted((k for k, c in cls.classes.items() if not rule(c)), key=repr)


def holds(cls: Classes, model: Mapping[str, Any]) -> bool:
    return not failing(cls, model)


def max_emd(cls: Classes, ordered: bool) -> Fraction:
    whole = cls.overall
    return max(emd(c, whole, ordered, cls.domain) for c in cls.classes.values())


def assert_holds(cls: Classes, models: Sequence[Mapping[str, Any]]) -> None:
    """Every model holds on every class; the message names the first class that breaks one."""
    assert cls.classes, "no classes: the relation is empty"
    for m in models:
        bad = failing(cls, m)
        assert not bad, f"{m} breaks on {len(bad)} classes, e.g. {bad[0]}: {cls.classes[bad[0]]}"


def verify(
    conn: psycopg.Connection,
    relation: str | tuple[str, str] | sql.Composable,
    qi: Sequence[str],
    models: Sequence[Mapping[str, Any]],
    sensitive: str | None = None,
    count: str | None = None,
) -> Classes:
    """Fetch the classes of a released relation and assert every model; returns the classes."""
    cls = fetch(conn, relation, qi, sensitive, count)
    assert_holds(cls, models)
    return cls


def sql_k_anonymity(cls: Classes, k: int) -> tuple[bool, int, int, int]:
    """(holds, classes, smallest class, rows in classes below k), as dbanon.k_anonymity()
    returns them."""
    sizes = cls.sizes
    small = sum(n for n in sizes if n < k)
    return small == 0, len(sizes), min(sizes, default=0), small
