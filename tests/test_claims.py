"""docs/claims.md is generated from the committed CSVs: regenerate it and compare, and judge a
claim from a CSV made here so the judge itself can fail."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from dbanon.experiments.claims import FAILS, HOLDS, UNTESTED, render

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_claims_md_is_what_the_csvs_say() -> None:
    assert (DOCS / "claims.md").read_text() == render(DOCS), (
        "docs/claims.md is stale: run `dbanon experiment claims`"
    )


def _kmember_csv(docs: Path, kmember_loss: list[float]) -> None:
    (docs / "kmember").mkdir(parents=True)
    with open(docs / "kmember" / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["algorithm", "k", "total_il_height", "seconds"])
        w.writeheader()
        for k, loss in zip((2, 5), kmember_loss, strict=True):
            w.writerow({"algorithm": "kmember", "k": k, "total_il_height": loss, "seconds": 1})
            w.writerow({"algorithm": "mondrian", "k": k, "total_il_height": 100, "seconds": 0.1})


def _verdict(text: str, claim: str) -> str:
    line = next(x for x in text.splitlines() if x.startswith(f"| {claim}"))
    return line.split(" | ")[2].strip("*")


def test_a_claim_is_judged_from_its_rows(tmp_path: Path) -> None:
    claim = "greedy k-member loses less information"
    assert _verdict(render(tmp_path), claim) == UNTESTED  # no CSV: not testable
    _kmember_csv(tmp_path / "a", [50, 60])
    assert _verdict(render(tmp_path / "a"), claim) == HOLDS
    _kmember_csv(tmp_path / "b", [150, 160])
    text = render(tmp_path / "b")
    assert _verdict(text, claim) == FAILS and "0 of 2" in text


def test_the_committed_csvs_are_read(tmp_path: Path) -> None:
    """Every CSV the claims name that is committed gives a verdict other than 'not testable'
    for at least one of its claims (a renamed column would otherwise go unnoticed)."""
    shutil.copytree(DOCS, tmp_path / "docs")
    text = render(tmp_path / "docs")
    for source in {"cbg/results.csv", "lag/results.csv", "localanatomy/exposure.csv"}:
        if (DOCS / source).is_file():
            lines = [x for x in text.splitlines() if f"(docs/{source})" in x]
            assert any(f"**{UNTESTED}**" not in x for x in lines), source
