"""The thesis's claims (ch. 3 CBG, ch. 4 local anatomy, ch. 5 LAG), judged from the committed
CSVs of dbanon.experiments.cbg, .localanatomy and .lag; spliced into docs/claims.md by
dbanon.experiments.claims.

Why a module of their own: the thesis states some thirty findings over three chapters, and
chapter 5's are judged twice, once for each reading of LAG_2 (Top-down with re-balancing,
dbanon's default, and Algorithm 5.3 as written). Where a claim fails, the figure carries what
the data say about why (group counts, feasibility, growth per l) beside the cause column.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from dbanon.experiments.claimbase import (
    FAILS,
    HOLDS,
    PARTLY,
    Claim,
    Judged,
    Rows,
    _by,
    _f,
    _share,
    at_most,
)

THESIS_3 = "Thesis ch. 3 (CBG)"
THESIS_4 = "Thesis ch. 4 (local anatomy)"
THESIS_5 = "Thesis ch. 5 (LAG)"
ANATOMY_SEMI = 0.65  # the thesis's Anatomy exposure of semi-sensitive values (§4.4.1)


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3f}"


def _verdict(good: int, every: int) -> str:
    return HOLDS if good == every else FAILS if not good else PARTLY


# --- chapter 3 (CBG) ----------------------------------------------------------------------------


def _cbg_l(rows: Rows, method: str, salary: str = "flat") -> dict[str, dict[str, str]]:
    return {r["l"]: r for r in rows if r["part"] == "l" and r["method"] == method
            and r.get("salary", "flat") == salary}  # fmt: skip


def _cbg_lowest_exposure(rows: Rows) -> Judged:
    """On the largest exposure of any person (the bound is per person), not the mean."""
    cbg, mon, ana = (_cbg_l(rows, m) for m in ("cbg", "mondrian", "anatomy"))
    ls = sorted(cbg, key=int)
    col = "exposure_max"
    good = [ell for ell in ls
            if _f(cbg[ell], col) < min(_f(mon[ell], col), _f(ana[ell], col))]  # fmt: skip
    return _share(good, ls, "l where CBG's largest exposure is lowest")


def _mondrian_below_anatomy(rows: Rows) -> Judged:
    mon, ana = _cbg_l(rows, "mondrian"), _cbg_l(rows, "anatomy")
    ls = sorted(mon, key=int)
    good = [ell for ell in ls if _f(mon[ell], "exposure") < _f(ana[ell], "exposure")]
    fig, verdict = _share(good, ls, "l where Mondrian's exposure is below Anatomy's")
    last = ls[-1]
    return (f"{fig}; l={last}: Mondrian {_f(mon[last], 'exposure'):.4f}, Anatomy "
            f"{_f(ana[last], 'exposure'):.4f}", verdict)  # fmt: skip


def _cbg_error_vs(column: str, other: str, below: bool, salary: str = "flat"
                  ) -> Callable[[Rows], Judged]:  # fmt: skip
    """CBG's error below (or above) `other`'s at every l, for one salary profile."""

    def judge(rows: Rows) -> Judged:
        cbg, them = _cbg_l(rows, "cbg", salary), _cbg_l(rows, other, salary)
        ls = sorted(cbg, key=int)
        good = [ell for ell in ls
                if (_f(cbg[ell], column) < _f(them[ell], column)) == below]  # fmt: skip
        word = "below" if below else "above"
        fig, verdict = _share(good, ls, f"l where CBG's error is {word} {other.title()}'s")
        return (f"{fig}; l={ls[0]}: {_f(cbg[ls[0]], column):.1f} vs "
                f"{_f(them[ls[0]], column):.1f}, l={ls[-1]}: {_f(cbg[ls[-1]], column):.1f} vs "
                f"{_f(them[ls[-1]], column):.1f}", verdict)  # fmt: skip

    return judge


def _cbg_profile(column: str, salary: str) -> Callable[[Rows], Judged]:
    """CBG below Mondrian for one salary profile, with Mondrian's DM (its group sizes) and
    CBG's at each l beside the errors: what the profile changes."""
    below = _cbg_error_vs(column, "mondrian", True, salary)

    def judge(rows: Rows) -> Judged:
        fig, verdict = below(rows)
        cbg, mon = _cbg_l(rows, "cbg", salary), _cbg_l(rows, "mondrian", salary)
        dm = ", ".join(f"l={ell}: {_f(mon[ell], 'dm'):,.0f} vs {_f(cbg[ell], 'dm'):,.0f}"
                       for ell in sorted(cbg, key=int))  # fmt: skip
        return f"{fig}; DM Mondrian vs CBG {dm}", verdict

    return judge


def _cbg_dm_constant(rows: Rows) -> Judged:
    dms = [_f(r, "dm") for r in _cbg_l(rows, "cbg").values()]
    ratio = max(dms) / min(dms)
    return f"max/min DM over l: {ratio:.3f}", HOLDS if ratio <= 1.05 else FAILS


def _mondrian_meets_bound(rows: Rows) -> Judged:
    mon = _cbg_l(rows, "mondrian")
    ls = sorted(mon, key=int)
    good = [ell for ell in ls if at_most(mon[ell]["exposure_max"], Fraction(1, int(ell)))]
    return _share(good, ls, "l where Mondrian's largest exposure is at most 1/l")


def _cbg_error_growth_with_k(rows: Rows) -> Judged:
    """Fig. 3.11: the larger l, the faster CBG's error grows with k (growth = error at the
    largest k over error at the smallest, per fixed l)."""
    sweep: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["part"] == "k" and r.get("salary", "flat") == "flat":
            sweep.setdefault(r["l"], {})[r["k"]] = _f(r, "query_error")
    ls = sorted(sweep, key=int)
    growth = {}
    for ell in ls:
        ks = sorted(sweep[ell], key=int)
        growth[ell] = sweep[ell][ks[-1]] / sweep[ell][ks[0]]
    steps = [ell for a, ell in zip(ls, ls[1:], strict=False) if growth[ell] > growth[a]]
    detail = ", ".join(f"l={ell}: {growth[ell]:.2f}x" for ell in ls)
    return (f"error growth from the smallest to the largest k: {detail}; l steps where it grows "
            f"faster: {len(steps)} of {len(ls) - 1}",
            _verdict(len(steps), len(ls) - 1))  # fmt: skip


def _cbg_lowest_exposure_cause(rows: Rows) -> str:
    """At each l where CBG's largest exposure is not the lowest: the three largest exposures,
    and whether the lowest other one ties CBG's at 1/l."""
    by = {m: _cbg_l(rows, m) for m in ("cbg", "mondrian", "anatomy")}
    col, parts, ties = "exposure_max", [], 0
    for ell in sorted(by["cbg"], key=int):
        mine = _f(by["cbg"][ell], col)
        other = min(("mondrian", "anatomy"), key=lambda m: _f(by[m][ell], col))
        theirs = _f(by[other][ell], col)
        if mine < theirs:
            continue
        ties += mine == theirs and at_most(by["cbg"][ell][col], Fraction(1, int(ell)))
        parts.append(f"l={ell}: CBG {by['cbg'][ell][col]} vs {other.title()} "
                     f"{by[other][ell][col]} (1/l = {1 / int(ell):.6f})")  # fmt: skip
    if not parts:
        return ""
    return (f"ties at the bound: where CBG is not lowest its largest exposure equals another's, "
            f"both at 1/l, at {ties} of {len(parts)} l ({'; '.join(parts)})")  # fmt: skip


def _mondrian_below_anatomy_cause(rows: Rows) -> str:
    """Where Mondrian's exposure is not below Anatomy's: both exposures as a share of 1/l, and
    the rows per group (rows over classes) that make Mondrian's groups the larger."""
    mon, ana = _cbg_l(rows, "mondrian"), _cbg_l(rows, "anatomy")
    parts, larger = [], 0
    for ell in sorted(mon, key=int):
        m, a = _f(mon[ell], "exposure"), _f(ana[ell], "exposure")
        if m < a:
            continue
        size = {n: _f(r[ell], "rows") / _f(r[ell], "classes") for n, r in (("m", mon), ("a", ana))}
        larger += size["m"] > size["a"]
        parts.append(f"l={ell}: Mondrian {m:.4f} ({m * int(ell):.2f} of 1/l), Anatomy {a:.4f} "
                     f"({a * int(ell):.2f} of 1/l), with {size['m']:.1f} against "
                     f"{size['a']:.1f} rows per group")  # fmt: skip
    if not parts:
        return ""
    return (f"the group sizes: where it does not hold Mondrian's groups are the larger at "
            f"{larger} of {len(parts)} l, yet its mean exposure is as near 1/l as Anatomy's: "
            + "; ".join(parts))  # fmt: skip


def _cbg_error_cause(column: str, salary: str = "flat") -> Callable[[Rows], str]:
    """Where CBG's error is not below Mondrian's: CBG's boxes are the wider (GCP) though its
    groups are the smaller (DM), with the error ratio beside."""

    def cause(rows: Rows) -> str:
        cbg, mon = _cbg_l(rows, "cbg", salary), _cbg_l(rows, "mondrian", salary)
        bad = [ell for ell in sorted(cbg, key=int)
               if _f(cbg[ell], column) >= _f(mon[ell], column)]  # fmt: skip
        if not bad or not cbg[bad[0]].get("gcp") or not mon[bad[0]].get("gcp"):
            return ""
        wider = [ell for ell in bad if _f(cbg[ell], "gcp") > _f(mon[ell], "gcp")]
        smaller = [ell for ell in bad if _f(cbg[ell], "dm") < _f(mon[ell], "dm")]

        def at(ell: str) -> str:
            c, m = cbg[ell], mon[ell]
            return (f"l={ell}: error {_f(c, column) / _f(m, column):.1f}x Mondrian's, GCP "
                    f"{_f(c, 'gcp'):.3f} vs {_f(m, 'gcp'):.3f}, DM {_f(c, 'dm'):,.0f} vs "
                    f"{_f(m, 'dm'):,.0f}")  # fmt: skip

        shown = [bad[0]] if len(bad) == 1 else [bad[0], bad[-1]]
        return (f"the boxes: where CBG's error is not below Mondrian's ({len(bad)} l), CBG's "
                f"generalisation is wider (GCP above Mondrian's) at {len(wider)} of them and its "
                f"groups smaller (DM below) at {len(smaller)}; "
                + "; ".join(at(ell) for ell in shown))  # fmt: skip

    return cause


def _cbg_profile_cause(column: str, salary: str) -> Callable[[Rows], str]:
    """Mondrian's error against its DM over l (the salary's profile sets its groups), and how
    little CBG's DM and error move over the same l."""

    def cause(rows: Rows) -> str:
        cbg, mon = _cbg_l(rows, "cbg", salary), _cbg_l(rows, "mondrian", salary)
        ls = sorted(cbg, key=int)
        lo, hi = ls[0], ls[-1]

        def moves(r: dict[str, dict[str, str]], col: str) -> str:
            return (f"{_num(_f(r[lo], col))} → {_num(_f(r[hi], col))} "
                    f"({_f(r[hi], col) / _f(r[lo], col):.2f}x)")  # fmt: skip

        dms = [_f(r, "dm") for r in cbg.values()]
        return (f"the group sizes: from l={lo} to l={hi} Mondrian's DM grows {moves(mon, 'dm')} "
                f"and its error {moves(mon, column)}; CBG's DM stays within "
                f"{max(dms) / min(dms):.3f}x and its error moves {moves(cbg, column)}")  # fmt: skip

    return cause


def _cbg_growth_cause(rows: Rows) -> str:
    """CBG's error growth with k beside its DM growth with k, per l: the groups k sets."""
    sweep: dict[str, dict[str, dict[str, str]]] = {}
    for r in rows:
        if r["part"] == "k" and r.get("salary", "flat") == "flat":
            sweep.setdefault(r["l"], {})[r["k"]] = r
    parts, dm_growth = [], []
    for ell in sorted(sweep, key=int):
        ks = sorted(sweep[ell], key=int)
        first, last = sweep[ell][ks[0]], sweep[ell][ks[-1]]
        dm_growth.append(_f(last, "dm") / _f(first, "dm"))
        parts.append(f"l={ell}: error {_f(last, 'query_error') / _f(first, 'query_error'):.2f}x, "
                     f"DM {dm_growth[-1]:.2f}x")  # fmt: skip
    if not parts:
        return ""
    return (f"the groups: from the smallest to the largest k CBG's DM grows "
            f"{min(dm_growth):.2f}-{max(dm_growth):.2f}x at every l, whatever l: "
            + "; ".join(parts))  # fmt: skip


def _mondrian_bound_cause(rows: Rows) -> str:
    """Mondrian's mean exposure against 1/l beside its most exposed person's: a bound held on
    average, not per person."""
    mon = _cbg_l(rows, "mondrian")
    ls = sorted(mon, key=int)
    over = [ell for ell in ls if not at_most(mon[ell]["exposure_max"], Fraction(1, int(ell)))]
    if not over:
        return ""
    mean_ok = [ell for ell in over if at_most(mon[ell]["exposure"], Fraction(1, int(ell)))]
    times = [_f(mon[ell], "exposure_max") * int(ell) for ell in over]
    ends = "; ".join(f"l={ell}: mean {_f(mon[ell], 'exposure'):.4f}, largest "
                     f"{_f(mon[ell], 'exposure_max'):.4f}, 1/l {1 / int(ell):.4f}"
                     for ell in (over[0], over[-1]))  # fmt: skip
    return (f"per person, not on average: at {len(mean_ok)} of the {len(over)} l where it fails "
            f"Mondrian's mean exposure is within 1/l, while its most exposed person gets "
            f"{min(times):.2f}-{max(times):.2f}x 1/l; {ends}")  # fmt: skip


# --- chapter 4 (local anatomy) ------------------------------------------------------------------


def _la_exposure(series: tuple[str, ...]) -> Callable[[Rows], Judged]:
    """Every attribute's exposure within 1/l of the l asked for (not of an l capped to what the
    column could reach), for the attacker series named."""

    def judge(rows: Rows) -> Judged:
        rows = [r for r in rows if r["series"] in series]
        good, capped, infeasible = 0, 0, []
        for r in rows:
            ell = int(r["l"])
            # An attribute infeasible at l (feasible_<a> False: not released) is a gap, counted
            # apart; CSVs from before issue 20 have no such column and may have capped l.
            live = [a for a in ("age", "occupation")
                    if r.get(f"feasible_{a}", "True") != "False"]  # fmt: skip
            if len(live) < 2:
                infeasible.append(f"{r['density']}/{ell}")
            capped += any(r[f"l_{a}"] and int(r[f"l_{a}"]) < ell for a in live)
            # The per-person maximum where the CSV has it, else the mean its figure plots.
            good += all(at_most(r.get(f"exposure_max_{a}") or r[f"exposure_{a}"],
                                Fraction(1, ell)) for a in live)  # fmt: skip
        return (f"settings within 1/l: {good} of {len(rows)}; settings whose l was capped for a "
                f"column: {capped}; settings (density/l) with an attribute infeasible at l (not "
                f"released): {', '.join(infeasible) or 'none'}",
                _verdict(good, len(rows)))  # fmt: skip

    return judge


def _anatomy_constant(rows: Rows) -> Judged:
    """Anatomy's exposure of semi-sensitive values: constant in l, about 0.65 (density 20 %)."""
    got = [_f(r, "semi_sensitive") for r in rows
           if r["series"] == "Anatomy" and float(r["density"]) == 0.2]  # fmt: skip
    lo, hi = min(got), max(got)
    mean = sum(got) / len(got)
    constant = hi - lo <= 0.05
    near = abs(mean - ANATOMY_SEMI) <= 0.05
    verdict = HOLDS if constant and near else PARTLY if constant or near else FAILS
    return (f"{lo:.3f} to {hi:.3f} over l (mean {mean:.3f}; the thesis ≈ {ANATOMY_SEMI}, "
            f"{mean - ANATOMY_SEMI:+.3f})", verdict)  # fmt: skip


def _errors(rows: Rows, series: str, density: float = 0.2) -> dict[int, float]:
    return {int(r["l"]): _f(r, "query_error") for r in rows
            if r["series"] == series and float(r["density"]) == density}  # fmt: skip


def _la_error_vs_mondrian(rows: Rows) -> Judged:
    by = _by(rows, "series", "density", "l")
    keys = sorted({(r["density"], r["l"]) for r in rows if r["series"] == "Mondrian"})
    good = [f"{d}/{ell}" for d, ell in keys if _f(by["HeuristicLocalAnatomy", d, ell],
            "query_error") < _f(by["Mondrian", d, ell], "query_error") / 5]  # fmt: skip
    return (f"settings with LA's error under 1/5 of Mondrian's: {len(good)} of {len(keys)}",
            _verdict(len(good), len(keys)))  # fmt: skip


def _series_vs_anatomy(series: str, above: bool, below_l: int | None = None
                       ) -> Callable[[Rows], Judged]:  # fmt: skip
    """`series`'s query error above (or below) Anatomy's at every l (below `below_l` only)."""

    def judge(rows: Rows) -> Judged:
        mine, ana = _errors(rows, series), _errors(rows, "Anatomy")
        ls = [ell for ell in sorted(ana) if below_l is None or ell < below_l]
        good = [str(ell) for ell in ls if (mine[ell] > ana[ell]) == above]
        word = "above" if above else "below"
        fig, verdict = _share(good, [str(ell) for ell in ls], f"l where it is {word} Anatomy's")
        detail = ", ".join(f"l={ell}: {mine[ell]:.3f} vs {ana[ell]:.3f}" for ell in ls)
        return f"{fig}; {detail}", verdict

    return judge


def _steps(errors: dict[int, float]) -> dict[int, float]:
    ls = sorted(errors)
    return {b: errors[b] / errors[a] for a, b in zip(ls, ls[1:], strict=False)}


def _jumps_at_18(steps: dict[int, float]) -> bool:
    """A jump at l = 18: the step into 18 at least 1.3x and above the steps into its
    neighbours (the error's rise slows with l, so a step that outgrows both is a jump)."""
    if 18 not in steps:
        raise LookupError("no step into l = 18")
    around = [steps[x] for x in steps if x != 18 and abs(x - 18) <= 3]
    return steps[18] >= 1.3 and all(steps[18] > x for x in around)


def _heuristic_jump(rows: Rows) -> Judged:
    """Fig. 4.6 (density 20 %): at l = 18 the heuristic's error jumps, close to plain LA's."""
    h, plain = _errors(rows, "HeuristicLocalAnatomy"), _errors(rows, "LocalAnatomy")
    steps = _steps(h)
    detail = ", ".join(f"l={b}: {x:.2f}x" for b, x in steps.items())
    return (f"step of the heuristic's error into each l: {detail}; at l=18 it is "
            f"{h[18] / plain[18]:.2f} of plain LA's",
            HOLDS if _jumps_at_18(steps) else FAILS)  # fmt: skip


def _jump_by_density(series: str | None) -> Callable[[Rows], Judged]:
    """Figs 4.8 / 4.10: every density's curve rises sharply at l = 18 (`series` None: the rows
    of tcloseness.csv, one series per density)."""

    def judge(rows: Rows) -> Judged:
        rows = [r for r in rows if series is None or r["series"] == series]
        dens = sorted({float(r["density"]) for r in rows})
        good, detail = 0, []
        for d in dens:
            steps = _steps({int(r["l"]): _f(r, "query_error") for r in rows
                            if float(r["density"]) == d})  # fmt: skip
            good += _jumps_at_18(steps)
            detail.append(f"{d:.0%}: " + " / ".join(f"{steps[x]:.2f}x" for x in (15, 18, 20)
                                                    if x in steps))  # fmt: skip
        return (f"densities with a jump into l=18: {good} of {len(dens)}; steps into l = 15 / 18 "
                f"/ 20: {'; '.join(detail)}", _verdict(good, len(dens)))  # fmt: skip

    return judge


def _density_error(rows: Rows) -> Judged:
    """Fig. 4.8: the higher the density, the more the heuristic's error depends on l (spread =
    error at the largest l over error at the smallest)."""
    dens = sorted({float(r["density"]) for r in rows if r["series"] == "HeuristicLocalAnatomy"})
    spread = {}
    for d in dens:
        e = _errors(rows, "HeuristicLocalAnatomy", d)
        spread[d] = e[max(e)] / e[min(e)]
    good = sum(spread[b] > spread[a] for a, b in zip(dens, dens[1:], strict=False))
    detail = ", ".join(f"{d:.0%}: {s:.2f}x" for d, s in spread.items())
    return (f"error at the largest l over the smallest, by density: {detail}",
            _verdict(good, len(dens) - 1))  # fmt: skip


def _heuristic_jump_cause(rows: Rows) -> str:
    """Fig. 4.6 (density 20 %): how the step into l = 18 compares with 1.3x and with the steps
    into its neighbours, where no jump is found."""
    steps = _steps(_errors(rows, "HeuristicLocalAnatomy"))
    if _jumps_at_18(steps):
        return ""
    return "no jump in the curve: " + _step_18(steps)


def _step_18(steps: dict[int, float]) -> str:
    """The step into l = 18 against the 1.3x a jump needs and against its neighbours' steps."""
    around = ", ".join(f"into l={x}: {steps[x]:.2f}x" for x in sorted(steps)
                       if x != 18 and abs(x - 18) <= 3)  # fmt: skip
    word = "under" if steps[18] < 1.3 else "at least"
    return f"the step into l=18 is {steps[18]:.2f}x, {word} 1.3x ({around})"


def _jump_by_density_cause(series: str | None) -> Callable[[Rows], str]:
    """At each density without a jump at l = 18: its step into 18 and its neighbours'; where
    the CSV has each attribute's feasibility, whether any was infeasible from l = 18 on."""

    def cause(rows: Rows) -> str:
        rows = [r for r in rows if series is None or r["series"] == series]
        parts = []
        for d in sorted({float(r["density"]) for r in rows}):
            here = [r for r in rows if float(r["density"]) == d]
            steps = _steps({int(r["l"]): _f(r, "query_error") for r in here})
            if _jumps_at_18(steps):
                continue
            parts.append(f"{d:.0%}: {_step_18(steps)}")
        if not parts:
            return ""
        flags = [k for k in rows[0] if k.startswith("feasible_")]
        off = sorted({f"{float(r['density']):.0%}/l={r['l']}" for r in rows
                      for k in flags if r[k] == "False"})  # fmt: skip
        feasible = ("" if not flags else "; attributes infeasible at: " + (", ".join(off) or
                    "none, so no attribute dropping out makes or unmakes a jump"))  # fmt: skip
        return f"densities without a jump: {'; '.join(parts)}{feasible}"

    return cause


def _density_error_cause(rows: Rows) -> str:
    """Fig. 4.8: how far apart the spreads by density are, and where they fall."""
    dens = sorted({float(r["density"]) for r in rows if r["series"] == "HeuristicLocalAnatomy"})
    spread = {}
    for d in dens:
        e = _errors(rows, "HeuristicLocalAnatomy", d)
        spread[d] = e[max(e)] / e[min(e)]
    falls = [f"{a:.0%} → {b:.0%}: {spread[a]:.2f}x → {spread[b]:.2f}x"
             for a, b in zip(dens, dens[1:], strict=False) if spread[b] <= spread[a]]  # fmt: skip
    if not falls:
        return ""
    lo, hi = min(spread.values()), max(spread.values())
    return (f"the spreads barely differ: {lo:.2f}-{hi:.2f}x over the densities (the largest "
            f"{hi / lo - 1:.0%} above the smallest), and fall at {'; '.join(falls)}")  # fmt: skip


# --- chapter 5 (LAG), for each reading of LAG_2 ------------------------------------------------

LAG_2S = (("LAG_2", "LAG_2 as Top-down (dbanon's default)"),
          ("LAG_2_thesis", "LAG_2 as Algorithm 5.3 is written"))  # fmt: skip


def _lag_keys(rows: Rows) -> list[tuple[str, str, str]]:
    return sorted({(r["density"], r["k"], r["l"]) for r in rows})


def _groups(rows: Rows, variant: str) -> float:
    got = [_f(r, "groups") for r in rows if r["variant"] == variant]
    return sum(got) / len(got)


def _lag_compare(field: str, low: str, high: str) -> Callable[[Rows], Judged]:
    """`low`'s figure below `high`'s in every (density, k, l) setting; the figure gives the
    means and the mean number of groups (fewer groups: larger ones)."""

    def judge(rows: Rows) -> Judged:
        by = _by(rows, "variant", "density", "k", "l")
        keys = _lag_keys(rows)
        bad = [key for key in keys if _f(by[(low, *key)], field) >= _f(by[(high, *key)], field)]
        good = len(keys) - len(bad)
        mean = {v: sum(_f(by[(v, *key)], field) for key in keys) / len(keys)
                for v in (low, high)}  # fmt: skip
        where = ("" if not bad else "; not lower at density/k/l "
                 + ", ".join("/".join(key) for key in bad[:8]) + (" ..." if len(bad) > 8 else ""))
        return (f"settings where {low} is lower: {good} of {len(keys)}{where}; mean {field} {low} "
                f"{_num(mean[low])}, {high} {_num(mean[high])} ({mean[high] / mean[low]:.2f}x); "
                f"mean groups {low} {_groups(rows, low):,.0f}, {high} {_groups(rows, high):,.0f}",
                _verdict(good, len(keys)))  # fmt: skip

    return judge


def _lag_grows(field: str, axis: str, falls: bool = False, variant: str | None = None
               ) -> Callable[[Rows], Judged]:  # fmt: skip
    """`field` grows (or falls) along `axis` (k or density) with everything else fixed, for
    every variant or the one named."""

    def judge(rows: Rows) -> Judged:
        rows = [r for r in rows if variant is None or r["variant"] == variant]
        rest = [c for c in ("variant", "density", "k", "l") if c != axis]
        lines: dict[tuple[str, ...], dict[float, float]] = {}
        for r in rows:
            lines.setdefault(tuple(r[c] for c in rest), {})[float(r[axis])] = _f(r, field)
        good = 0
        for line in lines.values():
            xs = sorted(line)
            good += all((line[b] < line[a]) if falls else (line[b] > line[a])
                        for a, b in zip(xs, xs[1:], strict=False))  # fmt: skip
        by_v = {}
        for v in sorted({r["variant"] for r in rows}):
            xs = sorted({float(r[axis]) for r in rows})
            mean = {x: [_f(r, field) for r in rows if r["variant"] == v and float(r[axis]) == x]
                    for x in xs}  # fmt: skip
            by_v[v] = " → ".join(_num(sum(m) / len(m)) for m in mean.values())
        detail = "; ".join(f"{v} {t}" for v, t in by_v.items())
        if field == "dm" and rows and "suppressed_rows" in rows[0]:
            xs = sorted({float(r[axis]) for r in rows})
            sup = [max(_f(r, "suppressed_rows") for r in rows if float(r[axis]) == x)
                   for x in xs]  # fmt: skip
            detail += ("; most rows suppressed (each charged the table's size) over "
                       f"{axis}: " + " → ".join(f"{x:.0f}" for x in sup))
        word = "falls" if falls else "grows"
        return (f"settings where it {word} with {axis}: {good} of {len(lines)}; mean {field} "
                f"over {axis}: {detail}", _verdict(good, len(lines)))  # fmt: skip

    return judge


def _lag_k_over_l(rows: Rows) -> Judged:
    """Query error: k matters more than l (the error's range over k at a fixed l, against its
    range over l at a fixed k, per variant and density)."""
    good, every, detail = 0, 0, []
    for v in sorted({r["variant"] for r in rows}):
        for d in sorted({r["density"] for r in rows}):
            sub = [r for r in rows if r["variant"] == v and r["density"] == d]
            def spread(fixed: str, over: str, sub: Rows = sub) -> float:
                vals: dict[str, list[float]] = {}
                for r in sub:
                    vals.setdefault(r[fixed], []).append(_f(r, "query_error"))
                return max(max(x) / min(x) for x in vals.values())
            by_k, by_l = spread("l", "k"), spread("k", "l")
            every += 1
            good += by_k > by_l
            detail.append(f"{v} {float(d):.0%}: {by_k:.2f}x over k, {by_l:.2f}x over l")
    return (f"settings where k moves the error more: {good} of {every}; {'; '.join(detail)}",
            _verdict(good, every))  # fmt: skip


def _lag_compare_cause(field: str, low: str, high: str) -> Callable[[Rows], str]:
    """In the settings where `low`'s figure is not below `high`'s: each variant's mean number
    of groups (more groups: smaller ones) and NCP (wider boxes) there."""

    def cause(rows: Rows) -> str:
        by = _by(rows, "variant", "density", "k", "l")
        bad = [key for key in _lag_keys(rows)
               if _f(by[(low, *key)], field) >= _f(by[(high, *key)], field)]  # fmt: skip
        if not bad:
            return ""

        def mean(v: str, col: str) -> float:
            return sum(_f(by[(v, *key)], col) for key in bad) / len(bad)

        more = sum(_f(by[(high, *key)], "groups") > _f(by[(low, *key)], "groups") for key in bad)
        narrower = sum(_f(by[(high, *key)], "ncp") < _f(by[(low, *key)], "ncp") for key in bad)
        return (f"where {low} is not lower ({len(bad)} settings), {high} forms "
                f"more groups (smaller ones) in {more} and has the lower NCP (narrower boxes) in "
                f"{narrower}; there, mean groups {low} {mean(low, 'groups'):,.0f}, {high} "
                f"{mean(high, 'groups'):,.0f}; mean NCP {low} {mean(low, 'ncp'):.3f}, {high} "
                f"{mean(high, 'ncp'):.3f}")  # fmt: skip

    return cause


def _lag_dm_density_cause(rows: Rows) -> str:
    """Each step up in density where DM does not grow, beside the rows suppressed on either side
    (DM charges each the table's size): the steps where fewer rows are suppressed, and the
    others, which suppression does not account for."""
    lines: dict[tuple[str, str], dict[float, dict[str, str]]] = {}
    for r in rows:  # DM and suppression do not depend on l: one line per variant and k
        lines.setdefault((r["variant"], r["k"]), {})[float(r["density"])] = r
    fewer, other = [], []
    for (v, k), line in sorted(lines.items()):
        xs = sorted(line)
        for a, b in zip(xs, xs[1:], strict=False):
            dm, sup = (tuple(_f(line[x], c) for x in (a, b)) for c in ("dm", "suppressed_rows"))
            if dm[1] > dm[0]:
                continue
            (fewer if sup[1] < sup[0] else other).append(
                f"{v} k={k} {a:g} → {b:g}: DM {dm[0]:,.0f} → {dm[1]:,.0f}, suppressed "
                f"{sup[0]:.0f} → {sup[1]:.0f}")  # fmt: skip
    if not fewer and not other:
        return ""
    return (f"suppression: of the {len(fewer) + len(other)} steps up in density where DM does "
            f"not grow, {len(fewer)} suppress fewer rows ({'; '.join(fewer) or 'none'}); at the "
            f"other {len(other)} suppression does not fall, so it does not account for them "
            f"({'; '.join(other) or 'none'})")  # fmt: skip


def _lag_ncp_density_cause(rows: Rows) -> str:
    """LAG_1's groups over density beside its NCP: fewer groups are larger ones."""
    lines: dict[str, dict[float, dict[str, str]]] = {}
    for r in rows:
        if r["variant"] == "LAG_1":
            lines.setdefault(r["k"], {})[float(r["density"])] = r
    parts, fewer = [], 0
    for k, line in sorted(lines.items(), key=lambda x: int(x[0])):
        xs = sorted(line)
        groups = [_f(line[x], "groups") for x in xs]
        ncp = [_f(line[x], "ncp") for x in xs]
        fewer += groups[-1] < groups[0]
        parts.append(f"k={k}: groups {' → '.join(f'{g:,.0f}' for g in groups)}, NCP "
                     f"{' → '.join(f'{x:.3f}' for x in ncp)}")  # fmt: skip
    if not parts:
        return ""
    return (f"the groups: as density rises LAG_1 forms fewer groups (larger ones) at {fewer} of "
            f"{len(parts)} k; {'; '.join(parts)}")  # fmt: skip


def _lag_claims() -> tuple[Claim, ...]:
    out: list[Claim] = []
    for two, label in LAG_2S:
        out += [
            Claim(THESIS_5, f"{label}: LAG_2's NCP is below LAG_1's", "lag/results.csv",
                  _lag_compare("ncp", two, "LAG_1"), _lag_compare_cause("ncp", two, "LAG_1")),
            Claim(THESIS_5, f"{label}: LAG_1's DM is slightly below LAG_2's (more even groups)",
                  "lag/results.csv", _lag_compare("dm", "LAG_1", two),
                  _lag_compare_cause("dm", "LAG_1", two)),
            Claim(THESIS_5, f"{label}: LAG_1's query error is slightly below LAG_2's",
                  "lag/results.csv", _lag_compare("query_error", "LAG_1", two),
                  _lag_compare_cause("query_error", "LAG_1", two)),
        ]
    out += [
        Claim(THESIS_5, "DM grows with k", "lag/results.csv", _lag_grows("dm", "k")),
        Claim(THESIS_5, "DM grows with density", "lag/results.csv", _lag_grows("dm", "density"),
              _lag_dm_density_cause),
        Claim(THESIS_5, "LAG_1's NCP falls as density rises (fewer QI values generalised)",
              "lag/results.csv", _lag_grows("ncp", "density", falls=True, variant="LAG_1"),
              _lag_ncp_density_cause),
        Claim(THESIS_5, "query error: k matters more than l", "lag/results.csv", _lag_k_over_l),
    ]
    return tuple(out)


CLAIMS_PERSONALISED: tuple[Claim, ...] = (
    Claim(THESIS_3, "CBG has the lowest exposure of CBG, Mondrian and Anatomy",
          "cbg/results.csv", _cbg_lowest_exposure, _cbg_lowest_exposure_cause),
    Claim(THESIS_3, "Mondrian's exposure is below Anatomy's (its groups are larger)",
          "cbg/results.csv", _mondrian_below_anatomy, _mondrian_below_anatomy_cause),
    Claim(THESIS_3, "CBG's DM is constant in l", "cbg/results.csv", _cbg_dm_constant),
    Claim(THESIS_3, "CBG's query error is far below Mondrian's (sure/maybe bounds)",
          "cbg/results.csv", _cbg_error_vs("query_error", "mondrian", True),
          _cbg_error_cause("query_error")),
    Claim(THESIS_3, "CBG's query error is far below Mondrian's (the thesis's bounds 4.15-4.19)",
          "cbg/results.csv", _cbg_error_vs("query_error_thesis", "mondrian", True),
          _cbg_error_cause("query_error_thesis")),
    *(
        Claim(THESIS_3, f"{profile} salary: CBG's query error is below Mondrian's ({bounds})",
              "cbg/salary/results.csv", _cbg_profile(column, profile),
              _cbg_profile_cause(column, profile))
        for profile in ("flat", "heaped")
        for column, bounds in (("query_error", "sure/maybe bounds"),
                               ("query_error_thesis", "the thesis's bounds"))
    ),
    Claim(THESIS_3, "CBG's query error is above Anatomy's (Anatomy keeps every QI value)",
          "cbg/results.csv", _cbg_error_vs("query_error", "anatomy", False)),
    Claim(THESIS_3, "the larger l, the faster CBG's query error grows with k",
          "cbg/results.csv", _cbg_error_growth_with_k, _cbg_growth_cause),
    Claim(THESIS_3, "the Mondrian baseline meets the bound it is compared on (p <= 1/l)",
          "cbg/results.csv", _mondrian_meets_bound, _mondrian_bound_cause),
    Claim(THESIS_4, "local anatomy keeps every attribute's exposure within 1/l (both "
          "attackers, every density)", "localanatomy/exposure.csv",
          _la_exposure(("LocalAnatomy_a", "LocalAnatomy_b"))),
    Claim(THESIS_4, "attacker (b), who knows everyone's QIs, still finds every exposure within "
          "1/l", "localanatomy/exposure.csv", _la_exposure(("LocalAnatomy_b",))),
    Claim(THESIS_4, "Anatomy's exposure of semi-sensitive values is constant in l, about 0.65",
          "localanatomy/exposure.csv", _anatomy_constant),
    Claim(THESIS_4, "local anatomy's query error is far below Mondrian's",
          "localanatomy/query_error.csv", _la_error_vs_mondrian),
    Claim(THESIS_4, "plain local anatomy's query error is above Anatomy's at every l",
          "localanatomy/query_error.csv", _series_vs_anatomy("LocalAnatomy", True)),
    Claim(THESIS_4, "heuristic local anatomy's query error is below Anatomy's for l < 18",
          "localanatomy/query_error.csv",
          _series_vs_anatomy("HeuristicLocalAnatomy", False, below_l=18)),
    Claim(THESIS_4, "at l = 18 the heuristic's error jumps, close to plain local anatomy's",
          "localanatomy/query_error.csv", _heuristic_jump, _heuristic_jump_cause),
    Claim(THESIS_4, "at every density the heuristic's error rises sharply at l = 18 (Fig. 4.8)",
          "localanatomy/query_error.csv", _jump_by_density("HeuristicLocalAnatomy"),
          _jump_by_density_cause("HeuristicLocalAnatomy")),
    Claim(THESIS_4, "with sex under t = 0.2 too, the error rises sharply at l = 18 (Fig. 4.10)",
          "localanatomy/tcloseness.csv", _jump_by_density(None), _jump_by_density_cause(None)),
    Claim(THESIS_4, "the higher the density, the more the heuristic's error depends on l",
          "localanatomy/query_error.csv", _density_error, _density_error_cause),
    *_lag_claims(),
)
