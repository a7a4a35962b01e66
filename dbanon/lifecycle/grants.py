"""Who reads a release, changed without a rebuild; and a stored spec shown as it was asked for.

`grant` and `revoke` change the stored spec's `grants` and the released relations' privileges in
one transaction, under the release's run lock (a refresh running at the same time would swap in
relations granted as its own snapshot of the spec said, and record that spec back). A role keeps
USAGE on the release schema while any other release there is granted to it.

`publish_args` turns a stored spec back into `dbanon publish` arguments: publishing them under
another name stores the same spec (a test holds the round trip), so a DBA can read, copy or
restate a release without the catalog's JSON.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from dbanon import methods
from dbanon.core.spec import ReleaseSpec
from dbanon.db import catalog, store
from dbanon.errors import DbanonError, quote_ident, quote_name
from dbanon.lifecycle import runs
from dbanon.lifecycle.catalogue import load_spec, owned


def _release(conn: psycopg.Connection, name: str) -> tuple[int, ReleaseSpec, str, list[str]]:
    spec = load_spec(conn, name)
    rid, schema, objects = conn.execute(
        "SELECT id, target_schema, objects FROM dbanon.release WHERE name = %s",  # locked
        [name],
    ).fetchone()
    return rid, spec, schema, list(objects)


def _objects(conn: psycopg.Connection, name: str, schema: str, objects: list[str]) -> list[str]:
    """The release's relations that exist and are its own (dbanon touches nothing else)."""
    out = []
    for obj in objects:
        mine = owned(conn, name, schema, obj)
        if mine is False:
            raise DbanonError(
                f"{catalog.qualified(schema, obj)} is not the relation release {quote_name(name)} "
                "published; dbanon will not change its privileges"
            )
        if mine:
            out.append(obj)
    return out


def _store_grants(conn: psycopg.Connection, rid: int, grants: list[str]) -> None:
    conn.execute(
        """UPDATE dbanon.release SET spec = jsonb_set(spec, '{grants}', %s::jsonb),
               updated_at = now() WHERE id = %s""",
        [json.dumps(grants), rid],
    )


LIVE_HINT = (
    "a role granted a live view sees the counts of the rows it hides in EXPLAIN ANALYZE, and "
    "the source's row and change counts in pg_stat_user_tables (docs/live-views.md)"
)


def refuse_live(name: str, views: Sequence[str], roles: Sequence[str], allowed: bool) -> None:
    """Granting a live view to a new role is opt-in: PostgreSQL shows anyone who may read a
    view the plan of its query, row counts of the source included, and every table's
    statistics; only a materialised release (or a role set up as the docs say) hides them."""
    if views and roles and not allowed:
        raise DbanonError(
            f"release {quote_name(name)} is a live view ({views[0]}): {LIVE_HINT}; publish it "
            f"--as table for {quote_ident(roles[0])}, or pass --grant-live to grant it anyway"
        )


def _locked(conn: psycopg.Connection, name: str, wait: float, change: Any) -> dict[str, Any]:
    """Run `change` in one transaction under the release's run lock."""
    catalog.require_catalog(conn)
    load_spec(conn, name)  # exists, or a one-line error before any lock
    conn.rollback()
    try:
        runs.lock_release(conn, name, wait)  # the transaction `change` runs in holds it
        out = change()
        conn.commit()
        return out
    except BaseException:
        conn.rollback()
        raise


def grant(
    conn: psycopg.Connection,
    name: str,
    roles: Sequence[str],
    wait: float = 0.0,
    *,
    grant_live: bool = False,
) -> dict[str, Any]:
    """Let `roles` read release `name` from now on (and after every refresh)."""
    if not roles:
        raise DbanonError("name at least one role to grant to")

    def change() -> dict[str, Any]:
        rid, spec, schema, objects = _release(conn, name)
        for role in roles:
            catalog.require_role(conn, role)
        added = [r for r in dict.fromkeys(roles) if r not in spec.grants]
        views = [
            catalog.qualified(schema, o) for o in _objects(conn, name, schema, objects)
            if store.live(conn, schema, o)
        ]  # fmt: skip
        refuse_live(name, views, added, grant_live)
        for obj in _objects(conn, name, schema, objects):
            for role in added:
                conn.execute(
                    sql.SQL("GRANT SELECT ON {} TO {}").format(
                        sql.Identifier(schema, obj), sql.Identifier(role)
                    )
                )
        for role in added:
            runs.schema_usage(conn, schema, role)
        grants = [*spec.grants, *added]
        _store_grants(conn, rid, grants)
        return {"release": name, "added": added,
                "already": [r for r in dict.fromkeys(roles) if r not in added],
                "grants": grants}  # fmt: skip

    return _locked(conn, name, wait, change)


def revoke(
    conn: psycopg.Connection, name: str, roles: Sequence[str], wait: float = 0.0
) -> dict[str, Any]:
    """Stop `roles` reading release `name`; USAGE on its schema goes too unless another release
    in that schema is still granted to the role. A role the release is not granted to is no
    error, as SQL's REVOKE is idempotent (`not_granted` names it); a role that does not exist
    is, as in SQL."""
    if not roles:
        raise DbanonError("name at least one role to revoke")

    def change() -> dict[str, Any]:
        rid, spec, schema, objects = _release(conn, name)
        asked = list(dict.fromkeys(roles))
        not_granted = [r for r in asked if r not in spec.grants]
        for role in not_granted:
            catalog.require_role(conn, role)
        gone = [r for r in asked if r in spec.grants]
        if not gone:  # nothing to revoke: nothing changes, not even the catalog's updated_at
            return {"release": name, "revoked": [], "not_granted": not_granted,
                    "grants": list(spec.grants)}  # fmt: skip
        for obj in _objects(conn, name, schema, objects):
            for role in gone:
                conn.execute(
                    sql.SQL("REVOKE SELECT ON {} FROM {}").format(
                        sql.Identifier(schema, obj), sql.Identifier(role)
                    )
                )

        def others(role: str) -> int:
            return conn.execute(
                """SELECT count(*) FROM dbanon.release WHERE target_schema = %s AND id <> %s
                     AND spec -> 'grants' ? %s""",
                [schema, rid, role],
            ).fetchone()[0]

        for role in gone:
            if not others(role):
                runs.schema_usage(conn, schema, role, grant=False)
                # A grant of another release there that committed before this REVOKE got the
                # schema's row is counted now (one that comes later waits, then grants again).
                if others(role):
                    runs.schema_usage(conn, schema, role)
        grants = [g for g in spec.grants if g not in gone]
        _store_grants(conn, rid, grants)
        return {"release": name, "revoked": gone, "not_granted": not_granted, "grants": grants}

    return _locked(conn, name, wait, change)


def _number(x: Any) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def _model_args(spec: ReleaseSpec) -> list[str]:
    """The model options of `publish` that make the spec's `models`."""
    args: list[str] = []
    for m in spec.models:
        kind = m["name"]
        if kind == "k-anonymity":
            args += ["--k", _number(m["k"])]
        elif kind.endswith("-l-diversity"):
            args += ["--l", _number(m["l"]), "--l-kind", kind[: -len("-l-diversity")]]
            if m.get("c") is not None:
                args += ["--c", _number(m["c"])]
        elif kind == "t-closeness":
            args += ["--t", _number(m["t"])]
            if m.get("ground", "auto") != "auto":
                args += ["--t-ground", m["ground"]]
        elif kind == "alpha-k-anonymity":
            args += ["--alpha", _number(m["alpha"])]
            if m.get("value") is not None:
                args += ["--alpha-value", str(m["value"])]
        elif kind == "p-k-anonymity":
            args += ["--p", _number(m["p"])]
        elif kind == "theta-k-anonymity":
            args += ["--theta", _number(m["theta"])]
            if m.get("hierarchy") is not None:
                args += ["--sensitive-hierarchy", f"{spec.sensitive[0]}={m['hierarchy']}"]
            if m.get("level") is not None:
                args += ["--category-level", _number(m["level"])]
            if m.get("width") is not None:
                args += ["--category-width", _number(m["width"])]
            if m.get("rule", "paper") != "paper":
                args += ["--theta-rule", str(m["rule"])]
        else:
            raise DbanonError(f"model {kind!r} has no publish option to show it by")
    # --k appears once however many models carry a k
    out, seen_k = [], False
    for i in range(0, len(args), 2):
        if args[i] == "--k":
            if seen_k:
                continue
            seen_k = True
        out += args[i : i + 2]
    return out


def _csv(items: Sequence[str]) -> str:
    """A column list as `--qi` reads it (dbanon.db.catalog.parse_list: CSV, quotes for odd
    names)."""
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(items)
    return buf.getvalue()


def publish_args(spec: ReleaseSpec) -> list[str]:
    """`dbanon publish` arguments that store this spec again (options at their default left
    out; a release granted to roles repeats --grant)."""
    args = ["publish", spec.name, "--source", spec.source, "--key", spec.key,
            "--qi", _csv(spec.qi)]  # fmt: skip
    if spec.sensitive:
        args += ["--sensitive", _csv(spec.sensitive)]
    args += ["--algorithm", spec.method, *_model_args(spec)]
    method = methods.get(spec.method)
    for o in method.all_options():
        value = spec.options.get(o.name)
        if value is None or value == o.default:
            continue
        if o.type is bool:
            args += [o.flag] if value else []
        else:
            args += [o.flag, _number(value) if o.type is float else str(value)]
    for column, hname in spec.hierarchies.items():
        args += ["--hierarchy", f"{column}={hname}"]
    if spec.target:
        args += ["--target", spec.target]
    for role in spec.grants:
        args += ["--grant", role]
    return args


def show(conn: psycopg.Connection, name: str) -> dict[str, Any]:
    """The stored spec of release `name`, as JSON and as the `publish` command that makes it."""
    spec = load_spec(conn, name)
    args = publish_args(spec)
    return {
        "release": name,
        "spec": json.loads(spec.to_json()),
        "publish": args,
        "command": shlex.join(["dbanon", *args]),
    }
