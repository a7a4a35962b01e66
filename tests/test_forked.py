"""Work on forked workers gives what one process gives, in the same order (no database).

persist.split_large tries its splits on every core (dbanon.algorithms.forked): the groups it
returns must not depend on how many workers ran them, nor on which finished first."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from dbanon.algorithms import forked, persist
from dbanon.algorithms.base import QIArrays
from dbanon.algorithms.kmember import kmember
from dbanon.core.hierarchy import Hierarchy

several = pytest.mark.skipif(forked.cores() < 2, reason="one core: nothing runs forked")


@several
def test_a_forked_map_keeps_the_order_and_reads_the_parents_arrays() -> None:
    data = np.random.default_rng(0).random(5000)
    seen = {"calls": 0}

    def fn(i: int) -> float:  # a closure over arrays: inherited by the fork, never pickled
        seen["calls"] += 1
        return float(data[i : i + 7].sum()) * (i % 3)

    items = list(range(1000))
    got = forked.forked_map(fn, items, least=1)
    assert got == [fn(i) for i in items]
    assert seen["calls"] == len(items)  # the parent ran none of the forked calls itself
    assert forked._WORK is None


@several
def test_an_error_in_a_worker_reaches_the_caller() -> None:
    def fn(i: int) -> int:
        if i == 700:
            raise ValueError("row 700")
        return i

    with pytest.raises(ValueError, match="row 700"):
        forked.forked_map(fn, list(range(1000)), least=1)
    assert forked._WORK is None


@several
def test_workers_end_quietly_under_the_callers_signal_handlers() -> None:
    """The CLI raises on SIGTERM (one line, exit 143); a pool ends its workers with SIGTERM."""
    script = (
        "import signal, sys\n"
        "from dbanon.algorithms.forked import forked_map\n"
        "def on(s, f): raise SystemExit('handler ran in ' + str(s))\n"
        "signal.signal(signal.SIGTERM, on)\n"
        "items = list(range(-500, 500))\n"
        "assert forked_map(abs, items, least=1) == [abs(i) for i in items]\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_few_items_run_here() -> None:
    calls: list[int] = []
    assert forked.forked_map(calls.append, [1, 2, 3]) == [None, None, None]
    assert calls == [1, 2, 3]


@several
@pytest.mark.parametrize("seed", range(3))
def test_split_large_gives_the_same_groups_on_every_core(seed: int, monkeypatch) -> None:
    rng = np.random.default_rng(seed)
    n, k = 12_000, 4
    h = Hierarchy.flat("r", ["a", "b", "c", "d"])
    qi = QIArrays.build([rng.random(n), rng.integers(0, 5, n).astype(float)],
                        [(rng.integers(0, 4, n).astype(np.int32), h)])  # fmt: skip
    gid = rng.integers(0, 400, n)  # 400 groups of about 30 rows: all tried
    tag = rng.integers(0, 3, n)

    def cluster(rows: np.ndarray) -> np.ndarray:
        return kmember(persist.subset(qi, rows), k, seed=seed)

    def holds(rows: np.ndarray) -> bool:  # a promise some splits keep and others do not
        return len(np.unique(tag[rows])) >= 2 + (seed % 2)

    serial = persist.split_large(gid.copy(), cluster, holds, k)
    monkeypatch.setattr(forked, "LEAST", 10**9)
    here = persist.split_large(gid.copy(), cluster, holds, k, forked=True)
    monkeypatch.setattr(forked, "LEAST", 1)
    spread = persist.split_large(gid.copy(), cluster, holds, k, forked=True)
    assert (here == spread).all() and (here == serial).all()
    assert here.max() + 1 > 400  # some splits were kept


def test_a_fork_waits_for_numbas_set_up_thread() -> None:
    """A publish sets numba's target up in a thread (dbanon.algorithms.warmup); a fork made
    while it holds numba's compiler lock would leave that lock held in every child, whose
    first compile then waits forever. forked_map waits for the thread first (without it,
    this child process hangs and is stopped)."""
    script = (
        "import threading\n"
        "from numba import njit\n"
        "from dbanon.algorithms import forked, warmup\n"
        "warmup.start(); warmup.start()\n"
        "names = [t.name for t in threading.enumerate()]\n"
        "assert names.count('dbanon-numba-warmup') <= 1, names\n"
        "square = njit(lambda x: x * x)  # compiled first in the children\n"
        "got = forked.forked_map(square, list(range(600)), least=2)\n"
        "assert got == [x * x for x in range(600)]\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.stdout.strip() == "ok", done.stderr


def test_a_publishs_numba_set_up_leaves_scipy_out() -> None:
    """numba's set-up in a publish (warmup) does not load scipy.linalg (numba's BLAS, for
    compiled np.dot, which no kernel calls; ~15 MB resident), kernels still run, and
    scipy.linalg still imports afterwards."""
    script = (
        "import sys\n"
        "import numpy as np\n"
        "from dbanon.algorithms import warmup\n"
        "from dbanon.db import copykernels\n"
        "warmup.start(); warmup.join()\n"
        "assert copykernels.int_texts(np.arange(3, dtype=np.int64))[2].tolist() == [48, 49, 50]\n"
        "assert 'scipy.linalg' not in sys.modules, 'scipy.linalg loaded'\n"
        "import scipy.linalg.cython_blas\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.stdout.strip() == "ok", done.stderr
