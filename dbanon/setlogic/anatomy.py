"""Anatomy (Xiao & Tao, VLDB 2006) for l-diversity: its eligibility and checks as SQL, its deal
over the rows one binary COPY streams out, its tables written back with one COPY each.

Anatomy publishes the quasi-identifiers unchanged and breaks their link to the sensitive
attribute (SA) through groups: QIT(qi..., group_id) holds every row's QI values and group, and
ST(group_id, sa, count) how often each SA value occurs in each group. An adversary who knows a
person's QI values finds the group, but guesses the SA value with confidence at most 1/l.

The bucketization is one deal: rows sorted by SA value (ties broken at random) and dealt
round-robin into g = floor(n/l) groups, the row at position p (0-based) to group p mod g; that is
`row_number() OVER (ORDER BY sa, random())` modulo g, computed over the rows as one COPY streamed
them out (PostgreSQL's sorts for it took 2.8 s of wide rows at 1M rows; the arrays, 0.2 s).
Why every group ends up with >= l rows whose SA values are pairwise distinct, whenever the
table is l-eligible (no value in more than n/l rows):
  * a value with c rows occupies c consecutive positions; c <= n/l and c is an integer, so
    c <= floor(n/l) = g, and c consecutive positions fall into c different groups: no group
    holds a value twice;
  * the groups get floor(n/g) or ceil(n/g) rows, and g <= n/l gives n/g >= l.
So every group has >= l distinct values, each exactly once: confidence 1/|group| <= 1/l. The
n mod g rows left over by the first floor(n/g) rounds ("residual" rows) are the last round of
the same deal, which by the first point never lands on a group already holding the value.
g = floor(n/l) is also the most groups any l-diverse bucketization can have (each needs l rows).

Reproducibility: rows are put in a content order (a hash of their values' bytes, the bytes
themselves where hashes collide) before the tie-breakers are drawn from the seed, and the SA
values are taken in the order of their bytes, so the same content and seed give the same tables
whatever the physical order. Group ids are a permutation of 1..g drawn from the seed apart from
the deal's draws (issue 24): the deal's position mod g is not published as it is (it is
recomputable from the ST's counts anyway, but a pseudonymous id follows no order of the data).
Neither table holds the row key.

Writing: the QIT and ST are written from the streamed arrays with one binary COPY each (each
value's bytes as they came: no staging table, no sort on the server): the QIT in group id order,
each group's rows in an order drawn from the seed (never the deal's, which follows the SA
values), the ST in (group id, value) order, so that the checks' sorts find their input sorted.
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql

from dbanon.core.groupsort import by_group
from dbanon.db import catalog
from dbanon.db import copykernels as kernels
from dbanon.db.catalog import Column, Relation
from dbanon.db.parts import copy_parts, where
from dbanon.db.rows import Dictionary, Field, as_text, copy_rows
from dbanon.db.settings import local_settings
from dbanon.db.stream import Values
from dbanon.errors import DbanonError, ModelViolation, idents, quote_ident
from dbanon.metrics.exposure import discernibility_of_codes

GROUP_ID = "group_id"
COUNT = "count"


@dataclass(frozen=True)
class AnatomyResult:
    groups: int
    rows: int
    residual_rows: int  # rows beyond l per group: n - groups * l
    dm: int | None = None  # the QIT's DM, counted from the streamed rows when asked


def _name(column: str) -> str:
    """A column name as a user would type it in SQL: bare when plain, else double-quoted."""
    if re.fullmatch(r"[a-z_][a-z0-9_$]*", column):
        return column
    return '"' + column.replace('"', '""') + '"'


def _literal(value: str) -> str:
    """A value in a one-line message: SQL-quoted, or Python's repr when it holds newlines etc."""
    if len(value) > 60:
        value = value[:57] + "..."
    return "'" + value.replace("'", "''") + "'" if value.isprintable() else repr(value)


def check_eligible(
    conn: psycopg.Connection,
    source: Relation,
    sensitive: Column,
    l: int,  # noqa: E741 - the paper's name
) -> int:
    """Raise a one-line DbanonError unless `source` can be split into l-diverse groups;
    return the sensitive column's distinct values (counted on the way: a caller needing them
    scans no more).

    Anatomy needs every SA value in at most n/l rows (l-eligibility, Xiao & Tao Lemma 1); the
    message names the value that breaks it, so the DBA knows what to fix or which l to use.
    """
    if l < 2:
        raise DbanonError(f"l must be at least 2, got {l}")
    col = _name(sensitive.name)
    rows, nulls, distinct, top, top_rows = conn.execute(
        sql.SQL(
            """WITH f AS (SELECT {s} AS v, count(*) AS c FROM {src} GROUP BY {s})
               SELECT coalesce(sum(c), 0), coalesce(sum(c) FILTER (WHERE v IS NULL), 0),
                      count(v),
                      (array_agg(v::text ORDER BY c DESC, v) FILTER (WHERE v IS NOT NULL))[1],
                      coalesce(max(c) FILTER (WHERE v IS NOT NULL), 0)
               FROM f"""
        ).format(s=sensitive.ident, src=source.ident)
    ).fetchone()
    if rows == 0:
        raise DbanonError(f"{source} has no rows: there is nothing to publish")
    if nulls:
        raise DbanonError(
            f"sensitive column {quote_ident(sensitive.name)} of {source} is NULL in {nulls:,} of "
            f"{rows:,} rows; fill or filter them first"
        )
    if distinct < l:
        raise DbanonError(
            f"not {l}-eligible: {col} has only {distinct} distinct values in {source}, "
            f"fewer than l = {l}"
        )
    if top_rows * l > rows:
        raise DbanonError(
            f"not {l}-eligible: {col} = {_literal(top)} is {100 * top_rows / rows:.1f} % of "
            f"{rows:,} rows (at most {100 / l:.1f} % allowed; {top_rows:,} rows, "
            f"limit {rows // l:,})"
        )
    return int(distinct)


def build_anatomy(
    conn: psycopg.Connection,
    source: Relation,
    qi: list[Column],
    sensitive: Column,
    l: int,  # noqa: E741 - the paper's name
    qit: sql.Identifier,
    st: sql.Identifier,
    seed: int = 0,
    *,
    eligible: bool = False,
    count_dm: bool = False,
) -> AnatomyResult:
    """CREATE the QIT and ST tables of an l-diverse Anatomy of `source`.

    Runs in the caller's transaction and never commits, so a failed verification can roll the
    tables back (on an autocommit connection it opens and commits its own transaction, so that
    the two tables appear together or not at all). Raises DbanonError, having created nothing,
    when the input cannot be published. `eligible`: the caller ran check_eligible on this
    transaction's snapshot already (a publish validates first), so that scan is not repeated;
    ignored on an autocommit connection, whose build reads a snapshot of its own. Either way
    the dealt rows are recounted from what the deal streamed (no scan). `count_dm`: count the
    QIT's DM from the streamed QI values, which the caller knows are equal exactly when their
    bytes are (dbanon.db.rows.equal_as_bytes).
    """
    names = [c.name for c in qi]
    if not qi:
        raise DbanonError("at least one quasi-identifier is needed")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DbanonError(f"quasi-identifier {quote_ident(twice[0])} is named twice")
    if sensitive.name in names:
        raise DbanonError(f"column {quote_ident(sensitive.name)} is both a quasi-identifier and "
            "sensitive")
    for col, reserved in [*((n, (GROUP_ID,)) for n in names), (sensitive.name, (GROUP_ID, COUNT))]:
        if col in reserved:
            raise DbanonError(
                f"column {quote_ident(col)} of {source} clashes with the {quote_ident(col)} "
                "column of the Anatomy tables; publish a view that renames it"
            )
    if qit == st:
        raise DbanonError("the QIT and ST tables need different names")
    for target in (qit, st):
        regclass = target.as_string(conn)
        if conn.execute("SELECT to_regclass(%s) IS NOT NULL", [regclass]).fetchone()[0]:
            raise DbanonError(f"{catalog.shown(conn, target)} already exists")
    if not (eligible and not conn.autocommit):
        check_eligible(conn, source, sensitive, l)
    with conn.transaction() if conn.autocommit else nullcontext():
        textual = as_text(conn, [*qi, sensitive])  # streamed and written as text, cast back
        dealt = _deal(conn, source, qi, sensitive, l, seed, textual)
        rows, groups = len(dealt.g), int(dealt.g.max(initial=0))
        counts = np.bincount(dealt.sa.codes, minlength=len(dealt.sa))
        if not rows or dealt.sa.null() >= 0 or int(counts.max()) * l > rows:
            # the source changed since check_eligible
            raise DbanonError(f"{source} changed during the build and is no longer {l}-eligible")
        dm = discernibility_of_codes([v.codes for v in dealt.qi]) if count_dm else None
        _write(conn, source, qi, sensitive, qit, st, dealt, groups, seed, textual)
    return AnatomyResult(groups=groups, rows=rows, residual_rows=rows - groups * l, dm=dm)


@dataclass(frozen=True)
class _Dealt:
    """The deal: each row's QI values and sensitive value as streamed (Values: its distinct
    values' bytes and a code per row) and its group g in 1..groups."""

    qi: list[Values]
    sa: Values
    rank: np.ndarray  # per sensitive value (its code), its place in the deal's order of values
    g: np.ndarray  # int32
    order: np.ndarray  # the rows in the deal's order: a content order, never the physical one


def _deal(
    conn: psycopg.Connection, source: Relation, qi: list[Column], sensitive: Column,
    l: int, seed: int, textual: set[str],  # noqa: E741
) -> _Dealt:  # fmt: skip
    """The deal over one snapshot of the source, its rows streamed out with binary COPY.

    Rows sorted by SA value (in the order of its bytes), ties broken by draws from the seed
    taken in a content order (`_canonical`), dealt round-robin: the row at position p goes to
    group p mod g. It is `row_number() OVER (ORDER BY sa, random())` modulo g, computed over the
    streamed arrays: in PostgreSQL the sorts it takes (the content, then the draws; several
    keys of wide rows each) cost 2.8 s at 1M rows, here 0.2 s. Each row's values come as they
    are (binary: the type's own form), each column coded by its distinct values."""

    def out(c: Column) -> sql.Composable:
        return sql.SQL("{}::text" if c.name in textual else "{}").format(c.ident)

    def query(cond: sql.Composable | None) -> sql.Composable:
        return sql.SQL("SELECT {} FROM {} s{}").format(
            sql.SQL(", ").join(out(c) for c in [*qi, sensitive]), source.ident, where(cond))

    expected = conn.execute(sql.SQL(  # sizes the arrays (a view's estimate: 0, they grow)
        "SELECT coalesce(max(greatest(reltuples, 0)), 0)::int8 FROM pg_class WHERE oid = {}"
    ).format(source.regclass)).fetchone()[0]  # fmt: skip
    streamed = copy_parts(conn, query, source, "s", ["values"] * (len(qi) + 1), int(expected))
    columns = [v for v in streamed if isinstance(v, Values)]
    sa = columns[-1]
    n = len(sa.codes)
    rng = np.random.default_rng([seed % 2**64, 24])
    at = _canonical(columns)[rng.permutation(n)]  # the tie-breakers, drawn in content order
    rank = _byte_ranks(sa)
    small = np.uint16 if len(sa) <= 1 << 16 else np.int64  # a radix sort for few values
    dealt = at[np.argsort(rank.astype(small)[sa.codes[at]], kind="stable")]
    del at
    g = np.empty(n, dtype=np.int32)
    g[dealt] = np.arange(n, dtype=np.int32) % np.int32(max(n // l, 1)) + 1
    return _Dealt(columns[:-1], sa, rank, g, dealt)


def _entry(v: Values, e: int) -> tuple[bool, bytes]:
    """Entry e of `v` as a sort key: NULL after every value, values by their bytes."""
    return bool(v.lens[e] < 0), v.data[v.starts[e] : v.starts[e] + max(int(v.lens[e]), 0)].tobytes()


def _byte_ranks(v: Values) -> np.ndarray:
    """Each entry's place among the entries in the order of their bytes (NULL last): a fixed
    order of the values, whatever order the rows came in."""
    by_bytes = sorted(range(len(v)), key=lambda e: _entry(v, e))
    rank = np.empty(len(v), dtype=np.int64)
    rank[by_bytes] = np.arange(len(v))
    return rank


def _canonical(columns: list[Values]) -> np.ndarray:
    """The rows in a content order: by a 64-bit hash of their values' bytes, rows whose hashes
    tie by the bytes themselves where they differ (a collision); what remains tied is equal
    rows, which are interchangeable. It follows the content, never the order the rows came
    in (the codes are numbered in that order: the order reads the bytes, not the codes)."""
    codes = np.ascontiguousarray(np.column_stack([c.codes for c in columns]), dtype=np.int32)
    hashes = [kernels.entry_hashes(c.starts, c.lens, c.data) for c in columns]
    offs = np.cumsum([0] + [len(x) for x in hashes[:-1]]).astype(np.int64)
    h = kernels.row_hashes(codes, np.concatenate(hashes), offs)
    order = np.argsort(h, kind="stable")
    hs = h[order]
    same = np.flatnonzero(hs[1:] == hs[:-1])
    differ = same[np.any(codes[order[same]] != codes[order[same + 1]], axis=1)]
    for i in differ.tolist():  # all but never: one hash for two different rows
        lo = int(np.searchsorted(hs, hs[i], side="left"))
        hi = int(np.searchsorted(hs, hs[i], side="right"))
        order[lo:hi] = sorted(order[lo:hi].tolist(), key=lambda r: tuple(
            _entry(c, int(c.codes[r])) for c in columns))  # fmt: skip
    return order


def _write(
    conn: psycopg.Connection, source: Relation, qi: list[Column], sensitive: Column,
    qit: sql.Identifier, st: sql.Identifier, dealt: _Dealt, groups: int, seed: int,
    textual: set[str],
) -> None:  # fmt: skip
    """CREATE the QIT and ST and write each with one binary COPY from the deal's arrays.

    Group ids are a permutation of 1..groups drawn from the seed apart from the deal's draws
    (issue 24), so a group's id is not its place in the deal. The QIT is written in group id
    order, each group's rows in an order drawn from the seed (never the deal's, which follows
    the SA values); the ST in (group id, value) order, one row per group and value with its count.
    Neither holds the row key; no sort on the server, no staging table."""
    rng = np.random.default_rng([seed % 2**64, 25])
    ids = (rng.permutation(groups) + 1).astype(np.int32)
    gid = ids[dealt.g - 1]
    del ids

    def typed(c: Column, alias: sql.Composable | None = None) -> sql.Composable:
        shown = sql.SQL("s.{}::text" if c.name in textual else "s.{}").format(c.ident)
        return sql.SQL("{} AS {}").format(shown, alias or c.ident)

    gid_col, count_col = sql.Identifier(GROUP_ID), sql.Identifier(COUNT)
    for target, cols in (
        (qit, [*(typed(c) for c in qi), sql.SQL("NULL::int4 AS {}").format(gid_col)]),
        (st, [sql.SQL("NULL::int4 AS {}").format(gid_col), typed(sensitive),
              sql.SQL("NULL::int4 AS {}").format(count_col)]),
    ):  # fmt: skip
        conn.execute(sql.SQL("CREATE TABLE {} AS SELECT {} FROM {} s WITH NO DATA").format(
            target, sql.SQL(", ").join(cols), source.ident))  # fmt: skip
    copy = sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)")
    shuffled = dealt.order[rng.permutation(len(gid))]  # drawn in a content order
    in_qit = shuffled[by_group(gid[shuffled])]  # a stable sort by group id
    del shuffled
    copy_rows(conn, copy.format(qit), [
        *(Field.entries(Dictionary.of_values(v), v.codes) for v in dealt.qi), Field.int4(gid),
    ], in_qit)  # fmt: skip
    del in_qit
    sa = dealt.sa
    # The rows in (group id, value) order, stably: by value, then by group (two counting sorts)
    by_value = by_group(dealt.rank[sa.codes])
    by_cell = by_value[by_group(gid[by_value])]
    del by_value
    cell = gid[by_cell].astype(np.int64) * len(sa) + dealt.rank[sa.codes[by_cell]]
    starts = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])
    del cell
    in_st = by_cell[starts]  # a row of each (group, value), in (group id, value) order
    del by_cell
    count = np.zeros(len(gid), dtype=np.int32)
    count[in_st] = np.diff(np.r_[starts, len(gid)])
    copy_rows(conn, copy.format(st), [
        Field.int4(gid), Field.entries(Dictionary.of_values(sa), sa.codes), Field.int4(count),
    ], in_st)  # fmt: skip
    for target, cols in ((qit, qi), (st, [sensitive])):
        retype = [c for c in cols if c.name in textual]
        if retype:  # each type by name (nothing written here as SQL text)
            types = [sql.Identifier(*conn.execute(
                "SELECT n.nspname, t.typname FROM pg_type t JOIN pg_namespace n "
                "ON n.oid = t.typnamespace WHERE t.oid = %s::regtype", [c.type]).fetchone())
                for c in retype]  # fmt: skip
            conn.execute(sql.SQL("ALTER TABLE {} {}").format(target, sql.SQL(", ").join(
                sql.SQL("ALTER COLUMN {c} TYPE {t} USING {c}::{t}").format(c=c.ident, t=t)
                for c, t in zip(retype, types, strict=True))))  # fmt: skip


@dataclass(frozen=True)
class AnatomyFigures:
    """What the verification read of the QIT on the way: its rows and groups."""

    rows: int
    groups: int
    smallest: int  # rows of the smallest group
    largest: int  # rows of the largest group


def verify_anatomy(
    conn: psycopg.Connection,
    qit: sql.Identifier,
    st: sql.Identifier,
    l: int,  # noqa: E741 - the paper's name
    *,
    diverse: bool = True,
) -> AnatomyFigures:
    """Raise ModelViolation unless the published QIT/ST keep Anatomy's l-diversity promise.

    Independent of the build: it reads only the two tables. Every ST group must hold >= l
    distinct values, none in more than 1/l of the group's rows (the adversary's confidence), and
    each group's QIT row count must equal its ST count sum (else the ST misstates the odds).
    One pass over each table settles all of it; the offending group is looked up only when
    something fails. Grouping is done by sorting: cheap when the tables are stored in group
    order (as built), and never wrong when they are not. `diverse=False`: the entries and the
    sizes alone, for a caller whose model check judges the diversity (a publish): the ST is
    then grouped by group only, not by group and value.
    """
    cols = [
        d.name for d in conn.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(st)).description
    ]
    values = [c for c in cols if c not in (GROUP_ID, COUNT)]
    if GROUP_ID not in cols or COUNT not in cols or len(values) != 1:
        raise DbanonError(
            f"{catalog.shown(conn, st)} is not an Anatomy ST table (group_id, <value>, count): "
            f"{idents(cols)}"
        )
    names = f"{catalog.shown(conn, qit)}/{catalog.shown(conn, st)}"
    gid, v, count = sql.Identifier(GROUP_ID), sql.Identifier(values[0]), sql.Identifier(COUNT)
    bad = sql.SQL("count(*) FILTER (WHERE {gid} IS NULL OR {v} IS NULL OR {count} IS NULL "
                  "OR {count} <= 0)").format(gid=gid, v=v, count=count)  # fmt: skip
    per_group = sql.SQL(
        """SELECT g, count(*) AS d, sum(c) AS n, max(c) AS top, sum(bad) AS bad,
                  count(*) < {l} OR max(c) * {l} > sum(c) AS fails
           FROM (SELECT {gid} AS g, {v} AS v, sum({count}) AS c, {bad} AS bad
                 FROM {st} GROUP BY {gid}, {v}) per_value
           GROUP BY g"""
        if diverse else
        """SELECT {gid} AS g, count(*) AS d, sum({count}) AS n, NULL::bigint AS top,
                  {bad} AS bad, false AS fails
           FROM {st} GROUP BY {gid}"""
    ).format(bad=bad, gid=gid, v=v, count=count, st=st, l=sql.Literal(l))  # fmt: skip
    ctes = sql.SQL(
        """WITH per_group AS ({per_group}),
           q AS (SELECT {gid} AS g, count(*) AS n FROM {qit} GROUP BY {gid}),
           sizes AS (SELECT coalesce(q.g, p.g) AS g, q.n AS qn, p.n AS sn, p.d, p.top, p.bad,
                            p.fails
                     FROM q FULL JOIN per_group p ON p.g = q.g) """
    ).format(per_group=per_group, gid=gid, qit=qit)
    with local_settings(conn, enable_hashagg="off"):
        bad, groups, failing, mismatches, rows, classes, smallest, largest = conn.execute(
            ctes
            + sql.SQL(
                """SELECT coalesce(sum(bad), 0), count(d), count(*) FILTER (WHERE fails),
                          count(*) FILTER (WHERE qn IS DISTINCT FROM sn),
                          coalesce(sum(qn), 0), count(qn), coalesce(min(qn), 0),
                          coalesce(max(qn), 0)
                   FROM sizes"""
            )
        ).fetchone()
        if bad:
            raise ModelViolation(f"{names}: {bad} ST rows have a NULL or non-positive entry")
        if failing:
            worst, d, n, top = conn.execute(
                ctes
                + sql.SQL(
                    """SELECT g, d, sn, top FROM sizes WHERE fails
                       ORDER BY top::float8 / sn DESC, d, g LIMIT 1"""
                )
            ).fetchone()
            raise ModelViolation(
                f"{names} are not {l}-diverse: {failing} of {groups} groups fail; group {worst} "
                f"has {n} rows with {d} distinct values, the most frequent in {top} "
                f"({100 * top / n:.1f} % > {100 / l:.1f} %)"
            )
        if mismatches:
            mg, mq, ms = conn.execute(
                ctes
                + sql.SQL(
                    """SELECT g, qn, sn FROM sizes WHERE qn IS DISTINCT FROM sn
                       ORDER BY g NULLS FIRST LIMIT 1"""
                )
            ).fetchone()
            raise ModelViolation(
                f"{names} disagree on {mismatches} groups: group {mg} has {mq or 0} rows in QIT "
                f"but {ms or 0} in ST"
            )
    return AnatomyFigures(rows=int(rows), groups=int(classes), smallest=int(smallest),
                          largest=int(largest))
