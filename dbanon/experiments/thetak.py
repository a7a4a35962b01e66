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
Algorithms, all in memory with seed 0 (the time is the algorithm's alone): `thetak` (θ=3),
`kmember` (greedy k-member: k-anonymity) and `kmember --p 3` ((p,k)-anonymity). Vulnerabilities
are dbanon.metrics.vulnerability's (equal to its SQL form); information loss is NCP (GCP).
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
from dbanon.bench import adult_arrays, hospital_arrays
from dbanon.data import ADULT_COLUMNS, ADULT_TRAIN_ROWS, adult_rows, hierarchy_file
from dbanon.data.hospital import HOSPITAL_ROWS
from dbanon.hierarchy import Hierarchy
from dbanon.metrics.loss import loss_report
from dbanon.metrics.vulnerability import vulnerability_in_memory
from dbanon.models.thetak import ThetaKAnonymity

KS = (6, 9, 12, 15, 18, 21, 24, 27, 30)
THETA = 3
P = 3
DATASETS = ("hospital", "adult")
ALGORITHMS = ("thetak", "kmember", "pk")
LABELS = {"thetak": "(θ,k) θ=3", "kmember": "k-anonymity (k-member)", "pk": "(p,k) p=3"}
ADULT_NUMERIC = ["age", "education_num"]
ADULT_CATEGORICAL = ["workclass", "marital_status", "race", "sex", "native_country"]
PLOTS = {
    "background_vulnerability": ("background-knowledge vulnerability", "background.png"),
    "similarity_vulnerability": ("similarity vulnerability", "similarity.png"),
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
    if name == "thetak":
        return thetak_detail(qi, category, value, k, THETA, seed=seed)
    codes = np.unique(value, return_inverse=True)[1].reshape(-1)
    return kmember(qi, k, seed=seed, sensitive=codes, p=P if name == "pk" else 1), None


def theta_k_holds(data: Data, gid: np.ndarray, k: int) -> bool:
    """Whether a grouping is (θ,k)-anonymous (the in-memory model)."""
    _, category, value = data
    classes: list[Counter] = [Counter() for _ in range(int(gid.max()) + 1)]
    for g, c, v in zip(gid.tolist(), category.tolist(), value.tolist(), strict=True):
        classes[g][(c, v)] += 1
    # In memory the categories come with the counts' keys; the width only names a kind.
    return ThetaKAnonymity(THETA, k, width=1.0).holds_in_memory(classes)


def run(
    out_dir: str | Path,
    ks: Sequence[int] = KS,
    rows: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every algorithm on both tables for every k; results.csv and the four plots."""
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
    for dataset, data in datasets.items():
        for k in ks:
            for name in ALGORITHMS:
                say(f"{dataset}: {name}, k={k}")
                started = time.perf_counter()
                gid, leftovers = _run(name, data, k, seed)
                seconds = time.perf_counter() - started
                loss = loss_report(data[0], gid)
                vuln = vulnerability_in_memory(gid, data[1], data[2])
                results.append({
                    "dataset": dataset, "algorithm": name, "k": k, "rows": data[0].n,
                    "background_vulnerability": round(vuln["background_vulnerability"], 6),
                    "similarity_vulnerability": round(vuln["similarity_vulnerability"], 6),
                    "seconds": round(seconds, 4), "gcp": round(100 * loss.ncp_height, 4),
                    "classes": loss.classes, "min_class_size": loss.min_class_size,
                    "avg_class_size": round(loss.avg_class_size, 3),
                    "leftover_rows": "" if leftovers is None else leftovers,
                    "theta_k_holds": theta_k_holds(data, gid, k),
                })  # fmt: skip
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0]))
        writer.writeheader()
        writer.writerows(results)
    plots = []
    for field, (label, filename) in PLOTS.items():
        _plot(results, field, label, out / filename)
        plots.append(str(out / filename))
    return {
        "csv": str(out / "results.csv"),
        "plots": plots,
        "claims": {d: verdict(results, d, ks) for d in datasets},
        "results": results,
    }


def verdict(results: list[dict[str, Any]], dataset: str, ks: Sequence[int]) -> dict[str, Any]:
    """The paper's claims, each judged from the rows of one dataset."""
    by = {(r["algorithm"], r["k"]): r for r in results if r["dataset"] == dataset}
    others = [a for a in ALGORITHMS if a != "thetak"]

    def lowest(field: str) -> list[int]:
        return [k for k in ks if all(by["thetak", k][field] < by[a, k][field] for a in others)]

    def gap(field: str, k: int) -> float:
        """How far below the better baseline (θ,k) is (positive: less vulnerable)."""
        return min(by[a, k][field] for a in others) - by["thetak", k][field]

    def falls(field: str, a: str) -> bool:
        return by[a, ks[-1]][field] < by[a, ks[0]][field]

    extra = [by["thetak", k]["gcp"] - max(by[a, k]["gcp"] for a in others) for k in ks]
    background, similarity = lowest("background_vulnerability"), lowest("similarity_vulnerability")
    return {
        "least_background_vulnerable_for_k": background,
        "least_similarity_vulnerable_for_k": similarity,
        "least_vulnerable_to_both_for_every_k": background == list(ks) == similarity,
        "background_gap_smallest_k": round(gap("background_vulnerability", ks[0]), 4),
        "background_gap_largest_k": round(gap("background_vulnerability", ks[-1]), 4),
        "similarity_gap_smallest_k": round(gap("similarity_vulnerability", ks[0]), 4),
        "similarity_gap_largest_k": round(gap("similarity_vulnerability", ks[-1]), 4),
        "vulnerability_falls_with_k": {
            a: falls("background_vulnerability", a) and falls("similarity_vulnerability", a)
            for a in ALGORITHMS
        },
        "slowest_for_k": [
            k for k in ks if all(by["thetak", k]["seconds"] > by[a, k]["seconds"] for a in others)
        ],
        "loss_grows_with_k": {a: by[a, ks[-1]]["gcp"] > by[a, ks[0]]["gcp"] for a in ALGORITHMS},
        "max_extra_loss_points": round(max(extra), 3),
        "extra_loss_at_most_2_points": max(extra) <= 2.0,
    }


def _plot(results: list[dict[str, Any]], field: str, label: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in results))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets, strict=True):
        rows = [r for r in results if r["dataset"] == dataset]
        for name, marker in zip(ALGORITHMS, "osD", strict=True):
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
