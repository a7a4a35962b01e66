"""An independent verifier of cross-bucket releases (QIT + ST), in the style of verify.py.

Nothing here imports dbanon: two plain SELECTs, then exact fractions in Python.
- (k,l)-anonymity (thesis Def. 3.7): every class of QIT (rows with equal released QIs) has at
  least k rows, every bucket's QIT rows number its ST count, and for every class C and value s
  p(C, s) = sum_b Num(C,b) * Num(s,b) / (|C| * |b|) <= 1/l  (3.22);
- the attacker of the thesis's example: given a person's QI point, the released rows whose
  values contain it (a number inside `a-b` or equal to `a`, a text value equal, or '*') and the
  buckets they lie in give each sensitive value the probability (3.22).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import psycopg
from psycopg import sql


@dataclass
class CrossBucket:
    rows: list[tuple[tuple[Any, ...], int]]  # (released QI values, bucket) per QIT row
    buckets: dict[int, Counter]  # bucket -> sensitive value -> count (ST)

    @property
    def classes(self) -> dict[tuple[Any, ...], Counter]:
        """class (released QI values) -> bucket -> rows."""
        out: dict[tuple[Any, ...], Counter] = {}
        for key, b in self.rows:
            out.setdefault(key, Counter())[b] += 1
        return out


def fetch(
    conn: psycopg.Connection, qit: str, st: str, qi: Sequence[str], sensitive: str,
    bucket: str = "bucket_id",
) -> CrossBucket:  # fmt: skip
    def rel(name: str) -> sql.Identifier:
        schema, _, table = name.partition(".")
        return sql.Identifier(schema, table)

    cols = sql.SQL(", ").join(sql.Identifier(c) for c in [*qi, bucket])
    rows = [(tuple(r[:-1]), int(r[-1])) for r in conn.execute(
        sql.SQL("SELECT {} FROM {}").format(cols, rel(qit)))]  # fmt: skip
    buckets: dict[int, Counter] = {}
    for b, v, c in conn.execute(
        sql.SQL("SELECT {}, {}, count FROM {}").format(
            sql.Identifier(bucket), sql.Identifier(sensitive), rel(st))
    ):  # fmt: skip
        buckets.setdefault(int(b), Counter())[v] += int(c)
    return CrossBucket(rows, buckets)


def odds(cb: CrossBucket, matching: Mapping[int, int]) -> dict[Any, Fraction]:
    """(3.22) for an attacker whose target matches `matching` rows per bucket."""
    total = sum(matching.values())
    out: dict[Any, Fraction] = {}
    for b, n in matching.items():
        size = sum(cb.buckets[b].values())
        for v, c in cb.buckets[b].items():
            out[v] = out.get(v, Fraction(0)) + Fraction(n * c, total * size)
    return out


def problems(cb: CrossBucket, k: int, l: float) -> list[str]:  # noqa: E741
    """What breaks (k,l)-anonymity, empty when it holds."""
    found = []
    per_bucket = Counter(b for _, b in cb.rows)
    for b in set(per_bucket) | set(cb.buckets):
        if per_bucket[b] != sum(cb.buckets.get(b, Counter()).values()):
            found.append(f"bucket {b}: {per_bucket[b]} QIT rows, ST counts {cb.buckets.get(b)}")
    if found:
        return found
    for key, in_buckets in cb.classes.items():
        size = sum(in_buckets.values())
        if size < k:
            found.append(f"class {key} has {size} < k={k} rows")
        worst = max(odds(cb, in_buckets).values())
        if worst * Fraction(l).limit_denominator(10**6) > 1:
            found.append(f"class {key}: a value with probability {worst} > 1/{l}")
    return found


def contains(released: Any, value: Any) -> bool:
    """Whether a released cell (a value, '[a,b]', 'a-b' before issue 34, '*') stands for
    `value`."""
    text = str(released)
    if text == "*" or text == str(value):
        return True
    if isinstance(value, int | float) and text.startswith("[") and text.endswith("]"):
        lo, _, hi = text[1:-1].partition(",")
        return float(lo) <= value <= float(hi)
    if isinstance(value, int | float) and "-" in text[1:]:
        cut = text.index("-", 1)
        return float(text[:cut]) <= value <= float(text[cut + 1 :])
    return False


def attacker(cb: CrossBucket, point: Sequence[Any]) -> dict[Any, Fraction]:
    """The odds of each sensitive value for a person with QI values `point`."""
    matching: Counter = Counter()
    for key, b in cb.rows:
        if all(contains(r, v) for r, v in zip(key, point, strict=True)):
            matching[b] += 1
    return odds(cb, matching) if matching else {}


# --- the verification gate's hooks (tests/test_gate.py CASES["cbg"]) -----------------------------


def _kl(models: Sequence[Mapping[str, Any]]) -> tuple[int, float]:
    k = next(m["k"] for m in models if m["name"] == "k-anonymity")
    ell = next(m["l"] for m in models if m["name"] == "cross-bucket-l-diversity")
    return int(k), float(ell)


def broken(cb: CrossBucket, models: Sequence[Mapping[str, Any]]) -> list[str]:
    """The promised model kinds a (changed) release breaks."""
    k, ell = _kl(models)
    found = problems(cb, k, ell)
    out = []
    if any("< k=" in p for p in found):
        out.append("k-anonymity")
    if any("probability" in p or p.startswith("bucket") for p in found):
        out.append("cross-bucket-l-diversity")
    return out


def _qi(conn: psycopg.Connection, qit: sql.Composable) -> list[str]:
    cur = conn.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(qit))
    cols = [d.name for d in cur.description]
    return [c for c in cols if c != "bucket_id"]


def verify_release(
    conn: psycopg.Connection, objects: Sequence[str], models: Sequence[Mapping[str, Any]],
    sensitive: str, source: Sequence[tuple],
) -> None:  # fmt: skip
    """(k,l) holds on the published QIT and ST, and ST releases every source row's value."""
    schema, _, name = objects[0].partition(".")
    cb = fetch(conn, objects[0], objects[1], _qi(conn, sql.Identifier(schema, name)), sensitive)
    assert problems(cb, *_kl(models)) == []
    column = ["id", "age", "region", "sex", "dx", "severity"].index(sensitive)
    assert sum(cb.buckets.values(), Counter()) == Counter(r[column] for r in source)


def corrupt(
    conn: psycopg.Connection, rels: Sequence[sql.Composable], sensitive: str,
    models: Sequence[Mapping[str, Any]], kind: str,
) -> tuple[str, list[str]]:  # fmt: skip
    """Change the built QIT/ST so that `kind` breaks and, if possible, nothing else: for k, one
    row of a smallest class goes from QIT together with a value of its bucket from ST; for l, a
    value of one bucket is made another value of the same bucket."""
    qit, st = rels
    qi = _qi(conn, qit)
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in qi)
    rows = conn.execute(sql.SQL("SELECT ctid::text, {}, bucket_id FROM {}").format(cols, qit))
    rows = [(r[0], tuple(r[1:-1]), int(r[-1])) for r in rows]
    cb = CrossBucket([(key, b) for _, key, b in rows], {})
    for b, v, c in conn.execute(sql.SQL("SELECT bucket_id, {}, count FROM {}").format(
            sql.Identifier(sensitive), st)):  # fmt: skip
        cb.buckets.setdefault(int(b), Counter())[v] += int(c)
    s = sql.Identifier(sensitive)
    if kind == "k-anonymity":
        sizes = Counter(key for _, key, _ in rows)
        smallest = sorted(sizes, key=lambda key: (sizes[key], repr(key)))
        for key in smallest:
            for i, (ctid, k_, b) in enumerate(rows):
                if k_ != key:
                    continue
                for v in sorted(cb.buckets[b], key=repr):
                    less = {**cb.buckets, b: cb.buckets[b] - Counter([v])}
                    trial = CrossBucket(cb.rows[:i] + cb.rows[i + 1 :], less)
                    if broken(trial, models) == ["k-anonymity"]:
                        conn.execute(sql.SQL("DELETE FROM {} WHERE ctid = %s::tid").format(qit),
                                     [ctid])  # fmt: skip
                        conn.execute(sql.SQL(
                            "UPDATE {} SET count = count - 1 WHERE bucket_id = %s AND {} = %s"
                        ).format(st, s), [b, v])  # fmt: skip
                        conn.execute(sql.SQL("DELETE FROM {} WHERE count = 0").format(st))
                        return f"class {key}: one row and {v!r} of bucket {b} gone", [kind]
        raise AssertionError("no row of a smallest class can go without breaking l too")
    for b in sorted(cb.buckets):
        values = sorted(cb.buckets[b], key=repr)
        if len(values) < 2:
            continue
        into, gone = values[0], values[1]
        changed = cb.buckets[b] + Counter({into: cb.buckets[b][gone]}) - Counter(
            {gone: cb.buckets[b][gone]})  # fmt: skip
        trial = CrossBucket(cb.rows, {**cb.buckets, b: changed})
        if broken(trial, models) == [kind]:
            conn.execute(sql.SQL("UPDATE {} SET {} = %s WHERE bucket_id = %s AND {} = %s").format(
                st, s, s), [into, b, gone])  # fmt: skip
            return f"bucket {b}: {gone!r} made {into!r}", [kind]
    raise AssertionError("no bucket can be changed to break l alone")
