"""SafePub's claims (Bild, Kuhn & Prasser, PoPETs 2018), judged from docs/dp/results.csv.

"Comparable to k-anonymity at moderate ε" made precise before the data was read: at every ε of
at least MODERATE, SafePub's NCP (leaf counts, rows not released costing 1) is at most NCP_GAP
above k-anonymity's at the k that ε implies (full-domain with suppression), and its SVM AUC at
most AUC_GAP below it. An ε is comparable when SafePub's whole 95 % interval is within the gap,
undecided when the interval straddles it (k-anonymity is deterministic but for the AUC's
draws); the claim holds when every ε is comparable, fails when none is or could be. NCP and AUC, and
each of SafePub's two schemes (fixed levels, private search), are claims of their own.
"""

from __future__ import annotations

from collections.abc import Callable

from dbanon.experiments.claim import FAILS, HOLDS, PARTLY, Claim, Judged, Rows
from dbanon.experiments.claimbase import _f

SOURCE = "dp/results.csv"
PAPER = "SafePub (Bild, Kuhn & Prasser)"
MODERATE = 1.0  # ε from which the utility should be comparable
NCP_GAP = 0.10  # NCP points above k-anonymity's
AUC_GAP = 0.05  # AUC below k-anonymity's
VARIANTS = {"safepub_levels": "fixed levels", "safepub_search": "private search"}


def _rows(rows: Rows, method: str) -> dict[float, dict[str, str]]:
    return {float(r["epsilon"]): r for r in rows if r["method"] == method and r["epsilon"]}


def _comparable(method: str, field: str) -> Callable[[Rows], Judged]:
    """`field` (ncp_leaf: at most NCP_GAP above; auc: at most AUC_GAP below) within its gap of
    k-anonymity's at the k each ε >= MODERATE implies, by the nearer end of SafePub's interval."""

    def judge(rows: Rows) -> Judged:
        mine, kanon = _rows(rows, method), _rows(rows, "kanon_fulldomain")
        epsilons = sorted(e for e in mine if e >= MODERATE and e in kanon)
        if not epsilons:
            raise LookupError(f"no {method} row at ε >= {MODERATE:g}")
        good, unsure, parts = [], [], []
        for e in epsilons:
            r, k_row = mine[e], kanon[e]  # k-anonymity at the k this ε implies
            half = _f(r, f"{field}_ci95")
            if field == "ncp_leaf":  # how far above k-anonymity's NCP, at each end
                near = _f(r, field) - half - _f(k_row, field)
                far = _f(r, field) + half - _f(k_row, field)
                limit = NCP_GAP
            else:  # how far below k-anonymity's AUC
                near = _f(k_row, field) - (_f(r, field) + half)
                far = _f(k_row, field) - (_f(r, field) - half)
                limit = AUC_GAP
            if far <= limit:
                good.append(f"{e:g}")
            elif near <= limit:
                unsure.append(f"{e:g}")
            parts.append(f"ε={e:g} (k={k_row['k']}): {_f(r, field):.3f} ± {half:.3f} vs "
                         f"{_f(k_row, field):.3f}")  # fmt: skip
        verdict = (HOLDS if len(good) == len(epsilons)
                   else FAILS if not good and not unsure else PARTLY)  # fmt: skip
        return (f"ε where comparable, whole interval within the gap: {len(good)} of "
                f"{len(epsilons)} ({', '.join(good) or 'none'}); undecided (the interval "
                f"straddles it): {', '.join(unsure) or 'none'}; " + "; ".join(parts),
                verdict)  # fmt: skip

    return judge


def _left_out_cause(method: str) -> Callable[[Rows], str]:
    """NCP counts a row not released as 1: per ε, the share SafePub releases (released_share)
    and the NCP its left-out rows give alone, against k-anonymity's NCP plus the gap; the
    sample's β beside, where the CSV has it (the rest is suppressed on the sample)."""

    def cause(rows: Rows) -> str:
        mine, kanon = _rows(rows, method), _rows(rows, "kanon_fulldomain")
        epsilons = sorted(e for e in mine if e >= MODERATE and e in kanon)
        parts, over = [], 0
        for e in epsilons:
            r, k_row = mine[e], kanon[e]
            out = 1 - _f(r, "released_share")
            over += out > _f(k_row, "ncp_leaf") + NCP_GAP
            beta = f" (its sample holds β = {_f(r, 'beta'):.1%})" if r.get("beta") else ""
            parts.append(f"ε={e:g}: SafePub releases {_f(r, 'released_share'):.1%} of the rows"
                         f"{beta}, k-anonymity {_f(k_row, 'released_share'):.1%}; the rows left "
                         f"out cost {out:.3f} of SafePub's NCP {_f(r, 'ncp_leaf'):.3f}, a "
                         f"released row {_f(r, 'ncp_leaf_released'):.3f} on average against "
                         f"k-anonymity's {_f(k_row, 'ncp_leaf_released'):.3f}")  # fmt: skip
        if not parts:
            return ""
        return (f"the rows left out: at {over} of {len(parts)} ε the rows SafePub does not "
                f"release, at 1 each, already cost more than k-anonymity's NCP + "
                f"{NCP_GAP:.2f}; " + "; ".join(parts))  # fmt: skip

    return cause


def _search_cause(method: str) -> Callable[[Rows], str]:
    """The AUC's spread over the seeds, beside the nodes the search ends at: how many distinct
    ones over the seeds and the most frequent, against the fixed levels' one node, and the ε
    the search spends."""

    def cause(rows: Rows) -> str:
        mine, fixed = _rows(rows, method), _rows(rows, "safepub_levels")
        epsilons = sorted(e for e in mine if e >= MODERATE and mine[e].get("levels_varied"))
        if not epsilons:
            return ""
        parts = []
        for e in epsilons:
            r = mine[e]
            beside = ("" if e not in fixed or method == "safepub_levels" else
                      f" against fixed levels' {_f(fixed[e], 'auc_ci95'):.3f}, one node "
                      f"({fixed[e]['levels']})")  # fmt: skip
            parts.append(f"ε={e:g}: search ε {_f(r, 'search_epsilon'):g}, "
                         f"{r['levels_varied']} nodes over {r['seeds']} seeds (most often "
                         f"{r['levels']}); AUC ± {_f(r, 'auc_ci95'):.3f}{beside}")  # fmt: skip
        return "the nodes chosen: " + "; ".join(parts)

    return cause


def _grows(method: str) -> Callable[[Rows], Judged]:
    """NCP falls at every step up in ε (means), and the ends' intervals are apart."""

    def judge(rows: Rows) -> Judged:
        mine = _rows(rows, method)
        epsilons = sorted(mine)
        if len(epsilons) < 2:
            raise LookupError(f"fewer than two ε for {method}")
        ncp = [_f(mine[e], "ncp_leaf") for e in epsilons]
        ci = [_f(mine[e], "ncp_leaf_ci95") for e in epsilons]
        steps = [f"{a:g}→{b:g}" for a, b, x, y in zip(epsilons, epsilons[1:], ncp, ncp[1:],
                                                      strict=False) if y < x]  # fmt: skip
        apart = ncp[-1] + ci[-1] < ncp[0] - ci[0]
        every = len(epsilons) - 1
        verdict = (HOLDS if len(steps) == every and apart
                   else FAILS if not steps and not apart else PARTLY)  # fmt: skip
        detail = " / ".join(f"{x:.3f}" for x in ncp)
        return (f"steps up in ε where NCP falls: {len(steps)} of {every}; NCP at ε = "
                f"{'/'.join(f'{e:g}' for e in epsilons)}: {detail}; ends' intervals apart: "
                f"{apart}", verdict)  # fmt: skip

    return judge


CLAIMS_DP: tuple[Claim, ...] = (
    *(
        Claim(PAPER, f"{label}: utility comparable to k-anonymity at moderate ε — at every ε >= "
              f"{MODERATE:g}, NCP (leaf counts, rows not released cost 1) at most "
              f"{NCP_GAP:.2f} above k-anonymity's (full-domain, suppression) at the k that ε "
              "implies", SOURCE, _comparable(method, "ncp_leaf"), _left_out_cause(method))
        for method, label in VARIANTS.items()
    ),
    *(
        Claim(PAPER, f"{label}: utility comparable to k-anonymity at moderate ε — at every ε >= "
              f"{MODERATE:g}, SVM AUC at most {AUC_GAP:.2f} below k-anonymity's (full-domain, "
              "suppression) at the k that ε implies", SOURCE, _comparable(method, "auc"),
              _search_cause(method))
        for method, label in VARIANTS.items()
    ),
    *(
        Claim(PAPER, f"{label}: utility grows with ε (NCP falls from ε = 0.1 to 2)", SOURCE,
              _grows(method))
        for method, label in VARIANTS.items()
    ),
)
