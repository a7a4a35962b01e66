"""A release spec from the options a DBA gives `publish` (or a library caller the same
keywords): the promised models from --k/--l/..., validated as `dbanon check` reads them. It sits
above the methods, whose registry says which l-diversity a method promises by default; the spec
itself (dbanon.core.spec) is plain data below them both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dbanon import methods
from dbanon.core.spec import DEFAULT_METHOD, MAX_UNIQUE_SHARE, ReleaseSpec
from dbanon.errors import DbanonError
from dbanon.lifecycle.resolve import k_too_small
from dbanon.models import from_options
from dbanon.models.categories import named_hierarchy
from dbanon.models.specs import to_specs


def release_spec(
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
    if l_kind is None:
        kinds = [p_[: -len("-l-diversity")] for p_ in methods.get(method).promises
                 if p_.endswith("-l-diversity")]  # fmt: skip
        l_kind = kinds[0] if kinds else "distinct"
    if isinstance(k, int) and not isinstance(k, bool) and k < 2:  # before check's "at least 1"
        raise DbanonError(k_too_small(k))
    models = from_options(
        k=k, l=l, l_kind=l_kind, c=c, t=t, t_ground=t_ground, alpha=alpha,
        alpha_value=alpha_value, p=p, theta=theta,
        sensitive_hierarchy=named_hierarchy(sensitive_hierarchies, sensitive),
        category_level=category_level, category_width=category_width, theta_rule=theta_rule,
    )  # fmt: skip
    return ReleaseSpec(
        name=name, source=source, key=key, qi=list(qi), sensitive=list(sensitive),
        method=method, models=to_specs(models), options=dict(options or {}),
        hierarchies=dict(hierarchies or {}), target=target, grants=list(grants),
        keep=list(keep), allow_identifying=list(allow_identifying),
        max_unique_share=(MAX_UNIQUE_SHARE if max_unique_share is None
                          else max_unique_share),
    )  # fmt: skip
