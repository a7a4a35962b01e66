"""An independent verifier of local anatomy (LA) and LAG releases: plain SELECTs, pure Python.

Imports nothing from dbanon (as tests/verify.py): it reads the released relations a consumer
reads and checks, from their textbook definitions (thesis Cor. 4.1, Def. 5.5):
- per bucketised attribute under l: every bucket of NAME_<attr>_st has >= l values, each value
  at most once; under t: every bucket's value shares within t of the attribute's (half L1);
- NAME_<attr>_idt and _st agree on bucket sizes; IDT row ids are distinct and released in NAME;
  NAME's cell is NULL exactly for the IDT rows (attributes that are columns of NAME);
- the multiset of each attribute's flagged values in its ST equals the source's flagged values,
  and (LA) NAME's non-NULL cells are the source's unflagged values, as a multiset;
- LAG: every class of NAME over its QI columns (NULL a value of its own) has >= k rows;
- row_id is not the key (tests/test_localanatomy.py also checks it is not in key order).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import psycopg
from psycopg import sql


def rows(conn: psycopg.Connection, schema: str, name: str) -> tuple[list[str], list[tuple]]:
    cur = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, name)))
    return [d.name for d in cur.description], cur.fetchall()


def buckets(conn: psycopg.Connection, schema: str, st: str, attr: str) -> dict[Any, Counter]:
    out: dict[Any, Counter] = {}
    for b, v in conn.execute(
        sql.SQL("SELECT bucket_id, {} FROM {}").format(
            sql.Identifier(attr), sql.Identifier(schema, st)
        )
    ):
        out.setdefault(b, Counter())[v] += 1
    return out


def check_principle(per_bucket: dict[Any, Counter], kind: str, value: float) -> list[str]:
    """Problems of one attribute's buckets under l (Cor. 4.1) or t (equal-ground EMD)."""
    bad = []
    whole: Counter = Counter()
    for c in per_bucket.values():
        whole.update(c)
    total = sum(whole.values())
    for b, c in per_bucket.items():
        n = sum(c.values())
        if kind == "l":
            if n < value or max(c.values()) > 1:
                bad.append(f"bucket {b}: {n} values, {dict(c)}")
        else:
            emd = sum(abs(Fraction(c[v], n) - Fraction(whole[v], total)) for v in whole) / 2
            if emd > Fraction(value).limit_denominator(10**6) + Fraction(1, 10**9):
                bad.append(f"bucket {b}: EMD {float(emd):.3f}")
    return bad


def verify_release(
    conn: psycopg.Connection, schema: str, name: str, qi: Sequence[str],
    principles: Mapping[str, tuple[str, float]], source: Sequence[Mapping[str, Any]],
    flagged: Mapping[str, set], key: str = "id", k: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Raise AssertionError naming what breaks; returns the fetched release for further checks.

    `source`: the source rows as dicts; `flagged`: per attribute the keys whose value is flagged
    (every key for a fully sensitive attribute); `principles`: per attribute ('l', l) or
    ('t', t). Rows suppressed by LAG are allowed: then the multisets are compared as subsets."""
    cols, main = rows(conn, schema, name)
    assert cols[0] == "row_id" and key not in cols, cols
    rid = [r[0] for r in main]
    assert len(set(rid)) == len(rid), "row ids repeat"
    suppressed = len(main) < len(source)
    if not suppressed:
        assert len(main) == len(source)
    released = {c: [r[cols.index(c)] for r in main] for c in qi}
    for attr, (kind, value) in principles.items():
        per_bucket = buckets(conn, schema, f"{name}_{attr}_st", attr)
        problems = check_principle(per_bucket, kind, value)
        assert not problems, f"{attr}: {problems[:3]}"
        icols, idt = rows(conn, schema, f"{name}_{attr}_idt")
        assert icols == ["row_id", "bucket_id"], icols
        sizes = Counter(b for _, b in idt)
        assert sizes == Counter({b: sum(c.values()) for b, c in per_bucket.items()})
        ids = [r for r, _ in idt]
        assert len(set(ids)) == len(ids) and set(ids) <= set(rid)
        values: Counter = Counter()
        for c in per_bucket.values():
            values.update(c)
        truth = Counter(r[attr] for r in source if r[key] in flagged[attr])
        if suppressed:
            assert not values - truth, (attr, values - truth)
        else:
            assert values == truth, (attr, values, truth)
        if attr in qi:
            nulls = {r for r, v in zip(rid, released[attr], strict=True) if v is None}
            assert nulls == set(ids), f"{attr}: NULL cells are not the IDT rows"
    for c in qi:
        if k is None and not suppressed:  # LA: unflagged values as they are
            truth = Counter(r[c] for r in source if r[key] not in flagged.get(c, set()))
            assert Counter(v for v in released[c] if v is not None) == truth, c
    if k is not None:
        classes = Counter(tuple(r[cols.index(c)] for c in qi) for r in main)
        small = {cl: n for cl, n in classes.items() if n < k}
        assert not small, f"classes below k={k}: {list(small.items())[:3]}"
    keys = sorted(r[key] for r in source)
    if all(isinstance(x, int) for x in keys) and len(rid) > 2:
        assert set(rid) != set(keys) or not _same_order(main, cols, source, key, qi), "row_id"
    return {"columns": cols, "rows": main}


def _same_order(main: list[tuple], cols: list[str], source: Sequence[Mapping[str, Any]],
                key: str, qi: Sequence[str]) -> bool:  # fmt: skip
    """Whether every released row's row_id is its key (possible only in LA, values raw)."""
    by_key = {r[key]: tuple(r[c] for c in qi) for r in source}
    return all(by_key.get(r[0]) == tuple(r[cols.index(c)] for c in qi) for r in main)
