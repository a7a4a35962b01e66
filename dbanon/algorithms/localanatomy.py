"""Local anatomy (thesis ch. 4, Algorithms 4.1-4.3): bucketise only the flagged values.

Pure code: per attribute, the values its owners flagged (codes in the attribute's value order)
in, a bucket id per flagged value out. Buckets of different attributes are independent.

- `deal` is the m-invariance-style assignment with m = l (Algorithm 4.1's `anatomize`): values
  sorted (ties at random) and dealt round-robin into g = floor(n/l) buckets. On an l-eligible
  multiset (no value in more than n/l rows) every bucket gets >= l rows, each value at most once
  (the proof is in dbanon.setlogic.anatomy): Corollary 4.1, so p(t, s) <= 1/l.
- `heuristic` is Algorithm 4.2: split the values at their median (weighted by rows: the value of
  the middle row in value order) into `<= median` and `> median` while both halves stay
  l-eligible, then deal each part. Parts hold disjoint value ranges, so buckets are narrow and
  queries on the attribute are answered tighter.
- `closeness` is the t principle of Algorithm 4.3 (the thesis uses SABRE for sex): a simpler
  bucketisation than SABRE, the same sorted round-robin deal with the smallest bucket size m >= 2
  whose every bucket keeps its value shares within t of the attribute's flagged values (Earth
  Mover's Distance with equal ground distance: half the L1 distance of the shares).
Categorical values are ordered alphabetically (numeric ones by value): the thesis needs an order
for `s <= median` and gives none. Ties in the deal and the bucket ids are drawn from the run's
seed (issue 24): which row of a value lands in which bucket, and what a bucket is called, follow
neither the source's order nor the values' order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dbanon.core.groupsort import unique_inverse
from dbanon.errors import quote_ident

PRINCIPLES = ("l", "t")


@dataclass(frozen=True)
class Principle:
    """How one attribute's flagged values are bucketised: l-diversity (Cor. 4.1) or t-closeness."""

    kind: str  # "l" or "t"
    value: float

    def describe(self) -> str:
        return f"{self.kind}={self.value:g}"


def parse_principles(text: str | None, default_l: int) -> dict[str, Principle]:
    """`sex=t:0.2,age=l:5` -> per attribute principle (the rest use l = default_l)."""
    out: dict[str, Principle] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        attr, eq, rule = part.partition("=")
        kind, colon, value = rule.partition(":")
        if not eq or not colon or kind.strip() not in PRINCIPLES:
            raise ValueError(f"--principle takes COLUMN=l:L or COLUMN=t:T, got {part.strip()!r}")
        try:
            x = float(value)
        except ValueError:
            raise ValueError(f"--principle {part.strip()!r}: {value!r} is not a number") from None
        if not math.isfinite(x):
            raise ValueError(f"--principle {part.strip()!r}: {value.strip()!r} is not finite")
        if attr.strip() in out:
            raise ValueError(f"--principle names {quote_ident(attr.strip())} twice: give one "
                "principle each")
        if kind.strip() == "l" and (x != int(x) or x < 2):
            raise ValueError(f"--principle {part.strip()!r}: l must be a whole number >= 2")
        if kind.strip() == "t" and not 0 < x < 1:
            raise ValueError(f"--principle {part.strip()!r}: t must be in (0, 1)")
        out[attr.strip()] = Principle(kind.strip(), x)
    for attr, p in out.items():
        if p.kind == "l" and int(p.value) < default_l:
            raise ValueError(f"--principle {attr}=l:{p.value:g} is below --l {default_l}")
    return out


def ordered_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes 0..m-1 of values in value order, and the distinct values."""
    uniq, inverse = unique_inverse(values)
    return inverse.astype(np.int64), uniq


def ineligible(codes: np.ndarray, l: int) -> int | None:  # noqa: E741 - the paper's name
    """The code that breaks l-eligibility (more than n/l rows; fewer than l rows at all: -1),
    or None."""
    n = len(codes)
    if n < l:
        return -1
    counts = np.bincount(codes)
    top = int(counts.argmax())
    return top if counts[top] * l > n else None


def deal(codes: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """Bucket ids 0..g-1 (g = floor(n / size)) by a round-robin deal over the value order."""
    n = len(codes)
    g = max(n // size, 1)
    order = np.lexsort((rng.random(n), codes))
    out = np.empty(n, dtype=np.int64)
    out[order] = np.arange(n) % g
    return out


def heuristic(codes: np.ndarray, l: int, rng: np.random.Generator) -> np.ndarray:  # noqa: E741
    """Algorithm 4.2: recursive median split while both halves stay l-eligible, then `deal`."""
    out = np.empty(len(codes), dtype=np.int64)
    stack = [np.arange(len(codes))]
    next_id = 0
    while stack:
        idx = stack.pop()
        vals = codes[idx]
        median = np.partition(vals, (len(vals) - 1) // 2)[(len(vals) - 1) // 2]
        small = vals <= median
        if small.all() or ineligible(vals[small], l) is not None or ineligible(
            vals[~small], l
        ) is not None:
            ids = deal(vals, l, rng)
            out[idx] = ids + next_id
            next_id += int(ids.max()) + 1
        else:
            stack.append(idx[~small])
            stack.append(idx[small])
    return out


def emd_equal(counts: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """Per bucket (rows of `counts`), half the L1 distance of its value shares to `whole`'s."""
    shares = counts / counts.sum(axis=1, keepdims=True)
    return 0.5 * np.abs(shares - whole / whole.sum()).sum(axis=1)


def closeness(codes: np.ndarray, t: float, rng: np.random.Generator) -> np.ndarray:
    """The t principle: the smallest bucket size m >= 2 whose deal keeps every bucket within t."""
    n = len(codes)
    whole = np.bincount(codes).astype(np.float64)
    for m in range(2, n + 1):
        ids = deal(codes, m, rng)
        counts = np.zeros((int(ids.max()) + 1, len(whole)))
        np.add.at(counts, (ids, codes), 1)
        if (emd_equal(counts, whole) <= t + 1e-12).all():
            return ids
    return np.zeros(n, dtype=np.int64)  # one bucket: distance 0


def bucketise(
    values: np.ndarray, principle: Principle, use_heuristic: bool, rng: np.random.Generator,
    names: Sequence[object] | None = None,
) -> np.ndarray:
    """Bucket ids 1..g of one attribute's flagged values (anything in value order: the values,
    or their places in it, whose value `names` gives). ValueError naming the value when the
    values cannot be l-eligible (the attribute is not named: the caller does)."""
    codes, uniq = ordered_codes(values)
    if principle.kind == "t":
        if len(codes) < 2:
            raise ValueError(f"has {len(codes)} flagged value, fewer than 2")
        return _relabel(closeness(codes, principle.value, rng), rng) + 1
    ell = int(principle.value)
    bad = ineligible(codes, ell)
    if bad == -1:
        raise ValueError(f"has {len(codes)} flagged values, fewer than l = {ell}")
    if bad is not None:
        top = int(np.bincount(codes)[bad])
        value = uniq[bad].item() if hasattr(uniq[bad], "item") else uniq[bad]
        if names is not None:
            value = names[value]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        raise ValueError(
            f"is not {ell}-eligible: value {value!r} is flagged in {top} of {len(codes)} rows "
            f"(at most {len(codes) // ell} allowed)"
        )
    ids = heuristic(codes, ell, rng) if use_heuristic else deal(codes, ell, rng)
    return _relabel(ids, rng) + 1


def _relabel(ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Bucket ids as a permutation drawn from the seed: the deal numbers buckets in value order
    (and the heuristic's parts in median-split order); the release shows neither."""
    return rng.permutation(int(ids.max()) + 1)[ids] if len(ids) else ids


def local_anatomy(
    columns: dict[str, tuple[np.ndarray, np.ndarray]],
    principles: dict[str, Principle],
    use_heuristic: bool,
    seed: int,
    names: Mapping[str, Sequence[object]] | None = None,
) -> dict[str, np.ndarray]:
    """Algorithms 4.1/4.3: per attribute (values of every row in value order, flagged mask) a
    bucket id per row, 0 where the value is not flagged. ValueError "attribute ...: ..." when
    one cannot be bucketised. `names`: of an attribute given as places in its value order,
    the value at each place (for the message)."""
    out = {}
    for i, (attr, (values, flagged)) in enumerate(columns.items()):
        rng = np.random.default_rng([seed, i])
        ids = np.zeros(len(values), dtype=np.int64)
        if flagged.any():
            try:
                ids[flagged] = bucketise(values[flagged], principles[attr], use_heuristic, rng,
                                         (names or {}).get(attr))
            except ValueError as e:
                raise ValueError(f"attribute {quote_ident(attr)} {e}") from None
        out[attr] = ids
    return out
