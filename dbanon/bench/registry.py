"""The benchmarks as `dbanon bench NAME` commands: each one's options, the call into the module
that measures and the lines a person reads (dbanon.bench.runners builds the commands)."""

from __future__ import annotations

from typing import Any

from dbanon.bench.runners import Param, Report, Runner, Session, Table, bench
from dbanon.bench.scale import METHODS as SCALE_METHODS
from dbanon.errors import DbanonError

ROWS_ADULT = Param("rows", "int", 30162, low=2, high=45222)


def _kmember(s: Session, rows: int, k: int, seed: int, cost: str, seeding: str) -> dict:
    from dbanon.bench.methods import bench_kmember

    return bench_kmember(rows, k, seed, cost, seeding)


bench(Runner(
    "kmember", "Greedy k-member on Adult (8 QIs, ARX hierarchies): seconds, NCP by heights and "
    "by leaf counts.",
    (ROWS_ADULT, Param("k", "int", 10, low=2), Param("seed", "int", 0),
     Param("cost", "choice", "height", choices=("height", "ncp")),
     Param("seeding", "choice", "random", choices=("random", "furthest"))),
    _kmember,
    lambda d: [f"kmember: {d['rows']} rows, k={d['k']}: {d['seconds']:.2f} s, "
               f"ncp_height {d['ncp_height']:.2%}, ncp_leaf {d['ncp_leaf']:.2%}"],
))  # fmt: skip


def _thetak(s: Session, rows: int, k: int, theta: int, seed: int) -> dict:
    from dbanon.bench.methods import bench_thetak

    if theta > k:
        raise DbanonError(f"--theta {theta} is larger than --k {k}")
    return bench_thetak(rows, k, theta, seed)


bench(Runner(
    "thetak", "(θ,k) clustering of the generated hospital table (6 QIs): seconds, GCP, growth "
    "with n.",
    (Param("rows", "int", 30000, low=20), Param("k", "int", 12, low=2),
     Param("theta", "int", 3, low=2), Param("seed", "int", 0)),
    _thetak,
    lambda d: [
        f"thetak: {d['rows']} rows, k={d['k']}, θ={d['theta']}: {d['seconds']:.3f} s, GCP "
        f"{d['gcp']:.2%}, {d['classes']} classes, {d['leftover_rows']} leftover rows, similarity "
        f"vulnerability {d['similarity_vulnerability']:.3f}, background vulnerability "
        f"{d['background_vulnerability']:.3f}",
        "growth: " + ", ".join(f"{g['rows']} rows {g['seconds']:.3f} s" for g in d["growth"]),
    ],
))  # fmt: skip


def _mondrian(s: Session, rows: int, k: int, hierarchies: bool) -> dict:
    from dbanon.bench.methods import bench_mondrian

    return bench_mondrian(rows, k, ordered=not hierarchies)


bench(Runner(
    "mondrian", "Strict Mondrian on Adult (8 QIs): seconds (best of 20) and GCP.",
    (ROWS_ADULT, Param("k", "int", 10, low=2),
     Param("hierarchies", "flag", False, "ARX hierarchies, or categories as ordered codes (the "
           "reference's setting).", flag="--hierarchies/--ordered")),
    _mondrian,
    lambda d: [f"mondrian ({d['setting']}): {d['rows']} rows, k={d['k']}: "
               f"{d['seconds'] * 1000:.1f} ms, GCP {d['gcp']:.2%}"],
))  # fmt: skip


def _fulldomain(s: Session, rows: int, k: int, l_: int, max_suppression: float) -> dict:
    from dbanon.bench.fulldomain import bench as run
    from dbanon.bench.fulldomain import publish
    from dbanon.demo import prepare

    prepare(s.db)
    try:
        found = run(s.db.conn, rows, k, l_, max_suppression)
    finally:
        s.db.conn.rollback()
    return {**found, "publish": publish(s.db, rows, k, l_, max_suppression)}


bench(Runner(
    "fulldomain", "Full-domain lattice search in PostgreSQL on Adult (9 QIs, ARX hierarchies, "
    "12,960 nodes; with --l, l-diversity of income over the other 8 QIs), and the same "
    "setting published end to end (seconds and phases beyond the search).",
    (Param("rows", "int", 30162, low=2, high=45222), Param("k", "int", 5, low=2),
     Param("l_", "int", 0, "l-diversity of income.", low=0, flag="--l"),
     Param("max_suppression", "float", 0.0, low=0, high=0.999999)),
    _fulldomain,
    lambda d: [f"fulldomain: {d['rows']} rows, k={d['k']}, l={d['l']}, suppression "
               f"{d['max_suppression']:.0%}: {d['seconds']:.3f} s, {d['nodes_checked']} of "
               f"{d['nodes']} nodes checked, loss {d['loss']:.2%}, levels {d['levels']}",
               f"published end to end in {d['publish']['seconds']:.2f} s, "
               f"{d['publish']['beyond_search']:.2f} s beyond its search"],
))  # fmt: skip


def _ina(s: Session, rows: int, sample: int) -> dict:
    from dbanon.bench.methods import bench_ina

    return bench_ina(s.db.conn, rows, sample)


bench(Runner(
    "ina", "`publish --algorithm ina` end to end on a generated table (4 numeric columns; kept "
    "in schema dbanon_bench): rows per minute and this process's peak memory.",
    (Param("rows", "int", 1_000_000, low=1000), Param("sample", "int", 200, low=2)),
    _ina,
    lambda d: [f"ina: {d['rows']} rows in {d['seconds']:.2f} s ({d['rows_per_minute']:,} "
               f"rows/min), peak RSS {d['peak_rss_mb']:.0f} MB"],
))  # fmt: skip


def _cbg(s: Session, sizes: list[int], k: int, l_: int) -> dict:
    from dbanon.experiments.cbg import bench as run

    if not sizes or max(sizes) > 45222:
        raise DbanonError(f"--sizes must be row counts between 100 and 45222, got {sizes}")
    return run(s.db.conn, sizes, k, l_)


def _cbg_report(d: dict[str, Any]) -> Report:
    lines: Report = [
        f"cbg: {r['rows']} rows, k={r['k']}, l={r['l']}: {r['seconds']:.2f} s end to end "
        f"({', '.join(f'{p} {t:.2f} s' for p, t in r['timings'].items())}); (k,l) check alone "
        f"{r['check_seconds']:.2f} s, holds {r['check_holds']}; exposure {r['exposure']:.4f} "
        f"(max {r['exposure_max']:.4f}), DM {r['dm']:,}" for r in d["runs"]
    ]
    return [*lines, f"rows x{d['rows_ratio']}: check x{d['check_time_ratio']}, exposure "
                    f"x{d['exposure_time_ratio']}"]  # fmt: skip


bench(Runner(
    "cbg", "`publish --algorithm cbg` end to end on Adult with a salary (kept in schema "
    "dbanon_exp): phases, the (k,l) check and exposure, and how they scale.",
    (Param("sizes", "ints", "22517,45222", "Rows of Adult with a salary, a,b,...", low=100),
     Param("k", "int", 3, low=2), Param("l_", "int", 10, low=2, flag="--l")),
    _cbg, _cbg_report,
))  # fmt: skip


def _scale(
    s: Session, rows: int, k: int, l_: int, methods: list[str], floor_each: bool = False,
    repeat: int = 1,
) -> dict:
    from dbanon.bench.scale import run
    from dbanon.db.connection import resolve_dsn

    s.db  # the catalog the publishes need (on a fresh server too)  # noqa: B018
    data = run(resolve_dsn(s.dsn), rows, k, l_, tuple(methods), s.say, floor_each, repeat)
    failed = [m for m, v in data["methods"].items()
              if "error" in v or not v.get("checked", {"holds": True})["holds"]]  # fmt: skip
    return {**data, "exit": 1 if failed else 0}


def _scale_report(d: dict[str, Any]) -> Report:
    fl = d["floor"]
    near = bool(d.get("floor_each"))
    t = Table(["method", "seconds", "x floor", *(["x floor just before"] if near else []),
               "peak RSS (MB)", "check"])  # fmt: skip
    for name, m in d["methods"].items():
        if "error" in m:
            t.rows.append([name, "-", "-", *(["-"] if near else []), "-", f"ERROR {m['error']}"])
            continue
        checked = m.get("checked", {})
        verdict = (
            f"{'ok' if checked.get('holds') else 'FAILED'} {checked}"
            if checked
            else f"{m['ratio']}x a bare GROUP BY ({m['bare_group_by_seconds']} s)"
        )
        t.rows.append([name, str(m["seconds"]), str(m.get("floor_ratio", "-")),
                       *([str(m.get("near_floor_ratio", "-"))] if near else []),
                       str(m["peak_rss_mb"]), verdict])  # fmt: skip
    return [f"floor: {fl['seconds']} s (write {fl['write_seconds']} s + GROUP BY "
            f"{fl['group_by_seconds']} s)", t]


bench(Runner(
    "scale", "Every method on a generated census-like table of mostly distinct rows, each in its "
    "own process (seconds, peak RSS, ratio to the floor measured in the same run), every release "
    "checked independently.",
    (Param("rows", "int", 1_000_000, low=100), Param("k", "int", 10, low=2),
     Param("l_", "int", 2, "l of the methods that promise l here.", low=2, flag="--l"),
     Param("methods", "words", ",".join(SCALE_METHODS), "Comma-separated subset to run."),
     Param("floor_each", "flag", False, "Measure the floor again just before each method "
           "and report the method's ratio to it too (near_floor_ratio): a shared machine's "
           "speed drifts within a run."),
     Param("repeat", "int", 1, "Publish each method this many times: its figures are its "
           "median run's (near_floor_ratio the median of the runs' own, peak RSS the "
           "largest), every run kept under `repeats`.", low=1)),
    _scale, _scale_report,
))  # fmt: skip


def _check(s: Session, rows: int, k: int) -> dict:
    from dbanon.bench.methods import bench_check

    try:
        return bench_check(s.db.conn, rows, k)
    finally:
        s.db.conn.rollback()


bench(Runner(
    "check", "`check` on a generated table (6 QIs; kept in schema dbanon_bench).",
    (Param("rows", "int", 1_000_000, low=1), Param("k", "int", 5, low=1)),
    _check,
    lambda d: [f"check: {d['rows']} rows, 6 QIs: k-anonymity {d['seconds_k']:.2f} s, distinct "
               f"l-diversity {d['seconds_l']:.2f} s"],
))  # fmt: skip


def _rfka(s: Session, rows: int, k: int, trees: int, sample: int) -> dict:
    from dbanon.bench.methods import bench_rfka

    return bench_rfka(s.db, rows, k, trees, sample)


bench(Runner(
    "rfka", "`publish --algorithm rfka` end to end on Adult (8 QIs, income the label; kept in "
    "schema dbanon_bench): forest and search timed apart.",
    (Param("rows", "int", 30162, low=100, high=45222), Param("k", "int", 10, low=2),
     Param("trees", "int", 1000, low=1),
     Param("sample", "int", 0, "Rows the forest is fitted on (0: all).", low=0)),
    _rfka,
    lambda d: [f"rfka: {d['rows']} rows, k={d['k']}, {d['trees']} trees on {d['fit_rows']} "
               f"rows: {d['seconds']:.2f} s end to end, forest {d['seconds_forest']:.2f} s, "
               f"search {d['seconds_search']:.3f} s ({d['search_queries']} queries, "
               f"{d['ms_per_search_step']} ms each); chosen {', '.join(d['chosen'])}"],
))  # fmt: skip


def _lag(s: Session, rows: int, k: int, l_: int, density: float) -> dict:
    from dbanon.bench.methods import bench_lag

    return {**bench_lag(s.db.conn, rows, k, l_, density), "setting": [rows, k, l_, density]}


bench(Runner(
    "lag", "`publish --algorithm lag`, both variants, end to end with verification, on the "
    "salary stand-in (kept in schema dbanon_bench).",
    (Param("rows", "int", 31055, low=100, high=45222), Param("k", "int", 10, low=2),
     Param("l_", "int", 10, low=2, flag="--l"), Param("density", "float", 0.2, low=0, high=1)),
    _lag,
    lambda d: [f"lag {variant}: {d['setting'][0]} rows, k={d['setting'][1]}, "
               f"l={d['setting'][2]}, density {d['setting'][3]:.0%}: {v['seconds']:.2f} s "
               f"({v['timings']}), NCP {v['ncp']:.4f}, {v['groups']} classes"
               for variant, v in d["variants"].items()],
))  # fmt: skip


def _soak_methods() -> str:
    """The soak's methods, read when asked (bench_soak imports numpy: `check` must not)."""
    from dbanon.bench.soak import METHODS

    return ",".join(METHODS)


def _soak(
    s: Session, rows: int, refreshes: int, methods: list[str], k: int, seed: int, out: str,
    inserts: float, deletes: float, updates: float, processes: bool, repeat: int,
) -> dict:  # fmt: skip
    from dbanon.bench.soak import soak, write

    data = soak(s.db, tuple(methods), rows, refreshes, inserts, deletes, updates, k=k,
                seed=seed, say=s.say, isolate=processes, dsn=s.dsn, repeat=repeat)  # fmt: skip
    write(data, out)
    failed = [m for m, v in data["methods"].items() if any("error" in r for r in v["runs"])]
    return {**data, "out": out, "exit": 4 if failed else 0}


def _soak_report(d: dict[str, Any]) -> Report:
    t = Table(["method", "refreshes", "NCP first", "NCP last", "seconds", "failure"])
    costs = Table(["method", "publish s", "publish MB", "refresh / publish s",
                   "refresh / publish MB", "unchanged source: s, same release"])  # fmt: skip
    for name, m in d["methods"].items():
        done = [r for r in m["runs"] if "error" not in r]
        failed = [r["error"] for r in m["runs"] if "error" in r]
        churned = [r for r in done[1:] if not r.get("unchanged")]
        t.rows.append([name, f"{len(churned)} of {d['refreshes']}", f"{done[0]['ncp']:.3f}",
                       f"{done[-1]['ncp']:.3f}", str(m["seconds"]),
                       failed[0] if failed else "-"])  # fmt: skip
        if c := m.get("cost"):
            costs.rows.append([name, f"{c['publish_seconds']:.1f}",
                               f"{c['publish_peak_rss_mb']:.0f}",
                               f"{c['refresh_seconds_ratio']:.2f}x",
                               f"{c['refresh_rss_ratio']:.2f}x",
                               f"{c.get('unchanged_refresh_seconds', '-')}, "
                               f"{c.get('unchanged_same_release', '-')}"])  # fmt: skip
    return [t, *([costs] if costs.rows else []),
            f"wrote {d['out']}/soak.json and {d['out']}/soak.png"]


bench(Runner(
    "soak", "Each grouping method's release refreshed under churn (by default 5 % inserts, 3 % "
    "deletes, 2 % QI updates before each refresh; schema dbanon_soak): every run's outcome and "
    "NCP, written as soak.json and a plot (docs/refresh.md). Methods kmember-sealed, cbg-sealed, "
    "mondrian-sealed, thetak-sealed and fulldomain-sealed run those methods under the sealed "
    "refresh policy.",
    (Param("rows", "int", 20_000, low=100), Param("refreshes", "int", 20, low=1),
     Param("methods", "words", _soak_methods, "Comma-separated subset to run (default: every "
           "grouping method the soak knows)."),
     Param("k", "int", 5, low=2), Param("seed", "int", 0),
     Param("out", "path", "docs/refresh-soak", "Where soak.json and soak.png go."),
     Param("inserts", "float", 0.05, "Rows inserted before each refresh (share of the table).",
           low=0, high=1),
     Param("deletes", "float", 0.03, "Rows deleted before each refresh.", low=0, high=1),
     Param("updates", "float", 0.02, "Rows whose QIs are updated before each refresh.", low=0,
           high=1),
     Param("processes", "flag", False, "Each publish and refresh in a process of its own: its "
           "seconds and peak RSS beside the publish's, and one more refresh of the unchanged "
           "source (is its release the same?)."),
     Param("repeat", "int", 1, "With --processes: soak each method this many times on the same "
           "tables; its costs are the medians, every repeat's kept in soak.json.", low=1)),
    _soak, _soak_report,
))  # fmt: skip


def _swap(s: Session, rows: int, refreshes: int, out: str | None) -> dict:
    import json
    from pathlib import Path

    from dbanon.bench.swap import bench_swap

    data = bench_swap(s.db.dsn, rows, refreshes)
    if out:
        Path(out).write_text(json.dumps(data, indent=2) + "\n")
    return data


bench(Runner(
    "swap", "Longest wait of a reader of a release while it is refreshed (a grouping release "
    "of a generated table, kept in schema dbanon_bench_swap): docs/locking.md.",
    (Param("rows", "int", 200_000, low=1000, high=100_000_000),
     Param("refreshes", "int", 10, low=1, high=1000),
     Param("out", "str", None, "A file to write the JSON to as well.")),
    _swap,
    lambda d: [f"swap: {d['rows']} rows, {d['refreshes']} refreshes (median "
               f"{d['median_refresh_seconds']:.2f} s): longest reader wait "
               f"{d['longest_reader_wait_seconds'] * 1000:.0f} ms, lock held at most "
               f"{d['longest_lock_held_seconds'] * 1000:.0f} ms"],
))  # fmt: skip
