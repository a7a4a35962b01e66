"""`dbanon experiment rfka` and `dbanon bench rfka` on tiny settings (the full runs are in the
README, not in tests)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from helpers import cli, cli_json


def test_the_experiment_writes_its_csv_and_plots(dsn: str, tmp_path: Path) -> None:
    code, data = cli_json(
        dsn, "experiment", "rfka", "--out", str(tmp_path), "--ks", "0,5", "--trees", "20",
        "--rows", "300", "--fold-seeds", "3", "--run-seeds", "2",
    )  # fmt: skip
    assert code == 0, data
    rows = list(csv.DictReader((tmp_path / "results.csv").read_text().splitlines()))
    assert len(rows) == 3 * 2 * 2  # data sets x k x methods
    assert {r["dataset"] for r in rows} == {"adult", "breast_cancer", "breast_cancer_all"}
    by = {(r["dataset"], r["method"], r["k"]): r for r in rows}
    assert by["breast_cancer_all", "rfka", "0"]["rows"] == "699"  # '?' kept as a value
    assert by["breast_cancer", "rfka", "0"]["rows"] == "683"  # the paper's: complete rows
    assert float(by["breast_cancer", "rfka", "0"]["features"]) < float(
        by["breast_cancer_all", "rfka", "0"]["features"])  # 8 attributes, no '?' value
    for r in rows:  # a mean over 2 runs (each of 3 fold shuffles) with its interval
        assert r["fold_seeds"] == "3" and r["run_seeds"] == "2"
        assert float(r["auc_ci95"]) >= 0 and float(r["auc_sd"]) >= 0
    runs = list(csv.DictReader((tmp_path / "seeds.csv").read_text().splitlines()))
    assert len(runs) == 2 * len(rows) and {r["seed"] for r in runs} == {"0", "1"}
    for r in rows:  # the summary is the mean of its runs
        mine = [float(x["auc"]) for x in runs
                if (x["dataset"], x["method"], x["k"]) == (r["dataset"], r["method"], r["k"])]
        assert abs(sum(mine) / 2 - float(r["auc"])) < 1e-4, r
    assert json.loads((tmp_path / "provenance.json").read_text())["settings"]["run_seeds"] == 2
    assert by["adult", "hamdist", "5"]["rows"] == "300"
    for r in rows:
        assert 0.0 <= float(r["auc"]) <= 1.0, r
        assert float(r["auc"]) > 0.8 or r["k"] != "0", r  # every feature classifies well
        assert (r["seconds"] == "") == (r["k"] == "0"), r
    # k=0 is every feature; a k-anonymous subset has at most as many
    for name in ("adult", "breast_cancer"):
        assert float(by[name, "rfka", "5"]["features"]) <= float(by[name, "rfka", "0"]["features"])
    for png in ("auc.png", "time.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(data["findings"]) == {"adult", "breast_cancer", "breast_cancer_all"}
    for found in data["findings"].values():
        for judged in found["rfka_auc_at_least_hamdist"].values():
            assert judged["ci95_low"] <= judged["difference"] <= judged["ci95_high"]
            expected = ("holds" if judged["ci95_low"] > 0 else
                        "fails" if judged["ci95_high"] < 0 else "undecided")  # fmt: skip
            assert judged["verdict"] == expected
    # the releases it made are dropped again
    code, listed = cli_json(dsn, "releases")
    assert code == 0 and not listed.get("releases"), listed


def test_bench_rfka_times_forest_and_search_apart(dsn: str) -> None:
    code, data = cli_json(dsn, "bench", "rfka", "--rows", "2000", "--trees", "20")
    assert code == 0, data
    assert data["rows"] == data["fit_rows"] == 2000 and data["k"] == 10
    assert data["search_queries"] == 8  # one query per QI tried
    assert data["seconds_forest"] > 0 and data["seconds_search"] > 0
    assert data["min_class_size"] >= 10 and data["released_rows"] == 2000


def test_missing_wisconsin_data_is_one_line(dsn: str, tmp_path: Path) -> None:
    result = cli(dsn, "experiment", "rfka", "--out", str(tmp_path), "--ks", "0",
                 "--datasets", str(tmp_path / "none"), "--rows", "300")  # fmt: skip
    assert result.exit_code == 2 and "pass --datasets DIR" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
