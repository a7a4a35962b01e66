"""Judging many groups at once (dbanon.algorithms.persist.Judge, each_holds): a refresh asks
whether thousands of groups still hold; the one-pass answers must be the per-group ones."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dbanon.algorithms.persist import History, Judge, each_holds
from dbanon.methods.grouped import GroupingMethod
from dbanon.models.kanonymity import AlphaKAnonymity, KAnonymity, PKAnonymity
from dbanon.models.ldiversity import DistinctLDiversity, EntropyLDiversity


def _partition(rng: np.random.Generator, n: int, groups: int) -> tuple[np.ndarray, np.ndarray]:
    gid = rng.integers(0, groups, n)
    gid[rng.random(n) < 0.05] = groups - 1  # one larger group; some ids may have no row
    order = np.argsort(gid, kind="stable")
    return order, np.searchsorted(gid[order], np.arange(groups + 1))


def _one_by_one(holds, order: np.ndarray, bounds: np.ndarray, groups: np.ndarray) -> np.ndarray:
    return np.array([holds(order[bounds[g] : bounds[g + 1]]) for g in groups.tolist()], bool)


def _by_models(models: list, sensitive: object):
    """Each model's own class_holds over the group's counts (what a Judge's answers stand for)."""
    from collections import Counter

    def holds(rows: np.ndarray) -> bool:
        if sensitive is None:
            counts = Counter({0: len(rows)})
        elif isinstance(sensitive, tuple):
            counts = Counter(zip(*(a[rows].tolist() for a in sensitive), strict=True))
        else:
            counts = Counter(sensitive[rows].tolist())
        return all(m.class_holds(counts, None) for m in models)

    return holds


SENSITIVE = {
    "none": lambda rng, n: None,
    "text": lambda rng, n: np.array(
        [None if x == 0 else f"v{x}" for x in rng.integers(0, 5, n)], dtype=object),
    "two columns": lambda rng, n: (rng.integers(0, 3, n), rng.integers(0, 2, n)),
}  # fmt: skip
MODELS = [
    [KAnonymity(4)],
    [KAnonymity(3), DistinctLDiversity(3)],
    [PKAnonymity(2, 5)],
    [KAnonymity(3), DistinctLDiversity(1)],
    [KAnonymity(2), DistinctLDiversity(2), PKAnonymity(3, 3)],
]


@pytest.mark.parametrize("kind", sorted(SENSITIVE))
@pytest.mark.parametrize("models", MODELS, ids=lambda ms: "+".join(m.name for m in ms))
def test_many_answers_as_each(kind: str, models: list) -> None:
    rng = np.random.default_rng(len(kind) * 7 + len(models))
    n = 3000
    sensitive = SENSITIVE[kind](rng, n)
    if sensitive is None and any(m.needs_sensitive for m in models):
        pytest.skip("a model reading the sensitive column needs one")
    holds = GroupingMethod._holds(SimpleNamespace(models=models), sensitive)
    assert isinstance(holds, Judge)
    for groups in (400, 900, 1500):  # classes of about 7, 3 and 2 rows
        order, bounds = _partition(rng, n, groups)
        asked = np.flatnonzero(rng.random(groups) < 0.7)
        want = _one_by_one(holds, order, bounds, asked)
        assert 0 < want.sum() < len(asked)  # both answers occur: the comparison can fail
        assert np.array_equal(want, _one_by_one(_by_models(models, sensitive), order, bounds,
                                                asked))  # fmt: skip
        assert np.array_equal(each_holds(holds, order, bounds, asked), want)


def test_models_that_read_more_are_judged_one_by_one() -> None:
    """A model without floors (entropy, alpha) leaves the judge a plain Holds."""
    for model in (EntropyLDiversity(2.0), AlphaKAnonymity(0.5, 2)):
        holds = GroupingMethod._holds(SimpleNamespace(models=[model]), np.array(["a", "b"]))
        assert not isinstance(holds, Judge)
        assert model.floors() is None


def test_history_each_answers_as_holds() -> None:
    rng = np.random.default_rng(3)
    n, codes = 4000, 6
    tag = rng.integers(0, codes, n)
    history = np.where(rng.random(n) < 0.8, rng.integers(0, 30, n), -1)
    values = [np.unique(rng.choice(codes, rng.integers(1, codes + 1), replace=False))
              for _ in range(30)]  # fmt: skip
    guard = History(tag, history, values, k=3, needed=2)
    order, bounds = _partition(rng, n, 700)
    asked = np.arange(700)
    want = _one_by_one(guard.holds, order, bounds, asked)
    assert 0 < want.sum() < len(asked)
    assert np.array_equal(guard.each(order, bounds, asked), want)
