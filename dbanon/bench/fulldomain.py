"""`dbanon bench fulldomain`: the lattice search on Adult, and the same setting published end
to end (what a publish adds to its search: issue 23's "no fixed tax" at 30k rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from dbanon.db.catalog import Relation
from dbanon.lifecycle.declare import release_spec
from dbanon.models import (
    DistinctLDiversity,
    KAnonymity,
    PrivacyModel,
)
from dbanon.setlogic.lattice import search

if TYPE_CHECKING:
    from dbanon.api import Database

BENCH_QI = [
    "age",
    "education",
    "marital_status",
    "native_country",
    "occupation",
    "race",
    "income",
    "sex",
    "workclass",
]


BENCH_SENSITIVE = "income"  # with --l: the sensitive attribute, the other 8 columns the QIs


def bench(
    conn: psycopg.Connection,
    rows: int = 30162,
    k: int = 5,
    l: int = 0,  # noqa: E741 - the paper's name
    max_suppression: float = 0.0,
) -> dict[str, Any]:
    """Search Adult's first `rows` rows for k-anonymity with ARX's 9 QIs and hierarchies
    (ARX's Flash: 27-33 ms in memory); with `l`, distinct l-diversity of income too, the
    other 8 QIs (6,480 nodes; ARX's Adult l-diversity setting), every class failing either
    model suppressed within `max_suppression`. Needs demo.adult and the hierarchies (`dbanon
    demo`, i.e. dbanon.demo.run_demo); `seconds` times `search` alone."""
    from dbanon.data import ADULT_HIERARCHIES
    from dbanon.db import catalog
    from dbanon.demo import hierarchy_name

    qis = [c for c in BENCH_QI if not l or c != BENCH_SENSITIVE]
    models: list[PrivacyModel] = [KAnonymity(k)] + ([DistinctLDiversity(l)] if l else [])
    table = sql.Identifier("dbanon_bench_adult")
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    conn.execute(
        sql.SQL("CREATE TEMP TABLE {} AS SELECT {} FROM demo.adult ORDER BY id LIMIT {}").format(
            table, sql.SQL(", ").join(map(sql.Identifier, BENCH_QI)), sql.Literal(rows)
        )
    )
    conn.execute(sql.SQL("ANALYZE {}").format(table))
    try:
        source = Relation("pg_temp", "dbanon_bench_adult")
        cols = catalog.columns(conn, source)
        qi = [cols[c] for c in qis]
        hierarchies = {
            c: catalog.load_hierarchy(conn, hierarchy_name("adult", ADULT_HIERARCHIES[c]))
            for c in qis
        }
        sensitive = BENCH_SENSITIVE if l else None
        result = search(conn, source, qi, hierarchies, models, sensitive, max_suppression)
    finally:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    return {
        "algorithm": "fulldomain",
        "rows": rows,
        "k": k,
        "l": l or None,
        "max_suppression": max_suppression,
        "qi": qis,
        "sensitive": sensitive,
        "server": conn.info.parameter_status("server_version"),
        **result.summary(),
    }


PUBLISHED = "dbanon_bench_fulldomain"  # the release (and, in schema dbanon_bench, its source)


def publish(
    db: Database, rows: int = 30162, k: int = 5, l: int = 0,  # noqa: E741 - the paper's name
    max_suppression: float = 0.0,
) -> dict[str, Any]:
    """The same setting published end to end, as a DBA does (`db.publish`): the run's seconds
    and its phase timings (dbanon.run), so what a publish adds to the search is measured. The
    bench's own table and release are dropped afterwards."""
    from dbanon.data import ADULT_HIERARCHIES
    from dbanon.demo import hierarchy_name

    conn = db.conn
    qis = [c for c in BENCH_QI if not l or c != BENCH_SENSITIVE]
    table = sql.Identifier("dbanon_bench", PUBLISHED)
    conn.execute("CREATE SCHEMA IF NOT EXISTS dbanon_bench")
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    conn.execute(
        sql.SQL("CREATE TABLE {} AS SELECT id, {} FROM demo.adult ORDER BY id LIMIT {}").format(
            table, sql.SQL(", ").join(map(sql.Identifier, BENCH_QI)), sql.Literal(rows)
        )
    )
    conn.commit()
    spec = release_spec(
        PUBLISHED, f"dbanon_bench.{PUBLISHED}", "id", qis,
        sensitive=[BENCH_SENSITIVE] if l else [], k=k, l=l or None, method="fulldomain",
        hierarchies={c: hierarchy_name("adult", ADULT_HIERARCHIES[c]) for c in qis},
        options={"max_suppression": max_suppression}, target=f"dbanon_bench_out.{PUBLISHED}",
    )  # fmt: skip
    try:
        result = db.publish(spec)
        timings = conn.execute(
            """SELECT r.timings FROM dbanon.run r JOIN dbanon.release x ON x.id = r.release_id
               WHERE x.name = %s ORDER BY r.id DESC LIMIT 1""",
            [PUBLISHED],
        ).fetchone()[0]
        conn.rollback()
    finally:
        if conn.execute("SELECT 1 FROM dbanon.release WHERE name = %s", [PUBLISHED]).fetchone():
            conn.rollback()
            db.drop(PUBLISHED)
        conn.rollback()
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
        conn.commit()
    return {"seconds": result.seconds, "timings": timings,
            "beyond_search": round(result.seconds - timings["search"], 3)}  # fmt: skip
