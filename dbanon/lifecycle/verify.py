"""Step 3 of a publish: every check the method names runs on the built relations before anything
is visible (a failure rolls the run back); and the same checks on a published release as it is
now (`dbanon check NAME --release`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import psycopg

from dbanon.errors import DbanonError, first_line, quote_name
from dbanon.lifecycle import identifying
from dbanon.lifecycle.catalogue import load_spec, missing, release_row
from dbanon.lifecycle.resolve import resolve
from dbanon.methods.base import Built, Resolved, failed


def verify(
    conn: psycopg.Connection, r: Resolved, built: list[Built],
    counted: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Run every check the method names on the built relations; the first failure aborts.
    `counted`: the sensitive columns' unique shares the build counted (identifying.gate)."""
    figures: dict[str, Any] = {}
    checks = r.method.checks(r, built)
    if not checks:
        raise DbanonError(f"method {r.method.name} names no check of its release")
    for check in checks:
        result = check.run(conn)
        if not result.holds:
            raise failed(r.spec.name, check, result)
        figures.update(result.figures)
    figures.update(identifying.gate(conn, r, built, counted=counted))  # no --keep column
    # singles people out
    return figures


def recheck(conn: psycopg.Connection, name: str) -> list[Any]:
    """Run a published release's own checks (what the gate ran before it became visible) on its
    relations as they are now; `dbanon check NAME --release`. Changes nothing."""
    spec = load_spec(conn, name)
    row = release_row(conn, name)
    assert row is not None  # load_spec found it
    _, _, schema, objects = row
    try:
        r = replace(resolve(conn, spec, replace=True), target_schema=schema,
                    build_schema=schema, objects=objects)
        gone = missing(conn, schema, objects)
        if gone:
            raise DbanonError(f"release {quote_name(name)}: released relation {gone[0]} is missing")
        built = [Built(o, o) for o in objects]
        r.method.rechecking(conn, r, built)  # what else the checks read (a view's snapshot)
        kept = identifying.recheck(conn, r, built)  # --keep columns, measured as they are now
        return [_run_check(conn, c) for c in r.method.checks(r, built)] + ([kept] if kept else [])
    finally:
        conn.rollback()


def _run_check(conn: psycopg.Connection, check: Any) -> Any:
    """A check's result; one that refuses by raising (Anatomy's QIT/ST) is a failed result."""
    from dbanon.errors import ModelViolation
    from dbanon.models.base import CheckResult

    try:
        return check.run(conn)
    except ModelViolation as e:
        return CheckResult(check.name, False, {}, first_line(e))
