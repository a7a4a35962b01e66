"""`dbanon bench ...` on small settings: each runs, reads its options and reports figures that
agree with what it measured (the timings themselves are for the docs, not for tests)."""

from __future__ import annotations

import json

import psycopg
import pytest
from click.testing import CliRunner
from helpers import cli, cli_json

from dbanon.cli import main


def bench(*args: str) -> dict:
    """A bench command that needs no database (the in-memory algorithms)."""
    result = CliRunner().invoke(main, ["--json", "bench", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_bench_kmember() -> None:
    out = bench("kmember", "--rows", "500", "--k", "5", "--seed", "3")
    assert (out["algorithm"], out["rows"], out["k"]) == ("kmember", 500, 5)
    assert out["classes"] == 500 // 5  # clusters of k..2k-1 rows, one per k rows
    assert 0 < out["ncp_height"] < 1 and out["total_il_height"] > 0 and out["seconds"] >= 0
    assert out["ncp_height"] == out["total_il_height"] / (500 * 8)
    assert out["ncp_leaf"] == out["total_il_leaf"] / (500 * 8)
    # the seed is read: the same seed gives the same clusters, k is read too
    again = bench("kmember", "--rows", "500", "--k", "5", "--seed", "3")
    for figure in ("ncp_leaf", "total_il_height"):
        assert again[figure] == out[figure]
    ncp = bench("kmember", "--rows", "500", "--k", "5", "--cost", "ncp", "--seeding", "furthest")
    assert (ncp["cost"], ncp["seeding"]) == ("ncp", "furthest")
    assert ncp["total_il_leaf"] != out["total_il_leaf"]
    assert bench("kmember", "--rows", "500", "--k", "10", "--seed", "3")["classes"] == 50


def test_bench_mondrian() -> None:
    ordered = bench("mondrian", "--rows", "600", "--k", "6")
    assert (ordered["rows"], ordered["k"]) == (600, 6)
    assert ordered["setting"] == "ordered categories, no hierarchies"
    assert 1 < ordered["classes"] <= 600 // 6 and 0 < ordered["gcp"] < 1
    arx = bench("mondrian", "--rows", "600", "--k", "6", "--hierarchies")
    assert arx["setting"] == "ARX hierarchies" and 1 <= arx["classes"] <= 100
    assert arx["gcp"] != ordered["gcp"]
    human = CliRunner().invoke(main, ["bench", "mondrian", "--rows", "600", "--k", "6"])
    assert human.exit_code == 0
    assert human.stdout.startswith("mondrian (ordered categories, no hierarchies): 600 rows, k=6")


def test_bench_fulldomain(dsn: str) -> None:
    code, out = cli_json(dsn, "bench", "fulldomain", "--rows", "400", "--k", "4")
    assert code == 0, out
    assert (out["rows"], out["k"], len(out["qi"])) == (400, 4, 9)
    assert out["nodes"] == 5 * 4 * 3 * 3 * 3 * 2 * 2 * 2 * 3  # the lattice of ARX's hierarchies
    assert 0 < out["nodes_checked"] < out["nodes"]  # pruning pruned
    assert set(out["levels"]) == set(out["qi"]) and 0 <= out["loss"] <= 1
    pub = out["publish"]  # the same setting published end to end, then dropped
    assert pub["timings"]["search"] > 0 and pub["seconds"] >= pub["timings"]["search"]
    beyond = pub["seconds"] - pub["timings"]["search"]
    assert pub["beyond_search"] == pytest.approx(beyond, abs=2e-3)
    with psycopg.connect(dsn) as conn:
        assert not conn.execute("SELECT 1 FROM dbanon.release WHERE name = %s",
                                ["dbanon_bench_fulldomain"]).fetchone()  # fmt: skip


def test_bench_check(conn: psycopg.Connection, dsn: str) -> None:
    code, out = cli_json(dsn, "bench", "check", "--rows", "2000", "--k", "3")
    assert code == 0, out
    assert out["rows"] == 2000 and out["seconds_k"] >= 0 and out["seconds_l"] >= 0
    classes = conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM dbanon_bench.people_2000 "
        "GROUP BY age, sex, zip, education, marital, race) c"
    ).fetchone()[0]
    assert (
        out["classes"] == classes
        and conn.execute("SELECT count(*) FROM dbanon_bench.people_2000").fetchone()[0] == 2000
    )
    human = cli(dsn, "bench", "check", "--rows", "2000", "--k", "3")  # the table is reused
    assert human.exit_code == 0 and human.stdout.startswith("check: 2000 rows, 6 QIs:")
