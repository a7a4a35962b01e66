"""Refreshing a LAG release so that intersecting its releases keeps k rows and l values.

A LAG release shows a person her class (the rows of NAME with her flag pattern whose
generalised cells cover her unflagged QIs: her group) and, per flagged attribute, the bucket
each of those rows lies in. A consumer who keeps every release learns, per flagged attribute,
only the values that every release's class held in its rows' buckets, and of the newest class
only the rows whose buckets hold such a value in every attribute. Regrouping and re-bucketing
from scratch at each refresh lets those sets shrink to her own value and row.

So a refresh keeps what the consumer already holds:
1. a row that persists unchanged (same released columns, same flagged attributes) keeps its
   group and, per attribute, its bucket; rows deleted since simply leave them;
2. a bucket left with fewer than l values (or, under a t principle, too far from the
   attribute's values) is dissolved; its rows, the new rows and the changed ones are bucketised
   as local anatomy does (Algorithm 4.1/4.2/4.3), or, when they cannot be on their own, each put
   into a kept bucket that lacks its value; when a value is in every kept bucket, kept buckets
   are dissolved one at a time (a secret draw) and the pool bucketised again, so a refresh never
   stops here while the attribute's rows can be bucketised at all;
3. each new or changed row joins the group of its QI-partition subset whose centre is nearest
   (the k-member distance over the subset's unflagged columns); a subset with no persisting
   group is split by LAG's own algorithm;
4. every group that fails (fewer than k rows, or a member the consumer would narrow below k
   plausible rows or l plausible values of an attribute: `Judge`) is merged into a near group
   of its subset, smallest first (dbanon.algorithms.persist.merge_failing): a merge only adds
   rows and buckets to a class, so it never removes a plausible value, and merging ends. A
   subset that fails as one group is left so, and the composition gate refuses the run;
5. every group of 2k rows or more is split again by LAG's algorithm where each part holds
   (persist.split_large), so loss need not only grow.
Subsets of fewer than k rows are suppressed, as LAG does at a publish. Which row joins which
bucket when several would do, and the released group and bucket ids, are drawn from the run's
secret generator.

Arrays in, ids out. Value codes are per attribute; a person's plausible values are a dict of
attribute -> frozenset of codes (only the attributes the consumer has seen her flag).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.centres import centres
from dbanon.algorithms.lag import columns, generalise, qi_partition
from dbanon.algorithms.localanatomy import Principle, bucketise, emd_equal
from dbanon.algorithms.nearest import distance
from dbanon.algorithms.persist import merge_failing, split_large, subset

Plausible = dict[str, frozenset[int]]


@dataclass(frozen=True)
class Attr:
    """One bucketised attribute: its value code per row (-1 where not flagged), principle."""

    codes: np.ndarray
    principle: Principle
    values: np.ndarray  # the row values, or their places in the value order (bucketise's)
    names: Sequence[object] | None = None  # the value at each place, where `values` are places

    @property
    def need(self) -> int:
        """Plausible values a person must keep: l, or 2 under a t principle."""
        return int(self.principle.value) if self.principle.kind == "l" else 2


@dataclass
class Layout:
    gid: np.ndarray  # int64 per row: its group (0..), -1 if suppressed
    buckets: dict[str, np.ndarray]  # per attribute: bucket (1..) per row, 0 if none
    figures: dict[str, int] = field(default_factory=dict)


@dataclass
class Measured:
    """Per person the consumer knew (row -> her plausible values now, plausible rows and fewest
    values; -1 and -1 for one the release left out, who keeps her past). A new person's
    plausible values are her class's (`class_values`)."""

    known: dict[int, tuple[Plausible, int, int]]


def class_values(
    gid: np.ndarray, bucket: np.ndarray, codes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The (group, value code) pairs of one attribute, sorted and distinct: the values the
    buckets of each group's rows hold (what a new person's class shows). One linear walk,
    compiled (np.unique of pairs took 1.4 s per attribute at a million rows)."""
    from dbanon.algorithms.topdown import class_value_pairs  # numba: when built

    m = (gid >= 0) & (bucket > 0)
    g, b, c = gid[m].astype(np.int64), bucket[m].astype(np.int64), codes[m].astype(np.int64)
    if not len(g):
        return g, c
    return class_value_pairs(g, b, c, int(g.max()) + 1, int(b.max()) + 1, int(c.max()) + 1)


def released(pattern: np.ndarray, k: int) -> np.ndarray:
    """Rows of QI-partition subsets of at least k rows (LAG suppresses the others)."""
    inverse = np.unique(pattern, return_inverse=True)[1].reshape(-1)
    return np.bincount(inverse)[inverse] >= k


class Judge:
    """What a consumer who kept every earlier release learns of a class's members, given the
    release's buckets (`known[i]`: her plausible values so far, None for a new person)."""

    def __init__(self, attrs: dict[str, Attr], buckets: dict[str, np.ndarray],
                 known: list[Plausible | None], k: int) -> None:  # fmt: skip
        self.attrs, self.buckets, self.known, self.k = attrs, buckets, known, k

    @cached_property
    def sets(self) -> dict[str, dict[int, frozenset[int]]]:
        """Per attribute, each bucket's values (built on first use: a publish needs none)."""
        return {a: _bucket_sets(b, self.attrs[a].codes) for a, b in self.buckets.items()}

    def members(self, rows: np.ndarray) -> list[tuple[int, Plausible, int, int]]:
        """Per member: (row, plausible values now, plausible rows, fewest values); -1 for a
        new person. A class holds the values of its rows' buckets; a row of it is plausible
        when its bucket holds a plausible value in every attribute."""
        union = {}
        for a in self.attrs:
            held = [self.sets[a][b] for b in np.unique(self.buckets[a][rows]).tolist() if b]
            if held:
                union[a] = frozenset().union(*held)
        out, judged = [], {}
        for r in rows.tolist():
            before = self.known[r]
            if before is None:
                out.append((r, union, -1, -1))
                continue
            if id(before) not in judged:
                now = {a: before[a] & union[a] for a in before if a in union}
                ok = np.ones(len(rows), dtype=bool)
                for a, vals in now.items():
                    ok &= np.array([bool(self.sets[a].get(b, frozenset()) & vals)
                                    for b in self.buckets[a][rows].tolist()])  # fmt: skip
                fewest = min((len(v) for v in now.values()), default=-1)
                judged[id(before)] = ({**union, **now}, int(ok.sum()), fewest)
            out.append((r, *judged[id(before)]))
        return out

    def holds(self, rows: np.ndarray) -> bool:
        """k rows, and every member the consumer knew keeps k plausible rows and, in each
        attribute she was seen to flag, the attribute's needed values."""
        return len(rows) >= self.k and not len(self.narrowed(rows))

    def narrowed(self, rows: np.ndarray) -> np.ndarray:
        """The members of the class `rows` the consumer knew whom it leaves fewer than k
        plausible rows or, in an attribute she was seen to flag, fewer than its needed values."""
        return np.array([
            r for r, now, count, _ in self.members(rows)
            if self.known[r] is not None and (count < self.k or any(
                len(now[a]) < self.attrs[a].need for a in self.known[r] if a in now))
        ], dtype=np.int64)  # fmt: skip

    def measure(self, gid: np.ndarray) -> Measured:
        """The figures of every person the consumer knew, under the release's groups (gid -1:
        left out, she keeps her past); only groups holding such a person are judged."""
        known = [i for i, k in enumerate(self.known) if k is not None]
        out: dict[int, tuple[Plausible, int, int]] = {}
        if not known:
            return Measured(out)
        at = np.asarray(known)
        for r in at[gid[at] < 0].tolist():
            out[r] = (self.known[r], -1, -1)  # type: ignore[assignment]
        order = np.argsort(gid, kind="stable")
        groups = int(gid.max(initial=-1)) + 1
        bounds = np.searchsorted(gid[order], np.arange(groups + 1))
        for g in np.unique(gid[at][gid[at] >= 0]).tolist():
            for r, now, count, fewest in self.members(order[bounds[g] : bounds[g + 1]]):
                if self.known[r] is not None:
                    out[r] = (now, count, fewest)
        return Measured(out)


def persist(
    qi: QIArrays, fnum: np.ndarray, fcat: np.ndarray, attrs: dict[str, Attr], k: int,
    variant: str, heuristic: bool, rng: np.random.Generator, old_gid: np.ndarray,
    old_buckets: dict[str, np.ndarray], known: list[Plausible | None],
) -> tuple[Layout, Judge]:  # fmt: skip
    """The refreshed release's groups and buckets (rows where old_gid >= 0 persist, as the
    module says), and the judge that measured them. A person no grouping of her subset can
    keep (the values she may hold have left the subset's flagged rows) is withheld: left out
    of this release, she keeps what the earlier ones showed, and the rest are laid out again
    without her."""
    pattern = qi_partition(np.hstack([fnum, fcat]))
    withheld = np.zeros(len(old_gid), dtype=bool)
    while True:
        shown = np.zeros(len(old_gid), dtype=bool)
        shown[~withheld] = released(pattern[~withheld], k)
        layout, judge, stuck = _lay_out(
            qi, fnum, fcat, attrs, k, variant, heuristic, rng, old_gid, old_buckets, known,
            pattern, shown,
        )  # fmt: skip
        if not stuck.any():  # else each round withholds someone: it ends
            layout.figures["withheld_rows"] = int(withheld.sum())
            return layout, judge
        withheld |= stuck


def _lay_out(
    qi: QIArrays, fnum: np.ndarray, fcat: np.ndarray, attrs: dict[str, Attr], k: int,
    variant: str, heuristic: bool, rng: np.random.Generator, old_gid: np.ndarray,
    old_buckets: dict[str, np.ndarray], known: list[Plausible | None], pattern: np.ndarray,
    shown: np.ndarray,
) -> tuple[Layout, Judge, np.ndarray]:  # fmt: skip
    """One layout of the `shown` rows; and the people the judge finds narrowed in a subset
    that fails as one group (none: the layout stands)."""
    stay = (old_gid >= 0) & shown
    buckets, dissolved = {}, 0
    for i, (a, attr) in enumerate(attrs.items()):
        buckets[a], d = _bucket(attr, shown, stay, old_buckets.get(a), heuristic,
                                np.random.default_rng([int(rng.integers(2**63)), i]))  # fmt: skip
        dissolved += d
    judge = Judge(attrs, buckets, known, k)
    gid = np.full(len(stay), -1, dtype=np.int64)
    stuck = np.zeros(len(stay), dtype=bool)
    merged, next_id = 0, 0
    for s in np.unique(pattern[shown]).tolist():
        rows = np.flatnonzero((pattern == s) & shown)
        part = columns(qi, rows, np.flatnonzero(~fnum[rows[0]]), np.flatnonzero(~fcat[rows[0]]))

        def holds(x: np.ndarray, rows: np.ndarray = rows) -> bool:
            return judge.holds(rows[x])

        def cluster(x: np.ndarray, rows: np.ndarray = rows) -> np.ndarray:
            return generalise(subset(qi, rows[x]), fnum[rows[x]], fcat[rows[x]], k, variant,
                              int(rng.integers(2**63)))[0]  # fmt: skip

        local = _groups(part, rows, stay, old_gid, cluster)
        before = int(local.max()) + 1

        try:
            local = merge_failing(part, local, before, holds)
        except ValueError:  # the whole subset fails: withhold who it narrows, or the gate refuses
            local = np.zeros(len(rows), dtype=np.int64)
            stuck[judge.narrowed(rows)] = True
        merged += before - (int(local.max()) + 1)
        local = split_large(local.astype(np.int64), cluster, holds, k)
        gid[rows] = local + next_id
        next_id += int(local.max()) + 1
    figures = {"persisting_rows": int(stay.sum()), "merged_groups": merged,
               "dissolved_buckets": dissolved}  # fmt: skip
    return Layout(gid, buckets, figures), judge, stuck


def _groups(
    part: QIArrays, rows: np.ndarray, persist: np.ndarray, old_gid: np.ndarray,
    cluster: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:  # fmt: skip
    """Local group ids (0..) of one subset's rows (`part`: their unflagged columns): persisting
    rows in their old groups, each other row in the group whose centre is nearest (the
    k-member distance); in a subset with no persisting group, LAG's own split (`cluster`)."""
    stay = persist[rows]
    if not stay.any():
        return np.unique(cluster(np.arange(len(rows))), return_inverse=True)[1].reshape(-1)
    local = np.full(len(rows), -1, dtype=np.int64)
    local[stay] = np.unique(old_gid[rows[stay]], return_inverse=True)[1].reshape(-1)
    fresh = np.flatnonzero(~stay)
    if len(fresh):
        groups = int(local.max()) + 1
        kept = np.flatnonzero(stay)
        cnum, ccat = centres(subset(part, kept), local[kept], groups)
        for start in range(0, len(fresh), 2048):  # bounded memory: a block x groups
            block = fresh[start : start + 2048]
            d = distance(part, part.num[block], part.cat[block], cnum, ccat)
            local[block] = d.argmin(axis=1)
    return local


def _bucket_sets(bucket: np.ndarray, codes: np.ndarray) -> dict[int, frozenset[int]]:
    out: dict[int, set[int]] = {}
    for b, c in zip(bucket.tolist(), codes.tolist(), strict=True):
        if b:
            out.setdefault(b, set()).add(c)
    return {b: frozenset(v) for b, v in out.items()}


def _valid(codes: np.ndarray, p: Principle, whole: np.ndarray) -> bool:
    """Whether a kept bucket's values still keep the principle (l: >= l values, each once)."""
    if p.kind == "l":
        return len(codes) >= int(p.value) and len(np.unique(codes)) == len(codes)
    counts = np.bincount(codes, minlength=len(whole)).astype(np.float64)[None, :]
    return len(codes) >= 2 and bool(emd_equal(counts, whole)[0] <= p.value + 1e-12)


def _bucket(
    attr: Attr, released: np.ndarray, persist: np.ndarray, old: np.ndarray | None,
    heuristic: bool, rng: np.random.Generator,
) -> tuple[np.ndarray, int]:  # fmt: skip
    """Bucket ids (1..) of one attribute's flagged released rows, 0 elsewhere; and how many
    kept buckets were dissolved."""
    n = len(attr.codes)
    flagged = released & (attr.codes >= 0)
    out = np.zeros(n, dtype=np.int64)
    dissolved = 0
    if old is not None and flagged.any():
        whole = np.bincount(attr.codes[flagged]).astype(np.float64)
        stay = np.flatnonzero(flagged & persist & (old > 0))
        stay = stay[np.argsort(old[stay], kind="stable")]  # each old bucket's rows contiguous
        cuts = np.flatnonzero(np.diff(old[stay])) + 1
        kept = 0
        for members in np.split(stay, cuts) if len(stay) else []:
            if _valid(attr.codes[members], attr.principle, whole):
                kept += 1
                out[members] = kept
            else:
                dissolved += 1
    while True:
        pool = np.flatnonzero(flagged & (out == 0))
        if not len(pool):
            return _numbered(out), dissolved
        try:
            out[pool] = bucketise(attr.values[pool], attr.principle, heuristic, rng,
                                  attr.names) + out.max()
            return _numbered(out), dissolved
        except ValueError:
            if not out.any():
                raise
        full = _join_kept(attr, out, pool, rng)
        if isinstance(full, np.ndarray):
            return _numbered(full), dissolved
        # value `full` is in every kept bucket: dissolve one (a secret draw), its rows join the
        # pool and the pool is bucketised again; with none kept it is a fresh bucketising
        holding = sorted(b for b, v in _bucket_sets(out, attr.codes).items() if full in v)
        out[out == holding[int(rng.integers(len(holding)))]] = 0
        dissolved += 1


def _join_kept(
    attr: Attr, out: np.ndarray, pool: np.ndarray, rng: np.random.Generator
) -> np.ndarray | int:
    """The bucket ids with each pool row put into a kept bucket that lacks its value (any
    bucket under a t principle), or the value code that every kept bucket holds."""
    out = out.copy()
    held = _bucket_sets(out, attr.codes)
    for r in rng.permutation(pool).tolist():
        c = int(attr.codes[r])
        lacking = [b for b, v in held.items() if attr.principle.kind == "t" or c not in v]
        if not lacking:
            return c
        b = lacking[int(rng.integers(len(lacking)))]
        out[r] = b
        held[b] = held[b] | {c}
    return out


def _numbered(bucket: np.ndarray) -> np.ndarray:
    """Bucket ids 1..g in the order they had (a dissolved bucket leaves no gap); 0 stays 0."""
    used = bucket > 0
    out = np.zeros_like(bucket)
    out[used] = np.unique(bucket[used], return_inverse=True)[1].reshape(-1) + 1
    return out
