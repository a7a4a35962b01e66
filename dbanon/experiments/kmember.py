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
from dbanon.bench import adult_arrays
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
