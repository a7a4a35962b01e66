"""`dbanon bench scale`: every method on one generated census-like table of N mostly distinct
rows, each run as its own `dbanon publish` process, timed and measured, every release checked
independently.

The table (schema dbanon_bench_scale, made once per size and kept for later runs) has 7 QIs —
age (17-90), sex, race, marital status, education, workclass (text, no hierarchy) and a
5-digit zip code (integer) — and occupation as the sensitive attribute; values come from
hashes of the row number, so the table is the same on every server. With 90,000 zip codes and
~9e9 combinations, nearly every row is its own class: the worst case for grouping.

Per method: `seconds` is the wall time of the child process (start-up, publish, verification:
what a user waits for), `publish_seconds` the publish's own figure, `peak_rss_mb` the child's
own peak resident set (its VmHWM, `dbanon.bench.peak`), so one method's memory never hides
another's and the bench's own never hides either. The
check of each release reads it with plain SQL (GROUP BY the released QIs; count(DISTINCT) of
the sensitive values), importing nothing of dbanon's checks. `check` compares `dbanon check`
(a child process, as a user runs it) with the bare GROUP BY it stands for, timed on one open
connection, at the server's work_mem and at the one dbanon sets for its own session.
"""

from __future__ import annotations

import compileall
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from dbanon.db.catalog import Relation
from dbanon.db.shuffle import shuffle_key
from dbanon.errors import DbanonError

SCHEMA, OUT = "dbanon_bench_scale", "dbanon_bench_scale_out"
QI = ["age", "sex", "race", "marital", "education", "workclass", "zip"]
SENSITIVE = "occupation"

# Categorical columns: (name, values); a value is picked by a hash of the row number.
_CATEGORIES = {
    "sex": ["F", "M"],
    "race": ["Amer-Indian", "Asian", "Black", "Other", "White"],
    "marital": ["Divorced", "Married-AF", "Married-civ", "Married-absent", "Never-married",
                "Separated", "Widowed"],
    "education": ["Preschool", "1st-4th", "5th-6th", "7th-8th", "9th", "10th", "11th", "12th",
                  "HS-grad", "Some-college", "Assoc-voc", "Assoc-acdm", "Bachelors", "Masters",
                  "Prof-school", "Doctorate"],
    "workclass": ["Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
                  "State-gov", "Without-pay", "Never-worked"],
    "occupation": ["Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                   "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                   "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
                   "Armed-Forces"],
}  # fmt: skip


def table(rows: int) -> sql.Identifier:
    return sql.Identifier(SCHEMA, f"census_{rows}")


def make_table(conn: psycopg.Connection, rows: int) -> sql.Identifier:
    """The census-like table of `rows` rows (made once, then reused), analysed, its key `id`
    the primary key, as a DBA's census or customer table has one: without it every method's
    validation counts the distinct keys itself (0.15-0.5 s at 1M rows), a check that a
    table with a primary key does not need and the floor does not pay."""
    t = table(rows)
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(SCHEMA)))

    def pick(j: int, values: list[str]) -> sql.Composable:
        return sql.SQL("({}::text[])[1 + (hashint4(g + {}) & 65535) % {}]").format(
            sql.Literal(values), sql.Literal(j), sql.Literal(len(values))
        )

    cats = [
        sql.SQL("{} AS {}").format(pick(j + 1, values), sql.Identifier(name))
        for j, (name, values) in enumerate(_CATEGORIES.items())
    ]
    conn.execute(
        sql.SQL(
            """CREATE TABLE IF NOT EXISTS {t} AS
               SELECT g AS id, 17 + (hashint4(g) & 65535) % 74 AS age, {cats},
                      10000 + (hashint4(g + 9) & 1048575) % 90000 AS zip
               FROM generate_series(1, {n}) g"""
        ).format(t=t, cats=sql.SQL(", ").join(cats), n=sql.Literal(rows))
    )
    keyed = conn.execute(
        "SELECT 1 FROM pg_index WHERE indrelid = %s::regclass AND indisprimary",
        [t.as_string(conn)],
    ).fetchone()  # fmt: skip
    if keyed is None:  # a table an earlier bench made without one
        conn.execute(sql.SQL("ALTER TABLE {} ADD PRIMARY KEY (id)").format(t))
    conn.execute(sql.SQL("ANALYZE {}").format(t))
    conn.commit()
    return t


@functools.cache
def bytecode() -> None:
    """Write dbanon's bytecode where it is stale, once per bench process, as pip does when it
    installs a package: each child then starts as an installed dbanon starts. Under
    PYTHONDONTWRITEBYTECODE a checkout's edited modules are compiled again by every process
    (18 of them cost 0.18 s of every start on this machine). A read-only package is left as
    it is."""
    with suppress(OSError):
        compileall.compile_dir(Path(__file__).resolve().parents[1], quiet=2)


def child(
    args: list[str], ok: tuple[int, ...] = (0,), module: str = "dbanon"
) -> tuple[float, float, int, str]:
    """Run `python -m MODULE ARGS`: (wall seconds, peak RSS in MB, exit code, stdout); an
    exit code not in `ok` is an error. The peak is the child's own (`dbanon.bench.peak`: its
    VmHWM), not wait4's, which counts this process's high-water mark too."""
    bytecode()
    with tempfile.NamedTemporaryFile(prefix="dbanon-peak-") as peak:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "dbanon.bench.peak", peak.name, module, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        stdout, stderr = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        own = Path(peak.name).read_text().strip()
    if proc.returncode not in ok:
        message = (stdout or stderr).decode(errors="replace").strip().splitlines()
        raise DbanonError(f"`dbanon {' '.join(args[2:5])}` failed: {message[-1:]}")
    rss = int(own) / 1024 if own else usage.ru_maxrss / 1024  # no /proc: wait4's, an upper bound
    return seconds, rss, proc.returncode, stdout.decode()


def classes(conn: psycopg.Connection, rel: sql.Composable) -> dict[str, int]:
    """Independent check of a generalised release: its rows, smallest class and fewest
    distinct sensitive values in a class (GROUP BY the released QIs; NULL is a value)."""
    row = conn.execute(
        sql.SQL(
            """SELECT coalesce(sum(n), 0), min(n), min(d) FROM (
                   SELECT count(*) AS n, count(DISTINCT coalesce({s}::text, '')) AS d
                   FROM {rel} GROUP BY {qi}) c"""
        ).format(
            s=sql.Identifier(SENSITIVE), rel=rel, qi=sql.SQL(", ").join(map(sql.Identifier, QI))
        )
    ).fetchone()
    return {"rows": int(row[0]), "min_class": int(row[1] or 0), "min_distinct": int(row[2] or 0)}


def anatomy_groups(conn: psycopg.Connection, qit: sql.Composable, st: sql.Composable) -> dict:
    """Independent check of an Anatomy release: every group's rows in the QI table equal its
    counts in the sensitive table, and the fewest distinct sensitive values in a group."""
    row = conn.execute(
        sql.SQL(
            """WITH q AS (SELECT group_id, count(*) AS n FROM {qit} GROUP BY group_id),
                    s AS (SELECT group_id, sum("count") AS n, count(DISTINCT {sa}) AS d
                          FROM {st} GROUP BY group_id)
               SELECT (SELECT sum(n) FROM q), min(s.d),
                      count(*) FILTER (WHERE q.n IS DISTINCT FROM s.n)
               FROM s FULL JOIN q USING (group_id)"""
        ).format(qit=qit, st=st, sa=sql.Identifier(SENSITIVE))
    ).fetchone()
    return {"rows": int(row[0] or 0), "min_distinct": int(row[1] or 0), "mismatched": row[2]}


# Where a method's predecessors leave work for the server: their releases and maps (dbanon's
# own schemas) and the bench's output.
SETTLED = ("dbanon_store", "dbanon", OUT)


def settle(conn: psycopg.Connection, schemas: Sequence[str] = SETTLED) -> None:
    """Before the floor and each method: what earlier runs wrote is flushed (CHECKPOINT) and
    vacuumed and analyzed (VACUUM (ANALYZE) of the tables in `schemas` written since their last),
    so that no method pays for its predecessor's release, as the server's checkpointer and
    autovacuum would make it pay, the next method's measured window being the first they
    wake in. A role that may not (CHECKPOINT needs pg_checkpoint) leaves it to the server."""
    tables = conn.execute(
        "SELECT schemaname, relname FROM pg_stat_user_tables WHERE schemaname = ANY(%s) "
        "AND (n_mod_since_analyze > 0 OR n_ins_since_vacuum > 0 OR n_dead_tup > 0) "
        "ORDER BY 1, 2",
        [list(schemas)],
    ).fetchall()
    conn.commit()
    autocommit, conn.autocommit = conn.autocommit, True
    try:
        for schema, table in tables:
            with suppress(psycopg.Error):  # dropped meanwhile, or not this role's to vacuum
                conn.execute(sql.SQL("VACUUM (ANALYZE, SKIP_LOCKED) {}").format(
                    sql.Identifier(schema, table)))  # fmt: skip
        with suppress(psycopg.Error):
            conn.execute("CHECKPOINT")
    finally:
        conn.autocommit = autocommit


def floor(conn: psycopg.Connection, src: sql.Identifier, rows: int) -> dict[str, float]:
    """What any release of the table must cost at least, measured on the same table in the same
    run: writing every column but the key once, in random order, and one GROUP BY over the QIs
    (the check). Best of two each, on an open connection."""
    cols = sql.SQL(", ").join(map(sql.Identifier, [*QI, SENSITIVE]))
    scratch = sql.Identifier(OUT, "floor_copy")

    def timed(query: sql.Composable, fresh: bool) -> float:
        best = math.inf
        for _ in range(2):
            if fresh:
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(scratch))
                conn.commit()
            started = time.perf_counter()
            conn.execute(query)
            conn.commit()
            best = min(best, time.perf_counter() - started)
        return best

    # in a secret order as dbanon's own table releases shuffle (dbanon.db.shuffle): the
    # cheapest honest shuffle, sorted in parallel (random() sorts in the leader alone)
    write = timed(sql.SQL("CREATE TABLE {} AS SELECT {} FROM {} s ORDER BY {}").format(
        scratch, cols, src, shuffle_key(Relation(SCHEMA, f"census_{rows}"), "s", conn)), fresh=True)
    group = timed(sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {} GROUP BY {}) c").format(
        scratch, sql.SQL(", ").join(map(sql.Identifier, QI))), fresh=False)  # fmt: skip
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(scratch))
    conn.commit()
    return {"write_seconds": round(write, 4), "group_by_seconds": round(group, 4),
            "seconds": round(write + group, 4)}  # fmt: skip


@dataclass(frozen=True)
class Setup:
    """How the bench publishes one method on the census table, and checks what it released."""

    args: Callable[[int, int, str], list[str]]  # (k, l, schema of the bench's own objects)
    # (conn, release name, rows, k, l): the independent check of what it released
    check: Callable[[psycopg.Connection, str, int, int, int], dict[str, Any]]


def _generalised(conn: psycopg.Connection, name: str, rows: int, k: int, l: int) -> dict:  # noqa: E741
    found = classes(conn, sql.Identifier(OUT, name))
    return {**found, "k": k, "holds": found["min_class"] >= k and found["rows"] == rows}


def _suppressing(conn: psycopg.Connection, name: str, rows: int, k: int, l: int) -> dict:  # noqa: E741
    """A release that may suppress rows (LAG, a projection): its classes over the QIs it kept,
    as they are or as one-hot indicators (`qi=value`, `qi#i`: hamdist's)."""
    kept = [c for c in _columns(conn, name)
            if c in QI or c.partition("=")[0] in QI or c.partition("#")[0] in QI]  # fmt: skip
    row = conn.execute(sql.SQL(
        "SELECT coalesce(sum(n), 0), min(n) FROM (SELECT count(*) AS n FROM {} GROUP BY {}) c"
    ).format(sql.Identifier(OUT, name), sql.SQL(", ").join(map(sql.Identifier, kept))
             if kept else sql.SQL("()"))).fetchone()  # fmt: skip
    n, smallest = int(row[0]), int(row[1] or 0)
    return {"rows": n, "min_class": smallest, "qi_kept": kept, "k": k,
            "holds": smallest >= k and 0 < n <= rows}  # fmt: skip


def _sampled(conn: psycopg.Connection, name: str, rows: int, k: int, l: int) -> dict:  # noqa: E741
    """safepub: a sample (rows <= the table's), every class at least the SDGS k of its (ε, δ)."""
    from dbanon.models.dp import sdgs

    return _suppressing(conn, name, rows, sdgs(*SAFEPUB_DP).k, l)


def _columns(conn: psycopg.Connection, name: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
        "AND table_name = %s ORDER BY ordinal_position", [OUT, name])]  # fmt: skip


def _anatomy(conn: psycopg.Connection, name: str, rows: int, k: int, l: int) -> dict:  # noqa: E741
    qit, st = (sql.Identifier(OUT, f"{name}_{s}") for s in ("qit", "st"))
    found = anatomy_groups(conn, qit, st)
    holds = found["rows"] == rows and not found["mismatched"] and found["min_distinct"] >= l
    return {**found, "l": l, "holds": holds}


def _cbg(conn: psycopg.Connection, name: str, rows: int, k: int, l: int) -> dict:  # noqa: E741
    """(k,l) of a cross-bucket release (thesis Def. 3.7): every class of the QI table has >= k
    rows, and every class's probability of every value, sum over its buckets of
    Num(C,b) * Num(s,b) / (|C| * |b|), is at most 1/l."""
    qit, st = (sql.Identifier(OUT, f"{name}_{s}") for s in ("qit", "st"))
    qi = sql.SQL(", ").join(map(sql.Identifier, QI))
    row = conn.execute(sql.SQL(
        """WITH cb AS (SELECT {qi}, bucket_id, count(*) AS n FROM {qit} GROUP BY {qi}, bucket_id),
                c AS (SELECT {qi}, sum(n) AS size FROM cb GROUP BY {qi}),
                b AS (SELECT bucket_id, sum("count") AS size FROM {st} GROUP BY bucket_id),
                p AS (SELECT sum(cb.n::float8 * st."count" / b.size) / min(c.size) AS p
                      FROM cb JOIN {st} st USING (bucket_id) JOIN b USING (bucket_id)
                      JOIN c USING ({qi}) GROUP BY {qi}, st.{sa})
           SELECT (SELECT sum(size) FROM c), (SELECT min(size) FROM c), (SELECT max(p) FROM p)"""
    ).format(qit=qit, st=st, qi=qi, sa=sql.Identifier(SENSITIVE))).fetchone()  # fmt: skip
    n, smallest, worst = int(row[0] or 0), int(row[1] or 0), float(row[2] or 1.0)
    return {"rows": n, "min_class": smallest, "max_probability": round(worst, 4), "k": k,
            "l": l, "holds": n == rows and smallest >= k and worst <= 1 / l + 1e-9}  # fmt: skip


def _local(conn: psycopg.Connection, name: str, rows: int, k: int, l: int) -> dict:  # noqa: E741
    """Local anatomy / LAG: every bucket of every flagged attribute holds >= l distinct values;
    LAG's generalised rest is k-anonymous over the QIs it released."""
    out: dict[str, Any] = {"l": l, "buckets": {}}
    holds = True
    for (table,) in conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
        "AND table_name LIKE %s ORDER BY 1", [OUT, f"{name}\\_%\\_st"]).fetchall():  # fmt: skip
        col = table[len(name) + 1 : -len("_st")]
        d = conn.execute(sql.SQL(
            "SELECT min(d) FROM (SELECT count(DISTINCT {c}) AS d FROM {t} GROUP BY bucket_id) b"
        ).format(c=sql.Identifier(col), t=sql.Identifier(OUT, table))).fetchone()[0]  # fmt: skip
        out["buckets"][col] = int(d or 0)
        holds = holds and int(d or 0) >= l
    n = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(OUT, name)))
    out["rows"] = int(n.fetchone()[0])
    out["holds"] = holds and bool(out["buckets"]) and out["rows"] == rows
    return out


def _lag(conn: psycopg.Connection, name: str, rows: int, k: int, l: int) -> dict:  # noqa: E741
    local = _local(conn, name, rows, k, l)
    rest = _suppressing(conn, name, rows, k, l)
    return {**local, "rest": rest, "holds": local["buckets"] != {} and rest["holds"]
            and all(d >= l for d in local["buckets"].values())}  # fmt: skip


def _noise(conn: psycopg.Connection, name: str, rows: int, k: int, l: int) -> dict:  # noqa: E741
    """A perturbed release: every row, no key, no column nobody declared."""
    cols = _columns(conn, name)
    n = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(OUT, name)))
    released = int(n.fetchone()[0])
    undeclared = sorted(set(cols) - {"age", "zip", SENSITIVE, "dbanon_row"})
    return {"rows": released, "columns": cols, "holds": released == rows and not undeclared}


_NUMERIC = ["--columns", "age,zip", "--sensitive", SENSITIVE]
# safepub at (ε, δ) = (1, 1e-5) (k = 61), every QI but sex at '*': the table has no stored
# hierarchies, and the scheme must not come from the data.
SAFEPUB_DP = (1.0, 1e-5)
_SAFEPUB_LEVELS = "age=1,race=1,marital=1,education=1,workclass=1,zip=1"
SETUPS: dict[str, Setup] = {
    "mondrian": Setup(lambda k, l_, s: ["--algorithm", "mondrian", "--k", str(k),
                                       "--sensitive", SENSITIVE], _generalised),
    "fulldomain": Setup(lambda k, l_, s: ["--algorithm", "fulldomain", "--k", str(k),
                                         "--sensitive", SENSITIVE], _generalised),
    "fulldomain_view": Setup(lambda k, l_, s: ["--algorithm", "fulldomain", "--k", str(k),
                                              "--as", "view", "--sensitive", SENSITIVE],
                             _generalised),
    "anatomy": Setup(lambda k, l_, s: ["--algorithm", "anatomy", "--sensitive", SENSITIVE,
                                      "--l", str(l_), "--seed", "1"], _anatomy),
    "kmember": Setup(lambda k, l_, s: ["--algorithm", "kmember", "--k", str(k), "--seed", "1",
                                      "--sensitive", SENSITIVE], _generalised),
    "thetak": Setup(lambda k, l_, s: ["--algorithm", "thetak", "--k", str(k), "--theta", "3",
                                     "--sensitive", SENSITIVE, "--sensitive-hierarchy",
                                     f"{SENSITIVE}={SCHEMA}_occupation", "--seed", "1"],
                    _generalised),
    "cbg": Setup(lambda k, l_, s: ["--algorithm", "cbg", "--k", str(k), "--l", str(l_),
                                  "--sensitive", SENSITIVE], _cbg),
    "localanatomy": Setup(lambda k, l_, s: ["--algorithm", "localanatomy", "--l", str(l_),
                                           "--sensitive", SENSITIVE, "--flags", s, "--seed", "1"],
                          _local),
    "lag": Setup(lambda k, l_, s: ["--algorithm", "lag", "--k", str(k), "--l", str(l_),
                                  "--sensitive", SENSITIVE, "--flags", s, "--seed", "1"], _lag),
    "safepub": Setup(lambda k, l_, s: ["--algorithm", "safepub", "--epsilon", str(SAFEPUB_DP[0]),
                                      "--delta", str(SAFEPUB_DP[1]), "--levels", _SAFEPUB_LEVELS,
                                      "--sensitive", SENSITIVE, "--seed", "1"], _sampled),
    "ina": Setup(lambda k, l_, s: ["--algorithm", "ina", *_NUMERIC, "--seed", "1"], _noise),
    "noise": Setup(lambda k, l_, s: ["--algorithm", "noise", *_NUMERIC, "--seed", "1"], _noise),
    # rfka and hamdist publish a live view unless told: the plain names are their tables
    "rfka": Setup(lambda k, l_, s: ["--algorithm", "rfka", "--k", str(k), "--as", "table",
                                   "--sensitive", SENSITIVE, "--trees", "100", "--sample",
                                   "20000", "--seed", "1"], _suppressing),
    "rfka_view": Setup(lambda k, l_, s: ["--algorithm", "rfka", "--k", str(k), "--as", "view",
                                        "--sensitive", SENSITIVE, "--trees", "100",
                                        "--sample", "20000", "--seed", "1"], _suppressing),
    "hamdist": Setup(lambda k, l_, s: ["--algorithm", "hamdist", "--k", str(k), "--as",
                                      "table", "--sensitive", SENSITIVE], _suppressing),
    "hamdist_view": Setup(lambda k, l_, s: ["--algorithm", "hamdist", "--k", str(k), "--as",
                                           "view", "--sensitive", SENSITIVE], _suppressing),
}  # fmt: skip
METHODS = (*SETUPS, "check")


def prepare(conn: psycopg.Connection, dsn: str, rows: int, src: sql.Identifier) -> str:
    """What some methods need beside the table: (θ,k)'s occupation categories (the shipped
    Adult hierarchy, under a name of the bench's own) and a flags table for local anatomy and
    LAG (about 6 % of ages and 3 % of zip codes flagged by their owners). Returns the flags."""
    from dbanon.api import Database
    from dbanon.data import hierarchy_file

    flags = sql.Identifier(SCHEMA, f"flags_{rows}")
    conn.execute(sql.SQL(
        """CREATE TABLE IF NOT EXISTS {f} AS
           SELECT id, 'age'::text AS column_name FROM {t} WHERE hashint4(id + 77) & 15 = 0
           UNION ALL SELECT id, 'zip' FROM {t} WHERE hashint4(id + 78) & 31 = 0"""
    ).format(f=flags, t=src))  # fmt: skip
    conn.commit()
    with Database(dsn) as db:
        name = f"{SCHEMA}_occupation"
        if name not in {h["name"] for h in db.hierarchies()}:
            db.import_hierarchy(name, hierarchy_file("occupation"))
    return f"{SCHEMA}.flags_{rows}"


def run(
    dsn: str,
    rows: int,
    k: int = 10,
    l: int = 2,  # noqa: E741 - the paper's name
    methods: tuple[str, ...] = METHODS,
    say: Callable[[str], None] = lambda _m: None,
    floor_each: bool = False,
    repeat: int = 1,
) -> dict[str, Any]:
    """Make the table, measure the floor, run each method in a child process, check each
    release independently; `floor_ratio` is the method's process seconds over the floor's.
    `floor_each`: the floor is measured again just before each method too, and the method's
    `near_floor_ratio` is to that one: a shared machine's speed drifts by a third within a
    run, which moves a ratio to a floor measured minutes earlier either way. `repeat`: each
    method is published that many times (each after its own floor, with `floor_each`); its
    seconds, phases and floor are those of its median run, its near_floor_ratio the median of
    the runs' own, its peak RSS the largest, every run kept under `repeats`."""
    from dbanon.lifecycle.releases import drop

    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise DbanonError(f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    with psycopg.connect(dsn) as conn:
        say(f"making {SCHEMA}.census_{rows} ({rows:,} rows) unless it exists")
        src = make_table(conn, rows)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(OUT)))
        conn.commit()
        flags = prepare(conn, dsn, rows, src)
        source = f"{SCHEMA}.census_{rows}"
        base = ["--dsn", dsn, "--json"]
        qi = ",".join(QI)
        say("the floor: write every column once in random order, one GROUP BY")
        settle(conn)
        low = floor(conn, src, rows)
        out: dict[str, Any] = {"rows": rows, "k": k, "l": l, "qi": QI, "floor": low,
                               "floor_each": floor_each, "methods": {}}  # fmt: skip
        for method in methods:
            say(f"{method} on {rows:,} rows")
            if method == "check":
                out["methods"]["check"] = check(conn, base, source, src, k)
                continue
            setup = SETUPS[method]
            name = f"scale_{method}"
            args = [*base, "publish", name, "--source", source, "--key", "id"]
            if method not in ("ina", "noise"):
                args += ["--qi", qi]
            args += [*setup.args(k, l, flags), "--target", f"{OUT}.{name}"]
            runs: list[dict[str, Any]] = []
            for _ in range(repeat):
                # A fresh release each run: replacing one would keep its rows' groups (persist).
                exists = conn.execute("SELECT 1 FROM dbanon.release WHERE name = %s", [name])
                if exists.fetchone():
                    drop(conn, name)
                conn.commit()
                settle(conn)
                near = None
                if floor_each:
                    near = floor(conn, src, rows)
                    settle(conn)  # the floor's own writes are not the method's to pay for
                try:
                    seconds, rss, _, stdout = child(args)
                except DbanonError as e:  # a method's failure is a figure, not the run's end
                    runs = [{"error": str(e)}]
                    break
                one = {"seconds": round(seconds, 2),
                       "publish_seconds": json.loads(stdout).get("seconds"),
                       "peak_rss_mb": round(rss, 1), "timings": phases(conn, name)}  # fmt: skip
                if near is not None:
                    one |= {"floor": near, "near_floor_ratio": _ratio(seconds, near)}
                runs.append(one)
                conn.commit()
            if "error" in runs[0]:
                out["methods"][method] = runs[0]
                continue
            mid = sorted(runs, key=lambda r: r["seconds"])[(len(runs) - 1) // 2]
            entry = {**mid, "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
                     "floor_ratio": _ratio(mid["seconds"], low),
                     "checked": setup.check(conn, name, rows, k, l)}  # the last run's release
            if floor_each:
                ratios = sorted(r["near_floor_ratio"] for r in runs)
                entry["near_floor_ratio"] = ratios[(len(ratios) - 1) // 2]
            if repeat > 1:
                entry["repeats"] = [{key: r[key] for key in ("seconds", "peak_rss_mb",
                                                             "near_floor_ratio") if key in r}
                                    for r in runs]  # fmt: skip
            out["methods"][method] = entry
            conn.commit()
    if repeat > 1:
        out["repeat"] = repeat
    return out


def _ratio(seconds: float, floor: dict[str, float]) -> float:
    """A method's process seconds (as reported, to 0.01 s) over a floor's."""
    return round(round(seconds, 2) / floor["seconds"], 2)


def phases(conn: psycopg.Connection, name: str) -> dict[str, float]:
    """Where the publish's seconds went: its run record's timings (dbanon.run), phase by
    phase, as the lifecycle measured them."""
    row = conn.execute(
        """SELECT r.timings FROM dbanon.run r JOIN dbanon.release x ON x.id = r.release_id
           WHERE x.name = %s AND r.status = 'succeeded' ORDER BY r.id DESC LIMIT 1""",
        [name],
    ).fetchone()
    return dict(row[0] or {}) if row else {}


def check(
    conn: psycopg.Connection, base: list[str], source: str, src: sql.Identifier, k: int
) -> dict[str, Any]:
    """`dbanon check --k` as a user runs it (a process) against the bare GROUP BY it stands
    for (on an open connection), best of two each. The bare query is timed twice over: with the
    server's work_mem (what a DBA's psql would get) and with the session memory dbanon sets for
    itself (`raise_memory`), so that the second ratio is dbanon's overhead alone. The same
    process on an empty copy of the table (`startup_seconds`) parts that overhead into the
    process's start-up and the query; `worst_seconds` is the check naming its worst class;
    `backends`, how many count its classes (`dbanon.models.split`)."""
    from dbanon.db.settings import raise_memory

    query = sql.SQL(
        "SELECT count(*), coalesce(sum(n) FILTER (WHERE n < {k}), 0), min(n) "
        "FROM (SELECT count(*) AS n FROM {t} GROUP BY {qi}) c"
    ).format(k=sql.Literal(k), t=src, qi=sql.SQL(", ").join(map(sql.Identifier, QI)))

    def bare() -> float:
        times = []
        for _ in range(2):
            started = time.perf_counter()
            conn.execute(query).fetchone()
            times.append(time.perf_counter() - started)
            conn.commit()
        return min(times)

    default = bare()
    raise_memory(conn)
    same = bare()
    conn.execute("RESET work_mem")
    conn.execute("RESET maintenance_work_mem")
    conn.commit()
    empty = sql.Identifier(SCHEMA, "census_empty")
    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (LIKE {})").format(empty, src))
    conn.commit()

    def timed(relation: str, *more: str) -> tuple[float, float]:
        """Best of two `dbanon check` processes (1: not k-anonymous, as the census is not)."""
        args = [*base, "check", relation, "--qi", ",".join(QI), "--k", str(k), *more]
        runs = [child(args, ok=(0, 1)) for _ in "ab"]
        return min(r[0] for r in runs), max(r[1] for r in runs)

    from dbanon.db.catalog import relation
    from dbanon.models.split import plan

    chosen = plan(conn, relation(conn, source), QI)  # as the child decides: one backend or more
    conn.rollback()
    seconds, rss = timed(source)
    # the same process on an empty table: start-up, connection and catalog, no classes
    startup, _ = timed(f"{SCHEMA}.census_empty")
    worst, _ = timed(source, "--worst")  # naming the worst class: one more pass
    return {
        "seconds": round(seconds, 3),
        "peak_rss_mb": round(rss, 1),
        "bare_group_by_seconds": round(default, 3),
        "ratio": round(seconds / default, 2),
        "bare_group_by_same_work_mem_seconds": round(same, 3),
        "ratio_same_work_mem": round(seconds / same, 2),
        "startup_seconds": round(startup, 3),
        "query_ratio_same_work_mem": round((seconds - startup) / same, 2),
        "worst_seconds": round(worst, 3),
        "backends": 1 if chosen is None else len(chosen[1]) + 1,
    }
