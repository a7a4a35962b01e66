"""k-anonymity by feature selection (RFKA, Huang & Zhu; Greedy_Hamdist, Zhang et al.): the
rankings and the greedy forward search.

The search keeps a feature when the projection of the source onto the features kept so far plus
it is still k-anonymous. A test is a query in PostgreSQL,
`SELECT count(*), min(n) FROM (SELECT count(*) AS n FROM src GROUP BY f1..fm HAVING count(*) < k)`,
over the live source: no table is copied or created per step, so a step costs one hash
aggregate of the source and nothing grows with the number of steps taken. Binary features
(one-hot indicators) are tested many to a query (`split_small`); when every candidate is one,
the source is read once instead, each column's indicators as one int32 code per row
(`codes_query`), and the same tests are made by compiled passes over those arrays
(`_Compiled`, dbanon.algorithms.featurekernels).

The rankings are pure code (arrays in, one score per feature out):
- `oob_permutation_importance`: the paper's random-forest importance, the mean decrease of a
  tree's accuracy on its own out-of-bag rows when one feature's values are permuted among them
  (Breiman's measure; scikit-learn's forest, 1000 trees, otherwise its defaults);
- `hamdist_scores`: Greedy_Hamdist's measure for binary features, the share of (row, row) pairs
  of different classes that the feature tells apart (their Hamming distance on it is 1). The
  measure of a feature set is the sum of its features' (a Hamming distance is a sum over
  features), so ranking single features ranks the greedy's additions. It needs only how many
  rows of each class hold each feature, which `hamdist_counts` counts in PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

# Threads for the forest and the OOB predictions; 2 keeps a shared 2-core machine usable.
DEFAULT_JOBS = 2


@dataclass(frozen=True)
class Feature:
    """One candidate column of the release: its released name and its SQL over the source."""

    name: str
    expr: sql.Composable  # over the source's columns (unqualified)
    column: str  # the source column it comes from
    binary: bool = False  # expr is a boolean (true, false or NULL): tests of it can be batched
    # A one-hot indicator: expr is `key = value` (NULL where key is) or, not `nullable`,
    # `key IS NOT DISTINCT FROM value`; the indicators of one column share one key and exclude
    # each other (`grouping` relies on it).
    key: sql.Composable | None = None
    value: object = None
    nullable: bool = False


def indicator(name: str, column: str, key: sql.Composable, value: object, *,
              nullable: bool) -> Feature:  # fmt: skip
    """The one-hot feature `key = value` (NULL where key is NULL) or, not `nullable`,
    `key IS NOT DISTINCT FROM value` (never NULL)."""
    test = "({} = {})" if nullable else "({} IS NOT DISTINCT FROM {})"
    expr = sql.SQL(test).format(key, sql.Literal(value))
    return Feature(name, expr, column, binary=True, key=key, value=value, nullable=nullable)


def grouping(kept: Sequence[Feature]) -> list[sql.Composable]:
    """What to GROUP BY for the classes of `kept`: the indicators of one key exclude each
    other, so their tuple of booleans is told by one number, which of them holds (0: none,
    -1: NULL) - one expression per source column instead of one per indicator kept."""
    out: list[sql.Composable] = []
    keyed: dict[str, list[Feature]] = {}  # the indicators of one column share its key
    for f in kept:
        if f.key is None:
            out.append(f.expr)
        else:
            keyed.setdefault(f.column, []).append(f)
    for fs in keyed.values():
        key, values = fs[0].key, sql.SQL(", ").join(sql.Literal(f.value) for f in fs)
        found = sql.SQL("coalesce(array_position(ARRAY[{}], {}), 0)").format(values, key)
        out.append(
            sql.SQL("CASE WHEN {} IS NULL THEN -1 ELSE {} END").format(key, found)
            if fs[0].nullable
            else found
        )
    return out


@dataclass
class Selection:
    """The search's outcome: features kept (in the order tried) and those dropped, each with
    why: (classes below k, the smallest class's rows) of the projection with it added."""

    chosen: list[Feature] = field(default_factory=list)
    dropped: list[tuple[Feature, int, int]] = field(default_factory=list)
    queries: int = 0


def small_classes(
    conn: psycopg.Connection, source: sql.Composable, exprs: Sequence[sql.Composable], k: int
) -> tuple[int, int]:
    """(classes below k, rows of the smallest of them) of the projection of `source` onto
    `exprs`: (0, 0) when it is k-anonymous. One GROUP BY ... HAVING query."""
    row = conn.execute(
        sql.SQL(
            "SELECT count(*), coalesce(min(n), 0) FROM (SELECT count(*) AS n FROM {src} "
            "GROUP BY {cols} HAVING count(*) < {k}) dbanon_small"
        ).format(src=source, cols=sql.SQL(", ").join(exprs), k=sql.Literal(k))
    ).fetchone()
    return int(row[0]), int(row[1])


# Binary candidates tested by one query: two counts each, within PostgreSQL's 1664 columns.
BATCH = 400
FIRST_BATCH = 8  # the first batch; then twice the run that ended in a kept feature


def split_small(
    conn: psycopg.Connection,
    source: sql.Composable,
    kept: Sequence[sql.Composable],
    candidates: Sequence[Feature],
    k: int,
) -> list[tuple[int, int]]:
    """`small_classes` of `kept` plus each binary candidate, for all of them in one query:
    adding a boolean splits every class of `kept` into its rows where it is true, false and
    NULL, so the counts of each class's true and false rows tell every candidate's classes."""
    if not candidates:
        return []
    k_ = sql.Literal(k)
    counts, judged = [], []
    for i, f in enumerate(candidates):
        t, u = sql.Identifier(f"t{i}"), sql.Identifier(f"f{i}")
        counts.append(sql.SQL("count(*) FILTER (WHERE {e}) AS {t}, "
                              "count(*) FILTER (WHERE NOT {e}) AS {u}").format(e=f.expr, t=t, u=u))
        parts = [t, u, sql.SQL("(n - {} - {})").format(t, u)]
        small = [sql.SQL("CASE WHEN {p} BETWEEN 1 AND {k} - 1 THEN {p} END").format(p=p, k=k_)
                 for p in parts]  # fmt: skip
        judged.append(sql.SQL("coalesce(sum({}), 0), coalesce(min(least({})), 0)").format(
            sql.SQL(" + ").join(sql.SQL("({} BETWEEN 1 AND {} - 1)::int").format(p, k_)
                                for p in parts),
            sql.SQL(", ").join(small),
        ))  # fmt: skip
    group = sql.SQL(" GROUP BY {}").format(sql.SQL(", ").join(kept)) if kept else sql.SQL("")
    row = conn.execute(
        sql.SQL("SELECT {judged} FROM (SELECT count(*) AS n, {counts} FROM {src}{group}) c").format(
            judged=sql.SQL(", ").join(judged), counts=sql.SQL(", ").join(counts), src=source,
            group=group,
        )
    ).fetchone()  # fmt: skip
    return [(int(row[2 * i]), int(row[2 * i + 1])) for i in range(len(candidates))]


def codes_query(source: sql.Composable, features: Sequence[Feature]) -> sql.Composable | None:
    """When every feature is a one-hot indicator: the one-row query of each source column's
    `grouping` number of them for every row, as int4[] arrays (`array_agg` over one scan, so
    the arrays are aligned row by row), one per source column in the order the features first
    name them - what `forward_search` judges them on. Else None."""
    if not features or not all(f.binary and f.key is not None for f in features):
        return None
    return sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(sql.SQL("array_agg({})").format(g) for g in grouping(features)), source
    )


class _Compiled:
    """`split_small` over the codes of `codes_query`, read once: every candidate is a one-hot
    indicator, so each test is one pass over the rows in compiled code
    (dbanon.algorithms.featurekernels) with the same counts and the same judgement as the
    query."""

    def __init__(self, features: Sequence[Feature], codes: Sequence[np.ndarray]) -> None:
        from dbanon.algorithms import featurekernels

        self.kernels = featurekernels
        by_column: dict[str, list[str]] = {}
        for f in features:
            by_column.setdefault(f.column, []).append(f.name)
        columns = list(by_column)
        # (column, 1-based position among its column's features), as `grouping` numbers them
        self.at = {
            name: (columns.index(col), i)
            for col, names in by_column.items()
            for i, name in enumerate(names, 1)
        }
        self.codes = codes
        n = len(codes[0])
        self.cls = np.zeros(n, np.int32)
        self.sizes = np.array([n], np.int64)  # no feature kept: one class (as SQL: no GROUP BY)
        self.t = np.zeros(1, np.int64)
        self.z = np.zeros(1, np.int64)

    def judge(self, run: Sequence[Feature], k: int) -> list[tuple[int, int]]:
        """`split_small` of the run, up to and including the first feature kept (the search
        reads no further)."""
        out = []
        for f in run:
            j, at = self.at[f.name]
            below, smallest = self.kernels.judge(self.cls, self.sizes, self.codes[j], at, k,
                                                 self.t, self.z)  # fmt: skip
            out.append((int(below), int(smallest)))
            if not below:
                break
        return out

    def keep(self, f: Feature) -> None:
        j, at = self.at[f.name]
        self.cls, self.sizes = self.kernels.refine(self.cls, len(self.sizes), self.codes[j], at)
        self.t = np.zeros(len(self.sizes), np.int64)
        self.z = np.zeros(len(self.sizes), np.int64)


def forward_search(
    conn: psycopg.Connection, source: sql.Composable, ranked: Sequence[Feature], k: int,
    codes: Sequence[np.ndarray] | None = None,
) -> Selection:  # fmt: skip
    """RFKA's Algorithm 1 (and Greedy_Hamdist's search): try the features in rank order, keep
    one when the projection onto the kept ones and it stays k-anonymous.

    Binary features (one-hot indicators) are tried in batches by `split_small`: one query
    judges a run of them against the features kept so far, exactly as one query each would,
    up to the first it keeps; the rest are tried again against the new classes. The next batch
    is twice the run that ended in a kept feature, or twice a batch that kept nothing: a search
    that keeps few features costs a few passes of the source, not one per feature, and one
    that keeps most judges few candidates it then throws away. Given `codes` (the rows of
    `codes_query(source, ranked)`, every candidate an indicator), the batches are judged in
    compiled code (`_Compiled`) instead of queries; `queries` counts the batches either way."""
    out = Selection()
    compiled = _Compiled(ranked, codes) if codes is not None else None
    i, size = 0, FIRST_BATCH
    while i < len(ranked):
        kept = grouping(out.chosen)
        if not ranked[i].binary:
            f = ranked[i]
            below, smallest = small_classes(conn, source, [*kept, f.expr], k)
            tried = [(f, below, smallest)]
        else:
            run = []
            for f in ranked[i:i + size]:
                if not f.binary:
                    break
                run.append(f)
            judged = (
                compiled.judge(run, k) if compiled is not None
                else split_small(conn, source, kept, run, k)
            )  # fmt: skip
            tried = [(f, b, s) for f, (b, s) in zip(run, judged, strict=False)]
        out.queries += 1
        took = None
        for at, (f, below, smallest) in enumerate(tried):
            i += 1
            if below:
                out.dropped.append((f, below, smallest))
            else:
                out.chosen.append(f)
                if compiled is not None:
                    compiled.keep(f)
                took = at
                break
        # twice the run that ended in a kept feature, or twice the batch that kept nothing
        size = min(2 * (size if took is None else took + 1), BATCH)
    return out


def smallest_class(
    conn: psycopg.Connection, source: sql.Composable, features: Sequence[Feature]
) -> list[int]:
    """Rows of the smallest class of each feature alone (one query for all of them; one-hot
    candidates count theirs with their values, `indicator_smallest`): one hash aggregate per
    feature, which PostgreSQL does faster than one scan of GROUPING SETS over them all (1M
    rows, 7 columns: 0.8-1.0 s against 0.9-1.2 s)."""
    if not features:
        return []
    row = conn.execute(
        sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(
                sql.SQL("(SELECT min(n) FROM (SELECT count(*) AS n FROM {} GROUP BY {}) g)").format(
                    source, f.expr
                )
                for f in features
            ),
            sql.SQL("(SELECT 1) dbanon_one"),
        )
    ).fetchone()
    return [int(n or 0) for n in row]


def indicator_smallest(f: Feature, counts: dict[object, int]) -> int:
    """Rows of the smallest class of the indicator `f` alone, from its key's rows per value
    (None: NULL): the rows with its value, without it and (nullable) with a NULL key."""
    if f.nullable and f.value is None:  # `key = NULL`: NULL everywhere, one class
        return sum(counts.values())
    true = counts.get(f.value, 0)
    null = counts.get(None, 0) if f.nullable else 0
    return min((p for p in (true, sum(counts.values()) - true - null, null) if p > 0), default=0)


# --- rankings -----------------------------------------------------------------------------------


def encode_labels(values: Sequence[object]) -> np.ndarray:
    """Class labels as codes 0..c-1 (NULL is a class of its own)."""
    text = np.array(["\x00NULL" if v is None else str(v) for v in values], dtype=object)
    return np.unique(text, return_inverse=True)[1].astype(np.int64)


# The trees grown, scored and let go at a time hold about this much: a fully grown tree of a
# big sample holds megabytes (one class-count row per node), so a forest held whole grows with
# --trees; a small sample's trees go 64 at a time (each fit call has a fixed cost).
FOREST_BYTES = 32 << 20


def trees_at_once(rows: int, classes: int) -> int:
    """Trees per fit call: a fully grown tree has up to ~1.3 nodes per row (two per distinct
    in-bag row, 63 % of the rows), each of 64 bytes and one float64 count per class."""
    tree = 1.3 * max(rows, 1) * (64 + 8 * max(classes, 1))
    return int(min(64, max(2, FOREST_BYTES // tree)))


def oob_permutation_importance(
    x: np.ndarray, y: np.ndarray, trees: int = 1000, seed: int = 0, jobs: int = DEFAULT_JOBS
) -> np.ndarray:
    """Each column's importance: the mean over trees of (correct - correct with the column
    permuted) / OOB rows, on each tree's out-of-bag rows (the paper's formula 3).

    Speed: only the features a tree splits on are permuted (any other leaves its predictions as
    they are: a drop of 0); their permuted copies of the tree's OOB rows are stacked into one
    float32 array and predicted at once (no per-call input checks), trees in `jobs` threads
    (tree traversal releases the GIL); each tree permutes with its own generator, so the result
    does not depend on the threads' order.

    Memory: the forest is grown `trees_at_once` trees at a time (warm_start: each tree gets the
    seed it would get in one fit, so the trees are the one fit's) and each tree's structure is
    let go once scored; the forest's own OOB score (`oob_score`, a figure nothing here reads)
    is not computed, and no tree depends on it."""
    from joblib import Parallel, delayed
    from sklearn.ensemble import RandomForestClassifier

    n, d = x.shape
    x32 = np.ascontiguousarray(x, dtype=np.float32)  # what the forest fits on in any case
    forest = RandomForestClassifier(n_estimators=0, random_state=seed, n_jobs=jobs,
                                    warm_start=True)  # fmt: skip
    seeds = np.random.SeedSequence(seed).spawn(trees)

    def drop(tree: Any, inbag: np.ndarray, ss: np.random.SeedSequence) -> np.ndarray | None:
        oob = np.ones(n, dtype=bool)
        oob[inbag] = False
        xo, yo = x32[oob], y[oob]
        m = len(yo)
        if m == 0:
            return None
        rng = np.random.default_rng(ss)
        # a feature the tree never splits on cannot change its predictions: drop 0
        used = np.unique(tree.tree_.feature[tree.tree_.feature >= 0])
        stack = np.tile(xo, (len(used) + 1, 1))
        for i, j in enumerate(used):
            stack[(i + 1) * m : (i + 2) * m, j] = xo[rng.permutation(m), j]
        predicted = tree.predict(stack, check_input=False).astype(np.int64)
        right = forest.classes_[predicted] == np.tile(yo, len(used) + 1)
        per = right.reshape(len(used) + 1, m).sum(axis=1)
        out = np.zeros(d)
        out[used] = (per[0] - per[1:]) / m
        return out

    drops: list[np.ndarray | None] = []
    step = trees_at_once(n, len(np.unique(y)))
    for start in range(0, trees, step):
        forest.set_params(n_estimators=min(start + step, trees))
        forest.fit(x32, y)
        every, grown = forest.estimators_, forest.estimators_[start:]
        forest.estimators_ = grown  # the new trees' in-bag rows only (drawn again per call)
        inbag = forest.estimators_samples_
        forest.estimators_ = every
        drops += Parallel(n_jobs=jobs, prefer="threads")(
            delayed(drop)(t, s, ss)
            for t, s, ss in zip(grown, inbag, seeds[start:start + len(grown)], strict=True)
        )
        for t in grown:  # scored: its nodes go, its seed (all warm_start reads) stays
            del t.tree_
    kept = [v for v in drops if v is not None]
    return np.mean(kept, axis=0) if kept else np.zeros(d)


def hamdist_scores(b: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per binary feature (columns of `b`, 0/1): the share of pairs of rows of different
    classes whose values on it differ."""
    b = (np.asarray(b) != 0).astype(np.float64)
    classes = np.unique(y)
    ones = np.array([b[y == c].sum(axis=0) for c in classes])  # per class: rows with 1
    sizes = np.array([(y == c).sum() for c in classes], dtype=np.float64)
    return hamdist_from_counts(ones, sizes)


_PER_QUERY = 1000  # aggregates per query (a target list holds at most 1,664 entries)


def hamdist_counts(
    conn: psycopg.Connection, source: sql.Composable, features: Sequence[Feature],
    label: sql.Composable,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(per class and feature: rows where it holds, per class: rows), counted in PostgreSQL
    in one pass per 1,000 features (`count(*) FILTER`, grouped by the label, NULL a class of
    its own): the measure needs only these, so no row leaves the database."""
    chunks = [features[i : i + _PER_QUERY] for i in range(0, len(features), _PER_QUERY)]
    parts: list[np.ndarray] = []
    sizes = np.zeros(0)
    for chunk in chunks or [[]]:
        rows = conn.execute(
            sql.SQL("SELECT count(*){} FROM {} GROUP BY {} ORDER BY {} NULLS FIRST").format(
                sql.SQL("").join(sql.SQL(", count(*) FILTER (WHERE {})").format(f.expr)
                                 for f in chunk),  # fmt: skip
                source, label, label,
            )
        ).fetchall()
        table = np.array(rows, dtype=np.float64).reshape(len(rows), len(chunk) + 1)
        sizes = table[:, 0]
        parts.append(table[:, 1:])
    return np.hstack(parts), sizes


def hamdist_from_counts(ones: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """`hamdist_scores` from the counts alone: `ones` (classes x features) the rows of each
    class where the feature is 1, `sizes` each class's rows."""
    ones = np.asarray(ones, dtype=np.float64)
    sizes = np.asarray(sizes, dtype=np.float64)[:, None]
    zeros = sizes - ones
    apart = np.zeros(ones.shape[1])
    pairs = 0.0
    for i in range(len(sizes)):
        for j in range(i + 1, len(sizes)):
            apart += ones[i] * zeros[j] + zeros[i] * ones[j]
            pairs += float(sizes[i, 0] * sizes[j, 0])
    return apart / pairs if pairs else apart


def equal_width_edges(low: float, high: float, bins: int) -> list[float]:
    """The bins + 1 edges of equal-width bins over [low, high]."""
    if high <= low:
        return [low, low]
    return [low + (high - low) * i / bins for i in range(bins + 1)]
