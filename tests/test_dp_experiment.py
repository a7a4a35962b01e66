"""`dbanon experiment dp` on small settings (the full run is in docs/dp/), and SafePub's claims.

The figures are checked against what the written releases hold, recomputed here without dbanon:
NCP with leaf counts from the releases' values and the shipped ARX hierarchy files read as CSV
(a value at level L covers the leaves whose column L is that value; a row not released costs 1),
each release's classes against its k, and each mean and interval of results.csv against the
per-release rows of runs.csv (Student's t from scipy). The claims' judges are fed contrary rows
and must change their verdicts.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from helpers import cli_json
from psycopg import sql
from scipy.stats import t as student

from dbanon.experiments.claims import FAILS, HOLDS, render

HIERARCHIES = Path(__file__).parents[1] / "dbanon" / "data" / "hierarchies"
QI = ["age", "workclass", "education", "marital_status", "race", "sex", "native_country"]
FILES = {"age": "age", "workclass": "workclass", "education": "education",
         "marital_status": "marital-status", "race": "race", "sex": "sex",
         "native_country": "native-country"}  # fmt: skip
ROWS = 3000


def leaf_cost(col: str, level: int) -> dict[str, float]:
    """value at `level` -> the share of the hierarchy's leaves under it (0 at level 0)."""
    with (HIERARCHIES / f"{FILES[col]}.csv").open(newline="") as f:
        rows = [r for r in csv.reader(f, delimiter=";") if r]
    under = Counter(r[level] for r in rows)
    return {v: (0.0 if level == 0 else n / len(rows)) for v, n in under.items()}


def ncp_leaf(conn: psycopg.Connection, table: str, levels: str, total: int) -> float:
    level = {c: int(v) for c, v in (x.split("=") for x in levels.split(","))}
    cost = {c: leaf_cost(c, level[c]) for c in QI}
    rows = conn.execute(sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in QI),
        sql.Identifier("dbanon_exp_out", table))).fetchall()  # fmt: skip
    released = sum(sum(cost[c][v] if level[c] else 0.0 for c, v in zip(QI, r, strict=True))
                   / len(QI) for r in rows)  # fmt: skip
    return (released + total - len(rows)) / total


def test_the_experiment_figures_are_the_releases(dsn: str, tmp_path: Path) -> None:
    code, data = cli_json(dsn, "experiment", "dp", "--out", str(tmp_path), "--epsilons", "0.5,1",
                          "--seeds", "2", "--rows", str(ROWS), "--queries", "100", "--keep")
    assert code == 0, data
    results = list(csv.DictReader((tmp_path / "results.csv").open()))
    runs = list(csv.DictReader((tmp_path / "runs.csv").open()))
    assert (tmp_path / "utility.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    settings = {(r["method"], r["epsilon"], r["k"]) for r in results}
    assert {(m, e) for m, e, _ in settings if e} == {
        (m, e) for m in ("safepub_levels", "safepub_search", "kanon_fulldomain")
        for e in ("0.5", "1.0")}  # fmt: skip
    assert {k for m, e, k in settings if m == "kanon_fulldomain" and not e} == {"5", "10"}

    # every mean and interval is that of its releases' rows
    for r in results:
        mine = [x for x in runs if (x["method"], x["epsilon"], x["k"])
                == (r["method"], r["epsilon"], r["k"])]  # fmt: skip
        assert len(mine) == 2 == int(r["seeds"])
        for col in ("ncp_leaf", "query_error_median", "auc", "released_share"):
            values = [float(x[col]) for x in mine]
            half = student.ppf(0.975, 1) * statistics.stdev(values) / math.sqrt(2)
            assert float(r[col]) == pytest.approx(statistics.mean(values), abs=2e-6), (r, col)
            # runs.csv rounds to 6 places, and t(0.975, 1) = 12.7 scales that rounding
            assert float(r[f"{col}_ci95"]) == pytest.approx(half, abs=1e-4), (r, col)

    # the last release of each kind, kept: its NCP recomputed from what it holds, its classes
    with psycopg.connect(dsn) as conn:
        total = conn.execute("SELECT count(*) FROM dbanon_exp.dp_adult").fetchone()[0]
        assert total == ROWS
        for table, method, eps in (("exp_dp_levels", "safepub_levels", "1.0"),
                                   ("exp_dp_search", "safepub_search", "1.0")):  # fmt: skip
            last = [x for x in runs if x["method"] == method and x["epsilon"] == eps][-1]
            assert float(last["ncp_leaf"]) == pytest.approx(
                ncp_leaf(conn, table, last["levels"], total), abs=1e-5)
            sizes = conn.execute(sql.SQL("SELECT count(*) FROM {} GROUP BY {}").format(
                sql.Identifier("dbanon_exp_out", table),
                sql.SQL(", ").join(map(sql.Identifier, QI)))).fetchall()  # fmt: skip
            assert min(s[0] for s in sizes) >= int(last["k"])
            assert sum(s[0] for s in sizes) == round(float(last["released_share"]) * total)
        kanon = [x for x in runs if x["method"] == "kanon_fulldomain"]
        last = max(kanon, key=lambda x: int(x["k"]))  # the last published: the largest k
        assert float(last["ncp_leaf"]) == pytest.approx(
            ncp_leaf(conn, "exp_dp_kanon", last["levels"], total), abs=1e-5)
    # fixed levels are the scheme it was given, in every run
    fixed = {x["levels"] for x in runs if x["method"] == "safepub_levels"}
    assert fixed == {"age=2,workclass=1,education=1,marital_status=1,race=1,sex=0,"
                     "native_country=1"}
    # the source's own figures: nothing lost
    original = next(r for r in results if r["method"] == "original")
    assert float(original["ncp_leaf"]) == 0 and float(original["query_error"]) < 1e-9


FIELDS = ["method", "epsilon", "delta", "k", "rows", "seeds", "ncp_leaf", "ncp_leaf_ci95",
          "auc", "auc_ci95"]  # fmt: skip


def _csv(docs: Path, rows: list[dict[str, object]]) -> Path:
    (docs / "dp").mkdir(parents=True)
    with open(docs / "dp" / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows({c: r.get(c, "") for c in FIELDS} for r in rows)
    return docs


def _rows(safepub_ncp: list[float], safepub_auc: float) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for eps, k, ncp in zip((0.1, 1.0, 2.0), (49, 61, 113), safepub_ncp, strict=True):
        for method in ("safepub_levels", "safepub_search"):
            out.append({"method": method, "epsilon": eps, "k": k, "ncp_leaf": ncp,
                        "ncp_leaf_ci95": 0.01, "auc": safepub_auc, "auc_ci95": 0.01})
        out.append({"method": "kanon_fulldomain", "epsilon": eps, "k": k, "ncp_leaf": 0.4,
                    "ncp_leaf_ci95": 0, "auc": 0.8, "auc_ci95": 0.01})
    return out


def _verdict(text: str, start: str) -> str:
    line = next(x for x in text.splitlines() if x.startswith(f"| {start}"))
    return line.split(" | ")[2].strip("*")


def test_safepubs_claims_change_verdict_with_the_rows(tmp_path: Path) -> None:
    ncp = "fixed levels: utility comparable to k-anonymity at moderate ε — at every ε >= 1, NCP"
    auc = "private search: utility comparable to k-anonymity at moderate ε — at every ε >= 1, SVM"
    grows = "private search: utility grows with ε"
    good = render(_csv(tmp_path / "good", _rows([0.9, 0.45, 0.42], 0.78)))
    assert [_verdict(good, c) for c in (ncp, auc, grows)] == [HOLDS] * 3
    far = render(_csv(tmp_path / "far", _rows([0.9, 0.8, 0.7], 0.78)))  # NCP 0.4 above
    assert _verdict(far, ncp) == FAILS and _verdict(far, auc) == HOLDS
    blind = render(_csv(tmp_path / "blind", _rows([0.9, 0.45, 0.42], 0.6)))  # AUC 0.2 below
    assert _verdict(blind, auc) == FAILS and _verdict(blind, ncp) == HOLDS
    flat = render(_csv(tmp_path / "flat", _rows([0.5, 0.6, 0.7], 0.78)))  # utility falls
    assert _verdict(flat, grows) == FAILS


@pytest.mark.parametrize("epsilons", ["0.5,4", "0"])
def test_an_epsilon_out_of_range_is_one_line_and_writes_nothing(
    dsn: str, tmp_path: Path, epsilons: str
) -> None:
    code, out = cli_json(dsn, "experiment", "dp", "--out", str(tmp_path / "out"), "--epsilons",
                         epsilons, "--seeds", "1", "--rows", "300")  # fmt: skip
    assert code == 2 and "--epsilons" in out["error"] and "\n" not in out["error"], out
    assert not (tmp_path / "out" / "results.csv").exists()
