"""INA and uniform noise through the lifecycle: released shape, SEC from the stream, regions
kept, refresh (same noise for unchanged rows, or redrawn), compare, bad input."""

from __future__ import annotations

import json

import numpy as np
import psycopg
import pytest
from helpers import cli, cli_json, make_table, noise_map, snapshot
from psycopg import sql

from dbanon.algorithms.ina import normalised_distances
from dbanon.methods import perturbed

CENTRES = [(0.0, 0.0), (6.0, 6.0), (0.0, 7.0)]


@pytest.fixture
def pts(conn: psycopg.Connection) -> psycopg.Connection:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(900):
        cx, cy = CENTRES[i % 3]
        rows.append((i + 10, cx + rng.normal(), round(cy + rng.normal(), 3), f"t{i % 7}", i % 5))
    make_table(
        conn, "m", "pts",
        [("id", "int PRIMARY KEY"), ("x", "float8"), ("y", "numeric"), ("tag", "text"),
         ("n", "int")],
        rows,
    )  # fmt: skip
    return conn


def paired(conn: psycopg.Connection, release: str = "p") -> np.ndarray:
    """(key, x, y, x', y', tag == tag', n == n') of every released row, by the private map."""
    return np.array(
        conn.execute(
            sql.SQL("""SELECT s.id, s.x, s.y, r.x, r.y, (r.tag = s.tag AND r.n = s.n)::int
               FROM released.p r JOIN {} m ON m.row_id = r.dbanon_row
               JOIN m.pts s ON s.id::text = m.key ORDER BY s.id""").format(
                noise_map(conn, release)),
        ).fetchall(),
        dtype=np.float64,
    )


def test_ina_release_keeps_regions_and_its_stream_measures_security(
    pts: psycopg.Connection, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(perturbed, "BATCH", 128)  # several batches: the stream's sums merge
    code, out = cli_json(dsn, "publish", "p", "--source", "m.pts", "--key", "id",
                         "--columns", "x,y", "--algorithm", "ina", "--sample", "100",
                         "--keep", "tag,n", "--seed", "4", "--noise-floor", "0")  # fmt: skip
    assert code == 0, out
    assert out["rows"] == 900 and out["classes"] is None
    cols = [r[0] for r in pts.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'released.p'::regclass "
        "AND attnum > 0 ORDER BY attnum").fetchall()]  # fmt: skip
    assert cols == ["dbanon_row", "x", "y", "tag", "n"]  # never the key
    ids = [r[0] for r in pts.execute("SELECT dbanon_row FROM released.p").fetchall()]
    assert ids == sorted(ids) and ids != sorted(ids, key=abs)[:0]  # random ids, in their order
    data = paired(pts)
    assert len(data) == 900 and data[:, 5].all()  # every row paired, other columns unchanged
    x, xp = data[:, 1:3], data[:, 3:5]
    assert (x != xp).all()
    report = cli_json(dsn, "report", "p")[1]["method_metrics"]
    numpy_sec = (xp - x).var(0) / x.var(0)
    assert report["sec"]["x"] == pytest.approx(numpy_sec[0], rel=1e-9)
    assert report["sec"]["y"] == pytest.approx(numpy_sec[1], rel=1e-9)
    assert report["msec"] == pytest.approx(numpy_sec.min(), rel=1e-9)
    assert report["region_changes"] == 0 and report["reference_points"] >= 2
    assert report["floor_raised"] == 0 and report["noise_floor"] == {"x": 0.0, "y": 0.0}
    assert 0 <= report["linkage"] <= 1 and report["linkage_sample"] == 900
    # independently of the stream: the nearest reference point of each tuple is unchanged
    state = pts.execute("SELECT state FROM dbanon.noise_state").fetchone()[0]
    refs, alpha = np.array(state["extra"]["refs"]), np.array(state["alpha"])
    assert alpha.tolist() == pytest.approx([np.ptp(x[:, 0]), np.ptp(x[:, 1])])
    before = normalised_distances(x, refs, alpha).argmin(1)
    assert (before == normalised_distances(xp, refs, alpha).argmin(1)).all()
    code, cmp = cli_json(dsn, "compare", "m.pts", "p", "--columns", "x,y", "--clusters", "3")
    assert code == 0 and cmp["rows"] == 900 and cmp["misclassification"] < 0.05


def test_refresh_gives_unchanged_rows_the_same_noise_or_redraws_it(
    pts: psycopg.Connection, dsn: str
) -> None:
    args = ("--source", "m.pts", "--key", "id", "--columns", "x,y", "--algorithm", "ina",
            "--keep", "tag,n")  # fmt: skip
    assert cli_json(dsn, "publish", "p", *args)[0] == 0
    first = paired(pts)
    pts.execute("UPDATE m.pts SET x = x + 0.5 WHERE id = 10")
    code, out = cli_json(dsn, "refresh", "p")
    assert code == 0 and out["rows"] == 900
    second = paired(pts)
    same = (first[:, 3:5] == second[:, 3:5]).all(1)
    assert not same[0] and same[1:].all()  # only the changed row has new values
    assert cli_json(dsn, "publish", "p", *args, "--refresh-policy", "regroup", "--replace")[0] == 0
    assert cli_json(dsn, "refresh", "p")[0] == 0
    third = paired(pts)
    assert not (third[:, 3:5] == second[:, 3:5]).any(1).any()  # all new noise
    kept = noise_map(pts, "p")
    assert pts.execute(sql.SQL("SELECT count(*) FROM {}").format(kept)).fetchone()[0] == 900
    assert cli(dsn, "drop", "p", "--yes").exit_code == 0
    gone = pts.execute("SELECT to_regclass(%s)", [kept.as_string(pts)]).fetchone()[0]
    assert gone is None  # the map went with its release


def test_uniform_noise_has_the_security_of_its_size_and_drops_columns(
    pts: psycopg.Connection, dsn: str
) -> None:
    code, out = cli_json(dsn, "publish", "p", "--source", "m.pts", "--key", "id",
                         "--columns", "x", "--algorithm", "noise", "--size", "0.1",
                         "--sensitive", "y", "--keep", "n", "--drop", "tag", "--seed", "1",
                         )  # fmt: skip
    assert code == 0, out
    # y is released row by row and (3 decimals) nearly unique: published with a warning.
    assert len(out["warnings"]) == 1 and 'sensitive column y' in out["warnings"][0]
    cols = [r[0] for r in pts.execute("SELECT * FROM released.p LIMIT 0").description]
    assert cols == ["dbanon_row", "x", "y", "n"]
    x = np.array([r[0] for r in pts.execute("SELECT x FROM m.pts").fetchall()])
    expected = (0.1 * np.ptp(x)) ** 2 / 3 / x.var()  # uniform(-a, a) has variance a^2 / 3
    sec = cli_json(dsn, "report", "p")[1]["method_metrics"]["msec"]
    assert sec == pytest.approx(expected, rel=0.15)
    assert (
        pts.execute("SELECT count(*) FROM released.p r JOIN m.pts s USING (y, n)").fetchone()[0]
        >= 900
    )  # the columns not perturbed are released as they are


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--columns", "x,tag"), "column tag of m.pts is text, not numeric"),
        (("--columns", "x,c"), "column c of m.pts is constant"),
        (("--columns", "x", "--sample", "901"), "--sample 901 is larger than the 900 rows"),
        (("--columns", "x", "--beta", "0"), "--beta must be above 0"),
        (("--columns", "x,z"), "z in 3 rows"),
        (("--columns", "x", "--k", "5"), "cannot promise --k"),
        (("--columns", "x", "--noise-floor", "nan"), "--noise-floor must be a finite number"),
        (("--columns", "x", "--noise-floor", "0.6"), "--noise-floor must be in [0, 0.5]"),
        (("--columns", "x", "--algorithm", "noise", "--size", "0.1", "--noise-floor", "0.06"),
         "--noise-floor 0.06 is more than half of --size 0.1"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(
    pts: psycopg.Connection, dsn: str, args: tuple[str, ...], message: str
) -> None:
    pts.execute("ALTER TABLE m.pts ADD COLUMN c int DEFAULT 3, ADD COLUMN z float8")
    pts.execute("UPDATE m.pts SET z = id WHERE id > 12")
    before = snapshot(pts)
    result = cli(dsn, "publish", "p", "--source", "m.pts", "--key", "id", "--algorithm", "ina",
                 *args)  # fmt: skip
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert snapshot(pts) == before
    assert json.loads(cli(dsn, "--json", "releases").stdout)["releases"] == []
