"""The CBG thesis's chapter 3 experiment (§4.1, Figs 3.6-3.11), and `dbanon bench cbg`.

Data: Adult with the thesis's eight QIs and the seeded salary (dbanon.data.salary), 22,517 rows
sampled as the thesis did from IPUMS; categorical QIs generalise along ARX's Adult hierarchies
where Adult has one (sex, marital status, race, education, occupation; relationship is flat:
the value or '*'), numeric ones (age, hours) to [min, max] — the thesis gives no hierarchies,
and Mondrian needs them to cut categorical QIs.

Everything runs as a DBA would run it, in PostgreSQL: each release is published (`publish`,
verification gate included), its exposure and DM are the figures its run recorded, and its query
error is `dbanon evaluate`'s (the same seeded 1,000-query workload for every release).
- Figs 3.6-3.8: CBG ((k,l)-anonymity, k=3), Mondrian (k=3 and frequency l-diversity, the
  thesis's p <= 1/l, so it meets the bound it is compared on) and Anatomy (frequency
  l-diversity) for l over LS:
  exposure, DM and query error against l;
- Figs 3.9-3.11: CBG with l in {5, 10, 15, 20} and k over KS: the same against k.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

from dbanon.core.hierarchy import Hierarchy
from dbanon.data import hierarchy_file
from dbanon.data.salary import (
    SALARY_HIERARCHIES,
    SALARY_KEY,
    SALARY_QI,
    SALARY_ROWS,
    SALARY_SEED,
    load_salary,
)
from dbanon.db import catalog
from dbanon.experiments import provenance
from dbanon.lifecycle.declare import release_spec

LS = (2, 4, 6, 8, 10, 12, 14, 16, 18, 20)
K = 3  # Figs 3.6-3.8
L_FIXED = (5, 10, 15, 20)  # Figs 3.9-3.11
KS = (2, 3, 4, 5, 6, 8, 10)
QUERIES = 1000
METHODS = ("cbg", "mondrian", "anatomy")
LABELS = {"cbg": "CBG (k,l)", "mondrian": "Mondrian frequency l-diversity", "anatomy": "Anatomy"}
SCHEMA = "dbanon_exp"
TARGET = "dbanon_exp_out"
FIELDS = {  # field -> (axis label, log scale)
    "exposure": ("exposure probability", False),
    "dm": ("discernibility DM", True),
    "query_error": ("query error (mean of (upper - lower) / actual)", True),
}

Progress = Callable[[str], None]


def prepare(conn: psycopg.Connection, rows: int, seed: int, profile: str = "flat") -> str:
    """The salary table (SCHEMA.salary_ROWS, _heaped for that profile) and the hierarchies;
    returns the table's name."""
    catalog.require_catalog(conn)
    table = f"salary_{rows}" + ("" if profile == "flat" else f"_{profile}")
    if catalog.find_relation(conn, f"{SCHEMA}.{table}") is None:
        load_salary(conn, SCHEMA, table, rows, seed, profile)
    for name in sorted(set(SALARY_HIERARCHIES.values())):
        catalog.store_hierarchy(conn, Hierarchy.from_csv(name, hierarchy_file(name)), replace=True)
    conn.commit()
    return f"{SCHEMA}.{table}"


def publish_one(
    conn: psycopg.Connection, source: str, method: str, k: int | None, ell: int
) -> tuple[str, dict[str, Any]]:
    """Publish one release of the salary table, afresh (an earlier one of the name is dropped:
    a replace would keep its groups and measure against it); returns its name and figures."""
    from dbanon.lifecycle.publish import publish
    from dbanon.lifecycle.releases import drop

    name = f"exp_{method}_k{k or 0}_l{ell}"
    if conn.execute("SELECT 1 FROM dbanon.release WHERE name = %s", [name]).fetchone():
        drop(conn, name)
    spec = release_spec(
        name, source, SALARY_KEY, SALARY_QI, sensitive=["salary"], method=method, k=k, l=ell,
        l_kind="frequency" if method == "mondrian" else None,
        options={"seed": 0} if method == "anatomy" else None,
        hierarchies=SALARY_HIERARCHIES, target=f"{TARGET}.{name}",
    )  # fmt: skip
    result = publish(conn, spec, replace=True)
    return name, {**result.metrics, "classes": result.classes, "rows": result.rows}


def measure(
    conn: psycopg.Connection, source: str, method: str, k: int | None, ell: int, queries: int,
    seed: int,
) -> dict[str, Any]:  # fmt: skip
    from dbanon.lifecycle.evaluate import evaluate
    from dbanon.lifecycle.releases import drop

    started = time.perf_counter()
    name, m = publish_one(conn, source, method, k, ell)
    published = time.perf_counter() - started
    ev = evaluate(conn, name, queries, seed)
    evaluated = time.perf_counter() - started - published
    drop(conn, name)
    return {
        "method": method, "k": k if k is not None else "", "l": ell, "rows": m["rows"],
        "exposure": round(m["exposure"], 6), "exposure_max": round(m["exposure_max"], 6),
        "dm": m["dm"], "query_error": round(ev["query_error"], 4),
        "query_error_median": round(ev["query_error_median"], 4),
        "query_error_thesis": round(ev["query_error_thesis"], 4), "classes": m["classes"],
        "suppressed_rows": m.get("suppressed_rows", 0), "gcp": m.get("gcp"),
        "publish_seconds": round(published, 2), "evaluate_seconds": round(evaluated, 2),
    }  # fmt: skip


def run(
    conn: psycopg.Connection,
    out_dir: str | Path,
    rows: int = SALARY_ROWS,
    ls: Sequence[int] = LS,
    fixed: Sequence[int] = L_FIXED,
    ks: Sequence[int] = KS,
    queries: int = QUERIES,
    seed: int = SALARY_SEED,
    progress: Progress | None = None,
    salaries: Sequence[str] = ("flat",),
) -> dict[str, Any]:
    """Both parts of the experiment for each salary profile (dbanon.data.salary.PROFILES, the
    `salary` column); results.csv, six plots (of the first profile) and the verdicts."""
    say = progress or (lambda _msg: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for profile in salaries:
        say(f"loading {rows} rows of Adult with a {profile} salary")
        source = prepare(conn, rows, seed, profile)
        for ell in ls:
            for method in METHODS:
                say(f"l sweep ({profile}): {method}, l={ell}")
                row = measure(conn, source, method, None if method == "anatomy" else K, ell,
                              queries, seed)  # fmt: skip
                results.append({"part": "l", "salary": profile, **row})
        for ell in fixed:
            for k in ks:
                say(f"k sweep ({profile}): cbg, l={ell}, k={k}")
                results.append({"part": "k", "salary": profile,
                                **measure(conn, source, "cbg", k, ell, queries, seed)})
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0]))
        writer.writeheader()
        writer.writerows(results)
    first = [r for r in results if r["salary"] == salaries[0]]
    plots = _plots(first, out)
    # One profile is the thesis's experiment; profiles compared are a second run (cbg-salary).
    provenance.write(out, "cbg" if len(salaries) == 1 else "cbg-salary", {
        "rows": rows, "ls": list(ls), "fixed": list(fixed), "ks": list(ks), "queries": queries,
        "seed": seed, "salaries": list(salaries)})  # fmt: skip
    return {
        "csv": str(out / "results.csv"),
        "plots": plots,
        "findings": (verdict(first, ls, fixed, ks) if len(salaries) == 1 else
                     {p: verdict([r for r in results if r["salary"] == p], ls, fixed, ks)
                      for p in salaries}),  # fmt: skip
        "results": results,
    }


def verdict(
    results: list[dict[str, Any]], ls: Sequence[int], fixed: Sequence[int], ks: Sequence[int]
) -> dict[str, Any]:
    """The thesis's findings (§4.1), each judged from the rows."""
    by = {(r["part"], r["method"], r["k"] if r["part"] == "k" else "", r["l"]): r for r in results}

    def at(method: str, ell: int) -> dict[str, Any]:
        return by["l", method, "", ell]

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 3) if b else None

    cbg = [at("cbg", ell) for ell in ls]
    mon = [at("mondrian", ell) for ell in ls]
    ana = [at("anatomy", ell) for ell in ls]
    dms = [r["dm"] for r in cbg]
    out: dict[str, Any] = {
        "cbg_lowest_exposure_for_l": [
            ell for ell, c, m, a in zip(ls, cbg, mon, ana, strict=True)
            if c["exposure"] < min(m["exposure"], a["exposure"])
        ],
        "mondrian_below_anatomy_exposure_for_l": [
            ell for ell, m, a in zip(ls, mon, ana, strict=True) if m["exposure"] < a["exposure"]
        ],
        "cbg_dm_max_over_min": ratio(max(dms), min(dms)),
        "mondrian_over_cbg_dm_smallest_l": ratio(mon[0]["dm"], cbg[0]["dm"]),
        "mondrian_over_cbg_dm_largest_l": ratio(mon[-1]["dm"], cbg[-1]["dm"]),
        "cbg_error_above_anatomy_for_l": [
            ell for ell, c, a in zip(ls, cbg, ana, strict=True)
            if c["query_error"] > a["query_error"]
        ],
        "cbg_error_below_mondrian_for_l": [
            ell for ell, c, m in zip(ls, cbg, mon, strict=True)
            if c["query_error"] < m["query_error"]
        ],
        "cbg_error_below_mondrian_for_l_thesis_bounds": [
            ell for ell, c, m in zip(ls, cbg, mon, strict=True)
            if c["query_error_thesis"] < m["query_error_thesis"]
        ],
        "cbg_error_largest_over_smallest_l": ratio(cbg[-1]["query_error"], cbg[0]["query_error"]),
        "mondrian_error_largest_over_smallest_l": ratio(mon[-1]["query_error"],
                                                       mon[0]["query_error"]),
    }  # fmt: skip
    if fixed and ks:
        sweep = {ell: [by["k", "cbg", k, ell] for k in ks] for ell in fixed}
        out["exposure_falls_with_k_where_above_0.01"] = {
            ell: all(b["exposure"] <= a["exposure"] for a, b in zip(rs, rs[1:], strict=False)
                     if a["exposure"] > 0.01)
            for ell, rs in sweep.items()
        }  # fmt: skip
        out["dm_same_for_every_l_at_each_k"] = all(
            len({sweep[ell][i]["dm"] for ell in fixed}) == 1 for i in range(len(ks))
        )
        out["dm_spread_over_l_at_each_k"] = [
            ratio(max(sweep[ell][i]["dm"] for ell in fixed),
                  min(sweep[ell][i]["dm"] for ell in fixed)) for i in range(len(ks))
        ]  # fmt: skip
        out["error_growth_with_k_per_l"] = {
            ell: ratio(rs[-1]["query_error"], rs[0]["query_error"]) for ell, rs in sweep.items()
        }
    return out


def _plots(results: list[dict[str, Any]], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for fig_no, (field, (label, log)) in zip((6, 7, 8), FIELDS.items(), strict=True):
        fig, ax = plt.subplots(figsize=(6, 4))
        for method, marker in zip(METHODS, "osD", strict=True):
            pts = [(r["l"], r[field]) for r in results
                   if r["part"] == "l" and r["method"] == method]  # fmt: skip
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=LABELS[method])
        paths.append(_finish(fig, ax, "l", label, log, f"Fig. 3.{fig_no}: {field} vs l (k={K})",
                             out / f"fig3_{fig_no}_{field}_vs_l.png"))  # fmt: skip
    for fig_no, (field, (label, log)) in zip((9, 10, 11), FIELDS.items(), strict=True):
        sweep = [r for r in results if r["part"] == "k"]
        if not sweep:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for ell in sorted({r["l"] for r in sweep}):
            pts = [(r["k"], r[field]) for r in sweep if r["l"] == ell]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"CBG l={ell}")
        paths.append(_finish(fig, ax, "k", label, log, f"Fig. 3.{fig_no}: {field} vs k (CBG)",
                             out / f"fig3_{fig_no}_{field}_vs_k.png"))  # fmt: skip
    return paths


def _finish(fig: Any, ax: Any, x: str, label: str, log: bool, title: str, path: Any) -> str:
    """Label one figure, write it to `path` and close it; the path written."""
    import matplotlib.pyplot as plt

    if log:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(label)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


# --- dbanon bench cbg ---------------------------------------------------------------------------


def bench(
    conn: psycopg.Connection, sizes: Sequence[int] = (SALARY_ROWS, 45222), k: int = 3,
    ell: int = 10, seed: int = SALARY_SEED,
) -> dict[str, Any]:  # fmt: skip
    """`publish --algorithm cbg` end to end (stream out, Algorithms 3.1-3.5, materialise, the
    (k,l) check, exposure, swap, record) for each size; then the (k,l) check alone (`dbanon
    check`) and how the check and exposure scale from the first size to the last."""
    from psycopg import sql

    from dbanon.models import audit, from_options
    from dbanon.models.crossbucket import BucketTarget

    runs = []
    for rows in sizes:
        source = prepare(conn, rows, seed)
        started = time.perf_counter()
        name, m = publish_one(conn, source, "cbg", k, ell)
        seconds = time.perf_counter() - started
        timings = conn.execute(
            """SELECT u.timings FROM dbanon.run u JOIN dbanon.release r ON r.id = u.release_id
               WHERE r.name = %s AND u.status = 'succeeded' ORDER BY u.id DESC LIMIT 1""",
            [name],
        ).fetchone()[0]
        target = BucketTarget(sql.Identifier(TARGET, f"{name}_qit"), SALARY_QI, "salary", None,
                              sql.Identifier(TARGET, f"{name}_st"))  # fmt: skip
        started = time.perf_counter()
        checked = audit(conn, target, from_options(k=k, l=ell, l_kind="cross-bucket"))
        check_seconds = time.perf_counter() - started
        conn.rollback()
        runs.append({
            "rows": rows, "k": k, "l": ell, "seconds": round(seconds, 3),
            "timings": timings, "check_seconds": round(check_seconds, 3),
            "check_holds": all(c.holds for c in checked),
            "max_disclosure": checked[-1].figures["max_disclosure"],
            "exposure": round(m["exposure"], 6), "exposure_max": round(m["exposure_max"], 6),
            "dm": m["dm"], "gcp": m["gcp"], "tgens": m["tgens"],
            "suppressed_rows": m["suppressed_rows"], "classes": m["classes"],
        })  # fmt: skip
    first, last = runs[0], runs[-1]
    grow = last["rows"] / first["rows"]

    def scale(a: float, b: float) -> float | None:
        return round(b / a, 2) if a else None

    return {
        "runs": runs,
        "rows_ratio": round(grow, 3),
        "check_time_ratio": scale(first["check_seconds"], last["check_seconds"]),
        "exposure_time_ratio": scale(first["timings"].get("exposure", 0),
                                     last["timings"].get("exposure", 0)),  # fmt: skip
        "verify_time_ratio": scale(first["timings"]["verify"], last["timings"]["verify"]),
    }
