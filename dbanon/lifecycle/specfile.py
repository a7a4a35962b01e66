"""Releases as code: the catalog's specs as one TOML file, and a plan to make the catalog match.

`export` writes every stored spec (and its schedule) under `[releases.NAME]`, options with their
defaults filled in, so the file says exactly what each release does and can be reviewed in git.
`plan` compares a file with the catalog: a release the file adds is published, one whose spec
differs is republished with the checks of `publish --replace`, a change of grants or schedule alone
is made without a rebuild, and a release the file no longer lists is dropped only with `prune`.
Specs are compared after both sides are normalised the same way (models and options as the
lifecycle resolves them), so applying the same file twice does nothing the second time.
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
from dbanon.core.spec import ReleaseSpec
from dbanon.db import catalog
from dbanon.errors import DbanonError
from dbanon.lifecycle import schedule
from dbanon.lifecycle.catalogue import load_spec
from dbanon.lifecycle.resolve import resolve_options
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
class Change:
    release: str
    action: str  # publish, republish, grant, revoke, schedule, unschedule, drop, keep
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)


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


def export(conn: psycopg.Connection, names: list[str] | None = None) -> str:
    """The stored specs (all, or those named) as one TOML document."""
    catalog.require_catalog(conn)
    stored = [r[0] for r in conn.execute("SELECT name FROM dbanon.release ORDER BY name")]
    for n in names or []:
        if n not in stored:
            raise DbanonError(f"release {n!r} does not exist (see `dbanon releases`)")
    when = {s["release"]: s for s in schedule.schedules(conn)}
    out = ["# dbanon releases: `dbanon apply FILE --plan` shows what applying it would change."]
    for name in names or stored:
        out.append(f"\n[releases.{_key(name)}]")
        for k, v in _declared(load_spec(conn, name)).items():
            if v is not None:
                out.append(f"{_key(k)} = {_value(v)}")
        s = when.get(name)
        if s:
            out.append(f"schedule = {_value({'every': s['every'], 'cron': s['cron']})}")
    return "\n".join(out) + "\n"


# -- TOML in --------------------------------------------------------------------------------------


def _line(text: str, release: str, key: str | None = None) -> int:
    """The line of a release's table (or of one of its keys) in the file, for messages."""
    header = re.compile(r"^\s*\[\s*releases\s*\.\s*(\"?)" + re.escape(release) + r"\1\s*\]")
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


def read(path: str | Path) -> dict[str, Desired]:
    """The releases a file declares; an invalid file is one line naming the file, line and key."""
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
    unknown_top = set(data) - {"releases"}
    if unknown_top:
        key = sorted(unknown_top)[0]
        line = next((i + 1 for i, s in enumerate(text.splitlines()) if key in s), 1)
        raise DbanonError(f"{path}:{line}: unknown key {key!r} (releases go under [releases.NAME])")
    known = {f.name for f in fields(ReleaseSpec)} - _INTERNAL
    out: dict[str, Desired] = {}
    for name, body in data.get("releases", {}).items():
        if not isinstance(body, dict):
            raise DbanonError(f"{path}:{_line(text, name)}: releases.{name} must be a table")
        for k in body:
            if k not in known and k != "schedule":
                raise DbanonError(
                    f"{path}:{_line(text, name, k)}: unknown key {k!r} in release {name!r} "
                    f"(known: {', '.join(sorted(known | {'schedule'}))})"
                )
        for k in _REQUIRED:
            if k not in body:
                raise DbanonError(f"{path}:{_line(text, name)}: release {name!r} needs {k!r}")
        when = body.pop("schedule", None)
        if when is not None and (
            not isinstance(when, dict) or set(when) - _SCHEDULE_KEYS or len(when) != 1
        ):
            raise DbanonError(
                f"{path}:{_line(text, name, 'schedule')}: schedule of {name!r} must be "
                "{every = \"INTERVAL\"} or {cron = \"EXPRESSION\"}"
            )
        try:
            spec = ReleaseSpec(name=name, **body)
            methods.get(spec.method)
            _declared(spec)
        except (TypeError, ValueError, DbanonError) as e:
            raise DbanonError(f"{path}:{_line(text, name)}: release {name!r}: {e}") from None
        out[name] = Desired(spec, when)
    return out


# -- the plan -------------------------------------------------------------------------------------


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


def plan(conn: psycopg.Connection, wanted: dict[str, Desired], prune: bool = False) -> list[Change]:
    """What applying the file would change, release by release (nothing is changed here)."""
    have = _stored(conn)
    changes: list[Change] = []
    for name, want in wanted.items():
        old = have.get(name)
        if old is None:
            changes.append(Change(name, "publish", want.spec.method))
        else:
            a, b = _declared(old.spec), _declared(want.spec)
            keys = (a.keys() | b.keys()) - {"grants"}
            differ = sorted(k for k in keys if a.get(k) != b.get(k))
            if differ:
                changes.append(Change(name, "republish", "changed: " + ", ".join(differ)))
            else:
                added = sorted(set(b["grants"]) - set(a["grants"]))
                gone = sorted(set(a["grants"]) - set(b["grants"]))
                if added:
                    changes.append(Change(name, "grant", ", ".join(added), {"roles": added}))
                if gone:
                    changes.append(Change(name, "revoke", ", ".join(gone), {"roles": gone}))
        if old is None or not _same_schedule(old.schedule, want.schedule, conn):
            if want.schedule:
                changes.append(Change(name, "schedule", _value(want.schedule), want.schedule))
            elif old is not None:
                changes.append(Change(name, "unschedule"))
    conn.rollback()
    for name in have.keys() - wanted.keys():
        changes.append(Change(name, "drop" if prune else "keep",
                              "" if prune else "not in the file (--prune drops it)"))  # fmt: skip
    return changes


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


def apply(db: Any, wanted: dict[str, Desired], changes: list[Change]) -> None:
    """Carry out a plan through the library API (the same checks as the commands)."""
    have = _stored(db.conn)
    db.conn.rollback()
    for c in changes:
        _ACTIONS[c.action](db, c, wanted.get(c.release), have.get(c.release))
