"""Issue 24 item 4: the noise floor and the linkage figure, on a 10,000-row table of its own.

An attacker holding the originals links each released row to its nearest original (normalised
by the columns' ranges). The test measures that itself over every row, with numpy and plain SQL
through the private row map (nothing from dbanon), and checks the figure each run records.
"""

from __future__ import annotations

import math

import numpy as np
import psycopg
import pytest
from helpers import cli, cli_json, make_table, noise_map
from psycopg import sql
from scipy.spatial import cKDTree

ROWS = 10_000


@pytest.fixture
def shop(conn: psycopg.Connection) -> psycopg.Connection:
    """Spend and visits: a broad population and three dense customer segments."""
    rng = np.random.default_rng(24)
    centres = np.array([[20.0, 30.0], [70.0, 20.0], [50.0, 80.0]])
    x = np.where(
        (np.arange(ROWS) % 2 == 0)[:, None],
        rng.uniform(0, 100, size=(ROWS, 2)),
        centres[np.arange(ROWS) % 3] + rng.normal(0, 6, size=(ROWS, 2)),
    )
    rows = [(i + 1, round(float(a), 3), round(float(b), 3), f"s{i % 4}")
            for i, (a, b) in enumerate(x)]  # fmt: skip
    make_table(conn, "sales", "shop",
               [("id", "int PRIMARY KEY"), ("spend", "float8"), ("visits", "numeric"),
                ("segment", "text")], rows)  # fmt: skip
    return conn


def pairs(conn: psycopg.Connection, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(originals, released) of every row of release NAME, paired by the private map."""
    data = np.array(conn.execute(sql.SQL(
        """SELECT s.spend, s.visits::float8, r.spend, r.visits::float8
           FROM released.{} r JOIN {} m ON m.row_id = r.dbanon_row
           JOIN sales.shop s ON s.id::text = m.key""").format(
        sql.Identifier(name), noise_map(conn, name)),
    ).fetchall(), dtype=np.float64)  # fmt: skip
    return data[:, :2], data[:, 2:]


def full_linkage(x: np.ndarray, out: np.ndarray) -> float:
    """Share of all released rows whose nearest original (range-normalised) is their own: a
    k-d tree of the originals, the two nearest of each released row (a tie counts as linked)."""
    scale = x.max(0) - x.min(0)
    z, w = x / scale, out / scale
    near, at = cKDTree(z).query(w, k=2)
    own = np.sqrt(((z - w) ** 2).sum(1))
    rows = np.arange(len(x))
    other = np.where(at[:, 0] == rows, near[:, 1], near[:, 0])
    return float((own <= other * (1 + 1e-12)).mean())


def publish(dsn: str, name: str, *args: str) -> dict:
    code, out = cli_json(dsn, "publish", name, "--source", "sales.shop", "--key", "id",
                         "--columns", "spend,visits", "--seed", "11", *args)  # fmt: skip
    assert code == 0, out
    return cli_json(dsn, "report", name)[1]["method_metrics"]


def test_ina_with_the_floor_links_no_more_than_uniform_noise_at_equal_msec(
    shop: psycopg.Connection, dsn: str
) -> None:
    ina = publish(dsn, "ina", "--algorithm", "ina")
    bare = publish(dsn, "ina0", "--algorithm", "ina", "--noise-floor", "0")
    # uniform noise of the same mSec: SEC_j = (s * range_j)^2 / 3 / var_j
    ratio = min(
        (hi - lo) ** 2 / 3 / var
        for lo, hi, var in shop.execute(
            "SELECT min(spend), max(spend), var_pop(spend) FROM sales.shop UNION ALL "
            "SELECT min(visits)::float8, max(visits)::float8, var_pop(visits)::float8 "
            "FROM sales.shop"
        ).fetchall()
    )
    size = math.sqrt(ina["msec"] / ratio)
    uniform = publish(dsn, "uni", "--algorithm", "noise", "--size", f"{size:.6f}",
                      "--noise-floor", "0")  # fmt: skip
    assert uniform["msec"] == pytest.approx(ina["msec"], rel=0.05)

    print(f"\nmSec ina {ina['msec']:.4f} ina0 {bare['msec']:.4f} uniform {uniform['msec']:.4f} "
          f"(size {size:.4f}); linkage ina {ina['linkage']:.4f} ina0 {bare['linkage']:.4f} "
          f"uniform {uniform['linkage']:.4f}; floor_raised {ina['floor_raised']}")  # fmt: skip
    # every run records its figure, on a sample of 2,000 rows
    for m in (ina, bare, uniform):
        assert m["linkage_sample"] == 2000 and 0 <= m["linkage"] <= 1
    # the floor: default n^(-1/m) of the range, and every value moved at least that far
    assert ina["noise_floor"] == pytest.approx({"spend": 0.01, "visits": 0.01})
    x, out = pairs(shop, "ina")
    moved = np.abs(out - x) / (x.max(0) - x.min(0))
    assert moved.min() >= 0.01 * (1 - 1e-9)
    assert ina["floor_raised"] > 0 and ina["region_changes"] == 0
    # the acceptance: with the floor INA links at most as many rows as uniform noise
    assert ina["linkage"] <= uniform["linkage"], (ina["linkage"], uniform["linkage"])
    assert bare["linkage"] > 2 * uniform["linkage"]  # without it, many more: the floor's point

    # the recorded figures agree with the attacker's own count over every row
    for name, m in (("ina", ina), ("ina0", bare), ("uni", uniform)):
        full = full_linkage(*pairs(shop, name))
        tolerance = 4 * math.sqrt(max(full, 0.002) * (1 - full) / 2000)
        assert abs(m["linkage"] - full) <= tolerance, (name, m["linkage"], full)
        if name == "ina":
            assert full <= full_linkage(*pairs(shop, "uni"))

    shown = cli(dsn, "report", "ina").stdout
    assert "linkage" in shown and "noise floor" in shown
    code, cmp = cli_json(dsn, "compare", "sales.shop", "ina", "--columns", "spend,visits",
                         "--clusters", "3")  # fmt: skip
    assert code == 0 and cmp["linkage"]["recorded"] == ina["linkage"]
    line = cli(dsn, "compare", "sales.shop", "ina", "--columns", "spend,visits", "--clusters",
               "3").stdout  # fmt: skip
    assert f"(recorded at publish {ina['linkage']:.2%})" in line and "linkage " in line
    full = full_linkage(*pairs(shop, "ina"))
    assert abs(cmp["linkage"]["measured"] - full) <= 4 * math.sqrt(max(full, 0.002) / 2000)


def test_linkage_streamed_in_uneven_batches_equals_the_count_over_all_pairs() -> None:
    """The stream's figure (any batch sizes, even one row; duplicate originals tie and count as
    linked) is the brute-force count over the sample."""
    from dbanon.metrics.linkage import Linkage

    rng = np.random.default_rng(9)
    x = rng.uniform(0, 50, size=(3000, 3))
    x[10:20] = x[0]  # ten duplicates of row 0
    out = x + rng.uniform(-0.3, 0.3, size=x.shape)
    out[0] = x[0]  # released exactly: ties with its duplicates
    alpha = np.array([50.0, 25.0, 10.0])
    keys = [f"k{i}" for i in range(len(x))]
    sample = rng.permutation(len(x))[:700].tolist() + [0]
    measure = Linkage([keys[i] for i in sample], out[sample], alpha)
    cuts = [0, 1, 2, 500, 501, 1700, 3000]
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        measure.add(keys[a:b], x[a:b])
    z, w = x / alpha, out[sample] / alpha
    d = ((w[:, None, :] - z[None, :, :]) ** 2).sum(2)
    own = d[np.arange(len(sample)), sample]
    expected = float((own <= d.min(1)).mean())
    assert measure.figures() == {"linkage": expected, "linkage_sample": len(sample)}


def _table(n: int, m: int, kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "blobs":
        centres = rng.uniform(0, 10, size=(5, m))
        return centres[np.arange(n) % 5] + rng.normal(size=(n, m))
    if kind == "uniform":
        return rng.uniform(0, 1, size=(n, m))
    return rng.lognormal(size=(n, m))


SWEEP = [(n, m, kind, seed) for n in (2000, 10_000) for m in (2, 3)
         for kind in ("blobs", "uniform", "lognormal") for seed in (0, 1)]  # fmt: skip


@pytest.mark.parametrize(("n", "m", "kind", "seed"), SWEEP)
def test_the_default_floor_across_tables(n: int, m: int, kind: str, seed: int) -> None:
    """docs/noise.md's sweep: with the default floor, n^(-1/m) of the range, INA links no more
    rows than uniform noise fitted to the same mSec, on 24 tables (7 s for all)."""
    from dbanon.algorithms.ina import ina_sizes, leader, nearest_two, perturb

    x = _table(n, m, kind, seed)
    alpha = x.max(0) - x.min(0)
    rng = np.random.default_rng(seed + 100)
    refs = leader(x[rng.choice(n, 200, replace=False)], alpha, 5.0)
    _, r1, r2 = nearest_two(x, refs, alpha)
    u = rng.uniform(-1, 1, size=x.shape)
    out = perturb(x, u, ina_sizes(r1, r2, m), alpha, np.full(m, n ** (-1 / m)))
    msec = ((out - x).var(0) / x.var(0)).min()
    lo, hi = 1e-4, 2.0  # the uniform size of the same mSec, by bisection
    for _ in range(40):
        size = (lo + hi) / 2
        lo, hi = (size, hi) if ((u * size * alpha).var(0) / x.var(0)).min() < msec else (lo, size)
    assert full_linkage(x, out) <= full_linkage(x, x + u * size * alpha)
