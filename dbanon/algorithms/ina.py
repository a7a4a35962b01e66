"""INA, independent noise (Wang, Zheng & Liao 2008), and the uniform-noise baseline: pure code.

Part 1, `leader`: the paper's "direct classification" of a sample into reference points.
Part 2, `ina_sizes` + `perturb`: each tuple gets uniform noise whose size is half the gap
between its distances to its two nearest reference points, so it never leaves the region of
its nearest one. Everything here works on one batch of rows at a time (arrays in, arrays out),
so a caller can stream a table of any size through it.

Noise comes from `prf_uniform`: a keyed pseudo-random function of a secret, the row key and
(for INA, whose noise size depends on the tuple) the values perturbed, so a refresh that keeps
the secret gives a row the same noise draw (two releases then average to the same value instead
of halving the noise variance; keyed on the row alone, a known change narrows nothing either).
`perturb` takes a floor: no value moves by less than a set share of its column's scale.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

BOUNDS = ("strict", "paper")


def normalised_distances(x: np.ndarray, refs: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """dist(X, Q) = sqrt(sum_i ((x_i - q_i) / alpha_i)^2) for every row of x and every Q: an
    (n, b) matrix, by differences (the |x|^2 - 2xq + |q|^2 shortcut cancels digits, and the
    noise bound r2 - r1 is a small difference of two such distances)."""
    out = np.empty((len(x), len(refs)))
    for j, q in enumerate(refs):
        diff = (x - q) / alpha
        out[:, j] = np.sqrt((diff * diff).sum(1))
    return out


def leader(sample: np.ndarray, alpha: np.ndarray, beta: float) -> np.ndarray:
    """Reference points of a sample (s, m): r0 = dist(P_max, P_min) / beta; each tuple joins
    the nearest point within r0 (which moves to the running mean) or starts a new one."""
    if beta <= 0:
        raise ValueError(f"beta must be above 0, got {beta}")
    if len(sample) == 0:
        raise ValueError("the sample is empty")
    r0 = float(np.sqrt((((sample.max(0) - sample.min(0)) / alpha) ** 2).sum())) / beta
    refs = [sample[0].astype(np.float64).copy()]
    counts = [1]
    q = np.empty((len(sample), sample.shape[1]))
    q[0] = refs[0]
    for x in sample[1:]:
        d = np.sqrt((((q[: len(refs)] - x) / alpha) ** 2).sum(1))
        i = int(np.argmin(d))
        if d[i] < r0:
            refs[i] = (refs[i] * counts[i] + x) / (counts[i] + 1)
            counts[i] += 1
            q[i] = refs[i]
        else:
            refs.append(x.astype(np.float64).copy())
            counts.append(1)
            q[len(refs) - 1] = refs[-1]
    return np.array(refs)


def nearest_two(
    x: np.ndarray, refs: np.ndarray, alpha: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index of each row's nearest reference point, and r1 <= r2, its two smallest distances."""
    if len(refs) < 2:
        raise ValueError("INA needs at least two reference points")
    d = normalised_distances(x, refs, alpha)
    two = np.argpartition(d, 1, axis=1)[:, :2]
    rows = np.arange(len(x))[:, None]
    pair = d[rows, two]
    order = np.argsort(pair, axis=1)
    first = two[rows[:, 0], order[:, 0]]
    r = np.take_along_axis(pair, order, axis=1)
    return first, r[:, 0], r[:, 1]


def ina_sizes(r1: np.ndarray, r2: np.ndarray, m: int, bound: str = "strict") -> np.ndarray:
    """Normalised half-width of each tuple's noise on every attribute.

    The paper's d = (r2 - r1) / 2 bounds the noise vector's *length* by the distance to the
    bisector of Q1Q2; uniform noise of half-width d on each of m attributes can reach d*sqrt(m)
    at a corner. `strict` divides by sqrt(m), so the corner stays within d (the paper's
    property holds); `paper` uses d per attribute as printed (m = 2: up to 41 % further)."""
    if bound not in BOUNDS:
        raise ValueError(f"bound must be one of {BOUNDS}, got {bound!r}")
    d = (r2 - r1) / 2.0
    if bound == "strict":
        # a hair under d/sqrt(m): a noise vector at a corner of the box never ties at the bisector
        d = d * ((1.0 - 1e-9) / math.sqrt(m))
    return d


def perturb(
    x: np.ndarray,
    u: np.ndarray,
    sizes: np.ndarray,
    alpha: np.ndarray,
    floor: np.ndarray | None = None,
) -> np.ndarray:
    """x'_i = x_i + u_i * d * alpha_i, u uniform in [-1, 1), d each row's normalised size.

    With a floor f_i (normalised, per column) the magnitude is f_i + |u_i| (h - f_i) with
    h = max(d, 2 f_i), the sign that of u_i: no value moves by less than f_i * alpha_i, and a
    tuple whose own size is under 2 f_i still gets a spread of magnitudes (never exactly f_i,
    which would pin the original to 2^m candidates). Floor 0 is the formula above exactly."""
    if floor is None or not np.any(floor):
        return x + u * (sizes[:, None] * alpha[None, :])
    f = np.asarray(floor, dtype=np.float64)[None, :]
    high = np.maximum(sizes[:, None], 2.0 * f)
    sign = np.where(u < 0, -1.0, 1.0)
    return x + sign * (f + np.abs(u) * (high - f)) * alpha[None, :]


def raised(sizes: np.ndarray, floor: np.ndarray | None) -> np.ndarray:
    """Rows whose noise the floor widened past their own size (may leave their INA region)."""
    if floor is None or not np.any(floor):
        return np.zeros(len(sizes), dtype=bool)
    return (sizes[:, None] < 2.0 * np.asarray(floor)[None, :]).any(1)


def prf_uniform(
    secret: bytes,
    keys: Sequence[str],
    values: np.ndarray,
    keyed: Literal["row", "value", "tuple"] = "value",
) -> np.ndarray:
    """(n, m) values uniform in [-1, 1): a keyed BLAKE2b of each row key (and its values).

    `row`: u_ij depends on (secret, key_i, j) only, so a row keeps its noise whatever its values
    become (a known change then narrows nothing: the candidates of two releases coincide);
    `value`: u_ij depends on (secret, key_i, j, x_ij), so a column that did not change keeps its
    noise and a changed one gets noise independent of the old; `tuple`: u_i depends on
    (secret, key_i, x_i), for noise whose size depends on the whole tuple (INA). Without the
    secret nobody can tell any of them. Values are hashed as IEEE doubles (-0.0 as 0.0)."""
    x = np.ascontiguousarray(np.asarray(values, dtype="<f8") + 0.0)
    n, m = x.shape
    if len(keys) != n:
        raise ValueError(f"{len(keys)} keys for {n} rows")
    out = bytearray()
    keyed_state = hashlib.blake2b(key=secret, digest_size=8).copy  # keying done once
    tags = [j.to_bytes(4, "little") for j in range(m)]
    for key, row in zip(keys, x, strict=True):
        raw = key.encode() + b"\x00"
        if keyed == "row":
            for j in range(m):
                h = keyed_state()
                h.update(raw + tags[j])
                out += h.digest()
            continue
        if keyed == "value":
            values = row.tobytes()
            for j in range(m):
                h = keyed_state()
                h.update(raw + tags[j] + values[8 * j : 8 * j + 8])
                out += h.digest()
            continue
        msg = raw + row.tobytes()
        need, got, block = 8 * m, b"", 0
        while len(got) < need:
            got += hashlib.blake2b(
                msg, key=secret, digest_size=min(64, need - len(got)),
                salt=block.to_bytes(16, "little"),
            ).digest()  # fmt: skip
            block += 1
        out += got
    words = np.frombuffer(bytes(out), dtype="<u8").reshape(n, m)
    return (words >> np.uint64(11)).astype(np.float64) * (2.0**-52) - 1.0


def moved(x: np.ndarray, perturbed: np.ndarray, refs: np.ndarray, alpha: np.ndarray) -> int:
    """How many tuples have another nearest reference point after the noise than before."""
    before = np.argmin(normalised_distances(x, refs, alpha), axis=1)
    after = np.argmin(normalised_distances(perturbed, refs, alpha), axis=1)
    return int((before != after).sum())
