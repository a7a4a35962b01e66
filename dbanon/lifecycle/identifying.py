"""Released columns are declared, never implied; and none of them may single people out.

Every method releases exactly: its QIs (generalised or perturbed), the declared sensitive
columns, and the columns the DBA names with `--keep` (the spec's `keep`, one field for every
method). A column nobody declared is never released, so neither is one added to the source
after the first publish.

A `--keep` column goes out as it is beside the QIs: an attacker who knows a person's value of
it (an e-mail, a phone number, a customer number) finds their row without looking at the QIs.
The gate (dbanon.release.verify, before the swap, on publish and on every refresh) therefore
measures, on the built relation as consumers will read it, the share of released rows whose
value is unique (GROUP BY col HAVING count(*) = 1), for each kept column, and for all of them
together beside the QIs as released (`read_qis`): columns harmless one by one (hours worked,
years of education, capital gain) can split a k-anonymous release's classes into single rows.
It refuses the release when a share is above `max_unique_share` (default one half), naming the
column(s) and the figure, unless `--allow-identifying` names the column: the DBA means it. A
kept column allowed that way is left out of the "together" measure too.

A sensitive column is the secret the model protects, not something the attacker knows: it is
not refused. But one released row by row (not by a bucketising method, which releases
sensitive values apart from the rows: `Method.sensitive_apart`) and unique for most rows (an
e-mail given as `--sensitive`) gives away who is who as soon as one value is known: the run
records a warning naming it and its unique share, which `publish` prints and `report` shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from dbanon.core.spec import MAX_UNIQUE_SHARE, names
from dbanon.db import catalog
from dbanon.db.catalog import Column, Relation
from dbanon.errors import DbanonError, ModelViolation, quote_ident, quote_name
from dbanon.models.base import CheckResult

if TYPE_CHECKING:
    from dbanon.core.spec import ReleaseSpec
    from dbanon.methods.base import Built, Method, Resolved

__all__ = ["MAX_UNIQUE_SHARE", "Identifying", "names"]



class Identifying(ModelViolation):
    """A release whose `--keep` columns single out rows; not made visible."""


def resolve_keep(
    spec: ReleaseSpec, method: Method, cols: dict[str, Column], source: Relation
) -> list[Column]:
    """The `--keep` columns, checked: they exist, are neither the key (never released) nor a QI
    or sensitive column, and the method can release them; `--allow-identifying` names only
    kept columns; the unique share is a share."""
    if spec.keep and not method.keeps:
        raise DbanonError(
            f"--keep does not apply to --algorithm {method.name}: it releases sensitive values "
            "apart from the rows, and a column kept beside its QIs has no place there"
        )
    twice = sorted({n for n in spec.keep if spec.keep.count(n) > 1})
    if twice:
        raise DbanonError(f"--keep names column {quote_ident(twice[0])} twice")
    kept = catalog.require_columns(cols, source, spec.keep)
    for c in kept:
        if c.name == spec.key:
            raise DbanonError(f"--keep: {quote_ident(c.name)} is the row key, which is never "
                "released")
        if c.name in spec.qi or c.name in spec.sensitive:
            raise DbanonError(f"--keep: {quote_ident(c.name)} is already a QI or sensitive column")
    stray = [n for n in spec.allow_identifying if n not in spec.keep]
    if stray:
        raise DbanonError(f"--allow-identifying {quote_ident(stray[0])}: it is not a --keep column")
    share = spec.max_unique_share
    if not (isinstance(share, int | float) and 0 <= share <= 1):
        raise DbanonError(f"--max-unique-share must be a share between 0 and 1, got {share!r}")
    return kept


def unique_share(conn: psycopg.Connection, rel: sql.Composable, cols: Sequence[str]) -> float:
    """The share of the rows of `rel` whose values of `cols` no other row has (NULL a value)."""
    unique, rows = conn.execute(
        sql.SQL(
            "SELECT coalesce(sum(n) FILTER (WHERE n = 1), 0), coalesce(sum(n), 0) "
            "FROM (SELECT count(*) AS n FROM {} GROUP BY {}) g"
        ).format(rel, sql.SQL(", ").join(map(sql.Identifier, cols)))
    ).fetchone()
    return float(unique) / float(rows) if rows else 0.0


def read_qis(conn: psycopg.Connection, r: Resolved, built: list[Built]) -> list[str]:
    """The QI columns a consumer reads as the attacker's known values are matched against them:
    those of the method's risk target (a grouping release's QIs as released, a projection's
    features); none for a release whose QIs are perturbed, where no value matches exactly."""
    target = r.method.risk_target(conn, r, built)
    return [] if target is None else list(target.qi)


def _percent(share: float) -> str:
    return f"{100 * share:.1f} %"


def gate(
    conn: psycopg.Connection, r: Resolved, built: list[Built], rel: sql.Composable | None = None,
    counted: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Refuse a release whose kept columns single out rows (see the module doc); returns the
    figures for the run record: unique shares and warnings about sensitive columns. `rel`:
    the relation read, by default what the method's checks read of its first relation;
    `counted`: sensitive columns' shares the build counted (BuildContext.unique_shares)."""
    rel = rel if rel is not None else r.method.checked_relation(r, built)
    limit = float(r.spec.max_unique_share)
    allowed = set(r.spec.allow_identifying)
    kept = [c.name for c in r.keep]
    shares: dict[str, float] = {c: unique_share(conn, rel, [c]) for c in kept}
    together = [c for c in kept if c not in allowed]
    for c in together:
        if shares[c] > limit:
            raise Identifying(
                f"release {quote_name(r.spec.name)} refused: --keep column {quote_ident(c)} is "
                "unique for "
                f"{_percent(shares[c])} of rows (more than {_percent(limit)}), so it singles "
                f"people out; leave it out of --keep, or --allow-identifying {c} if that is "
                "meant; the previous release is unchanged"
            )
    figures: dict[str, Any] = {}
    read = read_qis(conn, r, built)
    if together and (len(together) > 1 or read):
        share = unique_share(conn, rel, [*read, *together])
        figures["keep_unique_share_together"] = round(share, 6)
        if share > limit:
            named = ", ".join(map(quote_ident, together))
            beside = f" beside the released QIs {', '.join(map(quote_ident, read))}" if read else ""
            many = len(together) > 1
            raise Identifying(
                f"release {quote_name(r.spec.name)} refused: --keep column{'s' * many} "
                f"{named}{beside} "
                f"{'together ' * (many and not read)}{'are' if many else 'is'} unique for "
                f"{_percent(share)} of rows (more than {_percent(limit)}), so "
                f"{'they single' if many else 'it singles'} people out; keep fewer columns, or "
                f"--allow-identifying {','.join(together)} if that is meant; the previous "
                "release is unchanged"
            )
    warnings = []
    if not r.method.sensitive_apart:
        for c in r.sensitive:
            share = (counted or {}).get(c.name)
            if share is None:
                share = unique_share(conn, rel, [c.name])
            shares[c.name] = share
            if share > limit:
                warnings.append(
                    f"sensitive column {quote_ident(c.name)} is released row by row and is unique "
                    f"for {_percent(share)} of rows: whoever knows one of its values finds that "
                    "person's row (release it apart from the rows with a bucketising method, "
                    "see `dbanon methods`, or generalise it)"
                )
    if shares:
        figures["unique_share"] = {c: round(s, 6) for c, s in shares.items()}
    if warnings:
        figures["warnings"] = warnings
    return figures


def recheck(conn: psycopg.Connection, r: Resolved, built: list[Built]) -> CheckResult | None:
    """The gate's measure on a published release as it is now (`dbanon check NAME
    --release`): a live view's kept columns can turn identifying as its source changes."""
    if not r.keep:
        return None
    try:
        figures = gate(conn, r, built, r.stored(built[0]))
    except Identifying as e:
        return CheckResult("kept columns single out no rows", False, {}, str(e))
    shares = figures.get("unique_share", {})
    kept = {c.name: shares[c.name] for c in r.keep if c.name in shares}
    return CheckResult("kept columns single out no rows", True, {"keep_unique_share": kept})


RECORDED = ("unique_share", "keep_unique_share_together", "warnings")


def recorded(checked: dict[str, Any]) -> dict[str, Any]:
    """What the gate measured, for the run's metrics (report shows the warnings)."""
    return {k: checked[k] for k in RECORDED if k in checked}
