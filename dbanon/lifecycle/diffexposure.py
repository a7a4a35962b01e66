"""What a granted release's refresh policy leaves open to a consumer who diffs two releases.

The README's attacker keeps every earlier release. Intersecting them is guarded at every run
(dbanon.composition); diffing two of them is not, unless the release is refreshed under the
`sealed` policy: under any other policy one person who joined (or left) between two releases
moves her class's (or bucket's) sensitive values by exactly her value. That is a documented
choice of the default, so a run that makes such a release readable by a role says so, once,
rather than leaving the DBA to find it in docs/diff-attack.md. A release nobody is granted
is read by nobody but its owner; a release without a sensitive column shows no value to read.

Read from the method registry (a method's `refresh_policy` option and its choices), never a
list of method names. Imports only the spec and the method registry.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dbanon import methods
from dbanon.core.spec import ReleaseSpec
from dbanon.errors import quote_name

SAFE_POLICY = "sealed"
PREFIX = "diff exposure:"  # every warning this module makes starts so (the CLI puts it on stderr)


def policy(spec: ReleaseSpec) -> str | None:
    """The refresh policy the release runs under (the method's default when the spec names
    none); None for a method without one."""
    method = methods.get(spec.method)
    try:
        option = method.option("refresh_policy")
    except KeyError:
        return None
    return str(spec.options.get("refresh_policy") or option.default)


def sealable(spec: ReleaseSpec) -> bool:
    """Whether the method offers the sealed policy at all."""
    try:
        option = methods.get(spec.method).option("refresh_policy")
    except KeyError:
        return False
    return SAFE_POLICY in (option.choices or ())


def warning(spec: ReleaseSpec, grants: dict[str, list[str]]) -> str | None:
    """One line when the release is granted to a role, has a sensitive column and is not
    refreshed under `sealed`: what a diffing consumer reads and what closes it; else None."""
    readers = [*grants.get("kept", []), *grants.get("added", [])]
    now = policy(spec)
    if not readers or not spec.sensitive or now == SAFE_POLICY:
        return None
    under = f"the {now} refresh policy" if now else f"{spec.method}'s refresh"
    fix = (
        f"--refresh-policy {SAFE_POLICY} closes it, withholding rows that form no whole group"
        if sealable(spec)
        else f"{spec.method} has no {SAFE_POLICY} policy; do not grant it to such a consumer"
    )
    return (
        f"{PREFIX} release {quote_name(spec.name)} is granted to {', '.join(readers)} under "
        f"{under}: a "
        "consumer who keeps two releases and knows who joined or left between them reads a "
        "single joiner's or leaver's sensitive value off their difference (only their "
        f"intersection is guarded); {fix} (docs/diff-attack.md)"
    )


def with_warning(spec: ReleaseSpec, result: Any) -> Any:
    """The publish result with the warning (if any) added to its summary's warnings."""
    line = warning(spec, result.grants)
    if line is None:
        return result
    return replace(
        result, metrics={**result.metrics, "warnings": [*result.metrics.get("warnings", []), line]}
    )
