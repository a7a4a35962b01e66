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

The spec's JSON shape (`dbanon.release.spec`, version 2):
    {"version": 2, "name": "patients_k5", "source": "clinic.patients", "key": "id",
     "qi": ["age", "zip"], "sensitive": ["diagnosis"], "hierarchies": {"zip": "zip"},
     "method": METHOD, "models": [{"name": "k-anonymity", "k": 5}],
     "options": {OPTION: VALUE, ...},
     "target": "released.patients_k5", "grants": ["analysts"]}
`models` are the promised privacy models (dbanon.models.specs), `options` the method's own
options with every default filled in, so a refresh rebuilds exactly what was published.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from dbanon import methods
from dbanon.db import catalog
from dbanon.db.catalog import CATEGORICAL, Column, Relation
from dbanon.errors import SHOWN_OFFENDERS, DbanonError
from dbanon.hierarchy import Hierarchy, HierarchyError
from dbanon.methods.base import BuildContext, Built, Method, failed
from dbanon.models import PrivacyModel, from_options
from dbanon.models.base import Target
from dbanon.models.categories import named_hierarchy
from dbanon.models.specs import MODEL_KINDS, from_specs, kind_of, to_specs

DEFAULT_SCHEMA = "released"
SPEC_VERSION = 2
# Figures every run reports, whatever the method; the rest of a run's metrics are the method's.
COMMON_FIGURES = ("rows", "classes", "min_class_size", "gcp", "seconds", "seed")

Progress = Callable[[str], None]


@dataclass
class ReleaseSpec:
    """Everything that defines a release; stored in the catalog so `refresh` can rebuild it."""

    name: str
    source: str
    key: str
    qi: list[str]
    sensitive: list[str] = field(default_factory=list)
    method: str = methods.DEFAULT
    models: list[dict[str, Any]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    hierarchies: dict[str, str] = field(default_factory=dict)  # column -> hierarchy name
    target: str | None = None
    grants: list[str] = field(default_factory=list)
    version: int = SPEC_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReleaseSpec:
        if data.get("version") != SPEC_VERSION:
            raise DbanonError(
                f"release spec of version {data.get('version', 1)} (this dbanon reads version "
                f"{SPEC_VERSION}): run `dbanon init` to upgrade the catalog"
            )
        return cls(**data)

    @classmethod
    def from_options(
        cls,
        name: str,
        source: str,
        key: str,
        qi: Sequence[str],
        *,
        sensitive: Sequence[str] = (),
        method: str = methods.DEFAULT,
        k: int | None = None,
        l: float | None = None,  # noqa: E741 - the papers' name
        l_kind: str | None = None,
        c: float | None = None,
        t: float | None = None,
        t_ground: str = "auto",
        alpha: float | None = None,
        alpha_value: str | None = None,
        p: int | None = None,
        theta: int | None = None,
        sensitive_hierarchies: dict[str, str] | None = None,
        category_level: int | None = None,
        category_width: float | None = None,
        options: dict[str, Any] | None = None,
        hierarchies: dict[str, str] | None = None,
        target: str | None = None,
        grants: Sequence[str] = (),
    ) -> ReleaseSpec:
        """A spec from the `publish` options: models from --k/--l/..., as `dbanon check` reads
        them; without --l-kind, the l-diversity the method promises first. The sensitive
        hierarchy (COL=NAME) and category level or width are parameters of the (θ,k) model."""
        if l_kind is None:
            kinds = [p_[: -len("-l-diversity")] for p_ in methods.get(method).promises
                     if p_.endswith("-l-diversity")]  # fmt: skip
            l_kind = kinds[0] if kinds else "distinct"
        models = from_options(
            k=k, l=l, l_kind=l_kind, c=c, t=t, t_ground=t_ground, alpha=alpha,
            alpha_value=alpha_value, p=p, theta=theta,
            sensitive_hierarchy=named_hierarchy(sensitive_hierarchies, sensitive),
            category_level=category_level, category_width=category_width,
        )  # fmt: skip
        return cls(
            name=name, source=source, key=key, qi=list(qi), sensitive=list(sensitive),
            method=method, models=to_specs(models), options=dict(options or {}),
            hierarchies=dict(hierarchies or {}), target=target, grants=list(grants),
        )  # fmt: skip


@dataclass(frozen=True)
class Resolved:
    """A spec checked against the live database, with everything a method's build needs."""

    spec: ReleaseSpec
    method: Method
    source: Relation
    key: Column
    qi: list[Column]
    sensitive: list[Column]
    hierarchies: dict[str, Hierarchy]  # QI -> stored hierarchy (categorical QIs without: flat)
    models: list[PrivacyModel]
    options: dict[str, Any]  # the method's options, defaults filled in
    target_schema: str
    target_name: str
    objects: list[str]  # the relations this publish creates in target_schema
    previous: list[tuple[str, str]]  # (schema, name) of the release's objects as it is now
    grants: list[str]  # roles that read the release after this publish
    grant_changes: dict[str, list[str]]  # kept, added, revoked: roles compared with before
    rows: int
    seed: int | None  # the run's seed, for randomised methods

    def ident(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.target_schema, name)

    def is_categorical(self, col: Column) -> bool:
        return col.kind == CATEGORICAL or col.name in self.hierarchies

    def model(self, kind: str) -> PrivacyModel | None:
        """The promised model of a kind (dbanon.models.specs names), if any."""
        return next((m for m in self.models if kind_of(m).name == kind), None)

    @property
    def k(self) -> int | None:
        """The largest k among the promised models ((alpha,k) and (p,k) carry one too)."""
        ks = [m.k for m in self.models if isinstance(getattr(m, "k", None), int)]  # type: ignore[attr-defined]
        return max(ks) if ks else None

    @property
    def target(self) -> Target:
        """What the models check: the released QIs and the (first) sensitive column."""
        sensitive = self.sensitive[0].name if self.sensitive else None
        return Target(self.ident(self.target_name), [c.name for c in self.qi], sensitive)


@dataclass(frozen=True)
class PublishResult:
    release: str
    table: str  # the first released relation
    rows: int
    classes: int
    min_class_size: int
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
        }


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


def _check_rows(conn: psycopg.Connection, source: Relation, key: Column, qi: list[Column]) -> int:
    """The key is unique and never NULL, no QI is NULL; returns the row count."""
    rows, distinct_keys, null_keys, *qi_nulls = conn.execute(
        sql.SQL(
            "SELECT count(*), count(DISTINCT {key}), count(*) - count({key}), {nulls} FROM {src}"
        ).format(
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


def resolve(
    conn: psycopg.Connection,
    spec: ReleaseSpec,
    *,
    replace: bool = False,
    revoke: Sequence[str] = (),
) -> Resolved:
    """Check the spec against the live database; raise DbanonError naming what is wrong."""
    catalog.require_catalog(conn)
    if not spec.name.strip():
        raise DbanonError("a release needs a name")
    existing = _release_row(conn, spec.name)
    if existing and not replace:
        raise DbanonError(
            f"release {spec.name!r} exists: `dbanon refresh {spec.name}` rebuilds it as it is, "
            "`publish --replace` redefines it"
        )
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
    rows = _check_rows(conn, source, key, qi)
    ks = [m.k for m in models if isinstance(getattr(m, "k", None), int)]  # type: ignore[attr-defined]
    if ks and max(ks) > rows:
        raise DbanonError(f"k={max(ks)} is larger than the {rows} rows of {source}")

    hierarchies: dict[str, Hierarchy] = {}
    for column, hname in spec.hierarchies.items():
        if column not in spec.qi:
            raise DbanonError(f"hierarchy given for {column!r}, which is not a quasi-identifier")
        hierarchies[column] = catalog.load_hierarchy(conn, hname)

    schema, name = catalog.parse_target(spec.target or f"{DEFAULT_SCHEMA}.{spec.name}")
    schema = schema or DEFAULT_SCHEMA
    if schema == source.schema:
        raise DbanonError(
            f"the release must go to its own schema, not the source's ({schema!r}): "
            "consumers get access to the whole release schema"
        )
    objects = method.objects(name)
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
        objects, previous, grants, changes, rows, seed,
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
    return figures


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
) -> PublishResult:
    """Build, verify and swap in a release; on any error the database is left as it was.

    A release name that exists is refused unless `replace` (refresh rebuilds one as it is);
    the roles it was granted to keep reading it unless named in `revoke`."""
    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    timings: dict[str, float] = {}
    mark = [started]

    def lap(name: str) -> None:
        now = time.perf_counter()
        timings[name] = round(now - mark[0], 4)
        mark[0] = now

    try:
        say("validating the spec against the database")
        r = resolve(conn, spec, replace=replace, revoke=revoke)
        lap("validate")
        conn.execute(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(r.target_schema))
        )
        ctx = BuildContext(say, lap, {o: _build_name(conn, r.target_schema) for o in r.objects})
        metrics = r.method.build(conn, r, ctx)
        built = ctx.built
        if sorted(b.name for b in built) != sorted(r.objects):
            raise DbanonError(f"method {r.method.name} built {built}, not {r.objects}")
        for b in built:  # statistics before the checks' GROUP BYs: sorts stay in memory
            if b.kind == "table":
                conn.execute(sql.SQL("ANALYZE {}").format(r.ident(b.build)))
        say("verifying the release")
        figures = verify(conn, r, built)
        figures = r.method.figures(conn, r, built, figures)
        lap("verify")
        swap(conn, r, built)
        lap("swap")
        seconds = round(time.perf_counter() - started, 3)
        metrics = {"seed": r.seed, **metrics, **figures, "seconds": seconds}
        metrics.setdefault("gcp", None)
        record(conn, r, metrics, timings, fingerprint(conn, r.source))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return PublishResult(
        release=spec.name,
        table=f"{r.target_schema}.{r.objects[0]}",
        rows=figures["rows"],
        classes=figures["classes"],
        min_class_size=figures["min_class_size"],
        gcp=metrics["gcp"],
        seconds=seconds,
        metrics=metrics,
        timings=timings,
        objects=[f"{r.target_schema}.{o}" for o in r.objects],
        grants=r.grant_changes,
    )


def _build_name(conn: psycopg.Connection, schema: str) -> str:
    """A name no relation has: dbanon only ever creates, renames or drops what it made."""
    while True:
        name = f"dbanon_build_{secrets.token_hex(8)}"
        if catalog.find_relation(conn, f"{schema}.{name}") is None:
            return name


def _drop(conn: psycopg.Connection, schema: str, name: str) -> None:
    """Drop a table or view if it exists, whichever it is."""
    rel = catalog.find_relation(conn, f"{schema}.{name}")
    if rel is not None:
        kind = "VIEW" if rel.kind == "v" else "TABLE"
        conn.execute(sql.SQL("DROP {} {}").format(sql.SQL(kind), rel.ident))


def swap(conn: psycopg.Connection, r: Resolved, built: list[Built]) -> None:
    """Replace the previous release by the built one and grant consumers read access."""
    for schema, name in r.previous:  # checked in resolve: each is the release's own, or gone
        _drop(conn, schema, name)
    promise = ", ".join(m.name for m in r.models)
    for b in built:
        kind = sql.SQL("VIEW" if b.kind == "view" else "TABLE")
        conn.execute(
            sql.SQL("ALTER {} {} RENAME TO {}").format(
                kind, r.ident(b.build), sql.Identifier(b.name)
            )
        )
        conn.execute(
            sql.SQL("COMMENT ON {} {} IS {}").format(
                kind,
                r.ident(b.name),
                sql.Literal(f"{owner_comment(r.spec.name)} {r.method.name}; {promise}"),
            )
        )
        for role in r.grants:
            conn.execute(
                sql.SQL("GRANT SELECT ON {} TO {}").format(r.ident(b.name), sql.Identifier(role))
            )
    for role in r.grants:
        conn.execute(
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                sql.Identifier(r.target_schema), sql.Identifier(role)
            )
        )


def record(
    conn: psycopg.Connection,
    r: Resolved,
    metrics: dict[str, Any],
    timings: dict[str, float],
    source_fingerprint: str,
) -> None:
    spec = ReleaseSpec(**{**asdict(r.spec), "options": r.options, "grants": r.grants})
    release_id = conn.execute(
        """INSERT INTO dbanon.release (name, spec, target_schema, target_name, objects)
           VALUES (%s, %s::jsonb, %s, %s, %s)
           ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, updated_at = now(),
               target_schema = EXCLUDED.target_schema, target_name = EXCLUDED.target_name,
               objects = EXCLUDED.objects
           RETURNING id""",
        [r.spec.name, spec.to_json(), r.target_schema, r.target_name, r.objects],
    ).fetchone()[0]
    conn.execute(
        """INSERT INTO dbanon.run (release_id, status, started_at, finished_at, source_rows,
               released_rows, metrics, timings, source_fingerprint)
           VALUES (%s, 'succeeded', now(), clock_timestamp(), %s, %s, %s::jsonb, %s::jsonb, %s)""",
        [
            release_id,
            r.rows,
            metrics["rows"],
            json.dumps(metrics, default=str),
            json.dumps(timings),
            source_fingerprint,
        ],
    )


def record_failure(conn: psycopg.Connection, name: str, error: str) -> None:
    """Log a failed run of an existing release (a refresh that did not pass), in its own
    transaction; a release that never succeeded leaves no trace."""
    row = conn.execute("SELECT id FROM dbanon.release WHERE name = %s", [name]).fetchone()
    if row:
        conn.execute(
            "INSERT INTO dbanon.run (release_id, status, finished_at, error) "
            "VALUES (%s, 'failed', clock_timestamp(), %s)",
            [row[0], error],
        )
    conn.commit()


def load_spec(conn: psycopg.Connection, name: str) -> ReleaseSpec:
    catalog.require_catalog(conn)
    row = conn.execute("SELECT spec FROM dbanon.release WHERE name = %s", [name]).fetchone()
    if not row:
        raise DbanonError(f"release {name!r} does not exist (see `dbanon releases`)")
    return ReleaseSpec.from_dict(row[0])


def refresh(conn: psycopg.Connection, name: str, progress: Progress | None = None) -> PublishResult:
    """Rebuild a release from its stored spec against the source as it is now."""
    spec = load_spec(conn, name)
    try:
        return publish(conn, spec, progress, replace=True)
    except (DbanonError, HierarchyError, psycopg.Error) as e:
        conn.rollback()
        record_failure(conn, name, str(e))
        raise


# --- the catalog of releases --------------------------------------------------------------------


def _missing(conn: psycopg.Connection, schema: str, objects: Sequence[str]) -> list[str]:
    return [
        f"{schema}.{o}" for o in objects if catalog.find_relation(conn, f"{schema}.{o}") is None
    ]


def report(conn: psycopg.Connection, name: str) -> dict[str, Any]:
    """One shape for every method: the common figures of the latest successful run at the top,
    the method's own under `method_metrics`; the latest failure when newer; missing objects."""
    spec = load_spec(conn, name)
    schema, objects = conn.execute(
        "SELECT target_schema, objects FROM dbanon.release WHERE name = %s", [name]
    ).fetchone()
    ok = conn.execute(
        """SELECT u.metrics, u.timings, u.finished_at, u.source_rows, u.source_fingerprint
           FROM dbanon.release r JOIN dbanon.run u ON u.release_id = r.id
           WHERE r.name = %s AND u.status = 'succeeded'
           ORDER BY u.finished_at DESC LIMIT 1""",
        [name],
    ).fetchone()
    metrics, timings, finished, source_rows, fp = ok or ({}, {}, None, None, None)
    failure = conn.execute(
        """SELECT u.finished_at, u.error FROM dbanon.release r
           JOIN dbanon.run u ON u.release_id = r.id
           WHERE r.name = %s AND u.status = 'failed' AND (%s::timestamptz IS NULL
                 OR u.finished_at > %s::timestamptz)
           ORDER BY u.finished_at DESC LIMIT 1""",
        [name, finished, finished],
    ).fetchone()
    missing = _missing(conn, schema, objects)
    return {
        "release": name,
        "method": spec.method,
        "models": [m.name for m in from_specs(spec.models)],
        "source": spec.source,
        "table": f"{schema}.{objects[0]}" if objects else None,
        "objects": [f"{schema}.{o}" for o in objects],
        "options": spec.options,
        "grants": spec.grants,
        **{f: metrics.get(f) for f in COMMON_FIGURES},
        "source_rows": source_rows,
        "published_at": finished.isoformat() if finished else None,
        "source_fingerprint": fp,
        "timings": timings,
        "method_metrics": {k: v for k, v in metrics.items() if k not in COMMON_FIGURES},
        "last_failure": {"at": failure[0].isoformat(), "error": failure[1]} if failure else None,
        "warnings": [f"released relation {m} is missing" for m in missing],
    }


def releases(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Every release with its method, models, objects and latest run."""
    catalog.require_catalog(conn)
    rows = conn.execute(
        """SELECT r.name, r.spec, r.target_schema, r.objects, u.status, u.finished_at,
                  u.released_rows
           FROM dbanon.release r LEFT JOIN LATERAL (
               SELECT status, finished_at, released_rows FROM dbanon.run
               WHERE release_id = r.id ORDER BY started_at DESC, id DESC LIMIT 1) u ON true
           ORDER BY r.name"""
    ).fetchall()
    return [
        {
            "name": name,
            "method": spec.get("method"),
            "models": [m.name for m in from_specs(spec.get("models", []))],
            "objects": [f"{schema}.{o}" for o in objects],
            "last_status": status,
            "last_run_at": at.isoformat() if at else None,
            "rows": released,
            "missing": _missing(conn, schema, objects),
        }
        for name, spec, schema, objects, status, at, released in rows
    ]


def drop(conn: psycopg.Connection, name: str) -> list[str]:
    """Drop a release's relations (those that are still its own) and its catalog entry."""
    catalog.require_catalog(conn)
    row = _release_row(conn, name)
    if row is None:
        raise DbanonError(f"release {name!r} does not exist (see `dbanon releases`)")
    _, _, schema, objects = row
    dropped = []
    try:
        for obj in objects:
            mine = owned(conn, name, schema, obj)
            if mine is False:
                raise DbanonError(
                    f"{schema}.{obj} is not the relation release {name!r} published; "
                    "dbanon will not drop it"
                )
            if mine:
                _drop(conn, schema, obj)
                dropped.append(f"{schema}.{obj}")
        conn.execute("DELETE FROM dbanon.release WHERE name = %s", [name])
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return dropped
