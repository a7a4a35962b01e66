"""Re-identification risk of any relation over given QIs: prosecutor, journalist, marketer risk
and a population-uniqueness estimate, as ARX (RiskModelSampleSummary, after El Emam's "Guide to
the De-Identification of Personal Health Information", 2013) and statistical offices report them.

The attacker knows a target's QI values and links them to the release: everybody in the target's
equivalence class (the rows with the same released QI values, GROUP BY of the QIs; NULL a value
of its own) is equally likely. With f_j the size of class j in the relation (the sample), n the
rows, |J| the classes, and, when a population relation is given, F_j the size of the same class
in the population:

- prosecutor (the attacker knows the target is in the release): a record's risk is 1/f_j;
  highest = 1/min f_j, lowest = 1/max f_j, average (success rate) = |J|/n, records at risk =
  share of records with 1/f_j > threshold (strictly, as ARX);
- journalist (the target is someone of the population): the same with F_j: highest = 1/min F_j,
  records at risk = sum of f_j over classes with 1/F_j > threshold, / n, average =
  max(|J| / sum F_j, sum(f_j/F_j) / n) (El Emam's J_C, as ARX's getJournalistRisk);
- marketer (re-identify as many as possible): sum(f_j / F_j) / n.

Population uniqueness: Zayatz's model (L. Zayatz, "Estimation of the number of unique population
elements using a sample", Proc. Survey Research Methods Section, American Statistical
Association, 1991, 369-373), as ARX's ModelZayatz computes it: with N the population size, the
sampling fraction pi = n/N, c_1 the sample uniques and, for each class size i of the sample,
c_i classes, P_i = P(X = 1) for X ~ Hypergeometric(N, i, n),

    P(unique in population | unique in sample) = (c_1/|J|) P_1 / sum_i (c_i/|J|) P_i,
    population uniques = c_1 * that / pi,  reported as a share of N.

Every figure comes from SQL over the classes (one GROUP BY of the QIs, then aggregates over the
class sizes); only Zayatz's sum runs in Python, over the histogram of class sizes (as many terms
as distinct sizes), because log-gamma is not in every supported PostgreSQL.
"""

from __future__ import annotations

from math import exp, isfinite, lgamma, log
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from dbanon.errors import DbanonError
from dbanon.models import sizes
from dbanon.models.base import Target

DEFAULT_THRESHOLD = 0.2  # records above 1/5: classes smaller than 5 (ARX's default highlight)
MODEL = "Zayatz (1991)"

if TYPE_CHECKING:
    from dbanon.methods.base import Built, Resolved


def _classes(target: Target) -> sql.Composable:
    """(q1..qn, f): each class of `target` and its rows."""
    return sql.SQL("(SELECT {q}, {n} AS f FROM {src} GROUP BY {q})").format(
        q=target.alias_list, n=target.rows, src=target.source()
    )


def _check_threshold(threshold: float) -> None:
    if not (isfinite(threshold) and 0 < threshold <= 1):
        raise DbanonError(f"--risk-threshold must be in (0, 1], got {threshold!r}")


def measure(
    conn: psycopg.Connection,
    target: Target,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    population: Target | None = None,
    population_size: float | None = None,
) -> dict[str, Any]:
    """The risk figures of `target` (see the module docstring); journalist and marketer risk
    only with a `population` relation (same QIs, containing the sample), the population
    uniqueness estimate with a population relation or a `population_size`."""
    _check_threshold(threshold)
    if population is not None and population_size is not None:
        raise DbanonError("give --population or --population-size, not both")
    classes = _classes(target)
    # One scan: the histogram of class sizes (size -> classes), then every figure from it.
    hist = sizes.histogram(conn, target.relation, target.qi, target.count)
    n, count = sum(f * c for f, c in hist.items()), sum(hist.values())
    smallest, largest = min(hist, default=0), max(hist, default=0)
    at_risk = sum(f * c for f, c in hist.items() if f > 0 and 1.0 / f > threshold)
    uniques = hist.get(1, 0)
    out: dict[str, Any] = {
        "qi": list(target.qi),
        "threshold": threshold,
        "records": n,
        "classes": count,
        "prosecutor": _summary(n, count / n if n else 0.0, smallest, largest, at_risk),
        "sample_uniqueness": uniques / n if n else 0.0,
    }
    size = population_size
    if population is not None:
        out.update(_population_risks(conn, target, population, classes, threshold, n))
        size = float(out.pop("population_rows"))
    if size is not None:
        out["population_uniqueness"] = _uniqueness(hist, n, count, size)
    return out


def _summary(n: int, average: float, smallest: int, largest: int, at_risk: int) -> dict[str, float]:
    if not n:
        return {"highest": 0.0, "average": 0.0, "lowest": 0.0, "records_at_risk": 0.0}
    return {
        "highest": 1 / smallest,
        "average": average,
        "lowest": 1 / largest,
        "records_at_risk": at_risk / n,
    }


def _population_risks(
    conn: psycopg.Connection,
    target: Target,
    population: Target,
    classes: sql.Composable,
    threshold: float,
    n: int,
) -> dict[str, Any]:
    """Journalist and marketer risk: every sample class looked up in the population's classes
    (NULL matches NULL, as GROUP BY). A sample class the population lacks, or holds fewer rows
    of, means the population does not contain the sample: refused, naming one such class."""
    on = sql.SQL(" AND ").join(
        sql.SQL("s.{a} IS NOT DISTINCT FROM p.{a}").format(a=a) for a in target.aliases
    )
    joined = sql.SQL(
        "(SELECT s.*, coalesce(p.f, 0) AS pf FROM {s} s LEFT JOIN {p} p ON {on}) j"
    ).format(s=classes, p=_classes(population), on=on)
    row = conn.execute(
        sql.SQL(
            """SELECT count(*), sum(pf), min(pf), max(pf),
                      coalesce(sum(f) FILTER (WHERE 1.0::float8 / nullif(pf, 0) > %(t)s), 0),
                      coalesce(sum(f::float8 / nullif(pf, 0)), 0),
                      count(*) FILTER (WHERE pf < f), min({label}) FILTER (WHERE pf < f),
                      (SELECT {n} FROM {src})
               FROM {j}"""
        ).format(label=target.alias_label, j=joined, n=population.rows, src=population.source()),
        {"t": threshold},
    ).fetchone()
    if row[6]:
        raise DbanonError(
            f"population {population.describe(conn)} does not contain the sample "
            f"{target.describe(conn)}: {row[6]} class(es) have fewer rows in it, e.g. {row[7]}"
        )
    pop_rows = row[8]
    count, pop_in_classes, smallest, largest, at_risk, ratio = row[:6]
    if not n:
        journalist = _summary(0, 0.0, 0, 0, 0)
        marketer = 0.0
    else:
        marketer = float(ratio) / n
        average = max(count / float(pop_in_classes), marketer)
        journalist = _summary(n, average, int(smallest), int(largest), int(at_risk))
    return {
        "population_rows": int(pop_rows or 0),
        "journalist": journalist,
        "marketer": {"average": marketer},
    }


def _uniqueness(hist: dict[int, int], n: int, count: int, population: float) -> dict[str, Any]:
    """Zayatz's estimate from the histogram of class sizes (size -> number of classes)."""
    if population < n:
        raise DbanonError(
            f"population size {population:g} is smaller than the relation's {n} rows"
        )
    uniques = zayatz(hist, n, count, population)
    return {
        "model": MODEL,
        "population": population,
        "sampling_fraction": n / population if population else 0.0,
        "uniques": uniques,
        "estimate": uniques / population if population else 0.0,
    }


def _lchoose(a: int, b: int) -> float:
    return lgamma(a + 1) - lgamma(b + 1) - lgamma(a - b + 1)


def _p_one(population: int, size: int, n: int) -> float:
    """P(X = 1) for X ~ Hypergeometric(population, size successes, n draws)."""
    if size < 1 or n < 1 or n - 1 > population - size:
        return 0.0
    return exp(log(size) + _lchoose(population - size, n - 1) - _lchoose(population, n))


def zayatz(hist: dict[int, int], n: int, classes: int, population: float) -> float:
    """Zayatz's estimate of the number of population uniques (module docstring): `hist` maps a
    sample class size to its number of classes, n rows in `classes` classes, of a population of
    `population` records. The hypergeometric takes N as a whole number, as ARX does."""
    c1 = hist.get(1, 0)
    if not c1 or not n:
        return 0.0
    big_n = int(population)
    total = sum(c / classes * _p_one(big_n, int(size), n) for size, c in hist.items())
    conditional = (c1 / classes * _p_one(big_n, 1, n)) / total
    return c1 * conditional / (n / population)


def at_publish(conn: psycopg.Connection, r: Resolved, built: list[Built]) -> dict[str, Any]:
    """The prosecutor risk of a grouping release, for the run record under `risk`, over what a
    consumer reads and an attacker may know: its classes as released (the method's
    `risk_target`) split by the `--keep` columns, which go out as they are beside the QIs
    (counting the QIs alone said 0 % sample uniqueness of releases whose kept columns single
    most rows out, issue 34); {} for any other release."""
    target = r.method.risk_target(conn, r, built) if built else None
    if target is None:
        return {}
    kept = [c.name for c in r.keep if c.name not in target.qi]
    return {"risk": measure(conn, Target(target.relation, [*target.qi, *kept]))}


def lines(risk: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) pairs for a human reader of `check --risk` and `report`."""

    def summary(s: dict[str, float]) -> str:
        return (
            f"highest {s['highest']:.4g}, average {s['average']:.4g}, "
            f"records at risk {s['records_at_risk']:.2%}"
        )

    out = [
        ("risk threshold", f"{risk['threshold']:g}"),
        ("prosecutor risk", summary(risk["prosecutor"])),
    ]
    if "journalist" in risk:
        out.append(("journalist risk", summary(risk["journalist"])))
        out.append(("marketer risk", f"average {risk['marketer']['average']:.4g}"))
    out.append(("sample uniqueness", f"{risk['sample_uniqueness']:.2%}"))
    pu = risk.get("population_uniqueness")
    if pu:
        out.append((
            "population uniqueness",
            f"{pu['estimate']:.4%} ({pu['model']}, population {pu['population']:,.0f}, "
            f"sampling fraction {pu['sampling_fraction']:.4g})",
        ))  # fmt: skip
    return out
