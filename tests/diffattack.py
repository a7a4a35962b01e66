"""An attacker who diffs releases (issue 22 item 2), independent of dbanon: plain SQL reads of
the released tables, nothing imported from the package.

The attacker keeps every release and knows who joined or left between two of them. A released
class is the set of rows with identical QI cells. Between two releases, each class's rows that
came (in the later release, not the earlier) and that went are read off as multisets of the
whole released row; so are a changed class's rows against every class that changed in the
other release (a group whose cells moved when one row joined it). A change is
attributable when it is not empty and has fewer than k rows or fewer than l distinct sensitive
values: then the value of a person who joined (or left) is pinned to fewer than k rows or l
values. A release that changes only by whole groups that each keep k and l shows nothing
attributable; one that lets a single joiner into a class shows her row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

Release = dict[tuple[Any, ...], Counter]  # QI cells -> Counter of (sensitive, other columns)


def read(conn: psycopg.Connection, relation: str, qi: list[str], sensitive: str) -> Release:
    """Every released row, by class: QI cells -> Counter of (sensitive value, the rest)."""
    schema, name = relation.split(".")
    cols = [r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum", [relation]
    )]  # fmt: skip
    rest = [c for c in cols if c not in qi and c != sensitive]
    out: Release = {}
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in [*qi, sensitive, *rest]),
        sql.Identifier(schema, name),
    )
    for row in conn.execute(query):
        cells = tuple(str(v) for v in row[: len(qi)])
        out.setdefault(cells, Counter())[tuple(row[len(qi) :])] += 1
    return out


def _cell(text: str) -> tuple[float, float] | set[str] | None:
    """A released cell: a numeric range (lo, hi), a set of values, or None for '*' / NULL."""
    if text in ("*", "None"):
        return None
    if text.startswith("{") and text.endswith("}"):
        return {v.strip('"') for v in text[1:-1].split(",")}
    if text.startswith("[") and text[-1] in "])":  # a range literal, `[30,39]` (issue 34)
        lo, _, hi = text[1:-1].partition(",")
        return float(lo), float(hi)
    cut = text.find("-", 1)  # the dash form of releases before it, `30-39`
    try:
        if cut > 0:
            return float(text[:cut]), float(text[cut + 1 :])
        return float(text), float(text)
    except ValueError:
        return {text}


def _overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether two classes' cells share a QI point (both could hold the same person)."""
    for x, y in zip(map(_cell, a), map(_cell, b), strict=True):
        if x is None or y is None or type(x) is not type(y):
            continue
        if isinstance(x, tuple) and isinstance(y, tuple):
            if x[0] > y[1] or y[0] > x[1]:
                return False
        elif isinstance(x, set) and isinstance(y, set) and not x & y:
            return False
    return True


def _covers(cells: tuple[str, ...], point: tuple[Any, ...]) -> bool:
    """Whether a class's cells hold a person's QI point."""
    return _overlap(cells, tuple(str(v) for v in point))


def _pins(part: Counter, k: int, ell: int, also: int = 0) -> bool:
    """Whether a change pins the people who carry it: `part` (rows that came or went) carried
    by sum(part) people plus `also` more whose rows are hidden among the class's others (the
    missing members of a group that came back). Pinned: fewer than k rows to hide in when
    nobody else carries it, or some value more likely than 1/l for a carrier."""
    rows = sum(part.values())
    if not rows:
        return False
    top = max(Counter(r[0] for r in part.elements()).values())
    return (also == 0 and rows < k) or (ell > 1 and top / (rows + also) > 1 / ell)


def attributable(
    before: Release, after: Release, k: int, ell: int, left: Sequence[tuple[Any, ...]] = (),
    joined: Sequence[tuple[Any, ...]] = (), signatures: bool = False,
) -> list[str]:
    """Every change between two releases that pins a joiner's or a leaver's value: a class
    (same QI cells in both) that gained or lost a few rows, and a class of the earlier release
    that reappears, its cells overlapping the old, with exactly its rows plus a few, minus a
    few, or a few swapped (the same group, one person more, fewer or replaced). `left`: the QI
    points of the people who left in between: rows a class regained for them are hidden among
    its others. `joined`: the QI points of the people who joined in between: rows a class
    gained may be any of the joiners it covers (a class of several batches can lose some
    values and gain others at once, and the difference cancels what both hold). The whole
    table's count of each value is the sum of the classes': a class-level attacker knows
    more, so it is not judged again. `signatures`: the attacker knows that the refresh brings
    a group's remaining people back only in a class showing every value the group showed
    (m-invariance's signatures: dbanon's sealed refresh), so a class that lacks one of them is
    not the group shrunk or swapped; classes with the same cells are judged all the same."""
    found = []
    for cells in sorted(set(before) | set(after)):
        old, new = before.get(cells, Counter()), after.get(cells, Counter())
        came, went = new - old, old - new
        others = max(0, sum(_covers(cells, p) for p in joined) - sum(came.values()))
        if _pins(came, k, ell, others):
            found.append(f"class {cells} gained {dict(came)}")
        if _pins(went, k, ell):
            found.append(f"class {cells} lost {dict(went)}")
    gone = [c for c in before if c not in after or after[c] != before[c]]
    new_ = [c for c in after if c not in before or after[c] != before[c]]
    for a in gone:
        missing = sum(_covers(a, p) for p in left)
        for b in new_:
            if not _overlap(a, b):
                continue  # no person can be in both: not the same group
            came, went = after[b] - before[a], before[a] - after[b]
            if signatures and went:
                continue  # not where the algorithm puts a's people
            if not went and _pins(came, k, ell, missing):
                found.append(f"class {a} grew into {b} by {dict(came)}")
            elif not came and _pins(went, k, ell):
                found.append(f"class {a} shrank into {b} by {dict(went)}")
            elif came and went and sum((before[a] & after[b]).values()) >= k and (
                _pins(came, k, ell) or _pins(went, k, ell)
            ):
                found.append(f"class {a} became {b}: {dict(went)} for {dict(came)}")
    return found


def read_units(
    conn: psycopg.Connection, qit: str, st: str, qi: list[str], sensitive: str
) -> Release:
    """A cross-bucket release (QIT: QI cells and a bucket id; ST: bucket, value, count) as its
    units: classes and buckets that share rows, found by the attacker as connected parts. A
    class shows every value of its unit's buckets, so a unit is what a diff compares: its
    cells are the box around its classes, its values the ST counts of its buckets."""
    classes: dict[tuple[str, ...], set[int]] = {}
    for row in conn.execute(sql.SQL("SELECT {}, bucket_id FROM {}").format(
        sql.SQL(", ").join(map(sql.Identifier, qi)), sql.Identifier(*qit.split("."))
    )):  # fmt: skip
        classes.setdefault(tuple(str(v) for v in row[:-1]), set()).add(row[-1])
    parent: dict[int, int] = {}

    def root(b: int) -> int:
        while parent.setdefault(b, b) != b:
            b = parent[b]
        return b

    for buckets in classes.values():
        first, *rest = sorted(buckets)
        for b in rest:
            parent[root(b)] = root(first)
    values: dict[int, Counter] = {}
    for b, v, n in conn.execute(sql.SQL("SELECT bucket_id, {}, count FROM {}").format(
        sql.Identifier(sensitive), sql.Identifier(*st.split("."))
    )):  # fmt: skip
        values.setdefault(root(b), Counter())[(v,)] += n
    boxes: dict[int, list[tuple[str, ...]]] = {}
    for cells, buckets in classes.items():
        boxes.setdefault(root(min(buckets)), []).append(cells)
    out: Release = {}
    for u, cells in boxes.items():
        out.setdefault(_box(cells), Counter()).update(values.get(u, Counter()))
    return out


def _box(cells: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The cells of a box around classes: numeric ranges widened, value sets joined."""
    out = []
    for column in zip(*cells, strict=True):
        parsed = [_cell(c) for c in column]
        if any(p is None for p in parsed):
            out.append("*")
        elif all(isinstance(p, tuple) for p in parsed):
            lo = min(p[0] for p in parsed)  # type: ignore[index]
            hi = max(p[1] for p in parsed)  # type: ignore[index]
            out.append(f"{lo:.15g}-{hi:.15g}")
        else:
            names = set().union(*(p if isinstance(p, set) else {str(p)} for p in parsed))
            out.append("{" + ",".join(sorted(names)) + "}")
    return tuple(out)
