"""Privacy models as checks on a relation, each an SQL query over its equivalence classes.

Models are a layer of their own (as in ARX): algorithms produce groupings, models judge released
relations. Every publish runs its model's check on the built release before it becomes visible,
and `dbanon check` runs the same checks on any table or view.
"""

from dbanon.models.base import CheckResult, PrivacyModel, audit
from dbanon.models.kanonymity import KAnonymity
from dbanon.models.ldiversity import DistinctLDiversity

__all__ = ["CheckResult", "PrivacyModel", "audit", "KAnonymity", "DistinctLDiversity"]
