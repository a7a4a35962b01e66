"""Exposure of flagged values under the personalised attacker (thesis §1.10, §3.4, §6.2 item 10),
and the query answerer of local anatomy (LA) and LAG releases (shape "localanatomy").

Exposure. The attacker knows that the target t is in the table and knows t's unflagged values
(its QI values in the personalised sense), none of its flagged ones. A released row r *matches*
t (Def. 4.5) when, on every attribute whose value the attacker knows, r shows a value (not a
NULL, flagged, cell) covering t's: equal to it (LA, Anatomy) or inside r's generalisation
(LAG: a numeric range, a categorical value or '*'). Knowing t's value of attribute A is flagged,
the attacker also knows t's A cell is bucketised, so only matching rows bucketised in A remain
(Def. 4.6: the matching buckets). Then, as (3.22)/(4.1):

    p(t, s) = (1 / |M_A(t)|) * sum over r in M_A(t) of P(r's A value is s)

with P = (count of s in r's bucket of A) / (bucket size) for a bucketised cell, and for a cell
the release shows (Anatomy shows semi-sensitive values in its QIT) 1 when it shows s exactly,
1 / (values the cell covers) when a range covers s, else 0. Two attacker models:
- (a) the attacker knows only t's unflagged values: M(t) is every matching row;
- (b) the attacker knows every person's unflagged values and that all are in the table: a set of
  people whose known values match exactly as many rows as there are of them (one person, one
  row, in the thesis's example: Mark, Dave, Neil) claims those rows, which leave every other
  person's matches; repeated until nothing changes. Candidates are never the target's own row
  removed: the target always matches its own row.
The thesis's Dean example (Tables 4.1/4.4) under (b) leaves Dean only his own row 1007, in
*disease bucket 2* (the thesis prints bucket 1: an erratum, §6.3);
tests/test_localanatomy_exposure.py checks this on Table 4.4's buckets.

Query error. An LA/LAG release reads as boxes and buckets (dbanon.metrics.boxes) for the shared
workload of dbanon.metrics.queries: an unflagged cell is its released value or generalisation; a
flagged (NULL) cell of a QI stands for the values of its bucket in that attribute (numeric: the
bucket's smallest to largest; categorical: the bucket's values), so a row surely satisfies a
predicate when all its bucket's values do and may when one does (the sure/maybe bounds, rather
than the thesis's expected count (4.15)-(4.19), so that LA and the baselines are bounded alike);
the sensitive column's buckets are the salary buckets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql

from dbanon.metrics import queries
from dbanon.metrics.boxes import Attribute, Bucketed, bucketed, fetch_text, read_boxes

SHAPE = "localanatomy"
ATTACKERS = ("a", "b")


@dataclass
class View:
    """What a release shows of n people and what the attacker knows of them.

    Attributes are columns 0..d-1 (QIs, semi-sensitive ones among them) with integer codes in
    value order; `lo`/`hi` is the box the release shows of each row (NaN where the cell is NULL,
    i.e. flagged; lo == hi for a value shown as it is); `buckets` per bucketised attribute (by
    column index, or any key for a column that is not a QI, e.g. the salary) gives each row's
    bucket (0: not bucketised) and true code."""

    values: np.ndarray  # int64 (n, d)
    known: np.ndarray  # bool (n, d): the attacker knows this person's value
    lo: np.ndarray  # float64 (n, d)
    hi: np.ndarray  # float64 (n, d)
    buckets: dict[object, tuple[np.ndarray, np.ndarray]]

    @property
    def n(self) -> int:
        return int(self.values.shape[0])


def _classes(view: View) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """People with the same known attributes and values form a class: (class of each person,
    per class its known mask and values)."""
    key = np.where(view.known, view.values, -1)
    pattern = view.known.astype(np.int64) @ (1 << np.arange(view.known.shape[1], dtype=np.int64))
    table = np.column_stack([pattern, key])
    uniq, inverse = np.unique(table, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    d = view.known.shape[1]
    out = [((u[0] >> np.arange(d)) & 1 == 1, u[1:]) for u in uniq]
    return inverse, out


def candidates(view: View) -> tuple[np.ndarray, list[np.ndarray]]:
    """(class of each person, matching rows of each class) under attacker (a)."""
    cls, classes = _classes(view)
    shown = ~np.isnan(view.lo)
    points = bool(np.all(view.lo[shown] == view.hi[shown]))
    out: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * len(classes)
    by_mask: dict[bytes, list[int]] = {}
    for c, (mask, _) in enumerate(classes):
        by_mask.setdefault(mask.tobytes(), []).append(c)
    for group in by_mask.values():
        mask = classes[group[0]][0]
        cols = np.flatnonzero(mask)
        able = np.flatnonzero(shown[:, cols].all(axis=1))
        if points:  # a hash join on the known columns
            index: dict[tuple, list[int]] = {}
            for r, vals in zip(able.tolist(), view.lo[np.ix_(able, cols)].tolist(), strict=True):
                index.setdefault(tuple(vals), []).append(r)
            for c in group:
                hit = index.get(tuple(float(v) for v in classes[c][1][cols]), [])
                out[c] = np.asarray(hit, dtype=np.int64)
            continue
        # Boxes: compare each class's point with the distinct boxes of the able rows.
        boxes, unit = np.unique(np.column_stack([view.lo[np.ix_(able, cols)],
                                                 view.hi[np.ix_(able, cols)]]),
                                axis=0, return_inverse=True)  # fmt: skip
        unit = unit.reshape(-1)
        order = np.argsort(unit, kind="stable")
        starts = np.searchsorted(unit[order], np.arange(len(boxes) + 1))
        lo, hi = boxes[:, : len(cols)], boxes[:, len(cols) :]
        points_of = np.array([classes[c][1][cols] for c in group], dtype=np.float64)
        step = max(1, 2_000_000 // max(len(boxes), 1))
        for a in range(0, len(group), step):
            x = points_of[a : a + step]
            hit = np.ones((len(x), len(boxes)), dtype=bool)
            for j in range(len(cols)):
                hit &= (lo[:, j] <= x[:, j, None]) & (x[:, j, None] <= hi[:, j])
            for i, row in enumerate(hit):
                units = np.flatnonzero(row)
                rows = [order[starts[u] : starts[u + 1]] for u in units]
                out[group[a + i]] = able[np.concatenate(rows)] if rows else np.zeros(0, np.int64)
    return cls, out


def eliminate(cls: np.ndarray, cands: list[np.ndarray]) -> list[np.ndarray]:
    """Attacker (b): a class whose matches are exactly as many rows as it has people claims
    them; claimed rows leave every other class's matches; until nothing changes."""
    members = np.bincount(cls, minlength=len(cands))
    sets = [set(c.tolist()) for c in cands]
    holders: dict[int, list[int]] = {}
    for c, rows in enumerate(sets):
        for r in rows:
            holders.setdefault(r, []).append(c)
    done = np.zeros(len(cands), dtype=bool)
    queue = [c for c in range(len(cands)) if len(sets[c]) == members[c]]
    while queue:
        c = queue.pop()
        if done[c] or len(sets[c]) != members[c]:
            continue
        done[c] = True
        for r in sets[c]:
            for other in holders.get(r, []):
                if other != c and r in sets[other]:
                    sets[other].discard(r)
                    if len(sets[other]) == members[other] and not done[other]:
                        queue.append(other)
    return [np.fromiter(sorted(s), np.int64, len(s)) for s in sets]


def _share(ids: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Sorted keys bucket * V + code with their share count / bucket size, and V."""
    v = int(codes.max()) + 1 if len(codes) else 1
    inb = ids > 0
    keys, counts = np.unique(ids[inb].astype(np.int64) * v + codes[inb], return_counts=True)
    size = np.bincount(ids[inb])
    return keys, counts / size[keys // v], v


def per_person(view: View, attacker: str = "a") -> dict[object, np.ndarray]:
    """p(t, s) of each target t (a flagged value, or every row for a bucketised sensitive
    attribute), per bucketised attribute (see the module). The principle bounds each person, so a
    claim of it is judged on the maximum; the thesis's figures plot the mean."""
    if attacker not in ATTACKERS:
        raise ValueError(f"attacker must be one of {ATTACKERS}, got {attacker!r}")
    cls, cands = candidates(view)
    if attacker == "b":
        cands = eliminate(cls, cands)
    out: dict[object, np.ndarray] = {}
    for attr, (ids, codes) in view.buckets.items():
        keys, share, v = _share(ids, codes)
        column = attr if isinstance(attr, int) else None
        targets = np.flatnonzero(ids > 0) if column is None else np.flatnonzero(
            ~view.known[:, column])  # fmt: skip
        if not len(targets):
            continue
        each = np.zeros(len(targets))
        for n, t in enumerate(targets.tolist()):
            rows = cands[cls[t]]
            if ids[t] > 0:
                rows = rows[ids[rows] > 0]
            if not len(rows):
                continue
            s = codes[t] if ids[t] > 0 else view.values[t, column]
            p = np.zeros(len(rows))
            inb = ids[rows] > 0
            if inb.any():
                want = ids[rows[inb]].astype(np.int64) * v + s
                i = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
                p[inb] = np.where(keys[i] == want, share[i], 0.0)
            if column is not None and (~inb).any():
                lo, hi = view.lo[rows[~inb], column], view.hi[rows[~inb], column]
                p[~inb] = np.where((lo <= s) & (s <= hi), 1.0 / (hi - lo + 1), 0.0)
            each[n] = float(p.mean())
        out[attr] = each
    return out


def exposure(view: View, attacker: str = "a") -> dict[object, float]:
    """Mean p(t, s) over every flagged value, per bucketised attribute (the thesis's figures)."""
    return {a: float(e.mean()) for a, e in per_person(view, attacker).items()}


def summary(each: dict[object, np.ndarray]) -> tuple[dict[object, float], dict[object, float]]:
    """The mean and the largest exposure per attribute of `per_person`'s arrays (an attribute
    with no target has neither: nan)."""
    def of(f: Callable[[np.ndarray], float]) -> dict[object, float]:
        return {a: float(f(e)) if len(e) else float("nan") for a, e in each.items()}

    return of(np.mean), of(np.max)


# --- the query answerer of the "localanatomy" shape ----------------------------------------------


def _columns(conn: psycopg.Connection, rel: sql.Composable) -> list[str]:
    cur = conn.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(rel))
    return [d.name for d in cur.description]


def load(conn: psycopg.Connection, rel: queries.Published, attrs: list[Attribute]) -> Bucketed:
    """NAME (row_id, [group_id,] QIs) with each attribute's IDT/ST pairs, as boxes and buckets:
    a flagged QI cell stands for its bucket's values; the buckets are the sensitive column's."""
    main, pairs = rel.relations[0], rel.relations[1:]
    cols = _columns(conn, main)
    shown = [c for c in rel.qi if c in cols]
    texts = fetch_text(conn, main, ["row_id", *shown])
    row_ids = np.asarray([int(x) for x in texts[0]], dtype=np.int64)
    where = {int(r): i for i, r in enumerate(row_ids.tolist())}
    flagged: dict[str, dict[int, list[str]]] = {}  # attribute -> row -> its bucket's values
    sens_bucket = np.zeros(len(row_ids), dtype=np.int64)
    sens_values: dict[int, list[str]] = {}
    for idt, st in zip(pairs[::2], pairs[1::2], strict=True):
        attr = _columns(conn, st)[1]
        values: dict[int, list[str]] = {}
        for b, v in conn.execute(sql.SQL("SELECT bucket_id, {}::text FROM {}").format(
                sql.Identifier(attr), st)):  # fmt: skip
            values.setdefault(int(b), []).append(v)
        members = conn.execute(sql.SQL("SELECT row_id, bucket_id FROM {}").format(idt)).fetchall()
        if attr == rel.sensitive:
            sens_values = values
            for r, b in members:
                if int(r) in where:
                    sens_bucket[where[int(r)]] = int(b)
        else:
            flagged[attr] = {where[int(r)]: values[int(b)] for r, b in members if int(r) in where}
    by_name = {a.name: a for a in attrs}
    columns = []
    for a in attrs:
        col = list(texts[1 + shown.index(a.name)]) if a.name in shown else ["*"] * len(row_ids)
        for i, vals in flagged.get(a.name, {}).items():
            if a.numeric:
                nums = [float(v) for v in vals]
                low, high = min(nums), max(nums)
                col[i] = f"[{low:g},{high:g}]" if low != high else f"{low:g}"
            else:
                col[i] = "*"  # its mask is set to the bucket's values below
        columns.append(col)
    lo, hi, cats = read_boxes(columns, attrs)
    j = 0
    for a in attrs:
        if a.numeric:
            continue
        index = by_name[a.name].index()
        for i, vals in flagged.get(a.name, {}).items():
            cats[j][i] = False
            cats[j][i, [index[v] for v in vals if v in index]] = True
        j += 1
    # Salary buckets: rows point into them; each bucket's values once.
    out = bucketed([[] for _ in attrs] if not len(row_ids) else columns, attrs, sens_bucket,
                   sens_values)  # fmt: skip
    out.lo, out.hi, out.cats = lo, hi, cats
    return out


queries.register(SHAPE, load)
