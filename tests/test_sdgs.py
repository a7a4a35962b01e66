"""The (k,β)-SDGS parameters against a plain re-implementation of the bound (issue 36, item 4).

The reference below imports nothing from dbanon: it takes Li, Qardaji & Su's Theorem 5 as
written (β = 1 - e^-ε, γ = (e^ε - 1 + β)/e^ε, n_m = ⌈k/γ - 1⌉, d(k) = max over n ≥ n_m of
P[Bin(n, β) > ⌊γn⌋]) with scipy's binomial tail, every n up to where the Chernoff bound c_n
falls below δ/10 (past it no a_n can reach δ), and a linear scan over k.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from dbanon.errors import DbanonError
from dbanon.models.dp import delta_of, sdgs

SETTINGS = [
    (eps, delta) for eps in (0.01, 0.1, 0.5, 1.0, 1.5, 2.0, 3.0) for delta in (1e-3, 1e-5, 1e-7)
]


def reference_k(epsilon: float, delta: float) -> tuple[float, int]:
    """(β, the smallest k whose d(k, β, ε) is below δ), from the theorem alone."""
    beta = 1 - math.exp(-epsilon)
    gamma = (math.exp(epsilon) - 1 + beta) / math.exp(epsilon)
    exponent = gamma * math.log(gamma / beta) - (gamma - beta)
    last = math.ceil(math.log(10 / delta) / exponent)  # c_n < δ/10 beyond
    n = np.arange(last + 1)
    a = binom.sf(np.floor(gamma * n), n, beta)  # P[X > ⌊γn⌋]
    suffix_max = np.maximum.accumulate(a[::-1])[::-1]
    k = 1
    while suffix_max[max(0, math.ceil(k / gamma - 1))] >= delta:
        k += 1
    return beta, k


@pytest.mark.parametrize(("epsilon", "delta"), SETTINGS)
def test_k_and_beta_agree_with_a_plain_reimplementation(epsilon: float, delta: float) -> None:
    beta, k = reference_k(epsilon, delta)
    got = sdgs(epsilon, delta)
    assert got.beta == pytest.approx(beta, rel=1e-12)
    assert got.k == k, (epsilon, delta, got.k, k)


def test_the_threshold_is_tight() -> None:
    """k is the threshold of dbanon's own d: met at k, not at k - 1 (no slack either way)."""
    for epsilon, delta in SETTINGS[::4]:
        got = sdgs(epsilon, delta)
        assert delta_of(got.k, epsilon, got.beta) < delta <= delta_of(got.k - 1, epsilon, got.beta)


def test_k_grows_as_the_guarantee_tightens() -> None:
    """Smaller δ or larger ε (a larger sample) needs larger classes."""
    for epsilon in (0.5, 1.0, 2.0):
        ks = [sdgs(epsilon, d).k for d in (1e-3, 1e-5, 1e-7)]
        assert ks == sorted(ks) and ks[0] < ks[-1]


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [(0, 1e-5), (-1, 1e-5), (3.5, 1e-5), (1, 0), (1, 1), (float("nan"), 1e-5), (1, -1e-5)],
)
def test_out_of_range_parameters_are_refused(epsilon: float, delta: float) -> None:
    with pytest.raises(DbanonError):
        sdgs(epsilon, delta)
