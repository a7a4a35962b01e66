"""A claim with its spread: means with a 95 % interval, and verdicts the interval decides.

Every experiment that repeats a setting over seeds or copies reports the mean, the standard
deviation and the half-width of the 95 % interval of the mean (Student's t); a comparison of two
methods measured on the same seeds is judged on the paired differences: it *holds* when the
whole interval of the difference is on the claimed side, *fails* when the whole interval is on
the other side, and is *undecided* when the interval straddles zero.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

HOLDS, FAILS, UNDECIDED = "holds", "fails", "undecided"


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean, standard deviation and half-width of the 95 % interval of the mean."""
    from scipy.stats import t

    v = np.asarray(values, dtype=np.float64)
    if len(v) < 2:
        return float(v.mean()), 0.0, 0.0
    sd = float(v.std(ddof=1))
    return float(v.mean()), sd, float(t.ppf(0.975, len(v) - 1) * sd / np.sqrt(len(v)))


def at_least(a: Sequence[float], b: Sequence[float]) -> dict[str, float | str]:
    """The claim "a >= b" judged on paired runs: mean difference, its interval, the verdict."""
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    mean, _, half = spread(diff)
    lo, hi = mean - half, mean + half
    verdict = HOLDS if lo > 0 else FAILS if hi < 0 else UNDECIDED
    return {"difference": round(mean, 4), "ci95_low": round(lo, 4), "ci95_high": round(hi, 4),
            "verdict": verdict}  # fmt: skip
