"""Full-domain generalisation, searched and released as SQL.

Full-domain generalisation maps every value of a quasi-identifier (QI) to the same level of its
hierarchy; a *node* of the lattice is one level per QI. This module finds the node of least loss
whose generalised table satisfies the privacy models, and writes the SELECT that releases it.

The hierarchies per QI are dbanon.setlogic.hierarchies, the search dbanon.setlogic.lattice;
this module is the release.

Release (`release_select`): one SELECT that generalises the live source and suppresses, at every
read, each class that breaks any promised model, so that a VIEW keeps every promise (not only k)
whatever is inserted, updated or deleted later; t-closeness is kept against the distribution of
the rows the view shows (dbanon.models.suppression).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import psycopg
from psycopg import sql

from dbanon.core import generalise
from dbanon.core.hierarchy import Hierarchy
from dbanon.db.catalog import Column, Relation
from dbanon.db.shuffle import shuffle_key
from dbanon.errors import DbanonError, quote_ident
from dbanon.models import (
    KAnonymity,
    PrivacyModel,
    kept_classes,
)
from dbanon.models.base import Target
from dbanon.setlogic.hierarchies import (
    AnyHierarchy,
    CalendarHierarchy,
    IntervalHierarchy,
    _as_number,
    _calendar_ncp,
    _calendar_value,
    _effective,
    _interval_ncp,
    _interval_value,
    _measure,
    _stored_map,
    _unmade,
    _whole_bin_low,
)
from dbanon.setlogic.lattice import _k_of

# work_mem of the release's statement (if the session's is lower): its hash of the classes and
# its shuffle of the whole source run in memory at 1M rows instead of spilling to disk.
RELEASE_WORK_MEM = "256MB"


def release_select(
    source: Relation,
    qi: list[Column],
    hierarchies: Mapping[str, AnyHierarchy],
    levels: Mapping[str, int],
    sensitive: list[str],
    models: Sequence[PrivacyModel],
    *,
    shuffle: bool = True,
    ranges: str = generalise.DEFAULT_FORM,
    judged: bool = False,
    conn: psycopg.Connection | None = None,
) -> sql.Composable:
    """A SELECT of the source generalised to `levels`, every class that breaks a model left out.

    It reads the source live, so a VIEW of it keeps every promise as the source changes: the
    classes are formed and judged at every read, and rows of a class that breaks any model
    (smaller than the largest k of the models, not l-diverse, too far from the distribution of
    the rows shown, ...) are never shown; see dbanon.models.suppression for how t-closeness is
    kept against the distribution of what remains. Models that read a sensitive column read the
    first of `sensitive`. The row key is not selected; rows come out in random order
    (`shuffle`), so neither the source order nor the class order leaks. Values a stored
    hierarchy does not cover (inserted since) are released as its root.
    Output columns: the QIs, then the sensitive columns. Interval and calendar QIs read as
    `ranges` says (dbanon.core.generalise: 'text', or 'typed' ranges), the others as text.

    Shape: a class is its generalised values as one text (a record's: `ROW(...)::text`, NULL
    told from '' and every value quoted where it must be, compared byte by byte), of the
    cheapest key naming each released value (an interval of whole units by its bigint low end,
    not its label); QIs released as a constant are left out. The classes smaller than the
    largest k are one hash GROUP BY of that text (a pass the planner may run in parallel), and
    the rows are read again, those of a small class left out by a hashed NOT IN (the text is
    never NULL): no sort but the shuffle's, where a window count over the classes sorted every
    row by them first (0.7 s more at 1M rows). With other models, the rows left are kept in a
    MATERIALIZED CTE with their class text; the models judge the classes from that CTE
    (`kept_classes`), and rows are selected by it.

    `judged`: the caller counted every class at `levels` on this snapshot and none breaks a
    model (a search that suppressed nothing): every row is released, with no pass that judges
    the classes again (a table's build; never a view, whose source changes). The classes are
    the search's: a label names one code of its level, a value its own (numbers released
    without trailing zeros, so 1.0 and 1.00 are one class in both). The release's checks
    still judge what was written.
    """
    if ranges not in generalise.RANGE_FORMS:
        raise DbanonError(f"ranges must be one of {', '.join(generalise.RANGE_FORMS)}")
    joins: list[sql.Composable] = []
    gen: list[sql.Composable] = []
    part: list[sql.Composable | None] = []  # per QI, its class key (None: a constant)
    for i, col in enumerate(qi):
        kind, h, height = _effective(col, hierarchies)
        if col.name not in levels:
            raise DbanonError(f"no level given for quasi-identifier {quote_ident(col.name)}")
        level = levels[col.name]
        ref = sql.SQL("s.{}").format(col.ident)
        if kind in ("interval", "calendar") and h is None:
            if level > 0:
                raise DbanonError(
                    f"level {level} of {quote_ident(col.name)} needs its {kind} hierarchy: pass "
                    "FullDomainResult.hierarchies to release_select"
                )
            h = _unmade(kind, col)
        if not 0 <= level <= (h.height if h is not None else height):
            raise DbanonError(f"level {level} of {quote_ident(col.name)} is outside its hierarchy")
        if isinstance(h, IntervalHierarchy):
            gen.append(_interval_value(h, col, ref, level, ranges))
            if level >= h.height:
                part.append(None)
            elif level > 0 and h.base != "numeric" and h.widths[level - 1] % 1 == 0:
                # an interval of whole units is named by its low end, a bigint (its released
                # value is a function of it): a cheaper sort key than the label
                part.append(_whole_bin_low(h, _as_number(h.base, ref), h.widths[level - 1]))
            else:
                part.append(gen[-1])
            continue
        if isinstance(h, CalendarHierarchy):
            gen.append(_calendar_value(h, col, ref, level, ranges))
            part.append(None if level >= h.height else gen[-1])
            continue
        if level == 0:
            gen.append(sql.SQL("{}::text").format(ref))
        elif isinstance(h, Hierarchy) and level < h.height:
            alias = sql.Identifier(f"dbanon_h{i}")
            joins.append(
                sql.SQL("LEFT JOIN {map} {a} ON {a}.value = {ref}::text").format(
                    map=_stored_map(h, level), a=alias, ref=ref
                )
            )
            gen.append(
                sql.SQL("coalesce({}.label, {})").format(alias, sql.Literal(h.labels[h.root]))
            )
        else:
            root = h.labels[h.root] if isinstance(h, Hierarchy) else "*"
            gen.append(sql.SQL("{}::text").format(sql.Literal(root)))
            part.append(None)
            continue
        part.append(gen[-1])
    needs = [m for m in models if m.needs_sensitive]
    if needs and not sensitive:
        raise DbanonError(f"{needs[0].name} needs a sensitive column")
    names = [c.name for c in qi] + list(sensitive)
    cls = _fresh("dbanon_class", names)
    # Any k-anonymity is implied by the largest k, which the count of each class enforces.
    others = [m for m in models if not isinstance(m, KAnonymity)]
    # A class: its generalised values (or a cheaper key naming each) as one text, a record's
    # (quoted where a value needs it, NULL apart from ''), so that equal text is the same
    # class and a byte comparison tells; a QI released as a constant ('*') splits nothing.
    keys = [p for p in part if p is not None]
    key = sql.SQL('ROW({})::text COLLATE "C"').format(sql.SQL(", ").join(keys))
    src = sql.SQL("{} s {}").format(source.ident, sql.SQL(" ").join(joins))
    small = sql.SQL(
        "SELECT c FROM (SELECT {key} AS c FROM {src}) x GROUP BY c HAVING count(*) < {k}"
    ).format(key=key, src=src, k=sql.Literal(_k_of(models)))
    cols = sql.SQL(", ").join(
        [sql.SQL("{} AS {}").format(g, c.ident) for g, c in zip(gen, qi, strict=True)]
        + [sql.SQL("s.{}").format(sql.Identifier(n)) for n in sensitive]
    )
    out = sql.SQL(", ").join(map(sql.Identifier, names))
    order = sql.SQL(" ORDER BY random()") if shuffle else sql.SQL("")
    if judged:  # a table's rows (a view judges at every read): sorted in parallel
        if shuffle:
            order = sql.SQL(" ORDER BY {}").format(shuffle_key(source, "s", conn))
        return sql.SQL("SELECT {cols} FROM {src}{order}").format(cols=cols, src=src, order=order)
    large = sql.SQL("SELECT {cols}{cls} FROM {src} WHERE {key} NOT IN ({small})").format(
        cols=cols,
        cls=sql.SQL(", {} AS {}").format(key, sql.Identifier(cls)) if others else sql.SQL(""),
        src=src, key=key, small=small,
    )  # fmt: skip
    if not others:
        return sql.SQL("SELECT {out} FROM ({large}) dbanon_classes{order}").format(
            out=out, large=large, order=order)  # fmt: skip
    rows = sql.Identifier("dbanon_rows")
    needs_sa = [m for m in others if m.needs_sensitive]
    target = Target(rows, [cls], sensitive[0] if needs_sa else None)
    return sql.SQL(
        """WITH {rows} AS MATERIALIZED ({large})
           SELECT {out} FROM {rows} WHERE {cls} IN ({kept}){order}"""
    ).format(
        rows=rows,
        out=out,
        cls=sql.Identifier(cls),
        large=large,
        kept=kept_classes(target, others),
        order=order,
    )


def _fresh(name: str, taken: Sequence[str]) -> str:
    """`name`, with underscores appended until it is not one of `taken`."""
    while name in taken:
        name += "_"
    return name


def node_loss(
    conn: psycopg.Connection, shown: Relation, source: Relation, qi: list[Column],
    hierarchies: Mapping[str, AnyHierarchy], levels: Mapping[str, int],
) -> float:  # fmt: skip
    """NCP of a node as the search reports it (dbanon.setlogic.lattice's module note), for a
    node kept rather than searched (a sealed refresh): over the rows of `source`, each row of
    `shown` costing its values' NCP at the node and every other row 1 per QI. Interval and
    calendar spans are the source's now, as a search of it would take them."""
    measured: list[sql.Composable] = []
    for col in qi:
        _, h, _ = _effective(col, hierarchies)
        x: sql.Composable = sql.SQL("NULL::numeric")
        if isinstance(h, IntervalHierarchy):
            x = sql.SQL("{}::numeric").format(_as_number(h.base, col.ident))
        elif isinstance(h, CalendarHierarchy):
            x = sql.SQL("{}::numeric").format(_measure(col, col.ident))
        measured.append(sql.SQL("min({0}), max({0})").format(x))
    spans = conn.execute(
        sql.SQL("SELECT count(*), {} FROM {}").format(sql.SQL(", ").join(measured), source.ident)
    ).fetchone()
    total = int(spans[0])
    if not total or not qi:
        return 0.0
    joins: list[sql.Composable] = []
    terms: list[sql.Composable] = []
    for i, col in enumerate(qi):
        kind, h, height = _effective(col, hierarchies)
        level = levels[col.name]
        ref = sql.SQL("s.{}").format(col.ident)
        if level == 0:
            continue
        if level >= height:
            terms.append(sql.SQL("1::float8"))
        elif isinstance(h, IntervalHierarchy):
            low, high = spans[1 + 2 * i : 3 + 2 * i]
            now = IntervalHierarchy(h.column, h.base, h.widths, low, high)
            terms.append(_interval_ncp(now, _as_number(h.base, ref), level))
        elif isinstance(h, CalendarHierarchy):
            low, high = spans[1 + 2 * i : 3 + 2 * i]
            cal = CalendarHierarchy(h.column, h.base, low, high, h.zone)
            terms.append(_calendar_ncp(cal, col, ref, level))
        elif isinstance(h, Hierarchy):
            alias = sql.Identifier(f"dbanon_n{i}")
            joins.append(sql.SQL(
                "LEFT JOIN (SELECT m.value, (count(*) OVER (PARTITION BY m.label) - 1)::float8 "
                "/ {d} AS r FROM dbanon.hierarchy_map m JOIN dbanon.hierarchy h "
                "ON h.id = m.hierarchy_id WHERE h.name = {name} AND h.version = {version} "
                "AND m.level = {level}) {a} ON {a}.value = {ref}::text"
            ).format(d=sql.Literal(max(len(h.leaves) - 1, 1)), name=sql.Literal(h.name),
                     version=sql.Literal(h.version), level=sql.Literal(level), a=alias,
                     ref=ref))  # fmt: skip
            terms.append(sql.SQL("coalesce({}.r, 1)").format(alias))  # not covered: the root
    row = conn.execute(
        sql.SQL("SELECT count(*), coalesce(sum({}), 0) FROM {} s {}").format(
            sql.SQL(" + ").join(terms) if terms else sql.SQL("0::float8"), shown.ident,
            sql.SQL(" ").join(joins),
        )
    ).fetchone()
    released, loss = int(row[0]), float(row[1])
    return (loss + (total - released) * len(qi)) / (total * len(qi))
