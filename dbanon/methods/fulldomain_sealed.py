"""Full-domain releases refreshed by whole batches (`--refresh-policy sealed`, tables only).

A full-domain release shows classes: rows with equal generalised QIs. A consumer who keeps two
releases diffs each class's sensitive multiset; when a refresh adds one row to a class (or
takes one away), the difference is that person's value. Under the `sealed` policy:
- the node of the lattice and the interval and calendar hierarchies it refers to (whose widths
  a new search would draw from the data's range) are kept from the release's latest run, so
  a row that did not change falls in the same class;
- each class is released as whole batches (dbanon.algorithms.sealed): a batch is released
  again as it was while every row it released is still here and unchanged; a batch that lost or
  changed a row is retired whole and its other rows wait as a block; the class's pending rows
  (new, changed, waiting) form one new batch when it keeps the models by itself, the
  intersection guard and the diff check, else they wait (`withheld_rows`).
A class then changes between two releases only by whole batches that hide who joined or left.
Judging each batch on its own is sound for the models whose holding survives a union of
classes that hold (k, distinct, entropy and recursive l-diversity, (α,k), (p,k)); t-closeness
judges a class against the whole release and is refused with this policy. The first sealed
run searches the lattice as a publish does; `--regroup` searches again (a new node changes
every class, which the intersection guard then measures). The map keeps each row's batch.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms.sealed import seal_groups
from dbanon.db.catalog import Relation
from dbanon.db.settings import analyze_stage
from dbanon.db.stream import Keys, copy_in_ids, copy_out
from dbanon.errors import DbanonError
from dbanon.methods.grouped import GroupingMethod, _shown, history, stage_blocks, staged
from dbanon.setlogic import composition
from dbanon.setlogic.fulldomain import release_select
from dbanon.setlogic.hierarchies import AnyHierarchy, CalendarHierarchy, IntervalHierarchy

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved

STAGE = sql.Identifier("dbanon_fd_stage")  # (key, gid[, w]): each row's batch this run
RELEASED = Relation("pg_temp", "dbanon_fd_released")  # the source rows released this run


def as_json(levels: dict[str, int], hierarchies: dict[str, AnyHierarchy]) -> dict[str, Any]:
    """The node and its automatic hierarchies, as the run record keeps them."""
    auto: dict[str, dict[str, Any]] = {}
    for col, h in hierarchies.items():
        if isinstance(h, IntervalHierarchy):
            auto[col] = {"kind": "interval", "base": h.base, "widths": [str(w) for w in h.widths],
                         "low": str(h.low), "high": str(h.high)}  # fmt: skip
        elif isinstance(h, CalendarHierarchy):
            auto[col] = {"kind": "calendar", "base": h.base, "low": str(h.low),
                         "high": str(h.high), "zone": h.zone}  # fmt: skip
    return {"levels": dict(levels), "auto": auto}


def pinned(
    conn: psycopg.Connection, r: Resolved
) -> tuple[dict[str, int], dict[str, AnyHierarchy]] | None:
    """The node of the release's latest successful run and its hierarchies; None when there
    is none to keep (a first publish, a run without the policy, other QIs since)."""
    if r.release_id is None:
        return None
    row = conn.execute(
        """SELECT metrics -> 'pinned' FROM dbanon.run
           WHERE release_id = %s AND status = 'succeeded'
           ORDER BY finished_at DESC, id DESC LIMIT 1""",
        [r.release_id],
    ).fetchone()
    node = row[0] if row else None
    if not node or set(node["levels"]) != {c.name for c in r.qi}:
        return None
    hierarchies: dict[str, AnyHierarchy] = dict(r.hierarchies)
    for col, h in node["auto"].items():
        if h["kind"] == "interval":
            hierarchies[col] = IntervalHierarchy(col, h["base"],
                                                 tuple(Decimal(w) for w in h["widths"]),
                                                 Decimal(h["low"]), Decimal(h["high"]))  # fmt: skip
        else:
            hierarchies[col] = CalendarHierarchy(col, h["base"], Decimal(h["low"]),
                                                 Decimal(h["high"]), h["zone"])  # fmt: skip
    return {c: int(v) for c, v in node["levels"].items()}, hierarchies


def seal(
    conn: psycopg.Connection, r: Resolved, levels: dict[str, int],
    hierarchies: dict[str, AnyHierarchy],
) -> dict[str, Any]:  # fmt: skip
    """Each row's class at the node, its batch (STAGE) and RELEASED: the rows shown."""
    names = [r.key.name, *(c.name for c in r.sensitive[:1])]
    every = release_select(r.source, r.qi, hierarchies, levels, names, [], shuffle=False,
                           ranges=r.options["ranges"])  # fmt: skip
    qi = sql.SQL(", ").join(sql.Identifier(c.name) for c in r.qi)
    cols = copy_out(
        conn,
        sql.SQL(
            "SELECT {key}::text, (dense_rank() OVER (ORDER BY {qi}) - 1)::int8, {sens} "
            "FROM ({every}) x"
        ).format(key=sql.Identifier(r.key.name), qi=qi, every=every,
                 sens=sql.SQL("{}::text").format(sql.Identifier(names[1])) if r.sensitive
                 else sql.SQL("NULL::text")),  # fmt: skip
        ["text", "int8", "text"],
    )
    keys = Keys.of(cols[0])  # type: ignore[arg-type]
    cls = np.asarray(cols[1], dtype=np.int64)
    sensitive = np.asarray(cols[2], dtype=object) if r.sensitive else None
    gid0, same, sizes = composition.sealing(conn, r.release_id, keys, r.source, r.key,
                                            r.released_columns)  # fmt: skip
    n = len(cls)
    hist = history(conn, r, keys)
    shown_before = (gid0 != -1) & same  # rows of a block (or of a batch kept whole)
    rounds = [0]

    def batches(rows: np.ndarray) -> np.ndarray:
        """First each class's pending rows as one batch; the rows left over then as two per
        class, the blocks and the rows no release showed, so newcomers need not wait for a
        block that cannot come back yet."""
        rounds[0] += 1
        return cls[rows] * 2 + (shown_before[rows] if rounds[0] > 1 else 0)

    try:
        gid, block, figures = seal_groups(
            gid0, same, sizes, batches, GroupingMethod._holds(r, sensitive),
            r.k or 1, composition.values_needed(r.models),
            hist.tag if hist else np.zeros(n, dtype=np.int64), _shown(conn, r, hist), hist,
            regroups=True,
        )  # fmt: skip
    except ValueError as e:
        raise DbanonError(f"fulldomain cannot publish {r.source}: {e}") from None
    if not (gid >= 0).any():
        raise DbanonError(
            f"fulldomain cannot publish {r.source}: every row is withheld (no class keeps the "
            "promise at the kept node); --regroup searches the lattice again"
        )
    conn.execute(
        sql.SQL("CREATE TEMP TABLE {} (key text, gid int4) ON COMMIT DROP").format(STAGE)
    )
    copy_in_ids(conn, STAGE, keys, staged(gid, block))
    if (gid < 0).any():
        stage_blocks(conn, STAGE)
    analyze_stage(conn, STAGE)
    conn.execute(
        sql.SQL(
            "CREATE OR REPLACE TEMP VIEW {view} AS SELECT s.* FROM {src} s "
            "JOIN {stage} st ON st.key = s.{key}::text WHERE st.gid IS NOT NULL"
        ).format(view=sql.Identifier(RELEASED.name), src=r.source.ident, stage=STAGE,
                 key=r.key.ident)  # fmt: skip
    )
    figures["released_rows"] = int((gid >= 0).sum())
    return figures


def all_shown(conn: psycopg.Connection, table: sql.Composable, metrics: dict[str, Any]) -> None:
    """The release must show every row the batches released: the map says so. A class the
    release's SQL suppressed anyway would break that (it cannot, for the models allowed)."""
    shown = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0]
    if shown != metrics["released_rows"]:
        raise DbanonError(
            f"the sealed release shows {shown:,} rows where its batches hold "
            f"{metrics['released_rows']:,}: a class failed a model as a whole"
        )
    conn.execute(sql.SQL("DROP VIEW {}").format(sql.Identifier(RELEASED.name)))
