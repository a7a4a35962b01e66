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
maximum resident set (wait4's ru_maxrss), so one method's memory never hides another's. The
check of each release reads it with plain SQL (GROUP BY the released QIs; count(DISTINCT) of
the sensitive values), importing nothing of dbanon's checks. `check` compares `dbanon check`
(a child process, as a user runs it) with the bare GROUP BY it stands for, timed on one open
connection, at the server's work_mem and at the one dbanon sets for its own session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from dbanon.errors import DbanonError

SCHEMA, OUT = "dbanon_bench_scale", "dbanon_bench_scale_out"
QI = ["age", "sex", "race", "marital", "education", "workclass", "zip"]
SENSITIVE = "occupation"
METHODS = ("mondrian", "fulldomain", "fulldomain_view", "anatomy", "kmember", "check")

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
    """The census-like table of `rows` rows (made once, then reused), analysed."""
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
    conn.execute(sql.SQL("ANALYZE {}").format(t))
    conn.commit()
    return t


def child(args: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, float, int, str]:
    """Run `python -m dbanon ARGS`: (wall seconds, peak RSS in MB, exit code, stdout); an
    exit code not in `ok` is an error."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dbanon", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    stdout, stderr = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if proc.returncode not in ok:
        message = (stdout or stderr).decode(errors="replace").strip().splitlines()
        raise DbanonError(f"`dbanon {' '.join(args[2:5])}` failed: {message[-1:]}")
    return seconds, usage.ru_maxrss / 1024, proc.returncode, stdout.decode()


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


def run(
    dsn: str,
    rows: int,
    k: int = 10,
    l: int = 2,  # noqa: E741 - the paper's name
    methods: tuple[str, ...] = METHODS,
    say: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """Make the table, run each method in a child process, check each release."""
    from dbanon.release import drop

    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise DbanonError(f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    with psycopg.connect(dsn) as conn:
        say(f"making {SCHEMA}.census_{rows} ({rows:,} rows) unless it exists")
        src = make_table(conn, rows)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(OUT)))
        conn.commit()
        source = f"{SCHEMA}.census_{rows}"
        base = ["--dsn", dsn, "--json"]
        qi = ",".join(QI)
        out: dict[str, Any] = {"rows": rows, "k": k, "l": l, "qi": QI, "methods": {}}
        publish = {
            "mondrian": ["--algorithm", "mondrian", "--k", str(k)],
            "fulldomain": ["--algorithm", "fulldomain", "--k", str(k)],
            "fulldomain_view": ["--algorithm", "fulldomain", "--k", str(k), "--as", "view"],
            "anatomy": ["--algorithm", "anatomy", "--sensitive", SENSITIVE, "--l", str(l),
                        "--seed", "1"],
            "kmember": ["--algorithm", "kmember", "--k", str(k), "--seed", "1"],
        }  # fmt: skip
        for method in methods:
            say(f"{method} on {rows:,} rows")
            if method == "check":
                out["methods"]["check"] = check(conn, base, source, src, k)
                continue
            name = f"scale_{method}"
            target = f"{OUT}.{name}"
            args = [*base, "publish", name, "--source", source, "--key", "id", "--qi", qi]
            args += [*publish[method], "--target", target]
            if method != "anatomy":
                args += ["--sensitive", SENSITIVE]
            # A fresh release each run: replacing one would keep its rows' groups (persist).
            exists = conn.execute("SELECT 1 FROM dbanon.release WHERE name = %s", [name])
            if exists.fetchone():
                drop(conn, name)
            conn.commit()
            seconds, rss, _, stdout = child(args)
            result = json.loads(stdout)
            figures: dict[str, Any] = {
                "seconds": round(seconds, 2),
                "publish_seconds": result.get("seconds"),
                "peak_rss_mb": round(rss, 1),
            }
            if method == "anatomy":
                qit, st = (sql.Identifier(OUT, f"{name}_{s}") for s in ("qit", "st"))
                found = anatomy_groups(conn, qit, st)
                whole = found["rows"] == rows and not found["mismatched"]
                holds = whole and found["min_distinct"] >= l
                figures["checked"] = {**found, "l": l, "holds": holds}
            else:
                found = classes(conn, sql.Identifier(OUT, name))
                figures["checked"] = {**found, "k": k, "holds": found["min_class"] >= k}
            conn.commit()
            out["methods"][method] = figures
    return out


def check(
    conn: psycopg.Connection, base: list[str], source: str, src: sql.Identifier, k: int
) -> dict[str, Any]:
    """`dbanon check --k` as a user runs it (a process) against the bare GROUP BY it stands
    for (on an open connection), best of two each. The bare query is timed twice over: with the
    server's work_mem (what a DBA's psql would get) and with the session memory dbanon sets for
    itself (`raise_memory`), so that the second ratio is dbanon's overhead alone."""
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
    args = [*base, "check", source, "--qi", ",".join(QI), "--k", str(k)]
    runs = [child(args, ok=(0, 1)) for _ in "ab"]  # 1: the table is not k-anonymous (it is not)
    seconds = min(r[0] for r in runs)
    return {
        "seconds": round(seconds, 3),
        "peak_rss_mb": round(max(r[1] for r in runs), 1),
        "bare_group_by_seconds": round(default, 3),
        "ratio": round(seconds / default, 2),
        "bare_group_by_same_work_mem_seconds": round(same, 3),
        "ratio_same_work_mem": round(seconds / same, 2),
    }
