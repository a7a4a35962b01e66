"""SafePub's claims (Bild, Kuhn & Prasser, PoPETs 2018), judged from docs/dp/results.csv.

"Comparable to k-anonymity at moderate ε" made precise before the data was read: at every ε of
at least MODERATE, SafePub's NCP (leaf counts, rows not released costing 1) is at most NCP_GAP
above k-anonymity's at the k that ε implies (full-domain with suppression), and its
SVM AUC at most AUC_GAP below it, each judged on the end of SafePub's 95 % interval nearer to
k-anonymity's figure (k-anonymity is deterministic but for the AUC's draws). Each of SafePub's
two schemes (fixed levels, private search) is a claim of its own.
"""

from __future__ import annotations

from collections.abc import Callable

from dbanon.experiments.claim import FAILS, HOLDS, PARTLY, Claim, Judged, Rows

SOURCE = "dp/results.csv"
PAPER = "SafePub (Bild, Kuhn & Prasser)"
MODERATE = 1.0  # ε from which the utility should be comparable
NCP_GAP = 0.10  # NCP points above k-anonymity's
AUC_GAP = 0.05  # AUC below k-anonymity's
VARIANTS = {"safepub_levels": "fixed levels", "safepub_search": "private search"}


def _f(row: dict[str, str], col: str) -> float:
    return float(row[col])


def _rows(rows: Rows, method: str) -> dict[float, dict[str, str]]:
    return {float(r["epsilon"]): r for r in rows if r["method"] == method and r["epsilon"]}


def _comparable(method: str) -> Callable[[Rows], Judged]:
    def judge(rows: Rows) -> Judged:
        mine, kanon = _rows(rows, method), _rows(rows, "kanon_fulldomain")
        epsilons = sorted(e for e in mine if e >= MODERATE and e in kanon)
        if not epsilons:
            raise LookupError(f"no {method} row at ε >= {MODERATE:g}")
        good, parts = [], []
        for e in epsilons:
            r = mine[e]
            k_row = kanon[e]  # at the k this ε implies (the search's ε_anon implies less)
            ncp_gap = _f(r, "ncp_leaf") - _f(r, "ncp_leaf_ci95") - _f(k_row, "ncp_leaf")
            auc_gap = _f(k_row, "auc") - (_f(r, "auc") + _f(r, "auc_ci95"))
            if ncp_gap <= NCP_GAP and auc_gap <= AUC_GAP:
                good.append(f"{e:g}")
            parts.append(f"ε={e:g} (k={r['k']}): NCP {_f(r, 'ncp_leaf'):.3f} ± "
                         f"{_f(r, 'ncp_leaf_ci95'):.3f} vs {_f(k_row, 'ncp_leaf'):.3f}, AUC "
                         f"{_f(r, 'auc'):.3f} ± {_f(r, 'auc_ci95'):.3f} vs "
                         f"{_f(k_row, 'auc'):.3f}")  # fmt: skip
        verdict = HOLDS if len(good) == len(epsilons) else FAILS if not good else PARTLY
        return (f"ε where comparable: {len(good)} of {len(epsilons)} "
                f"({', '.join(good) or 'none'}); " + "; ".join(parts), verdict)  # fmt: skip

    return judge


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
              f"{NCP_GAP:.2f} above and SVM AUC at most {AUC_GAP:.2f} below k-anonymity "
              "(full-domain, suppression) at the k that ε implies", SOURCE, _comparable(method),
              "the data: the sample leaves out e^-ε of the rows (37 % at ε = 1, 14 % at ε = 2), "
              "each costing 1, and classes below the SDGS k (61-113) are suppressed on the "
              "sample, which holds β of each class; k-anonymity releases nearly every row")
        for method, label in VARIANTS.items()
    ),
    *(
        Claim(PAPER, f"{label}: utility grows with ε (NCP falls from ε = 0.1 to 2)", SOURCE,
              _grows(method), "the data: between neighbouring ε the change is within the "
              "seeds' spread")
        for method, label in VARIANTS.items()
    ),
)
