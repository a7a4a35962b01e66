"""The papers' experiments as `dbanon experiment NAME` commands: each one's options, the call
into its module and the tables a person reads (dbanon.bench.runners builds the commands)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from dbanon.bench.runners import Param, Report, Runner, Session, Table, experiment, wrote


def _out(name: str) -> Param:
    return Param("out_dir", "path", f"results/{name}", "Folder for the CSV and plots.",
                 flag="--out")  # fmt: skip


SEED = Param("seed", "int", 0, "The first seed.")


def _findings(data: dict[str, Any], key: str) -> list[str]:
    """An experiment's verdicts, one line per data set (or one line), then the files."""
    found = data[key]
    if isinstance(found, dict) and all(isinstance(v, dict) for v in found.values()):
        lines = [f"{name}: {json.dumps(v)}" for name, v in found.items()]
    else:
        lines = [json.dumps(found)]
    return [*lines, wrote(data)]


# --- k-member (Byun et al.) ------------------------------------------------------------------


def _kmember(s: Session, out_dir: str, rows: int) -> dict[str, Any]:
    from dbanon.experiments.kmember import run

    return run(out_dir, rows=rows, progress=s.say)


def _kmember_report(data: dict[str, Any]) -> Report:
    t = Table(["algorithm", "k", "total_il_height", "ncp_height", "ncp_leaf", "classes",
               "seconds"])  # fmt: skip
    t.rows = [[r["algorithm"], str(r["k"]), f"{r['total_il_height']:.0f}",
               f"{r['ncp_height']:.2%}", f"{r['ncp_leaf']:.2%}", str(r["classes"]),
               f"{r['seconds']:.3f}"] for r in data["results"]]  # fmt: skip
    return [t, f"k-member loss lower for every k: {data['kmember_loss_lower_for_every_k']}; "
               f"k-member slower for every k: {data['kmember_slower_for_every_k']}", wrote(data)]


experiment(Runner(
    "kmember", "Greedy k-member vs median partitioning on Adult, k = 2..100 (the paper's figs 3, "
    "4).", (_out("kmember"), Param("rows", "int", 45222, low=100, high=45222)),
    _kmember, _kmember_report,
))  # fmt: skip


def _kmember_scale(s: Session, out_dir: str, rows: list[int], blocks: list[int],
                   partitioned_only: list[int]) -> dict[str, Any]:  # fmt: skip
    from dbanon.experiments.kmember import run_scale

    return run_scale(out_dir, rows, blocks, partitioned_only, progress=s.say)


def _kmember_scale_report(data: dict[str, Any]) -> Report:
    t = Table(["rows", "mode", "block", "seconds", "ncp_height", "ncp_leaf", "blocks"])
    t.rows = [[f"{r['rows']:,}", r["mode"], str(r["block_size"]), f"{r['seconds']:.2f}",
               f"{r['ncp_height']:.2%}", f"{r['ncp_leaf']:.2%}", str(r["blocks"])]
              for r in data["results"]]  # fmt: skip
    return [t, wrote(data)]


experiment(Runner(
    "kmember-scale", "Partitioned k-member vs the exact rule on census-like mostly distinct rows.",
    (_out("kmember-scale"),
     Param("rows", "ints", "100000,300000", "Table sizes where the exact rule runs too.", low=1),
     Param("blocks", "ints", "4000,8000,16000,32000", "Block sizes compared with the exact rule.",
           low=1),
     Param("partitioned_only", "ints", "", "Larger sizes run in the partitioned mode alone "
           "(e.g. 1000000).", low=1)),
    _kmember_scale, _kmember_scale_report,
))  # fmt: skip


# --- the claims of every paper -----------------------------------------------------------------


def _claims(s: Session, docs_dir: str) -> dict[str, Any]:
    from dbanon.experiments.claims import write

    return {"written": str(write(docs_dir))}


experiment(Runner(
    "claims", "Judge every paper's claims from the committed CSVs: writes DOCS/claims.md.",
    (Param("docs_dir", "path", "docs", "Folder of the experiments' committed CSVs.",
           flag="--docs"),),
    _claims, lambda data: [f"wrote {data['written']}"],
))  # fmt: skip


# --- INA (Wang, Zheng & Liao) --------------------------------------------------------------------


def _ina(s: Session, out_dir: str, points: int, copies: int, small: bool, bound: str,
         seed: int) -> dict[str, Any]:  # fmt: skip
    from dbanon.experiments.ina import KS, SAMPLES, run

    ks, samples = ((2, 3), (50, 200)) if small else (KS, SAMPLES)
    return run(out_dir, ks, samples, points, copies, bound, seed, s.say)


def _ina_report(data: dict[str, Any]) -> Report:
    from dbanon.experiments.ina import TABLES

    ks = sorted({r["k"] for r in data["results"]})
    samples = sorted({r["sample"] for r in data["results"]})
    by = {(r["k"], r["sample"]): r for r in data["results"]}
    out: Report = []
    for name, title in TABLES:
        t = Table(["sample", *(f"k={k} ours | paper" for k in ks)], title=title)
        for s in samples:
            cells = []
            for k in ks:
                r = by[k, s]
                paper = "-" if r[f"paper_{name}"] is None else f"{r[f'paper_{name}']:.2f}"
                extra = f" (uniform {r[f'uniform_{name}']:.2f})" if name != "msec" else ""
                cells.append(f"{r[name]:.2f}±{r[f'{name}_ci95']:.2f} | {paper}{extra}")
            t.rows.append([str(s), *cells])
        out.append(t)
    refs = Table(["sample", *(f"k={k}" for k in ks)],
                 title="reference points (mean over the copies)")  # fmt: skip
    refs.rows = [[str(s), *(f"{by[k, s]['refs']:.1f}" for k in ks)] for s in samples]
    base = Table(["k", "k-means", "Chameleon"],
                 title="uniform noise at 2 % security: misclassification (%)")  # fmt: skip
    base.rows = [[str(b["k"]), f"{b['kmeans']:.2f}", f"{b['chameleon']:.2f}"]
                 for b in data["baseline_2pct"]]  # fmt: skip
    return [*out, refs, base, f"trends: {json.dumps(data['trends'])}", wrote(data)]


experiment(Runner(
    "ina", "INA on synthetic 2-D clusters, k = 2..6, samples 50..1000 (the paper's tables 1-3), "
    "beside the paper's numbers and uniform noise at the same security.",
    (_out("ina"), Param("points", "int", 10_000, low=100), Param("copies", "int", 10, low=1),
     Param("small", "flag", False, "A quick setting: k = 2, 3; samples 50, 200."),
     Param("bound", "choice", "paper", "The paper's noise (d per attribute) or the strict one "
           "(d / sqrt(m)).", choices=("paper", "strict")), SEED),
    _ina, _ina_report,
))  # fmt: skip


# --- cross-bucket generalisation (thesis ch. 3) ------------------------------------------------


def _cbg(s: Session, out_dir: str, rows: int, ls: list[int] | None, fixed: list[int] | None,
         ks: list[int] | None, queries: int, seed: int,
         salaries: str) -> dict[str, Any]:  # fmt: skip
    from dbanon.data.salary import PROFILES
    from dbanon.experiments.cbg import KS, L_FIXED, LS, run

    profiles = [p.strip() for p in salaries.split(",") if p.strip()]
    bad = [p for p in profiles if p not in PROFILES]
    if bad or not profiles:
        raise click.BadParameter(f"unknown salary profile {bad[0] if bad else salaries!r}; "
                                 f"expected some of {', '.join(PROFILES)}")  # fmt: skip
    return run(s.db.conn, out_dir, rows, ls or LS, fixed or L_FIXED, ks or KS, queries, seed,
               s.say, profiles)  # fmt: skip


def _cbg_report(data: dict[str, Any]) -> Report:
    t = Table(["salary", "part", "method", "k", "l", "exposure", "DM", "query error", "seconds"])
    t.rows = [[r["salary"], r["part"], r["method"], str(r["k"]), str(r["l"]),
               f"{r['exposure']:.4f}",
               f"{r['dm']:,}", f"{r['query_error']:.3f}", f"{r['publish_seconds']:.1f}"]
              for r in data["results"]]  # fmt: skip
    return [t, *_findings(data, "findings")]


experiment(Runner(
    "cbg", "CBG vs Mondrian-l vs Anatomy on Adult with a salary: exposure, DM and query error "
    "against l (k=3), then CBG against k for l in 5,10,15,20 (the thesis's Figs 3.6-3.11).",
    (_out("cbg"), Param("rows", "int", 22517, low=100, high=45222),
     Param("ls", "ints", None, "l of Figs 3.6-3.8 (default 2,4,...,20).", low=2),
     Param("fixed", "ints", None, "l of Figs 3.9-3.11 (default 5,10,15,20).", low=2),
     Param("ks", "ints", None, "k of Figs 3.9-3.11 (default 2,3,4,5,6,8,10).", low=2),
     Param("queries", "int", 1000, low=1), Param("seed", "int", 2018),
     Param("salaries", "str", "flat", "Salary profiles, comma-separated: flat (steps of 500) "
           "and/or heaped (rounded to 2,000s, as census wages are).")),
    _cbg, _cbg_report,
))  # fmt: skip


# --- (θ,k)-anonymity -----------------------------------------------------------------------------


def _thetak(s: Session, out_dir: str, rows: int | None, ks: list[int] | None, seed: int,
            seeds: int) -> dict[str, Any]:  # fmt: skip
    from dbanon.experiments.thetak import KS, run

    return run(out_dir, ks=ks or KS, rows=rows, seed=seed, progress=s.say, seeds=seeds)


def _thetak_report(data: dict[str, Any]) -> Report:
    t = Table(["dataset", "algorithm", "k", "background", "similarity", "majority", "NCP %",
               "NCP leaf %", "seconds", "classes", "class bound", "leftovers",
               "failing the paper's", "(θ,k) holds"])  # fmt: skip
    t.rows = [[r["dataset"], r["algorithm"], str(r["k"]), f"{r['background_vulnerability']:.3f}",
               f"{r['similarity_vulnerability']:.3f}",
               f"{r['majority_category_vulnerability']:.3f}", f"{r['gcp']:.2f}",
               f"{r['ncp_leaf']:.2f}", f"{r['seconds']:.3f}", str(r["classes"]),
               str(r["class_bound"]), str(r["leftover_rows"]), str(r["paper_failing_classes"]),
               str(r["theta_k_holds"])] for r in data["results"]]  # fmt: skip
    return [t, *_findings(data, "claims")]


experiment(Runner(
    "thetak", "(θ,k) vs k-anonymity vs (p,k) on the hospital table and Adult (the paper's "
    "figs 2-5).",
    (_out("thetak"),
     Param("rows", "int", None, "Rows of each table (default: 30,000 hospital rows, Adult's "
           "30,162 training rows).", low=100, high=45222),
     Param("ks", "ints", None, "Values of k, a,b,c (default 6,9,...,30).", low=3), SEED,
     Param("seeds", "int", 5, "Seeds per setting: each figure is a mean with its 95 % "
           "interval.", low=1, high=100)),
    _thetak, _thetak_report,
))  # fmt: skip


# --- RFKA (Huang & Zhu) --------------------------------------------------------------------------


def _rfka(s: Session, out_dir: str, ks: list[int] | None, trees: int, rows: int, seed: int,
          datasets_dir: str | None, fold_seeds: int, run_seeds: int) -> dict[str, Any]:  # fmt: skip
    from dbanon.experiments.rfka import KS, run

    return run(s.db, out_dir, ks or KS, trees, rows, seed, s.say,
               Path(datasets_dir) if datasets_dir else None, fold_seeds, run_seeds)  # fmt: skip


def _rfka_report(data: dict[str, Any]) -> Report:
    t = Table(["dataset", "method", "k", "features", "SVM AUC", "logistic AUC", "seconds",
               "publish s"])  # fmt: skip
    t.rows = [[r["dataset"], r["method"], str(r["k"]), f"{r['features']:g}",
               f"{r['auc']:.4f}±{r['auc_ci95']:.4f}", f"{r['auc_logreg']:.4f}",
               "-" if r["seconds"] is None else f"{r['seconds']:.3f}",
               "-" if r["publish_seconds"] is None else f"{r['publish_seconds']:.2f}"]
              for r in data["results"]]  # fmt: skip
    return [t, *_findings(data, "findings")]


experiment(Runner(
    "rfka", "RFKA vs Greedy_Hamdist on Adult (2,000 rows) and Wisconsin breast cancer: SVM AUC "
    "and run time vs k (the paper's figs 2-5).",
    (_out("rfka"),
     Param("ks", "ints", None, "Values of k, a,b,c (default 0,2,5,10,...,50).", low=2, also=(0,)),
     Param("trees", "int", 1000, low=1),
     Param("rows", "int", 2000, "Rows of the stratified Adult sample.", low=100, high=30162),
     Param("seed", "int", 0),
     Param("datasets_dir", "path", None, "The shared data sets folder, holding breast_cancer/ "
           "(default: the project's).", flag="--datasets"),
     Param("fold_seeds", "int", 5, "Shufflings of the 5 folds averaged in each run.", low=1,
           high=100),
     Param("run_seeds", "int", 5, "Runs, each with its own row order, forest seed and fold "
           "shuffles: each AUC is a mean over them with its 95 % interval.", low=1, high=100)),
    _rfka, _rfka_report,
))  # fmt: skip


# --- personalised privacy (thesis ch. 4 and 5) -------------------------------------------------

GRID = (
    Param("ls", "numbers", None, "Values of l (default 5,8,...,20).", low=2),
    Param("densities", "numbers", None, "Shares flagged (default .1,.2,.3,.4).", low=0),
    Param("n_queries", "int", 1000, low=1, flag="--queries"),
    SEED,
)


def _localanatomy(s: Session, out_dir: str, rows: int, ls: list | None, densities: list | None,
                  n_queries: int, seed: int) -> dict[str, Any]:  # fmt: skip
    from dbanon.experiments.localanatomy import DENSITIES, LS, run

    return run(s.db.conn, out_dir, ls=[int(x) for x in ls or LS],
               densities=densities or DENSITIES, rows=rows, n_queries=n_queries, seed=seed,
               progress=s.say)  # fmt: skip


def _localanatomy_report(data: dict[str, Any]) -> Report:
    t = Table(["series", "density", "l", "exposure semi", "exposure salary"])
    t.rows = [[r["series"], f"{r['density']:.0%}", str(r["l"]),
               "infeasible" if r["semi_sensitive"] is None else f"{r['semi_sensitive']:.4f}",
               f"{r['sensitive']:.4f}"] for r in data["exposure"]]  # fmt: skip
    q = Table(["series", "density", "l", "query error"])
    q.rows = [[r["series"], f"{r['density']:.0%}", str(r["l"]), f"{r['query_error']:.4f}"]
              for r in [*data["query_error"], *data["tcloseness"]]]  # fmt: skip
    return [t, q, *_findings(data, "findings")]


experiment(Runner(
    "localanatomy", "Local anatomy vs Anatomy and Mondrian: exposure and query error vs l, "
    "density, the t-closeness extension (the thesis's ch. 4, Figs 4.3-4.8, 4.10).",
    (_out("localanatomy"), Param("rows", "int", 17629, low=200, high=45222), *GRID),
    _localanatomy, _localanatomy_report,
))  # fmt: skip


def _lag(s: Session, out_dir: str, rows: int, ks_: list | None, ls: list | None,
         densities: list | None, n_queries: int, seed: int) -> dict[str, Any]:  # fmt: skip
    from dbanon.experiments.lag import DENSITIES, KS, LS, run

    return run(out_dir, ks=[int(x) for x in ks_ or KS], ls=[int(x) for x in ls or LS],
               densities=densities or DENSITIES, rows=rows, n_queries=n_queries, seed=seed,
               progress=s.say)  # fmt: skip


def _lag_report(data: dict[str, Any]) -> Report:
    t = Table(["variant", "density", "k", "l", "DM", "NCP", "query error"])
    t.rows = [[r["variant"], f"{r['density']:.0%}", str(r["k"]), str(r["l"]), f"{r['dm']:,}",
               f"{r['ncp']:.4f}", f"{r['query_error']:.3f}"] for r in data["results"]]  # fmt: skip
    return [t, *_findings(data, "findings")]


experiment(Runner(
    "lag", "LAG_1 vs LAG_2: DM, NCP and query error over k, l and density (the thesis's ch. 5, "
    "Figs 5.4-5.27).",
    (_out("lag"), Param("rows", "int", 31055, low=200, high=45222),
     Param("ks_", "numbers", None, "Values of k (default 5,8,10).", low=2, flag="--ks"), *GRID),
    _lag, _lag_report,
))  # fmt: skip


# --- SafePub: (ε,δ)-differential privacy against k-anonymity (issue 36) -------------------------


def _dp(s: Session, out_dir: str, epsilons: list | None, seeds: int, rows: int | None,
        n_queries: int, seed: int, keep: bool) -> dict[str, Any]:  # fmt: skip
    from dbanon.experiments.dp import EPSILONS, run

    return run(s.db, out_dir, [float(e) for e in epsilons or EPSILONS], seeds, rows, n_queries,
               seed, s.say, keep)  # fmt: skip


def _dp_report(data: dict[str, Any]) -> Report:
    t = Table(["method", "ε", "k", "NCP leaf", "NCP leaf (released)", "query error (median)", "AUC",
               "released", "levels"])  # fmt: skip
    t.rows = [[r["method"], str(r["epsilon"]), str(r["k"]),
               f"{r['ncp_leaf']:.3f}±{r['ncp_leaf_ci95']:.3f}",
               f"{r['ncp_leaf_released']:.3f}±{r['ncp_leaf_released_ci95']:.3f}",
               f"{r['query_error_median']:.3f}±{r['query_error_median_ci95']:.3f}",
               f"{r['auc']:.3f}±{r['auc_ci95']:.3f}", f"{r['released_share']:.1%}", r["levels"]]
              for r in data["results"]]  # fmt: skip
    return [t, wrote(data)]


experiment(Runner(
    "dp", "SafePub ((ε,δ)-DP by sampling; fixed levels and the private search) vs k-anonymity "
    "(full-domain) on Adult: NCP (leaf counts), query error and SVM AUC for ε = 0.1, 0.5, 1, 2.",
    (_out("dp"),
     Param("epsilons", "numbers", None, "Values of ε (default 0.1,0.5,1,2); δ = 1e-5.", low=0),
     Param("seeds", "int", 5, "Seeds per setting: each figure is a mean with its 95 % interval.",
           low=1, high=100),
     Param("rows", "int", None, "Rows of Adult, a seeded sample (default: all 45,222).",
           low=200, high=45222),
     Param("n_queries", "int", 1000, low=1, flag="--queries"), SEED,
     Param("keep", "flag", False, "Leave the last release of each kind in schema "
           "dbanon_exp_out (they are dropped otherwise).")),
    _dp, _dp_report,
))  # fmt: skip
