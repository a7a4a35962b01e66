"""Method `noise`: uniform noise of one size for every tuple, the INA paper's baseline.

Each value moves by uniform(-s, s) times its column's range (or standard deviation), s the
`--size`; streamed, kept and checked like `ina` (dbanon.methods.perturbed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg

from dbanon.algorithms.ina import perturb
from dbanon.errors import DbanonError
from dbanon.methods import register
from dbanon.methods.base import Option
from dbanon.methods.perturbed import DROP, NORMALISE, POLICY, NoiseState, PerturbingMethod

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved


class UniformNoise(PerturbingMethod):
    name = "noise"
    attacker = (
        "no class model: uniform noise of ±size·range per value, measured by its security; "
        "whoever holds the originals can re-link some rows"
    )
    summary = (
        "uniform noise of one size for every tuple (the INA paper's baseline): each value "
        "moves by up to --size times its column's range or standard deviation; records SEC"
    )
    options: ClassVar[tuple[Option, ...]] = (
        Option("size", float, 0.05, "Half-width of the noise, a share of the column's scale.",
               low=0, low_open=True),
        NORMALISE,
        DROP,
        POLICY,
    )

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:
        if r.options["size"] <= 0:
            raise DbanonError(f"--size must be above 0, got {r.options['size']}")
        super().validate(conn, r)

    def draw(
        self, conn: psycopg.Connection, r: Resolved, alpha: np.ndarray, seed: int
    ) -> dict[str, Any]:
        return {}

    def noise(
        self, r: Resolved, state: NoiseState, x: np.ndarray, u: np.ndarray
    ) -> tuple[np.ndarray, dict[str, int]]:
        sizes = np.full(len(x), r.options["size"])
        return perturb(x, u, sizes, state.alpha), {}


register(UniformNoise())
