"""A cause shown in docs/claims.md is computed from the rows of the CSV it describes, or left
empty (dbanon.experiments.claim): no claim that does not hold carries a fixed sentence, and a
cause's figures follow the rows it is given."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from dbanon.experiments.claim import FAILS, HOLDS, PARTLY, UNDECIDED, Claim, Judged, Rows
from dbanon.experiments.claims import CLAIMS, _judged, _rows
from dbanon.experiments.claims_dp import _left_out_cause
from dbanon.experiments.claims_personalised import _cbg_lowest_exposure_cause

DOCS = Path(__file__).resolve().parents[1] / "docs"
SHOWN = (FAILS, PARTLY, UNDECIDED)  # the verdicts whose cause docs/claims.md shows


def _fixed(claims: Sequence[Claim], docs: Path) -> list[str]:
    """The claims whose verdict on the CSVs under `docs` shows a cause, and whose cause is a
    fixed non-empty sentence rather than a function of the rows."""
    out = []
    for c in claims:
        _, verdict, _ = _judged(c, _rows(docs, c.source))
        if verdict in SHOWN and isinstance(c.cause, str) and c.cause:
            out.append(f"{verdict}: {c.statement}")
    return out


def test_every_shown_cause_is_computed() -> None:
    assert _fixed(CLAIMS, DOCS) == []


def test_no_claim_keeps_a_fixed_cause() -> None:
    """Nor one that holds today: a rerun that turns its verdict would show the sentence."""
    assert [c.statement for c in CLAIMS if isinstance(c.cause, str) and c.cause] == []


def test_a_fixed_cause_is_found(tmp_path: Path) -> None:
    """The check above can fail: a claim that fails on its rows with a fixed sentence."""
    (tmp_path / "x.csv").write_text("a\n1\n")

    def judge(verdict: str) -> Callable[[Rows], Judged]:
        return lambda rows: (f"a={rows[0]['a']}", verdict)

    fixed = Claim("p", "fixed", "x.csv", judge(FAILS), "a sentence")
    computed = Claim("p", "computed", "x.csv", judge(PARTLY), lambda rows: f"a is {rows[0]['a']}")
    empty = Claim("p", "empty", "x.csv", judge(UNDECIDED))
    holding = Claim("p", "holding", "x.csv", judge(HOLDS), "a sentence never shown")
    assert _fixed([fixed, computed, empty, holding], tmp_path) == ["fails: fixed"]


def _dp(released: float, kanon_released: float) -> Rows:
    """SafePub's fixed levels and k-anonymity at ε = 1; NCP counts a left-out row as 1."""
    rows = []
    for method, share, cost in (("safepub_levels", released, 0.3),
                                ("kanon_fulldomain", kanon_released, 0.2)):  # fmt: skip
        rows.append({"method": method, "epsilon": "1.0", "k": "61", "released_share": str(share),
                     "ncp_leaf_released": str(cost), "beta": "0.632121",
                     "ncp_leaf": str(round(1 - share + share * cost, 6))})  # fmt: skip
    return rows


def test_the_left_out_cause_follows_the_rows() -> None:
    cause = _left_out_cause("safepub_levels")
    few, many = cause(_dp(0.5, 0.9)), cause(_dp(0.8, 0.9))
    assert few != many
    # Half the rows left out cost 0.5 alone, above k-anonymity's 0.28 + 0.10.
    assert "releases 50.0% of the rows" in few and "cost 0.500 of SafePub's NCP 0.650" in few
    assert "at 1 of 1 ε" in few and "k-anonymity 90.0%" in few
    # A fifth left out costs 0.2, under 0.28 + 0.10: the released rows' cost makes the rest.
    assert "releases 80.0% of the rows" in many and "cost 0.200 of SafePub's NCP 0.440" in many
    assert "at 0 of 1 ε" in many


def _cbg(cbg_max: str, anatomy_max: str) -> Rows:
    return [{"part": "l", "method": m, "k": "3", "l": "4", "exposure_max": x}
            for m, x in (("cbg", cbg_max), ("mondrian", "0.5"), ("anatomy", anatomy_max))]


def test_the_lowest_exposure_cause_follows_the_rows() -> None:
    tie = _cbg_lowest_exposure_cause(_cbg("0.25", "0.25"))
    above = _cbg_lowest_exposure_cause(_cbg("0.3", "0.25"))
    assert "at 1 of 1 l" in tie and "l=4: CBG 0.25 vs Anatomy 0.25" in tie
    assert "at 0 of 1 l" in above and "l=4: CBG 0.3 vs Anatomy 0.25" in above
    assert _cbg_lowest_exposure_cause(_cbg("0.2", "0.25")) == ""  # lowest: nothing to explain
