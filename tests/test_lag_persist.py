"""dbanon.algorithms.lag_persist on hand-worked cases: what the judge counts, and buckets kept,
dissolved and refilled across a refresh."""

from __future__ import annotations

import numpy as np
import pytest

from dbanon.algorithms.lag_persist import Attr, Judge, _bucket, class_values
from dbanon.algorithms.localanatomy import Principle

L3 = Principle("l", 3)


def test_the_judge_counts_rows_whose_buckets_hold_a_plausible_value() -> None:
    """One class of three rows in buckets {0,1,2}, {0,3,4} and {5,6,7} (codes). A person the
    consumer knew with plausible {0, 3, 5, 9}: 9 is in no bucket of the class and goes, the three
    others stay, all three rows are plausible. With plausible {0}: one value, the two rows
    holding 0."""
    codes = np.array([0, 1, 2, 0, 3, 4, 5, 6, 7])
    bucket = np.array([1, 1, 1, 2, 2, 2, 3, 3, 3])
    attrs = {"dx": Attr(codes, L3, codes)}
    rows = np.array([0, 3, 6])  # the class: one row of each bucket
    wide, narrow = {"dx": frozenset({0, 3, 5, 9})}, {"dx": frozenset({0})}
    known = [None] * 9
    known[0], known[3] = wide, narrow
    judged = {r: (now["dx"], count, fewest)
              for r, now, count, fewest in Judge(attrs, {"dx": bucket}, known, 2).members(rows)}
    assert judged[0] == (frozenset({0, 3, 5}), 3, 3)
    assert judged[3] == (frozenset({0}), 2, 1)
    assert judged[6] == (frozenset(range(8)), -1, -1)  # a new person: the class's values
    assert not Judge(attrs, {"dx": bucket}, known, 2).holds(rows)  # row 3 keeps 1 value < 3
    known[3] = None
    assert Judge(attrs, {"dx": bucket}, known, 2).holds(rows)
    assert not Judge(attrs, {"dx": bucket}, known, 4).holds(rows)  # 3 plausible rows < k=4


def test_buckets_persist_and_one_left_short_is_dissolved() -> None:
    """Buckets {a,b,c} and {d,e,f} persist; the second loses e (deleted) and f (changed), so
    it holds one value and is dissolved: its row d, the changed row and three new rows are
    bucketised again; every bucket ends with >= 3 values, each once, and {a,b,c} is intact."""
    #            a  b  c  d  f' g  h  i
    codes = np.array([0, 1, 2, 3, 5, 6, 7, 8])
    old = np.array([1, 1, 1, 2, 0, 0, 0, 0])  # f changed: it is placed again as new
    persist = np.array([True, True, True, True, False, False, False, False])
    out, dissolved = _bucket(Attr(codes, L3, codes), np.ones(8, bool), persist, old, False,
                             np.random.default_rng(1))  # fmt: skip
    assert dissolved == 1
    assert out[0] == out[1] == out[2] and (out[3:] != out[0]).all()
    for b in np.unique(out):
        vals = codes[out == b]
        assert len(vals) >= 3 and len(set(vals.tolist())) == len(vals)


def test_rows_too_few_to_bucketise_join_kept_buckets_that_lack_their_value() -> None:
    """Two kept buckets {a,b,c} and {a,d,e}; one new row with value d: alone it cannot be
    bucketised (fewer than l rows), so it joins the only bucket lacking d."""
    codes = np.array([0, 1, 2, 0, 3, 4, 3])
    old = np.array([1, 1, 1, 2, 2, 2, 0])
    persist = old > 0
    out, dissolved = _bucket(Attr(codes, L3, codes), np.ones(7, bool), persist, old, False,
                             np.random.default_rng(2))  # fmt: skip
    assert dissolved == 0
    assert out[6] == out[0]


def test_a_value_every_kept_bucket_holds_dissolves_one_instead_of_jamming() -> None:
    """Kept buckets {a,b,c,h} and {a,d,e,i} both hold a; new rows a, a and f cannot be
    bucketised alone (a twice in three rows, l=2) nor join a kept bucket (each holds a). The
    whole table can (a in 4 of 11 rows): a kept bucket is dissolved and the pool bucketised
    again, each bucket with >= 2 values, each once. Before, the refresh failed ("value code 0
    is in every bucket")."""
    l2 = Principle("l", 2)
    #                  a  b  c  h  a  d  e  i  a  a  f
    codes = np.array([0, 1, 2, 7, 0, 3, 4, 8, 0, 0, 5])
    old = np.array([1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0])
    for seed in range(20):
        out, dissolved = _bucket(Attr(codes, l2, codes), np.ones(11, bool), old > 0, old, False,
                                 np.random.default_rng(seed))  # fmt: skip
        assert dissolved >= 1 and (out > 0).all()
        assert sorted(np.unique(out).tolist()) == list(range(1, int(out.max()) + 1))
        for b in np.unique(out):
            vals = codes[out == b]
            assert len(vals) >= 2 and len(set(vals.tolist())) == len(vals), (seed, out)


def test_a_class_holds_the_values_of_its_rows_buckets() -> None:
    """Group 0's rows lie in buckets 1 and 2, group 1's in bucket 2 only; bucket 1 holds code 0,
    bucket 2 codes {2, 3}. An unflagged row (bucket 0) adds nothing, nor does a row the release
    left out (gid -1), whatever bucket it is given."""
    gid = np.array([0, 0, 1, 1, -1, 1])
    bucket = np.array([1, 2, 2, 0, 1, 2])
    codes = np.array([0, 2, 3, 9, 1, 2])
    g, c = class_values(gid, bucket, codes)
    assert list(zip(g.tolist(), c.tolist(), strict=True)) == [(0, 0), (0, 2), (0, 3), (1, 2),
                                                              (1, 3)]  # fmt: skip


@pytest.mark.parametrize("seed", range(6))
def test_class_values_read_plainly(seed: int) -> None:
    """Against a plain reading: per group (rows the release shows), every value of every
    bucket its rows lie in, where a bucket's values are those of the shown rows in it."""
    rng = np.random.default_rng(seed)
    n = 400
    gid = rng.integers(-1, 30, n)
    bucket = rng.integers(0, 80, n)
    codes = np.where(bucket > 0, rng.integers(0, 25, n), -1)
    held: dict[int, set[int]] = {}
    for g_, b_, c_ in zip(gid.tolist(), bucket.tolist(), codes.tolist(), strict=True):
        if g_ >= 0 and b_ > 0:
            held.setdefault(b_, set()).add(c_)
    want = sorted({(g_, v) for g_, b_ in zip(gid.tolist(), bucket.tolist(), strict=True)
                   if g_ >= 0 and b_ > 0 for v in held[b_]})  # fmt: skip
    g, c = class_values(gid, bucket, codes)
    assert list(zip(g.tolist(), c.tolist(), strict=True)) == want


def test_a_person_no_grouping_can_keep_is_withheld_not_a_refused_refresh() -> None:
    """Twelve rows in one QI-partition subset, all flagging dx, one group of four kept buckets.
    Person 0 was seen with plausible values {9, 10, 11}, which no row holds any more: no class
    can show her three of them. She is left out of the release (she keeps what the earlier
    ones showed), the other eleven are laid out and every person the consumer knew holds;
    before, the subset stayed one failing group and the refresh was refused."""
    from dbanon.algorithms.base import QIArrays
    from dbanon.algorithms.lag import VARIANTS
    from dbanon.algorithms.lag_persist import persist

    n = 12
    qi = QIArrays(np.arange(n, dtype=np.float64)[:, None] / n, np.zeros((n, 0), np.int32),
                  np.zeros((0, 1, 1), np.int32), np.zeros((0, 1), np.float64))  # fmt: skip
    codes = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 3, 6])
    old = {"dx": np.repeat([1, 2, 3, 4], 3)}
    known: list = [None] * n
    known[0] = {"dx": frozenset({9, 10, 11})}  # her values have left the table
    known[4] = {"dx": frozenset({3, 4, 5, 0, 6})}  # one that a class can keep
    rng, flags = np.random.default_rng(5), (np.zeros((n, 1), bool), np.zeros((n, 0), bool))
    layout, judge = persist(qi, *flags, {"dx": Attr(codes, L3, codes)}, 3, VARIANTS[0], False,
                            rng, np.zeros(n, np.int64), old, known)  # fmt: skip
    assert layout.gid[0] == -1 and (layout.gid[1:] >= 0).all()
    assert layout.figures["withheld_rows"] == 1
    measured = judge.measure(layout.gid).known
    assert measured[0] == (known[0], -1, -1)  # left out: she keeps her past
    assert measured[4][1] >= 3 and measured[4][2] >= 3
    for g in np.unique(layout.gid[1:]):
        assert judge.holds(np.flatnonzero(layout.gid == g))
