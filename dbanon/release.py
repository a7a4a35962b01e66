"""The publish/refresh lifecycle of a release; it names no method (see dbanon.methods).

1. resolve: the spec checked against the live catalog, the method's own refusals (nothing is
   written before this);
2. build: the method creates its relation(s) aside, under build names nobody else uses;
3. verify: every check the method names (the promised models, at least) runs on the built
   relations; a failure rolls everything back;
4. swap: the release's previous objects (found by release, wherever they are) are dropped, the
   built ones renamed in, grants applied;
5. record: the spec and the run (metrics, timings, source fingerprint) go to the catalog.
All of it is one transaction: the previous release stays until the new one is proven.

The spec (what a DBA declares, stored as JSON) is dbanon.spec; what a method gets to build
from is dbanon.methods.base.Resolved. Both sit below this module and the methods.

Why one module of about 1,000 lines: its parts are the five steps above, and they share one
transaction and its invariants (nothing visible before verify passes; the swap drops only
what this release owns; the record tells the truth about every run). Split by step, each part
would have to re-state those invariants and pass the transaction's state between modules; what
does stand apart already lives below it (the spec, the methods, runs, composition, group maps).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import psycopg
from psycopg import sql

from dbanon import composition, hierarchy_pins, identifying, interrupts, methods, runs
from dbanon import swap as swap_
from dbanon.db import catalog, store
from dbanon.db import source as source_check
from dbanon.db.catalog import STORE_SCHEMA, Column, Relation
from dbanon.errors import SHOWN_OFFENDERS, DbanonError, first_line
from dbanon.hierarchy import Hierarchy
from dbanon.methods.base import BuildContext, Built, Method, Resolved, failed
from dbanon.metrics.risk import at_publish as risk_at_publish
from dbanon.models import PrivacyModel
from dbanon.models.specs import MODEL_KINDS, from_specs, kind_of
from dbanon.spec import ReleaseSpec

DEFAULT_SCHEMA = "released"
# Schemas a release never goes to: the catalog, everybody's, the system's.
RESERVED_SCHEMAS = ("dbanon", STORE_SCHEMA, "public", "information_schema")
# Figures every run reports, whatever the method; the rest of a run's metrics are the method's.
COMMON_FIGURES = ("rows", "classes", "min_class_size", "gcp", "risk", "seconds", "seed")

Progress = Callable[[str], None]


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

    def summary(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "table": self.table,
            "objects": self.objects,
            "rows": self.rows,
            "classes": self.classes,
            "min_class_size": self.min_class_size,
            "gcp": self.gcp,
            "seconds": self.seconds,
            "grants": self.grants,
            "warnings": self.metrics.get("warnings", []),
        }


# --- what a release counts -----------------------------------------------------------------------

# The groups a method formed inside (its build's figures, dbanon.metrics.loss): two groups can be
# released with equal QIs, so they are not the release's classes, and are never named as such.
GROUP_FIGURES = ("groups", "min_group_size", "max_group_size", "avg_group_size")
# What runs recorded before the two were told apart: the groups' largest and average size.
_OLD_GROUP_FIGURES = ("max_class_size", "avg_class_size")


def released_classes(figures: dict[str, Any]) -> dict[str, Any] | None:
    """The release's classes, rows with equal released QIs (a GROUP BY over the released
    relation, Method.figures): count, min, max, avg size; None for a release without classes."""
    count, rows = figures.get("classes"), figures.get("rows")
    if count is None:
        return None
    return {
        "count": count,
        "min_size": figures.get("min_class_size"),
        "max_size": figures.get("max_class_size"),
        "avg_size": round(rows / count, 4) if count and rows is not None else None,
    }


def internal_groups(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """The method's own groups (count, min, max, avg size) from a run's metrics; None for a
    method that forms none beyond its classes. A run recorded before the two were told apart
    has only the groups' largest and average size."""
    if any(f in metrics for f in GROUP_FIGURES):
        names = GROUP_FIGURES
    elif "released_classes" not in metrics and any(f in metrics for f in _OLD_GROUP_FIGURES):
        names = (None, None, *_OLD_GROUP_FIGURES)
    else:
        return None
    return {k: metrics.get(f) if f else None
            for k, f in zip(("count", "min_size", "max_size", "avg_size"), names, strict=True)}


def _counted(metrics: dict[str, Any]) -> dict[str, Any]:
    """`report`'s two named figures, from a run's metrics of any age."""
    if "released_classes" in metrics:
        released = metrics["released_classes"]
    else:  # an older run: its max_class_size, if any, was the largest group's
        released = released_classes({**metrics, "max_class_size": None})
    return {"released_classes": released, "internal_groups": internal_groups(metrics)}


# --- 1. resolve and validate --------------------------------------------------------------------


def _resolve_models(spec: ReleaseSpec, method: Method) -> list[PrivacyModel]:
    """The promised models: ones the method can promise, at least one it requires, none trivial."""
    models = from_specs(spec.models)
    registry = methods.methods()
    for m in models:
        kind = kind_of(m)
        if kind.name not in method.promises:
            able = [n for n, meth in registry.items() if kind.name in meth.promises]
            hint = f"; use --algorithm {' or '.join(able)}" if able else ""
            raise DbanonError(
                f"--algorithm {method.name} cannot promise {kind.option} ({kind.name}){hint}"
            )
    if method.requires and not any(kind_of(m).name in method.requires for m in models):
        flags = sorted({MODEL_KINDS[r].option for r in method.requires})
        raise DbanonError(f"--algorithm {method.name} needs {' or '.join(flags)}")
    for m in models:
        if getattr(m, "k", 2) < 2:
            raise DbanonError(f"k must be at least 2, got {m.k}")  # type: ignore[attr-defined]
        if getattr(m, "l", 2) <= 1:
            raise DbanonError(f"--l {m.l} promises nothing: l must be above 1")  # type: ignore[attr-defined]
        if getattr(m, "p", 2) < 2:
            raise DbanonError(f"--p {m.p} promises nothing: p must be at least 2")  # type: ignore[attr-defined]
    with_sensitive = [m for m in models if m.needs_sensitive]
    if with_sensitive and len(spec.sensitive) != 1:
        raise DbanonError(
            f"{kind_of(with_sensitive[0]).option} needs exactly one --sensitive column, "
            f"got {len(spec.sensitive)}"
        )
    return models


def _resolve_options(spec: ReleaseSpec, method: Method) -> dict[str, Any]:
    """The method's options, each checked, defaults filled; options of other methods refused."""
    known = {o.name: o for o in method.all_options()}
    for name in spec.options:
        if name not in known:
            flag = "--" + name.replace("_", "-")
            owners = [m.name for m in methods.methods().values()
                      if any(o.name == name for o in m.all_options())]  # fmt: skip
            where = f" (an option of {', '.join(owners)})" if owners else ""
            raise DbanonError(f"{flag} does not apply to --algorithm {method.name}{where}")
    return {
        name: o.coerce(spec.options[name]) if spec.options.get(name) is not None else o.default
        for name, o in known.items()
    }


def _unique_index(conn: psycopg.Connection, source: Relation, key: Column) -> bool:
    """Whether a valid, whole-table unique index on the key column alone already guarantees
    its values are distinct (then counting them, a sort of the whole table, is skipped)."""
    return bool(conn.execute(sql.SQL(
        """SELECT EXISTS (
               SELECT 1 FROM pg_index i
               JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
               WHERE i.indrelid = {rel}
                 AND i.indisunique AND i.indisvalid AND i.indnkeyatts = 1
                 AND i.indpred IS NULL AND i.indexprs IS NULL AND a.attname = {key})"""
    ).format(rel=source.regclass, key=sql.Literal(key.name))).fetchone()[0])  # fmt: skip


def _check_rows(conn: psycopg.Connection, source: Relation, key: Column, qi: list[Column]) -> int:
    """The key is unique and never NULL, no QI is NULL; returns the row count."""
    distinct = (
        sql.SQL("count({})").format(key.ident)  # NULLs are counted (and refused) apart
        if _unique_index(conn, source, key)
        else sql.SQL("count(DISTINCT {})").format(key.ident)
    )
    rows, distinct_keys, null_keys, *qi_nulls = conn.execute(
        sql.SQL(
            "SELECT count(*), {distinct}, count(*) - count({key}), {nulls} FROM {src}"
        ).format(
            distinct=distinct,
            key=key.ident,
            nulls=sql.SQL(", ").join(sql.SQL("count(*) - count({})").format(c.ident) for c in qi),
            src=source.ident,
        )
    ).fetchone()
    if null_keys:
        raise DbanonError(f"key column {key.name!r} of {source} has {null_keys} NULL values")
    if distinct_keys != rows:
        raise DbanonError(
            f"key column {key.name!r} of {source} is not unique: "
            f"{rows - distinct_keys} duplicate values in {rows} rows"
        )
    nulls = [(c.name, n) for c, n in zip(qi, qi_nulls, strict=True) if n]
    if nulls:
        named = ", ".join(f"{c!r} in {n} rows" for c, n in nulls[:SHOWN_OFFENDERS])
        more = f", ... ({len(nulls)} columns in all)" if len(nulls) > SHOWN_OFFENDERS else ""
        raise DbanonError(
            f"quasi-identifiers of {source} are NULL: {named}{more}; fill or filter them first"
        )
    return int(rows)


def _release_row(conn: psycopg.Connection, name: str) -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT id, spec, target_schema, objects FROM dbanon.release WHERE name = %s", [name]
    ).fetchone()


def owner_comment(release: str) -> str:
    """How a relation dbanon published starts its comment; proof enough that dbanon made it."""
    return f"dbanon release {release!r}:"


def owned(conn: psycopg.Connection, release: str, schema: str, name: str) -> bool | None:
    """None if the relation does not exist, else whether it is this release's own."""
    row = conn.execute(
        """SELECT obj_description(c.oid, 'pg_class') FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s""",
        [schema, name],
    ).fetchone()
    if row is None:
        return None
    return (row[0] or "").startswith(owner_comment(release))


def _check_target(
    conn: psycopg.Connection, spec: ReleaseSpec, schema: str, name: str, objects: list[str],
    previous: list[tuple[str, str]],
) -> None:  # fmt: skip
    """The release's relations may replace only its own: not another release's, nor a user's."""
    others = conn.execute(
        """SELECT name, target_schema, target_name, objects FROM dbanon.release
           WHERE name <> %s AND target_schema = %s""",
        [spec.name, schema],
    ).fetchall()
    for other, _, other_target, other_objects in others:
        if other_target == name or set(other_objects) & set(objects):
            clash = name if other_target == name else sorted(set(other_objects) & set(objects))[0]
            raise DbanonError(f"{schema}.{clash} is the target of release {other!r}")
    for s, obj in previous:  # the release's own objects: gone is fine, replaced is not
        if owned(conn, spec.name, s, obj) is False:
            raise DbanonError(
                f"{s}.{obj} is not the relation release {spec.name!r} published (it was replaced "
                "since); dbanon will not drop it: rename it, or drop it yourself"
            )
    for obj in objects:
        if (schema, obj) not in previous and owned(conn, spec.name, schema, obj) is not None:
            raise DbanonError(f"{schema}.{obj} exists and is not a dbanon release; choose --target")


def _refuse_existing(conn: psycopg.Connection, name: str) -> None:
    if _release_row(conn, name):
        raise DbanonError(
            f"release {name!r} exists: `dbanon refresh {name}` rebuilds it as it is, "
            "`publish --replace` redefines it"
        )


def resolve(
    conn: psycopg.Connection,
    spec: ReleaseSpec,
    *,
    replace: bool = False,
    revoke: Sequence[str] = (),
    regroup: bool = False,
    say: Callable[[str], None] = lambda _msg: None,
) -> Resolved:
    """Check the spec against the live database; raise DbanonError naming what is wrong.
    `say` hears the build's progress (Resolved.say)."""
    catalog.require_catalog(conn)
    if not spec.name.strip():
        raise DbanonError("a release needs a name")
    existing = _release_row(conn, spec.name)
    if not replace:
        _refuse_existing(conn, spec.name)
    method = methods.get(spec.method)
    options = _resolve_options(spec, method)
    models = _resolve_models(spec, method)
    if not spec.qi:
        raise DbanonError("at least one quasi-identifier (--qi) is needed")
    source = catalog.relation(conn, spec.source)
    cols = catalog.columns(conn, source)
    named = [spec.key, *spec.qi, *spec.sensitive]
    twice = sorted({c for c in named if named.count(c) > 1})
    if twice:
        raise DbanonError(f"column {twice[0]!r} is named twice among key, QI and sensitive")
    key = catalog.require_columns(cols, source, [spec.key])[0]
    qi = catalog.require_columns(cols, source, spec.qi)
    sensitive = catalog.require_columns(cols, source, spec.sensitive)
    keep = identifying.resolve_keep(spec, method, cols, source)
    changed = [
        f"{c.name!r} was {spec.columns[c.name]}, is {c.type} now"
        for c in [key, *qi, *sensitive]
        if c.name in spec.columns and spec.columns[c.name] != c.type
    ]
    if changed:
        raise DbanonError(
            f"columns of {source} changed type since release {spec.name!r} was published: "
            f"{'; '.join(changed)}; publish --replace to redefine the release"
        )
    source_check.require_stable_key(conn, source, key)  # a view's random() key: before any scan
    rows = _check_rows(conn, source, key, qi)
    ks = [m.k for m in models if isinstance(getattr(m, "k", None), int)]  # type: ignore[attr-defined]
    if ks and max(ks) > rows:
        raise DbanonError(f"k={max(ks)} is larger than the {rows} rows of {source}")

    hierarchies: dict[str, Hierarchy] = {}
    for column, hname in spec.hierarchies.items():
        if column not in spec.qi:
            raise DbanonError(f"hierarchy given for {column!r}, which is not a quasi-identifier")
        hierarchies[column] = catalog.load_hierarchy(conn, hname)
    if method.finite_qis:  # QIs it measures: numeric and date ones without a hierarchy
        measured = [c for c in qi if c.kind != catalog.CATEGORICAL and c.name not in hierarchies]
        source_check.require_finite(conn, source, measured, f"--algorithm {method.name}")

    schema, name = catalog.parse_target(spec.target or f"{DEFAULT_SCHEMA}.{spec.name}")
    schema = schema or DEFAULT_SCHEMA
    if schema in RESERVED_SCHEMAS or schema.startswith("pg_"):
        raise DbanonError(
            f"a release cannot go to schema {schema!r}: consumers are granted USAGE on the "
            "release schema; choose a schema of its own"
        )
    if schema == source.schema:
        raise DbanonError(
            f"the release must go to its own schema, not the source's ({schema!r}): "
            "consumers get access to the whole release schema"
        )
    objects = method.release_objects(conn, spec, name)
    previous: list[tuple[str, str]] = []
    before: list[str] = []
    if existing:
        previous = [(existing[2], o) for o in existing[3]]
        before = list(existing[1].get("grants", []))
    _check_target(conn, spec, schema, name, objects, previous)
    unknown = [g for g in revoke if g not in before and g not in spec.grants]
    if unknown:
        raise DbanonError(f"--revoke {unknown[0]}: release {spec.name!r} is not granted to it")
    grants = [g for g in dict.fromkeys([*before, *spec.grants]) if g not in revoke]
    for role in grants:
        if not catalog.role_exists(conn, role):
            raise DbanonError(f"role {role!r} does not exist")
    seed = options.get("seed")
    if method.randomised and seed is None:
        seed = secrets.randbelow(2**31)
    changes = {
        "kept": [g for g in grants if g in before],
        "added": [g for g in grants if g not in before],
        "revoked": [g for g in before if g not in grants],
    }
    r = Resolved(
        spec, method, source, key, qi, sensitive, hierarchies, models, options, schema, name,
        objects, previous, grants, changes, rows, seed, regroup,
        existing[0] if existing else None,
        bool(existing) and (existing[1].get("source"), existing[1].get("key"))
        != (spec.source, spec.key), say, keep,
    )  # fmt: skip
    method.validate(conn, r)
    return r


# --- 3. verify ----------------------------------------------------------------------------------


def verify(conn: psycopg.Connection, r: Resolved, built: list[Built]) -> dict[str, Any]:
    """Run every check the method names on the built relations; the first failure aborts."""
    figures: dict[str, Any] = {}
    checks = r.method.checks(r, built)
    if not checks:
        raise DbanonError(f"method {r.method.name} names no check of its release")
    for check in checks:
        result = check.run(conn)
        if not result.holds:
            raise failed(r.spec.name, check, result)
        figures.update(result.figures)
    figures.update(identifying.gate(conn, r, built))  # no --keep column singles people out
    return figures


def recheck(conn: psycopg.Connection, name: str) -> list[Any]:
    """Run a published release's own checks (what the gate ran before it became visible) on its
    relations as they are now; `dbanon check NAME --release`. Changes nothing."""
    spec = load_spec(conn, name)
    row = _release_row(conn, name)
    assert row is not None  # load_spec found it
    _, _, schema, objects = row
    try:
        r = replace(resolve(conn, spec, replace=True), target_schema=schema,
                    build_schema=schema, objects=objects)
        missing = _missing(conn, schema, objects)
        if missing:
            raise DbanonError(f"release {name!r}: released relation {missing[0]} is missing")
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


def fingerprint(conn: psycopg.Connection, rel: Relation) -> str:
    """Row count and an order-independent hash of the source rows, to tell when it changed."""
    count, digest = conn.execute(
        sql.SQL(
            "SELECT count(*), coalesce(sum(hashtextextended(t::text, 0)::numeric), 0) FROM {} t"
        ).format(rel.ident)
    ).fetchone()
    return f"{count}:{digest}"


# --- the lifecycle ------------------------------------------------------------------------------


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
    catalog.require_catalog(conn)
    if not replace:
        _refuse_existing(conn, spec.name)  # before any run is logged against that release
    method = methods.get(spec.method)  # options and models out of range: refused before too
    _resolve_options(spec, method)
    _resolve_models(spec, method)
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
            raise DbanonError(f"release {spec.name!r} does not exist (it was dropped)")
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
            runs.fail(conn, run_id, "refused" if isinstance(e, Refused) else "failed",
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

    def lap(name: str) -> None:
        now = time.perf_counter()
        timings[name] = round(now - mark[0], 4)
        mark[0] = now

    try:
        say("validating the spec against the database")
        r = resolve(conn, spec, replace=replace, revoke=revoke, regroup=regroup, say=say)
        release_id = r.release_id
        if release_id is None:  # a first publish: its catalog row, inserted now, is its lock
            release_id = runs.claim(conn, spec.name, lambda: _store_spec(conn, r), wait)
        rekeyed = carry_map(conn, r, allow_composition) if r.new_source else None
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
        for b in built:  # statistics before the checks' GROUP BYs: sorts stay in memory
            if b.kind == "table":
                conn.execute(sql.SQL("ANALYZE {}").format(r.stored(b)))
        say("verifying the release")
        checked = verify(conn, r, built)
        from dbanon.metrics.exposure import at_publish  # numba: loaded by publishes only
        figures = r.method.figures(conn, r, built, checked) | risk_at_publish(conn, r, built)
        lap("verify")
        # A gate that measured exposure already (a source-aware check) is not measured twice.
        measured = (
            {k: v for k, v in checked.items() if k == "dm" or k.startswith("exposure")}
            if "exposure" in checked
            else at_publish(conn, r, built, checked.get("dm"))
        )
        if measured:
            lap("exposure")
        grouped = new_rows(conn, r)
        composed = compose(conn, r, grouped, allow_composition)
        say("keeping the group map")
        source_fingerprint = fingerprint(conn, r.source)
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
        say("recording the run")
        record(conn, r, metrics, timings, source_fingerprint, run_id)
        hierarchy_pins.pin(conn, release_id, pinned)  # last: it may delete shared rows
        with interrupts.committing(spec.name):  # a signal now is held, not cut into the commit
            conn.commit()
    except BaseException:
        conn.rollback()
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
    )


def _refuse_live(r: Resolved, views: list[str], allowed: bool) -> None:
    """A live view goes to a role it was not granted to before only if allowed."""
    from dbanon.grants import refuse_live

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


def compose(
    conn: psycopg.Connection, r: Resolved, rows: composition.Rows | None, allow: bool
) -> composition.Composition | None:
    """Measure what intersecting this release with the earlier ones leaves a persisting row;
    refuse the run when that breaks the promised k, l (p) or spread ((θ,k)'s categories),
    unless allowed."""
    if rows is None or r.release_id is None:
        return None
    needed = composition.values_needed(r.models)
    spread = None if rows.measured else composition.spread_of(
        conn, r.models, lambda: composition.released_tags(conn, rows)
    )
    found = composition.measure(conn, r.release_id, rows, r.k or 1, needed, spread)
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
        f"release {r.spec.name!r}: a consumer who keeps the earlier releases could narrow "
        f"{' and '.join(problems)}; the previous release is kept ({advice}; "
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
    row = _release_row(conn, r.spec.name)
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
            f"release {r.spec.name!r}: cannot tell which rows of {r.source} are the people its "
            f"earlier releases showed (the old key {old_key!r} of {old_source_name} is no "
            "unique column of it, and the old source is gone or shares no column with it); "
            "consumers who keep them could narrow people unmeasured; the previous release is "
            "kept (--allow-composition to start the measure over)"
        )
    composition.forget(conn, r.release_id)
    return {"by": "none", "kept": 0}


def keep_map(conn: psycopg.Connection, rows: composition.Rows | None, release_id: int) -> None:
    """Store this run's private row-to-group map. A run without groups (another method since
    a --replace) leaves the map as it is: consumers still hold the grouped releases, and a
    later grouping run is measured against them."""
    if rows is not None:
        composition.store(conn, release_id, rows)


def _create_schema(conn: psycopg.Connection, schema: str) -> None:
    """CREATE SCHEMA, where another run may be creating it too: the second waits for the first
    (on the name's unique index), and a schema that appeared meanwhile is taken as it is."""
    try:
        with conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    except psycopg.errors.UniqueViolation:
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


SWAP_LOCK_TIMEOUT = "2s"  # per attempt: how long new readers may queue behind the swap
SWAP_PATIENCE = 120.0  # seconds of attempts before the run gives up, the previous release kept


def swap_patiently(conn: psycopg.Connection, r: Resolved, built: list[Built]) -> float:
    """`swap` under a short lock_timeout, retried with backoff; returns the seconds waited.

    A DROP of the previous release waits for every consumer transaction reading it, and while it
    waits every new reader queues behind it: with a short timeout readers stall for at most that
    long per attempt, and the swap tries again once the long reader is gone."""
    started, delay = time.monotonic(), 0.1
    while True:
        try:
            with conn.transaction():  # a savepoint: a timed-out attempt is undone alone
                old = conn.execute("SELECT current_setting('lock_timeout')").fetchone()[0]
                conn.execute("SELECT set_config('lock_timeout', %s, true)", [SWAP_LOCK_TIMEOUT])
                swap(conn, r, built)
                conn.execute("SELECT set_config('lock_timeout', %s, true)", [old])
            return round(time.monotonic() - started, 3) if delay > 0.1 else 0.0
        except psycopg.errors.LockNotAvailable:
            if time.monotonic() - started > SWAP_PATIENCE:
                raise DbanonError(
                    f"the swap of release {r.spec.name!r} waited {SWAP_PATIENCE:.0f} s for "
                    "readers of its previous relations; the previous release is unchanged"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def swap(conn: psycopg.Connection, r: Resolved, built: list[Built]) -> None:
    """Point the release's views at the built relations (dbanon.swap: objects consumers built
    over them are kept) and grant consumers read access."""
    keeps = {(r.target_schema, b.name) for b in built}
    for schema, name in r.previous:  # checked in resolve: each is the release's own, or gone
        old = store.find(conn, schema, name)
        if (schema, name) not in keeps and old is not None:
            swap_.drop(conn, old, f"dropped (release {r.spec.name!r} no longer publishes it)")
    promise = ", ".join(m.name for m in r.models) or "no equivalence-class model"
    comment = f"{owner_comment(r.spec.name)} {r.method.name}; {promise}"
    for b in built:
        swap_.point(conn, r.ident(b.name), r.target_schema, b.name, r.stored(b))
        stored_kind = "VIEW" if b.kind == "view" else "TABLE"
        for kind, rel in (("VIEW", r.ident(b.name)), (stored_kind, r.stored(b))):
            conn.execute(
                sql.SQL("COMMENT ON {} {} IS {}").format(sql.SQL(kind), rel, sql.Literal(comment))
            )
        for role in r.grants:
            conn.execute(
                sql.SQL("GRANT SELECT ON {} TO {}").format(r.ident(b.name), sql.Identifier(role))
            )
    for role in r.grants:
        runs.schema_usage(conn, r.target_schema, role)


def record(
    conn: psycopg.Connection,
    r: Resolved,
    metrics: dict[str, Any],
    timings: dict[str, float],
    source_fingerprint: str,
    run_id: int | None = None,
) -> int:
    """The spec as run (options and grants resolved, column types as found) and the run."""
    release_id = _store_spec(conn, r)
    runs.finish(
        conn, run_id, release_id, "succeeded", source_rows=r.rows, released_rows=metrics["rows"],
        metrics=metrics, timings=timings, fingerprint=source_fingerprint,
    )  # fmt: skip
    return release_id


def _store_spec(conn: psycopg.Connection, r: Resolved) -> int:
    """Insert or update the release's catalog row with the spec as run."""
    types = {c.name: c.type for c in [r.key, *r.qi, *r.sensitive]}
    spec = ReleaseSpec(
        **{**asdict(r.spec), "options": r.options, "grants": r.grants, "columns": types}
    )
    return conn.execute(
        """INSERT INTO dbanon.release (name, spec, target_schema, target_name, objects)
           VALUES (%s, %s::jsonb, %s, %s, %s)
           ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, updated_at = now(),
               target_schema = EXCLUDED.target_schema, target_name = EXCLUDED.target_name,
               objects = EXCLUDED.objects
           RETURNING id""",
        [r.spec.name, spec.to_json(), r.target_schema, r.target_name, r.objects],
    ).fetchone()[0]


def load_spec(conn: psycopg.Connection, name: str) -> ReleaseSpec:
    catalog.require_catalog(conn)
    row = conn.execute("SELECT spec FROM dbanon.release WHERE name = %s", [name]).fetchone()
    if not row:
        raise DbanonError(f"release {name!r} does not exist (see `dbanon releases`)")
    return ReleaseSpec.from_dict(row[0])


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


# --- the catalog of releases --------------------------------------------------------------------


def _missing(conn: psycopg.Connection, schema: str, objects: Sequence[str]) -> list[str]:
    return [
        catalog.qualified(schema, o) for o in objects
        if catalog.find_relation(conn, f"{schema}.{o}") is None
    ]  # fmt: skip


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
    missing = _missing(conn, schema, objects)
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
        **_counted(metrics),
        "method_metrics": {k: v for k, v in metrics.items() if k not in SHOWN_APART},
        "last_failure": failure,
        "warnings": [f"released relation {m} is missing" for m in missing]
        + list(metrics.get("warnings", [])),
    }


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
            "missing": _missing(conn, schema, objects),
        })  # fmt: skip
    return out


def drop(conn: psycopg.Connection, name: str, wait: float = 0.0) -> list[str]:
    """Drop a release's relations (those that are still its own) and its catalog entry, under
    the release's run lock (a run in progress: runs.Busy, or wait up to `wait` seconds)."""
    catalog.require_catalog(conn)
    conn.rollback()
    try:
        if runs.lock_release(conn, name, wait) is None:
            raise DbanonError(f"release {name!r} does not exist (see `dbanon releases`)")
        row = _release_row(conn, name)
        assert row is not None  # locked above
        release_id, _, schema, objects = row
        dropped = []
        for obj in objects:
            mine = owned(conn, name, schema, obj)
            if mine is False:
                raise DbanonError(
                    f"{schema}.{obj} is not the relation release {name!r} published; "
                    "dbanon will not drop it"
                )
            rel = store.find(conn, schema, obj)
            if mine and rel is not None:
                swap_.drop(conn, rel, f"dropped with release {name!r}")
                dropped.append(f"{schema}.{obj}")
        composition.forget(conn, release_id)
        conn.execute("DELETE FROM dbanon.release WHERE name = %s", [name])
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return dropped
