"""INA's compiled distances (dbanon.algorithms.inakernels) equal the numpy reference bit for
bit: the noise size of every tuple, and every count of region changes, as before."""

from __future__ import annotations

import numpy as np
import pytest

from dbanon.algorithms import ina, inakernels


@pytest.mark.parametrize("m", [1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 33, 40])
def test_nearest_two_and_moved_equal_numpys(m: int) -> None:
    rng = np.random.default_rng(m)
    n, b = 3000, 11
    scale = 10.0 ** rng.integers(-4, 6, m)
    x = rng.normal(size=(n, m)) * scale
    refs = rng.normal(size=(b, m)) * scale
    refs[3] = refs[7]  # two points alike: ties between them
    x[:50] = refs[rng.integers(0, b, 50)]  # rows on a point: distance 0
    alpha = np.abs(rng.normal(size=m)) * scale + 1e-3
    _, want1, want2 = ina.nearest_two(x, refs, alpha)
    got1, got2 = inakernels.nearest_two(x, refs, alpha)
    assert got1.tobytes() == want1.tobytes() and got2.tobytes() == want2.tobytes()
    want = np.argmin(ina.normalised_distances(x, refs, alpha), axis=1)
    assert np.array_equal(inakernels.nearest(x, refs, alpha), want)
    out = x + rng.normal(size=x.shape) * scale * 0.3
    assert inakernels.moved(x, out, refs, alpha) == ina.moved(x, out, refs, alpha) > 0
    assert inakernels.moved(x[:0], out[:0], refs, alpha) == ina.moved(x[:0], out[:0], refs, alpha)


def test_rows_numpy_orders_otherwise_go_to_numpy() -> None:
    """NaN and infinite values (and a zero scale) take the reference path: same answers."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=(200, 3))
    x[5, 1], x[9, 0] = np.nan, np.inf
    refs = rng.normal(size=(4, 3))
    alpha = np.ones(3)
    _, w1, w2 = ina.nearest_two(x, refs, alpha)
    g1, g2 = inakernels.nearest_two(x, refs, alpha)
    assert np.array_equal(g1, w1, equal_nan=True) and np.array_equal(g2, w2, equal_nan=True)
    out = x + 0.5
    assert inakernels.moved(x, out, refs, alpha) == ina.moved(x, out, refs, alpha)
    with pytest.raises(ValueError, match="two reference points"):
        inakernels.nearest_two(x, refs[:1], alpha)
