"""Method `noise`: uniform noise of one size for every tuple, the INA paper's baseline.

Each value moves by uniform(-s, s) times its column's range (or standard deviation), s the
`--size`, but never by less than the floor f (`--noise-floor`): the magnitude is then uniform
in [f, s], the sign random. The noise of each value is keyed on the secret, the row key and
the column, never on the value (issue 31): a row carries the same noise in every release, so a
consumer who knows how a person's value changed and shifts a later release back finds exactly
the candidates one release leaves (the price: the difference of two releases is the change).
Streamed, kept and checked like `ina` (dbanon.methods.perturbed; docs/noise.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg

from dbanon.algorithms.ina import perturb
from dbanon.errors import DbanonError
from dbanon.methods import register
from dbanon.methods.base import Option
from dbanon.methods.perturbed import (
    CLAMP,
    DROP,
    INTEGRAL,
    NOISE_FLOOR,
    NORMALISE,
    POLICY,
    NoiseState,
    PerturbingMethod,
)

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved


class UniformNoise(PerturbingMethod):
    name = "noise"
    attacker = (
        "no class model: uniform noise of ±size·range per value, measured by its security; "
        "whoever holds the originals can re-link some rows; a row keeps its noise, so a known "
        "change narrows nothing across releases (the change itself shows in their difference)"
    )
    summary = (
        "uniform noise of one size for every tuple (the INA paper's baseline): each value "
        "moves by up to --size times its column's range or standard deviation, never less than "
        "the noise floor; records SEC, mSec and linkage"
    )
    options: ClassVar[tuple[Option, ...]] = (
        Option("size", float, 0.05, "Half-width of the noise, a share of the column's scale "
               "(at most 1: noise as wide as the column's whole range already drowns the value).",
               low=0, low_open=True, high=1),
        NORMALISE,
        NOISE_FLOOR,
        INTEGRAL,
        CLAMP,
        DROP,
        POLICY,
    )

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:
        if r.options["size"] <= 0:
            raise DbanonError(f"--size must be above 0, got {r.options['size']}")
        floor = r.options.get("noise_floor")
        if floor is not None and floor > r.options["size"] / 2:
            raise DbanonError(
                f"--noise-floor {floor:g} is more than half of --size {r.options['size']:g}: "
                "the noise would be nearly a constant move; lower the floor or raise the size"
            )
        super().validate(conn, r)

    def floor(self, r: Resolved, ranges: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        """The default floor at most half the size: magnitudes keep a spread of [f, s]."""
        floor = super().floor(r, ranges, alpha)
        return floor if r.options.get("noise_floor") is not None else np.minimum(
            floor, r.options["size"] / 2)  # fmt: skip

    def draw(
        self, conn: psycopg.Connection, r: Resolved, alpha: np.ndarray, seed: int
    ) -> dict[str, Any]:
        return {}

    def noise(
        self, r: Resolved, state: NoiseState, x: np.ndarray, u: np.ndarray
    ) -> tuple[np.ndarray, dict[str, int]]:
        sizes = np.full(len(x), r.options["size"])
        return perturb(x, u, sizes, state.alpha, state.floor), {}


register(UniformNoise())
