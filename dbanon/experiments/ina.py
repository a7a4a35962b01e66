"""The INA paper's experiment (Wang, Zheng & Liao 2008, tables 1-3), beside the baseline.

Setting: synthetic 2-D points, five databases of 10,000 points with k = 2..6 clusters, beta = 5,
samples 50/100/200/1000, range normalisation, the paper's noise (half-width d per attribute,
`bound="paper"`, no noise floor); k-means and Chameleon (dbanon.metrics.chameleon). Each setting:
10 perturbed copies; mSec and misclassification are reported as the mean with the standard
deviation and a 95 % interval of the mean over the copies. Baseline: uniform noise of one size
for every tuple, sized for INA's mSec of each copy (results.csv; copy by copy in copies.csv, the
pairs INA against uniform noise is judged on) and for 2 % security (baseline.csv, with its spread
over the copies: the paper says it misclassifies above 4 %; beside it the noise's widest
half-width and the data's `separation`, the smallest distance between two clusters' points).

The clusters: each is a dense Gaussian core and a sparse halo (8 % of its points) spread over its
own Voronoi cell of the centres, every cell shrunk by a gap so no two clusters touch. The halo is
what makes the paper's sample-size trend possible: leader clustering covers the occupied area
with disks of radius r0 = diagonal / beta, and a larger sample reaches more of the sparse halo,
so the number of reference points grows with the sample (reported per setting as `refs`), the
two nearest reference points come closer and the noise, hence mSec, falls. Gaussian blobs alone
give about one reference point per cluster whatever the sample. Both clusterers recover the
generating clusters of the unperturbed data exactly or nearly (`truth_error_*`).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dbanon.algorithms.ina import ina_sizes, leader, nearest_two, perturb
from dbanon.experiments import provenance
from dbanon.experiments.stats import spread
from dbanon.metrics.clustering import cluster, misclassification
from dbanon.metrics.security import security

KS = (2, 3, 4, 5, 6)
SAMPLES = (50, 100, 200, 1000)
POINTS = 10_000
COPIES = 10
BETA = 5.0
ALGORITHMS = ("kmeans", "chameleon")
HALO = 0.08  # share of a cluster's points in its sparse halo
GAP = 1.2  # no point of a cluster within GAP / 2 of the boundary of its Voronoi cell
# The paper's tables (%), per sample size, columns k = 2..6.
PAPER = {
    "msec": {50: [2.05, 1.80, 3.83, 4.44, 3.22], 100: [1.61, 2.07, 3.94, 3.66, 3.37],
             200: [1.47, 1.77, 4.16, 3.45, 3.40], 1000: [1.47, 0.93, 0.90, 0.84, 1.21]},
    "kmeans": {50: [0.71, 1.23, 1.01, 1.63, 3.09], 100: [0.48, 1.83, 0.72, 1.02, 1.58],
               200: [0.36, 1.55, 0.61, 0.75, 1.30], 1000: [0.28, 1.32, 0.62, 0.94, 1.13]},
    "chameleon": {50: [0.90, 0.63, 1.23, 2.08, 3.87], 100: [0.51, 0.48, 0.80, 1.18, 1.30],
                      200: [0.44, 0.53, 0.65, 0.93, 1.57],
                      1000: [0.40, 0.73, 0.75, 1.13, 1.15]},
}  # fmt: skip
TABLES = (
    ("msec", "Table 1: minimum data security mSec (%)"),
    ("kmeans", "Table 2: misclassification, k-means (%)"),
    ("chameleon", "Table 3: misclassification, Chameleon (%)"),
)


def database(k: int, n: int = POINTS, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n 2-D points in [0, 10]^2 in k clusters, and each point's cluster: a Gaussian core
    (sd 0.6) at a centre at least 3.3 from the others, and a halo spread uniformly over the
    centre's Voronoi cell shrunk by the gap."""
    rng = np.random.default_rng(1000 + k + seed)
    centres: list[np.ndarray] = []
    while len(centres) < k:
        c = rng.uniform(1.2, 8.8, size=2)
        if all(np.linalg.norm(c - o) >= 3.3 for o in centres):
            centres.append(c)
    at = np.array(centres)

    def inside(p: np.ndarray, c: int) -> np.ndarray:
        d = np.linalg.norm(p[:, None, :] - at[None, :, :], axis=2)
        near = np.sort(d, axis=1)
        margin = near[:, 1] - near[:, 0] if k > 1 else np.full(len(p), np.inf)
        return (d.argmin(axis=1) == c) & (margin > GAP) & ((p >= 0) & (p <= 10)).all(axis=1)

    def draw(c: int, count: int, make: Callable[[int], np.ndarray]) -> np.ndarray:
        got = np.empty((0, 2))
        while len(got) < count:
            p = make(4 * count + 16)
            got = np.concatenate([got, p[inside(p, c)]])
        return got[:count]

    sizes = np.full(k, n // k)
    sizes[: n - sizes.sum()] += 1
    points, labels = [], []
    for c, size in enumerate(sizes):
        halo = int(round(HALO * size))
        points += [
            draw(c, size - halo, lambda m, c=c: rng.normal(at[c], 0.6, size=(m, 2))),
            draw(c, halo, lambda m: rng.uniform(0, 10, size=(m, 2))),
        ]
        labels.append(np.full(size, c))
    return np.concatenate(points), np.concatenate(labels)


def separation(x: np.ndarray, labels: np.ndarray) -> float:
    """The smallest distance between two points of different clusters: noise narrower than
    half of it moves no point nearer another cluster's points than its own's edge."""
    from scipy.spatial import cKDTree

    return float(min(cKDTree(x[labels != c]).query(x[labels == c])[0].min()
                     for c in np.unique(labels)))  # fmt: skip


def ina_copy(
    x: np.ndarray, sample: int, rng: np.random.Generator, bound: str
) -> tuple[np.ndarray, int]:
    """One INA copy as the paper writes it, and its number of reference points."""
    alpha = np.ptp(x, 0)
    refs = leader(x[rng.choice(len(x), sample, replace=False)], alpha, BETA)
    _, r1, r2 = nearest_two(x, refs, alpha)
    u = rng.uniform(-1, 1, size=x.shape)
    return perturb(x, u, ina_sizes(r1, r2, x.shape[1], bound), alpha), len(refs)


def uniform_copy(x: np.ndarray, sec: float, rng: np.random.Generator) -> np.ndarray:
    """Uniform noise of one size per column with Var(noise) = sec * Var(column)."""
    half = np.sqrt(3 * sec * x.var(0))
    return x + rng.uniform(-1, 1, size=x.shape) * half


def run(
    out_dir: str | Path,
    ks: Sequence[int] = KS,
    samples: Sequence[int] = SAMPLES,
    points: int = POINTS,
    copies: int = COPIES,
    bound: str = "paper",
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every (k, sample): mean mSec and misclassification of `copies` INA copies, and of
    uniform noise at the same security; write results.csv and tables.png."""
    say = progress or (lambda _msg: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    baseline: list[dict[str, Any]] = []
    per_copy: list[dict[str, Any]] = []  # INA and uniform noise of its security, copy by copy
    truth_error: dict[int, dict[str, float]] = {}
    for k in ks:
        x, labels = database(k, points, seed)
        truth = {a: cluster(x, k, a, seed) for a in ALGORITHMS}
        truth_error[k] = {a: 100 * misclassification(labels, truth[a]) for a in ALGORITHMS}
        for s in samples:
            say(f"k={k}, sample {s}")
            rng = np.random.default_rng([seed, k, s])
            acc: dict[str, list[float]] = {"msec": [], **{a: [] for a in ALGORITHMS}}
            base: dict[str, list[float]] = {a: [] for a in ALGORITHMS}
            refs: list[int] = []
            for _ in range(copies):
                xp, b = ina_copy(x, min(s, len(x)), rng, bound)
                refs.append(b)
                msec = float(security(x, xp).min())
                acc["msec"].append(100 * msec)
                xb = uniform_copy(x, msec, rng)  # the baseline at the same security
                for a in ALGORITHMS:
                    acc[a].append(100 * misclassification(truth[a], cluster(xp, k, a, seed)))
                    base[a].append(100 * misclassification(truth[a], cluster(xb, k, a, seed)))
            row: dict[str, Any] = {"k": k, "sample": s, "refs": float(np.mean(refs))}
            for f, v in acc.items():
                row[f], row[f"{f}_sd"], row[f"{f}_ci95"] = spread(v)
            for f in ("msec", *ALGORITHMS):
                paper = PAPER[f].get(s)
                row[f"paper_{f}"] = paper[k - 2] if paper and 2 <= k <= 6 else None
            row.update({f"uniform_{a}": float(np.mean(v)) for a, v in base.items()})
            row.update({f"truth_error_{a}": truth_error[k][a] for a in ALGORITHMS})
            results.append(row)
            per_copy += [{"k": k, "sample": s, "copy": i, "refs": refs[i],
                          "msec": acc["msec"][i],
                          **{a: acc[a][i] for a in ALGORITHMS},
                          **{f"uniform_{a}": base[a][i] for a in ALGORITHMS}}
                         for i in range(copies)]  # fmt: skip
        say(f"k={k}, uniform noise at 2 % security")
        rng = np.random.default_rng([seed, k, 2])
        b2: dict[str, list[float]] = {a: [] for a in ALGORITHMS}
        for _ in range(copies):
            xb = uniform_copy(x, 0.02, rng)
            for a in ALGORITHMS:
                b2[a].append(misclassification(truth[a], cluster(xb, k, a, seed)))
        row: dict[str, Any] = {"k": k, "msec": 2.0, "copies": copies,
                               "noise_half_width": float(np.sqrt(3 * 0.02 * x.var(0)).max()),
                               "separation": separation(x, labels)}  # fmt: skip
        for a, v in b2.items():
            row[a], row[f"{a}_sd"], row[f"{a}_ci95"] = spread([100 * x for x in v])
        baseline.append(row)
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0]))
        writer.writeheader()
        writer.writerows(results)
    with open(out / "baseline.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(baseline[0]))
        writer.writeheader()
        writer.writerows(baseline)
    with open(out / "copies.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(per_copy[0]))
        writer.writeheader()
        writer.writerows(per_copy)
    _plot(results, ks, samples, out / "tables.png")
    fewer = [f"{copies} copies (default {COPIES})" if copies < COPIES else "",
             f"{points:,} points (default {POINTS:,})" if points < POINTS else "",
             "k or samples other than the paper's" if (tuple(ks), tuple(samples)) != (KS, SAMPLES)
             else ""]  # fmt: skip
    note = "; ".join(x for x in fewer if x)
    provenance.write(out, "ina", {"ks": list(ks), "samples": list(samples), "points": points,
                                  "copies": copies, "bound": bound, "seed": seed},
                     note=f"smaller than the default setting: {note}" if note else "")  # fmt: skip
    return {
        "csv": str(out / "results.csv"),
        "files": [str(out / "baseline.csv"), str(out / "copies.csv"), str(out / provenance.FILE)],
        "plots": [str(out / "tables.png")],
        "setting": {
            "ks": list(ks),
            "samples": list(samples),
            "points": points,
            "copies": copies,
            "beta": BETA,
            "bound": bound,
        },  # fmt: skip
        "trends": trends(results, ks, samples),
        "truth_error": truth_error,
        "results": results,
        "baseline_2pct": baseline,
    }


def trends(results: list[dict[str, Any]], ks: Sequence[int], samples: Sequence[int]) -> dict:
    """The paper's trends, measured: mSec and misclassification fall as the sample grows
    (smallest vs largest sample, per k), misclassification rises with k (per sample), INA
    beats uniform noise of the same security."""
    by = {(r["k"], r["sample"]): r for r in results}
    lo, hi = min(samples), max(samples)
    out: dict[str, Any] = {
        "msec_falls_with_sample": [k for k in ks if by[k, hi]["msec"] < by[k, lo]["msec"]],
        "refs_grow_with_sample": [k for k in ks if by[k, hi]["refs"] > by[k, lo]["refs"]],
    }
    for a in ALGORITHMS:
        out[f"{a}_falls_with_sample"] = [k for k in ks if by[k, hi][a] < by[k, lo][a]]
        out[f"{a}_rises_with_k"] = [s for s in samples if by[max(ks), s][a] > by[min(ks), s][a]]
        out[f"{a}_below_uniform_at_same_security"] = sum(r[a] < r[f"uniform_{a}"] for r in results)
    out["settings"] = len(results)
    return out


def _plot(results: list[dict[str, Any]], ks: Sequence[int], samples: Sequence[int],
          path: Path) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    by = {(r["k"], r["sample"]): r for r in results}
    for ax, (field, title) in zip(axes, TABLES, strict=True):
        for i, s in enumerate(samples):
            colour = f"C{i}"
            ax.plot(ks, [by[k, s][field] for k in ks], marker="o", color=colour,
                    label=f"ours, sample {s}")  # fmt: skip
            paper = [by[k, s][f"paper_{field}"] for k in ks]
            if all(p is not None for p in paper):
                ax.plot(ks, paper, linestyle="--", marker="x", color=colour,
                        label=f"paper, sample {s}")  # fmt: skip
        ax.set_xlabel("clusters k")
        ax.set_ylabel("%")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
