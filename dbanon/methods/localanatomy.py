"""Method `localanatomy` (thesis ch. 4): personalised privacy by bucketising only flagged values.

Each person flags which of their own values are sensitive (a flags relation, dbanon.core.flags); a
`--sensitive` column is flagged in every row. Per attribute the flagged values are bucketised
(dbanon.algorithms.localanatomy: Algorithm 4.1, `--heuristic` for 4.2, `--principle` for 4.3)
and everything else is published as it is. The release shape and its checks are in
dbanon.setlogic.localanatomy. `lag` (dbanon.methods.lag) extends this with k-anonymous
generalisation inside QI-partition subsets.

The promise is distinct l-diversity of every attribute's buckets, in the strong form of
Corollary 4.1 (>= l values per bucket, each at most once): p(t, s) <= 1/l for every flagged
value, whatever the attacker knows of the unflagged ones. An attribute under `--principle
COL=t:T` promises t-closeness of its buckets instead.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms.localanatomy import Principle, local_anatomy, parse_principles
from dbanon.core.flags import COLUMN, masks, relation_of, stale
from dbanon.core.flags import validate as validate_flags
from dbanon.db import catalog
from dbanon.db.catalog import Column
from dbanon.db.settings import analyze_stage
from dbanon.db.stream import copy_out
from dbanon.errors import DbanonError, quote_ident
from dbanon.methods import register
from dbanon.methods.base import BuildContext, Built, Check, Method, Option
from dbanon.metrics import personal  # noqa: F401 - registers the "localanatomy" query answerer
from dbanon.setlogic.localanatomy import (
    BUCKET_ID,
    GROUP_ID,
    IDENT_LIMIT,
    ROW_ID,
    Attribute,
    check_attribute,
)

if TYPE_CHECKING:
    from dbanon.core.spec import ReleaseSpec
    from dbanon.methods.base import Resolved

STAGE = sql.Identifier("dbanon_la_stage")  # (key, row_id, gid, b0..bm) of this run

FLAGS = Option(
    "flags", str, None,
    "SCHEMA.TABLE of flagged values: (the --key column, column_name), one row per value its "
    "owner marked sensitive; flagged columns are among --qi.",
)  # fmt: skip
HEURISTIC = Option(
    "heuristic", bool, False,
    "Split each attribute's flagged values at the median while both halves stay l-eligible "
    "(Algorithm 4.2): narrower buckets.",
)  # fmt: skip
PRINCIPLE = Option(
    "principle", str, None,
    "Per-attribute principles, COL=t:T or COL=l:L, comma-separated (Algorithm 4.3); the rest "
    "use --l.",
)  # fmt: skip


def _flagged_columns(conn: psycopg.Connection, spec: ReleaseSpec) -> list[str]:
    """QI columns named in the flags relation (others are refused by validate), in --qi order."""
    name = (spec.options or {}).get("flags")
    if not name:
        return []
    rel = catalog.relation(conn, name)
    if COLUMN not in catalog.columns(conn, rel):
        raise DbanonError(f"flags relation {rel} has no column {quote_ident(COLUMN)}")
    named = {
        row[0]
        for row in conn.execute(
            sql.SQL("SELECT DISTINCT {}::text FROM {}").format(sql.Identifier(COLUMN), rel.ident)
        )
    }
    return [q for q in spec.qi if q in named]


def stream_type(col: Column) -> tuple[sql.Composable, str]:
    """How a column streams out for the algorithms: numbers and dates as float8, else text."""
    if col.kind == catalog.DATE:
        return sql.SQL("extract(epoch FROM {})::float8").format(col.ident), "float8"
    if col.kind == catalog.NUMERIC:
        return sql.SQL("{}::float8").format(col.ident), "float8"
    return sql.SQL("{}::text").format(col.ident), "text"


def _no_null_sensitive(conn: psycopg.Connection, r: Resolved) -> None:
    """Every value of a sensitive column is bucketised and l-eligibility counts values: a NULL
    is none of them (and the buckets' order cannot place it), so it is refused up front."""
    if not r.sensitive:
        return
    nulls = conn.execute(
        sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(
                sql.SQL("count(*) - count({})").format(c.ident) for c in r.sensitive
            ),
            r.source.ident,
        )
    ).fetchone()
    for c, n in zip(r.sensitive, nulls, strict=True):
        if n:
            raise DbanonError(
                f"sensitive column {quote_ident(c.name)} of {r.source} is NULL in {n:,} of "
                f"{r.rows:,} rows; fill or filter them first"
            )


class LocalAnatomy(Method):
    name = "localanatomy"
    summary = (
        "Local anatomy (personalised privacy, thesis ch. 4): only the values their owners "
        "flagged (`--flags`, every value of `--sensitive`) are bucketised, per attribute, into "
        "`NAME_<col>_idt`/`NAME_<col>_st` with >= l values each at most once (`--heuristic`: "
        "median splits; `--principle COL=t:T`: t-closeness); the rest is released as it is in "
        "`NAME` under a random row_id"
    )
    promises: ClassVar[tuple[str, ...]] = ("distinct-l-diversity",)
    requires: ClassVar[tuple[str, ...]] = ("distinct-l-diversity",)
    options: ClassVar[tuple[Option, ...]] = (FLAGS, HEURISTIC, PRINCIPLE)
    randomised = True
    generalises = False
    shape = "localanatomy"  # dbanon.metrics.personal reads it for query error
    keeps = False
    sensitive_apart = True
    finite_qis = False  # its QIs are released as they are, never measured
    releases = (
        "`NAME`: a random row id and each QI value as it is, the cells people flagged NULL; "
        "per flagged attribute `NAME_ATTR_idt` (row id, bucket id) and `NAME_ATTR_st` (bucket "
        "id, value): a `--sensitive` column only there (no `--keep`)"
    )
    attacker = (
        "knows anything of a person's unflagged values: each flagged value is theirs with "
        "probability at most 1/l (or the bucket is within t of the attribute's values)"
    )

    # --- declared -------------------------------------------------------------------------------

    def objects(self, target: str) -> list[str]:
        return [target]

    def release_objects(self, conn: psycopg.Connection, spec: Any, target: str) -> list[str]:
        cols = [*_flagged_columns(conn, spec), *spec.sensitive]
        out = [target]
        for c in cols:
            out += [f"{target}_{c}_idt", f"{target}_{c}_st"]
        return out

    def attributes(self, r: Resolved) -> list[Attribute]:
        """The bucketised attributes, in the order of `r.objects` (after NAME)."""
        ell = self.l(r)
        principles = parse_principles(r.options.get("principle"), ell)
        names = {c.name for c in r.qi}
        out = []
        for obj in r.objects[1::2]:
            column = obj[len(r.target_name) + 1 : -len("_idt")]
            out.append(Attribute(column, principles.get(column, Principle("l", ell)),
                                 column in names))  # fmt: skip
        return out

    def l(self, r: Resolved) -> int:  # noqa: E743 - the paper's name
        model = r.model("distinct-l-diversity")
        return int(model.l) if model is not None else 0  # type: ignore[attr-defined]

    # --- the lifecycle's calls ------------------------------------------------------------------

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:
        ell = self.l(r)
        if ell < 2:
            raise DbanonError(f"--algorithm {self.name} needs --l of at least 2, got {ell}")
        try:
            principles = parse_principles(r.options.get("principle"), ell)
        except ValueError as e:
            raise DbanonError(str(e)) from None
        if r.options.get("flags"):
            rel = relation_of(conn, r.options["flags"], r.key)
            validate_flags(conn, rel, r.source, r.key, r.qi, refresh=r.release_id is not None)
        _no_null_sensitive(conn, r)
        attrs = {a.column for a in self.attributes(r)}
        stray = sorted(set(principles) - attrs)
        if stray:
            raise DbanonError(f"--principle names {quote_ident(stray[0])}, which has no flagged "
                "values")
        for name in r.objects:
            if len(name.encode()) > IDENT_LIMIT:
                raise DbanonError(
                    f"relation name {quote_ident(name)} is longer than PostgreSQL's {IDENT_LIMIT} "
                    "bytes; choose a shorter --target"
                )

    def extract(
        self, conn: psycopg.Connection, r: Resolved
    ) -> tuple[list[str], dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Keys (text), every QI and sensitive column's values, and the flagged masks."""
        cols = [*r.qi, *r.sensitive]
        streams = [stream_type(c) for c in cols]
        query = sql.SQL("SELECT {}::text, {} FROM {}").format(
            r.key.ident, sql.SQL(", ").join(e for e, _ in streams), r.source.ident
        )
        keys, *values = copy_out(conn, query, ["text", *(t for _, t in streams)])
        data = {
            c.name: np.asarray(v, dtype=np.float64 if t == "float8" else object)
            for c, v, (_, t) in zip(cols, values, streams, strict=True)
        }
        rel = relation_of(conn, r.options["flags"], r.key) if r.options.get("flags") else None
        flagged = masks(conn, rel, r.key, keys, [c.name for c in r.qi])
        for c in r.sensitive:
            flagged[c.name] = np.ones(len(keys), dtype=bool)
        return keys, data, flagged

    def released_rows(
        self, r: Resolved, keys: list[str], data: dict[str, np.ndarray],
        flagged: dict[str, np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray | None, dict[str, Any]]:  # fmt: skip
        """Which rows are released (LA: all) and their group ids (LA: None), with figures."""
        return np.ones(len(keys), dtype=bool), None, {}

    def lay_out(
        self, conn: psycopg.Connection, r: Resolved, keys: list[str],
        data: dict[str, np.ndarray], flagged: dict[str, np.ndarray], attrs: list[Attribute],
    ) -> tuple[np.ndarray, np.ndarray | None, dict[str, np.ndarray], dict[str, Any]]:  # fmt: skip
        """Which rows are released, their group ids, and per attribute the bucket id of each
        released row (0: not flagged), with figures: `released_rows`, then local anatomy."""
        kept, gid, figures = self.released_rows(r, keys, data, flagged)
        return kept, gid, self.bucketise(r, data, flagged, attrs, kept), figures

    def bucketise(
        self, r: Resolved, data: dict[str, np.ndarray], flagged: dict[str, np.ndarray],
        attrs: list[Attribute], kept: np.ndarray,
    ) -> dict[str, np.ndarray]:  # fmt: skip
        """Algorithms 4.1-4.3 over the released rows' flagged values."""
        try:
            return local_anatomy(
                {a.column: (data[a.column][kept], flagged[a.column][kept]) for a in attrs},
                {a.column: a.principle for a in attrs},
                bool(r.options.get("heuristic")),
                r.seed or 0,
            )
        except ValueError as e:
            raise DbanonError(f"{self.name} cannot publish {r.source}: {e}") from None

    def build(self, conn: psycopg.Connection, r: Resolved, ctx: BuildContext) -> dict[str, Any]:
        ctx.say(f"streaming {r.rows} rows of {r.source} out with COPY")
        keys, data, flagged = self.extract(conn, r)
        ctx.lap("extract")
        attrs = self.attributes(r)
        ctx.say(f"bucketising the flagged values of {len(attrs)} attributes")
        kept, gid, buckets, figures = self.lay_out(conn, r, keys, data, flagged, attrs)
        ctx.lap("bucketise")
        n = int(kept.sum())
        # Row ids from a fresh secret, whatever --seed (which fixes buckets and groups): two
        # runs' row ids never line up, so releases cannot be joined on them.
        row_id = np.random.default_rng(secrets.randbits(128)).permutation(n) + 1
        stage_rows(conn, [k for k, x in zip(keys, kept, strict=True) if x], row_id, gid,
                   [buckets[a.column] for a in attrs])  # fmt: skip
        built = [ctx.made(o) for o in r.objects]
        ctx.say("materialising the release")
        self.materialise(conn, r, attrs, r.stored(built[0]))
        for i, a in enumerate(attrs):
            idt, st = built[1 + 2 * i], built[2 + 2 * i]
            materialise_buckets(conn, r, a, i, r.stored(idt), r.stored(st))
        ctx.lap("materialise")
        metrics: dict[str, Any] = {"gcp": 0.0, **figures, "released_rows": n}
        if r.options.get("flags"):  # flags of rows deleted since: ignored, counted
            rel = relation_of(conn, r.options["flags"], r.key)
            metrics["stale_flags"] = stale(conn, rel, r.source, r.key)
        for a in attrs:
            ids = buckets[a.column]
            metrics[f"{a.column}_flagged"] = int((ids > 0).sum())
            metrics[f"{a.column}_buckets"] = int(ids.max()) if len(ids) else 0
        return metrics

    def main_columns(self, r: Resolved, attrs: list[Attribute]) -> list[sql.Composable]:
        """NAME's columns over the staged rows `s` (source) and `st` (stage): the QIs as they
        are, NULL where flagged."""
        where = {a.column: i for i, a in enumerate(attrs)}
        return [masked(c, where.get(c.name)) for c in r.qi]

    def materialise(
        self, conn: psycopg.Connection, r: Resolved, attrs: list[Attribute], main: sql.Identifier
    ) -> None:
        conn.execute(
            sql.SQL(
                """CREATE TABLE {main} AS SELECT st.row_id AS {rid}, {cols}
                   FROM {src} s JOIN {stage} st ON st.key = s.{key}::text ORDER BY random()"""
            ).format(
                main=main, rid=sql.Identifier(ROW_ID),
                cols=sql.SQL(", ").join(
                    sql.SQL("{} AS {}").format(e, c.ident)
                    for e, c in zip(self.main_columns(r, attrs), r.qi, strict=True)
                ),
                src=r.source.ident, stage=STAGE, key=r.key.ident,
            )
        )  # fmt: skip

    def checks(self, r: Resolved, built: list[Built]) -> list[Check]:
        """Per attribute, its principle on its buckets and IDT/ST/NAME agreeing."""
        main = r.stored(built[0])
        model = r.model("distinct-l-diversity")
        out = []
        for i, a in enumerate(self.attributes(r)):
            idt, st = r.stored(built[1 + 2 * i]), r.stored(built[2 + 2 * i])
            label = (f"{model.name} of {a.column}" if a.principle.kind == "l" and model
                     else f"{a.principle.describe()} of {a.column}")  # fmt: skip

            def run(conn: psycopg.Connection, a: Attribute = a, idt: Any = idt, st: Any = st,
                    label: str = label) -> Any:  # fmt: skip
                return check_attribute(conn, a, main, idt, st, label)

            # Named as the model it checks (one check per attribute): the failure message
            # names the attribute in its worst class.
            out.append(Check(model.name if model and a.principle.kind == "l" else label, run))
        if not out and model is not None:  # nothing flagged: nothing can fail the promise
            out.append(Check(model.name, lambda conn: _nothing(model.name)))
        return out

    def figures(
        self, conn: psycopg.Connection, r: Resolved, built: list[Built], checked: dict[str, Any]
    ) -> dict[str, Any]:
        """rows of NAME; classes and min_class_size over its QI columns as released."""
        checked = {k: v for k, v in checked.items() if k not in ("classes", "min_class_size")}
        return super().figures(conn, r, built[:1], checked)


def _nothing(name: str) -> Any:
    from dbanon.models.base import CheckResult

    return CheckResult(name, True, {"buckets": 0})


def masked(col: Column, bucket: int | None) -> sql.Composable:
    """A QI column with its flagged cells NULL (`bucket`: the attribute's stage column)."""
    if bucket is None:
        return sql.SQL("s.{}").format(col.ident)
    return sql.SQL("CASE WHEN st.{} IS NULL THEN s.{} END").format(
        sql.Identifier(f"b{bucket}"), col.ident
    )


def stage_rows(
    conn: psycopg.Connection, keys: list[str], row_id: np.ndarray, gid: np.ndarray | None,
    buckets: list[np.ndarray],
) -> None:  # fmt: skip
    """The private (key, row_id, gid, b0..bm) of this run, dropped at commit; bucket 0 -> NULL."""
    cols = [sql.SQL("key text"), sql.SQL("row_id int4"), sql.SQL("gid int4")]
    cols += [sql.SQL("{} int4").format(sql.Identifier(f"b{i}")) for i in range(len(buckets))]
    conn.execute(
        sql.SQL("CREATE TEMP TABLE {} ({}) ON COMMIT DROP").format(STAGE, sql.SQL(", ").join(cols))
    )
    gids = gid.tolist() if gid is not None else [None] * len(keys)
    cells = [[b or None for b in col.tolist()] for col in buckets]
    with (
        conn.cursor() as cur,
        cur.copy(sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(STAGE)) as copy,
    ):
        copy.set_types(["text", "int4", "int4", *(["int4"] * len(buckets))])
        for i, (key, rid, g) in enumerate(zip(keys, row_id.tolist(), gids, strict=True)):
            copy.write_row((key, rid, g, *(c[i] for c in cells)))
    analyze_stage(conn, STAGE)


def materialise_buckets(
    conn: psycopg.Connection, r: Resolved, a: Attribute, i: int, idt: sql.Identifier,
    st: sql.Identifier,
) -> None:  # fmt: skip
    """NAME_<attr>_idt(row_id, bucket_id) and NAME_<attr>_st(bucket_id, <attr>)."""
    b = sql.Identifier(f"b{i}")
    conn.execute(
        sql.SQL(
            """CREATE TABLE {idt} AS SELECT row_id AS {rid}, {b} AS {bid} FROM {stage}
               WHERE {b} IS NOT NULL ORDER BY 2, 1"""
        ).format(idt=idt, rid=sql.Identifier(ROW_ID), b=b, bid=sql.Identifier(BUCKET_ID),
                 stage=STAGE)  # fmt: skip
    )
    col = sql.Identifier(a.column)
    conn.execute(
        sql.SQL(
            """CREATE TABLE {st} AS SELECT st.{b} AS {bid}, s.{col}
               FROM {src} s JOIN {stage} st ON st.key = s.{key}::text
               WHERE st.{b} IS NOT NULL ORDER BY 1, 2"""
        ).format(st=st, b=b, bid=sql.Identifier(BUCKET_ID), col=col, src=r.source.ident,
                 stage=STAGE, key=r.key.ident)  # fmt: skip
    )


__all__ = ["GROUP_ID", "LocalAnatomy", "masked", "stage_rows"]

register(LocalAnatomy())
