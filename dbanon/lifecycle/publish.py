"""The publish of a release: one REPEATABLE READ transaction that resolves the spec (resolve),
builds the relations aside (the method), verifies them (verify), measures what intersecting
this release with the earlier ones leaves (composition), swaps them in (swap) and records the
run. On any error the database is left as it was; the previous release stays until the new one
is proven. It names no method (dbanon.methods)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from dbanon import methods
from dbanon.core.hierarchy import HierarchyError
from dbanon.core.spec import ReleaseSpec
from dbanon.db import catalog, store
from dbanon.db.aside import Aside
from dbanon.db.catalog import STORE_SCHEMA
from dbanon.db.settings import analyze_stage
from dbanon.errors import DbanonError, first_line, quote_ident, quote_name
from dbanon.lifecycle import budget, hierarchy_pins, identifying, interrupts, runs
from dbanon.lifecycle.catalogue import mark_schema, release_row, store_spec
from dbanon.lifecycle.counts import released_classes
from dbanon.lifecycle.resolve import (
    Progress,
    fingerprint,
    refuse_existing,
    resolve,
    resolve_models,
    resolve_options,
)
from dbanon.lifecycle.swap import swap_patiently
from dbanon.lifecycle.verify import verify
from dbanon.methods.base import BuildContext, Resolved
from dbanon.metrics.risk import at_publish as risk_at_publish
from dbanon.models import sizes
from dbanon.setlogic import composition
from dbanon.setlogic.beside import Beside, Mapped, guard


@dataclass(frozen=True)
class PublishResult:
    release: str
    table: str  # the first released relation
    rows: int
    classes: int | None  # None: a release without equivalence classes (perturbed values)
    min_class_size: int | None
    gcp: float | None
    seconds: float
    metrics: dict[str, Any]
    timings: dict[str, float]
    objects: list[str] = field(default_factory=list)
    grants: dict[str, list[str]] = field(default_factory=dict)  # kept, added, revoked
    source_rows: int | None = None  # the source's rows the run read
    reported: dict[str, Any] = field(default_factory=dict)  # the method's own (Method.reported)

    @property
    def suppressed_rows(self) -> int | None:
        """Source rows the release leaves out (classes suppressed, rows withheld): the
        source's rows less the first relation's, each of which stands for one source row."""
        return None if self.source_rows is None else max(self.source_rows - self.rows, 0)

    def summary(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "table": self.table,
            "objects": self.objects,
            "rows": self.rows,
            "source_rows": self.source_rows,
            "suppressed_rows": self.suppressed_rows,
            "classes": self.classes,
            "min_class_size": self.min_class_size,
            "gcp": self.gcp,
            "seconds": self.seconds,
            "grants": self.grants,
            "warnings": self.metrics.get("warnings", []),
            **self.reported,
        }


def publish(
    conn: psycopg.Connection,
    spec: ReleaseSpec,
    progress: Progress | None = None,
    *,
    replace: bool = False,
    revoke: Sequence[str] = (),
    wait: float = 0.0,
    regroup: bool = False,
    allow_composition: bool = False,
    existing: bool = False,
    grant_live: bool = False,
    skip_if: Callable[[psycopg.Connection], str | None] | None = None,
) -> PublishResult:
    """Build, verify and swap in a release; on any error the database is left as it was.
    `skip_if`: asked under the run's lock; a fingerprint it returns records the run `skipped`
    and raises Unchanged (refresh --due: the source has not changed since the latest success).
    `existing`: a refresh, which must not publish anew a release dropped meanwhile.

    A release name that exists is refused unless `replace` (refresh rebuilds one as it is);
    the roles it was granted to keep reading it unless named in `revoke`. One run at a time per
    release: another run's lock is waited for up to `wait` seconds, then runs.Busy."""
    from dbanon.algorithms import warmup  # numba: loaded by publishes only

    known = methods.methods().get(spec.method)  # an unknown one is refused below
    if known is None or known.compiled(spec.options):
        warmup.start()  # numba's set-up, while this thread waits on the server
    catalog.require_catalog(conn)
    if not replace:
        refuse_existing(conn, spec.name)  # before any run is logged against that release
        interrupts.first_publish(spec.name)  # an interrupt leaves no release, and says so
    method = methods.get(spec.method)  # options and models out of range: refused before too
    resolve_options(spec, method)
    resolve_models(spec, method)
    conn.rollback()
    run_id = runs.start(conn, spec.name)
    isolation = conn.isolation_level
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    try:
        # The lock is the transaction's first statement: its snapshot follows the previous run.
        try:
            locked = runs.lock_release(conn, spec.name, wait)
        except runs.Busy:
            runs.discard(conn, run_id)
            raise
        if locked is None and existing:
            raise DbanonError(f"release {quote_name(spec.name)} does not exist (it was dropped)")
        # The run's scans start at the table's first page, not where another session's scan
        # of a large table has got to (synchronized scans): what a method reads in the order
        # the rows come in then depends on the source, not on who else reads it.
        conn.execute("SELECT set_config('synchronize_seqscans', 'off', true)")
        fp = skip_if(conn) if skip_if is not None and locked is not None else None
        if fp is not None:  # decided under the lock: another run cannot have changed it since
            runs.finish(conn, run_id, locked, "skipped", fingerprint=fp)
            conn.commit()
            raise Unchanged(spec.name)
        try:
            return _publish(
                conn, spec, progress, replace, revoke, run_id, regroup, allow_composition, wait,
                grant_live,
            )  # fmt: skip
        except BaseException as e:
            conn.rollback()
            if getattr(e, "invalid_spec", False) and not existing:
                # A spec the caller gave, refused by resolve before anything was built: bad
                # input, which changes nothing, not even the runs (the release in place, if
                # any, is as healthy as before). A refresh's stored spec that no longer
                # resolves is a failed run: the release cannot be kept up to date.
                runs.discard(conn, run_id)
            else:
                refused = isinstance(e, Refused | budget.OverBudget)
                runs.fail(conn, run_id, "refused" if refused else "failed",
                          interrupts.explain(e, first_line(e)))  # fmt: skip
            raise
    finally:
        conn.rollback()
        conn.isolation_level = isolation


def _publish(
    conn: psycopg.Connection,
    spec: ReleaseSpec,
    progress: Progress | None,
    replace: bool,
    revoke: Sequence[str],
    run_id: int | None,
    regroup: bool,
    allow_composition: bool,
    wait: float = 0.0,
    grant_live: bool = False,
) -> PublishResult:
    """The run itself: one REPEATABLE READ transaction (opened by the caller's lock), so the
    released rows, the row counts and the source fingerprint all come from one snapshot of the
    source. Everything that can be done before the swap is: readers of the previous release
    wait only for the swap's drops and renames, the run's record and its commit."""
    say = interrupts.checkpoints(progress)  # a signal stops the run between phases too
    started = time.perf_counter()
    timings: dict[str, float] = {}
    mark = [started]
    aside: Aside[tuple[str, dict[str, Any]]] | None = None
    beside: Beside | None = None  # the map, written on a second backend during the checks

    def lap(name: str) -> None:
        now = time.perf_counter()
        timings[name] = round(now - mark[0], 4)
        mark[0] = now

    try:
        say("validating the spec against the database")
        try:
            r = resolve(conn, spec, replace=replace, revoke=revoke, regroup=regroup, say=say)
        except (DbanonError, HierarchyError) as e:
            e.invalid_spec = True  # type: ignore[attr-defined]  # see publish()
            raise
        cost = r.method.privacy_cost(r)
        if cost is not None:  # refused before anything is built: the release in place stays
            budget.charge(conn, r.source, cost)
        release_id = r.release_id
        if release_id is None:  # a first publish: its catalog row, inserted now, is its lock
            interrupts.first_publish(spec.name)
            release_id = runs.claim(conn, spec.name, lambda: store_spec(conn, r), wait)
        rekeyed = carry_map(conn, r, allow_composition) if r.new_source else None
        # The fingerprint (and the figures a release shares with its source) are recorded at
        # the end but read from this snapshot: counted beside the build, on a second backend.
        of_source = r.method.source_figures(r)
        aside = Aside(conn, lambda c: (fingerprint(c, r.source), of_source(c) if of_source else {}))
        lap("validate")
        if not _schema_exists(conn, r.target_schema):
            _create_schema(conn, r.target_schema)
        ctx = BuildContext(say, lap, {o: _build_name(conn) for o in r.objects})
        as_view = r.options.get("as") == "view"  # known before the build, for most methods
        _refuse_live(r, r.objects if as_view else [], grant_live)
        metrics = r.method.build(conn, r, ctx)
        built = ctx.built
        _refuse_live(r, [b.name for b in built if b.kind == "view"], grant_live)
        if sorted(b.name for b in built) != sorted(r.objects):
            raise DbanonError(f"method {r.method.name} built {built}, not {r.objects}")
        # Statistics before the checks' GROUP BYs (row counts and rough distinct counts size
        # their hashes), from a small sample: the default's 30,000 rows took 0.2 s of a
        # million-row publish, 3,000 take 0.02 s. Autovacuum analyzes the committed table
        # again at the server's own target within its naptime, for the consumers' plans.
        for b in built:
            if b.kind == "table":
                analyze_stage(conn, r.stored(b))
        if ctx.mapped is not None:  # its rows are the build's arrays: written meanwhile
            beside = Beside(conn, release_id, ctx.mapped)
        say("verifying the release")
        from dbanon.metrics.exposure import at_publish  # numba: loaded by publishes only
        with sizes.shared(conn):  # the release's class sizes, counted once for all three
            checked = verify(conn, r, built, ctx.unique_shares)
            if ctx.classes is not None:  # counted by the build: the figures read it, not a check
                sizes.remember(conn, r.method.checked_relation(r, built),
                               [c.name for c in r.qi], ctx.classes)  # fmt: skip
            figures = r.method.figures(conn, r, built, checked) | risk_at_publish(conn, r, built)
        lap("verify")
        source_fingerprint, counted = aside.result()
        if "dm" in metrics:  # counted by the build from the rows it read
            counted = {**counted, "dm": metrics["dm"]}
        # A gate that measured exposure already (a source-aware check) is not measured twice.
        measured = (
            {k: v for k, v in checked.items() if k == "dm" or k.startswith("exposure")}
            if "exposure" in checked
            else at_publish(conn, r, built, checked.get("dm"), counted)
        )
        if measured:
            lap("exposure")
        grouped = ctx.mapped if ctx.mapped is not None else new_rows(conn, r)
        composed = compose(conn, r, grouped, allow_composition)
        say("keeping the group map")
        if beside is not None:
            beside.finish(conn)
        else:
            keep_map(conn, grouped, release_id)
        r.method.recorded(conn, r, release_id)
        pinned = hierarchy_pins.used(conn, r)  # the hierarchy versions this run was verified with
        lap("keep")
        say("swapping the release in")
        waited = swap_patiently(conn, r, built)
        lap("swap")
        seconds = round(time.perf_counter() - started, 3)
        metrics = {"seed": r.seed, **metrics, **figures, **measured,
                   **identifying.recorded(checked), "seconds": seconds,
                   "released_classes": released_classes(figures)}  # fmt: skip
        metrics.pop("max_class_size", None)  # kept under released_classes only
        if waited:
            metrics["swap_waited_seconds"] = waited
        metrics.setdefault("gcp", None)
        if composed is not None:
            metrics["composition"] = composed.as_dict()
        if rekeyed is not None:
            metrics["map_rekeyed"] = rekeyed
        if allow_composition:
            metrics["allow_composition"] = True  # the override is on the record
        if pinned:
            metrics["hierarchies"] = pinned
        if cost is not None:
            budget.spend(conn, r.source, spec.name, run_id, cost)
            metrics["budget"] = budget.status(conn, r.source)
        say("recording the run")
        record(conn, r, metrics, timings, source_fingerprint, run_id)
        hierarchy_pins.pin(conn, release_id, pinned)  # last: it may delete shared rows
        with interrupts.committing(spec.name):  # a signal now is held, not cut into the commit
            conn.commit()
    except BaseException:
        if aside is not None:
            aside.close()
        conn.rollback()
        if beside is not None:  # after the rollback: the run's locks on what it wrote gone
            beside.abandon(conn)
        raise
    return PublishResult(
        release=spec.name,
        table=catalog.qualified(r.target_schema, r.objects[0]),
        rows=figures["rows"],
        classes=figures["classes"],
        min_class_size=figures["min_class_size"],
        gcp=metrics["gcp"],
        seconds=seconds,
        metrics=metrics,
        timings=timings,
        objects=[catalog.qualified(r.target_schema, o) for o in r.objects],
        grants=r.grant_changes,
        source_rows=r.rows,
        reported={k: metrics[k] for k in r.method.reported if k in metrics},
    )


def _refuse_live(r: Resolved, views: list[str], allowed: bool) -> None:
    """A live view goes to a role it was not granted to before only if allowed."""
    from dbanon.lifecycle.grants import refuse_live

    names = [catalog.qualified(r.target_schema, v) for v in views]
    refuse_live(r.spec.name, names, r.grant_changes["added"], allowed)


class Unchanged(Exception):  # noqa: N818 - an outcome, not an error
    """A refresh found its source unchanged since the latest success: recorded `skipped`."""


class Refused(DbanonError):
    """The run would let a consumer who keeps earlier releases break the promise: exit 4."""

    exit_code = 4


def new_rows(conn: psycopg.Connection, r: Resolved) -> composition.Rows | None:
    """This run's rows with their groups, for methods whose groups persist (else None)."""
    stage = r.method.group_map(r)
    if stage is None:
        return None
    sens = r.sensitive[0] if r.sensitive else None
    return composition.new_rows(conn, r.source, r.key, sens, stage, r.released_columns)


Rows = composition.Rows | Mapped  # a run's rows: staged in SQL, or as arrays


def _guard(rows: Rows) -> Any:
    """The module that measures and stores these rows: in SQL, or from arrays."""
    return composition if isinstance(rows, composition.Rows) else guard(rows)


def compose(
    conn: psycopg.Connection, r: Resolved, rows: Rows | None, allow: bool
) -> composition.Composition | None:
    """Measure what intersecting this release with the earlier ones leaves a persisting row;
    refuse the run when that breaks the promised k, l (p) or spread ((θ,k)'s categories),
    unless allowed."""
    if rows is None or r.release_id is None:
        return None
    needed = composition.values_needed(r.models)
    guard = _guard(rows)
    spread = None if rows.measured else composition.spread_of(
        conn, r.models, lambda: guard.released_tags(conn, rows)
    )
    found = guard.measure(conn, r.release_id, rows, r.k or 1, needed, spread)
    if found is None or allow or not (
        found.rows_below_k or found.rows_below_l or found.rows_below_categories
    ):
        return found
    problems = []
    if found.rows_below_k:
        problems.append(
            f"{found.rows_below_k} of {found.persisting} persisting rows to fewer than k={r.k} "
            f"plausible rows (as few as {found.min_plausible_rows})"
        )
    if found.rows_below_l:
        problems.append(
            f"{found.rows_below_l} persisting rows to fewer than {needed} plausible sensitive "
            f"values (as few as {found.min_plausible_values})"
        )
    if found.rows_below_categories and spread is not None:
        problems.append(
            f"{found.rows_below_categories} persisting rows to plausible values that fill fewer "
            f"than {spread.what} (as few as {found.min_plausible_categories})"
        )
    if r.regroup or r.options.get("refresh_policy") == "regroup":
        advice = "refresh with the persist policy, which merges groups until the promise holds"
    else:  # persisting groups were merged as far as merging helps (dbanon.algorithms.persist)
        advice = (
            "no merge of groups can fix it: too few rows of the whole table still hold the "
            "values those rows had in every earlier release"
        )
    raise Refused(
        f"release {quote_name(r.spec.name)}: a consumer who keeps the earlier releases could "
        f"narrow {' and '.join(problems)}; the previous release is kept ({advice}; "
        "--allow-composition publishes anyway, recorded in the run)"
    )


def carry_map(
    conn: psycopg.Connection, r: Resolved, allow: bool
) -> dict[str, int | str] | None:
    """A release redefined on another source or key keeps its map: its entries go to the new
    key, people found by the old key column's values or by their rows' content (docs/
    composition.md). When neither tells them, the run is refused unless allowed (the map then
    starts over, and the run says so)."""
    if r.release_id is None or not composition.has_map(conn, r.release_id):
        return None
    row = release_row(conn, r.spec.name)
    assert row is not None  # the release exists: it has a map
    old_source_name, old_key = row[1]["source"], row[1]["key"]
    old_source = catalog.find_relation(conn, old_source_name)
    how = composition.translation(
        conn, old_source, old_key, r.source, r.key, catalog.columns(conn, r.source),
        catalog.columns(conn, old_source) if old_source is not None else None,
    )  # fmt: skip
    if how is not None:
        done = composition.rekey(conn, r.release_id, how)
        return done.as_dict() if done else None
    if not allow:
        raise Refused(
            f"release {quote_name(r.spec.name)}: cannot tell which rows of {r.source} are the "
            "people its "
            f"earlier releases showed (the old key {quote_ident(old_key)} of {old_source_name} is "
            "no unique column of it, and the old source is gone or shares no column with it); "
            "consumers who keep them could narrow people unmeasured; the previous release is "
            "kept (--allow-composition to start the measure over)"
        )
    composition.forget(conn, r.release_id)
    return {"by": "none", "kept": 0}


def keep_map(conn: psycopg.Connection, rows: Rows | None, release_id: int) -> None:
    """Store this run's private row-to-group map. A run without groups (another method since
    a --replace) leaves the map as it is: consumers still hold the grouped releases, and a
    later grouping run is measured against them."""
    if rows is not None:
        _guard(rows).store(conn, release_id, rows)


def _create_schema(conn: psycopg.Connection, schema: str) -> None:
    """CREATE SCHEMA, where another run may be creating it too: the second waits for the first
    (on the name's unique index), and a schema that appeared meanwhile is taken as it is."""
    try:
        with conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            mark_schema(conn, schema)  # dbanon's: dropped with its last release when empty
    except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateSchema):
        pass  # created by a run that committed after this one's snapshot


def _schema_exists(conn: psycopg.Connection, schema: str) -> bool:
    return bool(
        conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]).fetchone()
    )


def _build_name(conn: psycopg.Connection) -> str:
    """A name no relation in the store has: dbanon only ever creates, renames or drops what it
    made."""
    while True:
        name = f"dbanon_build_{secrets.token_hex(8)}"
        if store.find(conn, STORE_SCHEMA, name) is None:
            return name


def record(
    conn: psycopg.Connection,
    r: Resolved,
    metrics: dict[str, Any],
    timings: dict[str, float],
    source_fingerprint: str,
    run_id: int | None = None,
) -> int:
    """The spec as run (options and grants resolved, column types as found) and the run."""
    release_id = store_spec(conn, r)
    runs.finish(
        conn, run_id, release_id, "succeeded", source_rows=r.rows, released_rows=metrics["rows"],
        metrics=metrics, timings=timings, fingerprint=source_fingerprint,
    )  # fmt: skip
    return release_id
