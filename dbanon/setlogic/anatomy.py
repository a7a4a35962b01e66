"""Anatomy (Xiao & Tao, VLDB 2006) for l-diversity, computed by PostgreSQL as set logic.

Anatomy publishes the quasi-identifiers unchanged and breaks their link to the sensitive
attribute (SA) through groups: QIT(qi..., group_id) holds every row's QI values and group, and
ST(group_id, sa, count) how often each SA value occurs in each group. An adversary who knows a
person's QI values finds the group, but guesses the SA value with confidence at most 1/l.

The bucketization is one window function. Rows are sorted by SA value (ties broken at random)
and dealt round-robin into g = floor(n/l) groups: the row at position p (0-based) goes to group
p mod g. Why every group ends up with >= l rows whose SA values are pairwise distinct, whenever
the table is l-eligible (no value in more than n/l rows):
  * a value with c rows occupies c consecutive positions; c <= n/l and c is an integer, so
    c <= floor(n/l) = g, and c consecutive positions fall into c different groups: no group
    holds a value twice;
  * the groups get floor(n/g) or ceil(n/g) rows, and g <= n/l gives n/g >= l.
So every group has >= l distinct values, each exactly once: confidence 1/|group| <= 1/l. The
n mod g rows left over by the first floor(n/g) rounds ("residual" rows) are the last round of
the same deal, which by the first point never lands on a group already holding the value.
g = floor(n/l) is also the most groups any l-diverse bucketization can have (each needs l rows).

Reproducibility: rows are sorted by their content before random() draws the tie-breakers after
setseed(seed), so the same content and seed give the same tables whatever the physical order
or plan. Group ids are a permutation of 1..g drawn after the deal (issue 24): the deal's
position mod g is not published as it is (it is recomputable from the ST's counts anyway, but a
pseudonymous id follows no order of the data). QIT rows are ordered by (group_id, QI values):
a function of the published content, so the order carries neither the source order nor the SA
values. Neither table holds the row key.
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from dataclasses import dataclass

import psycopg
from psycopg import sql

from dbanon.db import catalog
from dbanon.db.catalog import Column, Relation
from dbanon.db.settings import local_settings
from dbanon.errors import DbanonError, ModelViolation, idents, quote_ident

GROUP_ID = "group_id"
COUNT = "count"
STAGE_WORK_MEM = "4MB"  # of the bucketing statement only (see build_anatomy)


@dataclass(frozen=True)
class AnatomyResult:
    groups: int
    rows: int
    residual_rows: int  # rows beyond l per group: n - groups * l


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
) -> None:
    """Raise a one-line DbanonError unless `source` can be split into l-diverse groups.

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
) -> AnatomyResult:
    """CREATE the QIT and ST tables of an l-diverse Anatomy of `source`.

    Runs in the caller's transaction and never commits, so a failed verification can roll the
    tables back (on an autocommit connection it opens and commits its own transaction, so that
    the two tables appear together or not at all). Raises DbanonError, having created nothing,
    when the input cannot be published. `eligible`: the caller ran check_eligible on this
    transaction's snapshot already (a publish validates first), so neither that scan nor the
    recount of the dealt rows is repeated; ignored on an autocommit connection, whose build
    reads a snapshot of its own.
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
    same_snapshot = eligible and not conn.autocommit
    if not same_snapshot:
        check_eligible(conn, source, sensitive, l)

    # Internal names q1..qk, s, g: user column names cannot clash with the helpers.
    qs = [sql.Identifier(f"q{i}") for i in range(1, len(qi) + 1)]
    q_list = sql.SQL(", ").join(qs)
    stage = sql.Identifier("pg_temp", "dbanon_anatomy_stage")  # pg_temp: never a user's table
    with conn.transaction() if conn.autocommit else nullcontext():
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(stage))
        conn.execute("SELECT setseed(%s)", [(seed % 2**31) / 2**31])
        # One snapshot of the source (one statement): bucket ids by a window over the SA order.
        # random() is drawn row by row in the content order (s, q...) of the subquery, so the
        # tie-breakers do not depend on the physical order; drawn in the window's own ORDER BY,
        # the rows arrive sorted by s and PostgreSQL only sorts each value's run by the draws
        # (an incremental sort) instead of sorting all rows again. n comes from a count in the
        # same statement, not `count(*) OVER ()`, which would buffer every row once more.
        # The content sort compares text on every key: with a small work_mem it runs in parallel
        # workers as merges of cache-sized runs, 3.5 s at 1M rows where one in-memory quicksort
        # (what a large work_mem makes the planner choose) takes 5.5-6.5 s.
        with local_settings(conn, work_mem=STAGE_WORK_MEM):
            staged = conn.execute(
                sql.SQL(
                    """CREATE TEMP TABLE {stage} ON COMMIT DROP AS
                       SELECT {q_list}, s,
                              ((row_number() OVER (ORDER BY s, random()) - 1)
                               % greatest((SELECT count(*) FROM {src}) / {l}, 1) + 1)::int AS g
                       FROM (SELECT {q_in}, {sa} AS s FROM {src}
                             ORDER BY s, {q_list}) AS o"""
                ).format(
                    stage=stage,
                    q_list=q_list,
                    l=sql.Literal(l),
                    q_in=sql.SQL(", ").join(
                        sql.SQL("{} AS {}").format(c.ident, q) for c, q in zip(qi, qs, strict=True)
                    ),
                    sa=sensitive.ident,
                    src=source.ident,
                )
            )
        if same_snapshot:
            # The same snapshot was found l-eligible (so n >= l): the deal put its rows
            # round-robin into n // l groups; nothing to recount (the gate verifies the tables).
            rows, top = staged.rowcount, 0
            groups = rows // l
        else:
            # One pass: g runs over 1..groups, so its maximum is the number of groups.
            rows, groups, top = conn.execute(
                sql.SQL(
                    """SELECT coalesce(sum(c), 0)::bigint, coalesce(max(g), 0),
                              coalesce(max(c), 0)
                       FROM (SELECT count(*) AS c, max(g) AS g FROM {stage} GROUP BY s) f"""
                ).format(stage=stage)
            ).fetchone()
        if not rows or top * l > rows:  # the source changed since check_eligible
            conn.execute(sql.SQL("DROP TABLE {}").format(stage))
            raise DbanonError(f"{source} changed during the build and is no longer {l}-eligible")
        # Group ids: a permutation of 1..groups drawn after the deal's draws (issue 24), so a
        # group's id is not its place in the deal.
        perm = conn.execute(
            "SELECT coalesce(array_agg(i ORDER BY random(), i), '{}') "
            "FROM generate_series(1, %s) i", [groups]
        ).fetchone()[0]
        # ST by a sort and a streaming count: a hash table of n groups is slower than the sort
        # its ORDER BY needs anyway.
        with local_settings(conn, enable_hashagg="off"):
            conn.execute(
                sql.SQL(
                    """CREATE TABLE {qit} AS SELECT {q_out}, ({perm}::int4[])[g] AS {gid}
                       FROM {stage} ORDER BY {gid}, {q_list}"""
                ).format(
                    perm=sql.Placeholder("perm"),
                    qit=qit,
                    q_out=sql.SQL(", ").join(
                        sql.SQL("{} AS {}").format(q, c.ident)
                        for c, q in zip(qi, qs, strict=True)
                    ),
                    gid=sql.Identifier(GROUP_ID),
                    stage=stage,
                    q_list=q_list,
                ),
                {"perm": perm},
            )
            conn.execute(
                sql.SQL(
                    """CREATE TABLE {st} AS
                       SELECT ({perm}::int4[])[g] AS {gid}, s AS {sa}, count(*)::int AS {count}
                       FROM {stage} GROUP BY g, s ORDER BY 1, s"""
                ).format(
                    perm=sql.Placeholder("perm"),
                    st=st,
                    gid=sql.Identifier(GROUP_ID),
                    sa=sensitive.ident,
                    count=sql.Identifier(COUNT),
                    stage=stage,
                ),
                {"perm": perm},
            )
        conn.execute(sql.SQL("DROP TABLE {}").format(stage))
    return AnatomyResult(groups=groups, rows=rows, residual_rows=rows - groups * l)


@dataclass(frozen=True)
class AnatomyFigures:
    """What the verification read of the QIT on the way: its rows and groups."""

    rows: int
    groups: int
    smallest: int  # rows of the smallest group


def verify_anatomy(
    conn: psycopg.Connection,
    qit: sql.Identifier,
    st: sql.Identifier,
    l: int,  # noqa: E741 - the paper's name
) -> AnatomyFigures:
    """Raise ModelViolation unless the published QIT/ST keep Anatomy's l-diversity promise.

    Independent of the build: it reads only the two tables. Every ST group must hold >= l
    distinct values, none in more than 1/l of the group's rows (the adversary's confidence), and
    each group's QIT row count must equal its ST count sum (else the ST misstates the odds).
    One pass over each table settles all of it; the offending group is looked up only when
    something fails. Grouping is done by sorting: cheap when the tables are stored in group
    order (as built), and never wrong when they are not.
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
    ctes = sql.SQL(
        """WITH per_group AS (
               SELECT g, count(*) AS d, sum(c) AS n, max(c) AS top, sum(bad) AS bad,
                      count(*) < {l} OR max(c) * {l} > sum(c) AS fails
               FROM (SELECT {gid} AS g, {v} AS v, sum({count}) AS c,
                            count(*) FILTER (WHERE {gid} IS NULL OR {v} IS NULL
                                             OR {count} IS NULL OR {count} <= 0) AS bad
                     FROM {st} GROUP BY {gid}, {v}) per_value
               GROUP BY g),
           q AS (SELECT {gid} AS g, count(*) AS n FROM {qit} GROUP BY {gid}),
           sizes AS (SELECT coalesce(q.g, p.g) AS g, q.n AS qn, p.n AS sn, p.d, p.top, p.bad,
                            p.fails
                     FROM q FULL JOIN per_group p ON p.g = q.g) """
    ).format(
        gid=sql.Identifier(GROUP_ID),
        v=sql.Identifier(values[0]),
        count=sql.Identifier(COUNT),
        st=st,
        qit=qit,
        l=sql.Literal(l),
    )
    with local_settings(conn, enable_hashagg="off"):
        bad, groups, failing, mismatches, rows, classes, smallest = conn.execute(
            ctes
            + sql.SQL(
                """SELECT coalesce(sum(bad), 0), count(d), count(*) FILTER (WHERE fails),
                          count(*) FILTER (WHERE qn IS DISTINCT FROM sn),
                          coalesce(sum(qn), 0), count(qn), coalesce(min(qn), 0)
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
    return AnatomyFigures(rows=int(rows), groups=int(classes), smallest=int(smallest))
