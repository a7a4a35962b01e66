"""(ε,δ)-differential privacy by sampling and suppression: the parameters of (k,β)-SDGS.

Li, Qardaji & Su ("On sampling, anonymization, and differential privacy or, k-anonymization
meets differential privacy", ASIACCS 2012, Theorem 5) show that drawing each row of the input
independently with probability β and then running any strongly-safe k-anonymisation (a
generalisation scheme that does not depend on the data, every class below k rows suppressed)
is (ε,δ)-differentially private for every ε ≥ -ln(1-β) and

    δ = d(k, β, ε) = max over n ≥ n_m of  Σ_{j > γn}^{n} f(j; n, β),
    γ = (e^ε - 1 + β) / e^ε,   n_m = ⌈k/γ - 1⌉,

f(j; n, β) being the binomial probability of j successes in n draws. Each summand
a_n = P[Bin(n, β) > ⌊γn⌋] is bounded by the Chernoff-style c_n = e^{-n(γ ln(γ/β) - (γ-β))},
which decreases in n, so the maximum is found once the running maximum reaches c_n.
d decreases as k grows (n_m grows, the maximum is over fewer n), so the k for (ε, δ) is the
smallest with d(k, β, ε) < δ, found by doubling then bisecting.

SafePub (Bild, Kuhn & Prasser, PoPETs 2018) and ARX (org.deidentifier.arx.dp
.ParameterCalculation, read for the definition, not copied) take the largest sampling
probability the theorem allows, β = 1 - e^-ε, and the same bound. ARX's loop returns one more
than this threshold (its counter is incremented after the test that ends it); dbanon releases
the threshold itself, which the theorem shows sufficient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dbanon.errors import DbanonError

# Above this ε the bound's loop grows without use: β = 1 - e^-ε nears 1 (almost every row
# sampled) and the Chernoff exponent tends to 0, so c_n falls too slowly to stop (measured:
# 13 s for one (ε, δ) at ε = 5, 0.2 s at ε = 3).
MAX_EPSILON = 3.0


def beta_of(epsilon: float) -> float:
    """The largest sampling probability ε allows: 1 - e^-ε (expm1 keeps small ε exact)."""
    return -math.expm1(-epsilon)


def gamma_of(epsilon: float, beta: float) -> float:
    """γ = (e^ε - 1 + β) / e^ε: the share of a class's n rows above which a sample gives it away."""
    return (math.expm1(epsilon) + beta) / math.exp(epsilon)


def _tail(n: int, gamma: float, beta: float) -> float:
    """a_n = P[Bin(n, β) > ⌊γn⌋]: summed from its first term, the terms only falling after it
    (the binomial's mode is below γn since γ > β), until they no longer change the sum."""
    first = math.floor(gamma * n) + 1
    if first > n:
        return 0.0
    log_first = (
        math.lgamma(n + 1) - math.lgamma(first + 1) - math.lgamma(n - first + 1)
        + first * math.log(beta) + (n - first) * math.log1p(-beta)
    )  # fmt: skip
    odds = beta / (1 - beta)
    total, term = 1.0, 1.0
    for j in range(first, n):
        term *= (n - j) / (j + 1) * odds
        total += term
        if term < total * 1e-17:
            break
    return math.exp(log_first) * total


def delta_of(k: int, epsilon: float, beta: float) -> float:
    """d(k, β, ε): the δ that sampling with β and suppressing classes below k achieves at ε."""
    gamma = gamma_of(epsilon, beta)
    exponent = gamma * math.log(gamma / beta) - (gamma - beta)
    n = max(0, math.ceil(k / gamma - 1))
    worst, bound = 0.0, math.inf
    while worst < bound:
        worst = max(worst, _tail(n, gamma, beta))
        bound = math.exp(-n * exponent)
        n += 1
    return worst


def k_of(epsilon: float, delta: float, beta: float) -> int:
    """The smallest k with d(k, β, ε) < δ (d falls as k grows: doubling, then bisection)."""
    high = 1
    while delta_of(high, epsilon, beta) >= delta:
        high *= 2
    low = high // 2  # d(low) >= delta, or low == 0
    while high - low > 1:
        mid = (low + high) // 2
        if delta_of(mid, epsilon, beta) < delta:
            high = mid
        else:
            low = mid
    return high


@dataclass(frozen=True)
class SDGS:
    """The parameters of one (k,β)-SDGS release: it is (epsilon, delta)-DP."""

    epsilon: float
    delta: float
    beta: float
    k: int

    def as_json(self) -> dict[str, float | int]:
        return {"epsilon": self.epsilon, "delta": self.delta, "k": self.k, "beta": self.beta}


def sdgs(epsilon: float, delta: float) -> SDGS:
    """(k, β) for (ε, δ): β = 1 - e^-ε and the smallest k the SDGS bound allows."""
    if not (isinstance(epsilon, int | float) and 0 < epsilon <= MAX_EPSILON):
        raise DbanonError(f"--epsilon must be above 0 and at most {MAX_EPSILON:g}, got {epsilon!r}")
    if not (isinstance(delta, int | float) and 0 < delta < 1):
        raise DbanonError(f"--delta must be in (0, 1), got {delta!r}")
    beta = beta_of(epsilon)
    return SDGS(float(epsilon), float(delta), beta, k_of(epsilon, delta, beta))
