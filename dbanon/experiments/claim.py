"""A paper's claim and its verdicts: the shape every claims module fills (dbanon.experiments
.claims renders them all into docs/claims.md), apart so that a module of claims can be written
without importing the module that gathers them.

The rules every judge keeps:
- figures are compared at their own precision (`at_most`): a figure written with six decimals is
  compared with the bound rounded to six decimals, so a class at exactly 1/6 written as 0.166667
  meets p <= 1/6; an exact fraction ("1/6") is compared exactly;
- a bound on each person is judged on the largest figure any person gets (the CSV's `_max`
  column), never on the mean;
- runs that share their seeds are judged on the paired differences per seed with their 95 %
  interval (dbanon.experiments.stats), not on whether two intervals overlap;
- a cause is computed from the rows the claim is judged on (a callable of the rows), or left
  empty: a fixed sentence can name another data set or an older run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

Rows = list[dict[str, str]]
Judged = tuple[str, str]  # (our figure, verdict)
Cause = str | Callable[[Rows], str]
HOLDS, FAILS, PARTLY, UNTESTED = "holds", "fails", "partly", "not testable"
UNDECIDED = "undecided"  # a paired difference whose interval straddles 0


@dataclass(frozen=True)
class Claim:
    paper: str
    statement: str
    source: str  # a CSV under docs/
    judge: Callable[[Rows], Judged]
    cause: Cause = ""  # why it does not hold, where it does not: computed from the rows


def _exact(text: str) -> Fraction | tuple[Decimal, int]:
    """A figure as written: an exact fraction ("1/6"), or a decimal and its number of decimals."""
    text = text.strip()
    if "/" in text:
        return Fraction(text)
    try:
        d = Decimal(text)
    except InvalidOperation as e:
        raise ValueError(f"not a figure: {text!r}") from e
    return d, max(0, -int(d.as_tuple().exponent))


def at_most(figure: str, bound: Fraction | int | float) -> bool:
    """Whether a figure, as its CSV writes it, meets `figure <= bound`: an exact fraction is
    compared exactly; a decimal with d decimals stands for any value that rounds to it, so it is
    compared with the bound rounded to d decimals (0.166667 meets 1/6, 0.166668 does not). A
    CSV keeps a bounded figure's trailing zeros, or writes it as a fraction, so d is its own."""
    value = _exact(figure)
    b = Fraction(bound)
    if isinstance(value, Fraction):
        return value <= b
    d, places = value
    rounded = Decimal(b.numerator) / Decimal(b.denominator)
    return d <= rounded.quantize(Decimal(1).scaleb(-places))
