"""Method `lag` (thesis ch. 5): local anatomy plus k-anonymous generalisation of the unflagged
values inside each QI-partition subset (rows sharing the same unflagged attributes).

`--variant partition` is LAG_1 (Algorithm 5.2, binary median cuts, widest dimension first),
`--variant ncp` LAG_2 (Xu et al.'s Top-down with re-balancing, which Algorithm 5.3 abridges);
dbanon.algorithms.lag has both and the
decision on subsets smaller than k (suppressed, counted in the run's `suppressed_rows`). The
release is local anatomy's (dbanon.setlogic.localanatomy) with `group_id` and the QI columns of
`NAME` generalised over each group: numeric `lo-hi` (or typed ranges, `--ranges`), categorical
the LCA in the QI's hierarchy or '*' without one. It promises k-anonymity of `NAME` over its QI
columns (NULL, a flagged cell, a value of its own) and local anatomy's l-diversity.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.lag import VARIANTS, discernibility, generalise, ncp
from dbanon.db.stream import Coded
from dbanon.errors import DbanonError
from dbanon.methods import register
from dbanon.methods.base import Built, Check, Option, model_check
from dbanon.methods.grouped import RANGES, encode, generalised
from dbanon.methods.localanatomy import (
    FLAGS,
    HEURISTIC,
    PRINCIPLE,
    STAGE,
    LocalAnatomy,
    masked,
)
from dbanon.metrics.loss import group_sizes
from dbanon.models.base import Target
from dbanon.setlogic.localanatomy import GROUP_ID, ROW_ID, Attribute

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved


class LAG(LocalAnatomy):
    name = "lag"
    summary = (
        "Local anatomy generalisation (thesis ch. 5): local anatomy, and the unflagged values "
        "of `NAME` generalised in groups of >= k rows sharing the same unflagged attributes "
        "(`--variant partition`: LAG_1 median cuts; `ncp`: LAG_2 Top-down split); subsets "
        "of fewer than k rows are suppressed and counted"
    )
    promises: ClassVar[tuple[str, ...]] = ("k-anonymity", "distinct-l-diversity")
    requires: ClassVar[tuple[str, ...]] = ("distinct-l-diversity",)
    options: ClassVar[tuple[Option, ...]] = (
        FLAGS, HEURISTIC, PRINCIPLE,
        Option("variant", str, "partition",
               "LAG's generalisation: LAG_1 median cuts (partition) or LAG_2 Top-down (ncp).",
               VARIANTS),
        RANGES,
    )  # fmt: skip
    generalises = True
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

    def qi_arrays(self, r: Resolved, data: dict[str, np.ndarray]) -> QIArrays:
        numeric, categorical = [], []
        for col in r.qi:
            if r.is_categorical(col):
                categorical.append(encode(r, col, Coded.of(data[col.name].tolist())))
            else:
                numeric.append(data[col.name])
        return QIArrays.build(numeric, categorical, n=len(next(iter(data.values()))))

    def split_flags(
        self, r: Resolved, flagged: dict[str, np.ndarray], n: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Flag masks of the numeric and categorical QIs, in QIArrays' column order."""
        num = [flagged[c.name] for c in r.qi if not r.is_categorical(c)]
        cat = [flagged[c.name] for c in r.qi if r.is_categorical(c)]
        as_matrix = lambda cols: np.stack(cols, axis=1) if cols else np.zeros((n, 0), bool)  # noqa: E731
        return as_matrix(num), as_matrix(cat)

    def released_rows(
        self, r: Resolved, keys: list[str], data: dict[str, np.ndarray],
        flagged: dict[str, np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray | None, dict[str, Any]]:  # fmt: skip
        qi = self.qi_arrays(r, data)
        fnum, fcat = self.split_flags(r, flagged, len(keys))
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

    def materialise(
        self, conn: psycopg.Connection, r: Resolved, attrs: list[Attribute], main: sql.Identifier
    ) -> None:
        """NAME from source + stage: flagged cells NULL, the rest generalised per group."""
        conn.execute(
            sql.SQL(
                """CREATE TABLE {main} AS
                   WITH rows AS (
                       SELECT st.row_id, st.gid, {masked}
                       FROM {src} s JOIN {stage} st ON st.key = s.{key}::text
                   ), groups AS (
                       SELECT gid, {gen} FROM rows GROUP BY gid
                   )
                   SELECT rows.row_id AS {rid}, rows.gid AS {gid}, {out}
                   FROM rows JOIN groups g USING (gid) ORDER BY random()"""
            ).format(
                main=main,
                masked=sql.SQL(", ").join(
                    sql.SQL("{} AS {}").format(e, c.ident)
                    for e, c in zip(self.main_columns(r, attrs), r.qi, strict=True)
                ),
                src=r.source.ident, stage=STAGE, key=r.key.ident,
                gen=sql.SQL(", ").join(
                    sql.SQL("CASE WHEN count({c}) > 0 THEN {g} END AS {c}").format(
                        c=c.ident, g=generalised(r, c)
                    )
                    for c in r.qi
                ),
                rid=sql.Identifier(ROW_ID), gid=sql.Identifier(GROUP_ID),
                out=sql.SQL(", ").join(sql.SQL("g.{}").format(c.ident) for c in r.qi),
            )
        )  # fmt: skip

    def checks(self, r: Resolved, built: list[Built]) -> list[Check]:
        """Local anatomy's checks, and k-anonymity of NAME over its QI columns."""
        k = r.model("k-anonymity")
        target = Target(r.ident(built[0].build), [c.name for c in r.qi])
        return [model_check(k, target), *super().checks(r, built)]  # type: ignore[arg-type]


__all__ = ["LAG", "masked"]

register(LAG())
