"""The shared path of array methods that group rows (k-member, Mondrian):

stream key, QI (and sensitive) columns out with COPY into numpy arrays; the algorithm returns a
group id per row (pure code); the ids stream back with COPY into a temporary staging table; one
CREATE TABLE AS joins source and ids and generalises every QI per group — numeric and date QIs to
their [min, max] (text or typed range, dbanon.core.generalise), categorical ones to the label of
their lowest common ancestor, or without a hierarchy to the set of values present (labelled once per
group in numpy and staged, see `stage_labels`) — then the sensitive and `--keep` columns as they
are, never the row key nor any other column, rows in random order.
"""

from __future__ import annotations

from abc import abstractmethod
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms import persist
from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.persist import History, persist_groups, subset
from dbanon.algorithms.sealed import Repair, seal_groups
from dbanon.core import generalise
from dbanon.core.hierarchy import Hierarchy
from dbanon.db import catalog
from dbanon.db.catalog import Column
from dbanon.db.settings import analyze_stage
from dbanon.db.stream import Coded, Keys, copy_columns, copy_in_ids
from dbanon.errors import DbanonError, offenders, quote_ident, quote_name
from dbanon.methods.base import BuildContext, Method, Option
from dbanon.metrics.loss import loss_report
from dbanon.setlogic import composition

STAGE = sql.Identifier("dbanon_stage")  # (key, gid) of this run; dropped at commit
LABELS = sql.Identifier("dbanon_group_labels")  # (gid, label of each categorical QI)

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


def codes(values: np.ndarray) -> tuple[np.ndarray, list[str | None]]:
    """Integer codes of sensitive values (NULL a value of its own) and the value of each code."""
    coded = Coded.of(values)
    return coded.codes, coded.values


def encode(r: Resolved, col: Column, values: Coded) -> tuple[np.ndarray, Hierarchy]:
    """Leaf ids of a categorical QI's values in its hierarchy (a flat one without); a value
    the hierarchy lacks is an error naming every missing value. Looked up once per distinct
    value."""
    h = r.hierarchies.get(col.name) or Hierarchy.flat(col.name, values.values)
    leaves: dict[str | None, int] = dict(h.leaves)
    leaf = np.array([leaves.get(v, -1) for v in values.values], dtype=np.int32)
    if (leaf < 0).any():
        missing = sorted((v for v, x in zip(values.values, leaf, strict=True) if x < 0), key=str)
        raise DbanonError(
            f"values of column {quote_ident(col.name)} are not in hierarchy {quote_name(h.name)}: "
            f"{offenders(missing)}"
        )
    return leaf[values.codes], h


def extract(
    conn: psycopg.Connection,
    r: Resolved,
    with_sensitive: bool,
    stream: tuple[sql.Composable, str] | None = None,
) -> tuple[Keys, QIArrays, np.ndarray | None]:
    """`extract_with` without what a refresh reads of the latest release."""
    return extract_with(conn, r, with_sensitive, stream)[:3]  # type: ignore[return-value]


def extract_with(
    conn: psycopg.Connection,
    r: Resolved,
    with_sensitive: bool,
    stream: tuple[sql.Composable, str] | None = None,
    prior: composition.Prior | None = None,
) -> tuple[Keys, QIArrays, np.ndarray | None, list[Any]]:
    """Stream key, QI (and sensitive) columns out with COPY and encode them for the algorithms.

    Nothing is held per value as a Python object (dbanon.db.stream): keys stay bytes, numeric
    QIs float64, categorical ones codes. The sensitive column comes as an object array of its
    values (None for NULL): as text, or as `stream` says (an expression over the source's
    columns and its COPY type, text or float8). With `prior` (a refresh), the same scan reads
    what the latest release's map holds of each row: its columns come last, as streamed."""
    exprs: list[sql.Composable] = [sql.SQL("{}::text").format(r.key.ident)]
    kinds = ["key"]
    for col in r.qi:
        if r.is_categorical(col):
            exprs.append(sql.SQL("{}::text").format(col.ident))
            kinds.append("text")
        elif col.kind == catalog.DATE:
            exprs.append(sql.SQL("extract(epoch FROM {})::float8").format(col.ident))
            kinds.append("float8")
        else:
            exprs.append(sql.SQL("{}::float8").format(col.ident))
            kinds.append("float8")
    if with_sensitive:
        expr, kind = stream or (sql.SQL("{}::text").format(r.sensitive[0].ident), "text")
        exprs.append(expr)
        kinds.append(kind)
    names = [sql.SQL("{} AS {}").format(e, sql.Identifier(f"c{i}")) for i, e in enumerate(exprs)]
    query: sql.Composable = sql.SQL("SELECT {} FROM {} s").format(
        sql.SQL(", ").join([*names, *(prior.columns() if prior else [])]), r.source.ident
    )
    if prior is not None:
        query = prior.wrap(query, len(kinds))
        kinds = [*kinds, *prior.kinds()]
    keys, *values = copy_columns(
        conn, query, kinds, r.rows,
        lambda n: r.say(f"streaming rows out with COPY: {n:,} of {r.rows:,}"),
    )  # fmt: skip
    extra = values[len(values) - len(prior.kinds()):] if prior is not None else []
    values = values[: len(values) - len(extra)]
    sensitive = _objects(values.pop()) if with_sensitive else None
    numeric, categorical = [], []
    for col, vals in zip(r.qi, values, strict=True):
        if r.is_categorical(col):
            assert isinstance(vals, Coded)
            categorical.append(encode(r, col, vals))
        else:
            numeric.append(vals)
    assert isinstance(keys, Keys)
    return keys, QIArrays.build(numeric, categorical, n=len(keys)), sensitive, extra


def _objects(column: np.ndarray | Coded | Keys) -> np.ndarray:
    """A streamed column as an object array of its values, None for NULL (what methods'
    `encode_sensitive` receive)."""
    if isinstance(column, Coded):
        return column.objects()
    out = np.asarray(column, dtype=object)
    out[np.isnan(np.asarray(column, dtype=np.float64))] = None
    return out


def generalised(r: Resolved, col: Column) -> sql.Composable:
    """Aggregate expression that generalises a QI column over one group: a numeric or date
    QI's [min, max]. The grouping methods label categorical QIs per group in numpy
    (`stage_labels`); for methods that still label them in SQL (cbg, lag) a categorical QI
    is its hierarchy's LCA (dbanon.lca), or without one the value if the group agrees, else
    '*'."""
    if col.name in r.hierarchies:
        return sql.SQL("dbanon.lca({}, array_agg(DISTINCT {}::text))").format(
            sql.Literal(r.hierarchies[col.name].name), col.ident
        )
    if r.is_categorical(col):
        return sql.SQL(
            "CASE WHEN min({c}::text) = max({c}::text) THEN min({c}::text) ELSE '*' END"
        ).format(c=col.ident)
    low, high = (sql.SQL("{}({})").format(sql.SQL(f), col.ident) for f in ("min", "max"))
    return generalise.closed_range(col, low, high, r.options["ranges"])


def stage_labels(
    conn: psycopg.Connection, r: Resolved, qi: QIArrays, gid: np.ndarray
) -> dict[str, float]:
    """Label every group's categorical QIs once (generalise.group_labels: the LCA in the
    hierarchy the publish resolved, or the set of values for a column without one) and COPY
    (gid, labels) into LABELS, which `materialise` joins: no per-row or per-group function
    call, and no read of the catalog's hierarchy map, so re-imported (churned) hierarchies
    cannot slow a publish. Returns the loss of each column released as value sets."""
    cats = [c for c in r.qi if r.is_categorical(c)]
    cols = [sql.SQL("{} text").format(sql.Identifier(f"l{j}")) for j in range(len(cats))]
    conn.execute(
        sql.SQL("CREATE TEMP TABLE {} (gid int4{}) ON COMMIT DROP").format(
            LABELS, sql.SQL("").join(sql.SQL(", {}").format(c) for c in cols)
        )
    )
    present, columns, losses = generalise.groups_present(gid), [], {}
    for j, col in enumerate(cats):
        as_set = col.name not in r.hierarchies
        groups, labels = generalise.group_labels(qi.hierarchies[j], qi.cat[:, j], gid, as_set)
        columns.append(labels)
        if as_set:
            domain = len(qi.hierarchies[j].leaves)
            losses[col.name] = generalise.value_set_loss(qi.cat[:, j], gid, domain)
    with (
        conn.cursor() as cur,
        cur.copy(sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(LABELS)) as copy,
    ):
        copy.set_types(["int4"] + ["text"] * len(cats))
        for row in zip(present.tolist(), *columns, strict=True):
            copy.write_row(row)
    conn.execute(sql.SQL("ANALYZE {}").format(LABELS))
    return losses


ROWS = sql.Identifier("dbanon_rows")  # the stage joined once with the source
MAP_ROWS = sql.Identifier("dbanon_map_rows")  # ROWS as composition reads a run's rows
# ROWS' own columns, named apart from any source column's.
_OWN = {c: sql.Identifier(f"dbanon {c}") for c in ("key", "gid", "w", "t", "fp")}


def stage_rows(conn: psycopg.Connection, r: Resolved, stage: sql.Identifier) -> None:
    """Join the stage with the source once, into ROWS: each row's key, group and waiting
    block, the source columns the release shows (numeric QIs, sensitive, kept) and what the
    private map keeps of it (its tagged sensitive value, the fingerprint of its released
    columns). The release and the map are both written from it (MAP_ROWS, a view with
    composition.Rows' column names), so no second join of a million rows."""
    nums = [c for c in r.qi if not r.is_categorical(c)]
    cols = [*nums, *r.sensitive, *r.keep]
    has_w = "w" in composition.columns_of(conn, stage)
    own = dict(_OWN)
    mapped = composition.has_map(conn, r.release_id)
    if mapped:  # and what the latest map holds of each row (composition.OLD), joined once
        own.update({c: sql.Identifier(f"dbanon {c}") for c in composition.OLD})
    old = sql.SQL(", m.key IS NOT NULL AS {}, m.vid AS {}, m.sid AS {}").format(
        *(own[c] for c in composition.OLD)) if mapped else sql.SQL("")  # fmt: skip
    conn.execute(
        sql.SQL(
            "CREATE TEMP TABLE {rows} ON COMMIT DROP AS SELECT st.key AS {key}, st.gid AS {gid}, "
            "{w} AS {w_}, {t} AS {t_}, {fp} AS {fp_}{old}{cols} "
            "FROM {stage} st JOIN {src} s ON s.{k}::text = st.key{join}"
        ).format(
            rows=ROWS, key=_OWN["key"], gid=_OWN["gid"],
            w=sql.SQL("st.w" if has_w else "NULL::int4"), w_=_OWN["w"],
            t=composition.tag(r.sensitive[0] if r.sensitive else None), t_=_OWN["t"],
            fp=composition.fingerprint(r.released_columns), fp_=_OWN["fp"], old=old,
            cols=sql.SQL("").join(sql.SQL(", s.{}").format(c.ident) for c in cols),
            stage=stage, src=r.source.ident, k=r.key.ident,
            join=sql.SQL(" LEFT JOIN {} m ON m.key = st.key").format(
                composition.table(r.release_id)) if mapped else sql.SQL(""),  # fmt: skip
        )  # fmt: skip
    )
    analyze_stage(conn, ROWS)
    conn.execute(
        sql.SQL("CREATE TEMP VIEW {} AS SELECT {} FROM {}").format(
            MAP_ROWS,
            sql.SQL(", ").join(sql.SQL("{} AS {}").format(v, sql.Identifier(c))
                               for c, v in own.items()),  # fmt: skip
            ROWS,
        )
    )


def materialise(
    conn: psycopg.Connection, r: Resolved, stage: sql.Identifier, build: sql.Identifier
) -> None:
    """CREATE the release table from the stage joined with the source (ROWS, `stage_rows`)
    and the staged labels, in one statement: numeric and date QIs generalised by one GROUP BY
    gid, categorical ones joined from LABELS (`stage_labels`)."""
    stage_rows(conn, r, stage)
    cats = [c for c in r.qi if r.is_categorical(c)]
    nums = [c for c in r.qi if not r.is_categorical(c)]
    label = {c.name: sql.Identifier(f"l{j}") for j, c in enumerate(cats)}
    out = [
        sql.SQL("l.{} AS {}").format(label[c.name], c.ident)
        if c.name in label
        else sql.SQL("g.{}").format(c.ident)
        for c in r.qi
    ] + [sql.SQL("rows.{}").format(c.ident) for c in [*r.sensitive, *r.keep]]
    # ROWS is read twice (its groups' ranges, then every row) rather than through a CTE of
    # it, which materialised a million rows once more (0.8 s).
    groups = sql.SQL("")
    if nums:
        groups = sql.SQL(
            "JOIN (SELECT {gid}, {gen} FROM {rows} WHERE {gid} IS NOT NULL GROUP BY {gid}) g "
            "ON g.{gid} = rows.{gid} "
        ).format(
            gid=_OWN["gid"], rows=ROWS,
            gen=sql.SQL(", ").join(
                sql.SQL("{} AS {}").format(generalised(r, c), c.ident) for c in nums
            ),
        )  # fmt: skip
    conn.execute(
        sql.SQL(
            "CREATE TABLE {build} AS SELECT {out} FROM {rows} rows {groups}"
            "JOIN {labels} l ON l.gid = rows.{gid} WHERE rows.{gid} IS NOT NULL "
            "ORDER BY random()"
        ).format(build=build, out=sql.SQL(", ").join(out), rows=ROWS, groups=groups,
                 labels=LABELS, gid=_OWN["gid"])  # fmt: skip
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
    present = np.unique(vid[vid >= 0])
    sets = dict(conn.execute(
        sql.SQL("SELECT vid, vals FROM {} WHERE vid = ANY(%s)").format(
            composition.sets_of(conn, r.release_id)), [present.tolist()],
    ).fetchall())  # fmt: skip
    coded = {t: i for i, t in enumerate(tags.values) if t is not None}
    values = [np.array(sorted(coded.setdefault(t, len(coded)) for t in sets[v]), dtype=np.int64)
              for v in present.tolist()]  # fmt: skip
    hids = np.full(len(vid), -1, dtype=np.int64)
    hids[vid >= 0] = np.searchsorted(present, vid[vid >= 0])
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
    return sensitive[rows]


def _keys(sensitive: Any) -> list:
    """One hashable sensitive value per row, for the models' in-memory counts."""
    if isinstance(sensitive, tuple):
        return list(zip(*(a.tolist() for a in sensitive), strict=True))
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

    def encode_sensitive(self, conn: psycopg.Connection, r: Resolved, values: np.ndarray) -> Any:
        """What `cluster` receives as `sensitive`: by default the streamed values as they are."""
        return values

    @abstractmethod
    def cluster(
        self, r: Resolved, qi: QIArrays, sensitive: Any
    ) -> np.ndarray | tuple[np.ndarray, dict[str, Any]]:
        """Group ids (int) of the rows, or (ids, the algorithm's own figures for the run
        record); ValueError for input the algorithm cannot group."""

    def build(self, conn: psycopg.Connection, r: Resolved, ctx: BuildContext) -> dict[str, Any]:
        ctx.say(f"streaming {r.rows} rows of {r.source} out with COPY")
        with_sensitive = self.uses_sensitive(r)
        policy = "regroup" if r.regroup else r.options.get("refresh_policy")
        prior = (composition.prior(conn, r.release_id, r.key, r.released_columns,
                                   r.sensitive[0] if r.sensitive else None)
                 if policy in ("persist", "sealed") else None)  # fmt: skip
        keys, qi, sensitive, extra = extract_with(conn, r, with_sensitive,
                                                  self.sensitive_stream(r), prior)  # fmt: skip
        if with_sensitive:
            sensitive = self.encode_sensitive(conn, r, sensitive)  # type: ignore[arg-type]
        ctx.lap("extract")
        previous, sealed, figures, block, hist = None, None, {}, None, None
        before = None
        if prior is not None:  # one scan read the rows and what the latest release held of them
            before = composition.previous_of(conn, prior.release_id, extra[0], extra[1])
            if r.sensitive:
                hist = history_of(conn, r, extra[3], extra[2])
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
                )  # fmt: skip
        except ValueError as e:
            raise DbanonError(f"{self.name} cannot publish {r.source}: {e}") from None
        gid, found = out if isinstance(out, tuple) else (out, {})
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
        loss = loss_report(shown_qi, shown_gid, sets)
        ctx.lap("cluster")
        ctx.say("materialising the release")
        stage = STAGE
        conn.execute(
            sql.SQL("CREATE TEMP TABLE {} (key text, gid int4) ON COMMIT DROP").format(stage)
        )
        copy_in_ids(conn, stage, keys, staged(gid, block))
        if withheld.any():  # withheld rows stay in the stage (the map keeps them)
            stage_blocks(conn, stage)
        analyze_stage(conn, stage)
        value_sets = stage_labels(conn, r, shown_qi, shown_gid)
        built = ctx.made(r.objects[0])
        materialise(conn, r, stage, r.stored(built))
        ctx.lap("materialise")
        metrics: dict[str, Any] = {**loss.as_dict(), **figures}
        if value_sets:  # columns without a hierarchy, released as the values present
            metrics["value_set_loss"] = value_sets
        if previous is not None:
            metrics["persisting_rows"] = int((previous >= 0).sum())  # unchanged ones
        return metrics

    def group_map(self, r: Resolved) -> sql.Composable:
        return MAP_ROWS


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

        return holds


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
