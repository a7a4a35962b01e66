"""Flags that go stale (issue 19 item 5): once flagged rows are deleted, their flag rows name keys
the source no longer has. A refresh of a local anatomy or LAG release ignores them and counts them
in the run; the release passes the independent checks (tests/verify_local.py) against the source
as it is now. At a first publish such flags are still an error, with true counts."""

from __future__ import annotations

import random

import psycopg
import pytest
import verify_local
from churn import COLUMNS, person
from helpers import cli, cli_json, make_table

QI = ["age", "region", "income"]


def load(conn: psycopg.Connection, n: int = 400, seed: int = 7) -> dict[str, set[int]]:
    """The bank table and flags on age and region of about a third of the rows each."""
    rng = random.Random(seed)
    make_table(conn, "h", "bank", COLUMNS, [person(rng, i) for i in range(1, n + 1)])
    flags = {c: {i for i in range(1, n + 1) if rng.random() < 0.3} for c in ("age", "region")}
    make_table(conn, "h", "flags", [("id", "int"), ("column_name", "text")],
               [(i, c) for c, ids in flags.items() for i in sorted(ids)])  # fmt: skip
    return flags


def source(conn: psycopg.Connection) -> list[dict]:
    cols = [c for c, _ in COLUMNS]
    return [dict(zip(cols, r, strict=True)) for r in conn.execute("SELECT * FROM h.bank")]


@pytest.mark.parametrize(("method", "extra"), [("localanatomy", ()), ("lag", ("--k", "3"))])
def test_refresh_after_deleting_flagged_rows(
    conn: psycopg.Connection, dsn: str, method: str, extra: tuple[str, ...]
) -> None:
    flags = load(conn)
    code, out = cli_json(dsn, "publish", "b", "--source", "h.bank", "--key", "id", "--qi",
                         ",".join(QI), "--sensitive", "dx", "--algorithm", method, "--l", "3",
                         "--flags", "h.flags", *extra)  # fmt: skip
    assert code == 0, out
    gone = sorted(flags["age"])[:20] + sorted(flags["region"] - flags["age"])[:15] + [2, 3]
    stale = conn.execute("SELECT count(*) FROM h.flags WHERE id = ANY(%s)", [gone]).fetchone()[0]
    assert stale >= 35
    conn.execute("DELETE FROM h.bank WHERE id = ANY(%s)", [gone])
    code, out = cli_json(dsn, "refresh", "b")
    assert code == 0, out
    recorded = conn.execute(
        "SELECT metrics ->> 'stale_flags' FROM dbanon.run WHERE status = 'succeeded' "
        "ORDER BY id DESC LIMIT 1"
    ).fetchone()[0]
    assert int(recorded) == stale
    now = source(conn)
    live = {c: ids - set(gone) for c, ids in flags.items()}
    verify_local.verify_release(
        conn, "released", "b", QI, {"age": ("l", 3), "region": ("l", 3), "dx": ("l", 3)}, now,
        {**live, "dx": {r["id"] for r in now}}, k=3 if method == "lag" else None,
    )  # fmt: skip


def test_a_first_publish_names_true_counts_of_unknown_keys(
    conn: psycopg.Connection, dsn: str
) -> None:
    load(conn, n=200)
    conn.execute("INSERT INTO h.flags SELECT i, 'age' FROM generate_series(1001, 1135) i")
    conn.execute("INSERT INTO h.flags SELECT i, 'region' FROM generate_series(1001, 1010) i")
    result = cli(dsn, "publish", "b", "--source", "h.bank", "--key", "id", "--qi", ",".join(QI),
                 "--sensitive", "dx", "--algorithm", "localanatomy", "--l", "3", "--flags",
                 "h.flags")  # fmt: skip
    assert result.exit_code == 2, result.stdout
    assert (
        "flags relation h.flags names 135 keys that h.bank lacks, in 145 flag rows: "
        "'1001', '1002', '1003', '1004', '1005', ... (135 in all)"
    ) in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_flags_keyed_as_text_or_as_the_source_flag_the_same_rows(
    conn: psycopg.Connection, dsn: str
) -> None:
    """A flags relation keyed by the source key's own integer type is joined on the keys as
    they are; one keyed by text, on their text: both flag the same rows of every column."""
    flags = load(conn)
    conn.execute("CREATE TABLE h.flags_text AS SELECT id::text AS id, column_name FROM h.flags")
    for name, rel in (("bi", "h.flags"), ("bt", "h.flags_text")):
        code, out = cli_json(dsn, "publish", name, "--source", "h.bank", "--key", "id", "--qi",
                             ",".join(QI), "--sensitive", "dx", "--algorithm", "localanatomy",
                             "--l", "3", "--flags", rel)  # fmt: skip
        assert code == 0, out
        for col, ids in flags.items():
            got = conn.execute(f"SELECT count(*) FROM released.{name}_{col}_idt").fetchone()[0]
            assert got == len(ids), (name, col)
