"""Method `ina`: independent noise (Wang, Zheng & Liao 2008), streamed through the database.

Reference points come from leader clustering of a sample drawn in SQL (a keyed hash order,
so a seed reproduces it); each tuple then gets uniform noise of half the gap between its
distances to its two nearest reference points, so its nearest one never changes. The floor
(`--noise-floor`) comes first: no value moves by less than its share of the column's scale, so a
tuple near a bisector, whose own size is under twice the floor, gets the floor's noise and may
change region (counted as `floor_raised` and `floor_region_changes`). The stream counts the
other tuples whose nearest reference point changed anyway; with the strict bound (the default)
a run that counts any is refused. The noise of a tuple is keyed on the secret, its key and all
its perturbed values (its size depends on all of them): a refresh leaves an unchanged tuple
where it was and gives a changed one fresh noise in every column. The distances to the
reference points are compiled (dbanon.algorithms.inakernels, equal to the reference's bit for
bit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms.ina import BOUNDS, ina_sizes, leader, perturb, raised
from dbanon.errors import DbanonError
from dbanon.methods import register
from dbanon.methods.base import Check, Option
from dbanon.methods.perturbed import (
    DROP,
    NOISE_FLOOR,
    NORMALISE,
    POLICY,
    NoiseState,
    PerturbingMethod,
)
from dbanon.models.base import CheckResult

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved


class Ina(PerturbingMethod):
    name = "ina"
    keyed = "tuple"
    legacy_keyed = "tuple"
    attacker = (
        "no class model: the noise is measured (security of each column) and every row keeps "
        "its nearest reference point, but whoever holds the originals can re-link some rows"
    )
    summary = (
        "INA, independent noise (Wang, Zheng & Liao 2008): reference points by leader "
        "clustering of a sample, then uniform noise per tuple of half the gap between its "
        "distances to its two nearest ones, so clusters survive, but never less than the noise "
        "floor; streamed in batches, records data security SEC per column, mSec and linkage"
    )
    options: ClassVar[tuple[Option, ...]] = (
        Option("sample", int, 200, "Rows drawn for the reference points.", low=2),
        Option("beta", float, 5.0, "Leader radius = sample diagonal / beta (more points).",
               low=0, low_open=True),
        NORMALISE,
        NOISE_FLOOR,
        Option(
            "bound", str, "strict",
            "strict: noise per attribute d/sqrt(m), never across the bisector; paper: d per "
            "attribute as printed (may cross at a corner when m >= 2).",
            BOUNDS,
        ),
        DROP,
        POLICY,
    )  # fmt: skip

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:
        if r.options["beta"] <= 0:
            raise DbanonError(f"--beta must be above 0, got {r.options['beta']}")
        if r.options["sample"] < 2:
            raise DbanonError(f"--sample must be at least 2, got {r.options['sample']}")
        if r.options["sample"] > r.rows:
            raise DbanonError(
                f"--sample {r.options['sample']} is larger than the {r.rows} rows of {r.source}"
            )
        super().validate(conn, r)

    def draw(
        self, conn: psycopg.Connection, r: Resolved, alpha: np.ndarray, seed: int
    ) -> dict[str, Any]:
        cols = sql.SQL(", ").join(sql.SQL("{}::float8").format(c.ident) for c in r.qi)
        sample = np.array(
            conn.execute(
                sql.SQL("SELECT {} FROM {} ORDER BY hashtextextended({}::text, %s) LIMIT %s")
                .format(cols, r.source.ident, r.key.ident),
                [seed, r.options["sample"]],
            ).fetchall(),
            dtype=np.float64,
        )  # fmt: skip
        refs = leader(sample, alpha, r.options["beta"])
        if len(refs) < 2:
            raise DbanonError(
                f"the sample of {len(sample)} rows gave one reference point: INA needs two; "
                "raise --beta or --sample"
            )
        return {"refs": refs.tolist()}

    def noise(
        self, r: Resolved, state: NoiseState, x: np.ndarray, u: np.ndarray
    ) -> tuple[np.ndarray, dict[str, int]]:
        sizes = self._sizes(r, state, x)
        out = perturb(x, u, sizes, state.alpha, state.floor)
        return out, self._moves(state, x, out, sizes)

    def _sizes(self, r: Resolved, state: NoiseState, x: np.ndarray) -> np.ndarray:
        from dbanon.algorithms.inakernels import nearest_two  # numba: loaded by publishes

        r1, r2 = nearest_two(x, np.array(state.extra["refs"]), state.alpha)
        return ina_sizes(r1, r2, x.shape[1], r.options["bound"])

    def _moves(
        self, state: NoiseState, x: np.ndarray, out: np.ndarray, sizes: np.ndarray
    ) -> dict[str, int]:
        """Region changes of the tuples the floor left alone (the promise) and of the others."""
        from dbanon.algorithms.inakernels import moved

        refs = np.array(state.extra["refs"])
        up = raised(sizes, state.floor)
        return {
            "region_changes": moved(x[~up], out[~up], refs, state.alpha),
            "floor_raised": int(up.sum()),
            "floor_region_changes": moved(x[up], out[up], refs, state.alpha),
        }

    def build(self, conn: psycopg.Connection, r: Resolved, ctx: Any) -> dict[str, Any]:
        metrics = super().build(conn, r, ctx)
        state = self._states[r.spec.name]
        return {**metrics, "reference_points": len(state.extra["refs"])}

    def stream_checks(self, r: Resolved, counters: dict[str, int]) -> list[Check]:
        """Every tuple the floor left alone keeps its nearest reference point (counted in the
        stream on the values as they were written); promised by the strict bound only."""
        if r.options["bound"] != "strict":
            return []
        changes = counters.get("region_changes", 0)

        def kept(_conn: psycopg.Connection) -> CheckResult:
            return CheckResult(
                "nearest reference point kept", changes == 0, {"region_changes": changes},
                None if changes == 0 else f"{changes} tuples changed their nearest point",
            )  # fmt: skip

        return [Check("nearest reference point kept", kept)]

    def recount(
        self, conn: psycopg.Connection, r: Resolved, state: NoiseState | None, released: Any
    ) -> dict[str, int]:
        """Tuples whose released values lie nearer another kept reference point than their
        source values do (every one of them, without the kept state)."""
        x, out = released
        if state is None or "refs" not in state.extra:
            return {"region_changes": len(x)}
        return self._moves(state, x, out, self._sizes(r, state, x))


register(Ina())
