"""What defines a release: the spec a DBA declares and the catalog stores (`dbanon.release.spec`).

It sits below the lifecycle (dbanon.release) and the methods (dbanon.methods), which both read
it; it names no method but the default and looks the registry up only when built from options.

The spec's JSON shape (version 2):
    {"version": 2, "name": "patients_k5", "source": "clinic.patients", "key": "id",
     "qi": ["age", "zip"], "sensitive": ["diagnosis"], "hierarchies": {"zip": "zip"},
     "method": METHOD, "models": [{"name": "k-anonymity", "k": 5}],
     "options": {OPTION: VALUE, ...}, "keep": ["ward"], "allow_identifying": [],
     "max_unique_share": 0.5, "target": "released.patients_k5", "grants": ["analysts"]}
`models` are the promised privacy models (dbanon.models.specs), `options` the method's own
options with every default filled in, so a refresh rebuilds exactly what was published.
`keep` (columns released as they are) and its two guards are common to every method
(dbanon.lifecycle.identifying); a version-2 spec without them, or with the projection methods' older
`options.keep`, loads as before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dbanon.db import catalog
from dbanon.errors import DbanonError

SPEC_VERSION = 2
DEFAULT_METHOD = "kmember"
MAX_UNIQUE_SHARE = 0.5  # a kept column unique for more than this share of rows is refused


def names(value: str | Sequence[str] | None) -> list[str]:
    """A column list as text (`a,b,"c, d"`: the older options.keep), or as a list of names
    (a spec's own, taken as they are), or nothing."""
    if value is None:
        return []
    if isinstance(value, str):
        return catalog.parse_list(value)
    return list(value)


def upgrade(spec: ReleaseSpec) -> None:
    """A spec written when `keep` was an option of the projection methods (options.keep)
    reads as the common field: old stored specs keep loading and refreshing."""
    if "keep" in spec.options:
        options = dict(spec.options)
        spec.keep = list(dict.fromkeys([*names(options.pop("keep")), *names(spec.keep)]))
        spec.options = options
    else:
        spec.keep = names(spec.keep)
    spec.allow_identifying = list(dict.fromkeys(names(spec.allow_identifying)))


@dataclass
class ReleaseSpec:
    """Everything that defines a release; stored in the catalog so `refresh` can rebuild it."""

    name: str
    source: str
    key: str
    qi: list[str]
    sensitive: list[str] = field(default_factory=list)
    method: str = DEFAULT_METHOD
    models: list[dict[str, Any]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    hierarchies: dict[str, str] = field(default_factory=dict)  # column -> hierarchy name
    target: str | None = None
    grants: list[str] = field(default_factory=list)
    # Types of the key, QI and sensitive columns when last published: a refresh refuses a
    # column whose type has changed since (an int QI turned text would generalise differently).
    columns: dict[str, str] = field(default_factory=dict)
    version: int = SPEC_VERSION
    # Columns released as they are (`--keep`), never implied; guarded by
    # dbanon.lifecycle.identifying.
    keep: list[str] = field(default_factory=list)
    allow_identifying: list[str] = field(default_factory=list)
    max_unique_share: float = MAX_UNIQUE_SHARE

    def __post_init__(self) -> None:
        upgrade(self)

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