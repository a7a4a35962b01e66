"""Release specs as data: promised models as a list, method options as their own mapping.

Version 1 specs were flat (k, l, l_kind, c, t, alpha, p, algorithm, seed, seeding, as_view,
max_suppression); version 2 is documented in dbanon.release. This conversion is a frozen copy of
what version 1 meant, so it does not change when the code does.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

L_KINDS = {
    "distinct": "distinct-l-diversity",
    "entropy": "entropy-l-diversity",
    "recursive": "recursive-l-diversity",
    "frequency": "frequency-l-diversity",
}


def v1_to_v2(old: dict[str, Any]) -> dict[str, Any]:
    """The version 2 spec of a version 1 one: the same release, the same promises."""
    method = old.get("algorithm", "kmember")
    k = old.get("k")
    models: list[dict[str, Any]] = []
    if k is not None:
        models.append({"name": "k-anonymity", "k": k})
    if old.get("alpha") is not None:
        models.append({"name": "alpha-k-anonymity", "alpha": old["alpha"], "k": k, "value": None})
    if old.get("p") is not None:
        models.append({"name": "p-k-anonymity", "p": old["p"], "k": k})
    if old.get("l") is not None:
        kind = old.get("l_kind", "distinct")
        if method == "anatomy":  # what Anatomy promised, whatever --l-kind said
            kind = "frequency"
        model: dict[str, Any] = {"name": L_KINDS[kind], "l": old["l"]}
        if kind == "recursive":
            model = {"name": L_KINDS[kind], "c": old.get("c"), "l": int(old["l"])}
        elif kind == "distinct":
            model["l"] = int(old["l"])
        models.append(model)
    if old.get("t") is not None:
        models.append({"name": "t-closeness", "t": old["t"], "ground": "auto"})
    # Version 1 released numeric QIs as typed ranges: keep them so for existing consumers.
    options: dict[str, Any] = {
        "kmember": {"ranges": "typed", "seeding": old.get("seeding", "random"),
                    "seed": old.get("seed")},
        "mondrian": {"ranges": "typed"},
        "fulldomain": {"ranges": "typed", "as": "view" if old.get("as_view") else "table",
                       "max_suppression": old.get("max_suppression", 0.0)},
        "anatomy": {"seed": old.get("seed")},
    }.get(method, {})  # fmt: skip
    return {
        "version": 2,
        "name": old["name"],
        "source": old["source"],
        "key": old["key"],
        "qi": old["qi"],
        "sensitive": old.get("sensitive", []),
        "method": method,
        "models": models,
        "options": options,
        "hierarchies": old.get("hierarchies", {}),
        "target": old.get("target"),
        "grants": old.get("grants", []),
    }


def v2_to_v1(new: dict[str, Any]) -> dict[str, Any]:
    """Back to the flat form (for downgrade): the first model of each kind."""
    old: dict[str, Any] = {
        "name": new["name"], "source": new["source"], "key": new["key"], "qi": new["qi"],
        "sensitive": new.get("sensitive", []), "algorithm": new["method"],
        "hierarchies": new.get("hierarchies", {}), "target": new.get("target"),
        "grants": new.get("grants", []), "seed": new["options"].get("seed"),
        "seeding": new["options"].get("seeding", "random"),
        "as_view": new["options"].get("as") == "view",
        "max_suppression": new["options"].get("max_suppression", 0.0),
        "k": None, "l": None, "l_kind": "distinct", "c": None, "t": None, "alpha": None,
        "p": None,
    }  # fmt: skip
    for m in new.get("models", []):
        name = m["name"]
        if name == "k-anonymity":
            old["k"] = m["k"]
        elif name.endswith("-l-diversity"):
            old["l"], old["l_kind"], old["c"] = m["l"], name.split("-")[0], m.get("c")
        elif name == "t-closeness":
            old["t"] = m["t"]
        elif name == "alpha-k-anonymity":
            old["alpha"], old["k"] = m["alpha"], m["k"]
        elif name == "p-k-anonymity":
            old["p"], old["k"] = m["p"], m["k"]
    return old


def _convert(convert: Any, want_version: int | None) -> None:
    conn = op.get_bind()
    for rid, spec in conn.execute(sa.text("SELECT id, spec FROM dbanon.release")).fetchall():
        if spec.get("version") == want_version:
            continue
        conn.execute(
            sa.text("UPDATE dbanon.release SET spec = CAST(:spec AS jsonb) WHERE id = :id"),
            {"spec": json.dumps(convert(spec)), "id": rid},
        )


def upgrade() -> None:
    _convert(v1_to_v2, 2)


def downgrade() -> None:
    _convert(v2_to_v1, None)
