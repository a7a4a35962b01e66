"""`dbanon demo`: UCI Adult into demo.adult, the ARX hierarchies, and a k=10 k-member release;
`dbanon demo --dataset hospital`: the generated hospital table into demo.hospital, its disease
and district hierarchies, and a (θ,k) release of it (θ=3, the paper's setting).

The demo imports its hierarchies under names of its own (`demo_adult_education`,
`demo_hospital_disease`, see `hierarchy_name`): a DBA's own `education` hierarchy is never
touched. A hierarchy of the demo's name that exists is kept when it holds what the demo would
import, and refused otherwise: the demo replaces nothing, not even under its own names."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from psycopg import sql

from dbanon.api import Database
from dbanon.core.hierarchy import Hierarchy
from dbanon.data import ADULT_COLUMNS, ADULT_HIERARCHIES, ADULT_NUMERIC, adult_rows, hierarchy_file
from dbanon.data.hospital import (
    HOSPITAL_COLUMNS,
    HOSPITAL_HIERARCHIES,
    HOSPITAL_NUMERIC,
    HOSPITAL_QI,
    hospital_rows,
)
from dbanon.db import catalog
from dbanon.errors import DbanonError, quote_name
from dbanon.lifecycle.declare import release_spec
from dbanon.lifecycle.publish import PublishResult
from dbanon.lifecycle.resolve import Progress

# The k-member paper's setting: occupation is the sensitive attribute.
DEMO_QI = ["age", "education_num", "workclass", "marital_status", "race", "sex", "native_country"]
DEMO_SENSITIVE = ["occupation"]
DEMO_THETA = 3
DATASETS = ("adult", "hospital")


def hierarchy_name(dataset: str, name: str) -> str:
    """The catalog name under which the demo imports the shipped hierarchy `name`."""
    return f"demo_{dataset}_{name}"


def import_hierarchy(db: Database, dataset: str, name: str) -> str:
    """Import the shipped hierarchy `name` as `hierarchy_name(dataset, name)` unless it is there
    already as the demo would import it; returns the catalog name. A hierarchy of that name
    with other content is somebody else's: refused, never replaced."""
    wanted = Hierarchy.from_csv(hierarchy_name(dataset, name), hierarchy_file(name))
    try:
        found = catalog.load_hierarchy(db.conn, wanted.name)
    except DbanonError:
        catalog.store_hierarchy(db.conn, wanted)
        return wanted.name
    if sorted(found.rows()) != sorted(wanted.rows()):
        raise DbanonError(
            f"hierarchy {quote_name(wanted.name)} exists and is not the demo's {quote_name(name)} "
            "hierarchy; the demo replaces nothing: drop or rename it first"
        )
    return wanted.name


def load_table(
    db: Database,
    schema: str,
    table: str,
    columns: Sequence[str],
    numeric: Collection[str],
    rows: Sequence[tuple],
) -> int:
    """(Re)load SCHEMA.TABLE (an `id` identity key, then `columns`) with `rows`. An existing
    table is emptied, not dropped: views and releases over the demo table keep working."""
    conn = db.conn
    rel = sql.Identifier(schema, table)
    cols = sql.SQL(", ").join(
        sql.SQL("{} {}").format(
            sql.Identifier(c), sql.SQL("integer" if c in numeric else "text NOT NULL")
        )
        for c in columns
    )
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    if catalog.find_relation(conn, f"{schema}.{table}") is not None:
        conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY").format(rel))
    else:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id integer PRIMARY KEY GENERATED ALWAYS AS IDENTITY, {})"
            ).format(rel, cols)
        )
    with (
        conn.cursor() as cur,
        cur.copy(
            sql.SQL("COPY {} ({}) FROM STDIN").format(
                rel, sql.SQL(", ").join(map(sql.Identifier, columns))
            )
        ) as copy,
    ):
        for row in rows:
            copy.write_row(row)
    conn.execute(sql.SQL("ANALYZE {}").format(rel))
    conn.commit()
    return len(rows)


def load_adult(db: Database, schema: str = "demo", table: str = "adult") -> int:
    """(Re)load SCHEMA.TABLE with Adult's 45,222 rows."""
    return load_table(db, schema, table, ADULT_COLUMNS, ADULT_NUMERIC, adult_rows())


def prepare(db: Database, progress: Progress | None = None) -> None:
    """The catalog, the ARX hierarchies (as `demo_adult_FILE`) and demo.adult."""
    say = progress or (lambda _msg: None)
    say("installing the catalog")
    db.init()
    for name in sorted(set(ADULT_HIERARCHIES.values())):  # first: a refusal changes nothing
        import_hierarchy(db, "adult", name)
    say("loading UCI Adult into demo.adult")
    load_adult(db)  # commits the hierarchies with the table


def run_demo(db: Database, k: int = 10, progress: Progress | None = None) -> PublishResult:
    prepare(db, progress)
    spec = release_spec(
        "adult_k10" if k == 10 else f"adult_k{k}",
        "demo.adult",
        "id",
        DEMO_QI,
        sensitive=DEMO_SENSITIVE,
        k=k,
        method="kmember",
        hierarchies={
            c: hierarchy_name("adult", ADULT_HIERARCHIES[c])
            for c in DEMO_QI
            if c not in ADULT_NUMERIC
        },
    )
    return db.publish(spec, progress, replace=True)  # the demo's own release: run it again


def load_hospital(db: Database, rows: int, schema: str = "demo", table: str = "hospital") -> int:
    """(Re)load SCHEMA.TABLE with `rows` generated patients."""
    return load_table(
        db, schema, table, HOSPITAL_COLUMNS, HOSPITAL_NUMERIC, hospital_rows(rows)
    )


def prepare_hospital(db: Database, rows: int, progress: Progress | None = None) -> None:
    """The catalog, demo.hospital and its hierarchies (disease, district)."""
    say = progress or (lambda _msg: None)
    say("installing the catalog")
    db.init()
    for name in sorted(set(HOSPITAL_HIERARCHIES.values())):  # first: a refusal changes nothing
        import_hierarchy(db, "hospital", name)
    say(f"generating {rows} patients into demo.hospital")
    load_hospital(db, rows)  # commits the hierarchies with the table


def run_hospital_demo(
    db: Database, rows: int, k: int = 10, progress: Progress | None = None
) -> PublishResult:
    prepare_hospital(db, rows, progress)
    spec = release_spec(
        f"hospital_theta{DEMO_THETA}_k{k}",
        "demo.hospital",
        "id",
        HOSPITAL_QI,
        sensitive=["disease"],
        method="thetak",
        k=k,
        theta=DEMO_THETA,
        sensitive_hierarchies={
            "disease": hierarchy_name("hospital", HOSPITAL_HIERARCHIES["disease"])
        },
        hierarchies={
            c: hierarchy_name("hospital", h)
            for c, h in HOSPITAL_HIERARCHIES.items()
            if c in HOSPITAL_QI
        },
    )
    return db.publish(spec, progress, replace=True)  # the demo's own release: run it again
