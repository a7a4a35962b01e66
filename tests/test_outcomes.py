"""Every outcome of a run is visible: a refused or failed run newer than the release in place
shows in `report` and `releases` (status, message, time) beside the rows actually in place, and
`refresh --due` prints each release's outcome and exits with the worst code (2 for a failure,
else 4 for a refusal).

A refusal is provoked the honest way: a release whose stored policy regroups from scratch, a
source that churns, and a refresh whose new groups an intersecting consumer could narrow below k.
The rows in place are counted on the released relation itself (plain SQL).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import psycopg
from helpers import cli, cli_json, make_table
from psycopg import sql

K = 5
REGIONS = ["N", "S", "E", "W"]
DX = ["flu", "asthma", "diabetes", "cancer", "gout", "angina", "ulcer"]


def person(rng: random.Random, i: int) -> tuple:
    return (i, rng.randint(18, 90), rng.choice(REGIONS), rng.choice(DX))


def released_rows(conn: psycopg.Connection, name: str) -> int:
    return conn.execute(
        sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("released", name))
    ).fetchone()[0]


def churn(conn: psycopg.Connection, rng: random.Random, table: str, next_id: int) -> int:
    """Delete 5 % of the rows and insert 10 % new ones; returns the next free id."""
    ident = sql.Identifier("h", table)
    ids = [r[0] for r in conn.execute(sql.SQL("SELECT id FROM {}").format(ident)).fetchall()]
    conn.execute(sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(ident),
                 [rng.sample(ids, len(ids) // 20)])  # fmt: skip
    for _ in range(len(ids) // 10):
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(ident),
                     person(rng, next_id))  # fmt: skip
        next_id += 1
    return next_id


def due(dsn: str, at: datetime) -> tuple[int, dict]:
    return cli_json(dsn, "refresh", "--due", "--now", at.isoformat())


def test_a_refused_and_a_failed_refresh_show_and_set_the_exit_code(
    conn: psycopg.Connection, dsn: str
) -> None:
    rng = random.Random(5)
    cols = [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("dx", "text")]
    make_table(conn, "h", "ward", cols, [person(rng, i) for i in range(1, 601)])
    make_table(conn, "h", "clinic", cols, [person(rng, i) for i in range(1, 201)])
    # `ward` regroups from scratch on every refresh (its stored policy), so churn lets an
    # intersecting consumer narrow rows down: refused. `clinic` fails on a NULL QI.
    for name, extra in (("ward", ["--refresh-policy", "regroup"]), ("clinic", [])):
        code, out = cli_json(dsn, "publish", name, "--source", f"h.{name}", "--key", "id",
                             "--qi", "age,region", "--sensitive", "dx", "--k", str(K),
                             "--algorithm", "mondrian", *extra)  # fmt: skip
        assert code == 0, out
        assert cli_json(dsn, "schedule", name, "--every", "1 hour")[0] == 0
    in_place = {n: released_rows(conn, n) for n in ("ward", "clinic")}
    assert in_place == {"ward": 600, "clinic": 200}

    # Only the refusal: exit 4, outcome `refused` (not `failed`) with the measured figure.
    churn(conn, rng, "ward", 601)
    code, out = due(dsn, datetime.now(timezone.utc) + timedelta(hours=2))
    outcomes = {r["release"]: r for r in out["results"]}
    assert code == 4 and out["exit"] == 4, out
    assert outcomes["ward"]["outcome"] == "refused" and outcomes["ward"]["exit"] == 4
    assert "could narrow" in outcomes["ward"]["error"]
    assert outcomes["clinic"]["outcome"] == "skipped"  # unchanged source
    refusal = outcomes["ward"]["error"]
    assert released_rows(conn, "ward") == 600  # the previous release is kept

    # `report`: the refusal with its message and time, and the rows actually in place.
    code, rep = cli_json(dsn, "report", "ward")
    assert code == 0, rep
    failure = rep["last_failure"]
    assert failure["status"] == "refused" and failure["error"] == refusal
    assert datetime.fromisoformat(failure["at"]) > datetime.fromisoformat(rep["published_at"])
    assert rep["rows"] == released_rows(conn, "ward") == 600
    assert failure["message"].startswith("latest run refused at") and refusal in failure["message"]
    assert rep["warnings"] == []  # the release in place is whole (`evaluate` refuses on these)
    human = cli(dsn, "report", "ward").stdout
    assert "latest run refused at" in human and "600 rows) is still in place" in human
    # `releases`: the same, for every release; the one that ran fine has nothing to show.
    code, listed = cli_json(dsn, "releases")
    by_name = {r["name"]: r for r in listed["releases"]}
    assert by_name["ward"]["last_status"] == "refused"
    assert by_name["ward"]["rows"] == 600 and by_name["clinic"]["rows"] == 200
    assert by_name["ward"]["last_failure"]["error"] == refusal
    assert by_name["clinic"]["last_failure"] is None
    human = cli(dsn, "releases").stdout
    assert "ward: latest run refused at" in human and "still in place" in human

    # A failure beside the refusal: exit 2, each outcome printed.
    conn.execute("UPDATE h.clinic SET age = NULL WHERE id = 1")
    code, out = due(dsn, datetime.now(timezone.utc) + timedelta(hours=4))
    outcomes = {r["release"]: r["outcome"] for r in out["results"]}
    assert code == 2 and outcomes == {"ward": "refused", "clinic": "failed"}, out
    human = cli(dsn, "refresh", "--due", "--now",
                (datetime.now(timezone.utc) + timedelta(hours=6)).isoformat())  # fmt: skip
    assert human.exit_code == 2
    assert "ward: refused - " in human.stdout and "clinic: failed - " in human.stdout
    code, rep = cli_json(dsn, "report", "clinic")
    assert rep["last_failure"]["status"] == "failed" and "NULL" in rep["last_failure"]["error"]
    assert rep["rows"] == released_rows(conn, "clinic") == 200

    # A success since clears both: nothing newer than the release in place.
    conn.execute("UPDATE h.clinic SET age = 40 WHERE id = 1")
    code, out = cli_json(dsn, "refresh", "ward", "--allow-composition")
    assert code == 0, out
    code, out = due(dsn, datetime.now(timezone.utc) + timedelta(hours=8))
    assert code == 0 and {r["outcome"] for r in out["results"]} <= {"refreshed", "skipped"}, out
    for name in ("ward", "clinic"):
        code, rep = cli_json(dsn, "report", name)
        assert rep["last_failure"] is None and rep["rows"] == released_rows(conn, name), rep
    code, listed = cli_json(dsn, "releases")
    assert all(r["last_failure"] is None for r in listed["releases"])


def test_a_killed_run_shows_before_the_next_run_writes_it_down(
    conn: psycopg.Connection, dsn: str
) -> None:
    """A run whose process was killed stays `running` in the trail until the next run marks it
    abandoned; `report` and `releases` show it as abandoned already (its backend is gone)."""
    rng = random.Random(7)
    cols = [("id", "int PRIMARY KEY"), ("age", "int"), ("region", "text"), ("dx", "text")]
    make_table(conn, "h", "ward", cols, [person(rng, i) for i in range(1, 101)])
    code, out = cli_json(dsn, "publish", "ward", "--source", "h.ward", "--key", "id", "--qi",
                         "age,region", "--k", str(K), "--algorithm", "mondrian")  # fmt: skip
    assert code == 0, out
    # What a killed refresh leaves: its `running` row, naming a backend that has ended.
    with psycopg.connect(dsn) as gone:
        pid = gone.execute("SELECT pg_backend_pid()").fetchone()[0]
    conn.execute(
        "INSERT INTO dbanon.run (release_id, status, pid) SELECT id, 'running', %s "
        "FROM dbanon.release WHERE name = 'ward'",
        [pid],
    )
    for _ in range(50):  # the ended backend leaves pg_stat_activity within moments
        if not conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
            break
        conn.execute("SELECT pg_sleep(0.1)")
    code, rep = cli_json(dsn, "report", "ward")
    assert rep["last_failure"]["status"] == "abandoned", rep
    assert "killed" in rep["last_failure"]["error"] and rep["rows"] == released_rows(conn, "ward")
    code, listed = cli_json(dsn, "releases")
    assert listed["releases"][0]["last_failure"]["status"] == "abandoned"
    assert listed["releases"][0]["rows"] == 100
    # A run in progress (its backend alive) is not a failure.
    conn.execute("UPDATE dbanon.run SET pid = pg_backend_pid() WHERE status = 'running'")
    assert cli_json(dsn, "report", "ward")[1]["last_failure"] is None
    conn.execute("UPDATE dbanon.run SET pid = %s WHERE status = 'running'", [pid])
    # The next run writes it down and, succeeding, leaves nothing newer than itself.
    conn.execute("UPDATE h.ward SET age = age + 1 WHERE id < 10")
    assert cli_json(dsn, "refresh", "ward")[0] == 0
    assert conn.execute(
        "SELECT count(*) FROM dbanon.run WHERE status = 'abandoned'"
    ).fetchone()[0] == 1
    assert cli_json(dsn, "report", "ward")[1]["last_failure"] is None
