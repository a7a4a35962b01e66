"""`dbanon experiment kmember-scale` on tiny settings: exact rule vs partitioned mode, CSV and
plot written, the verdict recomputed from the rows."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from dbanon.cli import main
from dbanon.experiments.kmember import census_arrays


def test_census_rows_are_mostly_distinct() -> None:
    qi = census_arrays(20000, seed=3)
    assert qi.n == 20000 and qi.width == 8
    distinct = len(np.unique(np.hstack([qi.num, qi.cat.astype(float)]), axis=0))
    assert distinct > 0.99 * qi.n


def test_experiment_writes_csv_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "scale"
    result = CliRunner().invoke(
        main,
        ["--json", "experiment", "kmember-scale", "--rows", "3000", "--blocks", "500,16000",
         "--partitioned-only", "5000", "--out", str(out)],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    with open(out / "scale.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["rows"]), r["mode"], r["block_size"]) for r in rows] == [
        (3000, "exact", ""), (3000, "partitioned", "500"), (3000, "partitioned", "16000"),
        (5000, "partitioned", "16000"),
    ]  # fmt: skip
    for r in rows:
        assert int(r["min_class_size"]) >= 10 and int(r["max_class_size"]) <= 19
        assert 0 < float(r["ncp_height"]) < 1 and 0 < float(r["ncp_leaf"]) < 1
    # 3,000 rows in blocks of 16,000: one block, and one for the fix-up round
    assert int(rows[1]["blocks"]) > 2 and int(rows[2]["blocks"]) == 2
    gap = 100 * (float(rows[2]["ncp_height"]) - float(rows[0]["ncp_height"]))
    assert data["ncp_height_gap_pt_at_default_block_size"] == {"3000": round(gap, 3)}
    assert (out / "scale.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
