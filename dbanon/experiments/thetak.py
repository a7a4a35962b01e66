"""The (θ,k) paper's experiment (Cheng, Liu et al. 2019, figures 2-5).

The paper compares (θ,k)-anonymity with k-anonymity and (p,k)-anonymity, p = θ = 3, for k from
6 to 30 on 30,000 private hospital records (QI age, years of illness, gender, home address,
allergy history, marital status; disease sensitive), measuring the vulnerability to the
background-knowledge attack (fig. 2) and to the similarity attack (fig. 3), run time (fig. 4)
and information loss (fig. 5) against k. Substitutes, as the data is private:
- hospital: dbanon's generated table (dbanon.data.hospital), 30,000 rows, the same QIs, disease
  categories from the shipped two-level hierarchy;
- adult: UCI Adult's 30,162 training rows, QI age, education-num, workclass, marital-status,
  race, sex, native-country, occupation sensitive, categories from ARX's occupation hierarchy
  (Technical / Nontechnical / Other).
Algorithms, all in memory (the time is the algorithm's alone): `thetak` (θ=3, the default:
the loss-greedy construction under the paper's class condition) with dbanon's leftover rule
(`--leftovers category`), `thetak_relaxed` the same under the relaxed condition
(`--theta-rule relaxed`), `thetak_nearest` the default with the paper's own leftover rule (a
leftover joins the class of least information-loss growth), `thetak_paper` the paper's
construction and leftover rule as written (`--construction paper --leftovers nearest`),
`kmember` (greedy k-member: k-anonymity) and `kmember --p 3` ((p,k)-anonymity). Each row also
counts the classes that fail the paper's condition (min(⌊k/θ⌋, V_c) values of θ categories) and
the most classes any grouping meeting it can have (`class_bound`), the measured reason why most
of Adult is left over at large k. Every setting runs over SEEDS seeds; each figure is the mean
with its 95 % interval (results.csv), and each claim is judged on the paired differences per
seed (holds / fails / undecided, dbanon.experiments.stats) from every run's figures (seeds.csv).
Vulnerabilities are dbanon.metrics.vulnerability's (equal to its SQL form), both readings of the
similarity attack: `similarity_vulnerability` (the mean share of a row's class in its category)
and `majority_category_vulnerability` (the share of rows in classes whose commonest category
holds at least half). Information loss is NCP (GCP)
by height cost (`gcp`, the paper's) and by leaf counts (`ncp_leaf`).
"""

from __future__ import annotations

import csv
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dbanon.algorithms.base import QIArrays
from dbanon.bench.methods import adult_arrays, hospital_arrays
from dbanon.core.hierarchy import Hierarchy
from dbanon.data import ADULT_COLUMNS, ADULT_TRAIN_ROWS, adult_rows, hierarchy_file
from dbanon.data.hospital import HOSPITAL_ROWS
from dbanon.experiments import provenance
from dbanon.experiments.stats import HOLDS, at_least, spread
from dbanon.metrics.loss import loss_report
from dbanon.metrics.vulnerability import vulnerability_in_memory
from dbanon.models.thetak import ThetaKAnonymity

KS = (6, 9, 12, 15, 18, 21, 24, 27, 30)
THETA = 3
P = 3
SEEDS = 5
DATASETS = ("hospital", "adult")
ALGORITHMS = ("thetak", "thetak_relaxed", "thetak_nearest", "thetak_paper", "kmember", "pk")
# (θ,k)'s variants: (construction, leftover rule, class condition)
RULES = {"thetak": ("greedy", "category", "paper"),
         "thetak_relaxed": ("greedy", "category", "relaxed"),
         "thetak_nearest": ("greedy", "nearest", "paper"),
         "thetak_paper": ("paper", "nearest", "paper")}  # fmt: skip
BASELINES = ("kmember", "pk")
LABELS = {"thetak": "(θ,k) θ=3, default (paper's condition, greedy, category leftovers)",
          "thetak_relaxed": "(θ,k) θ=3, relaxed condition (greedy, category leftovers)",
          "thetak_nearest": "(θ,k) θ=3, paper's condition, greedy, nearest leftovers",
          "thetak_paper": "(θ,k) θ=3, the paper's construction and leftovers",
          "kmember": "k-anonymity (k-member)", "pk": "(p,k) p=3"}  # fmt: skip
MEASURES = ("background_vulnerability", "similarity_vulnerability",
            "majority_category_vulnerability", "gcp", "ncp_leaf", "seconds")  # fmt: skip
ADULT_NUMERIC = ["age", "education_num"]
ADULT_CATEGORICAL = ["workclass", "marital_status", "race", "sex", "native_country"]
PLOTS = {
    "background_vulnerability": ("background-knowledge vulnerability", "background.png"),
    "similarity_vulnerability": ("similarity vulnerability", "similarity.png"),
    "majority_category_vulnerability": ("majority-category vulnerability", "majority.png"),
    "seconds": ("run time (s)", "time.png"),
    "gcp": ("information loss (NCP, %)", "loss.png"),
}

Data = tuple[QIArrays, np.ndarray, np.ndarray]  # QIs, category and value of each row


def adult_data(rows: int) -> Data:
    qi = adult_arrays(rows, ADULT_NUMERIC, ADULT_CATEGORICAL)
    h = Hierarchy.from_csv("occupation", hierarchy_file("occupation"))
    occupation = np.array([r[ADULT_COLUMNS.index("occupation")] for r in adult_rows(rows)])
    category = np.array([h.generalize(v, h.height - 1) for v in occupation.tolist()])
    return qi, category, occupation


def _run(name: str, data: Data, k: int, seed: int) -> tuple[np.ndarray, int | None]:
    from dbanon.algorithms.kmember import kmember
    from dbanon.algorithms.thetak import thetak_detail

    qi, category, value = data
    if name in RULES:
        construction, leftovers, rule = RULES[name]
        return thetak_detail(qi, category, value, k, THETA, seed=seed, leftovers=leftovers,
                             construction=construction, rule=rule)  # fmt: skip
    codes = np.unique(value, return_inverse=True)[1].reshape(-1)
    return kmember(qi, k, seed=seed, sensitive=codes, p=P if name == "pk" else 1), None


def failing_classes(data: Data, gid: np.ndarray, k: int, rule: str = "paper") -> int:
    """The classes of a grouping that fail (θ,k) by `rule` (the in-memory model)."""
    _, category, value = data
    classes: list[Counter] = [Counter() for _ in range(int(gid.max()) + 1)]
    for g, c, v in zip(gid.tolist(), category.tolist(), value.tolist(), strict=True):
        classes[g][(c, v)] += 1
    # In memory the categories come with the counts' keys; the width only names a kind.
    model = ThetaKAnonymity(THETA, k, width=1.0, rule=rule)
    overall = sum(classes, Counter())
    return sum(not model.class_holds(c, overall) for c in classes if c)


def theta_k_holds(data: Data, gid: np.ndarray, k: int, rule: str = "paper") -> bool:
    """Whether a grouping is (θ,k)-anonymous by `rule`."""
    return failing_classes(data, gid, k, rule) == 0


def _most_groups(counts: Sequence[int], size: int) -> int:
    """The most groups of `size` distinct items that items with these counts can form: the
    largest N with Σ min(count, N) >= size N (each item in a group at most once)."""
    lo, hi = 0, sum(counts) // max(size, 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(c, mid) for c in counts) >= size * mid:
            lo = mid
        else:
            hi = mid - 1
    return lo


def class_bound(data: Data, k: int, theta: int = THETA) -> tuple[int, str]:
    """(an upper bound on the classes of any grouping whose every class meets the paper's
    condition, the category that binds it). Category c can serve at most B_c classes, the most
    groups of need_c = min(⌊k/θ⌋, V_c) distinct values its rows form; a class takes θ distinct
    categories, so N classes need Σ_c min(B_c, N) >= θ N; and N <= n / k."""
    _, category, value = data
    rows = Counter(zip(category.tolist(), value.tolist(), strict=True))
    per: dict[Any, list[int]] = {}
    for (c, _), f in rows.items():
        per.setdefault(c, []).append(f)
    serve = {c: _most_groups(fs, min(k // theta, len(fs))) for c, fs in per.items()}
    best = _most_groups(list(serve.values()), theta)
    bound = min(best, len(category) // k)
    binding = min(serve, key=lambda c: serve[c]) if bound < len(category) // k else "rows"
    return bound, str(binding)


def run(
    out_dir: str | Path,
    ks: Sequence[int] = KS,
    rows: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    seeds: int = SEEDS,
) -> dict[str, Any]:
    """Every algorithm on both tables for every k and seed; results.csv and the plots."""
    say = progress or (lambda _msg: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    datasets = {
        "hospital": hospital_arrays(rows or HOSPITAL_ROWS),
        "adult": adult_data(min(rows or ADULT_TRAIN_ROWS, 45222)),
    }
    small = datasets["hospital"]
    for name in ALGORITHMS:  # compile (or load numba's cache) outside the timings
        _run(name, (QIArrays(small[0].num[:60], small[0].cat[:60], small[0].lca,
                             small[0].height, small[0].hierarchies),
                    small[1][:60], small[2][:60]), 6, seed)  # fmt: skip
    results = []
    per_seed: list[dict[str, Any]] = []  # the paired runs: claims are judged on them
    runs: dict[tuple[str, str, int], dict[str, list[float]]] = {}
    bounds = {(d, k): class_bound(data, k) for d, data in datasets.items() for k in ks}
    for dataset, data in datasets.items():
        for k in ks:
            for name in ALGORITHMS:
                say(f"{dataset}: {name}, k={k}")
                got: dict[str, list[float]] = {m: [] for m in MEASURES}
                extra: dict[str, list[Any]] = {"classes": [], "min": [], "avg": [], "left": [],
                                               "holds": [], "paper_failing": []}  # fmt: skip
                promised = RULES[name][2] if name in RULES else None
                for s in range(seed, seed + seeds):
                    started = time.perf_counter()
                    gid, leftovers = _run(name, data, k, s)
                    got["seconds"].append(time.perf_counter() - started)
                    loss = loss_report(data[0], gid)
                    got["gcp"].append(100 * loss.ncp_height)
                    got["ncp_leaf"].append(100 * loss.ncp_leaf)
                    for m, v in vulnerability_in_memory(gid, data[1], data[2]).items():
                        got[m].append(v)
                    extra["classes"].append(loss.classes)
                    extra["min"].append(loss.min_class_size)
                    extra["avg"].append(loss.avg_class_size)
                    extra["left"].append(leftovers)
                    paper_failing = failing_classes(data, gid, k)
                    extra["paper_failing"].append(paper_failing)
                    extra["holds"].append(
                        paper_failing == 0 if promised in (None, "paper")
                        else theta_k_holds(data, gid, k, promised)
                    )  # fmt: skip
                runs[dataset, name, k] = got
                per_seed += [{"dataset": dataset, "algorithm": name, "k": k, "seed": s,
                              **{m: round(got[m][i], 6) for m in MEASURES},
                              "classes": extra["classes"][i],
                              "leftover_rows": "" if extra["left"][i] is None
                              else extra["left"][i],
                              "paper_failing_classes": extra["paper_failing"][i],
                              "class_bound": bounds[dataset, k][0],
                              "bound_by": bounds[dataset, k][1]}
                             for i, s in enumerate(range(seed, seed + seeds))]  # fmt: skip
                row: dict[str, Any] = {"dataset": dataset, "algorithm": name, "k": k,
                                       "rows": data[0].n, "seeds": seeds}  # fmt: skip
                for m in MEASURES:
                    mean, _, half = spread(got[m])
                    row[m], row[f"{m}_ci95"] = round(mean, 6), round(half, 6)
                row |= {
                    "classes": round(float(np.mean(extra["classes"])), 1),
                    "min_class_size": min(extra["min"]),
                    "avg_class_size": round(float(np.mean(extra["avg"])), 3),
                    "leftover_rows": "" if extra["left"][0] is None
                    else round(float(np.mean(extra["left"])), 1),
                    "theta_k_holds": all(extra["holds"]),
                    "paper_failing_classes": round(float(np.mean(extra["paper_failing"])), 1),
                    "class_bound": bounds[dataset, k][0],
                    "bound_by": bounds[dataset, k][1],
                }  # fmt: skip
                results.append(row)
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0]))
        writer.writeheader()
        writer.writerows(results)
    with open(out / "seeds.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(per_seed[0]))
        writer.writeheader()
        writer.writerows(per_seed)
    fewer = [f"k = {', '.join(map(str, ks))} (default {', '.join(map(str, KS))})"
             if tuple(ks) != KS else "", f"{seeds} seeds (default {SEEDS})" if seeds < SEEDS
             else ""]  # fmt: skip
    note = "; ".join(x for x in fewer if x)
    provenance.write(out, "thetak", {"ks": list(ks), "rows": {d: v[0].n for d, v in
                                     datasets.items()}, "seed": seed, "seeds": seeds},
                     note=f"smaller than the default setting: {note}" if note else "")  # fmt: skip
    plots = []
    for field, (label, filename) in PLOTS.items():
        _plot(results, field, label, out / filename)
        plots.append(str(out / filename))
    return {
        "csv": str(out / "results.csv"),
        "files": [str(out / "seeds.csv"), str(out / provenance.FILE)],
        "plots": plots,
        "claims": {d: verdict(results, runs, d, ks) for d in datasets},
        "results": results,
    }


def verdict(
    results: list[dict[str, Any]],
    runs: dict[tuple[str, str, int], dict[str, list[float]]],
    dataset: str,
    ks: Sequence[int],
) -> dict[str, Any]:
    """The paper's claims on one data set, for each leftover rule and each measure, judged on
    the paired seeds: (θ,k) is less vulnerable than both baselines, and costs at most 2 NCP
    points more than the better of them."""
    out: dict[str, Any] = {}
    for rule in RULES:
        claims: dict[str, Any] = {}
        for field in ("background_vulnerability", "similarity_vulnerability",
                      "majority_category_vulnerability"):  # fmt: skip
            judged = {
                k: [at_least(runs[dataset, b, k][field], runs[dataset, rule, k][field])
                    for b in BASELINES]
                for k in ks
            }  # fmt: skip
            claims[f"least_{field}_for_k"] = [
                k for k in ks if all(j["verdict"] == HOLDS for j in judged[k])
            ]
            claims[f"{field}_gap"] = {  # baseline minus (θ,k): positive is safer
                k: min(j["difference"] for j in judged[k]) for k in ks
            }
        extra = {k: float(np.mean(runs[dataset, rule, k]["gcp"])) - max(
            float(np.mean(runs[dataset, b, k]["gcp"])) for b in BASELINES) for k in ks}  # fmt: skip
        claims["max_extra_loss_points"] = round(max(extra.values()), 3)
        claims["extra_loss_at_most_2_points"] = max(extra.values()) <= 2.0
        claims["slowest_for_k"] = [k for k in ks if all(
            np.mean(runs[dataset, rule, k]["seconds"]) > np.mean(runs[dataset, b, k]["seconds"])
            for b in BASELINES)]  # fmt: skip
        out[rule] = claims
    return out


def _plot(results: list[dict[str, Any]], field: str, label: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in results))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets, strict=True):
        rows = [r for r in results if r["dataset"] == dataset]
        for name, marker in zip(ALGORITHMS, "osxv^D", strict=True):
            pts = [(r["k"], r[field]) for r in rows if r["algorithm"] == name]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=LABELS[name])
        ax.set_xlabel("k")
        ax.set_ylabel(label)
        ax.set_title(f"{dataset}, {rows[0]['rows']:,} rows")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{label} vs k")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
