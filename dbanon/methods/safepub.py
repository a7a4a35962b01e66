"""Method `safepub`: (ε,δ)-differential privacy by sampling, generalising and suppressing.

(k,β)-SDGS (Li, Qardaji & Su, ASIACCS 2012), as SafePub and ARX use it (Bild, Kuhn & Prasser,
PoPETs 2018): each source row is kept with probability β = 1 - e^-ε, independently; the sample is
generalised by a scheme fixed before the data is read (`--levels`, one level of each QI's stored
hierarchy, the DBA's choice); every class of the generalised sample with fewer than k rows is
suppressed, k the smallest the SDGS bound allows for (ε, δ) (dbanon.models.dp). The release is
then (ε,δ)-DP whatever the attacker knows. Without `--levels` the scheme is SafePub's private
search instead (dbanon.algorithms.dpsearch): ε is split into ε_search (`--search-epsilon`,
default SEARCH_SHARE of ε, ARX's default of 0.1 at ε = 1) for an exponential-mechanism walk of
the full-domain lattice scored on the sample, and ε_anon = ε - ε_search, which sets β and k; the
release is (ε_search + ε_anon, δ)-DP by sequential composition (SafePub's Theorem), and the
budget is charged the whole ε. With `--levels` the search spends nothing (reported as 0).

The sample is a keyed hash: a row is kept when the first 56 bits of SHA-256(secret || key) fall
below β·2^56. The secret is 32 fresh random bytes per run (derived from `--seed` only when one is
given, for tests), held in a temporary table for the build and never stored, so no consumer can
recompute which rows were drawn and every run draws a fresh sample. The key itself is never
released. Built with dbanon.setlogic.fulldomain.release_select over the sample, as `fulldomain`
releases a node; the gate checks k-anonymity at k on the released table.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms.dpsearch import Axis, search
from dbanon.core.hierarchy import Hierarchy
from dbanon.db.catalog import Relation
from dbanon.errors import DbanonError, quote_ident
from dbanon.methods import register
from dbanon.methods.base import Built, Check, Method, Option, model_check
from dbanon.methods.grouped import RANGES
from dbanon.models import KAnonymity
from dbanon.models.dp import MAX_EPSILON, SDGS, sdgs

if TYPE_CHECKING:
    from dbanon.methods.base import BuildContext, Resolved

SECRET = Relation("pg_temp", "dbanon_safepub_secret")  # the run's sampling secret, one row
SAMPLE = Relation("pg_temp", "dbanon_safepub_sample")  # a view: the source's sampled rows
BITS = 56  # of the keyed hash compared with β (7 bytes: a non-negative bigint)
SEARCH_SHARE = 0.1  # of ε spent by the private search when --search-epsilon is not given
SEARCH_STEPS = 30  # the walk's draws by default (each spends ε_search / (steps + 1))


def parse_levels(text: str, r: Resolved) -> tuple[dict[str, int], dict[str, Any]]:
    """`col=N,...` as a level per QI (0 for a QI not named), each checked against its
    hierarchy, and the hierarchies to release them with. A numeric or date QI without a stored
    hierarchy goes to level 0 or 1 ('*') only: the interval widths other methods make from the
    data's range would make the scheme depend on the data, which the SDGS guarantee rules out."""
    from dbanon.setlogic.hierarchies import _effective, _unmade

    by_name = {c.name: c for c in r.qi}
    levels = dict.fromkeys(by_name, 0)
    hierarchies: dict[str, Any] = dict(r.hierarchies)
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, eq, value = item.rpartition("=")
        if not eq or not name:
            raise DbanonError(f"--levels takes COLUMN=LEVEL items, got {item!r}")
        if name not in by_name:
            raise DbanonError(f"--levels names {name!r}, which is not a quasi-identifier")
        try:
            level = int(value)
        except ValueError:
            raise DbanonError(f"--levels: the level of {name!r} must be a whole number, "
                              f"got {value!r}") from None  # fmt: skip
        kind, h, height = _effective(by_name[name], r.hierarchies)
        if h is None and kind in ("interval", "calendar"):
            hierarchies[name] = _unmade(kind, by_name[name])  # level 1 of it: '*'
            height = 1
            if level not in (0, 1):
                raise DbanonError(
                    f"--levels: {name!r} has no stored hierarchy: level 0 (as it is) or 1 ('*') "
                    "only; a stored one (--hierarchy) gives the levels between, since widths "
                    "made from the data would depend on it"
                )
        if not 0 <= level <= height:
            raise DbanonError(f"--levels: level {level} of {name!r} is outside its hierarchy "
                              f"(0 to {height})")  # fmt: skip
        levels[name] = level
    return levels, hierarchies


def search_axes(r: Resolved) -> list[Axis]:
    """The lattice of the private search, without data: per QI the class of each leaf (node id
    of its stored hierarchy, one more id for a value it does not cover, released as its root)
    at each level, and the leaf share of each class. A QI without a stored hierarchy has levels
    0 (each value its class, filled in by `_codes`) and 1 ('*', share 1)."""
    from dbanon.metrics.loss import leaf_share
    from dbanon.setlogic.hierarchies import _effective

    axes = []
    for col in r.qi:
        kind, h, _ = _effective(col, r.hierarchies)
        if isinstance(h, Hierarchy):
            anc = h.ancestor_table()[: len(h.leaves)]
            gen = np.column_stack([anc.T, np.full(h.height + 1, h.root)]).astype(np.int64)
            share = leaf_share(h)
            axes.append(Axis(col.name, gen, [share] * (h.height + 1)))
        elif h is None:
            axes.append(Axis(col.name, np.zeros((2, 0), dtype=np.int64), []))
        else:
            raise DbanonError(f"the private search reads stored hierarchies; "
                              f"{quote_ident(col.name)} has a {kind} hierarchy: give --levels")
    return axes


def _codes(conn: psycopg.Connection, r: Resolved, axes: list[Axis]
           ) -> tuple[list[Axis], np.ndarray, np.ndarray]:  # fmt: skip
    """The sample's distinct QI tuples (one GROUP BY in PostgreSQL) as value ids per axis, and
    their rows; a QI without a hierarchy gets its level-0 classes from the values seen."""
    rows = conn.execute(
        sql.SQL("SELECT {cols}, count(*) FROM {sample} s GROUP BY {keys}").format(
            cols=sql.SQL(", ").join(sql.SQL("s.{}::text").format(c.ident) for c in r.qi),
            sample=SAMPLE.ident,
            keys=sql.SQL(", ").join(sql.Literal(i + 1) for i in range(len(r.qi))),
        )
    ).fetchall()
    weights = np.array([row[-1] for row in rows], dtype=np.float64)
    codes = np.zeros((len(rows), len(r.qi)), dtype=np.int64)
    out = []
    for j, (axis, col) in enumerate(zip(axes, r.qi, strict=True)):
        h = r.hierarchies.get(col.name)
        values = [row[j] for row in rows]
        if isinstance(h, Hierarchy):
            uncovered = len(h.leaves)
            codes[:, j] = [h.leaves.get(v, uncovered) for v in values]
            out.append(axis)
        else:
            seen = {v: i for i, v in enumerate(dict.fromkeys(values))}
            codes[:, j] = [seen[v] for v in values]
            gen = np.vstack([np.arange(len(seen)), np.zeros(len(seen), dtype=np.int64)])
            out.append(Axis(col.name, gen, [np.zeros(len(seen)), np.ones(1)]))
    return out, codes, weights


Levels = dict[str, int]


def private_search(conn: psycopg.Connection, r: Resolved, k: int, epsilon: float,
                   secret: bytes) -> tuple[Levels, dict[str, Any], dict[str, Any]]:  # fmt: skip
    """SafePub's search over the sample (dbanon.algorithms.dpsearch), its draws from the run's
    secret: the levels chosen, the hierarchies to release them with, and what to report."""
    from dbanon.setlogic.hierarchies import _effective, _unmade

    axes, codes, weights = _codes(conn, r, search_axes(r))
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(secret + b"search").digest()[:8],
                                               "big"))  # fmt: skip
    found = search(axes, codes, weights, r.rows, k, epsilon, r.options["search_steps"], rng)
    levels = {col.name: lv for col, lv in zip(r.qi, found.node, strict=True)}
    hierarchies: dict[str, Any] = dict(r.hierarchies)
    for col in r.qi:
        kind, h, _ = _effective(col, r.hierarchies)
        if h is None and kind in ("interval", "calendar"):
            hierarchies[col.name] = _unmade(kind, col)
    report = {"search": {"utility": "granularity (leaf shares), SafePub's Loss score",
                         "sensitivity": found.sensitivity, "steps": len(found.pivots) - 1,
                         "epsilon_per_draw": found.epsilon_per_draw,
                         "nodes_scored": len(found.scores)}}  # fmt: skip
    return levels, hierarchies, report


class SafePub(Method):
    name = "safepub"
    summary = (
        "(ε,δ)-differential privacy by (k,β)-SDGS, as SafePub: a secret Bernoulli sample with "
        "β = 1 - e^-ε, the QIs generalised to the DBA's --levels (or to the node SafePub's "
        "private search of the lattice draws, spending part of ε), every class of the sample "
        "below the k the SDGS bound gives for (ε, δ) suppressed"
    )
    promises = ("k-anonymity",)  # at the SDGS k, or a larger --k
    randomised = True
    reported = ("dp", "budget")
    releases = (
        "`NAME` (table): the rows of a secret sample of the source, each QI generalised to its "
        "`--levels` level (or the private search's), then `--sensitive` and `--keep` as they "
        "are; classes under k left out"
    )
    attacker = (
        "any background knowledge: each release is (ε,δ)-differentially private; who keeps r "
        "releases of a source (publish and refreshes) holds at most (rε, rδ) (sequential "
        "composition)"
    )
    options: ClassVar[tuple[Option, ...]] = (
        Option("epsilon", float, 1.0, "The ε of (ε,δ)-differential privacy this release spends.",
               low=0, low_open=True, high=MAX_EPSILON),
        Option("delta", float, 1e-5, "The δ of (ε,δ)-differential privacy, in (0, 1); well "
               "below 1/rows.", low=0, high=1, low_open=True, high_open=True),
        Option("levels", str, "", "The generalisation scheme, fixed before the data is read: "
               "COLUMN=LEVEL,... of each QI's stored hierarchy (a QI not named: level 0); "
               "without it SafePub's private search chooses one."),
        Option("search_epsilon", float, None, "The part of --epsilon the private search spends "
               f"(default {SEARCH_SHARE:g} of it); the rest sets β and k. Only without --levels.",
               low=0, low_open=True),
        Option("search_steps", int, SEARCH_STEPS, "Steps of the private search's walk; each draw "
               "spends --search-epsilon / (steps + 1), the last draw picks among the steps.",
               low=1, high=1000),
        RANGES,
    )  # fmt: skip

    def search_epsilon(self, r: Resolved) -> float:
        """ε_search: 0 with --levels (a data-independent scheme), else the option or its share."""
        if r.options["levels"].strip():
            return 0.0
        given = r.options.get("search_epsilon")
        return SEARCH_SHARE * r.options["epsilon"] if given is None else float(given)

    def params(self, r: Resolved) -> SDGS:
        """(k, β) from ε_anon = ε - ε_search (and δ)."""
        return sdgs(r.options["epsilon"] - self.search_epsilon(r), r.options["delta"])

    def privacy_cost(self, r: Resolved) -> tuple[float, float]:
        return (r.options["epsilon"], r.options["delta"])

    def k(self, r: Resolved) -> int:
        """The class size released: the SDGS k, or a larger k the DBA asked for."""
        return max(self.params(r).k, r.k or 0)

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:
        given = r.options.get("search_epsilon")
        if r.options["levels"].strip():
            if given is not None:
                raise DbanonError("--search-epsilon is for the private search; with --levels "
                                  "the scheme is fixed and the search does not run")
            parse_levels(r.options["levels"], r)
        else:
            if given is not None and not given < r.options["epsilon"]:
                raise DbanonError(f"--search-epsilon ({given:g}) must be below --epsilon "
                                  f"({r.options['epsilon']:g}): the rest samples and suppresses")
            search_axes(r)
        k = self.k(r)
        if k > r.rows:
            raise DbanonError(
                f"k={k} (the SDGS threshold for ε={self.params(r).epsilon:g}, "
                f"δ={r.options['delta']:g}) is larger than {r.source}'s {r.rows} rows: every "
                "class would be suppressed"
            )

    def build(self, conn: psycopg.Connection, r: Resolved, ctx: BuildContext) -> dict[str, Any]:
        from dbanon.db.settings import local_settings, work_mem_at_least
        from dbanon.setlogic.fulldomain import RELEASE_WORK_MEM, release_select

        params = self.params(r)
        ctx.say(f"sampling with β={params.beta:.4f}, suppressing classes under k={self.k(r)}")
        secret = (
            hashlib.sha256(f"dbanon-safepub:{r.seed}".encode()).digest()
            if r.options.get("seed") is not None  # reproducible on request (tests)
            else secrets.token_bytes(32)
        )
        conn.execute(
            sql.SQL("CREATE TEMP TABLE {} (secret bytea) ON COMMIT DROP").format(SECRET.ident)
        )
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(SECRET.ident), [secret])
        columns = [c.ident for c in [*r.qi, *r.sensitive, *r.keep]]
        conn.execute(
            sql.SQL(
                "CREATE TEMP VIEW {view} AS SELECT {cols} FROM {src} s WHERE ('x' || encode("
                "substring(sha256((SELECT secret FROM {secret}) || convert_to(s.{key}::text, "
                "'UTF8')) FROM 1 FOR {bytes}), 'hex'))::bit({bits})::bigint < {below}"
            ).format(
                view=SAMPLE.ident,
                cols=sql.SQL(", ").join(sql.SQL("s.{}").format(c) for c in columns),
                src=r.source.ident, secret=SECRET.ident, key=r.key.ident,
                bytes=sql.Literal(BITS // 8), bits=sql.Literal(BITS),
                below=sql.Literal(round(params.beta * 2**BITS)),
            )
        )  # fmt: skip
        eps_search = self.search_epsilon(r)
        if eps_search:
            ctx.say(f"searching the lattice privately with ε={eps_search:g}")
            levels, hierarchies, searched = private_search(conn, r, self.k(r), eps_search, secret)
            ctx.lap("search")
        else:
            levels, hierarchies = parse_levels(r.options["levels"], r)
            searched = {}
        select = release_select(
            SAMPLE, r.qi, hierarchies, levels, [c.name for c in [*r.sensitive, *r.keep]],
            [KAnonymity(self.k(r))], ranges=r.options["ranges"], conn=conn,
        )  # fmt: skip
        built = ctx.made(r.objects[0])
        with local_settings(conn, work_mem=work_mem_at_least(conn, RELEASE_WORK_MEM)):
            conn.execute(sql.SQL("CREATE TABLE {} AS {}").format(r.stored(built), select))
            sampled = int(
                conn.execute(sql.SQL("SELECT count(*) FROM {}").format(SAMPLE.ident)).fetchone()[0]
            )
        conn.execute(sql.SQL("DROP VIEW {}").format(SAMPLE.ident))
        conn.execute(sql.SQL("DROP TABLE {}").format(SECRET.ident))
        ctx.lap("materialise")
        dp = {**params.as_json(), "k": self.k(r), "epsilon": r.options["epsilon"],
              "anon_epsilon": params.epsilon, "search_epsilon": eps_search}
        return {"dp": dp, "sample_rows": sampled, "levels": levels, **searched}

    def checks(self, r: Resolved, built: list[Built]) -> list[Check]:
        """k-anonymity at the released k on the released table, and any model the DBA asked."""
        target = replace(r.target, relation=self.checked_relation(r, built))
        own = model_check(KAnonymity(self.k(r)), target)
        return [own, *(c for c in super().checks(r, built) if c.name != own.name)]


register(SafePub())
