"""Method `cbg`: cross-bucket generalisation for (k,l)-anonymity (thesis Ch. 3).

Publishes two relations, joinable on `bucket_id`:
- NAME_qit: every row's QIs generalised over its equivalence group (numeric: [min, max] as
  text or typed range, `--ranges`; categorical: the group's lowest common ancestor in the
  column's hierarchy, or the value when the group agrees and '*' otherwise), and its bucket;
- NAME_st: per bucket, each sensitive value (under the column's own name) and its `count`.
Neither holds the row key or a group id; QIT rows are ordered by bucket_id (the rows of a bucket
in an order drawn from the run's seed) and ST rows by (bucket_id, value): never by the source's
order (on a persist refresh the units, and so the bucket ids, are numbered in a secret random
order). Both are written from the run's arrays (dbanon.methods.cbg_rows).

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
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.cbg_persist import persist_units
from dbanon.algorithms.persist import subset
from dbanon.db.stream import Coded
from dbanon.errors import DbanonError, quote_ident
from dbanon.methods import cbg_rows, cbg_sealed, register
from dbanon.methods.base import BuildContext, Built, Check, Method, Option, model_check
from dbanon.methods.grouped import POLICY, RANGES
from dbanon.methods.grouped_rows import extract_rows, label_groups
from dbanon.methods.kmember import validate_blocks
from dbanon.metrics.grouploss import loss_of_groups
from dbanon.models.base import TOLERANCE, CheckResult, Target
from dbanon.models.crossbucket import BUCKET_ID, COUNT, BucketTarget
from dbanon.models.specs import kind_of
from dbanon.setlogic import composition

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved

# Every source row of this run, as the map reads them (composition.new_rows): (key, gid: group,
# b: bucket, u: unit the map keeps, w: a waiting row's block, t: tagged sensitive value, fp:
# fingerprint), written from the run's arrays (dbanon.methods.cbg_rows.stage_rows).
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
    "Take T_gens in blocks of at most this many rows, cut along the QIs (default: 2000-row "
    "blocks above 50,000 rows).", low=2,
)  # fmt: skip
CBG_EXACT = Option("exact", bool, False, "Always run the thesis's Algorithm 3.1 on the whole "
                   "table (O(n^2): about 11 s at 45,000 rows).")  # fmt: skip
L_KIND = "cross-bucket-l-diversity"


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
        distinct = check_eligible(conn, r.source, r.sensitive[0], ell)  # NULL refused there
        sa = r.sensitive[0]
        least = diversity_num(k, ell)
        if distinct < least:
            raise DbanonError(
                f"cross-bucket needs at least k*ceil(l/k) = {least} distinct values of "
                f"{quote_ident(sa.name)} for k={k}, l={ell}; {r.source} has {distinct}"
            )

    def _block_size(self, r: Resolved, n: int) -> int | None:
        """Blocks for n rows laid out (None: the exact rule), under --block-size and --exact."""
        from dbanon.algorithms.cbg import block_size

        k, ell = self._kl(r)
        return block_size(n, r.options.get("block_size"), bool(r.options.get("exact")), k, ell)

    def build(self, conn: psycopg.Connection, r: Resolved, ctx: BuildContext) -> dict[str, Any]:
        from dbanon.algorithms.cbg import cross_bucket

        k, ell = self._kl(r)
        ctx.say(f"streaming {r.rows} rows of {r.source} out with COPY")
        # One COPY: the key, QIs, each row's fingerprint and tagged sensitive value (what the
        # release and the map are written from); cbg reads the latest map itself, by key.
        prior = composition.prior(conn, r.source, None, r.key, r.released_columns,
                                  r.sensitive[0])  # fmt: skip
        ex = extract_rows(conn, r, True, None, prior)
        keys, qi = ex.keys, ex.qi
        assert qi is not None and isinstance(ex.sensitive, Coded)
        sa, values = first_seen(ex.sensitive)
        ex = replace(ex, sensitive=None)
        ctx.lap("extract")
        ctx.say(f"cross-bucket generalisation, k={k}, l={ell}")
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
        ctx.lap("cluster")
        ctx.say("materialising the QIT and ST")
        released = np.where(gid > 0, gid, -1)
        labels, _ = label_groups(conn, r, ex, shown_qi, released, sets=False)
        ex = replace(ex, qi=None)  # the QI arrays go before the rows are written
        del shown_qi, shown_gid, qi, released
        qit, st = ctx.made(r.objects[0]), ctx.made(r.objects[1])
        cbg_rows.write_qit(conn, r, r.stored(qit), labels, bid, kept)
        del labels
        cbg_rows.write_st(conn, r, r.stored(st), ex, bid, kept)
        cbg_rows.stage_rows(conn, ROWS, ex, gid, bid, unit, waiting)
        cbg_rows.stage_units(conn, ROWS, ex, gid, bid, unit)
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
        buckets' values and keeps u (written from the arrays the release was written from)."""
        return ROWS

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
