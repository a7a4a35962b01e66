"""Privacy models as checks on a relation, each an SQL query over its equivalence classes.

Models are a layer of their own (as in ARX): algorithms produce groupings, models judge released
relations. Every publish runs its model's check on the built release before it becomes visible,
and `dbanon check` runs the same checks on any table or view. Each model also has an in-memory
form over per-class sensitive-value counts (`class_holds`, `holds_in_memory`) for algorithms.
The SQL criterion (`class_test`) also filters: `kept_classes` selects the classes to keep so
that a relation satisfies every model, which live views evaluate at each read.
"""

from __future__ import annotations

import math
from numbers import Real

from dbanon.errors import DbanonError
from dbanon.models.base import CheckResult, ClassTest, Counts, PrivacyModel, Target, audit
from dbanon.models.crossbucket import CrossBucketLDiversity
from dbanon.models.kanonymity import AlphaKAnonymity, KAnonymity, PKAnonymity
from dbanon.models.ldiversity import (
    DistinctLDiversity,
    EntropyLDiversity,
    FrequencyLDiversity,
    RecursiveCLDiversity,
)
from dbanon.models.suppression import kept_classes
from dbanon.models.tcloseness import GROUNDS, TCloseness
from dbanon.models.thetak import ThetaKAnonymity

__all__ = [
    "CheckResult",
    "ClassTest",
    "Counts",
    "PrivacyModel",
    "Target",
    "audit",
    "kept_classes",
    "KAnonymity",
    "AlphaKAnonymity",
    "PKAnonymity",
    "DistinctLDiversity",
    "EntropyLDiversity",
    "RecursiveCLDiversity",
    "FrequencyLDiversity",
    "CrossBucketLDiversity",
    "TCloseness",
    "ThetaKAnonymity",
    "L_KINDS",
    "T_GROUNDS",
    "from_options",
]

L_KINDS = ("distinct", "entropy", "recursive", "frequency", "cross-bucket")
T_GROUNDS = GROUNDS


def _number(option: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise DbanonError(f"--{option} must be a number, got {value!r}")
    return float(value)


def _whole(option: str, value: object, least: int = 1) -> int:
    x = _number(option, value)
    if x != int(x):
        raise DbanonError(f"--{option} must be a whole number, got {value}")
    if x < least:
        raise DbanonError(f"--{option} must be at least {least}, got {value}")
    return int(x)


def _fraction(option: str, value: object) -> float:
    x = _number(option, value)
    if not 0 < x <= 1:
        raise DbanonError(f"--{option} must be in (0, 1], got {value}")
    return x


def from_options(
    *,
    k: int | None = None,
    l: float | None = None,  # noqa: E741
    l_kind: str = "distinct",
    c: float | None = None,
    t: float | None = None,
    alpha: float | None = None,
    p: int | None = None,
    alpha_value: str | None = None,
    t_ground: str = "auto",
    theta: int | None = None,
    sensitive_hierarchy: str | None = None,
    category_level: int | None = None,
    category_width: float | None = None,
    theta_rule: str | None = None,
) -> list[PrivacyModel]:
    """The models that `dbanon check` options name, validated, in a fixed order.

    --k alone is k-anonymity; --alpha and --p add (alpha,k) and (p,k), which need --k; --l with
    --l-kind picks the l-diversity (--c only with recursive); --t is t-closeness, --t-ground its
    ground distance; --theta is (θ,k), its categories from --sensitive-hierarchy (the hierarchy's
    name) at --category-level, or numeric intervals of --category-width, its need_c read by
    --theta-rule (paper, the default, or relaxed). An empty list means no model was named: the
    caller says so.
    """
    models: list[PrivacyModel] = []
    if l_kind not in L_KINDS:
        raise DbanonError(f"--l-kind must be one of {', '.join(L_KINDS)}, got {l_kind!r}")
    if t_ground not in GROUNDS:
        raise DbanonError(f"--t-ground must be one of {', '.join(GROUNDS)}, got {t_ground!r}")
    if k is not None:
        models.append(KAnonymity(_whole("k", k)))
    if alpha is not None:
        if k is None:
            raise DbanonError("--alpha needs --k: (alpha,k)-anonymity is k-anonymity and more")
        models.append(AlphaKAnonymity(_fraction("alpha", alpha), int(k), alpha_value))
    elif alpha_value is not None:
        raise DbanonError("--alpha-value needs --alpha")
    if p is not None:
        if k is None:
            raise DbanonError("--p needs --k: (p,k)-anonymity is k-anonymity and more")
        models.append(PKAnonymity(_whole("p", p), int(k)))
    if l is None:
        if l_kind != "distinct":
            raise DbanonError(f"--l-kind {l_kind} needs --l")
        if c is not None:
            raise DbanonError("--c needs --l and --l-kind recursive")
    elif l_kind == "distinct":
        models.append(DistinctLDiversity(_whole("l", l)))
    elif l_kind == "cross-bucket":
        models.append(CrossBucketLDiversity(_whole("l", l, least=2)))
    elif l_kind == "recursive":
        if c is None:
            raise DbanonError("--l-kind recursive needs --c")
        if _number("c", c) <= 0:
            raise DbanonError(f"--c must be positive, got {c}")
        models.append(RecursiveCLDiversity(float(c), _whole("l", l)))
    else:
        ell = _number("l", l)
        if ell < 1:
            raise DbanonError(f"--l must be at least 1, got {l}")
        models.append(EntropyLDiversity(ell) if l_kind == "entropy" else FrequencyLDiversity(ell))
    if c is not None and l_kind != "recursive":
        raise DbanonError(f"--c only applies to --l-kind recursive, not {l_kind}")
    if t is not None:
        models.append(TCloseness(_fraction("t", t), t_ground))
    if theta is not None:
        if k is None:
            raise DbanonError("--theta needs --k: (θ,k)-anonymity is k-anonymity and more")
        th = _whole("theta", theta, least=2)
        if th > int(k):
            raise DbanonError(
                f"--theta {th} is larger than --k {k}: a class of k rows cannot hold θ groups"
            )
        level = None if category_level is None else _whole("category-level", category_level)
        width = None if category_width is None else _number("category-width", category_width)
        models.append(
            ThetaKAnonymity(th, int(k), sensitive_hierarchy, level, width, theta_rule or "paper")
        )
    else:
        given = {"sensitive-hierarchy": sensitive_hierarchy, "category-level": category_level,
                 "category-width": category_width, "theta-rule": theta_rule}  # fmt: skip
        for flag, value in given.items():
            if value is not None:
                raise DbanonError(f"--{flag} is a parameter of (θ,k)-anonymity: give --theta")
    return models
