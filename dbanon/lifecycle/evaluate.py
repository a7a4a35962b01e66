"""`dbanon evaluate RELEASE`: query error of any table-shaped release, with DM and exposure.

Query error needs the source's exact answers, so it is computed here against the source as it
is now (a release refreshed since its source changed is compared with the new source). DM reads
the release alone. Exposure needs the source as it was published, so it is the figure recorded
by the run (dbanon.metrics.exposure.at_publish), or None where the run recorded none.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from dbanon import methods
from dbanon.db import catalog
from dbanon.db.catalog import CATEGORICAL
from dbanon.errors import DbanonError, quote_name
from dbanon.metrics import queries
from dbanon.metrics.boxes import source_points
from dbanon.metrics.exposure import discernibility, metric_attributes, shape_of


def evaluate(conn: psycopg.Connection, name: str, n: int = 1000, seed: int = 0) -> dict[str, Any]:
    from dbanon.lifecycle.catalogue import load_spec, missing
    from dbanon.lifecycle.releases import report

    spec = load_spec(conn, name)
    schema, objects = conn.execute(
        "SELECT target_schema, objects FROM dbanon.release WHERE name = %s", [name]
    ).fetchone()
    missing = missing(conn, schema, list(objects))
    if missing:  # a run's warnings (a sensitive column unique per row) do not stop a measure
        raise DbanonError(f"release {quote_name(name)}: released relation {missing[0]} is missing")
    if len(spec.sensitive) != 1:
        raise DbanonError(f"release {quote_name(name)} needs exactly one sensitive column to be "
            "evaluated")
    shape = shape_of(methods.get(spec.method))
    source = catalog.relation(conn, spec.source)
    cols = catalog.columns(conn, source)
    qi = catalog.require_columns(cols, source, spec.qi)
    pinned = conn.execute(  # the versions the release was verified with (a replace may be newer)
        "SELECT hierarchy_versions FROM dbanon.release WHERE name = %s", [name]
    ).fetchone()[0]
    hierarchies = {
        c: catalog.load_hierarchy(conn, h, pinned.get(h)) for c, h in spec.hierarchies.items()
    }
    cats = [c.kind == CATEGORICAL or c.name in hierarchies for c in qi]
    attrs = metric_attributes(conn, source.ident, qi, cats, hierarchies)
    if attrs is None:
        raise DbanonError(f"release {quote_name(name)} has a date quasi-identifier: query error "
            "reads none")
    rels = [sql.Identifier(schema, o) for o in objects]
    pub = queries.Published(shape, rels, spec.qi, spec.sensitive[0])
    release = queries.load(conn, pub, attrs)
    src = source_points(conn, source.ident, attrs, spec.sensitive[0])
    work = queries.workload(attrs, src, spec.sensitive[0], n, seed)
    result = queries.query_error(release, attrs, work, spec.sensitive[0])
    recorded = report(conn, name)["method_metrics"]
    conn.rollback()
    return {
        "release": name,
        "shape": shape,
        "rows": release.n,
        **result,
        "seed": seed,
        "dm": discernibility(conn, rels[0], spec.qi),
        "exposure": recorded.get("exposure"),
        "exposure_max": recorded.get("exposure_max"),
    }
