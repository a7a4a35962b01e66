"""An algorithm-aware attacker on bucketised releases (issue 24 item 3). Imports nothing from
dbanon: plain SELECTs of the released relations, then pure Python.

The attacker knows a target's QI values and that the target is in the table (the prosecutor
model), reads every released relation, and knows the algorithm's seedless rules: everything
a method does except the draws from the run's secret seed. It gives every value a probability
in two ways:

- `posterior`: the release as it reads. The target is one of the released rows whose cells
  contain her QI point (a value, 'a-b', '*', or NULL for a flagged cell), each equally likely;
  a row in bucket b has value v with probability count_b(v) / |b|. This is (3.22) of the
  thesis, and Anatomy's 1/|group|, computed with no help from the method.
- `Rule`s: a deterministic step reproduced. A rule looks at the release and the target's QIs
  and names the rows it says are hers (or nothing when it cannot tell). A rule that the release
  does not reveal cannot be checked from the release, so the attacker learns how often it is
  right, as an attacker who knows a few people's values would: `calibrate` counts, over every
  target the rule names rows for, how often her true value is among the values of the rows it
  named ("hits"), against the hits the uniform posterior expects. The attacker trusts the rule
  only as far as the data prove it: with H the lower 5-sigma bound of the hit rate and M the
  rate the posterior expects, a value inside the named rows gets its posterior times H/M, one
  outside times (1-H)/(1-M) (H <= M: the rule is worth nothing and the posterior stands). A
  placement drawn from a secret seed gives H ~ M; a deterministic one (CBG's stride before
  issue 24) gives H ~ 1 and doubles the odds.

`exposure` runs all of it over every source row and returns the largest probability any person
gets for their true value, with the figures of each rule.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import psycopg
from psycopg import sql


@dataclass
class Row:
    """One released row: its QI cells as released, its bucket, its pseudonymous id (if any)."""

    cells: tuple[Any, ...]
    bucket: int
    rid: int | None = None
    pos: int = 0  # its place in the released relation's storage order (what a scan returns)


@dataclass
class Release:
    rows: list[Row]
    buckets: dict[int, Counter]  # bucket -> value -> count
    values: dict[int, list[Any]] = field(default_factory=dict)  # bucket -> values as ST lists them
    classes: dict[tuple[Any, ...], list[Row]] = field(init=False)  # released cells -> rows
    members: dict[int, list[Row]] = field(init=False)  # bucket -> rows
    _seen: dict[tuple[Any, ...], list[Row]] = field(init=False)
    _cols: list[tuple[Any, ...]] | None = field(init=False, default=None)
    _keys: list[tuple[Any, ...]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.classes, self.members, self._seen = {}, {}, {}
        for r in self.rows:
            self.classes.setdefault(r.cells, []).append(r)
            self.members.setdefault(r.bucket, []).append(r)

    def odds(self, rows: Sequence[Row]) -> dict[Any, Fraction]:
        """Each value's probability when the target is one of `rows`, each equally likely."""
        out: dict[Any, Fraction] = {}
        for r in rows:
            size = sum(self.buckets[r.bucket].values())
            for v, c in self.buckets[r.bucket].items():
                out[v] = out.get(v, Fraction(0)) + Fraction(c, size * len(rows))
        return out


def _rel(name: str) -> sql.Identifier:
    schema, _, table = name.partition(".")
    return sql.Identifier(schema, table)


def load_grouped(
    conn: psycopg.Connection, qit: str, st: str, qi: Sequence[str], sensitive: str, bucket: str,
) -> Release:  # fmt: skip
    """A QIT(qi..., bucket) with ST(bucket, value, count): cbg's and anatomy's shape."""
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in [*qi, bucket])
    # in the order the release stores its rows (a view reads its table in physical order)
    query = sql.SQL("SELECT {} FROM {}").format(cols, _rel(qit))
    rows = [Row(tuple(r[:-1]), int(r[-1]), None, i) for i, r in enumerate(conn.execute(query))]
    buckets: dict[int, Counter] = {}
    values: dict[int, list[Any]] = {}
    for b, v, c in conn.execute(
        sql.SQL("SELECT {b}, {v}, count FROM {st} ORDER BY {b}, {v}").format(
            b=sql.Identifier(bucket), v=sql.Identifier(sensitive), st=_rel(st))
    ):  # fmt: skip
        buckets.setdefault(int(b), Counter())[v] += int(c)
        values.setdefault(int(b), []).extend([v] * int(c))
    return Release(rows, buckets, values)


def load_local(
    conn: psycopg.Connection, main: str, idt: str, st: str, qi: Sequence[str], sensitive: str,
) -> Release:  # fmt: skip
    """NAME(row_id, [group_id,] qi...) with NAME_<sa>_idt(row_id, bucket_id) and
    NAME_<sa>_st(bucket_id, sa): local anatomy's and LAG's shape (a --sensitive column)."""
    present = {d.name for d in conn.execute(
        sql.SQL("SELECT * FROM {} LIMIT 0").format(_rel(main))).description}  # fmt: skip
    cells = sql.SQL(", ").join(
        sql.SQL("m.{}").format(sql.Identifier(c)) if c in present else sql.SQL("NULL")
        for c in qi
    )
    rows = [Row(tuple(r[2:]), int(r[1]), int(r[0]), i) for i, r in enumerate(conn.execute(
        sql.SQL("SELECT m.row_id, i.bucket_id, {} FROM (SELECT *, row_number() OVER () AS pos "
                "FROM {}) m JOIN {} i USING (row_id) ORDER BY m.pos"
                ).format(cells, _rel(main), _rel(idt))))]  # fmt: skip
    buckets: dict[int, Counter] = {}
    values: dict[int, list[Any]] = {}
    for b, v in conn.execute(
        sql.SQL("SELECT bucket_id, {v} FROM {st} ORDER BY 1, 2").format(
            v=sql.Identifier(sensitive), st=_rel(st))
    ):  # fmt: skip
        buckets.setdefault(int(b), Counter())[v] += 1
        values.setdefault(int(b), []).append(v)
    return Release(rows, buckets, values)


def _ends(text: str) -> tuple[float, float] | None:
    """The ends of a released numeric range: `[30,39]` (a range literal, issue 34) or `30-39`
    (releases before it); None for text that is neither."""
    try:
        if text.startswith("[") and text[-1] in "])" and "," in text:
            lo, _, hi = text[1:-1].partition(",")
            return float(lo), float(hi)
        if "-" in text[1:]:
            cut = text.index("-", 1)
            return float(text[:cut]), float(text[cut + 1 :])
    except ValueError:  # text with a dash or a comma: not a range
        return None
    return None


def contains(cell: Any, value: Any) -> bool:
    """Whether a released cell (NULL: flagged, a value, '[a,b]', '*') stands for `value`."""
    if cell is None:
        return True
    text = str(cell)
    if text == "*" or text == str(value):
        return True
    ends = _ends(text) if isinstance(value, int | float) else None
    return ends is not None and ends[0] <= value <= ends[1]


def _columns(release: Release) -> list[tuple[Any, ...]]:
    """Per QI column over the distinct released cells: (matches anything, text code, low, high,
    the codes);
    `contains` in arrays, so a point is matched against every class at once."""
    cells = list(release.classes)
    out = []
    for j in range(len(cells[0]) if cells else 0):
        col = [c[j] for c in cells]
        anything = np.array([c is None or str(c) == "*" for c in col])
        codes: dict[str, int] = {}
        text = np.array([codes.setdefault(str(c), len(codes)) for c in col], dtype=np.int64)
        low, high = np.full(len(col), np.nan), np.full(len(col), np.nan)
        for i, c in enumerate(col):
            ends = _ends(str(c)) if c is not None else None
            if ends is not None:
                low[i], high[i] = ends
        out.append((anything, text, low, high, codes))
    return out


def matching(release: Release, point: Sequence[Any]) -> list[Row]:
    """The released rows whose cells all contain the point (`contains`, vectorised)."""
    key = tuple(point)
    if key not in release._seen:
        if release._cols is None:
            release._cols = _columns(release)
            release._keys = list(release.classes)
        mask = np.ones(len(release.classes), dtype=bool)
        for (anything, text, low, high, codes), v in zip(release._cols, point, strict=True):
            hit = anything | (text == codes.get(str(v), -1))
            if isinstance(v, int | float):
                with np.errstate(invalid="ignore"):
                    hit |= (low <= v) & (v <= high)
            mask &= hit
        keys = release._keys
        release._seen[key] = [r for i in np.flatnonzero(mask) for r in release.classes[keys[i]]]
    return release._seen[key]


def posterior(release: Release, point: Sequence[Any]) -> dict[Any, Fraction]:
    """The release as it reads: every matching row equally likely."""
    rows = matching(release, point)
    return release.odds(rows) if rows else {}


# A rule: (release, the target's QI point, the rows matching it) -> the rows it names, or None.
RuleFn = Callable[[Release, Sequence[Any], list[Row]], list[Row] | None]


@dataclass(frozen=True)
class Rule:
    name: str
    applies: RuleFn


def _lex_extreme(point: Sequence[Any], rows: list[Row], order: Sequence[int]) -> int | None:
    """-1 / +1 when the point is the lexicographically first / last of a class of two rows (by
    the QI columns in `order`): the first column whose released cell spans two values decides,
    the point at its low or high end. None when it cannot be told."""
    for j in order:
        cell, v = rows[0].cells[j], point[j]
        text = str(cell)
        ends = _ends(text) if isinstance(v, int | float) else None
        if ends is not None:
            lo, hi = ends
            if lo < hi:
                return -1 if v == lo else 1 if v == hi else None
        elif text == "*":  # two different values, order unknown from the release
            return None
    return None


def stride(order: Sequence[int]) -> Rule:
    """CBG before issue 24 (thesis Algorithm 3.5): a group's rows, in kd order (two rows:
    lexicographic by the algorithm's column order), took its buckets in increasing id order.
    Named when the target matches exactly one class, of two rows in two buckets, and is its
    first or last row."""

    def applies(rel: Release, point: Sequence[Any], rows: list[Row]) -> list[Row] | None:
        if len(rows) != 2 or rows[0].cells != rows[1].cells or rows[0].bucket == rows[1].bucket:
            return None
        side = _lex_extreme(point, rows, order)
        if side is None:
            return None
        lo, hi = sorted(rows, key=lambda r: r.bucket)
        return [lo] if side < 0 else [hi]

    return Rule("stride", applies)


def id_order(rank_of: Callable[[Row], Any], name: str = "id-order") -> Rule:
    """Any shape: the rows of a bucket, ranked by a key the attacker can see (`rank_of`: the
    pseudonymous row id, or the QI cells), hold its values in the order ST lists them (a deal
    in key or QI order, ids numbered in deal order). Named when the target matches one row;
    the rule then names the value at her rank, which `calibrate` scores as a set of one row."""

    def applies(rel: Release, point: Sequence[Any], rows: list[Row]) -> list[Row] | None:
        if len(rows) != 1:
            return None
        me = rows[0]
        mates = sorted(rel.members[me.bucket], key=rank_of)
        if len({rank_of(r) for r in mates}) != len(mates):
            return None
        rank = next(i for i, r in enumerate(mates) if r is me)
        return [Row(me.cells, me.bucket, -1 - rank)]  # rid < 0: "the value at this rank"

    return Rule(name, applies)


def storage_order() -> Rule:
    """`id_order` by the place in the released relation's storage order: rows written in the
    order of a deal, of the source or of the values would line up with ST's value order."""
    return id_order(lambda r: r.pos, "storage-order")


# How many sigma of lift the attacker demands before trusting a rule. A CI run makes about 60
# such checks, and targets sharing a bucket over-disperse the hit count (about 1.2x binomial): at
# 3 sigma one CI run read a release drawn at random as a leak (localanatomy on Adult, 112 hits
# where 80.3 were expected of 241; 20 re-runs of it gave 62-100). At 5 sigma a false alarm is
# below 1e-5 per run, and every leak this attacker was built for (hit rates of 1.0 over 60-80
# targets) still clears it by far.
Z = 5.0


@dataclass
class RuleFigures:
    named: int = 0  # targets the rule named rows for
    hits: int = 0  # ... whose true value was among the named rows' values
    expected: float = 0.0  # hits the uniform posterior expects
    variance: float = 0.0

    @property
    def trust(self) -> tuple[float, float]:
        """(H, M): the lower Z-sigma bound of the hit rate, and the posterior's rate."""
        if not self.named:
            return 0.0, 0.0
        m = self.expected / self.named
        h = self.hits / self.named
        low = h - Z * math.sqrt(max(h * (1 - h), 1 / self.named) / self.named)
        return max(low, m), m


def _named_values(rel: Release, named: list[Row]) -> set[Any]:
    """The values the named rows stand for (an id-order claim: the value at its rank)."""
    if len(named) == 1 and named[0].rid is not None and named[0].rid < 0:
        return {rel.values[named[0].bucket][-1 - named[0].rid]}
    return set(rel.odds(named))


def exposure(
    rel: Release, targets: Sequence[tuple[Sequence[Any], Any]], rules: Sequence[Rule] = (),
) -> dict[str, Any]:  # fmt: skip
    """The largest probability any target (QI point, true value) gets for her true value, from
    the release as it reads and from every rule calibrated on these targets; with figures."""
    figures = {rule.name: RuleFigures() for rule in rules}
    per_target = []
    for point, truth in targets:
        rows = matching(rel, point)
        base = rel.odds(rows) if rows else {}
        claims = {}
        for rule in rules:
            named = rule.applies(rel, point, rows)
            if not named:
                continue
            values = _named_values(rel, named)
            m = float(sum(base.get(v, 0) for v in values))
            f = figures[rule.name]
            f.named += 1
            f.hits += truth in values
            f.expected += m
            f.variance += m * (1 - m)
            claims[rule.name] = values
        per_target.append((base, truth, claims))
    worst = max((float(base.get(truth, 0)) for base, truth, _ in per_target), default=0.0)
    worst_rule = worst
    for base, truth, claims in per_target:
        p = float(base.get(truth, 0))
        for name, values in claims.items():
            h, m = figures[name].trust
            if h <= m or m >= 1:
                continue
            scaled = p * (h / m if truth in values else (1 - h) / (1 - m))
            worst_rule = max(worst_rule, min(scaled, 1.0))
    return {
        "targets": len(per_target),
        "posterior_max": worst,
        "max": worst_rule,
        "rules": {n: {"named": f.named, "hits": f.hits, "expected": round(f.expected, 2),
                      "trust": round(f.trust[0], 4)} for n, f in figures.items()},  # fmt: skip
    }
