"""Sensitive-value exposure probability (thesis §3.4, (3.21)/(3.22)) and discernibility DM (2.4).

Exposure: the worst-case attacker knows that the target t is in the table and all of t's QI
values. Every released row whose box contains t's QI point matches t (§6.2 item 7: a numeric
value inside the row's interval, a categorical one equal to it, under its hierarchy label, or
'*'); with M(t) the matching rows and f(s, B) the share of s among the sensitive values of
bucket B,

    p(t, s) = (1 / |M(t)|) * sum over u in M(t) of f(s, B_u)

which is (3.22) (Num(t,MB) rows of t's matches in each matching bucket MB, Num(s,MB)/|MB|) and,
for a generalised table whose every row is its own bucket, (3.21): the share of t's matches
carrying s. The release's exposure is the mean of p(t, s_t) over all source rows t with their
own value s_t; the maximum is reported beside it. A source row no released row matches (it was
suppressed) has exposure 0. This needs the source, so it is computed at publish time
(`at_publish`, recorded with the run's metrics) and read back by `dbanon evaluate`.

Per release shape (REGISTRY) a function computes it from the release read as boxes and buckets
(dbanon.metrics.boxes); generalised, Anatomy and CBG releases share the one formula above.

DM = sum over equivalence groups of |EG|^2 (2.4), an EG being the rows a consumer cannot tell
apart: equal released QI values (for Anatomy, whose QIs are exact, rows with the same QI point).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from numba import njit
from psycopg import sql

from dbanon.db.catalog import NUMERIC
from dbanon.metrics import queries
from dbanon.metrics.boxes import Attribute, Bucketed, attributes, source_points
from dbanon.models import sizes

if TYPE_CHECKING:
    from dbanon.methods.base import Built, Resolved

EXPOSURE_MAX_ROWS = 200_000  # above this, publish skips the metric (it is O(rows x boxes))

Exposure = Callable[[Bucketed, Bucketed], dict[str, Any]]
REGISTRY: dict[str, Exposure] = {}


def register(shape: str, fn: Exposure) -> Exposure:
    REGISTRY[shape] = fn
    return fn


def _codes(release: Bucketed, source: Bucketed) -> tuple[np.ndarray, np.ndarray, int]:
    both = np.concatenate([release.values, source.values]).astype(str)
    uniq, inv = np.unique(both, return_inverse=True)
    inv = inv.reshape(-1)
    return inv[: len(release.values)], inv[len(release.values) :], len(uniq)


def _is_point(b: Bucketed) -> bool:
    return bool((b.lo == b.hi).all() and all((c.sum(axis=1) == 1).all() for c in b.cats))


def _point_table(b: Bucketed) -> np.ndarray:
    return np.column_stack([b.lo, *(c.argmax(axis=1).astype(np.float64) for c in b.cats)])


@njit(cache=True)
def _containment(x: np.ndarray, cats: np.ndarray, codes: np.ndarray, lo: np.ndarray,
                 hi: np.ndarray, mask: np.ndarray, count: np.ndarray, indptr: np.ndarray,
                 fcode: np.ndarray, fval: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per source row: the released rows whose box contains its point, and the sum of f(s, B)
    over them for its own value s (F of each box as sorted (code, value) runs)."""
    n, boxes = x.shape[0], lo.shape[0]
    matches = np.zeros(n)
    num = np.zeros(n)
    for t in range(n):
        for b in range(boxes):
            inside = True
            for j in range(x.shape[1]):
                if x[t, j] < lo[b, j] or x[t, j] > hi[b, j]:
                    inside = False
                    break
            if inside:
                for j in range(cats.shape[1]):
                    if not mask[b, cats[t, j]]:
                        inside = False
                        break
            if not inside:
                continue
            matches[t] += count[b]
            a, z = indptr[b], indptr[b + 1]
            i = a + np.searchsorted(fcode[a:z], codes[t])
            if i < z and fcode[i] == codes[t]:
                num[t] += fval[i]
    return matches, num


def exposure(release: Bucketed, source: Bucketed) -> dict[str, Any]:
    """Mean and maximum of p(t, s_t) over the source rows (formula in the module docstring)."""
    rel_codes, src_codes, n_values = _codes(release, source)
    size = np.diff(release.offsets)
    point = _is_point(release) and release.n > 0
    if point:  # Anatomy and exact QIs: a match is an equal point (a hash join, no boxes)
        both = np.vstack([_point_table(release), _point_table(source)])
        inv = np.unique(both, axis=0, return_inverse=True)[1].reshape(-1)
        keys, src_box = inv[: release.n], inv[release.n :]
        boxes = int(inv.max()) + 1
    else:
        keys = release.box_keys()
        boxes = int(keys.max()) + 1 if release.n else 0
    # F[box, s] = sum over the box's rows u of f(s, B_u): one entry per (box, bucket) pair and
    # value of that bucket, weighted by how many of the box's rows lie in the bucket.
    pairs, mult = np.unique(np.stack([keys, release.bucket]), axis=1, return_counts=True)
    box_of, bucket_of = pairs
    lens = size[bucket_of]
    firsts = np.repeat(release.offsets[bucket_of] - np.concatenate([[0], np.cumsum(lens)[:-1]]),
                       lens)  # fmt: skip
    positions = firsts + np.arange(int(lens.sum()))
    rows = np.repeat(box_of, lens)
    weights = np.repeat(mult / lens, lens)
    flat = rows.astype(np.int64) * n_values + rel_codes[positions]
    fkeys, finv = np.unique(flat, return_inverse=True)
    fvals = np.bincount(finv.reshape(-1), weights=weights)
    count = np.bincount(keys, minlength=boxes).astype(np.float64)

    def f_at(box: np.ndarray, code: np.ndarray) -> np.ndarray:
        want = box.astype(np.int64) * n_values + code
        i = np.minimum(np.searchsorted(fkeys, want), max(len(fkeys) - 1, 0))
        return np.where(fkeys[i] == want, fvals[i], 0.0) if len(fkeys) else np.zeros(len(want))

    if point:
        matches = count[src_box]
        num = f_at(src_box, src_codes)
    else:
        first = np.unique(keys, return_index=True)[1]
        widths = [c.shape[1] for c in release.cats]
        starts = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
        mask = (np.concatenate([c[first] for c in release.cats], axis=1) if release.cats
                else np.zeros((boxes, 0), dtype=bool))  # fmt: skip
        src = (np.column_stack([c.argmax(axis=1) + starts[j] for j, c in enumerate(source.cats)])
               if source.cats else np.zeros((source.n, 0), dtype=np.int64))  # fmt: skip
        indptr = np.searchsorted(fkeys, np.arange(boxes + 1, dtype=np.int64) * n_values)
        matches, num = _containment(
            np.ascontiguousarray(source.lo), src.astype(np.int64), src_codes.astype(np.int64),
            np.ascontiguousarray(release.lo[first]), np.ascontiguousarray(release.hi[first]),
            mask, count, indptr, (fkeys % n_values).astype(np.int64), fvals,
        )  # fmt: skip
    p = np.divide(num, matches, out=np.zeros(source.n), where=matches > 0)
    return {
        "exposure": float(p.mean()) if source.n else 0.0,
        "exposure_max": float(p.max()) if source.n else 0.0,
        "exposure_unmatched_rows": int((matches == 0).sum()),
    }


for _shape in ("generalised", "anatomy", "cbg"):
    register(_shape, exposure)


def discernibility(
    conn: psycopg.Connection, relation: sql.Composable, qi: list[str]
) -> int:
    """DM (2.4): the sum of squared sizes of the classes of equal released QI values."""
    return int(conn.execute(
        sql.SQL("SELECT coalesce(sum(n * n), 0) FROM (SELECT count(*)::numeric AS n FROM {} "
                "GROUP BY {}) g").format(relation, sql.SQL(", ").join(map(sql.Identifier, qi)))
    ).fetchone()[0])  # fmt: skip


def discernibility_of_codes(codes: list[np.ndarray]) -> int:
    """DM from each row's codes, one array per QI (equal code, equal value; NULL one code):
    the classes a GROUP BY of the values forms, counted in numpy. The codes are combined
    into one int64 key per row, renumbered densely before the mixed radix could overflow."""
    if not codes or not len(codes[0]):
        return 0
    key, space = np.zeros(len(codes[0]), dtype=np.int64), 1
    for c in codes:
        card = int(c.max()) + 1
        if space * card >= 1 << 62:
            uniq, inverse = np.unique(key, return_inverse=True)
            key, space = inverse.reshape(-1).astype(np.int64), len(uniq)
        key = key * card + c
        space *= card
    sizes = np.bincount(key) if space <= 4 * len(key) else np.unique(key, return_counts=True)[1]
    sizes = sizes.astype(np.int64)
    return int(np.dot(sizes, sizes))


def shape_of(method: object) -> str:
    """A method's release shape (Method.shape); 'generalised' for one that does not say."""
    return str(getattr(method, "shape", "generalised"))


def metric_attributes(
    conn: psycopg.Connection, source: sql.Composable, qi: list[Any], categorical: list[bool],
    hierarchies: dict[str, Any],
) -> list[Attribute] | None:  # fmt: skip
    """The QIs as boxes read them; None when one is a date (its periods are not read here)."""
    if any(c.kind not in (NUMERIC,) and not cat for c, cat in zip(qi, categorical, strict=True)):
        return None
    return attributes(conn, source, [c.name for c in qi], [not c for c in categorical],
                      hierarchies)  # fmt: skip


def at_publish(
    conn: psycopg.Connection, r: Resolved, built: list[Built], dm: int | None = None,
    counted: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Exposure and DM of a release being published, for the run record ({} when the shape
    has no exposure, the release has not exactly one sensitive column, or a QI is a date).
    `dm`, when the gate's k check already grouped a generalised release by its QIs, is not
    computed again; nor is a DM among `counted`, the figures a method counted on the source
    beside its build (Method.source_figures) or in it."""
    shape = shape_of(r.method)
    if shape not in REGISTRY or len(r.sensitive) != 1 or not built:
        return {}
    names = [c.name for c in r.qi]
    if counted and "dm" in counted:
        dm = counted["dm"]
    elif dm is None or shape != "generalised":
        # the histogram of the first relation's classes (a k check of it counted it already
        # in a publish's figures step: dbanon.models.sizes.shared)
        hist = sizes.histogram(conn, r.stored(built[0]), names)
        dm = sum(n * n * c for n, c in hist.items())
    out: dict[str, Any] = {"dm": dm}
    if r.rows > EXPOSURE_MAX_ROWS:
        return {**out, "exposure": None}
    cats = [r.is_categorical(c) for c in r.qi]
    attrs = metric_attributes(conn, r.source.ident, r.qi, cats, r.hierarchies)
    if attrs is None:
        return out
    pub = queries.Published(shape, [r.stored(b) for b in built], [c.name for c in r.qi],
                            r.sensitive[0].name)  # fmt: skip
    release = queries.load(conn, pub, attrs)
    source = source_points(conn, r.source.ident, attrs, r.sensitive[0].name)
    return {**out, **REGISTRY[shape](release, source)}
