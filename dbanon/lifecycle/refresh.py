"""A refresh: the stored spec published again against the source as it is now."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from dbanon.lifecycle.catalogue import load_spec
from dbanon.lifecycle.publish import PublishResult, publish
from dbanon.lifecycle.resolve import Progress


def refresh(
    conn: psycopg.Connection,
    name: str,
    progress: Progress | None = None,
    *,
    wait: float = 0.0,
    regroup: bool = False,
    allow_composition: bool = False,
    skip_if: Callable[[psycopg.Connection], str | None] | None = None,
) -> PublishResult:
    """Rebuild a release from its stored spec against the source as it is now (`skip_if`: see
    publish)."""
    spec = load_spec(conn, name)
    conn.rollback()
    return publish(
        conn, spec, progress, replace=True, wait=wait, regroup=regroup,
        allow_composition=allow_composition, existing=True, skip_if=skip_if,
    )  # fmt: skip
