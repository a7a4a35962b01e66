"""The publish/refresh lifecycle of a release.

1. resolve the spec and validate it against the live catalog (nothing is written before this);
2. stream the QI columns out with COPY into numpy arrays;
3. run the algorithm (pure code: arrays in, group ids out);
4. stream the ids back with COPY into a temporary staging table;
5. materialise the release with one statement: join source and ids, generalise per group, no
   row key, rows in random order;
6. verify the built release with the model's SQL check; a failure rolls everything back;
7. swap it in, re-apply grants, record the run; commit.
Steps 4-7 run in one transaction, so the previous release stays until the new one is proven.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from dbanon.algorithms.base import QIArrays
from dbanon.db import catalog
from dbanon.db.catalog import CATEGORICAL, Column, Relation
from dbanon.db.stream import copy_in_ids, copy_out
from dbanon.errors import DbanonError, ModelViolation
from dbanon.hierarchy import Hierarchy, HierarchyError
from dbanon.metrics.loss import loss_report
from dbanon.models import PrivacyModel, from_options
from dbanon.models.base import Target

DEFAULT_SCHEMA = "released"
ALGORITHMS = ("kmember", "mondrian", "anatomy", "fulldomain")
# The model options each algorithm can promise (and the verification gate then checks).
PROMISES = {
    "kmember": ("k", "p"),
    "mondrian": ("k", "l"),
    "anatomy": ("l",),
    "fulldomain": ("k", "l", "t", "alpha", "p"),
}
MODEL_OPTIONS = ("k", "l", "t", "alpha", "p")

# Range type of a numeric or date QI's released [min, max], by format_type() prefix.
RANGE_TYPES = {
    "smallint": "int4range",
    "integer": "int4range",
    "bigint": "int8range",
    "date": "daterange",
    "timestamp without time zone": "tsrange",
    "timestamp with time zone": "tstzrange",
}

Progress = Callable[[str], None]


@dataclass
class ReleaseSpec:
    """Everything that defines a release; stored in the catalog so `refresh` can rebuild it."""

    name: str
    source: str
    key: str
    qi: list[str]
    k: int | None = None
    sensitive: list[str] = field(default_factory=list)
    algorithm: str = "kmember"
    hierarchies: dict[str, str] = field(default_factory=dict)  # column -> hierarchy name
    target: str | None = None
    seed: int | None = None  # None: a fresh secret seed each run, recorded in the run
    seeding: str = "random"
    grants: list[str] = field(default_factory=list)
    l: float | None = None  # noqa: E741 - the papers' name
    l_kind: str = "distinct"
    c: float | None = None
    t: float | None = None
    alpha: float | None = None
    p: int | None = None
    as_view: bool = False
    max_suppression: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReleaseSpec:
        return cls(**data)

    def models(self) -> list[PrivacyModel]:
        """The privacy models this release promises, as checks."""
        return from_options(
            k=self.k, l=self.l, l_kind=self.l_kind, c=self.c, t=self.t, alpha=self.alpha, p=self.p
        )


@dataclass(frozen=True)
class Resolved:
    """A spec checked against the live database."""

    spec: ReleaseSpec
    source: Relation
    key: Column
    qi: list[Column]
    sensitive: list[Column]
    hierarchies: dict[str, Hierarchy]  # QI -> stored hierarchy (categorical QIs without: flat)
    models: list[PrivacyModel]
    target_schema: str
    target_name: str
    objects: list[str]  # the relations this publish creates in target_schema
    previous: list[str]  # the relations of the release as it is now
    rows: int
    seed: int

    def ident(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.target_schema, name)

    def is_categorical(self, col: Column) -> bool:
        return col.kind == CATEGORICAL or col.name in self.hierarchies

    @property
    def target(self) -> Target:
        """What the models check: the released QIs and the (first) sensitive column."""
        sensitive = self.sensitive[0].name if self.sensitive else None
        return Target(self.ident(self.target_name), [c.name for c in self.qi], sensitive)


@dataclass(frozen=True)
class Built:
    """A relation built aside under a temporary name, to be renamed by the swap."""

    name: str  # final name in the target schema
    kind: str  # 'table' or 'view'

    @property
    def build_name(self) -> str:
        return f"dbanon_build_{self.name}"[:63]


@dataclass(frozen=True)
class PublishResult:
    release: str
    table: str
    rows: int
    classes: int
    min_class_size: int
    gcp: float
    seconds: float
    metrics: dict[str, Any]
    timings: dict[str, float]
    objects: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "table": self.table,
            "rows": self.rows,
            "classes": self.classes,
            "min_class_size": self.min_class_size,
            "gcp": self.gcp,
            "seconds": self.seconds,
            "objects": self.objects,
        }


# --- 1. resolve and validate --------------------------------------------------------------------


def _check_promises(spec: ReleaseSpec) -> None:
    """The algorithm must be able to promise the models asked for."""
    if spec.algorithm not in ALGORITHMS:
        raise DbanonError(
            f"unknown algorithm {spec.algorithm!r} (choose from {', '.join(ALGORITHMS)})"
        )
    given = [o for o in MODEL_OPTIONS if getattr(spec, o) is not None]
    promised = PROMISES[spec.algorithm]
    for option in given:
        if option not in promised:
            able = [a for a, opts in PROMISES.items() if option in opts]
            raise DbanonError(
                f"--algorithm {spec.algorithm} cannot promise --{option}; "
                f"use --algorithm {' or '.join(able)}"
            )
    if spec.algorithm == "anatomy":
        if spec.l is None:
            raise DbanonError("--algorithm anatomy needs --l")
        if spec.l_kind not in ("distinct", "frequency"):
            raise DbanonError(
                "--algorithm anatomy promises frequency l-diversity (every value at most 1/l of "
                f"its group), not --l-kind {spec.l_kind}"
            )
        if spec.l != int(spec.l):
            raise DbanonError(f"--algorithm anatomy needs a whole --l, got {spec.l}")
    elif spec.k is None:
        raise DbanonError(f"--algorithm {spec.algorithm} needs --k")
    if spec.algorithm == "mondrian" and spec.l_kind not in ("distinct", "entropy", "recursive"):
        raise DbanonError(f"--algorithm mondrian cannot promise --l-kind {spec.l_kind}")
    if spec.as_view and spec.algorithm != "fulldomain":
        raise DbanonError("only --algorithm fulldomain can publish a live view (--as view)")
    if spec.max_suppression and spec.algorithm != "fulldomain":
        raise DbanonError("--max-suppression applies to --algorithm fulldomain only")
    if not 0 <= spec.max_suppression < 1:
        raise DbanonError(f"--max-suppression must be in [0, 1), got {spec.max_suppression}")
    needs_sensitive = [o for o in ("l", "t", "alpha", "p") if getattr(spec, o) is not None]
    if needs_sensitive and len(spec.sensitive) != 1:
        raise DbanonError(
            f"--{needs_sensitive[0]} needs exactly one --sensitive column, "
            f"got {len(spec.sensitive)}"
        )


def resolve(conn: psycopg.Connection, spec: ReleaseSpec) -> Resolved:
    """Check the spec against the live database; raise DbanonError naming what is wrong."""
    catalog.require_catalog(conn)
    if not spec.name.strip():
        raise DbanonError("a release needs a name")
    _check_promises(spec)
    if spec.k is not None and spec.k < 2:
        raise DbanonError(f"k must be at least 2, got {spec.k}")
    models = spec.models()
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
    for col, nulls in zip(qi, qi_nulls, strict=True):
        if nulls:
            raise DbanonError(
                f"quasi-identifier {col.name!r} of {source} is NULL in {nulls} rows; "
                "fill or filter them first"
            )
    if spec.k is not None and spec.k > rows:
        raise DbanonError(f"k={spec.k} is larger than the {rows} rows of {source}")
    if spec.algorithm == "anatomy":
        from dbanon.setlogic.anatomy import check_eligible

        check_eligible(conn, source, sensitive[0], int(spec.l))  # type: ignore[arg-type]

    hierarchies: dict[str, Hierarchy] = {}
    for column, hname in spec.hierarchies.items():
        if column not in spec.qi:
            raise DbanonError(f"hierarchy given for {column!r}, which is not a quasi-identifier")
        hierarchies[column] = catalog.load_hierarchy(conn, hname)

    schema, name = catalog.split_name(spec.target or f"{DEFAULT_SCHEMA}.{spec.name}")
    schema = schema or DEFAULT_SCHEMA
    if schema == source.schema:
        raise DbanonError(
            f"the release must go to its own schema, not the source's ({schema!r}): "
            "consumers get access to the whole release schema"
        )
    objects = [f"{name}_qit", f"{name}_st"] if spec.algorithm == "anatomy" else [name]
    mine = conn.execute(
        "SELECT objects FROM dbanon.release WHERE name = %s AND target_schema = %s",
        [spec.name, schema],
    ).fetchone()
    previous = list(mine[0]) if mine else []
    for obj in objects:
        owner = conn.execute(
            "SELECT name FROM dbanon.release WHERE target_schema = %s AND %s = ANY (objects)",
            [schema, obj],
        ).fetchone()
        if owner and owner[0] != spec.name:
            raise DbanonError(f"{schema}.{obj} is the target of release {owner[0]!r}")
        if not owner and catalog.find_relation(conn, f"{schema}.{obj}"):
            raise DbanonError(f"{schema}.{obj} exists and is not a dbanon release; choose --target")
    for role in spec.grants:
        if not catalog.role_exists(conn, role):
            raise DbanonError(f"role {role!r} does not exist")
    seed = spec.seed if spec.seed is not None else secrets.randbelow(2**31)
    return Resolved(
        spec, source, key, qi, sensitive, hierarchies, models, schema, name, objects, previous,
        rows, seed,
    )  # fmt: skip


# --- 2. extract ---------------------------------------------------------------------------------


def extract(conn: psycopg.Connection, r: Resolved) -> tuple[list[str], QIArrays, np.ndarray | None]:
    """Stream key, QI (and sensitive) columns out with COPY and encode them for the algorithms.

    The sensitive column comes as integer codes, for algorithms that constrain it."""
    exprs: list[sql.Composable] = [sql.SQL("{}::text").format(r.key.ident)]
    types = ["text"]
    for col in r.qi:
        if r.is_categorical(col):
            exprs.append(sql.SQL("{}::text").format(col.ident))
            types.append("text")
        elif col.kind == catalog.DATE:
            exprs.append(sql.SQL("extract(epoch FROM {})::float8").format(col.ident))
            types.append("float8")
        else:
            exprs.append(sql.SQL("{}::float8").format(col.ident))
            types.append("float8")
    with_sensitive = bool(r.sensitive) and (r.spec.l is not None or r.spec.p is not None)
    if with_sensitive:
        exprs.append(sql.SQL("{}::text").format(r.sensitive[0].ident))
        types.append("text")
    query = sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(exprs), r.source.ident)
    keys, *values = copy_out(conn, query, types)
    codes_of_sensitive = None
    if with_sensitive:
        codes_of_sensitive = np.unique(
            np.asarray(values.pop(), dtype=object).astype(str), return_inverse=True
        )[1].astype(np.int32)
    numeric, categorical = [], []
    for col, vals in zip(r.qi, values, strict=True):
        if not r.is_categorical(col):
            numeric.append(np.asarray(vals, dtype=np.float64))
            continue
        h = r.hierarchies.get(col.name) or Hierarchy.flat(col.name, vals)  # type: ignore[arg-type]
        lookup = h.leaves
        try:
            codes = np.fromiter((lookup[v] for v in vals), dtype=np.int32, count=len(vals))
        except KeyError:
            missing = next(v for v in vals if v not in lookup)
            raise DbanonError(
                f"value {missing!r} of column {col.name!r} is not in hierarchy {h.name!r}"
            ) from None
        categorical.append((codes, h))
    qi = QIArrays.build(numeric, categorical, n=len(keys))  # type: ignore[arg-type]
    return keys, qi, codes_of_sensitive


# --- 3. cluster ---------------------------------------------------------------------------------


def cluster(r: Resolved, qi: QIArrays, sensitive: np.ndarray | None = None) -> np.ndarray:
    """Group ids from the array algorithm the spec names (ValueError -> one-line error)."""
    spec = r.spec
    try:
        if spec.algorithm == "kmember":
            from dbanon.algorithms.kmember import kmember

            return kmember(
                qi,
                spec.k,
                seed=r.seed,
                seeding=spec.seeding,  # type: ignore[arg-type]
                sensitive=sensitive,
                p=spec.p or 1,
            )
        from dbanon.algorithms.mondrian import mondrian

        return mondrian(
            qi,
            spec.k,
            sensitive=sensitive,
            l=int(spec.l or 1),  # type: ignore[arg-type]
            l_kind=spec.l_kind,
            c=spec.c or 1.0,
        )
    except ValueError as e:
        raise DbanonError(f"{spec.algorithm} cannot publish {r.source}: {e}") from None


# --- 5. materialise -----------------------------------------------------------------------------


def generalised(r: Resolved, col: Column) -> sql.Composable:
    """Aggregate expression that generalises a QI column over one group."""
    if col.name in r.hierarchies:
        return sql.SQL("dbanon.lca({}, array_agg(DISTINCT {}::text))").format(
            sql.Literal(r.hierarchies[col.name].name), col.ident
        )
    if r.is_categorical(col):  # flat hierarchy: the value if the group agrees, else '*'
        return sql.SQL(
            "CASE WHEN min({c}::text) = max({c}::text) THEN min({c}::text) ELSE '*' END"
        ).format(c=col.ident)
    rng = RANGE_TYPES.get(col.type)
    if rng is None:
        return sql.SQL("numrange(min({c})::numeric, max({c})::numeric, '[]')").format(c=col.ident)
    return sql.SQL("{rng}(min({c}), max({c}), '[]')").format(rng=sql.SQL(rng), c=col.ident)


def materialise(
    conn: psycopg.Connection, r: Resolved, stage: sql.Identifier, build: sql.Identifier
) -> None:
    """CREATE the release table from source + staged group ids, in one statement."""
    qi_names = [sql.Identifier(c.name) for c in r.qi]
    conn.execute(
        sql.SQL(
            """CREATE TABLE {build} AS
               WITH rows AS (
                   SELECT st.gid, {src_cols} FROM {src} s JOIN {stage} st ON st.key = s.{key}::text
               ), groups AS (
                   SELECT gid, {gen} FROM rows GROUP BY gid
               )
               SELECT {out} FROM rows JOIN groups g USING (gid) ORDER BY random()"""
        ).format(
            build=build,
            src_cols=sql.SQL(", ").join(
                sql.SQL("s.{}").format(c.ident) for c in [*r.qi, *r.sensitive]
            ),
            src=r.source.ident,
            stage=stage,
            key=r.key.ident,
            gen=sql.SQL(", ").join(
                sql.SQL("{} AS {}").format(generalised(r, c), c.ident) for c in r.qi
            ),
            out=sql.SQL(", ").join(
                [sql.SQL("g.{}").format(i) for i in qi_names]
                + [sql.SQL("rows.{}").format(c.ident) for c in r.sensitive]
            ),
        )
    )


# --- build, per kind of algorithm ----------------------------------------------------------------


def build_grouped(
    conn: psycopg.Connection, r: Resolved, say: Progress, lap: Callable[[str], None]
) -> tuple[list[Built], dict[str, Any]]:
    """Array algorithms: COPY out, group ids in Python, COPY back, generalise per group."""
    say(f"streaming {r.rows} rows of {r.source} out with COPY")
    keys, qi, sensitive = extract(conn, r)
    lap("extract")
    say(f"clustering with {r.spec.algorithm} (k={r.spec.k})")
    gid = cluster(r, qi, sensitive)
    loss = loss_report(qi, gid)
    lap("cluster")
    say("materialising the release")
    stage = sql.Identifier("dbanon_stage")
    conn.execute(sql.SQL("CREATE TEMP TABLE {} (key text, gid int4) ON COMMIT DROP").format(stage))
    copy_in_ids(conn, stage, keys, gid)
    conn.execute(sql.SQL("ANALYZE {}").format(stage))
    built = Built(r.target_name, "table")
    materialise(conn, r, stage, r.ident(built.build_name))
    lap("materialise")
    return [built], {**loss.as_dict(), "seed": r.seed}


def build_fulldomain(
    conn: psycopg.Connection, r: Resolved, say: Progress, lap: Callable[[str], None]
) -> tuple[list[Built], dict[str, Any]]:
    """Full-domain generalisation: a lattice search over GROUP BY counts, then one SELECT."""
    from dbanon.setlogic.fulldomain import release_select, search

    say(f"searching the generalisation lattice of {len(r.qi)} QIs")
    sensitive = r.sensitive[0].name if r.sensitive else None
    found = search(conn, r.source, r.qi, r.hierarchies, r.models, sensitive, r.spec.max_suppression)
    lap("search")
    select = release_select(
        r.source,
        r.qi,
        found.hierarchies,
        found.levels,
        [c.name for c in r.sensitive],
        r.models,
    )
    built = Built(r.target_name, "view" if r.spec.as_view else "table")
    # security_barrier: a consumer's own (leaky) WHERE functions run only on rows the view
    # shows, never on rows of the classes it suppresses.
    create = (
        "CREATE VIEW {} WITH (security_barrier) AS {}"
        if r.spec.as_view
        else "CREATE TABLE {} AS {}"
    )
    conn.execute(sql.SQL(create).format(r.ident(built.build_name), select))
    lap("materialise")
    return [built], {"gcp": found.loss, **found.summary()}


def build_anatomy(
    conn: psycopg.Connection, r: Resolved, say: Progress, lap: Callable[[str], None]
) -> tuple[list[Built], dict[str, Any]]:
    """Anatomy: bucket ids from a window function; QIT and ST tables."""
    from dbanon.setlogic import anatomy

    say(f"bucketing {r.rows} rows for l={int(r.spec.l)}")  # type: ignore[arg-type]
    qit, st = Built(r.objects[0], "table"), Built(r.objects[1], "table")
    result = anatomy.build_anatomy(
        conn,
        r.source,
        r.qi,
        r.sensitive[0],
        int(r.spec.l),  # type: ignore[arg-type]
        r.ident(qit.build_name),
        r.ident(st.build_name),
        r.seed,
    )
    lap("materialise")
    # The QIs are released unchanged: no generalisation loss, the loss is in the association.
    return [qit, st], {
        "gcp": 0.0,
        "groups": result.groups,
        "residual_rows": result.residual_rows,
        "seed": r.seed,
    }


BUILDERS = {
    "kmember": build_grouped,
    "mondrian": build_grouped,
    "fulldomain": build_fulldomain,
    "anatomy": build_anatomy,
}


# --- 6. verify ----------------------------------------------------------------------------------


def verify(conn: psycopg.Connection, r: Resolved, built: list[Built]) -> dict[str, Any]:
    """The independent SQL check of the promised model(s) on the built relations; returns the
    class figures of the release."""
    if r.spec.algorithm == "anatomy":
        from dbanon.setlogic.anatomy import GROUP_ID, verify_anatomy

        qit, st = (r.ident(b.build_name) for b in built)
        verify_anatomy(conn, qit, st, int(r.spec.l))  # type: ignore[arg-type]
        rows, classes, smallest = conn.execute(
            sql.SQL(
                "SELECT sum(n), count(*), min(n) FROM (SELECT count(*) AS n FROM {} GROUP BY {}) g"
            ).format(qit, sql.Identifier(GROUP_ID))
        ).fetchone()
        return {"rows": int(rows), "classes": int(classes), "min_class_size": int(smallest)}
    target = replace(r.target, relation=r.ident(built[0].build_name))
    figures: dict[str, Any] = {}
    for model in r.models:
        result = model.check(conn, target)
        if not result.holds:
            raise ModelViolation(
                f"release {r.spec.name!r} failed its check of {model.name} ({result.figures}, "
                f"worst class: {result.worst_class}); the previous release is unchanged"
            )
        figures.update(result.figures)
    rows = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(target.relation)).fetchone()[0]
    return {
        "rows": int(rows),
        "classes": figures.get("classes", 0),
        "min_class_size": figures.get("min_class_size", 0),
    }


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
    conn: psycopg.Connection, spec: ReleaseSpec, progress: Progress | None = None
) -> PublishResult:
    """Build, verify and swap in a release; on any error the database is left as it was."""
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
        r = resolve(conn, spec)
        lap("validate")
        conn.execute(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(r.target_schema))
        )
        for obj in r.objects:
            _drop(conn, r.target_schema, Built(obj, "table").build_name)
        built, metrics = BUILDERS[spec.algorithm](conn, r, say, lap)
        say("verifying the release")
        figures = verify(conn, r, built)
        lap("verify")
        swap(conn, r, built)
        lap("swap")
        seconds = round(time.perf_counter() - started, 3)
        metrics = {**metrics, **figures, "seconds": seconds}
        record(conn, r, metrics, timings, fingerprint(conn, r.source))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return PublishResult(
        release=spec.name,
        table=f"{r.target_schema}.{r.target_name}",
        rows=figures["rows"],
        classes=figures["classes"],
        min_class_size=figures["min_class_size"],
        gcp=metrics["gcp"],
        seconds=seconds,
        metrics=metrics,
        timings=timings,
        objects=[f"{r.target_schema}.{o}" for o in r.objects],
    )


def _drop(conn: psycopg.Connection, schema: str, name: str) -> None:
    """Drop a table or view if it exists, whichever it is."""
    rel = catalog.find_relation(conn, f"{schema}.{name}")
    if rel is not None:
        kind = "VIEW" if rel.kind == "v" else "TABLE"
        conn.execute(sql.SQL("DROP {} {}").format(sql.SQL(kind), rel.ident))


def swap(conn: psycopg.Connection, r: Resolved, built: list[Built]) -> None:
    """Replace the previous release by the built one and grant consumers read access."""
    for name in dict.fromkeys([*r.previous, *r.objects]):
        _drop(conn, r.target_schema, name)
    for b in built:
        kind = sql.SQL("VIEW" if b.kind == "view" else "TABLE")
        conn.execute(
            sql.SQL("ALTER {} {} RENAME TO {}").format(
                kind, r.ident(b.build_name), sql.Identifier(b.name)
            )
        )
        promise = ", ".join(m.name for m in r.models)
        conn.execute(
            sql.SQL("COMMENT ON {} {} IS {}").format(
                kind,
                r.ident(b.name),
                sql.Literal(f"dbanon release {r.spec.name!r}: {r.spec.algorithm}; {promise}"),
            )
        )
        for role in r.spec.grants:
            conn.execute(
                sql.SQL("GRANT SELECT ON {} TO {}").format(r.ident(b.name), sql.Identifier(role))
            )
    for role in r.spec.grants:
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
    release_id = conn.execute(
        """INSERT INTO dbanon.release (name, spec, target_schema, target_name, objects)
           VALUES (%s, %s::jsonb, %s, %s, %s)
           ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, updated_at = now(),
               target_schema = EXCLUDED.target_schema, target_name = EXCLUDED.target_name,
               objects = EXCLUDED.objects
           RETURNING id""",
        [r.spec.name, r.spec.to_json(), r.target_schema, r.target_name, r.objects],
    ).fetchone()[0]
    conn.execute(
        """INSERT INTO dbanon.run (release_id, status, started_at, finished_at, source_rows,
               released_rows, metrics, timings, source_fingerprint)
           VALUES (%s, 'succeeded', now(), clock_timestamp(), %s, %s, %s::jsonb, %s::jsonb, %s)""",
        [
            release_id,
            r.rows,
            metrics["rows"],
            json.dumps(metrics),
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
        raise DbanonError(f"release {name!r} does not exist")
    return ReleaseSpec.from_dict(row[0])


def refresh(conn: psycopg.Connection, name: str, progress: Progress | None = None) -> PublishResult:
    """Rebuild a release from its stored spec against the source as it is now."""
    spec = load_spec(conn, name)
    try:
        return publish(conn, spec, progress)
    except (DbanonError, HierarchyError) as e:
        record_failure(conn, name, str(e))
        raise


def report(conn: psycopg.Connection, name: str) -> dict[str, Any]:
    """The spec and the figures of a release's latest successful run."""
    spec = load_spec(conn, name)
    row = conn.execute(
        """SELECT r.target_schema || '.' || r.target_name, u.metrics, u.timings, u.finished_at,
                  u.source_rows, u.source_fingerprint
           FROM dbanon.release r JOIN dbanon.run u ON u.release_id = r.id
           WHERE r.name = %s AND u.status = 'succeeded'
           ORDER BY u.finished_at DESC LIMIT 1""",
        [name],
    ).fetchone()
    table, metrics, timings, finished, rows, fp = row
    return {
        "release": name,
        "table": table,
        "algorithm": spec.algorithm,
        "models": [m.name for m in spec.models()],
        "k": spec.k,
        "source_rows": rows,
        **metrics,
        "timings": timings,
        "published_at": finished.isoformat(),
        "source_fingerprint": fp,
    }
