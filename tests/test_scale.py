"""The SQL side at scale: grouped releases label each group once, without reading the catalog's
hierarchy map per group (so re-importing hierarchies cannot slow later publishes); categorical
QIs without a hierarchy are released as the set of values present.

The checks read the released tables with plain SQL and the statistics views; nothing here uses
dbanon's own generalisation to judge its output.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from helpers import cli, cli_json, make_table, stored_kind

from dbanon import methods
from dbanon.api import Database
from dbanon.lifecycle.declare import release_spec

LEAVES = [f"{z:05d}" for z in range(13000, 13040)]  # 40 zip codes, 2 levels above them


def hierarchy_file(tmp_path: Path) -> Path:
    path = tmp_path / "zip.csv"
    path.write_text("".join(f"{z};{z[:4]}*;{z[:3]}**;*\n" for z in LEAVES))
    return path


def map_reads(conn: psycopg.Connection) -> int:
    """Tuples of dbanon.hierarchy_map read so far (sequential and index), as the statistics
    views count them once this session's counters are flushed."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.commit()
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        """SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)
           FROM pg_stat_user_tables WHERE schemaname = 'dbanon' AND relname = 'hierarchy_map'"""
    ).fetchone()
    conn.commit()
    return int(row[0])


@pytest.mark.parametrize("method", ["kmember", "mondrian"])
def test_publish_reads_the_hierarchy_map_once_however_often_it_was_reimported(
    dsn: str, tmp_path: Path, method: str
) -> None:
    """Labels come from the hierarchy the publish resolved (one read of its map), never from a
    catalog lookup per group: a publish of ~500 groups reads about as many map tuples as the
    map holds, and the same after ten re-imports of the hierarchy (which churn the catalog's
    table and index). Per-group lookups (dbanon.lca per group) read dozens of times more."""
    rng = random.Random(5)
    rows = [(i, rng.choice(LEAVES), rng.randint(18, 90)) for i in range(1000)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_table(conn, "s", "t", [("id", "integer"), ("zip", "text"), ("age", "integer")], rows)
    path = hierarchy_file(tmp_path)
    assert cli(dsn, "hierarchy", "import", "zips", str(path)).exit_code == 0
    map_rows = len(LEAVES) * 4

    def publish(name: str) -> int:
        with Database(dsn) as db:
            before = map_reads(db.conn)
            spec = release_spec(
                name, "s.t", "id", ["zip", "age"], method=method, k=2,
                hierarchies={"zip": "zips"}, target=f"out_{name}.{name}",
            )  # fmt: skip
            db.publish(spec)
            return map_reads(db.conn) - before

    first = publish("a")
    for _ in range(10):
        assert cli(dsn, "hierarchy", "import", "zips", str(path), "--replace").exit_code == 0
    again = publish("b")
    assert 0 < first <= 3 * map_rows
    assert 0 < again <= 3 * map_rows
    with psycopg.connect(dsn) as conn:
        labels = {
            r[0] for r in conn.execute("SELECT DISTINCT zip FROM out_b.b").fetchall()
        }
        sizes = conn.execute("SELECT min(n) FROM (SELECT count(*) n FROM out_b.b "
                             "GROUP BY zip, age) c").fetchone()[0]  # fmt: skip
    allowed = set(LEAVES) | {z[:4] + "*" for z in LEAVES} | {z[:3] + "**" for z in LEAVES}
    assert labels <= allowed | {"*"}
    assert sizes >= 2


@pytest.mark.parametrize("method", ["kmember", "mondrian"])
def test_categories_without_hierarchy_are_released_as_value_sets(
    dsn: str, method: str
) -> None:
    """Two clear groups: ages 20-21 with zips A and B, ages 90 with zip C. The first group's
    zip is released as {A,B} (not '*'), the second as C; a group holding every value of the
    column would be '*'. The loss of the column is (values covered - 1) / (domain - 1) per row:
    (2 * 1/2 + 2 * 0) / 4 = 0.25."""
    rows = [(1, 20, "A,1"), (2, 21, 'B "2"'), (3, 90, "C"), (4, 90, "C")]
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_table(conn, "s", "v", [("id", "integer"), ("age", "integer"), ("zip", "text")], rows)
    code, out = cli_json(
        dsn, "publish", "v", "--source", "s.v", "--key", "id", "--qi", "age,zip",
        "--algorithm", method, "--k", "2", "--target", "out_v.v",
    )  # fmt: skip
    assert code == 0, out
    with psycopg.connect(dsn) as conn:
        released = conn.execute("SELECT zip, count(*) FROM out_v.v GROUP BY zip").fetchall()
        sets = {
            label: set(conn.execute("SELECT unnest(%s::text[])", [label]).fetchall())
            for label, _ in released
            if label.startswith("{")
        }
    assert sorted(n for _, n in released) == [2, 2]
    assert dict(released)["C"] == 2
    assert {frozenset(v[0] for v in s) for s in sets.values()} == {frozenset({"A,1", 'B "2"'})}
    code, report = cli_json(dsn, "report", "v")
    assert report["method_metrics"]["value_set_loss"]["zip"] == pytest.approx(0.25)
    # Xu et al.'s NCP counts the set {A,B} as 2 of the column's 3 values (not the root's 3):
    # two rows lose (21 - 20) / (90 - 20) on age and 2/3 on zip, of 4 rows x 2 QIs.
    assert report["method_metrics"]["ncp_leaf"] == pytest.approx(2 * (1 / 70 + 2 / 3) / 8)


def source_scans(conn: psycopg.Connection, table: str) -> int:
    """Sequential scans of s.<table> so far, once this session's counters are flushed."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.commit()
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT seq_scan FROM pg_stat_user_tables WHERE schemaname = 's' AND relname = %s",
        [table],
    ).fetchone()
    conn.commit()
    return int(row[0])


def test_a_view_release_is_evaluated_once_to_verify_it(dsn: str) -> None:
    """A live view reads its source at every evaluation. Publishing it with three models to
    verify reads the source as often as with two: the checks and figures read one snapshot of
    the view, not the view once per check. (Both searches read the source alike: a k-only
    search reads it in a few passes of its own, so k alone is not the baseline.)"""
    rng = random.Random(2)
    rows = [(i, rng.randint(18, 90), rng.choice("FM"), rng.choice("abcd")) for i in range(400)]
    cols = [("id", "integer"), ("age", "integer"), ("sex", "text"), ("dx", "text")]
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_table(conn, "s", "w", cols, rows)

    def scans(name: str, **models: float) -> int:
        with Database(dsn) as db:
            before = source_scans(db.conn, "w")
            spec = release_spec(
                name, "s.w", "id", ["age", "sex"], sensitive=["dx"], method="fulldomain",
                options={"as": "view", "max_suppression": 0.05}, target=f"out_{name}.{name}",
                **models,
            )  # fmt: skip
            db.publish(spec)
            return source_scans(db.conn, "w") - before

    two = scans("two", k=3, l=2)
    three = scans("three", k=3, l=2, alpha=0.9)
    assert three == two
    with psycopg.connect(dsn) as conn:  # the view holds its promises, read independently
        worst = conn.execute(
            "SELECT min(n), min(d) FROM (SELECT count(*) n, count(DISTINCT dx) d "
            "FROM out_three.three GROUP BY age, sex) c"
        ).fetchone()
    assert worst[0] >= 3 and worst[1] >= 2


HEAVY = ("numpy", "numba", "sklearn", "matplotlib", "sqlalchemy", "alembic", "rich")


def test_check_imports_no_heavy_module(dsn: str) -> None:
    """`dbanon check` (and the CLI's import) loads none of the heavy modules, not even numpy
    (the publishing methods, whose flags publish lists, load only for publish): they are
    imported by the commands that need them. Run in a fresh interpreter, as the CLI starts."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_table(conn, "s", "small", [("id", "integer"), ("a", "integer")],
                   [(i, i % 3) for i in range(20)])  # fmt: skip
    code = (
        "import sys\n"
        "from dbanon.cli import main\n"
        "try:\n"
        f"    main(['--dsn', {dsn!r}, '--json', 'check', 's.small', '--qi', 'a', '--k', '2'])\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[0])["holds"] is True
    assert lines[-1] == "[]"


def test_a_childs_peak_rss_is_its_own_not_the_benchs() -> None:
    """The bench's measure of a child's memory: wait4's ru_maxrss of a child started by vfork
    carries the parent's high-water mark, so a bench holding 400 MiB would read every lean
    child as 400 MiB; `child` reports the child's own (a `dbanon --version` is tens of MiB)."""
    from dbanon.bench.scale import child

    held = bytearray(400 * 2**20)
    held[::4096] = b"\x01" * len(held[::4096])  # touch every page: resident in this process
    seconds, rss, code, stdout = child(["--version"])
    assert code == 0 and "dbanon" in stdout.lower()
    assert 5 < rss < 200, rss
    assert held[4096] == 1


def test_a_child_starts_from_the_packages_bytecode() -> None:
    """Children are measured as an installed dbanon starts: from bytecode written for the
    sources as they are (not compiling modules anew in every process, as a checkout does
    under PYTHONDONTWRITEBYTECODE)."""
    import importlib.util

    from dbanon.bench import scale

    source = Path(scale.__file__).with_name("peak.py")
    pyc = Path(importlib.util.cache_from_source(str(source)))
    pyc.unlink(missing_ok=True)
    scale.bytecode.cache_clear()
    assert scale.child(["--version"])[2] == 0
    header = pyc.read_bytes()[:16]  # magic, flags, source mtime, source size
    assert header[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(header[8:12], "little") == int(source.stat().st_mtime) & 0xFFFFFFFF
    assert int.from_bytes(header[12:16], "little") == source.stat().st_size


def test_bench_scale_runs_every_method_and_checks_each_release(
    dsn: str, request: pytest.FixtureRequest
) -> None:
    """`dbanon bench scale` on a tiny table: every method gets seconds, a peak RSS from its
    own process and its ratio to the floor measured in the same run, and every release passes
    the bench's independent check; two figures are checked again here with plain SQL. (Every
    method on the embedded server; the second server runs the two checked again, to keep CI's
    minutes.)"""
    views = {"fulldomain_view", "rfka_view", "hamdist_view"}
    every = {name for name in methods.methods()} | views | {"check"}
    if "pg15" in request.node.callspec.id:
        every = {"mondrian", "anatomy", "check"}
    code, out = cli_json(dsn, "bench", "scale", "--rows", "300", "--k", "5",
                         "--methods", ",".join(sorted(every)))  # fmt: skip
    assert code == 0, out
    assert out["rows"] == 300
    assert set(out["methods"]) == every
    assert out["floor"]["seconds"] >= out["floor"]["write_seconds"] > 0
    for name, m in out["methods"].items():
        assert m["seconds"] > 0 and m["peak_rss_mb"] > 10, (name, m)
        if name != "check":
            assert m["checked"]["holds"] is True, (name, m)
            assert m["floor_ratio"] == pytest.approx(m["seconds"] / out["floor"]["seconds"],
                                                     rel=0.01)  # fmt: skip
    with psycopg.connect(dsn) as conn:
        smallest = conn.execute(
            "SELECT min(n) FROM (SELECT count(*) n FROM dbanon_bench_scale_out.scale_mondrian "
            "GROUP BY age, sex, race, marital, education, workclass, zip) c"
        ).fetchone()[0]
        distinct = conn.execute(
            "SELECT min(d) FROM (SELECT count(DISTINCT occupation) d "
            "FROM dbanon_bench_scale_out.scale_anatomy_st GROUP BY group_id) c"
        ).fetchone()[0]
        kinds = {name: stored_kind(conn, f"dbanon_bench_scale_out.{name}") for (name,) in
                 conn.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n "
                              "ON n.oid = c.relnamespace "
                              "WHERE n.nspname = 'dbanon_bench_scale_out'").fetchall()}  # fmt: skip
    assert smallest >= 5 and distinct >= 2
    if "check" in every:  # the check's process apart from its query
        check = out["methods"]["check"]
        assert check["startup_seconds"] > 0 and check["worst_seconds"] > 0
        assert check["query_ratio_same_work_mem"] < check["ratio_same_work_mem"]
    # a method's plain name reads a table, the _view entry a live view
    for name in sorted(every & ({"fulldomain", "rfka", "hamdist"} | views)):
        assert kinds[f"scale_{name}"] == ("v" if name in views else "r"), (name, kinds)
    code, out = cli_json(dsn, "bench", "scale", "--rows", "300", "--methods", "nope")
    assert code == 2 and "unknown method" in out["error"]


def test_floor_each_measures_a_floor_just_before_every_method(dsn: str) -> None:
    """`--floor-each`: every method also gets the floor measured just before it and its ratio
    to that one, beside its ratio to the run's first floor; without it, neither appears."""
    code, out = cli_json(dsn, "bench", "scale", "--rows", "300", "--k", "5",
                         "--methods", "mondrian,noise", "--floor-each")  # fmt: skip
    assert code == 0 and out["floor_each"] is True, out
    for name, m in out["methods"].items():
        near = m["floor"]
        assert near["seconds"] >= near["write_seconds"] > 0, name
        assert m["near_floor_ratio"] == pytest.approx(m["seconds"] / near["seconds"], rel=0.01)
        assert m["floor_ratio"] == pytest.approx(m["seconds"] / out["floor"]["seconds"],
                                                 rel=0.01), name  # fmt: skip
    code, out = cli_json(dsn, "bench", "scale", "--rows", "300", "--k", "5",
                         "--methods", "mondrian")  # fmt: skip
    assert code == 0 and out["floor_each"] is False
    assert "near_floor_ratio" not in out["methods"]["mondrian"]
    with psycopg.connect(dsn) as conn:  # the bench's table is keyed as a DBA's table is
        key = conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
            ["dbanon_bench_scale.census_300"]).fetchall()  # fmt: skip
    assert key == [("id",)]


def test_repeat_reports_each_methods_median_run(dsn: str) -> None:
    """`--repeat`: each method published that many times, each run after its own floor; the
    figures are the median run's, the near-floor ratio the median of the runs' own, the peak
    RSS the largest, and every run is kept."""
    code, out = cli_json(dsn, "bench", "scale", "--rows", "300", "--k", "5", "--methods",
                         "mondrian,noise", "--floor-each", "--repeat", "3")  # fmt: skip
    assert code == 0 and out["repeat"] == 3, out
    for name, m in out["methods"].items():
        runs = m["repeats"]
        assert len(runs) == 3, name
        assert m["seconds"] == sorted(r["seconds"] for r in runs)[1], name
        assert m["near_floor_ratio"] == sorted(r["near_floor_ratio"] for r in runs)[1], name
        assert m["peak_rss_mb"] == max(r["peak_rss_mb"] for r in runs), name
        assert m["floor_ratio"] == pytest.approx(m["seconds"] / out["floor"]["seconds"],
                                                 rel=0.01)  # fmt: skip
        assert m["checked"]["holds"] is True, name


def test_long_phases_report_rows_streamed_and_blocks_clustered(dsn: str) -> None:
    """A publish tells its progress listener how many rows have streamed out of how many, and
    how many k-member blocks are clustered of how many; the CLI shows it only on a terminal,
    so --json output is one JSON object and stderr stays empty."""
    rng = random.Random(9)
    rows = [(i, rng.randint(18, 90), rng.randint(10000, 99999)) for i in range(1, 2001)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_table(conn, "s", "p", [("id", "integer"), ("age", "integer"), ("zip", "integer")],
                   rows)  # fmt: skip
    heard: list[str] = []
    with Database(dsn) as db:
        spec = release_spec(
            "p", "s.p", "id", ["age", "zip"], method="kmember", k=5,
            options={"block_size": 200}, target="out_p.p",
        )  # fmt: skip
        db.publish(spec, heard.append)
    streamed = [m for m in heard if m.startswith("streaming rows out with COPY:")]
    assert streamed and streamed[-1].endswith("2,000 of 2,000")
    blocks = [m for m in heard if m.startswith("k-member:") and "blocks clustered" in m]
    counts = [tuple(int(x) for x in m.split()[1:4:2]) for m in blocks]
    total = counts[0][1]
    assert total >= 10 and (total, total) in counts  # every block of the first pass reported
    done = subprocess.run(
        [sys.executable, "-m", "dbanon", "--dsn", dsn, "--json", "publish", "p2", "--source",
         "s.p", "--key", "id", "--qi", "age,zip", "--k", "5", "--block-size", "200",
         "--target", "out_p.p2"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == ""
    assert json.loads(done.stdout)["rows"] == 2000
