"""The LAG chapter's experiments (thesis ch. 5.3, Figs 5.4-5.27): DM, NCP and query error of
LAG_1 (partition), LAG_2 as Top-down (ncp) and LAG_2 as Algorithm 5.3 is written (ncp-thesis).

Setting (Table 5.5, on the salary stand-in as in dbanon.experiments.localanatomy): 31,055 rows;
QI relationship, marital status, race, education, hours per week; semi-sensitive sex (under
t-closeness, t = 0.2), age and occupation (dbanon.experiments.standins), salary sensitive;
k in {5, 8, 10}, l in {5, 8, 10, 12, 15, 18, 20}, density in {10, 20, 30, 40} %. The
generalisation does not depend on l and the bucketisation not on k or the variant, so each is
computed once per setting it depends on; every (variant, k, l, density) release is then read by
the shared query workload (1,000 queries). NCP: dbanon.algorithms.lag.ncp (flagged cells 0);
DM: sum of squared group sizes. Exposure under attacker (a) is measured for k = 10, l = 10 at
20 %, beside LA's, to show the generalisation's extra protection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dbanon.algorithms.lag import discernibility, generalise, ncp
from dbanon.algorithms.localanatomy import Principle
from dbanon.core.flags import draw
from dbanon.experiments import provenance
from dbanon.experiments.localanatomy import (
    SALARY,
    T,
    _write,
    bucketed,
    group_boxes,
    la_release,
    plot,
    prepare,
    qi_arrays,
    view,
)
from dbanon.metrics import queries
from dbanon.metrics.personal import per_person, summary

KS = (5, 8, 10)
LS = (5, 8, 10, 12, 15, 18, 20)
DENSITIES = (0.1, 0.2, 0.3, 0.4)
ROWS = 31055
QI = ["relationship", "marital_status", "race", "education", "hours_per_week"]
SEMI = ["sex", "age", "occupation"]
# LAG_2 twice: as Top-down (dbanon's default) and as Algorithm 5.3 is written (issue 35).
VARIANTS = {"partition": "LAG_1", "ncp": "LAG_2", "ncp-thesis": "LAG_2_thesis"}


def _exposure_row(data: Any, each: dict[object, np.ndarray]) -> dict[str, float]:
    """Mean exposure per attribute (the thesis's figure) and the most exposed person's
    (`max_<attribute>`: what the 1/l principle bounds)."""
    mean, worst = summary(each)
    keys = {"salary": SALARY, **{c: data.column(c) for c in SEMI}}
    return {**{c: round(mean[j], 5) for c, j in keys.items()},
            **{f"max_{c}": round(worst[j], 5) for c, j in keys.items()}}  # fmt: skip


def run(
    out_dir: str | Path, ks: Sequence[int] = KS, ls: Sequence[int] = LS,
    densities: Sequence[float] = DENSITIES, rows: int = ROWS, n_queries: int = 1000,
    seed: int = 0, progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    say, out, data, work = prepare(out_dir, rows, [*QI, *SEMI], n_queries, seed, progress)
    qi = qi_arrays(data)
    numeric = [j for j, a in enumerate(data.attrs) if a.numeric]
    categorical = [j for j, a in enumerate(data.attrs) if not a.numeric]
    results: list[dict[str, Any]] = []
    exposures: list[dict[str, Any]] = []
    for density in densities:
        flags = draw(data.n, SEMI, density, seed)
        flagged = np.zeros_like(data.codes, dtype=bool)
        for c in SEMI:
            flagged[flags[c], data.column(c)] = True
        for variant, label in VARIANTS.items():
            for k in ks:
                say(f"density {density:.0%}, {label}, k={k}")
                gid, figs = generalise(qi, flagged[:, numeric], flagged[:, categorical], k,
                                       variant, seed)  # fmt: skip
                kept = gid >= 0
                base = {"variant": label, "density": density, "k": k,
                        "ncp": round(ncp(qi, flagged[:, numeric], flagged[:, categorical], gid), 6),
                        "dm": discernibility(gid), "groups": int(gid.max()) + 1,
                        "suppressed_rows": figs["suppressed_rows"]}  # fmt: skip
                lo, hi = group_boxes(data, gid, flagged)
                for ell in ls:
                    buckets, sal, used = la_release(
                        data, flags, ell, True, seed, principles={"sex": Principle("t", T)},
                        rows=kept,
                    )  # fmt: skip
                    b = bucketed(data, lo, hi, buckets, sal)
                    err = queries.query_error(b, data.attrs, work, SALARY)["query_error"]
                    # an attribute whose flagged values cannot reach l is left out, never capped
                    caps = {f"feasible_{c}": c in used for c in ("age", "occupation")}
                    results.append({**base, "l": ell, "query_error": round(err, 5), **caps})
                    if k == 10 and ell == 10 and density == 0.2:
                        known = ~flagged
                        each = per_person(view(data, known, lo, hi, buckets, sal), "a")
                        exposures.append({"release": label, **_exposure_row(data, each)})
    if any(r["k"] == 10 for r in results) and 0.2 in densities and 10 in ls:
        flags = draw(data.n, SEMI, 0.2, seed)
        known = np.ones_like(data.codes, dtype=bool)
        for c in SEMI:
            known[flags[c], data.column(c)] = False
        buckets, sal, _ = la_release(data, flags, 10, True, seed,
                                     principles={"sex": Principle("t", T)})  # fmt: skip
        each = per_person(view(data, known, data.codes, data.codes, buckets, sal), "a")
        exposures.append({"release": "LA", **_exposure_row(data, each)})
    files = [_write(out, "results", results)]
    if exposures:
        files.append(_write(out, "exposure", exposures))
    files.append(str(provenance.write(out, "lag", {
        "rows": data.n, "ks": list(ks), "ls": list(ls), "densities": list(densities),
        "queries": n_queries, "seed": seed})))  # fmt: skip
    plots = []
    for field, name in (("dm", "DM"), ("ncp", "NCP"), ("query_error", "query error")):
        for density in densities:
            rows_ = [{**r, "series": f"{r['variant']} k={r['k']}"} for r in results
                     if r["density"] == density]  # fmt: skip
            path = out / f"{field}_{round(density * 100)}.png"
            plots.append(plot(rows_, "series", field, name,
                              f"{name} vs l, density {density:.0%}", path))  # fmt: skip
    return {"rows": data.n, "queries": n_queries, "files": files, "plots": plots,
            "results": results, "exposure": exposures, "findings": findings(results)}  # fmt: skip


def findings(results: list[dict[str, Any]]) -> dict[str, Any]:
    """§4.3's claims with the measured numbers (means over the grid where a claim is general)."""

    def mean(field: str, **where: Any) -> float:
        vals = [r[field] for r in results if all(r[k] == v for k, v in where.items())]
        return round(float(np.mean(vals)), 6) if vals else float("nan")

    pairs = sorted({(r["density"], r["k"], r["l"]) for r in results})

    def below(field: str, low: str, high: str) -> int:
        """Settings where `low`'s figure is below `high`'s."""
        return sum(mean(field, variant=low, density=d, k=k, l=ell)
                   < mean(field, variant=high, density=d, k=k, l=ell) for d, k, ell in pairs)

    dens = sorted({r["density"] for r in results})
    ks = sorted({r["k"] for r in results})
    return {
        "settings": len(pairs),
        **{f"{two.lower()}_ncp_below_lag1": below("ncp", two, "LAG_1")
           for two in ("LAG_2", "LAG_2_thesis")},
        **{f"lag1_{f}_below_{two.lower()}": below(f, "LAG_1", two)
           for f in ("dm", "query_error") for two in ("LAG_2", "LAG_2_thesis")},  # fmt: skip
        "ncp_by_variant": {v: mean("ncp", variant=v) for v in VARIANTS.values()},
        "dm_by_variant": {v: mean("dm", variant=v) for v in VARIANTS.values()},
        "query_error_by_variant": {v: mean("query_error", variant=v) for v in VARIANTS.values()},
        "lag1_ncp_by_density": {d: mean("ncp", variant="LAG_1", density=d) for d in dens},
        "dm_by_k": {k: mean("dm", k=k) for k in ks},
        "dm_by_density": {d: mean("dm", density=d) for d in dens},
        "query_error_by_k": {k: mean("query_error", k=k) for k in ks},
        "query_error_by_l": {ell: mean("query_error", l=ell)
                             for ell in sorted({r["l"] for r in results})},  # fmt: skip
    }
