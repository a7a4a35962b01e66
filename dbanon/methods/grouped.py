"""The shared path of array methods that group rows (k-member, Mondrian, (θ,k)):

stream key, QI (and sensitive) columns out with COPY into numpy arrays, with what the release and
the map need of each row (dbanon.methods.grouped_rows); the algorithm returns a group id per row
(pure code); every group is labelled once and the release written from the arrays with one
binary COPY — numeric and date QIs as their group's [min, max] (text or typed range,
dbanon.core.generalise), categorical ones as the label of their lowest common ancestor, or
without a hierarchy the set of values present — then the sensitive and `--keep` columns as they
are, never the row key nor any other column, rows in secret random order. The map and the
intersection guard read the same arrays (dbanon.setlogic.grouped_map). On a refresh the
policy keeps persisting rows in their groups (persist), releases groups whole (sealed) or
regroups.
"""

from __future__ import annotations

from abc import abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms import persist
from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.persist import Counts, History, Judge, persist_groups, subset
from dbanon.algorithms.sealed import Repair, seal_groups
from dbanon.core import generalise
from dbanon.core.groupsort import distinct_each, unique_inverse, unique_share
from dbanon.db.rows import equal_as_bytes
from dbanon.db.stream import Coded, Keys, copy_columns, copy_in_ids
from dbanon.errors import DbanonError, quote_name
from dbanon.methods.base import BuildContext, Method, Option
from dbanon.methods.grouped_rows import (
    codes,
    encode,
    extract,
    extract_rows,
    label_groups,
    mapped,
    objects,
    write_release,
)
from dbanon.metrics.grouploss import loss_of_groups
from dbanon.setlogic import composition, grouped_map

# What the methods import from here as before (the experiments hash their modules' sources).
__all__ = ["codes", "encode", "extract"]

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved
    from dbanon.models.base import Spread

POLICY = Option(
    "refresh_policy",
    str,
    "persist",
    "On refresh: keep persisting rows in their groups (safe when releases are intersected), "
    "or regroup from scratch.",
    ("persist", "regroup"),
)
GROUP_POLICY = Option(
    "refresh_policy",
    str,
    "persist",
    "On refresh: keep persisting rows in their groups, new rows joining them (persist: safe "
    "against intersection, not against a diff that shows one joiner or leaver); release groups "
    "whole, kept with their values or new, a group that lost rows mended by newcomers holding "
    "its values, rows that form no safe group waiting (sealed: safe against both, wider "
    "cells); or regroup from scratch.",
    ("persist", "sealed", "regroup"),
)
RANGES = Option(
    "ranges",
    str,
    generalise.DEFAULT_FORM,
    "Numeric and date QIs as readable text ([36,37], as PostgreSQL writes a range) or typed "
    "ranges (int4range...).",
    generalise.RANGE_FORMS,
)


def history(conn: psycopg.Connection, r: Resolved, keys: Keys) -> History | None:
    """What a consumer who kept every earlier release knows of each row (persist.History):
    its sensitive value now, and its running intersection of plausible values in the
    release's map, both as small integer codes (tags as dbanon.setlogic.composition writes
    them). None without a sensitive column (a persisting row's plausible rows are then its
    class). A refresh that extracts its rows itself reads the same in its extract
    (`history_of`)."""
    if not r.sensitive or r.release_id is None:
        return None
    rows = sql.Identifier("dbanon_persist_rows")
    conn.execute(
        sql.SQL("CREATE TEMP TABLE {} (key text, gid int4) ON COMMIT DROP").format(rows)
    )  # gid: the row's position in `keys`
    copy_in_ids(conn, rows, keys, np.arange(len(keys)))
    pos, vid, tags = copy_columns(
        conn,
        sql.SQL(
            "SELECT t.gid::float8, coalesce(m.vid, -1)::float8, {tag} "
            "FROM {rows} t JOIN {src} s ON s.{key}::text = t.key "
            "LEFT JOIN {map} m ON m.key = t.key"
        ).format(tag=composition.tag(r.sensitive[0]), rows=rows, src=r.source.ident,
                 key=r.key.ident, map=composition.map_of(conn, r.release_id)),  # fmt: skip
        ["float8", "float8", "text"],
    )
    conn.execute(sql.SQL("DROP TABLE {}").format(rows))
    assert isinstance(tags, Coded)
    at = np.asarray(pos, dtype=np.int64)
    code, hid = np.full(len(keys), -1, dtype=np.int64), np.full(len(keys), -1.0)
    code[at], hid[at] = tags.codes, np.asarray(vid)
    return history_of(conn, r, Coded(tags.values, code), hid)


def history_of(conn: psycopg.Connection, r: Resolved, tags: Coded,
               vid: np.ndarray) -> History | None:  # fmt: skip
    """persist.History from each row's tag now (code -1: a row not read) and the id of its set
    of plausible values in the map (-1: none, a new row). The sets are read by id; their values
    get the codes of the rows' tags, and new codes for values no row has now."""
    if not r.sensitive or r.release_id is None:
        return None
    vid = np.asarray(vid, dtype=np.int64)
    mapped = vid >= 0
    present, place = unique_inverse(vid[mapped])  # the sets, and each mapped row's among them
    codes = grouped_map.Codes(tags)  # the rows' tags' codes, then new ones
    found, sets = grouped_map.read_sets(conn, composition.sets_of(conn, r.release_id), present,
                                        codes)  # fmt: skip
    if not np.array_equal(found, present):
        raise DbanonError(f"the map of release {quote_name(r.spec.name)} lacks sets of plausible "
                          "values its rows point at; --regroup starts over")
    values = [np.unique(sets.elems[a:b]) for a, b in zip(sets.offs[:-1].tolist(),
                                                          sets.offs[1:].tolist(), strict=True)]
    coded = codes.index
    hids = np.full(len(vid), -1, dtype=np.int64)
    hids[mapped] = place
    tag = np.asarray(tags.codes, dtype=np.int64)

    def counts() -> dict[str, int]:
        n = np.bincount(tag[tag >= 0], minlength=len(tags.values))
        return {t: int(c) for t, c in zip(tags.values, n.tolist(), strict=True) if c and t}

    spread = composition.spread_of(conn, r.models, counts)
    return History(
        tag, hids, values, r.k or 1, composition.values_needed(r.models), coded,
        None if spread is None else coded_spread(spread, coded),
    )  # fmt: skip


def coded_spread(spread: Spread, coded: dict[str, int]) -> persist.Spread:
    """A promised spread over History's value codes (`coded`: tag -> code); categories are
    numbered in their sorted order (as text)."""
    cats = sorted(set(spread.category.values()), key=str)
    index = {c: i for i, c in enumerate(cats)}
    category = np.full(max(coded.values(), default=-1) + 1, -1, dtype=np.int64)
    for t, code in coded.items():
        v = composition.value_of(t)
        if v in spread.category:
            category[code] = index[spread.category[v]]
    need = np.array([spread.need[c] for c in cats], dtype=np.int64)
    return persist.Spread(category, need, spread.least)


def _shown(
    conn: psycopg.Connection, r: Resolved, hist: History | None
) -> Callable[[list[int]], dict[int, np.ndarray]]:
    """The value codes (History's, new codes for values no row has now) that map groups
    showed when last released; without a sensitive column every value is code 0."""
    codes = dict(hist.codes or {}) if hist else {}

    def shown(ids: list[int]) -> dict[int, np.ndarray]:
        out = {}
        for g, tags in composition.shown_of(conn, r.release_id or 0, ids).items():
            if hist is None:
                out[g] = np.zeros(len(tags), dtype=np.int64)
                continue
            out[g] = np.array([codes.setdefault(t, len(codes)) for t in tags], dtype=np.int64)
        return out

    return shown


def _repair(r: Resolved, qi: QIArrays) -> Repair | None:
    """Sealed: blocks come back with newcomers in their leavers' places (sealed.Repair), drawn
    from the run's secret seed (a fresh secret draw for a method without one). Not with
    `--keep` columns: a newcomer's kept cells would tell her row from the leaver's."""
    if r.keep:
        return None
    rng = np.random.default_rng(None if r.seed is None else [int(r.seed), 31])
    return Repair(qi, rng)


def _moved(gid: np.ndarray, unchanged: np.ndarray, hist: History | None) -> np.ndarray:
    """Rows of a released group (or of a waiting block) that changed but still hold a value
    their classes always showed: possibly only their QIs moved (sealed.seal_groups keeps such a
    group when its values are exactly as shown, so a QI update does not retire it, and keeps
    them in their block otherwise)."""
    changed = (gid != -1) & ~unchanged
    if hist is None:
        return changed
    plausible = np.zeros(len(gid), dtype=bool)
    for h in np.unique(hist.history[changed & (hist.history >= 0)]).tolist():
        rows = np.flatnonzero(changed & (hist.history == h))
        plausible[rows] = np.isin(hist.tag[rows], hist.values[h])
    return changed & plausible


def staged(gid: np.ndarray, block: np.ndarray | None) -> np.ndarray:
    """The ids the stage is written with: a row's group, -1 for a row withheld alone, and
    -2 - b for one waiting in block b (`stage_blocks` splits them into gid and w)."""
    if block is None or not (block >= 0).any():
        return gid
    return np.where(block >= 0, -2 - block, gid)


def stage_blocks(conn: psycopg.Connection, stage: sql.Identifier) -> None:
    """Withheld rows in the stage: gid NULL, and column w the block each waits in (NULL:
    none), which the map keeps (dbanon.setlogic.composition.store)."""
    conn.execute(
        sql.SQL(
            "ALTER TABLE {st} ADD COLUMN w int4; "
            "UPDATE {st} SET w = CASE WHEN gid <= -2 THEN -2 - gid END, gid = NULL WHERE gid < 0"
        ).format(st=stage)
    )


def _ids(out: np.ndarray | tuple[np.ndarray, dict[str, Any]]) -> np.ndarray:
    return out[0] if isinstance(out, tuple) else out


def _rows(sensitive: Any, rows: np.ndarray | slice) -> Any:
    """Some rows of what `cluster` receives as the sensitive column (an array, a tuple of
    arrays, or None)."""
    if sensitive is None:
        return None
    if isinstance(sensitive, tuple):
        return tuple(a[rows] for a in sensitive)
    if isinstance(sensitive, Coded):
        return Coded(sensitive.values, sensitive.codes[rows])
    return sensitive[rows]


def _keys(sensitive: Any) -> list:
    """One hashable sensitive value per row, for the models' in-memory counts."""
    if isinstance(sensitive, tuple):
        return list(zip(*(a.tolist() for a in sensitive), strict=True))
    if isinstance(sensitive, Coded):  # a code per distinct value: counts as the values would
        return sensitive.codes.tolist()
    return sensitive.tolist()


class GroupingMethod(Method):
    """A method whose algorithm maps arrays of QIs to one group id per row."""

    options: ClassVar[tuple[Option, ...]] = (RANGES, GROUP_POLICY)
    # Whether groups gather near rows, so that a persisting row far from its group's centre has
    # moved (a QI update) and a refresh places it again (dbanon.algorithms.persist.moved).
    compact: ClassVar[bool] = True
    releases = (
        "`NAME`: each QI generalised over its group (numbers and dates `[min, max]`, categories "
        "the LCA in their hierarchy or the set of values present), then `--sensitive` and "
        "`--keep` as they are; rows in random order"
    )

    def uses_sensitive(self, r: Resolved) -> bool:
        """Whether the algorithm constrains the sensitive column (it is streamed out then)."""
        return any(m.needs_sensitive for m in r.models)

    def sensitive_stream(self, r: Resolved) -> tuple[sql.Composable, str] | None:
        """How the sensitive column streams out (expression, COPY type); None: as text."""
        return None

    # `cluster` receives a text sensitive column as streamed (a Coded: its distinct values and
    # a code per row), not as an object per row: for methods whose models only count values
    # (k-anonymity, l-diversity), which recoding a million objects in Python cost 0.5 s each
    # time.
    coded_sensitive: ClassVar[bool] = False

    def encode_sensitive(
        self, conn: psycopg.Connection, r: Resolved, values: Coded | np.ndarray
    ) -> Any:
        """What `cluster` receives as `sensitive`, from the column as streamed (a Coded, or
        float64 with NaN for NULL): by default an object array of its values (None: NULL)."""
        if self.coded_sensitive and isinstance(values, Coded):
            return values
        return objects(values)

    @abstractmethod
    def cluster(
        self, r: Resolved, qi: QIArrays, sensitive: Any
    ) -> np.ndarray | tuple[np.ndarray, dict[str, Any]]:
        """Group ids (int) of the rows, or (ids, the algorithm's own figures for the run
        record); ValueError for input the algorithm cannot group."""

    def cluster_many(
        self, r: Resolved, qi: QIArrays, sensitive: Any, roots: list[np.ndarray]
    ) -> list[np.ndarray] | None:
        """Per root (row indexes of qi), the group ids `cluster` gives on those rows alone, in
        one call where the algorithm can (a refresh tries to split a thousand groups: a call
        each is mostly set-up); None: it cannot, `cluster` is called a root at a time."""
        return None

    def build(self, conn: psycopg.Connection, r: Resolved, ctx: BuildContext) -> dict[str, Any]:
        ctx.say(f"streaming {r.rows} rows of {r.source} out with COPY")
        with_sensitive = self.uses_sensitive(r)
        policy = "regroup" if r.regroup else r.options.get("refresh_policy")
        # One scan reads the rows, what the release and the map need of them and what the
        # latest map held of each (every policy: the guard measures every run against it).
        prior = composition.prior(conn, r.source, r.release_id, r.key, r.released_columns,
                                  r.sensitive[0] if r.sensitive else None)  # fmt: skip
        ex = extract_rows(conn, r, with_sensitive, self.sensitive_stream(r), prior)
        qi, keys, sensitive = ex.qi, ex.keys, ex.sensitive
        ex = replace(ex, sensitive=None)  # one per row: held by `sensitive` while it is needed
        if with_sensitive:
            sensitive = self.encode_sensitive(conn, r, sensitive)  # type: ignore[arg-type]
        ctx.lap("extract")
        previous, sealed, figures, block, hist = None, None, {}, None, None
        before = None
        if ex.before is not None and ex.state is not None and policy in ("persist", "sealed"):
            assert r.release_id is not None and ex.old is not None
            before = composition.previous_of(conn, r.release_id, ex.before, ex.state, ex.sizes)
            if ex.tags is not None:
                hist = history_of(conn, r, ex.tags, ex.old.vid)
        if policy in ("persist", "sealed"):
            if policy == "sealed":
                sealed = before
            elif before is not None:  # a row changed since is placed again, as a new one is
                previous = np.where(before.unchanged | before.unknown, before.gid, -1)
                figures["changed_rows"] = int((previous != before.gid).sum())
        try:
            if sealed is not None:
                ctx.say(f"keeping whole groups; grouping the other rows with {self.name}")
                repair = _repair(r, qi)
                gid, block, figures = seal_groups(
                    sealed.gid, sealed.unchanged, sealed.sizes,
                    lambda rows: _ids(self.cluster(r, subset(qi, rows), _rows(sensitive, rows))),
                    self._holds(r, sensitive), r.k or 2, composition.values_needed(r.models),
                    hist.tag if hist else np.zeros(len(keys), dtype=np.int64),
                    _shown(conn, r, hist), hist, repair=repair,
                    moved=None if repair is None else _moved(sealed.gid, sealed.unchanged, hist),
                )  # fmt: skip
                out = gid, figures
            elif previous is None:
                ctx.say(f"clustering with {self.name}")
                out = self.cluster(r, qi, sensitive)
            else:
                ctx.say(f"clustering the new rows with {self.name}; persisting rows keep groups")
                out = persist_groups(
                    qi, previous,
                    lambda rows: _ids(self.cluster(r, subset(qi, rows), _rows(sensitive, rows))),
                    self._holds(r, sensitive), r.k or 2, hist, self.compact,
                    unchanged=None if before is None else before.unchanged,
                    sizes=before.sizes if _same_promise(conn, r) else None,
                    many=lambda roots: self.cluster_many(r, qi, sensitive, roots),
                )  # fmt: skip
        except ValueError as e:
            raise DbanonError(f"{self.name} cannot publish {r.source}: {e}") from None
        gid, found = out if isinstance(out, tuple) else (out, {})
        sensitive = out = None  # the algorithm's input: not held at the peak that follows
        figures = {**figures, **found}
        withheld = gid < 0  # sealed: a row that waits
        if withheld.all():
            raise DbanonError(
                f"{self.name} cannot publish {r.source}: every row is withheld (no group of the "
                "rows that changed keeps the promise); --regroup starts over"
            )
        # The rows released: no copy of the QI arrays when none waits (a first publish).
        shown_qi, shown_gid = (
            (subset(qi, ~withheld), gid[~withheld]) if withheld.any() else (qi, gid)
        )
        sets = [c.name not in r.hierarchies for c in r.qi if r.is_categorical(c)]
        # value-set columns' leaf loss as Xu et al. count it, over the rows released
        loss = loss_of_groups(shown_qi, shown_gid, sets)
        ctx.lap("cluster")
        ctx.say("materialising the release")
        built = ctx.made(r.objects[0])
        released = np.where(withheld, -1, gid)
        if ex.tags is not None and equal_as_bytes(conn, r.source, r.sensitive[:1]):
            shown_tags = ex.tags.codes[~withheld] if withheld.any() else ex.tags.codes
            ctx.unique_shares = {r.sensitive[0].name: unique_share(shown_tags)}
        labels, value_sets = label_groups(conn, r, ex, shown_qi, released)
        ex = replace(ex, qi=None)  # the QI arrays go before the rows are written
        qi = shown_qi = None  # type: ignore[assignment]
        write_release(conn, r, r.stored(built), ex, labels, released)
        wait = None if block is None else np.where(withheld, block, -1)
        ctx.mapped = mapped(ex, released, wait)  # the map and the guard read the same rows
        ctx.lap("materialise")
        metrics: dict[str, Any] = {**loss.as_dict(), **figures}
        if value_sets:  # columns without a hierarchy, released as the values present
            metrics["value_set_loss"] = value_sets
        if previous is not None:
            metrics["persisting_rows"] = int((previous >= 0).sum())  # unchanged ones
        return metrics


    @staticmethod
    def _holds(r: Resolved, sensitive: Any) -> Callable[[np.ndarray], bool]:
        """Whether a group of rows keeps every promised model, in memory (the model's
        `class_holds` over what `cluster` receives as the sensitive column)."""

        def counts(rows: np.ndarray) -> Counter:
            if sensitive is None:
                return Counter({0: len(rows)})
            return Counter(_keys(_rows(sensitive, rows)))

        needs = sensitive is not None and any(m.needs_overall for m in r.models)
        overall = Counter(_keys(sensitive)) if needs else None

        def holds(rows: np.ndarray) -> bool:
            here = counts(rows)
            return all(m.class_holds(here, overall if m.needs_overall else None) for m in r.models)

        floors = [m.floors() for m in r.models]
        if any(f is None for f in floors):
            return holds
        least = max(f[0] for f in floors), max(f[1] for f in floors)  # type: ignore[index]
        alone = sensitive is None or least[1] <= 1  # the rows alone decide
        codes = np.zeros(0, dtype=np.int64)
        if not alone and isinstance(sensitive, Coded):  # each row's value as a code: its own
            codes = sensitive.codes.astype(np.int64)
        elif not alone:
            keys = _keys(sensitive)
            index = {v: i for i, v in enumerate(dict.fromkeys(keys))}
            codes = np.fromiter(map(index.__getitem__, keys), np.int64, len(keys))

        def many(order: np.ndarray, bounds: np.ndarray, groups: np.ndarray) -> np.ndarray:
            """Every group's rows and distinct values counted at once (`PrivacyModel.floors`):
            the same answers as `holds`, whose counts have one value (0) without a column."""
            sizes = bounds[groups + 1] - bounds[groups]
            if alone:
                distinct = (sizes > 0).astype(np.int64)
            else:
                distinct = distinct_each(order, bounds, groups, codes)
            return (sizes >= least[0]) & (distinct >= least[1])

        def counted(rows: np.ndarray) -> bool:
            """`holds` when the rows alone decide (called for every merge of a refresh)."""
            return len(rows) >= max(least[0], 1)

        promise = Counts(least[0], 1 if alone else least[1], codes)  # for compiled merges
        return Judge(counted if alone else holds, many, promise)


def _same_promise(conn: psycopg.Connection, r: Resolved) -> bool:
    """Whether a group kept whole still holds as it held when last released: the release
    promises what it promised then (its stored spec's models and sensitive columns, which
    this run replaces only when it is recorded), and nothing it promises reads the whole
    table (t-closeness, (θ,k)'s need from the table)."""
    if r.release_id is None or any(m.needs_overall for m in r.models):
        return False
    before = conn.execute(
        "SELECT spec -> 'models', spec -> 'sensitive' FROM dbanon.release WHERE id = %s",
        [r.release_id],
    ).fetchone()
    return before is not None and (before[0], before[1]) == (r.spec.models, r.spec.sensitive)
