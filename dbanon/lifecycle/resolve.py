"""Step 1 of a publish: the spec checked against the live database and the method's own refusals
(nothing is written before this), giving the Resolved a method builds from."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql

from dbanon import methods
from dbanon.core.hierarchy import Hierarchy
from dbanon.core.spec import ReleaseSpec
from dbanon.db import catalog
from dbanon.db import source as source_check
from dbanon.db.catalog import STORE_SCHEMA, Column, Relation
from dbanon.errors import SHOWN_OFFENDERS, DbanonError, quote_ident, quote_name
from dbanon.lifecycle import identifying
from dbanon.lifecycle.catalogue import owned, release_row
from dbanon.methods.base import Method, Resolved
from dbanon.models import PrivacyModel
from dbanon.models.specs import MODEL_KINDS, from_specs, kind_of

DEFAULT_SCHEMA = "released"


# Schemas a release never goes to: the catalog, everybody's, the system's.
RESERVED_SCHEMAS = ("dbanon", STORE_SCHEMA, "public", "information_schema")


Progress = Callable[[str], None]


def _fits_identifiers(conn: psycopg.Connection, release: str, names: Sequence[str]) -> None:
    """Refuse a schema or relation name PostgreSQL would truncate (past max_identifier_length
    bytes, 63 unless the server was built otherwise): it would create the relation under the
    cut name while the catalog records the whole one, and the two would disagree."""
    most = int(conn.execute("SELECT current_setting('max_identifier_length')").fetchone()[0])
    for n in names:
        size = len(n.encode())
        if size > most:
            raise DbanonError(
                f"release {quote_name(release)}: the name {catalog.quote_ident(n)} is {size} "
                "bytes, and "
                f"PostgreSQL keeps {most} of a name; choose a shorter release name (or --target)"
            )


def k_too_small(k: object) -> str:
    """What a publish says of --k under 2 (0 and 1 alike), as of --l and --p: a class of one
    row hides nobody. (`dbanon check --k 1` stays allowed: it audits, it promises nothing.)"""
    return f"--k must be at least 2, got {k}: a class of one row hides nobody"


def resolve_models(spec: ReleaseSpec, method: Method) -> list[PrivacyModel]:
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
            raise DbanonError(k_too_small(m.k))  # type: ignore[attr-defined]
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


def resolve_options(spec: ReleaseSpec, method: Method) -> dict[str, Any]:
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
    # A table's distinct keys in a scan of their own: beside the other counts, the DISTINCT
    # kept the scan's plan serial (0.32 s at a million rows, where the two scans take 0.08 s
    # and 0.07 s, the second in a parallel plan). A view or foreign table is read once.
    distinct = (
        sql.SQL("count({})").format(key.ident)  # NULLs are counted (and refused) apart
        if _unique_index(conn, source, key)
        else sql.SQL("(SELECT count(DISTINCT {}) FROM {})").format(key.ident, source.ident)
        if source.kind in ("r", "p", "m")
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
        raise DbanonError(f"key column {quote_ident(key.name)} of {source} has {null_keys} NULL "
            "values")
    if distinct_keys != rows:
        raise DbanonError(
            f"key column {quote_ident(key.name)} of {source} is not unique: "
            f"{rows - distinct_keys} duplicate values in {rows} rows"
        )
    nulls = [(c.name, n) for c, n in zip(qi, qi_nulls, strict=True) if n]
    if nulls:
        named = ", ".join(f"{quote_ident(c)} in {n} rows" for c, n in nulls[:SHOWN_OFFENDERS])
        more = f", ... ({len(nulls)} columns in all)" if len(nulls) > SHOWN_OFFENDERS else ""
        raise DbanonError(
            f"quasi-identifiers of {source} are NULL: {named}{more}; fill or filter them first"
        )
    return int(rows)


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
            raise DbanonError(f"{catalog.qualified(schema, clash)} is the target of release "
                f"{quote_name(other)}")
    for s, obj in previous:  # the release's own objects: gone is fine, replaced is not
        if owned(conn, spec.name, s, obj) is False:
            raise DbanonError(
                f"{catalog.qualified(s, obj)} is not the relation release {quote_name(spec.name)} "
                "published (it was replaced "
                "since); dbanon will not drop it: rename it, or drop it yourself"
            )
    for obj in objects:
        if (schema, obj) not in previous and owned(conn, spec.name, schema, obj) is not None:
            raise DbanonError(f"{catalog.qualified(schema, obj)} exists and is not a dbanon "
                "release; choose --target")


def refuse_existing(conn: psycopg.Connection, name: str) -> None:
    if release_row(conn, name):
        raise DbanonError(
            f"release {quote_name(name)} exists: `dbanon refresh {name}` rebuilds it as it is, "
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
    existing = release_row(conn, spec.name)
    if not replace:
        refuse_existing(conn, spec.name)
    method = methods.get(spec.method)
    options = resolve_options(spec, method)
    models = resolve_models(spec, method)
    if not spec.qi:
        raise DbanonError("at least one quasi-identifier (--qi) is needed")
    source = catalog.relation(conn, spec.source)
    cols = catalog.columns(conn, source)
    named = [spec.key, *spec.qi, *spec.sensitive]
    twice = sorted({c for c in named if named.count(c) > 1})
    if twice:
        raise DbanonError(f"column {quote_ident(twice[0])} is named twice among key, QI and "
            "sensitive")
    key = catalog.require_columns(cols, source, [spec.key])[0]
    qi = catalog.require_columns(cols, source, spec.qi)
    sensitive = catalog.require_columns(cols, source, spec.sensitive)
    keep = identifying.resolve_keep(spec, method, cols, source)
    changed = [
        f"{quote_ident(c.name)} was {spec.columns[c.name]}, is {c.type} now"
        for c in [key, *qi, *sensitive]
        if c.name in spec.columns and spec.columns[c.name] != c.type
    ]
    if changed:
        raise DbanonError(
            f"columns of {source} changed type since release {quote_name(spec.name)} was "
            f"published: {'; '.join(changed)}; publish --replace to redefine the release"
        )
    source_check.require_stable_key(conn, source, key)  # a view's random() key: before any scan
    rows = _check_rows(conn, source, key, qi)
    ks = [m.k for m in models if isinstance(getattr(m, "k", None), int)]  # type: ignore[attr-defined]
    if ks and max(ks) > rows:
        raise DbanonError(f"k={max(ks)} is larger than the {rows} rows of {source}")

    hierarchies: dict[str, Hierarchy] = {}
    for column, hname in spec.hierarchies.items():
        if column not in spec.qi:
            raise DbanonError(f"hierarchy given for {quote_ident(column)}, which is not a "
                "quasi-identifier")
        hierarchies[column] = catalog.load_hierarchy(conn, hname)
    if method.finite_qis:  # QIs it measures: numeric and date ones without a hierarchy
        measured = [c for c in qi if c.kind != catalog.CATEGORICAL and c.name not in hierarchies]
        source_check.require_finite(conn, source, measured, f"--algorithm {method.name}")

    schema, name = catalog.parse_target(spec.target or f"{DEFAULT_SCHEMA}.{spec.name}")
    schema = schema or DEFAULT_SCHEMA
    if schema in RESERVED_SCHEMAS or schema.startswith("pg_"):
        raise DbanonError(
            f"a release cannot go to schema {quote_ident(schema)}: consumers are granted USAGE on "
            "the release schema; choose a schema of its own"
        )
    if schema == source.schema:
        raise DbanonError(
            f"the release must go to its own schema, not the source's ({quote_ident(schema)}): "
            "consumers get access to the whole release schema"
        )
    objects = method.release_objects(conn, spec, name)
    _fits_identifiers(conn, spec.name, [schema, *objects])
    previous: list[tuple[str, str]] = []
    before: list[str] = []
    if existing:
        previous = [(existing[2], o) for o in existing[3]]
        before = list(existing[1].get("grants", []))
    _check_target(conn, spec, schema, name, objects, previous)
    unknown = [g for g in revoke if g not in before and g not in spec.grants]
    if unknown:
        raise DbanonError(
            f"--revoke {quote_ident(unknown[0])}: release {quote_name(spec.name)} is not "
            "granted to it"
        )
    grants = [g for g in dict.fromkeys([*before, *spec.grants]) if g not in revoke]
    for role in grants:
        catalog.require_role(conn, role)
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


# Base types whose values the fingerprint hashes with their type's own function (kind `c`):
# common ones, whose default hash opclass has an extended function on every server dbanon
# runs on (looked up in the catalog: names differ across versions, date's for one).
_COLUMN_HASHED = frozenset({
    "smallint", "integer", "bigint", "text", "character varying", "character", "numeric",
    "real", "double precision", "date", "timestamp without time zone",
    "timestamp with time zone", "uuid",
})  # fmt: skip


def _column_hashes(conn: psycopg.Connection, rel: Relation,
                   cols: Sequence[Column]) -> sql.Composable | None:  # fmt: skip
    """Each row's hash as the XOR of its columns' own hashes (their type's default hash
    opclass's extended function, where it takes the type itself: before PostgreSQL 17 date's
    is int4's; varchar's is text's), each column with its own seed (its place), NULL as 0;
    None when a column is of another type or has none."""
    from dbanon.core.generalise import base_type

    if not cols or any(base_type(c) not in _COLUMN_HASHED for c in cols):
        return None
    found = dict(conn.execute(
        """SELECT a.attname, (n.nspname, f.proname)
           FROM pg_attribute a
           JOIN pg_opclass c ON c.opcdefault
                AND c.opcmethod = (SELECT oid FROM pg_am WHERE amname = 'hash')
                AND c.opcintype = CASE WHEN a.atttypid = 'varchar'::regtype THEN 'text'::regtype
                                       ELSE a.atttypid END
           JOIN pg_amproc p ON p.amprocfamily = c.opcfamily AND p.amprocnum = 2
                AND p.amproclefttype = c.opcintype AND p.amprocrighttype = c.opcintype
           JOIN pg_proc f ON f.oid = p.amproc AND f.proargtypes[0] = c.opcintype
           JOIN pg_namespace n ON n.oid = f.pronamespace
           WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped""",
        [rel.ident.as_string(conn)],
    ).fetchall())  # fmt: skip
    parts = []
    for i, c in enumerate(cols):
        fn = found.get(c.name)
        if fn is None:
            return None
        cast = sql.SQL("::text") if base_type(c) == "character varying" else sql.SQL("")
        parts.append(sql.SQL("coalesce({}(t.{}{}, {}), 0)").format(
            sql.Identifier(*fn), c.ident, cast, sql.Literal(i)))  # fmt: skip
    return sql.SQL(" # ").join(parts)


def fingerprint(conn: psycopg.Connection, rel: Relation) -> str:
    """Row count and an order-independent hash of the source rows, to tell when it changed:
    the sum of each row's hash, made of its values' own hashes. Where every column's type is a
    common one (`_COLUMN_HASHED`), the XOR of each column's hash under its own seed (0.16 s of
    the server at a million rows, kind `c`); else where every type has a hash function, the
    row's hash_record_extended (0.33-0.47 s: the row made a record first, kind `r`); else the
    hash of the row's text (0.77 s: every value through its output function). The kinds are
    marked, so two never compare equal. Summed as int8 (the server adds them in 128 bits,
    exactly: the same figure as a sum of numerics, which cost 10-20 % more per row)."""
    from dbanon.setlogic.composition import RECORD, fingerprint_kind

    cols = list(catalog.columns(conn, rel).values())
    by_column = _column_hashes(conn, rel, cols)
    if by_column is not None:
        hashed, kind = by_column, "c"
    elif fingerprint_kind(conn, rel, cols) == RECORD:
        hashed, kind = sql.SQL("hash_record_extended(t, 0)"), "r"
    else:
        hashed, kind = sql.SQL("hashtextextended(t::text, 0)"), ""
    count, digest = conn.execute(
        sql.SQL("SELECT count(*), coalesce(sum({}), 0) FROM {} t").format(
            hashed, rel.ident)  # fmt: skip
    ).fetchone()
    return f"{count}:{kind}{digest}"
