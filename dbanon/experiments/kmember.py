"""The k-member paper's experiment (Wang & Ma 2011, figures 3 and 4).

Setting: UCI Adult, 45,222 complete rows; QI age and education-num (numeric), workclass,
marital-status, race, sex, native-country (ARX hierarchies); occupation sensitive (not a QI).
Greedy k-member against median ("centre-point") partitioning, i.e. strict Mondrian, for
k in 2, 5, 10, 20, 50, 100: Total-IL vs k (figure 3) and run time vs k (figure 4). The paper
finds k-member's loss lower for every k and its time higher.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dbanon.algorithms.base import QIArrays
from dbanon.bench.methods import adult_arrays
from dbanon.experiments import provenance
from dbanon.metrics.loss import loss_report

KS = (2, 5, 10, 20, 50, 100)
NUMERIC = ["age", "education_num"]
CATEGORICAL = ["workclass", "marital_status", "race", "sex", "native_country"]


def _algorithms() -> dict[str, Callable[[QIArrays, int], np.ndarray]]:
    from dbanon.algorithms.kmember import kmember
    from dbanon.algorithms.mondrian import mondrian

    return {"kmember": kmember, "mondrian": mondrian}


def run(
    out_dir: str | Path,
    ks: Sequence[int] = KS,
    rows: int = 45222,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run both algorithms for every k; write results.csv, loss.png and time.png."""
    say = progress or (lambda _msg: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    qi = adult_arrays(rows, NUMERIC, CATEGORICAL)
    algorithms = _algorithms()
    for fn in algorithms.values():  # compile (or load numba's cache) outside the timings
        fn(QIArrays(qi.num[:40], qi.cat[:40], qi.lca, qi.height, qi.hierarchies), 2)
    results = []
    for k in ks:
        for name, fn in algorithms.items():
            say(f"{name}, k={k}")
            started = time.perf_counter()
            gid = fn(qi, k)
            seconds = time.perf_counter() - started
            rep = loss_report(qi, gid)
            results.append({
                "algorithm": name, "k": k, "rows": qi.n,
                "total_il_height": round(rep.total_il_height, 3),
                "ncp_height": round(rep.ncp_height, 6), "ncp_leaf": round(rep.ncp_leaf, 6),
                "classes": rep.classes,
                "min_class_size": rep.min_class_size, "seconds": round(seconds, 4),
            })  # fmt: skip
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0]))
        writer.writeheader()
        writer.writerows(results)
    _plot(results, "total_il_height", "Total-IL (heights)", out / "loss.png")
    _plot(results, "seconds", "run time (s)", out / "time.png")
    provenance.write(out, "kmember", {"ks": list(ks), "rows": qi.n})
    by = {(r["algorithm"], r["k"]): r for r in results}
    loss_lower = [
        by["kmember", k]["total_il_height"] < by["mondrian", k]["total_il_height"] for k in ks
    ]
    time_higher = [by["kmember", k]["seconds"] > by["mondrian", k]["seconds"] for k in ks]
    return {
        "csv": str(out / "results.csv"),
        "plots": [str(out / "loss.png"), str(out / "time.png")],
        "rows": qi.n,
        "kmember_loss_lower_for_every_k": all(loss_lower),
        "kmember_loss_lower_for_k": [k for k, x in zip(ks, loss_lower, strict=True) if x],
        "kmember_slower_for_every_k": all(time_higher),
        "kmember_slower_for_k": [k for k, x in zip(ks, time_higher, strict=True) if x],
        "results": results,
    }


def _plot(results: list[dict[str, Any]], field: str, label: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, marker in (("kmember", "o"), ("mondrian", "s")):
        pts = [(r["k"], r[field]) for r in results if r["algorithm"] == name]
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker=marker,
            label="greedy k-member" if name == "kmember" else "median partitioning (Mondrian)",
        )
    ax.set_xscale("log")
    ax.set_xticks([r["k"] for r in results if r["algorithm"] == "kmember"])
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("k")
    ax.set_ylabel(label)
    ax.set_title(f"Adult, {results[0]['rows']:,} rows: {label} vs k")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --- k-member at scale: the partitioned mode against the exact rule ---------------------------

SCALE_ROWS = (100_000, 300_000)
SCALE_BLOCKS = (4_000, 8_000, 16_000, 32_000)


def census_arrays(rows: int, seed: int = 0) -> QIArrays:
    """A census-like table of mostly distinct rows: Adult's 8 benchmark QIs (45,222 rows)
    resampled with replacement, each age plus up to 1 % of its span (under nine months, as if
    from a birth date), so nearly every row is distinct however many are drawn."""
    adult = adult_arrays(45222)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, adult.n, rows)
    age = adult.num[pick, 0] + rng.random(rows) / 100  # adult.num holds age / its span
    edu = adult.num[pick, 1]
    cats = [(adult.cat[pick, j], h) for j, h in enumerate(adult.hierarchies)]
    return QIArrays.build([age, edu], cats, n=rows)


def run_scale(
    out_dir: str | Path,
    rows: Sequence[int] = SCALE_ROWS,
    blocks: Sequence[int] = SCALE_BLOCKS,
    partitioned_only: Sequence[int] = (),
    k: int = 10,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Exact rule vs partitioned mode (every block size in `blocks`) on `rows`-row census-like
    tables, and the partitioned mode alone (default block size) on `partitioned_only` sizes;
    both losses for every run. Writes scale.csv and scale.png."""
    from dbanon.algorithms.blocks import DEFAULT_BLOCK_SIZE, cores, kmember_blocks
    from dbanon.algorithms.kmember import kmember

    say = progress or (lambda _msg: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kmember_blocks(census_arrays(3 * k * 10), k, block_size=4 * k)  # compile outside timings
    results: list[dict[str, Any]] = []

    def one(qi: QIArrays, mode: str, size: int | None) -> None:
        say(f"{qi.n} rows, {mode}" + (f", blocks of {size}" if size else ""))
        started, cpu = time.perf_counter(), time.process_time()
        if size is None:
            gid, figures = kmember(qi, k), {}
        else:
            gid, figures = kmember_blocks(qi, k, block_size=size)
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu  # all threads: the work, whatever else runs
        rep = loss_report(qi, gid)
        results.append({
            "rows": qi.n, "mode": mode, "block_size": size or "", "seconds": round(seconds, 3),
            "cpu_seconds": round(cpu, 3),
            "ncp_height": round(rep.ncp_height, 6), "ncp_leaf": round(rep.ncp_leaf, 6),
            "total_il_height": round(rep.total_il_height, 3), "classes": rep.classes,
            "min_class_size": rep.min_class_size, "max_class_size": rep.max_class_size,
            "blocks": figures.get("blocks", 1), "repooled_rows": figures.get("repooled_rows", 0),
        })  # fmt: skip

    for n in rows:
        qi = census_arrays(n)
        one(qi, "exact", None)
        for size in blocks:
            one(qi, "partitioned", size)
    for n in partitioned_only:
        one(census_arrays(n), "partitioned", DEFAULT_BLOCK_SIZE)
    with open(out / "scale.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0]))
        writer.writeheader()
        writer.writerows(results)
    _plot_scale(results, out / "scale.png")
    exact = {r["rows"]: r for r in results if r["mode"] == "exact"}
    default = [
        r for r in results if r["mode"] == "partitioned" and r["block_size"] == DEFAULT_BLOCK_SIZE
    ]
    gaps = {
        r["rows"]: round(100 * (r["ncp_height"] - exact[r["rows"]]["ncp_height"]), 3)
        for r in default
        if r["rows"] in exact
    }
    return {
        "csv": str(out / "scale.csv"),
        "plots": [str(out / "scale.png")],
        "cores": cores(),
        "default_block_size": DEFAULT_BLOCK_SIZE,
        "ncp_height_gap_pt_at_default_block_size": gaps,
        "within_half_a_point": all(abs(g) <= 0.5 for g in gaps.values()),
        "results": results,
    }


def _plot_scale(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss, secs) = plt.subplots(1, 2, figsize=(10, 4))
    series: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        label = "exact rule" if r["mode"] == "exact" else f"blocks of {r['block_size']:,}"
        series.setdefault(label, []).append(r)
    for label, rs in series.items():
        rs = sorted(rs, key=lambda r: r["rows"])
        xs = [r["rows"] for r in rs]
        loss.plot(xs, [100 * r["ncp_height"] for r in rs], marker="o", label=label)
        secs.plot(xs, [r["seconds"] for r in rs], marker="o", label=label)
    for ax, ylabel in ((loss, "NCP by heights (%)"), (secs, "seconds")):
        ax.set_xscale("log")
        ax.set_xlabel("rows (census-like, mostly distinct)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    secs.set_yscale("log")
    loss.legend(fontsize=8)
    fig.suptitle("k-member, k=10: exact greedy rule vs partitioned mode")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
