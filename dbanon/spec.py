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
(dbanon.identifying); a version-2 spec without them, or with the projection methods' older
`options.keep`, loads as before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dbanon.db import catalog
from dbanon.errors import DbanonError
from dbanon.models import from_options
from dbanon.models.categories import named_hierarchy
from dbanon.models.specs import to_specs

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
    # Columns released as they are (`--keep`), never implied; dbanon.identifying guards them.
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

    @classmethod
    def from_options(
        cls,
        name: str,
        source: str,
        key: str,
        qi: Sequence[str],
        *,
        sensitive: Sequence[str] = (),
        method: str = DEFAULT_METHOD,
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
        theta_rule: str | None = None,
        options: dict[str, Any] | None = None,
        hierarchies: dict[str, str] | None = None,
        target: str | None = None,
        grants: Sequence[str] = (),
        keep: Sequence[str] = (),
        allow_identifying: Sequence[str] = (),
        max_unique_share: float | None = None,
    ) -> ReleaseSpec:
        """A spec from the `publish` options: models from --k/--l/..., as `dbanon check` reads
        them; without --l-kind, the l-diversity the method promises first. The sensitive
        hierarchy (COL=NAME) and category level or width are parameters of the (θ,k) model."""
        from dbanon import methods  # the registry, at call time: the methods sit above specs

        if l_kind is None:
            kinds = [p_[: -len("-l-diversity")] for p_ in methods.get(method).promises
                     if p_.endswith("-l-diversity")]  # fmt: skip
            l_kind = kinds[0] if kinds else "distinct"
        models = from_options(
            k=k, l=l, l_kind=l_kind, c=c, t=t, t_ground=t_ground, alpha=alpha,
            alpha_value=alpha_value, p=p, theta=theta,
            sensitive_hierarchy=named_hierarchy(sensitive_hierarchies, sensitive),
            category_level=category_level, category_width=category_width, theta_rule=theta_rule,
        )  # fmt: skip
        return cls(
            name=name, source=source, key=key, qi=list(qi), sensitive=list(sensitive),
            method=method, models=to_specs(models), options=dict(options or {}),
            hierarchies=dict(hierarchies or {}), target=target, grants=list(grants),
            keep=list(keep), allow_identifying=list(allow_identifying),
            max_unique_share=(MAX_UNIQUE_SHARE if max_unique_share is None
                              else max_unique_share),
        )  # fmt: skip
