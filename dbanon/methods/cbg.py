"""Method `cbg`: cross-bucket generalisation for (k,l)-anonymity (thesis Ch. 3).

Publishes two relations, joinable on `bucket_id`:
- NAME_qit: every row's QIs generalised over its equivalence group (numeric: [min, max] as
  text or typed range, `--ranges`; categorical: the group's lowest common ancestor in the
  column's hierarchy, or the value when the group agrees and '*' otherwise), and its bucket;
- NAME_st: per bucket, each sensitive value (under the column's own name) and its `count`.
Neither holds the row key or a group id; QIT rows are ordered by (bucket_id, QI values) and ST
rows by (bucket_id, value): functions of the published content, not of the source's order (on a
persist refresh the units, and so the bucket ids, are numbered in a secret random order).

The thesis's Table 3.2 (k=2, l=4) publishes as its Table 3.6: groups {101,103}, {102,104},
{106,107}, {105,108}; buckets {101,102}, {103,104}, {105,106}, {107,108}. Its QIT:

    age    gender zip          bucket_id       ST: bucket_id disease    count
    16-24  F      43306-43307  1                   1         Dyspepsia  1
    22-26  M      43302-43307  1                   1         Flu        1
    16-24  F      43306-43307  2                   2         Bronchitis 1
    22-26  M      43302-43307  2                   2         Hepatitis  1
    29-35  M      43309        3                   3         Bronchitis 1
    31-34  F      43312        3                   3         Pneumonia  1
    31-34  F      43312        4                   4         Dyspepsia  1
    29-35  M      43309        4                   4         Gastritis  1

so Helen (F, 31, 43312) matches the class (31-34, F, 43312), whose two rows lie in buckets 3
and 4: each of their four diseases is hers with probability 1/4. dbanon publishes the same
groups and buckets up to what the release does not show: which member of a group takes which of
its buckets, and the bucket ids, are drawn from the run's secret seed (issue 24: the thesis's
stride let an attacker who knows a target's QIs name her bucket; docs/attacker.md).

The verification gate checks k-anonymity of QIT and cross-bucket l-diversity (3.22) of QIT with
ST (dbanon.models.crossbucket). A refresh under the default `persist` policy keeps every
persisting row in its unit (its T_gen, or the units it was merged with: dbanon.algorithms.
cbg_persist) and the run measures what intersecting the releases leaves each persisting person
(dbanon.setlogic.composition, bucket form): refused below (k,l) unless --allow-composition.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.cbg_persist import persist_units
from dbanon.algorithms.persist import subset
from dbanon.db.rows import Dictionary, Field, copy_rows
from dbanon.db.settings import analyze_stage
from dbanon.db.stream import Coded
from dbanon.errors import DbanonError, quote_ident
from dbanon.methods import cbg_sealed, register
from dbanon.methods.base import BuildContext, Built, Check, Method, Option, model_check
from dbanon.methods.grouped import POLICY, RANGES, generalised
from dbanon.methods.grouped_rows import extract_coded
from dbanon.methods.kmember import validate_blocks
from dbanon.metrics.grouploss import loss_of_groups
from dbanon.models.base import TOLERANCE, CheckResult, Target
from dbanon.models.crossbucket import BUCKET_ID, COUNT, BucketTarget
from dbanon.models.specs import kind_of
from dbanon.setlogic import composition

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved

# (key, gid: group, b: bucket, u: unit the map keeps, w: a waiting row's block) of this run
STAGE = sql.Identifier("dbanon_cbg_stage")
# Every source row joined once with the stage: (key, gid, b, u, w, t: tagged sensitive value,
# fp: fingerprint) as the map reads them (composition.new_rows), then the QIs (dbanon_q0...)
# and the sensitive value (dbanon_s) the QIT and ST are made of.
ROWS = sql.Identifier("dbanon_cbg_rows")
CBG_POLICY = Option(
    POLICY.name, str, "persist",
    "On refresh: keep persisting rows in their units (persist: safe against intersection, not "
    "against a diff of two releases' ST counts); release units whole, kept as they were or "
    "new, rows that form no safe unit waiting (sealed: safe against both, rows withheld); "
    "or regroup from scratch.",
    ("persist", "sealed", "regroup"),
)  # fmt: skip
CBG_BLOCK_SIZE = Option(
    "block_size", int, None,
    "Take T_gens in blocks of at most this many rows, cut along the QIs (default: 8000-row "
    "blocks above 50,000 rows).", low=2,
)  # fmt: skip
CBG_EXACT = Option("exact", bool, False, "Always run the thesis's Algorithm 3.1 on the whole "
                   "table (O(n^2): about 11 s at 45,000 rows).")  # fmt: skip
L_KIND = "cross-bucket-l-diversity"


def _q(i: int) -> sql.Identifier:
    """The i-th QI's column in ROWS (named apart from the map's columns)."""
    return sql.Identifier(f"dbanon_q{i}")


def ordinal(qi: QIArrays) -> np.ndarray:
    """QIs as ordinal numbers in [0, 1]-scale per column: numeric values (already divided by
    their span), categorical ones by leaf order in their hierarchy (siblings adjacent).
    Filled a column at a time (no scaled copy of every categorical column at once)."""
    if not qi.hierarchies:
        return qi.num
    width = qi.num.shape[1]
    x = np.empty((len(qi.num), width + len(qi.hierarchies)))
    x[:, :width] = qi.num
    for j, h in enumerate(qi.hierarchies):
        np.divide(qi.cat[:, j], max(len(h.leaves) - 1, 1), out=x[:, width + j])
    return x


def first_seen(coded: Coded) -> tuple[np.ndarray, list[str | None]]:
    """The sensitive codes and values numbered by each value's first row, as `codes` numbers
    an object column (Coded.of): the algorithm's ties follow the codes."""
    present, first = np.unique(coded.codes, return_index=True)
    present = present[np.argsort(first)]
    renumber = np.zeros(max(len(coded.values), 1), dtype=np.int32)
    renumber[present] = np.arange(len(present))
    return renumber[coded.codes], [coded.values[c] for c in present.tolist()]


class CrossBucket(Method):
    name = "cbg"
    summary = (
        "cross-bucket generalisation (thesis Ch. 3): groups of >= k rows generalised for "
        "identity, buckets of distinct sensitive values for (k,l)-anonymity; publishes "
        "`NAME_qit` (generalised QIs, bucket_id) and `NAME_st` (bucket_id, sensitive value, "
        "count); needs --k and --l; above 50,000 rows in blocks cut along the QIs, on all cores"
    )
    promises = ("k-anonymity", L_KIND)
    requires = (L_KIND,)
    options = (RANGES, CBG_POLICY, CBG_BLOCK_SIZE, CBG_EXACT)
    randomised = True  # placement inside a group, bucket ids, ties: from the run's secret seed
    shape = "cbg"
    keeps = False
    sensitive_apart = True
    releases = (
        "`NAME_qit`: the QIs generalised over each row's group, and a bucket id; `NAME_st`: "
        "per bucket, each sensitive value and its count (no `--keep`)"
    )
    attacker = (
        "knows a target's QIs and reads both relations: at least k rows match, and each "
        "sensitive value is theirs with probability at most 1/l"
    )

    def objects(self, target: str) -> list[str]:
        return [f"{target}_qit", f"{target}_st"]

    def _kl(self, r: Resolved) -> tuple[int, int]:
        k_model, l_model = r.model("k-anonymity"), r.model(L_KIND)
        if k_model is None or l_model is None:
            raise DbanonError("--algorithm cbg needs both --k and --l: (k,l)-anonymity")
        return int(k_model.k), int(l_model.l)  # type: ignore[attr-defined]

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:
        from dbanon.algorithms.cbg import diversity_num
        from dbanon.setlogic.anatomy import check_eligible

        k, ell = self._kl(r)
        names = [c.name for c in r.qi]
        for col, reserved in [*((n, (BUCKET_ID,)) for n in names),
                              (r.sensitive[0].name, (BUCKET_ID, COUNT))]:  # fmt: skip
            if col in reserved:
                raise DbanonError(
                    f"column {quote_ident(col)} of {r.source} clashes with the {quote_ident(col)} "
                    "column of the cross-bucket tables; publish a view that renames it"
                )
        validate_blocks(r, 2 * diversity_num(k, ell), "2 * k * ceil(l/k)")
        check_eligible(conn, r.source, r.sensitive[0], ell)
        sa = r.sensitive[0]
        distinct = conn.execute(
            sql.SQL("SELECT count(DISTINCT {}) FROM {}").format(sa.ident, r.source.ident)
        ).fetchone()[0]
        least = diversity_num(k, ell)
        if distinct < least:
            raise DbanonError(
                f"cross-bucket needs at least k*ceil(l/k) = {least} distinct values of "
                f"{quote_ident(sa.name)} for k={k}, l={ell}; {r.source} has {distinct}"
            )

    @staticmethod
    def _block_size(r: Resolved, n: int) -> int | None:
        """Blocks for n rows laid out (None: the exact rule), under --block-size and --exact."""
        from dbanon.algorithms.cbg import block_size

        return block_size(n, r.options.get("block_size"), bool(r.options.get("exact")))

    def build(self, conn: psycopg.Connection, r: Resolved, ctx: BuildContext) -> dict[str, Any]:
        from dbanon.algorithms.cbg import cross_bucket

        k, ell = self._kl(r)
        ctx.say(f"streaming {r.rows} rows of {r.source} out with COPY")
        keys, qi, coded = extract_coded(conn, r)
        ctx.lap("extract")
        ctx.say(f"cross-bucket generalisation, k={k}, l={ell}")
        sa, values = first_seen(coded)
        x = ordinal(qi)
        state, waiting = None, None
        policy = "regroup" if r.regroup else r.options.get("refresh_policy")
        if policy == "persist":
            state = composition.previous_state(conn, r.release_id, keys)
        figures: dict[str, Any] = {}
        if policy == "sealed":
            ctx.say("keeping whole units; cutting the other rows into new ones")
            try:
                laid, waiting, figures = cbg_sealed.seal(conn, r, keys, x, sa, values, k, ell)
            except ValueError as e:
                raise DbanonError(f"cbg cannot publish {r.source}: {e}") from None
            gid, bid, unit = laid.gid, laid.bid, laid.unit
            suppressed = laid.suppressed
        elif state is None or not (state[0] >= 0).any():
            size = self._block_size(r, len(sa))
            result = cross_bucket(x, sa, k, ell, np.random.default_rng(r.seed), size)
            gid, bid, unit = result.gid, result.bid, result.tgen
            figures = {"tgens": result.tgens, "uneven_tgens": result.uneven_tgens,
                       "clustering": "exact" if size is None else "partitioned",
                       **({} if size is None else {"block_size": size})}  # fmt: skip
            suppressed = result.suppressed
        else:
            ctx.say("cross-bucket for the new rows; persisting rows keep their units")
            groups, plausible, sets = state
            code = {("n" if v is None else "v:" + str(v)): c for c, v in enumerate(values)}
            as_codes = [np.array(sorted({code[t] for t in s if t in code}), dtype=np.int64)
                        for s in sets]  # fmt: skip
            try:
                laid = persist_units(
                    x, sa, groups, plausible, as_codes, k, ell,
                    composition.values_needed(r.models),
                    np.random.default_rng(secrets.randbits(64)),  # bucket ids: a secret order
                    self._block_size(r, int((groups < 0).sum())),  # the rule, for new rows
                )  # fmt: skip
            except ValueError as e:
                raise DbanonError(f"cbg cannot publish {r.source}: {e}") from None
            gid, bid, unit = laid.gid, laid.bid, laid.unit
            figures = {"tgens": laid.units, "merged_units": laid.merged,
                       "persisting_rows": int((groups >= 0).sum())}  # fmt: skip
            suppressed = laid.suppressed
        del x, sa  # the QIs' ordinals (8 bytes per row and QI) are needed no more
        kept = np.flatnonzero(gid > 0)
        shown_qi, shown_gid = (qi, gid) if len(kept) == len(gid) else (subset(qi, kept),
                                                                        gid[kept])  # fmt: skip
        loss = loss_of_groups(shown_qi, shown_gid) if len(kept) else None
        del shown_qi, shown_gid, qi  # the stage needs the ids and keys alone
        ctx.lap("cluster")
        ctx.say("materialising the QIT and ST")
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE {} (key text, gid int4, b int4, u int4) ON COMMIT DROP"
            ).format(STAGE)
        )
        # One binary COPY from the arrays (keys as COPY's bytes): no Python object per row.
        key = Field.entries(Dictionary.of_keys(keys))
        copy_rows(conn, sql.SQL("COPY {} (key, gid, b, u) FROM STDIN (FORMAT BINARY)").format(
            STAGE), [key, Field.int4(gid), Field.int4(bid), Field.int4(unit)], kept)  # fmt: skip
        if waiting is not None:  # sealed: rows waiting in a block, which the map keeps
            cbg_sealed.stage_waiting(conn, STAGE, key, waiting)
        conn.execute(sql.SQL("ANALYZE {}").format(STAGE))
        self._join(conn, r, waiting is not None)
        qit, st = ctx.made(r.objects[0]), ctx.made(r.objects[1])
        self._materialise(conn, r, r.stored(qit), r.stored(st))
        ctx.lap("materialise")
        return {
            **(loss.as_dict() if loss else {"gcp": None}),
            **figures,
            "groups": int(gid.max(initial=0)),
            "buckets": int(bid.max(initial=0)),
            "suppressed_rows": suppressed,
        }

    def group_map(self, r: Resolved) -> sql.Composable:
        """(key, gid, b, u, w, t, fp) of every source row: the map measures classes by their
        buckets' values and keeps u (joined with the source once, as the release was built)."""
        return ROWS

    @staticmethod
    def _join(conn: psycopg.Connection, r: Resolved, waits: bool) -> None:
        """ROWS: the source joined with the stage once, for the QIT, the ST and the map (which
        read it as composition.new_rows would have joined it)."""
        released = r.released_columns
        kind = composition.fingerprint_kind(conn, r.source, released)
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE {rows} ON COMMIT DROP AS "
                "SELECT s.{key}::text AS key, st.gid, st.b, coalesce(st.u, st.gid) AS u, "
                "{w} AS w, {t} AS t, {fp} AS fp, {qi}, s.{sa} AS dbanon_s "
                "FROM {src} s LEFT JOIN {stage} st ON st.key = s.{key}::text"
            ).format(
                rows=ROWS, key=r.key.ident, w=sql.SQL("st.w" if waits else "NULL::int4"),
                t=composition.tag(r.sensitive[0]),
                fp=composition.fingerprint(released, kind=kind),
                qi=sql.SQL(", ").join(sql.SQL("s.{} AS {}").format(c.ident, _q(i))
                                      for i, c in enumerate(r.qi)),
                sa=r.sensitive[0].ident, src=r.source.ident, stage=STAGE,
            )  # fmt: skip
        )
        analyze_stage(conn, ROWS)

    def _materialise(
        self, conn: psycopg.Connection, r: Resolved, qit: sql.Identifier, st: sql.Identifier
    ) -> None:
        """QIT: the joined rows' QIs, each generalised over its group; ST: the sensitive
        values counted per bucket."""
        qi_out = sql.SQL(", ").join(sql.SQL("g.{}").format(c.ident) for c in r.qi)
        conn.execute(
            sql.SQL(
                """CREATE TABLE {qit} AS
                   WITH rows AS (
                       SELECT gid AS dbanon_g, b AS dbanon_b, {src_cols}
                       FROM {rows} WHERE gid IS NOT NULL
                   ), groups AS (
                       SELECT dbanon_g, {gen} FROM rows GROUP BY dbanon_g
                   )
                   SELECT {qi_out}, rows.dbanon_b AS {bucket}
                   FROM rows JOIN groups g USING (dbanon_g)
                   ORDER BY rows.dbanon_b, {qi_out}"""
            ).format(
                qit=qit,
                src_cols=sql.SQL(", ").join(sql.SQL("{} AS {}").format(_q(i), c.ident)
                                            for i, c in enumerate(r.qi)),
                rows=ROWS,
                gen=sql.SQL(", ").join(
                    sql.SQL("{} AS {}").format(generalised(r, c), c.ident) for c in r.qi
                ),
                qi_out=qi_out, bucket=sql.Identifier(BUCKET_ID),
            )  # fmt: skip
        )
        conn.execute(
            sql.SQL(
                """CREATE TABLE {st} AS
                   SELECT b AS {bucket}, dbanon_s AS {sa}, count(*)::int AS {count}
                   FROM {rows} WHERE gid IS NOT NULL GROUP BY b, dbanon_s ORDER BY 1, 2"""
            ).format(
                st=st, bucket=sql.Identifier(BUCKET_ID), sa=r.sensitive[0].ident,
                count=sql.Identifier(COUNT), rows=ROWS,
            )  # fmt: skip
        )

    def checks(self, r: Resolved, built: list[Built]) -> list[Check]:
        """k-anonymity of QIT; cross-bucket l-diversity of QIT with ST (join on bucket)."""
        qit, st = (r.stored(b) for b in built)
        names = [c.name for c in r.qi]
        out = []
        for m in r.models:
            if kind_of(m).name == L_KIND:
                out.append(model_check(m, BucketTarget(qit, names, r.sensitive[0].name, None, st)))
                out.append(Check(f"{m.name}, every box containing a person",
                                 lambda conn, m=m: self._boxes(conn, r, built, m)))  # fmt: skip
            else:
                out.append(model_check(m, Target(qit, names)))
        return out

    @staticmethod
    def _boxes(conn: psycopg.Connection, r: Resolved, built: list[Built], m: Any) -> CheckResult:
        """(3.22) with the source (§6.2 item 7): a person matches every released row whose box
        contains her QI point, not only her own class, and boxes of different T_gens overlap;
        her worst value must still be at most 1/l. It needs the source, so only the gate runs
        it (the containment join of dbanon.metrics.exposure); its figures are the run's
        exposure. Above the exposure metric's row limit, or with a date QI, it is not measured
        and says so (`exposure_checked`); the class-level check above still holds."""
        from dbanon.metrics import exposure

        measured = exposure.at_publish(conn, r, built)
        worst = measured.get("exposure_max")
        if worst is None:
            return CheckResult(m.name + " (boxes)", True, {**measured, "exposure_checked": False})
        holds = worst <= 1 / float(m.l) + TOLERANCE
        return CheckResult(m.name + " (boxes)", holds, {**measured, "exposure_checked": True},
                           None if holds else f"a person's value has odds {worst:.4f}")  # fmt: skip


register(CrossBucket())
