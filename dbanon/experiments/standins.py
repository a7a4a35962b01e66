"""Stand-ins for the thesis's IPUMS occupation (187-257 codes) on Adult (14 occupations).

Why a stand-in at all: a fifth of Adult's 14 occupations flagged is l-eligible only up to
l = 7, and chapters 4-5 run l up to 20. Why this one: a stand-in must not embed a published
QI. The first one, occupation x education, did (education is a QI of both chapters): an
attacker who knows a target's education drops every bucket value with another education, which
gave a mean exposure of 0.43 at l = 12 (bound 0.083), and its l = 18 "jump" was that column
going infeasible (issue 35). The default now joins occupation with attributes neither chapter
publishes: Adult's workclass and the quartile of its census weight (fnlwgt), about 290 codes,
the commonest under 4 %, so the thesis's l range stays feasible. The old one stays in the
registry so that the attacker test can show what it leaked.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# Adult columns a stand-in may read besides the experiment's own.
EXTRA = ("workclass", "fnlwgt")


def _joined(*parts: np.ndarray) -> np.ndarray:
    return np.asarray(["/".join(map(str, p)) for p in zip(*parts, strict=True)], dtype=object)


def occupation_unpublished(raw: dict[str, np.ndarray]) -> np.ndarray:
    """occupation/workclass/q<quartile of fnlwgt>: nothing either chapter publishes."""
    weight = raw["fnlwgt"].astype(np.float64)
    quartile = np.searchsorted(np.quantile(weight, [0.25, 0.5, 0.75]), weight, side="right")
    return _joined(raw["occupation"], raw["workclass"], [f"q{q + 1}" for q in quartile])


def occupation_education(raw: dict[str, np.ndarray]) -> np.ndarray:
    """occupation/education: embeds the published education (kept to show the leak)."""
    return _joined(raw["occupation"], raw["education"])


OCCUPATION: dict[str, Callable[[dict[str, np.ndarray]], np.ndarray]] = {
    "unpublished": occupation_unpublished,
    "education": occupation_education,
}
DEFAULT = "unpublished"
