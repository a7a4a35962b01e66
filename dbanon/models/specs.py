"""Privacy models as data: `{"name": "k-anonymity", "k": 5}`, the form a release spec stores.

A release spec lists the models it promises as such dicts (name + parameters), so a stored spec
says what it promises without any knowledge of CLI options, and a method names the models it can
promise by these names. `option` is the CLI option that asks for each model, for messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from dbanon.errors import DbanonError
from dbanon.models.base import PrivacyModel
from dbanon.models.crossbucket import CrossBucketLDiversity
from dbanon.models.kanonymity import AlphaKAnonymity, KAnonymity, PKAnonymity
from dbanon.models.ldiversity import (
    DistinctLDiversity,
    EntropyLDiversity,
    FrequencyLDiversity,
    RecursiveCLDiversity,
)
from dbanon.models.tcloseness import TCloseness
from dbanon.models.thetak import ThetaKAnonymity

ModelSpec = dict[str, Any]


@dataclass(frozen=True)
class ModelKind:
    """One registered model: its spec name, its class and the CLI option that asks for it."""

    name: str
    cls: type[PrivacyModel]
    option: str  # e.g. "--l"
    summary: str


MODEL_KINDS: dict[str, ModelKind] = {}


def register_model(kind: ModelKind) -> None:
    MODEL_KINDS[kind.name] = kind


for _kind in (
    ModelKind("k-anonymity", KAnonymity, "--k", "every class has at least k rows"),
    ModelKind(
        "distinct-l-diversity", DistinctLDiversity, "--l", "at least l distinct sensitive values"
    ),
    ModelKind("entropy-l-diversity", EntropyLDiversity, "--l", "entropy of every class >= log(l)"),
    ModelKind("recursive-l-diversity", RecursiveCLDiversity, "--l", "r1 < c (r_l + ... + r_m)"),
    ModelKind("frequency-l-diversity", FrequencyLDiversity, "--l", "no sensitive value above 1/l"),
    ModelKind(
        "cross-bucket-l-diversity",
        CrossBucketLDiversity,
        "--l",
        "no sensitive value above 1/l for a class of QIT over its buckets in ST (3.22)",
    ),
    ModelKind("t-closeness", TCloseness, "--t", "EMD to the whole table's distribution <= t"),
    ModelKind(
        "alpha-k-anonymity", AlphaKAnonymity, "--alpha", "no sensitive value above share alpha"
    ),
    ModelKind("p-k-anonymity", PKAnonymity, "--p", "at least p distinct sensitive values"),
    ModelKind(
        "theta-k-anonymity",
        ThetaKAnonymity,
        "--theta",
        "θ categories of the sensitive hierarchy, each with min(⌊k/θ⌋, its values) values "
        "(--theta-rule relaxed: fewer where the relation's classes cannot hold them)",
    ),
):
    register_model(_kind)


def kind_of(model: PrivacyModel) -> ModelKind:
    for kind in MODEL_KINDS.values():
        if type(model) is kind.cls:
            return kind
    raise DbanonError(f"{model.name} is not a registered model")


def to_spec(model: PrivacyModel) -> ModelSpec:
    """The stored form of a model: its kind's name and its dataclass fields."""
    return {"name": kind_of(model).name, **{f.name: getattr(model, f.name) for f in fields(model)}}


def from_spec(spec: Mapping[str, Any]) -> PrivacyModel:
    """A model from its stored form, validated as the CLI validates the same options."""
    from dbanon.models import from_options  # the one place option values are validated

    name = spec.get("name")
    kind = MODEL_KINDS.get(name)  # type: ignore[arg-type]
    if kind is None:
        raise DbanonError(f"unknown privacy model {name!r} (known: {', '.join(MODEL_KINDS)})")
    params = {k: v for k, v in spec.items() if k != "name"}
    allowed = {f.name for f in fields(kind.cls)}
    extra = sorted(set(params) - allowed)
    if extra:
        raise DbanonError(f"model {name} takes {', '.join(sorted(allowed))}, not {extra[0]!r}")
    build = _VALIDATED.get(name)
    if build is None:  # a model registered later validates in its own constructor
        return kind.cls(**params)
    models = build(from_options, params)
    return models[-1]


# How each built-in model's parameters map onto the validated option form.
_VALIDATED: dict[str, Callable[[Callable[..., list[PrivacyModel]], dict], list[PrivacyModel]]] = {
    "k-anonymity": lambda f, p: f(k=p.get("k")),
    "distinct-l-diversity": lambda f, p: f(l=p.get("l"), l_kind="distinct"),
    "entropy-l-diversity": lambda f, p: f(l=p.get("l"), l_kind="entropy"),
    "recursive-l-diversity": lambda f, p: f(l=p.get("l"), l_kind="recursive", c=p.get("c")),
    "frequency-l-diversity": lambda f, p: f(l=p.get("l"), l_kind="frequency"),
    "cross-bucket-l-diversity": lambda f, p: f(l=p.get("l"), l_kind="cross-bucket"),
    "t-closeness": lambda f, p: f(t=p.get("t"), t_ground=p.get("ground", "auto")),
    "alpha-k-anonymity": lambda f, p: f(
        k=p.get("k"), alpha=p.get("alpha"), alpha_value=p.get("value")
    ),
    "p-k-anonymity": lambda f, p: f(k=p.get("k"), p=p.get("p")),
    "theta-k-anonymity": lambda f, p: f(
        k=p.get("k"), theta=p.get("theta"), sensitive_hierarchy=p.get("hierarchy"),
        category_level=p.get("level"), category_width=p.get("width"),
        theta_rule=p.get("rule"),
    ),  # fmt: skip
}


def from_specs(specs: Sequence[Mapping[str, Any]]) -> list[PrivacyModel]:
    return [from_spec(s) for s in specs]


def to_specs(models: Sequence[PrivacyModel]) -> list[ModelSpec]:
    return [to_spec(m) for m in models]
