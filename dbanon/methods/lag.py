"""Method `lag` (thesis ch. 5): local anatomy plus k-anonymous generalisation of the unflagged
values inside each QI-partition subset (rows sharing the same unflagged attributes).

`--variant partition` is LAG_1 (Algorithm 5.2, binary median cuts, widest dimension first),
`--variant ncp` LAG_2 (Xu et al.'s Top-down with re-balancing, which Algorithm 5.3 abridges),
`--variant ncp-thesis` LAG_2 as Algorithm 5.3 is written (nearest seed; a split leaving either
side below k keeps the set whole); dbanon.algorithms.lag has all three and the
decision on subsets smaller than k (suppressed, counted in the run's `suppressed_rows`). The
release is local anatomy's (dbanon.setlogic.localanatomy) with `group_id` and the QI columns of
`NAME` generalised over each group: numeric `lo-hi` (or typed ranges, `--ranges`), categorical
the LCA in the QI's hierarchy or '*' without one. It promises k-anonymity of `NAME` over its QI
columns (NULL, a flagged cell, a value of its own) and local anatomy's l-diversity.

Across refreshes (docs/composition.md): every run keeps a map of each row's group, buckets
and plausible values per attribute, made from the run's arrays (dbanon.setlogic.measured_map:
LAG judges each row itself, `lag_persist.Judge`, and the lifecycle's gate refuses a run that
narrows anyone below k rows or l values). The default `--refresh-policy persist` lays the
refresh out as dbanon.algorithms.lag_persist says; `regroup` starts over and is refused when it
narrows.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms import lag_persist
from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.lag import VARIANTS, discernibility, generalise, ncp
from dbanon.core.generalise import base_type
from dbanon.core.groupsort import distinct, unique_inverse
from dbanon.db.catalog import Column
from dbanon.db.rows import Dictionary, Field, copy_rows
from dbanon.db.stream import Coded, Values
from dbanon.errors import DbanonError
from dbanon.methods import grouped_rows, register
from dbanon.methods.base import Built, Check, Option, model_check
from dbanon.methods.grouped import RANGES, encode
from dbanon.methods.grouped_rows import _INTEGERS, _span
from dbanon.methods.localanatomy import (
    COPY,
    FLAGS,
    HEURISTIC,
    PRINCIPLE,
    Extracted,
    LaidOut,
    LocalAnatomy,
)
from dbanon.metrics.loss import group_sizes
from dbanon.models.base import Target
from dbanon.setlogic import composition, measured_map
from dbanon.setlogic.localanatomy import GROUP_ID, ROW_ID, Attribute
from dbanon.setlogic.measured_map import SEP

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved


class LAG(LocalAnatomy):
    name = "lag"
    summary = (
        "Local anatomy generalisation (thesis ch. 5): local anatomy, and the unflagged values "
        "of `NAME` generalised in groups of >= k rows sharing the same unflagged attributes "
        "(`--variant partition`: LAG_1 median cuts; `ncp`: LAG_2 Top-down split; `ncp-thesis`: "
        "LAG_2 as Algorithm 5.3 is written); subsets "
        "of fewer than k rows are suppressed and counted"
    )
    promises: ClassVar[tuple[str, ...]] = ("k-anonymity", "distinct-l-diversity")
    requires: ClassVar[tuple[str, ...]] = ("distinct-l-diversity",)
    options: ClassVar[tuple[Option, ...]] = (
        FLAGS, HEURISTIC, PRINCIPLE,
        Option("variant", str, "partition",
               "LAG's generalisation: LAG_1 median cuts (partition), LAG_2 Top-down with "
               "re-balancing (ncp) or LAG_2 as Algorithm 5.3 is written (ncp-thesis).",
               VARIANTS),
        RANGES,
        Option("refresh_policy", str, "persist",
               "On refresh: keep persisting rows in their groups and buckets, merging groups "
               "until a consumer who kept every release still has k rows and l values of "
               "each person (persist), or lay the release out from scratch (regroup; "
               "refused when it would narrow anyone).", ("persist", "regroup")),
    )  # fmt: skip
    generalises = True
    keyed = True
    finite_qis = True  # unlike local anatomy, it measures its QIs to generalise them
    releases = (
        "as `localanatomy`, with `NAME`'s unflagged values generalised over k-anonymous groups "
        "and a group id (no `--keep`)"
    )
    attacker = (
        "as `localanatomy`, and who knows a person's unflagged QIs finds at least k rows of "
        "`NAME`"
    )

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:
        if r.model("k-anonymity") is None:
            raise DbanonError("--algorithm lag needs --k (at least 2)")
        super().validate(conn, r)

    def algorithm_columns(self, r: Resolved) -> list[str]:
        """Every QI (grouped) and the bucketised attributes."""
        return [*dict.fromkeys([*(c.name for c in r.qi), *super().algorithm_columns(r)])]

    def qi_arrays(self, r: Resolved, ex: Extracted) -> QIArrays:
        numeric, categorical = [], []
        for col in r.qi:
            if r.is_categorical(col):
                got = ex.coded.get(col.name)
                coded = Coded.of(ex.data[col.name].tolist()) if got is None else first_seen(got)
                categorical.append(encode(r, col, coded))
            else:
                numeric.append(ex.data[col.name])
        return QIArrays.build(numeric, categorical, n=ex.n)

    def split_flags(
        self, r: Resolved, flagged: dict[str, np.ndarray], n: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Flag masks of the numeric and categorical QIs, in QIArrays' column order."""
        num = [flagged[c.name] for c in r.qi if not r.is_categorical(c)]
        cat = [flagged[c.name] for c in r.qi if r.is_categorical(c)]
        as_matrix = lambda cols: np.stack(cols, axis=1) if cols else np.zeros((n, 0), bool)  # noqa: E731
        return as_matrix(num), as_matrix(cat)

    def released_rows(
        self, r: Resolved, ex: Extracted
    ) -> tuple[np.ndarray, np.ndarray | None, dict[str, Any]]:
        qi = self.qi_arrays(r, ex)
        fnum, fcat = self.split_flags(r, ex.flagged, ex.n)
        k = int(r.model("k-anonymity").k)  # type: ignore[union-attr]
        try:
            gid, figures = generalise(qi, fnum, fcat, k, r.options["variant"], r.seed or 0)
        except ValueError as e:
            raise DbanonError(f"lag cannot publish {r.source}: {e}") from None
        kept = gid >= 0
        if not kept.any():
            raise DbanonError(
                f"lag cannot publish {r.source}: every QI-partition subset has fewer than "
                f"k={k} rows"
            )
        figures["ncp"] = ncp(qi, fnum, fcat, gid)
        figures["gcp"] = figures["ncp"]
        figures["discernibility"] = discernibility(gid)
        figures.update(group_sizes(gid[kept]))  # its QI-partition subsets (group_id)
        return kept, gid[kept] + 1, figures  # group ids from 1, as Table 5.4 numbers them

    def lay_out(
        self, conn: psycopg.Connection, r: Resolved, ex: Extracted, attrs: list[Attribute],
    ) -> LaidOut:  # fmt: skip
        """LAG's groups and local anatomy's buckets; on a refresh that persists, the layout of
        dbanon.algorithms.lag_persist. Either way every row is judged against what the
        release's earlier runs showed, and the map is made from the arrays
        (dbanon.setlogic.measured_map)."""
        assert ex.keys is not None
        previous = composition.previous_cells(conn, r.release_id, ex.keys, r.source, r.key,
                                              r.released_columns)  # fmt: skip
        n = ex.n
        cells, tags = {}, {}
        for a in attrs:
            names = ex.names.get(a.column)
            codes, tags[a.column] = _codes(ex.data[a.column], ex.flagged[a.column], names)
            cells[a.column] = lag_persist.Attr(codes, a.principle, ex.data[a.column], names)
        known: list[lag_persist.Plausible | None] = [None] * n
        if previous is not None:
            known = _known(previous[2], tags, r.sensitive[0].name if r.sensitive else None)
        k = int(r.model("k-anonymity").k)  # type: ignore[union-attr]
        regroup = r.regroup or r.options.get("refresh_policy") == "regroup"
        if previous is None or regroup or not (previous[0] >= 0).any():
            kept, gid, buckets, figures, _ = super().lay_out(conn, r, ex, attrs)
            whole_gid = np.full(n, -1, dtype=np.int64)
            whole_gid[kept] = gid
            whole = {a: np.zeros(n, dtype=np.int32) for a in buckets}  # ids < 2^31
            for a, b in buckets.items():
                whole[a][kept] = b
            judge = lag_persist.Judge(cells, whole, known, k)
        else:
            kept, gid, buckets, figures, judge, whole_gid = self._persist(
                r, ex, cells, previous, known, k
            )
        assert ex.fp is not None and ex.fp_kind is not None
        mapped = measured_map.judged(
            ex.keys, whole_gid, judge.buckets, {a: c.codes for a, c in cells.items()}, tags,
            judge.measure(whole_gid).known, ex.fp, ex.fp_kind, previous is None)  # fmt: skip
        return kept, gid, buckets, figures, mapped

    def _persist(
        self, r: Resolved, ex: Extracted, cells: dict[str, lag_persist.Attr], previous: tuple,
        known: list, k: int,
    ) -> tuple:  # fmt: skip
        old_gid, unchanged, _, shown = previous
        qi = self.qi_arrays(r, ex)
        fnum, fcat = self.split_flags(r, ex.flagged, len(old_gid))
        old_buckets = _old_buckets(shown, list(cells))
        same_flags = np.ones(len(old_gid), dtype=bool)
        for a, cell in cells.items():  # a row whose flags changed shows another pattern
            same_flags &= (old_buckets[a] > 0) == (cell.codes >= 0)
        persisting = np.where(unchanged & same_flags, old_gid, -1)
        rng = np.random.default_rng(secrets.randbits(128))  # placement and ids: secret
        try:
            layout, judge = lag_persist.persist(
                qi, fnum, fcat, cells, k, r.options["variant"], bool(r.options.get("heuristic")),
                rng, persisting, old_buckets, known,
            )  # fmt: skip
        except ValueError as e:
            raise DbanonError(f"lag cannot refresh {r.source}: {e}") from None
        kept = layout.gid >= 0
        if not kept.any():
            raise DbanonError(f"lag cannot publish {r.source}: every QI-partition subset has "
                              f"fewer than k={k} rows")  # fmt: skip
        # Released ids: a fresh permutation (neither the layout's order nor the last run's).
        relabel = rng.permutation(int(layout.gid.max()) + 1) + 1
        whole_gid = np.where(kept, relabel[np.maximum(layout.gid, 0)], -1)
        for a, b in layout.buckets.items():
            ids = np.r_[0, rng.permutation(int(b.max(initial=0))) + 1]  # bucket 0: none
            layout.buckets[a] = ids[b]
        judge = lag_persist.Judge(cells, layout.buckets, known, k)  # with the released ids
        figures = dict(layout.figures)
        figures["ncp"] = ncp(qi, fnum, fcat, layout.gid)
        figures["gcp"] = figures["ncp"]
        figures["discernibility"] = discernibility(layout.gid)
        figures["suppressed_rows"] = int((~kept).sum())
        figures.update(group_sizes(layout.gid[kept]))
        buckets = {a: b[kept] for a, b in layout.buckets.items()}
        return kept, whole_gid[kept], buckets, figures, judge, whole_gid

    def texted(self, r: Resolved) -> list[Column]:
        """Numeric and date QIs whose text is not their integer's: their labels are made from
        it (`materialise`)."""
        return [c for c in r.qi if not r.is_categorical(c)
                and base_type(c) not in _INTEGERS]  # fmt: skip

    def materialise(
        self, conn: psycopg.Connection, r: Resolved, attrs: list[Attribute], main: sql.Identifier,
        ex: Extracted, order: np.ndarray, row_id: np.ndarray, gid: np.ndarray | None,
        bucket: dict[str, np.ndarray],
    ) -> None:  # fmt: skip
        """NAME written from the arrays with one binary COPY, the rows in `order` (a fresh
        secret permutation): each group labelled once in numpy, as the grouping methods label
        theirs (grouped_rows.label_groups: a numeric or date QI by the text of its least and
        greatest rows, a categorical one by its hierarchy's LCA, else the value its rows agree
        on or '*'), and NULL in a QI its rows flagged. A group's rows share their flags (LAG
        groups within QI-partition subsets): a group is flagged in a QI or not at all."""
        assert gid is not None
        whole = np.full(ex.n, -1, dtype=np.int32)
        whole[row_id > 0] = gid
        shown = whole >= 0
        qi = self.qi_arrays(r, ex)
        texts = [ex.texts[c.name] if c.name in ex.texts else _span(ex.data[c.name])
                 for c in r.qi if not r.is_categorical(c)]  # fmt: skip
        assert ex.keys is not None and ex.fp is not None and ex.fp_kind is not None
        # What label_groups reads of a grouping run's rows: its QI arrays and numeric texts.
        rows = grouped_rows.Extracted(ex.keys, qi, None, texts, [], set(), None, ex.fp,
                                      ex.fp_kind, None, None, None)  # fmt: skip
        fields, _ = grouped_rows.label_groups(conn, r, rows, replace(qi, cat=qi.cat[shown]),
                                              whole, sets=False)  # fmt: skip
        del qi, texts, rows
        present = distinct(whole[shown].astype(np.int64))  # the groups, as label_groups places them
        gpos = np.searchsorted(present, whole[shown])
        size = np.bincount(gpos, minlength=len(present))
        for i, c in enumerate(r.qi):
            if c.name in bucket:
                flagged = np.bincount(gpos, weights=bucket[c.name][shown] > 0,
                                      minlength=len(present))  # fmt: skip
                assert ((flagged == 0) | (flagged == size)).all(), "a group's rows share flags"
                fields[i] = _null_in(fields[i], flagged > 0)
        conn.execute(sql.SQL("CREATE TABLE {} ({} int4, {} int4, {})").format(
            main, sql.Identifier(ROW_ID), sql.Identifier(GROUP_ID),
            sql.SQL(", ").join(sql.SQL("{} text").format(c.ident) for c in r.qi)))  # fmt: skip
        copy_rows(conn, COPY.format(main), [Field.int4(row_id), Field.int4(whole), *fields],
                  order)  # fmt: skip
        grouped_rows.retype(conn, r, main, r.options.get("ranges") == "typed", set())

    def checks(self, r: Resolved, built: list[Built]) -> list[Check]:
        """Local anatomy's checks, and k-anonymity of NAME over its QI columns."""
        k = r.model("k-anonymity")
        target = Target(r.stored(built[0]), [c.name for c in r.qi])
        return [model_check(k, target), *super().checks(r, built)]  # type: ignore[arg-type]




def _null_in(labels: Field, groups: np.ndarray) -> Field:
    """A field of group labels (an entry per group, read through each row's group) with NULL
    for the groups `groups` marks."""
    d = labels.dictionary
    assert d is not None and labels.via is not None
    null = len(d)
    with_null = Dictionary(np.append(d.starts, 0), np.append(d.lens, -1).astype(np.int32), d.data)
    ids = (np.arange(len(groups), dtype=np.int64) if labels.values is None
           else np.asarray(labels.values, dtype=np.int64).copy())  # fmt: skip
    ids[groups] = null
    return Field.entries(with_null, ids, labels.via)


def _tag(value: Any) -> str:
    """A value as the map tags it (whole numbers without '.0', as SQL prints them)."""
    if isinstance(value, float) and value.is_integer():
        return f"v:{int(value)}"
    return f"v:{value}"


def _codes(
    values: np.ndarray, flagged: np.ndarray, names: list[str | None] | None
) -> tuple[np.ndarray, list[str]]:
    """Per row a code of its flagged value's tag (-1: not flagged), and the tag of each code
    (`names`: the value at each place, where `values` are places in the value order)."""
    codes = np.full(len(values), -1, dtype=np.int32)  # half the bytes: a code per row
    if not flagged.any():
        return codes, []
    uniq, inverse = unique_inverse(values[flagged])  # equal values, equal tags
    codes[flagged] = inverse
    return codes, [_tag(v if names is None else names[v]) for v in uniq.tolist()]


def first_seen(v: Values) -> Coded:
    """A column streamed as Values as a Coded whose values come in the order the rows first
    show them (NULL too), as Coded.of would number them: no Python object per row."""
    n = len(v.codes)
    first = np.full(len(v), n, dtype=np.int64)  # each code's first row (n: none), in one pass
    np.minimum.at(first, v.codes, np.arange(n))  # (np.unique sorted the codes: 0.06 s each)
    present = np.flatnonzero(first < n)
    order = present[np.argsort(first[present], kind="stable")]
    renumber = np.empty(len(v), dtype=np.int32)
    renumber[order] = np.arange(len(order), dtype=np.int32)
    raw = v.data.tobytes()
    values = [None if v.lens[e] < 0 else raw[v.starts[e] : v.starts[e] + v.lens[e]].decode()
              for e in order.tolist()]  # fmt: skip
    return Coded(values, renumber[v.codes])


def _known(
    vals: list[list[str] | None], tags: dict[str, list[str]], sensitive: str | None
) -> list[lag_persist.Plausible | None]:
    """Each row's plausible values from the map's tags (attribute SEP value). Untagged values
    (a map another method kept) are the first sensitive column's; values the table no longer
    holds are dropped: no class can hold them."""
    lookup = {a: {t: c for c, t in enumerate(ts)} for a, ts in tags.items()}
    parsed: dict[int, lag_persist.Plausible] = {}
    out: list[lag_persist.Plausible | None] = []
    for v in vals:
        if v is None:
            out.append(None)
            continue
        if id(v) not in parsed:
            sets: dict[str, set[int]] = {}
            for t in v:
                a, sep, tag = t.partition(SEP)
                if not sep:
                    a, tag = sensitive or "", t
                if a in lookup:
                    sets.setdefault(a, set())
                    if tag in lookup[a]:
                        sets[a].add(lookup[a][tag])
            parsed[id(v)] = {a: frozenset(c) for a, c in sets.items()}
        out.append(parsed[id(v)])
    return out


def _old_buckets(shown: list[list[str] | None], attrs: list[str]) -> dict[str, np.ndarray]:
    """Per attribute each row's bucket in the last release (0: none), from the map's tags."""
    out = {a: np.zeros(len(shown), dtype=np.int64) for a in attrs}
    for i, tags in enumerate(shown):
        for t in tags or ():
            a, sep, b = t.partition(SEP)
            if sep and a in out and b.isdigit():
                out[a][i] = int(b)
    return out


__all__ = ["LAG"]

register(LAG())
