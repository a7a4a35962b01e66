"""The chapters 4-5 experiments, the LA/LAG query answerer and `bench lag`, on tiny settings."""

from __future__ import annotations

from pathlib import Path

import psycopg
from helpers import cli_json

from dbanon.data.salary import load_salary
from dbanon.experiments import lag, localanatomy


def test_localanatomy_experiment_writes_csv_and_plots(dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(dsn) as conn:  # publish's transactions, as `dbanon` opens them
        data = localanatomy.run(conn, tmp_path, ls=(3, 4), densities=(0.2, 0.3), rows=600,
                                n_queries=20)  # fmt: skip
    for f in [*data["files"], *data["plots"]]:
        assert Path(f).stat().st_size > 0, f
    series = {r["series"] for r in data["exposure"]}
    assert series == {"Anatomy", "LocalAnatomy_a", "LocalAnatomy_b"}
    assert {r["series"] for r in data["query_error"]} == {
        "Mondrian", "Anatomy", "LocalAnatomy", "HeuristicLocalAnatomy"}  # fmt: skip
    # Local anatomy keeps every flagged value within 1/l of the l its buckets got, under both
    # attackers; Anatomy shows the semi-sensitive values (a higher exposure).
    f = data["findings"]
    assert f["la_within_1_over_l_a"] and f["la_within_1_over_l_b"]
    assert f["la_within_1_over_l_all_densities"]
    anatomy = [r["semi_sensitive"] for r in data["exposure"] if r["series"] == "Anatomy"]
    la = [r["semi_sensitive"] for r in data["exposure"] if r["series"] == "LocalAnatomy_a"]
    assert min(anatomy) > max(la)


def test_lag_experiment_writes_csv_and_plots(tmp_path: Path) -> None:
    data = lag.run(tmp_path, ks=(3,), ls=(3,), densities=(0.2,), rows=600, n_queries=20)
    for f in [*data["files"], *data["plots"]]:
        assert Path(f).stat().st_size > 0, f
    assert {r["variant"] for r in data["results"]} == {"LAG_1", "LAG_2", "LAG_2_thesis"}
    assert all(r["dm"] >= 600 * 3 and 0 <= r["ncp"] <= 1 for r in data["results"])


def test_evaluate_reads_an_la_and_a_lag_release(conn: psycopg.Connection, dsn: str) -> None:
    """`dbanon evaluate` answers the shared workload on the localanatomy shape (flagged cells
    read as their buckets' values, salary buckets from NAME_salary_idt/_st)."""
    load_salary(conn, "s", "pay", 400)
    conn.execute("CREATE TABLE s.flags AS SELECT id, 'age'::text AS column_name FROM s.pay "
                 "WHERE id % 5 = 0")  # fmt: skip
    conn.commit()
    errors = {}
    for method, extra in (("localanatomy", ()), ("lag", ("--k", "4"))):
        code, out = cli_json(dsn, "publish", method, "--source", "s.pay", "--key", "id",
                             "--qi", "sex,age,race,hours_per_week", "--sensitive", "salary",
                             "--algorithm", method, "--l", "4", "--flags", "s.flags",
                             "--heuristic", *extra)  # fmt: skip
        assert code == 0, out
        code, ev = cli_json(dsn, "evaluate", method, "--queries", "30")
        assert code == 0, ev
        assert ev["shape"] == "localanatomy" and ev["rows"] == 400 and ev["query_error"] > 0
        errors[method] = ev["query_error"]
    assert errors["lag"] >= errors["localanatomy"]  # generalisation only widens the boxes


def test_bench_lag_json(dsn: str) -> None:
    code, out = cli_json(dsn, "bench", "lag", "--rows", "300", "--k", "3", "--l", "3")
    assert code == 0, out
    for variant in ("partition", "ncp"):
        v = out["variants"][variant]
        assert v["seconds"] > 0 and v["released_rows"] + v["suppressed_rows"] == 300
        assert v["min_class_size"] >= 3
