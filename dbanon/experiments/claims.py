"""docs/claims.md: every claim of every paper, judged from the experiments' committed CSVs.

Each claim names the paper's statement, the CSV it is judged on (under docs/), and a judge that
reads the rows and returns our figure (with its spread where the experiment repeats a setting)
and a verdict: holds, fails, partly, undecided (a paired difference whose interval straddles 0)
or not testable (its CSV is not committed). A claim that does not hold carries its cause where
one is measured, computed from the rows it describes.
The rules every judge keeps are dbanon.experiments.claim's; every CSV is made by the code as it
is (dbanon.experiments.provenance, tests/test_provenance.py). `dbanon experiment claims` writes
the file; a test regenerates it and compares, so the table cannot drift from the measurements.
Other modules of claims (each a tuple of dbanon.experiments.claim.Claim) join CLAIMS here.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from dbanon.experiments import provenance
from dbanon.experiments.claim import (
    FAILS,
    HOLDS,
    PARTLY,
    UNDECIDED,
    UNTESTED,
    Claim,
    Judged,
    Rows,
    at_most,
)
from dbanon.experiments.claimbase import _share
from dbanon.experiments.claims_dp import CLAIMS_DP
from dbanon.experiments.claims_personalised import CLAIMS_PERSONALISED
from dbanon.experiments.stats import at_least, spread

__all__ = ["CLAIMS", "FAILS", "HOLDS", "PARTLY", "UNDECIDED", "UNTESTED", "Claim", "at_most",
           "render", "write"]  # fmt: skip


def _f(row: dict[str, str], col: str) -> float:
    return float(row[col])


def _by(rows: Rows, *cols: str) -> dict[tuple[str, ...], dict[str, str]]:
    return {tuple(r[c] for c in cols): r for r in rows}


def _ks(rows: Rows) -> list[str]:
    return sorted({r["k"] for r in rows}, key=float)


def _ci(row: dict[str, str], col: str, scale: float = 1.0, digits: int = 3) -> str:
    half = row.get(f"{col}_ci95")
    value = f"{_f(row, col) * scale:.{digits}f}"
    return value if not half else f"{value} ± {float(half) * scale:.{digits}f}"


def _paired(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float, str]:
    """Runs on the same seeds, "a >= b": the mean difference, its 95 % interval and the
    verdict per dbanon.experiments.stats (holds: the interval above 0)."""
    j = at_least(a, b)
    return float(j["difference"]), float(j["ci95_low"]), float(j["ci95_high"]), str(j["verdict"])


def _mean_ci(values: Sequence[float], digits: int = 3) -> str:
    mean, _, half = spread(values)
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


# --- the k-member paper ----------------------------------------------------------------------


def _kmember_loss(rows: Rows) -> Judged:
    by = _by(rows, "algorithm", "k")
    ks = _ks(rows)
    good = [k for k in ks if _f(by["kmember", k], "total_il_height")
            < _f(by["mondrian", k], "total_il_height")]  # fmt: skip
    ratio = [_f(by["mondrian", k], "total_il_height") / _f(by["kmember", k], "total_il_height")
             for k in ks]  # fmt: skip
    fig, verdict = _share(good, ks, "k with lower Total-IL")
    return f"{fig}; Mondrian / k-member {min(ratio):.1f}-{max(ratio):.1f}x", verdict


def _kmember_time(rows: Rows) -> Judged:
    by = _by(rows, "algorithm", "k")
    ks = _ks(rows)
    good = [k for k in ks if _f(by["kmember", k], "seconds") > _f(by["mondrian", k], "seconds")]
    return _share(good, ks, "k where k-member is slower (single runs)")


# --- (θ,k)-anonymity: judged on every seed's figures (thetak/seeds.csv) -----------------------

THETA = 3
BASELINES = (("kmember", "k-member"), ("pk", "(p,k)"))


def _runs(rows: Rows, dataset: str, algorithm: str, k: str, field: str) -> list[float]:
    """One figure of every seed of a setting, in the seeds' order (the pairing)."""
    got = sorted((int(r["seed"]), float(r[field])) for r in rows
                 if r["dataset"] == dataset and r["algorithm"] == algorithm and r["k"] == k)
    if not got:
        raise LookupError(f"no runs of {algorithm} at k={k} on {dataset}")
    return [v for _, v in got]


def _thetak(dataset: str, rule: str, field: str) -> Callable[[Rows], Judged]:
    """(θ,k) with `rule` less vulnerable than both baselines at every k, on the paired seeds:
    a k holds where both differences (baseline minus (θ,k)) have their interval above 0."""

    def judge(rows: Rows) -> Judged:
        rows = [r for r in rows if r["dataset"] == dataset]
        ks = _ks(rows)
        state = {}
        for k in ks:
            mine = _runs(rows, dataset, rule, k, field)
            verdicts = [_paired(_runs(rows, dataset, b, k, field), mine)[3] for b, _ in BASELINES]
            state[k] = (HOLDS if all(v == HOLDS for v in verdicts)
                        else FAILS if any(v == FAILS for v in verdicts) else "undecided")
        good = [k for k in ks if state[k] == HOLDS]
        fig, verdict = _share(good, ks, "k where both paired differences are above 0")
        worse = [k for k in ks if state[k] == FAILS]
        first, last = ks[0], ks[-1]

        def at(k: str) -> str:
            return (f"k={k}: {_mean_ci(_runs(rows, dataset, rule, k, field))} vs k-member "
                    f"{_mean_ci(_runs(rows, dataset, 'kmember', k, field))}")  # fmt: skip

        return (f"{fig}; more vulnerable than a baseline (interval below 0): "
                f"{', '.join(worse) or 'none'}; {at(first)}; {at(last)}", verdict)  # fmt: skip

    return judge


def _mean(rows: Rows, dataset: str, algorithm: str, k: str, field: str) -> float:
    return float(np.mean(_runs(rows, dataset, algorithm, k, field)))


def _thetak_vulnerability_cause(dataset: str, rule: str, field: str) -> Callable[[Rows], str]:
    """Why (θ,k) is not shown less vulnerable, where it is measured: the k whose paired
    differences straddle 0 (the seeds' spread decides nothing there), and for the similarity
    share, a baseline's classes below 1/θ (they mix more than θ categories, which (θ,k) caps at
    θ). Empty where neither is measured."""

    def cause(rows: Rows) -> str:
        rows = [r for r in rows if r["dataset"] == dataset]
        ks = _ks(rows)
        unsure, worse = [], []
        for k in ks:
            mine = _runs(rows, dataset, rule, k, field)
            verdicts = [_paired(_runs(rows, dataset, b, k, field), mine)[3] for b, _ in BASELINES]
            if FAILS in verdicts:
                worse.append(k)
            elif any(v != HOLDS for v in verdicts):
                unsure.append(k)
        out = []
        if unsure:
            seeds = len(_runs(rows, dataset, rule, ks[0], field))
            out.append(f"{dataset}: the seeds' spread: at k={', '.join(unsure)} a paired "
                       f"difference's interval over the {seeds} seeds straddles 0")  # fmt: skip
        below = [k for k in worse if _mean(rows, dataset, "kmember", k, field) < 1 / THETA]
        if field == "similarity_vulnerability" and below:
            last = below[-1]
            out.append(f"{dataset}: where a baseline is safer (k={', '.join(worse)}), k-member's "
                       f"classes mix more than θ={THETA} categories: its mean share is below "
                       f"1/θ = {1 / THETA:.3f} ({_mean(rows, dataset, 'kmember', last, field):.3f} "
                       f"at k={last}), while (θ,k) holds each class to θ categories "
                       f"({_mean(rows, dataset, rule, last, field):.3f})")  # fmt: skip
        return "; ".join(out)

    return cause


def _thetak_loss(dataset: str, rule: str) -> Callable[[Rows], Judged]:
    def judge(rows: Rows) -> Judged:
        rows = [r for r in rows if r["dataset"] == dataset]
        ks = _ks(rows)
        extra = {k: _mean(rows, dataset, rule, k, "gcp")
                 - max(_mean(rows, dataset, b, k, "gcp") for b, _ in BASELINES)
                 for k in ks}  # fmt: skip
        good = [k for k in ks if extra[k] <= 2.0]
        fig, verdict = _share(good, ks, "k within 2 NCP points (means over the seeds)")
        lo, hi = min(extra.values()), max(extra.values())
        return f"{fig}; extra NCP {lo:+.1f} to {hi:+.1f} points", verdict

    return judge


def _thetak_loss_cause(dataset: str, rule: str) -> Callable[[Rows], str]:
    """The class counts behind the extra loss, at the k where it is largest: (θ,k)'s classes
    against k-member's, the most classes any grouping meeting the paper's condition can have
    (and the category that binds it), and the rows left over to swell them."""

    def cause(rows: Rows) -> str:
        rows = [r for r in rows if r["dataset"] == dataset]
        ks = _ks(rows)
        extra = {k: _mean(rows, dataset, rule, k, "gcp") - _mean(rows, dataset, "kmember", k, "gcp")
                 for k in ks}  # fmt: skip
        k = max(ks, key=lambda x: extra[x])
        one = next(r for r in rows if r["k"] == k and r["algorithm"] == rule)
        text = (f"{dataset}, k={k}: {_mean(rows, dataset, rule, k, 'classes'):.0f} classes "
                f"against k-member's {_mean(rows, dataset, 'kmember', k, 'classes'):.0f}")
        if rule != "thetak_relaxed":
            text += (f"; the paper's condition allows at most {one['class_bound']} (bound by "
                     f"'{one['bound_by']}')")
        left = _mean(rows, dataset, rule, k, "leftover_rows")
        return text + (f"; {left:.0f} rows left over swell them" if left else "")

    return cause


def _thetak_slowest(dataset: str, rule: str) -> Callable[[Rows], Judged]:
    """(θ,k) takes the most time: both paired differences of the seconds above 0."""

    def judge(rows: Rows) -> Judged:
        rows = [r for r in rows if r["dataset"] == dataset]
        ks = _ks(rows)
        good = [k for k in ks if all(
            _paired(_runs(rows, dataset, rule, k, "seconds"),
                    _runs(rows, dataset, b, k, "seconds"))[3] == HOLDS
            for b, _ in BASELINES)]  # fmt: skip
        fig, verdict = _share(good, ks, "k where it is slower than both, paired")
        ratio = [_mean(rows, dataset, rule, k, "seconds")
                 / max(_mean(rows, dataset, b, k, "seconds") for b, _ in BASELINES)
                 for k in ks]  # fmt: skip
        return f"{fig}; (θ,k) / the slower baseline {min(ratio):.1f}-{max(ratio):.1f}x", verdict

    return judge


def _grows(dataset: str, algorithm: str, field: str, unit: str) -> Callable[[Rows], Judged]:
    """A figure grows with k: every step between successive k rises (means over the seeds), and
    the largest k against the smallest on the paired seeds has its interval above 0."""

    def judge(rows: Rows) -> Judged:
        rows = [r for r in rows if r["dataset"] == dataset]
        ks = _ks(rows)
        means = [_mean(rows, dataset, algorithm, k, field) for k in ks]
        falls = [f"{a}→{b}" for a, b, x, y in zip(ks, ks[1:], means, means[1:], strict=False)
                 if y <= x]  # fmt: skip
        diff, lo, hi, paired = _paired(_runs(rows, dataset, algorithm, ks[-1], field),
                                       _runs(rows, dataset, algorithm, ks[0], field))  # fmt: skip
        verdict = (HOLDS if paired == HOLDS and not falls else PARTLY if paired == HOLDS
                   else FAILS if paired == FAILS else UNDECIDED)  # fmt: skip
        return (f"steps between successive k where it does not rise: "
                f"{', '.join(falls) or 'none'}; k={ks[0]}: {means[0]:.3f}, k={ks[-1]}: "
                f"{means[-1]:.3f} {unit}; paired k={ks[-1]} minus k={ks[0]}: {diff:+.3f} "
                f"[{lo:+.3f}, {hi:+.3f}]", verdict)  # fmt: skip

    return judge


def _classes_at(rows: Rows, dataset: str, rule: str, k: str) -> str:
    """What (θ,k) built at k: its classes, the paper's bound on them, the rows left over."""
    one = next(r for r in rows if r["k"] == k and r["algorithm"] == rule)
    left = _mean(rows, dataset, rule, k, "leftover_rows")
    return (f"k={k}: {_mean(rows, dataset, rule, k, 'classes'):.0f} classes (the paper's "
            f"condition allows at most {one['class_bound']}), {left:.0f} rows left over")


def _grows_cause(dataset: str, algorithm: str, field: str) -> Callable[[Rows], str]:
    """Where the growth is not shown: the seeds' spread of the paired difference; where the
    time falls, the classes (θ,k) builds at the smallest and largest k (fewer classes to grow,
    the rest of the rows only joined to them)."""

    def cause(rows: Rows) -> str:
        rows = [r for r in rows if r["dataset"] == dataset]
        ks = _ks(rows)
        last, first = (_runs(rows, dataset, algorithm, k, field) for k in (ks[-1], ks[0]))
        _, lo, hi, verdict = _paired(last, first)
        if verdict == UNDECIDED:
            return (f"{dataset}: the seeds' spread: the paired interval over {len(last)} seeds "
                    f"straddles 0")  # fmt: skip
        if verdict == FAILS and field == "seconds":
            return (f"{dataset}: fewer classes to build as k grows: "
                    f"{_classes_at(rows, dataset, algorithm, ks[0])}; "
                    f"{_classes_at(rows, dataset, algorithm, ks[-1])}")  # fmt: skip
        return ""

    return cause


def _slowest_cause(dataset: str, rule: str) -> Callable[[Rows], str]:
    """At the k where (θ,k) is not the slowest: the classes it built there."""

    def cause(rows: Rows) -> str:
        rows = [r for r in rows if r["dataset"] == dataset]
        fast = [k for k in _ks(rows) if not all(
            _paired(_runs(rows, dataset, rule, k, "seconds"),
                    _runs(rows, dataset, b, k, "seconds"))[3] == HOLDS
            for b, _ in BASELINES)]  # fmt: skip
        if not fast:
            return ""
        return (f"{dataset}: where it is not the slowest, the paper's condition leaves it few "
                f"classes to build: " + "; ".join(_classes_at(rows, dataset, rule, k)
                                                  for k in fast))  # fmt: skip

    return cause


# --- INA ---------------------------------------------------------------------------------------


def _apart_below(hi_row: dict[str, str], lo_row: dict[str, str], field: str) -> bool:
    """hi_row's figure below lo_row's, their 95 % intervals apart (independent copies)."""
    return (_f(hi_row, field) + float(hi_row.get(f"{field}_ci95") or 0)
            < _f(lo_row, field) - float(lo_row.get(f"{field}_ci95") or 0))


def _ina_falls(field: str) -> Callable[[Rows], Judged]:
    def judge(rows: Rows) -> Judged:
        by = _by(rows, "k", "sample")
        ks = _ks(rows)
        samples = sorted({r["sample"] for r in rows}, key=int)
        lo, hi = samples[0], samples[-1]
        good = [k for k in ks if _apart_below(by[k, hi], by[k, lo], field)]
        fig, verdict = _share(good, ks, f"k where sample {hi} is below {lo}, intervals apart")
        detail = "; ".join(
            f"k={k}: {_ci(by[k, lo], field, digits=2)} → {_ci(by[k, hi], field, digits=2)}"
            for k in ks
        )
        return f"{fig}; {detail} (%)", verdict

    return judge


def _ina_spread_cause(field: str) -> Callable[[Rows], str]:
    """Where the fall is not shown but the mean falls: the two samples' intervals overlap."""

    def cause(rows: Rows) -> str:
        by = _by(rows, "k", "sample")
        samples = sorted({r["sample"] for r in rows}, key=int)
        lo, hi = samples[0], samples[-1]
        overlap = [k for k in _ks(rows) if not _apart_below(by[k, hi], by[k, lo], field)
                   and _f(by[k, hi], field) < _f(by[k, lo], field)]  # fmt: skip
        if not overlap:
            return ""
        return (f"the copies' spread: at k={', '.join(overlap)} the mean falls but the 95 % "
                f"intervals over the copies overlap")  # fmt: skip

    return cause


def _ina_chameleon_cause(rows: Rows) -> str:
    """The clusterer: on the same perturbed copies Chameleon's error is far above k-means'."""
    cham = [_f(r, "chameleon") for r in rows]
    km = [_f(r, "kmeans") for r in rows]
    sd = max(_f(r, "chameleon_sd") for r in rows)
    return (f"the clusterer: on the same perturbed copies Chameleon misclassifies "
            f"{min(cham):.1f}-{max(cham):.1f} % (standard deviation over the copies up to "
            f"{sd:.1f} %) where k-means misclassifies {min(km):.1f}-{max(km):.1f} %")  # fmt: skip


def _ina_table3_cause(rows: Rows) -> str:
    """The clusterer against the noise: Chameleon's error on the unperturbed data, and on the
    perturbed copies its error and spread beside k-means' on the same copies."""
    if "truth_error_chameleon" not in rows[0]:
        return ""
    truth = max(_f(r, "truth_error_chameleon") for r in rows)
    return (f"the noise, not the settings: on the unperturbed data Chameleon misclassifies at "
            f"most {truth:.1f} %; "
            + _ina_chameleon_cause(rows).removeprefix("the clusterer: "))  # fmt: skip


def _ina_refs(rows: Rows) -> Judged:
    by = _by(rows, "k", "sample")
    ks = _ks(rows)
    samples = sorted({r["sample"] for r in rows}, key=int)
    good = [k for k in ks if _f(by[k, samples[-1]], "refs") > _f(by[k, samples[0]], "refs")]
    detail = "; ".join(f"k={k}: " + " / ".join(f"{_f(by[k, s], 'refs'):.1f}" for s in samples)
                       for k in ks)  # fmt: skip
    fig, verdict = _share(good, ks, "k where they grow")
    return f"{fig}; reference points per sample {'/'.join(samples)}: {detail}", verdict


def _ina_pairs(rows: Rows, algorithm: str) -> dict[str, tuple[float, float, float, str]]:
    """Per setting, uniform noise minus INA over the copies (each copy's uniform twin has its
    security): the mean, its 95 % interval and the verdict of "INA misclassifies less"."""
    settings: dict[str, list[dict[str, str]]] = {}
    for r in sorted(rows, key=lambda r: (int(r["k"]), int(r["sample"]), int(r["copy"]))):
        settings.setdefault(f"k={r['k']} s={r['sample']}", []).append(r)
    return {name: _paired([_f(r, f"uniform_{algorithm}") for r in rs],
                          [_f(r, algorithm) for r in rs])
            for name, rs in settings.items()}  # fmt: skip


def _ina_vs_uniform(algorithm: str) -> Callable[[Rows], Judged]:
    """INA below uniform noise of the same security, paired copy by copy."""

    def judge(rows: Rows) -> Judged:
        pairs = _ina_pairs(rows, algorithm)
        good = [n for n, p in pairs.items() if p[3] == HOLDS]
        worse = [n for n, p in pairs.items() if p[3] == FAILS]
        verdict = HOLDS if len(good) == len(pairs) else FAILS if not good else PARTLY
        return (f"settings where INA misclassifies less, paired over the copies: {len(good)} of "
                f"{len(pairs)}; more: {', '.join(worse) or 'none'}; undecided: "
                f"{len(pairs) - len(good) - len(worse)}", verdict)  # fmt: skip

    return judge


def _ina_vs_uniform_cause(algorithm: str) -> Callable[[Rows], str]:
    """The settings where uniform noise of the same security does as well or better, with the
    paired difference (uniform minus INA, points of %)."""

    def cause(rows: Rows) -> str:
        pairs = _ina_pairs(rows, algorithm)
        worse = [f"{n}: {p[0]:+.2f} [{p[1]:+.2f}, {p[2]:+.2f}]"
                 for n, p in pairs.items() if p[3] == FAILS]  # fmt: skip
        unsure = [p for p in pairs.values() if p[3] == UNDECIDED]
        out = [f"uniform noise lower (uniform minus INA): {'; '.join(worse)}"] if worse else []
        if unsure:
            widest = max((p[2] - p[1]) / 2 for p in unsure)
            out.append(f"the copies' spread: at {len(unsure)} settings the paired interval "
                       f"straddles 0 (half-widths up to {widest:.2f} points)")  # fmt: skip
        return "; ".join(out)

    return cause


def _ina_rises_with_k(algorithm: str) -> Callable[[Rows], Judged]:
    """Misclassification at the most clusters above the fewest, per sample, intervals apart
    (each k is a database of its own: independent copies, no pairing)."""

    def judge(rows: Rows) -> Judged:
        by = _by(rows, "k", "sample")
        ks = _ks(rows)
        samples = sorted({r["sample"] for r in rows}, key=int)
        few, most = ks[0], ks[-1]
        good = [s for s in samples if _apart_below(by[few, s], by[most, s], algorithm)]
        fig, verdict = _share(good, samples, f"samples where k={most} is above k={few}, "
                              "intervals apart")  # fmt: skip
        detail = "; ".join(f"sample {s}: " + " / ".join(f"{_f(by[k, s], algorithm):.2f}"
                                                         for k in ks) for s in samples)  # fmt: skip
        return f"{fig}; k={'/'.join(ks)}: {detail} (%)", verdict

    return judge


def _ina_vs_paper(algorithm: str) -> Callable[[Rows], Judged]:
    """Our mean within the paper's cell, up to our 95 % interval, in every (k, sample)."""

    def judge(rows: Rows) -> Judged:
        good = [f"k={r['k']} s={r['sample']}" for r in rows
                if abs(_f(r, algorithm) - _f(r, f"paper_{algorithm}"))
                <= float(r.get(f"{algorithm}_ci95") or 0)]  # fmt: skip
        ours = [_f(r, algorithm) for r in rows]
        paper = [_f(r, f"paper_{algorithm}") for r in rows]
        truth = max(_f(r, f"truth_error_{algorithm}") for r in rows)
        verdict = HOLDS if len(good) == len(rows) else FAILS if not good else PARTLY
        return (f"cells within our interval of the paper's: {len(good)} of {len(rows)}; ours "
                f"{min(ours):.1f}-{max(ours):.1f} %, the paper's {min(paper):.1f}-"
                f"{max(paper):.1f} %; on the unperturbed data {truth:.1f} %", verdict)  # fmt: skip

    return judge


PAPER_UNIFORM_ERROR = 4.0  # % misclassified by uniform noise at 2 % security, as the paper has it
PAPER_MSEC = (0.84, 4.44)  # % the range of the paper's Table 1


def _uniform_2pct(algorithm: str) -> Callable[[Rows], Judged]:
    """Uniform noise at 2 % security misclassifies above 4 %: at each k the interval over the
    copies above 4."""

    def judge(rows: Rows) -> Judged:
        ks = _ks(rows)
        by = _by(rows, "k")
        good = [k for k in ks if _f(by[k,], algorithm) - float(by[k,].get(f"{algorithm}_ci95") or 0)
                > PAPER_UNIFORM_ERROR]  # fmt: skip
        fig, verdict = _share(good, ks, f"k where it is above {PAPER_UNIFORM_ERROR:g} %, interval "
                              "and all")  # fmt: skip
        detail = "; ".join(f"k={k}: {_ci(by[k,], algorithm, digits=2)}" for k in ks)
        return f"{fig}; {detail} (%)", verdict

    return judge


def _uniform_2pct_cause(algorithm: str) -> Callable[[Rows], str]:
    """The data's separation against the noise's reach; for Chameleon, beside it, its spread
    over the copies against k-means' on the same ones."""

    def cause(rows: Rows) -> str:
        if "separation" not in rows[0]:
            return ""
        sep = [_f(r, "separation") for r in rows]
        half = [_f(r, "noise_half_width") for r in rows]
        data = (f"the data: two clusters' points are at least {min(sep):.2f} apart, and uniform "
                f"noise at 2 % security moves a coordinate by at most {min(half):.2f}-"
                f"{max(half):.2f} (range 0-10), so few points reach another cluster's")  # fmt: skip
        if algorithm == "kmeans":
            return data
        sd = max(_f(r, f"{algorithm}_sd") for r in rows)
        km = max(_f(r, "kmeans") for r in rows)
        return (f"the clusterer: Chameleon's error has a standard deviation up to {sd:.1f} % "
                f"over the copies, where k-means misclassifies at most {km:.2f} % of the same "
                f"copies; {data}")  # fmt: skip

    return cause


def _msec_magnitude(rows: Rows) -> Judged:
    """Our mSec (mean over the copies) within the range of the paper's Table 1."""
    lo, hi = PAPER_MSEC
    inside = [f"k={r['k']} s={r['sample']}" for r in rows if lo <= _f(r, "msec") <= hi]
    msec = [_f(r, "msec") for r in rows]
    verdict = HOLDS if len(inside) == len(rows) else FAILS if not inside else PARTLY
    return (f"settings within the paper's {lo:g}-{hi:g} %: {len(inside)} of {len(rows)} "
            f"({', '.join(inside) or 'none'}); ours {min(msec):.1f}-{max(msec):.1f} %", verdict)


def _msec_cause(rows: Rows) -> str:
    """The noise is half the gap between a tuple's two nearest reference points: fewer
    reference points, wider gaps, more noise. Measured: the rank correlation of the reference
    points with mSec over the settings."""
    from scipy.stats import spearmanr

    refs = [_f(r, "refs") for r in rows]
    msec = [_f(r, "msec") for r in rows]
    rho = float(spearmanr(refs, msec)[0])
    return (f"the data's reference points: the noise is half the gap between a tuple's two nearest "
            f"ones, and our databases give {min(refs):.1f}-{max(refs):.1f} of them per copy; "
            f"mSec falls as they grow (rank correlation {rho:+.2f} over the {len(rows)} "
            f"settings); the paper's data, which set its count, is not published")  # fmt: skip


# --- RFKA: judged on every run's figures (rfka/seeds.csv) ---------------------------------------


def _rfka_runs(rows: Rows, method: str, k: str, field: str) -> list[float]:
    got = sorted((int(r["seed"]), float(r[field])) for r in rows
                 if r["method"] == method and r["k"] == k)  # fmt: skip
    return [v for _, v in got]


def _rfka_auc(dataset: str) -> Callable[[Rows], Judged]:
    """RFKA's AUC at least Greedy_Hamdist's at each k, on the paired runs (same row order and
    folds): holds where the difference's interval does not reach below 0, fails where it is
    wholly below, undecided between."""

    def judge(rows: Rows) -> Judged:
        rows = [r for r in rows if r["dataset"] == dataset and r["k"] != "0"]
        ks = _ks(rows)
        state, detail = {}, []
        for k in ks:
            diff, lo, hi, _ = _paired(_rfka_runs(rows, "rfka", k, "auc"),
                                      _rfka_runs(rows, "hamdist", k, "auc"))  # fmt: skip
            state[k] = HOLDS if lo >= 0 else FAILS if hi < 0 else "undecided"
            detail.append(f"k={k}: {diff:+.3f} [{lo:+.3f}, {hi:+.3f}]")
        runs = len(_rfka_runs(rows, "rfka", ks[0], "auc"))
        below = [k for k in ks if state[k] == FAILS]
        unsure = [k for k in ks if state[k] == "undecided"]
        verdict = (HOLDS if not below and not unsure else FAILS if len(below) == len(ks)
                   else UNDECIDED if len(unsure) == len(ks) else PARTLY)  # fmt: skip
        return (f"k where RFKA is below (paired difference over {runs} runs, interval below 0): "
                f"{', '.join(below) or 'none'}; undecided: {', '.join(unsure) or 'none'}; "
                f"RFKA minus Greedy_Hamdist: {'; '.join(detail)}", verdict)  # fmt: skip

    return judge


def _rfka_auc_cause(dataset: str) -> Callable[[Rows], str]:
    """At each k where RFKA is below: how many features each keeps, and RFKA's commonest set."""

    def cause(rows: Rows) -> str:
        rows = [r for r in rows if r["dataset"] == dataset and r["k"] != "0"]
        out, unsure = [], []
        for k in _ks(rows):
            diff, lo, hi, _ = _paired(_rfka_runs(rows, "rfka", k, "auc"),
                                      _rfka_runs(rows, "hamdist", k, "auc"))  # fmt: skip
            if lo < 0 <= hi:
                unsure.append(k)
            if hi >= 0:
                continue
            sets = [r["chosen"] for r in rows if r["method"] == "rfka" and r["k"] == k]
            ham = next(r["chosen"] for r in rows if r["method"] == "hamdist" and r["k"] == k)
            common = max(sorted(set(sets)), key=sets.count)  # ties: the first in order
            out.append(f"k={k}: the forest's order keeps "
                       f"{np.mean(_rfka_runs(rows, 'rfka', k, 'features')):.1f} features "
                       f"({common}) where the Hamming order keeps "
                       f"{np.mean(_rfka_runs(rows, 'hamdist', k, 'features')):.1f} ({ham})")
        if unsure:
            runs = len(_rfka_runs(rows, "rfka", unsure[0], "auc"))
            sets = len({r["chosen"] for r in rows if r["method"] == "rfka" and r["k"] == unsure[0]})
            out.append(f"the runs' spread: at k={', '.join(unsure)} the paired interval over "
                       f"{runs} runs straddles 0; the forest's order kept {sets} different "
                       f"feature sets over the runs at k={unsure[0]}")  # fmt: skip
        return "; ".join(out)

    return cause


def _rfka_time(dataset: str) -> Callable[[Rows], Judged]:
    def judge(rows: Rows) -> Judged:
        rows = [r for r in rows if r["dataset"] == dataset and r["k"] != "0"]
        ks = _ks(rows)
        good = [k for k in ks if _paired(_rfka_runs(rows, "hamdist", k, "seconds"),
                                         _rfka_runs(rows, "rfka", k, "seconds"))[3]
                == HOLDS]  # fmt: skip
        ratio = [np.mean(_rfka_runs(rows, "rfka", k, "seconds"))
                 / np.mean(_rfka_runs(rows, "hamdist", k, "seconds")) for k in ks]  # fmt: skip
        fig, verdict = _share(good, ks, "k where RFKA is faster, paired")
        return f"{fig}; RFKA / Greedy_Hamdist {min(ratio):.0f}-{max(ratio):.0f}x", verdict

    return judge


def _rfka_time_cause(dataset: str) -> Callable[[Rows], str]:
    """The ranking step against the search, from the runs' own timings."""

    def cause(rows: Rows) -> str:
        rows = [r for r in rows if r["dataset"] == dataset and r["k"] != "0"]
        ks = _ks(rows)

        def share(method: str, col: str) -> float:
            return float(np.mean([np.mean(_rfka_runs(rows, method, k, col)) for k in ks]))

        return (f"the ranking: RFKA's forest takes {share('rfka', 'seconds_rank'):.1f} s of its "
                f"{share('rfka', 'seconds'):.1f} s (mean over k), Greedy_Hamdist ranks in "
                f"{share('hamdist', 'seconds_rank'):.2f} s; the searches take "
                f"{share('rfka', 'seconds_search'):.2f} s and "
                f"{share('hamdist', 'seconds_search'):.2f} s")  # fmt: skip

    return cause


THETAK_RULES = (("thetak_paper", "the paper's construction, nearest-class"),
                ("thetak_nearest", "greedy construction, nearest-class"),
                ("thetak", "default (paper's condition, greedy), dbanon's category"),
                ("thetak_relaxed", "relaxed rule, greedy, dbanon's category"))  # fmt: skip
# The new (θ,k) claims (time, growth with k) for the paper's construction and dbanon's default.
THETAK_TIMED = (THETAK_RULES[0], THETAK_RULES[2])
RFKA_SEEDS = "rfka/seeds.csv"
THETAK_SEEDS = "thetak/seeds.csv"

CLAIMS: tuple[Claim, ...] = (
    Claim("k-member (Byun et al.)", "greedy k-member loses less information (Total-IL) than "
          "median partitioning at every k", "kmember/results.csv", _kmember_loss),
    Claim("k-member (Byun et al.)", "greedy k-member is slower than median partitioning",
          "kmember/results.csv", _kmember_time),
    *(
        Claim("(θ,k)-anonymity (Cheng, Liu et al.)",
              f"{dataset}, {label} leftovers: (θ,k) is less vulnerable to the "
              f"{what} than k-anonymity and (p,k)-anonymity at every k",
              THETAK_SEEDS, _thetak(dataset, rule, field),
              _thetak_vulnerability_cause(dataset, rule, field))
        for dataset in ("hospital", "adult")
        for rule, label in THETAK_RULES
        for field, what in (("background_vulnerability", "background-knowledge attack"),
                            ("similarity_vulnerability", "similarity attack (mean share)"),
                            ("majority_category_vulnerability",
                             "similarity attack (majority category)"))
    ),
    *(
        Claim("(θ,k)-anonymity (Cheng, Liu et al.)",
              f"{dataset}, {label} leftovers: (θ,k) costs at most about 2 NCP points more than "
              "the baselines", THETAK_SEEDS, _thetak_loss(dataset, rule),
              _thetak_loss_cause(dataset, rule))
        for dataset in ("hospital", "adult")
        for rule, label in THETAK_RULES
    ),
    *(
        claim
        for dataset in ("hospital", "adult")
        for rule, label in THETAK_TIMED
        for claim in (
            Claim("(θ,k)-anonymity (Cheng, Liu et al.)", f"{dataset}, {label} leftovers: (θ,k) "
                  "takes the most time of the three at every k", THETAK_SEEDS,
                  _thetak_slowest(dataset, rule), _slowest_cause(dataset, rule)),
            Claim("(θ,k)-anonymity (Cheng, Liu et al.)", f"{dataset}, {label} leftovers: "
                  "(θ,k)'s information loss grows with k", THETAK_SEEDS,
                  _grows(dataset, rule, "gcp", "NCP %"), _grows_cause(dataset, rule, "gcp")),
            Claim("(θ,k)-anonymity (Cheng, Liu et al.)", f"{dataset}, {label} leftovers: "
                  "(θ,k)'s run time grows with k", THETAK_SEEDS,
                  _grows(dataset, rule, "seconds", "s"),
                  _grows_cause(dataset, rule, "seconds")),
        )
    ),
    Claim("INA (Wang, Zheng & Liao)", "minimum data security falls as the sample grows",
          "ina/results.csv", _ina_falls("msec"), _ina_spread_cause("msec")),
    Claim("INA (Wang, Zheng & Liao)", "more reference points as the sample grows (the paper's "
          "mechanism for the falling security)", "ina/results.csv", _ina_refs),
    Claim("INA (Wang, Zheng & Liao)", "k-means misclassification falls as the sample grows",
          "ina/results.csv", _ina_falls("kmeans"), _ina_spread_cause("kmeans")),
    Claim("INA (Wang, Zheng & Liao)", "Chameleon misclassification falls as the sample grows",
          "ina/results.csv", _ina_falls("chameleon"), _ina_chameleon_cause),
    Claim("INA (Wang, Zheng & Liao)", "INA misclassifies less than uniform noise of the same "
          "security (k-means)", "ina/copies.csv", _ina_vs_uniform("kmeans"),
          _ina_vs_uniform_cause("kmeans")),
    Claim("INA (Wang, Zheng & Liao)", "INA misclassifies less than uniform noise of the same "
          "security (Chameleon)", "ina/copies.csv", _ina_vs_uniform("chameleon"),
          _ina_vs_uniform_cause("chameleon")),
    Claim("INA (Wang, Zheng & Liao)", "k-means misclassification rises with the number of "
          "clusters", "ina/results.csv", _ina_rises_with_k("kmeans")),
    Claim("INA (Wang, Zheng & Liao)", "Chameleon misclassification rises with the number of "
          "clusters", "ina/results.csv", _ina_rises_with_k("chameleon"), _ina_chameleon_cause),
    Claim("INA (Wang, Zheng & Liao)", "uniform noise at 2 % security misclassifies more than "
          "4 % (k-means)", "ina/baseline.csv", _uniform_2pct("kmeans"),
          _uniform_2pct_cause("kmeans")),
    Claim("INA (Wang, Zheng & Liao)", "uniform noise at 2 % security misclassifies more than "
          "4 % (Chameleon)", "ina/baseline.csv", _uniform_2pct("chameleon"),
          _uniform_2pct_cause("chameleon")),
    Claim("INA (Wang, Zheng & Liao)", "INA's minimum data security is of the paper's "
          "magnitude (Table 1: 0.84-4.44 %)", "ina/results.csv", _msec_magnitude, _msec_cause),
    Claim("INA (Wang, Zheng & Liao)", "Chameleon's misclassification is the paper's Table 3 "
          "(a few per cent)", "ina/results.csv", _ina_vs_paper("chameleon"), _ina_table3_cause),
    *(
        Claim("RFKA (Huang & Zhu)", f"{dataset}: RFKA's SVM AUC is at least Greedy_Hamdist's at "
              "every k", RFKA_SEEDS, _rfka_auc(dataset), _rfka_auc_cause(dataset))
        for dataset in ("adult", "breast_cancer", "breast_cancer_all")
    ),
    *(
        Claim("RFKA (Huang & Zhu)", f"{dataset}: RFKA is faster than Greedy_Hamdist at every k",
              RFKA_SEEDS, _rfka_time(dataset), _rfka_time_cause(dataset))
        for dataset in ("adult", "breast_cancer")
    ),
    *CLAIMS_PERSONALISED,
    *CLAIMS_DP,
)


def _rows(docs: Path, source: str) -> Rows | None:
    path = docs / source
    if not path.is_file():
        return None
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _judged(c: Claim, rows: Rows | None) -> tuple[str, str, str]:
    """(figure, verdict, cause) of one claim; a cause only where the claim does not hold."""
    if rows is None:
        return f"docs/{c.source} not committed", UNTESTED, ""
    try:
        figure, verdict = c.judge(rows)
    except (LookupError, ValueError):  # a CSV of an older run, without those rows or columns
        return "not in the committed CSV (an older run)", UNTESTED, ""
    if verdict not in (FAILS, PARTLY, UNDECIDED):
        return figure, verdict, ""
    try:
        return figure, verdict, c.cause(rows) if callable(c.cause) else c.cause
    except (LookupError, ValueError, ZeroDivisionError):  # a CSV without what the cause reads
        return figure, verdict, ""


def _evidence(docs: Path, claims: Sequence[Claim]) -> list[str]:
    """Each experiment's run the figures come from: its commit and what it left out."""
    lines = ["", "## The runs judged", "", "| experiment | CSVs | commit | settings | note |",
             "|---|---|---|---|---|"]  # fmt: skip
    for name in dict.fromkeys(provenance.owner(c.source)[0] for c in claims):
        csvs = sorted({c.source for c in claims if provenance.owner(c.source)[0] == name})
        record = provenance.read(docs, name)
        if record is None:
            cells = [name, ", ".join(csvs), "no provenance", "", ""]
        else:
            settings = "; ".join(f"{k}={v}" for k, v in sorted(record["settings"].items()))
            cells = [name, ", ".join(csvs), record["commit"][:10], settings, record["note"]]
        lines.append("| " + " | ".join(str(x).replace("|", "/") for x in cells) + " |")
    return lines


def render(docs: str | Path) -> str:
    """The claims table as markdown, judged from the CSVs under `docs`."""
    docs = Path(docs)
    claims = CLAIMS
    body: list[str] = []
    verdicts: list[str] = []
    paper = None
    for c in claims:
        if c.paper != paper:
            paper = c.paper
            body += ["", f"## {paper}", "", "| claim | our figure | verdict | cause |",
                     "|---|---|---|---|"]  # fmt: skip
        figure, verdict, cause = _judged(c, _rows(docs, c.source))
        verdicts.append(verdict)
        cells = [c.statement, f"{figure} (docs/{c.source})", f"**{verdict}**", cause]
        body.append("| " + " | ".join(x.replace("|", "/") for x in cells) + " |")
    count = ", ".join(f"{verdicts.count(v)} {v}"
                      for v in (HOLDS, PARTLY, FAILS, UNDECIDED, UNTESTED))  # fmt: skip
    lines = [
        "# The papers' claims, judged",
        "",
        "Generated by `dbanon experiment claims` from the experiments' CSVs under docs/ "
        "(`tests/test_claims.py` regenerates it and compares; `tests/test_provenance.py` fails "
        "when a CSV was not made by the code as it is). Figures with ± are means with the "
        "half-width of their 95 % interval over the experiment's seeds, runs or copies; "
        "differences in brackets are paired over the runs that share their seeds, with their "
        "95 % interval. A cause is computed from the rows the claim is judged on; none is "
        "given where none is measured.",
        "",
        f"{len(claims)} claims: {count}.",
        "",
    ]
    return "\n".join([*lines, *body, *_evidence(docs, claims)]) + "\n"


def write(docs: str | Path) -> Path:
    path = Path(docs) / "claims.md"
    path.write_text(render(docs))
    return path
