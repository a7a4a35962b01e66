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
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
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
from dbanon.models import KAnonymity, PrivacyModel
from dbanon.models.base import Target

DEFAULT_SCHEMA = "released"
ALGORITHMS = ("kmember",)

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
    k: int
    sensitive: list[str] = field(default_factory=list)
    algorithm: str = "kmember"
    hierarchies: dict[str, str] = field(default_factory=dict)  # column -> hierarchy name
    target: str | None = None
    seed: int = 0
    seeding: str = "random"
    grants: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReleaseSpec:
        return cls(**data)


@dataclass(frozen=True)
class Resolved:
    """A spec checked against the live database."""

    spec: ReleaseSpec
    source: Relation
    key: Column
    qi: list[Column]
    sensitive: list[Column]
    hierarchies: dict[str, Hierarchy]  # categorical QI -> stored hierarchy (flat ones absent)
    target_schema: str
    target_name: str
    rows: int

    @property
    def target_ident(self) -> sql.Identifier:
        return sql.Identifier(self.target_schema, self.target_name)

    def is_categorical(self, col: Column) -> bool:
        return col.kind == CATEGORICAL or col.name in self.hierarchies


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

    def summary(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "table": self.table,
            "rows": self.rows,
            "classes": self.classes,
            "min_class_size": self.min_class_size,
            "gcp": self.gcp,
            "seconds": self.seconds,
        }


# --- 1. resolve and validate --------------------------------------------------------------------


def resolve(conn: psycopg.Connection, spec: ReleaseSpec) -> Resolved:
    """Check the spec against the live database; raise DbanonError naming what is wrong."""
    catalog.require_catalog(conn)
    if not spec.name.strip():
        raise DbanonError("a release needs a name")
    if spec.algorithm not in ALGORITHMS:
        raise DbanonError(
            f"unknown algorithm {spec.algorithm!r} (choose from {', '.join(ALGORITHMS)})"
        )
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
    if spec.k < 2:
        raise DbanonError(f"k must be at least 2, got {spec.k}")
    if spec.k > rows:
        raise DbanonError(f"k={spec.k} is larger than the {rows} rows of {source}")

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
    owner = conn.execute(
        "SELECT name FROM dbanon.release WHERE target_schema = %s AND target_name = %s",
        [schema, name],
    ).fetchone()
    existing = catalog.find_relation(conn, f"{schema}.{name}") if schema else None
    if owner and owner[0] != spec.name:
        raise DbanonError(f"{schema}.{name} is the target of release {owner[0]!r}")
    if existing and not owner:
        raise DbanonError(f"{schema}.{name} exists and is not a dbanon release; choose --target")
    for role in spec.grants:
        if not catalog.role_exists(conn, role):
            raise DbanonError(f"role {role!r} does not exist")
    return Resolved(spec, source, key, qi, sensitive, hierarchies, schema, name, rows)


# --- 2. extract ---------------------------------------------------------------------------------


def extract(conn: psycopg.Connection, r: Resolved) -> tuple[list[str], QIArrays]:
    """Stream the key and QI columns out with COPY and encode them for the algorithms."""
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
    query = sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(exprs), r.source.ident)
    keys, *values = copy_out(conn, query, types)
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
    return keys, QIArrays.build(numeric, categorical, n=len(keys))  # type: ignore[arg-type]


# --- 3. cluster ---------------------------------------------------------------------------------


def cluster(r: Resolved, qi: QIArrays) -> np.ndarray:
    spec = r.spec
    if spec.algorithm == "kmember":
        from dbanon.algorithms.kmember import kmember

        return kmember(qi, spec.k, seed=spec.seed, seeding=spec.seeding)
    raise DbanonError(f"unknown algorithm {spec.algorithm!r}")


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


def models_for(spec: ReleaseSpec) -> list[PrivacyModel]:
    return [KAnonymity(spec.k)]


def verify(conn: psycopg.Connection, r: Resolved, build: sql.Identifier) -> None:
    """The independent SQL check of the promised model on the built table."""
    target = Target(
        build, [c.name for c in r.qi], r.spec.sensitive[0] if r.spec.sensitive else None
    )
    for model in models_for(r.spec):
        result = model.check(conn, target)
        if not result.holds:
            raise ModelViolation(
                f"release {r.spec.name!r} failed its check of {model.name} ({result.figures}, "
                f"worst class: {result.worst_class}); the previous release is unchanged"
            )


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

    def lap(name: str, since: float) -> float:
        now = time.perf_counter()
        timings[name] = round(now - since, 4)
        return now

    try:
        say("validating the spec against the database")
        r = resolve(conn, spec)
        t = lap("validate", started)
        say(f"streaming {r.rows} rows of {r.source} out with COPY")
        keys, qi = extract(conn, r)
        t = lap("extract", t)
        say(f"clustering with {spec.algorithm} (k={spec.k})")
        gid = cluster(r, qi)
        report = loss_report(qi, gid)
        t = lap("cluster", t)
        say("materialising and verifying the release")
        stage = sql.Identifier("dbanon_stage")
        conn.execute(
            sql.SQL("CREATE TEMP TABLE {} (key text, gid int4) ON COMMIT DROP").format(stage)
        )
        copy_in_ids(conn, stage, keys, gid)
        conn.execute(sql.SQL("ANALYZE {}").format(stage))
        conn.execute(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(r.target_schema))
        )
        build = sql.Identifier(r.target_schema, f"dbanon_build_{r.target_name}"[:63])
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(build))
        materialise(conn, r, stage, build)
        t = lap("materialise", t)
        verify(conn, r, build)
        t = lap("verify", t)
        swap(conn, r, build)
        lap("swap", t)
        seconds = round(time.perf_counter() - started, 3)
        metrics = {**report.as_dict(), "seconds": seconds}
        record(conn, r, metrics, timings, fingerprint(conn, r.source))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return PublishResult(
        release=spec.name,
        table=f"{r.target_schema}.{r.target_name}",
        rows=len(gid),
        classes=report.classes,
        min_class_size=report.min_class_size,
        gcp=report.ncp,
        seconds=seconds,
        metrics=metrics,
        timings=timings,
    )


def swap(conn: psycopg.Connection, r: Resolved, build: sql.Identifier) -> None:
    """Replace the previous release by the built one and grant consumers read access."""
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(r.target_ident))
    conn.execute(
        sql.SQL("ALTER TABLE {} RENAME TO {}").format(build, sql.Identifier(r.target_name))
    )
    conn.execute(
        sql.SQL("COMMENT ON TABLE {} IS {}").format(
            r.target_ident,
            sql.Literal(f"dbanon release {r.spec.name!r}: {r.spec.algorithm}, k={r.spec.k}"),
        )
    )
    for role in r.spec.grants:
        conn.execute(
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                sql.Identifier(r.target_schema), sql.Identifier(role)
            )
        )
        conn.execute(
            sql.SQL("GRANT SELECT ON {} TO {}").format(r.target_ident, sql.Identifier(role))
        )


def record(
    conn: psycopg.Connection,
    r: Resolved,
    metrics: dict[str, Any],
    timings: dict[str, float],
    source_fingerprint: str,
) -> None:
    release_id = conn.execute(
        """INSERT INTO dbanon.release (name, spec, target_schema, target_name)
           VALUES (%s, %s::jsonb, %s, %s)
           ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, updated_at = now(),
               target_schema = EXCLUDED.target_schema, target_name = EXCLUDED.target_name
           RETURNING id""",
        [r.spec.name, r.spec.to_json(), r.target_schema, r.target_name],
    ).fetchone()[0]
    conn.execute(
        """INSERT INTO dbanon.run (release_id, status, started_at, finished_at, source_rows,
               released_rows, metrics, timings, source_fingerprint)
           VALUES (%s, 'succeeded', now(), clock_timestamp(), %s, %s, %s::jsonb, %s::jsonb, %s)""",
        [release_id, r.rows, r.rows, json.dumps(metrics), json.dumps(timings), source_fingerprint],
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
        "k": spec.k,
        "rows": rows,
        **metrics,
        "timings": timings,
        "published_at": finished.isoformat(),
        "source_fingerprint": fp,
    }
