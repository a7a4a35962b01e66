"""The experiments' and benchmarks' figures in docs/, rendered from their committed CSV/JSON.

Each block here is registered with dbanon.docsgen.blocks (dbanon.docsgen.generate imports this
module when it renders) and
reads one file under docs/: the output an experiment or bench command wrote there. A figure in
the text is therefore the one in the file, and `dbanon docs --check` fails when they differ.
Metrics keep their exact names: `ncp_height` (a categorical LCA costs its height over the
tree's, the k-member paper's convention), `ncp_leaf` (it costs the share of leaves it covers,
Xu et al.'s), `total_il_height` (the k-member paper's sum); two conventions never share a column.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable
from typing import Any

from dbanon.docsgen.blocks import ROOT, block, table

DOCS = ROOT / "docs"


def _csv(rel: str) -> list[dict[str, str]]:
    with open(DOCS / rel, newline="") as f:
        return list(csv.DictReader(f))


def _json(rel: str) -> Any:
    return json.loads((DOCS / rel).read_text())


def _f(x: str | float, digits: int) -> str:
    return f"{float(x):,.{digits}f}"


def _pm(row: dict[str, str], col: str, digits: int) -> str:
    """A mean with the half-width of its 95 % interval (the experiments' `<col>_ci95`)."""
    return f"{_f(row[col], digits)} ± {_f(row[col + '_ci95'], digits)}"


def _pct(x: str | float, digits: int = 2) -> str:
    return f"{100 * float(x):.{digits}f} %"


def _source(rel: str, command: str) -> str:
    """Where a figure comes from, and what its run left out (its provenance's note)."""
    record = DOCS / rel.split("/")[0] / "provenance.json"
    note = json.loads(record.read_text()).get("note", "") if record.is_file() else ""
    return f"\n\nFrom `docs/{rel}`, written by `{command}`" + (f"; {note}." if note else ".")


def _pick(data: Iterable[dict[str, str]], **match: object) -> dict[str, str]:
    """The one row whose columns equal MATCH (compared as text)."""
    found = [r for r in data if all(r[c] == str(v) for c, v in match.items())]
    if len(found) != 1:
        raise ValueError(f"{len(found)} rows match {match}")
    return found[0]


def _bold_better(a: float, b: float, digits: int, higher: bool = True) -> tuple[str, str]:
    sa, sb = f"{a:.{digits}f}", f"{b:.{digits}f}"
    if sa == sb:
        return sa, sb
    return (f"**{sa}**", sb) if (a > b) == higher else (sa, f"**{sb}**")


# --- k-member ---------------------------------------------------------------------------------


@block("kmember-paper")
def _kmember_paper() -> str:
    rows = _csv("kmember/results.csv")
    out = []
    for k in sorted({int(r["k"]) for r in rows}):
        km, mo = _pick(rows, algorithm="kmember", k=k), _pick(rows, algorithm="mondrian", k=k)
        ratio = float(mo["total_il_height"]) / float(km["total_il_height"])
        out.append([str(k), _f(km["total_il_height"], 0), _f(mo["total_il_height"], 0),
                    f"{ratio:.1f}x", _pct(km["ncp_height"]), _pct(mo["ncp_height"]),
                    _pct(km["ncp_leaf"]), _pct(mo["ncp_leaf"]), _f(km["seconds"], 3),
                    _f(mo["seconds"], 3)])  # fmt: skip
    return table(["k", "k-member total_il_height", "Mondrian total_il_height",
                  "Mondrian / k-member", "k-member ncp_height", "Mondrian ncp_height",
                  "k-member ncp_leaf", "Mondrian ncp_leaf", "k-member s", "Mondrian s"],
                 out) + _source("kmember/results.csv", "dbanon experiment kmember")  # fmt: skip


@block("kmember-scale")
def _kmember_scale() -> str:
    rows = _csv("kmember-scale/scale.csv")
    out = [[_f(r["rows"], 0), r["mode"], _f(r["block_size"], 0) if r["block_size"] else "",
            r["blocks"], f"{float(r['seconds']):.1f} ({float(r['cpu_seconds']):.1f})",
            _pct(r["ncp_height"]), _pct(r["ncp_leaf"])] for r in rows]  # fmt: skip
    text = table(["rows", "mode", "block size", "blocks", "seconds (CPU)", "ncp_height",
                  "ncp_leaf"], out)  # fmt: skip
    lines = []
    for n in sorted({int(r["rows"]) for r in rows if r["mode"] == "exact"}):
        exact = _pick(rows, rows=n, mode="exact")
        part = _pick(rows, rows=n, mode="partitioned", block_size=16000)
        d = [100 * (float(part[c]) - float(exact[c])) for c in ("ncp_height", "ncp_leaf")]
        lines.append(f"at {n:,} rows {d[0]:+.2f} pt by ncp_height and {d[1]:+.2f} pt by ncp_leaf")
    text += ("\n\nPartitioned (default 16,000-row blocks) minus exact: " + "; ".join(lines)
             + "." + _source("kmember-scale/scale.csv", "dbanon experiment kmember-scale"))
    return text


# --- (θ,k) --------------------------------------------------------------------------------------


MEASURES = (("gcp", 1), ("background_vulnerability", 3), ("similarity_vulnerability", 3),
            ("majority_category_vulnerability", 3), ("seconds", 2))  # fmt: skip


@block("thetak-results")
def _thetak_results() -> str:
    rows = _csv("thetak/results.csv")
    algos = ("thetak", "thetak_paper", "kmember", "pk")
    out = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == dataset]
        n, seeds = _f(mine[0]["rows"], 0), mine[0]["seeds"]
        body = []
        for k in sorted({int(r["k"]) for r in mine}):
            got = {a: _pick(mine, algorithm=a, k=k) for a in algos}
            cells = [str(k)]
            for col, digits in MEASURES:
                cells.append(" / ".join(_f(got[a][col], digits) for a in algos))
            t = got["thetak"]
            cells.append(f"{_f(t['classes'], 0)} ({_f(t['leftover_rows'], 0)})")
            held = all(got[a]["theta_k_holds"] == "True" for a in ("thetak", "thetak_paper"))
            cells.append("yes" if held else "**no**")
            body.append(cells)
        out.append(f"{dataset}, {n} rows, mean of {seeds} seeds:\n\n" + table(
            ["k", "ncp_height %", "background", "similarity (mean share)",
             "majority category", "seconds", "default classes (leftover rows)",
             "(θ,k) holds"], body))  # fmt: skip
    return ("Cells read the default (θ,k) / the paper's construction / k-member / (p,k) p=3; "
            "both (θ,k) hold the paper's condition.\n\n"
            + "\n\n".join(out) + _source("thetak/results.csv", "dbanon experiment thetak"))


CONDITION_KS = (6, 12, 18, 24, 30)
CONDITION_ALGOS = ("thetak", "thetak_relaxed", "thetak_paper", "kmember")


@block("thetak-condition")
def _thetak_condition() -> str:
    """The paper's condition against the relaxed rule and k-member: loss, classes, leftovers,
    the classes failing the paper's condition and the bound it puts on the classes."""
    rows = _csv("thetak/results.csv")
    out = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == dataset]
        n, seeds = _f(mine[0]["rows"], 0), mine[0]["seeds"]
        body = []
        for k in (k for k in CONDITION_KS if any(int(r["k"]) == k for r in mine)):
            got = {a: _pick(mine, algorithm=a, k=k) for a in CONDITION_ALGOS}
            cells = [str(k)]
            for col in ("ncp_leaf", "gcp"):
                cells.append(" / ".join(_f(got[a][col], 1) for a in CONDITION_ALGOS))
            cells.append(" / ".join(
                f"{_f(got[a]['classes'], 0)} ({_f(got[a]['leftover_rows'], 0)})"
                for a in CONDITION_ALGOS[:3]) + f" / {_f(got['kmember']['classes'], 0)}")
            cells.append(f"{_f(got['thetak']['class_bound'], 0)} "
                         f"({got['thetak']['bound_by']})")  # fmt: skip
            cells.append(" / ".join(
                f"{_f(got[a]['paper_failing_classes'], 0)}" for a in CONDITION_ALGOS))
            body.append(cells)
        out.append(f"{dataset}, {n} rows, mean of {seeds} seeds:\n\n" + table(
            ["k", "NCP % (leaf counts)", "NCP % (height)", "classes (leftover rows)",
             "class bound (binding category)", "classes failing the paper's condition"],
            body))  # fmt: skip
    return ("Cells read the default (paper's condition, greedy) / the relaxed rule "
            "(`--theta-rule relaxed`) / the paper's construction / k-member. The class bound is "
            "the most classes any grouping whose every class meets the paper's condition can "
            "have (dbanon.experiments.thetak.class_bound; `rows`: n / k).\n\n"
            + "\n\n".join(out) + _source("thetak/results.csv", "dbanon experiment thetak"))


# --- INA ------------------------------------------------------------------------------------------


@block("ina-tables")
def _ina_tables() -> str:
    rows = _csv("ina/results.csv")
    ks = sorted({int(r["k"]) for r in rows})
    samples = sorted({int(r["sample"]) for r in rows})
    parts = []
    for title, col, paper, uniform in (
        ("Table 1, mSec %", "msec", "paper_msec", None),
        ("Table 2, k-means misclassification %", "kmeans", "paper_kmeans", "uniform_kmeans"),
        ("Table 3, Chameleon misclassification %", "chameleon", "paper_chameleon",
         "uniform_chameleon"),
    ):  # fmt: skip
        body = []
        for s in samples:
            cells = [str(s)]
            for k in ks:
                r = _pick(rows, k=k, sample=s)
                cell = f"{_pm(r, col, 2)} ({_f(r[paper], 2)})"
                if uniform:
                    cell += f" [u {_f(r[uniform], 2)}]"
                cells.append(cell)
            body.append(cells)
        parts.append(f"{title}:\n\n" + table(["sample", *(f"k={k}" for k in ks)], body))
    base = _csv("ina/baseline.csv")
    parts.append(
        "Uniform noise at 2 % security, misclassification % (k = "
        + ", ".join(b["k"] for b in base) + "): k-means "
        + ", ".join(_pm(b, "kmeans", 2) for b in base) + "; Chameleon "
        + ", ".join(_pm(b, "chameleon", 2) for b in base) + " (`docs/ina/baseline.csv`; the "
        "paper: above 4 %)."
    )
    return "\n\n".join(parts) + _source("ina/results.csv", "dbanon experiment ina")


# --- RFKA -----------------------------------------------------------------------------------------


@block("rfka-results")
def _rfka_results() -> str:
    from dbanon.experiments.stats import at_least

    rows = _csv("rfka/results.csv")
    runs = _csv("rfka/seeds.csv")

    def aucs(dataset: str, method: str, k: int) -> list[float]:
        key = (dataset, method, str(k))
        got = sorted((int(r["seed"]), float(r["auc"])) for r in runs
                     if (r["dataset"], r["method"], r["k"]) == key)  # fmt: skip
        return [v for _, v in got]

    parts = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == dataset]
        body = []
        for k in sorted({int(r["k"]) for r in mine}):
            a, b = _pick(mine, method="rfka", k=k), _pick(mine, method="hamdist", k=k)
            svm = _bold_better(float(a["auc"]), float(b["auc"]), 3)
            lr = _bold_better(float(a["auc_logreg"]), float(b["auc_logreg"]), 3)
            secs = (f"{_f(a['seconds'], 2)} / {_f(b['seconds'], 2)}" if a["seconds"] else "-")
            j = at_least(aucs(dataset, "rfka", k), aucs(dataset, "hamdist", k))
            paired = (f"{j['difference']:+.3f} [{j['ci95_low']:+.3f}, {j['ci95_high']:+.3f}]"
                      if k else "-")  # fmt: skip
            body.append([str(k), f"{float(a['features']):g} / {float(b['features']):g}",
                         " / ".join(svm), f"± {_f(a['auc_ci95'], 3)} / {_f(b['auc_ci95'], 3)}",
                         paired, " / ".join(lr), secs])  # fmt: skip
        parts.append(f"{dataset}, {_f(mine[0]['rows'], 0)} rows, {mine[0]['run_seeds']} runs "
                     "(rfka / hamdist; the better mean in bold; features: the mean over the "
                     "runs):\n\n" + table(["k", "features", "SVM AUC", "95 % interval",
                                           "paired RFKA − Greedy_Hamdist", "logistic AUC",
                                           "seconds"], body))  # fmt: skip
    return "\n\n".join(parts) + _source("rfka/results.csv", "dbanon experiment rfka")


@block("rfka-bench")
def _rfka_bench() -> str:
    body = []
    for name in ("bench.json", "bench_sample5000.json"):
        d = _json(f"rfka/{name}")
        body.append([f"{d['fit_rows']:,} (`docs/rfka/{name}`)", f"{d['trees']:,}",
                     f"{d['seconds']:.1f} s", f"{d['seconds_forest']:.1f} s",
                     f"{d['seconds_search']:.2f} s ({d['search_queries']} queries, "
                     f"{d['ms_per_search_step']:.0f} ms each)",
                     ", ".join(c.split(" (")[0] for c in d["chosen"])])  # fmt: skip
    return table(["forest fitted on (rows)", "trees", "end to end", "forest (fit + OOB "
                  "importance)", "search", "chosen"], body)  # fmt: skip


# --- CBG ----------------------------------------------------------------------------------------


@block("cbg-l")
def _cbg_l() -> str:
    rows = [r for r in _csv("cbg/results.csv") if r["part"] == "l"]
    ms = ("cbg", "mondrian", "anatomy")
    body = []
    for ell in sorted({int(r["l"]) for r in rows}):
        got = {m: _pick(rows, method=m, l=ell) for m in ms}
        body.append([str(ell), " / ".join(_f(got[m]["exposure"], 4) for m in ms),
                     _f(got["cbg"]["exposure_max"], 4),
                     " / ".join(_f(got[m]["dm"], 0) for m in ms),
                     " / ".join(_f(got[m]["query_error"], 1) for m in ms),
                     " / ".join(_f(got[m]["query_error_median"], 2) for m in ms),
                     _f(got["cbg"]["publish_seconds"], 1)])  # fmt: skip
    k = rows[0]["k"]
    return (f"k = {k} (cells: CBG / Mondrian / Anatomy):\n\n"
            + table(["l", "exposure", "exposure_max CBG", "DM", "query error (mean)",
                     "query error (median)", "CBG publish s"], body)
            + _source("cbg/results.csv", "dbanon experiment cbg"))  # fmt: skip


@block("cbg-k")
def _cbg_k() -> str:
    rows = [r for r in _csv("cbg/results.csv") if r["part"] == "k"]
    ls = sorted({int(r["l"]) for r in rows})
    body = []
    for k in sorted({int(r["k"]) for r in rows}):
        cells = [str(k)]
        for ell in ls:
            r = _pick(rows, k=k, l=ell)
            cells.append(f"{_f(r['exposure'], 4)} / {_f(r['dm'], 0)} / "
                         f"{_f(r['query_error'], 1)}")  # fmt: skip
        body.append(cells)
    return (table(["k", *(f"l={ell}: exposure / DM / query error" for ell in ls)], body)
            + _source("cbg/results.csv", "dbanon experiment cbg"))


# --- local anatomy and LAG -------------------------------------------------------------------


@block("localanatomy-exposure")
def _la_exposure() -> str:
    rows = [r for r in _csv("localanatomy/exposure.csv") if r["density"] == "0.2"]
    series = ("Anatomy", "LocalAnatomy_a", "LocalAnatomy_b")
    body = []
    for ell in sorted({int(r["l"]) for r in rows}):
        got = {s: _pick(rows, series=s, l=ell) for s in series}
        body.append([str(ell), *(_f(got[s]["semi_sensitive"], 3) for s in series),
                     _f(1 / ell, 3), *(_f(got[s]["sensitive"], 3) for s in series),
                     f"{got['LocalAnatomy_a']['l_age']} / "
                     f"{got['LocalAnatomy_a']['l_occupation']}"])  # fmt: skip
    return (table(["l", "Anatomy semi", "LA (a) semi", "LA (b) semi", "1/l", "Anatomy salary",
                   "LA (a) salary", "LA (b) salary", "l given age / occupation"], body)
            + _source("localanatomy/exposure.csv", "dbanon experiment localanatomy"))  # fmt: skip


@block("localanatomy-error")
def _la_error() -> str:
    rows = _csv("localanatomy/query_error.csv")
    at20 = [r for r in rows if r["density"] == "0.2"]
    series = ("Mondrian", "Anatomy", "LocalAnatomy", "HeuristicLocalAnatomy")
    ls = sorted({int(r["l"]) for r in at20})
    body = [[str(ell), *(_f(_pick(at20, series=s, l=ell)["query_error"], 2) for s in series)]
            for ell in ls]  # fmt: skip
    text = "Density 20 %:\n\n" + table(["l", *series], body)
    dens = sorted({r["density"] for r in rows})
    tclose = _csv("localanatomy/tcloseness.csv")
    body = []
    for d in dens:
        h = [_f(_pick(rows, series="HeuristicLocalAnatomy", density=d, l=ell)["query_error"], 2)
             for ell in ls]  # fmt: skip
        t = [r for r in tclose if r["density"] == d]
        tt = [_f(_pick(t, l=ell)["query_error"], 2) for ell in ls] if t else []
        body.append([f"{100 * float(d):.0f} %", " / ".join(h), " / ".join(tt) or "-"])
    text += ("\n\nHeuristicLocalAnatomy by density, l = " + " / ".join(map(str, ls))
             + " (with sex semi-sensitive under t = 0.2: Fig. 4.10):\n\n"
             + table(["density", "query error", "with sex under t = 0.2"], body))  # fmt: skip
    return text + _source("localanatomy/query_error.csv` and `docs/localanatomy/tcloseness.csv",
                          "dbanon experiment localanatomy")


@block("lag-results")
def _lag_results() -> str:
    rows = _csv("lag/results.csv")
    variants = [v for v in ("LAG_1", "LAG_2", "LAG_2_thesis") if any(r["variant"] == v
                                                                     for r in rows)]  # fmt: skip
    names = " / ".join(variants)
    dens = sorted({r["density"] for r in rows}, key=float)
    shown = "0.2" if "0.2" in dens else dens[0]
    at = [r for r in rows if r["density"] == shown]
    ks = sorted({int(r["k"]) for r in at})
    ls = sorted({int(r["l"]) for r in at})
    show = sorted({ls[0], ls[len(ls) // 2], ls[-1]})
    body = []
    for k in ks:
        one = {v: _pick(at, variant=v, k=k, l=ls[0]) for v in variants}
        cells = [str(k)]
        for col, digits in (("dm", 0), ("ncp", 3), ("groups", 0)):
            cells.append(" / ".join(_f(one[v][col], digits) for v in one))
        for ell in show:
            cells.append(" / ".join(_f(_pick(at, variant=v, k=k, l=ell)["query_error"], 0)
                                    for v in one))  # fmt: skip
        body.append(cells)
    text = (f"{names} at density {100 * float(shown):.0f} % (DM, ncp and groups do not depend "
            "on l; ncp is the thesis's NCP (5.12-5.13), categorical cells by LCA height, flagged "
            "cells 0):\n\n"
            + table(["k", "DM", "ncp", "groups", *(f"query error l={ell}" for ell in show)],
                    body))  # fmt: skip
    means = []
    for d in dens:
        per = {v: [float(r["ncp"]) for r in rows if r["density"] == d and r["variant"] == v]
               for v in variants}  # fmt: skip
        means.append(f"{100 * float(d):.0f} % "
                     + " / ".join(f"{sum(x) / len(x):.3f}" for x in per.values()))
    text += f"\n\nncp by density, {names} (mean over k and l): " + "; ".join(means) + "."
    exp = _csv("lag/exposure.csv") if (DOCS / "lag/exposure.csv").is_file() else []
    if exp:
        cols = [c for c in exp[0] if c != "release"]
        text += ("\n\nExposure under attacker (a) (`docs/lag/exposure.csv`):\n\n"
                 + table(["release", *cols], [[r["release"], *(_f(r[c], 4) for c in cols)]
                                               for r in exp]))  # fmt: skip
    return text + _source("lag/results.csv", "dbanon experiment lag")


# --- scale ----------------------------------------------------------------------------------------

# The goals per method: seconds at 1M and at 10M rows (check: the ratio to a bare
# GROUP BY at the server's work_mem). Goals, not measurements.
SCALE_GOALS: dict[str, tuple[float, float]] = {
    "mondrian": (4, 45), "fulldomain": (2.5, 25), "fulldomain_view": (2.5, 25),
    "anatomy": (3, 35), "kmember": (60, 600), "check": (1.3, 1.1),
}  # fmt: skip
SCALE_LABELS = {"fulldomain": "fulldomain (table)", "fulldomain_view": "fulldomain (view)",
                "kmember": "kmember (partitioned above 100,000 rows)",
                "check": "check CLI / bare GROUP BY at the server's work_mem"}  # fmt: skip


def _scale_runs(rows: int) -> dict[str, dict[str, Any]]:
    """Every method's measurement at ROWS; a later re-run of some methods replaces them."""
    got = dict(_json(f"scale-bench/rows_{rows}.json")["methods"])
    rerun = DOCS / "scale-bench" / f"rows_{rows}_mondrian_kmember.json"
    if rerun.exists():
        got |= json.loads(rerun.read_text())["methods"]
    return got


def _scale_cell(name: str, m: dict[str, Any], goal: float) -> list[str]:
    if name == "check":
        return [f"{m['ratio']:.2f}x ({m['seconds']:.2f} vs {m['bare_group_by_seconds']:.2f} s)",
                f"{m['peak_rss_mb']:,.0f}", f"<= {goal}x", "yes" if m["ratio"] <= goal else "no"]
    c = m.get("checked", {})
    what = (f"k={c['k']}: smallest class {c['min_class']}" if "min_class" in c
            else f"l={c.get('l')}: fewest distinct {c.get('min_distinct')}")  # fmt: skip
    return [f"{m['seconds']:.1f} / {m['publish_seconds']:.1f}",
            f"{m['peak_rss_mb']:,.0f}", f"<= {goal:g} s",
            ("yes" if m["seconds"] <= goal else "no")
            + ("" if c.get("holds", True) else f", **check failed** ({what})")]  # fmt: skip


@block("scale-bench")
def _scale_bench() -> str:
    one, ten = _scale_runs(1_000_000), _scale_runs(10_000_000)
    body = []
    for name, (g1, g10) in SCALE_GOALS.items():
        body.append([SCALE_LABELS.get(name, name), *_scale_cell(name, one[name], g1),
                     *_scale_cell(name, ten[name], g10)])  # fmt: skip
    head = ["method", "1M: process / publish s", "peak RSS MiB", "goal", "met",
            "10M: process / publish s", "peak RSS MiB", "goal", "met"]
    checks = []
    for rows, runs in (("1M", one), ("10M", ten)):
        held = [n for n, m in runs.items() if m.get("checked", {}).get("holds")]
        checks.append(f"{rows}: {len(held)} of {len(runs) - 1} releases")
    same = one["check"]
    text = table(head, body) + (
        "\n\nThe independent check held for " + "; ".join(checks) + ". Given dbanon's own "
        f"work_mem, the bare GROUP BY takes {same['bare_group_by_same_work_mem_seconds']:.2f} s "
        f"at 1M rows ({same['ratio_same_work_mem']:.2f}x) and "
        f"{ten['check']['bare_group_by_same_work_mem_seconds']:.1f} s at 10M "
        f"({ten['check']['ratio_same_work_mem']:.2f}x)."
    )
    return text + _source("scale-bench/rows_*.json", "dbanon --json bench scale --rows N")


# Issue 33's goals: the ratio of a publish's process seconds to the floor measured in the same
# run (writing the release once plus one GROUP BY over its QIs), and peak RSS at 1M rows.
FLOOR_GOALS: dict[str, tuple[float, int]] = {
    "fulldomain": (1.5, 300), "fulldomain_view": (1.5, 300), "anatomy": (1.5, 300),
    "localanatomy": (1.5, 300), "rfka_view": (1.5, 300), "hamdist_view": (1.5, 300),
    "mondrian": (2, 300), "cbg": (3, 300), "lag": (3, 300), "thetak": (3, 300),
    "ina": (2, 300), "noise": (2, 300), "rfka": (2, 300), "hamdist": (2, 300),
    "kmember": (3, 300), "safepub": (2, 300), "check": (1.2, 100),  # safepub: issue 36's
}  # fmt: skip


def _floor_rows(rows: int = 1_000_000) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A scale run (docs/scale-bench/floor_ROWS.json) and per method: its ratio to the floor
    (check: to a bare GROUP BY at the same work_mem), goals (FLOOR_GOALS: 1M rows' memory;
    at 10M a method may hold five times as much, 1.5 GB), whether both are met, the
    independent check, and the largest phases of the publish."""
    d = _json(f"scale-bench/floor_{rows}.json")
    methods = dict(d["methods"])
    for later in _later_runs(rows):  # each method's ratio is to its own run's floor
        methods |= later["methods"]
    scale = 5 if rows >= 10_000_000 else 1  # 300 MiB at 1M, 1.5 GB at 10M; check stays 100
    out = []
    for name, m in methods.items():
        goal, rss = FLOOR_GOALS.get(name, (float("nan"), 0))
        rss = rss if name == "check" else rss * scale
        ratio = m["ratio_same_work_mem"] if name == "check" else m["floor_ratio"]
        top = sorted(((v, k) for k, v in m.get("timings", {}).items()
                      if isinstance(v, int | float)), reverse=True)[:3]  # fmt: skip
        out.append({
            "name": name, "m": m, "ratio": ratio, "goal": goal, "rss_goal": rss,
            "met": ratio <= goal and m["peak_rss_mb"] <= rss,
            "held": m.get("checked", {}).get("holds"),
            "phases": ", ".join(f"{k} {v:.1f} s" for v, k in top) or "-",
        })  # fmt: skip
    return d, out


def _later_runs(rows: int) -> list[dict[str, Any]]:
    """Later runs at ROWS (scale-bench/floor_ROWS_*.json; wave10 after wave9): their figures win."""
    files = (DOCS / "scale-bench").glob(f"floor_{rows}_*.json")
    return [json.loads(p.read_text()) | {"file": p.name}
            for p in sorted(files, key=lambda p: re.sub(r"\d+", lambda m: m[0].zfill(9), p.name))]


def _later_said(rows: int) -> str:
    """Which methods come from a later run (the last that has them), with its floor."""
    runs = _later_runs(rows)
    last = {n: i for i, r in enumerate(runs) for n in r["methods"]}
    return "".join(
        f" {', '.join(f'`{n}`' for n in r['methods'] if last[n] == i)}: a later run "
        f"({r['file']}, floor {r['floor']['seconds']:.2f} s, each ratio to its own run's floor"
        f"{'; each the median of {} publishes'.format(r['repeat']) if 'repeat' in r else ''})."
        for i, r in enumerate(runs) if any(last[n] == i for n in r["methods"])
    )  # fmt: skip


@block("scale-floor")
def _scale_floor() -> str:
    """Every method at 1M rows against the floor of the same run (docs/scale-bench/
    floor_1000000.json): process seconds, publish seconds, peak RSS, ratio, goal."""
    return _floor_table(1_000_000)


@block("scale-floor-10m")
def _scale_floor_10m() -> str:
    """The same at 10M rows (docs/scale-bench/floor_10000000.json), made as several runs."""
    return _floor_table(10_000_000)


def backends(check: dict[str, Any]) -> str:
    """How many backends counted the check's classes, in words."""
    n = check["backends"]
    return "1 backend" if n == 1 else f"{n} backends"


def _floor_table(size: int) -> str:
    d, rows = _floor_rows(size)
    floor = d["floor"]
    # runs with --floor-each: each method's ratio to the floor measured just before it too
    near = any("near_floor_ratio" in r["m"] for r in rows)
    body = []
    for r in rows:
        m = r["m"]
        if r["name"] == "check":
            parts = (f"start-up {m['startup_seconds']:.2f} s, the query "
                     f"{m['query_ratio_same_work_mem']:.2f}x on {backends(m)}; with --worst "
                     f"{m['worst_seconds']:.2f} s")  # fmt: skip
            body.append(["check", f"{m['seconds']:.2f}", "-", f"{m['peak_rss_mb']:,.0f}",
                         f"{r['ratio']:.2f}x a bare GROUP BY", *(["-"] if near else []),
                         f"<= {r['goal']}x, {r['rss_goal']} MiB", "yes" if r["met"] else "no",
                         "-", parts])  # fmt: skip
            continue
        just = [f"{m['near_floor_ratio']:.1f}x" if "near_floor_ratio" in m else "-"]
        body.append([r["name"], f"{m['seconds']:.1f}", f"{m['publish_seconds']:.1f}",
                     f"{m['peak_rss_mb']:,.0f}", f"{r['ratio']:.1f}x", *(just if near else []),
                     f"<= {r['goal']:g}x, {r['rss_goal']} MiB", "yes" if r["met"] else "no",
                     "holds" if r["held"] else "**fails**", r["phases"]])  # fmt: skip
    runs = d.get("runs")  # a long run made as several, each with the floor measured in it
    floors = ", ".join(f"{r['floor']:.1f} s" for r in runs or [])
    said = (f"{len(runs)} runs of `--methods` groups, each measuring the floor (write the "
            f"release once + one GROUP BY) before its methods: {floors}; each method's ratio "
            "is to its own run's floor"
            if runs else
            f"the floor (write the release once {floor['write_seconds']:.2f} s + one GROUP BY "
            f"{floor['group_by_seconds']:.2f} s) is {floor['seconds']:.2f} s")  # fmt: skip
    return f"{d['rows']:,} rows, k={d['k']}, l={d['l']}; {said}.{_later_said(size)}\n\n" + table(
        ["method", "process s", "publish s", "peak RSS MiB", "ratio to the floor",
         *(["ratio to the floor measured just before it"] if near else []), "goal",
         "met", "independent check", "largest phases of the publish (its run's timings)"],
        body,
    ) + _source(f"scale-bench/floor_{size}.json",
                f"dbanon --json bench scale --rows {size}" + (" --methods ..." if runs else ""))


@block("readme-scale")
def _readme_scale() -> str:
    """The README's speed at a million rows: each method's gap to its goal and the phase that
    holds most of it, in one line each."""
    d, rows = _floor_rows()
    met = [r["name"] for r in rows if r["met"]]
    lines = [
        f"On {d['rows']:,} census-like rows the floor, writing the release once plus one GROUP "
        f"BY, takes {d['floor']['seconds']:.1f} s. "
        + (f"Within their goals: {', '.join(met)}." if met else "No method is within its goal "
           "yet.") + " The ratio is process seconds over the floor's; the goal is issue 33's."
        + _later_said(d["rows"]),
        "",
    ]  # fmt: skip
    for r in rows:
        m = r["m"]
        what = "a bare GROUP BY" if r["name"] == "check" else "the floor"
        mem = f"{m['peak_rss_mb']:,.0f} MiB (goal {r['rss_goal']})"
        tail = (f"; most time in {r['phases']}" if r["name"] != "check" else
                f"; {m['startup_seconds']:.2f} s of it is the process starting, the query "
                f"is {m['query_ratio_same_work_mem']:.2f}x on {backends(m)}")  # fmt: skip
        lines.append(f"- `{r['name']}`: {r['ratio']:.1f}x {what} (goal {r['goal']:g}x), {mem}"
                     f"{tail}.")
    return "\n".join(lines) + _source("scale-bench/floor_1000000.json",
                                      "dbanon --json bench scale --rows 1000000")


GROWTH = ("growth_100000", "growth_300000", "growth_1000000")  # one session, both methods


@block("scale-growth")
def _scale_growth() -> str:
    """(θ,k) and cbg: seconds as the table grows, and the exponent (issue 23's goal: at most
    1.2): the least-squares slope of log seconds on log rows over the sizes measured, and
    between the two largest; for the publish and for its `cluster` phase (the algorithm)."""
    import math

    def slopes(points: list[tuple[int, float]]) -> tuple[float, float]:
        xs = [math.log(n) for n, _ in points]
        ys = [math.log(t) for _, t in points]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        fit = (sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
               / sum((x - mx) ** 2 for x in xs))  # fmt: skip
        return fit, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])

    runs = [_json(f"scale-bench/{f}.json") for f in GROWTH]
    body = []
    for name in ("thetak", "cbg"):
        ms = [(d["rows"], d["methods"][name]) for d in runs]
        for label, seconds in (("publish", lambda m: m["publish_seconds"]),
                               ("cluster", lambda m: m["timings"]["cluster"])):  # fmt: skip
            points = [(n, seconds(m)) for n, m in ms]
            fit, last = slopes(points)
            body.append([name, label, ", ".join(f"{n:,} rows {t:.1f} s" for n, t in points),
                         f"{fit:.2f}", f"{last:.2f}"])  # fmt: skip
    return table(["method", "seconds of", "as the table grows", "exponent (fit over all)",
                  "exponent (two largest)"], body) + _source(
        f"scale-bench/{{{','.join(GROWTH)}}}.json",
        "dbanon --json bench scale --rows N --methods cbg,thetak")


# --- the in-memory and lattice benchmarks (docs/benchmarks/) ------------------------------------


def _bench(name: str) -> dict[str, Any]:
    return _json(f"benchmarks/{name}.json")


@block("bench-measured")
def _bench_measured() -> str:
    d = _bench("measured")
    return (f"Measured {d['measured']} at commit {d['commit']} on {d['machine']}; each figure "
            "is a single run of the command named, its JSON in `docs/benchmarks/`.")  # fmt: skip


@block("bench-kmember")
def _bench_kmember() -> str:
    body = []
    for name in ("kmember", "kmember_45222", "kmember_ncp_furthest",
                 "kmember_8000_ncp_furthest"):  # fmt: skip
        d = _bench(name)
        body.append([f"{d['rows']:,}", f"{d['cost']}, {d['seeding']}", str(d["k"]),
                     f"{d['seconds']:.3f}", _pct(d["ncp_height"]), _pct(d["ncp_leaf"]),
                     f"`{name}.json`"])  # fmt: skip
    return table(["rows", "cost, seeding", "k", "seconds", "ncp_height", "ncp_leaf", "file"],
                 body)  # fmt: skip


@block("bench-mondrian")
def _bench_mondrian() -> str:
    body = []
    for name in ("mondrian_ordered", "mondrian_hierarchies"):
        d = _bench(name)
        body.append([d["setting"], f"{d['rows']:,}", str(d["k"]), f"{d['seconds']:.4f}",
                     _pct(d["gcp"]), f"{d['classes']:,}", f"`{name}.json`"])  # fmt: skip
    return table(["setting", "rows", "k", "seconds (best of 20)", "gcp (ncp_height)", "classes",
                  "file"], body)  # fmt: skip


@block("bench-fulldomain")
def _bench_fulldomain() -> str:
    body = []
    for name in ("fulldomain", "fulldomain_l2_suppression5"):
        d = _bench(name)
        model = f"k={d['k']}" + (f", distinct l={d['l']} of {d['sensitive']}" if d["l"] else "")
        levels = ", ".join(f"{q}={v}" for q, v in d["levels"].items())
        pub = d["publish"]
        body.append([model, f"{d['max_suppression']:.0%}", f"{d['nodes']:,}",
                     str(d["nodes_checked"]), f"{d['seconds']:.2f}", levels,
                     f"{d['suppressed']:,}", _pct(d["loss"]), f"{pub['seconds']:.2f}",
                     f"{pub['beyond_search']:.2f}", f"`{name}.json`"])  # fmt: skip
    return table(["models", "suppression at most", "lattice nodes", "nodes checked", "seconds",
                  "optimum (level per QI)", "rows suppressed", "NCP", "publish s (end to end)",
                  "publish s beyond its search", "file"], body)  # fmt: skip


@block("bench-thetak")
def _bench_thetak() -> str:
    d = _bench("thetak")
    growth = "; ".join(f"{g['rows']:,} rows {g['seconds']:.2f} s" for g in d["growth"])
    return (f"{d['rows']:,} rows, k={d['k']}, θ={d['theta']}: **{d['seconds']:.2f} s**, "
            f"gcp (ncp_height) {_pct(d['gcp'])}, {d['classes']:,} classes, "
            f"{d['leftover_rows']:,} leftover rows. Growth with n: {growth} (`thetak.json`"
            + (f"; re-measured {d['measured']} at commit {d['commit']}, load average "
               f"{d['load']}, under the {d['rule']} class condition" if "commit" in d else "")
            + ").")


@block("bench-check")
def _bench_check() -> str:
    d = _bench("check")
    return (f"{d['rows']:,} rows, {len(d['qi'])} QIs, {d['classes']:,} classes: k-anonymity "
            f"(k={d['k']}) **{d['seconds_k']:.2f} s**, distinct l-diversity "
            f"{d['seconds_l']:.2f} s (`check.json`).")


# --- refresh under churn (docs/refresh-soak/soak.json) ---------------------------------------


@block("soak-detail")
def _soak_detail() -> str:
    d = _json("refresh-soak/soak.json")
    mid = d["refreshes"] // 2
    body = []
    for name, m in d["methods"].items():
        runs = [r for r in m["runs"] if "error" not in r]
        first, last = runs[0], runs[-1]
        at_mid = next((r for r in runs if r["step"] == mid), None)
        stale = [r["stale_flags"] for r in runs if r.get("stale_flags")]
        body.append([name, f"{len(runs) - 1} of {d['refreshes']}", f"{first['ncp']:.3f}",
                     f"{at_mid['ncp']:.3f}" if at_mid else "-", f"{last['ncp']:.3f}",
                     f"{first['classes']:,} → {last['classes']:,}", f"{last['rows']:,}",
                     f"{sum(r['seconds'] for r in runs) / len(runs):.1f}",
                     f"{stale[0]:,} → {stale[-1]:,}" if stale else "-"])  # fmt: skip
    return table(["method", "refreshes that succeeded", "gcp at publish", f"after {mid}",
                  f"after {d['refreshes']}", f"classes at publish → after {d['refreshes']}",
                  f"rows after {d['refreshes']}", "seconds per run (mean)",
                  "stale flag rows ignored (first → last)"], body)  # fmt: skip


@block("refresh-cost")
def _refresh_cost() -> str:
    """Each refresh against its publish, every run in a process of its own (`bench soak
    --processes`): seconds and peak RSS, and the refresh of the unchanged source."""
    d = _json("refresh-cost/soak.json")
    body = []
    for name, m in d["methods"].items():
        c = m.get("cost") or {}
        failed = next((r["error"] for r in m["runs"] if "error" in r), None)
        if not c or failed:
            body.append([name, *["-"] * 6, failed or "no isolated runs"])
            continue
        body.append([name, f"{c['publish_seconds']:.1f}", f"{c['publish_peak_rss_mb']:.0f}",
                     _spread(m, "refresh_seconds_ratio"), _spread(m, "refresh_rss_ratio"),
                     f"{c['unchanged_refresh_seconds']:.1f}",
                     "yes" if c["unchanged_same_release"] else "no", "-"])  # fmt: skip
    churn = d["churn"]
    repeats = (f" The medians of {d['repeat']} soaks of the same tables (`--repeat "
               f"{d['repeat']}`), the least and most of them in brackets." if d.get("repeat")
               else "")  # fmt: skip
    return table(["method", "publish s", "publish peak RSS MB", "refresh / publish seconds",
                  "refresh / publish peak RSS", "refresh of the unchanged source s",
                  "same release", "failure"], body) + (
        f"\n\n{d['rows']:,} rows, k={d['k']}; before the refresh {churn['updates']:.0%} of the "
        f"rows updated, {churn['deletes']:.0%} deleted, {churn['inserts']:.0%} inserted; "
        "seconds and peak RSS of each run's own process (`dbanon bench soak --processes`)."
        + repeats
    )  # fmt: skip


def _spread(m: dict[str, Any], name: str) -> str:
    """A soak's cost figure (a ratio), with the least and most of its repeats when repeated."""
    text = f"{m['cost'][name]:.2f}x"
    if len(m.get("repeats", [])) > 1:
        values = [r[name] for r in m["repeats"]]
        text += f" ({min(values):.2f}-{max(values):.2f})"
    return text


# --- the sealed refresh policy under churn (docs/sealed-soak/) -------------------------------


@block("sealed-soak")
def _sealed_soak() -> str:
    """Rows released and withheld under `sealed`: with deletes and updates, with deletes only,
    with inserts only (the persist policy's runs of the insert-only soak beside them), the run
    of issue 31's acceptance command, and the sealed code before issue 31."""
    body = []
    kinds = (("churn", ""), ("deletes", ""), ("inserts", ""), ("acceptance", ""),
             ("before-31", " (before issue 31)"))  # fmt: skip
    for kind, note in kinds:
        d = _json(f"sealed-soak/{kind}/soak.json")
        c = d["churn"]
        what = ", ".join(f"{v:.0%} {k}" for k, v in c.items() if v) + f", seed {d['seed']}"
        mid = d["refreshes"] // 2
        for name, m in d["methods"].items():
            runs = [r for r in m["runs"] if "error" not in r]
            at = {r["step"]: r for r in runs}

            def shown(r: dict[str, Any]) -> str:
                total = r["rows"] + (r.get("withheld_rows") or 0)
                return f"{r['rows']:,} of {total:,} ({r['rows'] / total:.0%})"

            body.append([what + note, name, f"{len(runs) - 1} of {d['refreshes']}",
                         shown(at[mid]) if mid in at else "-", shown(runs[-1]),
                         f"{runs[0]['ncp']:.3f}", f"{runs[-1]['ncp']:.3f}"])  # fmt: skip
    d = _json("sealed-soak/churn/soak.json")
    return table(["churn before each refresh", "method", "refreshes that succeeded",
                  f"rows released after {d['refreshes'] // 2}",
                  f"after {d['refreshes']}", "gcp at publish", "gcp after the last"],
                 body) + _source("sealed-soak/{churn,deletes,inserts,acceptance}/soak.json",
                                 f"dbanon bench soak --rows {d['rows']} --refreshes "
                                 f"{d['refreshes']} --seed {d['seed']} --methods ... "
                                 "[--updates 0] [--deletes 0 --updates 0]; acceptance: "
                                 "dbanon bench soak --methods kmember-sealed,mondrian-sealed "
                                 "--rows 10000 --refreshes 20 (seed 0); before-31: the "
                                 "churn soak's k-member and Mondrian runs at eaa5f60")  # fmt: skip


# --- a reader's wait while a release is refreshed (docs/locking/) -----------------------------


@block("swap-runs")
def _swap_runs() -> str:
    d = _json("locking/bench_swap_200000.json")
    runs = d["runs"]
    body = [[str(i), f"{r['refresh_seconds']:.0f}", f"{r['lock_held_seconds'] * 1000:.0f}",
             f"{r['swap_seconds'] * 1000:.0f}", f"{r['record_and_commit_seconds'] * 1000:.0f}",
             f"{r['longest_reader_wait_seconds'] * 1000:.0f}"]
            for i, r in enumerate(runs, 1)]  # fmt: skip
    waits = sorted(r["longest_reader_wait_seconds"] for r in runs)
    held = sorted(r["lock_held_seconds"] for r in runs)
    under = sum(w < 0.1 for w in waits)

    def median(x: list[float]) -> float:
        n = len(x)
        return x[n // 2] if n % 2 else (x[n // 2 - 1] + x[n // 2]) / 2

    return table(["refresh", "seconds", "lock held (ms)", "swap itself (ms)",
                  "record + commit (ms)", "longest reader wait (ms)"], body) + (
        f"\n\nLongest reader wait over the {len(runs)} refreshes: "
        f"**{d['longest_reader_wait_seconds'] * 1000:.0f} ms** ({under} of {len(runs)} "
        f"refreshes under 100 ms; median of the per-refresh longest waits "
        f"{median(waits) * 1000:.0f} ms); lock held at most "
        f"{d['longest_lock_held_seconds'] * 1000:.0f} ms (median {median(held) * 1000:.0f} ms); "
        f"a refresh took {d['median_refresh_seconds']:.0f} s (median); the reader's median query "
        f"with no refresh running {d['reader_baseline_median_seconds'] * 1000:.2f} ms."
    )  # fmt: skip


# --- noise over refreshes: the known-change attack (docs/noise/attack*.json) ----------------


@block("noise-attack")
def _noise_attack() -> str:
    """Per configuration and known change: what one release and two releases leave of each
    changed person's true value, before issue 31 (noise keyed on the value) and now."""
    before, now = _json("noise/attack-before.json"), _json("noise/attack.json")
    body = []
    for label, conf in now["configs"].items():
        for change, c in conf["changes"].items():
            b = before["configs"][label]["changes"][change]
            cells = [[f"{d['one_min']} / {d['one_median']:g}", f"{d['two_min']} / "
                      f"{d['two_median']:g}", str(d["narrowed"]), str(d["pinned"])]
                     for d in (b, c)]  # fmt: skip
            cells[1][2] = f"**{cells[1][2]}**"
            body.append([f"`{label}`", change, f"{c['changed']} ({c['linked']} linked)",
                         *cells[0], *cells[1]])  # fmt: skip
    head = ["release", "known change", "changed people (linked by equal values)",
            "before: one release, min / median", "two releases", "narrowed", "pinned",
            "now: one release", "two releases", "narrowed", "pinned"]  # fmt: skip
    return table(head, body) + (
        f"\n\n{now['rows']:,} rows, {now['changed_per_change']} people per known change, seed "
        f"{now['seed']}. From `docs/noise/attack-before.json` ({before['code']}) and "
        f"`docs/noise/attack.json` ({now['code']}), written by `python tests/noiserefresh.py "
        "--out FILE --label TEXT`."
    )  # fmt: skip


# --- SafePub against k-anonymity (docs/dp/results.csv) ----------------------------------------

DP_LABELS = {"original": "the source", "safepub_levels": "SafePub, fixed levels",
             "safepub_search": "SafePub, private search",
             "kanon_fulldomain": "k-anonymity (full-domain)"}  # fmt: skip


@block("dp-results")
def _dp_results() -> str:
    """SafePub (both schemes) and k-anonymity on Adult: NCP with leaf counts, query error and
    SVM AUC, means with their 95 % intervals over the seeds (`dbanon experiment dp`)."""
    rows = _csv("dp/results.csv")
    order = {m: i for i, m in enumerate(DP_LABELS)}
    rows = sorted(rows, key=lambda r: (order[r["method"]], float(r["epsilon"] or 0),
                                       int(r["k"])))  # fmt: skip
    body = []
    for r in rows:
        body.append([DP_LABELS[r["method"]], r["epsilon"] or "-", r["k"],
                     r["search_epsilon"] or "-", _pm(r, "ncp_leaf", 3),
                     _pm(r, "ncp_leaf_released", 3), _pm(r, "query_error_median", 3),
                     _pm(r, "auc", 3), _pct(r["released_share"], 1),
                     f"`{r['levels']}`" + (f" ({r['levels_varied']} nodes over the seeds)"
                                           if int(r["levels_varied"] or 1) > 1 else "")
                     if r["levels"] else "-"])  # fmt: skip
    first = rows[0]
    head = (f"Adult, {int(first['rows']):,} rows, δ = 1e-5, {first['seeds']} seeds per setting "
            "(k-anonymity repeats only the AUC's draws):\n\n")
    return head + table(
        ["release", "ε", "k", "ε_search", "NCP (leaf counts)", "NCP of released rows",
         "query error (median)", "SVM AUC", "rows released", "levels (QI order: age, "
         "workclass, education, marital_status, race, sex, native_country)"], body,
    ) + _source("dp/results.csv", "dbanon experiment dp")  # fmt: skip
