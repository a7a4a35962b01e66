"""What a claim of docs/claims.md is and the few readers its judges share, apart from the list of
claims (dbanon.experiments.claims) so that a paper's claims can live in a module of their own
(dbanon.experiments.claims_personalised) without an import cycle."""

from __future__ import annotations

from dbanon.experiments.claim import (  # noqa: F401 (one Claim for every module of claims)
    FAILS,
    HOLDS,
    PARTLY,
    UNTESTED,
    Claim,
    Judged,
    Rows,
    at_most,
)


def _f(row: dict[str, str], col: str) -> float:
    return float(row[col])


def _by(rows: Rows, *cols: str) -> dict[tuple[str, ...], dict[str, str]]:
    return {tuple(r[c] for c in cols): r for r in rows}


def _share(good: list[str], every: list[str], what: str) -> Judged:
    """'k in ...' figure and verdict from the settings where a comparison held."""
    verdict = HOLDS if len(good) == len(every) else FAILS if not good else PARTLY
    return f"{what}: {len(good)} of {len(every)} ({', '.join(good) or 'none'})", verdict
