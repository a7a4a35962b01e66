"""The regrouping's loops compiled (dbanon.algorithms.persist: Counts, `_merging`,
`_filling`): when a promise is counts alone (rows, distinct values, the guard without a
spread), `merge_failing` and `_fill_short` run their loops in one compiled call. They must
make the groups the Python loops make, merge for merge and row for row (no database)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dbanon.algorithms import persist
from dbanon.algorithms.base import QIArrays
from dbanon.core.hierarchy import Hierarchy
from dbanon.methods.grouped import GroupingMethod
from dbanon.models.kanonymity import KAnonymity, PKAnonymity
from dbanon.models.ldiversity import DistinctLDiversity


def _table(seed: int) -> tuple[QIArrays, np.ndarray, int, persist.Counts, object]:
    """Rows with 0-2 numeric and 0-2 categorical QIs, groups of about k rows, value codes
    and (odd seeds) a guard; the promise as Counts and as the plain Holds it stands for."""
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(200, 3000)), int(rng.integers(2, 8))
    flat = Hierarchy.flat("r", ["a", "b", "c"])
    tree = Hierarchy.from_rows("t", [[f"l{i}", f"m{i // 2}", "*"] for i in range(4)])
    cats = [(rng.integers(0, 3, n).astype(np.int32), flat),
            (rng.integers(0, 4, n).astype(np.int32), tree)]  # fmt: skip
    nums = [rng.random(n).round(1 + seed % 2) for _ in range(seed % 3)]
    qi = QIArrays.build(nums, cats[: (seed // 3) % 3], n)
    gid = np.unique(rng.integers(0, n // (k + 1), n), return_inverse=True)[1].reshape(-1)
    codes = rng.integers(0, 4, n).astype(np.int64)
    distinct = int(rng.integers(1, 4))
    tag = rng.integers(0, 5, n).astype(np.int64)
    history = np.where(rng.random(n) < 0.5, rng.integers(0, 6, n), -1).astype(np.int64)
    values = [np.sort(rng.choice(5, int(rng.integers(1, 6)), replace=False)) for _ in range(6)]
    guard = (persist.History(tag, history, values, k=int(rng.integers(1, k + 1)),
                             needed=int(rng.integers(1, 3))) if seed % 2 else None)  # fmt: skip

    def holds(rows: np.ndarray) -> bool:
        ok = len(rows) >= k and len(np.unique(codes[rows])) >= distinct
        return ok and (guard is None or guard.holds(rows))

    return qi, gid.astype(np.int64), k, persist.Counts(k, distinct, codes, guard), holds


def _judge(holds, counts: persist.Counts) -> persist.Judge:
    def many(order: np.ndarray, bounds: np.ndarray, groups: np.ndarray) -> np.ndarray:
        return np.array([holds(order[bounds[g] : bounds[g + 1]]) for g in groups], dtype=bool)

    return persist.Judge(holds, many, counts)


def _merged(qi: QIArrays, gid: np.ndarray, holds) -> np.ndarray | str:
    try:
        return persist.merge_failing(qi, gid.copy(), int(gid.max()) + 1, holds)
    except ValueError as e:
        return str(e)


@pytest.mark.parametrize("seed", range(36))
def test_compiled_merges_make_the_python_loops_groups(seed: int) -> None:
    qi, gid, _, counts, holds = _table(seed)
    want = _merged(qi, gid, holds)
    got = _merged(qi, gid, _judge(holds, counts))
    if isinstance(want, str):
        assert got == want
        return
    assert int(want.max()) + 1 < int(gid.max()) + 1  # groups merged: the comparison can fail
    assert np.array_equal(got, want)


@pytest.mark.parametrize("seed", range(36))
def test_compiled_filling_takes_the_python_loops_rows(seed: int) -> None:
    qi, gid, k, counts, holds = _table(seed)
    rng = np.random.default_rng(1000 + seed)
    groups = int(gid.max()) + 1
    gid[rng.random(len(gid)) < 0.15] = -1  # loose rows: new, or moved
    intact = rng.random(groups) < 0.1
    out = []
    for judge in (holds, _judge(holds, counts)):
        g, kept = gid.copy(), intact.copy()
        held = persist._fill_short(qi, g, groups, judge, counts.guard, k, kept)
        out.append((g, held, kept))
    (want, held, kept), (got, held2, kept2) = out
    assert np.array_equal(got, want) and np.array_equal(held2, held)
    assert np.array_equal(kept2, kept)
    if seed % 3 == 2:  # two numeric QIs: groups take near rows, so the comparison can fail
        assert ((want >= 0) & (gid < 0)).any()


@pytest.mark.parametrize("models", [
    [KAnonymity(4)], [KAnonymity(3), DistinctLDiversity(3)], [PKAnonymity(2, 5)],
], ids=lambda ms: "+".join(m.name for m in ms))  # fmt: skip
def test_a_methods_counts_judge_as_its_models(models: list) -> None:
    """GroupingMethod's Judge carries Counts: `_counted` answers as the models do."""
    rng = np.random.default_rng(len(models))
    n = 2000
    sensitive = np.array([f"v{x}" for x in rng.integers(0, 5, n)], dtype=object)
    holds = GroupingMethod._holds(SimpleNamespace(models=models), sensitive)
    assert isinstance(holds, persist.Judge) and holds.counts is not None
    counted = persist._judged_by(holds.counts, n)
    answers = []
    for _ in range(400):
        rows = rng.choice(n, int(rng.integers(1, 9)), replace=False).astype(np.int64)
        answers.append(holds(rows))
        assert persist._counted(rows, *counted) == answers[-1]
    assert 0 < sum(answers) < len(answers)
