"""`dbanon bench soak`: releases left running on a churning table, as a DBA leaves them.

Per grouping method, a table of N rows (schema dbanon_soak, made by this bench: id, age, region,
income; dx sensitive) is published once and then refreshed R times by the method's default
policy, with ordinary churn before each refresh: 5 % of the rows inserted, 3 % deleted and the
QIs of 2 % updated (shares of the table's size at the time). Every run is recorded: whether it
succeeded, its information loss (the run's `gcp`: NCP over the QIs), classes, persisting rows
and the intersection figures dbanon measured. Groups never split under the persist policy, so
the loss can only grow; the figures say how fast. `on_release` lets a caller (the soak test)
check every release independently as it appears.

The churn is drawn from a numpy generator seeded by `seed` (and the method's position), so
each method sees the same sequence of tables and two runs of the bench the same figures.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.bench.scale import settle
from dbanon.core.spec import ReleaseSpec
from dbanon.errors import DbanonError
from dbanon.lifecycle.declare import release_spec

if TYPE_CHECKING:
    from dbanon.api import Database
    from dbanon.lifecycle.publish import PublishResult

SCHEMA = "dbanon_soak"
METHODS = ("kmember", "mondrian", "thetak", "cbg", "lag")
# Variants run on demand (--methods): the method under another refresh policy.
SEALED = ("kmember-sealed", "mondrian-sealed", "thetak-sealed", "fulldomain-sealed", "cbg-sealed")
REGIONS = ["north", "south", "east", "west", "centre", "isles"]
# Sensitive values and their (θ,k) category (a two-level hierarchy imported as HIERARCHY).
CATEGORY = {
    "flu": "respiratory", "asthma": "respiratory", "copd": "respiratory",
    "diabetes": "metabolic", "gout": "metabolic",
    "angina": "cardiac", "arrhythmia": "cardiac",
    "cancer": "oncology", "lymphoma": "oncology", "hiv": "infection",
}  # fmt: skip
DX = list(CATEGORY)
HIERARCHY = "dbanon_soak_dx"
COLUMNS = ("id", "age", "region", "income", "dx")

OnRelease = Callable[[str, int, "PublishResult", str], None]  # method, step, result, source


def spec(method: str, source: str, k: int) -> ReleaseSpec:
    """The release each method is soaked with: QIs age, region, income; dx sensitive. A
    `-sealed` variant is the method's release under the sealed refresh policy."""
    if method in SEALED:
        base = spec(method.removesuffix("-sealed"), source, k)
        return replace(base, name=f"soak_{method.replace('-', '_')}",
                       options={**base.options, "refresh_policy": "sealed"})  # fmt: skip
    qi = ["age", "region", "income"]
    common: dict[str, Any] = {"sensitive": ["dx"], "method": method, "k": k}
    name = f"soak_{method}"
    if method == "kmember":
        return release_spec(name, source, "id", qi, **common)
    if method == "mondrian":
        return release_spec(name, source, "id", qi, l=2, **common)
    if method == "thetak":
        return release_spec(
            name, source, "id", qi, theta=2, sensitive_hierarchies={"dx": HIERARCHY}, **common
        )
    if method == "cbg":
        return release_spec(name, source, "id", qi, l=4, **common)
    if method == "fulldomain":  # soaked only sealed: its default search keeps no map
        return release_spec(name, source, "id", qi, l=2, **common)
    if method == "lag":
        return release_spec(
            name, source, "id", qi, l=3, options={"flags": f"{source}_flags"}, **common
        )
    raise DbanonError(
        f"bench soak knows methods {', '.join(METHODS + SEALED)}, not {method!r}"
    )


def people(rng: np.random.Generator, ids: np.ndarray) -> list[tuple]:
    """Rows (id, age, region, income, dx) for the given ids."""
    n = len(ids)
    age = rng.integers(18, 91, n)
    region = rng.integers(0, len(REGIONS), n)
    income = rng.integers(10, 201, n) * 500
    dx = rng.integers(0, len(DX), n)
    return [
        (int(i), int(a), REGIONS[r], int(m), DX[d])
        for i, a, r, m, d in zip(ids, age, region, income, dx, strict=True)
    ]


def make_source(conn: psycopg.Connection, table: str, rows: int, rng: np.random.Generator) -> None:
    """CREATE the bench's table (dropping the bench's own earlier one) and its flags (20 % of
    the rows flag their age, 20 % their region: lag's consent)."""
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(SCHEMA)))
    for t in (table, f"{table}_flags"):
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(SCHEMA, t)))
    ident = sql.Identifier(SCHEMA, table)
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (id int PRIMARY KEY, age int, region text, income int, dx text)"
        ).format(ident)
    )
    _copy(conn, ident, people(rng, np.arange(1, rows + 1)))
    flags = sql.Identifier(SCHEMA, f"{table}_flags")
    conn.execute(sql.SQL("CREATE TABLE {} (id int, column_name text)").format(flags))
    flagged = [
        (int(i), col)
        for col in ("age", "region")
        for i in np.flatnonzero(rng.random(rows) < 0.2) + 1
    ]
    _copy(conn, flags, flagged)


def _copy(conn: psycopg.Connection, table: sql.Identifier, rows: Sequence[tuple]) -> None:
    with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} FROM STDIN").format(table)) as copy:
        for row in rows:
            copy.write_row(row)


def churn(
    conn: psycopg.Connection, table: str, rng: np.random.Generator, next_id: int,
    inserts: float, deletes: float, updates: float,
) -> tuple[int, dict[str, int]]:  # fmt: skip
    """Delete, update the QIs of, and insert shares of the table's rows; (next id, counts)."""
    ident = sql.Identifier(SCHEMA, table)
    ids = np.array(
        [r[0] for r in conn.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(ident))]
    )
    n = len(ids)
    gone = rng.choice(ids, round(n * deletes), replace=False)
    conn.execute(sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(ident), [gone.tolist()])
    left = np.setdiff1d(ids, gone)
    moved = people(rng, rng.choice(left, round(n * updates), replace=False))
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL("UPDATE {} SET age = %s, region = %s, income = %s WHERE id = %s").format(ident),
            [(a, r, m, i) for i, a, r, m, _ in moved],
        )
    added = round(n * inserts)
    _copy(conn, ident, people(rng, np.arange(next_id, next_id + added)))
    return next_id + added, {"inserted": added, "deleted": len(gone), "updated": len(moved)}


def _figures(step: int, result: PublishResult, changes: dict[str, int]) -> dict[str, Any]:
    m = result.metrics
    return {
        "step": step, "rows": result.rows, "ncp": m.get("gcp"), "classes": result.classes,
        "min_class_size": result.min_class_size, "seconds": result.seconds,
        "timings": result.timings,
        "composition": m.get("composition"), "stale_flags": m.get("stale_flags"),
        "withheld_rows": m.get("withheld_rows"), **changes,
    }  # fmt: skip


def digest(conn: psycopg.Connection, table: str) -> str:
    """md5 of a released relation's rows as a sorted multiset: equal for the same release
    whatever order its rows are in."""
    schema, name = table.split(".", 1)
    return conn.execute(
        sql.SQL("SELECT md5(coalesce(string_agg(x::text, E'\\n' ORDER BY x::text), '')) "
                "FROM {} x").format(sql.Identifier(schema, name))
    ).fetchone()[0]  # fmt: skip


def step(dsn: str, method: str, source: str, k: int, refresh: bool) -> dict[str, Any]:
    """One publish (or refresh) of the soak's release, in this process: its figures and the
    relation it released (or its error). Nothing else: the process is timed as a run."""
    from dbanon.api import Database
    from dbanon.db.memory import return_freed_memory

    return_freed_memory()  # the process as the `dbanon` command sets it up (dbanon.cli)
    db = Database(dsn or None)
    try:
        s = spec(method, source, k)
        result = db.refresh(s.name) if refresh else db.publish(s)
        return {**_figures(0, result, {}), "table": result.table}
    except DbanonError as e:
        return {"error": str(e)}
    finally:
        db.close()


# dbanon's own schemas, where a run leaves its release and map for autovacuum to visit.
STORED = ("dbanon_store", "dbanon")


def _isolated(
    conn: psycopg.Connection, dsn: str | None, method: str, source: str, k: int, refresh: bool
) -> dict[str, Any]:
    """`step` in a process of its own, with that process's seconds and peak RSS; the digest
    of what it released read here, after the process ended (a bench's figure, not the run's:
    a sort of the whole release, 0.4 s at 277,000 rows, would be timed as the run's own)."""
    from dbanon.bench.scale import child

    args = [dsn or "", method, source, str(k), "refresh" if refresh else "publish"]
    seconds, rss, _, stdout = child(args, module="dbanon.bench.soak")
    done = json.loads(stdout)
    if "table" in done:
        done["digest"] = digest(conn, done.pop("table"))
        conn.commit()
    return {**done, "process_seconds": round(seconds, 3), "peak_rss_mb": round(rss, 1)}


def _costs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each refresh's process seconds and peak RSS over the publish's (the worst of them),
    and whether the refresh of an unchanged source released the same rows."""
    done = [r for r in runs if "error" not in r and "peak_rss_mb" in r]
    if not done or done[0]["step"] != 0:
        return {}
    first, churned = done[0], [r for r in done[1:] if not r.get("unchanged")]
    out: dict[str, Any] = {
        "publish_seconds": first["process_seconds"], "publish_peak_rss_mb": first["peak_rss_mb"],
        "refresh_seconds_ratio": max((r["process_seconds"] / first["process_seconds"]
                                      for r in churned), default=None),
        "refresh_rss_ratio": max((r["peak_rss_mb"] / first["peak_rss_mb"] for r in churned),
                                 default=None),
    }  # fmt: skip
    same = [r for r in done if r.get("unchanged")]
    if same:
        before = next(r for r in reversed(done) if r["step"] < same[0]["step"])
        out["unchanged_refresh_seconds"] = same[0]["process_seconds"]
        out["unchanged_same_release"] = same[0]["digest"] == before["digest"]
    return out


def soak(
    db: Database, methods: Sequence[str] = METHODS, rows: int = 20_000, refreshes: int = 20,
    inserts: float = 0.05, deletes: float = 0.03, updates: float = 0.02, k: int = 5,
    seed: int = 0, on_release: OnRelease | None = None, say: Callable[[str], None] | None = None,
    isolate: bool = False, dsn: str | None = None, repeat: int = 1,
) -> dict[str, Any]:  # fmt: skip
    """Publish and refresh each method's release under churn; the figures of every run. A run
    that fails is recorded with its error and ends that method's soak. `isolate`: each run in
    a process of its own (on `dsn`), with its peak RSS, and after the last refresh one more
    of the unchanged source; the refreshes' cost against the publish's is summed up, over
    `repeat` soaks of the same tables (the median of each figure: a shared machine's noise
    moves one run's seconds by a third). Before each isolated run, the tables the churn and
    the last run wrote are vacuumed, analyzed and flushed (dbanon.bench.scale.settle), as
    autovacuum and the checkpointer leave a DBA's tables between scheduled refreshes: else
    they visit a fresh table or map in the next run's window, on one of its two cores."""
    say = say or (lambda _m: None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dx.csv"
        path.write_text("".join(f"{v};{c};*\n" for v, c in CATEGORY.items()))
        db.import_hierarchy(HIERARCHY, path, replace=True, force=True)
    out: dict[str, Any] = {
        "rows": rows, "refreshes": refreshes, "k": k, "seed": seed,
        "churn": {"inserts": inserts, "deletes": deletes, "updates": updates}, "methods": {},
    }  # fmt: skip
    for method in methods:
        soaks = [_soak_one(db, method, rows, refreshes, (inserts, deletes, updates), k, seed,
                           on_release, say, isolate, dsn) for _ in range(repeat if isolate else 1)]
        runs, seconds = soaks[0]
        out["methods"][method] = {"runs": runs, "seconds": seconds}
        if isolate:
            costs = [_costs(r) for r, _ in soaks]
            out["methods"][method]["cost"] = _median(costs)
            if repeat > 1:
                out["methods"][method]["repeats"] = costs
    if isolate and repeat > 1:
        out["repeat"] = repeat
    return out


def _median(costs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the repeats (a release is the same only if it was each time)."""
    if not costs or not all(costs):
        return {}
    out: dict[str, Any] = {}
    for name, first in costs[0].items():
        values = [c.get(name) for c in costs]
        if isinstance(first, bool):
            out[name] = all(values)
        elif any(v is None for v in values):
            out[name] = None
        else:
            out[name] = float(np.median(values))
    return out


def _soak_one(
    db: Database, method: str, rows: int, refreshes: int, shares: tuple[float, float, float],
    k: int, seed: int, on_release: OnRelease | None, say: Callable[[str], None], isolate: bool,
    dsn: str | None,
) -> tuple[list[dict[str, Any]], float]:  # fmt: skip
    """One method's soak on a table made afresh (its data from (seed, its place in METHODS)):
    its runs and seconds."""
    conn = db.conn
    rng = np.random.default_rng([seed, METHODS.index(method) if method in METHODS else 99])
    table = f"bank_{method}"
    source = f"{SCHEMA}.{table}"
    s = spec(method, source, k)
    if conn.execute("SELECT 1 FROM dbanon.release WHERE name = %s", [s.name]).fetchone():
        conn.rollback()
        db.drop(s.name)  # the bench's own release of an earlier run
    conn.rollback()
    make_source(conn, table, rows, rng)
    conn.commit()
    runs: list[dict[str, Any]] = []
    started = time.perf_counter()
    next_id, changes = rows + 1, {}
    for at in range(refreshes + 1 + isolate):
        unchanged = at > refreshes  # the isolated soak's last run: nothing changed
        if isolate:
            conn.commit()  # the child's run must not wait for this session
            settle(conn, (SCHEMA, *STORED))  # the churn and the last run vacuumed, flushed
            done = _isolated(conn, dsn, method, source, k, refresh=at > 0)
            if "error" in done:
                runs.append({"step": at, "error": done["error"], **changes})
                say(f"{method}: step {at} failed: {done['error']}")
                break
            runs.append({**done, "step": at, "unchanged": unchanged, **changes})
            say(f"{method}: step {at}, {done['process_seconds']} s, "
                f"{done['peak_rss_mb']} MB")  # fmt: skip
        else:
            try:
                result = db.publish(s) if at == 0 else db.refresh(s.name)
            except DbanonError as e:
                runs.append({"step": at, "error": str(e), **changes})
                say(f"{method}: step {at} failed: {e}")
                break
            runs.append(_figures(at, result, changes))
            say(f"{method}: step {at}, NCP {result.metrics.get('gcp')}, {result.rows} rows")
            if on_release is not None:
                on_release(method, at, result, source)
        changes = {}
        if at < refreshes:
            next_id, changes = churn(conn, table, rng, next_id, *shares)
            conn.commit()
    return runs, round(time.perf_counter() - started, 1)


def write(data: dict[str, Any], directory: str | Path) -> tuple[Path, Path]:
    """soak.json and soak.png (NCP against refreshes, one line per method) in `directory`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / "soak.json"
    out.write_text(json.dumps(data, indent=1) + "\n")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for method, m in data["methods"].items():
        steps = [r["step"] for r in m["runs"] if r.get("ncp") is not None]
        ax.plot(steps, [r["ncp"] for r in m["runs"] if r.get("ncp") is not None],
                marker="o", markersize=3, label=method)  # fmt: skip
    c = data["churn"]
    ax.set_title(
        f"{data['rows']:,} rows, k={data['k']}: {c['inserts']:.0%} inserts, "
        f"{c['deletes']:.0%} deletes, {c['updates']:.0%} QI updates per refresh"
    )
    ax.set_xlabel("refresh (0: first publish)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("NCP (information loss)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png = directory / "soak.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return out, png


if __name__ == "__main__":  # a run of `isolate`d soak: DSN METHOD SOURCE K publish|refresh
    import sys

    from dbanon.db.memory import exit_without_teardown

    dsn_, method_, source_, k_, what = sys.argv[1:6]
    print(json.dumps(step(dsn_, method_, source_, int(k_), what == "refresh")))
    exit_without_teardown()  # as `dbanon` ends: no interpreter teardown timed as the run's
