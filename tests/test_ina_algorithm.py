"""INA's pure parts: the region property, the keyed noise, data security, misclassification."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dbanon.algorithms.ina import (
    ina_sizes,
    leader,
    moved,
    nearest_two,
    normalised_distances,
    perturb,
    prf_uniform,
)
from dbanon.metrics.clustering import cluster, misclassification
from dbanon.metrics.security import Security, security

coords = st.floats(-1000, 1000, allow_nan=False, allow_infinity=False, width=64)


@st.composite
def settings_(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    m = draw(st.integers(1, 4))
    b = draw(st.integers(2, 6))
    n = draw(st.integers(1, 30))
    refs = draw(arrays(np.float64, (b, m), elements=coords, unique=True))
    x = draw(arrays(np.float64, (n, m), elements=coords))
    alpha = draw(arrays(np.float64, (m,), elements=st.floats(0.01, 500)))
    corners = st.sampled_from([-1.0, 1.0 - 2**-52])  # the box's corners: the worst case
    u = draw(arrays(np.float64, (n, m), elements=corners | st.floats(-1, 1, exclude_max=True)))
    return x, refs, alpha, u


@settings(derandomize=True, max_examples=300, deadline=None)
@given(settings_())
def test_ina_noise_never_moves_a_tuple_to_another_nearest_reference_point(case) -> None:
    x, refs, alpha, u = case
    if len({tuple(q) for q in (refs / alpha).round(9)}) < len(refs):
        return  # coinciding reference points: no bisector between them
    _, r1, r2 = nearest_two(x, refs, alpha)
    out = perturb(x, u, ina_sizes(r1, r2, x.shape[1], "strict"), alpha)
    before = np.argmin(normalised_distances(x, refs, alpha), 1)
    after = np.argmin(normalised_distances(out, refs, alpha), 1)
    ties = np.isclose(r1, r2, rtol=0, atol=1e-9)  # on the bisector already: no noise, any side
    assert ((before == after) | ties).all()


def test_the_printed_bound_can_cross_the_bisector_at_a_corner_the_strict_one_cannot() -> None:
    refs = np.array([[0.0, 0.0], [np.sqrt(2), np.sqrt(2)]])  # 2 apart, along the diagonal
    x = np.array([[0.6 / np.sqrt(2), 0.6 / np.sqrt(2)]])  # r1 = 0.6, r2 = 1.4: d = 0.4
    alpha, u = np.ones(2), np.full((1, 2), 0.999)
    _, r1, r2 = nearest_two(x, refs, alpha)
    assert moved(x, perturb(x, u, ina_sizes(r1, r2, 2, "paper"), alpha), refs, alpha) == 1
    assert moved(x, perturb(x, u, ina_sizes(r1, r2, 2, "strict"), alpha), refs, alpha) == 0


def test_leader_makes_more_reference_points_as_beta_grows() -> None:
    rng = np.random.default_rng(1)
    sample = rng.normal(size=(300, 2))
    alpha = np.ones(2)
    counts = [len(leader(sample, alpha, beta)) for beta in (1, 3, 10)]
    assert counts[0] < counts[1] < counts[2]
    # a tuple within r0 of a point moves it to the running mean
    refs = leader(np.array([[0.0, 0.0], [10.0, 0.0], [1.0, 0.0]]), alpha, 2.0)
    assert refs.tolist() == [[0.5, 0.0], [10.0, 0.0]]


def test_keyed_noise_is_a_function_of_secret_key_and_value() -> None:
    keys = [str(i) for i in range(1000)]
    x = np.arange(3000, dtype=np.float64).reshape(1000, 3)
    for keyed in ("row", "value", "tuple"):
        a = prf_uniform(b"s" * 32, keys, x, keyed)
        assert a.shape == (1000, 3) and (a >= -1).all() and (a < 1).all()
        assert abs(a.mean()) < 0.05 and abs(a.var() - 1 / 3) < 0.02  # uniform on [-1, 1)
        assert np.array_equal(a[5:9], prf_uniform(b"s" * 32, keys[5:9], x[5:9], keyed))
        assert not np.allclose(a, prf_uniform(b"t" * 32, keys, x, keyed))
        # the same values under other keys: other noise (equal rows do not share it)
        assert not np.isclose(a[:10], prf_uniform(b"s" * 32, keys[10:20], x[:10], keyed)).any()
        changed = x.copy()
        changed[:, 1] += 7.0  # one column of every row changes
        b = prf_uniform(b"s" * 32, keys, changed, keyed)
        if keyed == "row":  # the row's own draw, whatever its values: a change keeps it
            assert np.array_equal(a, b)
            continue
        assert not np.isclose(a[:, 1], b[:, 1]).any()  # the changed value: fresh noise
        same = np.isclose(a[:, [0, 2]], b[:, [0, 2]])
        assert same.all() if keyed == "value" else not same.any()
    assert prf_uniform(b"s" * 32, ["1"], np.zeros((1, 12)), "tuple").shape == (1, 12)
    assert np.array_equal(prf_uniform(b"s" * 32, ["1"], np.array([[-0.0]])),
                          prf_uniform(b"s" * 32, ["1"], np.array([[0.0]])))  # fmt: skip


def test_floor_keeps_every_value_at_least_its_share_away() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5000, 2))
    u = rng.uniform(-1, 1, size=x.shape)
    sizes = rng.uniform(0, 0.1, size=5000)
    alpha = np.array([2.0, 5.0])
    assert np.array_equal(perturb(x, u, sizes, alpha, np.zeros(2)), perturb(x, u, sizes, alpha))
    floor = np.array([0.02, 0.01])
    moved_by = np.abs(perturb(x, u, sizes, alpha, floor) - x) / alpha
    assert (moved_by >= floor - 1e-12).all()
    high = np.maximum(sizes[:, None], 2 * floor)
    assert (moved_by <= high + 1e-12).all()
    assert (moved_by > 1.5 * floor).any(0).all()  # a spread of magnitudes, not exactly f
    assert (np.sign(perturb(x, u, sizes, alpha, floor) - x) == np.sign(u)).all()


def test_security_accumulated_in_batches_equals_numpy_on_the_whole() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(1e6, 3.0, size=(10_001, 3))  # a large mean: sums of squares would cancel
    out = x + rng.uniform(-1, 1, size=x.shape) * [0.1, 1.0, 3.0]
    sec = Security(["a", "b", "c"])
    for start in range(0, len(x), 777):
        sec.add(x[start : start + 777], out[start : start + 777])
    assert np.allclose(list(sec.sec().values()), security(x, out), rtol=1e-9)
    assert sec.figures()["msec"] == min(sec.sec().values())


def test_misclassification_matches_clusters_by_the_hungarian_method() -> None:
    a = np.array([0, 0, 1, 1, 2, 2])
    assert misclassification(a, np.array([2, 2, 0, 0, 1, 1])) == 0.0
    assert misclassification(a, np.array([2, 2, 0, 1, 1, 1])) == 1 / 6
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(c, 0.3, size=(100, 2)) for c in (0, 5, 10)])
    for algorithm in ("kmeans", "agglomerative"):
        labels = cluster(x, 3, algorithm)
        assert misclassification(labels, np.repeat([7, 8, 9], 100)) == 0.0
