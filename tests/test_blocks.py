"""Partitioned k-member (dbanon.algorithms.blocks): blocks, cluster sizes, determinism, the
fix-up round, and quality against the exact rule."""

from __future__ import annotations

import numpy as np
import pytest

from dbanon.algorithms import blocks as bl
from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.kmember import kmember
from dbanon.core.hierarchy import Hierarchy
from dbanon.metrics.loss import loss_report

# Leaves l0..l11 under m0..m3 under t0, t1 under *.
TREE = Hierarchy.from_rows("tree", [[f"l{i}", f"m{i // 3}", f"t{i // 6}", "*"] for i in range(12)])
SEX = Hierarchy.flat("sex", ["F", "M"])


def table(n: int, seed: int = 0, distinct: bool = True) -> QIArrays:
    """Two numeric QIs (continuous when `distinct`, else few values) and two categorical."""
    rng = np.random.default_rng(seed)
    if distinct:
        numeric = [rng.normal(40, 12, n), rng.random(n) * 100]
    else:
        numeric = [rng.integers(0, 4, n).astype(float)]
    categorical = [
        (rng.integers(0, 12, n).astype(np.int32), TREE),
        (rng.integers(0, 2, n).astype(np.int32), SEX),
    ]
    return QIArrays.build(numeric, categorical, n)


def sizes_ok(gid: np.ndarray, n: int, k: int) -> None:
    assert gid.shape == (n,) and gid.min() == 0
    counts = np.bincount(gid)
    assert counts.min() >= k and counts.max() <= 2 * k - 1  # ids 0..g-1, no gaps


@pytest.mark.parametrize("distinct", [True, False], ids=["distinct", "duplicates"])
def test_blocks_partition_the_rows_and_hold_k(distinct: bool) -> None:
    for trial in range(8):
        rng = np.random.default_rng(trial)
        n, k = int(rng.integers(50, 700)), int(rng.integers(2, 8))
        size = int(rng.integers(2 * k, 120))
        qi = table(n, trial, distinct)
        blocks = bl.cut(qi, k, size)
        rows = np.sort(np.concatenate(blocks))
        np.testing.assert_array_equal(rows, np.arange(n))  # every row in exactly one block
        assert min(len(b) for b in blocks) >= k
        for b in blocks:
            if len(b) > size:  # only a block no cut can split leaving k rows on both sides
                assert len(bl.cut(bl.subset(qi, b), k, size)) == 1
        if distinct:
            assert max(len(b) for b in blocks) <= size
        gid, figures = bl.kmember_blocks(qi, k, block_size=size, seed=trial)
        sizes_ok(gid, n, k)
        assert figures["blocks"] >= len(blocks)


def test_categorical_cut_first_at_the_dearest_crossing() -> None:
    # 400 rows: sex and the tree's two root branches are free cuts; age is a numeric one. The
    # first cuts separate the rows that the greedy rule would not put together anyway.
    qi = table(400)
    blocks = bl.cut(qi, 5, 150)
    for b in blocks:
        assert len(set(qi.cat[b, 1].tolist())) == 1  # one sex (crossing costs a whole level)
        assert len({TREE.ancestors(int(x))[2] for x in qi.cat[b, 0]}) == 1  # one of t0, t1


def test_deterministic_and_independent_of_the_number_of_threads() -> None:
    qi = table(3000, 5)
    one, _ = bl.kmember_blocks(qi, 6, block_size=400, seed=9, workers=1)
    three, _ = bl.kmember_blocks(qi, 6, block_size=400, seed=9, workers=3)
    np.testing.assert_array_equal(one, three)
    other, _ = bl.kmember_blocks(qi, 6, block_size=400, seed=10)
    assert not np.array_equal(one, other)  # the seed is used


def test_the_fix_up_round_never_makes_things_worse() -> None:
    for seed in range(3):
        qi = table(4000, seed)
        plain, _ = bl.kmember_blocks(qi, 8, block_size=1500, seed=seed, rounds=0)
        fixed, figures = bl.kmember_blocks(qi, 8, block_size=1500, seed=seed, rounds=1)
        sizes_ok(fixed, qi.n, 8)
        before, after = (loss_report(qi, g).total_il_height for g in (plain, fixed))
        if figures["repooled_rows"]:
            assert after < before
        else:  # the round did not help: the blocks' clusters are kept as they were
            np.testing.assert_array_equal(fixed, plain)
    # With 60 % of the clusters dissolved it does help on this table.
    qi = table(4000, 0)
    fixed, figures = bl.kmember_blocks(qi, 8, block_size=500, repool=0.6)
    plain, _ = bl.kmember_blocks(qi, 8, block_size=500, rounds=0)
    assert figures["repooled_rows"] > 0
    assert loss_report(qi, fixed).total_il_height < loss_report(qi, plain).total_il_height


@pytest.mark.parametrize("cost", ["height", "ncp"])
def test_quality_close_to_the_exact_rule(cost: str) -> None:
    # Adult's training set in blocks of 8,000 (exact 7.83 % by heights; without the fix-up
    # round 7.92 %, with it 7.57 %).
    from dbanon.bench.methods import adult_arrays

    qi = adult_arrays()
    exact = loss_report(qi, kmember(qi, 10, cost=cost))
    parts, _ = bl.kmember_blocks(qi, 10, block_size=8000, cost=cost)
    part = loss_report(qi, parts)
    field = "ncp_height" if cost == "height" else "ncp_leaf"
    assert getattr(part, field) <= getattr(exact, field) + 0.005, (part, exact)


def test_when_the_table_is_partitioned() -> None:
    assert not bl.partitioned(bl.AUTO_ROWS, None, False)
    assert bl.partitioned(bl.AUTO_ROWS + 1, None, False)
    assert not bl.partitioned(10**7, None, True)  # --exact
    assert bl.partitioned(1001, 1000, False) and not bl.partitioned(1000, 1000, False)


def test_errors() -> None:
    qi = table(100)
    with pytest.raises(ValueError, match="at least 2k"):
        bl.cut(qi, 10, 19)
    with pytest.raises(ValueError, match="at least k=200 rows"):
        bl.kmember_blocks(qi, 200)


def test_pk_blocks_keep_p_values_in_every_block_and_cluster() -> None:
    """(p,k) in blocks: every block holds >= p distinct sensitive values (so the exact rule can
    start a cluster in it), every cluster holds >= k rows and >= p values, checked here from
    the ids alone; skewed values (one in 70 % of rows) leave some blocks whole, never invalid."""
    for trial in range(6):
        rng = np.random.default_rng(100 + trial)
        n, k, p = int(rng.integers(300, 900)), int(rng.integers(2, 6)), int(rng.integers(2, 4))
        qi = table(n, trial)
        skewed = rng.random(n) < 0.7
        sens = np.where(skewed, 0, rng.integers(1, 6, n))
        for b in bl.cut(qi, k, 60, sensitive=sens, p=p):
            assert len(np.unique(sens[b])) >= p and len(b) >= k
        gid, figures = bl.kmember_blocks(qi, k, block_size=60, seed=trial, sensitive=sens, p=p)
        assert figures["blocks"] > 1
        for c in range(int(gid.max()) + 1):
            members = np.flatnonzero(gid == c)
            assert len(members) >= k and len(np.unique(sens[members])) >= p
    with pytest.raises(ValueError, match="only 1 distinct"):
        bl.kmember_blocks(table(100), 3, block_size=40, sensitive=np.zeros(100), p=2)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("cost", ["height", "ncp"])
def test_the_compiled_group_loss_is_group_loss_to_the_bit(seed: int, cost: str) -> None:
    from dbanon.metrics.loss import group_loss

    rng = np.random.default_rng(seed)
    for n, groups in ((5000, 700), (3000, 2), (50, 60)):
        qi = table(n, seed, distinct=bool(seed % 2))
        gid = rng.integers(0, groups, n)  # some ids unused at random: gaps, uneven groups
        whole = group_loss(qi, gid, cost)
        got = bl._group_loss(qi, gid, cost)
        assert got.shape == whole.shape
        assert (got == whole).all()
