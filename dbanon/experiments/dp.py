"""SafePub's utility against k-anonymity (issue 36 item 3): `dbanon experiment dp`.

Data: UCI Adult's 45,222 complete rows (the shipped copy of the shared data set; `--rows` takes
a seeded sample), QIs age, workclass, education, marital_status, race, sex, native_country, each
with ARX's Adult hierarchy; `salary` (dbanon.data.salary: derived from income, education and
hours) is the sensitive column the shared query workload sums, and `income` is kept as the label
the classifier predicts. Every release is a real `publish` into schema dbanon_exp_out.

Settings, each ε with δ = 1e-5:
- `safepub_levels`: method `safepub` with the data-independent scheme LEVELS (fixed from the
  hierarchies' meaning, never from the data: age in 10-year bands, education and the other
  categorical QIs one level up, sex as it is), all of ε on the sample;
- `safepub_search`: `safepub` without `--levels`: SafePub's private search (its default share,
  0.1 ε, and steps), the rest of ε on the sample;
- `kanon_fulldomain`: k-anonymity by `fulldomain` (the least-loss node of the same lattice, the
  search SafePub replaces with a private one, so the two differ only in what DP costs) with up to
  MAX_SUPPRESSION of the rows suppressed, at the k each ε implies (the SDGS k of `safepub_levels`)
  and at k = 5 and 10 (`epsilon` empty);
- `original`: the source itself (every QI as it is), the ceiling of the utility.
Each safepub setting runs over `seeds` seeds (the sample's secret, the AUC's rows and folds);
k-anonymity is deterministic and repeats only the AUC's draws. Every figure is a mean with the
half-width of its 95 % interval over the seeds (dbanon.experiments.stats).

Metrics, each under its exact name:
- `ncp_leaf`: NCP with leaf counts (Xu et al.; dbanon.metrics.loss.leaf_share): a released value
  costs the share of its hierarchy's leaves it covers (0 as it is, 1 at the root), averaged over
  the QIs; a source row not in the release (not sampled, or in a suppressed class) costs 1, so the
  mean is over the source's rows. `ncp_leaf_released` is the mean over released rows only.
- `query_error`: the shared workload (dbanon.metrics.queries, the cbg and local-anatomy
  experiments': 1,000 seeded SUM(salary) queries over up to 4 QIs). A sampled release cannot
  answer a SUM with sure/maybe bounds (the rows it lacks are in no bound), so each query is
  answered with an estimate: N/n (N source rows, n released) times the sum over released rows of
  the salary times the row's chance of meeting the query, its cells read as uniform (the
  thesis's Pro_t, dbanon.metrics.queries.share); a query's error is |estimate - actual| /
  actual, and `query_error` the mean over the workload (`query_error_median` its median: a few
  queries that match a handful of rows dominate the mean).
- `auc`: as the RFKA experiment measures it (dbanon.experiments.rfka.auc): ROC AUC of an RBF SVM
  (scikit-learn defaults) under 5-fold stratified cross-validation, income >50K positive, each
  released QI one-hot encoded, on AUC_ROWS rows drawn from the release (the RFKA paper's Adult
  size; an SVM on 45,000 rows takes minutes per fold).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.core.hierarchy import Hierarchy
from dbanon.data import ADULT_COLUMNS, ADULT_HIERARCHIES, adult_rows, hierarchy_file
from dbanon.experiments import provenance
from dbanon.experiments.stats import spread
from dbanon.lifecycle.declare import release_spec
from dbanon.metrics.loss import leaf_share

EPSILONS = (0.1, 0.5, 1.0, 2.0)
DELTA = 1e-5
KS = (5, 10)
SEEDS = 5
QUERIES = 1000
AUC_ROWS = 2000
MAX_SUPPRESSION = 0.5
QI = ["age", "workclass", "education", "marital_status", "race", "sex", "native_country"]
HIERARCHIES = {c: ADULT_HIERARCHIES[c] for c in QI}
LEVELS = {"age": 2, "workclass": 1, "education": 1, "marital_status": 1, "race": 1, "sex": 0,
          "native_country": 1}  # fmt: skip
SCHEMA, OUT, TABLE = "dbanon_exp", "dbanon_exp_out", "dp_adult"
METHODS = ("safepub_levels", "safepub_search", "kanon_fulldomain", "original")
MEASURES = ("ncp_leaf", "ncp_leaf_released", "query_error", "query_error_median", "auc",
            "released_share")
Progress = Callable[[str], None]


def adult_table(rows: int | None, seed: int = 0) -> tuple[list[str], list[tuple]]:
    """The columns and rows: the QIs, income and the seeded salary, `rows` of Adult drawn
    without replacement by default_rng(seed) (all of it when None), in Adult's order."""
    from dbanon.data.salary import SALARY_SEED, salary_columns

    every = adult_rows()
    salary = salary_columns(len(every), SALARY_SEED)["salary"]  # every row, in Adult's order
    pick = range(len(every))
    if rows is not None and rows < len(every):
        pick = np.sort(np.random.default_rng(seed).choice(len(every), rows, replace=False))
    col = {c: i for i, c in enumerate(ADULT_COLUMNS)}
    names = [*QI, "income", "salary"]
    out = [(*(every[i][col[c]] for c in QI), every[i][col["income"]], int(salary[i]))
           for i in pick]  # fmt: skip
    return names, out


def prepare(db: Any, rows: int | None) -> tuple[str, int]:
    """Load the table and store the hierarchies; its name and row count."""
    from dbanon.db import catalog
    from dbanon.demo import load_table

    catalog.require_catalog(db.conn)
    names, data = adult_table(rows)
    load_table(db, SCHEMA, TABLE, names, {"age", "salary"}, data)
    for name in sorted(set(HIERARCHIES.values())):
        catalog.store_hierarchy(db.conn, Hierarchy.from_csv(name, hierarchy_file(name)),
                                replace=True)  # fmt: skip
    db.conn.commit()
    return f"{SCHEMA}.{TABLE}", len(data)


class Measure:
    """The measures of releases of one source: its hierarchies' leaf shares, the shared query
    workload with its exact answers, and the label."""

    def __init__(self, conn: psycopg.Connection, source: str, queries: int, seed: int) -> None:
        from dbanon.db import catalog
        from dbanon.metrics import queries as q
        from dbanon.metrics.boxes import source_points
        from dbanon.metrics.exposure import metric_attributes

        self.conn = conn
        rel = catalog.relation(conn, source)
        self.source_rows = int(conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(rel.ident)).fetchone()[0])  # fmt: skip
        self.hierarchies = {c: Hierarchy.from_csv(h, hierarchy_file(h))
                            for c, h in HIERARCHIES.items()}  # fmt: skip
        # label -> leaf share, per QI and level (a label may recur at another level)
        self.cost: dict[str, list[dict[str, float]]] = {}
        for c, h in self.hierarchies.items():
            share = leaf_share(h)
            per = [dict[str, float]() for _ in range(h.height + 1)]
            for node, (label, level) in enumerate(zip(h.labels, h.levels, strict=True)):
                per[level][label] = float(share[node])
            self.cost[c] = per
        qi = catalog.require_columns(catalog.columns(conn, rel), rel, QI)
        attrs = metric_attributes(conn, rel.ident, qi, [True] * len(qi), self.hierarchies)
        assert attrs is not None  # no date QI
        self.attrs = attrs
        self.work = q.workload(attrs, source_points(conn, rel.ident, attrs, "salary"), "salary",
                               queries, seed)  # fmt: skip
        conn.rollback()

    def ncp(self, rel: sql.Composable, levels: dict[str, int]) -> tuple[float, float, int]:
        """(ncp_leaf over the source's rows, ncp_leaf over the released rows, released rows)."""
        rows = self.conn.execute(
            sql.SQL("SELECT {}, count(*) FROM {} GROUP BY {}").format(
                sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in QI),
                rel, sql.SQL(", ").join(sql.Literal(i + 1) for i in range(len(QI))),
            )
        ).fetchall()  # fmt: skip
        released = sum(int(r[-1]) for r in rows)
        total = 0.0
        for r in rows:
            cells = [0.0 if levels[c] == 0 else self.cost[c][levels[c]][r[j]]
                     for j, c in enumerate(QI)]  # fmt: skip
            total += int(r[-1]) * sum(cells) / len(QI)
        missing = self.source_rows - released
        return ((total + missing) / self.source_rows, total / released if released else 1.0,
                released)  # fmt: skip

    def query_error(self, rel: sql.Composable) -> tuple[float, float]:
        """Mean |estimate - actual| / actual over the shared workload, the estimate N/n · the
        sum of each released row's salary times its chance of meeting the query (the product
        over the predicates of the share of its cell that meets them, values read as uniform:
        dbanon.metrics.queries.share, the thesis's Pro_t)."""
        from dbanon.metrics import queries as q

        pub = q.Published("generalised", [rel], QI, "salary")
        release = q.load(self.conn, pub, self.attrs)
        self.conn.rollback()
        if release.n == 0:
            return 1.0, 1.0
        values = np.asarray([float(v) for v in release.values.tolist()], dtype=np.float64)
        scale = self.source_rows / release.n
        errors = []
        for query, actual in zip(self.work.queries, self.work.actual, strict=True):
            chance = np.ones(release.n)
            for p in query.predicates:
                chance *= q.share(p, self.attrs, release)
            errors.append(abs(scale * float(chance @ values) - actual) / actual)
        return float(np.mean(errors)), float(np.median(errors))

    def auc(self, rel: sql.Composable, seed: int) -> float:
        """rfka.auc on AUC_ROWS rows of the release drawn with `seed`, QIs one-hot."""
        from dbanon.experiments.rfka import auc

        rows = self.conn.execute(
            sql.SQL("SELECT {}, income FROM {}").format(
                sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in QI),
                rel)).fetchall()  # fmt: skip
        self.conn.rollback()
        rows.sort()  # the release's order is random: fix it before drawing
        y = np.array([r[-1] == ">50K" for r in rows], dtype=np.int64)
        if len(rows) < 10 or y.min() == y.max():
            return math.nan
        pick = np.random.default_rng(seed).permutation(len(rows))[:AUC_ROWS]
        cols = []
        for j in range(len(QI)):
            values = np.array([rows[i][j] for i in pick], dtype=object)
            cols += [(values == v).astype(np.float64) for v in sorted(set(values.tolist()))]
        x = np.column_stack(cols)
        return auc(x, y[pick], seed)


def _publish(
    conn: psycopg.Connection, source: str, name: str, method: str, k: int | None,
    options: dict[str, Any],
) -> tuple[sql.Identifier, dict[str, Any]]:  # fmt: skip
    """Publish one release afresh; its relation and the run's method metrics."""
    from dbanon.lifecycle.publish import publish
    from dbanon.lifecycle.releases import drop

    if conn.execute("SELECT 1 FROM dbanon.release WHERE name = %s", [name]).fetchone():
        drop(conn, name)
    spec = release_spec(name, source, "id", QI, sensitive=["salary"], keep=["income"],
                        method=method, k=k, options=options, hierarchies=HIERARCHIES,
                        target=f"{OUT}.{name}")  # fmt: skip
    result = publish(conn, spec, replace=True)
    return sql.Identifier(OUT, name), result.metrics


def run(
    db: Any,
    out_dir: str | Path,
    epsilons: Sequence[float] = EPSILONS,
    seeds: int = SEEDS,
    rows: int | None = None,
    queries: int = QUERIES,
    seed: int = 0,
    progress: Progress | None = None,
    keep: bool = False,
) -> dict[str, Any]:
    """Every setting; results.csv (means and intervals), runs.csv (each release's figures) and
    utility.png in `out_dir`. `keep` leaves the last release of each kind in place."""
    from dbanon.errors import DbanonError
    from dbanon.lifecycle.releases import drop
    from dbanon.models.dp import MAX_EPSILON, sdgs

    for e in epsilons:  # before anything is loaded
        if not 0 < e <= MAX_EPSILON:
            raise DbanonError(f"--epsilons must be above 0 and at most {MAX_EPSILON:g}, got {e:g}")
    say = progress or (lambda _msg: None)
    conn = db.conn
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    say("loading Adult")
    source, n = prepare(db, rows)
    m = Measure(conn, source, queries, seed)
    runs = [seed + i for i in range(seeds)]
    levels_text = ",".join(f"{c}={lv}" for c, lv in LEVELS.items())
    results: list[dict[str, Any]] = []
    every: list[dict[str, Any]] = []  # one row per release (and per AUC draw of k-anonymity)
    published: set[str] = set()

    def add(method: str, eps: float | None, k: int, per: list[dict[str, float]],
            extra: dict[str, Any]) -> None:  # fmt: skip
        row: dict[str, Any] = {"method": method, "epsilon": "" if eps is None else eps,
                               "delta": DELTA if eps is not None else "", "k": k, "rows": n,
                               "seeds": len(per)}  # fmt: skip
        for s, p in zip(runs, per, strict=True):
            every.append({"method": method, "epsilon": row["epsilon"], "k": k, "seed": s,
                          **{key: round(p[key], 6) for key in MEASURES},
                          "levels": p.get("levels", extra["levels"])})  # fmt: skip
        for key in MEASURES:
            mean, sd, half = spread([p[key] for p in per])
            row[key], row[f"{key}_sd"], row[f"{key}_ci95"] = (round(mean, 6), round(sd, 6),
                                                               round(half, 6))  # fmt: skip
        results.append({**row, **extra})

    say("original")
    src = sql.Identifier(SCHEMA, TABLE)
    err, med = m.query_error(src)
    base = {"ncp_leaf": 0.0, "ncp_leaf_released": 0.0, "query_error": err,
            "query_error_median": med, "released_share": 1.0}  # fmt: skip
    add("original", None, 1, [{**base, "auc": m.auc(src, s)} for s in runs],
        {"beta": "", "search_epsilon": "", "levels": "", "levels_varied": ""})
    for eps in epsilons:
        for variant in ("safepub_levels", "safepub_search"):
            per, chosen, ks, betas, search = [], [], [], [], []
            for s in runs:
                say(f"{variant}, ε={eps:g}, seed {s}")
                options: dict[str, Any] = {"epsilon": eps, "delta": DELTA, "seed": s}
                if variant == "safepub_levels":
                    options["levels"] = levels_text
                name = f"exp_dp_{variant.removeprefix('safepub_')}"
                rel, metrics = _publish(conn, source, name, "safepub", None, options)
                published.add(name)
                levels = metrics["levels"]
                ncp, ncp_rel, released = m.ncp(rel, levels)
                err, med = m.query_error(rel)
                per.append({"ncp_leaf": ncp, "ncp_leaf_released": ncp_rel, "query_error": err,
                            "query_error_median": med, "auc": m.auc(rel, s),
                            "released_share": released / n,
                            "levels": ",".join(f"{c}={levels[c]}" for c in QI)})  # fmt: skip
                chosen.append(per[-1]["levels"])
                ks.append(metrics["dp"]["k"])
                betas.append(metrics["dp"]["beta"])
                search.append(metrics["dp"]["search_epsilon"])
            add(variant, eps, ks[0], per,
                {"beta": round(betas[0], 6), "search_epsilon": round(search[0], 6),
                 # the commonest; ties by the first chosen (a set's order varies by run)
                 "levels": max(dict.fromkeys(chosen), key=chosen.count),
                 "levels_varied": len(set(chosen))})  # fmt: skip
    implied = {sdgs(e, DELTA).k: e for e in epsilons}
    for k in sorted({*implied, *KS}):
        say(f"k-anonymity, k={k}")
        rel, metrics = _publish(conn, source, "exp_dp_kanon", "fulldomain", k,
                                {"max_suppression": MAX_SUPPRESSION})  # fmt: skip
        published.add("exp_dp_kanon")
        levels = metrics["levels"]
        ncp, ncp_rel, released = m.ncp(rel, levels)
        err, med = m.query_error(rel)
        fixed = {"ncp_leaf": ncp, "ncp_leaf_released": ncp_rel, "query_error": err,
                 "query_error_median": med, "released_share": released / n}  # fmt: skip
        add("kanon_fulldomain", implied.get(k), k, [{**fixed, "auc": m.auc(rel, s)} for s in runs],
            {"beta": "", "search_epsilon": "", "levels": ",".join(f"{c}={levels[c]}" for c in QI),
             "levels_varied": 1})  # fmt: skip
    for name in published if not keep else ():
        drop(conn, name)
    conn.commit()
    for file, data in (("results.csv", results), ("runs.csv", every)):
        with open(out / file, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(data[0]))
            writer.writeheader()
            writer.writerows(data)
    plot(results, out / "utility.png")
    provenance.write(out, "dp", {"epsilons": list(epsilons), "seeds": seeds, "rows": n,
                                 "queries": queries, "seed": seed})  # fmt: skip
    return {"csv": str(out / "results.csv"), "runs": str(out / "runs.csv"),
            "plots": [str(out / "utility.png")], "results": results}  # fmt: skip


PLOTTED = (("ncp_leaf", "NCP, leaf counts (rows left out cost 1)", False),
           ("query_error_median", "query error, median (scaled estimate)", False),
           ("auc", "AUC (SVM, 5-fold CV)", True))  # fmt: skip


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Each measure against ε: both safepub variants with their intervals, k-anonymity at the
    k each ε implies, and k = 5, 10 and the source as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PLOTTED), figsize=(5.2 * len(PLOTTED), 4))
    for ax, (field, label, _) in zip(axes, PLOTTED, strict=True):
        for method, marker, title in (("safepub_levels", "o", "SafePub, fixed levels"),
                                      ("safepub_search", "s", "SafePub, private search"),
                                      ("kanon_fulldomain", "^", "k-anonymity at the implied k")):
            pts = sorted((float(r["epsilon"]), float(r[field]), float(r[f"{field}_ci95"]))
                         for r in results if r["method"] == method and r["epsilon"] != "")
            if pts:
                ax.errorbar([p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts],
                            marker=marker, capsize=3, label=title)  # fmt: skip
        for r in results:
            if r["method"] == "kanon_fulldomain" and r["epsilon"] == "":
                ax.axhline(float(r[field]), ls="--", lw=1, color="grey")
                ax.annotate(f"k={r['k']}", (ax.get_xlim()[0], float(r[field])), fontsize=8)
            if r["method"] == "original":
                ax.axhline(float(r[field]), ls=":", lw=1, color="black")
        ax.set_xscale("log")
        ax.set_xlabel("ε (δ = 1e-5)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
