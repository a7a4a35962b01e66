"""Which version of each hierarchy a release was verified with, so that nothing changes under it.

A run records, in its metrics and in `dbanon.release.hierarchy_versions`, the version (content
hash, dbanon.core.hierarchy.Hierarchy.version) of every hierarchy it used: the QIs' and the (θ,k)
model's sensitive one. Those versions are pinned: `hierarchy import --replace --force` retires
the current version instead of deleting it (dbanon.db.catalog.store_hierarchy), a live view reads
its hierarchy by name and version (the full-domain SQL of dbanon.setlogic), and a retired
version is deleted once no release pins it. The next refresh of a release takes the current
version and pins it; `refresh --due` does not skip a release whose pinned versions are no longer
current, even on an unchanged source.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import psycopg

from dbanon.db import catalog
from dbanon.errors import DbanonError, quote_name

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved


def used(conn: psycopg.Connection, r: Resolved) -> dict[str, str]:
    """name -> version of every hierarchy this run reads: the QIs' as loaded for it, and any a
    promised model names (read from the catalog in the run's snapshot).

    The rows are share-locked until the run commits, so a replace cannot retire and delete a
    version between this run's snapshot and its pin: one that did already makes this fail (a
    serialisation failure of the run's repeatable read), one that comes later waits and then
    sees the pin."""
    versions = {h.name: h.version for h in r.hierarchies.values()}
    for m in r.spec.models:
        name = m.get("hierarchy")
        if name and name not in versions:
            version = catalog.hierarchy_version(conn, name)
            if version is not None:
                versions[name] = version
    for name, version in sorted(versions.items()):
        try:
            with conn.transaction():
                conn.execute(
                    "SELECT FROM dbanon.hierarchy WHERE name = %s AND version = %s FOR SHARE",
                    [name, version],
                )
        except psycopg.errors.SerializationFailure:
            raise DbanonError(
                f"hierarchy {quote_name(name)} was replaced while this run used it; nothing was "
                "published: run it again to use the new version"
            ) from None
    return dict(sorted(versions.items()))


def pin(conn: psycopg.Connection, release_id: int, versions: dict[str, str]) -> None:
    """Record the versions a release was verified with (in the run's transaction), and delete
    the retired versions nobody pins any more."""
    conn.execute(
        "UPDATE dbanon.release SET hierarchy_versions = %s::jsonb WHERE id = %s",
        [json.dumps(versions), release_id],
    )
    catalog.collect_hierarchies(conn)


def stale(conn: psycopg.Connection, name: str) -> list[str]:
    """The hierarchies release `name` pins at a version that is no longer current."""
    rows = conn.execute(
        """SELECT p.key FROM dbanon.release r, jsonb_each_text(r.hierarchy_versions) p
           WHERE r.name = %s AND NOT EXISTS (
               SELECT FROM dbanon.hierarchy h
               WHERE h.name = p.key AND h.version = p.value AND h.retired_at IS NULL)
           ORDER BY p.key""",
        [name],
    ).fetchall()
    return [r[0] for r in rows]
