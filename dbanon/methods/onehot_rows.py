"""One-hot candidates counted from one read of the source's rows (a labelled ranking's path).

`projection.onehot_candidates` with a label grouped the source by every key and the label in
one GROUPING SETS query: a hash table per key for every row, on one backend (1.4 s at a
million rows, 7 keys), and the search then read each key's value of every row again with
`array_agg` (1.6 s). Here the keys and the label are streamed out once, in parts on several
backends (dbanon.db.parts), as int4 bins and text: the counts, the candidates and the
search's codes are numpy over those arrays.

What SQL decided stays SQL's, settled by a query over the distinct values alone:
- the order of a key's values, which orders the candidates (and so the release's columns):
  a bin by its number, a text by the collation its `::text` has (the column's; the database's
  for a type without one). A key whose collation is nondeterministic (equal texts of
  different bytes) is left to the GROUPING SETS query: `read` returns None.
- which labels are one class: equality of the label's own type (numeric 1.0 and 1.00 are one
  class, their texts two), by casting the distinct texts back to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms.featuresel import Feature
from dbanon.db.catalog import Column
from dbanon.db.parts import copy_parts, where
from dbanon.db.stream import Coded

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved


@dataclass
class KeyRows:
    """Each row's value of every key (in the QIs' order), as codes into the key's values in
    SQL's order; held from the candidates' read to the search, which takes them once."""

    values: list[list[object]]
    codes: list[np.ndarray] | None = field(repr=False)  # int32 per row; None once taken

    def search_codes(self, columns: list[str], ranked: list[Feature]) -> list[np.ndarray]:
        """What `featuresel.codes_query(source, ranked)` reads, from these rows: per source
        column in the order `ranked` first names it, each row's 1-based position among that
        column's indicators in `ranked` (0: none of them). The rows are let go: the search
        is their last reader."""
        codes, self.codes = self.codes, None
        if codes is None:
            raise RuntimeError("the candidates' rows were taken already")
        order: dict[str, list[Feature]] = {}
        for f in ranked:
            order.setdefault(f.column, []).append(f)
        out = []
        for column, fs in order.items():
            j = columns.index(column)
            at = {f.value: i for i, f in enumerate(fs, 1)}
            lut = np.array([at.get(v, 0) for v in self.values[j]], dtype=np.int32)
            out.append(lut[codes[j]])
        return out


@dataclass
class Counted:
    """Per key, its rows per value (in SQL's order) and label class: values x classes."""

    per_class: list[np.ndarray]  # int64
    rows: KeyRows  # the values themselves, and each row's code into them


def read(
    conn: psycopg.Connection, r: Resolved, keys: list[sql.Composable], binned: list[bool],
    label: Column,
) -> Counted | None:  # fmt: skip
    """The keys (`binned`: an int4 bin number, else text) and the label of every source
    row, streamed once and counted; None when a text key compares by a nondeterministic
    collation (the caller groups in SQL instead)."""
    attrs = _attributes(conn, r)
    collations = _collations(attrs, [c for c, b in zip(r.qi, binned, strict=True) if not b])
    if collations is None:
        return None
    # a bin is 1..bins (width_bucket clamped): 0 stands for NULL, which int4 cannot carry
    shown = [sql.SQL("coalesce({}, 0)").format(k) if b else k for k, b in zip(keys, binned,
             strict=True)] + [sql.SQL("{}::text").format(label.ident)]  # fmt: skip
    kinds = ["int4" if b else "text" for b in binned] + ["text"]
    cols = copy_parts(
        conn,
        lambda w: sql.SQL("SELECT {} FROM {} s{}").format(
            sql.SQL(", ").join(shown), r.source.ident, where(w)),
        r.source, "s", kinds, r.rows,
    )  # fmt: skip
    labels = cols[-1]
    assert isinstance(labels, Coded)
    of_text = _label_classes(conn, attrs[label.name], labels.values)
    cls = of_text[labels.codes] if len(labels.codes) else np.zeros(0, dtype=np.int64)
    classes = int(of_text.max()) + 1 if len(of_text) else 0
    values: list[list[object]] = []
    codes: list[np.ndarray] = []
    per_class: list[np.ndarray] = []
    texts = iter(collations)
    for b, got in zip(binned, cols[:-1], strict=True):
        if b:
            vals, code = _bins(np.asarray(got))
        else:
            assert isinstance(got, Coded)
            vals, code = _ordered(conn, got, next(texts))
        values.append(vals)
        codes.append(code)
        m = len(vals)
        per_class.append(np.bincount(code.astype(np.int64) * classes + cls,
                                     minlength=m * classes).reshape(m, classes))  # fmt: skip
    return Counted(per_class, KeyRows(values, codes))


def _bins(got: np.ndarray) -> tuple[list[object], np.ndarray]:
    """A bin key's values (ascending, NULL - streamed as 0 - last, as ORDER BY) and each
    row's code into them."""
    if not len(got):
        return [], np.zeros(0, dtype=np.int32)
    present = np.flatnonzero(np.bincount(got))
    order = np.r_[present[present > 0], present[present == 0]]  # 0 (NULL) last
    lut = np.zeros(int(present[-1]) + 1, dtype=np.int32)
    lut[order] = np.arange(len(order), dtype=np.int32)
    return [int(v) if v else None for v in order.tolist()], lut[got]


def _ordered(
    conn: psycopg.Connection, got: Coded, collation: sql.Composable
) -> tuple[list[object], np.ndarray]:
    """A text key's distinct values in ORDER BY's order under `collation` (NULL last), and
    each row's code into them."""
    order = [int(o) - 1 for (o,) in conn.execute(
        sql.SQL("SELECT o FROM unnest(%s::text[]) WITH ORDINALITY AS u(t, o) "
                "ORDER BY t COLLATE {} NULLS LAST, o").format(collation),
        [got.values],
    ).fetchall()]  # fmt: skip
    position = np.empty(len(order), dtype=np.int32)
    position[order] = np.arange(len(order), dtype=np.int32)
    code = position[got.codes] if len(order) else np.zeros(len(got.codes), dtype=np.int32)
    return [got.values[o] for o in order], code


def _attributes(conn: psycopg.Connection, r: Resolved) -> dict[str, tuple[Any, ...]]:
    """Per column of the source: (its type's schema and name, whether it is collatable, its
    collation's schema and name, whether that is deterministic). A column of a type without
    a collation is given the database's, which its `::text` takes."""
    rows = conn.execute(
        sql.SQL(
            """SELECT a.attname, tn.nspname, t.typname, a.attcollation <> 0, cn.nspname,
                      c.collname, c.collisdeterministic
               FROM pg_attribute a
               JOIN pg_type t ON t.oid = a.atttypid
               JOIN pg_namespace tn ON tn.oid = t.typnamespace
               JOIN pg_collation c
                 ON c.oid = CASE WHEN a.attcollation = 0 THEN 100 ELSE a.attcollation END
               JOIN pg_namespace cn ON cn.oid = c.collnamespace
               WHERE a.attrelid = {} AND a.attnum > 0 AND NOT a.attisdropped"""
        ).format(r.source.regclass)
    ).fetchall()
    return {row[0]: row[1:] for row in rows}


def _collations(
    attrs: dict[str, tuple[Any, ...]], texts: list[Column]
) -> list[sql.Composable] | None:
    """The collation each text key orders and compares by (`attrs`: `_attributes`), None if
    one is nondeterministic."""
    out = []
    for c in texts:
        _, _, _, schema, name, deterministic = attrs[c.name]
        if not deterministic:
            return None
        out.append(sql.Identifier(schema, name))
    return out


def _label_classes(
    conn: psycopg.Connection, label: tuple[Any, ...], texts: list[str | None]
) -> np.ndarray:
    """Each distinct text of the label's class: 0-based, in the label's order with NULL
    first (dense_rank() OVER (ORDER BY label NULLS FIRST) - 1), its values cast back to the
    label's type (and collation; `label`: its `_attributes`), so equal values of different
    texts are one class."""
    tschema, tname, collatable, cschema, cname, _ = label
    typed = sql.SQL("t::{}").format(sql.Identifier(tschema, tname))
    if collatable:
        typed = sql.SQL("{} COLLATE {}").format(typed, sql.Identifier(cschema, cname))
    rows = conn.execute(
        sql.SQL("SELECT dense_rank() OVER (ORDER BY {} NULLS FIRST) - 1 FROM "
                "unnest(%s::text[]) WITH ORDINALITY AS u(t, o) ORDER BY o").format(typed),
        [texts],
    ).fetchall()  # fmt: skip
    return np.array([c for (c,) in rows], dtype=np.int64)
