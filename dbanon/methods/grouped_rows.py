"""A grouping method's rows: streamed out once with everything the release and the map need, and
the release written back from them with one binary COPY.

The extract (one COPY of the source) brings each row's key, QIs (for the algorithm), the text of
its numeric QIs as the release shows them, its sensitive and `--keep` columns in their own
binary form, its fingerprint and tag (dbanon.setlogic.composition.Prior), and what the map held
of it (read apart, matched by key). Once the algorithm has grouped the rows, every group is
labelled once — a numeric or date QI by the text of its least and greatest rows (`[36,39]`, or
the value alone), a categorical one by its hierarchy's LCA or the set of values present
(dbanon.core.generalise) — and the release is written row by row from those labels and the
streamed bytes, in an order drawn from the run's secret seed: no staging table, no join with the
source, no sort to shuffle. Nothing else leaves the arrays: never the key, never a column nobody
declared.

A group's bounds are found by the float8 the algorithm reads, which orders integers, floats,
dates and times exactly; where two values one float8 cannot tell apart tie at a bound (a numeric
of many digits, a bigint beyond 2^53), the server orders that group's tied values in their own
type, so a group's bounds are always its true least and greatest values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms.base import QIArrays
from dbanon.core import generalise
from dbanon.core.hierarchy import Hierarchy
from dbanon.db import catalog
from dbanon.db import copykernels as kernels
from dbanon.db.aside import Aside
from dbanon.db.catalog import Column
from dbanon.db.parts import Where, copy_parts
from dbanon.db.parts import where as where_clause
from dbanon.db.rows import Dictionary, Field, as_text, copy_rows
from dbanon.db.stream import Coded, Keys, key_field
from dbanon.errors import DbanonError, offenders, quote_ident, quote_name
from dbanon.setlogic import composition
from dbanon.setlogic.grouped_map import Mapped, OldMap

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved

def codes(values: np.ndarray | Coded) -> tuple[np.ndarray, list[str | None]]:
    """Integer codes of sensitive values (NULL a value of its own) and the value of each code:
    a Coded's own, else counted from the values."""
    coded = values if isinstance(values, Coded) else Coded.of(values)
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


def _qi_columns(
    r: Resolved, with_sensitive: bool, stream: tuple[sql.Composable, str] | None
) -> tuple[list[sql.Composable], list[str]]:
    """The extract's key, QI (and sensitive) expressions over `s`, with their COPY kinds."""
    key, kind = key_field(r.key)
    exprs: list[sql.Composable] = [key]
    kinds = [kind]
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
    return exprs, kinds


def _decoded(r: Resolved, keys: Any, values: list[Any], with_sensitive: bool, raw: bool = False
             ) -> tuple[Keys, QIArrays, Any]:  # fmt: skip
    """The key, QI arrays and sensitive column of the first streamed columns (an object array
    of its values; `raw`: as streamed, a Coded or float64 array)."""
    sensitive = None
    if with_sensitive:
        sensitive = values[len(r.qi)] if raw else objects(values[len(r.qi)])
    numeric, categorical = [], []
    for col, vals in zip(r.qi, values[: len(r.qi)], strict=True):
        if r.is_categorical(col):
            assert isinstance(vals, Coded)
            categorical.append(encode(r, col, vals))
        else:
            numeric.append(vals)
    assert isinstance(keys, Keys)
    return keys, QIArrays.build(numeric, categorical, n=len(keys)), sensitive


def _query(r: Resolved, exprs: list[sql.Composable], extra: list[sql.Composable] = (),
           where: sql.Composable | None = None) -> sql.Composable:  # fmt: skip
    names = [sql.SQL("{} AS {}").format(e, sql.Identifier(f"c{i}")) for i, e in enumerate(exprs)]
    return sql.SQL("SELECT {} FROM {} s{}").format(
        sql.SQL(", ").join([*names, *extra]), r.source.ident, where_clause(where))  # fmt: skip


def _stream(conn: psycopg.Connection, r: Resolved, query: Callable[[Where], sql.Composable],
            kinds: list[str]) -> list[Any]:  # fmt: skip
    """The source's rows as `query(where)` gives them, streamed in parts at once where the
    source allows (dbanon.db.parts)."""
    return copy_parts(conn, query, r.source, "s", kinds, r.rows, _say(r))


def _say(r: Resolved) -> Any:
    return lambda n: r.say(f"streaming rows out with COPY: {n:,} of {r.rows:,}")


def extract(
    conn: psycopg.Connection,
    r: Resolved,
    with_sensitive: bool,
    stream: tuple[sql.Composable, str] | None = None,
) -> tuple[Keys, QIArrays, np.ndarray | None]:
    """Stream key, QI (and sensitive) columns out with COPY and encode them for the algorithms.

    Nothing is held per value as a Python object (dbanon.db.stream): keys stay bytes, numeric
    QIs float64, categorical ones codes. The sensitive column comes as an object array of its
    values (None for NULL): as text, or as `stream` says (an expression over the source's
    columns and its COPY type, text or float8)."""
    exprs, kinds = _qi_columns(r, with_sensitive, stream)
    keys, *values = _stream(conn, r, lambda w: _query(r, exprs, where=w), kinds)
    return _decoded(r, keys, values, with_sensitive)


def extract_coded(conn: psycopg.Connection, r: Resolved) -> tuple[Keys, QIArrays, Coded]:
    """`extract` with the (first) sensitive column as COPY coded it, streamed as text: its
    distinct values and an int32 code per row, no object array of a million references."""
    exprs, kinds = _qi_columns(r, True, None)
    keys, *values = _stream(conn, r, lambda w: _query(r, exprs, where=w), kinds)
    coded = values[len(r.qi)]
    assert isinstance(coded, Coded)
    keys, qi, _ = _decoded(r, keys, values[: len(r.qi)], False)
    return keys, qi, coded


def objects(column: np.ndarray | Coded | Keys) -> np.ndarray:
    """A streamed column as an object array of its values, None for NULL (what methods'
    `encode_sensitive` receive)."""
    if isinstance(column, Coded):
        return column.objects()
    out = np.asarray(column, dtype=object)
    out[np.isnan(np.asarray(column, dtype=np.float64))] = None
    return out


@dataclass(frozen=True)
class Extracted:
    """A grouping run's rows, as one extract streamed them (see the module's docstring)."""

    keys: Keys
    qi: QIArrays | None  # None once labelled: no QI array outlives the labels (memory)
    # the algorithm's sensitive column as streamed, a Coded or float64 array (None: not
    # streamed); GroupingMethod.encode_sensitive makes what its `cluster` receives
    sensitive: Coded | np.ndarray | None
    # per numeric QI (in r.qi's order): its value as the release shows it, or (an integer QI)
    # the span its normalised values were divided by
    texts: list[Keys | float]
    # per sensitive and kept column: its value in its binary form (None: the tags' values)
    shown: list[Keys | None]
    textual: set[str]  # those of them streamed as text instead (`as_text`)
    tags: Coded | None  # each row's tagged sensitive value (None without one)
    fp: np.ndarray  # int64: each row's fingerprint (composition.fingerprint)
    fp_kind: str  # how it was made (composition.RECORD, MD5)
    before: np.ndarray | None  # the map's group of each row (-1: none); None: no map
    state: np.ndarray | None  # its fingerprint's state (composition.Prior)
    old: OldMap | None
    sizes: np.ndarray | None = None  # rows per group of the map (all its rows); None: no map


def shown_columns(r: Resolved) -> list[Column]:
    """The columns a release shows as they are: the sensitive ones, then the kept ones."""
    return [*r.sensitive, *r.keep]


_INTEGERS = {"smallint", "integer"}  # their text is their integer's: not streamed
_TEXTS = {"text", "character varying"}  # their binary form is their text's


def extract_rows(
    conn: psycopg.Connection, r: Resolved, with_sensitive: bool,
    stream: tuple[sql.Composable, str] | None, prior: composition.Prior,
) -> Extracted:  # fmt: skip
    """One COPY of the source (matched with the map, when the release has one): see Extracted.
    What one column gives twice is streamed once: an integer QI's text is its number's, a
    text sensitive column (the first) is its tag's value, as the algorithm reads it too.
    The map is read meanwhile on a second backend over the run's snapshot (Aside): a refresh
    then costs its publish's extract, not that and a second COPY after it."""
    if not prior.mapped:
        return _extract(conn, r, with_sensitive, stream, prior, None)
    assert r.release_id is not None
    release_id = r.release_id
    held = Aside(conn, lambda c: composition.read_map(c, release_id))
    the_map = cache(held.result)  # read once, by whichever extract asks first
    try:
        ex = _extract(conn, r, with_sensitive, stream, prior, the_map)
    finally:
        held.close()
    if not the_map().legacy(prior.kind):
        return ex
    del ex  # a map an older dbanon wrote (md5 fingerprints): the source read again with them
    return _extract(conn, r, with_sensitive, stream, replace(prior, legacy=True), the_map)


def _extract(
    conn: psycopg.Connection, r: Resolved, with_sensitive: bool,
    stream: tuple[sql.Composable, str] | None, prior: composition.Prior,
    held_map: Callable[[], composition.MapRows] | None,
) -> Extracted:  # fmt: skip
    from_tags = bool(r.sensitive) and generalise.base_type(r.sensitive[0]) in _TEXTS
    sensitive_text = with_sensitive and stream is None and bool(r.sensitive)
    exprs, kinds = _qi_columns(r, with_sensitive and not sensitive_text, stream)
    nums = [c for c in r.qi if not r.is_categorical(c)]
    texted = [c for c in nums if generalise.base_type(c) not in _INTEGERS]
    exprs += [generalise.value(c, sql.SQL("s.{}").format(c.ident), "text") for c in texted]
    kinds += ["key"] * len(texted)
    textual = as_text(conn, shown_columns(r))
    streamed = [c for j, c in enumerate(shown_columns(r)) if not (j == 0 and from_tags)]
    exprs += [sql.SQL("s.{}::text" if c.name in textual else "s.{}").format(c.ident)
              for c in streamed]  # fmt: skip
    kinds += ["key"] * len(streamed)
    width = len(kinds)
    keys, *values = _stream(conn, r, lambda w: prior.wrap(_query(r, exprs, prior.columns(), w),
                                                          width), [*kinds, *prior.kinds()])
    head = len(r.qi) + (1 if with_sensitive and not sensitive_text else 0)
    at = head + len(texted) + len(streamed)
    fp = np.asarray(values[at])
    md5 = np.asarray(values[at + 1]) if prior.legacy else None
    at += 1 if prior.legacy else 0
    tags = values[at + 1] if r.sensitive else None
    if sensitive_text:  # the algorithm's column is the tags' values
        assert isinstance(tags, Coded)
        values.insert(head, untagged(tags))
        head, at = head + 1, at + 1
    # An integer QI's values are its normalised ones times its span (QIArrays.build's
    # divisor), exactly: only that span is kept, no second array of them.
    ints = {c.name: _span(np.asarray(v)) for c, v in zip(
        r.qi, values[: len(r.qi)], strict=True) if c in nums and c not in texted}  # fmt: skip
    keys, qi, sensitive = _decoded(r, keys, values[:head], with_sensitive, raw=True)
    given = iter(values[head : head + len(texted)])
    texts = [ints[c.name] if c.name in ints else next(given) for c in nums]
    given = iter(values[head + len(texted) : at])
    shown = [None if j == 0 and from_tags else next(given)
             for j in range(len(shown_columns(r)))]  # fmt: skip
    at += 2 if r.sensitive else 1
    before = state = old = sizes = None
    if held_map is not None:  # what the latest map holds of each row, matched by key
        held = held_map()
        at = kernels.match_keys(keys.blob, keys.lens, held.keys.blob, held.keys.lens)
        mapped = at >= 0
        where = np.where(mapped, at, 0)

        def of(column: np.ndarray) -> np.ndarray:
            return np.where(mapped, column[where] if len(column) else -1, -1)

        before = of(held.gid)
        sizes = np.bincount(held.gid[held.gid >= 0])
        old = OldMap(mapped, of(held.vid).astype(np.int32), of(held.sid).astype(np.int32))
        # 1: unchanged since; 0: changed, or new; -1: mapped before fingerprints were kept.
        # A map row's fingerprint is compared with this run's of its own kind.
        state = np.zeros(len(at), dtype=np.int64)
        if len(held.fp):
            stored, record, has = held.fp[where], held.record[where], held.has_fp[where]
            if prior.kind == composition.RECORD:
                same = np.where(record, stored == fp, False if md5 is None else stored == md5)
            else:
                same = ~record & (stored == fp)
            state = np.where(~mapped, 0, np.where(~has, -1, same.astype(np.int64)))
    return Extracted(keys, qi, sensitive, texts, shown, textual, tags, fp, prior.kind, before,
                     state, old, sizes)  # type: ignore[arg-type]


def _span(values: np.ndarray) -> float:
    """What QIArrays.build divides a numeric column by (its span, 1 for a constant one)."""
    span = float(values.max() - values.min()) if len(values) else 0.0
    return span if span > 0 else 1.0


def untagged(tags: Coded) -> Coded:
    """The values tags stand for (composition.value_of: None for NULL), by the same codes."""
    return Coded([composition.value_of(str(t)) for t in tags.values], tags.codes)


def secret_order(r: Resolved, n: int) -> np.ndarray:
    """The order the release's rows are written in: a permutation drawn from the run's secret
    seed (a fresh secret draw for a method without one)."""
    rng = np.random.default_rng(None if r.seed is None else [int(r.seed), 47])
    order = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    rng.shuffle(order)
    return order


def label_groups(
    conn: psycopg.Connection, r: Resolved, ex: Extracted, qi: QIArrays, gid: np.ndarray,
    *, sets: bool = True,
) -> tuple[list[Field], dict[str, float]]:  # fmt: skip
    """Every group's label of every QI, as the release's QI fields (`write_release`), and the
    loss of each column released as value sets. `qi`: the QI arrays of the rows released
    (ex.qi, or its subset where rows wait); `gid`: each row's group, -1 for a row withheld.
    `sets=False`: a categorical QI without a hierarchy is the value its group agrees on, else
    `*` (its flat hierarchy's root), never the set of values present."""
    assert ex.qi is not None
    gid = np.asarray(gid, dtype=np.int32)  # as the map holds them (`mapped`): half the bytes
    shown = gid >= 0
    index = generalise.GroupIndex.of(gid if shown.all() else gid[shown])
    groups = len(index.present)
    place = np.full(int(index.present[-1]) + 2 if groups else 1, -1, dtype=np.int32)
    place[index.present] = np.arange(groups)  # and place[-1] = -1: a row withheld
    gpos = place[gid]  # each row's place among the groups
    typed = r.options.get("ranges") == "typed"
    fields, losses, nums, cats = [], {}, 0, 0
    for col in r.qi:
        if r.is_categorical(col):
            as_set = sets and col.name not in r.hierarchies
            h = qi.hierarchies[cats]
            ids, labels, covered = generalise.group_labels(h, qi.cat[:, cats], index, as_set)
            if covered is not None:
                losses[col.name] = generalise.set_loss(covered, index, len(index.order),
                                                       len(h.leaves))  # fmt: skip
            fields.append(Field.entries(Dictionary.of(labels), ids, gpos))
            cats += 1
            continue
        key = np.ascontiguousarray(ex.qi.num[:, nums])
        lo, hi = kernels.group_ends(gpos, key, groups)
        given = ex.texts[nums]
        if isinstance(given, Keys):
            text = Dictionary.of_keys(given)
            _bounds(conn, col, gpos, key, text, lo, hi)
        else:  # integers: their text, made for the bounds alone
            ends = np.rint(key[np.r_[lo, hi]] * given).astype(np.int64)
            text = Dictionary(*kernels.int_texts(ends))
            lo, hi = np.arange(groups), groups + np.arange(groups)
        starts, lens, data = kernels.range_labels(text.starts, text.lens, text.data, lo, hi,
                                                  typed)  # fmt: skip
        fields.append(Field.entries(Dictionary(starts, lens, data), None, gpos))
        del key  # a row's value: not held beside the next column's
        nums += 1
    return fields, losses


def write_release(conn: psycopg.Connection, r: Resolved, target: sql.Identifier, ex: Extracted,
                  labels: list[Field], gid: np.ndarray) -> None:  # fmt: skip
    """CREATE the release table and write it with one binary COPY: the rows with gid >= 0, each
    QI its group's label (`labels`, from `label_groups`), then the sensitive and kept columns
    as streamed, in secret order."""
    fields = list(labels)
    for raw in ex.shown:
        if raw is None:  # the tags' values, by their codes
            assert ex.tags is not None
            fields.append(Field.entries(Dictionary.of(untagged(ex.tags).values),
                                        np.asarray(ex.tags.codes)))  # fmt: skip
        else:
            fields.append(Field.entries(Dictionary.of_keys(raw)))
    _create(conn, r, target, ex.textual)
    shown = np.asarray(gid) >= 0
    order = secret_order(r, len(gid)) if shown.all() else np.flatnonzero(shown)[
        secret_order(r, int(shown.sum()))]  # fmt: skip
    copy_rows(conn, sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(target), fields, order)
    retype(conn, r, target, r.options.get("ranges") == "typed", ex.textual)


def _bounds(conn: psycopg.Connection, col: Column, gpos: np.ndarray, key: np.ndarray,
            text: Dictionary, lo: np.ndarray, hi: np.ndarray) -> None:  # fmt: skip
    """Mend `lo` and `hi` (rows of each group's least and greatest value) where rows tie at a
    bound as float8 with other values: the server orders those rows' values in the type of
    their range's bounds (as the release shows them) and the true bounds are taken."""
    tied = kernels.tied(gpos, key, text.starts, text.lens, text.data, lo, hi)
    if not tied.any():
        return
    group = np.where(gpos >= 0, gpos, 0)
    rows = np.flatnonzero(tied[group] & (gpos >= 0) & ((key == key[lo[group]]) |
                                                         (key == key[hi[group]])))  # fmt: skip
    blob = text.data.tobytes()
    values = [blob[text.starts[i] : text.starts[i] + text.lens[i]].decode() for i in rows]
    element = sql.SQL(generalise.element_type(col))
    for ends, way in ((lo, sql.SQL("ASC")), (hi, sql.SQL("DESC"))):
        for g, i in conn.execute(
            sql.SQL("SELECT DISTINCT ON (g) g, i FROM unnest(%s::int8[], %s::int8[], %s::text[]) "
                    "AS u (g, i, t) ORDER BY g, t::{} {}").format(element, way),
            [gpos[rows].tolist(), rows.tolist(), values],
        ):  # fmt: skip
            ends[g] = i


def _create(conn: psycopg.Connection, r: Resolved, target: sql.Identifier,
            textual: set[str]) -> None:  # fmt: skip
    """The release table, empty: QIs as text (ranges, where typed, once written: `retype`),
    the sensitive and kept columns of their source types (and collations), as a CREATE TABLE
    AS of the source would make them (as text, those without a binary form)."""
    cols = [sql.SQL("NULL::text AS {}").format(c.ident) for c in r.qi]
    cols += [sql.SQL("s.{c}::text AS {c}" if c.name in textual else "s.{c}").format(c=c.ident)
             for c in shown_columns(r)]  # fmt: skip
    conn.execute(sql.SQL("CREATE TABLE {} AS SELECT {} FROM {} s WITH NO DATA").format(
        target, sql.SQL(", ").join(cols), r.source.ident))  # fmt: skip


def retype(conn: psycopg.Connection, r: Resolved, target: sql.Identifier, typed: bool,
            textual: set[str]) -> None:  # fmt: skip
    """Columns written as text that the release holds typed: numeric and date QIs under
    `--ranges typed` (range literals become ranges), and columns without a binary form."""
    cast = [(c, sql.SQL(generalise.range_type(c))) for c in r.qi
            if typed and not r.is_categorical(c)]  # fmt: skip
    for c in shown_columns(r):
        if c.name in textual:  # its type by name (nothing written here as SQL text)
            schema, name = conn.execute(
                "SELECT n.nspname, t.typname FROM pg_type t JOIN pg_namespace n "
                "ON n.oid = t.typnamespace WHERE t.oid = %s::regtype", [c.type]).fetchone()
            cast.append((c, sql.Identifier(schema, name)))
    if cast:
        conn.execute(sql.SQL("ALTER TABLE {} {}").format(target, sql.SQL(", ").join(
            sql.SQL("ALTER COLUMN {c} TYPE {t} USING {c}::{t}").format(c=c.ident, t=t)
            for c, t in cast)))  # fmt: skip


def mapped(ex: Extracted, gid: np.ndarray, wait: np.ndarray | None) -> Mapped:
    """What the map and the intersection guard read of this run (dbanon.setlogic.grouped_map)."""
    return Mapped(ex.keys, np.asarray(gid, dtype=np.int32), wait, ex.tags, ex.fp, ex.old,
                  ex.fp_kind)
