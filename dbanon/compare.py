"""`dbanon compare`: how well a perturbed release keeps the source's clusters.

A perturbed release carries no key; each of its rows has a `dbanon_row` id, and the catalog's
private map (dbanon.noise_map_<release id>, never granted) gives that row's source key. Source
and release rows are paired through it, both sides clustered by the same algorithm, clusters
matched by the Hungarian method, and the share of rows in unmatched clusters reported
(dbanon.metrics).
Beside it, linkage (dbanon.metrics.linkage): the share of released rows whose nearest original
is their own, as the latest run recorded it and as measured here on the compared columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.db import catalog
from dbanon.errors import DbanonError, quote_name
from dbanon.methods.perturbed import ROW, map_table
from dbanon.metrics.clustering import ALGORITHMS, cluster, misclassification
from dbanon.metrics.linkage import SAMPLE, Linkage


def paired(
    conn: psycopg.Connection, source: str, release: str, columns: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """The columns of every released row and of its source row, in the same order."""
    catalog.require_catalog(conn)
    row = conn.execute(
        "SELECT id, spec, target_schema, objects FROM dbanon.release WHERE name = %s "
        "OR target_schema || '.' || objects[1] = %s",
        [release, release],
    ).fetchone()
    if row is None:
        raise DbanonError(f"release {quote_name(release)} does not exist (see `dbanon releases`)")
    release_id, spec, schema, objects = row
    src = catalog.relation(conn, source)
    if str(src) != str(catalog.relation(conn, spec["source"])):
        raise DbanonError(f"release {quote_name(release)} was published from {spec['source']}, "
            f"not {src}")
    rel = catalog.relation(conn, f"{schema}.{objects[0]}")
    rel_cols = catalog.columns(conn, rel)
    if ROW not in rel_cols:
        raise DbanonError(f"release {quote_name(release)} is not a perturbed release (no {ROW} "
            "column)")
    catalog.require_columns(rel_cols, rel, list(columns))
    src_cols = catalog.columns(conn, src)
    catalog.require_columns(src_cols, src, list(columns))
    if conn.execute("SELECT to_regclass(%s) IS NULL",
                    [map_table(release_id).as_string(conn)]).fetchone()[0]:  # fmt: skip
        raise DbanonError(f"release {quote_name(release)} has no row map (it was not published "
                          "by a perturbing method)")  # fmt: skip
    key = sql.Identifier(spec["key"])
    pick = [sql.SQL("s.{}::float8").format(sql.Identifier(c)) for c in columns]
    pick += [sql.SQL("r.{}::float8").format(sql.Identifier(c)) for c in columns]
    rows = conn.execute(
        sql.SQL(
            """SELECT {pick} FROM {rel} r
               JOIN {map} m ON m.row_id = r.{row}
               JOIN {src} s ON s.{key}::text = m.key"""
        ).format(
            pick=sql.SQL(", ").join(pick),
            rel=rel.ident,
            map=map_table(release_id),
            row=sql.Identifier(ROW),
            src=src.ident,
            key=key,
        ),  # fmt: skip
    ).fetchall()
    if not rows:
        raise DbanonError(f"no row of release {quote_name(release)} pairs with a row of {src}")
    data = np.array(rows, dtype=np.float64)
    if np.isnan(data).any():
        raise DbanonError("NULL values in the compared columns")
    m = len(columns)
    return data[:, :m], data[:, m:]


def compare(
    conn: psycopg.Connection,
    source: str,
    release: str,
    columns: Sequence[str],
    clusters: int,
    algorithm: str = "kmeans",
    seed: int = 0,
) -> dict[str, Any]:
    """Misclassification of `algorithm` with `clusters` clusters, source vs release."""
    if algorithm not in ALGORITHMS:
        raise DbanonError(f"--algorithm must be one of {', '.join(ALGORITHMS)}")
    if not columns:
        raise DbanonError("name the columns to cluster on (--columns)")
    original, perturbed = paired(conn, source, release, columns)
    if not 2 <= clusters <= len(original):
        raise DbanonError(f"--clusters must be in [2, {len(original)}], got {clusters}")
    a = cluster(original, clusters, algorithm, seed)
    b = cluster(perturbed, clusters, algorithm, seed)
    sec = (perturbed - original).var(0) / original.var(0)
    pick = np.random.default_rng(seed).permutation(len(original))[:SAMPLE]
    keys = [str(i) for i in range(len(original))]
    measure = Linkage([keys[i] for i in pick], perturbed[pick], np.ptp(original, 0))
    for start in range(0, len(original), 20_000):
        measure.add(keys[start : start + 20_000], original[start : start + 20_000])
    recorded = conn.execute(
        """SELECT u.metrics -> 'linkage' FROM dbanon.release r JOIN dbanon.run u
           ON u.release_id = r.id AND u.status = 'succeeded'
           WHERE r.name = %s OR r.target_schema || '.' || r.objects[1] = %s
           ORDER BY u.finished_at DESC LIMIT 1""",
        [release, release],
    ).fetchone()
    return {
        "source": source,
        "release": release,
        "columns": list(columns),
        "clusters": clusters,
        "algorithm": algorithm,
        "rows": len(original),
        "misclassification": float(misclassification(a, b)),
        "sec": {c: float(v) for c, v in zip(columns, sec, strict=True)},
        "linkage": {
            "recorded": None if recorded is None else recorded[0],
            "measured": float(measure.figures()["linkage"]),
            "sample": int(measure.figures()["linkage_sample"]),
        },
        "pairing": "dbanon_row -> key via the release's private map dbanon.noise_map_<id>",
    }
