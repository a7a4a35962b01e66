"""Releases that keep true values and drop columns: the projection of the source onto a subset
of its quasi-identifiers (features) that is k-anonymous, chosen greedily in the order of a
ranking (dbanon.algorithms.featuresel). `rfka` and `hamdist` are two rankings of this one flow.

Decisions (the papers are silent on a live database):
- The class label is the one `--sensitive` column; it is released as it is, with the columns
  the DBA names in `--keep` (common to every method since; guarded by
  dbanon.lifecycle.identifying).
- Features are the QI columns themselves (`plain`) or one-hot indicators (`onehot`): a
  categorical QI gives one boolean column per value (`col=value`), a numeric or date QI is cut
  into `--bins` equal-width bins over its range at publish time (`col=[lo,hi)`, ends open to
  values inserted later) and gives one per non-empty bin. Indicator names longer than
  PostgreSQL's 63 bytes become `col#i` (the report maps them).
- The release is, by default, a VIEW over the source (`--as table` materialises it): it shows
  the chosen features, the label and the kept columns of every row whose class (its values on
  the chosen features) has at least k rows *now*, counted by a window function at every read,
  so it stays k-anonymous as the source changes. This is release_select's (fulldomain's)
  window-count suppression; it is written here rather than called because release_select
  releases generalised text and a projection releases the values with their own types.
  Rows come out in random order, the key is never selected; security_barrier keeps a
  consumer's leaky WHERE functions off suppressed rows.
- `refresh` runs the selection again on the source as it is; the run records whether the
  chosen subset changed (`subset_changed`), and the view is replaced by the new one.
- The report (`dbanon report NAME`) lists the chosen features in order with their scores, the
  dropped ones with their scores and why: the classes below k (and the smallest one's rows)
  that adding them made.
"""

from __future__ import annotations

import time
import weakref
from abc import abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms.featuresel import (
    Feature,
    Selection,
    codes_query,
    encode_labels,
    equal_width_edges,
    forward_search,
    grouping,
    indicator,
    indicator_smallest,
    smallest_class,
)
from dbanon.db import catalog
from dbanon.db.catalog import DATE, NUMERIC, Column
from dbanon.db.settings import local_settings, work_mem_at_least
from dbanon.db.shuffle import shuffle_key
from dbanon.db.stream import copy_out, fetch_arrays
from dbanon.errors import DbanonError, quote_ident
from dbanon.methods import onehot_rows
from dbanon.methods.base import BuildContext, Built, Check, Method, Option, snapshot_view
from dbanon.models import sizes
from dbanon.models.base import Target
from dbanon.setlogic.fulldomain import RELEASE_WORK_MEM, _fresh

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved

MAX_IDENT = 63  # PostgreSQL's identifier length in bytes

AS = Option(
    "as", str, "view", "A materialised table, or a live view over the source.", ("table", "view")
)
REFRESH = Option(
    "refresh_policy", str, "keep",
    "On refresh: release the features the last run chose (keep: the release keeps its columns, "
    "so what consumers built over it keeps working; classes under k are left out as always), "
    "or rank and search again (search: the columns may change, and a consumer's object over "
    "one that goes stops the refresh, named).",
    ("keep", "search"),
)
BINS = Option(
    "bins", int, 5,
    "Equal-width bins of a numeric QI when features are one-hot (at most its distinct values).",
    low=2,
)  # fmt: skip


def _number(col: Column) -> sql.Composable:
    if col.kind == DATE:
        return sql.SQL("extract(epoch FROM {}::timestamp)::float8").format(col.ident)
    return sql.SQL("{}::float8").format(col.ident)


def _short(name: str, col: str, i: int) -> str:
    return name if len(name.encode()) <= MAX_IDENT else f"{col}#{i}"


def onehot_features(
    conn: psycopg.Connection, source: sql.Composable, r: Resolved, bins: int
) -> list[Feature]:
    """One boolean feature per value of a categorical QI, per non-empty equal-width bin of a
    numeric or date one (see the module doc)."""
    return onehot_candidates(conn, source, r, bins)[0]


def onehot_candidates(
    conn: psycopg.Connection, source: sql.Composable, r: Resolved, bins: int,
    label: sql.Composable | None = None, stream: bool = True,
) -> Candidates:
    """`onehot_features` and each one's smallest class alone (`smallest_class`), from two scans
    of the source: the numeric QIs' ranges, then every QI's distinct values (bins) with their
    rows in one GROUPING SETS query, each set in its own order. With `label`, each set is
    grouped by the label too, and the counts per label class come with them (`per_class`, as
    `hamdist_counts` counts them: classes in the label's order, NULL first), from the same
    scan. With a label (the run's first sensitive column) over the run's source, and
    `stream`, the keys and the label are streamed out once instead and counted in numpy
    (dbanon.methods.onehot_rows), and the rows kept for the search (`rows`)."""
    numeric = [c for c in r.qi if c.kind in (NUMERIC, DATE) and not r.is_categorical(c)]
    ranges: dict[str, tuple[Any, Any]] = {}
    if numeric:
        row = conn.execute(
            sql.SQL("SELECT {} FROM {}").format(
                sql.SQL(", ").join(
                    sql.SQL("min({x}), max({x})").format(x=_number(c)) for c in numeric
                ),
                source,
            )
        ).fetchone()
        ranges = {c.name: (row[2 * i], row[2 * i + 1]) for i, c in enumerate(numeric)}
    keys: list[sql.Composable] = []
    for col in r.qi:
        if col.name in ranges:
            lo, hi = (float(v) for v in ranges[col.name])
            keys.append(
                sql.SQL("least(greatest(width_bucket({}, {}, {}, {}), 1), {})").format(
                    _number(col), sql.Literal(lo), sql.Literal(hi), sql.Literal(bins),
                    sql.Literal(bins),
                )
                if hi > lo
                # 1 for a constant QI, as an expression of its column: a constant (`1::int`)
                # was the same grouping column for two such QIs, and beside a window function
                # GROUPING() told the second's rows from neither (seen on PostgreSQL 18)
                else sql.SQL("(1 + 0 * coalesce({}, 0))::int").format(_number(col))
            )  # fmt: skip
        else:
            keys.append(sql.SQL("{}::text").format(col.ident))
    values: list[list[Any]] = [[] for _ in keys]
    counts: list[dict[object, int]] = [{} for _ in keys]
    by_class: list[dict[object, dict[int, int]]] = [{} for _ in keys]  # with a label
    streamed = (
        onehot_rows.read(conn, r, keys, [c.name in ranges for c in r.qi], r.sensitive[0])
        if stream and label is not None and keys and source == r.source.ident
        else None
    )  # fmt: skip
    if streamed is not None:  # the rows read once, counted in numpy (dbanon.methods.onehot_rows)
        for j, (vals, table) in enumerate(zip(streamed.rows.values, streamed.per_class,
                                              strict=True)):  # fmt: skip
            values[j] = vals
            for v, row in zip(vals, table.tolist(), strict=True):
                counts[j][v] = sum(row)
                by_class[j][v] = {c: n for c, n in enumerate(row) if n}
    elif keys:
        which = sql.SQL("CASE {} END").format(sql.SQL(" ").join(
            sql.SQL("WHEN GROUPING({}) = 0 THEN {}").format(x, sql.Literal(j))
            for j, x in enumerate(keys)
        ))  # fmt: skip
        # with a label: its class (1.. in the label's order, NULL first) and the label in
        # every set; a set's rows in its key's order still (the class's order within a key)
        cls = (sql.SQL("") if label is None else sql.SQL(
            ", dense_rank() OVER (ORDER BY {} NULLS FIRST)").format(label))  # fmt: skip
        rows = conn.execute(
            sql.SQL(
                "SELECT {which}, {keys}{cls}, count(*) FROM {src} GROUP BY GROUPING SETS "
                "({sets}) ORDER BY {by}"
            ).format(
                which=which, keys=sql.SQL(", ").join(keys), cls=cls, src=source,
                sets=sql.SQL(", ").join(
                    sql.SQL("({})").format(x if label is None else sql.SQL("{}, {}").format(
                        x, label)) for x in keys),
                by=sql.SQL(", ").join(sql.Literal(i) for i in range(
                    1, len(keys) + (2 if label is None else 3))),
            )
        ).fetchall()  # fmt: skip
        for row in rows:  # a set's rows in its key's order (the other keys are NULL there)
            j, v, n = row[0], row[1 + row[0]], int(row[-1])
            if v not in counts[j]:
                values[j].append(v)
                counts[j][v] = 0
            counts[j][v] += n
            if label is not None:
                by_class[j].setdefault(v, {})[int(row[-2]) - 1] = n
    out: list[Feature] = []
    smallest: list[int] = []
    held: list[tuple[int, object]] = []  # each feature's key and value
    for j, (col, key, used, rows_of) in enumerate(zip(r.qi, keys, values, counts, strict=True)):
        held += [(j, v) for v in used]
        start = len(out)
        if col.name in ranges:
            lo, hi = (float(v) for v in ranges[col.name])
            edges = equal_width_edges(lo, hi, bins)
            for b in used:
                shown = f"[{edges[b - 1]:g},{edges[b]:g})" if hi > lo else f"{lo:g}"
                name = _short(f"{col.name}={shown}", col.name, b)
                out.append(indicator(name, col.name, key, b, nullable=True))
        else:
            for i, v in enumerate(used, 1):
                name = _short(f"{col.name}={v}", col.name, i)
                out.append(indicator(name, col.name, key, v, nullable=False))
        smallest += [indicator_smallest(f, rows_of) for f in out[start:]]
    if label is None:
        return Candidates(out, smallest)
    classes = 1 + max((c for per in by_class for at in per.values() for c in at), default=-1)
    ones = np.zeros((classes, len(out)))
    for f, (j, v) in enumerate(held):
        for c, n in by_class[j][v].items():
            ones[c, f] = n
    sizes = np.zeros(classes)
    for at in by_class[0].values() if by_class else ():
        for c, n in at.items():
            sizes[c] += n
    return Candidates(out, smallest, (ones, sizes), None if streamed is None else streamed.rows)


_BINS_HEAD = 10_000  # rows _check_bins reads before it counts them all


def _check_bins(conn: psycopg.Connection, r: Resolved, bins: int) -> None:
    """More bins than a numeric QI has distinct values only makes empty bins, and their edges
    are built in memory: `--bins` is at most the largest count of distinct values."""
    numeric = [c for c in r.qi if c.kind in (NUMERIC, DATE) and not r.is_categorical(c)]
    if not numeric:
        return
    cols = sql.SQL(", ").join(c.ident for c in numeric)
    # Passing needs one column with `bins` distinct values, which the first rows read nearly
    # always show (0.3 s of a million-row publish saved); only a refusal, or a table whose
    # head does not show it, counts every row
    head = conn.execute(
        sql.SQL("SELECT {} FROM (SELECT {} FROM {} LIMIT {}) h").format(
            sql.SQL(", ").join(sql.SQL("count(DISTINCT {})").format(c.ident) for c in numeric),
            cols, r.source.ident, sql.Literal(_BINS_HEAD),
        )
    ).fetchone()  # fmt: skip
    if max(head) >= bins:
        return
    # count(DISTINCT) of each, as a count of its non-NULL groups: one hashed GROUPING SETS
    # scan (a column is NULL in the other columns' sets), not a sort per column
    counts = conn.execute(
        sql.SQL("SELECT {} FROM (SELECT {} FROM {} GROUP BY GROUPING SETS ({})) g").format(
            sql.SQL(", ").join(sql.SQL("count({})").format(c.ident) for c in numeric), cols,
            r.source.ident, sql.SQL(", ").join(sql.SQL("({})").format(c.ident) for c in numeric),
        )
    ).fetchone()  # fmt: skip
    most, col = max(zip(counts, (c.name for c in numeric), strict=True))
    if bins > most:
        raise DbanonError(
            f"--bins {bins} is more than the distinct values of any numeric QI of {r.source} "
            f"(at most {most}, of {quote_ident(col)})"
        )


def plain_features(r: Resolved) -> list[Feature]:
    return [Feature(c.name, c.ident, c.name) for c in r.qi]


def design_matrix(
    conn: psycopg.Connection, r: Resolved, features: list[Feature], sample: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The features (numbers; text as codes of its sorted values) and the label's codes of the
    source's rows, or of `sample` of them drawn at random, streamed out with binary COPY."""
    cols = {c.name: c for c in r.qi}
    label = r.sensitive[0]
    parts: list[sql.Composable] = []
    types: list[str] = []
    for f in features:
        col = cols.get(f.name)
        if col is not None and f.expr == col.ident and r.is_categorical(col):
            parts.append(sql.SQL("{}::text").format(col.ident))
            types.append("text")
        elif col is not None and f.expr == col.ident:
            parts.append(_number(col))
            types.append("float8")
        else:
            parts.append(sql.SQL("{}::int::float8").format(f.expr))
            types.append("float8")
    query = sql.SQL("SELECT {}, {}::text FROM {}").format(
        sql.SQL(", ").join(parts), label.ident, r.source.ident
    )
    if 0 < sample < r.rows:
        conn.execute("SELECT setseed(%s)", [(seed % 2**31) / 2**31])
        if r.source.kind in ("r", "m"):  # a row's ctid names it (not across partitions)
            # The same draw (random() once per row, in scan order) over the rows' ctids only,
            # then the sample's rows by ctid in the draw's order: the features' expressions
            # of the sample alone, not of every row before the top-N (0.7 -> 0.2 s at 1M).
            query = sql.SQL(
                "SELECT x.* FROM unnest(ARRAY(SELECT ctid FROM {src} ORDER BY random() "
                "LIMIT {n})) WITH ORDINALITY AS dbanon_sample(t, o), "
                "LATERAL ({query} WHERE ctid = dbanon_sample.t) x ORDER BY dbanon_sample.o"
            ).format(src=r.source.ident, n=sql.Literal(sample), query=query)
        else:
            query = sql.SQL("{} ORDER BY random() LIMIT {}").format(query, sql.Literal(sample))
    data = copy_out(conn, query, [*types, "text"])
    x = np.column_stack(
        [
            np.asarray(v, dtype=np.float64)
            if t == "float8"
            else np.unique(np.asarray(v, dtype=object), return_inverse=True)[1].astype(np.float64)
            for v, t in zip(data[:-1], types, strict=True)
        ]
    )
    return x, encode_labels(data[-1])


def search_source(
    conn: psycopg.Connection, r: Resolved, ranked: list[Feature], k: int,
    rows: onehot_rows.KeyRows | None = None,
) -> Selection:  # fmt: skip
    """`forward_search` of the source; one-hot candidates judged on their codes, read once as
    int4 arrays (one binary value per source column), not by a GROUP BY per batch; or, given
    the candidates' `rows`, made from those."""
    query = codes_query(r.source.ident, ranked)
    codes = (
        None if query is None
        else rows.search_codes([c.name for c in r.qi], ranked) if rows is not None
        else fetch_arrays(conn, query)
    )  # fmt: skip
    return forward_search(conn, r.source.ident, ranked, k, codes)


def projection_select(
    r: Resolved, chosen: list[Feature], extra: list[str], k: int, suppress: bool = True,
    ordered: bool = True, conn: psycopg.Connection | None = None,
) -> sql.Composable:
    """The live projection: chosen features, label and kept columns of the rows whose class
    has at least k rows at read time, in random order (see the module doc). Not `suppress`:
    every row, for a table of features the search found k-anonymous in this very snapshot
    (no class under k to leave out, so no window sort to count them)."""
    names = [f.name for f in chosen] + extra
    size = _fresh("dbanon_class_size", names)
    # the classes counted by one number per one-hot column (`grouping`: which of its shown
    # indicators holds), the same partition as by every indicator, sorted on fewer keys
    exprs = sql.SQL(", ").join(grouping(chosen))
    inner = sql.SQL(", ").join(
        [sql.SQL("{} AS {}").format(f.expr, sql.Identifier(f.name)) for f in chosen]
        + [sql.Identifier(n) for n in extra]
    )
    if not suppress:  # a table's rows: in a secret order the server sorts in parallel
        return sql.SQL("SELECT {} FROM {} s{}").format(
            inner, r.source.ident,
            sql.SQL(" ORDER BY {}").format(shuffle_key(r.source, "s", conn)) if ordered
            else sql.SQL(""),
        )  # fmt: skip
    return sql.SQL(
        "SELECT {out} FROM (SELECT {inner}, count(*) OVER (PARTITION BY {exprs}) AS {size} "
        "FROM {src}) dbanon_classes WHERE {size} >= {k} ORDER BY random()"
    ).format(
        out=sql.SQL(", ").join(map(sql.Identifier, names)),
        inner=inner,
        exprs=exprs,
        size=sql.Identifier(size),
        src=r.source.ident,
        k=sql.Literal(k),
    )


SNAPSHOT = sql.Identifier("dbanon_projection_snapshot")  # a view release, evaluated once


class Candidates(NamedTuple):
    """A candidate list: the features and, when found with them, each one's smallest class
    alone, and (counted by a label) each label class's rows holding each feature and its rows:
    what hamdist's ranking reads (`onehot_candidates`)."""

    features: list[Feature]
    smallest: list[int] | None
    per_class: tuple[np.ndarray, np.ndarray] | None = None
    # every row's value of each key, when the counts were read row by row: the search's codes
    rows: onehot_rows.KeyRows | None = None


# Each live run's candidates (ProjectionMethod._candidates): id of its Resolved -> (a weak
# reference to it, the candidates).
_RUN_FEATURES: dict[int, tuple[weakref.ref[Resolved], Candidates]] = {}


class ProjectionMethod(Method):
    """A k-anonymous projection chosen by a ranking; subclasses say which features and how to
    score them."""

    promises = ("k-anonymity",)
    requires = ("k-anonymity",)
    generalises = False
    # Not a generalised table: the columns released are a chosen subset (one-hot features or a
    # few QIs), so the table-shaped metrics (exposure, query error) have no reader for it yet.
    shape = "projection"
    releases = (
        "`NAME` (live view or table): the chosen QI features (true values, or one-hot "
        "indicators), the label (`--sensitive`) and `--keep` as they are; rows of classes "
        "under k left out at every read"
    )
    attacker = (
        "knows everybody's values of the released features: finds at least k rows for anyone "
        "(the label itself is not protected: the release is for classification)"
    )
    # What a feature's score is, for the report.
    score_name: ClassVar[str] = "score"

    @abstractmethod
    def candidates(self, conn: psycopg.Connection, r: Resolved) -> Candidates:
        """The candidate features of the release, and each one's smallest class alone when
        the scans that found them counted it (None: validate counts it)."""

    @abstractmethod
    def scores(
        self, conn: psycopg.Connection, r: Resolved, features: list[Feature]
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """One score per feature (higher first), and figures for the run record."""

    def _candidates(self, conn: psycopg.Connection, r: Resolved) -> Candidates:
        """The run's candidates, found once: validate and build see the same snapshot (one
        REPEATABLE READ transaction) and the same Resolved, which keys the memo (weakly: another
        run, even one given the same id, never reads it)."""
        held = _RUN_FEATURES.get(id(r))
        if held is not None and held[0]() is r:
            return held[1]
        for stale in [i for i, (ref, _) in _RUN_FEATURES.items() if ref() is None]:
            del _RUN_FEATURES[stale]
        found = self.candidates(conn, r)
        _RUN_FEATURES[id(r)] = (weakref.ref(r), found)
        return found

    # --- lifecycle ------------------------------------------------------------------------------

    def _keep(self, r: Resolved) -> list[str]:
        return [c.name for c in r.keep]  # checked by resolve (dbanon.lifecycle.identifying)

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:
        if len(r.sensitive) != 1:
            raise DbanonError(
                f"--algorithm {self.name} needs exactly one --sensitive column, the class "
                f"label, got {len(r.sensitive)}"
            )
        if r.options.get("bins", 2) < 2:
            raise DbanonError(f"--bins must be at least 2, got {r.options['bins']}")
        if r.options.get("features", "onehot") == "onehot" and r.options.get("bins") is not None:
            _check_bins(conn, r, r.options["bins"])
        label = r.sensitive[0]
        # A first value, then any other: two rows read where the labels differ early, where a
        # DISTINCT ... LIMIT 2 hashes every row first (0.1-0.16 s at a million rows).
        first = conn.execute(
            sql.SQL("SELECT {}::text FROM {} LIMIT 1").format(label.ident, r.source.ident)
        ).fetchone()
        other = first is not None and conn.execute(
            sql.SQL("SELECT 1 FROM {} WHERE {}::text IS DISTINCT FROM %s LIMIT 1").format(
                r.source.ident, label.ident), [first[0]]  # fmt: skip
        ).fetchone()
        if not other:
            raise DbanonError(
                f"label column {quote_ident(label.name)} of {r.source} has one value "
                f"({first[0] if first else None!r}): there is nothing to classify"
            )
        k = r.k or 2
        found = self._candidates(conn, r)
        features, smallest = found.features, found.smallest
        if smallest is None:
            smallest = smallest_class(conn, r.source.ident, features)
        if not any(n >= k for n in smallest):
            best = int(np.argmax(smallest))
            raise DbanonError(
                f"no subset of the QIs of {r.source} is {k}-anonymous, not even one column: the "
                f"least bad, {quote_ident(features[best].name)}, has a smallest class of "
                f"{smallest[best]} rows"
            )

    def build(self, conn: psycopg.Connection, r: Resolved, ctx: BuildContext) -> dict[str, Any]:
        k = r.k or 2
        features = self._candidates(conn, r).features
        ctx.say(f"scoring {len(features)} features")
        started = time.perf_counter()
        score, figures = self.scores(conn, r, features)
        fit = time.perf_counter() - started
        ctx.lap("rank")
        order = sorted(range(len(features)), key=lambda i: (-score[i], features[i].name))
        ranked = [features[i] for i in order]
        started = time.perf_counter()
        kept = self._previous(conn, r) if r.options.get("refresh_policy") == "keep" else None
        searched = not (kept is not None and set(kept) <= {f.name for f in features})
        held = self._candidates(conn, r).rows  # the candidates' rows, when read row by row
        if not searched:
            found = Selection([f for f in ranked if f.name in kept])
            if held is not None:  # no search reads them: let them go now
                held.codes = None
        else:
            ctx.say(f"searching {len(ranked)} features for a {k}-anonymous subset")
            found = search_source(conn, r, ranked, k, held)
        search = time.perf_counter() - started
        per_class = self._candidates(conn, r).per_class
        if searched and per_class is not None:  # every row released: the label's classes
            sizes = per_class[1]  # are the source's, counted with the candidates (its rows
            # per class of the label's own equality, NULL one), not by a GROUP BY of it
            ctx.unique_shares = {r.sensitive[0].name: float((sizes == 1).sum() / sizes.sum())
                                 if sizes.sum() else 0.0}  # fmt: skip
        ctx.lap("search")
        as_view = r.options.get("as", "view") == "view"
        built = ctx.made(r.objects[0], "view" if as_view else "table")
        extra = [r.sensitive[0].name, *self._keep(r)]
        create = (
            "CREATE VIEW {} WITH (security_barrier) AS {}" if as_view else "CREATE TABLE {} AS {}"
        )
        # Released in the candidates' order, not the ranking's (which moves with the data): a
        # refresh that chooses the same features shows the same columns, so the release's view
        # is re-pointed in place and what consumers built over it stays (dbanon.lifecycle.swap).
        picked = {f.name for f in found.chosen}
        shown = [f for f in features if f.name in picked]
        # A table of what the search just found k-anonymous has no class under k to leave out.
        select = projection_select(r, shown, extra, k, suppress=as_view or not searched,
                                   conn=conn)  # fmt: skip
        # the rows' shuffle (and a view's class count) sorted in memory, as fulldomain's release
        with local_settings(conn, work_mem=work_mem_at_least(conn, RELEASE_WORK_MEM)):
            conn.execute(sql.SQL(create).format(r.stored(built), select))
            if as_view:
                # Evaluated once, in the publish's (repeatable read) snapshot: the checks and
                # the figures read this copy, exactly the rows a reader of the view sees now.
                # A projection the search found k-anonymous in this snapshot has no class
                # for the view to leave out: its rows are every source row's features, copied
                # without the view's class count and shuffle (sorts of every row: 4-5 s at
                # 1M rows against 1 s), and the checks still count its classes.
                snapshot_view(conn, SNAPSHOT, r.stored(built), None if not searched else
                              projection_select(r, shown, extra, k, suppress=False,
                                                ordered=False))  # fmt: skip
        ctx.lap("materialise")
        of = {f.name: float(score[i]) for i, f in enumerate(features)}
        chosen = [f.name for f in found.chosen]
        return {
            **figures,
            "features": len(features),
            "chosen": [f"{n} ({self.score_name} {of[n]:.4g})" for n in chosen],
            "dropped": [
                f"{f.name} ({self.score_name} {of[f.name]:.4g}): with it {below} classes below "
                f"k={k}, the smallest {smallest} rows"
                for f, below, smallest in found.dropped
            ],
            "chosen_features": chosen,
            "scores": {n: round(v, 6) for n, v in of.items()},
            "search_queries": found.queries,
            "seconds_rank": round(fit, 4),
            "seconds_search": round(search, 4),
            "subset_changed": self._changed(conn, r, chosen),
        }

    def _previous(self, conn: psycopg.Connection, r: Resolved) -> list[str] | None:
        """The features the last successful run chose (None: a first publish)."""
        if r.release_id is None:
            return None
        row = conn.execute(
            """SELECT metrics->'chosen_features' FROM dbanon.run WHERE release_id = %s
               AND status = 'succeeded' ORDER BY finished_at DESC LIMIT 1""",
            [r.release_id],
        ).fetchone()
        return None if row is None or row[0] is None else list(row[0])

    def _changed(self, conn: psycopg.Connection, r: Resolved, chosen: list[str]) -> bool | None:
        """Whether the chosen subset differs from the last successful run's (None: first)."""
        previous = self._previous(conn, r)
        return None if previous is None else sorted(previous) != sorted(chosen)

    def rechecking(self, conn: psycopg.Connection, r: Resolved, built: list[Built]) -> None:
        """A published view is checked as its publish checked it: on a snapshot of its rows."""
        if r.options.get("as", "view") == "view":
            snapshot_view(conn, SNAPSHOT, r.stored(built[0]))

    def checked_relation(self, r: Resolved, built: list[Built]) -> sql.Composable:
        if r.options.get("as", "view") == "view":
            return SNAPSHOT
        return super().checked_relation(r, built)

    def _target(self, conn: psycopg.Connection, r: Resolved, b: Built) -> Target:
        """The released relation's classes (a view's as its snapshot has them): its columns
        but the label and the kept ones."""
        extra = {r.sensitive[0].name, *self._keep(r)}
        cols = catalog.columns(conn, catalog.Relation(r.build_schema, b.build))
        qi = [c for c in cols if c not in extra]
        return Target(self.checked_relation(r, [b]), qi, r.sensitive[0].name)

    def risk_target(
        self, conn: psycopg.Connection, r: Resolved, built: list[Built]
    ) -> Target | None:
        """A k-anonymous projection groups rows by the features it shows."""
        t = self._target(conn, r, built[0])
        return Target(t.relation, t.qi)

    def checks(self, r: Resolved, built: list[Built]) -> list[Check]:
        """Every promised model on the relation as published, over the features it shows."""

        def check(m: Any) -> Check:
            return Check(m.name, lambda conn: m.check(conn, self._target(conn, r, built[0])))

        return [check(m) for m in r.models]

    def figures(
        self, conn: psycopg.Connection, r: Resolved, built: list[Built], checked: dict[str, Any]
    ) -> dict[str, Any]:
        """The base's figures over the features shown: the histogram the k-anonymity check
        counted (dbanon.models.sizes, shared within the publish's figures step)."""
        t = self._target(conn, r, built[0])
        return sizes.figures(sizes.histogram(conn, t.relation, t.qi))
