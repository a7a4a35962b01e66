"""The (θ,k) demo, experiment and benchmark commands, on small settings."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import psycopg
from click.testing import CliRunner
from helpers import cli, cli_json

from dbanon.cli import main
from dbanon.data import hierarchy_file

HOSPITAL_QI = ["age", "years_ill", "gender", "district", "allergy", "marital_status"]


def shipped_categories() -> dict[str, str]:
    """disease -> category, read from the shipped ARX file by the test itself."""
    with open(hierarchy_file("disease"), newline="") as f:
        return {row[0]: row[1] for row in csv.reader(f, delimiter=";")}


def test_demo_hospital_loads_the_table_and_hierarchy_and_publishes(
    conn: psycopg.Connection, dsn: str
) -> None:
    code, out = cli_json(dsn, "demo", "--dataset", "hospital", "--rows", "1500", "--k", "6")
    assert code == 0, out
    assert out["rows"] == 1500 and out["min_class_size"] >= 6
    assert out["table"] == "released.hospital_theta3_k6"
    assert 0 < out["background_vulnerability"] <= 1 and 0 < out["similarity_vulnerability"] <= 1
    cols = [r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'demo.hospital'::regclass "
        "AND attnum > 0 ORDER BY attnum"
    )]  # fmt: skip
    assert cols == ["id", *HOSPITAL_QI, "disease"]
    categories = shipped_categories()
    assert len(categories) == 40 and len(set(categories.values())) == 8
    code, shown = cli_json(dsn, "hierarchy", "show", "demo_hospital_disease")
    assert code == 0 and sorted(r[0] for r in shown["rows"]) == sorted(categories)
    # Every disease of the table is in the hierarchy, and the table is deterministic.
    digest = "SELECT md5(string_agg(t::text, '|' ORDER BY id)) FROM demo.hospital t"
    first = conn.execute(digest).fetchone()[0]
    assert {r[0] for r in conn.execute("SELECT DISTINCT disease FROM demo.hospital")} <= set(
        categories
    )
    # Independent check of the release: plain Python over its rows.
    classes: dict = defaultdict(list)
    for *q, d in conn.execute(
        "SELECT age, years_ill, gender, district, allergy, marital_status, disease "
        "FROM released.hospital_theta3_k6"
    ):
        classes[tuple(q)].append(d)
    # the paper's need_c = min(⌊k/θ⌋, V_c), V_c the distinct values of c in the release
    distinct: dict = defaultdict(set)
    for ds in classes.values():
        for d in ds:
            distinct[categories[d]].add(d)
    need = {c: min(2, len(v)) for c, v in distinct.items()}
    for ds in classes.values():
        per: dict = defaultdict(set)
        for d in ds:
            per[categories[d]].add(d)
        assert len(ds) >= 6
        assert sum(len(v) >= need[c] for c, v in per.items()) >= 3
    assert cli_json(dsn, "demo", "--dataset", "hospital", "--rows", "1500", "--k", "6")[0] == 0
    assert conn.execute(digest).fetchone()[0] == first
    result = cli(dsn, "demo", "--rows", "10")
    assert result.exit_code == 2 and "--rows applies to --dataset hospital" in result.stderr


def test_experiment_writes_both_rules_and_both_measures(tmp_path: Path) -> None:
    out = tmp_path / "exp"
    result = CliRunner().invoke(
        main,
        ["--json", "experiment", "thetak", "--rows", "600", "--ks", "6,9", "--seeds", "2",
         "--out", str(out)],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    rules = ("thetak", "thetak_relaxed", "thetak_nearest", "thetak_paper")
    assert {(r["dataset"], r["algorithm"], int(r["k"])) for r in rows} == {
        (d, a, k) for d in ("hospital", "adult") for a in (*rules, "kmember", "pk")
        for k in (6, 9)
    }  # fmt: skip
    for r in rows:
        assert int(r["min_class_size"]) >= int(r["k"]) and int(r["rows"]) == 600
        assert r["seeds"] == "2"
        for m in ("background", "similarity", "majority_category"):
            assert 0 <= float(r[f"{m}_vulnerability"]) <= 1
            assert float(r[f"{m}_vulnerability_ci95"]) >= 0
        if r["algorithm"] in rules:
            assert r["theta_k_holds"] == "True"
        # the paper's condition: none of the default's classes fail it, and no grouping
        # meeting it has more classes than the bound
        if r["algorithm"] in ("thetak", "thetak_nearest", "thetak_paper"):
            assert float(r["paper_failing_classes"]) == 0
            assert float(r["classes"]) <= int(r["class_bound"])
        assert 0 < float(r["ncp_leaf"]) < 100
    for png in ("background.png", "similarity.png", "majority.png", "time.png", "loss.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every run's figures, the claims' paired evidence: two seeds a setting, averaging to the
    # summary's mean
    with open(out / "seeds.csv") as f:
        runs = list(csv.DictReader(f))
    assert len(runs) == 2 * len(rows)
    for r in rows:
        mine = [float(x["gcp"]) for x in runs
                if (x["dataset"], x["algorithm"], x["k"]) == (r["dataset"], r["algorithm"], r["k"])]
        assert sorted({x["seed"] for x in runs}) == ["0", "1"]
        assert abs(sum(mine) / 2 - float(r["gcp"])) < 1e-5, r
    assert json.loads((out / "provenance.json").read_text())["settings"]["seeds"] == 2
    # Every claim for both leftover rules and both readings of the similarity attack; a k
    # where (θ,k) is judged least vulnerable has a positive gap to both baselines.
    for dataset in ("hospital", "adult"):
        for rule in rules:
            claims = data["claims"][dataset][rule]
            for m in ("background", "similarity", "majority_category"):
                field = f"{m}_vulnerability"
                for k in claims[f"least_{field}_for_k"]:
                    assert claims[f"{field}_gap"][str(k)] > 0


def test_bench_reports_its_figures() -> None:
    result = CliRunner().invoke(
        main, ["bench", "thetak", "--json", "--rows", "2000"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["rows"] == 2000 and data["k"] == 12 and data["theta"] == 3
    assert data["seconds"] > 0 and 0 < data["gcp"] < 1 and data["min_class_size"] >= 12
    assert [g["rows"] for g in data["growth"]] == [500, 1000, 2000, 4000]
    assert {"similarity_vulnerability", "background_vulnerability", "leftover_rows"} <= set(data)
