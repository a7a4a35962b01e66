"""Chameleon (Karypis, Han & Kumar 1999) on shapes of its paper's kind and on the INA
experiment's data; the INA data's reference points grow with the sample as the paper's must."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dbanon.algorithms.ina import leader
from dbanon.cli import main
from dbanon.experiments.ina import BETA, database
from dbanon.metrics.chameleon import chameleon
from dbanon.metrics.clustering import cluster, misclassification


def _rings(n: int = 3000, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Two concentric rings: connected shapes no centroid method separates."""
    rng = np.random.default_rng(seed)
    half = n // 2
    a = rng.uniform(0, 2 * np.pi, n)
    r = np.r_[np.full(half, 1.0), np.full(n - half, 3.0)] + rng.normal(0, 0.1, n)
    return np.c_[r * np.cos(a), r * np.sin(a)], np.r_[np.zeros(half), np.ones(n - half)]


def _moons(n: int = 3000, seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved half moons and a dense blob beside them."""
    rng = np.random.default_rng(seed)
    m = n // 3
    t = rng.uniform(0, np.pi, 2 * m)
    upper = np.c_[np.cos(t[:m]), np.sin(t[:m])]
    lower = np.c_[1 - np.cos(t[m:]), 0.5 - np.sin(t[m:])]
    blob = rng.normal([4.0, 0.0], 0.2, size=(n - 2 * m, 2))
    x = np.concatenate([upper, lower, blob]) + rng.normal(0, 0.05, size=(n, 2))
    return x, np.r_[np.zeros(m), np.ones(m), np.full(n - 2 * m, 2)]


@pytest.mark.parametrize("shapes", [_rings, _moons])
def test_chameleon_finds_its_papers_shapes(shapes) -> None:  # noqa: ANN001
    x, truth = shapes()
    k = len(np.unique(truth))
    assert misclassification(truth, chameleon(x, k)) < 0.005
    # ...where a centroid method cannot: the shapes are not blobs.
    assert misclassification(truth, cluster(x, k, "kmeans")) > 0.05


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6])
def test_chameleon_recovers_the_ina_data_without_noise(k: int) -> None:
    x, truth = database(k)
    assert len(x) == 10_000 and len(np.unique(truth)) == k
    assert misclassification(truth, cluster(x, k, "chameleon")) < 0.005


def test_reference_points_grow_with_the_sample() -> None:
    """Leader clustering on a bigger sample reaches more of the sparse halos."""
    for k in (2, 4, 6):
        x, _ = database(k)
        alpha = np.ptp(x, 0)
        rng = np.random.default_rng(k)

        def refs(s: int, x=x, alpha=alpha, rng=rng) -> float:  # noqa: ANN001
            draws = [len(leader(x[rng.choice(len(x), s, replace=False)], alpha, BETA))
                     for _ in range(20)]  # fmt: skip
            return float(np.mean(draws))

        assert refs(1000) > refs(50) + 0.5


def test_experiment_reports_spread_and_reference_points(tmp_path: Path) -> None:
    out = tmp_path / "ina"
    result = CliRunner().invoke(
        main, ["--json", "experiment", "ina", "--small", "--points", "1000", "--copies", "2",
               "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    row = data["results"][0]
    assert {"refs", "msec_sd", "msec_ci95", "chameleon", "chameleon_ci95",
            "truth_error_chameleon"} <= set(row)  # fmt: skip
    assert row["msec_ci95"] >= 0 and row["refs"] >= 1
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert "refs" in header and "chameleon_ci95" in header
    base = (out / "baseline.csv").read_text().splitlines()[0].split(",")
    assert {"kmeans", "kmeans_ci95", "chameleon", "chameleon_ci95", "copies"} <= set(base)
    assert json.loads((out / "provenance.json").read_text())["settings"]["copies"] == 2
    copies = (out / "copies.csv").read_text().splitlines()
    assert len(copies) == 1 + 2 * len(data["results"])  # INA and its uniform twin, per copy
    assert {"msec", "kmeans", "uniform_kmeans", "chameleon", "uniform_chameleon"} <= set(
        copies[0].split(","))
