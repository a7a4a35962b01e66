"""A paper's claim and its verdicts: the shape every claims module fills (dbanon.experiments
.claims renders them all into docs/claims.md), apart so that a module of claims can be written
without importing the module that gathers them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Rows = list[dict[str, str]]
Judged = tuple[str, str]  # (our figure, verdict)
HOLDS, FAILS, PARTLY, UNTESTED = "holds", "fails", "partly", "not testable"


@dataclass(frozen=True)
class Claim:
    paper: str
    statement: str
    source: str  # a CSV under docs/
    judge: Callable[[Rows], Judged]
    cause: str = ""  # why it does not hold, where it does not
