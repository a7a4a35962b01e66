"""`dbanon experiment cbg` and `dbanon bench cbg` on tiny settings: they run end to end in
PostgreSQL, write their CSV and plots, and report figures that agree with what they measured."""

from __future__ import annotations

import csv
from pathlib import Path

import psycopg
from helpers import cli_json


def test_experiment_cbg_writes_csv_and_plots(
    conn: psycopg.Connection, dsn: str, tmp_path: Path
) -> None:
    out = tmp_path / "cbg"
    code, data = cli_json(dsn, "experiment", "cbg", "--out", str(out), "--rows", "400", "--ls",
                          "2,4", "--fixed", "4", "--ks", "2,3", "--queries", "30")  # fmt: skip
    assert code == 0, data
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["part"], r["method"], r["l"]) for r in rows] == [
        ("l", "cbg", "2"), ("l", "mondrian", "2"), ("l", "anatomy", "2"),
        ("l", "cbg", "4"), ("l", "mondrian", "4"), ("l", "anatomy", "4"),
        ("k", "cbg", "4"), ("k", "cbg", "4"),
    ]  # fmt: skip
    for r in rows:
        assert 0 < float(r["exposure"]) <= float(r["exposure_max"]) <= 1
        # Every method meets the thesis's bound, the Mondrian baseline (p <= 1/l) included.
        assert float(r["exposure_max"]) <= 1 / int(r["l"]) + 1e-9
        assert float(r["query_error"]) >= 0 and int(r["dm"]) >= int(r["rows"])
    assert len(data["plots"]) == 6 and all(Path(p).stat().st_size > 0 for p in data["plots"])
    assert set(data["findings"]) >= {"cbg_lowest_exposure_for_l", "cbg_dm_max_over_min",
                                     "cbg_error_below_mondrian_for_l"}  # fmt: skip
    # No experiment release is left behind.
    assert conn.execute("SELECT count(*) FROM dbanon.release").fetchone()[0] == 0


def test_bench_cbg(dsn: str) -> None:
    code, data = cli_json(dsn, "bench", "cbg", "--sizes", "300,600", "--k", "3", "--l", "4")
    assert code == 0, data
    assert [r["rows"] for r in data["runs"]] == [300, 600] and data["rows_ratio"] == 2
    for r in data["runs"]:
        assert r["check_holds"] and r["max_disclosure"] <= 1 / 4 + 1e-9
        assert {"extract", "cluster", "materialise", "verify", "exposure"} <= set(r["timings"])
        assert r["exposure_max"] <= 1 / 4 + 1e-9
