"""Releases as code: the catalog's specs as one TOML file, and a plan to make the catalog match.

`export` writes every stored spec (and its schedule) under `[releases.NAME]`, options with their
defaults filled in, and every hierarchy those releases read under `[hierarchies.NAME]` (its ARX
rows, inline), so the file alone rebuilds the releases on a database that has only the sources.
`plan` compares a file with the catalog: a release the file adds is published, one whose spec
differs is republished with the checks of `publish --replace`, a change of grants or schedule alone
is made without a rebuild, and a release the file no longer lists is dropped only with `prune`.
Specs are compared after both sides are normalised the same way (models and options as the
lifecycle resolves them), so applying the same file twice does nothing the second time.

`validate` resolves every release the plan would publish exactly as a publish does
(dbanon.lifecycle.resolve.resolve), so a plan refuses what the apply would. A publish commits its
own transaction (its run record must outlive a failure), so an apply is not one transaction: it
validates everything first, then applies change by change and, when one still fails (a refusal
only a build can find, a source changed meanwhile), raises Stopped listing what it applied and
what it did not.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import psycopg

from dbanon import methods
from dbanon.core.hierarchy import Hierarchy, HierarchyError
from dbanon.core.spec import ReleaseSpec
from dbanon.db import catalog
from dbanon.errors import DbanonError, first_line, quote_name
from dbanon.lifecycle import schedule
from dbanon.lifecycle.catalogue import load_spec
from dbanon.lifecycle.resolve import resolve, resolve_options
from dbanon.models.specs import from_specs, to_specs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# Stored with a spec but not part of what a DBA declares: the catalog fills them in.
_INTERNAL = {"name", "version", "columns"}
_REQUIRED = ("source", "key", "qi")
_SCHEDULE_KEYS = {"every", "cron"}
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass
class Desired:
    """One release as a file declares it: its spec and its schedule (None: unscheduled)."""

    spec: ReleaseSpec
    schedule: dict[str, str] | None


@dataclass
class SpecFile:
    """What a file declares: its releases and the hierarchies it carries (by name)."""

    path: str
    text: str
    releases: dict[str, Desired]
    hierarchies: dict[str, Hierarchy] = field(default_factory=dict)


@dataclass
class Change:
    """One step of a plan. `release` is None for a hierarchy's import (`hierarchy` names it)."""

    release: str | None
    action: str  # import, publish, republish, grant, revoke, schedule, unschedule, drop, keep
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    hierarchy: str | None = None

    def what(self) -> str:
        """The change's object as SQL would name it (a release) or as the file does (hierarchy)."""
        if self.release is None:
            return f"hierarchy {catalog.quote_ident(self.hierarchy or '')}"
        return catalog.quote_ident(self.release)


class Invalid(DbanonError):
    """The file does not hold against the database: nothing was changed (exit 2)."""

    def __init__(self, message: str, errors: list[dict[str, str]]) -> None:
        super().__init__(message)
        self.details = {"invalid": errors}


class Stopped(DbanonError):
    """A change failed after validation. Nothing applied: the failure's own exit code; some
    applied: exit 5 (partly applied), with what was and was not applied in `details`."""

    PARTLY_APPLIED = 5

    def __init__(self, failed: Change, error: Exception, applied: list[Change],
                 rest: list[Change]) -> None:  # fmt: skip
        cause = getattr(error, "exit_code", 2)
        reason = first_line(error) if isinstance(error, psycopg.Error) else str(error)
        head = f"{failed.action} {failed.what()} failed: {reason}"
        if applied:
            done = ", ".join(f"{c.action} {c.what()}" for c in applied)
            left = ", ".join(f"{c.action} {c.what()}" for c in rest) or "nothing"
            head += f"; applied before it: {done}; not applied: {left}"
        else:
            head += "; nothing was applied"
        super().__init__(head)
        self.exit_code = self.PARTLY_APPLIED if applied else cause
        self.details = {
            "applied": [vars(c) for c in applied],
            "failed": {**vars(failed), "error": reason, "exit": cause},
            "not_applied": [vars(c) for c in rest],
        }


# -- TOML out -------------------------------------------------------------------------------------


def _key(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k, ensure_ascii=False)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        items = [f"{_key(k)} = {_value(x)}" for k, x in v.items() if x is not None]
        return "{" + ", ".join(items) + "}"
    raise DbanonError(f"cannot write {v!r} to TOML")


def _declared(spec: ReleaseSpec) -> dict[str, Any]:
    """The spec's declared fields, normalised as the lifecycle reads them."""
    method = methods.get(spec.method)
    data = {k: v for k, v in asdict(spec).items() if k not in _INTERNAL}
    data["models"] = to_specs(from_specs(spec.models))
    data["options"] = resolve_options(spec, method)
    data["grants"] = sorted(spec.grants)
    return data


def _hierarchy_names(spec: ReleaseSpec) -> list[str]:
    """The stored hierarchies a spec reads: its QIs' and a model's (the (θ,k) sensitive one)."""
    named = [*spec.hierarchies.values(), *(m.get("hierarchy") for m in spec.models)]
    return [n for n in named if n]


def _hierarchy_table(h: Hierarchy) -> list[str]:
    """A hierarchy as `[hierarchies.NAME]`: its ARX rows (leaf to root), one a line, by leaf."""
    rows = sorted(h.rows())
    return [f"\n[hierarchies.{_key(h.name)}]", "rows = [",
            *(f"  {_value(r)}," for r in rows), "]"]  # fmt: skip


def export(conn: psycopg.Connection, names: list[str] | None = None) -> str:
    """The stored specs (all, or those named) as one TOML document, with the hierarchies they
    read, so that `apply` rebuilds them on a database that has the sources and nothing else."""
    catalog.require_catalog(conn)
    stored = [r[0] for r in conn.execute("SELECT name FROM dbanon.release ORDER BY name")]
    for n in names or []:
        if n not in stored:
            raise DbanonError(f"release {quote_name(n)} does not exist (see `dbanon releases`)")
    when = {s["release"]: s for s in schedule.schedules(conn)}
    out = ["# dbanon releases: `dbanon apply FILE --plan` shows what applying it would change."]
    used: set[str] = set()
    for name in names or stored:
        spec = load_spec(conn, name)
        used.update(_hierarchy_names(spec))
        out.append(f"\n[releases.{_key(name)}]")
        for k, v in _declared(spec).items():
            if v is not None:
                out.append(f"{_key(k)} = {_value(v)}")
        s = when.get(name)
        if s:
            out.append(f"schedule = {_value({'every': s['every'], 'cron': s['cron']})}")
    for hname in sorted(used):
        out.extend(_hierarchy_table(catalog.load_hierarchy(conn, hname)))
    return "\n".join(out) + "\n"


# -- TOML in --------------------------------------------------------------------------------------


def _line(text: str, release: str, key: str | None = None, table: str = "releases") -> int:
    """The line of a release's table (or of one of its keys) in the file, for messages."""
    header = re.compile(
        r"^\s*\[\s*" + table + r"\s*\.\s*(\"?)" + re.escape(release) + r"\1\s*\]"
    )
    lines = text.splitlines()
    start = next((i for i, s in enumerate(lines) if header.match(s)), None)
    if start is None:
        return 1
    if key is None:
        return start + 1
    keyline = re.compile(r"^\s*(\"?)" + re.escape(key) + r"\1\s*=")
    for i in range(start + 1, len(lines)):
        if lines[i].lstrip().startswith("["):
            break
        if keyline.match(lines[i]):
            return i + 1
    return start + 1


def read(path: str | Path) -> SpecFile:
    """What a file declares; an invalid file is one line naming the file, line and key."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DbanonError(f"{path}: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")  # TOML is UTF-8, whatever the locale says
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DbanonError(
            f"{path}:{line}: not UTF-8 (byte 0x{raw[e.start]:02x}); TOML files are UTF-8"
        ) from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # newlines as read_text() read them
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r" \(at line (\d+), column \d+\)$", str(e))
        line = m[1] if m else str(len(text.splitlines()) or 1)
        msg = str(e)[: m.start()] if m else str(e).replace(" (at end of document)", "")
        raise DbanonError(f"{path}:{line}: {msg}") from None
    unknown_top = set(data) - {"releases", "hierarchies"}
    if unknown_top:
        key = sorted(unknown_top)[0]
        line = next((i + 1 for i, s in enumerate(text.splitlines()) if key in s), 1)
        raise DbanonError(
            f"{path}:{line}: unknown key {key!r} (releases go under [releases.NAME], "
            "hierarchies under [hierarchies.NAME])"
        )
    known = {f.name for f in fields(ReleaseSpec)} - _INTERNAL
    out: dict[str, Desired] = {}
    for name, body in data.get("releases", {}).items():
        if not isinstance(body, dict):
            raise DbanonError(f"{path}:{_line(text, name)}: releases.{name} must be a table")
        for k in body:
            if k not in known and k != "schedule":
                raise DbanonError(
                    f"{path}:{_line(text, name, k)}: unknown key {k!r} in release "
                    f"{quote_name(name)} (known: {', '.join(sorted(known | {'schedule'}))})"
                )
        for k in _REQUIRED:
            if k not in body:
                raise DbanonError(f"{path}:{_line(text, name)}: release {quote_name(name)} needs "
                    f"{k!r}")
        when = body.pop("schedule", None)
        if when is not None and (
            not isinstance(when, dict) or set(when) - _SCHEDULE_KEYS or len(when) != 1
        ):
            raise DbanonError(
                f"{path}:{_line(text, name, 'schedule')}: schedule of {quote_name(name)} must be "
                "{every = \"INTERVAL\"} or {cron = \"EXPRESSION\"}"
            )
        try:
            spec = ReleaseSpec(name=name, **body)
            methods.get(spec.method)
            _declared(spec)
        except (TypeError, ValueError, DbanonError) as e:
            raise DbanonError(f"{path}:{_line(text, name)}: release {quote_name(name)}: "
                f"{e}") from None
        out[name] = Desired(spec, when)
    return SpecFile(str(path), text, out, _hierarchies(path, text, data.get("hierarchies", {})))


def _hierarchies(path: Path, text: str, tables: Any) -> dict[str, Hierarchy]:
    """The file's `[hierarchies.NAME]` tables, each `rows = [[leaf, ..., root], ...]`."""
    if not isinstance(tables, dict):
        raise DbanonError(f"{path}:1: hierarchies must be tables [hierarchies.NAME]")
    out: dict[str, Hierarchy] = {}
    for name, body in tables.items():
        line = _line(text, name, table="hierarchies")
        rows = body.get("rows") if isinstance(body, dict) else None
        if (not isinstance(body, dict) or set(body) != {"rows"} or not isinstance(rows, list)
                or not all(isinstance(r, list) and all(isinstance(v, str) for v in r)
                           for r in rows)):  # fmt: skip
            raise DbanonError(
                f"{path}:{line}: hierarchy {quote_name(name)} must be rows = "
                "[[\"leaf\", ..., \"*\"], ...]"
            )
        try:
            out[name] = Hierarchy.from_rows(name, rows)
        except HierarchyError as e:
            raise DbanonError(f"{path}:{line}: {e}") from None
    return out




# -- the plan -------------------------------------------------------------------------------------

# The order of a release's changes in a plan (and in an apply): the plan is sorted by release
# name, then by this, so that two plans of the same change are the same text (diffable).
_ACTIONS_IN_ORDER = (
    "publish", "republish", "grant", "revoke", "schedule", "unschedule", "drop", "keep",
)  # fmt: skip
_ORDER = {a: i for i, a in enumerate(_ACTIONS_IN_ORDER)}


def _stored(conn: psycopg.Connection) -> dict[str, Desired]:
    catalog.require_catalog(conn)
    when = {
        s["release"]: {k: s[k] for k in _SCHEDULE_KEYS if s[k] is not None}
        for s in schedule.schedules(conn)
    }
    return {
        name: Desired(load_spec(conn, name), when.get(name))
        for (name,) in conn.execute("SELECT name FROM dbanon.release ORDER BY name")
    }


def _same_schedule(a: dict[str, str] | None, b: dict[str, str] | None, conn: Any) -> bool:
    if a is None or b is None or set(a) != set(b):
        return a == b
    if "cron" in a:
        return a["cron"] == b["cron"]
    return bool(conn.execute("SELECT %s::interval = %s::interval", [a["every"], b["every"]])
                .fetchone()[0])  # fmt: skip


def _when(s: dict[str, str] | None) -> str:
    if not s:
        return "none"
    return f"every {s['every']!r}" if "every" in s else f"cron {s['cron']!r}"


def _differences(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Each declared field (an option: `options.NAME`) whose value differs: (old, new)."""
    out: dict[str, tuple[Any, Any]] = {}
    for k in sorted((old.keys() | new.keys()) - {"grants"}):
        a, b = old.get(k), new.get(k)
        if k == "options" and isinstance(a, dict) and isinstance(b, dict):
            for o in sorted(a.keys() | b.keys()):
                if a.get(o) != b.get(o):
                    out[f"options.{o}"] = (a.get(o), b.get(o))
        elif a != b:
            out[k] = (a, b)
    return out


def _shown(v: Any) -> str:
    return "(none)" if v is None else _value(v)


def plan(conn: psycopg.Connection, wanted: SpecFile, prune: bool = False) -> list[Change]:
    """What applying the file would change, hierarchies first, then release by release in name
    order (nothing is changed here; `validate` checks it against the database)."""
    have = _stored(conn)
    changes: list[Change] = []
    for hname, h in sorted(wanted.hierarchies.items()):
        if catalog.hierarchy_version(conn, hname) is None:
            changes.append(Change(None, "import", f"{len(h.leaves)} leaves, height {h.height}",
                                  {"version": h.version}, hierarchy=hname))  # fmt: skip
    for name, want in wanted.releases.items():
        old = have.get(name)
        if old is None:
            changes.append(Change(name, "publish", want.spec.method))
        else:
            differ = _differences(_declared(old.spec), _declared(want.spec))
            if differ:
                detail = "; ".join(f"{k}: {_shown(a)} -> {_shown(b)}"
                                   for k, (a, b) in differ.items())  # fmt: skip
                changes.append(Change(name, "republish", detail, {
                    "changed": {k: {"old": a, "new": b} for k, (a, b) in differ.items()}}))
            else:
                a, b = _declared(old.spec), _declared(want.spec)
                added = sorted(set(b["grants"]) - set(a["grants"]))
                gone = sorted(set(a["grants"]) - set(b["grants"]))
                if added:
                    changes.append(Change(name, "grant", ", ".join(added), {"roles": added}))
                if gone:
                    changes.append(Change(name, "revoke", ", ".join(gone), {"roles": gone}))
        before = old.schedule if old else None
        if old is None or not _same_schedule(before, want.schedule, conn):
            if want.schedule:
                detail = _when(want.schedule)
                if old is not None:
                    detail = f"{_when(before)} -> {detail}"
                changes.append(Change(name, "schedule", detail, want.schedule))
            elif old is not None:
                changes.append(Change(name, "unschedule", f"{_when(before)} -> none"))
    conn.rollback()
    for name in have.keys() - wanted.releases.keys():
        changes.append(Change(name, "drop" if prune else "keep",
                              "" if prune else "not in the file (--prune drops it)"))  # fmt: skip
    return sorted(changes, key=lambda c: (c.release is not None, c.release or c.hierarchy or "",
                                          _ORDER.get(c.action, -1)))  # fmt: skip


def validate(conn: psycopg.Connection, wanted: SpecFile, changes: list[Change]) -> None:
    """Check every change against the database as it would be when its turn comes, without
    changing anything: the file's hierarchies imported, then every release it publishes or
    republishes resolved exactly as `publish` resolves it (the same function: columns, types,
    hierarchies, models, options, targets, roles, the method's own refusals), their targets
    apart from each other's, the roles granted existing, the schedules readable. All in one
    transaction, rolled back. Raises Invalid naming every release that fails, first by line."""
    errors: list[tuple[int, dict[str, str]]] = []

    def refuse(name: str, table: str, message: str) -> None:
        line = _line(wanted.text, name, table=table)
        what = "release" if table == "releases" else "hierarchy"
        errors.append((line, {what: name, "line": str(line), "error": message}))

    have = _stored(conn)
    targets: dict[tuple[str, str], str] = {}
    try:
        for hname, h in sorted(wanted.hierarchies.items()):
            version = catalog.hierarchy_version(conn, hname)
            if version is None:
                catalog.store_hierarchy(conn, h)  # so the releases that read it resolve
            elif version != h.version:
                refuse(hname, "hierarchies", f"hierarchy {quote_name(hname)} differs from the "
                    "stored one; "
                       "apply does not replace a stored hierarchy: `dbanon hierarchy import "
                       f"{hname} FILE --replace` does, deliberately")  # fmt: skip
        for c in changes:
            want = wanted.releases.get(c.release or "")
            try:
                with conn.transaction():  # a savepoint: one failure leaves the others to check
                    if c.action in ("publish", "republish") and want is not None:
                        old = have.get(want.spec.name)
                        gone = sorted(set(old.spec.grants) - set(want.spec.grants)) if old else []
                        r = resolve(conn, want.spec, replace=c.action == "republish", revoke=gone)
                        for obj in r.objects:
                            other = targets.setdefault((r.target_schema, obj), r.spec.name)
                            if other != r.spec.name:
                                raise DbanonError(f"{r.target_schema}.{obj} is also the target "
                                                  f"of release {quote_name(other)} in this "
                                                  "file")  # fmt: skip
                    elif c.action == "grant":
                        for role in c.data["roles"]:
                            catalog.require_role(conn, role)
                    elif c.action == "schedule":
                        schedule.check(conn, every=c.data.get("every"), cron=c.data.get("cron"))
            except (DbanonError, HierarchyError, psycopg.Error) as e:
                message = f"PostgreSQL: {first_line(e)}" if isinstance(e, psycopg.Error) else str(e)
                refuse(c.release or "", "releases", message)
    finally:
        conn.rollback()
    if errors:
        errors.sort(key=lambda e: int(e[0]))
        first = errors[0][1]
        what = (f"release {quote_name(first['release'])}" if "release" in first
                else f"hierarchy {quote_name(first['hierarchy'])}")  # fmt: skip
        text = f"{wanted.path}:{first['line']}: {what}: {first['error']}"
        if len(errors) > 1:
            others = [e.get("release") or e.get("hierarchy") for _, e in errors[1:]]
            text += f" (and {len(others)} more failing: {', '.join(map(quote_name, others))})"
        raise Invalid(text + "; nothing was changed", [e for _, e in errors])


_ACTIONS = {
    "publish": lambda db, c, want, old: db.publish(want.spec),
    "republish": lambda db, c, want, old: db.publish(
        want.spec, replace=True, revoke=sorted(set(old.spec.grants) - set(want.spec.grants))
    ),
    "grant": lambda db, c, want, old: db.grant(c.release, c.data["roles"]),
    "revoke": lambda db, c, want, old: db.revoke(c.release, c.data["roles"]),
    "schedule": lambda db, c, want, old: db.schedule(c.release, **c.data),
    "unschedule": lambda db, c, want, old: db.unschedule(c.release),
    "drop": lambda db, c, want, old: db.drop(c.release),
    "keep": lambda db, c, want, old: None,
}


def apply(db: Any, wanted: SpecFile, changes: list[Change]) -> list[Change]:
    """Carry out a validated plan through the library API (the same checks as the commands),
    in the plan's order. Returns the changes applied; raises Stopped at the first that fails,
    saying what was applied before it and what was not."""
    have = _stored(db.conn)
    db.conn.rollback()
    done: list[Change] = []
    for i, c in enumerate(changes):
        try:
            if c.action == "import":
                try:
                    catalog.store_hierarchy(db.conn, wanted.hierarchies[c.hierarchy or ""])
                    db.conn.commit()
                finally:
                    db.conn.rollback()
            else:
                _ACTIONS[c.action](db, c, wanted.releases.get(c.release or ""),
                                   have.get(c.release or ""))  # fmt: skip
        except (DbanonError, HierarchyError, psycopg.Error) as e:
            db.conn.rollback()
            raise Stopped(c, e, [d for d in done if d.action != "keep"],
                          [d for d in changes[i + 1:] if d.action != "keep"]) from e  # fmt: skip
        done.append(c)
    return done
