"""The catalog of releases as a DBA reads it: `releases`, `report` (the run in place and any
newer refused or failed one) and `drop`."""

from __future__ import annotations

from typing import Any

import psycopg

from dbanon.db import catalog, store
from dbanon.errors import DbanonError, quote_name
from dbanon.lifecycle import runs
from dbanon.lifecycle import swap as swap_
from dbanon.lifecycle.catalogue import drop_schema_if_ours, load_spec, missing, owned, release_row
from dbanon.lifecycle.counts import COMMON_FIGURES, GROUP_FIGURES, counted
from dbanon.methods import perturbed
from dbanon.models.specs import from_specs
from dbanon.setlogic import composition

# Runs that ended without replacing the release; the one in place is the latest success's.
UNSUCCESSFUL = ("refused", "failed", "abandoned")


def _latest_success(conn: psycopg.Connection, release_id: int) -> tuple[Any, ...] | None:
    """(metrics, timings, finished_at, source_rows, fingerprint, released_rows) of the run whose
    release is in place: the latest that succeeded."""
    return conn.execute(
        """SELECT metrics, timings, finished_at, source_rows, source_fingerprint, released_rows
           FROM dbanon.run WHERE release_id = %s AND status = 'succeeded'
           ORDER BY finished_at DESC, id DESC LIMIT 1""",
        [release_id],
    ).fetchone()


def _latest_unsuccessful(
    conn: psycopg.Connection, release_id: int, since: Any
) -> dict[str, Any] | None:
    """The latest refused, failed or abandoned run when it ended after `since` (the latest
    success; None: any), as {status, at, error}: what `report` and `releases` must not hide.
    A run still `running` whose backend is gone was killed: abandoned, though only the next run
    of the release writes it down so."""
    row = conn.execute(
        """SELECT CASE WHEN status = 'running' THEN 'abandoned' ELSE status END,
                  coalesce(finished_at, started_at) AS at,
                  CASE WHEN status = 'running' THEN %s ELSE error END
           FROM dbanon.run
           WHERE release_id = %s
             AND (status = ANY(%s) AND finished_at IS NOT NULL
                  OR status = 'running'
                     AND (pid IS NULL OR pid NOT IN (SELECT pid FROM pg_stat_activity)))
             AND (%s::timestamptz IS NULL OR coalesce(finished_at, started_at) > %s::timestamptz)
           ORDER BY at DESC, id DESC LIMIT 1""",
        [runs.KILLED, release_id, list(UNSUCCESSFUL), since, since],
    ).fetchone()
    if row is None:
        return None
    return {"status": row[0], "at": row[1].isoformat(), "error": row[2]}


def not_replaced(failure: dict[str, Any], published: Any, rows: int | None) -> str:
    """A run newer than the release in place, and that release, in one line."""
    kept = (
        f"the release published at {published.isoformat()} ({rows if rows is not None else '?'} "
        "rows) is still in place"
        if published is not None
        else "no run of it has succeeded"
    )
    return f"latest run {failure['status']} at {failure['at']}: {failure['error']}; {kept}"


# Run metrics `report` shows at its top level, not among the method's own.
SHOWN_APART = (*COMMON_FIGURES, "warnings", "released_classes", "max_class_size",
               "avg_class_size", *GROUP_FIGURES)  # fmt: skip


def report(conn: psycopg.Connection, name: str) -> dict[str, Any]:
    """One shape for every method: the common figures of the run whose release is in place (the
    latest success) at the top, the method's own under `method_metrics`; the latest refused,
    failed or abandoned run when newer (`last_failure`, and a warning); missing objects."""
    spec = load_spec(conn, name)
    release_id, schema, objects = conn.execute(
        "SELECT id, target_schema, objects FROM dbanon.release WHERE name = %s", [name]
    ).fetchone()
    ok = _latest_success(conn, release_id)
    metrics, timings, finished, source_rows, fp, _ = ok or ({}, {}, None, None, None, None)
    failure = _latest_unsuccessful(conn, release_id, finished)
    gone = missing(conn, schema, objects)
    if failure:  # what did not replace the release in place, in words
        failure["message"] = not_replaced(failure, finished, metrics.get("rows"))
    return {
        "release": name,
        "method": spec.method,
        "models": [m.name for m in from_specs(spec.models)],
        "source": spec.source,
        "table": catalog.qualified(schema, objects[0]) if objects else None,
        "objects": [catalog.qualified(schema, o) for o in objects],
        "options": spec.options,
        "grants": spec.grants,
        **{f: metrics.get(f) for f in COMMON_FIGURES},
        "source_rows": source_rows,
        "published_at": finished.isoformat() if finished else None,
        "source_fingerprint": fp,
        "timings": timings,
        **counted(metrics),
        "method_metrics": {k: v for k, v in metrics.items() if k not in SHOWN_APART},
        "last_failure": failure,
        **_budget(conn, spec.source, metrics),
        "warnings": [f"released relation {m} is missing" for m in gone]
        + list(metrics.get("warnings", [])),
    }


def _budget(conn: psycopg.Connection, source: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """A differentially private release (its run spent from the source's budget): the source's
    budget now, spent and left, by every release of it (dbanon.lifecycle.budget)."""
    from dbanon.lifecycle.budget import status

    if "budget" not in metrics:
        return {}
    found = catalog.find_relation(conn, source)
    return {"budget": status(conn, found) if found is not None else None}


def releases(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Every release with its method, models, objects, latest run, the rows of the release in
    place (its latest success) and, as in `report`, a newer refused or failed run."""
    catalog.require_catalog(conn)
    rows = conn.execute(
        """SELECT r.id, r.name, r.spec, r.target_schema, r.objects, u.status, u.finished_at,
                  ok.finished_at, ok.released_rows
           FROM dbanon.release r
           LEFT JOIN LATERAL (
               SELECT status, finished_at FROM dbanon.run
               WHERE release_id = r.id ORDER BY started_at DESC, id DESC LIMIT 1) u ON true
           LEFT JOIN LATERAL (
               SELECT finished_at, released_rows FROM dbanon.run
               WHERE release_id = r.id AND status = 'succeeded'
               ORDER BY finished_at DESC, id DESC LIMIT 1) ok ON true
           ORDER BY r.name"""
    ).fetchall()
    out = []
    for release_id, name, spec, schema, objects, status, at, published, released in rows:
        failure = _latest_unsuccessful(conn, release_id, published)
        if failure:
            failure["message"] = not_replaced(failure, published, released)
        out.append({
            "name": name,
            "method": spec.get("method"),
            "models": [m.name for m in from_specs(spec.get("models", []))],
            "objects": [catalog.qualified(schema, o) for o in objects],
            "last_status": status,
            "last_run_at": at.isoformat() if at else None,
            "rows": released,
            "published_at": published.isoformat() if published else None,
            "last_failure": failure,
            "missing": missing(conn, schema, objects),
        })  # fmt: skip
    return out


def drop(conn: psycopg.Connection, name: str, wait: float = 0.0) -> list[str]:
    """Drop a release's relations (those that are still its own) and its catalog entry, under
    the release's run lock (a run in progress: runs.Busy, or wait up to `wait` seconds)."""
    catalog.require_catalog(conn)
    conn.rollback()
    try:
        if runs.lock_release(conn, name, wait) is None:
            raise DbanonError(f"release {quote_name(name)} does not exist (see `dbanon releases`)")
        row = release_row(conn, name)
        assert row is not None  # locked above
        release_id, _, schema, objects = row
        dropped = []
        for obj in objects:
            mine = owned(conn, name, schema, obj)
            if mine is False:
                raise DbanonError(
                    f"{catalog.qualified(schema, obj)} is not the relation release "
                    f"{quote_name(name)} published; dbanon will not drop it"
                )
            rel = store.find(conn, schema, obj)
            if mine and rel is not None:
                swap_.drop(conn, rel, f"dropped with release {quote_name(name)}")
                dropped.append(catalog.qualified(schema, obj))
        composition.forget(conn, release_id)
        composition.drop_fresh(conn, release_id)  # a next map a killed run left
        perturbed.forget(conn, release_id)
        conn.execute("DELETE FROM dbanon.release WHERE name = %s", [name])
        if drop_schema_if_ours(conn, schema):  # the empty schema dbanon made for it
            dropped.append(f"schema {catalog.quote_ident(schema)}")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return dropped
