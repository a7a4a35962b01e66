"""The RFKA paper's experiment (Huang & Zhu, figures 2-5): RFKA against Greedy_Hamdist.

Setting, as the paper states it:
- Adult: 2,000 rows drawn at random in the original class ratio (stratified) from the 30,162
  complete training rows; all 14 attributes are QIs, income (>50K positive) the label.
- Wisconsin breast cancer (original), benign positive; its attributes are QIs. The paper says
  8 discrete attributes (naming Clump Thickness, Bare Nuclei and Uniformity of Cell Size among
  them) and no missing values; the file has 9 (a..i) and 16 rows whose Bare Nuclei is `?`.
  `breast_cancer` is the paper's reading: the 683 complete rows and 8 attributes, Mitoses (i)
  left out (the paper does not name its eighth-and-dropped attribute; Mitoses is the one it
  cannot mean, as it names the others' kind and Mitoses is the least informative, 1 in 84 % of
  rows). `breast_cancer_all` keeps all 699 rows and 9 attributes, `?` one more one-hot value.
- Continuous attributes (Adult's age, fnlwgt, education-num, capital-gain, capital-loss,
  hours-per-week) in 5 equal-width bins, every attribute one-hot encoded, for both methods
  (`--features onehot --bins 5`).
- For each k the selected features' utility: AUC of an SVM (scikit-learn SVC, RBF kernel,
  defaults) under 5-fold stratified cross-validation (rows read from the release in a fixed
  order). Every seed that moves the result is drawn per run: RUN_SEEDS runs, each loading the
  source in a row order of its own (the forest reads the rows in that order), seeding the forest
  with its own seed, and averaging FOLD_SEEDS shufflings of the folds of its own. The run is the
  unit: each AUC is the mean over the runs with its 95 % interval, and RFKA against
  Greedy_Hamdist is judged on the paired differences per run (dbanon.experiments.stats), every
  run's figures in seeds.csv.
  k = 0 is no protection: every feature. Beside it, the AUC of a logistic regression
  (defaults) on the same folds: an RBF SVM with C=1 on a few binary features, where thousands
  of rows share a handful of points, ranks erratically (its AUC can fall below 0.5), and the
  cross-check tells a weak feature set from a weak classifier.
- Run time of each method: its ranking plus its search (`seconds_rank + seconds_search`), and
  the whole publish beside it. RFKA's forest does not depend on k: a run fits it once and its
  later publishes reuse it (dbanon.methods.rfka), each counting the one fit's seconds as its
  ranking time (`publish_seconds` is the publish as it ran). The paper's figures show k on the
  x axis without printing the values; we use k = 2, 5, 10, 15, 20, 25, 30, 40, 50.
Each release is a real `publish` of the source loaded into schema dbanon_exp (views in
dbanon_exp_out); the forest has the paper's 1000 trees.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.data import ADULT_COLUMNS, ADULT_NUMERIC, ADULT_TRAIN_ROWS, adult_rows
from dbanon.errors import DbanonError
from dbanon.experiments import provenance
from dbanon.experiments.stats import FAILS, HOLDS, at_least, spread
from dbanon.lifecycle.declare import release_spec

if TYPE_CHECKING:
    from dbanon.api import Database

KS = (0, 2, 5, 10, 15, 20, 25, 30, 40, 50)
RUN_SEEDS = 5  # row orders of the source, each with its own forest seed and fold shuffles
FOLD_SEEDS = 5
METHODS = ("rfka", "hamdist")
BINS = 5
TREES = 1000
ADULT_SAMPLE = 2000
# The project's shared data sets (../shared/datasets from the repository); `--datasets DIR`.
DATASETS = Path(__file__).resolve().parents[3] / "shared" / "datasets"
WISCONSIN = ("a", "b", "c", "d", "e", "f", "g", "h", "i")
WISCONSIN_PAPER = WISCONSIN[:8]  # Mitoses (i) left out: see the module's docstring
SCHEMA, OUT = "dbanon_exp", "dbanon_exp_out"
POSITIVE = {"adult": ">50K", "breast_cancer": "2", "breast_cancer_all": "2"}
Progress = Callable[[str], None]


def adult_sample(rows: int = ADULT_SAMPLE, seed: int = 0) -> list[list[str]]:
    """`rows` of Adult's training rows drawn at random, each class in its original share."""
    data = adult_rows(ADULT_TRAIN_ROWS)
    label = ADULT_COLUMNS.index("income")
    rng = np.random.default_rng(seed)
    pos = [i for i, r in enumerate(data) if r[label] == ">50K"]
    neg = [i for i, r in enumerate(data) if r[label] != ">50K"]
    take = round(rows * len(pos) / len(data))
    picked = np.concatenate(
        [rng.choice(pos, take, replace=False), rng.choice(neg, rows - take, replace=False)]
    )
    return [data[i] for i in sorted(picked.tolist())]


def wisconsin_rows(datasets_dir: Path | None = None) -> list[list[str]]:
    """The 699 rows: the 9 attributes as text ('?' kept), then the class."""
    path = (datasets_dir or DATASETS) / "breast_cancer" / "breast-cancer-wisconsin.data"
    if not path.is_file():
        raise DbanonError(f"no Wisconsin breast cancer data at {path}: pass --datasets DIR")
    with open(path, newline="") as f:
        reader = csv.reader(f)
        next(reader)
        return [row[1:] for row in reader]


def datasets(
    adult_rows_: int = ADULT_SAMPLE, seed: int = 0, datasets_dir: Path | None = None
) -> dict[str, dict[str, Any]]:
    """name -> table, columns, numeric columns, QIs, label and rows."""
    adult_qi = [c for c in ADULT_COLUMNS if c != "income"]
    wisconsin = wisconsin_rows(datasets_dir)
    complete = [r[:8] + r[9:] for r in wisconsin if "?" not in r]
    return {
        "adult": {
            "columns": list(ADULT_COLUMNS), "numeric": set(ADULT_NUMERIC), "qi": adult_qi,
            "label": "income", "rows": adult_sample(adult_rows_, seed),
        },
        "breast_cancer": {
            "columns": [*WISCONSIN_PAPER, "class"], "numeric": set(),
            "qi": list(WISCONSIN_PAPER), "label": "class", "rows": complete,
        },
        "breast_cancer_all": {
            "columns": [*WISCONSIN, "class"], "numeric": set(), "qi": list(WISCONSIN),
            "label": "class", "rows": wisconsin,
        },
    }  # fmt: skip


def aucs(x: np.ndarray, y: np.ndarray, seeds: Sequence[int], model: str = "svm") -> list[float]:
    """`auc` for each fold seed."""
    return [auc(x, y, s, model) for s in seeds]


def auc(x: np.ndarray, y: np.ndarray, seed: int = 0, model: str = "svm") -> float:
    """Mean ROC AUC under 5-fold stratified cross-validation of SVC (RBF, defaults: the
    paper's) or, as a cross-check, logistic regression (defaults); rows in a fixed order first
    (a release's rows come in random order)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.svm import SVC

    order = np.lexsort(np.column_stack([x, y]).T[::-1])
    folds = StratifiedKFold(5, shuffle=True, random_state=seed)
    estimator = SVC() if model == "svm" else LogisticRegression()
    return float(cross_val_score(estimator, x[order], y[order], cv=folds, scoring="roc_auc").mean())


def _matrix(conn: psycopg.Connection, rel: sql.Composable, features: Sequence[str], label: str,
            positive: str) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    rows = conn.execute(
        sql.SQL("SELECT {}, {}::text FROM {}").format(
            sql.SQL(", ").join(sql.SQL("{}::int").format(sql.Identifier(f)) for f in features),
            sql.Identifier(label),
            rel,
        )
    ).fetchall()
    x = np.array([r[:-1] for r in rows], dtype=np.float64).reshape(len(rows), len(features))
    return x, np.array([r[-1] == positive for r in rows], dtype=np.int64)


def run(
    db: Database,
    out_dir: str | Path,
    ks: Sequence[int] = KS,
    trees: int = TREES,
    adult_rows_: int = ADULT_SAMPLE,
    seed: int = 0,
    progress: Progress | None = None,
    datasets_dir: Path | None = None,
    fold_seeds: int = FOLD_SEEDS,
    run_seeds: int = RUN_SEEDS,
) -> dict[str, Any]:
    """Both methods on every data set for every k and run seed; results.csv (means with their
    spread over the run seeds), seeds.csv (every run: the paired figures), auc.png, time.png."""
    say = progress or (lambda _msg: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for name, d in datasets(adult_rows_, seed, datasets_dir).items():
        for r in range(seed, seed + run_seeds):
            runs += _one_order(db, name, d, ks, trees, r, fold_seeds, say)
    results = _summary(runs)
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0]))
        writer.writeheader()
        writer.writerows(results)
    with open(out / "seeds.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(runs[0]))
        writer.writeheader()
        writer.writerows(runs)
    settings = {"ks": list(ks), "trees": trees, "adult_rows": adult_rows_, "seed": seed,
                "run_seeds": run_seeds, "fold_seeds": fold_seeds}  # fmt: skip
    provenance.write(out, "rfka", settings, note=_note(ks, run_seeds))
    _plot(results, "auc", "AUC (SVM, 5-fold CV)", out / "auc.png")
    _plot([r for r in results if r["k"]], "seconds", "run time (s)", out / "time.png")
    per_seed: dict[tuple[str, str, int], list[float]] = {}
    for row in runs:
        per_seed.setdefault((row["dataset"], row["method"], row["k"]), []).append(row["auc"])
    return {
        "csv": str(out / "results.csv"),
        "files": [str(out / "seeds.csv"), str(out / provenance.FILE)],
        "plots": [str(out / "auc.png"), str(out / "time.png")],
        "findings": findings(results, per_seed),
        "results": results,
    }


def _note(ks: Sequence[int], run_seeds: int) -> str:
    """What a smaller run than the default leaves out (empty for the default)."""
    fewer = [f"k = {', '.join(map(str, ks))} (default {', '.join(map(str, KS))})"
             if tuple(ks) != KS else "",
             f"{run_seeds} run seeds (default {RUN_SEEDS})" if run_seeds < RUN_SEEDS else ""]
    fewer = [x for x in fewer if x]
    return f"smaller than the default setting: {'; '.join(fewer)}" if fewer else ""


def _one_order(db: Database, name: str, d: dict[str, Any], ks: Sequence[int], trees: int,
               r: int, fold_seeds: int, say: Progress) -> list[dict[str, Any]]:  # fmt: skip
    """Every k and method on the data set loaded in the row order of run seed `r`, the forest
    seeded with `r`, the folds shuffled by `fold_seeds` seeds of their own: one paired run."""
    from dbanon.demo import load_table
    from dbanon.lifecycle.publish import publish
    from dbanon.lifecycle.releases import drop
    from dbanon.lifecycle.resolve import resolve
    from dbanon.methods.projection import onehot_features

    conn = db.conn
    say(f"loading {name}, row order {r}")
    order = np.random.default_rng([r, 1]).permutation(len(d["rows"]))
    load_table(db, SCHEMA, name, d["columns"], d["numeric"], [d["rows"][i] for i in order])
    source = f"{SCHEMA}.{name}"
    folds = [r * 1000 + j for j in range(fold_seeds)]
    out: list[dict[str, Any]] = []
    for k in ks:
        for method in METHODS:
            options: dict[str, Any] = {"bins": BINS}
            if method == "rfka":
                options |= {"features": "onehot", "trees": trees, "seed": r}
            spec = release_spec(
                f"exp_{method}_{name}", source, "id", d["qi"], sensitive=[d["label"]],
                method=method, k=max(k, 2), options=options, target=f"{OUT}.{method}_{name}",
            )  # fmt: skip
            timed: dict[str, Any] = {"seconds": None, "seconds_rank": None,
                                     "seconds_search": None, "publish_seconds": None}
            if k == 0:  # no protection: every feature, nothing published, nothing timed
                rel_ = resolve(conn, spec, replace=True)
                every = onehot_features(conn, rel_.source.ident, rel_, BINS)
                features = [f.name for f in every]
                rel = sql.SQL("(SELECT {}, {} FROM {}) dbanon_all").format(
                    sql.SQL(", ").join(
                        sql.SQL("{} AS {}").format(f.expr, sql.Identifier(f.name)) for f in every
                    ),
                    sql.Identifier(d["label"]),
                    rel_.source.ident,
                )
            else:
                say(f"{name}: {method}, k={k}, run seed {r}")
                result = publish(conn, spec, replace=True)
                features = result.metrics["chosen_features"]
                rel = sql.Identifier(OUT, f"{method}_{name}")
                m = result.metrics
                # the ranking's own time: a forest reused from this run's earlier k counts the
                # seconds its one fit took (it does not depend on k)
                rank = m.get("seconds_forest", m["seconds_rank"])
                timed = {"seconds": round(rank + m["seconds_search"], 4), "seconds_rank": rank,
                         "seconds_search": m["seconds_search"],
                         "publish_seconds": result.seconds}  # fmt: skip
            x, y = _matrix(conn, rel, features, d["label"], POSITIVE[name])
            conn.rollback()
            out.append({
                "dataset": name, "method": method, "k": k, "seed": r, "rows": len(y),
                "features": len(features), "fold_seeds": fold_seeds,
                "auc": round(float(np.mean(aucs(x, y, folds))), 6),
                "auc_logreg": round(float(np.mean(aucs(x, y, folds, "logreg"))), 6),
                **timed, "chosen": " | ".join(features) if k else "(all)",
            })  # fmt: skip
    for method in METHODS:
        if any(k for k in ks):
            drop(conn, f"exp_{method}_{name}")
    return out


def _summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per data set, method and k: each figure's mean over the run seeds, the AUC's
    spread over them, and the feature set most runs chose (with how many sets they chose)."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for row in runs:
        groups.setdefault((row["dataset"], row["method"], row["k"]), []).append(row)
    results = []
    for (name, method, k), rs in groups.items():
        mean, sd, half = spread([row["auc"] for row in rs])
        chosen = Counter(row["chosen"] for row in rs)

        def avg(col: str, rs: list[dict[str, Any]] = rs) -> float | None:
            vals = [row[col] for row in rs if row[col] is not None]
            return round(float(np.mean(vals)), 4) if vals else None

        results.append({
            "dataset": name, "method": method, "k": k, "rows": rs[0]["rows"],
            "features": avg("features"), "auc": round(mean, 4), "auc_sd": round(sd, 4),
            "auc_ci95": round(half, 4), "run_seeds": len(rs), "fold_seeds": rs[0]["fold_seeds"],
            "auc_logreg": avg("auc_logreg"), "seconds": avg("seconds"),
            "seconds_rank": avg("seconds_rank"), "seconds_search": avg("seconds_search"),
            "publish_seconds": avg("publish_seconds"), "feature_sets": len(chosen),
            "chosen": chosen.most_common(1)[0][0],
        })  # fmt: skip
    return results


def findings(
    results: list[dict[str, Any]], per_seed: dict[tuple[str, str, int], list[float]]
) -> dict[str, Any]:
    """Per data set: the paper's claim "RFKA's AUC >= Greedy_Hamdist's" judged at each k on the
    paired fold seeds (holds / fails / undecided), and where RFKA is faster."""
    out: dict[str, Any] = {}
    for name in dict.fromkeys(r["dataset"] for r in results):
        by = {(r["method"], r["k"]): r for r in results if r["dataset"] == name}
        ks = sorted({k for _, k in by})
        judged = {k: at_least(per_seed[name, "rfka", k], per_seed[name, "hamdist", k])
                  for k in ks}  # fmt: skip
        timed = [k for k in ks if k]
        faster = [k for k in timed if by["rfka", k]["seconds"] < by["hamdist", k]["seconds"]]
        out[name] = {
            "rfka_auc_at_least_hamdist_for_every_k": all(
                j["verdict"] == HOLDS for k, j in judged.items() if k
            ),
            "rfka_auc_at_least_hamdist": judged,
            "rfka_auc_at_least_hamdist_fails_for_k": [
                k for k, j in judged.items() if j["verdict"] == FAILS
            ],
            "rfka_faster_for_every_k": len(faster) == len(timed),
            "rfka_faster_for_k": faster,
        }
    return out


def _plot(results: list[dict[str, Any]], field: str, label: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["dataset"] for r in results))
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        for method, marker, title in (("rfka", "o", "RFKA"), ("hamdist", "s", "Greedy_Hamdist")):
            pts = [(r["k"], r[field]) for r in results
                   if r["dataset"] == name and r["method"] == method]  # fmt: skip
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=title)
        ax.set_xlabel("k (0: no protection)" if field == "auc" else "k")
        ax.set_ylabel(label)
        if field == "seconds":  # the two methods' times are orders of magnitude apart
            ax.set_yscale("log")
        ax.set_title(f"{name}: {label} vs k")
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
